//! The node-selector requirement algebra (In, NotIn, Exists, DoesNotExist,
//! Gt, Lt, and karpenter.sh/v1's Gte, Lte) with Karpenter's semantics: a requirement is a (possibly
//! complemented) value set with optional integer bounds; requirements on the
//! same key intersect; a set of requirements is *compatible* with another
//! when every shared key has a common value and every custom key the incoming
//! side needs is defined by the existing side.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::labels;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// karpenter.sh/v1 NodePool / NodeClaim only: `>= n`, kept as `> n-1`.
    Gte,
    /// karpenter.sh/v1 NodePool / NodeClaim only: `<= n`, kept as `< n+1`.
    Lte,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("operator {op:?} on key {key:?} needs at least one value")]
    MissingValues { key: String, op: String },
    #[error("operator {op:?} on key {key:?} takes no values")]
    UnexpectedValues { key: String, op: String },
    #[error("operator {op:?} on key {key:?} needs exactly one integer value, got {values:?}")]
    BadInteger {
        key: String,
        op: String,
        values: Vec<String>,
    },
    #[error("unknown operator {op:?} on key {key:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)")]
    UnknownOperator { key: String, op: String },
    #[error(transparent)]
    Label(#[from] labels::LabelError),
}

/// One key's constraint. `complement == false` means "value in `values`"
/// (empty: DoesNotExist); `complement == true` means "any value not in
/// `values`" (empty: Exists). Bounds apply to integer-valued labels.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
}

impl Requirement {
    /// Two optional requirements on one key taken together (no requirement
    /// allows anything), as [`Requirements::intersection`] takes them.
    pub fn meet(a: Option<&Requirement>, b: Option<&Requirement>) -> Option<Requirement> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.intersection(b)),
            (a, b) => a.or(b).cloned(),
        }
    }

    pub fn new(key: &str, op: Operator, values: &[&str]) -> Result<Self, RequirementError> {
        Self::from_parts(key, op, values.iter().map(|s| s.to_string()).collect())
    }

    /// Builds a requirement from an operator and raw values, validating as
    /// the API server does.
    pub fn from_parts(
        key: &str,
        op: Operator,
        values: Vec<String>,
    ) -> Result<Self, RequirementError> {
        labels::validate_key(key)?;
        let key = labels::normalize_key(key).to_string();
        let op_s = format!("{op:?}");
        let mut r = Requirement {
            key: key.clone(),
            complement: false,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
        };
        match op {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(RequirementError::MissingValues { key, op: op_s });
                }
                for v in &values {
                    labels::validate_value(v)?;
                }
                r.complement = op == Operator::NotIn;
                r.values = values.into_iter().collect();
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(RequirementError::UnexpectedValues { key, op: op_s });
                }
                r.complement = op == Operator::Exists;
            }
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let n = match values.as_slice() {
                    [v] => v.trim().parse::<i64>().ok(),
                    _ => None,
                };
                let Some(n) = n else {
                    return Err(RequirementError::BadInteger {
                        key,
                        op: op_s,
                        values,
                    });
                };
                r.complement = true;
                match op {
                    Operator::Gt => r.greater_than = Some(n),
                    Operator::Gte => r.greater_than = Some(n.saturating_sub(1)),
                    Operator::Lt => r.less_than = Some(n),
                    _ => r.less_than = Some(n.saturating_add(1)),
                }
            }
        }
        Ok(r)
    }

    pub fn in_values<I: IntoIterator<Item = S>, S: Into<String>>(key: &str, values: I) -> Self {
        Requirement {
            key: key.to_string(),
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            greater_than: None,
            less_than: None,
        }
    }

    pub fn exists(key: &str) -> Self {
        Requirement {
            key: key.to_string(),
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
        }
    }

    pub fn does_not_exist(key: &str) -> Self {
        Requirement {
            key: key.to_string(),
            complement: false,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
        }
    }

    pub fn not_in<I: IntoIterator<Item = S>, S: Into<String>>(key: &str, values: I) -> Self {
        Requirement {
            complement: true,
            ..Self::in_values(key, values)
        }
    }

    pub fn operator(&self) -> Operator {
        if self.complement {
            if !self.values.is_empty() {
                Operator::NotIn
            } else if self.greater_than.is_some() {
                Operator::Gt
            } else if self.less_than.is_some() {
                Operator::Lt
            } else {
                Operator::Exists
            }
        } else if self.values.is_empty() {
            Operator::DoesNotExist
        } else {
            Operator::In
        }
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The explicit values (for In: allowed; for NotIn: excluded).
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    fn within_bounds(&self, v: &str) -> bool {
        within(v, self.greater_than, self.less_than)
    }

    /// Whether `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && self.within_bounds(value)
        } else {
            self.values.contains(value) && self.within_bounds(value)
        }
    }

    /// Number of allowed values; `usize::MAX`-ish for complements.
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A deterministic representative value, if one can be named: the
    /// smallest allowed explicit value, or for bounded complements the
    /// smallest integer above the lower bound.
    pub fn any(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().next().cloned();
        }
        if self.greater_than.is_some() || self.less_than.is_some() {
            let start = self.greater_than.map(|g| g + 1).unwrap_or(0);
            let end = self.less_than.unwrap_or(i64::MAX);
            let mut v = start;
            while v < end {
                let s = v.to_string();
                if !self.values.contains(&s) {
                    return Some(s);
                }
                v += 1;
            }
            return None;
        }
        None
    }

    /// Karpenter's `Requirement.Intersection`.
    pub fn intersection(&self, o: &Requirement) -> Requirement {
        let complement = self.complement && o.complement;
        let gt = max_opt(self.greater_than, o.greater_than);
        let lt = min_opt(self.less_than, o.less_than);
        if let (Some(g), Some(l)) = (gt, lt) {
            if g >= l {
                return Requirement::does_not_exist(&self.key);
            }
        }
        let mut values: BTreeSet<String> = match (self.complement, o.complement) {
            (true, true) => self.values.union(&o.values).cloned().collect(),
            (true, false) => o.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&o.values).cloned().collect(),
            (false, false) => self.values.intersection(&o.values).cloned().collect(),
        };
        values.retain(|v| within(v, gt, lt));
        let (gt, lt) = if complement { (gt, lt) } else { (None, None) };
        Requirement {
            key: self.key.clone(),
            complement,
            values,
            greater_than: gt,
            less_than: lt,
        }
    }

    /// True when this requirement and `o` share at least one value, without
    /// building the intersection (the scheduler's hot path).
    pub fn intersects(&self, o: &Requirement) -> bool {
        match (self.complement, o.complement) {
            (false, false) => {
                let (small, big) = if self.values.len() <= o.values.len() {
                    (self, o)
                } else {
                    (o, self)
                };
                small.values.iter().any(|v| {
                    big.values.contains(v) && big.within_bounds(v) && small.within_bounds(v)
                })
            }
            (false, true) => self
                .values
                .iter()
                .any(|v| o.has(v) && self.within_bounds(v)),
            (true, false) => o.values.iter().any(|v| self.has(v) && o.within_bounds(v)),
            (true, true) => !self.intersection(o).is_empty(),
        }
    }
}

fn within(v: &str, gt: Option<i64>, lt: Option<i64>) -> bool {
    if gt.is_none() && lt.is_none() {
        return true;
    }
    let Ok(n) = v.parse::<i64>() else {
        return false;
    };
    gt.is_none_or(|g| n > g) && lt.is_none_or(|l| n < l)
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl fmt::Debug for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vals = self.values.iter().cloned().collect::<Vec<_>>().join(", ");
        match self.operator() {
            Operator::In => return write!(f, "{} In [{vals}]", self.key),
            Operator::DoesNotExist => return write!(f, "{} DoesNotExist", self.key),
            Operator::Exists => return write!(f, "{} Exists", self.key),
            Operator::NotIn => write!(f, "{} NotIn [{vals}]", self.key)?,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                f.write_str(&self.key)?
            }
        }
        if let Some(g) = self.greater_than {
            write!(f, " Gt {g}")?;
        }
        if let Some(l) = self.less_than {
            write!(f, " Lt {l}")?;
        }
        Ok(())
    }
}

/// The wire form used in plan output: `{key, operator, values}`, as in a
/// NodePool's `requirements`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// A NodeClaim's `minValues` for the key (on the key's first entry):
    /// the distinct values its instance types keep at least.
    #[serde(default, rename = "minValues", skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

impl Requirement {
    /// Wire form(s) of this requirement. A bounded complement with excluded
    /// values becomes several entries (NotIn plus Gt/Lt).
    pub fn to_wire(&self) -> Vec<NodeSelectorRequirement> {
        let mut out = Vec::new();
        let vals: Vec<String> = self.values.iter().cloned().collect();
        if !self.complement {
            out.push(NodeSelectorRequirement {
                key: self.key.clone(),
                operator: if vals.is_empty() {
                    Operator::DoesNotExist
                } else {
                    Operator::In
                },
                values: vals,
                min_values: None,
            });
            return out;
        }
        if !vals.is_empty() {
            out.push(NodeSelectorRequirement {
                key: self.key.clone(),
                operator: Operator::NotIn,
                values: vals,
                min_values: None,
            });
        }
        if let Some(g) = self.greater_than {
            out.push(NodeSelectorRequirement {
                key: self.key.clone(),
                operator: Operator::Gt,
                values: vec![g.to_string()],
                min_values: None,
            });
        }
        if let Some(l) = self.less_than {
            out.push(NodeSelectorRequirement {
                key: self.key.clone(),
                operator: Operator::Lt,
                values: vec![l.to_string()],
                min_values: None,
            });
        }
        if out.is_empty() {
            out.push(NodeSelectorRequirement {
                key: self.key.clone(),
                operator: Operator::Exists,
                values: vec![],
                min_values: None,
            });
        }
        out
    }
}

/// A `NotIn` or `DoesNotExist` requirement.
fn negative(r: &Requirement) -> bool {
    matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
}

/// Karpenter's rule for one key both sides constrain: a common value, or
/// both sides negative.
fn shared_key_ok(existing: &Requirement, incoming: &Requirement) -> bool {
    existing.intersects(incoming) || (negative(incoming) && negative(existing))
}

/// A conjunction of requirements, one per key (adding a second requirement
/// on a key intersects it with the first).
///
/// Stored as a vector sorted by key: sets hold a handful of keys, and a
/// `BTreeMap` allocates a whole node (eleven slots) for each, which made
/// every pod's node-affinity terms cost kilobytes.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    reqs: Vec<Requirement>,
}

/// Why two requirement sets are incompatible: the first offending key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incompatibility {
    /// The incoming side needs a custom label the existing side never sets.
    Undefined { key: String, incoming: String },
    /// Both sides constrain `key` and no value satisfies both.
    Disjoint {
        key: String,
        incoming: String,
        existing: String,
    },
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatibility::Undefined { key, incoming } => write!(
                f,
                "label {key:?} is not defined (requirement {incoming}; a NodePool must list it in requirements or labels)"
            ),
            Incompatibility::Disjoint { key, incoming, existing } => {
                write!(f, "{incoming} conflicts with {existing} on {key}")
            }
        }
    }
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_iter_reqs<I: IntoIterator<Item = Requirement>>(it: I) -> Self {
        let mut r = Requirements::new();
        for q in it {
            r.add(q);
        }
        r
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.reqs.binary_search_by(|r| r.key.as_str().cmp(key))
    }

    /// Adds (intersects) a requirement.
    pub fn add(&mut self, r: Requirement) {
        match self.find(&r.key) {
            Ok(i) => self.reqs[i] = self.reqs[i].intersection(&r),
            Err(i) => self.reqs.insert(i, r),
        }
    }

    /// Sets the requirement on `r`'s key to `r` (whatever was there).
    pub fn replace(&mut self, r: Requirement) {
        match self.find(&r.key) {
            Ok(i) => self.reqs[i] = r,
            Err(i) => self.reqs.insert(i, r),
        }
    }

    pub fn add_all(&mut self, o: &Requirements) {
        for r in &o.reqs {
            match self.find(&r.key) {
                Ok(i) => self.reqs[i] = self.reqs[i].intersection(r),
                Err(i) => self.reqs.insert(i, r.clone()),
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.find(key).ok().map(|i| &self.reqs[i])
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.find(key).ok().map(|i| self.reqs.remove(i))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.reqs.iter().map(|r| &r.key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.reqs.iter()
    }

    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether a concrete label value for `key` is allowed (a missing key
    /// allows anything).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.get(key).is_none_or(|r| r.has(value))
    }

    /// Karpenter's `Intersects`: shared keys must have a common value, unless
    /// both sides are negative (NotIn/DoesNotExist).
    /// `self.intersects(incoming).is_ok()` without building the error.
    pub fn intersects_ok(&self, incoming: &Requirements) -> bool {
        incoming
            .reqs
            .iter()
            .all(|inc| self.get(&inc.key).is_none_or(|ex| shared_key_ok(ex, inc)))
    }

    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Incompatibility> {
        // Iterate the smaller map, probe the larger.
        for inc in incoming.reqs.iter() {
            let key = &inc.key;
            let Some(ex) = self.get(key) else {
                continue;
            };
            if !shared_key_ok(ex, inc) {
                return Err(Incompatibility::Disjoint {
                    key: key.clone(),
                    incoming: inc.to_string(),
                    existing: ex.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible` with well-known labels allowed undefined:
    /// `self` is the node side (NodePool + instance type), `incoming` the
    /// pod side.
    /// `self.compatible(incoming).is_ok()` without building the error.
    pub fn compatible_ok(&self, incoming: &Requirements) -> bool {
        // Both sides are sorted by key: each probe searches only what is
        // left after the previous one.
        let mut rest = self.reqs.as_slice();
        incoming.reqs.iter().all(|inc| {
            match rest.binary_search_by(|r| r.key.as_str().cmp(&inc.key)) {
                Ok(i) => {
                    let ex = &rest[i];
                    rest = &rest[i + 1..];
                    shared_key_ok(ex, inc)
                }
                Err(i) => {
                    rest = &rest[i..];
                    negative(inc) || labels::is_well_known(&inc.key)
                }
            }
        })
    }

    pub fn compatible(&self, incoming: &Requirements) -> Result<(), Incompatibility> {
        for inc in incoming.reqs.iter() {
            let key = &inc.key;
            if self.has_key(key) {
                continue;
            }
            if negative(inc) {
                continue;
            }
            if labels::is_well_known(key) {
                continue;
            }
            return Err(Incompatibility::Undefined {
                key: key.clone(),
                incoming: inc.to_string(),
            });
        }
        self.intersects(incoming)
    }

    /// Intersection of two requirement sets.
    pub fn intersection(&self, o: &Requirements) -> Requirements {
        let mut r = self.clone();
        r.add_all(o);
        r
    }

    /// The requirement on `key` of [`Self::intersection`] with `o`, built
    /// for that key alone.
    pub fn intersection_on(&self, o: &Requirements, key: &str) -> Option<Requirement> {
        Requirement::meet(self.get(key), o.get(key))
    }

    /// `cur` (a requirement on `key`, if any) after each of `added` on
    /// that key, in order, as [`Self::add`] would leave it.
    pub fn added_on(
        cur: Option<Requirement>,
        added: &[Requirement],
        key: &str,
    ) -> Option<Requirement> {
        added.iter().filter(|r| r.key == key).fold(cur, |cur, r| {
            Some(match cur {
                Some(c) => c.intersection(r),
                None => r.clone(),
            })
        })
    }

    /// Labels a node launched for these requirements will carry: every key
    /// with a single allowed value, excluding the ones the cloud provider
    /// sets itself (zone, instance type, ...) which are resolved at launch.
    pub fn single_valued_labels(&self) -> BTreeMap<String, String> {
        self.reqs
            .iter()
            .filter(|r| !r.complement && r.values.len() == 1)
            .filter_map(|r| r.values.iter().next().map(|v| (r.key.clone(), v.clone())))
            .collect()
    }

    pub fn to_wire(&self) -> Vec<NodeSelectorRequirement> {
        self.reqs.iter().flat_map(|r| r.to_wire()).collect()
    }
}

impl fmt::Debug for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.reqs.iter()).finish()
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.reqs.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operator::*;

    fn req(k: &str, op: Operator, v: &[&str]) -> Requirement {
        Requirement::new(k, op, v).unwrap()
    }

    #[test]
    fn operators_round_trip() {
        for (op, vals) in [
            (In, vec!["a"]),
            (NotIn, vec!["a"]),
            (Exists, vec![]),
            (DoesNotExist, vec![]),
            (Gt, vec!["3"]),
            (Lt, vec!["3"]),
        ] {
            assert_eq!(req("example.com/k", op, &vals).operator(), op);
        }
    }

    #[test]
    fn validation_errors() {
        assert!(matches!(
            Requirement::new("k", In, &[]),
            Err(RequirementError::MissingValues { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Exists, &["a"]),
            Err(RequirementError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Gt, &["x"]),
            Err(RequirementError::BadInteger { .. })
        ));
        assert!(matches!(
            Requirement::new("k", Gt, &["1", "2"]),
            Err(RequirementError::BadInteger { .. })
        ));
        assert!(Requirement::new("bad key!", In, &["a"]).is_err());
        assert!(Requirement::new("k", In, &["bad value!"]).is_err());
    }

    #[test]
    fn has_semantics() {
        assert!(req("k", In, &["a", "b"]).has("a"));
        assert!(!req("k", In, &["a", "b"]).has("c"));
        assert!(req("k", NotIn, &["a"]).has("c"));
        assert!(!req("k", NotIn, &["a"]).has("a"));
        assert!(req("k", Exists, &[]).has("anything"));
        assert!(!req("k", DoesNotExist, &[]).has("anything"));
        assert!(req("k", Gt, &["4"]).has("5"));
        assert!(!req("k", Gt, &["4"]).has("4"));
        assert!(!req("k", Gt, &["4"]).has("x"));
        assert!(req("k", Lt, &["4"]).has("3"));
    }

    #[test]
    fn intersection_table() {
        let i = req("k", In, &["a", "b"]).intersection(&req("k", In, &["b", "c"]));
        assert_eq!(i.operator(), In);
        assert_eq!(i.values().iter().collect::<Vec<_>>(), vec!["b"]);

        let i = req("k", In, &["a", "b"]).intersection(&req("k", NotIn, &["b"]));
        assert_eq!(i.values().iter().collect::<Vec<_>>(), vec!["a"]);

        let i = req("k", NotIn, &["a"]).intersection(&req("k", NotIn, &["b"]));
        assert_eq!(i.operator(), NotIn);
        assert_eq!(i.values().len(), 2);

        let i = req("k", Exists, &[]).intersection(&req("k", DoesNotExist, &[]));
        assert_eq!(i.operator(), DoesNotExist);

        let i = req("k", Gt, &["2"]).intersection(&req("k", Lt, &["5"]));
        assert!(i.has("3") && i.has("4") && !i.has("5") && !i.has("2"));

        let i = req("k", Gt, &["5"]).intersection(&req("k", Lt, &["5"]));
        assert_eq!(i.operator(), DoesNotExist);

        let i = req("k", In, &["1", "8", "64"]).intersection(&req("k", Gt, &["4"]));
        assert_eq!(i.values().iter().collect::<Vec<_>>(), vec!["64", "8"]);
        assert_eq!(i.operator(), In);
    }

    #[test]
    fn compatible_custom_labels_must_be_defined() {
        let node =
            Requirements::from_iter_reqs([req("topology.kubernetes.io/zone", In, &["us-west-2a"])]);
        let pod = Requirements::from_iter_reqs([req("team", In, &["a"])]);
        assert!(matches!(
            node.compatible(&pod),
            Err(Incompatibility::Undefined { .. })
        ));
        // NotIn / DoesNotExist on undefined custom keys are fine.
        let pod = Requirements::from_iter_reqs([req("team", NotIn, &["a"])]);
        assert!(node.compatible(&pod).is_ok());
        // Well-known labels may be undefined on the node side.
        let pod = Requirements::from_iter_reqs([req("kubernetes.io/arch", In, &["arm64"])]);
        assert!(node.compatible(&pod).is_ok());
        // Defined via Exists.
        let node = Requirements::from_iter_reqs([req("team", Exists, &[])]);
        let pod = Requirements::from_iter_reqs([req("team", In, &["a"])]);
        assert!(node.compatible(&pod).is_ok());
    }

    #[test]
    fn compatible_disjoint_zone() {
        let node =
            Requirements::from_iter_reqs([req("topology.kubernetes.io/zone", In, &["us-west-2a"])]);
        let pod =
            Requirements::from_iter_reqs([req("topology.kubernetes.io/zone", In, &["us-west-2d"])]);
        let e = node.compatible(&pod).unwrap_err();
        assert!(e.to_string().contains("us-west-2d"), "{e}");
        // both negative: compatible even if "empty"
        let node = Requirements::from_iter_reqs([req("k", DoesNotExist, &[])]);
        let pod = Requirements::from_iter_reqs([req("k", DoesNotExist, &[])]);
        assert!(node.compatible(&pod).is_ok());
    }

    #[test]
    fn requirements_add_intersects_same_key() {
        let mut r = Requirements::new();
        r.add(req("topology.kubernetes.io/zone", In, &["a", "b"]));
        r.add(req("topology.kubernetes.io/zone", NotIn, &["b"]));
        assert_eq!(
            r.single_valued_labels()
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("a")
        );
    }

    #[test]
    fn any_is_deterministic() {
        assert_eq!(req("k", In, &["b", "a"]).any().as_deref(), Some("a"));
        assert_eq!(req("k", Gt, &["7"]).any().as_deref(), Some("8"));
        assert_eq!(req("k", Exists, &[]).any(), None);
    }

    use proptest::prelude::*;

    fn arb_req() -> impl Strategy<Value = Requirement> {
        let vals = proptest::collection::vec(prop_oneof!["1", "2", "3", "a", "b"], 1..3);
        (0usize..6, vals, 0i64..4).prop_map(|(op, vals, n)| {
            let vals: Vec<&str> = vals.iter().map(String::as_str).collect();
            match op {
                0 => req("k", In, &vals),
                1 => req("k", NotIn, &vals),
                2 => req("k", Exists, &[]),
                3 => req("k", DoesNotExist, &[]),
                4 => req("k", Gt, &[&n.to_string()]),
                _ => req("k", Lt, &[&n.to_string()]),
            }
        })
    }

    proptest! {
        /// has(v) on the intersection is exactly has(v) on both sides.
        #[test]
        fn intersection_is_conjunction(a in arb_req(), b in arb_req()) {
            let i = a.intersection(&b);
            for v in ["0", "1", "2", "3", "4", "5", "a", "b", "c"] {
                prop_assert_eq!(i.has(v), a.has(v) && b.has(v), "value {} a={} b={} i={}", v, a, b, i);
            }
            prop_assert_eq!(a.intersection(&b).has("2"), b.intersection(&a).has("2"));
        }

        /// The boolean forms agree with the ones that explain.
        #[test]
        fn ok_forms_agree(a in arb_req(), b in arb_req(), c in arb_req()) {
            let x = Requirements::from_iter_reqs([a.clone()]);
            let mut y = Requirements::from_iter_reqs([b]);
            y.add(c);
            prop_assert_eq!(x.intersects_ok(&y), x.intersects(&y).is_ok());
            prop_assert_eq!(y.intersects_ok(&x), y.intersects(&x).is_ok());
            prop_assert_eq!(x.compatible_ok(&y), x.compatible(&y).is_ok());
            prop_assert_eq!(y.compatible_ok(&x), y.compatible(&x).is_ok());
        }

        /// intersects() agrees with a non-empty intersection on concrete sets.
        #[test]
        fn intersects_matches_intersection(a in arb_req(), b in arb_req()) {
            let any_common = ["0", "1", "2", "3", "4", "5", "a", "b", "c", "zz"].iter().any(|v| a.has(v) && b.has(v));
            if !a.is_complement() || !b.is_complement() {
                prop_assert_eq!(a.intersects(&b), any_common);
            }
        }
    }
}
