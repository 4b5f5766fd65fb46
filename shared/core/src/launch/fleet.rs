//! The CreateFleet request for one NodeClaim, as plain data (AWS PascalCase
//! field names), and the pure builder that fills it.
//!
//! Rules from `instance-selection-deep-dive.txt`, phases 2 and 3:
//! - all compatible instance types are kept (the scheduler does not pick);
//! - instance types are mapped to the first AMI whose architecture they
//!   support (`MapToInstanceTypes`) and grouped into one launch-template
//!   config per AMI (and, for reserved capacity, per reservation);
//! - types are ordered by their lowest (adjusted) price, ties by name
//!   (`OrderByPrice`), and truncated to [`MAX_INSTANCE_TYPES`] *after*
//!   sorting (`Truncate`);
//! - one override per (type, zone) with the zone's subnet that has the most
//!   available IPs (`getOverrides`);
//! - spot → `price-capacity-optimized`, on-demand → `lowest-price`; with a
//!   NodeOverlay → `capacity-optimized-prioritized` / `prioritized` and
//!   `Priority` = adjusted price on every override (never without overlays);
//! - reserved capacity (ODCR) launches on the on-demand market into the
//!   reservation; capacity blocks use the `capacity-block` target capacity
//!   type and no `OnDemandOptions` (`CreateFleetInputBuilder.Build`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::ice::UnavailableOffering;
use super::{fnv1a64, LaunchError};
use crate::catalog::{CapacityType, ReservationRef};
use crate::model::ReservationType;

/// Karpenter's `maxInstanceTypes`: types sent in one CreateFleet request.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// One (instance type, zone, capacity type) the NodeClaim may launch as.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateOffering {
    pub instance_type: String,
    /// `amd64` / `arm64`: selects the AMI (the key of [`Ami::architecture`];
    /// `amd64/nvidia`, `arm64/neuron`, ... for the accelerated AMI variants,
    /// see `nodeclass::AmiVariant`).
    pub architecture: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD/hour.
    pub price: f64,
    /// Price after NodeOverlay adjustments (equal to `price` without one).
    pub adjusted_price: f64,
    /// Set for reserved offerings.
    pub reservation: Option<ReservationRef>,
}

/// A subnet resolved from the EC2NodeClass `subnetSelectorTerms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub available_ips: u64,
}

/// An AMI resolved from `amiSelectorTerms`, in preference order (newest
/// first); the first AMI of an architecture wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ami {
    pub id: String,
    pub architecture: String,
}

/// Which launch template a group of overrides uses: one per AMI, and for
/// reserved capacity one per (AMI, reservation) because the template itself
/// targets the reservation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateKey {
    pub ami_id: String,
    pub reservation_id: Option<String>,
}

impl TemplateKey {
    pub fn ami(ami_id: &str) -> Self {
        TemplateKey {
            ami_id: ami_id.to_string(),
            reservation_id: None,
        }
    }
}

/// Everything the builder needs for one CreateFleet call.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetInput {
    pub cluster_name: String,
    pub node_claim_name: String,
    /// 0 for the first call; every retry gets a new client token.
    pub attempt: u32,
    /// The capacity type this call launches; offerings of other types are
    /// kept for the on-demand fallback (see `ice`).
    pub capacity_type: CapacityType,
    /// Candidates, any order (the builder sorts).
    pub offerings: Vec<CandidateOffering>,
    pub subnets: Vec<Subnet>,
    pub amis: Vec<Ami>,
    /// Launch-template name per AMI (and reservation).
    pub launch_templates: BTreeMap<TemplateKey, String>,
    /// Whether any NodeOverlay applies to the NodeClaim's types.
    pub overlay: bool,
    pub target_count: u32,
    /// Tags for the instance, its volumes and the fleet.
    pub tags: BTreeMap<String, String>,
    /// Offerings removed by earlier attempts (insufficient capacity).
    pub excluded: Vec<UnavailableOffering>,
    /// The NodeClaim's `minValues`: the types sent must keep them (see
    /// [`MinValuesFloor`]).
    pub min_values: Vec<MinValuesFloor>,
}

/// A `minValues` of the NodeClaim's requirements: the instance types of
/// the request must carry at least `min` distinct values of `key`. For
/// the zone and capacity-type keys the values are those of the offerings
/// in the request; for any other key, `values` gives each type's.
#[derive(Debug, Clone, PartialEq)]
pub struct MinValuesFloor {
    pub key: String,
    pub min: u32,
    pub values: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FleetType {
    Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetCapacityType {
    Spot,
    OnDemand,
    CapacityBlock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpotAllocationStrategy {
    PriceCapacityOptimized,
    CapacityOptimizedPrioritized,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnDemandAllocationStrategy {
    LowestPrice,
    Prioritized,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationUsageStrategy {
    UseCapacityReservationsFirst,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FleetRequest {
    pub client_token: String,
    #[serde(rename = "Type")]
    pub fleet_type: FleetType,
    pub target_capacity_specification: TargetCapacitySpecification,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_options: Option<SpotOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_demand_options: Option<OnDemandOptions>,
    pub launch_template_configs: Vec<FleetLaunchTemplateConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tag_specifications: Vec<TagSpecification>,
}

impl FleetRequest {
    /// The launch template config and override an instance of
    /// `instance_type` launched in `zone` came from: its AMI, subnet and
    /// (through the template) security groups.
    pub fn override_for(
        &self,
        instance_type: &str,
        zone: &str,
    ) -> Option<(&FleetLaunchTemplateConfig, &FleetOverride)> {
        self.launch_template_configs.iter().find_map(|c| {
            c.overrides
                .iter()
                .find(|o| o.instance_type == instance_type && o.availability_zone == zone)
                .map(|o| (c, o))
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TargetCapacitySpecification {
    pub total_target_capacity: u32,
    pub default_target_capacity_type: TargetCapacityType,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SpotOptions {
    pub allocation_strategy: SpotAllocationStrategy,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OnDemandOptions {
    pub allocation_strategy: OnDemandAllocationStrategy,
    /// Set when launching into an on-demand capacity reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_options: Option<CapacityReservationOptions>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CapacityReservationOptions {
    pub usage_strategy: CapacityReservationUsageStrategy,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FleetLaunchTemplateConfig {
    pub launch_template_specification: LaunchTemplateSpecification,
    pub overrides: Vec<FleetOverride>,
    /// The reservation the named launch template targets (its
    /// `CapacityReservationSpecification`, and `InstanceMarketOptions`
    /// `MarketType: capacity-block` for capacity blocks). Not a CreateFleet
    /// field: the adapter checks it against the template it resolved.
    #[serde(skip)]
    pub capacity_reservation: Option<ReservationRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplateSpecification {
    pub launch_template_name: String,
    /// Always `$Latest`.
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FleetOverride {
    pub instance_type: String,
    pub subnet_id: String,
    pub image_id: String,
    pub availability_zone: String,
    /// Adjusted price; only with NodeOverlays (lower = preferred).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TagSpecification {
    pub resource_type: String,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    pub key: String,
    pub value: String,
}

/// The idempotency token of one CreateFleet request: stable for (cluster,
/// NodeClaim, attempt, the request's content), 25 characters (AWS allows
/// 64). The content is part of it because EC2 refuses a token reused with
/// a different request (`IdempotentParameterMismatch`): a launch taken over
/// after a crash numbers its attempts from the last one recorded, and its
/// request for that attempt may differ (the ICE cache moved on).
pub fn client_token(cluster: &str, node_claim: &str, attempt: u32, request_digest: u64) -> String {
    let key = format!(
        "{}:{cluster}/{node_claim}/{attempt}/{request_digest:016x}",
        cluster.len()
    );
    format!("flotilla-{:016x}", fnv1a64(key.as_bytes()))
}

/// The types a request takes (cheapest first, at most
/// [`MAX_INSTANCE_TYPES`]): the cheapest, except that every `minValues`
/// floor is kept: the cheapest type bringing a value a floor still lacks
/// is taken before cheaper types that bring none (Karpenter's `Truncate`
/// keeps the cheapest and fails when a floor is lost). Fails when the
/// candidates themselves cannot meet a floor.
fn truncate<'a>(
    types: Vec<(&'a str, f64)>,
    floors: &[MinValuesFloor],
    offerings: &[&CandidateOffering],
) -> Result<Vec<(&'a str, f64)>, LaunchError> {
    if floors.is_empty() {
        return Ok(types.into_iter().take(MAX_INSTANCE_TYPES).collect());
    }
    let values = |f: &MinValuesFloor, ty: &str| -> BTreeSet<String> {
        match f.key.as_str() {
            crate::labels::ZONE => offerings
                .iter()
                .filter(|o| o.instance_type == ty)
                .map(|o| o.zone.clone())
                .collect(),
            crate::labels::CAPACITY_TYPE => offerings
                .iter()
                .filter(|o| o.instance_type == ty)
                .map(|o| o.capacity_type.as_str().to_string())
                .collect(),
            _ => f.values.get(ty).into_iter().flatten().cloned().collect(),
        }
    };
    let mut seen: Vec<BTreeSet<String>> = vec![BTreeSet::new(); floors.len()];
    let mut keep = vec![false; types.len()];
    for (i, (ty, _)) in types.iter().enumerate() {
        let mut brings = false;
        for (f, floor) in floors.iter().enumerate() {
            if seen[f].len() >= floor.min as usize {
                continue;
            }
            for v in values(floor, ty) {
                brings |= seen[f].insert(v);
            }
        }
        keep[i] = brings;
    }
    if let Some((f, floor)) = floors
        .iter()
        .enumerate()
        .find(|(f, floor)| seen[*f].len() < floor.min as usize)
    {
        return Err(LaunchError::MinValues {
            key: floor.key.clone(),
            min: floor.min,
            have: seen[f].len(),
        });
    }
    let needed = keep.iter().filter(|k| **k).count();
    if needed > MAX_INSTANCE_TYPES {
        return Err(LaunchError::MinValuesTruncation {
            needed,
            max: MAX_INSTANCE_TYPES,
        });
    }
    let mut room = MAX_INSTANCE_TYPES - needed;
    for k in keep.iter_mut().filter(|k| !**k) {
        if room == 0 {
            break;
        }
        *k = true;
        room -= 1;
    }
    Ok(types
        .into_iter()
        .zip(keep)
        .filter_map(|(t, k)| k.then_some(t))
        .collect())
}

fn unique_sorted<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    it.map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Builds the CreateFleet request for `input.capacity_type`.
pub fn build_fleet_request(input: &FleetInput) -> Result<FleetRequest, LaunchError> {
    if input.target_count == 0 {
        return Err(LaunchError::ZeroTargetCapacity);
    }
    let mut offerings: Vec<&CandidateOffering> = input
        .offerings
        .iter()
        .filter(|o| o.capacity_type == input.capacity_type)
        .filter(|o| input.capacity_type != CapacityType::Reserved || o.reservation.is_some())
        .collect();
    if offerings.is_empty() {
        return Err(LaunchError::NoOfferings {
            node_claim: input.node_claim_name.clone(),
            capacity_type: input.capacity_type.to_string(),
        });
    }

    // The subnet with the most available IPs per zone (ties: lowest id).
    let mut subnet_by_zone: BTreeMap<&str, &Subnet> = BTreeMap::new();
    for s in &input.subnets {
        let better = match subnet_by_zone.get(s.zone.as_str()) {
            None => true,
            Some(cur) => {
                (s.available_ips, std::cmp::Reverse(&s.id))
                    > (cur.available_ips, std::cmp::Reverse(&cur.id))
            }
        };
        if better {
            subnet_by_zone.insert(&s.zone, s);
        }
    }
    let offering_zones = unique_sorted(offerings.iter().map(|o| o.zone.as_str()));
    offerings.retain(|o| subnet_by_zone.contains_key(o.zone.as_str()));
    if offerings.is_empty() {
        return Err(LaunchError::NoSubnetInOfferingZones {
            offering_zones,
            subnet_zones: subnet_by_zone.keys().map(|z| z.to_string()).collect(),
        });
    }

    // The first AMI per architecture (MapToInstanceTypes).
    let mut ami_by_arch: BTreeMap<&str, &Ami> = BTreeMap::new();
    for a in &input.amis {
        ami_by_arch.entry(a.architecture.as_str()).or_insert(a);
    }
    let architectures = unique_sorted(offerings.iter().map(|o| o.architecture.as_str()));
    offerings.retain(|o| ami_by_arch.contains_key(o.architecture.as_str()));
    if offerings.is_empty() {
        return Err(LaunchError::NoCompatibleAmi {
            architectures,
            ami_architectures: ami_by_arch.keys().map(|a| a.to_string()).collect(),
        });
    }

    let by_price = |a: &&&CandidateOffering, b: &&&CandidateOffering| {
        a.adjusted_price
            .total_cmp(&b.adjusted_price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
    };

    // Capacity blocks and ODCRs are launched separately: keep the kind of
    // the cheapest reserved offering.
    let mut reservation_type = None;
    if input.capacity_type == CapacityType::Reserved {
        reservation_type = offerings
            .iter()
            .min_by(by_price)
            .and_then(|o| o.reservation.as_ref())
            .map(|r| r.reservation_type);
        offerings
            .retain(|o| o.reservation.as_ref().map(|r| r.reservation_type) == reservation_type);
    }

    // Order types by their lowest adjusted price, ties by name; truncate
    // after sorting.
    let mut lowest: BTreeMap<&str, f64> = BTreeMap::new();
    for o in &offerings {
        let e = lowest.entry(&o.instance_type).or_insert(o.adjusted_price);
        if o.adjusted_price < *e {
            *e = o.adjusted_price;
        }
    }
    let mut types: Vec<(&str, f64)> = lowest.into_iter().collect();
    types.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let types = truncate(types, &input.min_values, &offerings)?;

    // One override per (type, zone, reservation), cheapest offering wins.
    let mut per_type: BTreeMap<&str, BTreeMap<(&str, Option<&str>), &CandidateOffering>> =
        BTreeMap::new();
    for o in &offerings {
        let slot = per_type
            .entry(&o.instance_type)
            .or_default()
            .entry((&o.zone, o.reservation.as_ref().map(|r| r.id.as_str())))
            .or_insert(o);
        if o.adjusted_price < slot.adjusted_price {
            *slot = o;
        }
    }

    let mut configs: Vec<FleetLaunchTemplateConfig> = Vec::new();
    let mut index: BTreeMap<TemplateKey, usize> = BTreeMap::new();
    for (ty, _) in &types {
        let Some(zones) = per_type.get(ty) else {
            continue;
        };
        for ((zone, _), o) in zones {
            let (Some(subnet), Some(ami)) = (
                subnet_by_zone.get(zone),
                ami_by_arch.get(o.architecture.as_str()),
            ) else {
                continue;
            };
            let key = TemplateKey {
                ami_id: ami.id.clone(),
                reservation_id: o.reservation.as_ref().map(|r| r.id.clone()),
            };
            let i = match index.get(&key) {
                Some(i) => *i,
                None => {
                    let name = input.launch_templates.get(&key).ok_or_else(|| {
                        LaunchError::MissingLaunchTemplate {
                            ami_id: key.ami_id.clone(),
                            reservation: key.reservation_id.clone(),
                        }
                    })?;
                    configs.push(FleetLaunchTemplateConfig {
                        launch_template_specification: LaunchTemplateSpecification {
                            launch_template_name: name.clone(),
                            version: "$Latest".into(),
                        },
                        overrides: Vec::new(),
                        capacity_reservation: o.reservation.clone(),
                    });
                    index.insert(key, configs.len() - 1);
                    configs.len() - 1
                }
            };
            configs[i].overrides.push(FleetOverride {
                instance_type: o.instance_type.clone(),
                subnet_id: subnet.id.clone(),
                image_id: ami.id.clone(),
                availability_zone: o.zone.clone(),
                priority: input.overlay.then_some(o.adjusted_price),
            });
        }
    }

    let spot_strategy = if input.overlay {
        SpotAllocationStrategy::CapacityOptimizedPrioritized
    } else {
        SpotAllocationStrategy::PriceCapacityOptimized
    };
    let od_strategy = if input.overlay {
        OnDemandAllocationStrategy::Prioritized
    } else {
        OnDemandAllocationStrategy::LowestPrice
    };
    let (target_type, spot_options, on_demand_options) = match input.capacity_type {
        CapacityType::Spot => (
            TargetCapacityType::Spot,
            Some(SpotOptions {
                allocation_strategy: spot_strategy,
            }),
            None,
        ),
        CapacityType::OnDemand => (
            TargetCapacityType::OnDemand,
            None,
            Some(OnDemandOptions {
                allocation_strategy: od_strategy,
                capacity_reservation_options: None,
            }),
        ),
        CapacityType::Reserved => match reservation_type {
            Some(ReservationType::CapacityBlock) => (TargetCapacityType::CapacityBlock, None, None),
            _ => (
                TargetCapacityType::OnDemand,
                None,
                Some(OnDemandOptions {
                    allocation_strategy: od_strategy,
                    capacity_reservation_options: Some(CapacityReservationOptions {
                        usage_strategy:
                            CapacityReservationUsageStrategy::UseCapacityReservationsFirst,
                    }),
                }),
            ),
        },
    };

    let tags: Vec<Tag> = input
        .tags
        .iter()
        .map(|(k, v)| Tag {
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    let tag_specifications = if tags.is_empty() {
        Vec::new()
    } else {
        ["instance", "volume", "fleet"]
            .iter()
            .map(|r| TagSpecification {
                resource_type: r.to_string(),
                tags: tags.clone(),
            })
            .collect()
    };

    let mut request = FleetRequest {
        client_token: String::new(),
        fleet_type: FleetType::Instant,
        target_capacity_specification: TargetCapacitySpecification {
            total_target_capacity: input.target_count,
            default_target_capacity_type: target_type,
        },
        spot_options,
        on_demand_options,
        launch_template_configs: configs,
        tag_specifications,
    };
    // Serializing plain structs, vectors and BTreeMaps cannot fail; the
    // digest is of the request as sent, token aside.
    let digest = fnv1a64(&serde_json::to_vec(&request).unwrap_or_default());
    request.client_token = client_token(
        &input.cluster_name,
        &input.node_claim_name,
        input.attempt,
        digest,
    );
    Ok(request)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn offering(
        ty: &str,
        arch: &str,
        zone: &str,
        ct: CapacityType,
        price: f64,
    ) -> CandidateOffering {
        CandidateOffering {
            instance_type: ty.into(),
            architecture: arch.into(),
            zone: zone.into(),
            capacity_type: ct,
            price,
            adjusted_price: price,
            reservation: None,
        }
    }

    pub(crate) fn input(offerings: Vec<CandidateOffering>) -> FleetInput {
        let mut lts = BTreeMap::new();
        lts.insert(TemplateKey::ami("ami-x86"), "flotilla/x86".to_string());
        lts.insert(TemplateKey::ami("ami-arm"), "flotilla/arm".to_string());
        FleetInput {
            cluster_name: "prod".into(),
            node_claim_name: "default-1".into(),
            attempt: 0,
            capacity_type: CapacityType::Spot,
            offerings,
            subnets: vec![
                Subnet {
                    id: "subnet-a1".into(),
                    zone: "us-east-1a".into(),
                    available_ips: 10,
                },
                Subnet {
                    id: "subnet-a2".into(),
                    zone: "us-east-1a".into(),
                    available_ips: 200,
                },
                Subnet {
                    id: "subnet-b1".into(),
                    zone: "us-east-1b".into(),
                    available_ips: 50,
                },
            ],
            amis: vec![
                Ami {
                    id: "ami-x86".into(),
                    architecture: "amd64".into(),
                },
                Ami {
                    id: "ami-x86-old".into(),
                    architecture: "amd64".into(),
                },
                Ami {
                    id: "ami-arm".into(),
                    architecture: "arm64".into(),
                },
            ],
            launch_templates: lts,
            overlay: false,
            target_count: 1,
            tags: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "default".to_string())]),
            excluded: Vec::new(),
            min_values: Vec::new(),
        }
    }

    fn types_of(r: &FleetRequest) -> Vec<String> {
        r.launch_template_configs
            .iter()
            .flat_map(|c| c.overrides.iter().map(|o| o.instance_type.clone()))
            .collect()
    }

    const SPOT: CapacityType = CapacityType::Spot;
    const OD: CapacityType = CapacityType::OnDemand;

    #[test]
    fn keeps_all_compatible_types_and_groups_by_ami() {
        let r = build_fleet_request(&input(vec![
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
            offering("m6g.large", "arm64", "us-east-1a", SPOT, 0.03),
            offering("c5.large", "amd64", "us-east-1a", SPOT, 0.035),
            offering("c6g.large", "arm64", "us-east-1a", SPOT, 0.05),
            offering("m5.large", "amd64", "us-east-1a", OD, 0.096),
        ]))
        .unwrap();
        assert_eq!(r.launch_template_configs.len(), 2);
        let arm = &r.launch_template_configs[0];
        assert_eq!(
            arm.launch_template_specification.launch_template_name,
            "flotilla/arm"
        );
        assert_eq!(arm.launch_template_specification.version, "$Latest");
        assert!(arm.overrides.iter().all(|o| o.image_id == "ami-arm"));
        let x86 = &r.launch_template_configs[1];
        // The first amd64 AMI wins over the older one.
        assert!(x86.overrides.iter().all(|o| o.image_id == "ami-x86"));
        let mut all = types_of(&r);
        all.sort();
        assert_eq!(all, ["c5.large", "c6g.large", "m5.large", "m6g.large"]);
    }

    #[test]
    fn orders_by_adjusted_price_then_name() {
        let mut cheap_after_overlay = offering("z9.large", "amd64", "us-east-1a", SPOT, 1.0);
        cheap_after_overlay.adjusted_price = 0.01;
        let r = build_fleet_request(&input(vec![
            offering("b.large", "amd64", "us-east-1a", SPOT, 0.1),
            offering("a.large", "amd64", "us-east-1a", SPOT, 0.1),
            offering("c.large", "amd64", "us-east-1a", SPOT, 0.05),
            cheap_after_overlay,
        ]))
        .unwrap();
        assert_eq!(types_of(&r), ["z9.large", "c.large", "a.large", "b.large"]);
    }

    #[test]
    fn truncates_to_sixty_types_after_sorting() {
        // Names sort opposite to prices: truncating before sorting would
        // keep the most expensive types.
        let offerings: Vec<_> = (0..70)
            .map(|i| {
                offering(
                    &format!("t{i:02}.large"),
                    "amd64",
                    "us-east-1a",
                    SPOT,
                    1.0 - i as f64 / 100.0,
                )
            })
            .collect();
        let r = build_fleet_request(&input(offerings)).unwrap();
        let types = types_of(&r);
        assert_eq!(types.len(), MAX_INSTANCE_TYPES);
        assert_eq!(types[0], "t69.large");
        assert_eq!(types[59], "t10.large");
        assert!(!types.contains(&"t00.large".to_string()));
    }

    /// 70 spot types in us-east-1a, cheapest first by number; `t00`-`t59`
    /// of family `a`, the rest of families `b` (even) and `c` (odd).
    fn seventy_with_families() -> (Vec<CandidateOffering>, BTreeMap<String, Vec<String>>) {
        let mut offerings = Vec::new();
        let mut family = BTreeMap::new();
        for i in 0..70 {
            let name = format!("t{i:02}.large");
            let f = match i {
                0..=59 => "a",
                _ if i % 2 == 0 => "b",
                _ => "c",
            };
            family.insert(name.clone(), vec![f.to_string()]);
            offerings.push(offering(
                &name,
                "amd64",
                "us-east-1a",
                SPOT,
                1.0 + i as f64 / 100.0,
            ));
        }
        (offerings, family)
    }

    #[test]
    fn truncation_keeps_min_values() {
        // (key, minValues, Ok(types that must be in) | Err(error text)).
        type Case<'a> = (&'a str, u32, Result<Vec<&'a str>, &'a str>);
        let cases: Vec<Case> = vec![
            // The cheapest 60 are all family a: t60 (b) and t61 (c) take
            // the places of the two dearest a types.
            ("family", 3, Ok(vec!["t00.large", "t57.large", "t60.large", "t61.large"])),
            ("family", 1, Ok(vec!["t00.large", "t59.large"])),
            ("family", 4, Err("minValues requirement is not met for family: 4 values needed, the instance types offer 3")),
            // Only one zone is offered.
            (crate::labels::ZONE, 2, Err("minValues requirement is not met for topology.kubernetes.io/zone")),
        ];
        for (key, min, want) in cases {
            let (offerings, family) = seventy_with_families();
            let mut i = input(offerings);
            i.min_values = vec![MinValuesFloor {
                key: key.into(),
                min,
                values: if key == "family" {
                    family
                } else {
                    BTreeMap::new()
                },
            }];
            match (build_fleet_request(&i), want) {
                (Ok(r), Ok(must)) => {
                    let types = types_of(&r);
                    assert_eq!(types.len(), MAX_INSTANCE_TYPES, "{key} {min}");
                    for t in must {
                        assert!(types.contains(&t.to_string()), "{key} {min}: {t} missing");
                    }
                }
                (Err(e), Err(text)) => assert!(e.to_string().contains(text), "{key} {min}: {e}"),
                (got, want) => panic!("{key} {min}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn one_override_per_type_and_zone_with_the_roomiest_subnet() {
        let r = build_fleet_request(&input(vec![
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
            offering("m5.large", "amd64", "us-east-1b", SPOT, 0.05),
            offering("m5.large", "amd64", "us-east-1c", SPOT, 0.01), // no subnet
        ]))
        .unwrap();
        let o = &r.launch_template_configs[0].overrides;
        assert_eq!(o.len(), 2);
        assert_eq!(
            (o[0].availability_zone.as_str(), o[0].subnet_id.as_str()),
            ("us-east-1a", "subnet-a2")
        );
        assert_eq!(
            (o[1].availability_zone.as_str(), o[1].subnet_id.as_str()),
            ("us-east-1b", "subnet-b1")
        );
    }

    #[test]
    fn strategies_without_overlay_and_no_priority() {
        let offs = vec![
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
            offering("m5.large", "amd64", "us-east-1a", OD, 0.096),
        ];
        let spot = build_fleet_request(&input(offs.clone())).unwrap();
        assert_eq!(
            spot.spot_options.as_ref().unwrap().allocation_strategy,
            SpotAllocationStrategy::PriceCapacityOptimized
        );
        assert!(spot.on_demand_options.is_none());
        assert_eq!(
            spot.target_capacity_specification
                .default_target_capacity_type,
            TargetCapacityType::Spot
        );
        let json = serde_json::to_value(&spot).unwrap();
        assert_eq!(json["Type"], "instant");
        assert_eq!(
            json["SpotOptions"]["AllocationStrategy"],
            "price-capacity-optimized"
        );
        assert_eq!(
            json["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
            "spot"
        );
        assert_eq!(
            json["TargetCapacitySpecification"]["TotalTargetCapacity"],
            1
        );
        assert!(json["LaunchTemplateConfigs"][0]["Overrides"][0]
            .get("Priority")
            .is_none());
        assert_eq!(json["TagSpecifications"][0]["ResourceType"], "instance");

        let mut i = input(offs);
        i.capacity_type = OD;
        let od = build_fleet_request(&i).unwrap();
        assert!(od.spot_options.is_none());
        let json = serde_json::to_value(&od).unwrap();
        assert_eq!(
            json["OnDemandOptions"]["AllocationStrategy"],
            "lowest-price"
        );
        assert!(json["OnDemandOptions"]
            .get("CapacityReservationOptions")
            .is_none());
        assert_eq!(types_of(&od), ["m5.large"]);
        assert!(od.launch_template_configs[0]
            .overrides
            .iter()
            .all(|o| o.priority.is_none()));
    }

    #[test]
    fn overlay_sets_prioritized_strategies_and_priority_on_every_override() {
        let mut arm = offering("m8g.24xlarge", "arm64", "us-east-1a", SPOT, 1.27);
        arm.adjusted_price = 0.635;
        let mut arm_od = arm.clone();
        arm_od.capacity_type = OD;
        let mut i = input(vec![
            arm,
            arm_od,
            offering("m7i.12xlarge", "amd64", "us-east-1a", SPOT, 0.78),
            offering("m7i.12xlarge", "amd64", "us-east-1b", SPOT, 0.79),
            offering("m7i.12xlarge", "amd64", "us-east-1a", OD, 2.0),
        ]);
        i.overlay = true;
        let r = build_fleet_request(&i).unwrap();
        assert_eq!(
            r.spot_options.as_ref().unwrap().allocation_strategy,
            SpotAllocationStrategy::CapacityOptimizedPrioritized
        );
        let prios: Vec<_> = r
            .launch_template_configs
            .iter()
            .flat_map(|c| c.overrides.iter().map(|o| o.priority))
            .collect();
        assert_eq!(prios, [Some(0.635), Some(0.78), Some(0.79)]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["SpotOptions"]["AllocationStrategy"],
            "capacity-optimized-prioritized"
        );
        assert_eq!(
            json["LaunchTemplateConfigs"][0]["Overrides"][0]["Priority"],
            0.635
        );

        i.capacity_type = OD;
        let od = build_fleet_request(&i).unwrap();
        assert_eq!(
            od.on_demand_options.as_ref().unwrap().allocation_strategy,
            OnDemandAllocationStrategy::Prioritized
        );
        assert!(od
            .launch_template_configs
            .iter()
            .flat_map(|c| &c.overrides)
            .all(|o| o.priority.is_some()));
    }

    fn reserved(
        ty: &str,
        zone: &str,
        id: &str,
        kind: ReservationType,
        price: f64,
    ) -> CandidateOffering {
        let mut o = offering(ty, "amd64", zone, CapacityType::Reserved, price);
        o.reservation = Some(ReservationRef {
            id: id.into(),
            reservation_type: kind,
        });
        o
    }

    #[test]
    fn odcr_launches_on_demand_into_the_reservation() {
        let mut i = input(vec![
            reserved(
                "m5.large",
                "us-east-1a",
                "cr-1",
                ReservationType::Default,
                0.0,
            ),
            reserved(
                "m5.xlarge",
                "us-east-1b",
                "cr-2",
                ReservationType::Default,
                0.0,
            ),
            reserved(
                "p5.48xlarge",
                "us-east-1a",
                "cr-blk",
                ReservationType::CapacityBlock,
                1.0,
            ),
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
        ]);
        i.capacity_type = CapacityType::Reserved;
        for id in ["cr-1", "cr-2", "cr-blk"] {
            i.launch_templates.insert(
                TemplateKey {
                    ami_id: "ami-x86".into(),
                    reservation_id: Some(id.into()),
                },
                format!("flotilla/{id}"),
            );
        }
        let r = build_fleet_request(&i).unwrap();
        assert_eq!(
            r.target_capacity_specification.default_target_capacity_type,
            TargetCapacityType::OnDemand
        );
        let od = r.on_demand_options.as_ref().unwrap();
        assert_eq!(
            od.allocation_strategy,
            OnDemandAllocationStrategy::LowestPrice
        );
        assert_eq!(
            od.capacity_reservation_options
                .as_ref()
                .unwrap()
                .usage_strategy,
            CapacityReservationUsageStrategy::UseCapacityReservationsFirst
        );
        assert!(r.spot_options.is_none());
        // One template per reservation; capacity blocks are not mixed in.
        let names: Vec<_> = r
            .launch_template_configs
            .iter()
            .map(|c| {
                c.launch_template_specification
                    .launch_template_name
                    .as_str()
            })
            .collect();
        assert_eq!(names, ["flotilla/cr-1", "flotilla/cr-2"]);
        assert_eq!(
            r.launch_template_configs[0]
                .capacity_reservation
                .as_ref()
                .unwrap()
                .id,
            "cr-1"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["OnDemandOptions"]["CapacityReservationOptions"]["UsageStrategy"],
            "use-capacity-reservations-first"
        );
    }

    #[test]
    fn capacity_block_uses_the_capacity_block_target_type() {
        let mut i = input(vec![reserved(
            "p5.48xlarge",
            "us-east-1a",
            "cr-blk",
            ReservationType::CapacityBlock,
            1.0,
        )]);
        i.capacity_type = CapacityType::Reserved;
        i.launch_templates.insert(
            TemplateKey {
                ami_id: "ami-x86".into(),
                reservation_id: Some("cr-blk".into()),
            },
            "flotilla/blk".into(),
        );
        let r = build_fleet_request(&i).unwrap();
        assert_eq!(
            r.target_capacity_specification.default_target_capacity_type,
            TargetCapacityType::CapacityBlock
        );
        assert!(r.on_demand_options.is_none() && r.spot_options.is_none());
        assert_eq!(
            r.launch_template_configs[0]
                .capacity_reservation
                .as_ref()
                .unwrap()
                .reservation_type,
            ReservationType::CapacityBlock
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
            "capacity-block"
        );
    }

    #[test]
    fn errors_name_what_is_missing() {
        let mut i = input(vec![offering("m5.large", "amd64", "us-east-1a", OD, 0.1)]);
        let e = build_fleet_request(&i).unwrap_err();
        assert!(matches!(e, LaunchError::NoOfferings { .. }));
        assert!(
            e.to_string().contains("spot") && e.to_string().contains("default-1"),
            "{e}"
        );

        i.offerings = vec![offering("m5.large", "amd64", "us-east-1d", SPOT, 0.1)];
        let e = build_fleet_request(&i).unwrap_err();
        assert!(e.to_string().contains("us-east-1d"), "{e}");
        assert!(matches!(e, LaunchError::NoSubnetInOfferingZones { .. }));

        i.offerings = vec![offering("x.large", "riscv64", "us-east-1a", SPOT, 0.1)];
        let e = build_fleet_request(&i).unwrap_err();
        assert!(e.to_string().contains("riscv64"), "{e}");

        i.offerings = vec![offering("m5.large", "amd64", "us-east-1a", SPOT, 0.1)];
        i.launch_templates.clear();
        let e = build_fleet_request(&i).unwrap_err();
        assert!(e.to_string().contains("ami-x86"), "{e}");

        i.target_count = 0;
        assert_eq!(
            build_fleet_request(&i).unwrap_err(),
            LaunchError::ZeroTargetCapacity
        );
    }

    #[test]
    fn the_same_attempt_with_another_request_gets_another_token() {
        let both = vec![
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
            offering("m5.large", "amd64", "us-east-1b", SPOT, 0.05),
        ];
        let token =
            |offs: Vec<CandidateOffering>| build_fleet_request(&input(offs)).unwrap().client_token;
        assert_eq!(token(both.clone()), token(both.clone()));
        // A takeover's attempt 0 after us-east-1a went into the ICE cache.
        assert_ne!(token(both.clone()), token(both[1..].to_vec()));
    }

    #[test]
    fn client_token_is_stable_short_and_per_attempt_and_request() {
        let a = client_token("prod", "default-1", 0, 7);
        assert_eq!(a, client_token("prod", "default-1", 0, 7));
        assert!(a.len() <= 64);
        assert_ne!(a, client_token("prod", "default-1", 1, 7));
        assert_ne!(a, client_token("prod", "default-2", 0, 7));
        assert_ne!(a, client_token("prod", "default-1", 0, 8));
        assert_ne!(
            client_token("a", "b/c", 0, 7),
            client_token("a/b", "c", 0, 7)
        );
    }
}
