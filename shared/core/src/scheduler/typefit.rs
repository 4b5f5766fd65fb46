//! Which of a NodePool's instance types hold a request, as bit sets: per
//! resource of a [`Compact`] list, the types whose allocatable reaches each
//! value any type has. A request's types are one row per resource ANDed
//! with a [`TypeSet`], a word (64 types) at a time, where asking each type
//! took a pass over hundreds of them at every trial placement.

use crate::resources::{Compact, Resources, BEYOND, COMPACT, KNOWN};
use crate::Quantity;

use super::pools::PoolType;
use super::typeset::TypeSet;

// `TypeSet::first_in_all` and `in_all` take one mask per compact resource.
const _: () = assert!(COMPACT == 4);

/// Per resource of a [`Compact`] list, the types (with a compact
/// allocatable) whose allocatable reaches each value; the types without
/// one are asked one by one.
#[derive(Debug, Clone, Default)]
pub struct TypeFitIndex {
    /// Words per row: one bit per pool type.
    words: usize,
    dims: Vec<Thresholds>,
    /// Types whose allocatable has no compact form (see
    /// [`crate::resources::Resources::compact_capacity`]), ascending.
    loose: Vec<usize>,
    /// Per [`KNOWN`] resource past the compact ones (accelerators, ENIs),
    /// the types with a compact allocatable whose allocatable reaches each
    /// value (empty until [`Self::with_allocatables`]): a request for a
    /// GPU is held only by the types in its row.
    extra: Vec<Thresholds>,
}

/// One resource: its distinct allocatable values, ascending, and per value
/// the row of types whose allocatable is at least that.
#[derive(Debug, Clone, Default)]
struct Thresholds {
    values: Vec<i64>,
    /// `values.len()` rows of `words` words.
    rows: Vec<u64>,
}

impl TypeFitIndex {
    /// The index of types whose compact allocatables are `compact` (in
    /// pool type order).
    pub fn new(compact: &[Option<Compact>]) -> TypeFitIndex {
        let words = compact.len().div_ceil(64);
        let loose = (compact.iter().enumerate())
            .filter(|(_, c)| c.is_none())
            .map(|(t, _)| t)
            .collect();
        let dims = (0..COMPACT)
            .map(|d| Thresholds::new(compact, d, words))
            .collect();
        TypeFitIndex {
            words,
            dims,
            loose,
            extra: Vec::new(),
        }
    }

    /// With rows for the [`KNOWN`] resources past the compact ones, from
    /// the types' `allocatable` (in pool type order, the types `new` was
    /// given; a type without a compact allocatable is in no row).
    pub fn with_allocatables(mut self, allocatable: &[&Resources]) -> TypeFitIndex {
        let compact: Vec<bool> = (0..allocatable.len())
            .map(|t| !self.loose.contains(&t))
            .collect();
        let beyond: Vec<[i64; BEYOND]> = allocatable.iter().map(|a| a.beyond_compact()).collect();
        self.extra = (0..BEYOND)
            .map(|e| {
                let column: Vec<Option<i64>> = (beyond.iter().zip(&compact))
                    .map(|(a, &c)| c.then_some(a[e]))
                    .collect();
                Thresholds::of_column(&column, self.words)
            })
            .collect();
        self
    }

    /// The first (cheapest) type of `types` (and of `within`, if given)
    /// that holds `requests`, which have no compact form: only the types
    /// whose allocatable reaches its compact head (`head`) and its
    /// [`KNOWN`] resources past those are asked (`holds`), in order, and
    /// the types without a compact allocatable.
    pub fn first_holding_beyond(
        &self,
        types: &TypeSet,
        within: Option<&TypeSet>,
        (head, requests): (&Compact, &Resources),
        mut holds: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let indexed = self.rows(head).and_then(|rows| {
            // The compact rows, then one per resource past them asked for.
            let mut masks: [&[u64]; COMPACT + BEYOND] = [&[]; COMPACT + BEYOND];
            masks[..COMPACT].copy_from_slice(&rows);
            let mut n = COMPACT;
            for (dim, want) in self.extra.iter().zip(requests.beyond_compact()) {
                if want > 0 {
                    masks[n] = dim.at_least(want, self.words)?;
                    n += 1;
                }
            }
            let found = types.iter_in_all(within, &masks[..n]).find(|&t| holds(t));
            found
        });
        let loose = (self.loose.iter().copied())
            .take_while(|&t| indexed.is_none_or(|i| t < i))
            .find(|&t| types.contains(t) && within.is_none_or(|w| w.contains(t)) && holds(t));
        loose.or(indexed)
    }

    /// Per resource, the row of types holding `request`'s quantity of it;
    /// `None` when no type with a compact allocatable holds it.
    fn rows(&self, request: &Compact) -> Option<[&[u64]; COMPACT]> {
        let mut rows: [&[u64]; COMPACT] = [&[]; COMPACT];
        for ((row, dim), &want) in rows.iter_mut().zip(&self.dims).zip(request.quantities()) {
            *row = dim.at_least(want, self.words)?;
        }
        Some(rows)
    }

    /// The first (cheapest) type of `types` (and of `within`, if given)
    /// that holds `request`, asking `holds` for the types without a
    /// compact allocatable.
    pub fn first_holding(
        &self,
        types: &TypeSet,
        within: Option<&TypeSet>,
        request: &Compact,
        mut holds: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let indexed = self.rows(request).and_then(|rows| match within {
            Some(w) => types.first_in_all_within(&rows, w),
            None => types.first_in_all(&rows),
        });
        let loose = (self.loose.iter().copied())
            .take_while(|&t| indexed.is_none_or(|i| t < i))
            .find(|&t| types.contains(t) && within.is_none_or(|w| w.contains(t)) && holds(t));
        loose.or(indexed)
    }

    /// The types of `types` that hold `request`, asking `holds` for the
    /// types without a compact allocatable.
    pub fn holding(
        &self,
        types: &TypeSet,
        request: &Compact,
        mut holds: impl FnMut(usize) -> bool,
    ) -> TypeSet {
        let mut out = match self.rows(request) {
            Some(rows) => types.in_all(&rows),
            None => types.empty_like(),
        };
        for &t in &self.loose {
            if types.contains(t) && holds(t) {
                out.insert(t);
            }
        }
        out
    }
}

/// Per [`KNOWN`] resource, the types reaching each value any type's
/// allocatable and capacity has: a type set's component-wise maxima by
/// a binary search over the rows each, where a pass over the set took
/// every type's two resource lists.
#[derive(Debug, Clone, Default)]
pub struct TypeMaximaIndex {
    words: usize,
    allocatable: Vec<Thresholds>,
    capacity: Vec<Thresholds>,
    /// Types with a resource beyond the known ones, ascending.
    other: Vec<usize>,
}

impl TypeMaximaIndex {
    /// The index of `types` (in pool type order).
    pub fn new(types: &[PoolType]) -> TypeMaximaIndex {
        let words = types.len().div_ceil(64);
        let column = |d: usize, of: fn(&PoolType) -> &Resources| {
            let values: Vec<Option<i64>> = (types.iter())
                .map(|t| Some(of(t).known()[d].millis()))
                .collect();
            Thresholds::of_column(&values, words)
        };
        TypeMaximaIndex {
            words,
            allocatable: (0..KNOWN.len())
                .map(|d| column(d, |t| &t.allocatable))
                .collect(),
            capacity: (0..KNOWN.len())
                .map(|d| column(d, |t| &t.capacity))
                .collect(),
            other: (types.iter().enumerate())
                .filter(|(_, t)| t.allocatable.has_other() || t.capacity.has_other())
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// Component-wise maxima of allocatable and capacity over `set` (of
    /// `types`, the index's); zero where no type has more.
    pub fn maxima(&self, types: &[PoolType], set: &TypeSet) -> (Resources, Resources) {
        let mut allocatable = Resources::new();
        let mut capacity = Resources::new();
        for (out, dims) in [
            (&mut allocatable, &self.allocatable),
            (&mut capacity, &self.capacity),
        ] {
            for (i, dim) in dims.iter().enumerate() {
                if let Some(v) = dim.largest_in(set, self.words) {
                    out.raise_known(i, Quantity::from_millis(v));
                }
            }
        }
        for &t in &self.other {
            if let Some(ty) = types.get(t).filter(|_| set.contains(t)) {
                allocatable.max_assign(&ty.allocatable);
                capacity.max_assign(&ty.capacity);
            }
        }
        (allocatable, capacity)
    }
}

impl Thresholds {
    /// Resource `d` of the types `compact`.
    fn new(compact: &[Option<Compact>], d: usize, words: usize) -> Thresholds {
        let values: Vec<Option<i64>> = (compact.iter())
            .map(|c| c.map(|c| c.quantities()[d]))
            .collect();
        Thresholds::of_column(&values, words)
    }

    /// The types' `values` (types without one are in no row).
    fn of_column(column: &[Option<i64>], words: usize) -> Thresholds {
        let mut by_value: Vec<(i64, usize)> = (column.iter().enumerate())
            .filter_map(|(t, v)| v.map(|v| (v, t)))
            .collect();
        // Largest first: each value's row is the one before plus its types.
        by_value.sort_unstable_by(|a, b| b.cmp(a));
        let mut values: Vec<i64> = Vec::new();
        let mut rows: Vec<u64> = Vec::new();
        let mut row = vec![0u64; words];
        for (i, &(v, t)) in by_value.iter().enumerate() {
            row[t / 64] |= 1u64 << (t % 64);
            if by_value.get(i + 1).is_none_or(|&(next, _)| next != v) {
                values.push(v);
                rows.extend_from_slice(&row);
            }
        }
        // Ascending values, their rows in the same order.
        values.reverse();
        let rows = rows.chunks(words.max(1)).rev().flatten().copied().collect();
        Thresholds { values, rows }
    }

    /// The largest value of a type in `set`; `None` when no type of `set`
    /// has one.
    fn largest_in(&self, set: &TypeSet, words: usize) -> Option<i64> {
        let row = |i: usize| self.rows.get(i * words..(i + 1) * words).unwrap_or(&[]);
        if !set.meets(row(0)) {
            return None;
        }
        // Rows shrink as the value grows: the last row `set` meets.
        let (mut lo, mut hi) = (0, self.values.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if set.meets(row(mid)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.values.get(lo).copied()
    }

    /// The row of types whose allocatable is at least `want`; `None` when
    /// none is.
    fn at_least(&self, want: i64, words: usize) -> Option<&[u64]> {
        let i = self.values.partition_point(|&v| v < want);
        if i == self.values.len() {
            return None;
        }
        self.rows.get(i * words..(i + 1) * words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use crate::Quantity;

    fn compact(cpu: i64, mem: i64) -> Option<Compact> {
        Resources::new()
            .with("cpu", Quantity::from_millis(cpu))
            .with("memory", Quantity::from_millis(mem))
            .with("pods", Quantity::from_millis(110_000))
            .compact_capacity()
    }

    /// Against asking every type, on random allocatables (with ties,
    /// negatives and types without a compact form) and random requests.
    #[test]
    fn holding_is_what_asking_each_type_gives() {
        let mut next = crate::scheduler::test_draws(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..200 {
            let n = 1 + next(200) as usize;
            let types: Vec<Option<Compact>> = (0..n)
                .map(|_| match next(10) {
                    0 => None,
                    _ => compact(next(8) as i64 * 500 - 500, next(6) as i64 * 1000),
                })
                .collect();
            let index = TypeFitIndex::new(&types);
            let set = TypeSet::from_indices((0..n).filter(|_| next(4) != 0), n);
            let want = compact(next(9) as i64 * 400 - 400, next(7) as i64 * 900)
                .expect("a compact request");
            // Types without a compact form hold it on odd indices.
            let holds = |t: usize| match types[t] {
                Some(c) => want.fits_in(&c),
                None => t % 2 == 1,
            };
            let expected: Vec<usize> = set.iter().filter(|&t| holds(t)).collect();
            let got = index.holding(&set, &want, holds);
            assert_eq!(got.iter().collect::<Vec<_>>(), expected, "round {round}");
            assert_eq!(got.len(), expected.len(), "round {round}");
            assert_eq!(got.first(), expected.first().copied(), "round {round}");
            let first = index.first_holding(&set, None, &want, holds);
            assert_eq!(first, expected.first().copied(), "round {round}");
            // Within a second random set (a pod's types).
            let within = TypeSet::from_indices((0..n).filter(|_| next(3) != 0), n);
            let expected = expected.iter().copied().find(|&t| within.contains(t));
            let first = index.first_holding(&set, Some(&within), &want, holds);
            assert_eq!(first, expected, "round {round}, within");
        }
    }

    /// Requests past the compact resources (GPUs, pod ENIs) against
    /// asking every type, on random allocatables with and without them.
    #[test]
    fn holding_beyond_the_compact_resources_is_what_asking_each_type_gives() {
        let mut next = crate::scheduler::test_draws(0x51ed_270b_2026);
        let of = |cpu: u64, gpu: u64, eni: u64| {
            Resources::new()
                .with("cpu", Quantity::from_millis(cpu as i64 * 500))
                .with("memory", Quantity::from_millis(4000))
                .with("pods", Quantity::from_millis(110_000))
                .with(
                    crate::resources::NVIDIA_GPU,
                    Quantity::from_millis(gpu as i64 * 1000),
                )
                .with(
                    crate::resources::POD_ENI,
                    Quantity::from_millis(eni as i64 * 1000),
                )
        };
        for round in 0..200 {
            let n = 1 + next(150) as usize;
            let alloc: Vec<Resources> = (0..n).map(|_| of(next(8), next(3), next(4))).collect();
            // Every tenth type without a compact form (asked one by one).
            let compact: Vec<Option<Compact>> = (alloc.iter().enumerate())
                .map(|(t, a)| (t % 10 != 3).then(|| a.compact_capacity()).flatten())
                .collect();
            let refs: Vec<&Resources> = alloc.iter().collect();
            let index = TypeFitIndex::new(&compact).with_allocatables(&refs);
            let set = TypeSet::from_indices((0..n).filter(|_| next(4) != 0), n);
            let want = of(next(9), next(3), next(3));
            let holds = |t: usize| want.fits_in(&alloc[t]);
            let within = TypeSet::from_indices((0..n).filter(|_| next(3) != 0), n);
            for within in [None, Some(&within)] {
                let expected =
                    (set.iter()).find(|&t| within.is_none_or(|w| w.contains(t)) && holds(t));
                let head = want.compact_head();
                let got = index.first_holding_beyond(&set, within, (&head, &want), holds);
                assert_eq!(got, expected, "round {round}");
            }
        }
    }

    #[test]
    fn an_empty_pool_holds_nothing() {
        let index = TypeFitIndex::new(&[]);
        let want = compact(1, 1).expect("a compact request");
        let none = TypeSet::from_indices([], 0);
        assert_eq!(index.first_holding(&none, None, &want, |_| true), None);
        assert!(index.holding(&none, &want, |_| true).is_empty());
    }
}
