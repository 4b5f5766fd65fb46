//! Template hashes: what a node was launched from, so that a later change
//! of its NodePool or node class shows as drift.
//!
//! Nodes launched by Flotilla carry the hash of their NodePool's template
//! as the annotation `karpenter.sh/nodepool-hash`
//! ([`crate::labels::NODEPOOL_HASH`]) and the hash of their node class as
//! `karpenter.k8s.aws/ec2nodeclass-hash` ([`crate::labels::NODECLASS_HASH`]),
//! each with a version annotation ([`NODEPOOL_HASH_VERSION`],
//! [`NODECLASS_HASH_VERSION`]) whose value is [`HASH_VERSION`]. When the
//! NodePool's (or class's) current hash differs from the one a node
//! carries, the node has drifted.
//!
//! Karpenter records the same annotations, but its values are
//! `hashstructure` hashes of Go structs (with its own version, `v3`) and
//! cannot be reproduced here: a node launched by Karpenter never carries a
//! hash Flotilla would compute. The engine must therefore compare only
//! hashes of *our* version ([`recorded_hash`]) and treat any other recorded
//! hash (or none) as unknown — not as drift.
//!
//! The hash is 64-bit FNV-1a over a canonical JSON rendering
//! ([`canonical_json`]): object keys sorted, "zero" members (null, `""`,
//! `[]`, `{}`) dropped as Karpenter's `IgnoreZeroValue` does, arrays
//! treated as sets (elements sorted by their canonical text, Karpenter's
//! `SlicesAsSets`), integral numbers rendered as integers. It is the same
//! across builds, platforms, key order and YAML/JSON spelling, and is
//! rendered as 16 lowercase hex digits.
//!
//! What is hashed follows Karpenter's `hash:"ignore"` tags:
//! * NodePool ([`nodepool_hash`]): `spec.template` without
//!   `spec.requirements` (requirement drift is checked against the node's
//!   labels), with the effective `expireAfter` (the template's, else the
//!   v1beta1 `spec.disruption.expireAfter`, else the CRD default `720h`) and
//!   `terminationGracePeriod` as seconds, and `nodeClassRef` reduced to its
//!   kind and name (so that v1beta1 → v1 and `1h` → `60m` are no drift);
//!   budgets, limits, weight and the consolidation settings are not part of
//!   it;
//! * Provisioner ([`provisioner_hash`]): its spec without `requirements`,
//!   `limits`, `weight`, `consolidation` and `ttlSeconds*`;
//! * EC2NodeClass / AWSNodeTemplate ([`nodeclass_hash`]): its spec without
//!   the selector fields (`*SelectorTerms`, the v1alpha1 `*Selector`: they
//!   resolve dynamically), `amiFamily` (replaced by the resolved family, so
//!   that `amiFamily: AL2023` next to `alias: al2023@latest` is no drift)
//!   and `ipPrefixCount`, with the CRD's `metadataOptions` defaults filled in.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::model::AmiFamily;

/// The version of the hashes this module computes, recorded on nodes next
/// to them.
pub const HASH_VERSION: &str = "flotilla-v1";

/// Annotation (nodes, NodeClaims): the version of `karpenter.sh/nodepool-hash`.
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";

/// Annotation (nodes, NodeClaims): the version of
/// `karpenter.k8s.aws/ec2nodeclass-hash`.
pub const NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

/// The stable hash of `value` (FNV-1a 64 of [`canonical_json`]), 16 hex digits.
pub fn template_hash(value: &Value) -> String {
    let text = canonical_json(value);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The canonical rendering the hash is taken of (empty for a zero value).
pub fn canonical_json(value: &Value) -> String {
    canon(value).unwrap_or_default()
}

/// `None`: a zero value, left out of its parent object.
fn canon(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(number(n)),
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(string(s)),
        Value::Array(items) => {
            if items.is_empty() {
                return None;
            }
            let mut parts: Vec<String> = items
                .iter()
                .map(|i| canon(i).unwrap_or_else(|| "null".into()))
                .collect();
            parts.sort();
            Some(format!("[{}]", parts.join(",")))
        }
        Value::Object(map) => {
            let members: BTreeMap<&str, String> = map
                .iter()
                .filter_map(|(k, v)| canon(v).map(|c| (k.as_str(), c)))
                .collect();
            if members.is_empty() {
                return None;
            }
            let parts: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("{}:{v}", string(k)))
                .collect();
            Some(format!("{{{}}}", parts.join(",")))
        }
    }
}

fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        // 2^53: every integer below is exact in an f64.
        Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            (f as i64).to_string()
        }
        Some(f) => f.to_string(),
        None => n.to_string(),
    }
}

fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn without(v: Option<&Value>, keys: &[&str]) -> Map<String, Value> {
    let mut m = match v {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for k in keys {
        m.remove(*k);
    }
    m
}

/// The hash of a NodePool (`karpenter.sh/v1` or `v1beta1`) from its
/// `spec`, with the effective `expireAfter` (`None`: `Never`) and
/// `terminationGracePeriod` in seconds as the input read them.
pub fn nodepool_hash(
    spec: &Value,
    expire_after_seconds: Option<u64>,
    termination_grace_period_seconds: Option<u64>,
) -> String {
    let template = spec.get("template");
    let mut t = without(template, &[]);
    let mut s = without(template.and_then(|t| t.get("spec")), &["requirements"]);
    s.insert(
        "expireAfter".into(),
        match expire_after_seconds {
            Some(n) => Value::from(n),
            None => Value::from("Never"),
        },
    );
    match termination_grace_period_seconds {
        Some(n) => s.insert("terminationGracePeriod".into(), Value::from(n)),
        None => s.remove("terminationGracePeriod"),
    };
    if let Some(r) = s.get("nodeClassRef") {
        let mut reduced = Map::new();
        for k in ["kind", "name"] {
            if let Some(v) = r.get(k) {
                reduced.insert(k.into(), v.clone());
            }
        }
        s.insert("nodeClassRef".into(), Value::Object(reduced));
    }
    t.insert("spec".into(), Value::Object(s));
    template_hash(&Value::Object(t))
}

/// The hash of a `karpenter.sh/v1alpha5` Provisioner from its `spec`.
pub fn provisioner_hash(spec: &Value) -> String {
    let m = without(
        Some(spec),
        &[
            "requirements",
            "limits",
            "weight",
            "consolidation",
            "ttlSecondsAfterEmpty",
            "ttlSecondsUntilExpired",
        ],
    );
    template_hash(&Value::Object(m))
}

/// The hash of an EC2NodeClass (v1, v1beta1) or AWSNodeTemplate (v1alpha1)
/// from its `spec` and the AMI family the input resolved.
pub fn nodeclass_hash(spec: &Value, ami_family: &AmiFamily) -> String {
    let mut m = without(Some(spec), &["amiFamily", "ipPrefixCount"]);
    m.retain(|k, _| !(k.ends_with("SelectorTerms") || k.ends_with("Selector")));
    let family = match ami_family {
        AmiFamily::AL2023 => "AL2023",
        AmiFamily::AL2 => "AL2",
        AmiFamily::Bottlerocket => "Bottlerocket",
        AmiFamily::Windows2019 => "Windows2019",
        AmiFamily::Windows2022 => "Windows2022",
        AmiFamily::Custom => "Custom",
    };
    m.insert("amiFamily".into(), Value::from(family));
    // The CRD's defaults, so that a manifest and the object the API server
    // stored from it hash the same.
    let mut md = without(m.get("metadataOptions"), &[]);
    for (k, v) in [
        ("httpEndpoint", Value::from("enabled")),
        ("httpProtocolIPv6", Value::from("disabled")),
        ("httpPutResponseHopLimit", Value::from(1)),
        ("httpTokens", Value::from("required")),
    ] {
        if md.get(k).is_none_or(Value::is_null) {
            md.insert(k.into(), v);
        }
    }
    m.insert("metadataOptions".into(), Value::Object(md));
    template_hash(&Value::Object(m))
}

/// The hash recorded in `annotations` under `hash_key`, when its version
/// annotation (`version_key`) says it is ours ([`HASH_VERSION`]); `None`
/// otherwise (absent, or written by Karpenter: unknown, never drift).
pub fn recorded_hash<'a>(
    annotations: &'a BTreeMap<String, String>,
    hash_key: &str,
    version_key: &str,
) -> Option<&'a str> {
    if annotations.get(version_key).map(String::as_str) != Some(HASH_VERSION) {
        return None;
    }
    annotations.get(hash_key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{NODECLASS_HASH, NODEPOOL_HASH};
    use serde_json::json;

    #[test]
    fn fnv_of_canonical_text_is_pinned() {
        // FNV-1a 64 test vectors: "" and "a".
        assert_eq!(template_hash(&Value::Null), "cbf29ce484222325");
        assert_eq!(canonical_json(&json!({"x": "a"})), r#"{"x":"a"}"#);
        // Pinned: a change here changes every recorded hash (bump
        // HASH_VERSION when it must).
        assert_eq!(
            template_hash(&json!({"b": [2, 1], "a": {"c": "d\"e"}})),
            "76161038d4e43201"
        );
        assert_eq!(
            canonical_json(&json!({"b": [2, 1], "a": {"c": "d\"e"}})),
            r#"{"a":{"c":"d\"e"},"b":[1,2]}"#
        );
        assert_eq!(
            canonical_json(&json!({"b": [2, 1.0, "x"], "a": {"c": "d\"e\n"}, "z": null})),
            r#"{"a":{"c":"d\"e\u000a"},"b":["x",1,2]}"#
        );
    }

    /// (a, b, same hash?)
    #[test]
    fn canonical_equivalences() {
        let cases = [
            (json!({"a": 1, "b": 2}), json!({"b": 2, "a": 1}), true),
            (json!({"a": 1}), json!({"a": 1.0}), true),
            (json!({"a": 1, "n": null}), json!({"a": 1}), true),
            (json!({"a": 1, "e": ""}), json!({"a": 1}), true),
            (json!({"a": 1, "e": []}), json!({"a": 1}), true),
            (json!({"a": 1, "e": {"f": null}}), json!({"a": 1}), true),
            (json!({"t": ["x", "y"]}), json!({"t": ["y", "x"]}), true),
            (json!({"a": 1}), json!({"a": 2}), false),
            (json!({"a": 0}), json!({}), false),
            (json!({"a": false}), json!({}), false),
            (json!({"a": "1"}), json!({"a": 1}), false),
            (json!({"t": ["x"]}), json!({"t": ["x", "x"]}), false),
            (json!({"a": {"b": 1}}), json!({"a.b": 1}), false),
        ];
        for (a, b, same) in cases {
            assert_eq!(
                template_hash(&a) == template_hash(&b),
                same,
                "{a} vs {b}: {} / {}",
                canonical_json(&a),
                canonical_json(&b)
            );
        }
    }

    fn pool(extra: Value) -> Value {
        let mut spec = json!({
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                    "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "budgets": [{"nodes": "10%"}]},
            "limits": {"cpu": "100"},
            "weight": 10
        });
        merge(&mut spec, extra);
        spec
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    match a.get_mut(&k) {
                        Some(x) if v.is_object() => merge(x, v),
                        _ => {
                            a.insert(k, v);
                        }
                    }
                }
            }
            (a, b) => *a = b,
        }
    }

    /// (change to the NodePool spec, drift?)
    #[test]
    fn nodepool_hash_covers_the_template_only() {
        let base = nodepool_hash(&pool(json!({})), Some(2_592_000), None);
        let cases = [
            (json!({"template": {"spec": {"requirements": []}}}), false),
            (json!({"limits": {"cpu": "5"}, "weight": 50}), false),
            (
                json!({"disruption": {"budgets": [{"nodes": "0"}], "consolidateAfter": "1h"}}),
                false,
            ),
            (
                json!({"template": {"spec": {"nodeClassRef": {"group": null, "apiVersion": "karpenter.k8s.aws/v1beta1"}}}}),
                false,
            ),
            (
                json!({"template": {"metadata": {"labels": {"team": "b"}}}}),
                true,
            ),
            (
                json!({"template": {"metadata": {"annotations": {"x": "y"}}}}),
                true,
            ),
            (json!({"template": {"spec": {"taints": []}}}), true),
            (
                json!({"template": {"spec": {"startupTaints": [{"key": "s", "effect": "NoSchedule"}]}}}),
                true,
            ),
            (
                json!({"template": {"spec": {"nodeClassRef": {"name": "other"}}}}),
                true,
            ),
            (
                json!({"template": {"spec": {"kubelet": {"maxPods": 20}}}}),
                true,
            ),
        ];
        for (change, drift) in cases {
            let h = nodepool_hash(&pool(change.clone()), Some(2_592_000), None);
            assert_eq!(h != base, drift, "{change}");
        }
        // The effective durations, not their spelling, count.
        let tgp = |s: Option<u64>| nodepool_hash(&pool(json!({})), Some(2_592_000), s);
        assert_ne!(tgp(Some(3600)), base);
        assert_eq!(
            tgp(Some(3600)),
            nodepool_hash(
                &pool(json!({"template": {"spec": {"terminationGracePeriod": "60m"}}})),
                Some(2_592_000),
                Some(3600)
            )
        );
        assert_ne!(nodepool_hash(&pool(json!({})), None, None), base);
        assert_ne!(nodepool_hash(&pool(json!({})), Some(3600), None), base);
        assert_eq!(base.len(), 16);
        assert!(base.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn provisioner_hash_ignores_scheduling_and_disruption_fields() {
        let spec = json!({
            "labels": {"a": "b"},
            "providerRef": {"name": "default"},
            "requirements": [{"key": "k", "operator": "Exists"}],
            "limits": {"resources": {"cpu": "10"}},
            "weight": 5,
            "consolidation": {"enabled": true},
            "ttlSecondsUntilExpired": 3600
        });
        let base = provisioner_hash(&spec);
        let bare = json!({"labels": {"a": "b"}, "providerRef": {"name": "default"}, "ttlSecondsAfterEmpty": 30});
        assert_eq!(provisioner_hash(&bare), base);
        let relabelled = json!({"labels": {"a": "c"}, "providerRef": {"name": "default"}});
        assert_ne!(provisioner_hash(&relabelled), base);
    }

    #[test]
    fn nodeclass_hash_ignores_selectors_and_fills_defaults() {
        let spec = json!({
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "capacityReservationSelectorTerms": [{"id": "cr-1"}],
        });
        let base = nodeclass_hash(&spec, &AmiFamily::AL2023);
        let cases = [
            (
                json!({"role": "KarpenterNodeRole", "subnetSelectorTerms": [{"id": "subnet-1"}]}),
                AmiFamily::AL2023,
                false,
            ),
            (
                json!({"role": "KarpenterNodeRole", "amiFamily": "AL2023", "ipPrefixCount": 2}),
                AmiFamily::AL2023,
                false,
            ),
            (
                json!({"role": "KarpenterNodeRole", "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}}),
                AmiFamily::AL2023,
                false,
            ),
            (
                json!({"role": "KarpenterNodeRole"}),
                AmiFamily::Bottlerocket,
                true,
            ),
            (json!({"role": "Other"}), AmiFamily::AL2023, true),
            (
                json!({"role": "KarpenterNodeRole", "metadataOptions": {"httpPutResponseHopLimit": 2}}),
                AmiFamily::AL2023,
                true,
            ),
            (
                json!({"role": "KarpenterNodeRole", "userData": "echo hi"}),
                AmiFamily::AL2023,
                true,
            ),
            (
                json!({"role": "KarpenterNodeRole", "kubelet": {"maxPods": 10}}),
                AmiFamily::AL2023,
                true,
            ),
            (
                json!({"role": "KarpenterNodeRole", "tags": {"team": "x"}}),
                AmiFamily::AL2023,
                true,
            ),
        ];
        for (spec, fam, drift) in cases {
            assert_eq!(nodeclass_hash(&spec, &fam) != base, drift, "{spec} {fam:?}");
        }
        // v1alpha1 AWSNodeTemplate selectors are dynamic too.
        let t = json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "amiSelector": {"x": "y"}});
        assert_eq!(
            nodeclass_hash(&t, &AmiFamily::AL2),
            nodeclass_hash(&json!({}), &AmiFamily::AL2)
        );
    }

    #[test]
    fn only_our_version_of_a_recorded_hash_counts() {
        let ann = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ours = ann(&[
            (NODEPOOL_HASH, "abc"),
            (NODEPOOL_HASH_VERSION, HASH_VERSION),
        ]);
        assert_eq!(
            recorded_hash(&ours, NODEPOOL_HASH, NODEPOOL_HASH_VERSION),
            Some("abc")
        );
        let karpenter = ann(&[(NODEPOOL_HASH, "1234567"), (NODEPOOL_HASH_VERSION, "v3")]);
        assert_eq!(
            recorded_hash(&karpenter, NODEPOOL_HASH, NODEPOOL_HASH_VERSION),
            None
        );
        let unversioned = ann(&[(NODECLASS_HASH, "abc")]);
        assert_eq!(
            recorded_hash(&unversioned, NODECLASS_HASH, NODECLASS_HASH_VERSION),
            None
        );
        let versioned_only = ann(&[(NODECLASS_HASH_VERSION, HASH_VERSION)]);
        assert_eq!(
            recorded_hash(&versioned_only, NODECLASS_HASH, NODECLASS_HASH_VERSION),
            None
        );
    }
}
