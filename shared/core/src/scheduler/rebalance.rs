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
//!   packing both zones again ([`Run::pack_pods`]) and the best gain is
//!   taken until none is left;
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

use super::pod_view::{self, Relaxation};
use super::repack::{Group, Packing};
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
    pods: Vec<usize>,
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
        let mut index: HashMap<(usize, Requirements), usize> = HashMap::new();
        let mut families: Vec<Vec<(String, usize)>> = Vec::new();
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
            families[f].push((zone, gi));
        }
        for members in families {
            if members.len() < 2 {
                continue;
            }
            let total: usize = members.iter().map(|&(_, gi)| groups[gi].pods.len()).sum();
            if total > FAMILY_PODS {
                continue;
            }
            if let Some(new) = self.search_family(groups, &members, relax) {
                for (&(_, gi), (pods, packing)) in members.iter().zip(new) {
                    if pods != groups[gi].pods {
                        groups[gi].pods = pods;
                        moved[gi] = true;
                        packed[gi] = Some(packing);
                    }
                }
            }
        }
    }

    /// The search over one family (`members`: zone and group, one per
    /// zone). `Some` with each zone's new pods and packing when moves pay.
    fn search_family(
        &self,
        groups: &[Group],
        members: &[(String, usize)],
        relax: &[Relaxation],
    ) -> Option<Vec<(Vec<usize>, Packing)>> {
        let zones: Vec<&str> = members.iter().map(|(z, _)| z.as_str()).collect();
        // Classes, and how many of each every zone holds.
        let mut classes: Vec<Class> = Vec::new();
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); members.len()];
        for (zi, &(_, gi)) in members.iter().enumerate() {
            for &p in &groups[gi].pods {
                let pod = &self.pods[p];
                let zone_req = pod_view::node_requirements(pod, &self.volume[p], &relax[p])
                    .get(labels::ZONE)
                    .cloned();
                let allowed: Vec<bool> = zones
                    .iter()
                    .map(|z| zone_req.as_ref().is_none_or(|r| r.has(z)))
                    .collect();
                let same = |c: &Class| {
                    let q = &self.pods[c.pods[0]];
                    self.hints.req_class[c.pods[0]] == self.hints.req_class[p]
                        && q.namespace == pod.namespace
                        && q.labels == pod.labels
                        && q.pod_anti_affinity == pod.pod_anti_affinity
                        && c.allowed == allowed
                };
                let k = match classes.iter().position(same) {
                    Some(k) => k,
                    None => {
                        if classes.len() == FAMILY_CLASSES {
                            return None;
                        }
                        classes.push(Class {
                            pods: vec![],
                            allowed,
                            counted_by: self.topology.spread_selecting(labels::ZONE, pod),
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
        // Nothing can move: every class allowed in one zone only.
        if classes
            .iter()
            .all(|c| c.allowed.iter().filter(|a| **a).count() < 2)
        {
            return None;
        }
        // The spread groups that count them, with their owners' zone sets.
        let mut spreads: BTreeMap<usize, Spread> = BTreeMap::new();
        for c in &classes {
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
        // Prices per (zone, counts), cached; the counts as planned are
        // worth what the plan's NodeClaims cost, if less than a new packing.
        let mut cache: HashMap<(usize, Vec<usize>), f64> = HashMap::new();
        let mut evaluations = 0usize;
        let mut price = |zi: usize, counts: &[usize], evaluations: &mut usize| -> f64 {
            if let Some(p) = cache.get(&(zi, counts.to_vec())) {
                return *p;
            }
            *evaluations += 1;
            let g = &groups[members[zi].1];
            let pods = representatives(&classes, counts);
            let mut p = self
                .pack_pods(g.pool, &g.reqs, &pods)
                .map_or(f64::INFINITY, |k| k.cost);
            if counts == held[zi].as_slice() {
                p = p.min(g.old);
            }
            cache.insert((zi, counts.to_vec()), p);
            p
        };
        let mut counts = held.clone();
        // Few enough ways to spread every class: the cheapest of them all;
        // the moves below then start from there.
        if let Some(best) = exhaustive(&classes, &spreads, &zones, &held, &mut |zi, c| {
            if evaluations >= EVALUATIONS {
                None
            } else {
                Some(price(zi, c, &mut evaluations))
            }
        }) {
            // The spread counts follow the pods.
            for (k, c) in classes.iter().enumerate() {
                for (zi, z) in zones.iter().enumerate() {
                    let d = best[zi][k] as i64 - held[zi][k] as i64;
                    shift(&mut spreads, c, z, d);
                }
            }
            counts = best;
        }
        let mut current: Vec<f64> = (0..zones.len())
            .map(|zi| price(zi, &counts[zi], &mut evaluations))
            .collect();
        loop {
            // Every step: single moves, then swaps; the best gain wins.
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
            let mut best: Option<(f64, usize, Vec<Vec<usize>>)> = None;
            for (si, step) in steps.iter().enumerate() {
                if evaluations >= EVALUATIONS {
                    break;
                }
                if !self.step_allowed(step, &classes, &spreads, &zones) {
                    continue;
                }
                let mut after = counts.clone();
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
                    .map(|&z| current[z] - price(z, &after[z], &mut evaluations))
                    .sum();
                if gain > 1e-9 && best.as_ref().is_none_or(|(g, _, _)| gain > *g + 1e-12) {
                    best = Some((gain, si, after));
                }
            }
            let Some((_, si, after)) = best else {
                break;
            };
            for &(k, a, b) in &steps[si] {
                shift(&mut spreads, &classes[k], zones[a], -1);
                shift(&mut spreads, &classes[k], zones[b], 1);
            }
            counts = after;
            for (zi, cur) in current.iter_mut().enumerate() {
                *cur = price(zi, &counts[zi], &mut evaluations);
            }
        }
        if counts == held {
            return None;
        }
        // Real pods for the new counts: each zone keeps the pods it had,
        // as far as its count goes; the rest go where counts grew.
        let mut spare: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
        let mut out: Vec<Vec<usize>> = vec![Vec::new(); zones.len()];
        for (zi, &(_, gi)) in members.iter().enumerate() {
            let mut kept = vec![0usize; classes.len()];
            for &p in &groups[gi].pods {
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
                held[zi][k] = *n;
            }
        }
        for (zi, pods) in out.iter_mut().enumerate() {
            for (k, spare) in spare.iter_mut().enumerate() {
                for _ in held[zi][k]..counts[zi][k] {
                    pods.push(spare.pop()?);
                }
            }
            pods.sort_unstable();
        }
        let mut result = Vec::with_capacity(zones.len());
        for (zi, pods) in out.into_iter().enumerate() {
            let g = &groups[members[zi].1];
            let packing = self.pack_pods(g.pool, &g.reqs, &pods)?;
            result.push((pods, packing));
        }
        // The real pods pack as their representatives did; only a cheaper
        // whole is taken.
        let new: f64 = result.iter().map(|(_, p)| p.cost).sum();
        let old: f64 = members.iter().map(|&(_, gi)| groups[gi].old).sum();
        (new < old - 1e-9).then_some(result)
    }

    /// Whether `step` keeps every spread group that counts the moved pods
    /// within its limits (see the module documentation).
    fn step_allowed(
        &self,
        step: &Step,
        classes: &[Class],
        spreads: &BTreeMap<usize, Spread>,
        zones: &[&str],
    ) -> bool {
        let mut deltas: BTreeMap<usize, Vec<(&str, i64)>> = BTreeMap::new();
        for &(k, a, b) in step {
            for &g in &classes[k].counted_by {
                let d = deltas.entry(g).or_default();
                d.push((zones[a], -1));
                d.push((zones[b], 1));
            }
        }
        deltas
            .iter()
            .all(|(g, d)| spreads.get(g).is_none_or(|s| s.allows(d)))
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
    let nz = zones.len();
    // Which classes each spread group counts.
    let mut counted: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, c) in classes.iter().enumerate() {
        for &g in &c.counted_by {
            counted.entry(g).or_default().push(k);
        }
    }
    // Each class's ways, checked against the groups that count it alone.
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
            .filter(|g| counted.get(g).is_some_and(|ks| ks.len() == 1))
            .collect();
        let ways: Vec<Vec<usize>> = all
            .into_iter()
            .filter(|w| {
                own.iter().all(|&g| {
                    let d = delta(&counted, g, zones, held, &|_| Some(w.as_slice()));
                    spreads.get(&g).is_none_or(|s| s.allows(&d))
                })
            })
            .collect();
        combos = combos.checked_mul(ways.len())?;
        if combos > EXACT_WAYS || ways.is_empty() {
            return None;
        }
        options.push(ways);
    }
    let shared: Vec<usize> = counted
        .iter()
        .filter(|(_, ks)| ks.len() > 1)
        .map(|(g, _)| *g)
        .collect();
    // Every combination, in odometer order.
    let mut pick = vec![0usize; classes.len()];
    let mut best: Option<(f64, Vec<Vec<usize>>)> = None;
    let mut counts = vec![vec![0usize; classes.len()]; nz];
    'combos: loop {
        let ways = |k: usize| Some(options[k][pick[k]].as_slice());
        let ok = shared.iter().all(|&g| {
            let d = delta(&counted, g, zones, held, &ways);
            spreads.get(&g).is_none_or(|s| s.allows(&d))
        });
        if ok {
            for (zi, row) in counts.iter_mut().enumerate() {
                for (k, n) in row.iter_mut().enumerate() {
                    *n = options[k][pick[k]][zi];
                }
            }
            let mut total = 0.0;
            for (zi, row) in counts.iter().enumerate() {
                let Some(p) = price(zi, row) else {
                    break 'combos;
                };
                total += p;
                if best.as_ref().is_some_and(|(b, _)| total >= *b) {
                    break;
                }
            }
            if best.as_ref().is_none_or(|(b, _)| total < *b - 1e-12) {
                best = Some((total, counts.clone()));
            }
        }
        // Next combination.
        let mut k = 0;
        loop {
            if k == classes.len() {
                break 'combos;
            }
            pick[k] += 1;
            if pick[k] < options[k].len() {
                break;
            }
            pick[k] = 0;
            k += 1;
        }
    }
    best.map(|(_, c)| c)
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
fn representatives(classes: &[Class], counts: &[usize]) -> Vec<usize> {
    let mut pods: Vec<usize> = classes
        .iter()
        .zip(counts)
        .flat_map(|(c, &n)| c.pods[..n.min(c.pods.len())].iter().copied())
        .collect();
    pods.sort_unstable();
    pods
}
