//! The pattern packing: the LP over node patterns (Gilmore-Gomory, as the
//! bench's `bound.py` solves it for the bound), rounded.
//!
//! A *pattern* is a type and how many pods of each class one node of it
//! holds. The master LP (`simplex::CoverLp`) covers every class's pods with
//! patterns at least cost; its duals value each class, and each round
//! adds, per type, the fill of most value (a heuristic multi-dimensional
//! knapsack) when it costs less than its pods' value. The greedy fills a
//! node class by class, largest first; the LP mixes classes of different
//! cpu:memory ratios into one node where their room complements, which is
//! where the greedy loses most (pods of random shapes: 10% above the bound).
//! The LP starts from the greedy's own nodes as columns, so its optimum
//! never costs more than the greedy's packing.
//!
//! A full round (every type) improves each type's best greedy fill by a
//! local search (drop a class's pods, refill the room freed), which finds
//! most of the fills the greedy's fixed orders miss for little work.
//!
//! When no greedy fill pays, the near types whose knapsack's LP relaxation
//! (`knapsack_lp`) is worth more than their price are searched exactly,
//! most promising first: classes in the order of the relaxation's
//! surrogate weights, pruned by its dual bound. Greedy fills lose about a
//! pod's worth on a small node, which is the whole margin near the LP's
//! optimum; the relaxation also proves that the other types cannot pay.
//!
//! Rounding: each pass takes every pattern the LP uses whole (`x >= 1`) as
//! many times as whole, clipped to the pods left, and solves the LP again
//! over the pods left (the columns it found are kept); a pass where every
//! pattern is fractional takes the largest once. After `PASSES` the few
//! pods left are packed by the greedy. The packing competes with the
//! greedy's: the cheaper one is kept.

use foldhash::HashMap;

use super::knapsack_lp::{surrogate_weights, DualBound};
use super::{
    copies_up_to, greedy_packing, rounds_before_lp, Bin, Demand, FillPrices, PackType, PricedBins,
    ValueBound,
};
use crate::scheduler::simplex::{Column, CoverLp, LpError};

/// Most classes the LP is tried for (its basis inverse is dense).
pub(super) const MAX_CLASSES: usize = 256;

/// The LP runs only with at least `AFFORDABLE × rows³` work units. From
/// its diagonal start it needs about a pivot per row (of `rows²` units
/// each) to come back to the greedy's packing, which its first columns
/// hold; with less it is rounded from a basis far from that, and packs
/// worse than the greedy (`random`'s 292 classes at 10,000 pods, 0.28
/// rows³: 14.5% dearer; `assorted`'s 174 at 50,000, 0.50: 1.3%), where
/// from 2.4 rows³ on every LP of the bench's mixes packed cheaper.
const AFFORDABLE: usize = 1;

/// Pricing rounds of the first LP, and of each LP of the pods left after
/// rounding (most patterns are known by then).
const ROUNDS: usize = 120;
const LATER_ROUNDS: usize = 8;

/// Rounding passes (LP solves) per packing.
const PASSES: usize = 6;

/// Work units per pod packed, at least `MIN_WORK`: a greedy fill costs
/// the classes times the fills tried, a pivot the rows squared plus the
/// columns, an exact search its nodes times the classes. About 15-30 ns
/// each: the LP adds at most ~12-24 µs per pod to a large plan. (1,000
/// units priced plans of 10,000 pods no more than 0.1% lower, and took
/// a tenth of `independent`'s time there.)
pub(super) const WORK_PER_POD: usize = 800;
const MIN_WORK: usize = 200_000;

/// A small plan's LPs may share up to `SMALL_PLAN_WORK` units per packing,
/// at most `SMALL_PLAN_MOST` per pod (see [`work_per_pod`]): the column
/// generation tails off (each full pricing round finds one to three
/// columns), and at 2,000 pods of random shapes 1,000 units per pod left
/// its LP 1.4% above the bound where four times that reaches 0.3%, for
/// 0.05-0.13 s more per plan.
const SMALL_PLAN_WORK: usize = 8_000_000;
pub(super) const SMALL_PLAN_MOST: usize = 4_000;

/// The LP's work units per pod in a plan of `plan_pods` pending pods:
/// `WORK_PER_POD`, or more in a small plan, so that one packing of the
/// plan's pods (its families' LPs together) spends at most the larger of
/// `SMALL_PLAN_WORK` and `WORK_PER_POD` per pod, beside each LP's
/// `MIN_WORK` floor. (The repack packs with and without families, so a
/// plan's LPs may spend up to twice that.)
pub(super) fn work_per_pod(plan_pods: usize) -> usize {
    let small = SMALL_PLAN_WORK / plan_pods.max(1);
    small.clamp(WORK_PER_POD, SMALL_PLAN_MOST)
}

/// An LP whose classes hold at least `MANY_PER_CLASS` pods each may
/// spend `CONVERGE_PER_ROW2` units per row squared (within
/// `SMALL_PLAN_MOST` per pod) where its pods' share is less. Its column
/// generation needs work by its rows, not its pods (a round prices each
/// type over the rows; a pivot costs the rows squared), and with many
/// pods per class the rounding keeps nearly all of what the LP saves: at
/// `random-shapes` 10,000 (84 classes, 119 pods each) the plan's price
/// comes within 0.75% of its LP bound, from 1.28% on `WORK_PER_POD`.
const MANY_PER_CLASS: usize = 50;
const CONVERGE_PER_ROW2: usize = 4_500;

/// New columns per pricing round, the most negative reduced costs.
const NEW_COLUMNS: usize = 24;

/// Search nodes of the exact knapsack per type (see `Knapsack::search`).
const SEARCH_NODES: usize = 1000;

/// A type is priced in partial rounds while its best fill is worth this
/// share of its price.
const NEAR: f64 = 0.9;

/// Types searched exactly per pricing round (when no greedy fill pays).
const SEARCHED_TYPES: usize = 16;

/// Changes at most the local search makes to a thorough fill (see
/// `Knapsack::polish`).
const POLISH_PASSES: usize = 8;

/// Steps of each dimension's weight in the knapsack's surrogate sizes.
const SURROGATE_STEPS: usize = 2;

/// A node pattern: a type and the pods per class one node holds.
#[derive(Clone)]
struct Pattern {
    ty: usize,
    take: Vec<usize>,
}

impl Pattern {
    /// The fill of node `b` (of `classes` classes) as a pattern; its type
    /// is left open (a column is priced at the cheapest type holding it).
    fn of_bin(b: &Bin, classes: usize) -> Pattern {
        let mut take = vec![0; classes];
        for &(k, c) in &b.fill {
            take[k] = c;
        }
        Pattern {
            ty: usize::MAX,
            take,
        }
    }

    /// Its pods per class, where fewer are `left` as many as are left.
    fn clipped(&self, left: &[usize]) -> Vec<usize> {
        (self.take.iter().zip(left))
            .map(|(&t, &l)| t.min(l))
            .collect()
    }
}

/// The patterns found so far (across passes), each fill once (its column
/// is priced at the cheapest type holding it, whichever type found it).
#[derive(Default)]
struct Patterns {
    all: Vec<Pattern>,
    index: HashMap<Vec<usize>, usize>,
}

impl Patterns {
    /// The index of `p`, added unless known, and whether it was added.
    fn insert(&mut self, p: Pattern) -> (usize, bool) {
        let next = self.all.len();
        let i = *self.index.entry(p.take.clone()).or_insert(next);
        if i == next {
            self.all.push(p);
        }
        (i, i == next)
    }
}

/// The pattern packing of `demand` on `cands` (see the module doc); `None`
/// when it does not apply (one class, too many) or the LP fails.
pub(super) fn pattern_packing(
    cands: &[PackType],
    demand: &Demand,
    prices: &mut FillPrices,
    seed: &[Bin],
    work_per_pod: usize,
) -> Option<PricedBins> {
    if !applies(demand, work_per_pod) {
        return None;
    }
    let work = lp_work(demand, work_per_pod);
    packing_within(
        cands,
        demand,
        prices,
        seed,
        (work, rest_rounds(work_per_pod)),
    )
}

/// The greedy's rounds where no LP follows, in a plan whose LP may spend
/// `work_per_pod`: for the pods the LP's rounding leaves, and for a
/// packing of more classes than the LP takes or affords (see `applies`).
/// As many as the plan's greedy gets before the LP (`rounds_before_lp`),
/// and two at least: the first round packs at the starting values.
pub(super) fn rest_rounds(work_per_pod: usize) -> usize {
    rounds_before_lp(work_per_pod).max(2)
}

/// Whether [`pattern_packing`] packs `demand` in a plan whose LP may
/// spend `work_per_pod`: some (none: no LP at all, see
/// `Effort::Estimate`), two classes or more, at most `MAX_CLASSES`, and
/// the work the LP needs for them (see `AFFORDABLE`).
pub(super) fn applies(demand: &Demand, work_per_pod: usize) -> bool {
    let rows = demand.counts.len();
    let needed = rows.saturating_pow(3).saturating_mul(AFFORDABLE);
    work_per_pod > 0 && (2..=MAX_CLASSES).contains(&rows) && lp_work(demand, work_per_pod) >= needed
}

/// The work units of `demand`'s LP: `work_per_pod` per pod, `MIN_WORK`
/// at least; where its classes hold `MANY_PER_CLASS` pods each or more,
/// `CONVERGE_PER_ROW2` per row squared at least, within `SMALL_PLAN_MOST`
/// per pod (see `CONVERGE_PER_ROW2`).
fn lp_work(demand: &Demand, work_per_pod: usize) -> usize {
    let pods: usize = demand.counts.iter().sum();
    let rows = demand.counts.len().max(1);
    let work = pods.saturating_mul(work_per_pod).max(MIN_WORK);
    if pods / rows < MANY_PER_CLASS {
        return work;
    }
    let converge = rows.saturating_pow(2).saturating_mul(CONVERGE_PER_ROW2);
    work.max(converge.min(pods.saturating_mul(SMALL_PLAN_MOST)))
}

/// [`pattern_packing`] within `given` work units: the LP, its rounding and
/// the greedy for the pods left, in up to `rest_rounds` rounds (see
/// [`rest_rounds`]).
fn packing_within(
    cands: &[PackType],
    demand: &Demand,
    prices: &mut FillPrices,
    seed: &[Bin],
    (given, rest_rounds): (usize, usize),
) -> Option<PricedBins> {
    let mut patterns = Patterns::default();
    for b in seed {
        patterns.insert(Pattern::of_bin(b, demand.counts.len()));
    }
    let mut left = demand.counts.clone();
    let mut bins: Vec<Bin> = Vec::new();
    let mut budget = given;
    for pass in 0..PASSES {
        if left.iter().all(|&n| n == 0) {
            break;
        }
        // Rounding passes need work left for their LP.
        if budget < given / 20 {
            break;
        }
        let rounds = if pass == 0 { ROUNDS } else { LATER_ROUNDS };
        let x = cover(
            cands,
            demand,
            &left,
            &mut patterns,
            prices,
            &mut budget,
            rounds,
        )?;
        if !take_rounded(&patterns.all, &x, &mut left, &mut bins) {
            break;
        }
    }
    if left.iter().any(|&n| n > 0) {
        bins.extend(greedy_rest(cands, demand, &left, rest_rounds)?);
    }
    let cost = bins.iter().map(|b| prices.of(&b.fill)).sum();
    Some(PricedBins { cost, bins })
}

/// Takes the patterns of `x` (per pattern) whole, clipped to the pods
/// `left`, into `bins`; when none is whole, the largest once. Whether
/// anything was taken.
fn take_rounded(patterns: &[Pattern], x: &[f64], left: &mut [usize], bins: &mut Vec<Bin>) -> bool {
    let mut took = false;
    for (p, &xv) in patterns.iter().zip(x) {
        let whole = ((xv + 1e-6).floor() as usize).min(left.iter().sum());
        for _ in 0..whole {
            took |= take(p, left, bins);
        }
    }
    if !took {
        let largest = (x.iter().enumerate())
            .filter(|(_, v)| **v > 1e-9)
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)));
        if let Some((p, _)) = largest {
            took = take(&patterns[p], left, bins);
        }
    }
    took
}

/// One node of pattern `p` with the pods `left` (fewer where fewer are
/// left); whether it holds any.
fn take(p: &Pattern, left: &mut [usize], bins: &mut Vec<Bin>) -> bool {
    let counts = p.clipped(left);
    if counts.iter().all(|&c| c == 0) {
        return false;
    }
    for (l, c) in left.iter_mut().zip(&counts) {
        *l -= c;
    }
    bins.push(Bin::of_counts(&counts));
    true
}

/// The pods `left` packed by the greedy in up to `rounds` rounds (and the
/// exact packings where they apply), as bins of `demand`'s classes.
fn greedy_rest(
    cands: &[PackType],
    demand: &Demand,
    left: &[usize],
    rounds: usize,
) -> Option<Vec<Bin>> {
    let live: Vec<usize> = (0..left.len()).filter(|&k| left[k] > 0).collect();
    let rest = demand.of_classes(&live, live.iter().map(|&k| left[k]).collect());
    let mut prices = FillPrices::new(cands, &rest);
    let bins = greedy_packing(cands, &rest, &mut prices, rounds)?.bins;
    Some(
        bins.into_iter()
            .map(|b| Bin {
                fill: b.fill.into_iter().map(|(k, c)| (live[k], c)).collect(),
            })
            .collect(),
    )
}

/// The LP over patterns covering the pods `left` (one row per class with
/// pods left), by column generation from the known `patterns` plus, per
/// class, its best single-class node; the value of every known pattern
/// (0 for those the LP does not use).
fn cover(
    cands: &[PackType],
    demand: &Demand,
    left: &[usize],
    patterns: &mut Patterns,
    prices: &mut FillPrices,
    budget: &mut usize,
    max_rounds: usize,
) -> Option<Vec<f64>> {
    let rows: Vec<usize> = (0..left.len()).filter(|&k| left[k] > 0).collect();
    let mut row_of = vec![None; left.len()];
    for (r, &k) in rows.iter().enumerate() {
        row_of[k] = Some(r);
    }
    let mut start = Vec::with_capacity(rows.len());
    let mut start_patterns = Vec::with_capacity(rows.len());
    for &k in &rows {
        let p = single_class(cands, demand, left, k)?;
        start.push(column(&p, left, &row_of, prices));
        start_patterns.push(p);
    }
    let b = rows.iter().map(|&k| left[k] as f64).collect();
    let mut lp = CoverLp::new(b, start).ok()?;
    // LP column → pattern index.
    let mut of_col: Vec<usize> = (start_patterns.into_iter())
        .map(|p| patterns.insert(p).0)
        .collect();
    let mut in_lp = vec![false; patterns.all.len()];
    of_col.iter().for_each(|&i| in_lp[i] = true);
    for (i, p) in patterns.all.iter().enumerate() {
        if !in_lp[i] && p.take.iter().zip(left).any(|(&t, &l)| t > 0 && l > 0) {
            lp.add(column(p, left, &row_of, prices));
            of_col.push(i);
        }
    }
    let mut pricing = Pricing::new(cands.len());
    for _ in 0..max_rounds {
        match lp.solve(budget) {
            Ok(()) => {}
            // The basis is still a cover: round it.
            Err(LpError::PivotBudget) => break,
            Err(_) => return None,
        }
        let y = lp.duals();
        let value: Vec<f64> = (row_of.iter())
            .map(|r| r.map_or(0.0, |r| y[r].max(0.0)))
            .collect();
        let mut added = false;
        for p in pricing.patterns(cands, demand, &value, left, budget) {
            if let (i, true) = patterns.insert(p) {
                lp.add(column(&patterns.all[i], left, &row_of, prices));
                of_col.push(i);
                added = true;
            }
        }
        if !added {
            break;
        }
    }
    let mut x = vec![0.0; patterns.all.len()];
    for (j, v) in lp.values().into_iter().enumerate() {
        x[of_col[j]] = v;
    }
    Some(x)
}

/// Pattern `p` as a column over the rows of `row_of`, its counts clipped to
/// the pods `left`, at the price of the cheapest type holding that fill.
fn column(
    p: &Pattern,
    left: &[usize],
    row_of: &[Option<usize>],
    prices: &mut FillPrices,
) -> Column {
    let fill = Bin::of_counts(&p.clipped(left)).fill;
    let entries = (fill.iter())
        .filter_map(|&(k, c)| row_of[k].map(|r| (r, c as f64)))
        .collect();
    Column {
        cost: prices.of(&fill),
        entries,
    }
}

/// Class `k`'s cheapest node per pod (of the pods left): the starting
/// column of its row.
fn single_class(cands: &[PackType], demand: &Demand, left: &[usize], k: usize) -> Option<Pattern> {
    let most = i64::try_from(left[k].min(demand.per_node[k])).unwrap_or(i64::MAX);
    let mut best: Option<(f64, usize, i64)> = None;
    for (ti, c) in cands.iter().enumerate() {
        let n = copies_up_to(&c.room, &demand.need[k], most);
        if n > 0 && best.is_none_or(|(per, _, _)| c.price / (n as f64) < per) {
            best = Some((c.price / n as f64, ti, n));
        }
    }
    let (_, ty, n) = best?;
    let mut take = vec![0; left.len()];
    take[k] = usize::try_from(n).ok()?;
    Some(Pattern { ty, take })
}

/// The pricing of the column generation: per type, its most valuable fill
/// at the duals, kept when it costs less than its value. A round prices
/// only the types whose fill came near paying when last priced thoroughly
/// (partial pricing, every round first); when none of them pays, the
/// same near types thoroughly (several weightings, then a local search);
/// when none of those pays either, every other type, thoroughly; when no
/// greedy fill pays, the near types whose knapsack LP relaxation pays are
/// searched exactly. So a round that adds no column has priced every type
/// thoroughly, and most rounds price only the near types: the thorough
/// fills that pay come from types that were near (at `random-shapes`
/// 10,000, each full round's paying fills came from types at 0.98 of
/// their price or more, about 25 of 174 types being near), and the far
/// types cost four fifths of a full round.
struct Pricing {
    /// Per type, its fill's value over its price when it was last priced
    /// thoroughly (it is near when at least `NEAR`).
    closeness: Vec<f64>,
    /// Per type, whether this round's thorough sweeps priced it.
    priced: Vec<bool>,
}

/// Which types a pricing sweep fills, and how.
#[derive(Clone, Copy)]
enum Sweep {
    /// The near types (closeness at least `NEAR`), by one greedy fill.
    Near,
    /// The types of closeness at least `from` not yet priced thoroughly
    /// this round, thoroughly (every weighting, then the local search);
    /// their closeness is marked anew.
    Thorough { from: f64 },
}

impl Pricing {
    fn new(types: usize) -> Pricing {
        Pricing {
            closeness: vec![1.0; types],
            priced: Vec::new(),
        }
    }

    /// New patterns at `value` per class (pods `left`), most negative
    /// reduced cost first (at most `NEW_COLUMNS`).
    fn patterns(
        &mut self,
        cands: &[PackType],
        demand: &Demand,
        value: &[f64],
        left: &[usize],
        budget: &mut usize,
    ) -> Vec<Pattern> {
        let valued: Vec<usize> = (0..left.len())
            .map(|k| if value[k] > 1e-12 { left[k] } else { 0 })
            .collect();
        if valued.iter().all(|&n| n == 0) {
            return vec![];
        }
        let mut knap = Knapsack::new(demand, value, &valued);
        self.priced.clear();
        self.priced.resize(cands.len(), false);
        let mut found = self.greedy(cands, demand, &mut knap, &valued, Sweep::Near, budget);
        if found.is_empty() {
            let likely = Sweep::Thorough { from: NEAR };
            found = self.greedy(cands, demand, &mut knap, &valued, likely, budget);
        }
        if found.is_empty() {
            let all = Sweep::Thorough {
                from: f64::NEG_INFINITY,
            };
            found = self.greedy(cands, demand, &mut knap, &valued, all, budget);
        }
        if found.is_empty() {
            found = self.searched(cands, &mut knap, budget);
        }
        found.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.ty.cmp(&b.1.ty)));
        found
            .into_iter()
            .take(NEW_COLUMNS)
            .map(|(_, p)| p)
            .collect()
    }

    /// The greedy fills that pay, of the types `sweep` names (see
    /// `Sweep`), with their reduced costs; a thorough sweep marks its
    /// types priced and their closeness anew.
    fn greedy(
        &mut self,
        cands: &[PackType],
        demand: &Demand,
        knap: &mut Knapsack,
        valued: &[usize],
        sweep: Sweep,
        budget: &mut usize,
    ) -> Vec<(f64, Pattern)> {
        let bound = ValueBound::new(&demand.need, knap.value, valued);
        let mut found = Vec::new();
        let mut take = Vec::new();
        let (full, from) = match sweep {
            Sweep::Near => (false, NEAR),
            Sweep::Thorough { from } => (true, from),
        };
        for (ty, c) in cands.iter().enumerate() {
            if self.closeness[ty] < from || (full && self.priced[ty]) {
                continue;
            }
            if full {
                self.priced[ty] = true;
            }
            if c.price >= bound.of(&c.room) {
                self.closeness[ty] = 0.0;
                continue;
            }
            let Some(val) = knap.best(&c.room, full, budget, &mut take) else {
                break;
            };
            let reduced = c.price - val;
            if reduced < -1e-9 * (1.0 + c.price) {
                let take = take.clone();
                found.push((reduced, Pattern { ty, take }));
            }
            if full {
                self.closeness[ty] = val / c.price;
            }
        }
        found
    }

    /// Exact fills that pay, of the near types whose LP relaxation is worth
    /// more than their price (the most over it first, at most
    /// `SEARCHED_TYPES`), each within `SEARCH_NODES`; the work charged is
    /// the relaxations' and the nodes searched.
    fn searched(
        &self,
        cands: &[PackType],
        knap: &mut Knapsack,
        budget: &mut usize,
    ) -> Vec<(f64, Pattern)> {
        // The near types whose LP relaxation pays, by how much.
        let mut paying: Vec<(f64, usize, Vec<f64>)> = Vec::new();
        for (ty, c) in cands.iter().enumerate() {
            if self.closeness[ty] < NEAR {
                continue;
            }
            let Some(relaxed) = knap.relaxed(&c.room, budget) else {
                break;
            };
            if relaxed.bound > c.price * (1.0 + 1e-9) {
                paying.push((relaxed.bound / c.price, ty, relaxed.weights));
            }
        }
        paying.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut found = Vec::new();
        for (_, ty, weights) in paying.into_iter().take(SEARCHED_TYPES) {
            let c = &cands[ty];
            if *budget < SEARCH_NODES.saturating_mul(knap.most.len()) {
                break;
            }
            let (fill, nodes) = knap.search(&c.room, &weights, c.price, SEARCH_NODES);
            let work = nodes.saturating_mul(knap.most.len());
            *budget = budget.saturating_sub(work);
            if let Some((val, take)) = fill {
                found.push((c.price - val, Pattern { ty, take }));
            }
        }
        found
    }
}

/// A node's knapsack relaxed to an LP (see `knapsack_lp`): its surrogate
/// weights and its optimum, a bound on any fill's value.
struct Relaxed {
    weights: Vec<f64>,
    bound: f64,
}

/// The multi-dimensional knapsack of the pricing, by greedy fills (the
/// most valuable wins): classes in order of value per size, a class's size
/// being its need relative to the node's room per resource dimension,
/// weighed by several weightings (each dimension's weight in steps from 0
/// to 1, the others 1) or the largest; and adaptively, by value per size
/// relative to the room still free. The constraint dimensions (requirement
/// sets, one per node) limit what fits but weigh nothing in a size.
struct Knapsack<'a> {
    need: &'a [Vec<i64>],
    /// `need` in the resource dimensions as floats, a row of `stride` per
    /// class, 0 where a class needs none (or less) of a dimension and in
    /// the padding past `dims`: what `size` multiplies.
    need_f: Vec<f64>,
    /// `dims` rounded up to whole `LANES`.
    stride: usize,
    /// The resource dimensions (the first of `need`'s), the only ones a
    /// class's size weighs.
    dims: usize,
    /// Per class, its needs in the other dimensions (constraints:
    /// requirement sets, one per node), as (dimension, need).
    constraint_needs: Vec<Vec<(usize, i64)>>,
    value: &'a [f64],
    /// Per class, the most pods one node may take (0: not valued).
    most: Vec<i64>,
    weightings: Vec<Vec<f64>>,
    order: Vec<usize>,
    /// Scratch: per dimension its factor (see `factors`), the classes
    /// keyed by density, and the classes `adaptive` may still take.
    factors: Vec<f64>,
    keyed: Vec<u128>,
    /// Per slot of `order_by_density`, the order it last left.
    last_orders: Vec<Vec<usize>>,
    alive: Vec<usize>,
    /// Scratch of the fills: the room left, and a static fill's pods per
    /// class.
    rem: Vec<i64>,
    fill: Vec<usize>,
    /// Scratch of `adaptive`: the room left in the resource dimensions,
    /// as floats.
    rem_f: Vec<f64>,
}

/// How a class's size sums its dimensions (each relative to the room).
#[derive(Clone, Copy)]
enum Weighing<'w> {
    Largest,
    Even,
    /// Per dimension (1 where missing).
    Weights(&'w [f64]),
}

impl<'a> Knapsack<'a> {
    fn new(demand: &'a Demand, value: &'a [f64], valued: &[usize]) -> Knapsack<'a> {
        let most = (valued.iter().zip(&demand.per_node))
            .map(|(&l, &p)| i64::try_from(l.min(p)).unwrap_or(i64::MAX))
            .collect();
        let dims = demand.resources;
        let mut weightings = vec![vec![1.0; dims]];
        for d in 0..dims {
            for step in 0..SURROGATE_STEPS {
                let mut w = vec![1.0; dims];
                w[d] = step as f64 / SURROGATE_STEPS as f64;
                weightings.push(w);
            }
        }
        let stride = dims.div_ceil(LANES) * LANES;
        let need_f = (demand.need.iter())
            .flat_map(|n| {
                (0..stride).map(move |d| match n.get(d) {
                    Some(&q) if d < dims => q.max(0) as f64,
                    _ => 0.0,
                })
            })
            .collect();
        let constraint_needs = (demand.need.iter())
            .map(|n| {
                (n.iter().enumerate().skip(dims))
                    .filter(|(_, &q)| q > 0)
                    .map(|(d, &q)| (d, q))
                    .collect()
            })
            .collect();
        Knapsack {
            need: &demand.need,
            need_f,
            stride,
            dims,
            constraint_needs,
            value,
            most,
            weightings,
            order: Vec::new(),
            factors: Vec::new(),
            keyed: Vec::new(),
            last_orders: Vec::new(),
            alive: Vec::new(),
            rem: Vec::new(),
            fill: Vec::new(),
            rem_f: Vec::new(),
        }
    }

    /// The best fill of a node of `room`: its value, and its pods per
    /// class in `take`; `None` when `budget` (decremented by the classes
    /// per fill) is spent. Unless `thorough`, only the first weighting
    /// (every dimension 1).
    fn best(
        &mut self,
        room: &[i64],
        thorough: bool,
        budget: &mut usize,
        take: &mut Vec<usize>,
    ) -> Option<f64> {
        let weightings = if thorough { self.weightings.len() } else { 1 };
        let work = (weightings + 2).saturating_mul(self.most.len());
        *budget = budget.checked_sub(work)?;
        let mut best = self.adaptive(room, take);
        let val = self.static_fill(room, Weighing::Largest, Some(0));
        self.keep_fill_if_better(val, &mut best, take);
        for i in 0..weightings {
            let w = std::mem::take(&mut self.weightings[i]);
            let val = self.static_fill(room, Weighing::Weights(&w), Some(2 + i));
            self.weightings[i] = w;
            self.keep_fill_if_better(val, &mut best, take);
        }
        if thorough {
            best = self.polish(room, take, best, budget);
        }
        Some(best)
    }

    /// Local search from the fill `take` worth `val` in `room`: drop one
    /// pod of a class, or all of them, and fill the room freed with the
    /// other classes by value per size (the greedy's even weighting); the
    /// first change worth more is kept, until none is or `POLISH_PASSES`
    /// changes were made. The fill's value; `budget` is charged the
    /// classes per change tried (it stops early when spent).
    fn polish(
        &mut self,
        room: &[i64],
        take: &mut [usize],
        mut val: f64,
        budget: &mut usize,
    ) -> f64 {
        self.order_by_density(room, Weighing::Even, Some(1));
        let mut rem = room.to_vec();
        for (k, &t) in take.iter().enumerate() {
            let t = t as i64;
            for (r, q) in rem.iter_mut().zip(&self.need[k]) {
                *r -= q * t;
            }
        }
        let mut trial = take.to_vec();
        let mut trial_rem = rem.clone();
        for _ in 0..POLISH_PASSES {
            let mut improved = false;
            'drops: for a in (0..take.len()).filter(|&a| take[a] > 0) {
                // One pod, or all of them when that is more than one.
                for drop in std::iter::once(1).chain((take[a] > 1).then_some(take[a])) {
                    let Some(left) = budget.checked_sub(self.order.len()) else {
                        break 'drops;
                    };
                    *budget = left;
                    trial.copy_from_slice(take);
                    trial_rem.copy_from_slice(&rem);
                    let v = self.refill(a, drop, &mut trial, &mut trial_rem, val);
                    if v > val + 1e-12 * (1.0 + val) {
                        take.copy_from_slice(&trial);
                        rem.copy_from_slice(&trial_rem);
                        val = v;
                        improved = true;
                        break 'drops;
                    }
                }
            }
            if !improved {
                break;
            }
        }
        val
    }

    /// `drop` pods of class `a` out of the fill `take` (worth `val`, room
    /// left `rem`), then every other class in `self.order` as many as fit:
    /// the new fill's value.
    fn refill(&self, a: usize, drop: usize, take: &mut [usize], rem: &mut [i64], val: f64) -> f64 {
        take[a] -= drop;
        let dropped = drop as i64;
        for (r, q) in rem.iter_mut().zip(&self.need[a]) {
            *r += q * dropped;
        }
        let mut v = val - drop as f64 * self.value[a];
        for &k in self.order.iter().filter(|&&k| k != a) {
            let n = copies_up_to(rem, &self.need[k], self.most[k] - take[k] as i64);
            if n > 0 {
                for (r, q) in rem.iter_mut().zip(&self.need[k]) {
                    *r -= q * n;
                }
                take[k] += n as usize;
                v += n as f64 * self.value[k];
            }
        }
        v
    }

    /// The last static fill (of value `val`) as `best` and `take` when it
    /// is worth more.
    fn keep_fill_if_better(&self, val: f64, best: &mut f64, take: &mut Vec<usize>) {
        if val > *best + 1e-12 {
            *best = val;
            take.clone_from(&self.fill);
        }
    }

    /// Per dimension, what a need in it is multiplied by to size it
    /// relative to `room` under `weighing` (`f64::MAX` where the room has
    /// none: any need there sizes at least that, see `size`), in `out`;
    /// 0 in the padding up to `stride`.
    fn factors(&self, room: &[i64], weighing: Weighing, out: &mut Vec<f64>) {
        out.clear();
        out.extend(room[..self.dims].iter().enumerate().map(|(d, &r)| {
            if r <= 0 {
                return f64::MAX;
            }
            let w = match weighing {
                Weighing::Largest | Weighing::Even => 1.0,
                Weighing::Weights(w) => w.get(d).copied().unwrap_or(1.0),
            };
            w / r as f64
        }));
        out.resize(self.stride, 0.0);
    }

    /// Size of class `k` at `factors` (see `factors`): the largest of its
    /// dimensions' or their sum (infinite when it needs what the room
    /// lacks).
    ///
    /// Without a branch per dimension: a dimension the class does not need
    /// adds `0 * factor = 0`, and one it needs where the room has none
    /// adds at least `f64::MAX` (a need of one or more times the factor),
    /// which no real size reaches (needs are millis, factors at most 1).
    fn size(&self, k: usize, factors: &[f64], largest: bool) -> f64 {
        let row = &self.need_f[k * self.stride..(k + 1) * self.stride];
        debug_assert_eq!(factors.len(), self.stride);
        // A lane group at a time; the padding adds 0 (needs and factors
        // are 0 there), which changes neither a sum nor a largest.
        let lanes = row.chunks_exact(LANES).zip(factors.chunks_exact(LANES));
        let mut total = 0.0f64;
        if largest {
            for (q, f) in lanes {
                for l in 0..LANES {
                    total = total.max(q[l] * f[l]);
                }
            }
        } else {
            for (q, f) in lanes {
                for l in 0..LANES {
                    total += q[l] * f[l];
                }
            }
        }
        if total >= f64::MAX {
            f64::INFINITY
        } else {
            total
        }
    }

    /// Puts the classes that may be taken in `order`, by value per size
    /// relative to `room` (most first, then the first class). With a
    /// `slot`, from the order the last call with that slot left: one
    /// weighing orders a round's types much alike (their rooms differ
    /// mostly in scale), so sorting by insertion from it is nearly a pass.
    fn order_by_density(&mut self, room: &[i64], weighing: Weighing, slot: Option<usize>) {
        let mut factors = std::mem::take(&mut self.factors);
        self.factors(room, weighing, &mut factors);
        let largest = matches!(weighing, Weighing::Largest);
        let mut keyed = std::mem::take(&mut self.keyed);
        keyed.clear();
        keyed.resize(self.most.len(), 0);
        for k in (0..self.most.len()).filter(|&k| self.most[k] > 0) {
            let score = self.value[k] / self.size(k, &factors, largest);
            keyed[k] = order_key(descending_key(score), k);
        }
        let last = slot.and_then(|i| self.last_orders.get_mut(i));
        match last {
            Some(last) if !last.is_empty() => {
                self.order.clone_from(last);
                insertion_sort_by_key(&mut self.order, &keyed);
                last.clone_from(&self.order);
            }
            _ => {
                self.order.clear();
                self.order
                    .extend((0..self.most.len()).filter(|&k| self.most[k] > 0));
                self.order.sort_unstable_by_key(|&k| keyed[k]);
                if let Some(i) = slot {
                    if self.last_orders.len() <= i {
                        self.last_orders.resize(i + 1, Vec::new());
                    }
                    self.last_orders[i].clone_from(&self.order);
                }
            }
        }
        self.factors = factors;
        self.keyed = keyed;
    }

    /// Classes by value per size, each as many as fit in the room left:
    /// the value, and the pods per class in `self.fill`.
    fn static_fill(&mut self, room: &[i64], weighing: Weighing, slot: Option<usize>) -> f64 {
        self.order_by_density(room, weighing, slot);
        self.rem.clear();
        self.rem.extend_from_slice(room);
        self.fill.clear();
        self.fill.resize(self.most.len(), 0);
        let mut val = 0.0;
        for &k in &self.order {
            let n = copies_up_to(&self.rem, &self.need[k], self.most[k]);
            if n > 0 {
                for (r, q) in self.rem.iter_mut().zip(&self.need[k]) {
                    *r -= q * n;
                }
                self.fill[k] = n as usize;
                val += n as f64 * self.value[k];
            }
        }
        val
    }

    /// Repeatedly the class of most value per size relative to the room
    /// still free, half of what fits of it (at least one) at a time.
    /// The value, and the pods per class in `take`.
    fn adaptive(&mut self, room: &[i64], take: &mut Vec<usize>) -> f64 {
        let mut rem = std::mem::take(&mut self.rem);
        rem.clear();
        rem.extend_from_slice(room);
        take.clear();
        take.resize(self.most.len(), 0);
        let mut val = 0.0;
        let mut factors = std::mem::take(&mut self.factors);
        // The classes that may still fit, in order: the room only shrinks,
        // so one that does not fit is dropped for good.
        let mut alive = std::mem::take(&mut self.alive);
        alive.clear();
        alive.extend((0..self.most.len()).filter(|&k| self.most[k] > 0));
        let (dims, stride) = (self.dims, self.stride);
        let mut rem_f = std::mem::take(&mut self.rem_f);
        rem_f.clear();
        rem_f.extend(rem[..dims].iter().map(|&r| r as f64));
        rem_f.resize(stride, 0.0);
        loop {
            self.factors(&rem, Weighing::Even, &mut factors);
            let mut best: Option<(f64, usize)> = None;
            let mut kept = 0;
            for i in 0..alive.len() {
                let k = alive[i];
                if self.most[k] <= take[k] as i64 {
                    continue;
                }
                // The fit check and the size (as `size`'s) in one pass,
                // a lane group at a time (the padding needs nothing).
                let row = &self.need_f[k * stride..(k + 1) * stride];
                let (fits, size) = fits_and_size(row, &rem_f, &factors);
                let constraints = &self.constraint_needs[k];
                if !fits || constraints.iter().any(|&(d, q)| q > rem[d]) {
                    continue;
                }
                let score = self.value[k] / size;
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, k));
                }
                alive[kept] = k;
                kept += 1;
            }
            alive.truncate(kept);
            let Some((_, k)) = best else { break };
            let fit = copies_up_to(&rem, &self.need[k], self.most[k] - take[k] as i64);
            let n = (fit + 1) / 2;
            for (r, q) in rem.iter_mut().zip(&self.need[k]) {
                *r -= q * n;
            }
            for (rf, &r) in rem_f.iter_mut().zip(&rem[..dims]) {
                *rf = r as f64;
            }
            take[k] += n as usize;
            val += n as f64 * self.value[k];
        }
        self.factors = factors;
        self.alive = alive;
        self.rem = rem;
        self.rem_f = rem_f;
        val
    }

    /// A fill of `room` worth more than `floor` (with a margin), by
    /// depth-first search over the classes in order of value per size
    /// under `weights` (the LP relaxation's, see `relaxed`), each count
    /// from the most that fits down, pruned by a bound (the least of the
    /// relaxation's dual bound and, per dimension, the fractional knapsack
    /// of that dimension alone over the classes still to decide); within
    /// `budget` search nodes. Also the nodes searched.
    fn search(
        &mut self,
        room: &[i64],
        weights: &[f64],
        floor: f64,
        budget: usize,
    ) -> (Option<(f64, Vec<usize>)>, usize) {
        self.order_by_density(room, Weighing::Weights(weights), None);
        let mut search = Search {
            dual: DualBound::new(self.need, self.value, weights, room),
            by_dim: self.by_density(room.len()),
            knap: self,
            best: floor + 1e-9 * (1.0 + floor),
            found: None,
            take: vec![0; self.most.len()],
            budget,
        };
        let mut rem = room.to_vec();
        search.descend(0, &mut rem, 0.0);
        let nodes = budget - search.budget;
        (search.found.map(|take| (search.best, take)), nodes)
    }

    /// The LP relaxation of a node of `room`; `None` when `budget`
    /// (decremented by its work) is spent.
    fn relaxed(&self, room: &[i64], budget: &mut usize) -> Option<Relaxed> {
        let caps: Vec<i64> = (self.need.iter().zip(&self.most))
            .map(|(n, &most)| copies_up_to(room, n, most))
            .collect();
        let (weights, work) = surrogate_weights(self.need, self.value, &caps, room);
        *budget = budget.checked_sub(work)?;
        let all: Vec<usize> = (0..self.most.len()).collect();
        let bound = DualBound::new(self.need, self.value, &weights, room)
            .of(&all, self.need, &self.most, room);
        Some(Relaxed { weights, bound })
    }

    /// Per dimension, the positions in `order` of the classes needing it,
    /// by value per unit of it (most first), with that value per unit.
    fn by_density(&self, dims: usize) -> Vec<Vec<(usize, f64)>> {
        (0..dims)
            .map(|d| {
                let mut v: Vec<(usize, f64)> = (self.order.iter().enumerate())
                    .filter_map(|(pos, &k)| {
                        let q = self.need[k].get(d).copied().unwrap_or(0);
                        (q > 0).then(|| (pos, self.value[k] / q as f64))
                    })
                    .collect();
                v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                v
            })
            .collect()
    }
}

/// Resource dimensions handled together in the knapsack's fills.
const LANES: usize = 4;

/// Whether a class's `need` fits the room `rem` in every dimension, and
/// its size at `factors` (the sum of need × factor, in dimension order);
/// all three rows of whole `LANES`.
#[inline]
fn fits_and_size(need: &[f64], rem: &[f64], factors: &[f64]) -> (bool, f64) {
    // A shorter row would end the lanes early and skip dimensions.
    debug_assert!(need.len() == rem.len() && rem.len() == factors.len());
    debug_assert_eq!(need.len() % LANES, 0);
    let (mut fits, mut size) = (true, 0.0f64);
    let lanes = (need.chunks_exact(LANES))
        .zip(rem.chunks_exact(LANES))
        .zip(factors.chunks_exact(LANES));
    for ((q, r), f) in lanes {
        for l in 0..LANES {
            fits &= q[l] <= r[l];
            size += q[l] * f[l];
        }
    }
    (fits, size)
}

/// Sorts `order` (classes) ascending by `key` (per class, distinct), by
/// insertion: about one comparison per class when it is nearly sorted.
fn insertion_sort_by_key(order: &mut [usize], key: &[u128]) {
    for i in 1..order.len() {
        let k = order[i];
        let mut j = i;
        while j > 0 && key[order[j - 1]] > key[k] {
            order[j] = order[j - 1];
            j -= 1;
        }
        order[j] = k;
    }
}

/// `(key, k)` as one integer of the same order (a primitive sorts faster
/// than a pair): the key's bits, sign flipped, above the class.
fn order_key(key: i64, k: usize) -> u128 {
    let high = (key as u64) ^ (1 << 63);
    (u128::from(high) << 64) | k as u128
}

/// A key whose ascending order is `x`'s descending `total_cmp` order.
fn descending_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    // `f64::total_cmp`'s key: negative values' other bits flipped.
    !(bits ^ (((bits >> 63) as u64) >> 1) as i64)
}

/// The state of [`Knapsack::search`].
struct Search<'k, 'a> {
    knap: &'k Knapsack<'a>,
    /// See [`Knapsack::by_density`].
    by_dim: Vec<Vec<(usize, f64)>>,
    dual: DualBound,
    best: f64,
    found: Option<Vec<usize>>,
    take: Vec<usize>,
    budget: usize,
}

impl Search<'_, '_> {
    /// An upper bound on the value the classes from position `i` on can
    /// add in `rem`: the least of the relaxation's dual bound and, per
    /// dimension every class from `i` on needs, its fractional knapsack
    /// (no bound when some class needs none of it).
    fn bound(&self, i: usize, rem: &[i64]) -> f64 {
        let order = &self.knap.order;
        let mut least = f64::INFINITY;
        for (d, classes) in self.by_dim.iter().enumerate() {
            let needing = classes.iter().filter(|(pos, _)| *pos >= i).count();
            if needing < order.len() - i {
                continue;
            }
            let mut room = rem[d].max(0) as f64;
            let mut val = 0.0;
            for &(pos, per_unit) in classes.iter().filter(|(pos, _)| *pos >= i) {
                let k = order[pos];
                let q = self.knap.need[k][d] as f64;
                let n = (self.knap.most[k] as f64).min(room / q);
                val += n * q * per_unit;
                room -= n * q;
                if room <= 0.0 {
                    break;
                }
            }
            least = least.min(val);
        }
        let dual = (self.dual).of(&order[i..], self.knap.need, &self.knap.most, rem);
        least.min(dual)
    }

    fn descend(&mut self, i: usize, rem: &mut [i64], val: f64) {
        if self.budget == 0 {
            return;
        }
        self.budget -= 1;
        if val > self.best {
            self.best = val;
            self.found = Some(self.take.clone());
        }
        let Some(&k) = self.knap.order.get(i) else {
            return;
        };
        if val + self.bound(i, rem) * (1.0 + 1e-12) <= self.best {
            return;
        }
        let need = &self.knap.need[k];
        let most = copies_up_to(rem, need, self.knap.most[k]);
        for n in (0..=most).rev() {
            for (r, q) in rem.iter_mut().zip(need) {
                *r -= q * n;
            }
            self.take[k] = n as usize;
            self.descend(i + 1, rem, val + n as f64 * self.knap.value[k]);
            for (r, q) in rem.iter_mut().zip(need) {
                *r += q * n;
            }
        }
        self.take[k] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::repack::knapsack_lp::tests::best_fill;

    fn demand(need: &[[i64; 2]], counts: &[usize]) -> Demand {
        Demand {
            dims: vec!["cpu".into(), "memory".into()],
            resources: 2,
            need: need.iter().map(|n| n.to_vec()).collect(),
            per_node: vec![usize::MAX; need.len()],
            counts: counts.to_vec(),
            per_node_room: vec![],
        }
    }

    fn node(ty: usize, price: f64, room: [i64; 2]) -> PackType {
        PackType {
            ty,
            price,
            room: room.to_vec(),
        }
    }

    /// Per class, the pods the bins hold.
    fn placed(bins: &[Bin], classes: usize) -> Vec<usize> {
        let mut n = vec![0; classes];
        for b in bins {
            for &(k, c) in &b.fill {
                n[k] += c;
            }
        }
        n
    }

    /// (types as (room, price), classes as (cpu, memory), counts, the
    /// cheapest packing's price).
    type Case<'a> = (&'a [([i64; 2], f64)], &'a [[i64; 2]], &'a [usize], f64);

    /// Table of `Case`s.
    /// `descending_key` orders as `total_cmp` reversed, over signed zeros,
    /// infinities, NaN and ordinary values.
    #[test]
    fn descending_keys_order_as_total_cmp_reversed() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            3.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        for a in xs {
            for b in xs {
                assert_eq!(
                    descending_key(a).cmp(&descending_key(b)),
                    b.total_cmp(&a),
                    "{a} vs {b}"
                );
            }
        }
    }

    /// Sizes and fit checks over whole `LANES` (the rows padded with
    /// zeros) are the per-dimension sums, largests and comparisons, for
    /// one to nine resource dimensions, with rooms that lack a dimension
    /// and classes that need none of one.
    #[test]
    fn lane_padding_changes_no_size_or_fit() {
        let mut draw = crate::scheduler::test_draws(0x1a9e5);
        for case in 0..400 {
            let dims = 1 + case % 9;
            let classes = 1 + draw(6) as usize;
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| (0..dims).map(|_| draw(5) as i64 * 250).collect())
                .collect();
            let demand = Demand {
                dims: (0..dims).map(|d| format!("r{d}")).collect(),
                resources: dims,
                need,
                per_node: vec![usize::MAX; classes],
                counts: vec![3; classes],
                per_node_room: vec![],
            };
            let value: Vec<f64> = (0..classes).map(|_| 1.0 + draw(9) as f64).collect();
            let knap = Knapsack::new(&demand, &value, &demand.counts);
            let room: Vec<i64> = (0..dims).map(|_| draw(4) as i64 * 400).collect();
            let rem: Vec<f64> = (room.iter().chain(std::iter::repeat(&0)))
                .take(knap.stride)
                .map(|&r| r as f64)
                .collect();
            for weighing in [Weighing::Even, Weighing::Largest] {
                let mut factors = Vec::new();
                knap.factors(&room, weighing, &mut factors);
                assert_eq!(factors.len() % LANES, 0);
                let largest = matches!(weighing, Weighing::Largest);
                for (k, n) in demand.need.iter().enumerate() {
                    let terms = n.iter().zip(&factors).map(|(&q, &f)| q as f64 * f);
                    let naive = if largest {
                        terms.fold(0.0f64, f64::max)
                    } else {
                        terms.sum::<f64>()
                    };
                    let naive = if naive >= f64::MAX {
                        f64::INFINITY
                    } else {
                        naive
                    };
                    assert_eq!(
                        knap.size(k, &factors, largest),
                        naive,
                        "case {case} class {k}"
                    );
                    let row = &knap.need_f[k * knap.stride..(k + 1) * knap.stride];
                    let (fits, size) = fits_and_size(row, &rem, &factors);
                    let naive_fits = n.iter().zip(&room).all(|(q, r)| q <= r);
                    assert_eq!(fits, naive_fits, "case {case} class {k}");
                    if !largest && fits {
                        assert_eq!(size, naive, "case {case} class {k}");
                    }
                }
            }
        }
    }

    /// A random two-dimensional knapsack: 2 to `1 + spread` classes of
    /// random needs, counts and values, and a random room.
    struct RandomKnapsack {
        need: Vec<[i64; 2]>,
        counts: Vec<usize>,
        value: Vec<f64>,
        room: [i64; 2],
    }

    impl RandomKnapsack {
        fn draw(draw: &mut impl FnMut(u64) -> u64, spread: u64) -> RandomKnapsack {
            let classes = 2 + draw(spread) as usize;
            let need: Vec<[i64; 2]> = (0..classes)
                .map(|_| [1 + draw(9) as i64, 1 + draw(9) as i64])
                .collect();
            let counts: Vec<usize> = (0..classes).map(|_| 1 + draw(4) as usize).collect();
            let value: Vec<f64> = (0..classes).map(|_| 1.0 + draw(50) as f64 / 7.0).collect();
            let room = [8 + draw(20) as i64, 8 + draw(20) as i64];
            RandomKnapsack {
                need,
                counts,
                value,
                room,
            }
        }
    }

    /// The exact search with the relaxation's order and bound finds the
    /// best fill of random knapsacks (by enumeration) well within its nodes.
    #[test]
    fn the_search_finds_the_best_fill() {
        let mut draw = crate::scheduler::test_draws(11);
        for case in 0..150 {
            let RandomKnapsack {
                need,
                counts,
                value,
                room,
            } = RandomKnapsack::draw(&mut draw, 5);
            let d = demand(&need, &counts);
            let mut knap = Knapsack::new(&d, &value, &counts);
            let mut budget = usize::MAX;
            let relaxed = knap.relaxed(&room, &mut budget).unwrap();
            let (found, nodes) = knap.search(&room, &relaxed.weights, 0.0, 1_000_000);
            let need_rows: Vec<Vec<i64>> = need.iter().map(|n| n.to_vec()).collect();
            let caps: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
            let best = best_fill(&need_rows, &value, &caps, &room);
            let got = found.map_or(0.0, |f| f.0);
            assert!((got - best).abs() < 1e-9, "case {case}: {got} != {best}");
            assert!(
                relaxed.bound + 1e-9 >= best,
                "case {case}: bound below the best"
            );
            assert!(nodes < 1_000_000, "case {case}: the search did not finish");
        }
    }

    /// The greedy takes the densest class (one pod of it, which leaves no
    /// room for the other); dropping it for two of the other fills the node.
    #[test]
    fn polish_trades_a_dense_pod_for_two_that_fill_the_node() {
        let d = demand(&[[6, 1], [5, 5]], &[4, 4]);
        let value = [6.5, 5.5];
        let mut knap = Knapsack::new(&d, &value, &d.counts);
        let room = [10, 10];
        let greedy = knap.static_fill(&room, Weighing::Even, None);
        assert_eq!((greedy, knap.fill.clone()), (6.5, vec![1, 0]));
        let mut take = knap.fill.clone();
        let mut budget = 1_000;
        let polished = knap.polish(&room, &mut take, greedy, &mut budget);
        assert_eq!((polished, take), (11.0, vec![0, 2]));
        assert!(budget < 1_000, "the changes tried are charged");
    }

    /// On random knapsacks the local search keeps a fill that fits, its
    /// value what it claims, never less than the greedy's and never more
    /// than the best fill's; with no budget it changes nothing.
    #[test]
    fn polish_only_improves_a_fill() {
        let mut draw = crate::scheduler::test_draws(23);
        let mut improved = 0;
        for case in 0..300 {
            let RandomKnapsack {
                need,
                counts,
                value,
                room,
            } = RandomKnapsack::draw(&mut draw, 6);
            let d = demand(&need, &counts);
            let mut knap = Knapsack::new(&d, &value, &counts);
            let greedy = knap.static_fill(&room, Weighing::Even, None);
            let mut take = knap.fill.clone();
            let mut none = 0;
            let unchanged = knap.polish(&room, &mut take, greedy, &mut none);
            assert_eq!((unchanged, &take), (greedy, &knap.fill), "case {case}");
            let mut budget = usize::MAX;
            let got = knap.polish(&room, &mut take, greedy, &mut budget);
            let need_rows: Vec<Vec<i64>> = need.iter().map(|n| n.to_vec()).collect();
            let caps: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
            let best = best_fill(&need_rows, &value, &caps, &room);
            let worth: f64 = (take.iter().zip(&value)).map(|(&t, v)| t as f64 * v).sum();
            assert!((worth - got).abs() < 1e-9, "case {case}: {worth} != {got}");
            assert!(got + 1e-9 >= greedy && got <= best + 1e-9, "case {case}");
            for dim in 0..2 {
                let used: i64 = (take.iter().zip(&need))
                    .map(|(&t, n)| t as i64 * n[dim])
                    .sum();
                assert!(used <= room[dim], "case {case}: dimension {dim} overfull");
            }
            assert!(take.iter().zip(&counts).all(|(t, c)| t <= c), "case {case}");
            improved += usize::from(got > greedy + 1e-9);
        }
        assert!(improved > 10, "the local search improved {improved} fills");
    }

    /// Each is solved exactly by mixing classes of complementary shapes on
    /// one node; a fill of one class at a time wastes the other resource.
    #[test]
    fn complementary_shapes_share_nodes() {
        let cases: &[Case] = &[
            // cpu-heavy + memory-heavy fill a 4 cpu / 16 GiB node exactly.
            (
                &[([4000, 16384], 1.0)],
                &[[3000, 1024], [1000, 15360]],
                &[6, 6],
                6.0,
            ),
            // Three shapes, two node types at one price per resource: a
            // small node is filled exactly by one of each of the last two,
            // or by two of the first (12 small nodes, every resource used).
            (
                &[([4000, 16384], 1.0), ([2000, 8192], 0.5)],
                &[[1000, 4096], [1500, 1024], [500, 7168]],
                &[8, 8, 8],
                6.0,
            ),
        ];
        for (i, (types, need, counts, best)) in cases.iter().enumerate() {
            let cands: Vec<PackType> = (types.iter().enumerate())
                .map(|(t, (room, price))| node(t, *price, *room))
                .collect();
            let d = demand(need, counts);
            let mut prices = FillPrices::new(&cands, &d);
            let p = pattern_packing(&cands, &d, &mut prices, &[], WORK_PER_POD).unwrap();
            assert_eq!(placed(&p.bins, counts.len()), counts.to_vec(), "case {i}");
            assert!(p.cost <= best + 1e-9, "case {i}: {} > {best}", p.cost);
        }
    }

    /// An LP whose classes hold `MANY_PER_CLASS` pods each or more gets
    /// `CONVERGE_PER_ROW2` per row squared, within `SMALL_PLAN_MOST` per
    /// pod; one of fewer pods per class keeps its pods' share.
    #[test]
    fn lp_work_by_rows_where_classes_hold_many_pods() {
        let converge = |rows: usize| rows * rows * CONVERGE_PER_ROW2;
        // (rows, pods per class, work per pod, work)
        let cases = [
            (84, 119, WORK_PER_POD, converge(84)),
            (84, MANY_PER_CLASS - 1, WORK_PER_POD, 84 * 49 * WORK_PER_POD),
            (84, MANY_PER_CLASS, WORK_PER_POD, 84 * 50 * SMALL_PLAN_MOST),
            (10, 1_000, WORK_PER_POD, 10_000 * WORK_PER_POD),
            (2, 60, WORK_PER_POD, MIN_WORK),
            (41, 102, WORK_PER_POD, converge(41)),
        ];
        for (rows, per_class, per_pod, work) in cases {
            let d = demand(&vec![[100, 100]; rows], &vec![per_class; rows]);
            assert_eq!(lp_work(&d, per_pod), work, "{rows} rows of {per_class}");
        }
    }

    /// A round whose near types pay prices no far type; a round that adds
    /// no column has priced every type thoroughly (so the LP stops only
    /// where no type's thorough fill pays).
    #[test]
    fn pricing_reaches_far_types_only_when_no_near_one_pays() {
        // Two like types, the second far (at half its price when last
        // priced thoroughly).
        let cands = [node(0, 10.5, [10, 10]), node(1, 10.5, [10, 10])];
        let d = demand(&[[5, 3], [4, 5], [4, 1]], &[20, 20, 20]);
        let left = d.counts.clone();
        let mut pricing = Pricing::new(cands.len());
        pricing.closeness[1] = 0.5;
        let mut budget = usize::MAX;
        // One greedy fill takes two of the last class (10); the thorough
        // fill two of the second (11), which pays.
        let value = [2.5, 5.5, 5.0];
        let found = pricing.patterns(&cands, &d, &value, &left, &mut budget);
        let fills: Vec<(usize, &[usize])> = found.iter().map(|p| (p.ty, &p.take[..])).collect();
        assert_eq!(fills, [(0, &[0, 2, 0][..])]);
        assert_eq!(pricing.closeness[1], 0.5, "the far type was not priced");
        assert_eq!(pricing.priced, [true, false]);
        // Nothing pays: every type was priced, its closeness marked anew.
        let value = [1.0, 2.0, 2.0];
        let found = pricing.patterns(&cands, &d, &value, &left, &mut budget);
        assert!(found.is_empty());
        assert_eq!(pricing.priced, [true, true]);
        assert_ne!(pricing.closeness[1], 0.5);
    }

    /// A plan's LP work per pod: `SMALL_PLAN_MOST` up to 2,000 pods, then
    /// `SMALL_PLAN_WORK` shared, then `WORK_PER_POD`; the plan's
    /// LPs never spend more than the larger of `SMALL_PLAN_WORK` and
    /// `WORK_PER_POD` per pod.
    #[test]
    fn small_plans_get_more_lp_work_per_pod_within_a_cap() {
        let cases = [
            (0, 4_000),
            (1, 4_000),
            (1_000, 4_000),
            (2_000, 4_000),
            (4_000, 2_000),
            (5_000, 1_600),
            (8_000, 1_000),
            (10_000, 800),
            (1_000_000, 800),
        ];
        for (pods, per_pod) in cases {
            assert_eq!(work_per_pod(pods), per_pod, "{pods} pods");
        }
        for pods in (0..20_000).step_by(37) {
            let total = pods * work_per_pod(pods);
            assert!(total <= SMALL_PLAN_WORK.max(pods * WORK_PER_POD), "{pods}");
            assert!(work_per_pod(pods) >= WORK_PER_POD, "{pods}");
        }
    }

    /// The pods the LP's rounding leaves get the plan's greedy rounds
    /// before the LP, and one revaluation (two rounds) at least.
    #[test]
    fn the_pods_left_after_rounding_get_two_greedy_rounds_at_least() {
        // (pending pods in the plan, greedy rounds for the pods left)
        for (plan_pods, rounds) in [
            (1, super::super::ROUNDS),
            (2_000, super::super::ROUNDS),
            (2_700, 2),
            (5_000, 2),
            (10_000, 2),
            (1_000_000, 2),
        ] {
            assert_eq!(
                rest_rounds(work_per_pod(plan_pods)),
                rounds,
                "{plan_pods} pods"
            );
        }
    }

    /// The LP runs where its work units reach `AFFORDABLE × rows³` (and
    /// for two to `MAX_CLASSES` classes).
    #[test]
    fn the_lp_runs_only_where_its_work_affords_a_pivot_per_row() {
        // (classes, pods per class, pending pods in the plan, LP runs)
        let cases = [
            (1, 100, 10_000, false),
            (2, 10, 10_000, true),
            (100, 30, 10_000, true),
            // 4,500 pods × 800 units ≥ 150³
            (150, 30, 10_000, true),
            // 6,000 × 800 < 200³; a small plan's 4,000 units per pod afford it
            (200, 30, 10_000, false),
            (200, 30, 2_000, true),
            // `random`'s largest family at 10,000 pods
            (292, 30, 10_000, false),
            (257, 1_000, 2_000, false),
            // the floor of `MIN_WORK` units: 58³ < 200,000 < 59³
            (58, 1, 1_000_000, true),
            (59, 1, 1_000_000, false),
        ];
        for (classes, each, plan_pods, runs) in cases {
            let need = vec![[100, 128]; classes];
            let d = demand(&need, &vec![each; classes]);
            assert_eq!(
                applies(&d, work_per_pod(plan_pods)),
                runs,
                "{classes} classes of {each} pods in a plan of {plan_pods}"
            );
        }
    }

    /// A random packing case: 1-6 types of 1-16 cpu and 1-8 GiB per cpu at
    /// 0.5-1.25 $ per cpu, 2-11 classes of 50m-2 cpu and 64 MiB-4 GiB, 1-60
    /// pods each.
    fn random_case(
        next: &mut impl FnMut(u64) -> u64,
    ) -> (Vec<PackType>, Vec<[i64; 2]>, Vec<usize>) {
        let cands: Vec<PackType> = (0..1 + next(6) as usize)
            .map(|t| {
                let cpu = 1000 * (1 + next(16) as i64);
                let mem = cpu * (1 + next(8) as i64);
                node(
                    t,
                    cpu as f64 / 1000.0 * (0.5 + next(4) as f64 / 4.0),
                    [cpu, mem],
                )
            })
            .collect();
        let classes = 2 + next(10) as usize;
        let need: Vec<[i64; 2]> = (0..classes)
            .map(|_| [50 * (1 + next(40) as i64), 64 * (1 + next(64) as i64)])
            .collect();
        let counts: Vec<usize> = (0..classes).map(|_| 1 + next(60) as usize).collect();
        (cands, need, counts)
    }

    /// The greedy's nodes are the LP's first columns, so the LP it rounds
    /// never costs more than the greedy packing, even after one solve.
    #[test]
    fn the_lp_starts_no_dearer_than_the_greedy() {
        let mut next = crate::scheduler::test_draws(0x5eed_0f9e_ed00);
        for case in 0..60 {
            let (cands, need, counts) = random_case(&mut next);
            let classes = counts.len();
            let d = demand(&need, &counts);
            let mut prices = FillPrices::new(&cands, &d);
            let Some(greedy) = greedy_packing(&cands, &d, &mut prices, super::super::ROUNDS) else {
                continue;
            };
            let mut patterns = Patterns::default();
            for b in &greedy.bins {
                patterns.insert(Pattern::of_bin(b, classes));
            }
            let mut budget = usize::MAX;
            let x = cover(
                &cands,
                &d,
                &counts,
                &mut patterns,
                &mut prices,
                &mut budget,
                1,
            )
            .expect("the LP solves");
            let lp: f64 = (patterns.all.iter().zip(&x))
                .map(|(p, v)| v * prices.of(&Bin::of_counts(&p.clipped(&counts)).fill))
                .sum();
            assert!(
                lp <= greedy.cost + 1e-9,
                "case {case}: LP {lp} > greedy {}",
                greedy.cost
            );
        }
    }

    /// On random instances, whatever the work allowed (none at all, a
    /// little, plenty): every pod is placed exactly once, every node fits
    /// a type, and the cost is the nodes' prices; where the first two
    /// classes share a one-per-node constraint dimension, no node holds
    /// two of their pods.
    #[test]
    fn every_pod_is_placed_once_on_a_node_that_holds_it() {
        let mut next = crate::scheduler::test_draws(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..60 {
            let (mut cands, need, counts) = random_case(&mut next);
            let classes = counts.len();
            let mut d = demand(&need, &counts);
            if case % 3 == 0 {
                d.per_node[0] = 1;
            }
            let one_per_node = case % 4 == 1;
            if one_per_node {
                d.dims.push("one-per-node".into());
                for (k, n) in d.need.iter_mut().enumerate() {
                    n.push(i64::from(k < 2));
                }
                for c in &mut cands {
                    c.room.push(1);
                }
            }
            let fits_somewhere = need
                .iter()
                .all(|n| cands.iter().any(|c| c.room[0] >= n[0] && c.room[1] >= n[1]));
            for work in [0, 20_000, 5_000_000] {
                let mut prices = FillPrices::new(&cands, &d);
                let Some(p) =
                    packing_within(&cands, &d, &mut prices, &[], (work, super::super::ROUNDS))
                else {
                    assert!(!fits_somewhere, "case {case}, work {work}: no packing");
                    continue;
                };
                assert_eq!(placed(&p.bins, classes), counts, "case {case}, work {work}");
                let mut total = 0.0;
                for b in &p.bins {
                    assert!(b.fill.iter().all(|&(k, c)| c <= d.per_node[k]));
                    if one_per_node {
                        let shared: usize = (b.fill.iter())
                            .filter(|&&(k, _)| k < 2)
                            .map(|&(_, c)| c)
                            .sum();
                        assert!(shared <= 1, "case {case}, work {work}: {:?}", b.fill);
                    }
                    let price = prices.of(&b.fill);
                    assert!(price.is_finite(), "case {case}: a node no type holds");
                    total += price;
                }
                assert!((total - p.cost).abs() < 1e-9);
            }
        }
    }
}
