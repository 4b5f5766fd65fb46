//! The NodeClaims of each zone bucket (see `ZonePin::bucket`), so that a
//! size class's walk that jumps a run of NodeClaims the growth index
//! refuses moves its spread hints as asking each would have (see
//! `Walk::jump` in `joining.rs`).

use std::collections::BTreeSet;

use super::nodeclaim::{Claim, ZonePin};

/// Per zone bucket, the NodeClaims in it (ascending).
#[derive(Clone, Debug, Default)]
pub(super) struct ZoneBuckets {
    /// Per NodeClaim, its bucket.
    bucket: Vec<u8>,
    /// Per bucket, its NodeClaims (`ZonePin::BUCKETS` sets once a claim is
    /// known).
    claims: Vec<BTreeSet<u32>>,
}

impl ZoneBuckets {
    /// Learns the NodeClaims `claims` has past those known (a shorter list
    /// than known starts over).
    pub(super) fn sync(&mut self, claims: &[Claim]) {
        if claims.len() < self.bucket.len() {
            *self = ZoneBuckets::default();
        }
        if self.claims.is_empty() {
            self.claims = vec![BTreeSet::new(); ZonePin::BUCKETS];
        }
        for (c, claim) in claims.iter().enumerate().skip(self.bucket.len()) {
            let b = claim.zone_pin.bucket();
            self.bucket.push(b as u8);
            self.claims[b].insert(c as u32);
        }
    }

    /// NodeClaim `c` is now in bucket `b` (a NodeClaim not yet learnt is
    /// left to `sync`).
    pub(super) fn moved(&mut self, c: usize, b: usize) {
        let Some(was) = self.bucket.get_mut(c) else {
            return;
        };
        let before = usize::from(*was);
        if before == b || b >= ZonePin::BUCKETS {
            return;
        }
        *was = b as u8;
        self.claims[before].remove(&(c as u32));
        self.claims[b].insert(c as u32);
    }

    /// Whether a NodeClaim is pinned to a zone past the first 64 (whose
    /// zone the walk tells apart by name).
    pub(super) fn has_other(&self) -> bool {
        self.claims
            .get(ZonePin::BUCKETS - 1)
            .is_some_and(|s| !s.is_empty())
    }

    /// The NodeClaims of bucket `b` from `lo` to `hi` (inclusive), last
    /// first.
    pub(super) fn in_range_rev(
        &self,
        b: usize,
        lo: u32,
        hi: u32,
    ) -> impl Iterator<Item = u32> + '_ {
        (self.claims.get(b))
            .into_iter()
            .flat_map(move |s| s.range(lo..=hi).rev().copied())
    }

    /// The buckets that hold a NodeClaim.
    pub(super) fn used(&self) -> impl Iterator<Item = usize> + '_ {
        (self.claims.iter().enumerate())
            .filter(|(_, s)| !s.is_empty())
            .map(|(b, _)| b)
    }
}
