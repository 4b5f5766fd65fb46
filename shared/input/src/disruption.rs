//! What disruption reads besides the scheduler's inputs:
//! `policy/v1` (and `v1beta1`) PodDisruptionBudgets and `karpenter.sh/v1`
//! (and `v1beta1`) NodeClaims, plus the shared count-or-percent parser of
//! PDBs and NodePool budgets.
//!
//! Like the other core Kubernetes objects, metadata and unknown fields are
//! lenient; the fields read here are checked, and an error names the field.

use flotilla_core::labels::NODEPOOL;
use flotilla_core::model::{IntOrPercent, LabelSelector, NodeClaimObject, PodDisruptionBudget};
use flotilla_core::Operator;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;

use crate::pod::{karpenter_requirement, label_selector};
use crate::util::{duration_secs, resources, taints, Ctx};
use crate::{Doc, InputError};
use flotilla_core::requirements::Requirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;

/// `"N"` or `"N%"` (0..=100) as a string; `N` (non-negative) as a number
/// when `numbers` (PDBs' IntOrString; budgets' `nodes` is a string in
/// Karpenter's CRD but a bare number is accepted as well).
pub(crate) fn int_or_percent(
    ctx: &Ctx,
    path: &str,
    v: &IntOrString,
    string_counts: bool,
) -> Result<IntOrPercent, InputError> {
    let expected = if string_counts {
        "a count (\"5\") or a percentage from 0% to 100% (\"10%\")"
    } else {
        "a count (5) or a percentage from 0% to 100% (\"10%\")"
    };
    match v {
        IntOrString::Int(n) => u32::try_from(*n)
            .map(IntOrPercent::Int)
            .map_err(|_| ctx.err(path, format!("must not be negative, got {n}"))),
        IntOrString::String(s) => {
            let digits =
                |t: &str| !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit());
            let bad = || ctx.err(path, format!("expected {expected}, got {s:?}"));
            if let Some(p) = s.strip_suffix('%') {
                if !digits(p) {
                    return Err(bad());
                }
                match p.parse::<u32>() {
                    Ok(p) if p <= 100 => Ok(IntOrPercent::Percent(p)),
                    _ => Err(ctx.err(path, format!("percentage {s:?} is not between 0% and 100%"))),
                }
            } else if string_counts && digits(s) {
                s.parse::<u32>()
                    .map(IntOrPercent::Int)
                    .map_err(|_| ctx.err(path, format!("count {s:?} is too large")))
            } else {
                Err(bad())
            }
        }
    }
}

#[derive(Deserialize)]
struct PdbDoc {
    #[serde(default)]
    metadata: meta::ObjectMeta,
    #[serde(default)]
    spec: Option<PdbSpec>,
    /// Lenient: only `disruptionsAllowed` is read.
    #[serde(default)]
    status: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PdbSpec {
    #[serde(default)]
    selector: Option<meta::LabelSelector>,
    #[serde(default)]
    min_available: Option<IntOrString>,
    #[serde(default)]
    max_unavailable: Option<IntOrString>,
}

/// A selector that selects no pod.
fn selects_nothing() -> LabelSelector {
    LabelSelector {
        match_labels: Default::default(),
        match_expressions: vec![("flotilla.io/no-selector".into(), Operator::In, Vec::new())],
    }
}

/// A `policy/v1` or `policy/v1beta1` PodDisruptionBudget.
///
/// The selector follows the API version: in `policy/v1` a missing selector
/// selects no pod and an empty one (`{}`) every pod of the namespace; in
/// `policy/v1beta1` both select no pod. `minAvailable` and
/// `maxUnavailable` are mutually exclusive, as the API server requires.
pub(crate) fn pdb(ctx: &Ctx, d: &Doc) -> Result<PodDisruptionBudget, InputError> {
    let o: PdbDoc = ctx.de(&d.value, "")?;
    let name = match o.metadata.name {
        Some(n) if !n.is_empty() => n,
        _ => return Err(ctx.err("metadata.name", "a PodDisruptionBudget needs a name")),
    };
    let namespace = o
        .metadata
        .namespace
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let v1beta1 = d.value.get("apiVersion").and_then(Value::as_str) == Some("policy/v1beta1");
    let spec = o.spec.as_ref();
    let selector = match spec.and_then(|s| s.selector.as_ref()) {
        None => selects_nothing(),
        Some(s) => {
            let sel = label_selector(ctx, "spec.selector", Some(s))?;
            if v1beta1 && sel == LabelSelector::default() {
                selects_nothing()
            } else {
                sel
            }
        }
    };
    let min_available = spec
        .and_then(|s| s.min_available.as_ref())
        .map(|v| int_or_percent(ctx, "spec.minAvailable", v, false))
        .transpose()?;
    let max_unavailable = spec
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| int_or_percent(ctx, "spec.maxUnavailable", v, false))
        .transpose()?;
    if min_available.is_some() && max_unavailable.is_some() {
        return Err(ctx.err(
            "spec.maxUnavailable",
            "minAvailable and maxUnavailable are mutually exclusive (set one of them)",
        ));
    }
    let disruptions_allowed =
        match o.status.as_ref() {
            None | Some(Value::Null) => None,
            Some(Value::Object(st)) => match st.get("disruptionsAllowed") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || {
                        ctx.err(
                            "status.disruptionsAllowed",
                            format!("disruptionsAllowed must be a non-negative integer, got {v}"),
                        )
                    },
                )?),
            },
            Some(_) => return Err(ctx.err("status", "status must be a mapping")),
        };
    Ok(PodDisruptionBudget {
        namespace,
        name,
        selector,
        min_available,
        max_unavailable,
        disruptions_allowed,
    })
}

#[derive(Deserialize)]
struct NodeClaimDoc {
    #[serde(default)]
    metadata: meta::ObjectMeta,
    /// Lenient: only `expireAfter` is read.
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    status: Option<NodeClaimStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeClaimStatus {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default, rename = "providerID")]
    provider_id: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<Condition>>,
    #[serde(default)]
    allocatable: Option<std::collections::BTreeMap<String, KQuantity>>,
    #[serde(default, rename = "imageID")]
    image_id: Option<String>,
}

/// The part of a NodeClaim's spec the scheduler reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NodeClaimSpecDoc {
    #[serde(default)]
    requirements: Vec<NodeClaimReq>,
    #[serde(default)]
    taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeClaimReq {
    key: String,
    operator: String,
    #[serde(default)]
    values: Option<Vec<String>>,
}

/// `spec.requirements` and `spec.taints` of a NodeClaim.
fn node_claim_spec(
    ctx: &Ctx,
    spec: Option<&Value>,
) -> Result<(Requirements, Vec<flotilla_core::model::Taint>), InputError> {
    let Some(v) = spec.filter(|v| !v.is_null()) else {
        return Ok((Requirements::new(), Vec::new()));
    };
    let s: NodeClaimSpecDoc = ctx.de(v, "spec")?;
    let mut reqs = Requirements::new();
    for (i, r) in s.requirements.iter().enumerate() {
        reqs.add(karpenter_requirement(
            ctx,
            &format!("spec.requirements[{i}]"),
            &r.key,
            &r.operator,
            r.values.clone().unwrap_or_default(),
        )?);
    }
    let taints = taints(ctx, "spec.taints", s.taints.as_ref(), false)?;
    Ok((reqs, taints))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    last_transition_time: Option<meta::Time>,
}

/// The duration string at `spec.<field>` of a NodeClaim: `None` when the
/// spec or the field is absent (or null), `Some(None)` for `Never`; an error
/// names the field, with `example` of what it takes.
fn spec_duration(
    ctx: &Ctx,
    spec: Option<&Value>,
    field: &str,
    example: &str,
) -> Result<Option<Option<u64>>, InputError> {
    let path = format!("spec.{field}");
    match spec {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(s)) => match s.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(d)) => duration_secs(d).map(Some).map_err(|m| ctx.err(&path, m)),
            Some(v) => Err(ctx.err(
                &path,
                format!("{field} must be a duration string such as {example}, got {v}"),
            )),
        },
        Some(_) => Err(ctx.err("spec", "spec must be a mapping")),
    }
}

/// A `karpenter.sh/v1` (or `v1beta1`) NodeClaim: its NodePool (the
/// `karpenter.sh/nodepool` label), node, provider ID, when it became
/// `Consolidatable`, whether it is `Drifted`, its own `expireAfter`
/// (`Never`: none) and `terminationGracePeriod`.
pub(crate) fn node_claim(ctx: &Ctx, d: &Doc) -> Result<NodeClaimObject, InputError> {
    let o: NodeClaimDoc = ctx.de(&d.value, "")?;
    let name = match o.metadata.name {
        Some(n) if !n.is_empty() => n,
        _ => return Err(ctx.err("metadata.name", "a NodeClaim needs a name")),
    };
    let labels = o.metadata.labels.unwrap_or_default();
    let expire_after_seconds =
        spec_duration(ctx, o.spec.as_ref(), "expireAfter", "720h or Never")?.flatten();
    let termination_grace_period_seconds =
        match spec_duration(ctx, o.spec.as_ref(), "terminationGracePeriod", "1h")? {
            Some(None) => {
                return Err(ctx.err(
                    "spec.terminationGracePeriod",
                    "terminationGracePeriod must be a duration such as 1h, not Never",
                ))
            }
            given => given.flatten(),
        };
    let mut consolidatable_since = None;
    let mut drifted = false;
    let mut drifted_since = None;
    let status = o.status.as_ref();
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if c.status != "True" {
            continue;
        }
        match c.type_.as_str() {
            "Consolidatable" => {
                consolidatable_since = c.last_transition_time.as_ref().map(|t| t.0.as_second())
            }
            "Drifted" => {
                drifted = true;
                drifted_since = c.last_transition_time.as_ref().map(|t| t.0.as_second());
            }
            _ => {}
        }
    }
    let (requirements, taints) = node_claim_spec(ctx, o.spec.as_ref())?;
    let allocatable = resources(
        ctx,
        "status.allocatable",
        status.and_then(|s| s.allocatable.as_ref()),
    )?;
    Ok(NodeClaimObject {
        requirements,
        taints,
        allocatable,
        deleting: o.metadata.deletion_timestamp.is_some(),
        node_pool: labels.get(NODEPOOL).cloned(),
        node_name: status
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        provider_id: status
            .and_then(|s| s.provider_id.clone())
            .filter(|n| !n.is_empty()),
        image_id: status
            .and_then(|s| s.image_id.clone())
            .filter(|n| !n.is_empty()),
        annotations: o.metadata.annotations.unwrap_or_default(),
        created_at: o
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second()),
        consolidatable_since,
        drifted,
        drifted_since,
        expire_after_seconds,
        termination_grace_period_seconds,
        labels,
        name,
    })
}
