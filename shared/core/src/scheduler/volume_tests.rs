//! What a node costs in the scheduler's choices: its EBS volumes priced
//! into every comparison (`Pool::node_price`), and the NodePool's
//! `flotilla.dev/consolidate-tolerance`. See docs/scheduling.md, "What a
//! node costs".

use super::*;
use crate::catalog::ebs::{self, EbsVolume};
use crate::catalog::{CatalogEntry, InstanceTypeInfo, Offering, UNLIMITED};
use crate::model::{AmiFamily, NodeClass, NodePool, Pod, PodTemplate};
use crate::quantity::Quantity;
use crate::requirements::Requirement;
use crate::resources::Resources;

/// Two arm64 spot types in one zone: two `m6g.medium`s (2 pods each) cost
/// 3.4% less than one `m6g.large` (4 pods) before volumes.
const MEDIUM: f64 = 0.0140;
const LARGE: f64 = 0.0290;

fn catalog() -> Catalog {
    let entry = |name: &str, vcpu: u32, mib: u64, price: f64| CatalogEntry {
        info: InstanceTypeInfo {
            max_network_interfaces: 4,
            ipv4_per_interface: 15,
            ..InstanceTypeInfo::synthetic(name, "arm64", vcpu, mib, 0)
        },
        offerings: vec![Offering {
            zone: "us-west-2a".into(),
            capacity_type: CapacityType::Spot,
            price,
            available: UNLIMITED,
            reservation: None,
        }],
    };
    Catalog {
        region: "us-west-2".into(),
        zones: vec!["us-west-2a".into()],
        entries: vec![
            entry("m6g.large", 2, 8192, LARGE),
            entry("m6g.medium", 1, 4096, MEDIUM),
        ],
        source: "test".into(),
    }
}

fn pods(n: usize) -> Vec<Pod> {
    let q = |s: &str| Quantity::parse(s).unwrap();
    (0..n)
        .map(|i| Pod {
            name: format!("p{i:02}"),
            ..Pod::from(PodTemplate {
                namespace: "default".into(),
                requests: Resources::new()
                    .with("cpu", q("400m"))
                    .with("memory", q("1Gi"))
                    .with("pods", q("1")),
                ..PodTemplate::default()
            })
        })
        .collect()
}

/// A NodePool of spot nodes whose EC2NodeClass has one gp3 root volume of
/// `gib` (None: no node class, AL2023's 20 GiB default), with `tolerance`.
fn state(n: usize, gib: Option<u64>, tolerance: f64) -> ClusterState {
    let mut np = NodePool::new(
        "default",
        Requirements::from_iter_reqs([Requirement::in_values(labels::CAPACITY_TYPE, ["spot"])]),
    );
    np.consolidate_tolerance = tolerance;
    let mut node_classes = vec![];
    if let Some(g) = gib {
        np.node_class = Some("nc".into());
        node_classes.push(NodeClass {
            name: "nc".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: Some(vec![EbsVolume::gp3("/dev/xvda", g)]),
            spec: serde_json::Value::Null,
            template_hash: None,
            status: Default::default(),
        });
    }
    ClusterState {
        pending_pods: pods(n),
        node_pools: vec![np],
        node_classes,
        ..Default::default()
    }
}

fn shapes(p: &Plan) -> Vec<&str> {
    p.node_claims
        .iter()
        .map(|c| c.price.instance_type.as_str())
        .collect()
}

fn plan(s: &ClusterState) -> Plan {
    schedule(s, &catalog(), &SchedulerOptions::default())
}

#[test]
fn root_volumes_make_fewer_larger_nodes_win() {
    // A 1 GiB root barely costs: two mediums per four pods stay cheaper.
    let tiny = plan(&state(8, Some(1), 0.0));
    assert_eq!(shapes(&tiny), ["m6g.medium"; 4], "{:?}", tiny.summary);
    // Karpenter's default 20 GiB gp3 root ($0.0022/h, a sixth of a medium):
    // a large per four pods is now cheaper.
    let default = plan(&state(8, None, 0.0));
    assert_eq!(shapes(&default), ["m6g.large"; 2], "{:?}", default.summary);
    let vol = 20.0 * 0.08 / ebs::HOURS_PER_MONTH;
    assert!(
        (default.node_claims[0].volume_price - vol).abs() < 1e-6,
        "rounded to 1e-6"
    );
    let s = &default.summary;
    assert!((s.hourly_price - 2.0 * LARGE).abs() < 1e-6, "{s:?}");
    assert!((s.volume_hourly_price - 2.0 * vol).abs() < 1e-6, "{s:?}");
    assert!(
        (s.total_hourly_price - 2.0 * (LARGE + vol)).abs() < 1e-6,
        "{s:?}"
    );
    // The plan that won costs less in total than the tiny-volume shape
    // would with 20 GiB roots.
    assert!(s.total_hourly_price < 4.0 * (MEDIUM + vol));
    // Larger volumes only widen the gap.
    assert_eq!(shapes(&plan(&state(8, Some(100), 0.0))), ["m6g.large"; 2]);
}

#[test]
fn consolidate_tolerance_prefers_fewer_nodes_within_it() {
    // 1 GiB roots: one large costs 3.2% more than two mediums.
    let t = |tol: f64| shapes(&plan(&state(4, Some(1), tol))).join(",");
    assert_eq!(t(0.0), "m6g.medium,m6g.medium");
    assert_eq!(t(0.02), "m6g.medium,m6g.medium", "2% is not enough");
    assert_eq!(t(0.05), "m6g.large", "within 5%: fewer nodes");
    assert_eq!(shapes(&plan(&state(8, Some(1), 0.05))), ["m6g.large"; 2]);
}

#[test]
fn same_input_same_prices() {
    let s = state(8, None, 0.05);
    let a = serde_json::to_string(&plan(&s)).unwrap();
    assert_eq!(a, serde_json::to_string(&plan(&s)).unwrap());
    assert!(a.contains("\"volumePrice\""), "{a}");
    assert!(a.contains("\"totalHourlyPrice\""), "{a}");
}

// ---------------------------------------------------------------------------
// Volume topology: every combination of the volumes' OR'd terms is kept
// (Karpenter's `volumetopology.go`), walked like the pod's own OR'd terms.

mod terms {
    use super::super::volumes::{VolumeTerms, MAX_COMBINATIONS};
    use super::*;
    use crate::model::{
        LabelSelector, PersistentVolume, PersistentVolumeClaim, PodAffinityTerm, StorageClass,
        TopologySpreadConstraint, VolumeBindingMode, WhenUnsatisfiable,
    };

    const ZONES: [&str; 3] = ["test-1a", "test-1b", "test-1c"];

    fn on(key: &str, values: &[&str]) -> Requirements {
        Requirements::from_iter_reqs([Requirement::in_values(key, values.iter().copied())])
    }

    fn zone(values: &[&str]) -> Requirements {
        on(labels::ZONE, values)
    }

    fn both(a: Requirements, b: &Requirements) -> Requirements {
        let mut r = a;
        r.add_all(b);
        r
    }

    fn pod_with(terms: Vec<Requirements>, selector: Requirements) -> Pod {
        Pod::from(PodTemplate {
            namespace: "default".into(),
            node_selector: selector,
            required_terms: terms,
            ..PodTemplate::default()
        })
    }

    /// Every alternative: (the pod's required term, the volumes' part).
    fn walk(pod: &Pod, v: &VolumeTerms) -> Vec<(Option<Requirements>, Option<Requirements>)> {
        (0..v.len(pod))
            .map(|i| {
                let (t, vol) = v.at(pod, i);
                (t.cloned(), vol.cloned())
            })
            .collect()
    }

    #[test]
    fn combinations_table() {
        struct Case {
            name: &'static str,
            selector: Requirements,
            pod_terms: Vec<Requirements>,
            volumes: Vec<Vec<Requirements>>,
            want: Vec<(Option<Requirements>, Option<Requirements>)>,
        }
        let (a, b, c) = (zone(&["test-1a"]), zone(&["test-1b"]), zone(&["test-1c"]));
        let size = |s: &str| on(labels::INSTANCE_SIZE, &[s]);
        let cases = [
            Case {
                name: "one term per volume: one alternative per pod term, as before",
                selector: Requirements::new(),
                pod_terms: vec![a.clone(), c.clone()],
                volumes: vec![vec![zone(&["test-1a", "test-1b"])]],
                want: vec![
                    (Some(a.clone()), Some(zone(&["test-1a", "test-1b"]))),
                    (Some(c.clone()), Some(zone(&["test-1a", "test-1b"]))),
                ],
            },
            Case {
                name: "a volume in two zones: both, in its order",
                selector: Requirements::new(),
                pod_terms: vec![],
                volumes: vec![vec![a.clone(), b.clone()]],
                want: vec![(None, Some(a.clone())), (None, Some(b.clone()))],
            },
            Case {
                name: "the node selector prunes",
                selector: c.clone(),
                pod_terms: vec![],
                volumes: vec![vec![a.clone(), c.clone()]],
                want: vec![(None, Some(c.clone()))],
            },
            Case {
                name: "pod terms outermost, then the volume's",
                selector: Requirements::new(),
                pod_terms: vec![zone(&["test-1a", "test-1b"]), c.clone()],
                volumes: vec![vec![a.clone(), b.clone(), c.clone()]],
                want: vec![
                    (Some(zone(&["test-1a", "test-1b"])), Some(a.clone())),
                    (Some(zone(&["test-1a", "test-1b"])), Some(b.clone())),
                    (Some(c.clone()), Some(c.clone())),
                ],
            },
            Case {
                name: "two volumes: disjoint pairs pruned (Karpenter's pruned-overlap case)",
                selector: Requirements::new(),
                pod_terms: vec![],
                volumes: vec![
                    vec![size("no-such-size"), size("large")],
                    vec![
                        both(a.clone(), &size("large")),
                        both(b.clone(), &size("no-such-size")),
                    ],
                ],
                want: vec![
                    (None, Some(both(b.clone(), &size("no-such-size")))),
                    (None, Some(both(a.clone(), &size("large")))),
                ],
            },
            Case {
                name: "two volumes in the same two zones: the pairs in one zone, once each",
                selector: Requirements::new(),
                pod_terms: vec![],
                volumes: vec![vec![a.clone(), b.clone()], vec![a.clone(), b.clone()]],
                want: vec![(None, Some(a.clone())), (None, Some(b.clone()))],
            },
            Case {
                name: "nothing fits a pod term: the first term of each volume, to fail with",
                selector: Requirements::new(),
                pod_terms: vec![c.clone(), a.clone()],
                volumes: vec![vec![a.clone(), b.clone()]],
                want: vec![
                    (Some(c.clone()), Some(a.clone())),
                    (Some(a.clone()), Some(a.clone())),
                ],
            },
            Case {
                name: "terms that only named a local volume's host: nothing",
                selector: Requirements::new(),
                pod_terms: vec![a.clone(), b.clone()],
                volumes: vec![vec![Requirements::new()]],
                want: vec![(Some(a.clone()), None), (Some(b.clone()), None)],
            },
        ];
        for c in cases {
            let pod = pod_with(c.pod_terms, c.selector);
            let v = VolumeTerms::combine(&pod, &c.volumes);
            assert_eq!(walk(&pod, &v), c.want, "{}", c.name);
        }
    }

    #[test]
    fn combinations_are_capped_in_order() {
        // Seven volumes of two terms on keys of their own: 128 combinations.
        let volumes: Vec<Vec<Requirements>> = (0..7)
            .map(|i| {
                let key = format!("example.com/k{i}");
                vec![on(&key, &["x"]), on(&key, &["y"])]
            })
            .collect();
        let pod = pod_with(vec![], Requirements::new());
        let v = VolumeTerms::combine(&pod, &volumes);
        assert_eq!(v.len(&pod), MAX_COMBINATIONS);
        let all = |i: usize| v.at(&pod, i).1.cloned().unwrap_or_default();
        let x = |k: usize| all(0).allows(&format!("example.com/k{k}"), "x");
        assert!((0..7).all(x), "the first: every first term");
        // The first 64 in order: the first volume's first term throughout.
        assert!((0..MAX_COMBINATIONS).all(|i| all(i).allows("example.com/k0", "x")));
        assert!(all(MAX_COMBINATIONS - 1).allows("example.com/k6", "y"));
    }

    #[test]
    fn relaxation_walks_volume_terms_and_spread_domains_ignore_them() {
        let pod = pod_with(vec![zone(&ZONES)], Requirements::new());
        let v = VolumeTerms::combine(&pod, &[vec![zone(&["test-1a"]), zone(&["test-1b"])]]);
        let mut r = Relaxation::default();
        let node = |r: &Relaxation| pod_view::node_requirements(&pod, &v, r);
        assert!(node(&r).allows(labels::ZONE, "test-1a"));
        assert!(!node(&r).allows(labels::ZONE, "test-1b"));
        assert_eq!(r.relax(&pod, &v, false), Some("next volume topology term"));
        assert!(node(&r).allows(labels::ZONE, "test-1b"));
        assert!(!node(&r).allows(labels::ZONE, "test-1a"));
        // Spread domains: the pod's own term, never the volume's zone.
        assert_eq!(pod_view::domain_requirements(&pod, &v, &r), zone(&ZONES));
        assert_eq!(r.relax(&pod, &v, false), None);
    }

    fn zonal_catalog() -> Catalog {
        let entry = |name: &str, vcpu: u32, mib: u64, price: f64| CatalogEntry {
            info: InstanceTypeInfo {
                max_network_interfaces: 4,
                ipv4_per_interface: 15,
                ..InstanceTypeInfo::synthetic(name, "amd64", vcpu, mib, 0)
            },
            offerings: ZONES
                .iter()
                .map(|z| Offering {
                    zone: (*z).into(),
                    capacity_type: CapacityType::OnDemand,
                    price,
                    available: UNLIMITED,
                    reservation: None,
                })
                .collect(),
        };
        Catalog {
            region: "test-1".into(),
            zones: ZONES.iter().map(|z| z.to_string()).collect(),
            entries: vec![
                entry("c5.large", 2, 4096, 0.085),
                entry("m5.large", 2, 8192, 0.096),
            ],
            source: "test".into(),
        }
    }

    fn app_pod(name: &str, claims: &[&str]) -> Pod {
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut p = Pod {
            name: name.into(),
            ..Pod::from(PodTemplate {
                namespace: "default".into(),
                requests: Resources::new()
                    .with("cpu", q("100m"))
                    .with("memory", q("128Mi"))
                    .with("pods", q("1")),
                ..PodTemplate::default()
            })
        };
        p.labels.insert("app".into(), "db".into());
        p.pvc_names = claims.iter().map(|c| c.to_string()).collect();
        p
    }

    fn app_selector() -> LabelSelector {
        LabelSelector {
            match_labels: [("app".to_string(), "db".to_string())].into(),
            match_expressions: vec![],
        }
    }

    /// `p` with a zone spread (`maxSkew` 1, `DoNotSchedule`) over the
    /// `app: db` pods.
    fn zone_spread(mut p: Pod) -> Pod {
        p.topology_spread = vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: app_selector(),
            min_domains: None,
            node_affinity_policy: crate::model::InclusionPolicy::Honor,
            node_taints_policy: crate::model::InclusionPolicy::Ignore,
        }];
        p
    }

    fn claim(name: &str, class: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            namespace: "default".into(),
            name: name.into(),
            storage_class: Some(class.into()),
            volume_name: volume.map(str::to_string),
            deleting: false,
            lost: false,
        }
    }

    fn class(name: &str, terms: Vec<Requirements>) -> StorageClass {
        StorageClass {
            name: name.into(),
            provisioner: "ebs.csi.aws.com".into(),
            binding_mode: VolumeBindingMode::WaitForFirstConsumer,
            allowed_topologies: terms,
            is_default: false,
        }
    }

    /// The zone and instance type of each pod's NodeClaim, by pod name
    /// (`None`: unschedulable).
    fn placed(p: &Plan, pods: &[Pod]) -> Vec<Option<(String, String)>> {
        pods.iter()
            .map(|pod| {
                let c = p.node_claims.iter().find(|c| c.pods.contains(&pod.key()))?;
                let zone = match c.zones.as_slice() {
                    [z] => z.clone(),
                    _ => format!("{:?}", c.zones),
                };
                Some((zone, c.price.instance_type.clone()))
            })
            .collect()
    }

    /// Pods whose volumes have OR'd terms, each scheduled as Karpenter
    /// would; each row fails with one term per volume picked up front.
    #[test]
    fn pods_use_any_combination() {
        let two_zones = || vec![zone(&["test-1a"]), zone(&["test-1b"])];
        let itype = |t: &str| on(labels::INSTANCE_TYPE, &[t]);
        struct Case {
            name: &'static str,
            state: ClusterState,
            want: Vec<Option<(&'static str, &'static str)>>,
        }
        let base = |pods: Vec<Pod>| ClusterState {
            pending_pods: pods,
            node_pools: vec![NodePool::new("default", Requirements::new())],
            ..Default::default()
        };
        let anti = |mut p: Pod| {
            p.pod_anti_affinity = vec![PodAffinityTerm {
                label_selector: app_selector(),
                namespaces: vec![],
                all_namespaces: false,
                topology_key: labels::ZONE.into(),
            }];
            p
        };
        let cases = vec![
            Case {
                name: "PVs in two zones, zone anti-affinity: one pod a zone",
                state: ClusterState {
                    pvcs: vec![claim("d0", "", Some("pv0")), claim("d1", "", Some("pv1"))],
                    pvs: ["pv0", "pv1"]
                        .iter()
                        .map(|n| PersistentVolume {
                            name: (*n).into(),
                            node_affinity: two_zones(),
                            local_or_host_path: false,
                            deleting: false,
                        })
                        .collect(),
                    ..base(vec![
                        anti(app_pod("p0", &["d0"])),
                        anti(app_pod("p1", &["d1"])),
                    ])
                },
                want: vec![Some(("test-1a", "c5.large")), Some(("test-1b", "c5.large"))],
            },
            Case {
                name: "allowedTopologies in two zones, zone spread: the second zone",
                state: ClusterState {
                    pvcs: vec![claim("d0", "two", None), claim("d1", "two", None)],
                    storage_classes: vec![class("two", two_zones())],
                    ..base(vec![
                        zone_spread(app_pod("p0", &["d0"])),
                        zone_spread(app_pod("p1", &["d1"])),
                    ])
                },
                want: vec![Some(("test-1a", "c5.large")), Some(("test-1b", "c5.large"))],
            },
            Case {
                name: "two volumes: the pair left after pruning",
                state: ClusterState {
                    pvcs: vec![claim("d0", "types", None), claim("d1", "zoned", None)],
                    storage_classes: vec![
                        class("types", vec![itype("no-such-type"), itype("m5.large")]),
                        class(
                            "zoned",
                            vec![
                                both(zone(&["test-1c"]), &itype("m5.large")),
                                both(zone(&["test-1a"]), &itype("no-such-type")),
                            ],
                        ),
                    ],
                    ..base(vec![app_pod("p0", &["d0", "d1"])])
                },
                want: vec![Some(("test-1c", "m5.large"))],
            },
        ];
        for c in cases {
            let p = schedule(&c.state, &zonal_catalog(), &SchedulerOptions::default());
            let got = placed(&p, &c.state.pending_pods);
            let want: Vec<Option<(String, String)>> = (c.want.iter())
                .map(|w| w.map(|(z, t)| (z.to_string(), t.to_string())))
                .collect();
            assert_eq!(got, want, "{}: {:?}", c.name, p.unschedulable);
        }
    }

    /// A zone spread over pods some of which are pinned to a zone (bound
    /// volumes, a node selector): the pods that may go anywhere take the
    /// zones the pinned ones leave (see `zone_shares`), so every pod with a
    /// valid place gets one.
    #[test]
    fn pinned_pods_keep_their_zones_under_a_spread() {
        let bound = |pod: &str, z: &str| {
            let volume = PersistentVolume {
                name: format!("pv-{pod}"),
                node_affinity: vec![zone(&[z])],
                local_or_host_path: false,
                deleting: false,
            };
            (
                claim(&format!("d-{pod}"), "gp3", Some(&volume.name)),
                volume,
            )
        };
        let selected = |name: &str, zone_: &str| {
            let mut p = zone_spread(app_pod(name, &[]));
            p.node_selector = zone(&[zone_]);
            p
        };
        struct Case {
            name: &'static str,
            /// (pod, the zone of its bound volume; `None`: no volume)
            pods: Vec<(&'static str, Option<&'static str>)>,
            /// Pods pinned by a node selector instead.
            selected: Vec<(&'static str, &'static str)>,
            want: Vec<Option<&'static str>>,
        }
        let cases = vec![
            Case {
                name: "volumes in two zones, two free pods: the third zone",
                pods: vec![
                    ("p0", Some("test-1a")),
                    ("p1", Some("test-1a")),
                    ("p2", Some("test-1b")),
                    ("p3", Some("test-1b")),
                    ("p4", None),
                    ("p5", None),
                ],
                selected: vec![],
                want: vec![
                    Some("test-1a"),
                    Some("test-1a"),
                    Some("test-1b"),
                    Some("test-1b"),
                    Some("test-1c"),
                    Some("test-1c"),
                ],
            },
            Case {
                name: "volumes in all zones, unevenly",
                pods: vec![
                    ("p0", Some("test-1a")),
                    ("p1", Some("test-1a")),
                    ("p2", Some("test-1a")),
                    ("p3", Some("test-1b")),
                    ("p4", None),
                    ("p5", None),
                    ("p6", None),
                ],
                selected: vec![],
                want: vec![
                    Some("test-1a"),
                    Some("test-1a"),
                    Some("test-1a"),
                    Some("test-1b"),
                    Some("test-1c"),
                    Some("test-1b"),
                    Some("test-1c"),
                ],
            },
            Case {
                name: "pinned by node selectors",
                pods: vec![("p0", None), ("p1", None)],
                selected: vec![("p2", "test-1a"), ("p3", "test-1a")],
                want: vec![
                    Some("test-1b"),
                    Some("test-1c"),
                    Some("test-1a"),
                    Some("test-1a"),
                ],
            },
            Case {
                name: "no valid place for the third pinned pod: the free pod still goes",
                pods: vec![
                    ("p0", Some("test-1a")),
                    ("p1", Some("test-1a")),
                    ("p2", Some("test-1a")),
                    ("p3", None),
                    ("p4", None),
                ],
                selected: vec![],
                want: vec![
                    Some("test-1a"),
                    Some("test-1a"),
                    None,
                    Some("test-1b"),
                    Some("test-1c"),
                ],
            },
        ];
        for c in cases {
            let mut state = ClusterState {
                node_pools: vec![NodePool::new("default", Requirements::new())],
                storage_classes: vec![class("gp3", vec![])],
                ..Default::default()
            };
            for &(name, volume) in &c.pods {
                let Some(z) = volume else {
                    state.pending_pods.push(zone_spread(app_pod(name, &[])));
                    continue;
                };
                let (pvc, pv) = bound(name, z);
                state
                    .pending_pods
                    .push(zone_spread(app_pod(name, &[&pvc.name])));
                state.pvcs.push(pvc);
                state.pvs.push(pv);
            }
            for &(name, z) in &c.selected {
                state.pending_pods.push(selected(name, z));
            }
            let p = schedule(&state, &zonal_catalog(), &SchedulerOptions::default());
            let got: Vec<Option<String>> = (placed(&p, &state.pending_pods).into_iter())
                .map(|z| z.map(|(zone, _)| zone))
                .collect();
            let want: Vec<Option<String>> =
                (c.want.iter()).map(|z| z.map(str::to_string)).collect();
            assert_eq!(got, want, "{}: {:?}", c.name, p.unschedulable);
        }
    }
}
