//! The LP relaxation of one node's knapsack in the pattern pricing: pods
//! of each class (at most `caps` of them, fractions allowed) of most value
//! within the node's room. Its dual prices, one per dimension, are the
//! weights under which the one-dimensional surrogate knapsack is as tight
//! as the LP: ordering the classes by value per surrogate size gives the
//! greedy fill and the search order of most promise, and the dual function
//! bounds every sub-problem of the exact search (see `DualBound`).
//!
//! The LP has one row per dimension (a handful) and one bounded column per
//! class, so a bounded-variable primal simplex with a dense basis inverse
//! of dimensions × dimensions solves it in a few pivots.

/// Iterations at most, per row and column (degenerate cycling ends there;
/// the prices reached still give a valid bound).
const ITERATIONS_PER_VARIABLE: usize = 8;

/// Reduced values below this (on rows scaled to a room of 1) do not enter.
const EPS: f64 = 1e-12;

/// The dual prices of the LP `max Σ value[k]·x[k]` subject to
/// `Σ need[k][d]·x[k] <= room[d]` per dimension and `0 <= x[k] <= caps[k]`,
/// per dimension relative to the room (the price of dimension `d`'s whole
/// room, so the surrogate size of class `k` is `Σ_d w[d]·need[k][d]/room[d]`),
/// never negative. Also the work done (rows times columns per iteration,
/// rows squared per move).
pub(super) fn surrogate_weights(
    need: &[Vec<i64>],
    value: &[f64],
    caps: &[i64],
    room: &[i64],
) -> (Vec<f64>, usize) {
    let mut lp = BoundedLp::new(need, value, caps, room);
    // An iteration prices every column; a move costs a direction.
    let per_iteration = (lp.cols.len() + 1).saturating_mul(lp.rows + 1);
    let per_move = (lp.rows + 1).saturating_mul(lp.rows + 1);
    let limit = ITERATIONS_PER_VARIABLE.saturating_mul(lp.cols.len() + lp.rows);
    let mut work = per_iteration;
    for _ in 0..limit {
        let moves = lp.step();
        work = work.saturating_add(per_iteration + moves.saturating_mul(per_move));
        if moves == 0 {
            break;
        }
    }
    let weights = lp.duals().into_iter().map(|y| y.max(0.0)).collect();
    (weights, work)
}

/// What moving one nonbasic variable did.
enum Advance {
    /// It reached its other bound; the basis stands.
    Flipped,
    /// It entered the basis.
    Pivoted,
    /// Nothing bounds it (a bug: every class is bounded).
    Unbounded,
}

/// A variable of [`BoundedLp`]: a class's column or a row's slack.
#[derive(Clone, Copy, PartialEq)]
enum Var {
    Class(usize),
    Slack(usize),
}

/// A class's column, scaled to rooms of 1.
struct Col {
    value: f64,
    upper: f64,
    entries: Vec<f64>,
    at_upper: bool,
    basic: bool,
}

/// The state of the bounded-variable simplex (maximising).
struct BoundedLp {
    rows: usize,
    cols: Vec<Col>,
    basis: Vec<Var>,
    /// Row-major inverse of the basis matrix.
    inverse: Vec<f64>,
    /// Values of the basic variables, per row.
    xb: Vec<f64>,
    slack_basic: Vec<bool>,
}

impl BoundedLp {
    /// Every class at 0, every slack basic (the room is the right-hand side,
    /// scaled to 1; a dimension without room keeps its scale: 0).
    fn new(need: &[Vec<i64>], value: &[f64], caps: &[i64], room: &[i64]) -> BoundedLp {
        let rows = room.len();
        let scale: Vec<f64> = room.iter().map(|&r| (r.max(1)) as f64).collect();
        let cols = (need.iter().zip(value).zip(caps))
            .map(|((n, &v), &cap)| Col {
                value: v,
                upper: cap.max(0) as f64,
                entries: (0..rows)
                    .map(|d| n.get(d).copied().unwrap_or(0).max(0) as f64 / scale[d])
                    .collect(),
                at_upper: false,
                basic: false,
            })
            .collect();
        let mut inverse = vec![0.0; rows * rows];
        for r in 0..rows {
            inverse[r * rows + r] = 1.0;
        }
        BoundedLp {
            rows,
            cols,
            basis: (0..rows).map(Var::Slack).collect(),
            inverse,
            xb: (room.iter().zip(&scale))
                .map(|(&r, s)| r.max(0) as f64 / s)
                .collect(),
            slack_basic: vec![true; rows],
        }
    }

    fn cost(&self, v: Var) -> f64 {
        match v {
            Var::Class(k) => self.cols[k].value,
            Var::Slack(_) => 0.0,
        }
    }

    fn upper(&self, v: Var) -> f64 {
        match v {
            Var::Class(k) => self.cols[k].upper,
            Var::Slack(_) => f64::INFINITY,
        }
    }

    /// `c_B B⁻¹`: the dual price of each row.
    fn duals(&self) -> Vec<f64> {
        let m = self.rows;
        let mut y = vec![0.0; m];
        for (r, &v) in self.basis.iter().enumerate() {
            let c = self.cost(v);
            if c != 0.0 {
                for (i, yi) in y.iter_mut().enumerate() {
                    *yi += c * self.inverse[r * m + i];
                }
            }
        }
        y
    }

    /// The nonbasic variables whose move improves the objective, with their
    /// gain per unit and whether they increase, most gain first.
    fn improving(&self, y: &[f64]) -> Vec<(f64, Var, bool)> {
        let mut found = Vec::new();
        for (k, c) in self.cols.iter().enumerate() {
            if c.basic || c.upper <= 0.0 {
                continue;
            }
            let d = c.value - c.entries.iter().zip(y).map(|(a, p)| a * p).sum::<f64>();
            let gain = if c.at_upper { -d } else { d };
            if gain > EPS {
                found.push((gain, Var::Class(k), !c.at_upper));
            }
        }
        for (r, &basic) in self.slack_basic.iter().enumerate() {
            if !basic && -y[r] > EPS {
                found.push((-y[r], Var::Slack(r), true));
            }
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        found
    }

    /// `B⁻¹ a` for variable `v`.
    fn direction(&self, v: Var) -> Vec<f64> {
        let m = self.rows;
        match v {
            Var::Class(k) => (0..m)
                .map(|r| {
                    let row = &self.inverse[r * m..(r + 1) * m];
                    row.iter()
                        .zip(&self.cols[k].entries)
                        .map(|(b, a)| b * a)
                        .sum()
                })
                .collect(),
            Var::Slack(s) => (0..m).map(|r| self.inverse[r * m + s]).collect(),
        }
    }

    /// One iteration at the current duals: the improving variables, most
    /// gain first, each moved until its other bound (a flip: the duals
    /// stand, the next one moves) or until a basic variable reaches a bound
    /// (a pivot, which ends the iteration). The number of moves, 0 at the
    /// optimum.
    fn step(&mut self) -> usize {
        let y = self.duals();
        let improving = self.improving(&y);
        for (moves, &(_, q, up)) in improving.iter().enumerate() {
            match self.advance(q, up) {
                Advance::Flipped => {}
                Advance::Pivoted | Advance::Unbounded => return moves + 1,
            }
        }
        improving.len()
    }

    /// Moves nonbasic `q` up (or down) as far as the bounds allow.
    fn advance(&mut self, q: Var, up: bool) -> Advance {
        let w = self.direction(q);
        let sign = if up { 1.0 } else { -1.0 };
        // The step `t` the entering variable moves; basic r moves by -sign·t·w[r].
        let mut t = self.upper(q);
        let mut leaving: Option<(usize, bool)> = None;
        for (r, &wr) in w.iter().enumerate() {
            let delta = sign * wr;
            let (limit, to_upper) = if delta > EPS {
                (self.xb[r].max(0.0) / delta, false)
            } else if delta < -EPS {
                let u = self.upper(self.basis[r]);
                ((u - self.xb[r]).max(0.0) / -delta, true)
            } else {
                continue;
            };
            if limit < t {
                t = limit;
                leaving = Some((r, to_upper));
            }
        }
        if !t.is_finite() {
            return Advance::Unbounded;
        }
        for (x, wr) in self.xb.iter_mut().zip(&w) {
            *x -= sign * t * wr;
        }
        let Some((r, to_upper)) = leaving else {
            // The entering class reaches its other bound first.
            if let Var::Class(k) = q {
                self.cols[k].at_upper = up;
            }
            return Advance::Flipped;
        };
        let entering_value = if up { t } else { self.upper(q) - t };
        self.pivot(r, &w);
        let out = std::mem::replace(&mut self.basis[r], q);
        self.set_basic(out, false, to_upper);
        self.set_basic(q, true, false);
        self.xb[r] = entering_value;
        Advance::Pivoted
    }

    fn set_basic(&mut self, v: Var, basic: bool, at_upper: bool) {
        match v {
            Var::Class(k) => {
                self.cols[k].basic = basic;
                self.cols[k].at_upper = at_upper;
            }
            Var::Slack(s) => self.slack_basic[s] = basic,
        }
    }

    /// The inverse after column `w` (`B⁻¹ a_q`) replaces row `r`'s.
    fn pivot(&mut self, r: usize, w: &[f64]) {
        let m = self.rows;
        let p = w[r];
        let pivot_row: Vec<f64> = (self.inverse[r * m..(r + 1) * m].iter())
            .map(|b| b / p)
            .collect();
        for (i, (row, &f)) in self.inverse.chunks_mut(m).zip(w).enumerate() {
            if i == r {
                row.copy_from_slice(&pivot_row);
            } else if f != 0.0 {
                for (b, pr) in row.iter_mut().zip(&pivot_row) {
                    *b -= f * pr;
                }
            }
        }
    }
}

/// The dual function of the LP relaxation at fixed weights: an upper
/// bound on the value of any fill of any room (the weights need not be
/// optimal for it), `Σ_d price[d]·rem[d] + Σ_k fit_k·max(0, value[k] -
/// price·need[k])` over the classes still to decide, `fit_k` being how
/// many of class `k` the room takes.
pub(super) struct DualBound {
    /// Per dimension, the price of one unit.
    unit: Vec<f64>,
    /// Per class, its value less its priced size (may be negative).
    reduced: Vec<f64>,
}

impl DualBound {
    /// The bound at `weights` (see [`surrogate_weights`]) for a node of `room`.
    pub(super) fn new(
        need: &[Vec<i64>],
        value: &[f64],
        weights: &[f64],
        room: &[i64],
    ) -> DualBound {
        let unit: Vec<f64> = (weights.iter().zip(room))
            .map(|(w, &r)| if r > 0 { w / r as f64 } else { 0.0 })
            .collect();
        let reduced = (need.iter().zip(value))
            .map(|(n, v)| v - n.iter().zip(&unit).map(|(&q, u)| q as f64 * u).sum::<f64>())
            .collect();
        DualBound { unit, reduced }
    }

    /// The bound on what `classes` (at most `most[k]` each) add in `rem`.
    pub(super) fn of(
        &self,
        classes: &[usize],
        need: &[Vec<i64>],
        most: &[i64],
        rem: &[i64],
    ) -> f64 {
        let mut total: f64 = (self.unit.iter().zip(rem))
            .map(|(u, &r)| u * r.max(0) as f64)
            .sum();
        for &k in classes {
            let r = self.reduced[k];
            if r > 0.0 {
                total += r * super::copies_up_to(rem, &need[k], most[k]) as f64;
            }
        }
        total
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The most any integer fill of `room` is worth (at most `caps[k]` of
    /// class `k`), by enumerating every fill.
    pub(in crate::scheduler::repack) fn best_fill(
        need: &[Vec<i64>],
        value: &[f64],
        caps: &[i64],
        room: &[i64],
    ) -> f64 {
        let classes = value.len();
        let mut best = 0.0f64;
        let mut take = vec![0i64; classes];
        loop {
            let fits = room
                .iter()
                .enumerate()
                .all(|(d, &r)| (0..classes).map(|k| need[k][d] * take[k]).sum::<i64>() <= r);
            if fits {
                best = best.max((0..classes).map(|k| value[k] * take[k] as f64).sum());
            }
            let mut k = 0;
            while k < classes && take[k] == caps[k] {
                take[k] = 0;
                k += 1;
            }
            if k == classes {
                return best;
            }
            take[k] += 1;
        }
    }

    /// The LP optimum at `weights`, by the dual bound over every class.
    fn bound(need: &[Vec<i64>], value: &[f64], caps: &[i64], room: &[i64]) -> f64 {
        let (w, _) = surrogate_weights(need, value, caps, room);
        let all: Vec<usize> = (0..value.len()).collect();
        DualBound::new(need, value, &w, room).of(&all, need, caps, room)
    }

    #[test]
    fn one_dimension_is_the_fractional_knapsack() {
        // Room 10; values 6 (size 4), 5 (size 5), 3 (size 6), caps 1 each:
        // 6 + 5 + 1/6·3 = 11.5.
        let need = vec![vec![4], vec![5], vec![6]];
        let got = bound(&need, &[6.0, 5.0, 3.0], &[1, 1, 1], &[10]);
        assert!((got - 11.5).abs() < 1e-9, "{got}");
    }

    #[test]
    fn two_dimensions_find_the_mixed_optimum() {
        // Room (10 cpu, 10 memory): a cpu-heavy class (4, 1) and a
        // memory-heavy one (1, 4), value 1 each, 10 of each allowed. The LP
        // takes 2 of each (value 4, both rows full); either dimension alone
        // bounds it by 10 (ten of the light side).
        let need = vec![vec![4, 1], vec![1, 4]];
        let got = bound(&need, &[1.0, 1.0], &[10, 10], &[10, 10]);
        assert!((got - 4.0).abs() < 1e-9, "{got}");
    }

    #[test]
    fn the_bound_holds_for_every_integer_fill_of_random_instances() {
        let mut draw = crate::scheduler::test_draws(7);
        for _ in 0..1000 {
            let classes = 1 + draw(6) as usize;
            let dims = 1 + draw(3) as usize;
            // Some dimensions without room, some classes needing nothing.
            let room: Vec<i64> = (0..dims).map(|_| (draw(25) as i64 - 5).max(0)).collect();
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| (0..dims).map(|_| draw(8) as i64).collect())
                .collect();
            let value: Vec<f64> = (0..classes)
                .map(|_| 1.0 + draw(100) as f64 / 10.0)
                .collect();
            let caps: Vec<i64> = (0..classes).map(|_| draw(4) as i64).collect();
            let lp = bound(&need, &value, &caps, &room);
            let best = best_fill(&need, &value, &caps, &room);
            assert!(lp.is_finite(), "bound {lp}");
            assert!(lp + 1e-9 >= best, "bound {lp} below a fill worth {best}");
        }
    }
}
