//! `minValues` on NodePool requirements (Karpenter's flexibility floor).
//!
//! A NodeClaim of a NodePool whose requirement on a key has `minValues: n`
//! must keep at least `n` distinct values of that key among the instance
//! types it may still launch as (each type contributes the values its own
//! labels and offerings carry for the key: its name, family, generation,
//! the zones it is offered in, ...). A pod that would narrow a planned
//! NodeClaim below that does not join it. When a new NodeClaim cannot meet
//! it, [`MinValuesPolicy`] decides, as Karpenter's `MIN_VALUES_POLICY`:
//! `Strict` leaves the pod pending, with a reason naming the key;
//! `BestEffort` lowers the NodeClaim's floor to what its types offer and
//! marks the NodeClaim relaxed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::pools::Pool;

/// Karpenter's `MIN_VALUES_POLICY` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    /// A NodeClaim that cannot keep every `minValues` is not created (the
    /// default).
    #[default]
    Strict,
    /// The `minValues` a new NodeClaim cannot keep are lowered to what its
    /// instance types offer.
    BestEffort,
}

impl MinValuesPolicy {
    /// `Strict` / `strict`, `BestEffort` / `best-effort`.
    pub fn parse(s: &str) -> Option<MinValuesPolicy> {
        match s {
            "Strict" | "strict" => Some(MinValuesPolicy::Strict),
            "BestEffort" | "best-effort" | "besteffort" => Some(MinValuesPolicy::BestEffort),
            _ => None,
        }
    }
}

impl fmt::Display for MinValuesPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MinValuesPolicy::Strict => "Strict",
            MinValuesPolicy::BestEffort => "BestEffort",
        })
    }
}

/// A key whose `minValues` a set of instance types does not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shortfall {
    pub key: String,
    pub min: u32,
    /// Distinct values the types offer.
    pub have: u32,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has minValues {} but the instance types left offer {} value(s)",
            self.key, self.min, self.have
        )
    }
}

/// Distinct values of `key` over pool `pool`'s types `types`, counted up
/// to `cap` (enough to decide).
fn distinct(pool: &Pool, types: impl Iterator<Item = usize>, key: &str, cap: u32) -> u32 {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for t in types {
        let Some(r) = pool.types.get(t).and_then(|ty| ty.requirements.get(key)) else {
            continue;
        };
        if r.is_complement() {
            continue;
        }
        seen.extend(r.values().iter().map(String::as_str));
        if seen.len() >= cap as usize {
            break;
        }
    }
    u32::try_from(seen.len()).unwrap_or(u32::MAX)
}

/// The keys of `mins` that `types` (indices into the pool's types) do not
/// meet, in key order.
pub(super) fn shortfalls<I>(pool: &Pool, types: I, mins: &BTreeMap<String, u32>) -> Vec<Shortfall>
where
    I: Iterator<Item = usize> + Clone,
{
    mins.iter()
        .filter_map(|(key, &min)| {
            let have = distinct(pool, types.clone(), key, min);
            (have < min).then(|| Shortfall {
                key: key.clone(),
                min,
                have,
            })
        })
        .collect()
}

/// Whether `types` meet every floor of `mins`.
pub(super) fn met<I>(pool: &Pool, types: I, mins: &BTreeMap<String, u32>) -> bool
where
    I: Iterator<Item = usize> + Clone,
{
    mins.iter()
        .all(|(key, &min)| distinct(pool, types.clone(), key, min) >= min)
}

/// The reason a pod gives when a new NodeClaim of `pool` cannot keep its
/// `minValues` under the Strict policy.
pub(super) fn strict_reason(pool: &str, short: &[Shortfall]) -> String {
    format!(
        "NodePool {pool:?}: minValues requirement is not met ({}; MIN_VALUES_POLICY is Strict)",
        short
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    )
}
