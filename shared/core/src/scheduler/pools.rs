//! Per-NodePool views of the catalog: the instance types a NodePool may
//! launch, with allocatable computed under its kubelet configuration,
//! offerings filtered by its requirements, prices adjusted by NodeOverlays,
//! daemonset overhead and remaining limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::allocatable;
use crate::catalog::{
    ebs, CapacityType, Catalog, CatalogEntry, InstanceTypeInfo, Offering, ReservationRef,
};
use crate::labels;
use crate::model::{
    untolerated, ClusterState, DaemonSet, NodeClass, NodeOverlay, NodePool, PriceAdjustment, Taint,
};
use crate::quantity::Quantity;
use crate::requirements::{Requirement, Requirements};
use crate::resources::{Compact, Resources};

use super::typefit::{TypeFitIndex, TypeMaximaIndex};
use super::typeset::TypeSet;

use super::SchedulerOptions;

/// `PoolOffering::res_index` of offerings outside reservations.
pub const NO_RESERVATION: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct PoolOffering {
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD/hour.
    pub price: f64,
    /// Price after NodeOverlay adjustment; used for ordering.
    pub adjusted: f64,
    pub available: u32,
    pub reservation: Option<ReservationRef>,
    /// Index of the reservation in `ClusterState::capacity_reservations`
    /// ([`NO_RESERVATION`] for spot and on-demand).
    pub res_index: u32,
    /// `1 << index` of the zone in the catalog's zone list (0 past 64 zones).
    pub zone_bit: u64,
}

#[derive(Debug, Clone)]
pub struct PoolType {
    pub name: String,
    /// Static type labels plus `zone In` / `capacity-type In` over its offerings.
    pub requirements: TypeRequirements,
    pub capacity: Resources,
    pub allocatable: Resources,
    pub offerings: Vec<PoolOffering>,
    /// Indices into `offerings` in the order a fleet prefers them (see
    /// [`preference_order`]).
    pub by_preference: Vec<u32>,
    /// Price of the offering a fleet would prefer (spot, then on-demand;
    /// cheapest within; reserved only for a type with nothing else), before
    /// any zone narrowing. Pool types are sorted by it, so a NodeClaim's
    /// first remaining type is its cheapest. (Reserved offerings are taken
    /// first regardless of price when a NodeClaim is created, see
    /// `Run::try_new`; a NodeClaim that is not in a reservation never uses
    /// one, so they do not count here.)
    pub price: f64,
    /// Whether any offering is `reserved`.
    pub has_reserved: bool,
    /// Host ports held by the DaemonSets that run on this type's nodes.
    pub daemon_ports: Vec<(String, i32)>,
    /// The zone bits of its spot and of its on-demand offerings (see
    /// [`PlainZones`]).
    pub plain_zones: PlainZones,
}

/// The indices of `offerings` by capacity type (reserved, spot,
/// on-demand), then price: the first a filter allows is the offering a
/// fleet would take among those (see `costrule::offered_price`).
pub(super) fn preference_order(offerings: &[PoolOffering]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..offerings.len() as u32).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&offerings[a as usize], &offerings[b as usize]);
        (a.capacity_type.cmp(&b.capacity_type)).then(a.price.total_cmp(&b.price))
    });
    order
}

/// A pool type's requirements: the catalog type's static labels, built
/// once per plan and shared by every NodePool that may launch the type,
/// and `zone In` / `capacity-type In` over the offerings this NodePool
/// allows (the static labels never name those two keys, so the two parts
/// hold disjoint keys and each key is answered by one of them).
#[derive(Debug, Clone, Default)]
pub struct TypeRequirements {
    fixed: Arc<Requirements>,
    offered: Requirements,
}

impl TypeRequirements {
    /// `fixed` (the type's static labels, without zone and capacity type)
    /// with `zone In` and `capacity-type In` over `offerings`.
    pub fn new(fixed: Arc<Requirements>, offerings: &[PoolOffering]) -> Self {
        debug_assert!(!fixed.has_key(labels::ZONE) && !fixed.has_key(labels::CAPACITY_TYPE));
        let mut offered = Requirements::new();
        offered.add(Requirement::in_values(
            labels::ZONE,
            offerings.iter().map(|o| o.zone.clone()),
        ));
        offered.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            offerings
                .iter()
                .map(|o| o.capacity_type.as_str().to_string()),
        ));
        TypeRequirements { fixed, offered }
    }

    /// The requirement on `key`.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.offered.get(key).or_else(|| self.fixed.get(key))
    }

    /// [`Requirements::intersects_ok`] of the whole set (key by key, so
    /// part by part).
    pub fn intersects_ok(&self, incoming: &Requirements) -> bool {
        self.fixed.intersects_ok(incoming) && self.offered.intersects_ok(incoming)
    }
}

/// A type's spot and on-demand offerings as zone bits, for the offering
/// check of the hot loops. Such offerings never run out during a plan
/// (only reserved ones do), so the bits hold for the whole plan.
#[derive(Debug, Clone, Default)]
pub struct PlainZones {
    /// Per capacity type (spot, on-demand), the zone bits of its offerings.
    bits: [u64; 2],
    /// Whether the bits are every offering: no reserved offering, none
    /// past the 64th zone, none unavailable.
    complete: bool,
}

impl PlainZones {
    pub fn of(offerings: &[PoolOffering]) -> Self {
        let mut z = PlainZones {
            bits: [0; 2],
            complete: true,
        };
        for o in offerings {
            let slot = match o.capacity_type {
                CapacityType::Spot => Some(0),
                CapacityType::OnDemand => Some(1),
                CapacityType::Reserved => None,
            };
            match slot {
                Some(i) if o.reservation.is_none() && o.available > 0 && o.zone_bit != 0 => {
                    z.bits[i] |= o.zone_bit
                }
                _ => z.complete = false,
            }
        }
        z
    }
}

impl PoolType {
    pub fn has_offering(&self, f: &OfferingFilter) -> bool {
        // An available spot or on-demand offering in a bit-mapped zone
        // passes exactly when its capacity type and zone do and the
        // requirements allow offerings outside reservations.
        if f.plain_ok {
            let [spot, on_demand] = self.plain_zones.bits;
            if (f.capacity_types & CapacityType::Spot.bit() != 0 && spot & f.zones != 0)
                || (f.capacity_types & CapacityType::OnDemand.bit() != 0
                    && on_demand & f.zones != 0)
            {
                return true;
            }
        }
        !self.plain_zones.complete && self.offerings.iter().any(|o| f.allows(o))
    }
}

fn reservation_type_str(t: crate::model::ReservationType) -> &'static str {
    crate::reservations::reservation_type_label(t)
}

/// The capacity types `reqs` allow, as bits (`CapacityType::bit`).
pub fn capacity_type_bits(reqs: &Requirements) -> u8 {
    (CapacityType::ALL.into_iter())
        .filter(|ct| reqs.allows(labels::CAPACITY_TYPE, ct.as_str()))
        .fold(0, |bits, ct| bits | ct.bit())
}

/// Requirements compiled for the offering checks of the hot loops: zones as
/// a bitmask, capacity types as bits; the map lookups happen once.
#[derive(Debug, Clone)]
pub struct OfferingFilter<'r> {
    zones: u64,
    zone_req: Option<&'r Requirement>,
    capacity_types: u8,
    reservation_id: Option<&'r Requirement>,
    reservation_type: Option<&'r Requirement>,
    /// Offerings outside reservations carry no reservation labels.
    plain_ok: bool,
    /// The reservation a NodeClaim already holds ([`NO_RESERVATION`]: none):
    /// its offering stays allowed after the reservation's last instance is
    /// taken (by this very NodeClaim or others), as Karpenter's
    /// `ReservationManager::CanReserve` lets a hostname keep what it holds.
    held: u32,
}

impl<'r> OfferingFilter<'r> {
    /// The requirement keys a filter reads (see `new`): requirements that
    /// agree on these filter the same.
    pub const READS: [&'static str; 4] = [
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::CAPACITY_RESERVATION_ID,
        labels::CAPACITY_RESERVATION_TYPE,
    ];

    /// The requirements of `reqs` on the keys a filter reads
    /// (`Self::READS`): a filter of them allows what one of `reqs` does.
    pub fn read_requirements(reqs: &Requirements) -> Requirements {
        Requirements::from_iter_reqs((Self::READS.iter()).filter_map(|k| reqs.get(k)).cloned())
    }

    pub fn new(reqs: &'r Requirements, zones: &[String]) -> Self {
        let zone_req = reqs.get(labels::ZONE);
        let mut mask = 0u64;
        for (i, z) in zones.iter().enumerate().take(64) {
            if zone_req.is_none_or(|r| r.has(z)) {
                mask |= 1 << i;
            }
        }
        let capacity_types = capacity_type_bits(reqs);
        let reservation_id = reqs.get(labels::CAPACITY_RESERVATION_ID);
        let reservation_type = reqs.get(labels::CAPACITY_RESERVATION_TYPE);
        let negative = |r: Option<&Requirement>| {
            r.is_none_or(|r| {
                matches!(
                    r.operator(),
                    crate::Operator::NotIn | crate::Operator::DoesNotExist
                )
            })
        };
        OfferingFilter {
            zones: mask,
            zone_req,
            capacity_types,
            reservation_id,
            reservation_type,
            plain_ok: negative(reservation_id) && negative(reservation_type),
            held: NO_RESERVATION,
        }
    }

    /// The zones it allows among the first 64 of the catalog's list, as
    /// bits (`PoolOffering::zone_bit`).
    pub fn zone_bits(&self) -> u64 {
        self.zones
    }

    /// The capacity types it allows, as bits (`CapacityType::bit`).
    pub fn capacity_types(&self) -> u8 {
        self.capacity_types
    }

    /// Whether only reserved offerings can pass (the requirements rule out
    /// spot and on-demand, or ask for a reservation id or type).
    pub fn reserved_only(&self) -> bool {
        !self.plain_ok || self.capacity_types & !CapacityType::Reserved.bit() == 0
    }

    /// The filter for a NodeClaim holding reservation `held`.
    pub fn holding(mut self, held: Option<u32>) -> Self {
        self.held = held.unwrap_or(NO_RESERVATION);
        self
    }

    #[inline]
    pub fn allows(&self, o: &PoolOffering) -> bool {
        if (o.available == 0 && (o.res_index != self.held || self.held == NO_RESERVATION))
            || self.capacity_types & o.capacity_type.bit() == 0
        {
            return false;
        }
        let zone_ok = if o.zone_bit != 0 {
            self.zones & o.zone_bit != 0
        } else {
            self.zone_req.is_none_or(|r| r.has(&o.zone))
        };
        if !zone_ok {
            return false;
        }
        match &o.reservation {
            None => self.plain_ok,
            Some(r) => {
                self.reservation_id.is_none_or(|q| q.has(&r.id))
                    && self
                        .reservation_type
                        .is_none_or(|q| q.has(reservation_type_str(r.reservation_type)))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Pool<'a> {
    pub np: &'a NodePool,
    /// NodePool requirements plus `karpenter.sh/nodepool In [name]`.
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    /// Shared with the [`PoolTemplate`]: copied only when a run changes
    /// an offering (a reservation runs out).
    pub types: Arc<Vec<PoolType>>,
    /// Per type, its allocatable as a [`Compact`] list (see
    /// [`Pool::type_holds`]); `None` where that would not decide a fit.
    pub compact_allocatable: Arc<Vec<Option<Compact>>>,
    /// The types holding a request, by resource (see [`TypeFitIndex`]).
    pub fit_index: Arc<TypeFitIndex>,
    /// A type set's largest allocatable and capacity (see
    /// [`TypeMaximaIndex`]).
    pub maxima_index: Arc<TypeMaximaIndex>,
    pub daemon_overhead: Resources,
    /// The least capacity of its types, resource by resource: a node
    /// charges at least this much against limits.
    pub capacity_floor: Resources,
    /// Whether a DaemonSet holds a host port on some of its types (see
    /// `PoolType::daemon_ports`).
    pub daemon_host_ports: bool,
    /// `limits - existing usage` per limited resource, if the pool has limits.
    pub remaining: Option<Limits>,
    /// The catalog's zones (bit positions of `PoolOffering::zone_bit`).
    pub zones: Vec<String>,
    /// Reservations its NodeClass selects and could use (indices into
    /// `ClusterState::capacity_reservations`), available or not; empty with
    /// the ReservedCapacity gate off.
    pub reservations: Vec<u32>,
    /// $/h of one node's EBS volumes (its node class's, see
    /// [`ebs::node_class_hourly`]); the same for every type of the pool.
    pub volume_price: f64,
}

impl Pool<'_> {
    pub fn filter<'r>(&self, reqs: &'r Requirements) -> OfferingFilter<'r> {
        OfferingFilter::new(reqs, &self.zones)
    }

    /// Whether a DaemonSet on some of its types may hold one of the host
    /// `ports` a pod asks for: only then is each type worth asking (see
    /// `PoolType::daemon_ports`).
    pub fn daemons_may_hold(&self, ports: &[(String, i32)]) -> bool {
        self.daemon_host_ports && !ports.is_empty()
    }

    /// Whether `requests` fit in type `t`'s allocatable; `compact` is
    /// `requests.compact_request()`, computed once by the caller for the
    /// types it tries (the hot loops over a NodeClaim's types).
    #[inline]
    pub fn type_holds(&self, t: usize, requests: &Resources, compact: Option<Compact>) -> bool {
        match (compact, self.compact_allocatable.get(t).copied().flatten()) {
            (Some(r), Some(a)) => r.fits_in(&a),
            _ => requests.fits_in(&self.types[t].allocatable),
        }
    }

    /// The first (cheapest) of `types` (and of `within`, if given) that
    /// holds `requests` (`compact` as in [`Self::type_holds`]).
    pub fn first_holding(
        &self,
        types: &TypeSet,
        within: Option<&TypeSet>,
        requests: &Resources,
        compact: Option<Compact>,
    ) -> Option<usize> {
        let holds = |t| self.type_holds(t, requests, compact);
        match compact {
            Some(c) => self.fit_index.first_holding(types, within, &c, holds),
            None => {
                let head = requests.compact_head();
                (self.fit_index).first_holding_beyond(types, within, (&head, requests), holds)
            }
        }
    }

    /// The types of `types` that hold `requests` (`compact` as in
    /// [`Self::type_holds`]).
    pub fn holding(
        &self,
        types: &TypeSet,
        requests: &Resources,
        compact: Option<Compact>,
    ) -> TypeSet {
        let holds = |t| self.type_holds(t, requests, compact);
        match compact {
            Some(c) => self.fit_index.holding(types, &c, holds),
            None => types.filter(holds),
        }
    }

    /// What a node of this pool costs per hour at instance price
    /// `offering`: the offering plus the node class's volumes. Every
    /// comparison of node prices in the scheduler goes through this.
    pub fn node_price(&self, offering: f64) -> f64 {
        ebs::node_hourly(offering, self.volume_price)
    }

    /// The NodePool's `flotilla.dev/consolidate-tolerance` (0: off).
    pub fn tolerance(&self) -> f64 {
        self.np.consolidate_tolerance
    }
}

/// True when every requirement is met by concrete `labels` (exact
/// Kubernetes node-affinity semantics: a missing label satisfies only
/// NotIn / DoesNotExist). Returns the first failing requirement.
pub fn labels_satisfy<'r>(
    labels: &BTreeMap<String, String>,
    reqs: &'r Requirements,
) -> Result<(), &'r Requirement> {
    for r in reqs.iter() {
        let ok = match labels.get(&r.key) {
            Some(v) => r.has(v),
            None => matches!(
                r.operator(),
                crate::Operator::NotIn | crate::Operator::DoesNotExist
            ),
        };
        if !ok {
            return Err(r);
        }
    }
    Ok(())
}

/// NodeOverlays heaviest first (ties by name): the order
/// [`overlay_adjusted_price`] reads them in.
pub fn overlays_by_weight(overlays: &[NodeOverlay]) -> Vec<&NodeOverlay> {
    let mut v: Vec<&NodeOverlay> = overlays.iter().collect();
    v.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    v
}

/// The NodeOverlay-adjusted price of an offering whose node would carry
/// `labels` (the type's well-known labels, the NodePool's labels, zone and
/// capacity type), `overlays` heaviest first ([`overlays_by_weight`]): the
/// heaviest matching overlay that sets `price` or `priceAdjustment` decides
/// (never below 0). `None` when no matching overlay sets a price. Used by
/// the scheduler's ordering and the launch stage's fleet priorities.
pub fn overlay_adjusted_price(
    overlays: &[&NodeOverlay],
    labels: &BTreeMap<String, String>,
    base: f64,
) -> Option<f64> {
    for o in overlays {
        if o.price.is_none() && o.price_adjustment.is_none() {
            continue;
        }
        if labels_satisfy(labels, &o.requirements).is_err() {
            continue;
        }
        if let Some(p) = o.price {
            return Some(p.max(0.0));
        }
        match o.price_adjustment {
            Some(PriceAdjustment::Percent(p)) => return Some((base * (1.0 + p / 100.0)).max(0.0)),
            Some(PriceAdjustment::Absolute(a)) => return Some((base + a).max(0.0)),
            None => {}
        }
    }
    None
}

/// Requests of the DaemonSet pods that would run on every node of a NodePool
/// with these taints and requirements: those that tolerate the taints and
/// whose node selector with one of their required node-affinity terms (OR'd)
/// is compatible (Karpenter's daemonset overhead, before instance types).
pub fn daemon_overhead(
    taints: &[Taint],
    requirements: &Requirements,
    daemon_sets: &[DaemonSet],
) -> Resources {
    let mut overhead = Resources::new();
    for ds in daemon_sets {
        if daemon_runs_on(ds, taints, requirements, None) {
            overhead.add_assign(&ds.pod.requests);
        }
    }
    overhead
}

/// Whether DaemonSet `ds` runs on a node of a NodePool with `taints` and
/// `requirements`, and, given, of an instance type with `type_reqs`
/// (Karpenter's `isDaemonPodCompatible`: each required term in turn; the
/// instance type only needs to intersect, custom keys being the pool's).
fn daemon_runs_on(
    ds: &DaemonSet,
    taints: &[Taint],
    requirements: &Requirements,
    type_reqs: Option<&TypeRequirements>,
) -> bool {
    if untolerated(taints, &ds.pod.tolerations).is_some() {
        return false;
    }
    let term_ok = |term: Option<&Requirements>| {
        let mut ds_reqs = ds.pod.node_selector.clone();
        if let Some(t) = term {
            ds_reqs.add_all(t);
        }
        // A DaemonSet pod's own hostname affinity (the controller pins each
        // pod to its node) says nothing about a new node, nor do the labels
        // Karpenter puts on every node of its own once it registers and
        // initializes (restricted labels, allowed undefined as in
        // Karpenter's `AllowUndefinedWellKnownAndRestrictedLabels`).
        ds_reqs.remove(labels::HOSTNAME);
        ds_reqs.remove("karpenter.sh/initialized");
        ds_reqs.remove("karpenter.sh/registered");
        requirements.compatible_ok(&ds_reqs) && type_reqs.is_none_or(|t| t.intersects_ok(&ds_reqs))
    };
    if ds.pod.required_terms.is_empty() {
        term_ok(None)
    } else {
        ds.pod.required_terms.iter().any(|t| term_ok(Some(t)))
    }
}

/// DaemonSet overhead per instance type (Karpenter groups instance types by
/// the DaemonSets that run on them): the pool's overhead is the smallest
/// (what every NodeClaim requests), and each type's allocatable loses what
/// its own DaemonSets take beyond that; each type also records the host
/// ports its DaemonSets hold.
fn apply_daemon_sets(
    types: &mut [PoolType],
    taints: &[Taint],
    requirements: &Requirements,
    daemon_sets: &[DaemonSet],
) -> Resources {
    let mut per_type = Vec::with_capacity(types.len());
    for t in types.iter_mut() {
        let mut overhead = Resources::new();
        for ds in daemon_sets {
            if daemon_runs_on(ds, taints, requirements, Some(&t.requirements)) {
                overhead.add_assign(&ds.pod.requests);
                t.daemon_ports.extend(ds.pod.host_ports.iter().cloned());
            }
        }
        per_type.push(overhead);
    }
    let min = Resources::min_of(&per_type);
    for (t, o) in types.iter_mut().zip(&per_type) {
        let extra = o.minus(&min);
        if !extra.is_zero() {
            t.allocatable = t.allocatable.minus(&extra);
        }
    }
    min
}

/// What a [`Pool`] takes from the cluster but its nodes: the NodePool's
/// instance types, offerings and DaemonSet overhead (every catalog type
/// looked at: the costly part), built once by [`prepare`] for any number
/// of plans of one cluster whose nodes and pods change.
#[derive(Debug, Clone)]
pub struct PoolTemplate {
    /// Index of the NodePool in `ClusterState::node_pools`, and its name.
    np: usize,
    name: String,
    requirements: Requirements,
    types: Arc<Vec<PoolType>>,
    compact_allocatable: Arc<Vec<Option<Compact>>>,
    fit_index: Arc<TypeFitIndex>,
    maxima_index: Arc<TypeMaximaIndex>,
    daemon_overhead: Resources,
    capacity_floor: Resources,
    daemon_host_ports: bool,
    zones: Vec<String>,
    reservations: Vec<u32>,
    volume_price: f64,
}

impl PoolTemplate {
    /// Its NodePool in `state`, if `state` has it where it was.
    fn node_pool<'a>(&self, state: &'a ClusterState) -> Option<&'a NodePool> {
        state
            .node_pools
            .get(self.np)
            .filter(|np| np.name == self.name)
    }
}

/// Whether `templates` were made (by [`prepare`]) from a state with the
/// NodePools of `state`.
pub fn templates_fit(state: &ClusterState, templates: &[PoolTemplate]) -> bool {
    templates.len()
        == state
            .node_pools
            .iter()
            .filter(|np| np.unavailable.is_none())
            .count()
        && templates.iter().all(|t| {
            t.node_pool(state)
                .is_some_and(|np| np.unavailable.is_none())
        })
}

/// The pools of `state` from `templates` (see [`templates_fit`]), with
/// the room its nodes leave under their limits; heaviest weight first
/// (ties by name).
pub fn build<'a>(state: &'a ClusterState, templates: &[PoolTemplate]) -> Vec<Pool<'a>> {
    templates
        .iter()
        .filter_map(|t| {
            let np = t.node_pool(state)?;
            Some(Pool {
                volume_price: t.volume_price,
                reservations: t.reservations.clone(),
                zones: t.zones.clone(),
                np,
                requirements: t.requirements.clone(),
                taints: np.taints.clone(),
                types: t.types.clone(),
                compact_allocatable: t.compact_allocatable.clone(),
                fit_index: t.fit_index.clone(),
                maxima_index: t.maxima_index.clone(),
                daemon_overhead: t.daemon_overhead.clone(),
                capacity_floor: t.capacity_floor.clone(),
                daemon_host_ports: t.daemon_host_ports,
                remaining: remaining(state, np),
            })
        })
        .collect()
}

/// `limits - existing usage` of NodePool `np`, if it has limits.
fn remaining(state: &ClusterState, np: &NodePool) -> Option<Limits> {
    np.limits.as_ref().map(|limits| {
        let mut used = Resources::new();
        for n in state
            .nodes
            .iter()
            .filter(|n| n.nodepool() == Some(np.name.as_str()))
        {
            used.add_assign(&n.allocatable);
            used.add_assign(&Limits::one_node());
        }
        Limits(
            limits
                .iter()
                .map(|(k, q)| (k.to_string(), q - used.get(k)))
                .collect(),
        )
    })
}

/// The pool templates of `state`, heaviest weight first (ties by name).
/// `available` is the number of instances each of
/// `state.capacity_reservations` may still take (see
/// `reservations::available`).
pub fn prepare(
    state: &ClusterState,
    catalog: &Catalog,
    opts: &SchedulerOptions,
    available: &[u32],
) -> Vec<PoolTemplate> {
    let nps = launching_node_pools(state);
    let overlays = overlays_by_weight(&state.overlays);
    let price_overlays = overlays
        .iter()
        .any(|o| o.price.is_some() || o.price_adjustment.is_some());
    let prep = Preparation {
        state,
        catalog,
        opts,
        available,
        overlays,
        price_overlays,
        statics: vec![std::cell::OnceCell::new(); catalog.entries.len()],
    };
    nps.into_iter()
        .map(|(np_index, np)| prep.template(np_index, np))
        .collect()
}

/// The NodePools that may launch (a NodePool being deleted or not ready
/// launches nothing) with their index, heaviest weight first (ties by
/// name).
fn launching_node_pools(state: &ClusterState) -> Vec<(usize, &NodePool)> {
    let mut nps: Vec<(usize, &NodePool)> = state
        .node_pools
        .iter()
        .enumerate()
        .filter(|(_, np)| np.unavailable.is_none())
        .collect();
    nps.sort_by(|(_, a), (_, b)| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    nps
}

/// What [`prepare`] builds every NodePool's template from.
struct Preparation<'a> {
    state: &'a ClusterState,
    catalog: &'a Catalog,
    opts: &'a SchedulerOptions,
    available: &'a [u32],
    /// NodeOverlays heaviest first ([`overlays_by_weight`]).
    overlays: Vec<&'a NodeOverlay>,
    /// Whether any NodeOverlay sets a price.
    price_overlays: bool,
    /// Per catalog entry, its static requirements
    /// ([`InstanceTypeInfo::requirements`]), built when a NodePool first
    /// looks at it and shared by every NodePool's type.
    statics: Vec<std::cell::OnceCell<Arc<Requirements>>>,
}

/// One NodePool as its instance types are looked at.
struct NodePoolScope<'a> {
    np: &'a NodePool,
    /// Its requirements plus `karpenter.sh/nodepool In [name]` (and no
    /// reserved capacity type with the ReservedCapacity gate off).
    requirements: Requirements,
    node_class: Option<&'a NodeClass>,
    /// Its NodeClass's root volume size.
    root_volume: Option<Quantity>,
    /// Reservations its NodeClass selects (see [`Pool::reservations`]).
    reservations: Vec<u32>,
    /// Its labels plus `karpenter.sh/nodepool`.
    labels: BTreeMap<String, String>,
}

impl<'a> Preparation<'a> {
    /// The template of NodePool `np` (`state.node_pools[np_index]`): every
    /// catalog type it may launch, cheapest first (ties by name), and its
    /// DaemonSet overhead.
    fn template(&self, np_index: usize, np: &'a NodePool) -> PoolTemplate {
        let pool = self.scope(np);
        let pool_filter = OfferingFilter::new(&pool.requirements, &self.catalog.zones);
        let mut types = Vec::new();
        for (i, entry) in self.catalog.entries.iter().enumerate() {
            if let Some(t) = self.pool_type(&pool, &pool_filter, i, entry) {
                types.push(t);
            }
        }

        types.sort_by(|a, b| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| a.name.cmp(&b.name))
        });

        let daemon_overhead = apply_daemon_sets(
            &mut types,
            &np.taints,
            &pool.requirements,
            &self.state.daemon_sets,
        );

        let compact_allocatable: Vec<Option<Compact>> = (types.iter())
            .map(|t| t.allocatable.compact_capacity())
            .collect();
        PoolTemplate {
            np: np_index,
            name: np.name.clone(),
            volume_price: ebs::node_class_hourly(&self.catalog.region, pool.node_class),
            reservations: pool.reservations,
            zones: self.catalog.zones.clone(),
            requirements: pool.requirements,
            fit_index: Arc::new(
                TypeFitIndex::new(&compact_allocatable)
                    .with_allocatables(&types.iter().map(|t| &t.allocatable).collect::<Vec<_>>()),
            ),
            maxima_index: Arc::new(TypeMaximaIndex::new(&types)),
            capacity_floor: Resources::min_of(types.iter().map(|t| &t.capacity)),
            daemon_host_ports: types.iter().any(|t| !t.daemon_ports.is_empty()),
            compact_allocatable: Arc::new(compact_allocatable),
            types: Arc::new(types),
            daemon_overhead,
        }
    }

    /// NodePool `np`'s requirements, NodeClass, reservations and labels.
    fn scope(&self, np: &'a NodePool) -> NodePoolScope<'a> {
        let mut requirements = np.requirements.clone();
        requirements.add(Requirement::in_values(labels::NODEPOOL, [np.name.as_str()]));
        if !self.opts.reserved_capacity {
            requirements.add(Requirement::not_in(
                labels::CAPACITY_TYPE,
                [labels::CAPACITY_TYPE_RESERVED],
            ));
        }
        let node_class = np
            .node_class
            .as_ref()
            .and_then(|n| self.state.node_classes.iter().find(|c| &c.name == n));
        let mut pool_labels = np.labels.clone();
        pool_labels.insert(labels::NODEPOOL.to_string(), np.name.clone());
        NodePoolScope {
            np,
            requirements,
            node_class,
            root_volume: node_class.and_then(|c| c.root_volume_size),
            reservations: self.selected_reservations(node_class),
            labels: pool_labels,
        }
    }

    /// Reservations `node_class` selects (terms were validated when the
    /// inputs were read; a malformed one selects nothing); none with the
    /// ReservedCapacity gate off.
    fn selected_reservations(&self, node_class: Option<&NodeClass>) -> Vec<u32> {
        match node_class {
            Some(nc) if self.opts.reserved_capacity => {
                let terms = crate::reservations::selector_terms(nc).unwrap_or_default();
                crate::reservations::select(
                    nc,
                    &terms,
                    &self.state.capacity_reservations,
                    self.catalog,
                    self.opts.now,
                )
                .into_iter()
                .map(|i| i as u32)
                .collect()
            }
            _ => vec![],
        }
    }

    /// Catalog type `entry` (the `index`th) as `pool` may launch it: the
    /// offerings its filter (`pool_filter`) allows, priced by the
    /// NodeOverlays, and its capacity and allocatable under the NodePool's
    /// kubelet configuration; `None` when the requirements rule it out or
    /// no offering is left.
    fn pool_type(
        &self,
        pool: &NodePoolScope,
        pool_filter: &OfferingFilter,
        index: usize,
        entry: &CatalogEntry,
    ) -> Option<PoolType> {
        let info = &entry.info;
        let static_reqs = self.statics[index].get_or_init(|| Arc::new(info.requirements()));
        if !pool.requirements.intersects_ok(static_reqs) {
            return None;
        }
        let type_labels = self.overlay_labels(info, &pool.labels);
        let offerings = self.offerings(pool, pool_filter, entry, &type_labels);
        if offerings.is_empty() {
            return None;
        }
        let nr = allocatable::compute(
            info,
            &pool.np.kubelet,
            pool.root_volume,
            self.opts.vm_memory_overhead,
        );
        let (mut capacity, mut alloc) = (nr.capacity, nr.allocatable);
        self.overlay_capacity(&type_labels, &mut capacity, &mut alloc);
        let reqs = TypeRequirements::new(static_reqs.clone(), &offerings);
        let has_reserved = offerings
            .iter()
            .any(|o| o.capacity_type == CapacityType::Reserved);
        let price = preferred_price(&offerings, has_reserved);
        Some(PoolType {
            name: info.name.clone(),
            requirements: reqs,
            capacity,
            allocatable: alloc,
            plain_zones: PlainZones::of(&offerings),
            by_preference: preference_order(&offerings),
            offerings,
            price,
            has_reserved,
            daemon_ports: Vec::new(),
        })
    }

    /// The labels NodeOverlays select on for type `info` in a NodePool with
    /// `pool_labels`: the type's well-known labels and the NodePool's (only
    /// built when some overlay could match).
    fn overlay_labels(
        &self,
        info: &InstanceTypeInfo,
        pool_labels: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        if self.overlays.is_empty() {
            BTreeMap::new()
        } else {
            info.label_values()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .chain(pool_labels.iter().map(|(k, v)| (k.clone(), v.clone())))
                .collect()
        }
    }

    /// The offerings of `entry`, the catalog's then those of `pool`'s
    /// reservations, that are not marked unavailable and that `pool_filter`
    /// allows, with their NodeOverlay-adjusted prices.
    fn offerings(
        &self,
        pool: &NodePoolScope,
        pool_filter: &OfferingFilter,
        entry: &CatalogEntry,
        type_labels: &BTreeMap<String, String>,
    ) -> Vec<PoolOffering> {
        let info = &entry.info;
        let mut offerings = Vec::new();
        let reserved: Vec<(u32, Offering)> = pool
            .reservations
            .iter()
            .map(|&i| (i, &self.state.capacity_reservations[i as usize]))
            .filter(|(_, r)| r.instance_type == info.name)
            .map(|(i, r)| {
                (
                    i,
                    crate::reservations::offering(r, self.catalog, self.available[i as usize]),
                )
            })
            .collect();
        let all = entry
            .offerings
            .iter()
            .map(|o| (NO_RESERVATION, o))
            .chain(reserved.iter().map(|(i, o)| (*i, o)));
        // The ICE cache is usually empty: no key is built to ask it then.
        let ice = !self.opts.unavailable.is_empty();
        for (res_index, o) in all {
            if ice
                && self.opts.unavailable.contains(&(
                    info.name.clone(),
                    o.zone.clone(),
                    o.capacity_type,
                ))
            {
                continue;
            }
            let po = pool_offering(o, res_index, &self.catalog.zones);
            if !pool_filter.allows(&po) {
                continue;
            }
            let adjusted = self.adjusted_price(type_labels, o);
            offerings.push(PoolOffering { adjusted, ..po });
        }
        offerings
    }

    /// Offering `o`'s price as the NodeOverlays adjust it for a node with
    /// `type_labels` in the offering's zone and capacity type.
    fn adjusted_price(&self, type_labels: &BTreeMap<String, String>, o: &Offering) -> f64 {
        if self.price_overlays {
            let mut ol = type_labels.clone();
            ol.insert(labels::ZONE.into(), o.zone.clone());
            ol.insert(
                labels::CAPACITY_TYPE.into(),
                o.capacity_type.as_str().into(),
            );
            overlay_adjusted_price(&self.overlays, &ol, o.price).unwrap_or(o.price)
        } else {
            o.price
        }
    }

    /// Capacity overlays (e.g. hugepages) matching `type_labels` set
    /// `capacity` and `alloc`: heaviest first per resource.
    fn overlay_capacity(
        &self,
        type_labels: &BTreeMap<String, String>,
        capacity: &mut Resources,
        alloc: &mut Resources,
    ) {
        let mut seen = BTreeSet::new();
        for ov in self.overlays.iter().filter(|ov| !ov.capacity.is_zero()) {
            if labels_satisfy(type_labels, &ov.requirements).is_ok() {
                for (k, q) in ov.capacity.iter() {
                    if seen.insert(k.to_string()) {
                        capacity.set(k, q);
                        alloc.set(k, q);
                    }
                }
            }
        }
    }
}

/// Catalog offering `o` as a [`PoolOffering`] (`res_index`: its
/// reservation's, or [`NO_RESERVATION`]), priced as it is; `zones` are the
/// catalog's.
fn pool_offering(o: &Offering, res_index: u32, zones: &[String]) -> PoolOffering {
    PoolOffering {
        zone: o.zone.clone(),
        capacity_type: o.capacity_type,
        price: o.price,
        adjusted: o.price,
        available: o.available,
        reservation: o.reservation.clone(),
        res_index,
        zone_bit: zones
            .iter()
            .position(|z| z == &o.zone)
            .filter(|i| *i < 64)
            .map_or(0, |i| 1u64 << i),
    }
}

/// The price of the offering a fleet would prefer (see [`PoolType::price`]):
/// spot, then on-demand, cheapest within; reserved only for a type with
/// nothing else.
fn preferred_price(offerings: &[PoolOffering], has_reserved: bool) -> f64 {
    offerings
        .iter()
        .filter(|o| {
            !has_reserved
                || o.capacity_type != CapacityType::Reserved
                || offerings
                    .iter()
                    .all(|o| o.capacity_type == CapacityType::Reserved)
        })
        .min_by(|a, b| {
            a.capacity_type
                .cmp(&b.capacity_type)
                .then(a.price.total_cmp(&b.price))
        })
        .map(|o| o.price)
        .unwrap_or(f64::INFINITY)
}

/// [`Limits`] with what is charged already (see [`Limits::after`]): per
/// limited resource, where a capacity holds it, the charge and the limit.
pub struct LimitsAfter<'l>(Vec<(LimitKey<'l>, Quantity, Quantity)>);

/// Where a node's charge against one limit is read.
enum LimitKey<'l> {
    Nodes,
    Known(usize),
    Other(&'l str),
}

impl LimitsAfter<'_> {
    /// Whether a node of `capacity` fits: for every limit, what is charged
    /// plus what the node charges (its capacity, or one node) is within it.
    pub fn admits(&self, capacity: &Resources) -> bool {
        self.0.iter().all(|(key, charged, q)| {
            let charge = match key {
                LimitKey::Nodes => Quantity::from_units(1),
                LimitKey::Known(i) => capacity.known().get(*i).copied().unwrap_or(Quantity::ZERO),
                LimitKey::Other(k) => capacity.get(k),
            };
            *charged + charge <= *q
        })
    }
}

/// Remaining room under a NodePool's limits, per limited resource (zero
/// entries are kept: a used-up limit still limits).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits(pub Vec<(String, Quantity)>);

impl Limits {
    /// `limits.nodes`: the number of nodes, charged one per node.
    pub const NODES: &'static str = "nodes";

    /// What one more node charges besides its capacity.
    pub fn one_node() -> Resources {
        Resources::new().with(Self::NODES, Quantity::from_units(1))
    }

    /// What a node of `capacity` charges against limit `k`.
    fn charge(k: &str, capacity: &Resources) -> Quantity {
        if k == Self::NODES {
            Quantity::from_units(1)
        } else {
            capacity.get(k)
        }
    }

    /// These limits after `charged` is already used: whether a node fits
    /// (see [`LimitsAfter::admits`]), `charged` looked up once for the
    /// many capacities (instance types) asked.
    pub fn after(&self, charged: &Resources) -> LimitsAfter<'_> {
        LimitsAfter(
            (self.0.iter())
                .map(|(k, q)| {
                    let key = match k.as_str() {
                        Self::NODES => LimitKey::Nodes,
                        k => {
                            Resources::known_position(k).map_or(LimitKey::Other(k), LimitKey::Known)
                        }
                    };
                    (key, charged.get(k), *q)
                })
                .collect(),
        )
    }

    /// The first limited resource `capacity` would exceed.
    pub fn exceeded(&self, capacity: &Resources, charged: &Resources) -> Option<(&str, Quantity)> {
        self.0
            .iter()
            .find(|(k, q)| charged.get(k) + Self::charge(k, capacity) > *q)
            .map(|(k, q)| (k.as_str(), *q))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{OfferingFilter, PlainZones, PoolOffering, PoolType, NO_RESERVATION};
    use crate::catalog::{CapacityType, ReservationRef};
    use crate::labels;
    use crate::model::ReservationType;
    use crate::requirements::{Requirement, Requirements};
    use crate::resources::Resources;

    /// Limits that do not admit the least capacity admit none of the
    /// capacities (what lets a NodePool at its limits skip its types);
    /// drawn capacities, charges and limits, `nodes` and extended ones too.
    #[test]
    fn limits_over_the_capacity_floor_admit_no_capacity() {
        use super::Limits;
        use crate::quantity::Quantity;
        let mut draw = crate::scheduler::test_draws(23);
        let mut next = |m: u64| draw(m) as i64;
        let names = ["cpu", "memory", "nvidia.com/gpu", "example.com/dongle"];
        let (mut refused, mut admitted) = (0, 0);
        for _ in 0..3000 {
            let caps: Vec<Resources> = (0..1 + next(6))
                .map(|_| {
                    let mut r = Resources::new();
                    for n in names {
                        if next(3) > 0 {
                            r.set(n, Quantity::from_millis(1 + next(16)));
                        }
                    }
                    r
                })
                .collect();
            let mut limits = vec![];
            let mut charged = Resources::new();
            for n in names.iter().chain([&Limits::NODES]) {
                if next(3) == 0 {
                    limits.push((n.to_string(), Quantity::from_millis(next(24))));
                    charged.set(n, Quantity::from_millis(next(16)));
                }
            }
            let limits = Limits(limits);
            let after = limits.after(&charged);
            if after.admits(&Resources::min_of(&caps)) {
                admitted += 1;
            } else {
                refused += 1;
                assert!(
                    caps.iter().all(|c| !after.admits(c)),
                    "{caps:?} {limits:?} {charged:?}"
                );
            }
        }
        assert!(refused > 300 && admitted > 300, "{refused} {admitted}");
    }

    const ZONES: [&str; 4] = ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"];

    /// An offering: zone (index 4: a zone past the bit-mapped ones),
    /// capacity type, whether it is a reservation's, and whether any is left.
    fn offering((zone, ct, reserved, left): (usize, u8, bool, bool)) -> PoolOffering {
        let capacity_type = [
            CapacityType::Spot,
            CapacityType::OnDemand,
            CapacityType::Reserved,
        ][ct as usize % 3];
        let reserved = reserved || capacity_type == CapacityType::Reserved;
        PoolOffering {
            zone: ZONES.get(zone).map_or("us-west-2z", |z| z).to_string(),
            capacity_type: if reserved {
                CapacityType::Reserved
            } else {
                capacity_type
            },
            price: 1.0,
            adjusted: 1.0,
            available: if left { 5 } else { 0 },
            reservation: reserved.then(|| ReservationRef {
                id: format!("cr-{zone}"),
                reservation_type: ReservationType::Default,
            }),
            res_index: if reserved {
                zone as u32
            } else {
                NO_RESERVATION
            },
            zone_bit: if zone < ZONES.len() { 1 << zone } else { 0 },
        }
    }

    /// Requirements on zone, capacity type and reservation id, from bits.
    fn requirements(zones: u8, cts: u8, by_id: u8) -> Requirements {
        let mut reqs = Requirements::default();
        if zones != 0 {
            let zs: Vec<&str> = (0..5)
                .filter(|i| zones & (1 << i) != 0)
                .map(|i| ZONES.get(i).copied().unwrap_or("us-west-2z"))
                .collect();
            reqs.add(Requirement::in_values(labels::ZONE, zs));
        }
        if cts != 0 {
            let names = ["spot", "on-demand", "reserved"];
            let cs: Vec<&str> = (0..3)
                .filter(|i| cts & (1 << i) != 0)
                .map(|i| names[i])
                .collect();
            reqs.add(Requirement::in_values(labels::CAPACITY_TYPE, cs));
        }
        match by_id % 3 {
            1 => reqs.add(Requirement::in_values(
                labels::CAPACITY_RESERVATION_ID,
                ["cr-1"],
            )),
            2 => reqs.add(Requirement::does_not_exist(labels::CAPACITY_RESERVATION_ID)),
            _ => {}
        }
        reqs
    }

    proptest! {
        /// Whatever offerings a filter allows, the first of them in
        /// preference order is the least by capacity type, then price
        /// (what `costrule::offered_price` takes).
        #[test]
        fn the_first_allowed_by_preference_is_the_least_allowed(
            offers in proptest::collection::vec((0usize..5, 0u8..3, any::<bool>(), 0u8..6, any::<bool>()), 0..10),
        ) {
            let offerings: Vec<PoolOffering> = (offers.iter())
                .map(|&(zone, ct, reserved, price, _)| PoolOffering {
                    price: f64::from(price) * 0.25,
                    ..offering((zone, ct, reserved, true))
                })
                .collect();
            let allowed = |i: usize| offers[i].4;
            let first = (super::preference_order(&offerings).into_iter())
                .map(|i| i as usize)
                .find(|&i| allowed(i))
                .map(|i| (offerings[i].capacity_type, offerings[i].price));
            let least = (0..offerings.len())
                .filter(|&i| allowed(i))
                .map(|i| (offerings[i].capacity_type, offerings[i].price))
                .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            prop_assert_eq!(first, least);
        }

        /// The zone-bit shortcut answers as the offering-by-offering check.
        #[test]
        fn has_offering_answers_as_every_offering_checked(
            offers in proptest::collection::vec((0usize..5, 0u8..3, any::<bool>(), any::<bool>()), 0..8),
            zones in 0u8..32, cts in 0u8..8, by_id in 0u8..3, held in proptest::option::of(0u32..5),
        ) {
            let offerings: Vec<PoolOffering> = offers.into_iter().map(offering).collect();
            let ty = PoolType {
                name: "t".into(),
                requirements: super::TypeRequirements::default(),
                capacity: Resources::new(),
                allocatable: Resources::new(),
                plain_zones: PlainZones::of(&offerings),
                by_preference: super::preference_order(&offerings),
                offerings,
                price: 1.0,
                has_reserved: false,
                daemon_ports: Vec::new(),
            };
            let reqs = requirements(zones, cts, by_id);
            let zone_list: Vec<String> = ZONES.iter().map(|z| z.to_string()).collect();
            let f = OfferingFilter::new(&reqs, &zone_list).holding(held);
            let plain = ty.offerings.iter().any(|o| f.allows(o));
            prop_assert_eq!(ty.has_offering(&f), plain);
        }

        /// A type's requirements split into its shared labels and its
        /// offerings' zone and capacity type answer as the one merged set.
        #[test]
        fn type_requirements_answer_as_the_merged_set(
            offers in proptest::collection::vec((0usize..5, 0u8..3, any::<bool>(), any::<bool>()), 0..8),
            zones in 0u8..32, cts in 0u8..8, by_id in 0u8..3, arch in 0u8..3, gpu in any::<bool>(),
        ) {
            let offerings: Vec<PoolOffering> = offers.into_iter().map(offering).collect();
            let fixed = Requirements::from_iter_reqs([
                Requirement::in_values(labels::ARCH, ["arm64"]),
                Requirement::in_values(labels::INSTANCE_TYPE, ["m6g.large"]),
                Requirement::does_not_exist(labels::INSTANCE_GPU_COUNT),
            ]);
            let split = super::TypeRequirements::new(std::sync::Arc::new(fixed.clone()), &offerings);
            let mut merged = fixed;
            merged.add(Requirement::in_values(labels::ZONE, offerings.iter().map(|o| o.zone.clone())));
            merged.add(Requirement::in_values(
                labels::CAPACITY_TYPE,
                offerings.iter().map(|o| o.capacity_type.as_str().to_string()),
            ));
            let mut incoming = requirements(zones, cts, by_id);
            match arch {
                1 => incoming.add(Requirement::in_values(labels::ARCH, ["arm64"])),
                2 => incoming.add(Requirement::in_values(labels::ARCH, ["amd64"])),
                _ => {}
            }
            if gpu {
                incoming.add(Requirement::exists(labels::INSTANCE_GPU_COUNT));
            }
            prop_assert_eq!(split.intersects_ok(&incoming), merged.intersects_ok(&incoming));
            for key in [
                labels::ZONE,
                labels::CAPACITY_TYPE,
                labels::ARCH,
                labels::INSTANCE_TYPE,
                labels::INSTANCE_GPU_COUNT,
                labels::CAPACITY_RESERVATION_ID,
            ] {
                prop_assert_eq!(split.get(key), merged.get(key));
            }
        }
    }

    /// The default NodePool (no requirements) over the regional catalog,
    /// handed to `check`.
    fn with_regional_pool(check: impl FnOnce(&super::Pool)) {
        use super::{build, prepare};
        use crate::catalog::Catalog;
        use crate::model::{ClusterState, NodePool};
        use crate::scheduler::SchedulerOptions;

        let catalog = Catalog::embedded("us-west-2").expect("embedded catalog");
        let state = ClusterState {
            node_pools: vec![NodePool::new("default", Requirements::default())],
            ..Default::default()
        };
        let templates = prepare(&state, &catalog, &SchedulerOptions::default(), &[]);
        let pools = build(&state, &templates);
        check(pools.first().expect("a pool"));
    }

    /// A filter built from only the requirement keys it reads allows what
    /// one built from all of them does (the offer summaries are shared by
    /// those keys).
    #[test]
    fn an_offering_filter_reads_only_its_keys() {
        use crate::requirements::{Operator, Requirement};
        with_regional_pool(|pool| {
            let req = |key: &str, op: Operator, values: &[&str]| {
                Requirement::new(key, op, values).expect("a requirement")
            };
            let cases = [
                vec![req(
                    labels::ZONE,
                    Operator::In,
                    &["us-west-2a", "us-west-2c"],
                )],
                vec![
                    req(labels::CAPACITY_TYPE, Operator::NotIn, &["spot"]),
                    req(labels::ARCH, Operator::In, &["arm64"]),
                    req(labels::INSTANCE_FAMILY, Operator::In, &["m6g"]),
                ],
                vec![
                    req(labels::CAPACITY_TYPE, Operator::In, &["reserved"]),
                    req(labels::ZONE, Operator::NotIn, &["us-west-2b"]),
                    req(labels::CAPACITY_RESERVATION_TYPE, Operator::Exists, &[]),
                    req(labels::HOSTNAME, Operator::In, &["a"]),
                ],
            ];
            for reqs in cases {
                let full = Requirements::from_iter_reqs(reqs.iter().cloned());
                let read = OfferingFilter::read_requirements(&full);
                let (a, b) = (pool.filter(&full), pool.filter(&read));
                for ty in pool.types.iter() {
                    for o in &ty.offerings {
                        assert_eq!(a.allows(o), b.allows(o), "{} {:?}", ty.name, reqs);
                    }
                }
            }
        });
    }

    /// The bit-set indexes of a NodePool's types answer as asking each type
    /// does: on the regional catalog (GPU, Neuron and EFA types included),
    /// random type sets and requests (with GPUs, which no compact list
    /// holds) get the same holding types, cheapest holding type and
    /// component-wise maxima.
    #[test]
    fn type_indexes_answer_as_each_type_does() {
        use super::TypeSet;
        use crate::quantity::Quantity;
        with_regional_pool(|pool| {
            let n = pool.types.len();
            assert!(n > 300, "{n} types");
            let mut next = crate::scheduler::test_draws(0x2545_f491_4f6c_dd1du64);
            for round in 0..300 {
                let keep = 1 + next(8);
                let set = TypeSet::from_indices((0..n).filter(|_| next(keep) == 0), n);
                let mut want = Resources::new()
                    .with("cpu", Quantity::from_millis(next(64_000) as i64))
                    .with("memory", Quantity::from_mib(next(256 * 1024) as i64))
                    .with("pods", Quantity::from_units(next(40) as i64));
                if round % 5 == 0 {
                    want.set("nvidia.com/gpu", Quantity::from_units(next(3) as i64));
                }
                let compact = want.compact_request();
                let expected: Vec<usize> = set
                    .iter()
                    .filter(|&t| want.fits_in(&pool.types[t].allocatable))
                    .collect();
                let got = pool.holding(&set, &want, compact);
                assert_eq!(got.iter().collect::<Vec<_>>(), expected, "round {round}");
                assert_eq!(got.len(), expected.len(), "round {round}");
                let first = pool.first_holding(&set, None, &want, compact);
                assert_eq!(first, expected.first().copied(), "round {round}");
                let (mut allocatable, mut capacity) = (Resources::new(), Resources::new());
                for t in set.iter() {
                    allocatable.max_assign(&pool.types[t].allocatable);
                    capacity.max_assign(&pool.types[t].capacity);
                }
                let maxima = pool.maxima_index.maxima(&pool.types, &set);
                assert!(maxima == (allocatable, capacity), "round {round}");
            }
        });
    }

    /// Limits with what is charged resolved once answer as asked each
    /// time: known resources, nodes and an extended resource, over and
    /// under their limits, near the saturating end too.
    #[test]
    fn limits_after_a_charge_admit_as_limits_do() {
        use super::Limits;
        use crate::quantity::Quantity;
        let keys = [
            "cpu",
            "memory",
            Limits::NODES,
            "nvidia.com/gpu",
            "example.com/widget",
        ];
        let mut next = crate::scheduler::test_draws(0x9e37_79b9_7f4a_7c15u64);
        // Some of `keys`, each at a small quantity or near the saturating end.
        let mut draw = move || -> Vec<(String, Quantity)> {
            let mut out = Vec::new();
            for k in keys {
                if next(2) == 0 {
                    let q = match next(8) {
                        0 => Quantity::from_millis(i64::MAX - next(3) as i64),
                        _ => Quantity::from_units(next(6) as i64),
                    };
                    out.push((k.to_string(), q));
                }
            }
            out
        };
        let mut admitted = [0usize; 2];
        for _ in 0..3000 {
            let limits = Limits(draw());
            let mut resources = || {
                let mut r = Resources::new();
                for (k, q) in draw() {
                    r.set(&k, q);
                }
                r
            };
            let (charged, capacity) = (resources(), resources());
            let want =
                (limits.0.iter()).all(|(k, q)| charged.get(k) + Limits::charge(k, &capacity) <= *q);
            let got = limits.after(&charged).admits(&capacity);
            assert_eq!(got, want, "{limits:?} {charged:?} {capacity:?}");
            admitted[usize::from(want)] += 1;
        }
        assert!(admitted.iter().all(|&n| n > 100), "{admitted:?}");
    }
}
