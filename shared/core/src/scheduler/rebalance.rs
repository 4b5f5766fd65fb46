//! Zone moves before the repack: pods that spread over zones were given a
//! zone one by one (the least loaded, ties to the first), so the replicas
//! a zone gets beyond an even share all land in the first zones whatever
//! they pack into there. Here pods move between the zone-pinned NodeClaim
//! groups of one NodePool and one set of requirements (a *family*) while
//! that packs cheaper, as long as every spread constraint that counts them
//! stays satisfied:
//!
//! * pods are taken by *class* (same requests, labels, namespace, required
//!   anti-affinity and allowed zones: interchangeable for the packing and
//!   for every topology count);
//! * a move is one pod of a class from zone A to zone B, or a swap (one of
//!   class k from A to B and one of class l back); each is priced by
//!   packing both zones again ([`Effort::Estimate`]: the exact packing
//!   of few pods held to less work; the result is packed in full before
//!   it is taken) and the best gain is taken until none is left;
//! * a move is allowed when, for every spread group that counts the pod and
//!   every set of zones its owners may use, the skew (most in a zone less
//!   fewest, fewest 0 under `minDomains`) stays within `maxSkew` or does
//!   not grow; a pod only goes to zones its own node requirements allow
//!   (as relaxed when it was scheduled).
//!
//! Families of more than `FAMILY_PODS` pods or `FAMILY_CLASSES` classes are
//! left alone (each step packs two zones again, for every class and pair
//! of zones), and so is the search past `EVALUATIONS` packings.

use std::collections::{BTreeMap, HashMap};

use crate::labels;
use crate::requirements::Requirements;

use super::index::{PodIdx, PoolIdx};
use super::pod_view::{self, Relaxation};
use super::repack::{Effort, Group, Packing};
use super::{Run, ZonePin};

/// Most pods in a family whose zones are searched.
const FAMILY_PODS: usize = 400;

/// Most classes in a family whose zones are searched.
const FAMILY_CLASSES: usize = 32;

/// Most packings priced per family.
const EVALUATIONS: usize = 1_000;

/// Most ways to spread every class tried one by one (see `exhaustive`).
const EXACT_WAYS: usize = 20_000;

/// Most ways to put one class's pods into the zones before its spread
/// constraints are checked.
const CLASS_WAYS: usize = 5_000;

/// Pods of one class in a family.
struct Class {
    /// The pods, ascending.
    pods: Vec<PodIdx>,
    /// Per zone of the family: whether the pods may go there.
    allowed: Vec<bool>,
    /// Spread groups (on the zone) that count these pods.
    counted_by: Vec<usize>,
}

/// A spread group the moves may change: counts per zone, the zone sets its
/// owners may use, and its limits.
struct Spread {
    counts: BTreeMap<String, i64>,
    owner_zones: Vec<Vec<String>>,
    max_skew: i64,
    min_domains: Option<u32>,
}

impl Spread {
    /// Most pods in a zone of `zones` less the fewest (0 when fewer zones
    /// than `minDomains` are eligible).
    fn skew(&self, zones: &[String], delta: &[(&str, i64)]) -> i64 {
        let count = |z: &str| {
            self.counts.get(z).copied().unwrap_or(0)
                + delta
                    .iter()
                    .filter(|(d, _)| *d == z)
                    .map(|(_, n)| n)
                    .sum::<i64>()
        };
        let max = zones.iter().map(|z| count(z)).max().unwrap_or(0);
        let few = self.min_domains.is_some_and(|m| zones.len() < m as usize);
        let min = if few {
            0
        } else {
            zones.iter().map(|z| count(z)).min().unwrap_or(0)
        };
        max - min
    }

    /// Whether the counts changed by `delta` keep every owner's skew
    /// within `maxSkew`, or no worse than it was.
    fn allows(&self, delta: &[(&str, i64)]) -> bool {
        self.owner_zones.iter().all(|zones| {
            let after = self.skew(zones, delta);
            after <= self.max_skew || after <= self.skew(zones, &[])
        })
    }
}

/// One step of the search: (class, from, to) moves.
type Step = Vec<(usize, usize, usize)>;

/// A NodeClaim group of a family, pinned to one zone.
struct FamilyMember {
    zone: String,
    /// Index of the group.
    group: usize,
}

/// A zone's pods after the moves, and how they pack.
struct ZonePods {
    pods: Vec<PodIdx>,
    packing: Packing,
}

/// One family's pods by class: its groups (one per zone) and how many pods
/// of each class every zone holds as planned.
struct Family<'f> {
    groups: &'f [Group],
    members: &'f [FamilyMember],
    /// The members' zones.
    zones: Vec<&'f str>,
    classes: Vec<Class>,
    /// `held[zone][class]`.
    held: Vec<Vec<usize>>,
}

/// The step of a search round with the best gain, and the counts after it.
struct BestStep {
    gain: f64,
    /// Index of the step.
    step: usize,
    counts: Vec<Vec<usize>>,
}

/// Prices of a family's zones per class counts, cached; the counts as
/// planned are worth what the plan's NodeClaims cost, if less than a new
/// packing.
struct ZonePrices<'f, 'r> {
    run: &'f Run<'r>,
    family: &'f Family<'f>,
    cache: HashMap<(usize, Vec<usize>), f64>,
    /// Packings made so far.
    evaluations: usize,
}

impl Run<'_> {
    /// See the module documentation. Groups whose pods change get their
    /// new packing in `packed` and are marked in `moved`.
    pub(super) fn rebalance_zones(
        &self,
        groups: &mut [Group],
        packed: &mut [Option<Packing>],
        moved: &mut [bool],
        relax: &[Relaxation],
    ) {
        let Some(zone_list) = self.pools.first().map(|p| &p.zones) else {
            return;
        };
        // Families: (pool, requirements but the zone) → groups pinned to
        // one zone each.
        let mut index: HashMap<(PoolIdx, Requirements), usize> = HashMap::new();
        let mut families: Vec<Vec<FamilyMember>> = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            if matches!(ZonePin::of(&g.reqs, zone_list), ZonePin::Free) {
                continue;
            }
            let Some(zone) = g
                .reqs
                .get(labels::ZONE)
                .and_then(|r| r.values().iter().next().cloned())
            else {
                continue;
            };
            let mut key = g.reqs.clone();
            key.remove(labels::ZONE);
            let f = *index.entry((g.pool, key)).or_insert_with(|| {
                families.push(Vec::new());
                families.len() - 1
            });
            families[f].push(FamilyMember { zone, group: gi });
        }
        for members in families {
            if members.len() < 2 {
                continue;
            }
            let total: usize = members.iter().map(|m| groups[m.group].pods.len()).sum();
            if total > FAMILY_PODS {
                continue;
            }
            if let Some(new) = self.search_family(groups, &members, relax) {
                for (m, zone) in members.iter().zip(new) {
                    if zone.pods != groups[m.group].pods {
                        groups[m.group].pods = zone.pods;
                        moved[m.group] = true;
                        packed[m.group] = Some(zone.packing);
                    }
                }
            }
        }
    }

    /// The search over one family (`members`: one group per zone). `Some`
    /// with each zone's new pods and packing when moves pay.
    fn search_family(
        &self,
        groups: &[Group],
        members: &[FamilyMember],
        relax: &[Relaxation],
    ) -> Option<Vec<ZonePods>> {
        let family = self.family(groups, members, relax)?;
        // Nothing can move: every class allowed in one zone only.
        if family
            .classes
            .iter()
            .all(|c| c.allowed.iter().filter(|a| **a).count() < 2)
        {
            return None;
        }
        let mut spreads = self.family_spreads(&family.classes, relax);
        let counts = {
            let mut prices = ZonePrices {
                run: self,
                family: &family,
                cache: HashMap::new(),
                evaluations: 0,
            };
            prices.cheapest_counts(&mut spreads)
        };
        if counts == family.held {
            return None;
        }
        self.realize(family, &counts)
    }

    /// The classes of a family's pods and how many of each every zone
    /// holds; `None` past `FAMILY_CLASSES` classes.
    fn family<'f>(
        &self,
        groups: &'f [Group],
        members: &'f [FamilyMember],
        relax: &[Relaxation],
    ) -> Option<Family<'f>> {
        let zones: Vec<&str> = members.iter().map(|m| m.zone.as_str()).collect();
        let mut classes: Vec<Class> = Vec::new();
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); members.len()];
        for (zi, m) in members.iter().enumerate() {
            for &p in &groups[m.group].pods {
                let allowed = self.allowed_zones(p, relax, &zones);
                let k = match classes.iter().position(|c| self.in_class(c, p, &allowed)) {
                    Some(k) => k,
                    None => {
                        if classes.len() == FAMILY_CLASSES {
                            return None;
                        }
                        classes.push(Class {
                            pods: vec![],
                            allowed,
                            counted_by: self.topology.spread_selecting(labels::ZONE, &self.pods[p]),
                        });
                        held.iter_mut().for_each(|h| h.push(0));
                        classes.len() - 1
                    }
                };
                classes[k].pods.push(p);
                held[zi][k] += 1;
            }
        }
        for c in &mut classes {
            c.pods.sort_unstable();
        }
        Some(Family {
            groups,
            members,
            zones,
            classes,
            held,
        })
    }

    /// Per zone of `zones`: whether pod `p`'s node requirements (as
    /// relaxed when it was scheduled) allow it.
    fn allowed_zones(&self, p: PodIdx, relax: &[Relaxation], zones: &[&str]) -> Vec<bool> {
        let zone_req = pod_view::node_requirements(&self.pods[p], &self.volume[p], &relax[p])
            .get(labels::ZONE)
            .cloned();
        zones
            .iter()
            .map(|z| zone_req.as_ref().is_none_or(|r| r.has(z)))
            .collect()
    }

    /// Whether pod `p`, allowed in the zones `allowed`, is interchangeable
    /// with the pods of class `c`.
    fn in_class(&self, c: &Class, p: PodIdx, allowed: &[bool]) -> bool {
        let pod = &self.pods[p];
        let q = &self.pods[c.pods[0]];
        self.hints.req_class(c.pods[0]) == self.hints.req_class(p)
            && q.namespace == pod.namespace
            && q.labels == pod.labels
            && q.pod_anti_affinity == pod.pod_anti_affinity
            && c.allowed == allowed
    }

    /// The spread groups (on the zone) that count the family's `classes`,
    /// with their owners' zone sets.
    fn family_spreads(&self, classes: &[Class], relax: &[Relaxation]) -> BTreeMap<usize, Spread> {
        let mut spreads: BTreeMap<usize, Spread> = BTreeMap::new();
        for c in classes {
            for &g in &c.counted_by {
                spreads.entry(g).or_insert_with(|| {
                    let v = self.topology.spread_view(g);
                    Spread {
                        counts: v
                            .counts
                            .iter()
                            .map(|(z, n)| (z.clone(), *n as i64))
                            .collect(),
                        owner_zones: vec![],
                        max_skew: v.max_skew as i64,
                        min_domains: v.min_domains,
                    }
                });
            }
        }
        if !spreads.is_empty() {
            self.add_owner_zones(&mut spreads, relax);
        }
        spreads
    }

    /// Adds to each of `spreads` the zones each owner of the group may use
    /// (each distinct set once, in the order of the pods).
    fn add_owner_zones(&self, spreads: &mut BTreeMap<usize, Spread>, relax: &[Relaxation]) {
        for (p, owned) in self.groups.iter().enumerate() {
            for &g in &owned.spread {
                let Some(s) = spreads.get_mut(&g) else {
                    continue;
                };
                let v = self.topology.spread_view(g);
                let pod_zones = if v.honor_affinity {
                    pod_view::node_requirements(&self.pods[p], &self.volume[p], &relax[p])
                        .get(labels::ZONE)
                        .cloned()
                } else {
                    None
                };
                let eligible: Vec<String> = s
                    .counts
                    .keys()
                    .filter(|z| pod_zones.as_ref().is_none_or(|r| r.has(z)))
                    .cloned()
                    .collect();
                if !s.owner_zones.contains(&eligible) {
                    s.owner_zones.push(eligible);
                }
            }
        }
    }

    /// Real pods and their packing per zone for the new `counts`; `None`
    /// unless the whole packs cheaper than as planned.
    fn realize(&self, mut family: Family, counts: &[Vec<usize>]) -> Option<Vec<ZonePods>> {
        let out = family.assign_pods(counts)?;
        let mut result = Vec::with_capacity(family.zones.len());
        for (zi, pods) in out.into_iter().enumerate() {
            let g = &family.groups[family.members[zi].group];
            let packing = self.pack_pods(g.pool, &g.reqs, &pods, Effort::Full)?;
            result.push(ZonePods { pods, packing });
        }
        // The real pods pack as their representatives did; only a cheaper
        // whole is taken.
        let new: f64 = result.iter().map(|z| z.packing.cost).sum();
        let old: f64 = family
            .members
            .iter()
            .map(|m| family.groups[m.group].old)
            .sum();
        (new < old - 1e-9).then_some(result)
    }
}

impl Family<'_> {
    /// Real pods per zone for `counts` (ascending): each zone keeps the
    /// pods it had, as far as its count goes; the rest go where counts
    /// grew. `held` becomes what each zone kept.
    fn assign_pods(&mut self, counts: &[Vec<usize>]) -> Option<Vec<Vec<PodIdx>>> {
        let classes = &self.classes;
        let mut spare: Vec<Vec<PodIdx>> = vec![Vec::new(); classes.len()];
        let mut out: Vec<Vec<PodIdx>> = vec![Vec::new(); self.zones.len()];
        for (zi, m) in self.members.iter().enumerate() {
            let mut kept = vec![0usize; classes.len()];
            for &p in &self.groups[m.group].pods {
                let k = classes
                    .iter()
                    .position(|c| c.pods.binary_search(&p).is_ok())?;
                if kept[k] < counts[zi][k] {
                    kept[k] += 1;
                    out[zi].push(p);
                } else {
                    spare[k].push(p);
                }
            }
            for (k, n) in kept.iter().enumerate() {
                self.held[zi][k] = *n;
            }
        }
        for (zi, pods) in out.iter_mut().enumerate() {
            for (k, spare) in spare.iter_mut().enumerate() {
                for _ in self.held[zi][k]..counts[zi][k] {
                    pods.push(spare.pop()?);
                }
            }
            pods.sort_unstable();
        }
        Some(out)
    }

    /// Moves the family's pods in `spreads` from where they are held to
    /// `counts`.
    fn shift_spreads(&self, spreads: &mut BTreeMap<usize, Spread>, counts: &[Vec<usize>]) {
        for (k, c) in self.classes.iter().enumerate() {
            for (zi, z) in self.zones.iter().enumerate() {
                let d = counts[zi][k] as i64 - self.held[zi][k] as i64;
                shift(spreads, c, z, d);
            }
        }
    }

    /// Whether `step` keeps every spread group that counts the moved pods
    /// within its limits (see the module documentation).
    fn step_allowed(&self, step: &Step, spreads: &BTreeMap<usize, Spread>) -> bool {
        let mut deltas: BTreeMap<usize, Vec<(&str, i64)>> = BTreeMap::new();
        for &(k, a, b) in step {
            for &g in &self.classes[k].counted_by {
                let d = deltas.entry(g).or_default();
                d.push((self.zones[a], -1));
                d.push((self.zones[b], 1));
            }
        }
        deltas
            .iter()
            .all(|(g, d)| spreads.get(g).is_none_or(|s| s.allows(d)))
    }
}

impl ZonePrices<'_, '_> {
    /// What zone `zi` costs holding `counts[class]` pods.
    fn price(&mut self, zi: usize, counts: &[usize]) -> f64 {
        if let Some(p) = self.cache.get(&(zi, counts.to_vec())) {
            return *p;
        }
        self.evaluations += 1;
        let family = self.family;
        let g = &family.groups[family.members[zi].group];
        let pods = representatives(&family.classes, counts);
        let mut p = self
            .run
            .pack_pods(g.pool, &g.reqs, &pods, Effort::Estimate)
            .map_or(f64::INFINITY, |k| k.cost);
        if counts == family.held[zi].as_slice() {
            p = p.min(g.old);
        }
        self.cache.insert((zi, counts.to_vec()), p);
        p
    }

    /// [`Self::price`], or `None` once `EVALUATIONS` packings were made.
    fn within_budget(&mut self, zi: usize, counts: &[usize]) -> Option<f64> {
        if self.evaluations >= EVALUATIONS {
            None
        } else {
            Some(self.price(zi, counts))
        }
    }

    /// Where the search ends: the cheapest of every way to spread the
    /// classes when there are few enough, then single moves and swaps
    /// while one pays (the best gain first). `spreads` follow the pods.
    fn cheapest_counts(&mut self, spreads: &mut BTreeMap<usize, Spread>) -> Vec<Vec<usize>> {
        let family = self.family;
        let mut counts = family.held.clone();
        // Few enough ways to spread every class: the cheapest of them all;
        // the moves below then start from there.
        let best = exhaustive(
            &family.classes,
            spreads,
            &family.zones,
            &family.held,
            &mut |zi, c| self.within_budget(zi, c),
        );
        if let Some(best) = best {
            // The spread counts follow the pods.
            family.shift_spreads(spreads, &best);
            counts = best;
        }
        let mut current: Vec<f64> = (0..family.zones.len())
            .map(|zi| self.price(zi, &counts[zi]))
            .collect();
        loop {
            // Every step: single moves, then swaps; the best gain wins.
            let steps = candidate_steps(&family.classes, &counts);
            let Some(best) = self.best_step(&steps, spreads, &counts, &current) else {
                break;
            };
            for &(k, a, b) in &steps[best.step] {
                shift(spreads, &family.classes[k], family.zones[a], -1);
                shift(spreads, &family.classes[k], family.zones[b], 1);
            }
            counts = best.counts;
            for (zi, cur) in current.iter_mut().enumerate() {
                *cur = self.price(zi, &counts[zi]);
            }
        }
        counts
    }

    /// The allowed step of `steps` from `counts` that gains most over the
    /// zones' `current` prices (the first of equal gains); `None` when none
    /// gains before the packings run out.
    fn best_step(
        &mut self,
        steps: &[Step],
        spreads: &BTreeMap<usize, Spread>,
        counts: &[Vec<usize>],
        current: &[f64],
    ) -> Option<BestStep> {
        let family = self.family;
        let mut best: Option<BestStep> = None;
        for (si, step) in steps.iter().enumerate() {
            if self.evaluations >= EVALUATIONS {
                break;
            }
            if !family.step_allowed(step, spreads) {
                continue;
            }
            let mut after = counts.to_vec();
            for &(k, a, b) in step {
                after[a][k] -= 1;
                after[b][k] += 1;
            }
            let touched: Vec<usize> = {
                let mut t: Vec<usize> = step.iter().flat_map(|&(_, a, b)| [a, b]).collect();
                t.sort_unstable();
                t.dedup();
                t
            };
            let gain: f64 = touched
                .iter()
                .map(|&z| current[z] - self.price(z, &after[z]))
                .sum();
            if gain > 1e-9 && best.as_ref().is_none_or(|b| gain > b.gain + 1e-12) {
                best = Some(BestStep {
                    gain,
                    step: si,
                    counts: after,
                });
            }
        }
        best
    }
}

/// Every step from `counts`: each single move of a pod of a class to
/// another zone it may go to, then each such move swapped with a pod of a
/// later class moving back.
fn candidate_steps(classes: &[Class], counts: &[Vec<usize>]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for (k, class) in classes.iter().enumerate() {
        for (a, row) in counts.iter().enumerate() {
            for (b, &ok) in class.allowed.iter().enumerate() {
                if a != b && row[k] > 0 && ok {
                    steps.push(vec![(k, a, b)]);
                }
            }
        }
    }
    let singles = steps.len();
    for i in 0..singles {
        let (k, a, b) = steps[i][0];
        for l in k + 1..classes.len() {
            if counts[b][l] > 0 && classes[l].allowed[a] {
                steps.push(vec![(k, a, b), (l, b, a)]);
            }
        }
    }
    steps
}

/// What ways to spread the classes are checked against: the spread groups
/// with the classes each counts, and the counts as planned.
struct SpreadCheck<'a> {
    /// Which classes each spread group counts.
    counted: BTreeMap<usize, Vec<usize>>,
    spreads: &'a BTreeMap<usize, Spread>,
    zones: &'a [&'a str],
    held: &'a [Vec<usize>],
}

impl SpreadCheck<'_> {
    /// Whether group `g` stays within its limits with the classes it counts
    /// spread as `ways` says (see [`delta`]).
    fn allows<'w>(&self, g: usize, ways: &dyn Fn(usize) -> Option<&'w [usize]>) -> bool {
        let d = delta(&self.counted, g, self.zones, self.held, ways);
        self.spreads.get(&g).is_none_or(|s| s.allows(&d))
    }

    /// Each class's ways (`[class][way][zone]`), checked against the groups
    /// that count it alone; `None` when a class has more than `CLASS_WAYS`
    /// ways or none, or the combinations exceed `EXACT_WAYS`.
    fn class_ways(&self, classes: &[Class]) -> Option<Vec<Vec<Vec<usize>>>> {
        let nz = self.zones.len();
        let mut options: Vec<Vec<Vec<usize>>> = Vec::with_capacity(classes.len());
        let mut combos: usize = 1;
        for c in classes {
            let allowed: Vec<usize> = (0..nz).filter(|&z| c.allowed[z]).collect();
            if compositions(c.pods.len(), allowed.len()) > CLASS_WAYS {
                return None;
            }
            let mut all = Vec::new();
            compose(c.pods.len(), &allowed, &mut vec![0; nz], 0, &mut all);
            let own: Vec<usize> = c
                .counted_by
                .iter()
                .copied()
                .filter(|g| self.counted.get(g).is_some_and(|ks| ks.len() == 1))
                .collect();
            let ways: Vec<Vec<usize>> = all
                .into_iter()
                .filter(|w| own.iter().all(|&g| self.allows(g, &|_| Some(w.as_slice()))))
                .collect();
            combos = combos.checked_mul(ways.len())?;
            if combos > EXACT_WAYS || ways.is_empty() {
                return None;
            }
            options.push(ways);
        }
        Some(options)
    }

    /// The spread groups that count more than one class.
    fn shared(&self) -> Vec<usize> {
        self.counted
            .iter()
            .filter(|(_, ks)| ks.len() > 1)
            .map(|(g, _)| *g)
            .collect()
    }
}

/// The cheapest way to spread every class over the zones, `counts[zone][class]`,
/// trying every one allowed (see the module documentation); `None` when
/// there are more than `EXACT_WAYS` or a class has more than
/// `CLASS_WAYS` ways of its own. `price` prices a zone's counts, and
/// returns `None` when it may price no more.
fn exhaustive(
    classes: &[Class],
    spreads: &BTreeMap<usize, Spread>,
    zones: &[&str],
    held: &[Vec<usize>],
    price: &mut dyn FnMut(usize, &[usize]) -> Option<f64>,
) -> Option<Vec<Vec<usize>>> {
    let mut counted: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, c) in classes.iter().enumerate() {
        for &g in &c.counted_by {
            counted.entry(g).or_default().push(k);
        }
    }
    let check = SpreadCheck {
        counted,
        spreads,
        zones,
        held,
    };
    let options = check.class_ways(classes)?;
    let shared = check.shared();
    cheapest_combination(&options, &shared, &check, price)
}

/// The cheapest combination of one way per class (`options[class]`) that
/// the `shared` spread groups allow, tried in odometer order, as
/// `counts[zone][class]`; the best so far once `price` may price no more.
fn cheapest_combination(
    options: &[Vec<Vec<usize>>],
    shared: &[usize],
    check: &SpreadCheck,
    price: &mut dyn FnMut(usize, &[usize]) -> Option<f64>,
) -> Option<Vec<Vec<usize>>> {
    let mut pick = vec![0usize; options.len()];
    let mut best: Option<(f64, Vec<Vec<usize>>)> = None;
    let mut counts = vec![vec![0usize; options.len()]; check.zones.len()];
    loop {
        let ways = |k: usize| Some(options[k][pick[k]].as_slice());
        if shared.iter().all(|&g| check.allows(g, &ways)) {
            for (zi, row) in counts.iter_mut().enumerate() {
                for (k, n) in row.iter_mut().enumerate() {
                    *n = options[k][pick[k]][zi];
                }
            }
            let bound = best.as_ref().map(|(b, _)| *b);
            let Some(total) = total_price(&counts, bound, price) else {
                break;
            };
            if best.as_ref().is_none_or(|(b, _)| total < *b - 1e-12) {
                best = Some((total, counts.clone()));
            }
        }
        if !next_combination(&mut pick, options) {
            break;
        }
    }
    best.map(|(_, c)| c)
}

/// The zones' prices summed in zone order, stopped once the sum reaches
/// `bound`; `None` when `price` may price no more.
fn total_price(
    counts: &[Vec<usize>],
    bound: Option<f64>,
    price: &mut dyn FnMut(usize, &[usize]) -> Option<f64>,
) -> Option<f64> {
    let mut total = 0.0;
    for (zi, row) in counts.iter().enumerate() {
        total += price(zi, row)?;
        if bound.is_some_and(|b| total >= b) {
            break;
        }
    }
    Some(total)
}

/// Moves `pick` (one way per class) to the next combination of `options`,
/// in odometer order; `false` after the last.
fn next_combination(pick: &mut [usize], options: &[Vec<Vec<usize>>]) -> bool {
    for (p, ways) in pick.iter_mut().zip(options) {
        *p += 1;
        if *p < ways.len() {
            return true;
        }
        *p = 0;
    }
    false
}

/// How group `g`'s counts per zone change when the classes it counts
/// (`counted`) are spread as `ways` says (`ways(k)[zone]`; a class without
/// one does not count) instead of as `held`.
fn delta<'z, 'w>(
    counted: &BTreeMap<usize, Vec<usize>>,
    g: usize,
    zones: &[&'z str],
    held: &[Vec<usize>],
    ways: &dyn Fn(usize) -> Option<&'w [usize]>,
) -> Vec<(&'z str, i64)> {
    let mut d = Vec::new();
    for &k in counted.get(&g).map_or(&[][..], Vec::as_slice) {
        if let Some(w) = ways(k) {
            for (zi, z) in zones.iter().enumerate() {
                let n = w[zi] as i64 - held[zi][k] as i64;
                if n != 0 {
                    d.push((*z, n));
                }
            }
        }
    }
    d
}

/// How many ways `n` pods go into `m` zones: C(n + m - 1, m - 1), saturated.
fn compositions(n: usize, m: usize) -> usize {
    if m == 0 {
        return usize::from(n == 0);
    }
    let mut c: usize = 1;
    for i in 1..m {
        // c * (n + i) / i stays exact: c is C(n + i - 1, i - 1).
        c = match c.checked_mul(n + i) {
            Some(x) => x / i,
            None => return usize::MAX,
        };
    }
    c
}

/// Every way to put `n` pods into the zones `allowed[i..]` (indices into
/// `way`), appended to `out`.
fn compose(n: usize, allowed: &[usize], way: &mut Vec<usize>, i: usize, out: &mut Vec<Vec<usize>>) {
    if i + 1 >= allowed.len() {
        if let Some(&z) = allowed.get(i) {
            way[z] = n;
            out.push(way.clone());
            way[z] = 0;
        } else if n == 0 {
            out.push(way.clone());
        }
        return;
    }
    for take in (0..=n).rev() {
        way[allowed[i]] = take;
        compose(n - take, allowed, way, i + 1, out);
    }
    way[allowed[i]] = 0;
}

/// Moves `d` pods of `class` into (or, negative, out of) `zone` in every
/// spread group that counts them.
fn shift(spreads: &mut BTreeMap<usize, Spread>, class: &Class, zone: &str, d: i64) {
    for g in &class.counted_by {
        if let Some(s) = spreads.get_mut(g) {
            *s.counts.entry(zone.to_string()).or_default() += d;
        }
    }
}

/// Pods standing for `counts[k]` pods of each class `k` (its first ones:
/// the pods of a class are interchangeable for the packing).
fn representatives(classes: &[Class], counts: &[usize]) -> Vec<PodIdx> {
    let mut pods: Vec<PodIdx> = classes
        .iter()
        .zip(counts)
        .flat_map(|(c, &n)| c.pods[..n.min(c.pods.len())].iter().copied())
        .collect();
    pods.sort_unstable();
    pods
}
