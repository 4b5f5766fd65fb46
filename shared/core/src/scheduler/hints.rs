//! Speed hints and caches: pod classes, per-class hints, memoised lookups.
//! The caches are exact; the walk's hints (roomy lists, spread hints) are
//! heuristics that can change which planned NodeClaim a pod joins (see
//! `docs/scheduling.md`, "How trials stay cheap").

use std::collections::BTreeMap;

// The caches' maps hash with foldhash (seeded per process: no flooding by
// crafted keys; nothing iterates them, so plans stay deterministic):
// SipHash was 2% of a plan's instructions.
use foldhash::HashMap;
use std::hash::Hash;
use std::rc::Rc;

use crate::labels;
use crate::model::{
    Pod, PodAffinityTerm, PreferredNodeTerm, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::explain::Refusal;
use super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::nodeclaim::JoinAnswer;
use super::nodeclaim::{ZoneMask, ZonePin};
use super::repack::PackType;
use super::typeset::TypeSet;
use super::volumes;
use super::{Pool, Relaxation, Run};

/// The largest allocatable and the largest capacity of a set of types.
pub(super) type TypeMaxima = (Resources, Resources);

/// What the walks of one size class's pods without a shape, at one
/// relaxation, learned (see `Hints::spread_hint`).
#[derive(Clone)]
pub(super) struct SpreadHint {
    /// Per zone bucket (see `ZonePin::bucket`), the first NodeClaim worth
    /// trying.
    pub(super) first: [u32; ZonePin::BUCKETS],
    /// The NodeClaims such a pod may still join: like the request class's
    /// list, and a NodeClaim found behind its bucket's `first` is dropped
    /// for good (`first` only grows); `parked` remembers cost-rule
    /// refusals.
    pub(super) roomy: Roomy,
    /// The solo price of such a pod (see `Run::solo_price`), once known:
    /// the size class's pods share their requests, node requirements and
    /// tolerations at a relaxation, all it depends on.
    pub(super) solo: Option<Option<f64>>,
}

impl SpreadHint {
    pub(super) fn new() -> Box<SpreadHint> {
        Box::new(SpreadHint {
            first: [0; ZonePin::BUCKETS],
            roomy: Roomy::default(),
            solo: None,
        })
    }
}

/// Pod classes and what the run remembers about them, and caches of
/// answers that depend only on a NodePool and requirements (see the module
/// documentation); the size classes and their counts feed the cost rule's
/// look-ahead.
#[derive(Clone)]
pub(super) struct Hints<'a> {
    /// Equivalence class of each pod (identical requests and constraints),
    /// for pods whose placement outcomes only get worse as nodes fill (no
    /// spread or affinity): `None` for the others.
    shape: Vec<Option<usize>>,
    /// Per shape: the first existing node / NodeClaim worth trying. Nodes
    /// before it rejected a pod of this shape for reasons that only harden.
    existing_hint: Vec<usize>,
    claim_hint: Vec<ClaimIdx>,
    /// Per shape: the relaxation the hints were gathered at.
    hint_relax: Vec<Relaxation>,
    /// Size class of each pod (see `size_classes`), and per class the pods
    /// not placed yet.
    size: Vec<usize>,
    size_left: Vec<usize>,
    /// Per size class, whether it has one pod only.
    size_alone: Vec<bool>,
    /// Per size class, whether its pods are alike on the hostname (see
    /// [`host_alike_classes`]).
    size_host_alike: Vec<bool>,
    /// Per shape: the solo price (see `solo_price`).
    solo_cache: Vec<Option<Option<f64>>>,
    /// Types of a pool compatible with requirements (hostname excluded).
    compat_cache: CompatCache,
    /// [`Self::compat_cache`]'s answers as type sets, per pool (see
    /// `Run::compatible_set`).
    compat_sets: std::cell::RefCell<HashMap<PoolIdx, HashMap<Requirements, Rc<TypeSet>>>>,
    /// See [`ReqTypeCache`]: a candidate NodeClaim's types are narrowed by
    /// bit sets, not by testing each type's labels. Shared by the runs of
    /// one [`super::Prepared`]: a type's labels never change.
    req_type_cache: &'a ReqTypeCache,
    /// Repack candidates per (pool, requirements, dimensions), see
    /// `Run::candidates`.
    cand_cache: CandCache,
    /// (pool, requirements without hostname) → why no type is compatible.
    no_type_reasons: std::cell::RefCell<HashMap<(PoolIdx, Requirements), Refusal<'a>>>,
    /// (pool, shape) → best price per pod slot (see `best_slot_price`).
    slot_cache: std::cell::RefCell<HashMap<(PoolIdx, usize), Option<f64>>>,
    /// Per pool, a type set's largest allocatable and capacity (see
    /// [`Hints::type_maxima`]): a type's resources never change in a run.
    maxima_cache: std::cell::RefCell<HashMap<PoolIdx, HashMap<TypeSet, TypeMaxima>>>,
    /// (a list of compatible types, by address: the entry keeps it alive,
    /// so the address names that list; pool; request class) → those of
    /// its types that hold the request plus the pool's daemonsets (see
    /// [`Run::fitting_types`]).
    fit_cache: FitCache,
    /// Class of each pod by its requests alone.
    req_class: Vec<usize>,
    /// Class of each pod by its requests and tolerations (see
    /// [`walk_classes`]), and per class the NodeClaims that may still
    /// have room for such a pod and whose taints it may tolerate (see
    /// `Roomy`), dropped once the class has no pod left to place (each
    /// holds a list of NodeClaims).
    walk_class: Vec<usize>,
    roomy: Vec<Roomy>,
    /// Per walk class, its pods not placed yet.
    walk_left: Vec<usize>,
    /// Per size class, for pods without a shape (spread, pod affinity),
    /// per relaxation (a size class's pods share their requirements at
    /// each): per zone bucket (see `ZonePin::bucket`), the first NodeClaim
    /// not known to refuse such a pod for reasons that only harden (no
    /// room, the cost rule), and the NodeClaims after it such a pod may
    /// join. Topology refusals do not count. Dropped once the size class
    /// has no pod left to place (each holds a list of NodeClaims).
    spread_hint: Vec<Vec<(Relaxation, Box<SpreadHint>)>>,
    /// Every zone mask a NodeClaim of the run has had (see `commit`): a
    /// pod topology refuses on all of them fits no NodeClaim.
    zone_masks: Vec<ZoneMask>,
    /// Per zone bits met, their zone requirement (see
    /// [`Hints::with_zone_requirement`]).
    zone_requirements: std::cell::RefCell<Vec<(u64, Requirement)>>,
    /// Bumped when a reservation runs out (see `JoinMemo`).
    epoch: u32,
    /// Per NodeClaim of the queue (by index), bumped by every pod that
    /// joins it: what the roomy lists' cost-rule marks hold for (see
    /// `Refused`). Here rather than on the NodeClaim, so a walk passes
    /// NodeClaims the cost rule refused without touching them. The repack,
    /// which replaces NodeClaims, walks none.
    versions: Vec<u32>,
    /// [`Self::compat_cache`] shared by the runs of one
    /// [`super::Prepared`], used while no reservation ran out in this run
    /// (the NodePools' offerings are still the prepared ones).
    shared_compat: Option<&'a CompatCache>,
}

impl<'a> Hints<'a> {
    pub(super) fn new(
        pods: &[Pod],
        volume: &[volumes::VolumeTerms],
        shared_compat: &'a CompatCache,
        req_type_cache: &'a ReqTypeCache,
    ) -> Self {
        let (shape, n_shapes) = shapes(pods, volume);
        let (size, n_sizes) = size_classes(pods, volume);
        let (req_class, _) = request_classes(pods);
        let (walk_class, n_walk_classes) = walk_classes(pods);
        let size_left = class_counts(&size, n_sizes);
        let size_alone = size_left.iter().map(|&n| n == 1).collect();
        let size_host_alike = host_alike_classes(pods, &size, n_sizes);
        let walk_left = class_counts(&walk_class, n_walk_classes);
        Hints {
            shape,
            existing_hint: vec![0; n_shapes],
            claim_hint: vec![ClaimIdx::new(0); n_shapes],
            hint_relax: vec![Relaxation::default(); n_shapes],
            size,
            size_left,
            size_alone,
            size_host_alike,
            solo_cache: vec![None; n_shapes],
            compat_cache: Default::default(),
            compat_sets: Default::default(),
            req_type_cache,
            cand_cache: Default::default(),
            no_type_reasons: Default::default(),
            slot_cache: Default::default(),
            maxima_cache: Default::default(),
            fit_cache: Default::default(),
            req_class,
            walk_class,
            roomy: (0..n_walk_classes).map(|_| Roomy::default()).collect(),
            walk_left,
            spread_hint: (0..n_sizes).map(|_| Vec::new()).collect(),
            zone_masks: Vec::new(),
            zone_requirements: Default::default(),
            epoch: 0,
            versions: Vec::new(),
            shared_compat: Some(shared_compat),
        }
    }

    /// Hints hold for one relaxation level: pods of a shape are relaxed
    /// together, so a change of level starts the hints afresh.
    pub(super) fn at_relaxation(&mut self, shape: Option<usize>, r: &Relaxation) {
        if let Some(s) = shape {
            if self.hint_relax[s] != *r {
                self.hint_relax[s] = r.clone();
                self.existing_hint[s] = 0;
                self.claim_hint[s] = ClaimIdx::new(0);
                self.solo_cache[s] = None;
            }
        }
    }

    /// Pod `p` is placed: one fewer of its size class and of its walk
    /// class waits.
    #[inline]
    pub(super) fn placed(&mut self, p: PodIdx) {
        let size = self.size[p];
        self.size_left[size] = self.size_left[size].saturating_sub(1);
        if self.size_left[size] == 0 {
            self.spread_hint[size] = Vec::new();
        }
        let class = self.walk_class[p];
        self.walk_left[class] = self.walk_left[class].saturating_sub(1);
        if self.walk_left[class] == 0 {
            self.roomy[class] = Roomy::default();
        }
    }

    /// A NodePool's limits were spent: the solo prices, and what the walks
    /// learnt from the cost rule under them, are asked again.
    pub(super) fn solo_prices_changed(&mut self) {
        self.solo_cache.iter_mut().for_each(|c| *c = None);
        self.spread_hint.iter_mut().for_each(Vec::clear);
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Offerings were switched off (a reservation ran out): the caches
    /// that depend on offerings are dropped, the solo prices with them.
    pub(super) fn offerings_changed(&mut self) {
        self.compat_cache.borrow_mut().clear();
        self.compat_sets.borrow_mut().clear();
        self.fit_cache.borrow_mut().clear();
        self.no_type_reasons.borrow_mut().clear();
        self.slot_cache.borrow_mut().clear();
        self.solo_prices_changed();
        self.shared_compat = None;
    }

    /// Pod `p`'s shape, if it has one (see [`shapes`]).
    #[inline]
    pub(super) fn shape(&self, p: PodIdx) -> Option<usize> {
        self.shape[p]
    }

    /// Pod `p`'s size class (see [`size_classes`]).
    #[inline]
    pub(super) fn size_class(&self, p: PodIdx) -> usize {
        self.size[p]
    }

    /// Pod `p`'s request class (see [`request_classes`]).
    #[inline]
    pub(super) fn req_class(&self, p: PodIdx) -> usize {
        self.req_class[p]
    }

    /// Pod `p`'s walk class (see [`walk_classes`]).
    #[inline]
    pub(super) fn walk_class(&self, p: PodIdx) -> usize {
        self.walk_class[p]
    }

    /// NodeClaim `c`'s version (see `Hints::versions`).
    #[inline]
    pub(super) fn version(&self, c: ClaimIdx) -> u32 {
        self.versions.get(c.get()).copied().unwrap_or(0)
    }

    /// A pod joined NodeClaim `c`: its version moves on.
    pub(super) fn claim_changed(&mut self, c: ClaimIdx) {
        let i = c.get();
        if self.versions.len() <= i {
            self.versions.resize(i + 1, 0);
        }
        self.versions[i] = self.versions[i].wrapping_add(1);
    }

    /// Whether pod `p` is the only pod of its size class (so no other pod
    /// shares what the cost rule answers it).
    #[inline]
    pub(super) fn alone_in_size(&self, p: PodIdx) -> bool {
        self.size_alone[self.size[p]]
    }

    /// Whether every pod of pod `p`'s size class has the same hostname
    /// constraints and is selected by them alike (see
    /// [`host_alike_classes`]).
    #[inline]
    pub(super) fn host_alike_in_size(&self, p: PodIdx) -> bool {
        self.size_host_alike[self.size[p]]
    }

    /// Pods of size class `size` not placed yet.
    #[inline]
    pub(super) fn size_left(&self, size: usize) -> usize {
        self.size_left[size]
    }

    /// The offering epoch: bumped when a reservation runs out (see
    /// `JoinMemo`).
    #[inline]
    pub(super) fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Shape `s`'s first existing node worth trying.
    #[inline]
    pub(super) fn existing_hint(&self, s: usize) -> usize {
        self.existing_hint[s]
    }

    /// Existing nodes before `i` refused a pod of shape `s` for reasons
    /// that only harden.
    #[inline]
    pub(super) fn set_existing_hint(&mut self, s: usize, i: usize) {
        self.existing_hint[s] = i;
    }

    /// Shape `s`'s first planned NodeClaim worth trying.
    #[inline]
    pub(super) fn claim_hint(&self, s: usize) -> ClaimIdx {
        self.claim_hint[s]
    }

    /// NodeClaims before `c` refused a pod of shape `s` for reasons that
    /// only harden.
    #[inline]
    pub(super) fn set_claim_hint(&mut self, s: usize, c: ClaimIdx) {
        self.claim_hint[s] = c;
    }

    /// Shape `s`'s solo price, if remembered (see `Run::solo`).
    #[inline]
    pub(super) fn solo_price_cached(&self, s: usize) -> Option<Option<f64>> {
        self.solo_cache[s]
    }

    /// Remembers shape `s`'s solo price.
    #[inline]
    pub(super) fn remember_solo_price(&mut self, s: usize, price: Option<f64>) {
        self.solo_cache[s] = Some(price);
    }

    /// Drops the walks' lists (roomy lists, spread hints) once the queue
    /// is done: a list per request or size class over every NodeClaim,
    /// which the repack does not read. A later walk would build them anew
    /// (see `Roomy::sync`). Where the run forked, both runs' lists were
    /// held until the choice (at 50,000 `assorted` pods 90 MiB of peak).
    pub(super) fn queue_done(&mut self) {
        self.roomy.iter_mut().for_each(|r| *r = Roomy::default());
        self.spread_hint.iter_mut().for_each(Vec::clear);
    }

    /// Takes request class `class`'s roomy list out for a walk (give it
    /// back with [`Self::put_roomy`]).
    #[inline]
    pub(super) fn take_roomy(&mut self, class: usize) -> Roomy {
        std::mem::take(&mut self.roomy[class])
    }

    /// Gives back request class `class`'s roomy list.
    #[inline]
    pub(super) fn put_roomy(&mut self, class: usize, roomy: Roomy) {
        self.roomy[class] = roomy;
    }

    /// Takes size class `size`'s spread hints at relaxation `r` out for a
    /// walk (give them back with [`Self::put_spread_hint`]).
    #[inline]
    pub(super) fn take_spread_hint(
        &mut self,
        size: usize,
        r: &Relaxation,
    ) -> Option<Box<SpreadHint>> {
        let at = self.spread_hint[size].iter().position(|(at, _)| at == r)?;
        Some(self.spread_hint[size].swap_remove(at).1)
    }

    /// Gives back size class `size`'s spread hints at relaxation `r`.
    #[inline]
    pub(super) fn put_spread_hint(&mut self, size: usize, r: &Relaxation, hint: Box<SpreadHint>) {
        self.spread_hint[size].push((r.clone(), hint));
    }

    /// Every zone mask a NodeClaim of the run has had.
    #[inline]
    pub(super) fn zone_masks(&self) -> &[ZoneMask] {
        &self.zone_masks
    }

    /// `f` of the zone requirement of the zone bits `bits` (of the
    /// catalog's first 64 `zones`), built once per bits.
    pub(super) fn with_zone_requirement<R>(
        &self,
        bits: u64,
        zones: &[String],
        f: impl FnOnce(&Requirement) -> R,
    ) -> R {
        let known = (self.zone_requirements.borrow().iter()).position(|(b, _)| *b == bits);
        let i = known.unwrap_or_else(|| {
            let r = Requirement::in_values(
                labels::ZONE,
                (zones.iter().take(64).enumerate())
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, z)| z.as_str()),
            );
            let mut all = self.zone_requirements.borrow_mut();
            all.push((bits, r));
            all.len() - 1
        });
        let all = self.zone_requirements.borrow();
        f(&all[i].1)
    }

    /// A NodeClaim of the run has zone mask `mask`.
    #[inline]
    pub(super) fn remember_zone_mask(&mut self, mask: ZoneMask) {
        if !self.zone_masks.contains(&mask) {
            self.zone_masks.push(mask);
        }
    }

    /// The best price per pod slot of pool `pi` for size class `size`, if
    /// remembered (see `Run::best_slot_price`).
    #[inline]
    pub(super) fn slot_price_cached(&self, pi: PoolIdx, size: usize) -> Option<Option<f64>> {
        self.slot_cache.borrow().get(&(pi, size)).copied()
    }

    /// Remembers the best price per pod slot of pool `pi` for size class
    /// `size`.
    pub(super) fn remember_slot_price(&self, pi: PoolIdx, size: usize, price: Option<f64>) {
        self.slot_cache.borrow_mut().insert((pi, size), price);
    }

    /// The largest allocatable and capacity among `types` of `pool` (pool
    /// `pi`), remembered per type set.
    pub(super) fn type_maxima(&self, pi: PoolIdx, pool: &Pool, types: &TypeSet) -> TypeMaxima {
        if let Some(hit) = self
            .maxima_cache
            .borrow()
            .get(&pi)
            .and_then(|m| m.get(types))
        {
            return hit.clone();
        }
        let maxima = super::repack::type_maxima(pool, types);
        self.maxima_cache
            .borrow_mut()
            .entry(pi)
            .or_default()
            .insert(types.clone(), maxima.clone());
        maxima
    }

    /// Why pool `pi` has no type for `reqs` (hostname removed), if
    /// remembered.
    pub(super) fn no_type_reason_cached(
        &self,
        pi: PoolIdx,
        reqs: &Requirements,
    ) -> Option<Refusal<'a>> {
        // The key is built as the map holds it (one clone, as before).
        self.no_type_reasons
            .borrow()
            .get(&(pi, reqs.clone()))
            .cloned()
    }

    /// Remembers why pool `pi` has no type for `reqs` (hostname removed).
    pub(super) fn remember_no_type_reason(
        &self,
        pi: PoolIdx,
        reqs: Requirements,
        reason: Refusal<'a>,
    ) {
        self.no_type_reasons.borrow_mut().insert((pi, reqs), reason);
    }

    /// Repack candidates for `key`, if remembered (see `Run::candidates`).
    pub(super) fn candidates_cached(&self, key: &CandKey) -> Option<Rc<Vec<PackType>>> {
        self.cand_cache.borrow().get(key).cloned()
    }

    /// Remembers the repack candidates for `key`.
    pub(super) fn remember_candidates(&self, key: CandKey, cands: Rc<Vec<PackType>>) {
        self.cand_cache.borrow_mut().insert(key, cands);
    }
}

/// NodeClaims (ascending) not yet known to be too full for pods of one
/// request vector. A NodeClaim's requests only grow and its largest
/// allocatable only shrinks, so one found too full stays too full: it is
/// marked dead and skipped from then on (compacted when half are dead).
#[derive(Clone, Default)]
pub(super) struct Roomy {
    pub(super) list: Vec<u32>,
    pub(super) dead: Vec<bool>,
    /// The zone bucket (see `ZonePin::bucket`: 1 + the zone's bit) each
    /// NodeClaim is pinned to, once seen pinned to one of the first 64
    /// zones (0: not known to be pinned). A pinned NodeClaim stays pinned
    /// to its zone, so the spread pre-check can skip it without touching
    /// it.
    pub(super) pins: Vec<u8>,
    /// Per NodeClaim, the cost rule's last refusal of the list's pods
    /// there (see `Refused`).
    pub(super) parked: Vec<Refused>,
    pub(super) n_dead: usize,
    /// NodeClaims `0..synced` are in `list` (or were dropped as full).
    pub(super) synced: usize,
}

impl Roomy {
    pub(super) fn sync(&mut self, claims: usize) {
        if claims <= self.synced {
            return;
        }
        self.list.extend(self.synced as u32..claims as u32);
        let len = self.list.len();
        self.dead.resize(len, false);
        self.pins.resize(len, 0);
        self.parked.resize(len, Refused::default());
        self.synced = claims;
    }

    pub(super) fn kill(&mut self, k: usize) {
        self.dead[k] = true;
        self.n_dead += 1;
    }

    /// Drops the dead entries once they are a quarter of the list (each
    /// walk steps over them; dropping them costs a pass over the list).
    pub(super) fn compact(&mut self) {
        if self.n_dead * 4 <= self.list.len() {
            return;
        }
        let mut dead = self.dead.iter();
        self.list.retain(|_| dead.next() == Some(&false));
        let mut dead = self.dead.iter();
        self.pins.retain(|_| dead.next() == Some(&false));
        let mut dead = self.dead.iter();
        self.parked.retain(|_| dead.next() == Some(&false));
        self.dead = vec![false; self.list.len()];
        self.n_dead = 0;
    }
}

/// A cost-rule refusal a roomy list remembers for one NodeClaim, so its
/// walks pass that NodeClaim without touching it while nothing the
/// refusal depends on changed (see `Run::walk_claims`).
///
/// A size class's list (its pods share their solo price) needs only the
/// NodeClaim's version, and keeps the NodeClaim's zone bucket then (the
/// zone pin changes only with the version), so its walks pass the
/// NodeClaim knowing its bucket without touching it. A request class's
/// pods differ in their solo price and size class, so its list also
/// keeps the run's offering epoch, the size class of every pod on the
/// NodeClaim (a pod of that size class asks the look-ahead question
/// instead), and the solo prices refused: a refusal names them `below` a
/// bound a little under the price step the cost rule asks for (its f32
/// rounding, then a margin of 1e-5 that any rounding of the pod's price
/// stays inside), and the bound-line cases ask the rule again.
#[derive(Clone, Copy, Default)]
pub(super) struct Refused {
    /// 1 + the NodeClaim's version (0: no refusal).
    pub(super) mark: u32,
    pub(super) epoch: u32,
    /// The size class of every pod on the NodeClaim (`u32::MAX`: none).
    pub(super) claim_size: u32,
    /// Solo prices under this are refused.
    pub(super) below: f32,
    /// A size class's refusal: the NodeClaim's zone bucket (see
    /// `ZonePin::bucket`).
    pub(super) bucket: u8,
}

impl Refused {
    /// A refusal at `version` (see `Hints::version`), of a NodeClaim in
    /// zone bucket `bucket`.
    pub(super) fn at(version: u32, bucket: usize) -> Refused {
        Refused {
            mark: version.wrapping_add(1),
            bucket: u8::try_from(bucket).unwrap_or(u8::MAX),
            ..Refused::default()
        }
    }

    /// Whether it holds at `version` (never at the last version, whose
    /// mark would be the 0 of no refusal).
    #[inline]
    pub(super) fn holds_at(&self, version: u32) -> bool {
        let mark = version.wrapping_add(1);
        mark != 0 && self.mark == mark
    }

    /// A request class's refusal at `version` and `epoch`, for a NodeClaim
    /// whose pods all have size class `claim_size` (if one), of the solo
    /// prices `answer` refuses; `None` when it refuses none (or the size
    /// class is past what the record holds: the rule is asked again).
    pub(super) fn of_answer(
        version: u32,
        epoch: u32,
        claim_size: Option<usize>,
        answer: JoinAnswer,
    ) -> Option<Refused> {
        let below = match answer {
            JoinAnswer::Never => f32::INFINITY,
            JoinAnswer::Always => return None,
            JoinAnswer::Step { step, slack } => {
                let bound = step / slack * (1.0 - 1e-5);
                if bound.is_nan() || bound <= 0.0 {
                    return None;
                }
                bound as f32
            }
        };
        let claim_size = match claim_size {
            None => u32::MAX,
            Some(s) => u32::try_from(s).ok().filter(|&s| s != u32::MAX)?,
        };
        Some(Refused {
            epoch,
            claim_size,
            below,
            ..Refused::at(version, 0)
        })
    }

    /// Whether it refuses a pod of size class `size` and solo price `solo`
    /// at `version` and `epoch`.
    #[inline]
    pub(super) fn refuses(&self, version: u32, epoch: u32, size: usize, solo: Option<f64>) -> bool {
        self.holds_at(version)
            && self.epoch == epoch
            && usize::try_from(self.claim_size).ok() != Some(size)
            && solo.is_some_and(|s| (s as f32) < self.below)
    }
}

/// (pool, requirements, dimensions): what repack candidates depend on.
pub(super) type CandKey = (PoolIdx, Requirements, Vec<String>);

/// [`CandKey`] → the repack candidates (see `Run::candidates`).
pub(super) type CandCache = std::cell::RefCell<HashMap<CandKey, Rc<Vec<PackType>>>>;

/// (pool, one requirement) → the pool's types whose labels intersect it.
pub(super) type ReqTypeCache =
    std::cell::RefCell<HashMap<(PoolIdx, Requirement), std::rc::Rc<TypeSet>>>;

/// See `Hints::fit_cache`.
type FitCache =
    std::cell::RefCell<HashMap<(usize, PoolIdx, usize), (Rc<Vec<usize>>, Rc<Vec<usize>>)>>;

pub(super) type CompatCache =
    std::cell::RefCell<HashMap<(PoolIdx, Requirements), std::rc::Rc<Vec<usize>>>>;

/// What the price of a node slot for a pod depends on (see
/// [`size_classes`]), borrowed from the pod. Host ports are part of it: a
/// node holds one pod per port, and a type whose DaemonSets use the port
/// holds none; so a size class's pods are refused by the same NodeClaims
/// for their ports (see `Run::walk_claims`).
#[derive(PartialEq, Eq, Hash)]
struct SizeKey<'p> {
    requests: &'p Resources,
    host_ports: &'p [(String, i32)],
    node_selector: &'p Requirements,
    required_terms: &'p [Requirements],
    preferred_terms: &'p [PreferredNodeTerm],
    tolerations: &'p [Toleration],
    volume: &'p volumes::VolumeTerms,
}

impl<'p> SizeKey<'p> {
    fn of(p: &'p Pod, volume: &'p volumes::VolumeTerms) -> Self {
        SizeKey {
            requests: &p.requests,
            host_ports: &p.host_ports,
            node_selector: &p.node_selector,
            required_terms: &p.required_terms,
            preferred_terms: &p.preferred_terms,
            tolerations: &p.tolerations,
            volume,
        }
    }
}

/// Everything a monotonic pod's placements depend on (see [`shapes`]):
/// its size key (host ports included), what anti-affinity reads of it,
/// and its hostname spreads.
#[derive(PartialEq, Eq, Hash)]
struct ShapeKey<'p> {
    size: SizeKey<'p>,
    namespace: &'p str,
    labels: &'p BTreeMap<String, String>,
    pod_anti_affinity: &'p [PodAffinityTerm],
    preferred_pod_anti_affinity: &'p [WeightedPodAffinityTerm],
    topology_spread: &'p [TopologySpreadConstraint],
}

/// Class numbers of distinct keys, in order of first appearance.
#[derive(Clone)]
struct ClassIds<K>(HashMap<K, usize>);

impl<K: Eq + Hash> ClassIds<K> {
    fn new() -> Self {
        ClassIds(HashMap::default())
    }

    /// The class of `key` (a new number the first time it is met).
    fn of(&mut self, key: K) -> usize {
        let n = self.0.len();
        *self.0.entry(key).or_insert(n)
    }

    /// How many classes were met.
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Groups pods by what the price of a node slot depends on (requests and
/// the NodePools and types they may use), ignoring labels: the unit of the
/// efficiency test in `Run::growth_pays`.
pub(super) fn size_classes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<usize>, usize) {
    let mut ids = ClassIds::new();
    let out = (pods.iter().zip(volume))
        .map(|(p, v)| ids.of(SizeKey::of(p, v)))
        .collect();
    (out, ids.len())
}

/// Groups pods by their requests alone: the key of the cost rule's memo
/// (`JoinMemo`), the fit cache, and the repack's and rebalance's pod
/// classes.
pub(super) fn request_classes(pods: &[Pod]) -> (Vec<usize>, usize) {
    let mut ids = ClassIds::new();
    let out = pods.iter().map(|p| ids.of(&p.requests)).collect();
    (out, ids.len())
}

/// Per class of `n`, how many of `classes` (one class per pod) it has.
fn class_counts(classes: &[usize], n: usize) -> Vec<usize> {
    let mut counts = vec![0; n];
    for &c in classes {
        counts[c] += 1;
    }
    counts
}

/// Groups pods by their requests and tolerations: the pods that share a
/// roomy list. A NodeClaim whose NodePool has a taint such a pod does not
/// tolerate at any relaxation refuses every pod of the class, so the walk
/// drops it from the list (see `Run::walk_claims`).
pub(super) fn walk_classes(pods: &[Pod]) -> (Vec<usize>, usize) {
    let mut ids = ClassIds::new();
    let out = pods
        .iter()
        .map(|p| ids.of((&p.requests, &p.tolerations)))
        .collect();
    (out, ids.len())
}

/// Groups pods into shapes; see `Run::shape`. Pods with pod affinity or a
/// spread on a key other than the hostname have none.
///
/// A shape's pods are *monotonic*: a node that refuses one refuses it for
/// good (it only fills up), so a walk may start where the shape's last one
/// ended. Anti-affinity only adds pods to avoid. So does a hostname spread:
/// its least count is always 0 (a new node is a new domain), so a node
/// refuses it once it holds `maxSkew` pods the spread counts, and counts
/// only grow. (Without a shape, a Deployment spread one per node walked
/// every NodeClaim planned, each refusing it: 10,000 pods took 31 s.)
pub(super) fn shapes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<Option<usize>>, usize) {
    let mut ids = ClassIds::new();
    let out = (pods.iter().zip(volume))
        .map(|(p, v)| {
            let monotonic = hostname_spreads_only(p)
                && p.pod_affinity.is_empty()
                && p.preferred_pod_affinity.is_empty();
            monotonic.then(|| {
                ids.of(ShapeKey {
                    size: SizeKey::of(p, v),
                    namespace: &p.namespace,
                    labels: &p.labels,
                    pod_anti_affinity: &p.pod_anti_affinity,
                    preferred_pod_anti_affinity: &p.preferred_pod_anti_affinity,
                    topology_spread: &p.topology_spread,
                })
            })
        })
        .collect();
    (out, ids.len())
}

/// Per size class of `n` (`size`: each pod's), whether its pods are alike
/// on the hostname: the same namespace, the same hostname spreads and
/// hostname anti-affinity terms (required and preferred, at least one),
/// each selecting all of them or none. `Topology::admits_host` then
/// answers every pod of the class alike on any node, and as a node's
/// counts only grow during the queue, a node it refuses one of them it
/// refuses all of them for good. (A class with no hostname term is never
/// refused there: asking would cost every walk a check per NodeClaim.)
pub(super) fn host_alike_classes(pods: &[Pod], size: &[usize], n: usize) -> Vec<bool> {
    let mut ids = ClassIds::new();
    let mut first: Vec<Option<usize>> = vec![None; n];
    let mut alike = vec![true; n];
    for (p, &c) in pods.iter().zip(size) {
        let key = HostKey::of(p);
        alike[c] &= key.constrains();
        let id = ids.of(key);
        match first[c] {
            None => first[c] = Some(id),
            Some(f) if f != id => alike[c] = false,
            Some(_) => {}
        }
    }
    alike
}

/// What `Topology::admits_host` reads of a pod (see
/// [`host_alike_classes`]).
#[derive(PartialEq, Eq, Hash)]
struct HostKey<'p> {
    namespace: &'p str,
    spreads: Vec<(&'p TopologySpreadConstraint, bool)>,
    anti_affinity: Vec<(&'p PodAffinityTerm, bool)>,
    preferred_anti_affinity: Vec<(&'p WeightedPodAffinityTerm, bool)>,
}

impl<'p> HostKey<'p> {
    /// Whether the pod has any hostname spread or anti-affinity term.
    fn constrains(&self) -> bool {
        !(self.spreads.is_empty()
            && self.anti_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty())
    }

    fn of(p: &'p Pod) -> Self {
        let on_host = |t: &PodAffinityTerm| t.topology_key == labels::HOSTNAME;
        let selects = |t: &PodAffinityTerm| t.selects(&p.namespace, &p.namespace, &p.labels);
        HostKey {
            namespace: &p.namespace,
            spreads: (p.topology_spread.iter())
                .filter(|c| c.topology_key == labels::HOSTNAME)
                .map(|c| (c, c.label_selector.matches(&p.labels)))
                .collect(),
            anti_affinity: (p.pod_anti_affinity.iter())
                .filter(|t| on_host(t))
                .map(|t| (t, selects(t)))
                .collect(),
            preferred_anti_affinity: (p.preferred_pod_anti_affinity.iter())
                .filter(|w| on_host(&w.term))
                .map(|w| (w, selects(&w.term)))
                .collect(),
        }
    }
}

/// Whether every topology spread of `pod` (if any) is on the hostname.
fn hostname_spreads_only(pod: &Pod) -> bool {
    (pod.topology_spread.iter()).all(|c| c.topology_key == labels::HOSTNAME)
}

impl Run<'_> {
    /// Indices of pool `pi`'s types compatible with `reqs`, cached: every
    /// pod of a Deployment asks the same question.
    pub(super) fn compatible_types(
        &self,
        pi: PoolIdx,
        reqs: &Requirements,
    ) -> std::rc::Rc<Vec<usize>> {
        let mut key = (pi, reqs.clone());
        key.1.remove(labels::HOSTNAME);
        if let Some(hit) = self.hints.compat_cache.borrow().get(&key) {
            return hit.clone();
        }
        let shared = self.hints.shared_compat;
        if let Some(hit) = shared.and_then(|c| c.borrow().get(&key).cloned()) {
            self.hints
                .compat_cache
                .borrow_mut()
                .insert(key, hit.clone());
            return hit;
        }
        let (pi, key) = key;
        let pool = &self.pools[pi];
        let filter = pool.filter(&key);
        // `intersects_ok` holds key by key: the cached per-requirement sets
        // answer it without testing every type's labels.
        let v: Vec<usize> = self
            .types_allowing(pi, &key)
            .iter()
            .filter(|&t| pool.types[t].has_offering(&filter))
            .collect();
        let v = std::rc::Rc::new(v);
        if let Some(c) = shared {
            c.borrow_mut().insert((pi, key.clone()), v.clone());
        }
        self.hints
            .compat_cache
            .borrow_mut()
            .insert((pi, key), v.clone());
        v
    }

    /// [`Self::compatible_types`] as a type set, cached per pool and
    /// requirements: the cost rule's answer before a trial reads a pod's
    /// types from it.
    pub(super) fn compatible_set(&self, pi: PoolIdx, reqs: &Requirements) -> Rc<TypeSet> {
        let sets = &self.hints.compat_sets;
        if let Some(hit) = sets.borrow().get(&pi).and_then(|by_reqs| by_reqs.get(reqs)) {
            return hit.clone();
        }
        let n = self.pools[pi].types.len();
        let set = Rc::new(TypeSet::from_indices(
            self.compatible_types(pi, reqs).iter().copied(),
            n,
        ));
        (sets.borrow_mut().entry(pi).or_default()).insert(reqs.clone(), set.clone());
        set
    }

    /// Those of `compatible` (a list [`Self::compatible_types`] gave for
    /// pool `pi`) that hold `requests`, pod `p`'s requests plus the pool's
    /// daemonsets. Cached per list and request class: new NodeClaims for
    /// pods of one kind ask the same question.
    pub(super) fn fitting_types(
        &self,
        pi: PoolIdx,
        p: PodIdx,
        compatible: &Rc<Vec<usize>>,
        requests: &Resources,
    ) -> Rc<Vec<usize>> {
        let key = (Rc::as_ptr(compatible) as usize, pi, self.hints.req_class(p));
        if let Some((_, hit)) = self.hints.fit_cache.borrow().get(&key) {
            return hit.clone();
        }
        let pool = &self.pools[pi];
        let compact = requests.compact_request();
        let v: Rc<Vec<usize>> = Rc::new(
            (compatible.iter().copied())
                .filter(|&i| pool.type_holds(i, requests, compact))
                .collect(),
        );
        (self.hints.fit_cache.borrow_mut()).insert(key, (compatible.clone(), v.clone()));
        v
    }

    /// Pool `pi`'s types whose labels intersect every requirement of
    /// `reqs` but hostname (from the cached sets of
    /// [`Self::types_intersecting`]). A NodeClaim keeps only types that
    /// intersect its requirements, and a pod only narrows them: what a
    /// trial leaves of a NodeClaim's types is within this set.
    pub(super) fn types_allowing(&self, pi: PoolIdx, reqs: &Requirements) -> TypeSet {
        let n = self.pools[pi].types.len();
        let mut set = TypeSet::from_indices(0..n, n);
        for r in reqs.iter().filter(|r| r.key != labels::HOSTNAME) {
            set = set.intersect(&self.types_intersecting(pi, r));
        }
        set
    }

    /// Pool `pi`'s types whose labels intersect `r`, cached.
    pub(super) fn types_intersecting(&self, pi: PoolIdx, r: &Requirement) -> std::rc::Rc<TypeSet> {
        let key = (pi, r.clone());
        if let Some(hit) = self.hints.req_type_cache.borrow().get(&key) {
            return hit.clone();
        }
        let single = Requirements::from_iter_reqs([r.clone()]);
        let types = &self.pools[pi].types;
        let set = std::rc::Rc::new(TypeSet::from_indices(
            (0..types.len()).filter(|&t| types[t].requirements.intersects_ok(&single)),
            types.len(),
        ));
        self.hints
            .req_type_cache
            .borrow_mut()
            .insert(key, set.clone());
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodTemplate;
    use crate::resources::Resources;
    use crate::Quantity;

    fn pod(cpu: i64) -> Pod {
        Pod::from(PodTemplate {
            requests: Resources::new().with("cpu", Quantity::from_millis(cpu)),
            ..PodTemplate::default()
        })
    }

    /// A walk class's NodeClaim list (one entry per NodeClaim planned) is
    /// dropped once its last pod is placed, not held to the end of the run.
    #[test]
    fn a_walk_class_list_goes_with_its_last_pod() {
        let pods = [pod(100), pod(100), pod(200)];
        let volume = vec![volumes::VolumeTerms::default(); pods.len()];
        let (compat, req_types) = (CompatCache::default(), ReqTypeCache::default());
        let mut hints = Hints::new(&pods, &volume, &compat, &req_types);
        let (p0, p1) = (PodIdx::new(0), PodIdx::new(1));
        let class = hints.walk_class(p0);
        assert_eq!(hints.walk_class(p1), class);
        let mut roomy = hints.take_roomy(class);
        roomy.sync(1_000);
        hints.put_roomy(class, roomy);
        hints.placed(p0);
        let kept = hints.take_roomy(class);
        assert_eq!(kept.list.len(), 1_000);
        hints.put_roomy(class, kept);
        hints.placed(p1);
        let left = hints.take_roomy(class);
        assert!(left.list.is_empty() && left.parked.is_empty() && left.synced == 0);
    }
}
