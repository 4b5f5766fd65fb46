//! EC2 API filters: names per resource, `*`/`?` wildcards, tag filters.
//!
//! Semantics are EC2's: filters are AND'ed, the values of one filter are
//! OR'ed, every value may use `*` (any run of characters) and `?` (one
//! character). `tag:<key>` matches the value of tag `<key>` (the key is
//! exact); `tag-key` matches tag keys. A filter name the resource does not
//! know is an error (EC2's `InvalidParameterValue`); a filter without
//! values matches nothing.

use std::collections::BTreeMap;

use flotilla_ports::{Filter, PortError, PortResult};

/// A resource that can be filtered.
pub(crate) trait Filterable {
    /// Name of the resource kind, for error messages.
    const KIND: &'static str;
    /// The filter names (besides `tag:<key>` and `tag-key`) it supports.
    const NAMES: &'static [&'static str];
    /// The resource's tags.
    fn tags(&self) -> &BTreeMap<String, String>;
    /// The values of the attribute behind filter `name` (one of
    /// [`Self::NAMES`]); empty when the resource has no such value.
    fn values(&self, name: &str) -> Vec<String>;
}

/// `*` matches any run of characters (also none), `?` exactly one.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Position after the last `*` and the text position it matched up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Rejects filter names `R` does not support.
pub(crate) fn validate<R: Filterable>(filters: &[Filter]) -> PortResult<()> {
    for f in filters {
        let known = match f.name.strip_prefix("tag:") {
            Some(key) => !key.is_empty(),
            None => f.name == "tag-key" || R::NAMES.contains(&f.name.as_str()),
        };
        if !known {
            return Err(PortError::Rejected(format!(
                "InvalidParameterValue: the filter '{}' is invalid for {} (supported: tag:<key>, tag-key, {})",
                f.name,
                R::KIND,
                R::NAMES.join(", ")
            )));
        }
    }
    Ok(())
}

fn matches_one<R: Filterable>(r: &R, f: &Filter) -> bool {
    let values: Vec<String> = if let Some(key) = f.name.strip_prefix("tag:") {
        r.tags().get(key).cloned().into_iter().collect()
    } else if f.name == "tag-key" {
        r.tags().keys().cloned().collect()
    } else {
        r.values(&f.name)
    };
    f.values
        .iter()
        .any(|pattern| values.iter().any(|v| glob(pattern, v)))
}

/// True when `r` matches every filter (names must be validated first).
pub(crate) fn matches<R: Filterable>(r: &R, filters: &[Filter]) -> bool {
    filters.iter().all(|f| matches_one(r, f))
}

/// The resources matching `filters`, cloned through `out`.
pub(crate) fn select<'a, R: Filterable + 'a, T>(
    resources: impl IntoIterator<Item = &'a R>,
    filters: &[Filter],
    out: impl Fn(&R) -> T,
) -> PortResult<Vec<T>> {
    validate::<R>(filters)?;
    Ok(resources
        .into_iter()
        .filter(|r| matches(*r, filters))
        .map(out)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_semantics() {
        for (p, t) in [
            ("*", ""),
            ("*", "anything"),
            ("abc", "abc"),
            ("a*c", "abbbc"),
            ("a*c", "ac"),
            ("a?c", "abc"),
            (
                "amazon-eks-node-al2023-*-standard-1.33-v*",
                "amazon-eks-node-al2023-arm64-standard-1.33-v20251101",
            ),
            (
                "*-x86_64-*",
                "bottlerocket-aws-k8s-1.33-x86_64-v1.50.0-4d0a6bcd",
            ),
            ("a*b*c", "axxbyyc"),
            ("**", "x"),
        ] {
            assert!(glob(p, t), "{p} ~ {t}");
        }
        for (p, t) in [
            ("abc", "abcd"),
            ("abc", "ab"),
            ("a?c", "ac"),
            ("a*c", "abcd"),
            ("", "x"),
            (
                "amazon-eks-node-al2023-*-standard-1.33-v*",
                "amazon-eks-node-al2023-arm64-standard-1.32-v20251101",
            ),
        ] {
            assert!(!glob(p, t), "{p} !~ {t}");
        }
    }
}
