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
    pub(super) instance_types: crate::instance_type_names::InstanceTypeNames,
    pub(super) capacity_types: Vec<CapacityType>,
    pub(super) zones: Vec<String>,
    /// (type, offering) a fleet would prefer.
    pub(super) preferred: Option<(usize, usize)>,
}

/// The NodePool, reservation and requirements an offering filter reads
/// (see `OfferingFilter::read_requirements`).
pub(super) type FilterKey = (PoolIdx, Option<u32>, Requirements);

/// Offer summaries, per offering filter and then per type set.
#[derive(Default)]
pub(super) struct TypeLists(foldhash::HashMap<FilterKey, FilterOffers>);

/// What the offerings one filter allows come to, per type of a NodePool,
/// and the summaries of type sets made from them: a NodePool's types are
/// walked once per filter, not once per type set.
pub(super) struct FilterOffers {
    /// Indexed like `Pool::types`.
    types: Vec<TypeOffers>,
    /// The types with an allowed offering: cheapest adjusted price first,
    /// then by name.
    ranked: Vec<usize>,
    summaries: foldhash::HashMap<TypeSet, std::rc::Rc<OfferSummary>>,
}

/// One type's offerings that a filter allows.
struct TypeOffers {
    /// The cheapest adjusted price (infinite: none allowed).
    cheapest: f64,
    /// `CapacityType::bit`s.
    capacity_types: u8,
    zone_bits: u64,
    /// The allowed offerings in zones past the NodePool's first 64.
    odd_zones: Vec<usize>,
    /// The offering a fleet would prefer (`offering_order`).
    preferred: Option<usize>,
}

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
    offer_summary_of(claim, &claim.types, pool, lists)
}

/// The offer summary of types `types` under `claim`'s NodePool,
/// requirements and reservation.
fn offer_summary_of(
    claim: &Claim,
    types: &TypeSet,
    pool: &Pool,
    lists: &mut TypeLists,
) -> std::rc::Rc<OfferSummary> {
    let key_reqs = OfferingFilter::read_requirements(&claim.requirements);
    let offers = (lists.0)
        .entry((claim.pool, claim.reservation, key_reqs))
        .or_insert_with_key(|(_, reservation, reqs)| {
            FilterOffers::new(pool, &pool.filter(reqs).holding(*reservation))
        });
    if let Some(hit) = offers.summaries.get(types) {
        return hit.clone();
    }
    let summary = std::rc::Rc::new(offers.summarize(pool, types));
    offers.summaries.insert(types.clone(), summary.clone());
    summary
}

impl FilterOffers {
    /// One pass over the offerings `filter` allows of every type of `pool`.
    fn new(pool: &Pool, filter: &OfferingFilter) -> FilterOffers {
        let types: Vec<TypeOffers> = (0..pool.types.len())
            .map(|t| type_offers(pool, t, filter))
            .collect();
        let mut ranked: Vec<usize> = (0..types.len())
            .filter(|&t| types[t].cheapest.is_finite())
            .collect();
        let order = |&a: &usize, &b: &usize| {
            (types[a].cheapest.total_cmp(&types[b].cheapest))
                .then_with(|| pool.types[a].name.cmp(&pool.types[b].name))
        };
        // Types are in price order: the ranking usually is already.
        if !ranked.is_sorted_by(|a, b| order(a, b).is_le()) {
            ranked.sort_by(order);
        }
        FilterOffers {
            types,
            ranked,
            summaries: Default::default(),
        }
    }

    /// The summary of the types of `set`: ranked types, capacity types,
    /// zones and the offering a fleet would prefer.
    fn summarize(&self, pool: &Pool, set: &TypeSet) -> OfferSummary {
        let mut names = Vec::new();
        let (mut zone_bits, mut capacity_types) = (0u64, 0u8);
        let mut odd_zones: BTreeSet<&str> = BTreeSet::new();
        let mut preferred: Option<(usize, usize)> = None;
        for &t in self.ranked.iter().filter(|&&t| set.contains(t)) {
            let offers = &self.types[t];
            names.push(pool.types[t].name.clone());
            zone_bits |= offers.zone_bits;
            capacity_types |= offers.capacity_types;
            let offerings = &pool.types[t].offerings;
            odd_zones.extend(
                offers
                    .odd_zones
                    .iter()
                    .map(|&oi| offerings[oi].zone.as_str()),
            );
            let Some(oi) = offers.preferred else { continue };
            let o = &offerings[oi];
            if preferred.is_none_or(|(pt, po)| {
                offering_order(pool, (t, o), (pt, &pool.types[pt].offerings[po])).is_lt()
            }) {
                preferred = Some((t, oi));
            }
        }
        OfferSummary {
            instance_types: names.into(),
            capacity_types: (CapacityType::ALL.into_iter())
                .filter(|&c| capacity_types & c.bit() != 0)
                .collect(),
            zones: offered_zones(pool, zone_bits, odd_zones),
            preferred,
        }
    }
}

/// Type `t`'s offerings that `filter` allows (see [`TypeOffers`]).
fn type_offers(pool: &Pool, t: usize, filter: &OfferingFilter) -> TypeOffers {
    let offerings = &pool.types[t].offerings;
    let mut out = TypeOffers {
        cheapest: f64::INFINITY,
        capacity_types: 0,
        zone_bits: 0,
        odd_zones: Vec::new(),
        preferred: None,
    };
    for (oi, o) in offerings.iter().enumerate() {
        if !filter.allows(o) {
            continue;
        }
        out.cheapest = out.cheapest.min(o.adjusted);
        out.capacity_types |= o.capacity_type.bit();
        out.zone_bits |= o.zone_bit;
        if o.zone_bit == 0 {
            out.odd_zones.push(oi);
        }
        if out
            .preferred
            .is_none_or(|po| offering_order(pool, (t, o), (t, &offerings[po])).is_lt())
        {
            out.preferred = Some(oi);
        }
    }
    out
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
                plan.instance_types = offer_summary_of(&claim, &all, pool, &mut lists)
                    .instance_types
                    .clone();
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
