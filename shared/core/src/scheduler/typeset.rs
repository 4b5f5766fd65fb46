//! A NodeClaim's remaining instance types as a bit set over its pool's
//! types. Pool types are sorted by price, so ascending iteration is cheapest
//! first. A set takes a bit per pool type (about 170 bytes for a full
//! regional catalog) where a list of indices took 8 bytes per type still
//! kept: with thousands of NodeClaims holding hundreds of types each, that
//! list was most of the scheduler's memory.

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TypeSet {
    words: Box<[u64]>,
    len: u32,
    /// The first member (`None`: empty), kept: the cost rule asks for a
    /// NodeClaim's cheapest type at every trial.
    first: Option<u32>,
    /// Bit `i % 64` is set when word `i` has a member: two sets whose
    /// summaries do not meet share no member (see [`Self::intersects`]).
    summary: u64,
}

impl TypeSet {
    /// The set of `types` (indices below `n`).
    pub fn from_indices(types: impl IntoIterator<Item = usize>, n: usize) -> TypeSet {
        let mut words = vec![0u64; n.div_ceil(64)].into_boxed_slice();
        let mut len = 0;
        for t in types {
            let (w, b) = (t / 64, 1u64 << (t % 64));
            if words[w] & b == 0 {
                words[w] |= b;
                len += 1;
            }
        }
        TypeSet::of_words(words, len)
    }

    /// The set of `words` holding `len` members.
    fn of_words(words: Box<[u64]>, len: u32) -> TypeSet {
        let mut first = None;
        let mut summary = 0u64;
        for (i, &w) in words.iter().enumerate() {
            if w != 0 {
                first = first.or(Some(i as u32 * 64 + w.trailing_zeros()));
                summary |= 1 << (i % 64);
            }
        }
        TypeSet {
            words,
            len,
            first,
            summary,
        }
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, t: usize) -> bool {
        self.words
            .get(t / 64)
            .is_some_and(|w| w & (1u64 << (t % 64)) != 0)
    }

    /// Ascending (cheapest first).
    pub fn iter(&self) -> impl Iterator<Item = usize> + Clone + '_ {
        (self.words.iter().enumerate()).flat_map(|(i, &w)| word_members(i, w))
    }

    pub fn first(&self) -> Option<usize> {
        self.first.map(|f| f as usize)
    }

    /// Whether the sets share a member (nothing built).
    pub fn intersects(&self, o: &TypeSet) -> bool {
        self.summary & o.summary != 0 && self.meets(&o.words)
    }

    /// The members of both sets.
    pub fn intersect(&self, o: &TypeSet) -> TypeSet {
        let words: Box<[u64]> = self
            .words
            .iter()
            .zip(o.words.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a & b)
            .collect();
        let len = words.iter().map(|w| w.count_ones()).sum();
        TypeSet::of_words(words, len)
    }

    /// Whether it shares a member with the bit set `mask` (a word per 64
    /// types), nothing built.
    pub fn meets(&self, mask: &[u64]) -> bool {
        self.words.iter().zip(mask).any(|(a, b)| a & b != 0)
    }

    /// The empty set over as many types as this one's.
    pub fn empty_like(&self) -> TypeSet {
        TypeSet::of_words(vec![0; self.words.len()].into_boxed_slice(), 0)
    }

    /// Adds type `t` (below the set's type count).
    pub fn insert(&mut self, t: usize) {
        let (w, b) = (t / 64, 1u64 << (t % 64));
        if let Some(word) = self.words.get_mut(w) {
            if *word & b == 0 {
                *word |= b;
                self.len += 1;
                self.summary |= 1 << (w % 64);
                self.first = Some(self.first.map_or(t as u32, |f| f.min(t as u32)));
            }
        }
    }

    /// The first member also in every one of `masks` (bit sets over the
    /// same types, a word per 64), nothing built.
    pub fn first_in_all(&self, masks: &[&[u64]; 4]) -> Option<usize> {
        let s = (self.first? / 64) as usize;
        first_common(
            s,
            [
                &self.words,
                &self.words,
                masks[0],
                masks[1],
                masks[2],
                masks[3],
            ],
        )
    }

    /// [`Self::first_in_all`] among the members of `within` only.
    pub fn first_in_all_within(&self, masks: &[&[u64]; 4], within: &TypeSet) -> Option<usize> {
        // From the later of the two sets' first words.
        let s = (self.first?.max(within.first?) / 64) as usize;
        first_common(
            s,
            [
                &self.words,
                &within.words,
                masks[0],
                masks[1],
                masks[2],
                masks[3],
            ],
        )
    }

    /// The members (ascending) also in `within`, if given, and in every
    /// one of `masks` (bit sets over the same types, a word per 64; a
    /// mask shorter than the set lacks the types past its end).
    pub fn iter_in_all<'s>(
        &'s self,
        within: Option<&'s TypeSet>,
        masks: &'s [&'s [u64]],
    ) -> impl Iterator<Item = usize> + 's {
        self.words.iter().enumerate().flat_map(move |(i, &w)| {
            let within = within.map_or(u64::MAX, |s| s.words.get(i).copied().unwrap_or(0));
            let w = (masks.iter()).fold(w & within, |acc, m| acc & m.get(i).copied().unwrap_or(0));
            word_members(i, w)
        })
    }

    /// The members also in every one of `masks` (see [`Self::first_in_all`]).
    pub fn in_all(&self, masks: &[&[u64]; 4]) -> TypeSet {
        let mut len = 0;
        let words: Box<[u64]> = (self.words.iter().enumerate())
            .map(|(i, &w)| {
                let w = masks
                    .iter()
                    .fold(w, |acc, m| acc & m.get(i).copied().unwrap_or(0));
                len += w.count_ones();
                w
            })
            .collect();
        TypeSet::of_words(words, len)
    }

    /// The members for which `keep` holds.
    pub fn filter(&self, mut keep: impl FnMut(usize) -> bool) -> TypeSet {
        let mut words = vec![0u64; self.words.len()].into_boxed_slice();
        let mut len = 0;
        for t in self.iter() {
            if keep(t) {
                words[t / 64] |= 1u64 << (t % 64);
                len += 1;
            }
        }
        TypeSet::of_words(words, len)
    }
}

/// The members of word `i` whose bits are `w`, ascending.
fn word_members(i: usize, mut w: u64) -> impl Iterator<Item = usize> + Clone {
    std::iter::from_fn(move || {
        if w == 0 {
            return None;
        }
        let b = w.trailing_zeros() as usize;
        w &= w - 1;
        Some(i * 64 + b)
    })
}

/// The first bit set in all of `rows` (bit sets over the same types, a
/// word per 64) from word `s` on: word by word, no bounds checks in the
/// loop (a row shorter than another lacks the types past its end).
fn first_common(s: usize, rows: [&[u64]; 6]) -> Option<usize> {
    let [a, b, c, d, e, f] = rows.map(|r| r.get(s..).unwrap_or(&[]));
    let words = (a.iter()).zip(b).zip(c).zip(d).zip(e).zip(f);
    for (i, (((((a, b), c), d), e), f)) in words.enumerate() {
        let w = a & b & c & d & e & f;
        if w != 0 {
            return Some((s + i) * 64 + w.trailing_zeros() as usize);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_in_order_and_filters() {
        let s = TypeSet::from_indices([3, 64, 0, 130, 3], 131);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 3, 64, 130]);
        assert_eq!(s.len(), 4);
        assert_eq!(s.first(), Some(0));
        assert!(s.contains(64) && !s.contains(65) && !s.contains(1000));
        let f = s.filter(|t| t % 2 == 0);
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![0, 64, 130]);
        assert_eq!(f.len(), 3);
        let g = s.intersect(&TypeSet::from_indices([3, 130, 7], 131));
        assert_eq!(g.iter().collect::<Vec<_>>(), vec![3, 130]);
        assert_eq!(g.len(), 2);
        assert!(s.intersects(&TypeSet::from_indices([130], 131)));
        assert!(!s.intersects(&TypeSet::from_indices([1, 65, 129], 131)));
        assert!(!s.intersects(&TypeSet::default()));
        assert!(TypeSet::default().is_empty());
        assert_eq!(TypeSet::default().first(), None);
        assert_eq!(f.first(), Some(0));
        assert_eq!(g.first(), Some(3));
        let far = TypeSet::from_indices([64 * 70 + 5], 64 * 71);
        assert_eq!(far.first(), Some(64 * 70 + 5));
        assert!(far.intersects(&TypeSet::from_indices([64 * 70 + 5, 1], 64 * 71)));
        assert!(!far.intersects(&TypeSet::from_indices([64 * 6 + 5], 64 * 71)));
    }
}
