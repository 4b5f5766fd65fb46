//! The plan output: planned NodeClaims, existing nodes' new pods,
//! unschedulable pods and reservation use, written out from a finished run.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::CapacityType;
use crate::labels;
use crate::model::Pod;
use crate::requirements::Requirements;
use crate::resources::Resources;

use super::index::{PodIdx, PoolIdx};
use super::pools::{OfferingFilter, Pool, PoolOffering};
use super::typeset::TypeSet;
use crate::catalog::ebs;
use crate::plan::{
    ExistingNodePlan, NodeClaimPlan, NodeClaimResources, Plan, Price, Summary, Unschedulable,
};

use super::explain::Unplaced;
use super::nodeclaim::{daemon_holds_any, Claim};
use super::Run;

/// What a NodeClaim's offerings come to (ranked types, capacity types,
/// zones, the offering a fleet would prefer), shared between NodeClaims of
/// the output with the same NodePool, requirements (hostname aside),
/// reservation and types: computing it walks every offering of every type,
/// and thousands of NodeClaims share a handful of answers.
pub(super) struct OfferSummary {
    pub(super) instance_types: std::sync::Arc<Vec<String>>,
    pub(super) capacity_types: Vec<CapacityType>,
    pub(super) zones: Vec<String>,
    /// (type, offering) a fleet would prefer.
    pub(super) preferred: Option<(usize, usize)>,
}

pub(super) type OfferKey = (PoolIdx, Option<u32>, Requirements, TypeSet);

#[derive(Default)]
pub(super) struct TypeLists(foldhash::HashMap<OfferKey, std::rc::Rc<OfferSummary>>);

/// The order in which a fleet prefers offerings: reserved, then spot, then
/// on-demand; cheapest adjusted price within a capacity type; then real
/// price, type name and zone for a total order.
pub(super) fn offering_order(
    pool: &Pool,
    (ta, a): (usize, &PoolOffering),
    (tb, b): (usize, &PoolOffering),
) -> std::cmp::Ordering {
    a.capacity_type
        .cmp(&b.capacity_type)
        .then(a.adjusted.total_cmp(&b.adjusted))
        .then(a.price.total_cmp(&b.price))
        .then_with(|| pool.types[ta].name.cmp(&pool.types[tb].name))
        .then_with(|| a.zone.cmp(&b.zone))
}

/// The offer summary of `claim`, computed once per NodePool, requirements
/// the offering filter reads (`OfferingFilter::READS`), reservation and
/// types and shared through `lists`.
pub(super) fn offer_summary(
    claim: &Claim,
    pool: &Pool,
    lists: &mut TypeLists,
) -> std::rc::Rc<OfferSummary> {
    let key_reqs = OfferingFilter::read_requirements(&claim.requirements);
    let key = (claim.pool, claim.reservation, key_reqs, claim.types.clone());
    if let Some(hit) = lists.0.get(&key) {
        return hit.clone();
    }
    let filter = pool.filter(&key.2).holding(claim.reservation);
    let summary = std::rc::Rc::new(summarize_offerings(pool, &claim.types, &filter));
    lists.0.insert(key, summary.clone());
    summary
}

/// One pass over the offerings `filter` allows of every type of `types`:
/// each type's cheapest adjusted price (for the ranking), the zones and
/// capacity types (as bit sets), and the offering a fleet would prefer.
fn summarize_offerings(pool: &Pool, types: &TypeSet, filter: &OfferingFilter) -> OfferSummary {
    let mut ranked: Vec<(f64, &str, usize)> = Vec::with_capacity(types.len());
    let mut zone_bits = 0u64;
    let mut odd_zones: BTreeSet<&str> = BTreeSet::new();
    // The capacity types offered, as bits (`CapacityType::bit`).
    let mut capacity_types = 0u8;
    let mut preferred: Option<(usize, usize)> = None;
    for t in types.iter() {
        let ty = &pool.types[t];
        let mut cheapest = f64::INFINITY;
        for (oi, o) in ty.offerings.iter().enumerate() {
            if !filter.allows(o) {
                continue;
            }
            cheapest = cheapest.min(o.adjusted);
            capacity_types |= o.capacity_type.bit();
            if o.zone_bit != 0 {
                zone_bits |= o.zone_bit;
            } else {
                odd_zones.insert(&o.zone);
            }
            if preferred.is_none_or(|(pt, po)| {
                offering_order(pool, (t, o), (pt, &pool.types[pt].offerings[po])).is_lt()
            }) {
                preferred = Some((t, oi));
            }
        }
        if cheapest.is_finite() {
            ranked.push((cheapest, ty.name.as_str(), t));
        }
    }
    let order = |a: &(f64, &str, usize), b: &(f64, &str, usize)| {
        a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1))
    };
    // Types are in price order: the ranking usually is already.
    if !ranked.is_sorted_by(|a, b| order(a, b).is_le()) {
        ranked.sort_by(order);
    }
    OfferSummary {
        instance_types: std::sync::Arc::new(ranked.iter().map(|r| r.1.to_string()).collect()),
        capacity_types: (CapacityType::ALL.into_iter())
            .filter(|&c| capacity_types & c.bit() != 0)
            .collect(),
        zones: offered_zones(pool, zone_bits, odd_zones),
        preferred,
    }
}

/// The zones of a NodePool's offerings, sorted: those in `zone_bits` (the
/// NodePool's first 64 zones) and `odd_zones` (the others).
fn offered_zones(pool: &Pool, zone_bits: u64, odd_zones: BTreeSet<&str>) -> Vec<String> {
    let mut zones: BTreeSet<&str> = pool
        .zones
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && zone_bits & (1u64 << i) != 0)
        .map(|(_, z)| z.as_str())
        .collect();
    zones.extend(odd_zones);
    zones.into_iter().map(str::to_string).collect()
}

/// The plan's view of one planned NodeClaim: its offering summary,
/// price, labels, requirements and pods.
pub(super) fn claim_plan(
    claim: &Claim,
    pool: &Pool,
    pods: &[Pod],
    lists: &mut TypeLists,
) -> NodeClaimPlan {
    let summary = offer_summary(claim, pool, lists);
    let (price, allocatable) = preferred_offering(pool, summary.preferred);
    let mut out_reqs = claim.requirements.clone();
    out_reqs.remove(labels::HOSTNAME);
    let node_labels = node_labels(claim, pool, &out_reqs);
    let mut pod_keys: Vec<String> = claim.pods.iter().map(|&p| pods[p].key()).collect();
    pod_keys.sort();
    NodeClaimPlan {
        name: claim.name.clone(),
        node_pool: pool.np.name.clone(),
        instance_types: summary.instance_types.clone(),
        capacity_types: summary.capacity_types.clone(),
        zones: summary.zones.clone(),
        requirements: wire_requirements(&out_reqs, &claim.min_values),
        labels: node_labels,
        taints: pool.np.taints.clone(),
        startup_taints: pool.np.startup_taints.clone(),
        annotations: claim_annotations(claim, pool),
        resources: NodeClaimResources {
            requests: claim.requests.clone(),
            allocatable,
        },
        pods: pod_keys,
        price,
        volume_price: (pool.volume_price * 1e6).round() / 1e6,
    }
}

/// The price and allocatable of the preferred offering (type, offering
/// index), or zeros when there is none.
fn preferred_offering(pool: &Pool, preferred: Option<(usize, usize)>) -> (Price, Resources) {
    match preferred {
        Some((t, oi)) => {
            let o = &pool.types[t].offerings[oi];
            (
                Price {
                    min: o.price,
                    instance_type: pool.types[t].name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                },
                pool.types[t].allocatable.clone(),
            )
        }
        None => (
            Price {
                min: 0.0,
                instance_type: String::new(),
                zone: String::new(),
                capacity_type: CapacityType::OnDemand,
            },
            Resources::new(),
        ),
    }
}

/// The NodeClaim's labels: the NodePool's, its single-valued requirements,
/// the NodePool name, and a value for every custom key.
fn node_labels(claim: &Claim, pool: &Pool, out_reqs: &Requirements) -> BTreeMap<String, String> {
    let mut node_labels = pool.np.labels.clone();
    for (k, v) in out_reqs.single_valued_labels() {
        node_labels.insert(k, v);
    }
    node_labels.insert(labels::NODEPOOL.into(), pool.np.name.clone());
    // Every custom key gets a value, as Karpenter's `Requirements.Labels()`
    // gives one (`Any()`): an `In` key its smallest value, a bounded key
    // (Gt/Lt) the smallest integer in range, an `Exists`/`NotIn` key a value
    // derived from the NodeClaim's name (Karpenter draws a random integer).
    for r in out_reqs.iter() {
        if labels::is_well_known(&r.key)
            || labels::is_restricted_for_nodepool(&r.key)
            || node_labels.contains_key(&r.key)
        {
            continue;
        }
        let value = r.any().or_else(|| {
            matches!(
                r.operator(),
                crate::Operator::Exists | crate::Operator::NotIn
            )
            .then(|| claim.name.clone())
            .filter(|v| r.has(v))
        });
        if let Some(v) = value {
            node_labels.insert(r.key.clone(), v);
        }
    }
    node_labels
}

/// The NodeClaim's requirements in wire form, each `minValues` on its
/// key's first entry.
pub(super) fn wire_requirements(
    reqs: &Requirements,
    min_values: &BTreeMap<String, u32>,
) -> Vec<crate::requirements::NodeSelectorRequirement> {
    let mut out = reqs.to_wire();
    let mut seen = BTreeSet::new();
    for r in out.iter_mut() {
        if let Some(&m) = min_values.get(&r.key) {
            if seen.insert(r.key.clone()) {
                r.min_values = Some(m);
            }
        }
    }
    out
}

/// Karpenter's annotation of a NodeClaim whose `minValues` were relaxed.
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// The template's annotations, and whether `minValues` were relaxed (for a
/// NodePool with `minValues`).
pub(super) fn claim_annotations(claim: &Claim, pool: &Pool) -> BTreeMap<String, String> {
    let mut out = pool.np.annotations.clone();
    if !pool.np.min_values.is_empty() {
        out.insert(
            MIN_VALUES_RELAXED.into(),
            claim.min_values_relaxed.to_string(),
        );
    }
    out
}

impl Run<'_> {
    /// Under a new-node price limit (consolidation's splits), the types
    /// pool `claim` may become without that limit: every type compatible
    /// with its requirements that holds its pods and DaemonSets, without a
    /// DaemonSet on their host ports; `None` when that adds nothing, or
    /// the NodeClaim is in a reservation or its NodePool has limits (which
    /// charged it the types it had). The limit shapes the packing; the
    /// NodeClaim may still launch any type that holds what it packed, and
    /// the decision keeps those its saving allows (Karpenter's launch
    /// list is every type that fits, filtered by price).
    fn types_beyond_price_limit(&self, claim: &Claim) -> Option<TypeSet> {
        let pool = &self.pools[claim.pool];
        if self.price_limit.is_none() || claim.reservation.is_some() || pool.remaining.is_some() {
            return None;
        }
        let compatible = self.compatible_types(claim.pool, &claim.requirements);
        let all = TypeSet::from_indices(
            compatible.iter().copied().filter(|&t| {
                let ty = &pool.types[t];
                claim.requests.fits_in(&ty.allocatable) && !daemon_holds_any(&claim.host_ports, ty)
            }),
            pool.types.len(),
        );
        (all.len() > claim.types.len() && claim.types.iter().all(|t| all.contains(t)))
            .then_some(all)
    }

    pub(super) fn into_plan(
        mut self,
        failed: Vec<PodIdx>,
        errors: Vec<Option<Unplaced>>,
        warnings: Vec<String>,
    ) -> Plan {
        let pods = self.pods;
        let mut node_claims = Vec::with_capacity(self.claims.len());
        let (mut hourly, mut volumes) = (0.0, 0.0);
        let mut lists = TypeLists::default();
        // Each NodeClaim is dropped once written out: the plan and the
        // run's bookkeeping never both exist in full (peak memory).
        for claim in std::mem::take(&mut self.claims) {
            let pool = &self.pools[claim.pool];
            let mut plan = claim_plan(&claim, pool, pods, &mut lists);
            if let Some(all) = self.types_beyond_price_limit(&claim) {
                let filter = pool.filter(&claim.requirements).holding(claim.reservation);
                plan.instance_types = summarize_offerings(pool, &all, &filter).instance_types;
            }
            hourly += plan.price.min;
            volumes += plan.volume_price;
            node_claims.push(plan);
        }
        let existing_nodes = self.existing_plans();
        let unschedulable = unschedulable(pods, &failed, &errors);
        let scheduled = pods.len() - unschedulable.len();
        let reservations = self.res.uses();
        Plan {
            reservations,
            summary: Summary {
                pods: pods.len(),
                scheduled,
                node_claims: node_claims.len(),
                hourly_price: (hourly * 1e6).round() / 1e6,
                volume_hourly_price: (volumes * 1e6).round() / 1e6,
                total_hourly_price: (ebs::node_hourly(hourly, volumes) * 1e6).round() / 1e6,
            },
            node_claims,
            existing_nodes,
            unschedulable,
            warnings,
        }
    }

    /// The existing nodes that take pods, by name, each with its new pods.
    fn existing_plans(&self) -> Vec<ExistingNodePlan> {
        let pods = self.pods;
        let mut existing_nodes: Vec<ExistingNodePlan> = self
            .existing
            .iter()
            .filter(|e| !e.placed.is_empty())
            .map(|e| {
                let mut pods: Vec<String> = e.placed.iter().map(|&p| pods[p].key()).collect();
                pods.sort();
                ExistingNodePlan {
                    name: e.node.name.clone(),
                    pods,
                }
            })
            .collect();
        existing_nodes.sort_by(|a, b| a.name.cmp(&b.name));
        existing_nodes
    }
}

/// The pods of `failed` with their reasons, by pod.
fn unschedulable(
    pods: &[Pod],
    failed: &[PodIdx],
    errors: &[Option<Unplaced>],
) -> Vec<Unschedulable> {
    let mut unschedulable: Vec<Unschedulable> = failed
        .iter()
        .map(|&p| Unschedulable {
            pod: pods[p].key(),
            reason: errors[p]
                .as_ref()
                .map_or_else(|| "could not be placed".into(), ToString::to_string),
        })
        .collect();
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    unschedulable
}
