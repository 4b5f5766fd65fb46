//! Speed hints and caches: pod classes, per-class hints, memoised lookups.
//! The caches are exact; the walk's hints (roomy lists, spread hints) are
//! heuristics that can change which planned NodeClaim a pod joins (see
//! `docs/scheduling.md`, "How trials stay cheap").

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use crate::labels;
use crate::model::{Pod, PodAffinityTerm, PreferredNodeTerm, Toleration, WeightedPodAffinityTerm};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::explain::Refusal;
use super::nodeclaim::{ZoneMask, ZonePin};
use super::typeset::TypeSet;
use super::volumes;
use super::{Relaxation, Run};

/// Per zone bucket (see `ZonePin::bucket`), the first NodeClaim worth
/// trying (see `Hints::spread_hint`).
pub(super) type SpreadHint = Box<[u32; ZonePin::BUCKETS]>;

/// Pod classes and what the run remembers about them, and caches of
/// answers that depend only on a NodePool and requirements (see the module
/// documentation); the size classes and their counts feed the cost rule's
/// look-ahead.
pub(super) struct Hints<'a> {
    /// Equivalence class of each pod (identical requests and constraints),
    /// for pods whose placement outcomes only get worse as nodes fill (no
    /// spread or affinity): `None` for the others.
    pub(super) shape: Vec<Option<usize>>,
    /// Per shape: the first existing node / NodeClaim worth trying. Nodes
    /// before it rejected a pod of this shape for reasons that only harden.
    pub(super) existing_hint: Vec<usize>,
    pub(super) claim_hint: Vec<usize>,
    /// Per shape: the relaxation the hints were gathered at.
    pub(super) hint_relax: Vec<Relaxation>,
    /// Size class of each pod (see `size_classes`), and per class the pods
    /// not placed yet.
    pub(super) size: Vec<usize>,
    pub(super) size_left: Vec<usize>,
    /// Per shape: the solo price (see `solo_price`).
    pub(super) solo_cache: Vec<Option<Option<f64>>>,
    /// Types of a pool compatible with requirements (hostname excluded).
    pub(super) compat_cache: CompatCache,
    /// See [`ReqTypeCache`]: a candidate NodeClaim's types are narrowed by
    /// bit sets, not by testing each type's labels. Shared by the runs of
    /// one [`super::Prepared`]: a type's labels never change.
    pub(super) req_type_cache: &'a ReqTypeCache,
    /// Repack candidates per (pool, requirements, dimensions), see
    /// `Run::candidates`.
    pub(super) cand_cache: CandCache,
    /// (pool, requirements without hostname) → why no type is compatible.
    pub(super) no_type_reasons:
        std::cell::RefCell<std::collections::HashMap<(usize, Requirements), Refusal<'a>>>,
    /// (pool, shape) → best price per pod slot (see `best_slot_price`).
    pub(super) slot_cache:
        std::cell::RefCell<std::collections::HashMap<(usize, usize), Option<f64>>>,
    /// Class of each pod by its requests alone, and per class the
    /// NodeClaims that may still have room for such a pod (see `Roomy`).
    pub(super) req_class: Vec<usize>,
    pub(super) roomy: Vec<Roomy>,
    /// Per size class, for pods without a shape (spread, pod affinity) at
    /// no relaxation: per zone bucket (see `ZonePin::bucket`), the first
    /// NodeClaim not known to refuse such a pod for reasons that only
    /// harden (no room, the cost rule). Topology refusals do not count.
    pub(super) spread_hint: Vec<Option<SpreadHint>>,
    /// Every zone mask a NodeClaim of the run has had (see `commit`): a
    /// pod topology refuses on all of them fits no NodeClaim.
    pub(super) zone_masks: Vec<ZoneMask>,
    /// Bumped when a reservation runs out (see `JoinMemo`).
    pub(super) epoch: u32,
    /// [`Self::compat_cache`] shared by the runs of one
    /// [`super::Prepared`], used while no reservation ran out in this run
    /// (the NodePools' offerings are still the prepared ones).
    pub(super) shared_compat: Option<&'a CompatCache>,
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
        let (req_class, n_req_classes) = request_classes(pods);
        let mut size_left = vec![0; n_sizes];
        for s in &size {
            size_left[*s] += 1;
        }
        Hints {
            shape,
            existing_hint: vec![0; n_shapes],
            claim_hint: vec![0; n_shapes],
            hint_relax: vec![Relaxation::default(); n_shapes],
            size,
            size_left,
            solo_cache: vec![None; n_shapes],
            compat_cache: Default::default(),
            req_type_cache,
            cand_cache: Default::default(),
            no_type_reasons: Default::default(),
            slot_cache: Default::default(),
            req_class,
            roomy: (0..n_req_classes).map(|_| Roomy::default()).collect(),
            spread_hint: vec![None; n_sizes],
            zone_masks: Vec::new(),
            epoch: 0,
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
                self.claim_hint[s] = 0;
                self.solo_cache[s] = None;
            }
        }
    }

    /// Pod `p` is placed: one fewer of its size class waits.
    #[inline]
    pub(super) fn placed(&mut self, p: usize) {
        let size = self.size[p];
        self.size_left[size] = self.size_left[size].saturating_sub(1);
    }

    /// Offerings were switched off (a reservation ran out): the caches
    /// that depend on offerings are dropped.
    pub(super) fn offerings_changed(&mut self) {
        self.compat_cache.borrow_mut().clear();
        self.no_type_reasons.borrow_mut().clear();
        self.slot_cache.borrow_mut().clear();
        self.solo_cache.iter_mut().for_each(|c| *c = None);
        self.spread_hint.iter_mut().for_each(|h| *h = None);
        self.epoch = self.epoch.wrapping_add(1);
        self.shared_compat = None;
    }
}

/// NodeClaims (ascending) not yet known to be too full for pods of one
/// request vector. A NodeClaim's requests only grow and its largest
/// allocatable only shrinks, so one found too full stays too full: it is
/// marked dead and skipped from then on (compacted when half are dead).
#[derive(Default)]
pub(super) struct Roomy {
    pub(super) list: Vec<u32>,
    pub(super) dead: Vec<bool>,
    /// The zone bit each NodeClaim is pinned to, once seen pinned (0: not
    /// known to be pinned). A pinned NodeClaim stays pinned to its zone, so
    /// the spread pre-check can skip it without touching it.
    pub(super) pins: Vec<u64>,
    pub(super) n_dead: usize,
    /// NodeClaims `0..synced` are in `list` (or were dropped as full).
    pub(super) synced: usize,
}

impl Roomy {
    pub(super) fn sync(&mut self, claims: usize) {
        for c in self.synced..claims {
            self.list.push(c as u32);
            self.dead.push(false);
            self.pins.push(0);
        }
        self.synced = self.synced.max(claims);
    }

    pub(super) fn kill(&mut self, k: usize) {
        self.dead[k] = true;
        self.n_dead += 1;
    }

    pub(super) fn compact(&mut self) {
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

/// (pool, requirements without hostname) → compatible type indices.
pub(super) type CandCache = std::cell::RefCell<
    std::collections::HashMap<
        (usize, Requirements, Vec<String>),
        std::rc::Rc<Vec<super::repack::PackType>>,
    >,
>;

/// (pool, one requirement) → the pool's types whose labels intersect it.
pub(super) type ReqTypeCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirement), std::rc::Rc<TypeSet>>>;

pub(super) type CompatCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirements), std::rc::Rc<Vec<usize>>>>;

/// What the price of a node slot for a pod depends on (see
/// [`size_classes`]), borrowed from the pod.
#[derive(PartialEq, Eq, Hash)]
struct SizeKey<'p> {
    requests: &'p Resources,
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
            node_selector: &p.node_selector,
            required_terms: &p.required_terms,
            preferred_terms: &p.preferred_terms,
            tolerations: &p.tolerations,
            volume,
        }
    }
}

/// Everything a monotonic pod's placements depend on (see [`shapes`]):
/// its size key, host ports, and what anti-affinity reads of it.
#[derive(PartialEq, Eq, Hash)]
struct ShapeKey<'p> {
    size: SizeKey<'p>,
    host_ports: &'p [(String, i32)],
    namespace: &'p str,
    labels: &'p BTreeMap<String, String>,
    pod_anti_affinity: &'p [PodAffinityTerm],
    preferred_pod_anti_affinity: &'p [WeightedPodAffinityTerm],
}

/// Numbers the distinct keys in order of first appearance: each item's
/// class, and the number of classes.
fn classes<K: Eq + Hash>(keys: impl Iterator<Item = Option<K>>) -> (Vec<Option<usize>>, usize) {
    let mut ids: HashMap<K, usize> = HashMap::new();
    let out = keys
        .map(|k| {
            k.map(|k| {
                let n = ids.len();
                *ids.entry(k).or_insert(n)
            })
        })
        .collect();
    (out, ids.len())
}

/// Groups pods by what the price of a node slot depends on (requests and
/// the NodePools and types they may use), ignoring labels: the unit of the
/// efficiency test in `Run::growth_pays`.
pub(super) fn size_classes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<usize>, usize) {
    let (ids, n) = classes(
        pods.iter()
            .zip(volume)
            .map(|(p, v)| Some(SizeKey::of(p, v))),
    );
    (ids.into_iter().flatten().collect(), n)
}

/// Groups pods by their requests alone; see `Run::roomy`.
pub(super) fn request_classes(pods: &[Pod]) -> (Vec<usize>, usize) {
    let (ids, n) = classes(pods.iter().map(|p| Some(&p.requests)));
    (ids.into_iter().flatten().collect(), n)
}

/// Groups pods into shapes; see `Run::shape`. Pods with spread or pod
/// affinity have none.
pub(super) fn shapes(pods: &[Pod], volume: &[volumes::VolumeTerms]) -> (Vec<Option<usize>>, usize) {
    classes(pods.iter().zip(volume).map(|(p, v)| {
        let monotonic = p.topology_spread.is_empty()
            && p.pod_affinity.is_empty()
            && p.preferred_pod_affinity.is_empty();
        monotonic.then(|| ShapeKey {
            size: SizeKey::of(p, v),
            host_ports: &p.host_ports,
            namespace: &p.namespace,
            labels: &p.labels,
            pod_anti_affinity: &p.pod_anti_affinity,
            preferred_pod_anti_affinity: &p.preferred_pod_anti_affinity,
        })
    }))
}

impl Run<'_> {
    /// Indices of pool `pi`'s types compatible with `reqs`, cached: every
    /// pod of a Deployment asks the same question.
    pub(super) fn compatible_types(
        &self,
        pi: usize,
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

    /// Pool `pi`'s types whose labels intersect every requirement of
    /// `reqs` but hostname (from the cached sets of
    /// [`Self::types_intersecting`]). A NodeClaim keeps only types that
    /// intersect its requirements, and a pod only narrows them: what a
    /// trial leaves of a NodeClaim's types is within this set.
    pub(super) fn types_allowing(&self, pi: usize, reqs: &Requirements) -> TypeSet {
        let n = self.pools[pi].types.len();
        let mut set = TypeSet::from_indices(0..n, n);
        for r in reqs.iter().filter(|r| r.key != labels::HOSTNAME) {
            set = set.intersect(&self.types_intersecting(pi, r));
        }
        set
    }

    /// Pool `pi`'s types whose labels intersect `r`, cached.
    pub(super) fn types_intersecting(&self, pi: usize, r: &Requirement) -> std::rc::Rc<TypeSet> {
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
