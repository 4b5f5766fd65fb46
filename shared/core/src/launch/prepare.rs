//! From a scheduled NodeClaim to what the launch stage sends EC2: the
//! launch templates to ensure and the [`FleetInput`] that
//! [`build_fleet_request`] / [`next_attempt`](super::next_attempt) consume.
//!
//! Rules (`instance-selection-deep-dive.txt`, phases 2 and 3):
//! - candidates are every catalog offering of the NodeClaim's instance types
//!   in its zones with an allowed capacity type, minus offerings in the ICE
//!   cache, offerings in zones without a subnet of the EC2NodeClass, and
//!   types with no resolved AMI for their architecture and accelerator
//!   (`MapToInstanceTypes`; NVIDIA / Neuron types need the alias's
//!   accelerated AMI, see [`AmiVariant`]);
//! - each candidate carries its price and its NodeOverlay-adjusted price,
//!   computed by the scheduler's own overlay code
//!   ([`overlay_adjusted_price`]) over the same labels (type, NodePool
//!   labels, zone, capacity type), so fleet priorities order types exactly
//!   as the plan did; `overlay` is set when any overlay priced a candidate;
//! - the capacity type of the first call is reserved when reserved
//!   offerings remain, else spot when the claim allows spot and spot
//!   offerings remain, else on-demand; the other allowed types stay in the
//!   input for [`next_attempt`](super::next_attempt)'s fallback;
//! - one launch template per AMI (architecture, variant) actually used, plus one per
//!   (AMI, reservation) for reserved offerings; names are content hashes;
//! - subnets are those of the NodeClaim's zones only; tags are
//!   [`instance_tags`] (NodePool, EC2NodeClass, cluster, NodeClaim and the
//!   EC2NodeClass `spec.tags`).
//!
//! User data carries the NodeClaim's labels (plus `karpenter.sh/nodepool`
//! and `karpenter.k8s.aws/ec2nodeclass`), taints and startup taints, all
//! validated by [`generate_user_data`]. Labels in the `kubernetes.io` /
//! `k8s.io` namespaces that the kubelet may not set on itself (it refuses to
//! start) are validated too but left out, as is `kubernetes.io/hostname`.
//! The capacity-type label is only passed when the NodeClaim fixes it: the
//! same template serves the on-demand fallback.

use std::collections::{BTreeMap, BTreeSet};

use super::fleet::{
    build_fleet_request, Ami, CandidateOffering, FleetInput, MinValuesFloor, TemplateKey,
};
use super::ice::UnavailableOffering;
use super::launch_template::{
    instance_tags, launch_template_config, template_name, LaunchTemplateConfig, LaunchTemplateInput,
};
use super::nodeclass::{AmiVariant, ResolvedNodeClass};
use super::userdata::{generate_user_data, ClusterInfo, UserDataInput};
use super::{fnv1a64, LaunchError};
use crate::catalog::{CapacityType, Catalog, ReservationRef};
use crate::labels;
use crate::model::{KubeletConfig, NodeClass, NodeOverlay, NodePool};
use crate::plan::NodeClaimPlan;
use crate::requirements::{Requirement, Requirements};
use crate::scheduler::{overlay_adjusted_price, overlays_by_weight};

/// Everything [`prepare_launch`] needs for one NodeClaim.
#[derive(Debug, Clone)]
pub struct PrepareInput<'a> {
    pub claim: &'a NodeClaimPlan,
    /// The claim's NodePool.
    pub node_pool: &'a NodePool,
    /// The NodePool's EC2NodeClass (AMI family, raw spec for the template).
    pub node_class: &'a NodeClass,
    /// The same EC2NodeClass resolved against EC2 ([`super::resolve`]).
    pub resolved: &'a ResolvedNodeClass,
    pub catalog: &'a Catalog,
    pub overlays: &'a [NodeOverlay],
    /// The ICE cache: offerings known to be out of capacity.
    pub unavailable: &'a [UnavailableOffering],
    pub cluster: &'a ClusterInfo,
    /// The effective kubelet configuration (EC2NodeClass `spec.kubelet`,
    /// else the NodePool's).
    pub kubelet: &'a KubeletConfig,
    /// For tags and the client token (normally `cluster.name`).
    pub cluster_name: &'a str,
    /// 0 for the first CreateFleet call.
    pub attempt: u32,
    pub target_count: u32,
}

/// What the launch stage does for the NodeClaim: ensure the templates (by
/// name; creating an existing name is success), then CreateFleet with
/// `build_fleet_request(&fleet)`.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedLaunch {
    /// (template name, configuration), sorted by name, unique.
    pub launch_templates: Vec<(String, LaunchTemplateConfig)>,
    pub fleet: FleetInput,
    /// Instance types of the claim left out, with the reason (not in the
    /// catalog, no AMI for the architecture); for logs.
    pub skipped: Vec<String>,
}

/// Well-known labels the kubelet may set on its own node
/// (`k8s.io/kubelet/apis.IsKubeletLabel`).
const KUBELET_LABELS: &[&str] = &[
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

fn in_domain(prefix: &str, domain: &str) -> bool {
    prefix == domain
        || prefix
            .strip_suffix(domain)
            .is_some_and(|p| p.ends_with('.'))
}

/// Whether the kubelet accepts `key` in `--node-labels` (hostname excluded:
/// the kubelet sets it itself).
pub fn kubelet_may_set(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return true;
    };
    if !in_domain(prefix, "kubernetes.io") && !in_domain(prefix, "k8s.io") {
        return true;
    }
    KUBELET_LABELS.contains(&key)
        || in_domain(prefix, "kubelet.kubernetes.io")
        || in_domain(prefix, "node.kubernetes.io")
}

/// The instance profile for the EC2NodeClass: `spec.instanceProfile`, or
/// for `spec.role` a deterministic name `<cluster>_<16 hex>` (hash of role
/// and EC2NodeClass) that the service creates for the role (IAM is not part
/// of the `Ec2` port).
pub fn instance_profile_name(cluster: &str, resolved: &ResolvedNodeClass) -> String {
    if let Some(p) = &resolved.spec.instance_profile {
        return p.clone();
    }
    let role = resolved.spec.role.as_deref().unwrap_or_default();
    let key = format!("{}:{role}/{}", role.len(), resolved.name);
    format!("{cluster}_{:016x}", fnv1a64(key.as_bytes()))
}

fn claim_err(claim: &NodeClaimPlan, reason: impl Into<String>) -> LaunchError {
    LaunchError::NodeClaim {
        node_claim: claim.name.clone(),
        reason: reason.into(),
    }
}

/// The NodeClaim's `minValues` with each candidate type's values of the
/// key (its catalog labels; the zone and capacity type are read from the
/// offerings by the fleet builder).
fn min_values_floors(
    claim: &NodeClaimPlan,
    offerings: &[CandidateOffering],
    catalog: &Catalog,
) -> Vec<MinValuesFloor> {
    let types: BTreeSet<&str> = offerings.iter().map(|o| o.instance_type.as_str()).collect();
    claim
        .requirements
        .iter()
        .filter_map(|r| r.min_values.map(|m| (r.key.as_str(), m)))
        .map(|(key, min)| MinValuesFloor {
            key: key.to_string(),
            min,
            values: types
                .iter()
                .filter_map(|ty| {
                    let info = &catalog.get(ty)?.info;
                    let v = info.label_values().into_iter().find(|(k, _)| *k == key)?.1;
                    Some((ty.to_string(), vec![v]))
                })
                .collect(),
        })
        .collect()
}

fn claim_requirements(claim: &NodeClaimPlan) -> Result<Requirements, LaunchError> {
    let mut reqs = Requirements::new();
    for r in &claim.requirements {
        let req = Requirement::from_parts(&r.key, r.operator, r.values.clone())
            .map_err(|e| claim_err(claim, format!("requirement {}: {e}", r.key)))?;
        reqs.add(req);
    }
    Ok(reqs)
}

fn reservation_type_str(r: &ReservationRef) -> &'static str {
    match r.reservation_type {
        crate::model::ReservationType::Default => "default",
        crate::model::ReservationType::CapacityBlock => "capacity-block",
    }
}

/// Labels for the kubelet: the claim's, the NodePool and EC2NodeClass
/// labels, every one validated, minus those the kubelet may not set.
fn node_labels(input: &PrepareInput) -> Result<BTreeMap<String, String>, LaunchError> {
    let mut all = input.claim.labels.clone();
    all.entry(labels::NODEPOOL.to_string())
        .or_insert_with(|| input.node_pool.name.clone());
    all.entry(labels::NODECLASS.to_string())
        .or_insert_with(|| input.node_class.name.clone());
    for (k, v) in &all {
        for r in [labels::validate_key(k), labels::validate_value(v)] {
            r.map_err(|e| LaunchError::InvalidLabel {
                key: k.clone(),
                reason: e.to_string(),
            })?;
        }
    }
    all.retain(|k, _| kubelet_may_set(k));
    Ok(all)
}

/// Turns a scheduled NodeClaim plus EC2 facts into launch templates and the
/// first CreateFleet input (see the module documentation for the rules).
pub fn prepare_launch(input: &PrepareInput) -> Result<PreparedLaunch, LaunchError> {
    let claim = input.claim;
    let np = input.node_pool;
    let resolved = input.resolved;
    if input.target_count == 0 {
        return Err(LaunchError::ZeroTargetCapacity);
    }
    if claim.node_pool != np.name {
        return Err(claim_err(
            claim,
            format!("belongs to NodePool {}, not {}", claim.node_pool, np.name),
        ));
    }
    if resolved.name != input.node_class.name {
        return Err(claim_err(
            claim,
            format!(
                "resolved EC2NodeClass {} is not the NodeClass {}",
                resolved.name, input.node_class.name
            ),
        ));
    }

    // User data first: an invalid label fails the claim before anything else.
    let user_data = generate_user_data(&UserDataInput {
        ami_family: input.node_class.ami_family.clone(),
        cluster: input.cluster.clone(),
        labels: node_labels(input)?,
        taints: claim.taints.clone(),
        startup_taints: claim.startup_taints.clone(),
        kubelet: input.kubelet.clone(),
        user_data: resolved.spec.user_data.clone(),
    })?;

    let subnets = resolved.fleet_subnets(&claim.zones);
    let subnet_zones: BTreeSet<&str> = subnets.iter().map(|s| s.zone.as_str()).collect();
    if subnets.is_empty() {
        return Err(LaunchError::NoSubnetInOfferingZones {
            offering_zones: claim.zones.clone(),
            subnet_zones: resolved
                .subnets
                .iter()
                .map(|s| s.zone.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        });
    }

    let reqs = claim_requirements(claim)?;
    let ice: BTreeSet<(&str, &str, CapacityType)> = input
        .unavailable
        .iter()
        .map(|u| (u.instance_type.as_str(), u.zone.as_str(), u.capacity_type))
        .collect();
    let overlays = overlays_by_weight(input.overlays);
    let mut pool_labels = np.labels.clone();
    pool_labels.insert(labels::NODEPOOL.to_string(), np.name.clone());

    let mut skipped = Vec::new();
    let mut missing_arch = BTreeSet::new();
    // Types in the catalog, and those of them without an AMI.
    let (mut known, mut without_ami) = (0usize, 0usize);
    let mut offerings: Vec<CandidateOffering> = Vec::new();
    let mut overlay = false;
    let mut iced = 0usize;
    for ty in claim.instance_types.iter() {
        let Some(entry) = input.catalog.get(ty) else {
            skipped.push(format!("{ty}: not in the catalog"));
            continue;
        };
        known += 1;
        let arch = entry.info.architecture.as_str();
        let Some(image) = resolved.image_for_type(&entry.info) else {
            let need = AmiVariant::needed_by(&entry.info);
            if need == AmiVariant::Standard {
                skipped.push(format!("{ty}: no AMI for architecture {arch}"));
                missing_arch.insert(arch.to_string());
            } else {
                skipped.push(format!(
                    "{ty}: no {} AMI for architecture {arch}",
                    need.as_str()
                ));
                missing_arch.insert(format!("{arch}/{}", need.as_str()));
            }
            without_ami += 1;
            continue;
        };
        let image_key = image.fleet_key();
        let type_labels: BTreeMap<String, String> = entry
            .info
            .label_values()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain(pool_labels.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect();
        for o in &entry.offerings {
            if !claim.zones.contains(&o.zone)
                || !claim.capacity_types.contains(&o.capacity_type)
                || !subnet_zones.contains(o.zone.as_str())
                || o.available == 0
            {
                continue;
            }
            match (&o.reservation, o.capacity_type) {
                (Some(r), CapacityType::Reserved) => {
                    if !reqs.allows(labels::CAPACITY_RESERVATION_ID, &r.id)
                        || !reqs.allows(labels::CAPACITY_RESERVATION_TYPE, reservation_type_str(r))
                    {
                        continue;
                    }
                }
                (None, CapacityType::Spot | CapacityType::OnDemand) => {}
                _ => continue,
            }
            if ice.contains(&(ty.as_str(), o.zone.as_str(), o.capacity_type)) {
                iced += 1;
                continue;
            }
            let mut ol = type_labels.clone();
            ol.insert(labels::ZONE.into(), o.zone.clone());
            ol.insert(
                labels::CAPACITY_TYPE.into(),
                o.capacity_type.as_str().into(),
            );
            let adjusted = overlay_adjusted_price(&overlays, &ol, o.price);
            overlay |= adjusted.is_some();
            offerings.push(CandidateOffering {
                instance_type: ty.clone(),
                architecture: image_key.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type,
                price: o.price,
                adjusted_price: adjusted.unwrap_or(o.price),
                reservation: o.reservation.clone(),
            });
        }
    }
    let Some(capacity_type) = offerings.iter().map(|o| o.capacity_type).min() else {
        if without_ami > 0 && without_ami == known {
            return Err(LaunchError::NoCompatibleAmi {
                architectures: missing_arch.into_iter().collect(),
                ami_architectures: resolved
                    .images
                    .iter()
                    .map(|i| i.fleet_key())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
            });
        }
        let allowed: Vec<&str> = claim.capacity_types.iter().map(|c| c.as_str()).collect();
        return Err(claim_err(
            claim,
            format!(
                "no offering left for capacity types {allowed:?} in zones {:?} ({iced} in the ICE cache; skipped: {})",
                claim.zones,
                if skipped.is_empty() { "none".to_string() } else { skipped.join("; ") }
            ),
        ));
    };

    // One template per AMI used, and per (AMI, reservation) for reserved
    // offerings.
    let instance_profile = instance_profile_name(input.cluster_name, resolved);
    let security_group_ids = resolved.security_group_ids();
    let mut keys: BTreeMap<TemplateKey, Option<ReservationRef>> = BTreeMap::new();
    let mut amis: Vec<Ami> = Vec::new();
    for o in &offerings {
        let Some(img) = resolved
            .images
            .iter()
            .find(|i| i.fleet_key() == o.architecture)
        else {
            continue;
        };
        if !amis.iter().any(|a| a.id == img.id) {
            amis.push(Ami {
                id: img.id.clone(),
                architecture: o.architecture.clone(),
            });
        }
        keys.entry(TemplateKey {
            ami_id: img.id.clone(),
            reservation_id: o.reservation.as_ref().map(|r| r.id.clone()),
        })
        .or_insert_with(|| o.reservation.clone());
    }
    amis.sort_by(|a, b| a.architecture.cmp(&b.architecture));
    let mut templates: BTreeMap<String, LaunchTemplateConfig> = BTreeMap::new();
    let mut launch_templates = BTreeMap::new();
    for (key, reservation) in keys {
        let config = launch_template_config(&LaunchTemplateInput {
            cluster_name: input.cluster_name,
            node_pool: &np.name,
            node_class: input.node_class,
            ami_id: &key.ami_id,
            instance_profile: &instance_profile,
            security_group_ids: &security_group_ids,
            user_data: &user_data,
            reservation: reservation.as_ref(),
        })?;
        let name = template_name(&config);
        launch_templates.insert(key, name.clone());
        templates.insert(name, config);
    }

    let min_values = min_values_floors(claim, &offerings, input.catalog);
    let fleet = FleetInput {
        cluster_name: input.cluster_name.to_string(),
        node_claim_name: claim.name.clone(),
        attempt: input.attempt,
        capacity_type,
        offerings,
        subnets,
        amis,
        launch_templates,
        overlay,
        target_count: input.target_count,
        tags: instance_tags(input.cluster_name, &np.name, input.node_class, &claim.name),
        excluded: Vec::new(),
        min_values,
    };
    // The request must build: fail here, not in the service.
    build_fleet_request(&fleet)?;
    Ok(PreparedLaunch {
        launch_templates: templates.into_iter().collect(),
        fleet,
        skipped,
    })
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::catalog::{CatalogEntry, InstanceTypeInfo, Offering, UNLIMITED};
    use crate::ec2;
    use crate::launch::fleet::FleetRequest;
    use crate::launch::nodeclass::{parse_node_class, resolve};
    use crate::model::{AmiFamily, PriceAdjustment, ReservationType, Taint, TaintEffect};
    use crate::plan::{NodeClaimResources, Price};
    use crate::resources::Resources;

    const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];

    fn entry(name: &str, arch: &str, od: f64, spot: Option<f64>) -> CatalogEntry {
        let mut offerings = Vec::new();
        for z in ZONES {
            if let Some(s) = spot {
                offerings.push(Offering {
                    zone: z.into(),
                    capacity_type: CapacityType::Spot,
                    price: s,
                    available: UNLIMITED,
                    reservation: None,
                });
            }
            offerings.push(Offering {
                zone: z.into(),
                capacity_type: CapacityType::OnDemand,
                price: od,
                available: UNLIMITED,
                reservation: None,
            });
        }
        CatalogEntry {
            info: InstanceTypeInfo::synthetic(name, arch, 2, 8192, 0),
            offerings,
        }
    }

    fn catalog(mut entries: Vec<CatalogEntry>) -> Catalog {
        entries.sort_by(|a, b| a.info.name.cmp(&b.info.name));
        Catalog {
            region: "us-west-2".into(),
            zones: ZONES.iter().map(|z| z.to_string()).collect(),
            entries,
            source: "test".into(),
        }
    }

    fn default_catalog() -> Catalog {
        catalog(vec![
            entry("m5.large", "amd64", 0.096, Some(0.04)),
            entry("m6g.large", "arm64", 0.077, Some(0.03)),
            entry("c5.large", "amd64", 0.085, Some(0.035)),
        ])
    }

    fn node_class() -> NodeClass {
        NodeClass {
            name: "default".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: None,
            template_hash: None,
            status: Default::default(),
            spec: json!({
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                "tags": {"team": "platform"}
            }),
        }
    }

    fn subnet(id: &str, zone: &str) -> ec2::Subnet {
        ec2::Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: format!("usw2-{zone}"),
            vpc_id: "vpc-1".into(),
            available_ips: 100,
            tags: Default::default(),
        }
    }

    fn image(id: &str, arch: &str, date: &str) -> ec2::Image {
        ec2::Image {
            id: id.into(),
            name: format!("amazon-eks-node-al2023-{arch}-standard-1.31-{id}"),
            owner_id: "602401143452".into(),
            architecture: arch.into(),
            creation_date: date.into(),
            deprecated: false,
            tags: Default::default(),
        }
    }

    fn resolved(nc: &NodeClass, images: Vec<ec2::Image>) -> ResolvedNodeClass {
        let spec = parse_node_class(nc).unwrap();
        resolve(
            &spec,
            vec![
                subnet("subnet-a", "us-west-2a"),
                subnet("subnet-b", "us-west-2b"),
                subnet("subnet-c", "us-west-2c"),
            ],
            vec![ec2::SecurityGroup {
                id: "sg-1".into(),
                name: "nodes".into(),
                vpc_id: "vpc-1".into(),
                tags: Default::default(),
            }],
            images,
        )
        .unwrap()
    }

    fn both_archs() -> Vec<ec2::Image> {
        vec![
            image("ami-x86", "x86_64", "2025-11-01T00:00:00.000Z"),
            image("ami-arm", "arm64", "2025-11-01T00:00:00.000Z"),
        ]
    }

    fn claim(types: &[&str], zones: &[&str], cts: &[CapacityType]) -> NodeClaimPlan {
        NodeClaimPlan {
            name: "general-1".into(),
            node_pool: "general".into(),
            instance_types: types
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .into(),
            capacity_types: cts.to_vec(),
            zones: zones.iter().map(|z| z.to_string()).collect(),
            requirements: vec![],
            labels: BTreeMap::from([
                ("karpenter.sh/nodepool".to_string(), "general".to_string()),
                ("team".to_string(), "a".to_string()),
            ]),
            taints: vec![],
            startup_taints: vec![],
            annotations: Default::default(),
            resources: NodeClaimResources {
                requests: Resources::new(),
                allocatable: Resources::new(),
            },
            pods: vec![],
            price: Price {
                min: 0.0,
                instance_type: types[0].into(),
                zone: zones[0].into(),
                capacity_type: cts[0],
            },
            volume_price: 0.0,
        }
    }

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
            ca_bundle: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
        }
    }

    struct Fixture {
        claim: NodeClaimPlan,
        pool: NodePool,
        nc: NodeClass,
        resolved: ResolvedNodeClass,
        catalog: Catalog,
        overlays: Vec<NodeOverlay>,
        unavailable: Vec<UnavailableOffering>,
        cluster: ClusterInfo,
        kubelet: KubeletConfig,
    }

    impl Fixture {
        fn new(claim: NodeClaimPlan) -> Self {
            let nc = node_class();
            Fixture {
                claim,
                pool: NodePool::new("general", Requirements::new()),
                resolved: resolved(&nc, both_archs()),
                nc,
                catalog: default_catalog(),
                overlays: vec![],
                unavailable: vec![],
                cluster: cluster(),
                kubelet: KubeletConfig::default(),
            }
        }
        fn prepare(&self) -> Result<PreparedLaunch, LaunchError> {
            prepare_launch(&PrepareInput {
                claim: &self.claim,
                node_pool: &self.pool,
                node_class: &self.nc,
                resolved: &self.resolved,
                catalog: &self.catalog,
                overlays: &self.overlays,
                unavailable: &self.unavailable,
                cluster: &self.cluster,
                kubelet: &self.kubelet,
                cluster_name: "prod",
                attempt: 0,
                target_count: 1,
            })
        }
    }

    const SPOT_OD: [CapacityType; 2] = [CapacityType::Spot, CapacityType::OnDemand];

    fn request(p: &PreparedLaunch) -> FleetRequest {
        build_fleet_request(&p.fleet).unwrap()
    }

    fn types_in_order(r: &FleetRequest) -> Vec<(String, Option<f64>)> {
        let mut v: Vec<(String, Option<f64>)> = Vec::new();
        for c in &r.launch_template_configs {
            for o in &c.overrides {
                if !v.iter().any(|(t, _)| t == &o.instance_type) {
                    v.push((o.instance_type.clone(), o.priority));
                }
            }
        }
        v
    }

    #[test]
    fn spot_preferred_and_every_allowed_offering_kept() {
        let f = Fixture::new(claim(
            &["m5.large", "m6g.large", "c5.large"],
            &ZONES,
            &SPOT_OD,
        ));
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.capacity_type, CapacityType::Spot);
        // 3 types × 3 zones × 2 capacity types.
        assert_eq!(p.fleet.offerings.len(), 18);
        assert!(!p.fleet.overlay);
        assert!(p
            .fleet
            .offerings
            .iter()
            .all(|o| o.adjusted_price == o.price));
        // One template per architecture, content-addressed, same user data.
        assert_eq!(p.launch_templates.len(), 2);
        assert_eq!(p.fleet.launch_templates.len(), 2);
        for (name, cfg) in &p.launch_templates {
            assert_eq!(name, &template_name(cfg));
            assert!(cfg.user_data.contains("team=a"), "{}", cfg.user_data);
            assert!(cfg
                .user_data
                .contains("karpenter.k8s.aws/ec2nodeclass=default"));
            assert_eq!(cfg.security_group_ids, ["sg-1"]);
            assert!(cfg.iam_instance_profile.starts_with("prod_"));
        }
        let images: BTreeSet<&str> = p
            .launch_templates
            .iter()
            .map(|(_, c)| c.image_id.as_str())
            .collect();
        assert_eq!(images, BTreeSet::from(["ami-arm", "ami-x86"]));
        // Tags: instance tags plus the EC2NodeClass's.
        assert_eq!(p.fleet.tags["karpenter.sh/nodeclaim"], "general-1");
        assert_eq!(p.fleet.tags["karpenter.sh/nodepool"], "general");
        assert_eq!(p.fleet.tags["team"], "platform");
        assert_eq!(p.fleet.tags["kubernetes.io/cluster/prod"], "owned");
        let r = request(&p);
        assert_eq!(
            types_in_order(&r)
                .into_iter()
                .map(|(t, _)| t)
                .collect::<Vec<_>>(),
            ["m6g.large", "c5.large", "m5.large"]
        );
    }

    #[test]
    fn on_demand_when_spot_not_allowed_or_not_offered() {
        let f = Fixture::new(claim(&["m5.large"], &ZONES, &[CapacityType::OnDemand]));
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.capacity_type, CapacityType::OnDemand);
        assert!(p
            .fleet
            .offerings
            .iter()
            .all(|o| o.capacity_type == CapacityType::OnDemand));

        let mut f = Fixture::new(claim(&["m5.large"], &ZONES, &SPOT_OD));
        f.catalog = catalog(vec![entry("m5.large", "amd64", 0.096, None)]);
        assert_eq!(
            f.prepare().unwrap().fleet.capacity_type,
            CapacityType::OnDemand
        );
    }

    #[test]
    fn reserved_first_with_a_template_per_reservation() {
        let mut f = Fixture::new(claim(
            &["m5.large"],
            &ZONES,
            &[
                CapacityType::Reserved,
                CapacityType::Spot,
                CapacityType::OnDemand,
            ],
        ));
        let mut e = entry("m5.large", "amd64", 0.096, Some(0.04));
        for (id, z) in [("cr-1", "us-west-2a"), ("cr-2", "us-west-2b")] {
            e.offerings.push(Offering {
                zone: z.into(),
                capacity_type: CapacityType::Reserved,
                price: 0.0,
                available: 2,
                reservation: Some(ReservationRef {
                    id: id.into(),
                    reservation_type: ReservationType::Default,
                }),
            });
        }
        f.catalog = catalog(vec![e]);
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.capacity_type, CapacityType::Reserved);
        // Plain x86 template + one per reservation.
        assert_eq!(p.launch_templates.len(), 3);
        let reserved: BTreeSet<Option<&str>> = p
            .launch_templates
            .iter()
            .map(|(_, c)| c.capacity_reservation_id.as_deref())
            .collect();
        assert_eq!(reserved, BTreeSet::from([None, Some("cr-1"), Some("cr-2")]));
        let r = request(&p);
        assert_eq!(r.launch_template_configs.len(), 2);

        // A claim pinned to one reservation only sees that one.
        f.claim.requirements = vec![crate::requirements::NodeSelectorRequirement {
            key: labels::CAPACITY_RESERVATION_ID.into(),
            operator: crate::Operator::In,
            values: vec!["cr-2".into()],
            min_values: None,
        }];
        let p = f.prepare().unwrap();
        let ids: BTreeSet<&str> = p
            .fleet
            .offerings
            .iter()
            .filter_map(|o| o.reservation.as_ref().map(|r| r.id.as_str()))
            .collect();
        assert_eq!(ids, BTreeSet::from(["cr-2"]));
    }

    #[test]
    fn arm64_types_dropped_when_only_an_x86_ami_resolved() {
        let mut f = Fixture::new(claim(&["m5.large", "m6g.large"], &ZONES, &SPOT_OD));
        f.resolved = resolved(
            &f.nc,
            vec![image("ami-x86", "x86_64", "2025-11-01T00:00:00.000Z")],
        );
        let p = f.prepare().unwrap();
        assert!(p
            .fleet
            .offerings
            .iter()
            .all(|o| o.instance_type == "m5.large"));
        assert_eq!(p.skipped, ["m6g.large: no AMI for architecture arm64"]);
        assert_eq!(p.launch_templates.len(), 1);
        assert_eq!(p.fleet.amis.len(), 1);

        f.claim = claim(&["m6g.large"], &ZONES, &SPOT_OD);
        assert_eq!(
            f.prepare().unwrap_err(),
            LaunchError::NoCompatibleAmi {
                architectures: vec!["arm64".into()],
                ami_architectures: vec!["amd64".into()],
            }
        );
    }

    #[test]
    fn gpu_types_launch_with_the_nvidia_ami() {
        let mut f = Fixture::new(claim(&["m5.large", "p3.2xlarge"], &ZONES, &SPOT_OD));
        let mut gpu = entry("p3.2xlarge", "amd64", 3.06, Some(0.9));
        gpu.info = InstanceTypeInfo::synthetic("p3.2xlarge", "amd64", 8, 62464, 1);
        f.catalog = catalog(vec![entry("m5.large", "amd64", 0.096, Some(0.04)), gpu]);
        // Only the standard AMIs: the GPU type has no AMI.
        let p = f.prepare().unwrap();
        assert_eq!(
            p.skipped,
            ["p3.2xlarge: no nvidia AMI for architecture amd64"]
        );
        let mut nvidia = image("ami-gpu", "x86_64", "2025-11-01T00:00:00.000Z");
        nvidia.name = "amazon-eks-node-al2023-x86_64-nvidia-1.31-v20251101".into();
        let mut images = both_archs();
        images.push(nvidia);
        f.resolved = resolved(&f.nc, images);
        let p = f.prepare().unwrap();
        assert!(p.skipped.is_empty(), "{:?}", p.skipped);
        // Two templates: the standard x86 AMI and the NVIDIA one.
        let amis: BTreeSet<&str> = p
            .launch_templates
            .iter()
            .map(|(_, c)| c.image_id.as_str())
            .collect();
        assert_eq!(amis, BTreeSet::from(["ami-gpu", "ami-x86"]));
        let r = request(&p);
        for c in &r.launch_template_configs {
            for o in &c.overrides {
                let want = if o.instance_type == "p3.2xlarge" {
                    "ami-gpu"
                } else {
                    "ami-x86"
                };
                assert_eq!(o.image_id, want, "{o:?}");
            }
        }
        // Only the GPU type: no AMI at all is an error naming the variant.
        f.claim = claim(&["p3.2xlarge"], &ZONES, &SPOT_OD);
        f.resolved = resolved(&f.nc, both_archs());
        assert_eq!(
            f.prepare().unwrap_err(),
            LaunchError::NoCompatibleAmi {
                architectures: vec!["amd64/nvidia".into()],
                ami_architectures: vec!["amd64".into(), "arm64".into()],
            }
        );
    }

    #[test]
    fn iced_offerings_are_excluded() {
        let mut f = Fixture::new(claim(&["m5.large", "c5.large"], &ZONES, &SPOT_OD));
        f.unavailable = vec![UnavailableOffering {
            instance_type: "c5.large".into(),
            zone: "us-west-2b".into(),
            capacity_type: CapacityType::Spot,
        }];
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.offerings.len(), 11);
        assert!(!p
            .fleet
            .offerings
            .iter()
            .any(|o| o.instance_type == "c5.large"
                && o.zone == "us-west-2b"
                && o.capacity_type == CapacityType::Spot));
        // The on-demand offering of that pool stays.
        assert!(p
            .fleet
            .offerings
            .iter()
            .any(|o| o.instance_type == "c5.large"
                && o.zone == "us-west-2b"
                && o.capacity_type == CapacityType::OnDemand));

        // Everything ICE'd: an error naming the claim.
        f.claim = claim(&["c5.large"], &["us-west-2b"], &[CapacityType::Spot]);
        let e = f.prepare().unwrap_err();
        assert!(
            matches!(&e, LaunchError::NodeClaim { node_claim, reason } if node_claim == "general-1" && reason.contains("1 in the ICE cache")),
            "{e}"
        );
    }

    #[test]
    fn subnets_limited_to_the_claim_zones() {
        let f = Fixture::new(claim(&["m5.large"], &["us-west-2b"], &SPOT_OD));
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.subnets.len(), 1);
        assert_eq!(p.fleet.subnets[0].id, "subnet-b");
        assert!(p.fleet.offerings.iter().all(|o| o.zone == "us-west-2b"));

        // A zone without a subnet: offerings there are dropped; none at all
        // is an error naming both sides.
        let mut f = Fixture::new(claim(
            &["m5.large"],
            &["us-west-2a", "us-west-2c"],
            &SPOT_OD,
        ));
        f.resolved.subnets.retain(|s| s.zone == "us-west-2a");
        let p = f.prepare().unwrap();
        assert!(p.fleet.offerings.iter().all(|o| o.zone == "us-west-2a"));
        f.resolved.subnets = vec![subnet("subnet-b", "us-west-2b")];
        assert_eq!(
            f.prepare().unwrap_err(),
            LaunchError::NoSubnetInOfferingZones {
                offering_zones: vec!["us-west-2a".into(), "us-west-2c".into()],
                subnet_zones: vec!["us-west-2b".into()],
            }
        );
    }

    fn overlay(
        name: &str,
        weight: i32,
        arch: &str,
        adj: Option<PriceAdjustment>,
        price: Option<f64>,
    ) -> NodeOverlay {
        NodeOverlay {
            name: name.into(),
            weight,
            requirements: Requirements::from_iter_reqs([Requirement::in_values(
                labels::ARCH,
                [arch],
            )]),
            price_adjustment: adj,
            price,
            capacity: Resources::new(),
        }
    }

    #[test]
    fn overlay_adjusted_prices_order_the_fleet_heaviest_overlay_wins() {
        let mut f = Fixture::new(claim(
            &["m5.large", "m6g.large", "c5.large"],
            &ZONES,
            &SPOT_OD,
        ));
        // arm64 +200% (weight 1) loses to arm64 +100% (weight 10); amd64
        // -50%.
        f.overlays = vec![
            overlay(
                "arm-light",
                1,
                "arm64",
                Some(PriceAdjustment::Percent(200.0)),
                None,
            ),
            overlay(
                "arm-heavy",
                10,
                "arm64",
                Some(PriceAdjustment::Percent(100.0)),
                None,
            ),
            overlay(
                "x86",
                5,
                "amd64",
                Some(PriceAdjustment::Percent(-50.0)),
                None,
            ),
        ];
        let p = f.prepare().unwrap();
        assert!(p.fleet.overlay);
        let m6g = p
            .fleet
            .offerings
            .iter()
            .find(|o| o.instance_type == "m6g.large" && o.capacity_type == CapacityType::Spot)
            .unwrap();
        assert!((m6g.adjusted_price - 0.06).abs() < 1e-9, "{m6g:?}");
        assert!((m6g.price - 0.03).abs() < 1e-9);
        let r = request(&p);
        let order = types_in_order(&r);
        assert_eq!(
            order.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            ["c5.large", "m5.large", "m6g.large"]
        );
        assert!(order.iter().all(|(_, p)| p.is_some()));
        assert!((order[0].1.unwrap() - 0.0175).abs() < 1e-9);

        // An absolute price overrides the base price.
        f.overlays = vec![overlay("fixed", 1, "arm64", None, Some(0.001))];
        let p = f.prepare().unwrap();
        let r = request(&p);
        assert_eq!(types_in_order(&r)[0].0, "m6g.large");
        assert_eq!(types_in_order(&r)[0].1, Some(0.001));
    }

    #[test]
    fn label_and_taint_injection_is_refused() {
        for bad in ["$(reboot)", "a\nb", "x\"; reboot; \""] {
            let mut f = Fixture::new(claim(&["m5.large"], &ZONES, &SPOT_OD));
            f.claim.labels.insert("team".into(), bad.into());
            assert!(
                matches!(f.prepare(), Err(LaunchError::InvalidLabel { ref key, .. }) if key == "team"),
                "{bad:?}"
            );
        }
        // Also in a label the kubelet would not get.
        let mut f = Fixture::new(claim(&["m5.large"], &ZONES, &SPOT_OD));
        f.claim
            .labels
            .insert("kubernetes.io/hostname".into(), "$(reboot)".into());
        assert!(matches!(f.prepare(), Err(LaunchError::InvalidLabel { .. })));

        let mut f = Fixture::new(claim(&["m5.large"], &ZONES, &SPOT_OD));
        f.claim.startup_taints = vec![Taint {
            key: "init".into(),
            value: "a\nb".into(),
            effect: TaintEffect::NoSchedule,
        }];
        assert!(matches!(f.prepare(), Err(LaunchError::InvalidTaint { .. })));
    }

    #[test]
    fn taints_and_startup_taints_reach_the_user_data_restricted_labels_do_not() {
        let mut f = Fixture::new(claim(&["m5.large"], &["us-west-2a"], &SPOT_OD));
        f.claim
            .labels
            .insert("kubernetes.io/arch".into(), "amd64".into());
        f.claim
            .labels
            .insert("kubernetes.io/hostname".into(), "x".into());
        f.claim
            .labels
            .insert("example.kubernetes.io/foo".into(), "x".into());
        f.claim.taints = vec![Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: TaintEffect::NoSchedule,
        }];
        f.claim.startup_taints = vec![Taint {
            key: "node.cilium.io/agent-not-ready".into(),
            value: String::new(),
            effect: TaintEffect::NoExecute,
        }];
        let p = f.prepare().unwrap();
        let ud = &p.launch_templates[0].1.user_data;
        assert!(ud.contains("dedicated=gpu:NoSchedule"), "{ud}");
        assert!(
            ud.contains("node.cilium.io/agent-not-ready=:NoExecute"),
            "{ud}"
        );
        assert!(ud.contains("kubernetes.io/arch=amd64"), "{ud}");
        assert!(!ud.contains("hostname"), "{ud}");
        assert!(!ud.contains("example.kubernetes.io"), "{ud}");
        assert!(kubelet_may_set("node.kubernetes.io/instance-type"));
        assert!(kubelet_may_set("x.node.kubernetes.io/y"));
        assert!(kubelet_may_set("karpenter.k8s.aws/instance-family"));
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(!kubelet_may_set("k8s.io/x"));
    }

    #[test]
    fn template_settings_come_from_the_node_class() {
        let mut f = Fixture::new(claim(&["m5.large"], &["us-west-2a"], &SPOT_OD));
        let p = f.prepare().unwrap();
        let cfg = &p.launch_templates[0].1;
        // IMDSv2 required, one hop, by default; no public IP setting.
        assert_eq!(cfg.metadata_options.http_tokens, "required");
        assert_eq!(cfg.metadata_options.http_put_response_hop_limit, 1);
        assert_eq!(cfg.associate_public_ip_address, None);
        assert!(cfg.user_data.contains("MIME-Version"), "{}", cfg.user_data);

        f.nc.spec["associatePublicIPAddress"] = json!(false);
        f.nc.spec["metadataOptions"] = json!({"httpPutResponseHopLimit": 2});
        f.nc.ami_family = AmiFamily::Bottlerocket;
        f.nc.spec["amiSelectorTerms"] = json!([{"alias": "bottlerocket@latest"}]);
        f.resolved = resolved(&f.nc, both_archs());
        let p = f.prepare().unwrap();
        let cfg = &p.launch_templates[0].1;
        assert_eq!(cfg.associate_public_ip_address, Some(false));
        assert_eq!(cfg.metadata_options.http_put_response_hop_limit, 2);
        assert!(
            cfg.user_data.contains("[settings.kubernetes.node-labels]"),
            "{}",
            cfg.user_data
        );
        assert_eq!(cfg.block_device_mappings.len(), 2);
    }

    #[test]
    fn instance_profile_from_the_node_class() {
        let mut f = Fixture::new(claim(&["m5.large"], &ZONES, &SPOT_OD));
        let a = instance_profile_name("prod", &f.resolved);
        assert_eq!(a, instance_profile_name("prod", &f.resolved));
        assert!(a.starts_with("prod_") && a.len() == "prod_".len() + 16);
        f.resolved.spec.role = None;
        f.resolved.spec.instance_profile = Some("MyProfile".into());
        let p = f.prepare().unwrap();
        assert_eq!(p.launch_templates[0].1.iam_instance_profile, "MyProfile");
    }

    #[test]
    fn ice_fallback_to_on_demand_reuses_the_prepared_templates() {
        use crate::launch::ice::{
            next_attempt, FleetError, FleetResponse, LaunchTemplateAndOverrides, Outcome,
            ResponseOverrides,
        };
        let f = Fixture::new(claim(&["m5.large"], &["us-west-2a"], &SPOT_OD));
        let p = f.prepare().unwrap();
        assert_eq!(p.fleet.capacity_type, CapacityType::Spot);
        let response = FleetResponse {
            fleet_id: Some("fleet-1".into()),
            instances: vec![],
            errors: vec![FleetError {
                error_code: "InsufficientInstanceCapacity".into(),
                error_message: "no m5.large".into(),
                launch_template_and_overrides: Some(LaunchTemplateAndOverrides {
                    overrides: Some(ResponseOverrides {
                        instance_type: Some("m5.large".into()),
                        availability_zone: Some("us-west-2a".into()),
                        subnet_id: None,
                    }),
                }),
            }],
        };
        let Outcome::FallBack { next, unavailable } = next_attempt(&p.fleet, &response) else {
            panic!("expected a fallback");
        };
        assert_eq!(unavailable.len(), 1);
        assert_eq!(next.capacity_type, CapacityType::OnDemand);
        assert_eq!(next.attempt, 1);
        let r = build_fleet_request(&next).unwrap();
        let names: BTreeSet<&str> = p.launch_templates.iter().map(|(n, _)| n.as_str()).collect();
        for c in &r.launch_template_configs {
            assert!(names.contains(
                c.launch_template_specification
                    .launch_template_name
                    .as_str()
            ));
        }
    }

    #[test]
    fn wrong_pool_unknown_types_and_zero_count() {
        let mut f = Fixture::new(claim(&["m5.large", "z9.huge"], &ZONES, &SPOT_OD));
        let p = f.prepare().unwrap();
        assert_eq!(p.skipped, ["z9.huge: not in the catalog"]);
        f.pool.name = "other".into();
        assert!(matches!(f.prepare(), Err(LaunchError::NodeClaim { .. })));
        f.pool.name = "general".into();
        let e = prepare_launch(&PrepareInput {
            claim: &f.claim,
            node_pool: &f.pool,
            node_class: &f.nc,
            resolved: &f.resolved,
            catalog: &f.catalog,
            overlays: &f.overlays,
            unavailable: &f.unavailable,
            cluster: &f.cluster,
            kubelet: &f.kubelet,
            cluster_name: "prod",
            attempt: 0,
            target_count: 0,
        });
        assert_eq!(e.unwrap_err(), LaunchError::ZeroTargetCapacity);
    }
}
