//! The greedy's classes with pods left, indexed by what they need, so a
//! node's first-fit fill (`fill_node`) finds the next class that fits its
//! room without walking every class: a packing of pods that each have
//! their own size has as many classes as pods, and a walk of all of them
//! per node tried made its cost pods × nodes × types.
//!
//! A segment tree over blocks of classes in fill order: each node keeps,
//! per dimension, the least need of a class with pods left below it (a
//! class needing none of a dimension is not limited by it), and how many
//! such classes there are. A subtree none of whose least needs exceeds the
//! room may hold a class that fits; one where some least need does cannot.
//! A leaf is a block of [`BLOCK`] classes, checked one by one: the walk of
//! a `--random` plan of 10,000 pods (classes of one to five pods, needs
//! uncorrelated across cpu and memory) descended the last three levels
//! mostly to find no class fitting there, and the blocks take 6% fewer
//! instructions for the whole plan (10.93 to 10.28 billion).

/// Classes per leaf block: a block's classes are checked one by one,
/// which costs less than descending the last levels of the tree to each.
const BLOCK: usize = 8;

/// See the module documentation.
#[derive(Debug, Clone)]
pub(super) struct ClassIndex {
    /// The dimensions indexed, as positions in a room.
    at: Vec<usize>,
    /// Whether `at` is the first `dims` positions (a room's first
    /// dimensions are read in place).
    leading: bool,
    dims: usize,
    /// Leaves of the tree (a power of two, at least the blocks), each a
    /// block of `BLOCK` classes.
    leaves: usize,
    /// Per class, per dimension, its need (`i64::MIN` where it needs
    /// none).
    need: Vec<i64>,
    /// Per class, whether it has pods left.
    alive: Vec<bool>,
    /// Per tree node (heap order, root 1), per dimension, the least need
    /// of a class with pods left below it; `i64::MIN` where one of them
    /// needs none of the dimension.
    least: Vec<i64>,
    /// Per tree node, the classes with pods left below it.
    live: Vec<u32>,
}

impl ClassIndex {
    /// The index of the classes needing `sparse` (per class, its non-zero
    /// needs as (dimension, need)) in `dims` dimensions, holding those
    /// `left` has pods of.
    pub(super) fn new(sparse: &[Vec<(usize, i64)>], dims: usize, left: &[usize]) -> ClassIndex {
        let at: Vec<usize> = (0..dims).collect();
        ClassIndex::over(sparse, &at, left)
    }

    /// The index of the classes needing `sparse` in the dimensions `at`
    /// only (their needs in the others are not looked at: a walk visits
    /// classes that fit the room in these), holding those `left` has pods
    /// of.
    pub(super) fn over(sparse: &[Vec<(usize, i64)>], at: &[usize], left: &[usize]) -> ClassIndex {
        let dims = at.len();
        let leaves = sparse.len().div_ceil(BLOCK).next_power_of_two().max(1);
        let mut index = ClassIndex {
            at: at.to_vec(),
            leading: at.iter().enumerate().all(|(i, &d)| i == d),
            dims,
            leaves,
            need: vec![i64::MIN; leaves * BLOCK * dims],
            alive: vec![false; leaves * BLOCK],
            least: vec![i64::MAX; 2 * leaves * dims],
            live: vec![0; 2 * leaves],
        };
        for (k, needs) in sparse.iter().enumerate() {
            if left.get(k).is_some_and(|&n| n > 0) {
                index.alive[k] = true;
                let row = &mut index.need[k * dims..(k + 1) * dims];
                for &(d, q) in needs {
                    if let Some(col) = at.iter().position(|&a| a == d).filter(|_| q > 0) {
                        row[col] = q;
                    }
                }
            }
        }
        for block in 0..leaves {
            index.pull_block(block);
        }
        for node in (1..leaves).rev() {
            index.pull(node);
        }
        index
    }

    /// Class `k` has no pods left.
    pub(super) fn remove(&mut self, k: usize) {
        if !self.alive.get(k).is_some_and(|&a| a) {
            return;
        }
        self.alive[k] = false;
        let block = k / BLOCK;
        self.pull_block(block);
        let mut node = self.leaves + block;
        while node > 1 {
            node /= 2;
            self.pull(node);
        }
    }

    /// Visits, in order, every class from `from` on with pods left that
    /// fits `room` as `visit` finds it (`visit` may take room): the
    /// classes a walk of those classes in order would find fitting, since
    /// a subtree none of whose classes fits the room when the walk reaches
    /// it takes nothing, so leaves the room as it found it.
    pub(super) fn visit_fitting_from(
        &self,
        from: usize,
        room: &mut [i64],
        visit: &mut impl FnMut(usize, &mut [i64]),
    ) {
        self.visit_below(1, 0, self.leaves, from, room, visit);
    }

    /// The walk below `node`, whose blocks are `lo..lo + width`, over the
    /// classes from `from` on.
    fn visit_below(
        &self,
        node: usize,
        lo: usize,
        width: usize,
        from: usize,
        room: &mut [i64],
        visit: &mut impl FnMut(usize, &mut [i64]),
    ) {
        if (lo + width) * BLOCK <= from || !self.may_fit(node, room) {
            return;
        }
        if width == 1 {
            let first = lo * BLOCK;
            for k in first.max(from)..first + BLOCK {
                if self.alive[k] && self.fits(&self.need[k * self.dims..(k + 1) * self.dims], room)
                {
                    visit(k, room);
                }
            }
            return;
        }
        let half = width / 2;
        self.visit_below(2 * node, lo, half, from, room, visit);
        self.visit_below(2 * node + 1, lo + half, half, from, room, visit);
    }

    /// Whether some class below `node` may fit `room`.
    fn may_fit(&self, node: usize, room: &[i64]) -> bool {
        self.live[node] != 0
            && self.fits(&self.least[node * self.dims..(node + 1) * self.dims], room)
    }

    /// Whether `least` (per indexed dimension) is within `room`.
    #[inline]
    fn fits(&self, least: &[i64], room: &[i64]) -> bool {
        match room.get(..self.dims) {
            Some(first) if self.leading => least.iter().zip(first).all(|(q, r)| q <= r),
            _ => (least.iter().zip(&self.at)).all(|(q, &d)| room.get(d).is_none_or(|r| q <= r)),
        }
    }

    /// Leaf `block`'s entries from its classes'.
    fn pull_block(&mut self, block: usize) {
        let dims = self.dims;
        let node = self.leaves + block;
        let least = &mut self.least[node * dims..(node + 1) * dims];
        least.fill(i64::MAX);
        let mut live = 0;
        for k in block * BLOCK..(block + 1) * BLOCK {
            if self.alive[k] {
                live += 1;
                let row = &self.need[k * dims..(k + 1) * dims];
                least
                    .iter_mut()
                    .zip(row)
                    .for_each(|(l, &q)| *l = (*l).min(q));
            }
        }
        self.live[node] = live;
    }

    /// Node `node`'s entries from its children's.
    fn pull(&mut self, node: usize) {
        let dims = self.dims;
        let (l, r) = (2 * node, 2 * node + 1);
        self.live[node] = self.live[l] + self.live[r];
        for d in 0..dims {
            self.least[node * dims + d] = self.least[l * dims + d].min(self.least[r * dims + d]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sparse_needs as sparse;
    use super::*;

    fn fits(need: &[i64], room: &[i64]) -> bool {
        need.iter().zip(room).all(|(&q, &r)| q <= 0 || q <= r)
    }

    /// The walk the index replaces: every class in order, each that fits
    /// taking its need from the room once.
    fn taken_by_walk(need: &[Vec<i64>], left: &[usize], room: &mut [i64]) -> Vec<usize> {
        let mut taken = vec![];
        for (k, n) in need.iter().enumerate() {
            if left[k] > 0 && fits(n, room) {
                taken.push(k);
                room.iter_mut().zip(n).for_each(|(r, q)| *r -= q);
            }
        }
        taken
    }

    /// The classes from `from` on that a walk of the index takes.
    fn taken_by_index(
        index: &ClassIndex,
        need: &[Vec<i64>],
        from: usize,
        room: &mut [i64],
    ) -> Vec<usize> {
        let mut taken = vec![];
        index.visit_fitting_from(from, room, &mut |k, room| {
            if fits(&need[k], room) {
                taken.push(k);
                room.iter_mut().zip(&need[k]).for_each(|(r, q)| *r -= q);
            }
        });
        taken
    }

    #[test]
    fn finds_the_class_a_walk_of_every_class_finds() {
        let mut draw = crate::scheduler::test_draws(11);
        let mut next = |n: u64| draw(n) as i64;
        for case in 0..200 {
            let dims = 1 + next(4) as usize;
            let classes = 1 + next(70) as usize;
            let need: Vec<Vec<i64>> = (0..classes)
                .map(|_| (0..dims).map(|_| next(12) - 2).collect())
                .collect();
            let mut left: Vec<usize> = (0..classes).map(|_| next(3) as usize).collect();
            let mut index = ClassIndex::new(&sparse(&need), dims, &left);
            for step in 0..40 {
                let room: Vec<i64> = (0..dims).map(|_| next(40) - 1).collect();
                let (mut walked, mut indexed) = (room.clone(), room.clone());
                assert_eq!(
                    taken_by_index(&index, &need, 0, &mut indexed),
                    taken_by_walk(&need, &left, &mut walked),
                    "case {case} step {step}: room {room:?}"
                );
                // From a class on (across blocks): what the walk from
                // there finds.
                let from = next(classes as u64 + 2) as usize;
                let mut rest = left.clone();
                rest.iter_mut().take(from).for_each(|n| *n = 0);
                let (mut walked, mut indexed) = (room.clone(), room.clone());
                assert_eq!(
                    taken_by_index(&index, &need, from, &mut indexed),
                    taken_by_walk(&need, &rest, &mut walked),
                    "case {case} step {step}: from {from}, room {room:?}"
                );
                let gone = next(classes as u64) as usize;
                left[gone] = 0;
                index.remove(gone);
            }
        }
    }

    #[test]
    fn a_class_needing_none_of_a_dimension_fits_a_room_short_of_it() {
        let need = vec![vec![4, 0], vec![0, 2]];
        let index = ClassIndex::new(&sparse(&need), 2, &[1, 1]);
        let visited = |room: &[i64]| {
            let mut seen = vec![];
            index.visit_fitting_from(0, &mut room.to_vec(), &mut |k, _| seen.push(k));
            seen
        };
        assert_eq!(visited(&[-1, 3]), vec![1]);
        assert_eq!(visited(&[5, -1]), vec![0]);
        assert_eq!(visited(&[3, 1]), Vec::<usize>::new());
    }
}
