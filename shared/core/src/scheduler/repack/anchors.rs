//! NodeClaims that hold pods the repack may move beside pods it may not
//! (*anchors*), in runs with topology beyond zone spreads
//! (`Scope::UncountedPods`).
//!
//! The first pass mixes pods freely: a Deployment without constraints
//! fills the room a spreading pod's NodeClaim left, and narrows it on the
//! way (a preferred `amd64` keeps it off the cheaper `arm64` types). Such
//! a NodeClaim cannot be packed again as a whole, but its movable pods can
//! leave it and others can join it. An anchor is packed as one more pod
//! of its group (at most one anchor per node): its pods that stay, with
//! its name (their hostname), its zone and every requirement topology or
//! the NodePool put there, and its instance-type requirements derived
//! again from the NodePool and those pods. The movable pods join the
//! groups as a new NodeClaim for them would be (the NodePool's
//! requirements and their own, and the anchor's zone for a pod that moves
//! only within its zone).
//!
//! Every other movable pod joins the groups the same way, whatever
//! NodeClaim it is on (`with_anchors`). That repack is
//! kept per NodePool only when it costs less than the NodePool's
//! NodeClaims as planned.
//!
//! A NodeClaim is no anchor when its pods that stay hold host ports (the
//! packing does not check DaemonSets' ports), carry a hostname spread a
//! movable pod carries (see `Topology::closed_hostname_spreads`), or when
//! a required or preferred pod anti-affinity term of its pods that stay
//! selects a movable pod, or one of a movable pod selects them (a movable
//! pod must be free to join it).

use foldhash::HashMap;

use crate::labels;
use crate::model::PodAffinityTerm;
use crate::requirements::Requirements;
use crate::resources::Resources;

use super::super::index::{ClaimIdx, PodIdx, PoolIdx};
use super::super::pod_view;
use super::super::{Relaxation, Run};
use super::{anti_terms, Group, PodClass};

impl<'a> Run<'a> {
    /// The anchors (see the module documentation), in creation order: of
    /// each NodePool, those of the `ANCHOR_CLASSES` kinds (requirements
    /// and requests) that save most by shedding their movable pods.
    pub(super) fn anchors(&self, relax: &[Relaxation]) -> Vec<Anchor> {
        let mut kinds: HashMap<AnchorKind, KindShed> = HashMap::default();
        for c in self.anchor_candidates() {
            let pool = self.claims[c].pool;
            let reqs = self.anchor_requirements(c, relax);
            let requests = self.staying_requests(c);
            let alone = self.alone_price(pool, &reqs, &requests);
            let shed = self.claim_price(&self.claims[c]) - alone;
            let millis = requests
                .iter()
                .map(|(name, q)| (name.to_string(), q.millis()))
                .collect();
            let kind = kinds
                .entry(AnchorKind {
                    pool,
                    reqs,
                    requests: millis,
                })
                .or_default();
            kind.shed += shed.max(0.0);
            kind.claims.push(c);
        }
        let mut kinds: Vec<(AnchorKind, KindShed)> = kinds.into_iter().collect();
        kinds.sort_by(|(ka, a), (kb, b)| {
            (ka.pool.cmp(&kb.pool))
                .then(b.shed.total_cmp(&a.shed))
                .then(a.claims[0].cmp(&b.claims[0]))
        });
        let mut out = Vec::new();
        let mut taken: HashMap<PoolIdx, usize> = HashMap::default();
        for (kind, shed) in kinds {
            let n = taken.entry(kind.pool).or_default();
            if *n < ANCHOR_CLASSES {
                *n += 1;
                out.extend(shed.claims.into_iter().map(|claim| Anchor {
                    claim,
                    reqs: kind.reqs.clone(),
                }));
            }
        }
        out.sort_unstable_by_key(|a| a.claim);
        out
    }

    /// What pods needing `requests` cost alone on a node of pool `pi`
    /// with `reqs` (infinite when no type holds them).
    fn alone_price(&self, pi: PoolIdx, reqs: &Requirements, requests: &Resources) -> f64 {
        let pool = &self.pools[pi];
        let mut total = pool.daemon_overhead.clone();
        total.add_assign(requests);
        let compatible = self.compatible_types(pi, reqs);
        let filter = pool.filter(reqs);
        let holding = compatible
            .iter()
            .copied()
            .filter(|&t| total.fits_in(&pool.types[t].allocatable));
        self.set_price(pi, &filter, holding)
    }

    /// The requests of NodeClaim `c`'s pods that may not move.
    pub(super) fn staying_requests(&self, c: ClaimIdx) -> Resources {
        let mut requests = Resources::new();
        for p in self.staying(c) {
            requests.add_assign(&self.pods[p].requests);
        }
        requests
    }

    /// The NodeClaims that may be anchors, in creation order.
    fn anchor_candidates(&self) -> Vec<ClaimIdx> {
        let mixed: Vec<ClaimIdx> = ClaimIdx::enumerate(&self.claims)
            .filter(|(_, claim)| self.claim_repackable(claim))
            .filter(|(_, claim)| {
                let movable = claim
                    .pods
                    .iter()
                    .filter(|&&p| self.movable(claim, p))
                    .count();
                movable > 0 && movable < claim.pods.len()
            })
            .map(|(c, _)| c)
            .collect();
        if mixed.is_empty() {
            return mixed;
        }
        let movable = self.movable_signatures();
        let movable_terms = self.movable_anti_terms();
        let movable_spreads = self.movable_closed_spreads();
        mixed
            .into_iter()
            .filter(|&c| {
                self.staying(c).all(|p| {
                    let pod = &self.pods[p];
                    pod.host_ports.is_empty()
                        && !(self.closed_spreads_of(p).iter())
                            .any(|(gi, _)| movable_spreads.contains(gi))
                        && !anti_terms(pod).any(|t| {
                            movable
                                .iter()
                                .any(|(ns, l)| t.selects(&pod.namespace, ns, l))
                        })
                        && !movable_terms
                            .iter()
                            .any(|(ns, t)| t.selects(ns, &pod.namespace, &pod.labels))
                })
            })
            .collect()
    }

    /// The pods of NodeClaim `c` that may not move.
    pub(super) fn staying(&self, c: ClaimIdx) -> impl Iterator<Item = PodIdx> + use<'_, 'a> {
        let claim = &self.claims[c];
        claim
            .pods
            .iter()
            .copied()
            .filter(|&p| !self.movable(claim, p))
    }

    /// The distinct (namespace, labels) of the run's movable pods.
    fn movable_signatures(&self) -> Vec<(&str, &std::collections::BTreeMap<String, String>)> {
        let mut seen = std::collections::BTreeSet::new();
        for claim in &self.claims {
            for &p in claim.pods.iter().filter(|&&p| self.movable(claim, p)) {
                let pod = &self.pods[p];
                seen.insert((pod.namespace.as_str(), &pod.labels));
            }
        }
        seen.into_iter().collect()
    }

    /// The closed hostname spreads (see `Topology::closed_hostname_spreads`)
    /// the run's movable pods carry, by topology group. Every pod such a
    /// spread counts carries it, so a staying pod that carries one would
    /// share its anchor's node with movable pods it counts.
    fn movable_closed_spreads(&self) -> std::collections::BTreeSet<usize> {
        let mut out = std::collections::BTreeSet::new();
        for claim in &self.claims {
            for &p in claim.pods.iter().filter(|&&p| self.movable(claim, p)) {
                out.extend(self.closed_spreads_of(p).into_iter().map(|(gi, _)| gi));
            }
        }
        out
    }

    /// The distinct anti-affinity terms of the run's movable pods, with
    /// their namespace.
    fn movable_anti_terms(&self) -> Vec<(&str, &PodAffinityTerm)> {
        let mut out: Vec<(&str, &PodAffinityTerm)> = Vec::new();
        for claim in &self.claims {
            for &p in claim.pods.iter().filter(|&&p| self.movable(claim, p)) {
                let pod = &self.pods[p];
                for t in anti_terms(pod) {
                    if !out.iter().any(|(ns, o)| *ns == pod.namespace && *o == t) {
                        out.push((pod.namespace.as_str(), t));
                    }
                }
            }
        }
        out
    }

    /// `groups` with the anchors and their movable pods added: each anchor
    /// to the group of its NodePool and requirements (hostname aside), each
    /// movable pod to the group of its NodePool whose requirements are the
    /// NodePool's and its own (new groups where there are none); so do the
    /// pods of `groups` (NodeClaims whose every pod is movable). Every
    /// group must then be packed (its planned price is infinite).
    pub(super) fn with_anchors(
        &self,
        groups: &[Group],
        anchors: &[Anchor],
        relax: &[Relaxation],
    ) -> Vec<Group> {
        let mut out = groups.to_vec();
        let mut index: HashMap<(PoolIdx, Requirements), usize> = out
            .iter()
            .enumerate()
            .map(|(gi, g)| ((g.pool, g.reqs.clone()), gi))
            .collect();
        let mut group_of = |out: &mut Vec<Group>, pi: PoolIdx, reqs: Requirements| {
            let gi = *index.entry((pi, reqs.clone())).or_insert_with(|| {
                out.push(Group {
                    pool: pi,
                    reqs,
                    members: Vec::new(),
                    pods: Vec::new(),
                    old: f64::INFINITY,
                    anchors: Vec::new(),
                });
                out.len() - 1
            });
            gi
        };
        for g in &mut out {
            g.pods.clear();
            g.old = f64::INFINITY;
        }
        let whole = groups
            .iter()
            .flat_map(|g| g.members.iter().map(|&c| (c, None)));
        let claims = whole.chain(anchors.iter().map(|a| (a.claim, Some(&a.reqs))));
        let mut moved: HashMap<MovedKey, usize> = HashMap::default();
        for (c, anchor_reqs) in claims {
            let claim = &self.claims[c];
            if let Some(reqs) = anchor_reqs {
                let gi = group_of(&mut out, claim.pool, reqs.clone());
                out[gi].anchors.push(c);
            }
            // Each movable pod to the group of its own requirements, found
            // once per `MovedKey`.
            for &p in claim.pods.iter().filter(|&&p| self.movable(claim, p)) {
                let key = self.moved_key(c, p, &relax[p]);
                let gi = *moved.entry(key).or_insert_with(|| {
                    let reqs = self.moved_requirements(c, p, relax);
                    group_of(&mut out, claim.pool, reqs)
                });
                out[gi].pods.push(p);
            }
        }
        for g in &mut out {
            g.pods.sort_unstable();
        }
        out
    }

    /// The requirements of anchor `c` (hostname aside): its instance-type
    /// requirements on keys no topology term uses derived again from its
    /// NodePool and its pods that stay (as relaxed), the rest as planned.
    fn anchor_requirements(&self, c: ClaimIdx, relax: &[Relaxation]) -> Requirements {
        let claim = &self.claims[c];
        let rederived =
            |key: &str| labels::is_instance_type_label(key) && !self.topology.uses_key(key);
        let mut derived = self.pools[claim.pool].requirements.clone();
        for p in self.staying(c) {
            derived.add_all(&pod_view::node_requirements(
                &self.pods[p],
                &self.volume[p],
                &relax[p],
            ));
        }
        let mut reqs = Requirements::new();
        for r in claim.requirements.iter().filter(|r| !rederived(&r.key)) {
            reqs.add(r.clone());
        }
        for r in derived.iter().filter(|r| rederived(&r.key)) {
            reqs.add(r.clone());
        }
        reqs.remove(labels::HOSTNAME);
        reqs
    }

    /// The requirements of movable pod `p` of NodeClaim `c` in the repack:
    /// its own (`fresh_requirements`), and `c`'s zone when it moves within
    /// its zone only (see `zone_bound`).
    fn moved_requirements(&self, c: ClaimIdx, p: PodIdx, relax: &[Relaxation]) -> Requirements {
        let claim = &self.claims[c];
        let mut reqs = self.fresh_requirements(claim.pool, p, &relax[p]);
        if !self.moves_anywhere(p) {
            if let Some(zone) = claim.requirements.get(labels::ZONE) {
                reqs.add(zone.clone());
            }
        }
        reqs
    }

    /// What `moved_requirements` of movable pod `p` of NodeClaim `c`
    /// depends on (see `MovedKey`).
    fn moved_key<'r>(&'r self, c: ClaimIdx, p: PodIdx, relax: &Relaxation) -> MovedKey<'r> {
        let claim = &self.claims[c];
        let zone = if self.moves_anywhere(p) {
            None
        } else {
            claim.requirements.get(labels::ZONE)
        };
        MovedKey {
            pool: claim.pool,
            size: self.hints.size_class(p),
            required_term: relax.required_term,
            dropped_preferred_node: relax.dropped_preferred_node,
            zone,
        }
    }

    /// The requirements of a new NodeClaim of pool `pi` for pod `p` alone
    /// (hostname aside): the NodePool's and the pod's, as relaxed.
    fn fresh_requirements(&self, pi: PoolIdx, p: PodIdx, relax: &Relaxation) -> Requirements {
        let mut reqs = self.pools[pi].requirements.clone();
        reqs.add_all(&pod_view::node_requirements(
            &self.pods[p],
            &self.volume[p],
            relax,
        ));
        reqs.remove(labels::HOSTNAME);
        reqs
    }

    /// `classes` with classes of `anchors` (each with its requirement
    /// set's index) added, anchors of one set and equal requests in one,
    /// in the packing's order.
    pub(super) fn add_anchor_classes(
        &self,
        classes: &mut Vec<PodClass>,
        anchors: &[(ClaimIdx, usize)],
    ) {
        if anchors.is_empty() {
            return;
        }
        let first_anchor = classes.len();
        for &(c, family) in anchors {
            let requests = self.staying_requests(c);
            let same = classes[first_anchor..]
                .iter()
                .position(|k| k.family == family && k.requests == requests);
            match same {
                Some(k) => classes[first_anchor + k].anchors.push(c),
                None => classes.push(PodClass {
                    requests,
                    family,
                    anchors: vec![c],
                    anti: 0,
                    self_anti: false,
                    spreads: Vec::new(),
                    pods: Vec::new(),
                    per_node: 1,
                }),
            }
        }
        super::sort_classes(classes);
    }
}

/// An anchor and its requirements (hostname aside, see
/// `anchor_requirements`).
pub(super) struct Anchor {
    pub(super) claim: ClaimIdx,
    pub(super) reqs: Requirements,
}

/// Anchors that pack alike: one NodePool, requirements and requests.
#[derive(PartialEq, Eq, Hash)]
struct AnchorKind {
    pool: PoolIdx,
    reqs: Requirements,
    /// Millis per requested resource.
    requests: Vec<(String, i64)>,
}

/// The anchors of a kind and what they save together by shedding their
/// movable pods.
#[derive(Default)]
struct KindShed {
    shed: f64,
    claims: Vec<ClaimIdx>,
}

/// Most kinds of anchors (requirements and requests: each a class of the
/// packing) per NodePool: the packing's work grows with its classes.
const ANCHOR_CLASSES: usize = 24;

/// What a movable pod's requirements in the repack depend on (see
/// `Run::moved_requirements`): its NodePool, its size class (which holds
/// its node selector, node affinity terms and volumes) at its relaxation's
/// required and preferred node terms, and the zone of its NodeClaim when
/// it moves within that zone only.
#[derive(PartialEq, Eq, Hash)]
struct MovedKey<'r> {
    pool: PoolIdx,
    size: usize,
    required_term: usize,
    dropped_preferred_node: usize,
    zone: Option<&'r crate::requirements::Requirement>,
}
