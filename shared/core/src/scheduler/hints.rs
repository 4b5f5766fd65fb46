//! Speed hints and caches: the scheduler's answers do not depend on them,
//! only how fast it finds them (pod classes, per-class hints, memoised lookups).

use crate::labels;
use crate::model::Pod;
use crate::requirements::{Requirement, Requirements};

use super::typeset::TypeSet;
use super::*;

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
        std::rc::Rc<Vec<(usize, f64, Vec<i64>)>>,
    >,
>;

/// (pool, one requirement) → the pool's types whose labels intersect it.
pub(super) type ReqTypeCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirement), std::rc::Rc<TypeSet>>>;

pub(super) type CompatCache =
    std::cell::RefCell<std::collections::HashMap<(usize, Requirements), std::rc::Rc<Vec<usize>>>>;

/// Groups pods by what the price of a node slot depends on (requests and
/// the NodePools and types they may use), ignoring labels: the unit of the
/// efficiency test in `Run::growth_pays`.
pub(super) fn size_classes(pods: &[Pod], volume: &[Requirements]) -> (Vec<usize>, usize) {
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
pub(super) fn request_classes(pods: &[Pod]) -> (Vec<usize>, usize) {
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
pub(super) fn shapes(pods: &[Pod], volume: &[Requirements]) -> (Vec<Option<usize>>, usize) {
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

impl Run<'_> {
    /// Indices of pool `pi`'s types compatible with `reqs`, cached: every
    /// pod of a Deployment asks the same question.
    pub(super) fn compatible_types(
        &self,
        pi: usize,
        reqs: &Requirements,
    ) -> std::rc::Rc<Vec<usize>> {
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
    pub(super) fn types_intersecting(&self, pi: usize, r: &Requirement) -> std::rc::Rc<TypeSet> {
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
}
