//! Typed indices into one run's tables: its pending pods (`Run::pods`),
//! planned NodeClaims (`Run::claims`) and NodePool views (`Run::pools`).
//! Each wraps a `usize` (zero cost) so a pod index cannot be used where a
//! NodeClaim's is meant; slices and vectors are indexed by them directly,
//! so side tables kept per pod, per NodeClaim or per NodePool read as the
//! tables themselves do.

use std::ops::{Index, IndexMut};

/// Defines a typed index: the newtype, its constructors and accessors,
/// and `Index`/`IndexMut` for slices and vectors.
macro_rules! typed_index {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(crate) struct $name(usize);

        // Every index gets the full set; not every one uses each.
        #[allow(dead_code)]
        impl $name {
            /// The index at position `i` of its table.
            #[inline]
            pub(crate) const fn new(i: usize) -> Self {
                $name(i)
            }

            /// Its position in its table.
            #[inline]
            pub(crate) const fn get(self) -> usize {
                self.0
            }

            /// The indices of a table of `n` entries, ascending.
            #[inline]
            pub(crate) fn all(n: usize) -> impl DoubleEndedIterator<Item = Self> + Clone {
                (0..n).map($name)
            }

            /// The entries of `items` with their indices, ascending.
            #[inline]
            pub(crate) fn enumerate<T>(items: &[T]) -> impl DoubleEndedIterator<Item = (Self, &T)> {
                items.iter().enumerate().map(|(i, x)| ($name(i), x))
            }
        }

        impl<T> Index<$name> for [T] {
            type Output = T;
            #[inline]
            fn index(&self, i: $name) -> &T {
                &self[i.0]
            }
        }

        impl<T> IndexMut<$name> for [T] {
            #[inline]
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.0]
            }
        }

        impl<T> Index<$name> for Vec<T> {
            type Output = T;
            #[inline]
            fn index(&self, i: $name) -> &T {
                &self[i.0]
            }
        }

        impl<T> IndexMut<$name> for Vec<T> {
            #[inline]
            fn index_mut(&mut self, i: $name) -> &mut T {
                &mut self[i.0]
            }
        }
    };
}

typed_index!(
    /// A pending pod of the run: an index into `Run::pods` (and the per-pod
    /// tables: volumes, topology groups, hints' classes, errors).
    PodIdx
);
typed_index!(
    /// A NodeClaim planned in the run: an index into `Run::claims`.
    ClaimIdx
);
typed_index!(
    /// A NodePool of the run: an index into `Run::pools` (and the per-pool
    /// tables: domains, blocked pools).
    PoolIdx
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_indices_index_like_usize() {
        let mut v = vec![10, 20, 30];
        let p = PodIdx::new(1);
        assert_eq!(p.get(), 1);
        assert_eq!(v[p], 20);
        v[p] += 1;
        assert_eq!(v.as_slice()[p], 21);
        let s: &mut [i32] = &mut v;
        s[PodIdx::new(2)] = 7;
        assert_eq!(v, [10, 21, 7]);
        let all: Vec<ClaimIdx> = ClaimIdx::all(3).collect();
        assert_eq!(all, [ClaimIdx::new(0), ClaimIdx::new(1), ClaimIdx::new(2)]);
        assert!(PoolIdx::new(0) < PoolIdx::new(1));
        let e: Vec<(PoolIdx, &i32)> = PoolIdx::enumerate(&v).collect();
        assert_eq!(e[2], (PoolIdx::new(2), &7));
    }
}
