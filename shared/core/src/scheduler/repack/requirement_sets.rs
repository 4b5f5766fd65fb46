//! A family's packing one requirement set at a time, where its pattern LP
//! is not affordable.
//!
//! A family's pods may share a node across requirement sets (a type that
//! allows both), which only the family's own packing sees; but when it
//! holds more classes than its LP can pivot through (`patterns::applies`),
//! that packing is the greedy's alone. Each set's pods alone are fewer
//! classes, and their LPs are affordable: at 10,000 pods `random`'s
//! `default` family (292 classes, 19 sets) packed set by set with an LP
//! each came to 47.86 $/h where the family's greedy made 48.39, and the
//! set by set greedy 50.04. The nodes each set's packing leaves partly
//! filled (its last ones, see [`TAIL_PER_SET`]) are then merged across
//! the sets where one type holds both.

use super::patterns;
use super::{candidate_packings, merge_last, Bin, Demand, FillPrices, PackType, PricedBins};

/// Nodes at the end of each set's packing, where it leaves its leftovers,
/// that may merge with another set's (at most `MERGED` in all).
const TAIL_PER_SET: usize = 4;
const MERGED: usize = 64;

/// Each set's LP may spend `work_per_pod / WORK_SHARE` per pod (besides
/// each LP's floor): a set's few classes converge with less, and the sets'
/// LPs replace the family's greedy, which costs less than the family's LP
/// would. `random` at 10,000 pods (seeds 1-3, $/h and instructions
/// against the family's greedy): a share of 1 gave −1.0 / −0.65 / −1.2%
/// for +17 / +17 / +24%; 4 gave −0.89 / −0.39 / −1.1% for +7 / +0 / +11%.
const WORK_SHARE: usize = 4;

/// The share of the family's pods that must be in sets of `SET_PODS`
/// pods or more whose own LP applies, in per cent: elsewhere packing each
/// set apart mostly loses the nodes the sets share. A set packed apart
/// leaves about one node partly filled; with 100 pods (some 30 nodes of
/// `random`'s) that is a few per cent, less than its LP gains.
const LP_SHARE_PERCENT: usize = 75;
const SET_PODS: usize = 100;

/// One requirement set's classes: the family's class indices, and its
/// demand over the family's dimensions.
struct SetDemand {
    classes: Vec<usize>,
    demand: Demand,
    /// The family's requirement-set dimension it needs.
    dim: usize,
}

/// `demand` (a family's) packed one requirement set at a time, each on
/// the candidates that allow it, then the sets' last nodes merged; `None`
/// when it has fewer than two sets, when too few of its pods are in sets
/// whose LP applies (see [`LP_SHARE_PERCENT`]), or when some pod fits no
/// candidate.
pub(super) fn packing_per_set(
    cands: &[PackType],
    demand: &Demand,
    prices: &mut FillPrices,
    work_per_pod: usize,
) -> Option<PricedBins> {
    let sets = set_demands(demand);
    let covered: usize = sets.iter().map(|s| s.classes.len()).sum();
    if sets.len() < 2 || covered != demand.counts.len() {
        return None;
    }
    let set_work = work_per_pod / WORK_SHARE;
    let pods = |d: &Demand| d.counts.iter().sum::<usize>();
    let with_lp: usize = (sets.iter())
        .map(|s| (pods(&s.demand), s))
        .filter(|&(n, s)| n >= SET_PODS && patterns::applies(&s.demand, set_work))
        .map(|(n, _)| n)
        .sum();
    if with_lp.saturating_mul(100) < pods(demand).saturating_mul(LP_SHARE_PERCENT) {
        return None;
    }
    let tail = (MERGED / sets.len()).clamp(1, TAIL_PER_SET);
    let mut bins: Vec<Bin> = Vec::new();
    let mut tails: Vec<Bin> = Vec::new();
    for set in &sets {
        let allowing: Vec<PackType> = (cands.iter())
            .filter(|c| c.room.get(set.dim).is_some_and(|&r| r > 0))
            .cloned()
            .collect();
        let mut set_prices = FillPrices::new(&allowing, &set.demand);
        let packings = candidate_packings(&allowing, &set.demand, &mut set_prices, set_work)?;
        let cheapest = packings.into_iter().next()?;
        let first_tail = cheapest.bins.len().saturating_sub(tail);
        for (i, b) in cheapest.bins.into_iter().enumerate() {
            let fill = b.fill.iter().map(|&(k, c)| (set.classes[k], c)).collect();
            let bin = Bin { fill };
            if i < first_tail {
                bins.push(bin);
            } else {
                tails.push(bin);
            }
        }
    }
    let last = tails.len();
    merge_last(&mut tails, last, &demand.per_node, prices);
    bins.append(&mut tails);
    let cost = bins.iter().map(|b| prices.of(&b.fill)).sum();
    Some(PricedBins { cost, bins })
}

/// `demand`'s classes by the requirement-set dimension each needs (a
/// family's classes need one each, see `Demand::add_requirement_dims`),
/// in the order of the dimensions; each set's demand keeps every
/// dimension of the family.
fn set_demands(demand: &Demand) -> Vec<SetDemand> {
    let set_dims = (demand.resources..demand.dims.len())
        .filter(|&d| demand.dims[d].starts_with(super::REQUIREMENT_DIM));
    set_dims
        .filter_map(|dim| {
            let classes: Vec<usize> = (0..demand.counts.len())
                .filter(|&k| demand.need[k].get(dim).is_some_and(|&q| q > 0))
                .collect();
            if classes.is_empty() {
                return None;
            }
            let counts = classes.iter().map(|&k| demand.counts[k]).collect();
            let demand = demand.of_classes(&classes, counts);
            Some(SetDemand {
                classes,
                demand,
                dim,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{greedy_packing, REQUIREMENT_DIM, REQUIREMENT_ROOM};
    use super::*;

    /// A family of `sets` requirement sets of `classes` classes of `pods`
    /// pods each (random cpu and memory), and four node shapes per set
    /// allowing it (the first shape also allows the next set, so sets
    /// may share a node).
    fn family(seed: u64, sets: usize, classes: usize, pods: usize) -> (Vec<PackType>, Demand) {
        let mut next = crate::scheduler::test_draws(seed);
        let dims: Vec<String> = ["cpu", "memory"]
            .into_iter()
            .map(String::from)
            .chain((0..sets).map(|s| format!("{REQUIREMENT_DIM}{s}")))
            .collect();
        let mut need = Vec::new();
        for s in 0..sets {
            for _ in 0..classes {
                let mut n = vec![50 * (1 + next(30) as i64), 64 * (1 + next(60) as i64)];
                n.extend((0..sets).map(|f| i64::from(f == s)));
                need.push(n);
            }
        }
        let shapes = [
            (1.0, 2000, 4096),
            (1.7, 4000, 8192),
            (1.2, 2000, 16384),
            (2.1, 8000, 16384),
        ];
        let mut cands = Vec::new();
        for s in 0..sets {
            for (i, &(price, cpu, memory)) in shapes.iter().enumerate() {
                let mut room = vec![cpu, memory];
                room.extend((0..sets).map(|f| {
                    let allows = f == s || (i == 0 && f == (s + 1) % sets);
                    if allows {
                        REQUIREMENT_ROOM
                    } else {
                        0
                    }
                }));
                cands.push(PackType {
                    ty: cands.len(),
                    price: price * (1.0 + s as f64 / 10.0),
                    room,
                });
            }
        }
        let demand = Demand {
            dims,
            resources: 2,
            per_node: vec![usize::MAX; need.len()],
            counts: vec![pods; need.len()],
            need,
            per_node_room: Vec::new(),
        };
        (cands, demand)
    }

    /// Every pod is placed once, and each node is held by a candidate.
    fn assert_places_every_pod(bins: &[Bin], demand: &Demand, prices: &mut FillPrices) {
        let mut placed = vec![0; demand.counts.len()];
        for b in bins {
            assert!(
                prices.of(&b.fill).is_finite(),
                "no candidate holds {:?}",
                b.fill
            );
            for &(k, c) in &b.fill {
                placed[k] += c;
            }
        }
        assert_eq!(placed, demand.counts);
    }

    /// A family of 160 classes (four sets of 40, five pods each) in a
    /// plan of 10,000 pods is more than its LP affords; each set's is not,
    /// so the family is packed set by set, every pod placed, cheaper than
    /// the family's greedy in the rounds it would otherwise get.
    #[test]
    fn a_family_its_lp_cannot_afford_is_packed_set_by_set() {
        for seed in 1..=3 {
            let (cands, demand) = family(seed, 4, 40, 5);
            let work = patterns::work_per_pod(10_000);
            assert!(!patterns::applies(&demand, work));
            let mut prices = FillPrices::new(&cands, &demand);
            let per_set = packing_per_set(&cands, &demand, &mut prices, work).unwrap();
            assert_places_every_pod(&per_set.bins, &demand, &mut prices);
            let packings = candidate_packings(&cands, &demand, &mut prices, work).unwrap();
            assert_eq!(packings.len(), 1);
            assert_eq!(packings[0].cost, per_set.cost);
            let rounds = patterns::rest_rounds(work);
            let greedy = greedy_packing(&cands, &demand, &mut prices, rounds).unwrap();
            assert!(
                per_set.cost < greedy.cost,
                "seed {seed}: {} vs {}",
                per_set.cost,
                greedy.cost
            );
        }
    }

    /// Two sets of three Deployments each on their own node type (6 cpu,
    /// 24 GiB, $6; the shapes of `the_cheapest_packing_mixes_shapes_the_
    /// greedy_packs_apart`, twice the pods): each set's LP mixes the
    /// memory-heavy pods with the cpu-heavy ones where each set's greedy
    /// packs them apart.
    #[test]
    fn each_sets_lp_mixes_shapes_its_greedy_packs_apart() {
        let shapes = [(2000, 2048, 24), (1000, 512, 70), (750, 5632, 64)];
        let mut need = Vec::new();
        let mut counts = Vec::new();
        for set in 0..2 {
            for &(cpu, memory, n) in &shapes {
                need.push(vec![cpu, memory, i64::from(set == 0), i64::from(set == 1)]);
                counts.push(n);
            }
        }
        let dims = ["cpu", "memory", "set-0", "set-1"];
        let demand = Demand {
            dims: (dims.iter())
                .enumerate()
                .map(|(d, n)| {
                    if d < 2 {
                        n.to_string()
                    } else {
                        format!("{REQUIREMENT_DIM}{n}")
                    }
                })
                .collect(),
            resources: 2,
            per_node: vec![usize::MAX; 6],
            counts,
            need,
            per_node_room: Vec::new(),
        };
        let cands: Vec<PackType> = (0..2)
            .map(|set| PackType {
                ty: set,
                price: 6.0,
                room: vec![
                    6000,
                    24000,
                    REQUIREMENT_ROOM * i64::from(set == 0),
                    REQUIREMENT_ROOM * i64::from(set == 1),
                ],
            })
            .collect();
        let work = patterns::work_per_pod(10_000);
        let mut prices = FillPrices::new(&cands, &demand);
        let per_set = packing_per_set(&cands, &demand, &mut prices, work).unwrap();
        assert_places_every_pod(&per_set.bins, &demand, &mut prices);
        let greedy_per_set: f64 = (set_demands(&demand).iter())
            .map(|set| {
                let allowing = vec![cands[set.dim - 2].clone()];
                let mut set_prices = FillPrices::new(&allowing, &set.demand);
                greedy_packing(&allowing, &set.demand, &mut set_prices, 4)
                    .unwrap()
                    .cost
            })
            .sum();
        assert!(
            per_set.cost < greedy_per_set,
            "{} vs {greedy_per_set}",
            per_set.cost
        );
    }

    /// Set by set only where it has two sets and most of its pods are in
    /// sets whose own LP applies.
    #[test]
    fn a_family_is_packed_set_by_set_only_where_the_sets_lps_take_most_pods() {
        let work = patterns::work_per_pod(10_000);
        // (sets, classes per set, pods per class, set by set)
        let cases = [
            (4, 40, 5, true),
            (1, 160, 5, false),
            (24, 12, 2, false),
            (3, 60, 1, false),
            (80, 2, 5, false),
            (160, 1, 5, false),
        ];
        for (sets, classes, pods, apart) in cases {
            let (cands, demand) = family(7, sets, classes, pods);
            let mut prices = FillPrices::new(&cands, &demand);
            let per_set = packing_per_set(&cands, &demand, &mut prices, work);
            assert_eq!(per_set.is_some(), apart, "{sets} sets of {classes} classes");
            if let Some(p) = per_set {
                assert_places_every_pod(&p.bins, &demand, &mut prices);
            }
        }
    }
}
