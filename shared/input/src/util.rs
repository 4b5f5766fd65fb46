//! Error context, typed deserialization with field paths, and small parsers
//! shared by the converters.

use std::collections::BTreeMap;
use std::fmt;

use flotilla_core::labels;
use flotilla_core::model::{Taint, TaintEffect, Threshold};
use flotilla_core::{Quantity, Resources};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Doc, InputError};

/// Where we are: file, document, object and path prefix, for errors.
#[derive(Debug, Clone)]
pub(crate) struct Ctx<'a> {
    pub file: &'a str,
    pub index: usize,
    pub prefix: String,
    pub object: Option<String>,
}

/// Joins two field paths (`a` + `b` → `a.b`, `a` + `[0]` → `a[0]`).
/// Built by hand, not with `format!`: every pod's conversion joins its
/// fields' paths (kept for the errors that name them), and the formatting
/// machinery made that 3% of planning 10,000 pods.
pub(crate) fn join(a: &str, b: &str) -> String {
    let a = a.trim_end_matches('.');
    let b = b.trim_start_matches('.');
    if a.is_empty() {
        return b.to_string();
    }
    if b.is_empty() {
        return a.to_string();
    }
    let mut out = String::with_capacity(a.len() + b.len() + 1);
    out.push_str(a);
    if !b.starts_with('[') {
        out.push('.');
    }
    out.push_str(b);
    out
}

/// `path[i]`, built by hand (see [`join`]).
pub(crate) fn indexed(path: &str, i: usize) -> String {
    let digits = i.to_string();
    let mut out = String::with_capacity(path.len() + digits.len() + 2);
    out.push_str(path);
    out.push('[');
    out.push_str(&digits);
    out.push(']');
    out
}

impl<'a> Ctx<'a> {
    pub fn new(file: &'a str, index: usize) -> Self {
        Ctx {
            file,
            index,
            prefix: String::new(),
            object: None,
        }
    }

    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    pub fn for_doc(d: &Doc<'a>) -> Self {
        Ctx {
            file: d.file,
            index: d.index,
            prefix: d.prefix.clone(),
            object: Some(describe_object(d.kind(), &d.value)),
        }
    }

    /// An error at `path` (relative to the object).
    pub fn err(&self, path: &str, msg: impl fmt::Display) -> InputError {
        let p = join(&self.prefix, path);
        InputError {
            file: self.file.to_string(),
            document: Some(self.index),
            object: self.object.clone(),
            path: if p.is_empty() { None } else { Some(p) },
            message: msg.to_string(),
        }
    }

    /// Deserializes `v` (found at `path`) into `T`, naming the failing field.
    /// The field's path is tracked only when the plain read fails (tracking
    /// costs a third of the read).
    pub fn de<T: DeserializeOwned>(&self, v: &Value, path: &str) -> Result<T, InputError> {
        if let Ok(t) = T::deserialize(v) {
            return Ok(t);
        }
        serde_path_to_error::deserialize(v).map_err(|e| {
            let inner = e.path().to_string();
            let inner = if inner == "." { String::new() } else { inner };
            self.err(&join(path, &inner), e.into_inner())
        })
    }

    /// Prefix for warnings: `file doc N (Kind ns/name)`.
    pub fn here(&self) -> String {
        match &self.object {
            Some(o) => format!("{} doc {} ({o})", self.file, self.index),
            None => format!("{} doc {}", self.file, self.index),
        }
    }
}

const CLUSTER_SCOPED: &[&str] = &[
    "Node",
    "Namespace",
    "StorageClass",
    "PersistentVolume",
    "PriorityClass",
    "NodePool",
    "NodeClaim",
    "Provisioner",
    "Machine",
    "EC2NodeClass",
    "AWSNodeTemplate",
    "NodeOverlay",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "CSINode",
    "CSIDriver",
    "RuntimeClass",
    "IngressClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
];

/// `Kind namespace/name` for namespaced objects, `Kind name` otherwise.
pub(crate) fn describe_object(kind: &str, v: &Value) -> String {
    let meta = v.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str);
    let kind = if kind.is_empty() { "<no kind>" } else { kind };
    match ns {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None if CLUSTER_SCOPED.contains(&kind) => format!("{kind} {name}"),
        None => format!("{kind} default/{name}"),
    }
}

pub(crate) fn quantity(ctx: &Ctx, path: &str, s: &str) -> Result<Quantity, InputError> {
    Quantity::parse(s).map_err(|e| ctx.err(path, e))
}

/// A resource list (`cpu: 100m`, ...), each quantity parsed.
pub(crate) fn resources(
    ctx: &Ctx,
    path: &str,
    map: Option<&BTreeMap<String, KQuantity>>,
) -> Result<Resources, InputError> {
    let mut r = Resources::new();
    for (k, q) in map.into_iter().flatten() {
        let qty = quantity(ctx, &join(path, k), &q.0)?;
        r.set(k, r.get(k) + qty);
    }
    Ok(r)
}

/// `spec.limits`: every entry kept, zeros included.
pub(crate) fn limits(
    ctx: &Ctx,
    path: &str,
    map: &BTreeMap<String, KQuantity>,
) -> Result<flotilla_core::model::ResourceLimits, InputError> {
    let mut out = BTreeMap::new();
    for (k, q) in map {
        out.insert(k.clone(), quantity(ctx, &join(path, k), &q.0)?);
    }
    Ok(flotilla_core::model::ResourceLimits(out))
}

/// Validates labels (or annotations' keys when `values` is false).
pub(crate) fn check_labels(
    ctx: &Ctx,
    path: &str,
    map: &BTreeMap<String, String>,
    values: bool,
) -> Result<(), InputError> {
    for (k, v) in map {
        let p = join(path, k);
        labels::validate_key(k).map_err(|e| ctx.err(&p, e))?;
        if values {
            labels::validate_value(v).map_err(|e| ctx.err(&p, e))?;
        }
    }
    Ok(())
}

pub(crate) fn taint_effect(ctx: &Ctx, path: &str, s: &str) -> Result<TaintEffect, InputError> {
    match s {
        "NoSchedule" => Ok(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(TaintEffect::NoExecute),
        other => Err(ctx.err(
            path,
            format!("unknown taint effect {other:?} (expected NoSchedule, PreferNoSchedule or NoExecute)"),
        )),
    }
}

/// Taints; keys and values are validated like labels when `strict`.
pub(crate) fn taints(
    ctx: &Ctx,
    path: &str,
    list: Option<&Vec<k8s_openapi::api::core::v1::Taint>>,
    strict: bool,
) -> Result<Vec<Taint>, InputError> {
    let mut out = Vec::new();
    for (i, t) in list.into_iter().flatten().enumerate() {
        let p = format!("{}[{i}]", path.trim_end_matches('.'));
        if strict {
            labels::validate_key(&t.key).map_err(|e| ctx.err(&join(&p, "key"), e))?;
            if let Some(v) = &t.value {
                labels::validate_value(v).map_err(|e| ctx.err(&join(&p, "value"), e))?;
            }
        }
        out.push(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: taint_effect(ctx, &join(&p, "effect"), &t.effect)?,
        });
    }
    Ok(out)
}

/// A Go duration (`720h`, `1h30m`, `30s`, `0`) in whole seconds (rounded
/// up); `Never` is `None`.
pub(crate) fn duration_secs(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim();
    if t == "Never" {
        return Ok(None);
    }
    let bad = || format!("invalid duration {s:?} (expected e.g. 30s, 15m, 720h or Never)");
    if t == "0" {
        return Ok(Some(0));
    }
    if t.is_empty() || t.starts_with('-') {
        return Err(bad());
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let mut nanos: f64 = 0.0;
    let mut rest = t;
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(n_end);
        if num.is_empty() {
            return Err(bad());
        }
        let n: f64 = num.parse().map_err(|_| bad())?;
        let u_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(u_end);
        let mult = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += n * mult;
        rest = tail;
    }
    let secs = (nanos / 1e9).ceil();
    // Go durations stop at about 292 years.
    if !secs.is_finite() || secs > 9.3e9 {
        return Err(format!("duration {s:?} is too long"));
    }
    Ok(Some(secs as u64))
}

/// An eviction threshold: `5%` or a quantity.
pub(crate) fn threshold(ctx: &Ctx, path: &str, s: &str) -> Result<Threshold, InputError> {
    if let Some(p) = s.trim().strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| ctx.err(path, format!("invalid percentage {s:?}")))?;
        if !(0.0..=100.0).contains(&v) {
            return Err(ctx.err(path, format!("percentage {s:?} is not between 0% and 100%")));
        }
        return Ok(Threshold::Percent(v));
    }
    Ok(Threshold::Quantity(quantity(ctx, path, s)?))
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_secs("720h"), Ok(Some(720 * 3600)));
        assert_eq!(duration_secs("1h30m"), Ok(Some(5400)));
        assert_eq!(duration_secs("1.5s"), Ok(Some(2)));
        assert_eq!(duration_secs("0s"), Ok(Some(0)));
        assert_eq!(duration_secs("0"), Ok(Some(0)));
        assert_eq!(duration_secs("Never"), Ok(None));
        for bad in ["", "30", "-1s", "1d", "h", "1e400h", "99999999999999h"] {
            assert!(duration_secs(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn paths() {
        assert_eq!(join("spec", "containers[0]"), "spec.containers[0]");
        assert_eq!(join("spec.containers", "[0]"), "spec.containers[0]");
        assert_eq!(join("items[1].", "spec"), "items[1].spec");
        assert_eq!(join("", "spec"), "spec");
        assert_eq!(join("spec.", ""), "spec");
        assert_eq!(indexed("spec.containers", 12), "spec.containers[12]");
    }
}
