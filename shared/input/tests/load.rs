//! End-to-end tests of `flotilla_input::load` on YAML and JSON fixtures.

use flotilla_core::model::{
    AmiFamily, ClusterState, InclusionPolicy, NodePoolSource, PriceAdjustment, TaintEffect,
    Threshold, TolerationOperator, VolumeBindingMode, WhenUnsatisfiable,
};
use flotilla_core::{Operator, Quantity};
use flotilla_input::{
    load, InputError, Source, MAX_EXPANDED_CLAIMS, MAX_EXPANDED_PODS, MAX_SOURCE_BYTES,
};

fn load_str(name: &str, text: &str) -> Result<ClusterState, InputError> {
    load(&[Source {
        name,
        bytes: text.as_bytes(),
    }])
}

fn ok(name: &str, text: &str) -> ClusterState {
    match load_str(name, text) {
        Ok(s) => s,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn err(name: &str, text: &str) -> InputError {
    match load_str(name, text) {
        Ok(_) => panic!("expected an error for {name}"),
        Err(e) => e,
    }
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn fixtures() -> ClusterState {
    let w = include_str!("fixtures/workloads.yaml");
    let c = include_str!("fixtures/cluster.yaml");
    let k = include_str!("fixtures/karpenter.yaml");
    load(&[
        Source {
            name: "workloads.yaml",
            bytes: w.as_bytes(),
        },
        Source {
            name: "cluster.yaml",
            bytes: c.as_bytes(),
        },
        Source {
            name: "karpenter.yaml",
            bytes: k.as_bytes(),
        },
    ])
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn pod_fields() {
    let s = fixtures();
    let p = s.pending_pods.iter().find(|p| p.name == "single").unwrap();
    assert_eq!(p.namespace, "team-a");
    assert_eq!(p.priority, 1000);
    assert_eq!(p.requests.cpu(), q("500m"));
    assert_eq!(p.requests.memory(), q("1Gi"));
    assert_eq!(
        p.requests.get("nvidia.com/gpu"),
        q("1"),
        "limits-only GPU counts as a request"
    );
    assert_eq!(p.requests.pods(), q("1"));
    // nodeSelector, with the EBS zone alias normalised
    let z = p.node_selector.get("topology.kubernetes.io/zone").unwrap();
    assert_eq!(z.operator(), Operator::In);
    assert!(z.has("us-west-2a"));
    assert!(p
        .node_selector
        .get("kubernetes.io/arch")
        .unwrap()
        .has("arm64"));
    assert_eq!(p.required_terms.len(), 2);
    assert!(p.required_terms[0]
        .get("karpenter.sh/capacity-type")
        .unwrap()
        .has("spot"));
    assert!(p.required_terms[1]
        .get("kubernetes.io/hostname")
        .unwrap()
        .has("node-1"));
    assert_eq!(p.preferred_terms.len(), 1);
    assert_eq!(p.preferred_terms[0].weight, 50);
    assert_eq!(p.pod_anti_affinity.len(), 1);
    assert!(p.pod_anti_affinity[0].all_namespaces);
    assert_eq!(
        p.pod_anti_affinity[0].topology_key,
        "kubernetes.io/hostname"
    );
    assert_eq!(p.preferred_pod_affinity.len(), 1);
    assert_eq!(
        p.preferred_pod_affinity[0].term.namespaces,
        vec!["other".to_string()]
    );
    assert_eq!(p.tolerations.len(), 2);
    assert_eq!(p.tolerations[0].effect, Some(TaintEffect::NoSchedule));
    assert_eq!(p.tolerations[1].operator, TolerationOperator::Exists);
    assert!(p.tolerations[1].key.is_empty());
    let t = &p.topology_spread[0];
    assert_eq!(t.max_skew, 1);
    assert_eq!(t.when_unsatisfiable, WhenUnsatisfiable::DoNotSchedule);
    assert_eq!(t.min_domains, Some(3));
    assert_eq!(t.node_affinity_policy, InclusionPolicy::Honor);
    assert_eq!(t.node_taints_policy, InclusionPolicy::Ignore);
    assert_eq!(
        t.label_selector.match_labels.get("app").map(String::as_str),
        Some("single")
    );
    assert_eq!(
        p.host_ports,
        vec![("TCP".to_string(), 8080), ("UDP".to_string(), 53)]
    );
    assert_eq!(
        p.pvc_names,
        vec!["data-claim".to_string(), "single-scratch".to_string()]
    );
    let eph = s.pvcs.iter().find(|c| c.name == "single-scratch").unwrap();
    assert_eq!(eph.storage_class.as_deref(), Some("gp3"));
    assert!(p.node_name.is_none());
    // the finished pod is dropped; the bound one sits on its node
    assert!(!s
        .pending_pods
        .iter()
        .any(|p| p.name == "done" || p.name == "bound"));
    let n1 = s.nodes.iter().find(|n| n.name == "node-1").unwrap();
    assert_eq!(n1.pods.len(), 1);
    assert_eq!(n1.pods[0].name, "bound");
    assert_eq!(n1.pods[0].requests.cpu(), q("1"));
}

#[test]
fn workload_expansion_names_and_counts() {
    let s = fixtures();
    let names = |prefix: &str| -> Vec<String> {
        s.pending_pods
            .iter()
            .filter(|p| p.owner.as_deref().is_some_and(|o| o.starts_with(prefix)))
            .map(|p| p.name.clone())
            .collect()
    };
    let web = names("Deployment/shop/web");
    assert_eq!(web.len(), 3);
    let hash = &web[0]["web-".len().."web-".len() + 10];
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        web,
        (0..3)
            .map(|i| format!("web-{hash}-{i}"))
            .collect::<Vec<_>>()
    );
    let p = s.pending_pods.iter().find(|p| p.name == web[0]).unwrap();
    assert_eq!(p.namespace, "shop");
    assert_eq!(p.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(p.requests.cpu(), q("250m"));
    assert_eq!(names("ReplicaSet/default/rs"), vec!["rs-0", "rs-1"]);
    assert_eq!(names("StatefulSet/data/db"), vec!["db-0", "db-1"]);
    assert_eq!(
        names("Job/default/batch"),
        vec!["batch-0", "batch-1"],
        "parallelism capped by completions"
    );
    // StatefulSet PVCs
    let db1 = s.pending_pods.iter().find(|p| p.name == "db-1").unwrap();
    assert_eq!(db1.pvc_names, vec!["pgdata-db-1".to_string()]);
    let pvc = s.pvcs.iter().find(|c| c.name == "pgdata-db-1").unwrap();
    assert_eq!(pvc.namespace, "data");
    assert_eq!(pvc.storage_class.as_deref(), Some("gp3"));
    assert!(pvc.volume_name.is_none());
    // DaemonSet
    assert_eq!(s.daemon_sets.len(), 1);
    let ds = &s.daemon_sets[0];
    assert_eq!(
        (ds.namespace.as_str(), ds.name.as_str()),
        ("kube-system", "agent")
    );
    assert_eq!(ds.pod.requests.memory(), q("128Mi"));
    assert_eq!(ds.pod.tolerations.len(), 1);
    // 1 pod + 3 + 2 + 2 + 2
    assert_eq!(s.pending_pods.len(), 10);
}

#[test]
fn deployment_hash_is_stable() {
    let y = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  selector: {}\n  template:\n    spec: {containers: [{name: c}]}\n";
    let a = ok("a.yaml", y);
    let b = ok("b.yaml", y);
    assert_eq!(a.pending_pods.len(), 1, "replicas default to 1");
    assert_eq!(a.pending_pods[0].name, b.pending_pods[0].name);
}

#[test]
fn unknown_kind_warns() {
    let s = fixtures();
    assert!(
        s.warnings
            .iter()
            .any(|w| w == "workloads.yaml doc 11: skipping unsupported kind Service default/foo"),
        "{:?}",
        s.warnings
    );
}

#[test]
fn cluster_objects() {
    let s = fixtures();
    let n1 = s.nodes.iter().find(|n| n.name == "node-1").unwrap();
    assert!(n1.unschedulable);
    assert_eq!(n1.allocatable.cpu(), q("3920m"));
    assert_eq!(n1.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(n1.nodepool(), Some("default"));
    let n2 = s.nodes.iter().find(|n| n.name == "node-2").unwrap();
    assert_eq!(n2.allocatable.memory(), q("8Gi"), "falls back to capacity");
    let sc = &s.storage_classes[0];
    assert_eq!(sc.binding_mode, VolumeBindingMode::WaitForFirstConsumer);
    assert!(sc.is_default);
    assert_eq!(sc.provisioner, "ebs.csi.aws.com");
    assert!(sc.allowed_topologies[0]
        .get("topology.kubernetes.io/zone")
        .unwrap()
        .has("us-west-2b"));
    let pvc = s.pvcs.iter().find(|c| c.name == "data-claim").unwrap();
    assert_eq!(pvc.volume_name.as_deref(), Some("pv-1"));
    let pv = &s.pvs[0];
    assert!(pv.node_affinity[0]
        .get("topology.kubernetes.io/zone")
        .unwrap()
        .has("us-west-2a"));
}

#[test]
fn node_pools() {
    let s = fixtures();
    let np = s.node_pools.iter().find(|p| p.name == "default").unwrap();
    assert_eq!(np.source, NodePoolSource::NodePool);
    assert_eq!(np.weight, 10);
    assert!(np.requirements.get("team").unwrap().has("platform"));
    assert!(np
        .requirements
        .get("karpenter.sh/nodepool")
        .unwrap()
        .has("default"));
    let ct = np.requirements.get("karpenter.sh/capacity-type").unwrap();
    assert!(ct.has("on-demand") && !ct.has("spot"), "on-demand default");
    assert!(np
        .requirements
        .get("karpenter.k8s.aws/instance-generation")
        .unwrap()
        .has("6"));
    assert_eq!(np.node_class.as_deref(), Some("plain"));
    assert_eq!(
        np.kubelet.max_pods,
        Some(110),
        "kubelet from the EC2NodeClass"
    );
    assert_eq!(np.kubelet.system_reserved.memory(), q("500Mi"));
    assert_eq!(np.taints.len(), 1);
    assert_eq!(np.startup_taints[0].effect, TaintEffect::NoExecute);
    assert_eq!(np.limits.as_ref().unwrap().cpu(), Some(q("1000")));
    assert_eq!(
        np.disruption.consolidation_policy.as_deref(),
        Some("WhenEmpty")
    );
    assert_eq!(np.disruption.consolidate_after_seconds, Some(90));
    assert_eq!(np.disruption.expire_after_seconds, Some(720 * 3600));
    assert_eq!(
        np.annotations.get("example.com/owner").map(String::as_str),
        Some("me")
    );

    let spot = s.node_pools.iter().find(|p| p.name == "spot").unwrap();
    let ct = spot.requirements.get("karpenter.sh/capacity-type").unwrap();
    assert!(ct.has("spot") && !ct.has("on-demand"));
    assert_eq!(spot.kubelet.max_pods, Some(58));
    assert_eq!(spot.kubelet.pods_per_core, Some(4));
    assert_eq!(spot.kubelet.system_reserved.cpu(), q("100m"));
    assert_eq!(spot.kubelet.kube_reserved.cpu(), q("200m"));
    assert_eq!(
        spot.kubelet.eviction_hard.get("memory.available"),
        Some(&Threshold::Percent(5.0))
    );
    assert_eq!(
        spot.kubelet.eviction_hard.get("nodefs.available"),
        Some(&Threshold::Quantity(q("500Mi")))
    );
    assert_eq!(
        spot.kubelet.eviction_max_pod_grace_period.as_deref(),
        Some("60")
    );
    assert_eq!(spot.kubelet.cluster_dns, vec!["10.100.0.10".to_string()]);
    assert_eq!(spot.disruption.expire_after_seconds, None, "Never");
    assert_eq!(spot.limits, None);
}

#[test]
fn provisioner_conversion() {
    let s = fixtures();
    let p = s.node_pools.iter().find(|p| p.name == "legacy").unwrap();
    assert_eq!(p.source, NodePoolSource::Provisioner);
    assert_eq!(p.weight, 5);
    let ct = p.requirements.get("karpenter.sh/capacity-type").unwrap();
    assert!(
        ct.has("on-demand") && !ct.has("spot"),
        "capacity-type defaults to on-demand"
    );
    assert!(p
        .requirements
        .get("karpenter.sh/provisioner-name")
        .unwrap()
        .has("legacy"));
    assert!(p.requirements.get("billing-team").unwrap().has("my-team"));
    assert_eq!(
        p.disruption.consolidation_policy.as_deref(),
        Some("WhenEmpty")
    );
    assert_eq!(p.disruption.consolidate_after_seconds, Some(30));
    assert_eq!(p.disruption.expire_after_seconds, Some(2_592_000));
    assert_eq!(p.kubelet.max_pods, Some(20));
    assert_eq!(p.kubelet.pods_per_core, Some(2));
    assert_eq!(p.kubelet.container_runtime.as_deref(), Some("containerd"));
    assert_eq!(p.kubelet.kube_reserved.get("ephemeral-storage"), q("3Gi"));
    assert_eq!(
        p.kubelet.eviction_soft.get("memory.available"),
        Some(&Threshold::Quantity(q("500Mi")))
    );
    assert_eq!(
        p.kubelet
            .eviction_soft_grace_period
            .get("nodefs.available")
            .map(String::as_str),
        Some("1m30s")
    );
    assert_eq!(
        p.kubelet.eviction_max_pod_grace_period.as_deref(),
        Some("3m")
    );
    assert_eq!(p.limits.as_ref().unwrap().memory(), Some(q("1000Gi")));
    assert_eq!(p.node_class.as_deref(), Some("default"));

    let c = s
        .node_pools
        .iter()
        .find(|p| p.name == "consolidating")
        .unwrap();
    assert_eq!(
        c.disruption.consolidation_policy.as_deref(),
        Some("WhenEmptyOrUnderutilized")
    );
    let ct = c.requirements.get("karpenter.sh/capacity-type").unwrap();
    assert!(ct.has("spot") && ct.has("on-demand"));
    assert_eq!(c.node_class, None);
}

#[test]
fn provisioner_ttl_and_consolidation_are_exclusive() {
    let e = err(
        "p.yaml",
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  ttlSecondsAfterEmpty: 30\n  consolidation: {enabled: true}\n",
    );
    assert!(e.to_string().contains("mutually exclusive"), "{e}");
    assert_eq!(e.object.as_deref(), Some("Provisioner p"));
}

#[test]
fn node_classes() {
    let s = fixtures();
    let d = s.node_classes.iter().find(|c| c.name == "default").unwrap();
    assert_eq!(d.kind, "EC2NodeClass");
    assert_eq!(d.ami_family, AmiFamily::Bottlerocket);
    assert_eq!(
        d.root_volume_size,
        Some(q("100Gi")),
        "Bottlerocket root is /dev/xvdb"
    );
    assert_eq!(d.spec["role"], "KarpenterNodeRole");
    let p = s.node_classes.iter().find(|c| c.name == "plain").unwrap();
    assert_eq!(p.ami_family, AmiFamily::AL2023);
    assert_eq!(p.root_volume_size, Some(q("50Gi")));
    let l = s.node_classes.iter().find(|c| c.name == "legacy").unwrap();
    assert_eq!(l.kind, "AWSNodeTemplate");
    assert_eq!(l.ami_family, AmiFamily::AL2);
    assert_eq!(l.root_volume_size, None);
}

#[test]
fn node_class_volumes_are_read_for_pricing() {
    use flotilla_core::catalog::ebs::VolumeType;
    let s = fixtures();
    let d = s.node_classes.iter().find(|c| c.name == "default").unwrap();
    let v = d.volumes.as_ref().unwrap();
    let got: Vec<(u64, VolumeType)> = v.iter().map(|v| (v.size_gib, v.volume_type)).collect();
    assert_eq!(got, [(4, VolumeType::Gp3), (100, VolumeType::Gp3)]);
    let l = s.node_classes.iter().find(|c| c.name == "legacy").unwrap();
    assert_eq!(l.volumes, None, "no mappings: the family's defaults");
    let nc = |ebs: &str| {
        format!("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: x}}\nspec:\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n    ebs: {ebs}\n")
    };
    let one = |ebs: &str| {
        ok("nc.yaml", &nc(ebs)).node_classes[0]
            .volumes
            .clone()
            .unwrap()[0]
            .clone()
    };
    let v = one("{volumeSize: 1500Mi, volumeType: io2, iops: 64000}");
    assert_eq!(
        (v.size_gib, v.volume_type, v.iops),
        (2, VolumeType::Io2, Some(64000))
    );
    let v = one("{volumeSize: 30, throughput: 500}");
    assert_eq!(
        (v.size_gib, v.volume_type, v.throughput),
        (30, VolumeType::Gp3, Some(500))
    );
    assert_eq!(one("{encrypted: true}").size_gib, 20);
    // Errors name the object and the field.
    for (ebs, field) in [
        (
            "{volumeType: gp9}",
            "spec.blockDeviceMappings[0].ebs.volumeType",
        ),
        ("{iops: -1}", "spec.blockDeviceMappings[0].ebs.iops"),
        (
            "{throughput: -5}",
            "spec.blockDeviceMappings[0].ebs.throughput",
        ),
        (
            "{volumeSize: 0}",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        (
            "{volumeSize: -1Gi}",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        (
            "{volumeSize: lots}",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
        (
            "{volumeSize: 8Ei}",
            "spec.blockDeviceMappings[0].ebs.volumeSize",
        ),
    ] {
        let e = err("nc.yaml", &nc(ebs));
        assert_eq!(e.path.as_deref(), Some(field), "{ebs}: {e}");
        assert_eq!(e.object.as_deref(), Some("EC2NodeClass x"), "{e}");
    }
    // An absurd number of GiB saturates instead of overflowing.
    let v = one("{volumeSize: 18446744073709551615, volumeType: sc1}");
    assert!(v.size_gib > 1 << 20, "{v:?}");
}

#[test]
fn consolidate_tolerance_annotation() {
    let np = |v: &str| {
        format!("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: p\n  annotations: {{flotilla.dev/consolidate-tolerance: \"{v}\"}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n")
    };
    assert_eq!(
        ok("p.yaml", &np("5%")).node_pools[0].consolidate_tolerance,
        0.05
    );
    assert_eq!(
        ok("p.yaml", &np("0%")).node_pools[0].consolidate_tolerance,
        0.0
    );
    for bad in ["5", "-1%", "150%", "lots"] {
        let e = err("p.yaml", &np(bad));
        assert_eq!(
            e.path.as_deref(),
            Some("metadata.annotations[flotilla.dev/consolidate-tolerance]"),
            "{bad}: {e}"
        );
    }
    assert_eq!(fixtures().node_pools[0].consolidate_tolerance, 0.0);
}

#[test]
fn node_class_wrong_type_is_an_error() {
    let e = err(
        "nc.yaml",
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: x}\nspec:\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n    rootVolume: maybe\n",
    );
    assert_eq!(
        e.path.as_deref(),
        Some("spec.blockDeviceMappings[0].rootVolume"),
        "{e}"
    );
}

#[test]
fn overlays_and_veneer() {
    let s = fixtures();
    let d = s.overlays.iter().find(|o| o.name == "discount").unwrap();
    assert_eq!(d.weight, 10);
    assert_eq!(d.price_adjustment, Some(PriceAdjustment::Percent(-10.0)));
    assert_eq!(d.capacity.get("hugepages-2Mi"), q("100Mi"));
    let f = s.overlays.iter().find(|o| o.name == "fixed").unwrap();
    assert_eq!(f.price, Some(0.123));
    let v1 = s
        .overlays
        .iter()
        .find(|o| o.name == "default/preference.1")
        .unwrap();
    assert_eq!(v1.weight, 1);
    assert_eq!(v1.price_adjustment, Some(PriceAdjustment::Percent(-50.0)));
    assert!(v1
        .requirements
        .get("kubernetes.io/arch")
        .unwrap()
        .has("arm64"));
    assert!(v1
        .requirements
        .get("karpenter.sh/nodepool")
        .unwrap()
        .has("default"));
    let v2 = s
        .overlays
        .iter()
        .find(|o| o.name == "default/preference.2")
        .unwrap();
    assert_eq!(v2.weight, 2);
    assert_eq!(v2.price_adjustment, Some(PriceAdjustment::Absolute(0.01)));
    assert!(v2
        .requirements
        .get("karpenter.k8s.aws/instance-family")
        .unwrap()
        .has("m7g"));
    assert_eq!(v2.requirements.len(), 3);
}

#[test]
fn malformed_veneer_annotation() {
    for bad in [
        "kubernetes.io/arch=arm64",
        "adjust=-50%",
        "kubernetes.io/arch adjust=-50%",
        "a=b adjust=cheap",
    ] {
        let y = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: np\n  annotations:\n    veneer.io/preference.1: \"{bad}\"\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n"
        );
        let e = err("np.yaml", &y);
        let m = e.to_string();
        assert!(
            m.contains("NodePool np") && m.contains("veneer.io/preference.1"),
            "{m}"
        );
    }
}

#[test]
fn overlay_price_adjustment_forms() {
    for (s, want) in [
        ("-50%", PriceAdjustment::Percent(-50.0)),
        ("+10%", PriceAdjustment::Percent(10.0)),
        ("-0.01", PriceAdjustment::Absolute(-0.01)),
        ("+0.5", PriceAdjustment::Absolute(0.5)),
    ] {
        let y = format!("apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: o}}\nspec:\n  priceAdjustment: \"{s}\"\n");
        assert_eq!(ok("o.yaml", &y).overlays[0].price_adjustment, Some(want));
    }
    let e = err(
        "o.yaml",
        "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: o}\nspec:\n  priceAdjustment: \"lots\"\n",
    );
    assert_eq!(e.path.as_deref(), Some("spec.priceAdjustment"));
}

#[test]
fn typo_in_nodepool_is_an_error_naming_the_field() {
    let y = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    spec:\n      requirments: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";
    let e = err("np.yaml", y);
    let m = e.to_string();
    assert!(m.contains("requirments"), "{m}");
    assert!(
        m.starts_with("np.yaml doc 1 (NodePool np) at spec.template.spec"),
        "{m}"
    );
}

#[test]
fn bad_quantity_names_file_object_and_field() {
    let y = "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec: {containers: [{name: c}]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  selector: {}\n  template:\n    spec:\n      containers:\n      - name: c\n        resources: {requests: {cpu: lots}}\n";
    let e = err("deploy.yaml", y);
    let m = e.to_string();
    assert_eq!(e.file, "deploy.yaml");
    assert_eq!(e.document, Some(2));
    assert_eq!(e.object.as_deref(), Some("Deployment shop/web"));
    assert_eq!(
        e.path.as_deref(),
        Some("spec.template.spec.containers[0].resources.requests.cpu")
    );
    assert!(m.contains("deploy.yaml doc 2 (Deployment shop/web) at spec.template.spec.containers[0].resources.requests.cpu"), "{m}");
    assert!(m.contains("lots"), "{m}");
}

#[test]
fn huge_quantities_are_errors() {
    for v in ["\"1e400\"", "1e400", "\"99999999999999999999999Ei\""] {
        let y = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    resources: {{requests: {{memory: {v}}}}}\n");
        let e = err("p.yaml", &y);
        assert!(
            e.path
                .as_deref()
                .is_some_and(|p| p.starts_with("spec.containers[0].resources.requests")),
            "{v}: {e}"
        );
    }
    let j = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":1e400}}}]}}"#;
    let e = err("p.json", j);
    assert!(e.to_string().contains("p.json"), "{e}");
}

#[test]
fn invalid_labels_are_errors() {
    for bad in ["\"a\\nb\"", "\"a\\\"b\"", "\"$(reboot)\""] {
        let y = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: np}}\nspec:\n  template:\n    metadata:\n      labels: {{team: {bad}}}\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n"
        );
        let e = err("np.yaml", &y);
        assert_eq!(e.object.as_deref(), Some("NodePool np"));
        assert_eq!(
            e.path.as_deref(),
            Some("spec.template.metadata.labels.team"),
            "{e}"
        );
    }
    // pod labels and node selectors too
    let e = err(
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: \"$(id)\"}}\nspec: {containers: [{name: c}]}\n",
    );
    assert_eq!(e.path.as_deref(), Some("metadata.labels.app"));
    let e = err(
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelector: {team: \"a b\"}\n  containers: [{name: c}]\n",
    );
    assert_eq!(e.path.as_deref(), Some("spec.nodeSelector.team"));
    // restricted domain
    let e = err(
        "np.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    metadata:\n      labels: {karpenter.sh/custom: x}\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    assert!(e.to_string().contains("reserves"), "{e}");
    // invalid requirement operator
    let e = err(
        "np.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec:\n  template:\n    spec:\n      requirements: [{key: team, operator: Like, values: [a]}]\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    assert_eq!(
        e.path.as_deref(),
        Some("spec.template.spec.requirements[0].operator")
    );
}

fn pod_with(spec: &str) -> flotilla_core::model::Pod {
    let y = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}");
    ok("p.yaml", &y).pending_pods.remove(0)
}

#[test]
fn init_container_max_rule() {
    let p = pod_with(
        "  initContainers:\n  - {name: i1, resources: {requests: {cpu: \"2\", memory: 100Mi}}}\n  - {name: i2, resources: {requests: {cpu: 500m, memory: 3Gi}}}\n  containers:\n  - {name: a, resources: {requests: {cpu: \"1\", memory: 1Gi}}}\n  - {name: b, resources: {requests: {cpu: 500m, memory: 1Gi}}}\n",
    );
    assert_eq!(p.requests.cpu(), q("2"));
    assert_eq!(p.requests.memory(), q("3Gi"));
}

#[test]
fn sidecar_rule() {
    // A restartable init container adds to the app containers and to the
    // init containers after it.
    let p = pod_with(
        "  initContainers:\n  - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 500m, memory: 1Gi}}}\n  - {name: init, resources: {requests: {cpu: \"2\", memory: 100Mi}}}\n  containers:\n  - {name: a, resources: {requests: {cpu: \"1\", memory: 1Gi}}}\n",
    );
    assert_eq!(p.requests.cpu(), q("2500m"), "init 2 + sidecar 0.5");
    assert_eq!(p.requests.memory(), q("2Gi"), "app 1Gi + sidecar 1Gi");
}

#[test]
fn overhead_and_limits_as_requests() {
    let p = pod_with(
        "  overhead: {cpu: 250m, memory: 120Mi}\n  containers:\n  - name: a\n    resources:\n      requests: {cpu: \"1\"}\n      limits: {cpu: \"2\", memory: 2Gi, nvidia.com/gpu: \"1\"}\n",
    );
    assert_eq!(p.requests.cpu(), q("1250m"), "request wins over limit");
    assert_eq!(p.requests.memory(), q("2Gi") + q("120Mi"));
    assert_eq!(p.requests.get("nvidia.com/gpu"), q("1"));
    assert_eq!(p.requests.pods(), q("1"));
}

#[test]
fn lists_recursive() {
    let y = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec: {containers: [{name: c}]}\n- apiVersion: v1\n  kind: List\n  items:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: b}\n    spec: {containers: [{name: c, resources: {requests: {cpu: nope}}}]}\n";
    let e = err("list.yaml", y);
    assert_eq!(
        e.path.as_deref(),
        Some("items[1].items[0].spec.containers[0].resources.requests.cpu")
    );
    assert_eq!(e.object.as_deref(), Some("Pod default/b"));
    let ok_list = y.replace("nope", "100m");
    let s = ok("list.yaml", &ok_list);
    assert_eq!(s.pending_pods.len(), 2);
}

#[test]
fn kubectl_json() {
    let j = r#"{
  "apiVersion": "v1",
  "items": [
    {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"},
                   "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "1", "controller": true}]},
      "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
      "status": {"phase": "Pending"}
    },
    {
      "apiVersion": "v1",
      "kind": "Node",
      "metadata": {"name": "ip-10-0-0-1", "labels": {"kubernetes.io/arch": "amd64"}},
      "spec": {},
      "status": {"allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}}
    }
  ],
  "kind": "List",
  "metadata": {"resourceVersion": ""}
}"#;
    let s = ok("dump.json", j);
    assert_eq!(s.pending_pods.len(), 1);
    assert_eq!(
        s.pending_pods[0].owner.as_deref(),
        Some("ReplicaSet/default/web-abc")
    );
    assert_eq!(s.nodes[0].allocatable.pods(), q("29"));
    let bad = j.replace("\"100m\"", "\"x\"");
    let e = err("dump.json", &bad);
    assert_eq!(
        e.path.as_deref(),
        Some("items[0].spec.containers[0].resources.requests.cpu")
    );
}

#[test]
fn capacity_reservations() {
    let j = r#"{"CapacityReservations": [{
        "CapacityReservationId": "cr-123", "OwnerId": "111122223333", "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-east-1a", "Tenancy": "default",
        "TotalInstanceCount": 4, "AvailableInstanceCount": 2, "State": "active",
        "InstanceMatchCriteria": "targeted", "EndDate": "2026-12-01T00:00:00Z",
        "ReservationType": "capacity-block", "Tags": [{"Key": "team", "Value": "ml"}]
    }]}"#;
    let s = ok("cr.json", j);
    let r = &s.capacity_reservations[0];
    assert_eq!(r.id, "cr-123");
    assert_eq!(r.instance_type, "p5.48xlarge");
    assert_eq!(r.total_instance_count, 4);
    assert_eq!(r.available_instance_count, 2);
    assert_eq!(
        r.reservation_type,
        flotilla_core::model::ReservationType::CapacityBlock
    );
    assert_eq!(r.platform, "Linux/UNIX");
    assert_eq!(r.end_date.as_deref(), Some("2026-12-01T00:00:00Z"));
    assert_eq!(r.tags.get("team").map(String::as_str), Some("ml"));
    let e = err(
        "cr.json",
        r#"{"CapacityReservations": [{"CapacityReservationId": 5}]}"#,
    );
    assert_eq!(
        e.path.as_deref(),
        Some("CapacityReservations[0].CapacityReservationId"),
        "{e}"
    );
}

#[test]
fn capacity_reservation_selector_terms() {
    let nc = |terms: &str| {
        format!("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  capacityReservationSelectorTerms: {terms}\n")
    };
    let s = ok(
        "nc.yaml",
        &nc("[{tags: {application: foobar}, ownerID: '111122223333'}, {id: cr-56fac701cc1951b03}]"),
    );
    let terms = flotilla_core::reservations::selector_terms(&s.node_classes[0]).unwrap();
    assert_eq!(terms.len(), 2);
    assert_eq!(terms[0].owner_id.as_deref(), Some("111122223333"));
    assert_eq!(terms[1].id.as_deref(), Some("cr-56fac701cc1951b03"));
    let e = err("nc.yaml", &nc("[{id: cr-1}, {idd: cr-2}]"));
    assert_eq!(
        e.path.as_deref(),
        Some("spec.capacityReservationSelectorTerms[1]"),
        "{e}"
    );
    let e = err("nc.yaml", &nc("[{ownerID: '1'}]"));
    assert!(e.to_string().contains("`id` or `tags`"), "{e}");
}

#[test]
fn replica_limits() {
    let dep = |n: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: big}}\nspec:\n  replicas: {n}\n  selector: {{}}\n  template:\n    spec: {{containers: [{{name: c}}]}}\n")
    };
    let e = err("big.yaml", &dep(&(MAX_EXPANDED_PODS + 1).to_string()));
    assert_eq!(e.object.as_deref(), Some("Deployment default/big"));
    assert_eq!(e.path.as_deref(), Some("spec.replicas"));
    let e = err("big.yaml", &dep("-1"));
    assert_eq!(e.path.as_deref(), Some("spec.replicas"));
    let e = err("big.yaml", &dep("99999999999"));
    assert_eq!(e.path.as_deref(), Some("spec.replicas"), "{e}");
    // the limit is on the sum
    let half = dep(&(MAX_EXPANDED_PODS / 2 + 1).to_string());
    let two = format!("{half}---\n{}", half.replace("name: big", "name: big2"));
    let e = err("big.yaml", &two);
    assert_eq!(e.object.as_deref(), Some("Deployment default/big2"));
}

#[test]
fn volume_claim_templates_are_capped() {
    // A 1 KB StatefulSet must not demand a million PersistentVolumeClaims.
    let sts = |replicas: usize, templates: usize| {
        let t: Vec<String> = (0..templates)
            .map(|i| {
                format!("{{metadata: {{name: d{i}}}, spec: {{accessModes: [ReadWriteOnce]}}}}")
            })
            .collect();
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: db}}\nspec:\n  replicas: {replicas}\n  selector: {{}}\n  serviceName: db\n  volumeClaimTemplates: [{}]\n  template:\n    spec: {{containers: [{{name: c}}]}}\n",
            t.join(", ")
        )
    };
    let e = err("sts.yaml", &sts(100_000, 40));
    assert_eq!(e.object.as_deref(), Some("StatefulSet default/db"), "{e}");
    assert_eq!(e.path.as_deref(), Some("spec.volumeClaimTemplates"), "{e}");
    assert!(
        e.to_string().contains(&MAX_EXPANDED_CLAIMS.to_string()),
        "{e}"
    );
    let s = ok("sts.yaml", &sts(3, 2));
    assert_eq!(s.pvcs.len(), 6);
    assert_eq!(s.pending_pods[0].pvc_names, ["d0-db-0", "d1-db-0"]);
}

#[test]
fn hostile_quantities_are_values_or_errors() {
    // Was a divide by zero in the quantity parser.
    let pod = |cpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n")
    };
    let tiny = format!("0.{}1Ki", "0".repeat(127));
    let s = ok("p.yaml", &pod(&tiny));
    assert_eq!(s.pending_pods[0].requests.get("cpu"), q("1m"));
    let e = err("p.yaml", &pod(&format!("1{}", "0".repeat(400))));
    assert!(e.to_string().contains("too large"), "{e}");
}

#[test]
fn instance_type_network_limits_saturate() {
    // ENIs × IPs overflowed u32 on a user-supplied InstanceTypes document.
    let j = r#"{"InstanceTypes": [{
        "InstanceType": "x9.huge",
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "VCpuInfo": {"DefaultVCpus": 4294967295},
        "MemoryInfo": {"SizeInMiB": 18446744073709551615},
        "NetworkInfo": {"MaximumNetworkInterfaces": 4294967295, "Ipv4AddressesPerInterface": 4294967295,
                        "NetworkCards": [{"BaselineBandwidthInGbps": 1e308, "MaximumNetworkInterfaces": 99999999999}]},
        "SupportedUsageClasses": ["on-demand", "spot"]
    }]}"#;
    let s = ok("types.json", j);
    let t = s.instance_types.expect("instance types");
    assert_eq!(t[0].eni_limited_pods(), u32::MAX);
    let alloc = flotilla_core::allocatable::compute(&t[0], &Default::default(), None, 0.075);
    assert!(alloc.allocatable.get("pods") > q("1"));
    flotilla_core::catalog::Catalog::from_infos("us-west-2", t).expect("catalog");
}

#[test]
fn billion_laughs() {
    let y = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\nkind: Pod\n";
    let e = err("lol.yaml", y);
    assert!(e.to_string().contains("alias"), "{e}");
}

#[test]
fn deep_nesting() {
    let n = 100_000;
    let y = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let e = err("deep.yaml", &format!("kind: Pod\nx: {y}\n"));
    assert!(e.to_string().contains("nested"), "{e}");
    let e = err("deep.json", &y);
    assert!(e.to_string().contains("recursion limit"), "{e}");
    let y = format!("{}1", "- ".repeat(n));
    assert!(load_str("deep2.yaml", &y).is_err());
    let y = format!("kind: Pod\nx: {}1{}", "{a: ".repeat(n), "}".repeat(n));
    assert!(load_str("deep3.yaml", &y).is_err());
}

#[test]
fn invalid_utf8_and_oversize() {
    let e = load(&[Source {
        name: "bin.yaml",
        bytes: b"kind: Pod\nmetadata: {name: \xff\xfe}\n",
    }])
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("bin.yaml: file is not valid UTF-8"),
        "{e}"
    );
    assert!(e.to_string().contains("line 2"), "{e}");
    let big = vec![b' '; MAX_SOURCE_BYTES + 1];
    let e = load(&[Source {
        name: "big.yaml",
        bytes: &big,
    }])
    .unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
}

#[test]
fn empty_documents_and_files() {
    let s = ok("e.yaml", "---\n# nothing\n---\n\n---\n{}\n");
    assert!(s.pending_pods.is_empty() && s.warnings.is_empty());
    let s = ok("e.yaml", "");
    assert!(s.pending_pods.is_empty());
    let e = err("e.yaml", "just a string\n");
    assert!(e.to_string().contains("not a mapping"), "{e}");
    let e = err("e.yaml", "metadata: {name: x}\n");
    assert!(e.to_string().contains("no kind"), "{e}");
}

#[test]
fn bound_pod_without_node_warns() {
    let s = ok(
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeName: gone\n  containers: [{name: c}]\n",
    );
    assert!(s.pending_pods.is_empty());
    assert!(
        s.warnings.iter().any(|w| w.contains("gone")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn replica_set_owned_by_listed_deployment_is_skipped() {
    let y = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  selector: {}\n  template:\n    spec: {containers: [{name: c}]}\n---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-abc\n  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: \"1\", controller: true}]\nspec:\n  replicas: 2\n  selector: {}\n  template:\n    spec: {containers: [{name: c}]}\n";
    let s = ok("d.yaml", y);
    assert_eq!(s.pending_pods.len(), 2);
    assert!(s.warnings.iter().any(|w| w.contains("ReplicaSet")));
}

#[test]
fn namespace_selector_with_labels_warns() {
    let p = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: x}}\nspec:\n  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchLabels: {app: x}}\n        namespaceSelector: {matchLabels: {team: a}}\n        topologyKey: topology.kubernetes.io/zone\n  containers: [{name: c}]\n";
    let s = ok("p.yaml", p);
    assert!(!s.pending_pods[0].pod_affinity[0].all_namespaces);
    assert!(
        s.warnings.iter().any(|w| w.contains("namespaceSelector")),
        "{:?}",
        s.warnings
    );
}

/// `namespaceSelector` with labels resolved from the `Namespace` objects:
/// the listed namespaces plus those it matches (none: no namespace).
#[test]
fn namespace_selector_resolves_namespace_objects() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: a}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team-a2, labels: {team: a}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team-b, labels: {team: b}}\n---\n";
    let pod = |sel: &str, listed: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: {{app: x}}}}\nspec:\n  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {{matchLabels: {{app: x}}}}\n        namespaceSelector: {sel}\n        namespaces: {listed}\n        topologyKey: kubernetes.io/hostname\n  containers: [{{name: c}}]\n")
    };
    // (namespaceSelector, namespaces, resolved namespaces)
    let cases: [(&str, &str, &[&str]); 5] = [
        ("{matchLabels: {team: a}}", "[]", &["team-a", "team-a2"]),
        (
            "{matchLabels: {team: b}}",
            "[default]",
            &["default", "team-b"],
        ),
        (
            "{matchExpressions: [{key: team, operator: NotIn, values: [a]}]}",
            "[]",
            &["team-b"],
        ),
        (
            "{matchLabels: {kubernetes.io/metadata.name: team-b}}",
            "[]",
            &["team-b"],
        ),
        ("{matchLabels: {team: c}}", "[]", &[""]),
    ];
    for (sel, listed, want) in cases {
        let s = ok("p.yaml", &format!("{ns}{}", pod(sel, listed)));
        let term = &s.pending_pods[0].pod_anti_affinity[0];
        assert!(!term.all_namespaces, "{sel}");
        assert_eq!(term.namespaces, want, "{sel}");
        assert!(
            !s.warnings.iter().any(|w| w.contains("namespaceSelector")),
            "{sel}: {:?}",
            s.warnings
        );
        assert!(
            !s.warnings.iter().any(|w| w.contains("Namespace")),
            "{sel}: {:?}",
            s.warnings
        );
    }
}

#[test]
fn duplicates_keep_the_last_definition() {
    let np = |w: u32| {
        format!("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: np}}\nspec:\n  weight: {w}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n")
    };
    let s = ok("np.yaml", &format!("{}---\n{}", np(1), np(2)));
    assert_eq!(s.node_pools.len(), 1);
    assert_eq!(s.node_pools[0].weight, 2);
    assert!(
        s.warnings.iter().any(|w| w.contains("NodePool np")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn priority_class_global_default_and_daemonset_pods() {
    let y = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: d}\nvalue: 7\nglobalDefault: true\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: ds-x\n  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: \"1\", controller: true}]\nspec: {containers: [{name: c}]}\n";
    let s = ok("p.yaml", y);
    assert_eq!(
        s.pending_pods.len(),
        1,
        "pending DaemonSet pods are not provisioned for"
    );
    assert_eq!(s.pending_pods[0].priority, 7);
}

#[test]
fn selectorless_terms() {
    let p = pod_with("  topologySpreadConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - topologyKey: kubernetes.io/hostname\n  containers: [{name: c}]\n");
    assert!(p.topology_spread.is_empty());
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("app".to_string(), "x".to_string());
    assert!(!p.pod_anti_affinity[0].label_selector.matches(&labels));
}

#[test]
fn mangled_inputs_never_panic() {
    let fixtures = [
        include_str!("fixtures/workloads.yaml"),
        include_str!("fixtures/cluster.yaml"),
        include_str!("fixtures/karpenter.yaml"),
    ];
    let replacements: [&[u8]; 8] = [b"[", b"{", b"-1", b"\"", b"*a", b": ", b"\n  ", b"1e400"];
    for f in fixtures {
        let bytes = f.as_bytes();
        for cut in (0..bytes.len()).step_by(13) {
            let _ = load(&[Source {
                name: "cut.yaml",
                bytes: &bytes[..cut],
            }]);
            let mut m = bytes.to_vec();
            let r = replacements[cut % replacements.len()];
            let end = (cut + r.len()).min(m.len());
            m.splice(cut..end, r.iter().copied());
            let _ = load(&[Source {
                name: "mangled.yaml",
                bytes: &m,
            }]);
        }
    }
}

#[test]
fn gated_pods_are_skipped() {
    let s = ok(
        "p.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  schedulingGates: [{name: example.com/wait}]\n  containers: [{name: c}]\n",
    );
    assert!(s.pending_pods.is_empty());
    assert!(s.warnings.iter().any(|w| w.contains("scheduling gates")));
}

#[test]
fn describe_instance_types() {
    let j = r#"{"InstanceTypes": [{
        "InstanceType": "m5.large",
        "CurrentGeneration": true,
        "Hypervisor": "nitro",
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
        "VCpuInfo": {"DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 8192},
        "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                        "NetworkPerformance": "Up to 10 Gigabit",
                        "NetworkCards": [{"BaselineBandwidthInGbps": 0.75}]},
        "SupportedUsageClasses": ["on-demand", "spot"]
    }]}"#;
    let s = ok("types.json", j);
    let t = s.instance_types.expect("instance types");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].name, "m5.large");
    assert_eq!(t[0].vcpu, 2);
    assert!(ok("p.yaml", "").instance_types.is_none());
    let bad = j.replace("\"DefaultVCpus\": 2", "\"DefaultVCpus\": \"two\"");
    let e = err("types.json", &bad);
    let m = e.to_string();
    assert!(m.starts_with("types.json doc 1: "), "{m}");
    assert!(m.contains("InstanceTypes[0].VCpuInfo.DefaultVCpus"), "{m}");
}

/// Inputs the fuzzer (`fuzz/`, target `documents`) kept: each loads and
/// plans without a panic (this one was a slow unit under the sanitizer).
#[test]
fn fuzz_findings_load_and_plan() {
    let found = [(
        "slow-nodepools.yaml",
        include_str!("fixtures/fuzz/slow-nodepools.yaml"),
    )];
    let catalog = match flotilla_core::catalog::Catalog::embedded("us-west-2") {
        Ok(c) => c,
        Err(e) => panic!("embedded catalog: {e}"),
    };
    for (name, text) in found {
        if let Ok(state) = load_str(name, text) {
            let plan = flotilla_core::scheduler::schedule(&state, &catalog, &Default::default());
            assert!(serde_json::to_vec(&plan).is_ok(), "{name}");
        }
    }
}

/// `kubectl get deploy,pods -o yaml`: a Deployment given with its pods is
/// not counted twice, a pod given twice is one pod, and a pending pod that
/// is also bound is the bound one.
#[test]
fn workloads_given_with_their_pods_are_not_counted_twice() {
    let owned = |name: &str, node: Option<&str>| {
        let node = node
            .map(|n| format!("  nodeName: {n}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{app: web, pod-template-hash: 7d9f8c}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9f8c, uid: u, controller: true}}]\nspec:\n{node}  containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]\n"
        )
    };
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 4\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, resources: {requests: {cpu: 500m}}}]}\n";
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '4', memory: 8Gi, pods: '20'}}\n";
    let docs = [
        deploy.to_string(),
        node.to_string(),
        owned("web-7d9f8c-a", Some("n1")),
        owned("web-7d9f8c-b", Some("n1")),
        owned("web-7d9f8c-c", None),
        owned("web-7d9f8c-c", None),
    ]
    .join("---\n");
    let s = ok("all.yaml", &docs);
    // 4 replicas: 2 running, 1 pending given, 1 left to expand.
    let pending: Vec<String> = s.pending_pods.iter().map(|p| p.key()).collect();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(pending.contains(&"default/web-7d9f8c-c".to_string()));
    assert!(s
        .warnings
        .iter()
        .any(|w| w.contains("defined more than once")));
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("Deployment/default/web: 3 of its replicas")),
        "{:?}",
        s.warnings
    );
    assert_eq!(s.nodes[0].pods.len(), 2);
}
