//! A revised simplex for covering LPs, the master problem of the pattern
//! packing (`patterns`):
//!
//! ```text
//! min  c·x   s.t.  A x >= b,  x >= 0      (A >= 0, b > 0, c >= 0)
//! ```
//!
//! Columns are added between solves (column generation) and the basis is
//! kept, so each solve starts where the last one ended. Every row starts
//! with a column that covers it alone (the starting basis is diagonal, and
//! feasible), so no phase one is needed. The basis inverse is dense
//! (`rows²`): the masters here have one row per pod class, a few hundred at
//! most. Each row has an implicit surplus variable (`A x - s = b`, cost 0),
//! entering when its dual goes negative.
//!
//! Entering variable by Devex pricing (the most negative reduced cost
//! relative to its reference weight, an estimate of the edge's steepness:
//! on these degenerate covers it takes fewer pivots than Dantzig's rule),
//! switching to Bland's after a run of degenerate pivots (no cycling); the
//! inverse is rebuilt from the basis columns every `REFACTOR` pivots, and
//! the duals are updated by each pivot (recomputed at each rebuild).
//! Failures (a singular basis, the pivot budget spent) are errors: the
//! caller then keeps the packing it has.

/// Pivots between two rebuilds of the basis inverse.
const REFACTOR: usize = 64;

/// Degenerate pivots in a row after which Bland's rule takes over.
const DEGENERATE_RUN: usize = 32;

/// Reduced costs and ratios below this (relative) are zero.
const TOL: f64 = 1e-9;

/// A column of the covering LP: its cost and its non-zero entries
/// (row, coefficient > 0).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Column {
    pub cost: f64,
    pub entries: Vec<(usize, f64)>,
}

/// Why a solve stopped without an optimum.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum LpError {
    #[error("row {0} has no column covering it alone")]
    NoStartingColumn(usize),
    #[error("the basis is singular")]
    Singular,
    #[error("the work budget ran out")]
    PivotBudget,
}

/// A basic variable: a column, or the surplus of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Col(usize),
    Surplus(usize),
}

/// The LP and its current basis.
pub(super) struct CoverLp {
    b: Vec<f64>,
    cols: Vec<Column>,
    basis: Vec<Var>,
    in_basis: Vec<bool>,
    surplus_in_basis: Vec<bool>,
    /// Row-major `rows × rows` inverse of the basis matrix.
    binv: Vec<f64>,
    xb: Vec<f64>,
    /// The row duals at the basis (`c_B B⁻¹`).
    y: Vec<f64>,
    since_refactor: usize,
    /// Devex reference weights of the columns and of the row surpluses.
    col_weight: Vec<f64>,
    surplus_weight: Vec<f64>,
}

impl CoverLp {
    /// The LP `A x >= b` whose first columns are `start`: `start[i]` must
    /// cover row `i` alone.
    pub(super) fn new(b: Vec<f64>, start: Vec<Column>) -> Result<CoverLp, LpError> {
        let m = b.len();
        let mut binv = vec![0.0; m * m];
        let mut xb = vec![0.0; m];
        for i in 0..m {
            match start.get(i).map(|c| c.entries.as_slice()) {
                Some(&[(r, a)]) if r == i && a > 0.0 => {
                    binv[i * m + i] = 1.0 / a;
                    xb[i] = b[i] / a;
                }
                _ => return Err(LpError::NoStartingColumn(i)),
            }
        }
        let n = start.len();
        let mut in_basis = vec![false; n];
        in_basis[..m].iter_mut().for_each(|x| *x = true);
        let mut lp = CoverLp {
            basis: (0..m).map(Var::Col).collect(),
            b,
            cols: start,
            in_basis,
            surplus_in_basis: vec![false; m],
            binv,
            xb,
            y: Vec::new(),
            since_refactor: 0,
            col_weight: vec![1.0; n],
            surplus_weight: vec![1.0; m],
        };
        lp.y = lp.basis_duals();
        Ok(lp)
    }

    /// Adds a column (not yet in the basis); its index.
    pub(super) fn add(&mut self, col: Column) -> usize {
        self.cols.push(col);
        self.in_basis.push(false);
        self.col_weight.push(1.0);
        self.cols.len() - 1
    }

    /// The objective at the current basis.
    #[cfg(test)]
    pub(super) fn objective(&self) -> f64 {
        self.basis
            .iter()
            .zip(&self.xb)
            .map(|(v, x)| self.cost(*v) * x)
            .sum()
    }

    /// The row duals at the current basis (`c_B B⁻¹`).
    pub(super) fn duals(&self) -> Vec<f64> {
        self.y.clone()
    }

    /// `c_B B⁻¹` from the basis inverse.
    fn basis_duals(&self) -> Vec<f64> {
        let m = self.b.len();
        let mut y = vec![0.0; m];
        for (i, v) in self.basis.iter().enumerate() {
            let c = self.cost(*v);
            if c != 0.0 {
                for (yj, bij) in y.iter_mut().zip(&self.binv[i * m..(i + 1) * m]) {
                    *yj += c * bij;
                }
            }
        }
        y
    }

    /// Each column's value at the current basis.
    pub(super) fn values(&self) -> Vec<f64> {
        let mut x = vec![0.0; self.cols.len()];
        for (v, &xv) in self.basis.iter().zip(&self.xb) {
            if let Var::Col(j) = v {
                x[*j] = xv.max(0.0);
            }
        }
        x
    }

    /// Pivots to the optimum over the columns added so far, within
    /// `budget` work units (decremented; a pivot costs the rows squared
    /// plus the columns). The basis stays feasible when the budget runs
    /// out: `values` is then a cover, not the cheapest.
    pub(super) fn solve(&mut self, budget: &mut usize) -> Result<(), LpError> {
        let mut degenerate = 0;
        loop {
            let bland = degenerate >= DEGENERATE_RUN;
            let Some((q, reduced)) = self.entering(bland) else {
                return Ok(());
            };
            let m = self.b.len();
            let cost = m.saturating_mul(m).saturating_add(self.cols.len());
            *budget = budget.checked_sub(cost).ok_or(LpError::PivotBudget)?;
            let w = self.column_in_basis(q);
            let Some(r) = self.leaving(&w, bland) else {
                // A covering LP with c >= 0 is bounded: only rounding
                // gets here.
                return Err(LpError::Singular);
            };
            let theta = self.xb[r] / w[r];
            degenerate = if theta <= TOL { degenerate + 1 } else { 0 };
            self.pivot(r, q, &w, theta, reduced);
            if self.since_refactor >= REFACTOR {
                self.refactor()?;
            }
        }
    }

    fn cost(&self, v: Var) -> f64 {
        match v {
            Var::Col(j) => self.cols[j].cost,
            Var::Surplus(_) => 0.0,
        }
    }

    /// The entering variable and its reduced cost: the most negative
    /// reduced cost relative to its Devex weight (its square over the
    /// weight), or the first negative one (Bland); `None` at the optimum.
    fn entering(&self, bland: bool) -> Option<(Var, f64)> {
        let y = &self.y;
        // (score, variable, reduced cost); the least score enters.
        let mut best: Option<(f64, Var, f64)> = None;
        let mut consider = |d: f64, weight: f64, v: Var| {
            let score = -d * d / weight;
            if best.is_none_or(|(bs, _, _)| score < bs) {
                best = Some((score, v, d));
            }
        };
        for (j, c) in self.cols.iter().enumerate() {
            if self.in_basis[j] {
                continue;
            }
            let d = c.cost - c.entries.iter().map(|&(i, a)| y[i] * a).sum::<f64>();
            if d < -TOL * (1.0 + c.cost) {
                consider(d, self.col_weight[j], Var::Col(j));
                if bland {
                    return best.map(|(_, v, d)| (v, d));
                }
            }
        }
        for (i, &yi) in y.iter().enumerate() {
            if !self.surplus_in_basis[i] && yi < -TOL {
                consider(yi, self.surplus_weight[i], Var::Surplus(i));
                if bland {
                    break;
                }
            }
        }
        best.map(|(_, v, d)| (v, d))
    }

    /// `B⁻¹ a` for the column of variable `v`.
    fn column_in_basis(&self, v: Var) -> Vec<f64> {
        let m = self.b.len();
        let mut w = vec![0.0; m];
        let mut add = |row: usize, a: f64| {
            for (k, wk) in w.iter_mut().enumerate() {
                *wk += self.binv[k * m + row] * a;
            }
        };
        match v {
            Var::Col(j) => self.cols[j].entries.iter().for_each(|&(i, a)| add(i, a)),
            Var::Surplus(i) => add(i, -1.0),
        }
        w
    }

    /// The ratio test: the basic row that leaves (least `xb / w` over
    /// `w > 0`; ties to the larger `w`, or under Bland to the lowest
    /// variable).
    fn leaving(&self, w: &[f64], bland: bool) -> Option<usize> {
        let mut best: Option<(f64, usize)> = None;
        for (i, (&wi, &xi)) in w.iter().zip(&self.xb).enumerate() {
            if wi <= TOL {
                continue;
            }
            let ratio = xi.max(0.0) / wi;
            let better = match best {
                None => true,
                Some((br, bi)) => {
                    ratio < br - TOL
                        || (ratio <= br + TOL
                            && if bland {
                                self.order(self.basis[i]) < self.order(self.basis[bi])
                            } else {
                                wi > w[bi]
                            })
                }
            };
            if better {
                best = Some((ratio, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Bland's order of the variables: columns, then surpluses.
    fn order(&self, v: Var) -> usize {
        match v {
            Var::Col(j) => j,
            Var::Surplus(i) => self.cols.len() + i,
        }
    }

    /// Row `r`'s basic variable leaves, `q` (of reduced cost `reduced`)
    /// enters with value `theta`.
    fn pivot(&mut self, r: usize, q: Var, w: &[f64], theta: f64, reduced: f64) {
        let m = self.b.len();
        self.update_weights(r, q, w[r]);
        // y' = y + (d_q / w_r) · (row r of B⁻¹), before B⁻¹ changes.
        let step = reduced / w[r];
        for (yi, &p) in self.y.iter_mut().zip(&self.binv[r * m..(r + 1) * m]) {
            *yi += step * p;
        }
        for (i, x) in self.xb.iter_mut().enumerate() {
            *x -= theta * w[i];
        }
        self.xb[r] = theta;
        let pivot_row: Vec<f64> = self.binv[r * m..(r + 1) * m]
            .iter()
            .map(|v| v / w[r])
            .collect();
        for (i, &wi) in w.iter().enumerate() {
            let row = &mut self.binv[i * m..(i + 1) * m];
            if i == r {
                row.copy_from_slice(&pivot_row);
            } else if wi != 0.0 {
                for (v, p) in row.iter_mut().zip(&pivot_row) {
                    *v -= wi * p;
                }
            }
        }
        self.set_basic(self.basis[r], false);
        self.set_basic(q, true);
        self.basis[r] = q;
        self.since_refactor += 1;
    }

    /// Devex: the reference weights once `q` enters at row `r` (pivot
    /// element `alpha_q`), from the pivot row (row `r` of `B⁻¹ A`) over the
    /// nonbasic variables: each weight at least its ratio to the pivot
    /// element squared times `q`'s; the leaving variable's `q`'s over the
    /// pivot element squared (at least 1).
    fn update_weights(&mut self, r: usize, q: Var, alpha_q: f64) {
        let m = self.b.len();
        let rho = &self.binv[r * m..(r + 1) * m];
        let wq = match q {
            Var::Col(j) => self.col_weight[j],
            Var::Surplus(i) => self.surplus_weight[i],
        };
        let raised = |weight: &mut f64, alpha: f64| {
            let ratio = alpha / alpha_q;
            *weight = weight.max(ratio * ratio * wq);
        };
        for (j, c) in self.cols.iter().enumerate() {
            if !self.in_basis[j] {
                let alpha: f64 = c.entries.iter().map(|&(i, a)| rho[i] * a).sum();
                raised(&mut self.col_weight[j], alpha);
            }
        }
        for (i, &p) in rho.iter().enumerate() {
            if !self.surplus_in_basis[i] {
                raised(&mut self.surplus_weight[i], -p);
            }
        }
        let leaving = (wq / (alpha_q * alpha_q)).max(1.0);
        match self.basis[r] {
            Var::Col(j) => self.col_weight[j] = leaving,
            Var::Surplus(i) => self.surplus_weight[i] = leaving,
        }
    }

    fn set_basic(&mut self, v: Var, on: bool) {
        match v {
            Var::Col(j) => self.in_basis[j] = on,
            Var::Surplus(i) => self.surplus_in_basis[i] = on,
        }
    }

    /// Rebuilds the inverse from the basis columns (Gauss-Jordan with
    /// partial pivoting) and the basic values from it.
    fn refactor(&mut self) -> Result<(), LpError> {
        let m = self.b.len();
        let mut a = vec![0.0; m * m];
        for (k, v) in self.basis.iter().enumerate() {
            match *v {
                Var::Col(j) => {
                    for &(i, x) in &self.cols[j].entries {
                        a[i * m + k] = x;
                    }
                }
                Var::Surplus(i) => a[i * m + k] = -1.0,
            }
        }
        self.binv = invert(a, m).ok_or(LpError::Singular)?;
        for (i, x) in self.xb.iter_mut().enumerate() {
            let row = &self.binv[i * m..(i + 1) * m];
            *x = row.iter().zip(&self.b).map(|(p, b)| p * b).sum();
        }
        self.y = self.basis_duals();
        self.since_refactor = 0;
        Ok(())
    }
}

/// The inverse of the row-major `m × m` matrix `a`, or `None` when it is
/// (numerically) singular.
fn invert(mut a: Vec<f64>, m: usize) -> Option<Vec<f64>> {
    let mut inv = vec![0.0; m * m];
    for i in 0..m {
        inv[i * m + i] = 1.0;
    }
    for col in 0..m {
        let p = (col..m).max_by(|&x, &y| a[x * m + col].abs().total_cmp(&a[y * m + col].abs()))?;
        if a[p * m + col].abs() < 1e-12 {
            return None;
        }
        if p != col {
            for k in 0..m {
                a.swap(p * m + k, col * m + k);
                inv.swap(p * m + k, col * m + k);
            }
        }
        let d = a[col * m + col];
        for k in 0..m {
            a[col * m + k] /= d;
            inv[col * m + k] /= d;
        }
        for i in 0..m {
            let f = a[i * m + col];
            if i != col && f != 0.0 {
                for k in 0..m {
                    a[i * m + k] -= f * a[col * m + k];
                    inv[i * m + k] -= f * inv[col * m + k];
                }
            }
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(cost: f64, entries: &[(usize, f64)]) -> Column {
        Column {
            cost,
            entries: entries.to_vec(),
        }
    }

    /// A cover of `m` random rows, each with a random column of its own.
    fn random_cover(next: &mut impl FnMut(u64) -> u64, m: usize) -> (Vec<f64>, CoverLp) {
        let b: Vec<f64> = (0..m).map(|_| 1.0 + next(40) as f64).collect();
        let start: Vec<Column> = (0..m)
            .map(|i| col(1.0 + next(5) as f64, &[(i, 1.0 + next(4) as f64)]))
            .collect();
        let lp = CoverLp::new(b.clone(), start).unwrap();
        (b, lp)
    }

    /// Up to `count` random columns, each covering a row with chance
    /// `1 / one_in`.
    fn add_random_columns(
        lp: &mut CoverLp,
        next: &mut impl FnMut(u64) -> u64,
        count: usize,
        one_in: u64,
    ) {
        let m = lp.b.len();
        for _ in 0..count {
            let mut entries: Vec<(usize, f64)> = Vec::new();
            for i in 0..m {
                if next(one_in) == 0 {
                    entries.push((i, 1.0 + next(5) as f64));
                }
            }
            if !entries.is_empty() {
                lp.add(col(0.5 + next(6) as f64, &entries));
            }
        }
    }

    /// Cutting stock by hand: rolls of 10, orders of 3 pieces of 4 and 5
    /// of 3. One size per roll (2 of 4, or 3 of 3) costs 1.5 + 5/3 rolls;
    /// with the mixed pattern (one 4, two 3s: 10) the LP takes 2.5 mixed
    /// rolls (all the 3s and 2.5 of the 4s) and a quarter of a roll of 4s:
    /// 2.75, with duals 1/2 and 1/4.
    #[test]
    fn the_master_finds_the_mixed_pattern_cheaper() {
        let start = vec![col(1.0, &[(0, 2.0)]), col(1.0, &[(1, 3.0)])];
        let mut lp = CoverLp::new(vec![3.0, 5.0], start).unwrap();
        let mut budget = 1_000;
        lp.solve(&mut budget).unwrap();
        assert!((lp.objective() - (1.5 + 5.0 / 3.0)).abs() < 1e-9);
        lp.add(col(1.0, &[(0, 1.0), (1, 2.0)]));
        lp.solve(&mut budget).unwrap();
        assert!((lp.objective() - 2.75).abs() < 1e-9, "{}", lp.objective());
        let x = lp.values();
        let want = [0.25, 0.0, 2.5];
        assert!(
            x.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9),
            "{x:?}"
        );
        let y = lp.duals();
        assert!(
            (y[0] - 0.5).abs() < 1e-9 && (y[1] - 0.25).abs() < 1e-9,
            "{y:?}"
        );
    }

    /// Duals price every column at or below its cost at the optimum, and
    /// the objective equals b·y (strong duality), on random covering LPs.
    #[test]
    fn optimum_satisfies_strong_duality_on_random_covers() {
        let mut next = crate::scheduler::test_draws(7u64);
        for _ in 0..200 {
            let m = 1 + next(8) as usize;
            let (b, mut lp) = random_cover(&mut next, m);
            add_random_columns(&mut lp, &mut next, 3 * m, 2);
            let mut budget = 10_000_000;
            lp.solve(&mut budget).unwrap();
            let y = lp.duals();
            let x = lp.values();
            assert!(y.iter().all(|&v| v >= -1e-9), "{y:?}");
            for (j, c) in lp.cols.iter().enumerate() {
                let priced: f64 = c.entries.iter().map(|&(i, a)| y[i] * a).sum();
                assert!(priced <= c.cost + 1e-7, "column {j}");
            }
            for (i, bi) in b.iter().enumerate() {
                let covered: f64 = (lp.cols.iter().zip(&x))
                    .map(|(c, xv)| xv * c.entries.iter().find(|e| e.0 == i).map_or(0.0, |e| e.1))
                    .sum();
                assert!(covered >= bi - 1e-7, "row {i}: {covered} < {bi}");
            }
            let dual: f64 = y.iter().zip(&b).map(|(a, b)| a * b).sum();
            assert!((dual - lp.objective()).abs() < 1e-7 * (1.0 + dual));
        }
    }

    /// Columns added in batches with a solve after each (as the column
    /// generation does): the duals each pivot updates stay those of the
    /// basis, and each optimum prices every column at no more than its
    /// cost.
    #[test]
    fn duals_follow_the_basis_across_solves() {
        let mut next = crate::scheduler::test_draws(31u64);
        for _ in 0..60 {
            let m = 1 + next(40) as usize;
            let (_, mut lp) = random_cover(&mut next, m);
            for _ in 0..4 {
                add_random_columns(&mut lp, &mut next, 2 * m, 3);
                let mut budget = 100_000_000;
                lp.solve(&mut budget).unwrap();
                let (kept, fresh) = (lp.duals(), lp.basis_duals());
                for (a, b) in kept.iter().zip(&fresh) {
                    assert!((a - b).abs() < 1e-7 * (1.0 + b.abs()), "{a} != {b}");
                }
                for c in &lp.cols {
                    let priced: f64 = c.entries.iter().map(|&(i, a)| fresh[i] * a).sum();
                    assert!(priced <= c.cost + 1e-7);
                }
            }
        }
    }

    #[test]
    fn a_row_without_its_own_column_is_refused() {
        let start = vec![col(1.0, &[(0, 2.0), (1, 1.0)]), col(1.0, &[(1, 3.0)])];
        assert_eq!(
            CoverLp::new(vec![1.0, 1.0], start).err(),
            Some(LpError::NoStartingColumn(0))
        );
    }
}
