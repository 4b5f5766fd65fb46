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
mod hints;
mod in_flight;
mod min_values;
mod nodeclaim;
mod plan_output;
mod pod_view;
mod podtopology;
mod pools;
mod rebalance;
mod repack;
mod reservationmanager;
mod topology;
mod typeset;
mod volumes;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::catalog::{ebs, CapacityType, Catalog};
use crate::labels;
use crate::model::{untolerated_strict, ClusterState, Node, Pod, Taint};
use crate::plan::{
    ExistingNodePlan, NodeClaimPlan, NodeClaimResources, Plan, Price, ReservationUse, Summary,
    Unschedulable,
};
use crate::requirements::Requirements;

use existingnode::{effective_taints, existing_domains, initialized, ExistingNode, ExistingNodes};
use explain::{ClaimRefusal, Refusal, Unplaced};
use hints::Hints;
pub use min_values::MinValuesPolicy;
use nodeclaim::{Claim, Fit, JoinMemo, ZonePin};
pub use plan_output::MIN_VALUES_RELAXED;
pub use pod_view::Relaxation;
use podtopology::{pool_domains, ActiveTopology};
use pools::Pool;
pub use pools::{daemon_overhead, labels_satisfy, overlay_adjusted_price, overlays_by_weight};
use reservationmanager::{needs_reserved, Reservations};
use topology::{DomainSource, Kind, PodGroups, Topology};
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
        }
    }
}

struct Run<'a> {
    pools: Vec<Pool<'a>>,
    pods: &'a [Pod],
    volume: Vec<Requirements>,
    groups: Vec<PodGroups>,
    topology: Topology,
    existing: ExistingNodes<'a>,
    claims: Vec<Claim>,
    claim_counter: BTreeMap<usize, usize>,
    /// Capacity reservations (indexed like `ClusterState::capacity_reservations`).
    res: Reservations<'a>,
    /// Whether step 3 of `add` joins heavier limited NodePools' NodeClaims
    /// (see [`schedule`]).
    join_heavier: bool,
    /// NodePools that launch nothing now, with why (named in reasons).
    unavailable_pools: Vec<Refusal<'a>>,
    /// Per key a pending pod spreads over (but hostname), the values the
    /// existing nodes carry: built once, read by `reachable_domains`.
    existing_domains: BTreeMap<String, BTreeSet<String>>,
    min_values_policy: MinValuesPolicy,
    /// [`SchedulerOptions::pack_fewest_nodes`].
    pack: bool,
    /// Pod classes, speed hints and caches (see [`Hints`]).
    hints: Hints<'a>,
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
    let mut errors: Vec<Option<Unplaced>> = vec![None; pods.len()];
    let volumes = volumes::VolumeTopology::new(state);
    let volume: Vec<Requirements> = pods
        .iter()
        .zip(errors.iter_mut())
        .map(|(p, error)| {
            volumes.requirements(p).unwrap_or_else(|e| {
                *error = Some(Unplaced::Volume(e));
                Requirements::new()
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
    let hints = Hints::new(pods, &volume);
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
        res,
        min_values_policy: opts.min_values_policy,
        pack: opts.pack_fewest_nodes,
        hints,
        join_heavier,
        existing_domains,
        unavailable_pools: state
            .node_pools
            .iter()
            .filter_map(|np| {
                np.unavailable.as_ref().map(|why| Refusal::Unavailable {
                    pool: np.name.as_str(),
                    why: why.as_str(),
                })
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
                    errors[q] = Some(Unplaced::NodeClaimCap);
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
                relaxed |= relax[p].relax(&pods[p], prefer_no_schedule).is_some();
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
            if errors[p].is_some() && needs_reserved(&pods[p], &state.node_pools) {
                errors[p] = errors[p]
                    .take()
                    .map(|e| Unplaced::ReservedGateOff(Box::new(e)));
            }
        }
    }
    queue.extend(waiting_for_volumes);
    (
        run.into_plan(queue.into_iter().collect(), errors, warnings),
        limited_heavier,
    )
}

impl<'a> Run<'a> {
    fn add(&mut self, p: usize, r: &Relaxation) -> Result<(), Unplaced<'a>> {
        let pod = &self.pods[p];
        let pod_reqs = pod_view::node_requirements(pod, &self.volume[p], r);
        let mut groups = ActiveTopology {
            groups: self.active_groups(p, r),
            domains: self.reachable_domains(p, pod_view::domain_requirements(pod, r)),
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
        let shape = self.hints.shape[p];
        self.hints.at_relaxation(shape, r);

        // 1. Existing nodes.
        let zones_admitted =
            self.topology
                .spread_admits(pod, &groups.groups, &groups.domains, labels::ZONE);
        let first = shape.map_or(0, |s| self.hints.existing_hint[s]);
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
                self.hints.placed(p);
                if let Some(s) = shape {
                    self.hints.existing_hint[s] = i;
                }
                return Ok(());
            }
        }
        if let Some(s) = shape {
            self.hints.existing_hint[s] = self.existing.len();
        }

        // 2. NodeClaims planned in this run, if joining one costs no more
        //    than a node of its own would (see `joins_cheaply`).
        let solo = match shape.and_then(|s| self.hints.solo_cache[s]) {
            Some(cached) => cached,
            None => {
                let v = self.solo_price(p, &pod_reqs);
                if let Some(s) = shape {
                    self.hints.solo_cache[s] = Some(v);
                }
                v
            }
        };
        let first = shape.map_or(0, |s| self.hints.claim_hint[s]);
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
        let cls = self.hints.req_class[p];
        let mut roomy = std::mem::take(&mut self.hints.roomy[cls]);
        roomy.sync(self.claims.len());
        // Pods without a shape: start at the lowest hint of the buckets
        // the pod may use, skip each bucket's known refusals.
        let size = self.hints.size[p];
        let mut hints = if shape.is_none() && *r == Relaxation::default() {
            Some(
                self.hints.spread_hint[size]
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
            self.hints.spread_hint[size] = Some(h);
        }
        roomy.compact();
        self.hints.roomy[cls] = roomy;
        if let Some((c, fit)) = joined {
            self.commit(c, p, fit);
            if let Some(s) = shape {
                self.hints.claim_hint[s] = c;
            }
            return Ok(());
        }
        if let Some(s) = shape {
            self.hints.claim_hint[s] = self.claims.len();
        }

        // 3. A new NodeClaim from the heaviest NodePool that can take it.
        let mut reasons = self.unavailable_pools.clone();
        if self.pools.is_empty() && reasons.is_empty() {
            reasons.push(Refusal::NoNodePool);
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
        Err(Unplaced::Refused(reasons))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod volume_tests;
