//! Consolidation before the plan is returned: NodeClaims whose pods carry
//! nothing but resource requests and node requirements are packed again,
//! per (NodePool, requirements), choosing instance types by price per fitted
//! pod; the new packing replaces the old only when it is cheaper.
//!
//! The first pass (`Run::add`) is online: a pod joins the first NodeClaim
//! that takes it cheaply, and a NodeClaim never gives a pod back, so the
//! last NodeClaims of every size are under-filled and the type a NodeClaim
//! ends on is whatever held its first pods. Here every bin is chosen with
//! all the group's pods in view:
//!
//! * each pod class (identical requests) gets a *value*: the best price per
//!   pod slot any type of the group offers for it (what the pod costs at
//!   best when packed with its own kind);
//! * each next node is the type whose first-fit-decreasing fill (largest
//!   classes first, as many of each as fit) has the lowest price per value
//!   packed; mixing classes into one node's leftover room lowers the ratio,
//!   so fills that waste less win;
//! * a fill is repeated while the counts left allow the same fill of the
//!   same type, so the cost grows with distinct fills, not with pods;
//! * three starting values (best slot price; the largest, or the sum, of
//!   the pod's resources at the cheapest unit price per resource), each
//!   re-valued a few rounds at what its pods paid in the last packing; the
//!   cheapest packing wins;
//! * a group of one class (a Deployment's replicas, typically) is packed
//!   exactly instead: a dynamic programme over the pod count finds the
//!   cheapest mix of types (13 + 7 pods on a `c6a.2xlarge` and an
//!   `m5a.xlarge` rather than the greedy's best-ratio node and a poor tail);
//!   so is a group of few pods of a few classes (a dynamic programme over
//!   the vectors of pods left per class, see `FEW_CLASSES_WORK`);
//! * pods of several classes are also packed by the LP over node patterns
//!   (`patterns`: column generation, as the bench's bound, then rounded),
//!   within a work budget per pod; it mixes classes of complementary
//!   cpu:memory ratios on one node, where the greedy's fills waste room;
//!   it starts from the greedy's nodes, and each packing is priced as the
//!   fleet would take its nodes before the cheaper one is kept;
//! * two of the last nodes are merged into one while that is cheaper (the
//!   greedy leaves its leftovers there);
//! * every node is then right-sized: it keeps every type that holds its
//!   pods, and its price is the cheapest of them, as for any NodeClaim;
//! * groups of one NodePool whose requirements differ only in instance-type
//!   labels and zones (a *family*, `Run::families`) are also packed
//!   together, each pod only on types (and zones) its own set allows, and
//!   that replaces their own packings when cheaper; a family of more
//!   classes than its LP affords is packed one requirement set at a time,
//!   each with its own LP, where its large sets hold most of its pods
//!   (`requirement_sets`).
//!
//! Only pods whose placement nothing else looks at are moved: no topology
//! in the run but required hostname anti-affinity (a group is packed again
//! when each of at most `ANTI_CLASSES` terms selects only its own pods,
//! which then go one per node) and zone topology spread (spreading pods
//! only move between NodeClaims pinned to their zone); with other topology,
//! pods that carry none and that no term counts (`Scope::UncountedPods`),
//! and, within the zone of a NodeClaim pinned to one, pods whose terms and
//! whose counting terms are all on the zone (`Run::zone_bound`: the zones'
//! counts stay as planned), while a NodePool's packing keeps within the
//! pattern LP's classes; NodeClaims holding them beside pods that must
//! stay are packed as anchors (`anchors`). No host ports, no capacity
//! reservation, NodePools without limits (a different packing charges
//! them differently) and no NodeOverlays (their adjusted prices order
//! offerings differently from the prices compared here).

mod anchors;
mod class_index;
mod fill_bound;
mod knapsack_lp;
mod patterns;
mod requirement_sets;

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::model::PodAffinityTerm;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::{Claim, Relaxation, Run, TypeSet, ZoneMask, ZonePin};
use crate::catalog::CapacityType;
use class_index::ClassIndex;
use fill_bound::FillBound;

/// Re-valuation rounds per starting value (see `revalued_greedy`).
const ROUNDS: usize = 4;

/// Most classes a NodePool's packing holds with the pods that move within
/// their zones (see `beyond_moved_classes`): a bound on the packing's
/// work (a greedy fill looks at every class a type holds). Beyond the
/// LP's classes, or what it affords, the greedy alone packs them
/// (`patterns::applies`), in two rounds at least, which at `random`'s 301
/// classes at 10,000 pods (seeds 1-3) priced the plans 1.4-3.2% lower
/// than keeping those pods where the first pass put them (the cap was the
/// LP's 256), and at 50,000 pods (848 and 940 classes) `random` 2.8% and
/// `assorted` 5.1% lower than a cap of 512.
const MOVED_CLASSES: usize = 2048;

/// How many of the last nodes of a packing are tried for merging.
const TAIL: usize = 16;

/// Work limit (pods × candidate types) of the exact single-class packing.
const SINGLE_CLASS_WORK: usize = 20_000_000;

/// Most anti-affinity classes with required anti-affinity terms in a group
/// that is packed again: each packs apart (one pod per node), so the
/// greedy's work grows with their number (and their pairs are checked
/// against each other's selectors).
const ANTI_CLASSES: usize = 64;

/// Most groups of one family packed together (each adds a dimension).
const FAMILY_SETS: usize = 24;

/// Work limit (count-vector pairs) of the exact few-class packing.
const FEW_CLASSES_WORK: usize = 2_000_000;

/// The few-class table's work a search's estimate affords (see
/// `Effort::Estimate`): eleven classes of one pod each, where
/// `FEW_CLASSES_WORK` takes thirteen for ten times the work.
const ESTIMATE_EXACT_WORK: usize = 200_000;

/// Pods per class from which a search's estimate packs with the pattern
/// LP (see `Effort::Estimate`).
const ESTIMATE_LP_PODS_PER_CLASS: usize = 2;

/// How many pods needing `need` fit in `cap` (per dimension; dimensions a
/// pod does not request do not limit).
fn copies(cap: &[i64], need: &[i64]) -> i64 {
    cap.iter()
        .zip(need)
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c / n).max(0))
        .min()
        .unwrap_or(i64::MAX)
}

/// `copies(cap, need).min(limit).max(0)`, dividing only in the
/// dimensions where `limit` copies do not fit (the greedy asks this for
/// every type and class it weighs, and the pods left usually bind first).
fn copies_up_to(cap: &[i64], need: &[i64], limit: i64) -> i64 {
    copies_of_pairs(cap.iter().copied().zip(need.iter().copied()), limit)
}

/// [`copies_up_to`] over a class's non-zero needs (see `sparse_needs`).
fn sparse_copies_up_to(cap: &[i64], need: &[(usize, i64)], limit: i64) -> i64 {
    copies_of_pairs(need.iter().map(|&(d, n)| (cap[d], n)), limit)
}

/// [`copies_up_to`] over (room, need) pairs, one per dimension looked at.
#[inline]
fn copies_of_pairs(pairs: impl Iterator<Item = (i64, i64)>, limit: i64) -> i64 {
    let mut most = limit.max(0);
    for (c, n) in pairs {
        if n > 0 && n.saturating_mul(most) > c {
            if c < n {
                return 0;
            }
            most = c / n;
        }
    }
    most
}

/// An instance type as a packing candidate: its index in the pool, the
/// price of its offering, and its room (allocatable less the daemonsets)
/// per packed dimension.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PackType {
    pub ty: usize,
    pub price: f64,
    pub room: Vec<i64>,
}

/// A node of the new packing: its type's fill, as (class, count).
#[derive(Clone)]
struct Bin {
    fill: Vec<(usize, usize)>,
}

impl Bin {
    /// A node holding `counts[class]` pods of each class.
    fn of_counts(counts: &[usize]) -> Bin {
        Bin {
            fill: counts
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(c, &n)| (c, n))
                .collect(),
        }
    }
}

/// Component-wise maxima of allocatable and capacity over `types`.
pub(super) fn type_maxima(pool: &super::Pool, types: &TypeSet) -> (Resources, Resources) {
    pool.maxima_index.maxima(&pool.types, types)
}

/// What a NodeClaim of a new packing holds (see [`Claim::packed`]).
pub(super) struct Packed {
    pub(super) types: TypeSet,
    /// Its pods' requests plus the daemonset overhead.
    pub(super) requests: Resources,
    pub(super) pods: Vec<PodIdx>,
    /// Component-wise maxima over `types`.
    pub(super) max_allocatable: Resources,
    pub(super) max_capacity: Resources,
}

impl Claim {
    /// A NodeClaim of a new packing (the repack, the chain packing) of pool
    /// `pi` named `name`: `reqs` plus its hostname, holding `packed`.
    pub(super) fn packed(
        pi: PoolIdx,
        zones: &[String],
        reqs: &Requirements,
        name: String,
        packed: Packed,
    ) -> Claim {
        let mut requirements = reqs.clone();
        requirements.add(Requirement::in_values(labels::HOSTNAME, [name.as_str()]));
        let mut claim = Claim {
            pool: pi,
            zone_pin: ZonePin::of(&requirements, zones),
            zone_mask: ZoneMask::of(&requirements, zones),
            capacity_types: super::pools::capacity_type_bits(&requirements),
            name,
            requirements,
            types: packed.types,
            requests: packed.requests,
            pods: packed.pods,
            host_ports: Default::default(),
            compact_room: None,
            max_allocatable: packed.max_allocatable,
            max_capacity: packed.max_capacity,
            size: None,
            used: true,
            reservation: None,
            memo: None,
            memo_answer: super::nodeclaim::JoinAnswer::Never,
            min_values: Default::default(),
            min_values_relaxed: false,
        };
        claim.refresh_room();
        claim
    }
}

/// A NodeClaim's right-sized content: requests, types, their maxima and
/// its price.
#[derive(Clone)]
struct SizedNode {
    /// Its requirements: those of every requirement set its pods carry.
    reqs: Requirements,
    requests: Resources,
    types: TypeSet,
    max_allocatable: Resources,
    max_capacity: Resources,
    price: f64,
}

/// A right-sized content, shared by the nodes of one fill.
type Sized = std::rc::Rc<SizedNode>;

/// Pods of a group with identical requests (and anti-affinity class, and
/// requirement set of the family).
#[derive(Clone)]
struct PodClass {
    requests: Resources,
    /// Its pods' requirement set: an index into the family's.
    family: usize,
    /// Or, for a class of anchors (one per node, see `anchors`), the
    /// NodeClaims, each of `requests` (its pods that stay).
    anchors: Vec<ClaimIdx>,
    /// Its anti-affinity class (0: none; see `Run::anti_classes`), and
    /// whether that class's pods go one per node.
    anti: usize,
    self_anti: bool,
    /// The closed hostname spreads its pods carry, with their caps (see
    /// [`Apart`]).
    spreads: Vec<(usize, u32)>,
    pods: Vec<PodIdx>,
    /// Most of them per node.
    per_node: usize,
}

/// What keeps the pods of an anti-affinity class (see
/// `Run::anti_classes`) apart on a node: required hostname anti-affinity
/// selecting its own pods (one per node), and topology spreads on the
/// hostname whose every counted pod carries them (by topology group, at
/// most the cap of each group's pods per node, over every class that
/// carries it).
#[derive(Debug, Clone, Default)]
struct Apart {
    self_anti: bool,
    spreads: Vec<(usize, u32)>,
}

impl Apart {
    /// The most pods of one class per node.
    fn per_node(&self) -> usize {
        let anti = if self.self_anti { 1 } else { usize::MAX };
        (self.spreads.iter())
            .map(|&(_, cap)| usize::try_from(cap).unwrap_or(usize::MAX))
            .fold(anti, usize::min)
    }
}

/// A new packing of a group's pods (see [`Run::pack_pods`]).
pub(super) struct Packing {
    /// Its price: per node, the offering a fleet would take.
    pub(super) cost: f64,
    classes: Vec<PodClass>,
    bins: Vec<Bin>,
    sized: Vec<Sized>,
}

/// Whether `packing` replaces group `g`'s NodeClaims: it costs less; with
/// the NodePool's consolidate tolerance `t` (`flotilla.dev/consolidate-tolerance`),
/// a packing with more nodes must cost less by more than `t`, and one with
/// fewer nodes may cost up to `t` more.
fn replaces(pool: &super::pools::Pool, g: &Group, packing: &Packing) -> bool {
    let t = pool.tolerance();
    match packing.bins.len().cmp(&g.members.len()) {
        std::cmp::Ordering::Greater => packing.cost * (1.0 + t) < g.old - 1e-9,
        std::cmp::Ordering::Less => packing.cost < g.old * (1.0 + t) - 1e-9,
        std::cmp::Ordering::Equal => packing.cost < g.old - 1e-9,
    }
}

/// Where the repack may move a pod in a run with topology beyond zone
/// spreads (`Scope::UncountedPods`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Movability {
    /// Its place matters: its NodeClaim is an anchor, or stays.
    Stays,
    /// To another new node of its NodeClaim's zone, when that NodeClaim is
    /// pinned to one (see `Run::zone_bound`); with `open` (see
    /// `Run::open_zone_mover`), also to any new node when its NodeClaim
    /// has no zone requirement at all.
    InZone { open: bool },
    /// To any new node (see `Run::uncounted`).
    Anywhere,
}

/// A pod's pod anti-affinity terms, required and preferred. The repack
/// keeps both apart alike: a preferred term it takes only where it is a
/// preference to run apart from the pod's own kind on the hostname (see
/// [`self_apart_preference_only`]), which the first pass held as it holds
/// a required one and relaxed only where no node could hold it.
pub(super) fn anti_terms(pod: &crate::model::Pod) -> impl Iterator<Item = &PodAffinityTerm> {
    pod.pod_anti_affinity
        .iter()
        .chain(pod.preferred_pod_anti_affinity.iter().map(|w| &w.term))
}

/// Whether pod `pod`'s preferred pod anti-affinity terms (if any) are all
/// on the hostname and select `pod` itself: the common "spread my
/// replicas over nodes" preference. Moving such a pod, the packing keeps
/// its kind one per node (`Run::anti_classes`), so the preference holds
/// wherever it held; a pod with any other preferred anti-affinity stays.
fn self_apart_preference_only(pod: &crate::model::Pod) -> bool {
    pod.preferred_pod_anti_affinity.iter().all(|w| {
        w.term.topology_key == labels::HOSTNAME
            && w.term.selects(&pod.namespace, &pod.namespace, &pod.labels)
    })
}

/// Which NodeClaims the repack may take, by the run's topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// No topology in the run, or (`hostname_anti_only`) only zone spreads
    /// and required hostname anti-affinity: spreading pods are taken on
    /// zone-pinned NodeClaims and move between zones only as
    /// `rebalance_zones` allows.
    Planned { hostname_anti_only: bool },
    /// Other topology: only NodeClaims whose every pod carries none (but
    /// required hostname anti-affinity) and is counted by no other term
    /// (but required hostname anti-affinity, which a pod's new node never
    /// breaks: it holds only pods of the group, checked by
    /// `anti_classes`).
    UncountedPods,
}

/// NodeClaims the repack may replace: one NodePool, one set of
/// requirements (hostname aside).
#[derive(Clone)]
pub(super) struct Group {
    pub(super) pool: PoolIdx,
    pub(super) reqs: Requirements,
    /// The NodeClaims, in creation order.
    pub(super) members: Vec<ClaimIdx>,
    /// Their pods (sorted); the zone moves change this.
    pub(super) pods: Vec<PodIdx>,
    /// What the members cost as planned (infinite when the group must be
    /// packed: it holds pods or anchors of other NodeClaims).
    pub(super) old: f64,
    /// NodeClaims that keep their pods that may not move and may take
    /// the group's (see `anchors`), with these requirements.
    pub(super) anchors: Vec<ClaimIdx>,
}

/// What the repack makes of each group: its own packing, or its family's
/// (held at the family's first group), where that replaces it.
struct Choices {
    own: Vec<Option<Packing>>,
    joint: Vec<Option<(Vec<usize>, Packing)>>,
}

impl Choices {
    /// What NodePool `pi`'s `groups` cost once chosen (infinite when a
    /// group that must be packed was not).
    fn cost(&self, groups: &[Group], pi: PoolIdx) -> f64 {
        let mut in_family = vec![false; groups.len()];
        for (family, _) in self.joint.iter().flatten() {
            for &gi in family {
                in_family[gi] = true;
            }
        }
        let mut total = 0.0;
        for (gi, g) in groups.iter().enumerate().filter(|(_, g)| g.pool == pi) {
            total += match (&self.joint[gi], &self.own[gi]) {
                (Some((_, p)), _) => p.cost,
                (None, Some(p)) => p.cost,
                (None, None) if in_family[gi] => 0.0,
                (None, None) => g.old,
            };
        }
        total
    }
}

/// A group's NodeClaims (`members`) and the new NodeClaims that replace
/// them: each in the slot of an old one (an anchor's own, else the
/// members' in creation order), or after all.
struct Replacement {
    members: Vec<ClaimIdx>,
    claims: Vec<(Option<ClaimIdx>, Claim)>,
}

impl Run<'_> {
    /// See the module documentation. `relax` is each pod's relaxation as
    /// scheduled.
    pub(super) fn repack(&mut self, overlays: bool, relax: &[Relaxation]) {
        if overlays || self.claims.is_empty() {
            return;
        }
        let hostname_anti_only = self.hostname_anti_only();
        let scope = if hostname_anti_only || !self.topology.is_active() {
            Scope::Planned { hostname_anti_only }
        } else {
            Scope::UncountedPods
        };
        if scope == Scope::UncountedPods {
            self.closed_spreads = (self.topology).closed_hostname_spreads(self.pods, &self.groups);
            self.movability = self.movability(true);
        }
        let (mut groups, mut anchors, mut anchored) = self.repack_sets(scope, relax);
        // Beyond `MOVED_CLASSES`, a packing costs more time than the pods
        // moved within their zones gain. So first the pods under closed
        // hostname spreads stay (each Deployment under one is a class of
        // its own; with none closed, that step would make the same sets
        // again), then those that move within their zones. (With no pod
        // `InZone`, the groups would come out the same.)
        for in_zone in [true, false] {
            let all = if anchored.is_empty() {
                &groups
            } else {
                &anchored
            };
            let moves_in_zone =
                (self.movability.iter()).any(|m| matches!(m, Movability::InZone { .. }));
            if !moves_in_zone || !self.beyond_moved_classes(all) {
                break;
            }
            if in_zone && self.closed_spreads.iter().all(Option::is_none) {
                continue;
            }
            self.closed_spreads.clear();
            self.movability = self.movability(in_zone);
            (groups, anchors, anchored) = self.repack_sets(scope, relax);
        }
        // Pods moved between zones where that packs cheaper: those groups
        // are replaced whatever their own price.
        let mut packed: Vec<Option<Packing>> = groups.iter().map(|_| None).collect();
        let mut moved = vec![false; groups.len()];
        if self.topology.is_active() && scope != Scope::UncountedPods && self.rebalance {
            self.rebalance_zones(&mut groups, &mut packed, &mut moved, relax);
        }

        if anchored.is_empty() {
            let choices = self.choose(&groups, packed, &moved, false, |_| true);
            let replaced = self.build_replacements(&groups, choices, |_| true);
            self.install_replacements(replaced);
            return;
        }
        // Every movable pod packed by its own requirements, with the
        // anchors, NodePool by NodePool where that costs less than the
        // NodePool's NodeClaims as planned; the other NodePools' whole
        // NodeClaims are packed again by their requirements.
        let unmoved = vec![false; anchored.len()];
        let none = anchored.iter().map(|_| None).collect();
        let choices_b = self.choose(&anchored, none, &unmoved, true, |_| true);
        let pools: BTreeSet<PoolIdx> = anchored.iter().map(|g| g.pool).collect();
        let taken: BTreeSet<PoolIdx> = pools
            .into_iter()
            .filter(|&pi| {
                let anchors: f64 = (anchors.iter())
                    .map(|a| &self.claims[a.claim])
                    .filter(|claim| claim.pool == pi)
                    .map(|claim| self.claim_price(claim))
                    .sum();
                let claims: f64 = groups.iter().filter(|g| g.pool == pi).map(|g| g.old).sum();
                choices_b.cost(&anchored, pi) < claims + anchors - 1e-9
            })
            .collect();
        let choices = self.choose(&groups, packed, &moved, false, |pi| !taken.contains(&pi));
        let mut replaced = self.build_replacements(&groups, choices, |pi| !taken.contains(&pi));
        replaced.extend(self.build_replacements(&anchored, choices_b, |pi| taken.contains(&pi)));
        self.install_replacements(replaced);
    }

    /// The repack's groups of whole NodeClaims (`repack_groups`), and with
    /// other topology (`Scope::UncountedPods`) the anchors and the groups
    /// of every movable pod by its own requirements beside them
    /// (`with_anchors`; empty when nothing moves).
    fn repack_sets(
        &self,
        scope: Scope,
        relax: &[Relaxation],
    ) -> (Vec<Group>, Vec<anchors::Anchor>, Vec<Group>) {
        let groups = self.repack_groups(scope);
        match scope {
            Scope::UncountedPods => {
                let anchors = self.anchors(relax);
                let anchored = self.with_anchors(&groups, &anchors, relax);
                (groups, anchors, anchored)
            }
            Scope::Planned { .. } => (groups, Vec::new(), Vec::new()),
        }
    }

    /// Whether the run's topology is only what the repack allows: required
    /// pod anti-affinity on the hostname (checked per group: self
    /// anti-affinity only) and topology spread on the zone (pods are only
    /// moved between NodeClaims pinned to a zone, and between zones only as
    /// `rebalance_zones` allows).
    fn hostname_anti_only(&self) -> bool {
        self.pods.iter().all(|p| {
            p.topology_spread
                .iter()
                .all(|c| c.topology_key == labels::ZONE)
                && p.pod_affinity.is_empty()
                && p.preferred_pod_affinity.is_empty()
                && p.preferred_pod_anti_affinity.is_empty()
                && p.pod_anti_affinity
                    .iter()
                    .all(|t| t.topology_key == labels::HOSTNAME)
        })
    }

    /// Whether NodeClaim `claim` may be packed again: no capacity
    /// reservation, a NodePool without limits or minValues (a NodeClaim
    /// with minValues keeps the types its pods left it: the packings choose
    /// types by price alone), and pods whose placement nothing else looks at.
    fn repackable(&self, claim: &Claim, scope: Scope) -> bool {
        if !self.claim_repackable(claim) {
            return false;
        }
        let Scope::Planned { hostname_anti_only } = scope else {
            return claim.pods.iter().all(|&p| self.movable(claim, p));
        };
        let zone_pinned = claim.zone_pin.pinned();
        claim.pods.iter().all(|&p| {
            let pod = &self.pods[p];
            // Without a shape, or with one and a spread (on the
            // hostname), the pod spreads (on the zone, as
            // `hostname_anti_only` allows).
            let spread_ok = hostname_anti_only && zone_pinned;
            let anti_ok = hostname_anti_only || pod.pod_anti_affinity.is_empty();
            let spreads = self.hints.shape(p).is_none() || !pod.topology_spread.is_empty();
            !((spreads && !spread_ok)
                || !pod.host_ports.is_empty()
                || !anti_ok
                || !pod.preferred_pod_anti_affinity.is_empty())
        })
    }

    /// Whether NodeClaim `claim` may be packed again as far as the
    /// NodeClaim goes: no capacity reservation, a NodePool without limits
    /// or minValues, and pods.
    fn claim_repackable(&self, claim: &Claim) -> bool {
        let pool = &self.pools[claim.pool];
        claim.reservation.is_none()
            && pool.remaining.is_none()
            && !claim.pods.is_empty()
            && pool.np.min_values.is_empty()
    }

    /// Whether pod `p` of NodeClaim `claim` may move to a new node in a
    /// run whose topology is beyond the zone-pinned spreads
    /// (`Scope::UncountedPods`), by its `Movability` (then within `claim`'s
    /// zone only if `claim` is pinned to one).
    fn movable(&self, claim: &Claim, p: PodIdx) -> bool {
        match self.movability.get(p.get()) {
            Some(Movability::Anywhere) => true,
            Some(Movability::InZone { open }) => {
                claim.zone_pin.pinned() || (*open && claim.requirements.get(labels::ZONE).is_none())
            }
            Some(Movability::Stays) | None => false,
        }
    }

    /// Whether pod `p`, movable (see `movable`), may move anywhere.
    fn moves_anywhere(&self, p: PodIdx) -> bool {
        matches!(self.movability.get(p.get()), Some(Movability::Anywhere))
    }

    /// Each pod's `Movability`; `InZone` only with `in_zone`.
    fn movability(&self, in_zone: bool) -> Vec<Movability> {
        PodIdx::enumerate(self.pods)
            .map(|(p, pod)| {
                if !pod.host_ports.is_empty() || !self_apart_preference_only(pod) {
                    Movability::Stays
                } else if self.uncounted(p) {
                    Movability::Anywhere
                } else if in_zone && self.zone_bound(p) {
                    Movability::InZone {
                        open: self.open_zone_mover(pod),
                    }
                } else {
                    Movability::Stays
                }
            })
            .collect()
    }

    /// Whether some NodePool's groups (`anchored`: with the anchors and
    /// their movable pods) hold more than `MOVED_CLASSES` classes: pods of
    /// equal requests, anti-affinity and closed spreads (see
    /// `anti_classes`) in one group, anchors of equal staying requests in
    /// one group. (Families pack several groups together, so a NodePool's
    /// count bounds theirs.)
    fn beyond_moved_classes(&self, anchored: &[Group]) -> bool {
        type Class<'p> = (
            usize,
            usize,
            &'p str,
            Vec<&'p crate::model::PodAffinityTerm>,
            Vec<(usize, u32)>,
        );
        let mut pods: BTreeMap<PoolIdx, foldhash::HashSet<Class>> = BTreeMap::new();
        let mut anchors: BTreeMap<PoolIdx, foldhash::HashSet<(usize, Resources)>> = BTreeMap::new();
        for (gi, g) in anchored.iter().enumerate() {
            let classes = pods.entry(g.pool).or_default();
            classes.extend(g.pods.iter().map(|&p| {
                let pod = &self.pods[p];
                let anti = anti_terms(pod).collect();
                let spreads = self.closed_spreads_of(p);
                (
                    gi,
                    self.hints.req_class(p),
                    pod.namespace.as_str(),
                    anti,
                    spreads,
                )
            }));
            let kinds = anchors.entry(g.pool).or_default();
            kinds.extend(g.anchors.iter().map(|&c| (gi, self.staying_requests(c))));
        }
        pods.iter().any(|(pi, classes)| {
            let kinds = anchors.get(pi).map_or(0, |k| k.len());
            classes.len() + kinds > MOVED_CLASSES
        })
    }

    /// Whether pod `p` may move to another new node of its zone, though
    /// terms on the zone look at it: every term it carries is on the zone
    /// (or is on the hostname as `hostname_terms_kept` says), and so is
    /// every term that counts it. Its zone's counts stay as planned, so
    /// every spread, affinity and anti-affinity on the zone holds as it
    /// did. (`with_anchors` gives it its NodeClaim's zone.)
    fn zone_bound(&self, p: PodIdx) -> bool {
        let pod = &self.pods[p];
        let on_zone = |t: &crate::model::PodAffinityTerm| t.topology_key == labels::ZONE;
        self.hostname_terms_kept(p, Some(labels::ZONE))
            && pod.pod_affinity.iter().all(on_zone)
            && (pod.preferred_pod_affinity.iter()).all(|w| on_zone(&w.term))
            && (self.topology).counted_only_by_zone_or_hostname_terms(pod, &self.closed_spreads)
    }

    /// Whether pod `pod`, moving within its zone (see `zone_bound`), may
    /// also move off a NodeClaim with no zone requirement to any new node:
    /// its only zone terms are preferred pod affinity and no zone spread
    /// counts it. Its zone was not decided, so no zone's count held it;
    /// the preference was no more held there than it is on the new node
    /// (and pods whose required zone affinity counts it pinned its
    /// NodeClaim).
    fn open_zone_mover(&self, pod: &crate::model::Pod) -> bool {
        let off_zone = |t: &crate::model::PodAffinityTerm| t.topology_key != labels::ZONE;
        (pod.topology_spread.iter()).all(|c| c.topology_key != labels::ZONE)
            && pod.pod_affinity.iter().all(off_zone)
            && pod.pod_anti_affinity.iter().all(off_zone)
            && (self.topology.spread_selecting(labels::ZONE, pod)).is_empty()
    }

    /// Whether pod `p` carries no topology but required hostname
    /// anti-affinity and closed hostname spreads (see `hostname_terms_kept`)
    /// and no other topology term counts it: where it runs matters to
    /// nobody else (see `Scope::UncountedPods`).
    fn uncounted(&self, p: PodIdx) -> bool {
        let pod = &self.pods[p];
        self.hostname_terms_kept(p, None)
            && pod.pod_affinity.is_empty()
            && pod.preferred_pod_affinity.is_empty()
            && (self.topology).counted_only_by_hostname_terms(pod, &self.closed_spreads)
    }

    /// Whether pod `p`'s spreads and required anti-affinity are on `key`
    /// or are what the packing keeps on the hostname: required
    /// anti-affinity (see `anti_classes`) and spreads of a group whose
    /// every counted pod carries it (`closed_spreads`: at most its cap of
    /// them per node).
    fn hostname_terms_kept(&self, p: PodIdx, key: Option<&str>) -> bool {
        let pod = &self.pods[p];
        let on_key = |k: &str| key == Some(k);
        let closed = |gi: &usize| self.closed_spreads.get(*gi).is_some_and(Option::is_some);
        (pod.topology_spread.iter().zip(&self.groups[p].spread))
            .all(|(c, gi)| on_key(&c.topology_key) || closed(gi))
            && anti_terms(pod)
                .all(|t| on_key(&t.topology_key) || t.topology_key == labels::HOSTNAME)
    }

    /// Groups of repackable NodeClaims by (NodePool, requirements without
    /// hostname), in creation order, with their pods and planned price.
    fn repack_groups(&self, scope: Scope) -> Vec<Group> {
        let mut index: foldhash::HashMap<(PoolIdx, Requirements), usize> = Default::default();
        let mut groups: Vec<Group> = Vec::new();
        for (c, claim) in ClaimIdx::enumerate(&self.claims) {
            if !self.repackable(claim, scope) {
                continue;
            }
            let mut key = claim.requirements.clone();
            key.remove(labels::HOSTNAME);
            let g = *index.entry((claim.pool, key.clone())).or_insert_with(|| {
                groups.push(Group {
                    pool: claim.pool,
                    reqs: key,
                    members: vec![],
                    pods: vec![],
                    old: 0.0,
                    anchors: vec![],
                });
                groups.len() - 1
            });
            groups[g].members.push(c);
        }
        for g in &mut groups {
            g.old = g
                .members
                .iter()
                .map(|&c| self.claim_price(&self.claims[c]))
                .sum();
            g.pods = g
                .members
                .iter()
                .flat_map(|&c| self.claims[c].pods.iter().copied())
                .collect();
            g.pods.sort_unstable();
        }
        groups
    }

    /// The new packing of every group that it replaces (cheaper, or
    /// `moved` between zones); `packed` holds the packings the zone moves
    /// already made, the other groups are packed here. With `families`,
    /// each family (see `Run::families`) is packed together whenever it
    /// can be, and only the other groups on their own (the caller compares
    /// the whole with the choice without families). Only the groups of
    /// the NodePools `packs` accepts are packed; the others stay as
    /// planned.
    fn choose(
        &self,
        groups: &[Group],
        mut packed: Vec<Option<Packing>>,
        moved: &[bool],
        families: bool,
        packs: impl Fn(PoolIdx) -> bool,
    ) -> Choices {
        let mut joint: Vec<Option<(Vec<usize>, Packing)>> = groups.iter().map(|_| None).collect();
        let mut in_family = vec![false; groups.len()];
        if families {
            let families = self.families(groups, moved);
            for family in families.into_iter().filter(|f| packs(groups[f[0]].pool)) {
                if let Some(packing) = self.family_packing(groups, &family) {
                    for &gi in &family {
                        in_family[gi] = true;
                    }
                    let first = family[0];
                    joint[first] = Some((family, packing));
                }
            }
        }
        // Each group's own packing, where it replaces the group.
        let mut own: Vec<Option<Packing>> = Vec::with_capacity(groups.len());
        for (gi, g) in groups.iter().enumerate() {
            let packing = match packed[gi].take() {
                _ if in_family[gi] || !packs(g.pool) => None,
                Some(p) => Some(p),
                None if g.anchors.is_empty() => {
                    self.pack_pods(g.pool, &g.reqs, &g.pods, Effort::Full)
                }
                None => {
                    let anchors: Vec<(ClaimIdx, usize)> =
                        g.anchors.iter().map(|&c| (c, 0)).collect();
                    let family_of = vec![0; g.pods.len()];
                    let reqs = std::slice::from_ref(&g.reqs);
                    self.pack_family(g.pool, reqs, &g.pods, &family_of, &anchors, Effort::Full)
                }
            };
            own.push(packing.filter(|p| moved[gi] || replaces(&self.pools[g.pool], g, p)));
        }
        Choices { own, joint }
    }

    /// The new NodeClaims of `choices` for the groups of the NodePools
    /// `taken` accepts.
    fn build_replacements(
        &mut self,
        groups: &[Group],
        choices: Choices,
        taken: impl Fn(PoolIdx) -> bool,
    ) -> Vec<Replacement> {
        let Choices { mut own, mut joint } = choices;
        let mut replaced = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            if !taken(g.pool) {
                continue;
            }
            if let Some((family, packing)) = joint[gi].take() {
                let mut members: Vec<ClaimIdx> = family
                    .iter()
                    .flat_map(|&f| groups[f].members.iter().copied())
                    .collect();
                members.sort_unstable();
                let claims = self.build_claims(g.pool, &members, packing);
                members.extend(
                    family
                        .iter()
                        .flat_map(|&f| groups[f].anchors.iter().copied()),
                );
                replaced.push(Replacement { members, claims });
            } else if let Some(packing) = own[gi].take() {
                let claims = self.build_claims(g.pool, &g.members, packing);
                let members = g.members.iter().chain(&g.anchors).copied().collect();
                replaced.push(Replacement { members, claims });
            }
        }
        replaced
    }

    /// Groups of one NodePool whose requirement sets differ only in
    /// instance-type labels (`labels::is_instance_type_label`), two to
    /// `FAMILY_SETS` of them, none moved between zones: their pods may
    /// share a node of a type every set on it allows (an `arm64` pod and
    /// one of no architecture on an `arm64` node). The first pass never
    /// puts them together unless a pod joins a NodeClaim that narrows to
    /// it; the repack packs such groups each on its own. Their zones may
    /// differ: anchors pinned to a zone take pods of none.
    fn families(&self, groups: &[Group], moved: &[bool]) -> Vec<Vec<usize>> {
        let mut index: foldhash::HashMap<(PoolIdx, Requirements), usize> = Default::default();
        let mut families: Vec<Vec<usize>> = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            if moved[gi] {
                continue;
            }
            let key = Requirements::from_iter_reqs(
                g.reqs
                    .iter()
                    .filter(|r| !labels::is_instance_type_label(&r.key) && r.key != labels::ZONE)
                    .cloned(),
            );
            let f = *index.entry((g.pool, key)).or_insert_with(|| {
                families.push(Vec::new());
                families.len() - 1
            });
            families[f].push(gi);
        }
        families.retain(|f| (2..=FAMILY_SETS).contains(&f.len()));
        families
    }

    /// The packing of `family`'s groups together.
    fn family_packing(&self, groups: &[Group], family: &[usize]) -> Option<Packing> {
        let pool = groups[family[0]].pool;
        let mut reqs = Vec::with_capacity(family.len());
        let mut pods = Vec::new();
        let mut family_of = Vec::new();
        let mut anchors = Vec::new();
        for (f, &gi) in family.iter().enumerate() {
            let g = &groups[gi];
            reqs.push(g.reqs.clone());
            pods.extend_from_slice(&g.pods);
            family_of.extend(std::iter::repeat_n(f, g.pods.len()));
            anchors.extend(g.anchors.iter().map(|&c| (c, f)));
        }
        self.pack_family(pool, &reqs, &pods, &family_of, &anchors, Effort::Full)
    }

    /// New NodeClaims take the old ones' places (and names) in creation
    /// order; surplus old ones go, extra new ones come last.
    fn install_replacements(&mut self, replaced: Vec<Replacement>) {
        if replaced.is_empty() {
            return;
        }
        let mut slots: Vec<Option<Claim>> = std::mem::take(&mut self.claims)
            .into_iter()
            .map(Some)
            .collect();
        let mut extra = Vec::new();
        for Replacement { members, claims } in replaced {
            for &c in &members {
                slots[c] = None;
            }
            for (slot, claim) in claims {
                match slot {
                    Some(c) => slots[c] = Some(claim),
                    None => extra.push(claim),
                }
            }
        }
        self.claims = slots.into_iter().flatten().chain(extra).collect();
        self.index_claim_names();
    }

    /// Candidate types for a group of pool `pi` with `reqs`, as (type,
    /// price, room per dimension of `dims`): room after the daemonset
    /// overhead, the price of the offerings `reqs` allow (a zone's own);
    /// dominated types (no cheaper and no larger in any dimension than
    /// another) dropped. Cached: the zone moves pack one group many times.
    fn candidates(
        &self,
        pi: PoolIdx,
        reqs: &Requirements,
        dims: &[String],
    ) -> std::rc::Rc<Vec<PackType>> {
        let key = (pi, reqs.clone(), dims.to_vec());
        if let Some(hit) = self.hints.candidates_cached(&key) {
            return hit;
        }
        let pool = &self.pools[pi];
        let compatible = self.compatible_types(pi, reqs);
        let filter = pool.filter(reqs);
        let cands: Vec<PackType> = compatible
            .iter()
            .filter_map(|&t| self.candidate(pi, &filter, t, dims))
            .collect();
        let kept = std::rc::Rc::new(undominated(cands));
        self.hints.remember_candidates(key, kept.clone());
        kept
    }

    /// Candidate types for a family's pods (see `Run::families`): every
    /// type one of its requirement sets `reqs` allows, with room in the
    /// resource dimensions of `demand` (`Demand::resources`) as `candidates`
    /// gives it and, in each requirement set's dimension, the type's pod
    /// room when the set allows it, else none (a pod of the set fits only
    /// a type that allows it).
    fn family_candidates(
        &self,
        pi: PoolIdx,
        reqs: &[Requirements],
        demand: &Demand,
    ) -> Vec<PackType> {
        let resource_dims = demand.resources;
        let allowed: Vec<std::rc::Rc<Vec<usize>>> =
            reqs.iter().map(|r| self.compatible_types(pi, r)).collect();
        let mut types: Vec<usize> = allowed.iter().flat_map(|a| a.iter().copied()).collect();
        types.sort_unstable();
        types.dedup();
        let dims = &demand.dims[..resource_dims];
        let pods_dim = dims.iter().position(|d| d == crate::resources::PODS);
        let sets = if reqs.len() > 1 { reqs.len() } else { 0 };
        // The family's sets differ only in instance-type labels and zones:
        // where their zones differ, a type is a candidate once per zone,
        // at that zone's price, for the sets that allow the zone.
        let zone_reqs: Vec<Option<&Requirement>> =
            reqs.iter().map(|r| r.get(labels::ZONE)).collect();
        let zones: Vec<Option<&str>> = if zone_reqs.iter().all(|z| *z == zone_reqs[0]) {
            vec![None]
        } else {
            self.pools[pi]
                .zones
                .iter()
                .filter(|z| zone_reqs.iter().any(|r| r.is_none_or(|r| r.has(z))))
                .map(|z| Some(z.as_str()))
                .collect()
        };
        let mut cands = Vec::new();
        for zone in zones {
            let mut base = reqs[0].clone();
            if let Some(z) = zone {
                base.replace(Requirement::in_values(labels::ZONE, [z]));
            }
            let filter = self.pools[pi].filter(&base);
            let in_zone = |f: usize| zone.is_none_or(|z| zone_reqs[f].is_none_or(|r| r.has(z)));
            for &t in &types {
                let Some(mut c) = self.candidate(pi, &filter, t, dims) else {
                    continue;
                };
                // In pods, as each pod needs one.
                let pod_room = pods_dim.map_or(REQUIREMENT_ROOM, |d| c.room[d] / 1000);
                c.room
                    .extend(allowed.iter().take(sets).enumerate().map(|(f, a)| {
                        if in_zone(f) && a.binary_search(&t).is_ok() {
                            pod_room
                        } else {
                            0
                        }
                    }));
                c.room.extend_from_slice(&demand.per_node_room);
                let room = &c.room[resource_dims..resource_dims + sets];
                if sets == 0 || room.iter().any(|&r| r > 0) {
                    cands.push(c);
                }
            }
        }
        undominated(cands)
    }

    /// Type `t` of pool `pi` as a packing candidate: (type, price of the
    /// offering `filter` allows, room after the daemonset overhead per
    /// dimension of `dims`); `None` when no offering is allowed or the
    /// overhead alone does not fit.
    pub(super) fn candidate(
        &self,
        pi: PoolIdx,
        filter: &super::pools::OfferingFilter,
        t: usize,
        dims: &[String],
    ) -> Option<PackType> {
        let pool = &self.pools[pi];
        let ty = &pool.types[t];
        if !pool.daemon_overhead.fits_in(&ty.allocatable) {
            return None;
        }
        let price = self.set_price(pi, filter, std::iter::once(t));
        let room = ty.allocatable.minus(&pool.daemon_overhead);
        price.is_finite().then(|| PackType {
            ty: t,
            price,
            room: dims.iter().map(|d| room.get(d).millis()).collect(),
        })
    }

    /// What NodeClaim `claim` costs as planned (see [`Run::set_price`]).
    pub(super) fn claim_price(&self, claim: &Claim) -> f64 {
        let filter = self.pools[claim.pool].filter(&claim.requirements);
        self.set_price(claim.pool, &filter, claim.types.iter())
    }

    /// The next name of a NodeClaim of pool `pi` (`<NodePool>-<n>`).
    pub(super) fn new_claim_name(&mut self, pi: PoolIdx) -> String {
        let n = self.claim_counter.entry(pi).or_default();
        *n += 1;
        format!("{}-{}", self.pools[pi].np.name, n)
    }

    /// What a node costs (`Pool::node_price`: its volumes included) at the
    /// offering a fleet would take for a NodeClaim of pool `pi` allowed
    /// `filter` and `types` (in the pool's price order): the first by
    /// capacity type, then price, as `offer_summary` picks it. Infinite when
    /// no offering is allowed.
    pub(super) fn set_price(
        &self,
        pi: PoolIdx,
        filter: &super::pools::OfferingFilter,
        types: impl Iterator<Item = usize>,
    ) -> f64 {
        let pool = &self.pools[pi];
        let mut best: Option<(CapacityType, f64)> = None;
        for t in types {
            let ty = &pool.types[t];
            // Types come cheapest first by their own preferred offering:
            // past the best price, only a better capacity type could win,
            // and nothing beats spot outside a reservation.
            if let Some((ct, p)) = best {
                if ty.price >= p && ct <= CapacityType::Spot {
                    break;
                }
            }
            for o in ty.offerings.iter().filter(|o| filter.allows(o)) {
                if best.is_none_or(|b| (o.capacity_type, o.price) < b) {
                    best = Some((o.capacity_type, o.price));
                }
            }
        }
        best.map_or(f64::INFINITY, |(_, p)| pool.node_price(p))
    }

    /// Each pod's anti-affinity class (0: none; else one per distinct
    /// namespace, anti-affinity terms (see [`anti_terms`]) and closed
    /// hostname spreads) and, per class, what keeps its pods apart on a
    /// node (see [`Apart`]). `None` when a term selects a pod of another
    /// class: the packing cannot express that, so the group is left as
    /// planned.
    fn anti_classes(&self, pods: &[PodIdx]) -> Option<(Vec<usize>, Vec<Apart>)> {
        use foldhash::HashMap;
        type Key<'p> = (
            &'p str,
            Vec<&'p crate::model::PodAffinityTerm>,
            Vec<(usize, u32)>,
        );
        let mut ids: HashMap<Key, usize> = HashMap::default();
        let mut apart = vec![Apart::default()];
        let mut anti = Vec::with_capacity(pods.len());
        for &p in pods {
            let pod = &self.pods[p];
            let spreads = self.closed_spreads_of(p);
            let terms: Vec<_> = anti_terms(pod).collect();
            if terms.is_empty() && spreads.is_empty() {
                anti.push(0);
                continue;
            }
            let key = (pod.namespace.as_str(), terms, spreads);
            let n = ids.len() + 1;
            let id = *ids.entry(key.clone()).or_insert_with(|| {
                apart.push(Apart {
                    self_anti: false,
                    spreads: key.2,
                });
                n
            });
            anti.push(id);
        }
        if ids.is_empty() {
            return Some((anti, apart));
        }
        if ids.keys().filter(|(_, terms, _)| !terms.is_empty()).count() > ANTI_CLASSES {
            return None;
        }
        // Distinct (namespace, labels) of the group's pods, with their
        // classes; every term must select only pods of its own class.
        let mut sigs: HashMap<(&str, &BTreeMap<String, String>), Vec<usize>> = HashMap::default();
        for (i, &p) in pods.iter().enumerate() {
            let pod = &self.pods[p];
            let e = sigs
                .entry((pod.namespace.as_str(), &pod.labels))
                .or_default();
            if !e.contains(&anti[i]) {
                e.push(anti[i]);
            }
        }
        for ((ns, terms, _), &a) in &ids {
            for ((other_ns, labels), classes) in &sigs {
                if terms.iter().any(|t| t.selects(ns, other_ns, labels)) {
                    if classes.iter().any(|&c| c != a) {
                        return None;
                    }
                    apart[a].self_anti = true;
                }
            }
        }
        Some((anti, apart))
    }

    /// The closed hostname spreads pod `p` carries (see
    /// `Topology::closed_hostname_spreads`), with their caps, by group.
    fn closed_spreads_of(&self, p: PodIdx) -> Vec<(usize, u32)> {
        let mut out: Vec<(usize, u32)> = (self.groups[p].spread.iter())
            .filter_map(|&gi| Some((gi, (*self.closed_spreads.get(gi)?)?)))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Packs `pods` (sorted) onto new nodes of pool `pi` with `reqs`, as
    /// the module documentation says, with `effort`; `None` when some pod
    /// fits no type or the anti-affinity cannot be expressed.
    pub(super) fn pack_pods(
        &self,
        pi: PoolIdx,
        reqs: &Requirements,
        pods: &[PodIdx],
        effort: Effort,
    ) -> Option<Packing> {
        let one = std::slice::from_ref(reqs);
        self.pack_family(pi, one, pods, &vec![0; pods.len()], &[], effort)
    }

    /// Packs `pods` of a family (see `Run::families`): pod `pods[i]`
    /// carries requirement set `reqs[family_of[i]]`, and a node holds pods
    /// of several sets only on a type each of them allows. `anchors` (with
    /// their sets) are packed as pods are, at most one per node.
    fn pack_family(
        &self,
        pi: PoolIdx,
        reqs: &[Requirements],
        pods: &[PodIdx],
        family_of: &[usize],
        anchors: &[(ClaimIdx, usize)],
        effort: Effort,
    ) -> Option<Packing> {
        if pods.is_empty() && anchors.is_empty() {
            return Some(Packing {
                cost: 0.0,
                classes: vec![],
                bins: vec![],
                sized: vec![],
            });
        }
        let mut classes = self.pod_classes(pods, family_of)?;
        self.add_anchor_classes(&mut classes, anchors);
        let mut demand = Demand::of(&classes);
        demand.add_requirement_dims(&classes, reqs.len());
        let resource_dims = demand.resources;
        let cands = match reqs {
            [one] if demand.dims.len() == resource_dims => self.candidates(pi, one, &demand.dims),
            [one] => {
                // Only per-node dimensions: every type has the same room
                // in each, which changes no dominance.
                let mut cands = (*self.candidates(pi, one, &demand.dims[..resource_dims])).clone();
                for c in &mut cands {
                    c.room.extend_from_slice(&demand.per_node_room);
                }
                std::rc::Rc::new(cands)
            }
            _ => std::rc::Rc::new(self.family_candidates(pi, reqs, &demand)),
        };
        let mut prices = FillPrices::new(&cands, &demand);
        // Each candidate is priced as the fleet would take its nodes (the
        // estimate prices fills by the cheapest type alone).
        let mut best: Option<Packing> = None;
        let mut work_per_pod = patterns::work_per_pod(self.pods.len());
        if effort == Effort::Estimate {
            prices.exact_work = ESTIMATE_EXACT_WORK;
            let pods: usize = demand.counts.iter().sum();
            if pods < demand.counts.len() * ESTIMATE_LP_PODS_PER_CLASS {
                work_per_pod = 0;
            }
        }
        for mut candidate in candidate_packings(&cands, &demand, &mut prices, work_per_pod)? {
            merge_tail(&mut candidate.bins, &demand.per_node, &mut prices);
            let priced = self.priced_packing(pi, reqs, classes.clone(), candidate.bins);
            if let Some(p) = priced {
                if best.as_ref().is_none_or(|b| p.cost < b.cost - 1e-12) {
                    best = Some(p);
                }
            }
        }
        best
    }

    /// The pod classes of `pods` (identical requests and anti-affinity
    /// class), largest requests first (as the first pass orders); `None`
    /// when the anti-affinity cannot be expressed (see `anti_classes`).
    fn pod_classes(&self, pods: &[PodIdx], family_of: &[usize]) -> Option<Vec<PodClass>> {
        let (anti, apart) = self.anti_classes(pods)?;
        let mut class_of: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
        let mut classes: Vec<PodClass> = Vec::new();
        for (i, &p) in pods.iter().enumerate() {
            let rc = self.hints.req_class(p);
            let family = family_of[i];
            let k = *class_of.entry((rc, anti[i], family)).or_insert_with(|| {
                let apart = &apart[anti[i]];
                classes.push(PodClass {
                    requests: self.pods[p].requests.clone(),
                    family,
                    anchors: vec![],
                    anti: anti[i],
                    self_anti: apart.self_anti,
                    spreads: apart.spreads.clone(),
                    pods: vec![],
                    per_node: apart.per_node(),
                });
                classes.len() - 1
            });
            classes[k].pods.push(p);
        }
        sort_classes(&mut classes);
        Some(classes)
    }

    /// The packing of `bins` with every node right-sized and priced as the
    /// old NodeClaims are: the offering a fleet would take among the types
    /// that hold its pods. `None` when a node has no offering.
    fn priced_packing(
        &self,
        pi: PoolIdx,
        reqs: &[Requirements],
        classes: Vec<PodClass>,
        bins: Vec<Bin>,
    ) -> Option<Packing> {
        // Bins of one fill share their requests, types and maxima.
        let mut by_fill: foldhash::HashMap<&[(usize, usize)], Sized> = Default::default();
        let mut sized: Vec<Sized> = Vec::with_capacity(bins.len());
        let mut cost = 0.0;
        for b in &bins {
            let entry = match by_fill.get(b.fill.as_slice()) {
                Some(e) => e.clone(),
                None => {
                    let node_reqs = node_requirements(reqs, &classes, &b.fill);
                    let compatible = self.compatible_types(pi, &node_reqs);
                    let filter = self.pools[pi].filter(&node_reqs);
                    let node = self.size_node(pi, &filter, &compatible, &classes, &b.fill);
                    let node = SizedNode {
                        reqs: node_reqs.clone(),
                        ..node
                    };
                    let e = std::rc::Rc::new(node);
                    by_fill.insert(b.fill.as_slice(), e.clone());
                    e
                }
            };
            if !entry.price.is_finite() {
                return None;
            }
            cost += entry.price;
            sized.push(entry);
        }
        Some(Packing {
            cost,
            classes,
            bins,
            sized,
        })
    }

    /// A node of pool `pi` holding `fill` of `classes`, right-sized: its
    /// requests (daemonsets included), the `compatible` types that hold
    /// them, their maxima, and its price under `filter`.
    fn size_node(
        &self,
        pi: PoolIdx,
        filter: &super::pools::OfferingFilter,
        compatible: &[usize],
        classes: &[PodClass],
        fill: &[(usize, usize)],
    ) -> SizedNode {
        let pool = &self.pools[pi];
        let mut requests = pool.daemon_overhead.clone();
        for &(k, c) in fill {
            for _ in 0..c {
                requests.add_assign(&classes[k].requests);
            }
        }
        let types = TypeSet::from_indices(
            compatible
                .iter()
                .copied()
                .filter(|&t| requests.fits_in(&pool.types[t].allocatable)),
            pool.types.len(),
        );
        let (max_allocatable, max_capacity) = type_maxima(pool, &types);
        let price = self.set_price(pi, filter, types.iter());
        SizedNode {
            reqs: Requirements::new(),
            requests,
            types,
            max_allocatable,
            max_capacity,
            price,
        }
    }

    /// The NodeClaims of `packing` for the group of `members` (pool `pi`,
    /// `reqs`): the old names first, then new ones.
    fn build_claims(
        &mut self,
        pi: PoolIdx,
        members: &[ClaimIdx],
        packing: Packing,
    ) -> Vec<(Option<ClaimIdx>, Claim)> {
        let Packing {
            classes,
            bins,
            sized,
            ..
        } = packing;
        let zones = self.pools[pi].zones.clone();
        let mut next: Vec<usize> = classes.iter().map(|_| 0).collect();
        let mut free_members = members.iter().copied();
        let mut out = Vec::with_capacity(bins.len());
        for (b, entry) in bins.iter().zip(sized) {
            let SizedNode {
                reqs,
                requests,
                types,
                max_allocatable,
                max_capacity,
                ..
            } = (*entry).clone();
            let mut pods = Vec::new();
            let mut anchor = None;
            for &(k, c) in &b.fill {
                let class = &classes[k];
                if class.anchors.is_empty() {
                    pods.extend_from_slice(&class.pods[next[k]..next[k] + c]);
                } else {
                    // One per node (the anchor dimension).
                    let a = class.anchors[next[k]];
                    anchor = Some(a);
                    pods.extend(self.staying(a));
                }
                next[k] += c;
            }
            let slot = anchor.or_else(|| free_members.next());
            let name = match slot {
                Some(c) => self.claims[c].name.clone(),
                None => self.new_claim_name(pi),
            };
            let mut claim = Claim::packed(
                pi,
                &zones,
                &reqs,
                name,
                Packed {
                    types,
                    requests,
                    pods,
                    max_allocatable,
                    max_capacity,
                },
            );
            if anchor.is_some() {
                claim.host_ports = claim
                    .pods
                    .iter()
                    .flat_map(|&p| self.pods[p].host_ports.iter().cloned())
                    .collect();
            }
            out.push((slot, claim));
        }
        out
    }
}

/// Largest requests first (as the first pass orders); of equals, pods'
/// classes first, by their first pod, then anchors' by their first.
fn sort_classes(classes: &mut [PodClass]) {
    let first = |c: &PodClass| {
        (
            c.pods.is_empty(),
            c.pods.first().map(|p| p.get()),
            c.anchors.first().map(|a| a.get()),
        )
    };
    classes.sort_by(|a, b| {
        b.requests
            .cpu()
            .cmp(&a.requests.cpu())
            .then_with(|| b.requests.memory().cmp(&a.requests.memory()))
            .then_with(|| first(a).cmp(&first(b)))
    });
}

/// `cands` without the dominated ones (no cheaper and no larger in any
/// dimension than another; of equals, the first is kept), in their order.
/// Each is compared with the kept ones cheaper or larger than it only:
/// what a dropped one dominates, the one that dropped it dominates too.
fn undominated(cands: Vec<PackType>) -> Vec<PackType> {
    let size = |c: &PackType| c.room.iter().map(|&r| r as f64).sum::<f64>();
    // Two necessary conditions for `b` to dominate `a`, cheap to test
    // first: room wherever `a` has room (in the first 64 dimensions; a
    // family's requirement-set dimensions make most pairs fail here), and
    // no smaller a sum of rooms.
    let sizes: Vec<f64> = cands.iter().map(size).collect();
    let has_room: Vec<u64> = (cands.iter())
        .map(|c| {
            (c.room.iter().take(64).enumerate())
                .filter(|&(_, &r)| r > 0)
                .fold(0u64, |m, (d, _)| m | 1 << d)
        })
        .collect();
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&cands[a], &cands[b]);
        ca.price
            .total_cmp(&cb.price)
            .then(sizes[b].total_cmp(&sizes[a]))
            .then(a.cmp(&b))
    });
    // The kept ones by where they have room: only those with room
    // wherever `a` has it are compared, a bucket at a time.
    let mut kept: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut keep = vec![false; cands.len()];
    for i in order {
        let a = &cands[i];
        let beaten = (kept.iter())
            .filter(|(room, _)| has_room[i] & !room == 0)
            .flat_map(|(_, js)| js)
            .any(|&j| {
                let b = &cands[j];
                sizes[j] >= sizes[i]
                    && b.price <= a.price
                    && b.room.iter().zip(&a.room).all(|(x, y)| x >= y)
            });
        if !beaten {
            keep[i] = true;
            match kept.iter_mut().find(|(room, _)| *room == has_room[i]) {
                Some((_, js)) => js.push(i),
                None => kept.push((has_room[i], vec![i])),
            }
        }
    }
    cands
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect()
}

/// A node's requirements: the intersection of `reqs`' sets whose pods its
/// `fill` holds (each class's set is `classes[k].family`).
fn node_requirements(
    reqs: &[Requirements],
    classes: &[PodClass],
    fill: &[(usize, usize)],
) -> Requirements {
    let mut sets: Vec<usize> = fill.iter().map(|&(k, _)| classes[k].family).collect();
    sets.sort_unstable();
    sets.dedup();
    let mut out = match sets.first() {
        Some(&f) => reqs[f].clone(),
        None => reqs.first().cloned().unwrap_or_default(),
    };
    for &f in sets.iter().skip(1) {
        out.add_all(&reqs[f]);
    }
    out
}

/// A family requirement set's room on a type that allows it, where the
/// pods do not request the `pods` resource (never binding).
const REQUIREMENT_ROOM: i64 = 1 << 30;

/// How hard `Run::pack_pods` tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effort {
    /// The plan's packing: every packing worth pricing (see
    /// `candidate_packings`).
    Full,
    /// What a search that prices many packings of a few pods each asks
    /// (the zone moves, see `rebalance`): the exact few-class packing held
    /// to `ESTIMATE_EXACT_WORK`, and no pattern LP where the classes hold
    /// fewer than `ESTIMATE_LP_PODS_PER_CLASS` pods each. The exact table
    /// of thirteen single-pod classes, and an LP (at least `MIN_WORK`),
    /// each cost milliseconds every time, where the LP's rounding keeps
    /// little of what it gains over pods of their own sizes (zone spreads
    /// of Deployments keep the LP: their moves need its prices). The
    /// search's result is packed again in full before it is taken.
    Estimate,
}

/// What a group's pod classes ask of a node: the resource dimensions the
/// pods request and, per class, its request per dimension, the most pods
/// per node and how many pods there are.
struct Demand {
    dims: Vec<String>,
    /// How many of `dims`, the first, are resources the pods request; the
    /// rest are constraints (see `add_requirement_dims`).
    resources: usize,
    need: Vec<Vec<i64>>,
    per_node: Vec<usize>,
    counts: Vec<usize>,
    /// Every type's room in each dimension after the resources and the
    /// requirement sets (see `add_requirement_dims`).
    per_node_room: Vec<i64>,
}

impl Demand {
    /// The demand of `classes`, dimensions in the order the classes first
    /// request them.
    fn of(classes: &[PodClass]) -> Demand {
        let per_node: Vec<usize> = classes.iter().map(|c| c.per_node).collect();
        let mut dims: Vec<String> = Vec::new();
        for c in classes {
            for (name, _) in c.requests.iter() {
                if !dims.iter().any(|d| d == name) {
                    dims.push(name.to_string());
                }
            }
        }
        let need: Vec<Vec<i64>> = classes
            .iter()
            .map(|c| dims.iter().map(|d| c.requests.get(d).millis()).collect())
            .collect();
        let counts: Vec<usize> = classes
            .iter()
            .map(|c| c.pods.len() + c.anchors.len())
            .collect();
        Demand {
            resources: dims.len(),
            dims,
            need,
            per_node,
            counts,
            per_node_room: Vec::new(),
        }
    }

    /// The demand of `classes` (this demand's indices), `counts[i]` pods of
    /// `classes[i]`, over the same dimensions.
    fn of_classes(&self, classes: &[usize], counts: Vec<usize>) -> Demand {
        Demand {
            dims: self.dims.clone(),
            resources: self.resources,
            need: classes.iter().map(|&k| self.need[k].clone()).collect(),
            per_node: classes.iter().map(|&k| self.per_node[k]).collect(),
            counts,
            per_node_room: self.per_node_room.clone(),
        }
    }

    /// One more dimension per requirement set of a family (`sets` of
    /// them, when more than one): each pod needs one unit of its own
    /// set's; then one per group of classes whose pods a node holds only
    /// so many of together (`per_node_room`): the anchors and the classes
    /// of one self anti-affinity class split over several sets or sizes,
    /// one per node; the classes carrying one closed hostname spread (see
    /// [`Apart`]), its cap. Each pod of a class of the group needs one and
    /// every type has the room (see `Run::family_candidates`).
    fn add_requirement_dims(&mut self, classes: &[PodClass], sets: usize) {
        let sets = if sets > 1 { sets } else { 0 };
        self.dims
            .extend((0..sets).map(|f| format!("{REQUIREMENT_DIM}{f}")));
        let mut together: Vec<(Vec<bool>, i64)> = Vec::new();
        if classes.iter().any(|c| !c.anchors.is_empty()) {
            together.push((classes.iter().map(|c| !c.anchors.is_empty()).collect(), 1));
        }
        let mut split: Vec<usize> = classes
            .iter()
            .filter(|c| c.self_anti)
            .map(|c| c.anti)
            .collect();
        split.sort_unstable();
        for a in shared_by_several(split) {
            together.push((
                classes.iter().map(|c| c.self_anti && c.anti == a).collect(),
                1,
            ));
        }
        let mut spreads: Vec<(usize, u32)> = classes
            .iter()
            .flat_map(|c| c.spreads.iter().copied())
            .collect();
        spreads.sort_unstable();
        for (gi, cap) in shared_by_several(spreads) {
            let carries = |c: &PodClass| c.spreads.iter().any(|&(g, _)| g == gi);
            together.push((classes.iter().map(carries).collect(), i64::from(cap)));
        }
        self.dims
            .extend((0..together.len()).map(|g| format!("{ONE_PER_NODE_DIM}{g}")));
        self.per_node_room = together.iter().map(|(_, room)| *room).collect();
        for (k, (need, class)) in self.need.iter_mut().zip(classes).enumerate() {
            need.extend((0..sets).map(|f| i64::from(f == class.family)));
            need.extend(together.iter().map(|(g, _)| i64::from(g[k])));
        }
    }
}

/// The values that occur more than once in `sorted`, once each.
fn shared_by_several<T: PartialEq + Copy>(sorted: Vec<T>) -> Vec<T> {
    sorted
        .chunk_by(|a, b| a == b)
        .filter(|g| g.len() > 1)
        .map(|g| g[0])
        .collect()
}

/// The name prefix of a family's requirement-set dimensions (not a
/// resource: no pod requests it).
const REQUIREMENT_DIM: &str = "flotilla.dev/requirement-set-";

/// The name prefix of the dimensions that keep groups of classes one pod
/// per node.
const ONE_PER_NODE_DIM: &str = "flotilla.dev/one-per-node-";

/// Value of a pod of each class, two ways (the cheapest packing wins):
/// the best price per slot any type offers for it; and the sum of its
/// dimensions' costs at per-dimension unit prices (the cheapest price per
/// unit of each resource over the types). `None` when some class fits no
/// candidate. (A third start, the largest of its dimensions' costs, won
/// by at most 0.09% on the bench's mixes at 2,000-10,000 pods and took a
/// third of the greedy's time.)
fn starting_values(cands: &[PackType], demand: &Demand) -> Option<[Vec<f64>; 2]> {
    let slot = slot_values(cands, demand);
    if slot.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let unit = unit_prices(cands, demand.dims.len());
    Some([
        slot,
        demand.need.iter().map(|n| summed_cost(n, &unit)).collect(),
    ])
}

/// Per class, the best price per pod slot any candidate offers for it
/// (infinite when none holds one).
fn slot_values(cands: &[PackType], demand: &Demand) -> Vec<f64> {
    (sparse_needs(&demand.need).iter().zip(&demand.per_node))
        .map(|(n, &most)| {
            let most = i64::try_from(most).unwrap_or(i64::MAX);
            cands
                .iter()
                .filter_map(|c| {
                    let k = sparse_copies_up_to(&c.room, n, most);
                    (k > 0).then(|| c.price / k as f64)
                })
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

/// Per dimension, the cheapest price per unit over the candidates with
/// room in it (0 when none has).
fn unit_prices(cands: &[PackType], dims: usize) -> Vec<f64> {
    (0..dims)
        .map(|d| {
            cands
                .iter()
                .filter(|c| c.room[d] > 0)
                .map(|c| c.price / c.room[d] as f64)
                .fold(f64::INFINITY, f64::min)
        })
        .map(|u| if u.is_finite() { u } else { 0.0 })
        .collect()
}

/// A pod needing `n` at `unit` prices: the sum of its dimensions' costs.
fn summed_cost(n: &[i64], unit: &[f64]) -> f64 {
    n.iter().zip(unit).map(|(q, u)| *q as f64 * u).sum()
}

/// The price of a fill as right-sized (the cheapest candidate that holds
/// it), remembered per distinct fill.
struct FillPrices<'a> {
    cheapest: ByPrice<'a>,
    need: &'a [Vec<i64>],
    dims: usize,
    known: foldhash::HashMap<Vec<(usize, usize)>, f64>,
    /// The work the exact few-class packing may take (see
    /// `few_classes_affordable`): `FEW_CLASSES_WORK`, less for a search's
    /// estimates (`Effort::Estimate`).
    exact_work: usize,
}

impl<'a> FillPrices<'a> {
    /// No fill priced yet.
    fn new(cands: &'a [PackType], demand: &'a Demand) -> FillPrices<'a> {
        FillPrices {
            cheapest: ByPrice::new(cands),
            need: &demand.need,
            dims: demand.dims.len(),
            known: Default::default(),
            exact_work: FEW_CLASSES_WORK,
        }
    }

    /// The price of a node holding `fill` (class, count).
    fn of(&mut self, fill: &[(usize, usize)]) -> f64 {
        if let Some(p) = self.known.get(fill) {
            return *p;
        }
        let mut total = vec![0i64; self.dims];
        for &(k, c) in fill {
            for (r, q) in total.iter_mut().zip(&self.need[k]) {
                *r += q * c as i64;
            }
        }
        let p = self.cheapest.holding(&total);
        self.known.insert(fill.to_vec(), p);
        p
    }
}

/// The nodes of a packing, as fills, and their price.
#[derive(Default)]
struct PricedBins {
    cost: f64,
    bins: Vec<Bin>,
}

impl PricedBins {
    /// Puts this packing in `best` when it is cheaper (beyond rounding)
    /// than the one there, or there is none.
    fn keep_if_cheaper(self, best: &mut Option<PricedBins>) {
        if best.as_ref().is_none_or(|b| self.cost < b.cost - 1e-12) {
            *best = Some(self);
        }
    }
}

/// The cheapest of the greedy's packings: from each starting value, up
/// to `rounds` rounds where every class is valued at what its pods paid in
/// the last packing (each node's price shared by value): classes that
/// ended on poor nodes gain weight and are placed earlier and better.
/// With `seeds`, every packing's nodes are added to it.
fn revalued_greedy(
    cands: &[PackType],
    demand: &Demand,
    starts: [Vec<f64>; 2],
    prices: &mut FillPrices,
    rounds: usize,
    mut seeds: Option<&mut Vec<Bin>>,
) -> Option<PricedBins> {
    let mut best: Option<PricedBins> = None;
    let mut initial = InitialFills::new(cands.len());
    for start in starts {
        let mut value = start;
        for _ in 0..rounds {
            if value
                .iter()
                .any(|v| v.is_nan() || *v <= 0.0 || v.is_infinite())
            {
                break;
            }
            let need = &demand.need;
            let left = demand.counts.clone();
            let Some(bins) = pack(cands, need, &demand.per_node, &value, left, &mut initial) else {
                break;
            };
            let paid = Paid::of(&bins, &value, &demand.counts, prices);
            if let Some(seeds) = seeds.as_deref_mut() {
                seeds.extend(bins.iter().cloned());
            }
            PricedBins {
                cost: paid.cost,
                bins,
            }
            .keep_if_cheaper(&mut best);
            if paid.per_pod == value {
                break;
            }
            value = paid.per_pod;
        }
    }
    best
}

/// The greedy's revaluation rounds before the pattern LP of a plan whose
/// LP may spend `work_per_pod` (see `patterns::work_per_pod`): all
/// `ROUNDS` in a small plan, one in a large one, fewer as the LP's work
/// per pod shrinks in between. The LP beats the greedy on
/// every group of several classes the bench's large plans hold, so there
/// the greedy's packings matter as its first columns (each one's nodes,
/// see `candidate_packings`), and three more rounds cost the plan a fifth
/// of its time (`independent`, 10,000 pods).
pub(super) fn rounds_before_lp(work_per_pod: usize) -> usize {
    (work_per_pod.saturating_mul(ROUNDS) / patterns::SMALL_PLAN_MOST).clamp(1, ROUNDS)
}

/// The packings of `demand` worth pricing, the cheapest estimate first:
/// the pattern LP's when it is estimated cheaper, then the cheaper of the
/// greedy's and the exact ones. `None` if some pod fits no candidate.
fn candidate_packings(
    cands: &[PackType],
    demand: &Demand,
    prices: &mut FillPrices,
    work_per_pod: usize,
) -> Option<Vec<PricedBins>> {
    if !patterns::applies(demand, work_per_pod) {
        // One class, or more than the LP takes or its work affords: no LP
        // follows. A family packs its requirement sets apart instead, each
        // with its own LP, where those take most of its pods.
        if let Some(per_set) =
            requirement_sets::packing_per_set(cands, demand, prices, work_per_pod)
        {
            return Some(vec![per_set]);
        }
        let rounds = if demand.counts.len() < 2 {
            ROUNDS
        } else {
            patterns::rest_rounds(work_per_pod)
        };
        return Some(vec![greedy_packing(cands, demand, prices, rounds)?]);
    }
    // Classes of different cpu:memory ratios: the LP over node patterns
    // mixes them where the greedy's fills waste room; it starts from the
    // greedy's nodes (of its cheapest packing, or of every packing when
    // it ran fewer rounds), so its LP costs no more than they do.
    let rounds = rounds_before_lp(work_per_pod);
    let mut seeds = Vec::new();
    let starts = starting_values(cands, demand)?;
    let greedy = if rounds < ROUNDS {
        exact_or_revalued(cands, demand, starts, prices, rounds, Some(&mut seeds))?
    } else {
        let greedy = exact_or_revalued(cands, demand, starts, prices, ROUNDS, None)?;
        seeds.clone_from(&greedy.bins);
        greedy
    };
    let mut out = Vec::with_capacity(2);
    if let Some(lp) = patterns::pattern_packing(cands, demand, prices, &seeds, work_per_pod) {
        if lp.cost < greedy.cost - 1e-12 {
            out.push(lp);
        }
    }
    out.push(greedy);
    Some(out)
}

/// The cheaper of the greedy's packing (in up to `rounds` revaluation
/// rounds, see `revalued_greedy`) and, where it is affordable, the exact
/// one: one class (a Deployment's replicas, typically) by dynamic
/// programming over the pod count, few pods of a few classes over count
/// vectors. `None` if some pod fits no candidate.
fn greedy_packing(
    cands: &[PackType],
    demand: &Demand,
    prices: &mut FillPrices,
    rounds: usize,
) -> Option<PricedBins> {
    let starts = starting_values(cands, demand)?;
    exact_or_revalued(cands, demand, starts, prices, rounds, None)
}

/// [`greedy_packing`] from `starts` in up to `rounds` rounds; with
/// `seeds`, the nodes of every packing it made (the exact one's too) are
/// added to it.
fn exact_or_revalued(
    cands: &[PackType],
    demand: &Demand,
    starts: [Vec<f64>; 2],
    prices: &mut FillPrices,
    rounds: usize,
    mut seeds: Option<&mut Vec<Bin>>,
) -> Option<PricedBins> {
    let mut best = revalued_greedy(cands, demand, starts, prices, rounds, seeds.as_deref_mut());
    if let Some(exact) = exact_packing(cands, demand, prices.exact_work) {
        if let Some(seeds) = seeds {
            seeds.extend(exact.bins.iter().cloned());
        }
        exact.keep_if_cheaper(&mut best);
    }
    best
}

/// What a greedy packing cost, and per class what each of its pods paid.
struct Paid {
    cost: f64,
    per_pod: Vec<f64>,
}

impl Paid {
    /// The cost of `bins` and what their pods paid: each node's price
    /// shared among its pods by `value`, per class over `counts` pods.
    fn of(bins: &[Bin], value: &[f64], counts: &[usize], prices: &mut FillPrices) -> Paid {
        let mut cost = 0.0;
        let mut paid = vec![0.0; counts.len()];
        for b in bins {
            let p = prices.of(&b.fill);
            cost += p;
            let v: f64 = b.fill.iter().map(|&(k, c)| c as f64 * value[k]).sum();
            for &(k, c) in &b.fill {
                paid[k] += p * c as f64 * value[k] / v;
            }
        }
        let per_pod: Vec<f64> = paid
            .iter()
            .zip(counts)
            .map(|(p, n)| p / *n as f64)
            .collect();
        Paid { cost, per_pod }
    }
}

/// The exact packing where it is affordable: one class by the pod count
/// (`single_class`), few pods of few classes by count vectors
/// (`few_classes`).
fn exact_packing(cands: &[PackType], demand: &Demand, work: usize) -> Option<PricedBins> {
    let per_node = &demand.per_node;
    match demand.counts[..] {
        [n] => single_class(cands, &demand.need[0], n.min(per_node[0]), copies).map(|exact| {
            if n <= per_node[0] {
                exact
            } else {
                // One pod per node: n nodes of the cheapest holding one.
                PricedBins {
                    cost: exact.cost * n as f64,
                    bins: vec![Bin { fill: vec![(0, 1)] }; n],
                }
            }
        }),
        _ if !few_classes_affordable_within(cands, &demand.counts, work) => None,
        _ => few_classes(cands, &demand.need, &demand.counts, per_node),
    }
}

/// The greedy leaves its leftovers on the last nodes: merges two of the
/// last `TAIL` nodes into one whenever that is cheaper, best gain first.
fn merge_tail(bins: &mut Vec<Bin>, per_node: &[usize], prices: &mut FillPrices) {
    merge_last(bins, TAIL, per_node, prices);
}

/// Merges two of the last `last` nodes into one whenever that is cheaper,
/// best gain first.
fn merge_last(bins: &mut Vec<Bin>, last: usize, per_node: &[usize], prices: &mut FillPrices) {
    loop {
        let lo = bins.len().saturating_sub(last);
        let mut best: Option<(f64, usize, usize)> = None;
        for i in lo..bins.len() {
            for j in i + 1..bins.len() {
                let m = merged(&bins[i].fill, &bins[j].fill);
                if m.iter().any(|&(k, c)| c > per_node[k]) {
                    continue;
                }
                let gain = prices.of(&bins[i].fill) + prices.of(&bins[j].fill) - prices.of(&m);
                if gain > 1e-9 && best.is_none_or(|(g, _, _)| gain > g) {
                    best = Some((gain, i, j));
                }
            }
        }
        let Some((_, i, j)) = best else { break };
        bins[i].fill = merged(&bins[i].fill, &bins[j].fill);
        bins.remove(j);
    }
}

/// The fill of one node holding fills `a` and `b`, by class.
fn merged(a: &[(usize, usize)], b: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut m: BTreeMap<usize, usize> = a.iter().copied().collect();
    for &(k, c) in b {
        *m.entry(k).or_default() += c;
    }
    m.into_iter().collect()
}

/// The greedy of [`Run::pack_pods`]: nodes chosen one after another by
/// price per value packed; `None` if some pod fits no candidate. A chosen
/// fill is repeated for as long as the counts left allow the same fill of
/// the same type (the other types are compared again when it changes), so
/// the work grows with distinct fills, not with nodes.
fn pack(
    cands: &[PackType],
    need: &[Vec<i64>],
    per_node: &[usize],
    value: &[f64],
    left: Vec<usize>,
    initial: &mut InitialFills,
) -> Option<Vec<Bin>> {
    packed(cands, need, per_node, value, left, initial).map(|(bins, _)| bins)
}

/// [`pack`], and how many fills it computed (its work: see `lazy_ratio`).
fn packed(
    cands: &[PackType],
    need: &[Vec<i64>],
    per_node: &[usize],
    value: &[f64],
    mut left: Vec<usize>,
    initial: &mut InitialFills,
) -> Option<(Vec<Bin>, usize)> {
    let mut filler = Filler::new(cands, need, per_node, value, &left);
    let mut bins: Vec<Bin> = Vec::new();
    let mut scratch = Take::new(need.len());
    let mut chosen = Take::new(need.len());
    let mut filled = Fills {
        last: vec![None; cands.len()],
        order: Vec::with_capacity(cands.len()),
        initial,
        at_start: true,
    };
    while filler.live > 0 {
        let ti = cheapest_fill(
            cands,
            per_node,
            (&left, value),
            &mut filled,
            &mut scratch,
            &mut chosen,
            &mut filler,
        )?;
        filled.at_start = false;
        repeat_fill(ti, &chosen, &mut left, &mut bins, &mut scratch, &mut filler);
    }
    Some((bins, filler.fills))
}

/// Classes from which `pack` walks every class in fill order through one
/// [`ClassIndex`] rather than through a list per candidate: with fewer,
/// walking the list costs less than searching the index.
const INDEXED_CLASSES: usize = 128;

/// Whether `pack` walks the classes through one [`ClassIndex`] and bounds
/// fills by the knapsack (from [`INDEXED_CLASSES`] and
/// [`KNAPSACK_CLASSES`]): only where every candidate has room in every
/// dimension some class needs. A family of several requirement sets (or
/// with constraint dimensions, one per anti-affinity group) holds each
/// class on few of its types: a list per type walks only those, where
/// the index, whose subtrees mix the sets, is searched through all of
/// them, and both it and the knapsack weigh every dimension (a zone
/// spread's 10,000 pods, 250 dimensions: 0.8 s with the lists, 4.6 s
/// with the index).
fn shared_room(cands: &[PackType], sparse: &[Vec<(usize, i64)>]) -> bool {
    let dims = cands.first().map_or(0, |c| c.room.len());
    let mut needed = vec![false; dims];
    for &(d, q) in sparse.iter().flatten() {
        if let Some(n) = needed.get_mut(d) {
            *n |= q > 0;
        }
    }
    (cands.iter()).all(|c| (needed.iter().zip(&c.room)).all(|(&n, &r)| !n || r > 0))
}

/// Classes from which `pack` bounds a node's fill by the knapsack of
/// each dimension ([`FillBound`]), and weighs the types by it: with fewer,
/// the most value per unit ([`ValueBound`]) prunes about as many types
/// for less.
const KNAPSACK_CLASSES: usize = 512;

/// The fills of one `pack`: each node's first-fit-decreasing fill of the
/// pods left (`fill_node`), walking the classes that may fit it.
struct Filler<'a> {
    cands: &'a [PackType],
    sparse: Vec<Vec<(usize, i64)>>,
    per_node: &'a [usize],
    value: &'a [f64],
    walk: Walk,
    room: Vec<i64>,
    /// Classes with pods left.
    live: usize,
    /// The most value a node may hold of the pods left.
    bound: Bound,
    /// Whether pods were taken since `bound` was computed (the per-unit
    /// bound is computed again before it is asked).
    stale: bool,
    need: &'a [Vec<i64>],
    /// Whether a type is weighed by its last fill when that is dearer
    /// than its bound (see `lazy_ratio`).
    lazy: bool,
    /// Whether types are weighed in order of their bound (many classes:
    /// the first fills found set a price per value that the bound of most
    /// others exceeds, so those are not filled).
    sorted: bool,
    /// Fills computed so far.
    fills: usize,
}

/// An upper bound on the value of a node's fill of the pods left.
enum Bound {
    /// Per dimension, the most value per unit of a class left times the
    /// room (few classes: computed again for every node, see `pack`).
    PerUnit(ValueBound),
    /// Per dimension, the fractional knapsack of the classes left (many
    /// classes: few carry the most value per unit).
    Knapsack(FillBound),
    /// Many classes walked per group of candidates ([`Walk::Grouped`]):
    /// per group, the knapsack of the classes left that its types have
    /// room for in the dimensions only some classes need.
    PerGroup(GroupBounds),
}

impl Bound {
    /// The bound for a node of candidate `ti`, of `room`.
    fn of(&self, ti: usize, room: &[i64]) -> f64 {
        match self {
            Bound::PerUnit(b) => b.of(room),
            Bound::Knapsack(b) => b.of(room),
            Bound::PerGroup(b) => b.groups[b.group_of[ti]].knapsack.of(room),
        }
    }
}

/// See [`Bound::PerGroup`]: a type of a group takes only the classes its
/// group's index holds, so the knapsack of those bounds its fill, where
/// one over every class weighs a requirement set's types by the value of
/// pods they cannot hold (a family of five groups: a third of its fills).
struct GroupBounds {
    group_of: Vec<usize>,
    groups: Vec<GroupBound>,
}

/// One group's knapsack, and per class whether the group holds it.
struct GroupBound {
    knapsack: FillBound,
    holds: Vec<bool>,
}

impl GroupBounds {
    /// Per group of `grouped`, the knapsack in the `common` dimensions of
    /// the classes it holds.
    fn new(
        grouped: &Grouped,
        need: &[Vec<i64>],
        value: &[f64],
        per_node: &[usize],
        common: &[usize],
    ) -> GroupBounds {
        let groups = (grouped.held.iter())
            .map(|held| GroupBound {
                knapsack: FillBound::over(need, value, per_node, held, common),
                holds: held.iter().map(|&n| n > 0).collect(),
            })
            .collect();
        GroupBounds {
            group_of: grouped.group_of.clone(),
            groups,
        }
    }

    /// Class `k`'s pods a node may take went from `was` to `now`.
    fn update(&mut self, k: usize, was: usize, now: usize) {
        for g in self.groups.iter_mut().filter(|g| g.holds[k]) {
            g.knapsack.update(k, was, now);
        }
    }
}

/// The classes a fill walks, in order.
enum Walk {
    /// Per candidate, the classes with pods left of which one pod fits its
    /// empty node, ascending: its fills skip the others (a family's types
    /// hold the classes of few of its requirement sets).
    PerType(Vec<Vec<usize>>),
    /// Every class with pods left, found by the room they need (many
    /// classes: pods that each have their own size).
    Indexed(ClassIndex),
    /// Many classes whose room is not shared: per group of candidates with
    /// the same room in the dimensions only some classes need (requirement
    /// sets, anti-affinity groups, accelerators), the classes with pods
    /// left whose needs there the group has room for, found by the room
    /// they need in the dimensions every class needs (see [`Grouped`]).
    Grouped(Grouped),
}

/// See [`Walk::Grouped`]: a walk of a group's index visits, in order,
/// every class of the candidate's list that fits the room in the common
/// dimensions, and the fill's check of every need leaves out the rest, so
/// a fill takes what the walk of its list takes, without visiting each
/// class of the list that no longer fits a node filling up.
struct Grouped {
    group_of: Vec<usize>,
    indices: Vec<ClassIndex>,
    /// Per group, per class, its pods left if the group's types have
    /// room for one in the dimensions only some classes need, else 0.
    held: Vec<Vec<usize>>,
}

impl Grouped {
    fn new(
        cands: &[PackType],
        sparse: &[Vec<(usize, i64)>],
        common: &[usize],
        left: &[usize],
    ) -> Grouped {
        let dims = cands.first().map_or(0, |c| c.room.len());
        let key = |c: &PackType| -> Vec<i64> {
            (0..dims)
                .filter(|d| common.binary_search(d).is_err())
                .map(|d| c.room[d])
                .collect()
        };
        let mut keys: Vec<Vec<i64>> = Vec::new();
        let mut group_of = Vec::with_capacity(cands.len());
        let (mut indices, mut held) = (Vec::new(), Vec::new());
        for c in cands {
            let k = key(c);
            if let Some(g) = keys.iter().position(|known| *known == k) {
                group_of.push(g);
                continue;
            }
            group_of.push(keys.len());
            keys.push(k);
            let eligible: Vec<usize> = (0..left.len())
                .map(|k| {
                    let room_for = |&(d, q): &(usize, i64)| {
                        common.binary_search(&d).is_ok() || c.room.get(d).is_some_and(|&r| r >= q)
                    };
                    if sparse[k].iter().all(room_for) {
                        left[k]
                    } else {
                        0
                    }
                })
                .collect();
            indices.push(ClassIndex::over(sparse, common, &eligible));
            held.push(eligible);
        }
        Grouped {
            group_of,
            indices,
            held,
        }
    }
}

/// The dimensions every class with pods `left` needs some of (the
/// resources every pod requests, typically cpu, memory and pods),
/// ascending.
fn common_dims(sparse: &[Vec<(usize, i64)>], dims: usize, left: &[usize]) -> Vec<usize> {
    let mut needed_by = vec![0usize; dims];
    let live = (0..left.len()).filter(|&k| left[k] > 0);
    let mut classes = 0;
    for k in live {
        classes += 1;
        for &(d, q) in &sparse[k] {
            if let Some(n) = needed_by.get_mut(d).filter(|_| q > 0) {
                *n += 1;
            }
        }
    }
    (0..dims).filter(|&d| needed_by[d] == classes).collect()
}

impl<'a> Filler<'a> {
    fn new(
        cands: &'a [PackType],
        need: &'a [Vec<i64>],
        per_node: &'a [usize],
        value: &'a [f64],
        left: &[usize],
    ) -> Filler<'a> {
        let sparse = sparse_needs(need);
        let shared = shared_room(cands, &sparse);
        let many = need.len() >= INDEXED_CLASSES;
        let lazy = shared && need.len() >= KNAPSACK_CLASSES;
        let grouped = many && !shared;
        let common = if grouped {
            common_dims(&sparse, need.first().map_or(0, Vec::len), left)
        } else {
            Vec::new()
        };
        let walk = if many && shared {
            let dims = need.first().map_or(0, Vec::len);
            Walk::Indexed(ClassIndex::new(&sparse, dims, left))
        } else if grouped {
            Walk::Grouped(Grouped::new(cands, &sparse, &common, left))
        } else {
            Walk::PerType(
                (cands.iter())
                    .map(|c| {
                        (0..left.len())
                            .filter(|&k| {
                                left[k] > 0 && sparse[k].iter().all(|&(d, q)| c.room[d] >= q)
                            })
                            .collect()
                    })
                    .collect(),
            )
        };
        let bound = match &walk {
            _ if lazy => Bound::Knapsack(FillBound::new(need, value, per_node, left)),
            Walk::Grouped(g) => {
                Bound::PerGroup(GroupBounds::new(g, need, value, per_node, &common))
            }
            _ => Bound::PerUnit(ValueBound::new(need, value, left)),
        };
        Filler {
            cands,
            sparse,
            per_node,
            value,
            walk,
            room: Vec::new(),
            live: left.iter().filter(|&&n| n > 0).count(),
            bound,
            stale: false,
            need,
            lazy,
            sorted: lazy || grouped,
            fills: 0,
        }
    }

    /// Candidate `ti`'s fill of the pods `left` into `out`, and its value;
    /// `last`, its last fill, if any (see `fill_node`).
    fn fill(&mut self, ti: usize, left: &[usize], out: &mut Take, last: Option<&Take>) -> f64 {
        self.fills += 1;
        let classes = match &mut self.walk {
            Walk::PerType(live) => {
                let live = &mut live[ti];
                live.retain(|&k| left[k] > 0);
                Classes::Listed(live)
            }
            Walk::Indexed(index) => Classes::Indexed(index),
            Walk::Grouped(g) => Classes::Indexed(&g.indices[g.group_of[ti]]),
        };
        let cap = &self.cands[ti].room;
        let (sparse, per_node, value) = (&self.sparse, self.per_node, self.value);
        fill_node(
            cap,
            sparse,
            per_node,
            value,
            left,
            classes,
            &mut self.room,
            out,
            last,
        )
    }

    /// The per-unit bound computed again if pods were taken since.
    fn refresh_bound(&mut self, left: &[usize]) {
        if std::mem::take(&mut self.stale) {
            self.bound = Bound::PerUnit(ValueBound::new(self.need, self.value, left));
        }
    }

    /// Takes the pods of `fill` from those `left`.
    fn take(&mut self, fill: &Take, left: &mut [usize]) {
        debug_assert!(fill.taken.iter().all(|&k| fill.per_class[k] <= left[k]));
        for &k in &fill.taken {
            let was = left[k];
            left[k] -= fill.per_class[k];
            let most = self.per_node[k];
            match &mut self.bound {
                Bound::Knapsack(bound) if left[k] < most => {
                    bound.update(k, was.min(most), left[k]);
                }
                Bound::PerUnit(bound) if left[k] == 0 => {
                    self.stale |= bound.loses(&self.need[k], self.value[k]);
                }
                Bound::PerGroup(bound) if left[k] < most => {
                    bound.update(k, was.min(most), left[k]);
                }
                Bound::PerUnit(_) => {}
                Bound::Knapsack(_) | Bound::PerGroup(_) => {}
            }
            if left[k] == 0 {
                self.live -= 1;
                match &mut self.walk {
                    Walk::Indexed(index) => index.remove(k),
                    Walk::Grouped(g) => g.indices.iter_mut().for_each(|i| i.remove(k)),
                    Walk::PerType(_) => {}
                }
            }
        }
    }
}

/// The candidate type whose fill of the pods `left` (valued at `value`)
/// costs least per value packed (then the cheaper type), its fill in
/// `chosen`; `None` if no type holds a pod. Fills still holding under the
/// pods left, at most `per_node` per class, are kept in `filled`.
fn cheapest_fill(
    cands: &[PackType],
    per_node: &[usize],
    (left, value): (&[usize], &[f64]),
    filled: &mut Fills,
    scratch: &mut Take,
    chosen: &mut Take,
    filler: &mut Filler,
) -> Option<usize> {
    // A type whose best conceivable fill is dearer per value than the best
    // so far cannot win: its fill is not computed. With the knapsack bound
    // (many classes) the types are weighed by that least price per value,
    // or by the price per value of their last fill in this packing when
    // that is dearer (`lazy_ratio`), so the first one dearer than the best
    // ends the search; with the per-unit bound (few) in their order, the
    // bound asked only once there is a best. Ties go to the cheaper type,
    // then to the first.
    filler.refresh_bound(left);
    let (lazy, sorted) = (filler.lazy, filler.sorted);
    // Under the grouped knapsack the last search's keys stand as lower
    // bounds (see `weigh_types`): each key the search reads is computed
    // again, and the order sorted again after it.
    let kept = sorted && !lazy;
    if sorted {
        weigh_types(cands, filled, filler);
    }
    let mut best: Option<(f64, f64, usize)> = None;
    for i in 0..cands.len() {
        let ti = if sorted { filled.order[i].1 } else { i };
        let c = &cands[ti];
        if let Some((br, _, _)) = best {
            let least = if sorted {
                filled.order[i].0
            } else {
                c.price / filler.bound.of(ti, &c.room)
            };
            if least > br {
                if sorted {
                    break;
                }
                continue;
            }
        }
        let holds = (filled.last[ti].as_ref()).is_some_and(|f| f.take.holds(left, per_node));
        if kept && !holds {
            // Only a type about to be filled again is weighed again: one
            // whose last fill still holds costs nothing to compare, and
            // its key stands as a lower bound (a grouped `--random` plan
            // of 10,000 pods: 1.46 million keys computed → 0.58 million,
            // 145 more fills).
            let least = c.price / filler.bound.of(ti, &c.room);
            filled.order[i].0 = least;
            if best.is_some_and(|(br, _, _)| least > br) {
                continue;
            }
        }
        let slot = &mut filled.last[ti];
        if !holds {
            // Never filled in this packing: another packing's fill at the
            // full counts, while it holds.
            let shared = (filled.initial.take[ti].as_ref())
                .filter(|take| slot.is_none() && take.holds(left, per_node));
            if let Some(take) = shared {
                let val = take.value(value);
                *slot = Some(Filled {
                    val,
                    take: take.clone(),
                });
            } else {
                let val = filler.fill(ti, left, scratch, slot.as_ref().map(|f| &f.take));
                if filled.at_start {
                    filled.initial.take[ti] = Some(scratch.clone());
                }
                match slot {
                    Some(f) => {
                        // The old fill becomes scratch (the next fill
                        // clears what it took).
                        f.val = val;
                        std::mem::swap(&mut f.take, scratch);
                    }
                    None => {
                        *slot = Some(Filled {
                            val,
                            take: scratch.clone(),
                        })
                    }
                }
            }
        }
        let Some(f) = slot.as_ref() else { continue };
        if f.val <= 0.0 {
            continue;
        }
        let ratio = c.price / f.val;
        let better = |(br, bp, bt): (f64, f64, usize)| {
            ratio < br || (ratio == br && (c.price < bp || (c.price == bp && ti < bt)))
        };
        if best.is_none_or(better) {
            best = Some((ratio, c.price, ti));
            chosen.copy_from(&f.take);
        }
    }
    if kept {
        sort_by_least(&mut filled.order);
    }
    best.map(|(_, _, ti)| ti)
}

/// The types in order of their least price per value (with the knapsack
/// bound), or of their last fill's where that is dearer (`lazy_ratio`),
/// into `filled.order`. Under the grouped knapsack (not lazy), once the
/// order is made, its keys stand: the knapsack of the pods left only
/// falls as pods leave a packing, so a type's least price per value only
/// rises, and a key from an earlier node is still at most the type's own.
/// A type whose stale key is dearer than the best so far is dearer
/// itself, and one reached is weighed by its own again (`cheapest_fill`),
/// so only the types the search reaches are weighed for each node.
fn weigh_types(cands: &[PackType], filled: &mut Fills, filler: &Filler) {
    let (order, bound, last) = (&mut filled.order, &filler.bound, &filled.last);
    if !filler.lazy && !order.is_empty() {
        return;
    }
    order.clear();
    order.extend((cands.iter().enumerate()).map(|(ti, c)| {
        let least = c.price / bound.of(ti, &c.room);
        if filler.lazy {
            (least.max(lazy_ratio(c.price, last[ti].as_ref())), ti)
        } else {
            (least, ti)
        }
    }));
    sort_by_least(order);
}

/// Sorts types by key, then by index. The keys are unique (the index
/// breaks ties), so any sort gives this order; the stable one finds the
/// runs of the last node's order that a node's few new keys leave.
fn sort_by_least(order: &mut [(f64, usize)]) {
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
}

/// The price per value of a type's last fill in this packing (infinite
/// if it held no pod; none before its first fill), whether or not it
/// still holds: the lazy greedy's estimate of what its next fill costs.
/// Pods only leave within a packing, and the most value a node of the
/// type can hold of the pods left only falls as they do, so for the best
/// fill that ratio only rises and the last one bounds the next from
/// below (Minoux's accelerated greedy). `fill_node`'s first-fit fill can
/// gain value when a pod it took leaves (a large pod that stranded room
/// makes way for smaller ones), so there the estimate is not a bound: a
/// type whose fill would gain is weighed after the others. That is the
/// price of not filling every type again for every node, which is most
/// of the work when every class is one pod: `unique-sizes`, 10,000 pods,
/// 0.79 -> 0.43 s (whole process, medians), at 1.4% less $/h and 17%
/// fewer NodeClaims (seed 1; seeds 2-3: 0.5% and 0.7% less; see
/// `shared/bench/README.md`).
fn lazy_ratio(price: f64, last: Option<&Filled>) -> f64 {
    match last {
        None => 0.0,
        Some(f) if f.val > 0.0 => price / f.val,
        Some(_) => f64::INFINITY,
    }
}

/// Opens nodes of candidate `ti` with the fill `chosen`, for as long as
/// the pods `left` give the same fill again.
fn repeat_fill(
    ti: usize,
    chosen: &Take,
    left: &mut [usize],
    bins: &mut Vec<Bin>,
    scratch: &mut Take,
    filler: &mut Filler,
) {
    loop {
        bins.push(Bin {
            fill: (chosen.taken.iter())
                .map(|&k| (k, chosen.per_class[k]))
                .collect(),
        });
        filler.take(chosen, left);
        filler.fill(ti, left, scratch, Some(chosen));
        if !scratch.same(chosen) {
            break;
        }
    }
}

/// First-fit-decreasing fill of one node of `cap` with the pods `left` of
/// each class (at most `per_node[k]` of class `k`; `classes` walks, in
/// order, at least every class with pods left that fits the room left):
/// the pods per class in `out`, and their value. `room` is scratch.
///
/// With `last`, a fill of the same node at earlier counts (pods only
/// leave), the walk starts at the first class of `last` that no longer
/// has the pods it took: up to there, the walk meets the same room, so
/// it takes what `last` took and, of the classes `last` did not take,
/// none (they did not fit that room, or had no pods left). A node that
/// took the pods of a class late in the order leaves the others' fills
/// standing up to that class.
#[allow(clippy::too_many_arguments)]
fn fill_node(
    cap: &[i64],
    need: &[Vec<(usize, i64)>],
    per_node: &[usize],
    value: &[f64],
    left: &[usize],
    classes: Classes,
    room: &mut Vec<i64>,
    out: &mut Take,
    last: Option<&Take>,
) -> f64 {
    room.clear();
    room.extend_from_slice(cap);
    let mut val = 0.0;
    out.clear();
    let mut from = 0;
    if let Some(last) = last {
        for &k in &last.taken {
            let take = last.per_class[k];
            if take > left[k].min(per_node[k]) {
                from = k;
                break;
            }
            take_pods(k, take, &need[k], out, room);
            val += take as f64 * value[k];
            from = k + 1;
        }
    }
    let mut visit = |k: usize, room: &mut [i64]| {
        let n = &need[k];
        let limit = i64::try_from(left[k].min(per_node[k])).unwrap_or(i64::MAX);
        let take = sparse_copies_up_to(room, n, limit) as usize;
        if take > 0 {
            take_pods(k, take, n, out, room);
            val += take as f64 * value[k];
        }
    };
    match classes {
        Classes::Listed(list) => {
            let start = list.partition_point(|&k| k < from);
            list[start..].iter().for_each(|&k| visit(k, room));
        }
        Classes::Indexed(index) => index.visit_fitting_from(from, room, &mut visit),
    }
    val
}

/// `fill_node` takes `take` pods of class `k`, needing `need` each, into
/// `out`, from `room`.
#[inline]
fn take_pods(k: usize, take: usize, need: &[(usize, i64)], out: &mut Take, room: &mut [i64]) {
    out.per_class[k] = take;
    out.taken.push(k);
    for &(d, q) in need {
        room[d] -= q * take as i64;
    }
}

/// The classes `fill_node` walks: a list of those with pods left that may
/// fit, or the index of them.
#[derive(Clone, Copy)]
enum Classes<'a> {
    Listed(&'a [usize]),
    Indexed(&'a ClassIndex),
}

/// Each class's non-zero needs as (dimension, need): a family's classes
/// need one of its requirement-set dimensions each, so a node's fill
/// skips the others.
fn sparse_needs(need: &[Vec<i64>]) -> Vec<Vec<(usize, i64)>> {
    (need.iter())
        .map(|n| {
            (n.iter().enumerate())
                .filter(|&(_, &q)| q != 0)
                .map(|(d, &q)| (d, q))
                .collect()
        })
        .collect()
}

/// A type's fill in `pack`: its value and pods per class.
#[derive(Clone)]
struct Filled {
    val: f64,
    take: Take,
}

/// A fill's pods per class, and the classes it takes any of, ascending
/// (a node holds few of a packing's classes: the checks below read
/// those).
#[derive(Clone)]
struct Take {
    per_class: Vec<usize>,
    taken: Vec<usize>,
}

impl Take {
    /// No pods of any of `classes` classes.
    fn new(classes: usize) -> Take {
        Take {
            per_class: vec![0; classes],
            taken: Vec::new(),
        }
    }

    /// Takes no pod.
    fn clear(&mut self) {
        for &k in &self.taken {
            self.per_class[k] = 0;
        }
        self.taken.clear();
    }

    /// Becomes `other` (of as many classes), touching only the classes
    /// either takes.
    fn copy_from(&mut self, other: &Take) {
        self.clear();
        for &k in &other.taken {
            self.per_class[k] = other.per_class[k];
        }
        self.taken.extend_from_slice(&other.taken);
    }

    /// Whether it takes what `other` takes.
    fn same(&self, other: &Take) -> bool {
        self.taken == other.taken
            && (self.taken.iter()).all(|&k| self.per_class[k] == other.per_class[k])
    }

    /// Whether this fill is the fill under the caps of the pods `left`
    /// (per class, at most `per_node`), when it was the fill under caps at
    /// least as large (caps only fall within a packing). A class takes its
    /// cap or what fits in the room the classes before it left: while
    /// those takes stand, the same under any cap still at least its take
    /// (one that took its old cap keeps it only if the cap stands).
    fn holds(&self, left: &[usize], per_node: &[usize]) -> bool {
        (self.taken.iter()).all(|&k| self.per_class[k] <= left[k].min(per_node[k]))
    }

    /// The fill's value, summed as `fill_node` sums it.
    fn value(&self, value: &[f64]) -> f64 {
        let mut val = 0.0;
        for &k in &self.taken {
            val += self.per_class[k] as f64 * value[k];
        }
        val
    }
}

/// Each candidate's fill in one `pack`: the last it computed (`Filled`,
/// kept while it holds), the packing's first step, and the fills at the
/// full counts that every packing of the same pods shares.
struct Fills<'a> {
    last: Vec<Option<Filled>>,
    /// Scratch: the types by their least price per value (or their last
    /// fill's, see `lazy_ratio`), when
    /// `cheapest_fill` weighs them in that order (the knapsack bound).
    order: Vec<(f64, usize)>,
    initial: &'a mut InitialFills,
    at_start: bool,
}

/// Per candidate, its fill of the full counts, once some packing of
/// `revalued_greedy` computed it: the packings differ in their values
/// only, and a fill does not depend on them (`fill_node` takes classes in
/// a fixed order), only its value does (`Take::value`).
struct InitialFills {
    take: Vec<Option<Take>>,
}

impl InitialFills {
    fn new(cands: usize) -> InitialFills {
        InitialFills {
            take: vec![None; cands],
        }
    }
}

/// An upper bound on the value a node can hold of the pods left (see
/// `pack`): per dimension every class left needs, the node's room times
/// the most value a unit of it carries (the LP relaxation of the fill).
struct ValueBound {
    /// The dimensions that bound: each with the most value per unit over
    /// the classes left (a dimension one of them needs none of bounds
    /// nothing and is left out), ascending.
    per_unit: Vec<UnitValue>,
    /// Per dimension, how many classes left need none of it.
    needing_none: Vec<usize>,
}

/// The most value per unit of one dimension (see [`ValueBound`]).
struct UnitValue {
    dim: usize,
    most: f64,
}

impl ValueBound {
    fn new(need: &[Vec<i64>], value: &[f64], left: &[usize]) -> ValueBound {
        let dims = need.first().map_or(0, Vec::len);
        let mut needing_none = vec![0; dims];
        let mut most = vec![0.0f64; dims];
        for (k, n) in need.iter().enumerate().filter(|(k, _)| left[*k] > 0) {
            for (dim, (none, most)) in needing_none.iter_mut().zip(&mut most).enumerate() {
                let q = n.get(dim).copied().unwrap_or(0);
                if q <= 0 {
                    *none += 1;
                } else if *none == 0 {
                    *most = most.max(value[k] / q as f64);
                }
            }
        }
        let per_unit = (0..dims)
            .filter(|&dim| needing_none[dim] == 0)
            .map(|dim| UnitValue {
                dim,
                most: most[dim],
            })
            .collect();
        ValueBound {
            per_unit,
            needing_none,
        }
    }

    /// Whether the bound may change now that a class of `need` and
    /// `value` has no pods left: it held a dimension's most value per
    /// unit, or was the last class left needing none of one. Otherwise
    /// the bound over the classes left is the one it was.
    fn loses(&mut self, need: &[i64], value: f64) -> bool {
        let mut changes = false;
        for (none, &q) in self.needing_none.iter_mut().zip(need) {
            if q <= 0 {
                *none = none.saturating_sub(1);
                changes |= *none == 0;
            }
        }
        changes
            || (self.per_unit.iter()).any(|u| {
                let q = need.get(u.dim).copied().unwrap_or(0);
                q > 0 && value / q as f64 >= u.most
            })
    }

    /// The bound for a node of `room`, with a little slack for rounding
    /// (infinite: no bound).
    fn of(&self, room: &[i64]) -> f64 {
        let bound = (self.per_unit.iter())
            .filter_map(|u| room.get(u.dim).map(|&r| r.max(0) as f64 * u.most))
            .fold(f64::INFINITY, f64::min);
        bound * (1.0 + 1e-9)
    }
}

/// The cheapest packing of `n` pods of one class onto `cands`, exactly:
/// `best[m]` is the least price of nodes holding `m` pods, built from
/// `best[m - k] + price` over every type holding `k ≤ m` more (a node of a
/// type that holds more than the `m` left is priced whole). `None` when no
/// type holds a pod or the table would be too large (see
/// `SINGLE_CLASS_WORK`).
fn single_class(
    cands: &[PackType],
    need: &[i64],
    n: usize,
    fits: impl Fn(&[i64], &[i64]) -> i64,
) -> Option<PricedBins> {
    // Per distinct capacity in pods, the cheapest type.
    let mut per: BTreeMap<usize, f64> = BTreeMap::new();
    for c in cands {
        let k = fits(&c.room, need).clamp(0, n as i64) as usize;
        if k > 0 {
            let e = per.entry(k).or_insert(c.price);
            *e = e.min(c.price);
        }
    }
    // A type that holds more pods for no more money beats every smaller one.
    let mut options: Vec<(usize, f64)> = Vec::new();
    for (&k, &price) in per.iter().rev() {
        if options.last().is_none_or(|&(_, p)| price < p) {
            options.push((k, price));
        }
    }
    if options.is_empty() || n.saturating_mul(options.len()) > SINGLE_CLASS_WORK {
        return None;
    }
    let mut best = vec![0.0f64; n + 1];
    let mut step = vec![0usize; n + 1];
    for m in 1..=n {
        let mut b = f64::INFINITY;
        let mut take = 0;
        for &(k, price) in &options {
            let k = k.min(m);
            let c = best[m - k] + price;
            if c < b - 1e-12 {
                b = c;
                take = k;
            }
        }
        best[m] = b;
        step[m] = take;
    }
    let mut bins = Vec::new();
    let mut m = n;
    while m > 0 {
        let k = step[m];
        if k == 0 {
            return None;
        }
        bins.push(Bin { fill: vec![(0, k)] });
        m -= k;
    }
    // Fullest nodes first, as the greedy orders them.
    bins.sort_by(|a, b| b.fill[0].1.cmp(&a.fill[0].1));
    Some(PricedBins {
        cost: best[n],
        bins,
    })
}

/// Vectors of pods per class (`0..=counts[c]` of class `c`), numbered in
/// mixed radix: index = Σ v[c] · stride[c].
pub(super) struct CountTable {
    counts: Vec<usize>,
    pub(super) stride: Vec<usize>,
    pub(super) states: usize,
}

impl CountTable {
    /// `None` when the number of vectors overflows.
    pub(super) fn new(counts: &[usize]) -> Option<CountTable> {
        let mut stride = Vec::with_capacity(counts.len());
        let mut states: usize = 1;
        for &n in counts {
            stride.push(states);
            states = states.checked_mul(n + 1)?;
        }
        Some(CountTable {
            counts: counts.to_vec(),
            stride,
            states,
        })
    }

    /// The vector of index `i`.
    pub(super) fn decode(&self, mut i: usize, out: &mut [usize]) {
        for (o, n) in out.iter_mut().zip(&self.counts) {
            *o = i % (n + 1);
            i /= n + 1;
        }
    }

    /// Per vector, the price of one node holding it: the cheapest of
    /// `cands` that does (pods of class `c` needing `need[c]`, at most
    /// `per_node[c]` of them); infinite when none does.
    pub(super) fn node_prices(
        &self,
        cands: &[PackType],
        need: &[Vec<i64>],
        per_node: &[usize],
    ) -> Vec<f64> {
        let dims = need.first().map_or(0, Vec::len);
        let mut cheapest = ByPrice::new(cands);
        let mut out = vec![f64::INFINITY; self.states];
        let mut v = vec![0usize; self.counts.len()];
        let mut total = vec![0i64; dims];
        for (i, slot) in out.iter_mut().enumerate().skip(1) {
            self.decode(i, &mut v);
            if v.iter().zip(per_node).any(|(n, most)| n > most) {
                continue;
            }
            total.iter_mut().for_each(|t| *t = 0);
            for (c, &n) in v.iter().enumerate() {
                for (t, q) in total.iter_mut().zip(&need[c]) {
                    *t += q * n as i64;
                }
            }
            *slot = cheapest.holding(&total);
        }
        out
    }
}

/// Candidates by price, for the cheapest one holding a total.
pub(super) struct ByPrice<'a> {
    cands: &'a [PackType],
    /// Ascending price; a candidate with no room in some dimension holds
    /// nothing, not even an empty total, and is left out.
    order: Vec<usize>,
    /// Scratch: the total's non-zero dimensions.
    needed: Vec<(usize, i64)>,
}

impl<'a> ByPrice<'a> {
    pub(super) fn new(cands: &'a [PackType]) -> ByPrice<'a> {
        let mut order: Vec<usize> = (0..cands.len())
            .filter(|&i| cands[i].room.iter().all(|&r| r >= 0))
            .collect();
        order.sort_by(|&a, &b| cands[a].price.total_cmp(&cands[b].price));
        ByPrice {
            cands,
            order,
            needed: Vec::new(),
        }
    }

    /// The price of the cheapest candidate with room for `total` (no
    /// negative entries) in every dimension; infinite when none has. The
    /// first holding one by price: a fill's total needs few of a family's
    /// dimensions.
    pub(super) fn holding(&mut self, total: &[i64]) -> f64 {
        self.needed.clear();
        (self.needed).extend(
            total
                .iter()
                .enumerate()
                .filter(|(_, &q)| q != 0)
                .map(|(d, &q)| (d, q)),
        );
        let needed = &self.needed;
        (self.order.iter())
            .map(|&i| &self.cands[i])
            .find(|c| {
                needed
                    .iter()
                    .all(|&(d, q)| c.room.get(d).is_none_or(|&r| r >= q))
            })
            .map_or(f64::INFINITY, |c| c.price)
    }
}

/// The cheapest packing of `counts[c]` pods of each class `c` onto
/// `cands`, exactly, when the table is small (see `FEW_CLASSES_WORK`):
/// `best[v]`, for every vector `v` of pods left per class, is the least
/// price of nodes holding them, over the node holding the first class left
/// (any content `u <= v` with `u` of that class, priced as the cheapest type
/// that holds `u`) plus `best[v - u]`.
fn few_classes(
    cands: &[PackType],
    need: &[Vec<i64>],
    counts: &[usize],
    per_node: &[usize],
) -> Option<PricedBins> {
    if !few_classes_affordable(cands, counts) {
        return None;
    }
    let table = CountTable::new(counts)?;
    let node_price = table.node_prices(cands, need, per_node);
    let monotone = need.iter().flatten().all(|&q| q >= 0);
    let covers = CoverTable::first_class_covers(&table, &node_price, monotone);
    let all = table.states - 1;
    if !covers.best[all].is_finite() {
        return None;
    }
    let bins = covers.bins(&table, all)?;
    Some(PricedBins {
        cost: covers.best[all],
        bins,
    })
}

/// Whether the few-class table is within `FEW_CLASSES_WORK`: its pairs
/// `u <= v` (the product of (n + 1)(n + 2) / 2), and its vectors priced on
/// every candidate; false when they overflow.
fn few_classes_affordable(cands: &[PackType], counts: &[usize]) -> bool {
    few_classes_affordable_within(cands, counts, FEW_CLASSES_WORK)
}

/// [`few_classes_affordable`] within `most` instead of `FEW_CLASSES_WORK`.
fn few_classes_affordable_within(cands: &[PackType], counts: &[usize], most: usize) -> bool {
    let mut work: usize = 1;
    let mut states: usize = 1;
    for &n in counts {
        let (Some(w), Some(s)) = (
            work.checked_mul((n + 1) * (n + 2) / 2),
            states.checked_mul(n + 1),
        ) else {
            return false;
        };
        (work, states) = (w, s);
    }
    work <= most && states.saturating_mul(cands.len()) <= most.saturating_mul(4)
}

/// Per vector of pods left per class (indices of a [`CountTable`]): the
/// least price of nodes holding them (`best`) and the content, as an index,
/// of the node the cover starts with (`choice`, 0 for none).
#[derive(Default)]
pub(super) struct CoverTable {
    pub(super) best: Vec<f64>,
    pub(super) choice: Vec<usize>,
}

impl CoverTable {
    /// Nothing covered yet but the empty vector (free).
    pub(super) fn new(states: usize) -> CoverTable {
        let mut best = vec![f64::INFINITY; states];
        best[0] = 0.0;
        CoverTable {
            best,
            choice: vec![0usize; states],
        }
    }

    /// The covers of every vector of `table` by nodes priced
    /// `node_price[u]`, each next node holding the first class left.
    /// With `monotone` (no node holding `u` holds more of the first class
    /// when none holds `u`: the classes' needs are not negative), a node
    /// no type holds ends the walk over more of the first class.
    fn first_class_covers(table: &CountTable, node_price: &[f64], monotone: bool) -> CoverTable {
        let k = table.stride.len();
        let mut covers = CoverTable::new(table.states);
        let mut v = vec![0usize; k];
        let mut u = vec![0usize; k];
        for i in 1..table.states {
            table.decode(i, &mut v);
            let Some(first) = v.iter().position(|&n| n > 0) else {
                continue;
            };
            // Every u <= v with u[first] >= 1 (odometer over the classes,
            // `ui` the index of `u`).
            u.iter_mut().for_each(|x| *x = 0);
            u[first] = 1;
            let mut ui = table.stride[first];
            loop {
                let p = node_price[ui];
                if p.is_finite() {
                    covers.offer(i, ui, p);
                } else if monotone {
                    ui += (v[first] - u[first]) * table.stride[first];
                    u[first] = v[first];
                }
                if !next_holding_first(&mut u, &mut ui, (&v, &table.stride), first) {
                    break;
                }
            }
        }
        covers
    }

    /// Takes node `ui` at `price` for vector `i` when it covers `i` for
    /// less (beyond rounding) than the best so far.
    pub(super) fn offer(&mut self, i: usize, ui: usize, price: f64) {
        let c = price + self.best[i - ui];
        if c < self.best[i] - 1e-12 {
            self.best[i] = c;
            self.choice[i] = ui;
        }
    }

    /// The nodes of the cover of vector `all`, in choice order; `None` if
    /// the choices do not reach the empty vector.
    fn bins(&self, table: &CountTable, all: usize) -> Option<Vec<Bin>> {
        let mut u = vec![0usize; table.stride.len()];
        let mut bins = Vec::new();
        let mut i = all;
        while i > 0 {
            let ui = self.choice[i];
            if ui == 0 {
                return None;
            }
            table.decode(ui, &mut u);
            bins.push(Bin::of_counts(&u));
            i -= ui;
        }
        Some(bins)
    }
}

/// Advances `u` (of index `ui` by `stride`) to the next vector `u <= v`
/// with `u[first] >= 1` (odometer over the classes); false when there is
/// none.
fn next_holding_first(
    u: &mut [usize],
    ui: &mut usize,
    (v, stride): (&[usize], &[usize]),
    first: usize,
) -> bool {
    for (c, ((x, &most), &step)) in u.iter_mut().zip(v).zip(stride).enumerate() {
        if *x < most {
            *x += 1;
            *ui += step;
            return true;
        }
        let reset = usize::from(c == first);
        *ui -= (*x - reset) * step;
        *x = reset;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(ty: usize, price: f64, room: &[i64]) -> PackType {
        PackType {
            ty,
            price,
            room: room.to_vec(),
        }
    }

    use super::copies as fits;

    /// A search's estimate (`ESTIMATE_EXACT_WORK`) packs exactly up to
    /// eleven single-pod classes, a plan's packing (`FEW_CLASSES_WORK`) up
    /// to thirteen; past either, the greedy's packing stands alone.
    #[test]
    fn the_exact_few_class_packing_keeps_to_its_work() {
        let cands = [pt(0, 1.0, &[4_000, 8_192]), pt(1, 1.9, &[8_000, 16_384])];
        for (classes, work, exact) in [
            (11, ESTIMATE_EXACT_WORK, true),
            (12, ESTIMATE_EXACT_WORK, false),
            (12, FEW_CLASSES_WORK, true),
            (13, FEW_CLASSES_WORK, true),
            (14, FEW_CLASSES_WORK, false),
        ] {
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|k| vec![100 + 50 * k as i64, 256 + 64 * k as i64])
                .collect();
            let demand = cpu_memory_demand(need, vec![1; classes]);
            let packed = exact_packing(&cands, &demand, work);
            assert_eq!(packed.is_some(), exact, "{classes} classes within {work}");
            if let Some(p) = packed {
                let pods: usize = p.bins.iter().flat_map(|b| &b.fill).map(|f| f.1).sum();
                assert_eq!(pods, classes);
            }
        }
    }

    /// Pod classes asking cpu and memory (millis, MiB) only, any number
    /// per node: `need[k]` for `counts[k]` pods.
    fn cpu_memory_demand(need: Vec<Vec<i64>>, counts: Vec<usize>) -> Demand {
        Demand {
            dims: vec!["cpu".into(), "memory".into()],
            resources: 2,
            per_node: vec![usize::MAX; counts.len()],
            need,
            counts,
            per_node_room: vec![],
        }
    }

    /// Which preferred pod anti-affinity the repack keeps when it moves a
    /// pod: terms on the hostname selecting the pod itself.
    #[test]
    fn only_a_preference_to_run_apart_from_its_own_kind_on_the_hostname_moves() {
        use crate::model::{LabelSelector, Pod, PodTemplate, WeightedPodAffinityTerm};
        let term = |key: &str, app: &str| WeightedPodAffinityTerm {
            weight: 1,
            term: PodAffinityTerm {
                label_selector: LabelSelector {
                    match_labels: [("app".to_string(), app.to_string())].into(),
                    ..LabelSelector::default()
                },
                namespaces: vec![],
                all_namespaces: false,
                topology_key: key.into(),
            },
        };
        // (preferred terms, the pod's app is `web`, moves)
        let cases = [
            (vec![], true),
            (vec![term(labels::HOSTNAME, "web")], true),
            (
                vec![term(labels::HOSTNAME, "web"), term(labels::HOSTNAME, "web")],
                true,
            ),
            (vec![term(labels::ZONE, "web")], false),
            (vec![term(labels::HOSTNAME, "db")], false),
            (
                vec![term(labels::HOSTNAME, "web"), term(labels::HOSTNAME, "db")],
                false,
            ),
        ];
        for (i, (terms, moves)) in cases.into_iter().enumerate() {
            let pod = Pod {
                template: std::sync::Arc::new(PodTemplate {
                    namespace: "default".into(),
                    labels: [("app".to_string(), "web".to_string())].into(),
                    preferred_pod_anti_affinity: terms,
                    ..PodTemplate::default()
                }),
                ..Pod::default()
            };
            assert_eq!(self_apart_preference_only(&pod), moves, "case {i}");
        }
    }

    /// A packing of more classes than its LP affords (80 classes of three
    /// pods in a plan of 10,000 pods) is the greedy's alone, in two rounds,
    /// so never dearer than its one round before the LP.
    #[test]
    fn a_packing_the_lp_cannot_afford_gets_the_greedys_rounds() {
        let mut next = crate::scheduler::test_draws(4);
        let cands = vec![
            pt(0, 1.0, &[2000, 4096]),
            pt(1, 1.7, &[4000, 8192]),
            pt(2, 1.2, &[2000, 16384]),
            pt(3, 2.1, &[8000, 16384]),
        ];
        let need = (0..80)
            .map(|_| vec![50 * (1 + next(30) as i64), 64 * (1 + next(60) as i64)])
            .collect();
        let demand = cpu_memory_demand(need, vec![3; 80]);
        let work = patterns::work_per_pod(10_000);
        assert!(!patterns::applies(&demand, work));
        let mut prices = FillPrices::new(&cands, &demand);
        let packings = candidate_packings(&cands, &demand, &mut prices, work).unwrap();
        let two = greedy_packing(&cands, &demand, &mut prices, 2).unwrap();
        let one = greedy_packing(&cands, &demand, &mut prices, 1).unwrap();
        assert_eq!(packings.len(), 1);
        assert_eq!(packings[0].cost, two.cost);
        assert!(two.cost < one.cost, "{} vs {}", two.cost, one.cost);
    }

    /// Three Deployments on one node type (6 cpu, 24 GiB, $6), in the
    /// order the repack sorts them (most cpu first): 12 pods of (2, 2 GiB),
    /// 35 of (1, 0.5 GiB), 32 of (750m, 5.5 GiB). The cpu alone needs 14
    /// nodes ($84). The greedy takes 18 ($108); the pattern LP mixes the
    /// memory-heavy pods with the cpu-heavy ones onto 16 ($96), and the
    /// repack keeps it.
    #[test]
    fn the_cheapest_packing_mixes_shapes_the_greedy_packs_apart() {
        let cands = vec![pt(0, 6.0, &[6000, 24000])];
        let demand = cpu_memory_demand(
            vec![vec![2000, 2048], vec![1000, 512], vec![750, 5632]],
            vec![12, 35, 32],
        );
        let mut prices = FillPrices::new(&cands, &demand);
        let greedy = greedy_packing(&cands, &demand, &mut prices, ROUNDS).unwrap();
        let packings =
            candidate_packings(&cands, &demand, &mut prices, patterns::WORK_PER_POD).unwrap();
        let best = &packings[0];
        assert!(greedy.cost > 96.0 + 1e-9, "premise: greedy {}", greedy.cost);
        assert!(best.cost <= 96.0 + 1e-9, "{} nodes", best.bins.len());
        assert!(best.cost >= 84.0 - 1e-9);
        let mut placed = [0; 3];
        for b in &best.bins {
            for &(k, c) in &b.fill {
                placed[k] += c;
            }
        }
        assert_eq!(placed, [12, 35, 32]);
    }

    /// `undominated` keeps exactly the candidates no candidate before them
    /// (by price, then larger rooms first, then index) is at least as
    /// cheap and as roomy as in every dimension, on random candidates with
    /// many zero rooms (as a family's requirement-set dimensions have).
    #[test]
    fn undominated_keeps_exactly_the_undominated_candidates() {
        let mut next = crate::scheduler::test_draws(11);
        for case in 0..300 {
            let dims = 1 + next(8) as usize;
            let n = 1 + next(40) as usize;
            let cands: Vec<PackType> = (0..n)
                .map(|i| {
                    let room: Vec<i64> = (0..dims)
                        .map(|_| if next(3) == 0 { 0 } else { next(5) as i64 })
                        .collect();
                    pt(i, next(4) as f64, &room)
                })
                .collect();
            let size = |c: &PackType| c.room.iter().sum::<i64>();
            let before =
                |b: &PackType, a: &PackType| (b.price, -size(b), b.ty) < (a.price, -size(a), a.ty);
            let expected: Vec<usize> = (cands.iter())
                .filter(|a| {
                    !cands.iter().any(|b| {
                        before(b, a)
                            && b.price <= a.price
                            && b.room.iter().zip(&a.room).all(|(x, y)| x >= y)
                    })
                })
                .map(|c| c.ty)
                .collect();
            let kept: Vec<usize> = undominated(cands.clone()).iter().map(|c| c.ty).collect();
            assert_eq!(kept, expected, "case {case}");
        }
    }

    #[test]
    fn the_greedy_runs_fewer_rounds_before_the_lp_as_plans_grow() {
        // (pending pods in the plan, greedy rounds before the LP)
        for (plan_pods, rounds) in [
            (1, ROUNDS),
            (500, ROUNDS),
            (2_000, ROUNDS),
            (2_700, 2),
            (5_000, 1),
            (10_000, 1),
            (1_000_000, 1),
        ] {
            let work = patterns::work_per_pod(plan_pods);
            assert_eq!(rounds_before_lp(work), rounds, "{plan_pods} pods");
        }
    }

    #[test]
    fn a_large_plans_packings_place_every_pod_cheapest_first() {
        // Three shapes no one type suits: the LP mixes them.
        let cands = vec![
            pt(0, 1.0, &[2000, 4096]),
            pt(1, 1.7, &[4000, 8192]),
            pt(2, 1.2, &[2000, 16384]),
        ];
        let demand = cpu_memory_demand(
            vec![vec![1500, 1024], vec![250, 6144], vec![500, 512]],
            vec![40, 25, 60],
        );
        let mut prices = FillPrices::new(&cands, &demand);
        let packings =
            candidate_packings(&cands, &demand, &mut prices, patterns::WORK_PER_POD).unwrap();
        assert!(
            packings.windows(2).all(|w| w[0].cost < w[1].cost),
            "cheapest first"
        );
        for p in &packings {
            let mut placed = [0; 3];
            let mut cost = 0.0;
            for b in &p.bins {
                for &(k, c) in &b.fill {
                    placed[k] += c;
                }
                cost += prices.of(&b.fill);
            }
            assert_eq!(placed, [40, 25, 60]);
            assert!((cost - p.cost).abs() < 1e-9, "{cost} vs {}", p.cost);
        }
    }

    #[test]
    fn copies_up_to_is_copies_capped_at_the_limit() {
        let mut next = seeded(7);
        for case in 0..5000 {
            let dims = 1 + next(4) as usize;
            let cap: Vec<i64> = (0..dims).map(|_| next(200) - 20).collect();
            let need: Vec<i64> = (0..dims).map(|_| next(12)).collect();
            let limit = match case % 3 {
                0 => i64::MAX,
                1 => next(50),
                _ => next(5) - 2,
            };
            let expected = fits(&cap, &need).min(limit).max(0);
            assert_eq!(
                copies_up_to(&cap, &need, limit),
                expected,
                "case {case}: {cap:?} {need:?} {limit}"
            );
            let sparse = &super::sparse_needs(std::slice::from_ref(&need))[0];
            assert_eq!(
                super::sparse_copies_up_to(&cap, sparse, limit),
                expected,
                "case {case} (sparse): {cap:?} {need:?} {limit}"
            );
        }
    }

    /// `pack` as it was before it remembered fills and bounded values:
    /// every type's fill (`fill_node`) computed afresh for every node.
    fn pack_afresh(
        cands: &[PackType],
        need: &[Vec<i64>],
        per_node: &[usize],
        value: &[f64],
        mut left: Vec<usize>,
    ) -> Option<Vec<Vec<(usize, usize)>>> {
        let sparse = sparse_needs(need);
        let fill = |cap: &[i64], left: &[usize]| -> (f64, Vec<usize>) {
            let (mut room, mut out) = (vec![], super::Take::new(left.len()));
            let live: Vec<usize> = (0..left.len()).filter(|&k| left[k] > 0).collect();
            let classes = super::Classes::Listed(&live);
            let val = fill_node(
                cap, &sparse, per_node, value, left, classes, &mut room, &mut out, None,
            );
            (val, out.per_class)
        };
        let mut bins = vec![];
        while left.iter().any(|&n| n > 0) {
            let mut best: Option<(f64, f64, usize, Vec<usize>)> = None;
            for (ti, c) in cands.iter().enumerate() {
                let (val, take) = fill(&c.room, &left);
                if val <= 0.0 {
                    continue;
                }
                let ratio = c.price / val;
                if best
                    .as_ref()
                    .is_none_or(|(br, bp, ..)| ratio < *br || (ratio == *br && c.price < *bp))
                {
                    best = Some((ratio, c.price, ti, take));
                }
            }
            let (_, _, ti, mut take) = best?;
            // The same fill again while it stands.
            loop {
                for (k, &c) in take.iter().enumerate() {
                    left[k] -= c;
                }
                bins.push(Bin::of_counts(&take).fill);
                let again = fill(&cands[ti].room, &left).1;
                if again != take {
                    break;
                }
                take = again;
            }
        }
        Some(bins)
    }

    /// Remembered fills, the fills at the full counts shared by packings
    /// of other values, and the value bound change no packing: seeded
    /// random types, classes, caps and three value vectors per case
    /// against `pack_afresh` (below `KNAPSACK_CLASSES`: from there the
    /// types are weighed lazily, tests below).
    #[test]
    fn pack_remembers_fills_exactly() {
        let mut next = seeded(5);
        for case in 0..300 {
            let dims = 1 + next(3) as usize;
            // Every third case has enough classes to walk them indexed,
            // and room in every dimension on every type.
            let indexed = case % 3 == 0;
            let cands: Vec<PackType> = (0..1 + next(12) as usize)
                .map(|t| {
                    let room: Vec<i64> = (0..dims).map(|_| next(40) + i64::from(indexed)).collect();
                    pt(t, 0.1 + next(100) as f64 / 10.0, &room)
                })
                .collect();
            let classes = if indexed {
                INDEXED_CLASSES + next(40) as usize
            } else {
                1 + next(5) as usize
            };
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| (0..dims).map(|_| next(6)).collect())
                .collect();
            let per_node: Vec<usize> = (0..classes).map(|_| 1 + next(8) as usize).collect();
            let left: Vec<usize> = (0..classes).map(|_| next(30) as usize).collect();
            let mut initial = InitialFills::new(cands.len());
            for round in 0..3 {
                let value: Vec<f64> = (0..classes).map(|_| 0.1 + next(50) as f64 / 7.0).collect();
                let got = pack(&cands, &need, &per_node, &value, left.clone(), &mut initial)
                    .map(|bins| bins.into_iter().map(|b| b.fill).collect::<Vec<_>>());
                let want = pack_afresh(&cands, &need, &per_node, &value, left.clone());
                assert_eq!(got, want, "case {case} round {round}");
            }
        }
    }

    /// A seeded generator of draws below `n` (a 64-bit LCG's high bits).
    fn seeded(mut seed: u64) -> impl FnMut(u64) -> i64 {
        move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % n) as i64
        }
    }

    /// From `KNAPSACK_CLASSES` a type is weighed by its last fill's price
    /// per value (`lazy_ratio`): where a fill's value only falls as pods
    /// leave (pods of one size and value: a fill holds as many as fit),
    /// the packing is the one that fills every type for every node.
    #[test]
    fn the_lazy_greedy_is_exact_where_fills_only_lose_value() {
        let mut next = seeded(11);
        for case in 0..40 {
            let classes = KNAPSACK_CLASSES + next(64) as usize;
            let size = 1 + next(3);
            let cands: Vec<PackType> = (0..2 + next(10) as usize)
                .map(|t| pt(t, 0.1 + next(100) as f64 / 10.0, &[size * (1 + next(60))]))
                .collect();
            let need = vec![vec![size]; classes];
            let per_node = vec![usize::MAX; classes];
            let value = vec![1.0; classes];
            let left: Vec<usize> = (0..classes).map(|_| next(4) as usize).collect();
            let mut initial = InitialFills::new(cands.len());
            let filler = Filler::new(&cands, &need, &per_node, &value, &left);
            assert!(matches!(filler.bound, Bound::Knapsack(_)), "case {case}");
            let got = pack(&cands, &need, &per_node, &value, left.clone(), &mut initial)
                .map(|bins| bins.into_iter().map(|b| b.fill).collect::<Vec<_>>());
            let want = pack_afresh(&cands, &need, &per_node, &value, left);
            assert_eq!(got, want, "case {case}");
        }
    }

    /// Weighed lazily, a packing still places every pod once, each node's
    /// fill fitting a candidate within the caps per node: seeded random
    /// cases of two dimensions and pods of their own sizes.
    #[test]
    fn a_lazily_weighed_packing_places_every_pod_once_on_a_fitting_node() {
        let mut next = seeded(17);
        for case in 0..20 {
            let classes = KNAPSACK_CLASSES + next(300) as usize;
            let cands: Vec<PackType> = (0..2 + next(20) as usize)
                .map(|t| {
                    pt(
                        t,
                        0.1 + next(100) as f64 / 10.0,
                        &[40 + next(400), 40 + next(400)],
                    )
                })
                .collect();
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| vec![1 + next(40), 1 + next(40)])
                .collect();
            let per_node: Vec<usize> = (0..classes).map(|_| 1 + next(3) as usize).collect();
            let value: Vec<f64> = (0..classes).map(|_| 0.1 + next(50) as f64 / 7.0).collect();
            let left: Vec<usize> = (0..classes).map(|_| next(3) as usize).collect();
            let mut initial = InitialFills::new(cands.len());
            let bins = pack(&cands, &need, &per_node, &value, left.clone(), &mut initial);
            let bins = bins.unwrap_or_else(|| panic!("case {case}: a pod placed nowhere"));
            let mut placed = vec![0; classes];
            for b in &bins {
                let mut total = [0i64; 2];
                for &(k, c) in &b.fill {
                    assert!(c <= per_node[k], "case {case}: {:?}", b.fill);
                    placed[k] += c;
                    for (t, q) in total.iter_mut().zip(&need[k]) {
                        *t += q * c as i64;
                    }
                }
                let fits = |c: &PackType| c.room.iter().zip(&total).all(|(r, t)| r >= t);
                assert!(cands.iter().any(fits), "case {case}: {total:?}");
            }
            assert_eq!(placed, left, "case {case}");
        }
    }

    /// The lazy greedy's point: with pods of their own sizes (from
    /// `KNAPSACK_CLASSES`), a type whose last fill was dearer per value
    /// than the best is not filled again, so a packing computes about two
    /// fills per node (the winner's and the next in line), where filling
    /// every type the bound admits took 2-10 per node on these cases (6 on
    /// the whole: 4,637 fills for 738 nodes, against 1,552 for 746).
    #[test]
    fn the_lazy_greedy_fills_few_types_per_node() {
        let mut next = seeded(23);
        let (mut fills, mut nodes) = (0, 0);
        for case in 0..8 {
            let classes = KNAPSACK_CLASSES + next(600) as usize;
            let cands: Vec<PackType> = (0..20 + next(40) as usize)
                .map(|t| {
                    let price = 0.1 + next(100) as f64 / 10.0;
                    pt(t, price, &[40 + next(400), 40 + next(400)])
                })
                .collect();
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| vec![1 + next(40), 1 + next(40)])
                .collect();
            let per_node = vec![usize::MAX; classes];
            let value: Vec<f64> = need.iter().map(|n| (n[0] + n[1]) as f64).collect();
            let mut initial = InitialFills::new(cands.len());
            let packing = packed(
                &cands,
                &need,
                &per_node,
                &value,
                vec![1; classes],
                &mut initial,
            );
            let (bins, computed) = packing.unwrap_or_else(|| panic!("case {case}: unpacked"));
            fills += computed;
            nodes += bins.len();
        }
        assert!(fills <= 3 * nodes, "{fills} fills for {nodes} nodes");
    }

    /// A grouped walk weighs a type by the knapsack of the classes its
    /// group holds: a type without the second requirement set's room is
    /// not weighed by that set's pods, however much they are worth; as
    /// its own pods leave, its bound falls.
    #[test]
    fn a_group_is_weighed_by_the_pods_it_can_hold() {
        let classes = INDEXED_CLASSES;
        // Dimensions: cpu, then two requirement sets; odd classes need the
        // second set and are worth 100 a pod, even ones 1.
        let need: Vec<Vec<i64>> = (0..classes)
            .map(|k| vec![1, i64::from(k % 2 == 0), i64::from(k % 2 == 1)])
            .collect();
        let value: Vec<f64> = (0..classes)
            .map(|k| if k % 2 == 1 { 100.0 } else { 1.0 })
            .collect();
        let (per_node, mut left) = (vec![4; classes], vec![2; classes]);
        let cands = [
            pt(0, 1.0, &[64, 1 << 30, 0]),
            pt(1, 2.0, &[64, 1 << 30, 1 << 30]),
        ];
        let mut filler = Filler::new(&cands, &need, &per_node, &value, &left);
        assert!(matches!(filler.bound, Bound::PerGroup(_)));
        let first_set_only = filler.bound.of(0, &cands[0].room);
        assert!((first_set_only - 64.0).abs() < 1e-6, "{first_set_only}");
        let both = filler.bound.of(1, &cands[1].room);
        assert!((both - 6400.0).abs() < 1e-3, "{both}");
        // The first set's pods leave but 10 (classes 0, 2, ..., 8).
        let mut gone = Take::new(classes);
        for k in (10..classes).step_by(2) {
            gone.per_class[k] = 2;
            gone.taken.push(k);
        }
        filler.take(&gone, &mut left);
        let fell = filler.bound.of(0, &cands[0].room);
        assert!((fell - 10.0).abs() < 1e-6, "{fell}");
    }

    /// Many classes walk one index and weigh types lazily by the knapsack
    /// only where every type has room in every dimension a class needs:
    /// types without a requirement set's dimension walk their group's
    /// index, weighed exactly by the knapsack of the common dimensions.
    #[test]
    fn types_without_a_needed_dimension_walk_their_groups() {
        let classes = KNAPSACK_CLASSES;
        // Dimensions: cpu, then two requirement sets; class k needs set k % 2.
        let need: Vec<Vec<i64>> = (0..classes)
            .map(|k| {
                vec![
                    1 + (k % 7) as i64,
                    i64::from(k % 2 == 0),
                    i64::from(k % 2 == 1),
                ]
            })
            .collect();
        let (per_node, value, left) = (vec![4; classes], vec![1.0; classes], vec![2; classes]);
        let walks = |cands: &[PackType]| {
            let filler = Filler::new(cands, &need, &per_node, &value, &left);
            let groups = match &filler.walk {
                Walk::Grouped(g) => Some(g.indices.len()),
                _ => None,
            };
            (matches!(filler.walk, Walk::Indexed(_)), groups, filler.lazy)
        };
        let both = [pt(0, 1.0, &[64, 8, 8]), pt(1, 2.0, &[128, 16, 16])];
        assert_eq!(walks(&both), (true, None, true));
        let one_set = [
            pt(0, 1.0, &[64, 8, 0]),
            pt(1, 2.0, &[128, 16, 16]),
            pt(2, 4.0, &[256, 16, 16]),
        ];
        assert_eq!(walks(&one_set), (false, Some(2), false));
    }

    /// A family's many classes walked per group of types (requirement
    /// sets some types lack, anti-affinity groups of one pod per node,
    /// an accelerator only some types have) and weighed by the knapsack
    /// of the common dimensions in order: the packing of every type's
    /// fill computed afresh for every node.
    #[test]
    fn a_grouped_walk_packs_as_every_fill_afresh() {
        let mut next = seeded(29);
        let mut grouped = 0;
        for case in 0..60 {
            let sets = 2 + next(3) as usize;
            let groups = next(3) as usize;
            let classes = INDEXED_CLASSES + next(200) as usize;
            // cpu, memory, accelerator, then the sets, then the groups.
            let dims = 3 + sets + groups;
            let cands: Vec<PackType> = (0..2 + next(14) as usize)
                .map(|t| {
                    let mut room = vec![8 + next(60), 8 + next(60), next(3) * 2];
                    room.extend((0..sets).map(|_| if next(3) == 0 { 0 } else { 1 << 30 }));
                    room.extend((0..groups).map(|_| 1));
                    pt(t, 0.1 + next(100) as f64 / 10.0, &room)
                })
                .collect();
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| {
                    let mut n = vec![0; dims];
                    n[0] = 1 + next(12);
                    n[1] = 1 + next(12);
                    n[2] = i64::from(next(10) == 0);
                    n[3 + next(sets as u64) as usize] = 1;
                    if groups > 0 && next(4) == 0 {
                        n[3 + sets + next(groups as u64) as usize] = 1;
                    }
                    n
                })
                .collect();
            let per_node: Vec<usize> = (0..classes).map(|_| 1 + next(4) as usize).collect();
            let left: Vec<usize> = (0..classes).map(|_| next(4) as usize).collect();
            let mut initial = InitialFills::new(cands.len());
            for round in 0..2 {
                let value: Vec<f64> = (0..classes).map(|_| 0.1 + next(50) as f64 / 7.0).collect();
                let filler = Filler::new(&cands, &need, &per_node, &value, &left);
                if !matches!(filler.walk, Walk::Grouped(_)) {
                    continue;
                }
                grouped += 1;
                let got = pack(&cands, &need, &per_node, &value, left.clone(), &mut initial)
                    .map(|bins| bins.into_iter().map(|b| b.fill).collect::<Vec<_>>());
                let want = pack_afresh(&cands, &need, &per_node, &value, left.clone());
                assert_eq!(got, want, "case {case} round {round}");
            }
        }
        assert!(grouped >= 100, "{grouped} of 120 packings walked grouped");
    }

    fn cands() -> Vec<PackType> {
        // One resource: nodes for 10, 6 and 4 pods; the 10-pod node has the
        // best price per pod.
        vec![pt(0, 1.0, &[10]), pt(1, 0.66, &[6]), pt(2, 0.5, &[4])]
    }

    #[test]
    fn one_class_is_packed_exactly_where_the_greedy_is_not() {
        let need = vec![1];
        let greedy = pack(
            &cands(),
            std::slice::from_ref(&need),
            &[usize::MAX],
            &[1.0],
            vec![12],
            &mut InitialFills::new(3),
        )
        .unwrap_or_default();
        let counts: Vec<usize> = greedy.iter().map(|b| b.fill[0].1).collect();
        assert_eq!(counts, vec![10, 2], "the greedy takes the best ratio first");

        let PricedBins { cost, bins } = single_class(&cands(), &need, 12, fits).unwrap_or_default();
        let counts: Vec<usize> = bins.iter().map(|b| b.fill[0].1).collect();
        assert_eq!(counts, vec![6, 6]);
        assert!((cost - 1.32).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn one_class_prices_a_partly_filled_node_whole() {
        let PricedBins { cost, bins } = single_class(&cands(), &[1], 3, fits).unwrap_or_default();
        assert_eq!(bins.len(), 1);
        assert!((cost - 0.5).abs() < 1e-9, "{cost}");
        let PricedBins { cost, bins } = single_class(&cands(), &[1], 21, fits).unwrap_or_default();
        let total: usize = bins.iter().map(|b| b.fill[0].1).sum();
        assert_eq!(total, 21);
        // 10 + 6 + 5 (a 6-pod node) = 2.32 vs 10 + 10 + 1 (4-pod node) = 2.5.
        assert!((cost - 2.32).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn one_class_without_a_fitting_type_or_over_the_work_limit_is_left_to_the_greedy() {
        assert!(single_class(&cands(), &[11], 3, fits).is_none());
        assert!(single_class(&cands(), &[1], SINGLE_CLASS_WORK, fits).is_none());
    }

    #[test]
    fn few_classes_are_packed_exactly() {
        // Two resources. Class 0 is CPU-heavy, class 1 memory-heavy; a
        // balanced node holds one of each for less than two lopsided ones.
        let cands = vec![
            pt(0, 1.0, &[4, 1]), // cpu node
            pt(1, 1.0, &[1, 4]), // memory node
            pt(2, 1.2, &[4, 4]), // balanced
            pt(3, 2.1, &[8, 8]), // large balanced
        ];
        let need = vec![vec![3, 1], vec![1, 3]];
        let PricedBins { cost, bins } =
            few_classes(&cands, &need, &[2, 2], &[9, 9]).unwrap_or_default();
        // Two pods of each: one large balanced node (2.1) beats two
        // balanced (2.4) and four lopsided ones (4.0).
        assert!((cost - 2.1).abs() < 1e-9, "{cost}");
        assert_eq!(bins.len(), 1);
        assert_eq!(bins[0].fill, vec![(0, 2), (1, 2)]);
        let PricedBins { cost, bins } =
            few_classes(&cands, &need, &[3, 1], &[9, 9]).unwrap_or_default();
        // 3 cpu-heavy + 1 memory-heavy: large balanced holds 2+1 (7, 5),
        // the third goes on a cpu node: 3.1.
        assert!((cost - 3.1).abs() < 1e-9, "{cost}");
        let placed: usize = bins.iter().flat_map(|b| b.fill.iter().map(|f| f.1)).sum();
        assert_eq!(placed, 4);
    }

    #[test]
    fn few_classes_gives_up_on_large_tables_and_unplaceable_pods() {
        let cands = vec![pt(0, 1.0, &[4, 4])];
        assert!(few_classes(&cands, &[vec![1, 1], vec![1, 1]], &[5000, 5000], &[9, 9]).is_none());
        assert!(few_classes(&cands, &[vec![5, 1], vec![1, 1]], &[1, 1], &[9, 9]).is_none());
    }

    #[test]
    fn one_pod_per_node_classes_are_never_doubled_up() {
        // Without the cap, two pods of each class share the large node.
        let cands = vec![pt(0, 1.2, &[4, 4]), pt(1, 2.1, &[8, 8])];
        let need = vec![vec![3, 1], vec![1, 3]];
        let PricedBins { cost, bins } =
            few_classes(&cands, &need, &[2, 2], &[1, 1]).unwrap_or_default();
        assert!((cost - 2.4).abs() < 1e-9, "{cost}");
        assert!(bins.iter().all(|b| b.fill.iter().all(|&(_, n)| n <= 1)));
        let mut initial = InitialFills::new(cands.len());
        let greedy = pack(
            &cands,
            &need,
            &[1, 1],
            &[1.0, 1.0],
            vec![2, 2],
            &mut initial,
        )
        .unwrap_or_default();
        assert_eq!(greedy.len(), 2);
        assert!(greedy.iter().all(|b| b.fill == vec![(0, 1), (1, 1)]));
    }
}
