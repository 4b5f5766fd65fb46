//! An upper bound on the value one node's fill can hold of the pods left
//! (see `pack`): per dimension, the fractional knapsack of that dimension
//! alone (the classes taken by value per unit, most first, the last one in
//! part), and the least of those over the dimensions.
//!
//! `pack` weighs the types by it and computes the fill of a type only while
//! its price over the bound is below the best ratio so far. The bound of
//! the most value per unit times the room (`ValueBound`) ignores how few
//! pods carry that value: with every pod of its own size, nearly every
//! type passed it, and each node weighed a hundred fills.
//!
//! Each dimension keeps Fenwick sums, in its order, of the need and the
//! value of the pods a node may still take per class (the pods left, at
//! most the class's pods per node), so a bound costs a walk down the sums
//! and a class's pods going costs an update.

/// See the module documentation.
pub(super) struct FillBound {
    dims: Vec<DimKnapsack>,
}

/// One dimension's fractional knapsack (see [`FillBound`]).
struct DimKnapsack {
    dim: usize,
    /// Per class, its place in the order, or `None` when it needs none of
    /// the dimension.
    place: Vec<Option<usize>>,
    /// By place: need and value of one pod.
    need: Vec<i64>,
    value: Vec<f64>,
    /// Fenwick sums by place of need × pods and value × pods (in floating
    /// point: the bound has slack for their rounding, and no sum of
    /// requests overflows).
    need_sums: Vec<f64>,
    value_sums: Vec<f64>,
    /// Per class that needs none of the dimension, the value of one pod.
    free_value: Vec<f64>,
    /// The value of the pods that need none of the dimension.
    free: f64,
}

impl FillBound {
    /// The bound for classes needing `need` (per class, per dimension),
    /// valued at `value`, of which a node takes at most `per_node`, with
    /// `left` pods left. A dimension some class needs a negative amount
    /// of bounds nothing and is left out.
    pub(super) fn new(
        need: &[Vec<i64>],
        value: &[f64],
        per_node: &[usize],
        left: &[usize],
    ) -> FillBound {
        let dims = need.first().map_or(0, Vec::len);
        let dims = (0..dims)
            .filter(|&d| need.iter().all(|n| n.get(d).is_some_and(|&q| q >= 0)))
            .map(|d| DimKnapsack::new(d, need, value, per_node, left))
            .collect();
        FillBound { dims }
    }

    /// [`FillBound::new`] over the dimensions `at` only: a bound still,
    /// the least of fewer knapsacks.
    pub(super) fn over(
        need: &[Vec<i64>],
        value: &[f64],
        per_node: &[usize],
        left: &[usize],
        at: &[usize],
    ) -> FillBound {
        let dims = (at.iter().copied())
            .filter(|&d| need.iter().all(|n| n.get(d).is_some_and(|&q| q >= 0)))
            .map(|d| DimKnapsack::new(d, need, value, per_node, left))
            .collect();
        FillBound { dims }
    }

    /// Class `k`'s pods a node may take went from `was` to `now`.
    pub(super) fn update(&mut self, k: usize, was: usize, now: usize) {
        for d in &mut self.dims {
            d.update(k, was, now);
        }
    }

    /// The bound for a node of `room`, with a little slack for rounding
    /// (infinite: no bound).
    pub(super) fn of(&self, room: &[i64]) -> f64 {
        let bound = (self.dims.iter())
            .filter_map(|d| room.get(d.dim).map(|&r| d.most(r)))
            .fold(f64::INFINITY, f64::min);
        bound * (1.0 + 1e-9) + 1e-12
    }
}

impl DimKnapsack {
    fn new(
        dim: usize,
        need: &[Vec<i64>],
        value: &[f64],
        per_node: &[usize],
        left: &[usize],
    ) -> DimKnapsack {
        let q = |k: usize| need[k].get(dim).copied().unwrap_or(0);
        // Most value per unit first (a class's value / need), ties by class.
        let mut by_unit: Vec<(f64, usize)> = (0..need.len())
            .filter(|&k| q(k) > 0)
            .map(|k| (value[k] / q(k) as f64, k))
            .collect();
        by_unit.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let order: Vec<usize> = by_unit.into_iter().map(|(_, k)| k).collect();
        let mut place = vec![None; need.len()];
        for (i, &k) in order.iter().enumerate() {
            place[k] = Some(i);
        }
        let free_value = (0..need.len())
            .map(|k| if q(k) > 0 { 0.0 } else { value[k] })
            .collect();
        let mut knap = DimKnapsack {
            dim,
            place,
            need: order.iter().map(|&k| q(k)).collect(),
            value: order.iter().map(|&k| value[k]).collect(),
            need_sums: vec![0.0; order.len() + 1],
            value_sums: vec![0.0; order.len() + 1],
            free_value,
            free: 0.0,
        };
        for k in 0..need.len() {
            knap.update(k, 0, left[k].min(per_node[k]));
        }
        knap
    }

    fn update(&mut self, k: usize, was: usize, now: usize) {
        let pods = now as f64 - was as f64;
        let Some(at) = self.place[k] else {
            self.free += pods * self.free_value[k];
            return;
        };
        let need = pods * self.need[at] as f64;
        let value = pods * self.value[at];
        let mut i = at + 1;
        while i < self.need_sums.len() {
            self.need_sums[i] += need;
            self.value_sums[i] += value;
            i += i & i.wrapping_neg();
        }
    }

    /// The most value a room of `room` in this dimension holds,
    /// fractionally.
    fn most(&self, room: i64) -> f64 {
        let mut rest = room.max(0) as f64;
        let (mut at, mut value) = (0usize, self.free);
        let n = self.need_sums.len() - 1;
        let mut step = if n == 0 { 0 } else { 1 << n.ilog2() };
        while step > 0 {
            let next = at + step;
            if next <= n && self.need_sums[next] <= rest {
                at = next;
                rest -= self.need_sums[next];
                value += self.value_sums[next];
            }
            step >>= 1;
        }
        // Places before `at` fit whole; the one at `at` (if any) in part.
        if at < n {
            value += rest * self.value[at] / self.need[at] as f64;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most value of whole pods in `room`, by trying every take (few
    /// classes, few pods).
    fn best_whole(need: &[Vec<i64>], value: &[f64], most: &[usize], room: &[i64]) -> f64 {
        let Some((first, rest)) = most.split_first() else {
            return 0.0;
        };
        let n = &need[need.len() - most.len()];
        let v = value[value.len() - most.len()];
        let mut best = 0.0f64;
        for take in 0..=*first {
            let left: Vec<i64> = room
                .iter()
                .zip(n)
                .map(|(r, q)| r - q * take as i64)
                .collect();
            if left.iter().zip(n).any(|(&r, &q)| q > 0 && r < 0) {
                break;
            }
            let here = take as f64 * v + best_whole(need, value, rest, &left);
            best = best.max(here);
        }
        best
    }

    #[test]
    fn no_fill_is_worth_more_than_the_bound() {
        let mut draw = crate::scheduler::test_draws(5);
        let mut next = |n: u64| draw(n) as i64;
        for case in 0..300 {
            let dims = 1 + next(3) as usize;
            let classes = 1 + next(4) as usize;
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| (0..dims).map(|_| next(7)).collect())
                .collect();
            let value: Vec<f64> = (0..classes).map(|_| 0.1 + next(40) as f64 / 9.0).collect();
            let per_node: Vec<usize> = (0..classes).map(|_| 1 + next(4) as usize).collect();
            let mut left: Vec<usize> = (0..classes).map(|_| next(5) as usize).collect();
            let mut bound = FillBound::new(&need, &value, &per_node, &left);
            for step in 0..6 {
                let room: Vec<i64> = (0..dims).map(|_| next(30) - 2).collect();
                let most: Vec<usize> = left.iter().zip(&per_node).map(|(l, p)| *l.min(p)).collect();
                let best = best_whole(&need, &value, &most, &room);
                let b = bound.of(&room);
                assert!(
                    b >= best,
                    "case {case} step {step}: bound {b} < fill {best}"
                );
                let fresh = FillBound::new(&need, &value, &per_node, &left).of(&room);
                assert!(
                    (b - fresh).abs() <= 1e-9 * (1.0 + fresh),
                    "case {case}: {b} vs {fresh}"
                );
                let k = next(classes as u64) as usize;
                let was = left[k];
                left[k] = was.saturating_sub(1 + next(2) as usize);
                bound.update(k, was.min(per_node[k]), left[k].min(per_node[k]));
            }
        }
    }

    #[test]
    fn a_dense_class_of_few_pods_bounds_only_their_room() {
        // One pod worth 10 per unit of the single dimension, many worth 1:
        // a room of 100 holds at most 10 + 99, not 1,000.
        let need = vec![vec![1], vec![1]];
        let bound = FillBound::new(&need, &[10.0, 1.0], &[1, 500], &[1, 500]);
        let b = bound.of(&[100]);
        assert!((b - 109.0).abs() < 1e-6, "{b}");
        // A class that needs none of the dimension adds its pods' value.
        let need = vec![vec![2], vec![0]];
        let bound = FillBound::new(&need, &[4.0, 3.0], &[10, 2], &[10, 7]);
        let b = bound.of(&[5]);
        assert!((b - (10.0 + 6.0)).abs() < 1e-6, "{b}");
    }
}
