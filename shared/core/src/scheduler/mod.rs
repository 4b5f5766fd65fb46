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
mod costrule;
mod existingnode;
mod explain;
mod growth_floor;
mod growth_index;
mod hints;
mod hostaffinity;
mod in_flight;
mod index;
mod joining;
mod min_values;
mod nodeclaim;
mod plan_output;
mod pod_view;
mod podtopology;
mod pools;
mod queue;
mod rebalance;
mod repack;
mod reservationmanager;
mod simplex;
mod topology;
mod typefit;
mod typeset;
mod unplaceable;
mod volumes;
mod zone_buckets;
mod zone_shares;

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::{CapacityType, Catalog};
use crate::labels;
use crate::model::{ClusterState, Node, Pod};
use crate::plan::Plan;
use crate::requirements::Requirements;
use crate::resources::Resources;

#[cfg(test)]
use existingnode::effective_taints;
use existingnode::{existing_domains, existing_nodes, ExistingNodes};
pub(crate) use existingnode::{registration_taint, EPHEMERAL_TAINTS};
use explain::{unavailable_pools, Refusal, Unplaced};
use hints::{CompatCache, Hints, ReqTypeCache};
use index::{ClaimIdx, PodIdx, PoolIdx};
pub use min_values::MinValuesPolicy;
use nodeclaim::{Claim, ZoneMask, ZonePin};
pub use plan_output::MIN_VALUES_RELAXED;
pub use pod_view::Relaxation;
use podtopology::{build_topology, ActiveTopology, PoolDomains};
use pools::Pool;
pub use pools::{daemon_overhead, labels_satisfy, overlay_adjusted_price, overlays_by_weight};
use queue::QueueEnd;
use reservationmanager::{reserved_gate_off, Reservations};
use topology::{PodGroups, Topology};
use typeset::TypeSet;

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
    /// New NodeClaims only of instance types whose node (instance at its
    /// preferred offering, plus volumes) costs less than this, $/h:
    /// consolidation's split simulations (Karpenter's split fallback
    /// forbids new capacity priced at or above the candidate). `None`: no
    /// limit.
    pub new_node_price_limit: Option<f64>,
    /// Whether the repack moves spreading pods between zones where that
    /// packs cheaper (`rebalance_zones`). On by default; consolidation's
    /// simulations turn it off: it is most of their time on clusters with
    /// zone spreads, and their decisions came out no dearer without it.
    pub rebalance_zones: bool,
}

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
            new_node_price_limit: None,
            rebalance_zones: true,
        }
    }
}

#[derive(Clone)]
struct Run<'a> {
    pools: Vec<Pool<'a>>,
    pods: &'a [Pod],
    volume: Vec<volumes::VolumeTerms>,
    groups: Vec<PodGroups>,
    topology: Topology,
    existing: ExistingNodes<'a>,
    claims: Vec<Claim>,
    /// Per NodePool, how many of its NodeClaims hold pods (names them).
    claim_counter: BTreeMap<PoolIdx, usize>,
    /// Capacity reservations (indexed like `ClusterState::capacity_reservations`).
    res: Reservations<'a>,
    /// Whether step 3 of `add` joins heavier limited NodePools' NodeClaims
    /// (see [`schedule`]).
    join_heavier: bool,
    /// With `join_heavier` off: whether step 3 would have joined a heavier
    /// limited NodePool's NodeClaim at some pod had it been on. Until it
    /// would, both runs take the same steps; if it never would, the
    /// weights-first run would plan the same and is not made.
    heavier_would_join: bool,
    /// The weights-first run, copied where it first takes another step
    /// than this one (see `Run::fork`), until the queue takes it.
    fork: Option<Box<Run<'a>>>,
    /// The pods whose volumes are not ready: unschedulable, with why.
    waiting_for_volumes: Vec<PodIdx>,
    /// Per NodePool with limits, its NodeClaims in creation order (step
    /// 3's joining walks a heavier NodePool's, not every NodeClaim; kept
    /// while the queue runs, which only appends NodeClaims).
    limited_claims: Vec<Vec<index::ClaimIdx>>,
    /// Per NodePool with limits, what its `limited_claims` charge against
    /// them (see `Run::charged_summed`), kept as NodeClaims open and
    /// narrow: summing them at every new NodeClaim took time in the
    /// NodeClaims planned.
    charged: Vec<Resources>,
    /// Per NodePool, whether its limits admit no type any more (see
    /// `Run::note_charge`): a pod's own node then comes from a NodePool
    /// behind it, and its solo price is asked there.
    spent: Vec<bool>,
    /// NodePools that launch nothing now, with why (named in reasons).
    unavailable_pools: Vec<Refusal<'a>>,
    /// Per key a pending pod spreads over (but hostname), the values the
    /// existing nodes carry: built once, read by `reachable_domains`.
    existing_domains: BTreeMap<String, BTreeSet<String>>,
    min_values_policy: MinValuesPolicy,
    /// [`SchedulerOptions::pack_fewest_nodes`].
    pack: bool,
    /// [`SchedulerOptions::new_node_price_limit`].
    price_limit: Option<f64>,
    /// [`SchedulerOptions::rebalance_zones`].
    rebalance: bool,
    /// Per pod, where the repack may move it in a run with topology
    /// beyond zone spreads (see `Run::movable`); set by the repack.
    movability: Vec<repack::Movability>,
    /// Per topology group, the most of its pods a node may hold when it is
    /// a hostname spread the repack may move pods under (see
    /// `Topology::closed_hostname_spreads`); set by the repack.
    closed_spreads: Vec<Option<u32>>,
    /// Whether step 4 of `add` (a NodeClaim the cost rule refused) waits
    /// for the queue's next pass: on while a pass places pods (see
    /// `Run::drain`), so a pod that can only join one NodeClaim at a price
    /// (a hostname affinity to pods that only it holds yet) waits for the
    /// rest of the queue to place its targets elsewhere.
    patient: bool,
    /// Whether a pod waited in this pass that step 4 would have placed.
    deferred: bool,
    /// Each NodeClaim by its name (its hostname to topology).
    claim_by_name: foldhash::HashMap<String, index::ClaimIdx>,
    /// The NodeClaims hostname affinity terms may join (see
    /// [`hostaffinity::NearIndex`]).
    near: hostaffinity::NearIndex,
    /// Pod classes, speed hints and caches (see [`Hints`]).
    hints: Hints<'a>,
    /// Per NodePool and type, the least a node of the type can cost (see
    /// `growth_floor::TypeFloors`).
    type_floors: std::rc::Rc<Vec<growth_floor::TypeFloors>>,
    /// The price levels of every growth floor's reach (see
    /// `growth_floor::StepGrid`).
    step_grid: growth_floor::StepGrid,
    /// Per NodeClaim, the least its growth costs as last asked (see
    /// `growth_floor::GrowthFloor`).
    growth: Vec<Option<growth_floor::GrowthFloor>>,
    /// The NodeClaims by what their growth refuses (see
    /// [`growth_index`]).
    growth_index: growth_index::GrowthIndex,
    /// The NodeClaims of each zone bucket (see [`zone_buckets`]).
    zone_buckets: zone_buckets::ZoneBuckets,
    /// Per pod template, the last failure of one of its pods that only
    /// topology could lift (see [`unplaceable`]).
    unplaceable: foldhash::HashMap<usize, unplaceable::Unplaceable<'a>>,
}

/// Plans NodeClaims for the pending pods of `state`.
///
/// When a NodePool with limits has lighter NodePools behind it, pods that
/// find it out of room for a new NodeClaim may either join one of its
/// NodeClaims (weights first: what Karpenter does) or go to a lighter
/// NodePool when that is cheaper (the cost rule). Neither is cheaper for
/// every workload, so both are planned and the plan that schedules more
/// pods, then costs less, is returned (the weights-first one on a tie;
/// only the one returned is repacked where that is known before the
/// repack, see `settled_before_repack`).
pub fn schedule(state: &ClusterState, catalog: &Catalog, opts: &SchedulerOptions) -> Plan {
    schedule_prepared(state, catalog, opts, &Prepared::new(state, catalog, opts))
}

/// What planning builds from a cluster before it looks at its nodes and
/// pods: each NodePool's instance types, offerings and DaemonSet overhead
/// (every catalog type, per NodePool), their topology domains, and the
/// compatible-type answers asked of them. Made once, it serves any number of
/// plans of a cluster whose nodes and pods change but whose NodePools,
/// node classes, NodeOverlays, DaemonSets and capacity reservations do
/// not (consolidation's simulations), under options that differ at most
/// in [`SchedulerOptions::pack_fewest_nodes`],
/// [`SchedulerOptions::max_node_claims`],
/// [`SchedulerOptions::new_node_price_limit`] and
/// [`SchedulerOptions::rebalance_zones`].
#[derive(Debug, Clone)]
pub struct Prepared {
    pools: Vec<pools::PoolTemplate>,
    /// The NodePools' topology domains.
    domains: PoolDomains,
    /// Instances each capacity reservation may still take.
    available: Vec<u32>,
    /// The options it was made under (see [`Prepared::serves`]).
    opts: SchedulerOptions,
    /// Types of a pool compatible with requirements, as long as no
    /// reservation ran out (see `Run::compatible_types`).
    compat: CompatCache,
    /// Types of a pool whose labels intersect one requirement (see
    /// `Run::types_intersecting`): labels never change within a plan.
    req_types: ReqTypeCache,
    /// The existing nodes' share of each plan, when its user keeps it
    /// (see [`Prepared::keep_existing_counts`]).
    kept: Option<KeptNodes>,
}

/// Per existing node, what every plan of one cluster computes alike: the
/// pods each topology group selects and the node's free room.
#[derive(Debug, Clone, Default)]
struct KeptNodes {
    counts: topology::ExistingCounts,
    room: existingnode::KeptRoom,
}

impl Prepared {
    pub fn new(state: &ClusterState, catalog: &Catalog, opts: &SchedulerOptions) -> Prepared {
        let available: Vec<u32> = state
            .capacity_reservations
            .iter()
            .map(|r| crate::reservations::available(r, opts.reservation_available.as_ref()))
            .collect();
        let templates = pools::prepare(state, catalog, opts, &available);
        let domains = PoolDomains::new(&pools::build(state, &templates), &catalog.region);
        Prepared {
            pools: templates,
            domains,
            available,
            opts: opts.clone(),
            compat: Default::default(),
            req_types: Default::default(),
            kept: None,
        }
    }

    /// Plans with it keep, per node, the existing pods' topology counts,
    /// the node's labels and taints as topology reads them, and its free
    /// room (`topology::ExistingCounts`, `existingnode::KeptRoom`), for a
    /// user that plans one cluster many times leaving nodes out but
    /// changing no node (its pods, labels, taints or allocatable) between
    /// calls of [`Prepared::forget_existing_counts`].
    pub fn keep_existing_counts(&mut self) {
        self.kept = Some(KeptNodes::default());
    }

    /// Some node changed (its pods, labels, taints or allocatable): what
    /// was kept per node is dropped.
    pub fn forget_existing_counts(&self) {
        if let Some(k) = &self.kept {
            k.counts.forget();
            k.room.forget();
        }
    }

    /// Whether plans of `state` under `opts` may use it: the options that
    /// shape the NodePools' offerings are the ones it was made under, and
    /// the state has the NodePools and reservations it was made of.
    fn serves(&self, state: &ClusterState, opts: &SchedulerOptions) -> bool {
        let (a, b) = (&self.opts, opts);
        a.reserved_capacity == b.reserved_capacity
            && a.unavailable == b.unavailable
            && a.vm_memory_overhead.to_bits() == b.vm_memory_overhead.to_bits()
            && a.reservation_available == b.reservation_available
            && a.now == b.now
            && self.available.len() == state.capacity_reservations.len()
            && pools::templates_fit(state, &self.pools)
    }
}

/// [`schedule`] with the NodePools' views `prepared` made (see
/// [`Prepared`]); one that does not fit `state` or `opts` is made afresh.
pub fn schedule_prepared(
    state: &ClusterState,
    catalog: &Catalog,
    opts: &SchedulerOptions,
    prepared: &Prepared,
) -> Plan {
    let fresh;
    let prepared = if prepared.serves(state, opts) {
        prepared
    } else {
        fresh = Prepared::new(state, catalog, opts);
        &fresh
    };
    let pods = zone_shares::with_zone_shares(state, pods_to_place(state), opts, prepared);
    let (plan, weights_first) = schedule_with(state, &pods, opts, prepared, false);
    match weights_first {
        Some(weights_first) => preferred(plan, weights_first),
        None => plan,
    }
}

/// Of the first plan and the weights-first one, the one that schedules
/// more pods, then costs less (the weights-first one on a tie).
fn preferred(first: Plan, weights_first: Plan) -> Plan {
    let key = |p: &Plan| (p.unschedulable.len(), p.summary.total_hourly_price);
    let (a, b) = (key(&first), key(&weights_first));
    if b.0 < a.0 || (b.0 == a.0 && b.1 <= a.1 + 1e-9) {
        weights_first
    } else {
        first
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
/// limited NodePools' NodeClaims (see [`schedule`]). With it off, also the
/// weights-first run's plan if that could differ: if step 3 would have
/// joined such a NodeClaim at some pod (`Run::heavier_would_join`; only a
/// NodePool with limits heavier than another has one to join). That run
/// goes on from a copy of this one at that pod (`Run::fork`). Where the
/// choice between the two is known once both have placed their pods
/// ([`settled_before_repack`]), only the chosen one is repacked and
/// returned.
fn schedule_with(
    state: &ClusterState,
    pods: &[Pod],
    opts: &SchedulerOptions,
    prepared: &Prepared,
    join_heavier: bool,
) -> (Plan, Option<Plan>) {
    schedule_runs(state, pods, opts, prepared, join_heavier, true)
}

/// [`schedule_with`]; with `settle` off, both plans are made wherever the
/// run forks, even when [`settled_before_repack`] knows which one wins.
fn schedule_runs(
    state: &ClusterState,
    pods: &[Pod],
    opts: &SchedulerOptions,
    prepared: &Prepared,
    join_heavier: bool,
    settle: bool,
) -> (Plan, Option<Plan>) {
    // Pods whose volumes are not ready wait (unschedulable, with the reason).
    let mut errors: Vec<Option<Unplaced>> = vec![None; pods.len()];
    let volume = volume_requirements(state, pods, &mut errors);
    let all_nodes = all_nodes(state);
    let mut run = Run::new(
        state,
        pods,
        &all_nodes,
        volume,
        opts,
        prepared,
        join_heavier,
    );
    run.waiting_for_volumes = PodIdx::all(pods.len())
        .filter(|&p| errors[p].is_some())
        .collect();
    let order = queue::largest_first(pods, &errors);
    let mut end = run.drain_queue(order, errors, opts.max_node_claims);
    let Some(queue::Fork {
        run: fork,
        draining,
    }) = end.weights_first.take()
    else {
        return (run.finish(end, state, opts), None);
    };
    let mut fork = *fork;
    let fork_end = fork.drain(draining, opts.max_node_claims);
    let settled = settle
        .then(|| settled_before_repack((&run, &end), (&fork, &fork_end)))
        .flatten();
    match settled {
        Some(Settled::First) => (run.finish(end, state, opts), None),
        Some(Settled::WeightsFirst) => (fork.finish(fork_end, state, opts), None),
        None => (
            run.finish(end, state, opts),
            Some(fork.finish(fork_end, state, opts)),
        ),
    }
}

/// Which of the first and the weights-first run [`schedule`] returns, when
/// that is known before either is repacked.
#[derive(Debug, PartialEq)]
enum Settled {
    First,
    WeightsFirst,
}

/// How much dearer than the first run's NodeClaims the weights-first run's
/// may be before the repack and still be repacked: the repack lowers the
/// first run's price as much as the weights-first run's or more (it has
/// more, smaller NodeClaims to move pods between; `many-nodepools` and
/// `assorted`, 100 to 10,000 pods, seeds 1-3: the ratio moved by at most
/// 0.1% in the weights-first run's favour), so a wider gap never closes.
const WEIGHTS_FIRST_MARGIN: f64 = 0.01;

/// The run to return when it is known before the repack: the one that
/// leaves fewer pods unplaced (the repack places none), else the first
/// run when the weights-first run's NodeClaims cost more than
/// `WEIGHTS_FIRST_MARGIN` above the first run's (not asked when either
/// run has a NodeClaim in a capacity reservation). `None` when both must
/// be repacked and compared, or when either stopped at the NodeClaim cap.
fn settled_before_repack(
    first: (&Run, &QueueEnd),
    weights_first: (&Run, &QueueEnd),
) -> Option<Settled> {
    let ((run, end), (fork, fork_end)) = (first, weights_first);
    if end.capped || fork_end.capped {
        return None;
    }
    match end.left.len().cmp(&fork_end.left.len()) {
        std::cmp::Ordering::Less => Some(Settled::First),
        std::cmp::Ordering::Greater => Some(Settled::WeightsFirst),
        std::cmp::Ordering::Equal => {
            let (first, weights_first) = (run.planned_price()?, fork.planned_price()?);
            (weights_first > first * (1.0 + WEIGHTS_FIRST_MARGIN)).then_some(Settled::First)
        }
    }
}

impl<'a> Run<'a> {
    /// The plan once the queue ended at `end`: the repack (unless packing
    /// for fewest nodes or stopped at the cap), then the pods left, with
    /// why.
    fn finish(mut self, end: QueueEnd<'a>, state: &ClusterState, opts: &SchedulerOptions) -> Plan {
        let QueueEnd {
            mut left,
            relax,
            mut errors,
            capped,
            weights_first: _,
        } = end;
        if !self.pack && !capped {
            self.repack(!state.overlays.is_empty(), &relax);
            self.repack_chain(!state.overlays.is_empty());
        }
        if !opts.reserved_capacity {
            reserved_gate_off(&left, self.pods, &state.node_pools, &mut errors);
        }
        left.extend(std::mem::take(&mut self.waiting_for_volumes));
        self.into_plan(left.into_iter().collect(), errors, Vec::new())
    }
}

impl<'a> Run<'a> {
    /// A run over `pods` of `state` with nothing planned yet: the
    /// NodePools, reservations, topology and existing nodes it plans on.
    fn new(
        state: &'a ClusterState,
        pods: &'a [Pod],
        all_nodes: &'a [Node],
        volume: Vec<volumes::VolumeTerms>,
        opts: &SchedulerOptions,
        prepared: &'a Prepared,
        join_heavier: bool,
    ) -> Run<'a> {
        let pools = pools::build(state, &prepared.pools);
        let res = Reservations::new(
            &state.capacity_reservations,
            &pools,
            prepared.available.clone(),
        );
        let (topology, groups) = build_topology(
            pods,
            &prepared.domains,
            all_nodes,
            prepared.kept.as_ref().map(|k| &k.counts),
        );
        let existing = existing_nodes(
            all_nodes,
            &state.node_pools,
            prepared.kept.as_ref().map(|k| &k.room),
        );
        let hints = Hints::new(pods, &volume, &prepared.compat, &prepared.req_types);
        let existing_domains = existing_domains(pods, &existing);
        let existing = ExistingNodes::new(existing, &existingnode::keys_pods_read(pods, &volume));
        let type_floors = std::rc::Rc::new(growth_floor::TypeFloors::of(&pools));
        let mut run = Run {
            type_floors: std::rc::Rc::clone(&type_floors),
            step_grid: growth_floor::StepGrid::of(&type_floors),
            growth: Vec::new(),
            growth_index: growth_index::GrowthIndex::default(),
            zone_buckets: zone_buckets::ZoneBuckets::default(),
            unplaceable: Default::default(),
            charged: vec![Resources::new(); pools.len()],
            spent: vec![false; pools.len()],
            limited_claims: vec![Vec::new(); pools.len()],
            pools,
            pods,
            volume,
            groups,
            topology,
            existing,
            claims: vec![],
            claim_counter: BTreeMap::new(),
            res,
            min_values_policy: opts.min_values_policy,
            pack: opts.pack_fewest_nodes,
            price_limit: opts.new_node_price_limit,
            rebalance: opts.rebalance_zones,
            movability: Vec::new(),
            closed_spreads: Vec::new(),
            hints,
            join_heavier,
            patient: false,
            deferred: false,
            claim_by_name: Default::default(),
            near: Default::default(),
            heavier_would_join: false,
            fork: None,
            waiting_for_volumes: Vec::new(),
            existing_domains,
            unavailable_pools: unavailable_pools(&state.node_pools),
        };
        // A NodePool whose existing nodes spent its limits is spent from
        // the start.
        for pi in PoolIdx::all(run.pools.len()) {
            run.note_charge(pi);
        }
        run
    }
}

/// Each pod's node requirements from its volumes; a pod whose volumes
/// are not ready gets its reason in `errors` (it waits).
fn volume_requirements<'a>(
    state: &ClusterState,
    pods: &[Pod],
    errors: &mut [Option<Unplaced<'a>>],
) -> Vec<volumes::VolumeTerms> {
    let volumes = volumes::VolumeTopology::new(state);
    pods.iter()
        .zip(errors.iter_mut())
        .map(|(p, error)| {
            volumes.requirements(p).unwrap_or_else(|e| {
                *error = Some(Unplaced::Volume(e));
                Default::default()
            })
        })
        .collect()
}

/// Existing nodes, then in-flight NodeClaims (see `in_flight`).
fn all_nodes(state: &ClusterState) -> std::borrow::Cow<'_, [Node]> {
    let in_flight = in_flight::nodes(state);
    if in_flight.is_empty() {
        std::borrow::Cow::Borrowed(&state.nodes)
    } else {
        std::borrow::Cow::Owned(state.nodes.iter().cloned().chain(in_flight).collect())
    }
}

/// One pod's placement attempt at its relaxation (see `Run::add`): what
/// every step reads.
struct Trial<'t> {
    p: PodIdx,
    r: &'t Relaxation,
    /// The pod's shape, if it has one (see `Hints::shape`).
    shape: Option<usize>,
    /// The pod's node requirements at its relaxation.
    pod_reqs: Requirements,
    groups: ActiveTopology,
    /// The zones the pod's spread constraints admit (`None`: any).
    zones_admitted: Option<BTreeSet<String>>,
    /// The zones and capacity types the pod's node requirements allow,
    /// when they name any (see `OfferBits::of_pod`).
    pod_offers: Option<costrule::OfferBits>,
}

impl<'a> Run<'a> {
    /// Places pod `p` at relaxation `r` (Karpenter's `Scheduler.add`): on
    /// an existing node if one fits, else on a NodeClaim planned in this
    /// run, else on a new NodeClaim, else on any planned NodeClaim it fits;
    /// otherwise, why not.
    fn add(&mut self, p: PodIdx, r: &Relaxation) -> Result<(), Unplaced<'a>> {
        match self.still_unplaceable(p, r) {
            Some(reasons) => self.fail_again(p, r, reasons),
            None => self.try_add(p, r),
        }
    }

    /// Pod `p` fails as at its last try, for `reasons` (see
    /// [`unplaceable`]); debug builds try it in full and check.
    fn fail_again(
        &mut self,
        p: PodIdx,
        r: &Relaxation,
        reasons: Vec<Refusal<'a>>,
    ) -> Result<(), Unplaced<'a>> {
        let again = Unplaced::Refused(reasons);
        if cfg!(debug_assertions) {
            let tried = self.try_add(p, r);
            let same = matches!(&tried, Err(e) if e.to_string() == again.to_string());
            assert!(same, "pod {p:?}: remembered {again}, tried {tried:?}");
            return tried;
        }
        // What a failed try leaves behind (see `join_planned`).
        let shape = self.hints.shape(p);
        self.hints.at_relaxation(shape, r);
        if let Some(s) = shape {
            let end = ClaimIdx::new(self.claims.len());
            self.hints.set_claim_hint(s, end);
        }
        Err(again)
    }

    /// [`Run::add`] in full.
    fn try_add(&mut self, p: PodIdx, r: &Relaxation) -> Result<(), Unplaced<'a>> {
        let pod = &self.pods[p];
        let pod_reqs = pod_view::node_requirements(pod, &self.volume[p], r);
        let groups = self.active_topology(p, r);

        // Hints apply to the unrelaxed shape only.
        let shape = self.hints.shape(p);
        self.hints.at_relaxation(shape, r);

        // 1. Existing nodes.
        let zones_admitted =
            self.topology
                .spread_admits(pod, &groups.groups, &groups.domains, labels::ZONE);
        let zones = self.pools.first().map_or(&[][..], |pool| &pool.zones[..]);
        let pod_offers = costrule::OfferBits::of_pod(&pod_reqs, zones);
        let t = Trial {
            p,
            r,
            shape,
            pod_reqs,
            groups,
            zones_admitted,
            pod_offers,
        };
        if self.place_on_existing(&t) {
            return Ok(());
        }

        // A pod that must share a node with pods its hostname affinity
        // selects: steps 2 and 4 over the NodeClaims holding them.
        if let Some(near) = self.near_targets(&t) {
            return self.join_near(&t, near);
        }

        // 2. NodeClaims planned in this run, if joining one costs no more
        //    than a node of its own would (see `joins_cheaply`).
        let refused_claims = match self.join_planned(&t) {
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        };

        // 3. A new NodeClaim from the heaviest NodePool that can take it.
        let reasons = match self.open_claim(&t) {
            Ok(()) => return Ok(()),
            Err(reasons) => reasons,
        };
        // 4. Never lose a pod to the cost rule: join any NodeClaim that
        //    fits, once the queue has placed what it can without it.
        if let Some((c, fit)) = self.any_claim_taking(&t, &refused_claims) {
            if !self.patient {
                self.commit(c, p, fit);
                return Ok(());
            }
            self.deferred = true;
        }
        let zone_shut = self.zone_refuses_every_claim(p, &t.pod_reqs, &t.groups);
        self.note_unplaced(p, r, zone_shut, &reasons);
        Err(Unplaced::Refused(reasons))
    }
}

#[cfg(test)]
mod tests;

/// Runs `f` on a fresh run over `state`'s pending pods (default options),
/// for tests that ask a run's parts directly.
#[cfg(test)]
fn with_run<R>(state: &ClusterState, catalog: &Catalog, f: impl FnOnce(&mut Run) -> R) -> R {
    let opts = SchedulerOptions::default();
    let prepared = Prepared::new(state, catalog, &opts);
    let pods = &state.pending_pods;
    let mut errors: Vec<Option<Unplaced>> = vec![None; pods.len()];
    let volume = volume_requirements(state, pods, &mut errors);
    let all_nodes = all_nodes(state);
    let mut run = Run::new(state, pods, &all_nodes, volume, &opts, &prepared, false);
    f(&mut run)
}

/// A seeded xorshift draw for the randomised tests: `next(n)` is in `0..n`.
#[cfg(test)]
pub(crate) fn test_draws(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
#[cfg(test)]
mod volume_tests;
