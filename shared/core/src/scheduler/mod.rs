//! The scheduler: pending pods in, NodeClaims out.
//!
//! Shape (Karpenter's, see `kubernetes-sigs/karpenter`
//! `pkg/controllers/provisioning/scheduling`): pods are sorted largest first
//! and taken from a queue; each is placed on an existing node if one fits,
//! else on a NodeClaim already planned in this run, else on a new NodeClaim
//! from the heaviest NodePool that can take it. A NodeClaim keeps *every*
//! instance type that can still hold its pods; the launch stage hands that
//! list to CreateFleet. A pod that fits nowhere has its preferences relaxed
//! one at a time and goes to the back of the queue; the run ends when a full
//! pass over the queue makes no progress. Before the plan is returned,
//! NodeClaims holding only pods nothing else looks at are packed again with
//! every pod in view and replaced when that is cheaper (`repack`).
//!
//! Differences from Karpenter, on purpose: ties break deterministically
//! (sorted domains, creation-ordered NodeClaims) so the same input always
//! gives the same plan; a NodePool's limits are charged with the largest
//! instance type a NodeClaim can *still* become (Karpenter charges the
//! largest it could be at creation and never gives it back).

mod chain;
mod existingnode;
mod in_flight;
mod min_values;
mod pod_view;
mod pools;
mod rebalance;
mod repack;
mod topology;
mod typeset;
mod volumes;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::catalog::{ebs, CapacityType, Catalog};
use crate::labels;
use crate::model::{untolerated, untolerated_strict, ClusterState, Node, Pod, Taint};
use crate::plan::{
    ExistingNodePlan, NodeClaimPlan, NodeClaimResources, Plan, Price, ReservationUse, Summary,
    Unschedulable,
};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use existingnode::{ExistingNode, ExistingNodes};
pub use min_values::MinValuesPolicy;
pub use pod_view::Relaxation;
pub use pools::{daemon_overhead, labels_satisfy, overlay_adjusted_price, overlays_by_weight};
use pools::{Pool, PoolOffering};
use topology::{DomainSource, Kind, PodGroups, Topology};
use typeset::TypeSet;

/// Relative slack of the cost rule (see `Run::growth_pays`).
const COST_TOLERANCE: f64 = 1.02;

/// Price per pod slot of pool type `t` for pods shaped like `pod` (price
/// over how many copies fit next to the daemonset overhead), and the copies.
fn slot_price(pool: &Pool, t: usize, pod: &Pod) -> Option<(f64, usize)> {
    let ty = &pool.types[t];
    let room = ty.allocatable.minus(&pool.daemon_overhead);
    let copies = pod
        .requests
        .iter()
        .map(|(name, q)| room.get(name).millis() / q.millis().max(1))
        .min()
        .unwrap_or(0);
    (copies > 0).then(|| (pool.node_price(ty.price) / copies as f64, copies as usize))
}

/// Knobs that are not part of the cluster state.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// The `ReservedCapacity` feature gate: off → reserved offerings ignored.
    pub reserved_capacity: bool,
    /// Offerings known to be out of capacity (the ICE cache):
    /// (instance type, zone, capacity type).
    pub unavailable: BTreeSet<(String, String, CapacityType)>,
    /// Fraction of memory the hypervisor keeps (Karpenter's
    /// `VM_MEMORY_OVERHEAD_PERCENT`, default 0.075).
    pub vm_memory_overhead: f64,
    /// Capacity reservation id → instances still available to this run
    /// (the service's counter, after in-flight NodeClaims). Caps each
    /// reservation's `AvailableInstanceCount`; a reservation without an
    /// entry keeps that count. `None`: no counter (`flotilla plan`).
    pub reservation_available: Option<BTreeMap<String, u32>>,
    /// Unix seconds, if known: capacity blocks past their drain time are
    /// not offered. Injected (the scheduler reads no clock).
    pub now: Option<i64>,
    /// Karpenter's `MIN_VALUES_POLICY`: what a new NodeClaim does when its
    /// instance types cannot keep a NodePool requirement's `minValues`.
    pub min_values_policy: MinValuesPolicy,
    /// Pack the fewest NodeClaims, as Karpenter does: a pod joins the first
    /// planned NodeClaim it fits on (no cost rule in step 2 of `add`), and
    /// the price-driven passes that split NodeClaims (repack, zone
    /// rebalancing, chains) are skipped. Off by default; consolidation's
    /// simulations ask for it (Karpenter's own simulation packs this way).
    pub pack_fewest_nodes: bool,
    /// At most this many new NodeClaims: once planning has opened one
    /// more, it stops; the plan has that one NodeClaim too many and the
    /// pods not tried yet are unschedulable. For simulations that are
    /// worthless beyond a count (consolidation: no more NodeClaims than
    /// nodes removed). `None`: no cap.
    pub max_node_claims: Option<usize>,
}

/// Why a pod is left unplaced when [`SchedulerOptions::max_node_claims`]
/// stops planning.
const NODE_CLAIM_CAP: &str = "planning stopped at this simulation's NodeClaim cap";

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            reserved_capacity: false,
            unavailable: BTreeSet::new(),
            vm_memory_overhead: 0.075,
            reservation_available: None,
            now: None,
            min_values_policy: MinValuesPolicy::Strict,
            pack_fewest_nodes: false,
            max_node_claims: None,
        }
    }
}

struct Claim {
    pool: usize,
    name: String,
    requirements: Requirements,
    /// The pool's types that can still hold every pod.
    types: TypeSet,
    requests: Resources,
    pods: Vec<usize>,
    host_ports: BTreeSet<(String, i32)>,
    /// Component-wise max allocatable over `types` (cheap rejection).
    max_allocatable: Resources,
    /// Component-wise max capacity over `types` (charged against limits).
    max_capacity: Resources,
    /// The size class every pod on this NodeClaim has, if they share one.
    size: Option<usize>,
    /// Whether any pod has joined yet.
    used: bool,
    /// The capacity reservation it launches into (index into
    /// `ClusterState::capacity_reservations`). Such a NodeClaim is pinned to
    /// the reservation's one type and zone, so no pod can make it drop its
    /// reserved offering (the RFC's rule); one that is not in a
    /// reservation never takes a reserved offering.
    reservation: Option<u32>,
    /// Bumped by every pod that joins (see `JoinMemo`).
    version: u32,
    /// The last `may_join_cheaply` question for this NodeClaim, and its
    /// answer.
    memo: Option<JoinMemo>,
    memo_yes: bool,
    /// Whether the requirements pin the NodeClaim to one zone.
    zone_pin: ZonePin,
    /// Per key, the distinct values its types must keep (the NodePool's
    /// `minValues`, lowered where the BestEffort policy relaxed them).
    min_values: BTreeMap<String, u32>,
    /// Whether the BestEffort policy lowered a `minValues`.
    min_values_relaxed: bool,
}

/// A NodeClaim's zone requirement, for the spread pre-check in `Run::add`.
#[derive(Clone, Copy)]
enum ZonePin {
    /// Not pinned to one zone.
    Free,
    /// Pinned to the zone of this bit of the catalog's zone list.
    Bit(u64),
    /// Pinned to a zone outside the first 64 of the list.
    Other,
}

impl ZonePin {
    /// Buckets of `bucket`: free, one per zone bit, other.
    const BUCKETS: usize = 66;

    fn bucket(self) -> usize {
        match self {
            ZonePin::Free => 0,
            ZonePin::Bit(b) => 1 + b.trailing_zeros() as usize,
            ZonePin::Other => Self::BUCKETS - 1,
        }
    }

    fn of(reqs: &Requirements, zones: &[String]) -> ZonePin {
        let Some(z) = reqs.get(labels::ZONE) else {
            return ZonePin::Free;
        };
        if z.is_complement() || z.values().len() != 1 {
            return ZonePin::Free;
        }
        let Some(v) = z.values().iter().next() else {
            return ZonePin::Free;
        };
        match zones.iter().position(|x| x == v) {
            Some(i) if i < 64 => ZonePin::Bit(1 << i),
            _ => ZonePin::Other,
        }
    }
}

impl Claim {
    fn memo_answer(&self) -> Option<(JoinMemo, bool)> {
        self.memo.map(|m| (m, self.memo_yes))
    }
}

/// A `Run::may_join_cheaply` answer and everything it depends on: the
/// pod's size class (its requests, NodePools and types), the solo price,
/// the NodeClaim's version, the pods of the size class still waiting, and
/// the run's offering epoch (reservations running out change prices).
/// Consecutive pods are mostly of one size (they are sorted by size), so
/// one entry per NodeClaim spares pods that may not use the placement
/// hints (topology spread) re-walking every NodeClaim's type list.
#[derive(Clone, Copy, PartialEq)]
struct JoinMemo {
    size: usize,
    solo: Option<u64>,
    version: u32,
    size_left: usize,
    epoch: u32,
}

/// The outcome of trying one placement: the new requirements and types.
struct Fit {
    requirements: Requirements,
    types: TypeSet,
}

struct Run<'a> {
    pools: Vec<Pool<'a>>,
    pods: &'a [Pod],
    volume: Vec<volumes::VolumeTerms>,
    groups: Vec<PodGroups>,
    topology: Topology,
    existing: ExistingNodes<'a>,
    claims: Vec<Claim>,
    claim_counter: BTreeMap<usize, usize>,
    /// Equivalence class of each pod (identical requests and constraints),
    /// for pods whose placement outcomes only get worse as nodes fill (no
    /// spread or affinity): `None` for the others.
    shape: Vec<Option<usize>>,
    /// Per shape: the first existing node / NodeClaim worth trying. Nodes
    /// before it rejected a pod of this shape for reasons that only harden.
    existing_hint: Vec<usize>,
    claim_hint: Vec<usize>,
    /// Per shape: the relaxation the hints were gathered at.
    hint_relax: Vec<Relaxation>,
    /// Size class of each pod (see `size_classes`), and per class the pods
    /// not placed yet.
    size: Vec<usize>,
    size_left: Vec<usize>,
    /// Per shape: the solo price (see `solo_price`).
    solo_cache: Vec<Option<Option<f64>>>,
    /// Types of a pool compatible with requirements (hostname excluded).
    compat_cache: CompatCache,
    /// See [`ReqTypeCache`]: a candidate NodeClaim's types are narrowed by
    /// bit sets, not by testing each type's labels.
    req_type_cache: ReqTypeCache,
    /// Repack candidates per (pool, requirements, dimensions), see
    /// `Run::candidates`.
    cand_cache: CandCache,
    /// (pool, requirements without hostname) → why no type is compatible.
    no_type_reasons: std::cell::RefCell<std::collections::HashMap<(usize, Requirements), String>>,
    /// (pool, shape) → best price per pod slot (see `best_slot_price`).
    slot_cache: std::cell::RefCell<std::collections::HashMap<(usize, usize), Option<f64>>>,
    /// Capacity reservations (indexed like `ClusterState::capacity_reservations`).
    res: Reservations<'a>,
    /// Class of each pod by its requests alone, and per class the
    /// NodeClaims that may still have room for such a pod (see `Roomy`).
    req_class: Vec<usize>,
    roomy: Vec<Roomy>,
    /// Per size class, for pods without a shape (spread, pod affinity) at
    /// no relaxation: per zone bucket (see `ZonePin::bucket`), the first
    /// NodeClaim not known to refuse such a pod for reasons that only
    /// harden (no room, the cost rule). Topology refusals do not count.
    spread_hint: Vec<Option<Box<[u32; ZonePin::BUCKETS]>>>,
    /// Whether step 3 of `add` joins heavier limited NodePools' NodeClaims
    /// (see [`schedule`]).
    join_heavier: bool,
    /// NodePools that launch nothing now, with why (named in reasons).
    unavailable_pools: Vec<String>,
    /// Per key a pending pod spreads over (but hostname), the values the
    /// existing nodes carry: built once, read by `reachable_domains`.
    existing_domains: BTreeMap<String, BTreeSet<String>>,
    /// Bumped when a reservation runs out (see `JoinMemo`).
    epoch: u32,
    min_values_policy: MinValuesPolicy,
    /// [`SchedulerOptions::pack_fewest_nodes`].
    pack: bool,
}

/// NodeClaims (ascending) not yet known to be too full for pods of one
/// request vector. A NodeClaim's requests only grow and its largest
/// allocatable only shrinks, so one found too full stays too full: it is
/// marked dead and skipped from then on (compacted when half are dead).
#[derive(Default)]
struct Roomy {
    list: Vec<u32>,
    dead: Vec<bool>,
    /// The zone bit each NodeClaim is pinned to, once seen pinned (0: not
    /// known to be pinned). A pinned NodeClaim stays pinned to its zone, so
    /// the spread pre-check can skip it without touching it.
    pins: Vec<u64>,
    n_dead: usize,
    /// NodeClaims `0..synced` are in `list` (or were dropped as full).
    synced: usize,
}

impl Roomy {
    fn sync(&mut self, claims: usize) {
        for c in self.synced..claims {
            self.list.push(c as u32);
            self.dead.push(false);
            self.pins.push(0);
        }
        self.synced = self.synced.max(claims);
    }

    fn kill(&mut self, k: usize) {
        self.dead[k] = true;
        self.n_dead += 1;
    }

    fn compact(&mut self) {
        if self.n_dead * 2 <= self.list.len() {
            return;
        }
        let mut dead = self.dead.iter();
        self.list.retain(|_| dead.next() == Some(&false));
        let mut dead = self.dead.iter();
        self.pins.retain(|_| dead.next() == Some(&false));
        self.dead = vec![false; self.list.len()];
        self.n_dead = 0;
    }
}

/// Reservation bookkeeping: O(1) per NodeClaim; an exhausted reservation
/// switches its offerings off once (`Run::take_reservation`).
struct Reservations<'a> {
    all: &'a [crate::model::CapacityReservation],
    /// Instances available when the run started.
    start: Vec<u32>,
    /// Instances left.
    left: Vec<u32>,
    /// Where each reservation's offerings are: (pool, type, offering).
    offerings: Vec<Vec<(usize, usize, usize)>>,
    /// Selected by at least one NodePool's NodeClass.
    offered: Vec<bool>,
}

/// (pool, requirements without hostname) → compatible type indices.
type CandCache = std::cell::RefCell<
    std::collections::HashMap<
        (usize, Requirements, Vec<String>),
        std::rc::Rc<Vec<(usize, f64, Vec<i64>)>>,
    >,
>;

/// (pool, one requirement) → the pool's types whose labels intersect it.
type ReqTypeCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirement), std::rc::Rc<TypeSet>>>;

type CompatCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirements), std::rc::Rc<Vec<usize>>>>;

/// Groups pods by what the price of a node slot depends on (requests and
/// the NodePools and types they may use), ignoring labels: the unit of the
/// efficiency test in `Run::growth_pays`.
fn size_classes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<usize>, usize) {
    let mut ids: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let out = pods
        .iter()
        .zip(volume)
        .map(|(p, v)| {
            let key = format!(
                "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
                p.requests, p.node_selector, p.required_terms, p.preferred_terms, p.tolerations, v
            );
            let n = ids.len();
            *ids.entry(key).or_insert(n)
        })
        .collect();
    (out, ids.len())
}

/// Groups pods by their requests alone; see `Run::roomy`.
fn request_classes(pods: &[Pod]) -> (Vec<usize>, usize) {
    let mut ids: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let out = pods
        .iter()
        .map(|p| {
            let n = ids.len();
            *ids.entry(format!("{:?}", p.requests)).or_insert(n)
        })
        .collect();
    (out, ids.len())
}

/// Groups pods into shapes; see `Run::shape`.
fn shapes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<Option<usize>>, usize) {
    let mut ids: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let out = pods
        .iter()
        .zip(volume)
        .map(|(p, v)| {
            let monotonic = p.topology_spread.is_empty()
                && p.pod_affinity.is_empty()
                && p.preferred_pod_affinity.is_empty();
            if !monotonic {
                return None;
            }
            let key = format!(
                "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}|{:?}",
                p.requests,
                p.node_selector,
                p.required_terms,
                p.preferred_terms,
                p.tolerations,
                p.host_ports,
                v,
                p.namespace,
                p.labels,
                p.pod_anti_affinity,
                p.preferred_pod_anti_affinity,
            );
            let n = ids.len();
            Some(*ids.entry(key).or_insert(n))
        })
        .collect();
    (out, ids.len())
}

/// Plans NodeClaims for the pending pods of `state`.
///
/// When a NodePool with limits has lighter NodePools behind it, pods that
/// find it out of room for a new NodeClaim may either join one of its
/// NodeClaims (weights first: what Karpenter does) or go to a lighter
/// NodePool when that is cheaper (the cost rule). Neither is cheaper for
/// every workload, so both are planned and the plan that schedules more
/// pods, then costs less, is returned (the weights-first one on a tie).
pub fn schedule(state: &ClusterState, catalog: &Catalog, opts: &SchedulerOptions) -> Plan {
    let pods = pods_to_place(state);
    let (plan, limited_heavier) = schedule_with(state, &pods, catalog, opts, false);
    if !limited_heavier {
        return plan;
    }
    let (weights_first, _) = schedule_with(state, &pods, catalog, opts, true);
    let key = |p: &Plan| (p.unschedulable.len(), p.summary.total_hourly_price);
    let (a, b) = (key(&plan), key(&weights_first));
    if b.0 < a.0 || (b.0 == a.0 && b.1 <= a.1 + 1e-9) {
        weights_first
    } else {
        plan
    }
}

/// The pods to place: the pending ones, then, as Karpenter's provisioner
/// (`nodes.Deleting().ReschedulablePods`), the pods of nodes being deleted
/// that will need a place elsewhere.
fn pods_to_place(state: &ClusterState) -> std::borrow::Cow<'_, [Pod]> {
    let mut leaving = state
        .nodes
        .iter()
        .filter(|n| n.deleting)
        .flat_map(|n| n.pods.iter().filter(|p| reschedulable(p)))
        .peekable();
    if leaving.peek().is_none() {
        return std::borrow::Cow::Borrowed(&state.pending_pods);
    }
    let mut pods = state.pending_pods.clone();
    pods.extend(leaving.map(|p| Pod {
        node_name: None,
        terminating: false,
        ..p.clone()
    }));
    std::borrow::Cow::Owned(pods)
}

/// Whether a pod of a node being deleted needs a place elsewhere
/// (Karpenter's `IsReschedulable`): it is running (not being deleted), or
/// it is a StatefulSet's pod being deleted (its replacement comes only
/// after it is gone, so its place is provisioned ahead); never a
/// DaemonSet's or a static (mirror) pod.
pub fn reschedulable(p: &Pod) -> bool {
    let owner = p.owner.as_deref().unwrap_or_default();
    let statefulset = owner.starts_with("StatefulSet/");
    (!p.terminating || statefulset)
        && !owner.starts_with("DaemonSet/")
        && !owner.starts_with("Node/")
}

/// One planning run; `join_heavier` turns on step 3's joining of heavier
/// limited NodePools' NodeClaims (see [`schedule`]). Also returns whether
/// that could change anything: some NodePool with limits is heavier than
/// another.
fn schedule_with<'a>(
    state: &'a ClusterState,
    pods: &'a [Pod],
    catalog: &Catalog,
    opts: &SchedulerOptions,
    join_heavier: bool,
) -> (Plan, bool) {
    let available: Vec<u32> = state
        .capacity_reservations
        .iter()
        .map(|r| crate::reservations::available(r, opts.reservation_available.as_ref()))
        .collect();
    let pools = pools::build(state, catalog, opts, &available);
    let n_res = state.capacity_reservations.len();
    let mut res = Reservations {
        all: &state.capacity_reservations,
        start: available.clone(),
        left: available,
        offerings: vec![vec![]; n_res],
        offered: vec![false; n_res],
    };
    for (pi, pool) in pools.iter().enumerate() {
        for &r in &pool.reservations {
            res.offered[r as usize] = true;
        }
        for (t, ty) in pool
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.has_reserved)
        {
            for (oi, o) in ty.offerings.iter().enumerate() {
                if o.res_index != pools::NO_RESERVATION {
                    res.offerings[o.res_index as usize].push((pi, t, oi));
                }
            }
        }
    }
    let warnings = Vec::new();
    // Pods whose volumes are not ready wait (unschedulable, with the reason).
    let mut errors: Vec<Option<String>> = vec![None; pods.len()];
    let volumes = volumes::VolumeTopology::new(state);
    let volume: Vec<volumes::VolumeTerms> = pods
        .iter()
        .zip(errors.iter_mut())
        .map(|(p, error)| {
            volumes.requirements(p).unwrap_or_else(|e| {
                *error = Some(e);
                Default::default()
            })
        })
        .collect();
    let waiting_for_volumes: Vec<usize> =
        (0..pods.len()).filter(|&p| errors[p].is_some()).collect();

    let sources: Vec<DomainSource> = pools
        .iter()
        .map(|pool| pool_domains(pool, &catalog.region))
        .collect();
    let mut universe: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for src in &sources {
        for (k, v) in &src.domains {
            universe
                .entry(k.clone())
                .or_default()
                .extend(v.iter().cloned());
        }
    }
    // Existing nodes, then in-flight NodeClaims (see `in_flight`).
    let in_flight = in_flight::nodes(state);
    let all_nodes: std::borrow::Cow<[Node]> = if in_flight.is_empty() {
        std::borrow::Cow::Borrowed(&state.nodes)
    } else {
        std::borrow::Cow::Owned(state.nodes.iter().cloned().chain(in_flight).collect())
    };
    let (topology, groups) = Topology::build(pods, &all_nodes, universe, sources);

    let mut existing: Vec<ExistingNode> = all_nodes
        .iter()
        .filter(|n| !n.unschedulable)
        .map(|n| ExistingNode::new(n, effective_taints(n, &state.node_pools)))
        .collect();
    // Initialized nodes first (Karpenter's order), then by name.
    existing.sort_by(|a, b| {
        initialized(b.node)
            .cmp(&initialized(a.node))
            .then_with(|| a.node.name.cmp(&b.node.name))
    });

    let limited_heavier = pools
        .iter()
        .any(|h| h.remaining.is_some() && pools.iter().any(|o| o.np.weight < h.np.weight));
    let (shape, n_shapes) = shapes(pods, &volume);
    let shape_of = shape;
    let (size, n_sizes) = size_classes(pods, &volume);
    let (req_class, n_req_classes) = request_classes(pods);
    let existing_domains = existing_domains(pods, &existing);
    let existing = ExistingNodes::new(existing, &existingnode::keys_pods_read(pods, &volume));
    let mut run = Run {
        pools,
        pods,
        volume,
        groups,
        topology,
        existing,
        claims: vec![],
        claim_counter: BTreeMap::new(),
        shape: shape_of,
        existing_hint: vec![0; n_shapes],
        hint_relax: vec![Relaxation::default(); n_shapes],
        size_left: {
            let mut left = vec![0; n_sizes];
            for s in &size {
                left[*s] += 1;
            }
            left
        },
        size,
        claim_hint: vec![0; n_shapes],
        solo_cache: vec![None; n_shapes],
        compat_cache: Default::default(),
        req_type_cache: Default::default(),
        cand_cache: Default::default(),
        slot_cache: Default::default(),
        no_type_reasons: Default::default(),
        res,
        req_class,
        roomy: (0..n_req_classes).map(|_| Roomy::default()).collect(),
        epoch: 0,
        min_values_policy: opts.min_values_policy,
        pack: opts.pack_fewest_nodes,
        spread_hint: vec![None; n_sizes],
        join_heavier,
        existing_domains,
        unavailable_pools: state
            .node_pools
            .iter()
            .filter_map(|np| {
                np.unavailable
                    .as_ref()
                    .map(|why| format!("NodePool {:?} launches nothing: {why}", np.name))
            })
            .collect(),
    };

    // Largest first: cpu, then memory, then name for a total order.
    let mut order: Vec<usize> = (0..pods.len()).filter(|&p| errors[p].is_none()).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&pods[a].requests, &pods[b].requests);
        pb.cpu()
            .cmp(&pa.cpu())
            .then_with(|| pb.memory().cmp(&pa.memory()))
            .then_with(|| pods[a].namespace.cmp(&pods[b].namespace))
            .then_with(|| pods[a].name.cmp(&pods[b].name))
    });

    // The queue: a pod that fits nowhere goes to the back as it is. When a
    // full pass places nothing, every waiting pod has one preference relaxed
    // and the passes go on; when nothing is left to relax, the rest are
    // unschedulable. (Karpenter relaxes a pod at its first failure, so a pod
    // tried before the pods it prefers to be near loses that preference.)
    let mut relax = vec![Relaxation::default(); pods.len()];
    let mut queue: VecDeque<usize> = order.into_iter().collect();
    let is_prefer = |t: &Taint| t.effect == crate::model::TaintEffect::PreferNoSchedule;
    let prefer_no_schedule = run.pools.iter().any(|p| p.taints.iter().any(is_prefer))
        || run.existing.iter().any(|e| e.taints.iter().any(is_prefer));
    let over_cap = |run: &Run| opts.max_node_claims.is_some_and(|m| run.claims.len() > m);
    let mut capped = false;
    loop {
        let mut waiting = VecDeque::with_capacity(queue.len());
        let mut progress = false;
        while let Some(p) = queue.pop_front() {
            match run.add(p, &relax[p]) {
                Ok(()) => {
                    errors[p] = None;
                    progress = true;
                }
                Err(e) => {
                    errors[p] = Some(e);
                    waiting.push_back(p);
                }
            }
            if over_cap(&run) {
                // One NodeClaim too many: the pods not tried yet stay
                // unplaced; the plan only tells its caller "over the cap".
                capped = true;
                for q in queue.drain(..) {
                    errors[q] = Some(NODE_CLAIM_CAP.to_string());
                    waiting.push_back(q);
                }
                break;
            }
        }
        if waiting.is_empty() || capped {
            queue = waiting;
            break;
        }
        if !progress {
            let mut relaxed = false;
            for &p in &waiting {
                relaxed |= relax[p]
                    .relax(&pods[p], &run.volume[p], prefer_no_schedule)
                    .is_some();
            }
            if !relaxed {
                queue = waiting;
                break;
            }
        }
        queue = waiting;
    }

    if !run.pack && !capped {
        run.repack(!state.overlays.is_empty(), &relax);
        run.repack_chain(!state.overlays.is_empty());
    }
    if !opts.reserved_capacity {
        for &p in &queue {
            if let (Some(e), true) = (&mut errors[p], needs_reserved(&pods[p], &state.node_pools)) {
                e.push_str(RESERVED_GATE_OFF);
            }
        }
    }
    queue.extend(waiting_for_volumes);
    (
        run.into_plan(queue.into_iter().collect(), errors, warnings),
        limited_heavier,
    )
}

/// The topology groups in force for a pod and the requirements that decide
/// which of their domains it may use.
struct ActiveTopology {
    groups: Vec<(usize, Kind)>,
    domains: Requirements,
    /// The pod's relaxation tolerates `PreferNoSchedule` taints.
    tolerate_prefer_no_schedule: bool,
    /// Per NodePool: its taints keep the pod off its nodes.
    pool_blocked: Vec<bool>,
    /// A required affinity term rules out every node
    /// ([`Topology::affinity_unmet`]).
    affinity_unmet: bool,
    /// The zones the pod's affinity terms admit, whatever the node
    /// ([`Topology::affinity_admits`]).
    affinity_zones: Option<BTreeSet<String>>,
}

impl ActiveTopology {
    /// A cheap necessary condition for topology: a node whose zones are
    /// known (`zones`: those a NodeClaim's requirement names, or an existing
    /// node's label) has one the pod's affinity terms admit.
    fn affinity_zone_ok<'z>(&self, mut zones: impl Iterator<Item = &'z String>) -> bool {
        match &self.affinity_zones {
            Some(ok) => zones.any(|z| ok.contains(z)),
            None => true,
        }
    }
}

/// Why a planned NodeClaim cannot take a pod. Trials are many and their
/// reasons are not shown (a pod's reasons come from the NodePools), so
/// they are kept as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClaimRefusal {
    Full,
    Taint,
    HostPort,
    Requirements,
    Topology,
    NoInstanceType,
    MinValues,
}

impl ActiveTopology {
    /// The first taint of `taints` that keeps the pod off a node.
    fn blocking_taint<'t>(&self, taints: &'t [Taint], pod: &Pod) -> Option<&'t Taint> {
        if self.tolerate_prefer_no_schedule {
            untolerated(taints, &pod.tolerations)
        } else {
            untolerated_strict(taints, &pod.tolerations)
        }
    }
}

/// The domains a NodePool's new nodes may land in, per key: zones and
/// capacity types of its offerings, the labels every node carries, and the
/// values its requirements and labels name; with the taints its nodes carry.
fn pool_domains(pool: &Pool, region: &str) -> DomainSource {
    let mut domains: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |k: &str, v: &str| {
        domains
            .entry(k.to_string())
            .or_default()
            .insert(v.to_string());
    };
    for t in &pool.types {
        for o in &t.offerings {
            add(labels::ZONE, &o.zone);
            add(labels::CAPACITY_TYPE, o.capacity_type.as_str());
        }
        for key in [labels::ARCH, labels::OS, labels::INSTANCE_TYPE] {
            if let Some(r) = t.requirements.get(key).filter(|r| !r.is_complement()) {
                for v in r.values() {
                    add(key, v);
                }
            }
        }
    }
    add(labels::NODEPOOL, &pool.np.name);
    add(labels::REGION, region);
    for r in pool.requirements.iter() {
        if !r.is_complement() && r.key != labels::ZONE && r.key != labels::CAPACITY_TYPE {
            for v in r.values() {
                add(&r.key, v);
            }
        }
    }
    for (k, v) in &pool.np.labels {
        add(k, v);
    }
    DomainSource {
        domains,
        taints: pool.taints.clone(),
    }
}

/// For each key a pending pod spreads over (but hostname), the values the
/// existing nodes carry for it.
fn existing_domains(pods: &[Pod], existing: &[ExistingNode]) -> BTreeMap<String, BTreeSet<String>> {
    let keys: BTreeSet<&str> = pods
        .iter()
        .flat_map(|p| p.topology_spread.iter())
        .map(|c| c.topology_key.as_str())
        .filter(|k| *k != labels::HOSTNAME)
        .collect();
    keys.into_iter()
        .map(|k| {
            let values = existing
                .iter()
                .filter_map(|e| e.labels.get(k).cloned())
                .collect();
            (k.to_string(), values)
        })
        .collect()
}

/// Keys that decide which offerings of a type a NodeClaim may take.
const OFFERING_KEYS: [&str; 4] = [
    labels::ZONE,
    labels::CAPACITY_TYPE,
    labels::CAPACITY_RESERVATION_ID,
    labels::CAPACITY_RESERVATION_TYPE,
];

/// The requirements of `merged` that differ from `base`'s on the same key
/// (`merged` is `base` intersected with more: it never drops a key).
fn narrowing(base: &Requirements, merged: &Requirements) -> Requirements {
    Requirements::from_iter_reqs(
        merged
            .iter()
            .filter(|r| base.get(&r.key) != Some(*r))
            .cloned()
            .collect::<Vec<_>>(),
    )
}

/// Taints the kubelet or cloud provider put on a node for a while, which
/// Karpenter never lets keep pods off it (`KnownEphemeralTaints`).
const EPHEMERAL_TAINTS: [&str; 3] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// Karpenter's own registration taint (`karpenter.sh/unregistered:NoExecute`)
/// and the Node Readiness Controller's (`readiness.k8s.io/*`): ephemeral
/// taints (`KnownEphemeralTaints`) that do not keep pods off a NodePool's
/// node until it is initialized.
fn registration_taint(t: &Taint) -> bool {
    (t.key == "karpenter.sh/unregistered" && t.effect == crate::model::TaintEffect::NoExecute)
        || t.key.starts_with("readiness.k8s.io/")
}

/// Whether Karpenter has seen the node initialized (`karpenter.sh/initialized`),
/// or the node is not Karpenter's (then it is taken as it is).
fn initialized(n: &Node) -> bool {
    n.nodepool().is_none()
        || n.labels.get("karpenter.sh/initialized").map(String::as_str) == Some("true")
}

/// The taints that keep pods off an existing node, as Karpenter's state
/// node reports them: never the ephemeral `NoSchedule` ones (Karpenter's
/// `KnownEphemeralTaints`); until a NodePool's node is initialized, not
/// the registration taints, the ephemeral keys with any effect (the
/// kubelet's `not-ready:NoExecute`) and that NodePool's startup taints. On
/// an initialized node `not-ready:NoExecute` blocks.
fn effective_taints(n: &Node, pools: &[crate::model::NodePool]) -> Vec<Taint> {
    let startup: &[Taint] = match n.nodepool() {
        Some(name) if !initialized(n) => pools
            .iter()
            .find(|p| p.name == name)
            .map_or(&[], |p| p.startup_taints.as_slice()),
        _ => &[],
    };
    let uninitialized = n.nodepool().is_some() && !initialized(n);
    n.taints
        .iter()
        .filter(|t| {
            let ephemeral = EPHEMERAL_TAINTS.contains(&t.key.as_str());
            !(ephemeral && t.effect == crate::model::TaintEffect::NoSchedule)
                && !(uninitialized && (ephemeral || registration_taint(t)))
        })
        .filter(|t| {
            !startup
                .iter()
                .any(|s| s.key == t.key && s.effect == t.effect)
        })
        .cloned()
        .collect()
}

/// Whether a DaemonSet on nodes of type `ty` holds a host port `pod` asks for.
fn daemon_port_conflict(pod: &Pod, ty: &pools::PoolType) -> bool {
    !ty.daemon_ports.is_empty() && pod.host_ports.iter().any(|hp| ty.daemon_ports.contains(hp))
}

fn taint_string(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{:?}", t.key, t.effect)
    } else {
        format!("{}={}:{:?}", t.key, t.value, t.effect)
    }
}

impl<'a> Run<'a> {
    /// Topology groups in force for pod `p` at relaxation `r`.
    fn active_groups(&self, p: usize, r: &Relaxation) -> Vec<(usize, Kind)> {
        let pod = &self.pods[p];
        let g = &self.groups[p];
        let mut out = Vec::new();
        for (i, c) in pod.topology_spread.iter().enumerate() {
            if !(r.dropped_schedule_anyway
                && c.when_unsatisfiable == crate::model::WhenUnsatisfiable::ScheduleAnyway)
            {
                out.push((g.spread[i], Kind::Spread));
            }
        }
        out.extend(g.affinity.iter().map(|&i| (i, Kind::Affinity)));
        out.extend(g.anti_affinity.iter().map(|&i| (i, Kind::AntiAffinity)));
        let heaviest_first = |weights: Vec<i32>| {
            let mut idx: Vec<usize> = (0..weights.len()).collect();
            idx.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
            idx
        };
        for i in heaviest_first(
            pod.preferred_pod_affinity
                .iter()
                .map(|t| t.weight)
                .collect(),
        )
        .into_iter()
        .skip(r.dropped_preferred_affinity)
        {
            out.push((g.preferred_affinity[i], Kind::Affinity));
        }
        for i in heaviest_first(
            pod.preferred_pod_anti_affinity
                .iter()
                .map(|t| t.weight)
                .collect(),
        )
        .into_iter()
        .skip(r.dropped_preferred_anti_affinity)
        {
            out.push((g.preferred_anti_affinity[i], Kind::AntiAffinity));
        }
        out
    }

    /// `strict` (the pod's own node requirements) narrowed, on each key the
    /// pod spreads over (but hostname), to the domains it can reach: those
    /// of the NodePools whose taints it tolerates and whose requirements it
    /// is compatible with, and those of the existing nodes. A domain only a
    /// NodePool the pod cannot use offers (a tainted GPU pool's fourth
    /// zone) would otherwise hold the spread's minimum at zero and make
    /// every zone the pod can use look full; no node the pod could count
    /// ever appears there unless planned, and then it is counted.
    fn reachable_domains(&self, p: usize, mut strict: Requirements) -> Requirements {
        let pod = &self.pods[p];
        for c in &pod.topology_spread {
            let key = c.topology_key.as_str();
            if key == labels::HOSTNAME {
                continue;
            }
            let mut reach: BTreeSet<&str> = BTreeSet::new();
            for (pi, pool) in self.pools.iter().enumerate() {
                if untolerated(&pool.taints, &pod.tolerations).is_none()
                    && pool.requirements.compatible_ok(&strict)
                {
                    if let Some(d) = self.topology.pool_domains(pi, key) {
                        reach.extend(d.iter().map(String::as_str));
                    }
                }
            }
            if let Some(values) = self.existing_domains.get(key) {
                reach.extend(values.iter().map(String::as_str));
            }
            if !reach.is_empty() {
                strict.add(Requirement::in_values(key, reach));
            }
        }
        strict
    }

    fn add(&mut self, p: usize, r: &Relaxation) -> Result<(), String> {
        let pod = &self.pods[p];
        let pod_reqs = pod_view::node_requirements(pod, &self.volume[p], r);
        let mut groups = ActiveTopology {
            groups: self.active_groups(p, r),
            domains: self
                .reachable_domains(p, pod_view::domain_requirements(pod, &self.volume[p], r)),
            tolerate_prefer_no_schedule: r.tolerate_prefer_no_schedule,
            pool_blocked: Vec::new(),
            affinity_unmet: false,
            affinity_zones: None,
        };
        groups.pool_blocked = (self.pools.iter())
            .map(|pool| groups.blocking_taint(&pool.taints, pod).is_some())
            .collect();
        groups.affinity_unmet = self.topology.is_active()
            && self
                .topology
                .affinity_unmet(pod, &groups.groups, &groups.domains);
        groups.affinity_zones =
            self.topology
                .affinity_admits(pod, &groups.groups, &groups.domains, labels::ZONE);

        // Hints apply to the unrelaxed shape only.
        // Hints hold for one relaxation level: pods of a shape are relaxed
        // together, so a change of level starts the hints afresh.
        let shape = self.shape[p];
        if let Some(s) = shape {
            if self.hint_relax[s] != *r {
                self.hint_relax[s] = r.clone();
                self.existing_hint[s] = 0;
                self.claim_hint[s] = 0;
                self.solo_cache[s] = None;
            }
        }

        // 1. Existing nodes.
        let zones_admitted =
            self.topology
                .spread_admits(pod, &groups.groups, &groups.domains, labels::ZONE);
        let first = shape.map_or(0, |s| self.existing_hint[s]);
        let found = self
            .existing
            .candidates(first, &pod.requests, &pod_reqs, |class| {
                groups.blocking_taint(&class.taints, pod).is_none()
                    && match (&zones_admitted, class.labels.get(labels::ZONE)) {
                        (Some(ok), Some(zone)) => ok.contains(zone),
                        _ => true,
                    }
            })
            .find_map(|i| Some((i, self.try_existing(i, p, &pod_reqs, &groups)?)));
        if let Some((i, reqs)) = found {
            {
                self.existing.place(i, p, pod);
                let node = self.existing.get(i).node;
                self.topology
                    .record(pod, &self.groups[p].inverse, &reqs, &node.taints);
                self.size_left[self.size[p]] = self.size_left[self.size[p]].saturating_sub(1);
                if let Some(s) = shape {
                    self.existing_hint[s] = i;
                }
                return Ok(());
            }
        }
        if let Some(s) = shape {
            self.existing_hint[s] = self.existing.len();
        }

        // 2. NodeClaims planned in this run, if joining one costs no more
        //    than a node of its own would (see `joins_cheaply`).
        let solo = match shape.and_then(|s| self.solo_cache[s]) {
            Some(cached) => cached,
            None => {
                let v = self.solo_price(p, &pod_reqs);
                if let Some(s) = shape {
                    self.solo_cache[s] = Some(v);
                }
                v
            }
        };
        let first = shape.map_or(0, |s| self.claim_hint[s]);
        // Every pool carries the catalog's zone list: one bit per zone.
        let admitted_bits = match (&zones_admitted, self.pools.first()) {
            (Some(ok), Some(pool)) => pool
                .zones
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, z)| ok.contains(*z))
                .fold(0u64, |m, (i, _)| m | 1 << i),
            _ => 0,
        };
        let cls = self.req_class[p];
        let mut roomy = std::mem::take(&mut self.roomy[cls]);
        roomy.sync(self.claims.len());
        // Pods without a shape: start at the lowest hint of the buckets
        // the pod may use, skip each bucket's known refusals.
        let size = self.size[p];
        let mut hints = if shape.is_none() && *r == Relaxation::default() {
            Some(
                self.spread_hint[size]
                    .take()
                    .unwrap_or_else(|| Box::new([0; ZonePin::BUCKETS])),
            )
        } else {
            None
        };
        let first = match &hints {
            Some(h) => {
                let eligible = |b: usize| {
                    zones_admitted.is_none()
                        || b == 0
                        || b == ZonePin::BUCKETS - 1
                        || admitted_bits & (1 << (b - 1)) != 0
                };
                (0..ZonePin::BUCKETS)
                    .filter(|&b| eligible(b))
                    .map(|b| h[b] as usize)
                    .min()
                    .unwrap_or(0)
            }
            None => first,
        };
        // Buckets where a claim refused for a reason that may pass later.
        let mut blocked = [false; ZonePin::BUCKETS];
        let start = roomy.list.partition_point(|&c| (c as usize) < first);
        let mut joined = None;
        // NodeClaims whose trial refused the pod (ascending): step 4 would
        // refuse it again.
        let mut refused_claims: Vec<u32> = Vec::new();
        for k in start..roomy.list.len() {
            if roomy.dead[k] {
                continue;
            }
            if zones_admitted.is_some() && roomy.pins[k] != 0 && admitted_bits & roomy.pins[k] == 0
            {
                continue;
            }
            let c = roomy.list[k] as usize;
            // Known pins answer the hint without touching the NodeClaim.
            if let Some(h) = &hints {
                if roomy.pins[k] != 0 && c < h[ZonePin::Bit(roomy.pins[k]).bucket()] as usize {
                    continue;
                }
            }
            let claim = &self.claims[c];
            if let ZonePin::Bit(b) = claim.zone_pin {
                roomy.pins[k] = b;
            }
            let bucket = match &hints {
                Some(h) => {
                    let b = claim.zone_pin.bucket();
                    if c < h[b] as usize {
                        continue;
                    }
                    b
                }
                None => 0,
            };
            // A refusal that only hardens moves the bucket's hint past `c`
            // while nothing before it in the bucket may pass later.
            let mut refused = |hints: &mut Option<Box<[u32; ZonePin::BUCKETS]>>, hard: bool| {
                if let Some(h) = hints.as_mut() {
                    if !hard {
                        blocked[bucket] = true;
                    } else if !blocked[bucket] {
                        h[bucket] = c as u32 + 1;
                    }
                }
            };
            if !claim
                .requests
                .fits_in_with(&pod.requests, &claim.max_allocatable)
            {
                roomy.kill(k);
                refused(&mut hints, true);
                refused_claims.push(c as u32);
                continue;
            }
            if let Some(ok) = &zones_admitted {
                match self.claims[c].zone_pin {
                    ZonePin::Free => {}
                    ZonePin::Bit(b) => {
                        if admitted_bits & b == 0 {
                            continue;
                        }
                    }
                    ZonePin::Other => {
                        let pinned = self.claims[c].requirements.get(labels::ZONE).and_then(|z| {
                            (!z.is_complement() && z.values().len() == 1)
                                .then(|| z.values().iter().next())
                                .flatten()
                        });
                        if pinned.is_some_and(|z| !ok.contains(z)) {
                            continue;
                        }
                    }
                }
            }
            if !self.pack && !self.may_join_memo(c, p, &pod_reqs, solo, r) {
                refused(&mut hints, true);
                continue;
            }
            match self.try_claim(c, p, &pod_reqs, &groups) {
                Ok(fit) => {
                    if self.pack || self.joins_cheaply(c, p, &pod_reqs, &fit, solo) {
                        joined = Some((c, fit));
                        break;
                    }
                    refused(&mut hints, true);
                }
                Err(_) => {
                    refused(&mut hints, false);
                    refused_claims.push(c as u32);
                }
            }
        }
        if let Some(h) = hints {
            self.spread_hint[size] = Some(h);
        }
        roomy.compact();
        self.roomy[cls] = roomy;
        if let Some((c, fit)) = joined {
            self.commit(c, p, fit);
            if let Some(s) = shape {
                self.claim_hint[s] = c;
            }
            return Ok(());
        }
        if let Some(s) = shape {
            self.claim_hint[s] = self.claims.len();
        }

        // 3. A new NodeClaim from the heaviest NodePool that can take it.
        let mut reasons = self.unavailable_pools.clone();
        if self.pools.is_empty() && reasons.is_empty() {
            reasons.push(
                "no NodePool or Provisioner in the inputs, and no existing node fits".to_string(),
            );
        }
        for pi in 0..self.pools.len() {
            // A heavier NodePool out of room under its limits still takes
            // the pod on a NodeClaim it already has, whatever the cost rule
            // says: weights rank NodePools before price, and those claims
            // are charged against the limits already (their largest type).
            if self.join_heavier && pi > 0 && self.pools[pi].np.weight < self.pools[0].np.weight {
                if let Some((c, fit)) = self.join_heavier_limited(pi, p, &pod_reqs, &groups) {
                    self.commit(c, p, fit);
                    return Ok(());
                }
            }
            match self.try_new(pi, p, &pod_reqs, &groups) {
                Ok((claim, fit)) => {
                    let reservation = claim.reservation;
                    self.claims.push(claim);
                    let c = self.claims.len() - 1;
                    self.commit(c, p, fit);
                    if let Some(r) = reservation {
                        self.take_reservation(r);
                    }
                    return Ok(());
                }
                Err(e) => reasons.push(self.note_exhausted(pi, p, &pod_reqs, e)),
            }
        }
        // 4. Never lose a pod to the cost rule: join any NodeClaim that fits.
        let any_claim = if groups.affinity_unmet {
            0
        } else {
            self.claims.len()
        };
        let mut known = refused_claims.iter().peekable();
        for c in 0..any_claim {
            if known.next_if(|&&k| k as usize == c).is_some() {
                continue;
            }
            if let Ok(fit) = self.try_claim(c, p, &pod_reqs, &groups) {
                self.commit(c, p, fit);
                return Ok(());
            }
        }
        Err(reasons.join("; "))
    }

    /// A NodeClaim of a NodePool heavier than `pi` and with limits that
    /// can take pod `p` (heaviest NodePool first, then creation order);
    /// see step 3 of `add`.
    fn join_heavier_limited(
        &self,
        pi: usize,
        p: usize,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Option<(usize, Fit)> {
        let weight = self.pools[pi].np.weight;
        let heavier: Vec<usize> = (0..pi)
            .filter(|&h| self.pools[h].np.weight > weight && self.pools[h].remaining.is_some())
            .collect();
        if heavier.is_empty() {
            return None;
        }
        let requests = &self.pods[p].requests;
        for h in heavier {
            for (c, claim) in self.claims.iter().enumerate() {
                if claim.pool != h
                    || !claim
                        .requests
                        .fits_in_with(requests, &claim.max_allocatable)
                {
                    continue;
                }
                if let Ok(fit) = self.try_claim(c, p, pod_reqs, groups) {
                    return Some((c, fit));
                }
            }
        }
        None
    }

    /// One more NodeClaim launches into reservation `r`. When that was its
    /// last instance, its offerings are switched off everywhere and the
    /// caches that depend on offerings are dropped (once per reservation).
    fn take_reservation(&mut self, r: u32) {
        let r = r as usize;
        self.res.left[r] = self.res.left[r].saturating_sub(1);
        if self.res.left[r] > 0 {
            return;
        }
        for &(pi, t, oi) in &self.res.offerings[r] {
            self.pools[pi].types[t].offerings[oi].available = 0;
        }
        self.compat_cache.borrow_mut().clear();
        self.no_type_reasons.borrow_mut().clear();
        self.slot_cache.borrow_mut().clear();
        self.solo_cache.iter_mut().for_each(|c| *c = None);
        self.spread_hint.iter_mut().for_each(|h| *h = None);
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Adds to a NodePool's reason the used-up reservations that are why
    /// the pod found no room: only when the pod, in this NodePool, may use
    /// nothing but reserved capacity (`capacity-type In [reserved]`, or a
    /// reservation id / type it requires), and only the reservations whose
    /// offering the pod could have taken (id, type, zone and instance type
    /// allowed, the pod fits the type).
    fn note_exhausted(
        &self,
        pi: usize,
        p: usize,
        pod_reqs: &Requirements,
        reason: String,
    ) -> String {
        let pool = &self.pools[pi];
        if pool.reservations.is_empty() || !pool.requirements.compatible_ok(pod_reqs) {
            return reason;
        }
        let merged = pool.requirements.intersection(pod_reqs);
        let filter = pool.filter(&merged);
        if !filter.reserved_only() {
            return reason;
        }
        let requests = pool.daemon_overhead.plus(&self.pods[p].requests);
        let exhausted: Vec<String> = pool
            .reservations
            .iter()
            .map(|&r| r as usize)
            .filter(|&r| self.res.left[r] == 0)
            .filter(|&r| {
                let held = filter.clone().holding(Some(r as u32));
                self.res.offerings[r].iter().any(|&(opi, t, oi)| {
                    let ty = &pool.types[t];
                    opi == pi
                        && held.allows(&ty.offerings[oi])
                        && requests.fits_in(&ty.allocatable)
                        && ty.requirements.intersects_ok(&merged)
                })
            })
            .map(|r| {
                let cr = &self.res.all[r];
                format!(
                    "{} ({} in {}: {} of {} available instances planned)",
                    cr.id,
                    cr.instance_type,
                    cr.availability_zone,
                    self.res.start[r] - self.res.left[r],
                    self.res.start[r]
                )
            })
            .collect();
        if exhausted.is_empty() {
            reason
        } else {
            format!(
                "{reason} (capacity reservations exhausted: {})",
                exhausted.join(", ")
            )
        }
    }

    /// The price of the cheapest node that could run pod `p` alone (with its
    /// NodePool's daemonset overhead), in the first NodePool that can take
    /// it; topology is ignored, so this is an estimate for the cost rule.
    fn solo_price(&self, p: usize, pod_reqs: &Requirements) -> Option<f64> {
        let pod = &self.pods[p];
        self.pools.iter().enumerate().find_map(|(pi, pool)| {
            if untolerated(&pool.taints, &pod.tolerations).is_some()
                || !pool.requirements.compatible_ok(pod_reqs)
            {
                return None;
            }
            let reqs = pool.requirements.intersection(pod_reqs);
            let need = pool.daemon_overhead.plus(&pod.requests);
            self.compatible_types(pi, &reqs)
                .iter()
                .map(|&t| &pool.types[t])
                .find(|t| need.fits_in(&t.allocatable))
                .map(|t| pool.node_price(t.price))
        })
    }

    /// The cost rule: a pod joins an in-flight NodeClaim only if the claim's
    /// cheapest type grows in price by no more than a node of the pod's own
    /// would cost (2% tolerance, so linear price steps within a family
    /// count as equal). Karpenter keeps packing until no type fits, which
    /// drives NodeClaims to the largest, often least price-efficient, types.
    fn joins_cheaply(
        &self,
        c: usize,
        p: usize,
        pod_reqs: &Requirements,
        fit: &Fit,
        solo: Option<f64>,
    ) -> bool {
        fit.types
            .first()
            .is_none_or(|after| self.growth_pays(c, p, pod_reqs, after, solo))
    }

    /// [`Self::may_join_cheaply`], remembered per NodeClaim (see `JoinMemo`;
    /// relaxed pods are not remembered).
    fn may_join_memo(
        &mut self,
        c: usize,
        p: usize,
        pod_reqs: &Requirements,
        solo: Option<f64>,
        r: &Relaxation,
    ) -> bool {
        if *r != Relaxation::default() {
            return self.may_join_cheaply(c, p, pod_reqs, solo);
        }
        let size = self.size[p];
        let claim = &self.claims[c];
        let key = JoinMemo {
            size,
            solo: solo.map(f64::to_bits),
            version: claim.version,
            size_left: if claim.size == Some(size) {
                self.size_left[size]
            } else {
                usize::MAX
            },
            epoch: self.epoch,
        };
        if let Some((memo, answer)) = claim.memo_answer() {
            // Fewer pods of the size waiting only makes growth pay less, so
            // a "no" stands as `size_left` falls.
            let same = JoinMemo {
                size_left: key.size_left,
                ..memo
            } == key;
            if same
                && (memo.size_left == key.size_left || (!answer && key.size_left < memo.size_left))
            {
                return answer;
            }
        }
        let answer = self.may_join_cheaply(c, p, pod_reqs, solo);
        self.claims[c].memo = Some(key);
        self.claims[c].memo_yes = answer;
        answer
    }

    /// A cheap necessary condition for [`Self::joins_cheaply`] using
    /// resources only: the first (cheapest) remaining type that holds the
    /// grown NodeClaim must pass the cost rule.
    fn may_join_cheaply(
        &self,
        c: usize,
        p: usize,
        pod_reqs: &Requirements,
        solo: Option<f64>,
    ) -> bool {
        let claim = &self.claims[c];
        let requests = claim.requests.plus(&self.pods[p].requests);
        if !requests.fits_in(&claim.max_allocatable) {
            return false;
        }
        let pool = &self.pools[claim.pool];
        let (Some(before), Some(solo)) = (claim.types.first(), solo) else {
            return true;
        };
        // Types are sorted by price: past the step the plain cost rule
        // allows, only the look-ahead rule (same size class) can still pass.
        let cheap_limit = pool.types[before].price + solo * (COST_TOLERANCE + pool.tolerance());
        let look_ahead = claim.size == Some(self.size[p]);
        for t in claim.types.iter() {
            if !look_ahead && pool.types[t].price > cheap_limit {
                return false;
            }
            if requests.fits_in(&pool.types[t].allocatable) {
                return self.growth_pays(c, p, pod_reqs, t, Some(solo));
            }
        }
        false
    }

    /// Whether NodeClaim `c` may grow to type `after` (its new cheapest) to
    /// take pod `p`: the price step is no more than a node of the pod's own
    /// (`solo`, 2% slack), or, when every pod on the NodeClaim has this
    /// pod's size class, the step is no more than the pods of that size it
    /// makes room for (as many as still wait) would cost at the best price
    /// per pod slot any type offers. The second
    /// test looks ahead: growing a full `t4g.micro` to a `t4g.small` costs a
    /// bit more than one more micro, but the small then holds seven more pods
    /// for nothing.
    fn growth_pays(
        &self,
        c: usize,
        p: usize,
        pod_reqs: &Requirements,
        after: usize,
        solo: Option<f64>,
    ) -> bool {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let Some(before) = claim.types.first() else {
            return true;
        };
        let Some(solo) = solo else { return true };
        let slack = COST_TOLERANCE + pool.tolerance();
        if pool.types[after].price - pool.types[before].price <= solo * slack {
            return true;
        }
        // Slots are only meaningful when every pod on the claim has this
        // shape, and only worth buying if pods of the shape are left to fill them.
        let Some(s) = claim.size.filter(|s| self.size[p] == *s) else {
            return false;
        };
        let pod = &self.pods[p];
        let Some((_, copies)) = slot_price(pool, after, pod) else {
            return false;
        };
        // Pods of this size the grown NodeClaim would take beyond what it
        // holds, this one included, as far as such pods are still waiting.
        let extra = copies
            .saturating_sub(claim.pods.len())
            .min(self.size_left[s]);
        let step = pool.types[after].price - pool.types[before].price;
        self.best_slot_price(claim.pool, p, pod_reqs)
            .is_some_and(|best| step <= extra as f64 * best * slack)
    }

    /// The lowest price per pod slot for pods of `p`'s shape over the types
    /// of pool `pi` the pod may use; cached per (pool, size class).
    fn best_slot_price(&self, pi: usize, p: usize, pod_reqs: &Requirements) -> Option<f64> {
        let key = Some((pi, self.size[p]));
        if let Some(k) = key {
            if let Some(hit) = self.slot_cache.borrow().get(&k) {
                return *hit;
            }
        }
        let pool = &self.pools[pi];
        let reqs = pool.requirements.intersection(pod_reqs);
        let pod = &self.pods[p];
        let best = self
            .compatible_types(pi, &reqs)
            .iter()
            .filter_map(|&t| slot_price(pool, t, pod).map(|(price, _)| price))
            .min_by(f64::total_cmp);
        if let Some(k) = key {
            self.slot_cache.borrow_mut().insert(k, best);
        }
        best
    }

    fn try_existing(
        &self,
        i: usize,
        p: usize,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Option<Requirements> {
        let e = self.existing.get(i);
        let pod = &self.pods[p];
        if !pod.requests.fits_in(&e.remaining) {
            return None;
        }
        if groups.blocking_taint(&e.taints, pod).is_some() {
            return None;
        }
        if pod.host_ports.iter().any(|hp| e.host_ports.contains(hp)) {
            return None;
        }
        labels_satisfy(&e.labels, pod_reqs).ok()?;
        if !self.topology.is_active() {
            return Some(e.requirements());
        }
        let zone_admitted = match e.labels.get(labels::ZONE) {
            Some(z) => groups.affinity_zone_ok(std::iter::once(z)),
            None => true,
        };
        if groups.affinity_unmet || !zone_admitted {
            return None;
        }
        let host = e.labels.get(labels::HOSTNAME)?;
        if !self.topology.admits_host(pod, &groups.groups, host) {
            return None;
        }
        self.topology
            .add_requirements(pod, &groups.groups, &groups.domains, &e.requirements())
            .ok()
    }

    fn try_claim(
        &self,
        c: usize,
        p: usize,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<Fit, ClaimRefusal> {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let pod = &self.pods[p];
        let requests = claim.requests.plus(&pod.requests);
        if !requests.fits_in(&claim.max_allocatable) {
            return Err(ClaimRefusal::Full);
        }
        if groups.pool_blocked[claim.pool] {
            return Err(ClaimRefusal::Taint);
        }
        if pod
            .host_ports
            .iter()
            .any(|hp| claim.host_ports.contains(hp))
        {
            return Err(ClaimRefusal::HostPort);
        }
        if !claim.requirements.compatible_ok(pod_reqs) {
            return Err(ClaimRefusal::Requirements);
        }
        let zone_admitted = match claim.requirements.get(labels::ZONE) {
            Some(z) if !z.is_complement() => groups.affinity_zone_ok(z.values().iter()),
            _ => true,
        };
        if groups.affinity_unmet || !zone_admitted {
            return Err(ClaimRefusal::Topology);
        }
        let merged = if self.topology.is_active() {
            self.topology
                .add_requirements_over(
                    pod,
                    &groups.groups,
                    &groups.domains,
                    &claim.requirements,
                    pod_reqs,
                )
                .map_err(|_| ClaimRefusal::Topology)?
        } else {
            claim.requirements.intersection(pod_reqs)
        };
        // Only the keys the pod (or topology) narrowed need checking: every
        // type of the claim already intersects the claim's requirements.
        let changed = narrowing(&claim.requirements, &merged);
        let offerings_change = changed
            .iter()
            .any(|r| OFFERING_KEYS.contains(&r.key.as_str()));
        let filter = pool.filter(&merged).holding(claim.reservation);
        let mut candidates = std::borrow::Cow::Borrowed(&claim.types);
        for r in changed.iter() {
            let allowed = self.types_intersecting(claim.pool, r);
            candidates = std::borrow::Cow::Owned(candidates.intersect(&allowed));
            if candidates.is_empty() {
                return Err(ClaimRefusal::NoInstanceType);
            }
        }
        let types = candidates.filter(|t| {
            let ty = &pool.types[t];
            requests.fits_in(&ty.allocatable)
                && !daemon_port_conflict(pod, ty)
                && (!offerings_change || ty.has_offering(&filter))
        });
        if types.is_empty() {
            return Err(ClaimRefusal::NoInstanceType);
        }
        if claim.reservation.is_none() && !min_values::met(pool, types.iter(), &claim.min_values) {
            return Err(ClaimRefusal::MinValues);
        }
        Ok(Fit {
            requirements: merged,
            types,
        })
    }

    fn try_new(
        &self,
        pi: usize,
        p: usize,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Result<(Claim, Fit), String> {
        let pool = &self.pools[pi];
        let name = &pool.np.name;
        let pod = &self.pods[p];
        // Karpenter drops such a NodePool before scheduling, with this
        // message.
        if pool.types.is_empty() {
            return Err(format!(
                "NodePool {name:?}: nodepool requirements filtered out all available instance types ({})",
                display_reqs(&pool.requirements)
            ));
        }
        if let Some(t) = groups.blocking_taint(&pool.taints, pod) {
            return Err(format!(
                "NodePool {name:?} has taint {} that the pod does not tolerate",
                taint_string(t)
            ));
        }
        if let Err(e) = pool.requirements.compatible(pod_reqs) {
            return Err(format!("NodePool {name:?}: {}", incompatibility(&e, name)));
        }
        // A new node's hostname is not known in advance (Karpenter gives
        // NodeClaims a placeholder): a pod that names hosts (a volume pinned
        // to one, or its own affinity) can only go to an existing node.
        if let Some(h) = pod_reqs
            .get(labels::HOSTNAME)
            .filter(|h| !h.is_complement())
        {
            return Err(format!(
                "the pod must run on {} {:?} (kubernetes.io/hostname), which no new node can be",
                if h.len() == 1 {
                    "node"
                } else {
                    "one of the nodes"
                },
                h.values()
            ));
        }
        let n = self.claim_counter.get(&pi).copied().unwrap_or(0) + 1;
        let claim_name = format!("{name}-{n}");
        let mut reqs = pool.requirements.clone();
        reqs.add(Requirement::in_values(
            labels::HOSTNAME,
            [claim_name.as_str()],
        ));
        let mut merged = reqs.intersection(pod_reqs);
        if self.topology.is_active() {
            merged = self
                .topology
                .add_requirements(pod, &groups.groups, &groups.domains, &merged)
                .map_err(|e| format!("NodePool {name:?}: {e}"))?;
        }
        let requests = pool.daemon_overhead.plus(&pod.requests);
        let compatible = self.compatible_types(pi, &merged);
        if compatible.is_empty() {
            let mut key = merged.clone();
            key.remove(labels::HOSTNAME);
            if let Some(reason) = self.no_type_reasons.borrow().get(&(pi, key.clone())) {
                return Err(reason.clone());
            }
            let reason = self.explain_no_type(pi, &merged);
            self.no_type_reasons
                .borrow_mut()
                .insert((pi, key), reason.clone());
            return Err(reason);
        }
        let fitting: Vec<usize> = compatible
            .iter()
            .copied()
            .filter(|&i| requests.fits_in(&pool.types[i].allocatable))
            .collect();
        if fitting.is_empty() {
            return Err(self.explain_no_fit(pi, &compatible, &requests));
        }
        let fitting: Vec<usize> = if pod.host_ports.is_empty() {
            fitting
        } else {
            let free: Vec<usize> = fitting
                .iter()
                .copied()
                .filter(|&i| !daemon_port_conflict(pod, &pool.types[i]))
                .collect();
            if free.is_empty() {
                return Err(format!(
                    "NodePool {name:?}: a DaemonSet on every instance type that fits holds a host port the pod asks for ({})",
                    pod.host_ports
                        .iter()
                        .map(|(proto, port)| format!("{proto}/{port}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            free
        };
        let types: Vec<usize> = match &pool.remaining {
            Some(lim) => {
                let charged = self.charged(pi);
                let admitted: Vec<usize> = fitting
                    .iter()
                    .copied()
                    .filter(|&i| lim.admits(&pool.types[i].capacity, &charged))
                    .collect();
                if admitted.is_empty() {
                    let detail = lim
                        .exceeded(&pool.types[fitting[0]].capacity, &charged)
                        .map(|(k, q)| format!(" ({k}: {q})"))
                        .unwrap_or_default();
                    return Err(format!(
                        "NodePool {name:?} limits{detail} would be exceeded by every instance type that fits the pod"
                    ));
                }
                admitted
            }
            None => fitting,
        };
        let (types, reservation) = self.reserve(pi, &mut merged, types)?;
        let (min_values, min_values_relaxed) = match reservation {
            Some(_) => (BTreeMap::new(), false),
            None => self.min_values_floor(pi, &types)?,
        };
        let claim = Claim {
            pool: pi,
            name: claim_name,
            requirements: reqs,
            types: TypeSet::default(),
            requests: pool.daemon_overhead.clone(),
            pods: vec![],
            host_ports: BTreeSet::new(),
            max_allocatable: Resources::new(),
            max_capacity: Resources::new(),
            size: None,
            used: false,
            reservation,
            version: 0,
            memo: None,
            memo_yes: false,
            zone_pin: ZonePin::Free,
            min_values,
            min_values_relaxed,
        };
        Ok((
            claim,
            Fit {
                requirements: merged,
                types: TypeSet::from_indices(types, pool.types.len()),
            },
        ))
    }

    /// Reserved offerings first: when one of `types` has an available
    /// reserved offering under `merged`, the new NodeClaim launches into the
    /// best of them (cheapest on-demand-equivalent price, then type and
    /// zone) and is pinned to it (capacity type, reservation id and type,
    /// zone, instance type); otherwise it is kept out of every reservation
    /// (`capacity-type NotIn [reserved]`), since only pinned NodeClaims are
    /// counted against a reservation.
    fn reserve(
        &self,
        pi: usize,
        merged: &mut Requirements,
        mut types: Vec<usize>,
    ) -> Result<(Vec<usize>, Option<u32>), String> {
        let pool = &self.pools[pi];
        if pool.reservations.is_empty()
            || !merged.allows(labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_RESERVED)
        {
            return Ok((types, None));
        }
        let best = {
            let filter = pool.filter(merged);
            let mut best: Option<(usize, &PoolOffering)> = None;
            for &t in types.iter().filter(|&&t| pool.types[t].has_reserved) {
                for o in pool.types[t].offerings.iter().filter(|o| filter.allows(o)) {
                    if o.capacity_type == CapacityType::Reserved
                        && best.is_none_or(|b| offering_order(pool, (t, o), b).is_lt())
                    {
                        best = Some((t, o));
                    }
                }
            }
            best
        };
        if let Some((t, o)) = best {
            let r = o
                .reservation
                .as_ref()
                .expect("reserved offerings have a reservation");
            merged.add(Requirement::in_values(
                labels::CAPACITY_TYPE,
                [labels::CAPACITY_TYPE_RESERVED],
            ));
            merged.add(Requirement::in_values(
                labels::CAPACITY_RESERVATION_ID,
                [r.id.as_str()],
            ));
            merged.add(Requirement::in_values(
                labels::CAPACITY_RESERVATION_TYPE,
                [crate::reservations::reservation_type_label(
                    r.reservation_type,
                )],
            ));
            merged.add(Requirement::in_values(labels::ZONE, [o.zone.as_str()]));
            merged.add(Requirement::in_values(
                labels::INSTANCE_TYPE,
                [pool.types[t].name.as_str()],
            ));
            return Ok((vec![t], Some(o.res_index)));
        }
        merged.add(Requirement::not_in(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_RESERVED],
        ));
        let filter = pool.filter(merged);
        types.retain(|&t| pool.types[t].has_offering(&filter));
        if types.is_empty() {
            return Err(format!(
                "NodePool {:?}: no instance type satisfies {}",
                pool.np.name,
                display_reqs(merged)
            ));
        }
        Ok((types, None))
    }

    /// The `minValues` floors of a new NodeClaim of pool `pi` over `types`,
    /// and whether they were relaxed: the NodePool's own when the types
    /// meet them; under BestEffort, lowered to what the types offer;
    /// under Strict, the pod's reason.
    fn min_values_floor(
        &self,
        pi: usize,
        types: &[usize],
    ) -> Result<(BTreeMap<String, u32>, bool), String> {
        let pool = &self.pools[pi];
        let mut floor = pool.np.min_values.clone();
        let short = min_values::shortfalls(pool, types.iter().copied(), &floor);
        if short.is_empty() {
            return Ok((floor, false));
        }
        if self.min_values_policy == MinValuesPolicy::Strict {
            return Err(min_values::strict_reason(&pool.np.name, &short));
        }
        for s in &short {
            floor.insert(s.key.clone(), s.have);
        }
        Ok((floor, true))
    }

    /// Indices of pool `pi`'s types compatible with `reqs`, cached: every
    /// pod of a Deployment asks the same question.
    fn compatible_types(&self, pi: usize, reqs: &Requirements) -> std::rc::Rc<Vec<usize>> {
        let mut key = reqs.clone();
        key.remove(labels::HOSTNAME);
        if let Some(hit) = self.compat_cache.borrow().get(&(pi, key.clone())) {
            return hit.clone();
        }
        let pool = &self.pools[pi];
        let filter = pool.filter(&key);
        let v: Vec<usize> = pool
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.requirements.intersects_ok(&key) && t.has_offering(&filter))
            .map(|(i, _)| i)
            .collect();
        let v = std::rc::Rc::new(v);
        self.compat_cache.borrow_mut().insert((pi, key), v.clone());
        v
    }

    /// Pool `pi`'s types whose labels intersect `r`, cached.
    fn types_intersecting(&self, pi: usize, r: &Requirement) -> std::rc::Rc<TypeSet> {
        let key = (pi, r.clone());
        if let Some(hit) = self.req_type_cache.borrow().get(&key) {
            return hit.clone();
        }
        let single = Requirements::from_iter_reqs([r.clone()]);
        let types = &self.pools[pi].types;
        let set = std::rc::Rc::new(TypeSet::from_indices(
            (0..types.len()).filter(|&t| types[t].requirements.intersects_ok(&single)),
            types.len(),
        ));
        self.req_type_cache.borrow_mut().insert(key, set.clone());
        set
    }

    /// Resources charged against pool `pi`'s limits by this run's NodeClaims.
    fn charged(&self, pi: usize) -> Resources {
        let mut r = Resources::new();
        for c in self.claims.iter().filter(|c| c.pool == pi) {
            r.add_assign(&c.max_capacity);
            r.add_assign(&pools::Limits::one_node());
        }
        r
    }

    fn commit(&mut self, c: usize, p: usize, fit: Fit) {
        let pod = &self.pods[p];
        let size = self.size[p];
        self.size_left[size] = self.size_left[size].saturating_sub(1);
        let claim = &mut self.claims[c];
        claim.size = if claim.used && claim.size != Some(size) {
            None
        } else {
            Some(size)
        };
        claim.used = true;
        claim.version = claim.version.wrapping_add(1);
        let pool = &self.pools[claim.pool];
        if claim.pods.is_empty() {
            *self.claim_counter.entry(claim.pool).or_default() += 1;
        }
        claim.requirements = fit.requirements;
        claim.zone_pin = ZonePin::of(&claim.requirements, &pool.zones);
        let types_changed = fit.types.len() != claim.types.len();
        let old_types = std::mem::replace(&mut claim.types, fit.types);
        claim.requests.add_assign(&pod.requests);
        claim.pods.push(p);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        // The type list only ever shrinks, so the maxima only change when
        // every type attaining one of their components was dropped.
        let dropped_held_max = types_changed
            && (claim.max_allocatable.is_zero() || {
                let (mut lost_a, mut lost_c) = (0u32, 0u32);
                for t in old_types.iter().filter(|&t| !claim.types.contains(t)) {
                    lost_a |= pool.types[t].allocatable.attains(&claim.max_allocatable);
                    lost_c |= pool.types[t].capacity.attains(&claim.max_capacity);
                }
                // Another other-resource component may tie: recompute then.
                let other = 1u32 << crate::resources::KNOWN.len();
                if (lost_a | lost_c) & other != 0 {
                    true
                } else {
                    for t in claim.types.iter() {
                        if lost_a == 0 && lost_c == 0 {
                            break;
                        }
                        lost_a &= !pool.types[t].allocatable.attains(&claim.max_allocatable);
                        lost_c &= !pool.types[t].capacity.attains(&claim.max_capacity);
                    }
                    lost_a != 0 || lost_c != 0
                }
            });
        if dropped_held_max {
            let mut max_a = Resources::new();
            let mut max_c = Resources::new();
            for t in claim.types.iter() {
                max_a.max_assign(&pool.types[t].allocatable);
                max_c.max_assign(&pool.types[t].capacity);
            }
            claim.max_allocatable = max_a;
            claim.max_capacity = max_c;
        }
        let taints = &self.pools[claim.pool].taints;
        self.topology
            .record(pod, &self.groups[p].inverse, &claim.requirements, taints);
    }

    fn explain_no_type(&self, pi: usize, reqs: &Requirements) -> String {
        let pool = &self.pools[pi];
        let name = &pool.np.name;
        // Find the requirement that rules out every type.
        for r in reqs.iter() {
            if r.key == labels::HOSTNAME || r.key == labels::NODEPOOL {
                continue;
            }
            let single = Requirements::from_iter_reqs([r.clone()]);
            let filter = pool.filter(&single);
            let any = pool
                .types
                .iter()
                .any(|t| t.requirements.intersects_ok(&single) && t.has_offering(&filter));
            if !any {
                return format!("no instance type in NodePool {name:?} satisfies {r}");
            }
        }
        format!(
            "no instance type in NodePool {name:?} satisfies all of {}",
            display_reqs(reqs)
        )
    }

    fn explain_no_fit(&self, pi: usize, compatible: &[usize], requests: &Resources) -> String {
        let pool = &self.pools[pi];
        let name = &pool.np.name;
        for (res, want) in requests.iter() {
            let largest = compatible
                .iter()
                .map(|&i| pool.types[i].allocatable.get(res))
                .max()
                .unwrap_or_default();
            if want > largest {
                let overhead = pool.daemon_overhead.get(res);
                let ds = if overhead.is_zero() {
                    String::new()
                } else {
                    format!(" plus {overhead} daemonset overhead")
                };
                return if largest.is_zero() {
                    format!(
                        "no instance type in NodePool {name:?} has {res} (pod requests {}{ds})",
                        want - overhead
                    )
                } else {
                    format!(
                        "no instance type in NodePool {name:?} has {} {res}{ds} (largest allocatable: {largest})",
                        want - overhead
                    )
                };
            }
        }
        format!("no single instance type in NodePool {name:?} has room for {requests} together")
    }

    fn into_plan(
        mut self,
        failed: Vec<usize>,
        errors: Vec<Option<String>>,
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
            let plan = claim_plan(&claim, pool, pods, &mut lists);
            hourly += plan.price.min;
            volumes += plan.volume_price;
            node_claims.push(plan);
        }
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
        let mut unschedulable: Vec<Unschedulable> = failed
            .iter()
            .map(|&p| Unschedulable {
                pod: pods[p].key(),
                reason: errors[p]
                    .clone()
                    .unwrap_or_else(|| "could not be placed".into()),
            })
            .collect();
        unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        let scheduled = pods.len() - unschedulable.len();
        let mut reservations: Vec<ReservationUse> = (0..self.res.all.len())
            .filter(|&r| self.res.offered[r])
            .map(|r| {
                let cr = &self.res.all[r];
                ReservationUse {
                    id: cr.id.clone(),
                    instance_type: cr.instance_type.clone(),
                    zone: cr.availability_zone.clone(),
                    reservation_type: crate::reservations::reservation_type_label(
                        cr.reservation_type,
                    )
                    .to_string(),
                    instance_match_criteria: cr.instance_match_criteria.clone(),
                    available: self.res.start[r],
                    used: self.res.start[r] - self.res.left[r],
                }
            })
            .collect();
        reservations.sort_by(|a, b| a.id.cmp(&b.id));
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
}

/// Appended to the reason of a pod that only reserved capacity could take
/// while the ReservedCapacity feature gate is off.
const RESERVED_GATE_OFF: &str = " (the ReservedCapacity feature gate is off, so no reserved capacity is offered; flotilla plan --reserved-capacity turns it on)";

/// Whether `reqs` leave only reserved capacity: `capacity-type` allows
/// `reserved` and neither spot nor on-demand, or a reservation id or type
/// is asked for.
fn only_reserved(reqs: &Requirements) -> bool {
    let ct = |v: &str| reqs.allows(labels::CAPACITY_TYPE, v);
    let asks = |k: &str| reqs.get(k).is_some_and(|r| !r.is_complement());
    (ct(labels::CAPACITY_TYPE_RESERVED)
        && !ct(CapacityType::Spot.as_str())
        && !ct(CapacityType::OnDemand.as_str()))
        || asks(labels::CAPACITY_RESERVATION_ID)
        || asks(labels::CAPACITY_RESERVATION_TYPE)
}

/// Whether only reserved capacity could take `pod`: it asks for it (node
/// selector, or every required affinity term), or every NodePool that
/// launches offers nothing else.
fn needs_reserved(pod: &Pod, pools: &[crate::model::NodePool]) -> bool {
    let pod_only = only_reserved(&pod.node_selector)
        || (!pod.required_terms.is_empty()
            && pod
                .required_terms
                .iter()
                .all(|t| only_reserved(&pod.node_selector.intersection(t))));
    let mut launching = pools
        .iter()
        .filter(|np| np.unavailable.is_none())
        .peekable();
    pod_only || (launching.peek().is_some() && launching.all(|np| only_reserved(&np.requirements)))
}

fn display_reqs(r: &Requirements) -> String {
    r.iter()
        .filter(|q| q.key != labels::HOSTNAME)
        .map(|q| q.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn incompatibility(e: &crate::requirements::Incompatibility, pool: &str) -> String {
    use crate::requirements::Incompatibility::*;
    match e {
        Undefined { key, incoming } => format!(
            "label {key:?} is not defined by NodePool {pool:?} (pod requires {incoming}; add it to the NodePool's requirements with Exists or to its labels)"
        ),
        Disjoint { key, incoming, existing } => {
            format!("{incoming} not allowed by NodePool {pool:?} ({existing}) on {key}")
        }
    }
}

/// What a NodeClaim's offerings come to (ranked types, capacity types,
/// zones, the offering a fleet would prefer), shared between NodeClaims of
/// the output with the same NodePool, requirements (hostname aside),
/// reservation and types: computing it walks every offering of every type,
/// and thousands of NodeClaims share a handful of answers.
struct OfferSummary {
    instance_types: std::sync::Arc<Vec<String>>,
    capacity_types: Vec<CapacityType>,
    zones: Vec<String>,
    /// (type, offering) a fleet would prefer.
    preferred: Option<(usize, usize)>,
}

type OfferKey = (usize, Option<u32>, Requirements, TypeSet);

#[derive(Default)]
struct TypeLists(std::collections::HashMap<OfferKey, std::rc::Rc<OfferSummary>>);

/// The order in which a fleet prefers offerings: reserved, then spot, then
/// on-demand; cheapest adjusted price within a capacity type; then real
/// price, type name and zone for a total order.
fn offering_order(
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

fn offer_summary(claim: &Claim, pool: &Pool, lists: &mut TypeLists) -> std::rc::Rc<OfferSummary> {
    let mut key_reqs = claim.requirements.clone();
    key_reqs.remove(labels::HOSTNAME);
    let key = (claim.pool, claim.reservation, key_reqs, claim.types.clone());
    if let Some(hit) = lists.0.get(&key) {
        return hit.clone();
    }
    let filter = pool.filter(&key.2).holding(claim.reservation);
    // One pass over the offerings of every type: each type's cheapest
    // adjusted price (for the ranking), the zones and capacity types (as bit
    // sets), and the offering a fleet would prefer.
    let mut ranked: Vec<(f64, &str, usize)> = Vec::with_capacity(claim.types.len());
    let mut zone_bits = 0u64;
    let mut odd_zones: BTreeSet<&str> = BTreeSet::new();
    let mut capacity_types = BTreeSet::new();
    let mut preferred: Option<(usize, usize)> = None;
    for t in claim.types.iter() {
        let ty = &pool.types[t];
        let mut cheapest = f64::INFINITY;
        for (oi, o) in ty.offerings.iter().enumerate() {
            if !filter.allows(o) {
                continue;
            }
            cheapest = cheapest.min(o.adjusted);
            capacity_types.insert(o.capacity_type);
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
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let mut zones: BTreeSet<&str> = pool
        .zones
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 64 && zone_bits & (1u64 << i) != 0)
        .map(|(_, z)| z.as_str())
        .collect();
    zones.extend(odd_zones);
    let summary = std::rc::Rc::new(OfferSummary {
        instance_types: std::sync::Arc::new(ranked.iter().map(|r| r.1.to_string()).collect()),
        capacity_types: capacity_types.into_iter().collect(),
        zones: zones.into_iter().map(str::to_string).collect(),
        preferred,
    });
    lists.0.insert(key, summary.clone());
    summary
}

fn claim_plan(claim: &Claim, pool: &Pool, pods: &[Pod], lists: &mut TypeLists) -> NodeClaimPlan {
    let reqs = &claim.requirements;
    let summary = offer_summary(claim, pool, lists);
    let (price, allocatable) = match summary.preferred {
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
    };

    let mut out_reqs = reqs.clone();
    out_reqs.remove(labels::HOSTNAME);
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

/// The NodeClaim's requirements in wire form, each `minValues` on its
/// key's first entry.
fn wire_requirements(
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
fn claim_annotations(claim: &Claim, pool: &Pool) -> BTreeMap<String, String> {
    let mut out = pool.np.annotations.clone();
    if !pool.np.min_values.is_empty() {
        out.insert(
            MIN_VALUES_RELAXED.into(),
            claim.min_values_relaxed.to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod volume_tests;
