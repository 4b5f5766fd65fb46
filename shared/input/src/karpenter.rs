//! Karpenter objects: NodePool (karpenter.sh/v1, v1beta1), Provisioner
//! (karpenter.sh/v1alpha5), EC2NodeClass / AWSNodeTemplate, NodeOverlay,
//! and Veneer-style preference annotations.
//!
//! The `spec` parts of NodePools, Provisioners and NodeOverlays are strict
//! (`deny_unknown_fields`): a typo such as `requirments` is an error naming
//! the field. `metadata` and `status` are lenient. NodeClass specs are
//! lenient for now (only the fields read here are type-checked).

use std::collections::BTreeMap;

use flotilla_core::catalog::ebs::{self, EbsVolume, VolumeType};
use flotilla_core::disruption::hash;
use flotilla_core::disruption::schedule::CronSchedule;
use flotilla_core::labels::{
    self, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, NODEPOOL, PROVISIONER_NAME,
};
use flotilla_core::model::{
    parse_tolerance, AmiFamily, Budget, Disruption, DisruptionReason, IntOrPercent, KubeletConfig,
    NodeClass, NodeClassAmi, NodeClassStatus, NodeOverlay, NodePool, NodePoolSource,
    PriceAdjustment, CONSOLIDATE_TOLERANCE_ANNOTATION,
};
use flotilla_core::quantity::Quantity;
use flotilla_core::requirements::{Operator, Requirement, Requirements};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::Value;

use crate::disruption::int_or_percent;
use crate::pod::karpenter_requirement as requirement;
use crate::util::{check_labels, duration_secs, join, quantity, resources, taints, threshold, Ctx};
use crate::{Doc, InputError};

/// Prefix of Veneer preference annotations (`veneer.io/preference.N`).
pub const VENEER_PREFERENCE: &str = "veneer.io/preference.";

/// A Kubernetes object with a typed spec; everything else is ignored.
#[derive(Deserialize)]
struct Object<S> {
    #[serde(default)]
    metadata: meta::ObjectMeta,
    spec: Option<S>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReqDoc {
    key: String,
    operator: String,
    #[serde(default)]
    values: Option<Vec<String>>,
    /// The least number of distinct values of the key a NodeClaim's
    /// instance types must keep (see [`min_values`]).
    #[serde(default)]
    min_values: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodePoolSpec {
    template: NodeClaimTemplate,
    #[serde(default)]
    disruption: Option<DisruptionDoc>,
    #[serde(default)]
    limits: Option<BTreeMap<String, KQuantity>>,
    #[serde(default)]
    weight: Option<i32>,
    /// Static NodePools (fixed replica count): their NodeClaims are not
    /// provisioned for pending pods (the NodePool launches nothing here).
    #[serde(default)]
    replicas: Option<i64>,
}

/// Template metadata stays lenient, like all metadata.
#[derive(Deserialize, Default)]
struct TemplateMeta {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeClaimTemplate {
    #[serde(default)]
    metadata: Option<TemplateMeta>,
    spec: NodeClaimSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeClaimSpec {
    #[serde(default)]
    requirements: Vec<ReqDoc>,
    #[serde(default)]
    taints: Option<Vec<core::Taint>>,
    #[serde(default)]
    startup_taints: Option<Vec<core::Taint>>,
    #[serde(default)]
    node_class_ref: Option<NodeClassRef>,
    #[serde(default)]
    expire_after: Option<String>,
    #[serde(default)]
    termination_grace_period: Option<String>,
    /// v1beta1 location of the kubelet configuration.
    #[serde(default)]
    kubelet: Option<KubeletDoc>,
    /// v1beta1 `resources.requests`; accepted and ignored.
    #[serde(default)]
    #[allow(dead_code)]
    resources: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeClassRef {
    #[serde(default)]
    #[allow(dead_code)]
    group: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    kind: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    api_version: Option<String>,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DisruptionDoc {
    #[serde(default)]
    consolidation_policy: Option<String>,
    #[serde(default)]
    consolidate_after: Option<String>,
    /// v1beta1 location of expireAfter.
    #[serde(default)]
    expire_after: Option<String>,
    #[serde(default)]
    budgets: Option<Vec<BudgetDoc>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BudgetDoc {
    /// Karpenter's CRD defaults it to `10%`.
    #[serde(default)]
    nodes: Option<IntOrString>,
    #[serde(default)]
    reasons: Option<Vec<String>>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    duration: Option<String>,
}

/// `spec.disruption.budgets`: omitted, Karpenter's default (one budget of
/// 10%); `[]`, none (unlimited). `schedule` and `duration` go together (the
/// CRD's rule); the schedule must parse as cron (UTC).
fn budgets(ctx: &Ctx, docs: Option<&Vec<BudgetDoc>>) -> Result<Vec<Budget>, InputError> {
    let Some(docs) = docs else {
        return Ok(vec![Budget::default_budget()]);
    };
    let mut out = Vec::with_capacity(docs.len());
    for (i, b) in docs.iter().enumerate() {
        let p = format!("spec.disruption.budgets[{i}]");
        let nodes = match &b.nodes {
            None => IntOrPercent::Percent(10),
            Some(n) => int_or_percent(ctx, &join(&p, "nodes"), n, true)?,
        };
        let mut reasons = Vec::new();
        for (j, r) in b.reasons.iter().flatten().enumerate() {
            let reason = match r.as_str() {
                "Empty" => DisruptionReason::Empty,
                "Drifted" => DisruptionReason::Drifted,
                "Underutilized" => DisruptionReason::Underutilized,
                other => {
                    return Err(ctx.err(
                        &format!("{p}.reasons[{j}]"),
                        format!(
                            "unknown disruption reason {other:?} (expected Empty, Drifted or Underutilized)"
                        ),
                    ))
                }
            };
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
        let (schedule, duration_seconds) = match (&b.schedule, &b.duration) {
            (None, None) => (None, None),
            (Some(s), Some(d)) => {
                CronSchedule::parse(s).map_err(|e| ctx.err(&join(&p, "schedule"), e))?;
                let secs = duration_secs(d)
                    .map_err(|e| ctx.err(&join(&p, "duration"), e))?
                    .ok_or_else(|| {
                        ctx.err(
                            &join(&p, "duration"),
                            "duration must be a duration such as 1h30m, not Never",
                        )
                    })?;
                (Some(s.trim().to_string()), Some(secs))
            }
            (Some(_), None) => {
                return Err(ctx.err(
                    &join(&p, "duration"),
                    "a budget with a schedule needs a duration ('schedule' must be set with 'duration')",
                ))
            }
            (None, Some(_)) => {
                return Err(ctx.err(
                    &join(&p, "schedule"),
                    "a budget with a duration needs a schedule ('schedule' must be set with 'duration')",
                ))
            }
        };
        out.push(Budget {
            nodes,
            reasons,
            schedule,
            duration_seconds,
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KubeletDoc {
    #[serde(default, rename = "clusterDNS")]
    cluster_dns: Option<Vec<String>>,
    #[serde(default)]
    max_pods: Option<i64>,
    #[serde(default)]
    pods_per_core: Option<i64>,
    #[serde(default)]
    system_reserved: Option<BTreeMap<String, KQuantity>>,
    #[serde(default)]
    kube_reserved: Option<BTreeMap<String, KQuantity>>,
    #[serde(default)]
    eviction_hard: Option<BTreeMap<String, KQuantity>>,
    #[serde(default)]
    eviction_soft: Option<BTreeMap<String, KQuantity>>,
    #[serde(default)]
    eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Seconds (v1beta1) or a duration (v1alpha5 docs); kept as written.
    #[serde(default)]
    eviction_max_pod_grace_period: Option<KQuantity>,
    #[serde(default)]
    #[allow(dead_code)]
    image_gc_high_threshold_percent: Option<i64>,
    #[serde(default)]
    #[allow(dead_code)]
    image_gc_low_threshold_percent: Option<i64>,
    #[serde(default, rename = "cpuCFSQuota")]
    #[allow(dead_code)]
    cpu_cfs_quota: Option<bool>,
    /// v1alpha5 only (`containerd` / `dockerd`).
    #[serde(default)]
    container_runtime: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProvisionerSpec {
    #[serde(default)]
    requirements: Vec<ReqDoc>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    taints: Option<Vec<core::Taint>>,
    #[serde(default)]
    startup_taints: Option<Vec<core::Taint>>,
    #[serde(default)]
    weight: Option<i32>,
    #[serde(default)]
    limits: Option<ProvisionerLimits>,
    #[serde(default)]
    kubelet_configuration: Option<KubeletDoc>,
    #[serde(default)]
    ttl_seconds_after_empty: Option<i64>,
    #[serde(default)]
    ttl_seconds_until_expired: Option<i64>,
    #[serde(default)]
    consolidation: Option<Consolidation>,
    #[serde(default)]
    provider_ref: Option<ProviderRef>,
    /// Inline AWS provider settings; opaque.
    #[serde(default)]
    #[allow(dead_code)]
    provider: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvisionerLimits {
    #[serde(default)]
    resources: Option<BTreeMap<String, KQuantity>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Consolidation {
    #[serde(default)]
    enabled: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderRef {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    kind: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    api_version: Option<String>,
}

fn object<S: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    d: &Doc,
    kind: &str,
) -> Result<(meta::ObjectMeta, S), InputError> {
    let o: Object<S> = ctx.de(&d.value, "")?;
    let spec = o
        .spec
        .ok_or_else(|| ctx.err("spec", format!("a {kind} needs a spec")))?;
    match o.metadata.name.as_deref() {
        Some(n) if !n.is_empty() => Ok((o.metadata, spec)),
        _ => Err(ctx.err("metadata.name", format!("a {kind} needs a name"))),
    }
}

fn reqs_from(ctx: &Ctx, path: &str, reqs: &[ReqDoc]) -> Result<Requirements, InputError> {
    let mut out = Requirements::new();
    for (i, r) in reqs.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let req = requirement(
            ctx,
            &p,
            &r.key,
            &r.operator,
            r.values.clone().unwrap_or_default(),
        )?;
        if labels::is_restricted_for_nodepool(&req.key) {
            return Err(ctx.err(
                &join(&p, "key"),
                format!(
                    "label {:?} is kubernetes.io/hostname or in a domain Karpenter reserves (karpenter.sh, karpenter.k8s.aws)",
                    r.key
                ),
            ));
        }
        out.add(req);
    }
    Ok(out)
}

/// Karpenter's CRD bound on `minValues`.
const MAX_MIN_VALUES: i64 = 50;

/// The `minValues` of `reqs` per key: the largest when a key is given
/// several times (Karpenter keeps the max). Checked as the CRD does: 1 to
/// 50, and an `In` requirement lists at least that many values.
fn min_values(ctx: &Ctx, path: &str, reqs: &[ReqDoc]) -> Result<BTreeMap<String, u32>, InputError> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for (i, r) in reqs.iter().enumerate() {
        let Some(m) = r.min_values else { continue };
        let p = format!("{path}[{i}].minValues");
        if !(1..=MAX_MIN_VALUES).contains(&m) {
            return Err(ctx.err(&p, format!("minValues {m} is not in 1..{MAX_MIN_VALUES}")));
        }
        let values = r.values.as_ref().map_or(0, Vec::len);
        if r.operator == "In" && i64::try_from(values).unwrap_or(i64::MAX) < m {
            return Err(ctx.err(
                &p,
                format!("minValues {m} is more than the {values} value(s) of this In requirement"),
            ));
        }
        let m = u32::try_from(m).unwrap_or(u32::MAX);
        let e = out.entry(r.key.clone()).or_insert(m);
        *e = (*e).max(m);
    }
    Ok(out)
}

fn weight(ctx: &Ctx, path: &str, w: Option<i32>) -> Result<i32, InputError> {
    match w {
        None => Ok(0),
        Some(w) if (1..=100).contains(&w) => Ok(w),
        Some(w) => Err(ctx.err(path, format!("weight {w} is not in 1..100"))),
    }
}

/// Node labels of a pool: validated, not in restricted domains.
fn pool_labels(ctx: &Ctx, path: &str, l: &BTreeMap<String, String>) -> Result<(), InputError> {
    check_labels(ctx, path, l, true)?;
    for k in l.keys() {
        if labels::is_restricted_for_nodepool(k) {
            return Err(ctx.err(
                &join(path, k),
                format!("label {k:?} is kubernetes.io/hostname or in a domain Karpenter reserves (karpenter.sh, karpenter.k8s.aws)"),
            ));
        }
    }
    Ok(())
}

const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

fn kubelet(ctx: &Ctx, path: &str, k: Option<&KubeletDoc>) -> Result<KubeletConfig, InputError> {
    let mut out = KubeletConfig::default();
    let Some(k) = k else { return Ok(out) };
    let nonneg = |field: &str, v: Option<i64>| -> Result<Option<u32>, InputError> {
        v.map(|n| {
            u32::try_from(n).map_err(|_| {
                ctx.err(
                    &join(path, field),
                    format!("{field} must be between 0 and {}, got {n}", u32::MAX),
                )
            })
        })
        .transpose()
    };
    out.max_pods = nonneg("maxPods", k.max_pods)?;
    out.pods_per_core = nonneg("podsPerCore", k.pods_per_core)?;
    out.system_reserved = resources(
        ctx,
        &join(path, "systemReserved"),
        k.system_reserved.as_ref(),
    )?;
    out.kube_reserved = resources(ctx, &join(path, "kubeReserved"), k.kube_reserved.as_ref())?;
    for (field, src, dst) in [
        ("evictionHard", &k.eviction_hard, &mut out.eviction_hard),
        ("evictionSoft", &k.eviction_soft, &mut out.eviction_soft),
    ] {
        for (sig, v) in src.iter().flatten() {
            let p = join(&join(path, field), sig);
            if !EVICTION_SIGNALS.contains(&sig.as_str()) {
                return Err(ctx.err(
                    &p,
                    format!(
                        "unknown eviction signal {sig:?} (expected one of {})",
                        EVICTION_SIGNALS.join(", ")
                    ),
                ));
            }
            dst.insert(sig.clone(), threshold(ctx, &p, &v.0)?);
        }
    }
    for (sig, v) in k.eviction_soft_grace_period.iter().flatten() {
        let p = join(&join(path, "evictionSoftGracePeriod"), sig);
        if !EVICTION_SIGNALS.contains(&sig.as_str()) {
            return Err(ctx.err(&p, format!("unknown eviction signal {sig:?}")));
        }
        duration_secs(v).map_err(|e| ctx.err(&p, e))?;
        out.eviction_soft_grace_period
            .insert(sig.clone(), v.clone());
    }
    if let Some(v) = &k.eviction_max_pod_grace_period {
        let p = join(path, "evictionMaxPodGracePeriod");
        let s = v.0.trim();
        if s.parse::<i64>().is_err() {
            duration_secs(s).map_err(|e| ctx.err(&p, e))?;
        }
        out.eviction_max_pod_grace_period = Some(s.to_string());
    }
    for (i, ip) in k.cluster_dns.iter().flatten().enumerate() {
        if ip.parse::<std::net::IpAddr>().is_err() {
            return Err(ctx.err(
                &format!("{}[{i}]", join(path, "clusterDNS")),
                format!("{ip:?} is not an IP address"),
            ));
        }
        out.cluster_dns.push(ip.clone());
    }
    if let Some(rt) = &k.container_runtime {
        if rt != "containerd" && rt != "dockerd" {
            return Err(ctx.err(
                &join(path, "containerRuntime"),
                format!("unknown container runtime {rt:?} (expected containerd or dockerd)"),
            ));
        }
        out.container_runtime = Some(rt.clone());
    }
    Ok(out)
}

fn secs(ctx: &Ctx, path: &str, s: Option<&str>) -> Result<Option<u64>, InputError> {
    match s {
        None => Ok(None),
        Some(s) => duration_secs(s).map_err(|e| ctx.err(path, e)),
    }
}

/// Adds the requirements every pool carries: one `In` per label, the
/// pool's own name label, and the on-demand capacity-type default.
fn finish_requirements(
    ctx: &Ctx,
    reqs: &mut Requirements,
    labels_path: &str,
    labels: &BTreeMap<String, String>,
    name_key: &str,
    name: &str,
) -> Result<bool, InputError> {
    for (k, v) in labels {
        let r = Requirement::from_parts(k, Operator::In, vec![v.clone()])
            .map_err(|e| ctx.err(&join(labels_path, k), e))?;
        reqs.add(r);
    }
    let r = Requirement::from_parts(name_key, Operator::In, vec![name.to_string()])
        .map_err(|e| ctx.err("metadata.name", e))?;
    reqs.add(r);
    let default_capacity_type = reqs.get(CAPACITY_TYPE).is_none();
    if default_capacity_type {
        reqs.add(Requirement::in_values(
            CAPACITY_TYPE,
            [CAPACITY_TYPE_ON_DEMAND],
        ));
    }
    Ok(default_capacity_type)
}

/// A NodePool (karpenter.sh/v1 or v1beta1), with the overlays of its Veneer
/// preference annotations.
///
/// Requirements are the template's, plus `In [value]` per template label,
/// plus `karpenter.sh/nodepool In [<name>]` (the label Karpenter puts on
/// its nodes), plus `karpenter.sh/capacity-type In [on-demand]` when the
/// pool has no capacity-type requirement: on-demand is what Karpenter
/// launches for such a pool. Disruption fields get the v1 CRD defaults
/// (`WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`, `expireAfter: 720h`,
/// `budgets: [{nodes: 10%}]`) when omitted. The template hash
/// ([`hash::nodepool_hash`]) is filled in.
pub(crate) fn node_pool(
    ctx: &Ctx,
    d: &Doc,
    warnings: &mut Vec<String>,
) -> Result<(NodePool, Vec<NodeOverlay>), InputError> {
    let (m, spec): (meta::ObjectMeta, NodePoolSpec) = object(ctx, d, "NodePool")?;
    let name = m.name.clone().unwrap_or_default();
    let tmeta = spec.template.metadata.unwrap_or_default();
    let tlabels = tmeta.labels.unwrap_or_default();
    let tannotations = tmeta.annotations.unwrap_or_default();
    let lp = "spec.template.metadata.labels";
    pool_labels(ctx, lp, &tlabels)?;
    check_labels(
        ctx,
        "spec.template.metadata.annotations",
        &tannotations,
        false,
    )?;
    let ts = &spec.template.spec;
    let mut reqs = reqs_from(ctx, "spec.template.spec.requirements", &ts.requirements)?;
    let min_values = min_values(ctx, "spec.template.spec.requirements", &ts.requirements)?;
    let default_capacity_type = finish_requirements(ctx, &mut reqs, lp, &tlabels, NODEPOOL, &name)?;

    let policy = spec
        .disruption
        .as_ref()
        .and_then(|x| x.consolidation_policy.clone());
    if let Some(p) = &policy {
        if !matches!(
            p.as_str(),
            "WhenEmpty" | "WhenEmptyOrUnderutilized" | "WhenUnderutilized"
        ) {
            return Err(ctx.err(
                "spec.disruption.consolidationPolicy",
                format!("unknown consolidationPolicy {p:?} (expected WhenEmpty or WhenEmptyOrUnderutilized)"),
            ));
        }
    }
    let consolidate_after = match spec
        .disruption
        .as_ref()
        .and_then(|x| x.consolidate_after.as_deref())
    {
        None => Some(0),
        s => secs(ctx, "spec.disruption.consolidateAfter", s)?,
    };
    let expire_after = match (
        &ts.expire_after,
        spec.disruption
            .as_ref()
            .and_then(|x| x.expire_after.as_ref()),
    ) {
        (Some(s), _) => secs(ctx, "spec.template.spec.expireAfter", Some(s))?,
        (None, Some(s)) => secs(ctx, "spec.disruption.expireAfter", Some(s))?,
        (None, None) => Some(720 * 3600),
    };
    let termination_grace_period = match ts.termination_grace_period.as_deref() {
        None => None,
        Some(s) => Some(
            secs(ctx, "spec.template.spec.terminationGracePeriod", Some(s))?.ok_or_else(|| {
                ctx.err(
                    "spec.template.spec.terminationGracePeriod",
                    "terminationGracePeriod must be a duration such as 1h, not Never (omit it to wait indefinitely)",
                )
            })?,
        ),
    };
    let budgets = budgets(
        ctx,
        spec.disruption.as_ref().and_then(|x| x.budgets.as_ref()),
    )?;
    let template_hash = hash::nodepool_hash(
        d.value.get("spec").unwrap_or(&Value::Null),
        expire_after,
        termination_grace_period,
    );
    // A static NodePool's NodeClaims come from its replica count (Karpenter's
    // static provisioning controller), never from pending pods.
    let static_pool = spec.replicas.map(|r| {
        format!("it is a static NodePool (spec.replicas: {r}), whose NodeClaims are not provisioned for pending pods")
    });
    if static_pool.is_some() {
        warnings.push(format!(
            "{}: spec.replicas (static NodePool): not provisioned for pending pods (its nodes still take pods)",
            ctx.here()
        ));
    }
    let limits = match &spec.limits {
        None => None,
        Some(l) => Some(crate::util::limits(ctx, "spec.limits", l)?),
    };
    let pool = NodePool {
        weight: weight(ctx, "spec.weight", spec.weight)?,
        requirements: reqs,
        min_values,
        labels: tlabels,
        annotations: tannotations,
        taints: taints(ctx, "spec.template.spec.taints", ts.taints.as_ref(), true)?,
        startup_taints: taints(
            ctx,
            "spec.template.spec.startupTaints",
            ts.startup_taints.as_ref(),
            true,
        )?,
        limits,
        kubelet: kubelet(ctx, "spec.template.spec.kubelet", ts.kubelet.as_ref())?,
        node_class: ts.node_class_ref.as_ref().map(|r| r.name.clone()),
        disruption: Disruption {
            consolidation_policy: Some(policy.unwrap_or_else(|| "WhenEmptyOrUnderutilized".into())),
            consolidate_after_seconds: consolidate_after,
            expire_after_seconds: expire_after,
            budgets,
            termination_grace_period_seconds: termination_grace_period,
        },
        source: NodePoolSource::NodePool,
        name: name.clone(),
        template_hash: Some(template_hash),
        unavailable: unavailable(&m, &d.value).or(static_pool),
        consolidate_tolerance: tolerance(ctx, m.annotations.as_ref())?,
        default_capacity_type,
        replicas: spec.replicas,
    };
    let overlays = veneer_overlays(ctx, &name, NODEPOOL, m.annotations.as_ref())?;
    Ok((pool, overlays))
}

/// The `flotilla.dev/consolidate-tolerance` annotation (0 when absent).
fn tolerance(ctx: &Ctx, annotations: Option<&BTreeMap<String, String>>) -> Result<f64, InputError> {
    match annotations.and_then(|a| a.get(CONSOLIDATE_TOLERANCE_ANNOTATION)) {
        None => Ok(0.0),
        Some(v) => parse_tolerance(v).map_err(|e| {
            ctx.err(
                &format!("metadata.annotations[{CONSOLIDATE_TOLERANCE_ANNOTATION}]"),
                e,
            )
        }),
    }
}

/// A Provisioner (karpenter.sh/v1alpha5) as a NodePool.
///
/// Requirements get `karpenter.sh/provisioner-name In [<name>]` and the
/// documented `karpenter.sh/capacity-type In [on-demand]` default.
/// `ttlSecondsAfterEmpty` maps to `WhenEmpty` after that many seconds,
/// `consolidation.enabled: true` to `WhenEmptyOrUnderutilized`; setting both
/// is an error, as in Karpenter. Budgets are the v1 default (10%); the hash
/// is [`hash::provisioner_hash`].
pub(crate) fn provisioner(ctx: &Ctx, d: &Doc) -> Result<(NodePool, Vec<NodeOverlay>), InputError> {
    let (m, spec): (meta::ObjectMeta, ProvisionerSpec) = object(ctx, d, "Provisioner")?;
    let name = m.name.clone().unwrap_or_default();
    let plabels = spec.labels.clone().unwrap_or_default();
    let pannotations = spec.annotations.clone().unwrap_or_default();
    pool_labels(ctx, "spec.labels", &plabels)?;
    check_labels(ctx, "spec.annotations", &pannotations, false)?;
    let mut reqs = reqs_from(ctx, "spec.requirements", &spec.requirements)?;
    let min_values = min_values(ctx, "spec.requirements", &spec.requirements)?;
    let default_capacity_type = finish_requirements(
        ctx,
        &mut reqs,
        "spec.labels",
        &plabels,
        PROVISIONER_NAME,
        &name,
    )?;

    let consolidation = spec
        .consolidation
        .as_ref()
        .and_then(|c| c.enabled)
        .unwrap_or(false);
    let nonneg = |field: &str, v: Option<i64>| -> Result<Option<u64>, InputError> {
        v.map(|n| {
            u64::try_from(n)
                .map_err(|_| ctx.err(field, format!("{field} must not be negative, got {n}")))
        })
        .transpose()
    };
    let ttl_empty = nonneg("spec.ttlSecondsAfterEmpty", spec.ttl_seconds_after_empty)?;
    let ttl_expired = nonneg(
        "spec.ttlSecondsUntilExpired",
        spec.ttl_seconds_until_expired,
    )?;
    let disruption = match (consolidation, ttl_empty) {
        (true, Some(_)) => {
            return Err(ctx.err(
                "spec.ttlSecondsAfterEmpty",
                "ttlSecondsAfterEmpty and consolidation.enabled are mutually exclusive",
            ))
        }
        (true, None) => Disruption {
            consolidation_policy: Some("WhenEmptyOrUnderutilized".into()),
            consolidate_after_seconds: Some(0),
            expire_after_seconds: ttl_expired,
            budgets: vec![flotilla_core::model::Budget::default_budget()],
            termination_grace_period_seconds: None,
        },
        (false, Some(t)) => Disruption {
            consolidation_policy: Some("WhenEmpty".into()),
            consolidate_after_seconds: Some(t),
            expire_after_seconds: ttl_expired,
            budgets: vec![flotilla_core::model::Budget::default_budget()],
            termination_grace_period_seconds: None,
        },
        (false, None) => Disruption {
            consolidation_policy: None,
            consolidate_after_seconds: None,
            expire_after_seconds: ttl_expired,
            budgets: vec![flotilla_core::model::Budget::default_budget()],
            termination_grace_period_seconds: None,
        },
    };
    let limits = match spec.limits.as_ref().and_then(|l| l.resources.as_ref()) {
        None => None,
        Some(l) => Some(crate::util::limits(ctx, "spec.limits.resources", l)?),
    };
    let pool = NodePool {
        weight: weight(ctx, "spec.weight", spec.weight)?,
        requirements: reqs,
        min_values,
        labels: plabels,
        annotations: pannotations,
        taints: taints(ctx, "spec.taints", spec.taints.as_ref(), true)?,
        startup_taints: taints(
            ctx,
            "spec.startupTaints",
            spec.startup_taints.as_ref(),
            true,
        )?,
        limits,
        kubelet: kubelet(
            ctx,
            "spec.kubeletConfiguration",
            spec.kubelet_configuration.as_ref(),
        )?,
        node_class: spec.provider_ref.as_ref().map(|r| r.name.clone()),
        disruption,
        template_hash: Some(hash::provisioner_hash(
            d.value.get("spec").unwrap_or(&Value::Null),
        )),
        source: NodePoolSource::Provisioner,
        name: name.clone(),
        unavailable: unavailable(&m, &d.value),
        consolidate_tolerance: tolerance(ctx, m.annotations.as_ref())?,
        default_capacity_type,
        replicas: None,
    };
    let overlays = veneer_overlays(ctx, &name, NODEPOOL, m.annotations.as_ref())?;
    Ok((pool, overlays))
}

/// Why Karpenter would not provision from this NodePool: it is being
/// deleted, or its `Ready` status condition is `False` (e.g. its
/// EC2NodeClass is not ready). Status is read as given; no status: ready.
fn unavailable(m: &meta::ObjectMeta, doc: &Value) -> Option<String> {
    if m.deletion_timestamp.is_some() {
        return Some("it is being deleted".into());
    }
    let conditions = doc
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)?;
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    if ready.get("status").and_then(Value::as_str) != Some("False") {
        return None;
    }
    let reason = ready
        .get("reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .unwrap_or("not ready");
    Some(format!("its Ready condition is False ({reason})"))
}

/// `-50%`, `+10%` (percent) or `-0.01`, `+0.5` (USD per hour).
pub(crate) fn price_adjustment(s: &str) -> Result<PriceAdjustment, String> {
    let t = s.trim();
    let bad =
        || format!("invalid price adjustment {s:?} (expected e.g. -50%, +10%, -0.01 or +0.5)");
    let num = |x: &str| -> Result<f64, String> {
        if x.is_empty()
            || !x
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'.' || b == b'+' || b == b'-')
        {
            return Err(bad());
        }
        let v: f64 = x.parse().map_err(|_| bad())?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(bad())
        }
    };
    if let Some(p) = t.strip_suffix('%') {
        let v = num(p)?;
        if v < -100.0 {
            return Err(format!("price adjustment {s:?} is below -100%"));
        }
        Ok(PriceAdjustment::Percent(v))
    } else {
        Ok(PriceAdjustment::Absolute(num(t)?))
    }
}

fn price(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let bad = || format!("invalid price {s:?} (expected a non-negative number such as 0.123)");
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    let v: f64 = t.parse().map_err(|_| bad())?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(bad())
    }
}

/// Overlays from `veneer.io/preference.N: "<k>=<v>[,<k>=<v>] adjust=-50%"`
/// annotations: requirements are the pairs (`In`) and `karpenter.sh/nodepool In [<pool>]`
/// (also for Provisioners: the planner labels every pool's nodes with it);
/// weight is N; the name is `<pool>/preference.N`.
fn veneer_overlays(
    ctx: &Ctx,
    pool: &str,
    name_key: &str,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Vec<NodeOverlay>, InputError> {
    let mut out = Vec::new();
    for (k, v) in annotations.into_iter().flatten() {
        let Some(n) = k.strip_prefix(VENEER_PREFERENCE) else {
            continue;
        };
        let path = join("metadata.annotations", k);
        let fail = |msg: String| {
            ctx.err(
                &path,
                format!("malformed Veneer preference annotation on {pool}: {msg}"),
            )
        };
        let weight: i32 = match n.parse::<i32>() {
            Ok(w) if w >= 1 && n.bytes().all(|b| b.is_ascii_digit()) => w,
            _ => return Err(fail(format!("{k:?} must end in a positive integer"))),
        };
        let mut reqs = Requirements::new();
        let mut adjust = None;
        let mut pairs = 0;
        for tok in v.split_whitespace() {
            if let Some(a) = tok.strip_prefix("adjust=") {
                if adjust.is_some() {
                    return Err(fail("adjust= given twice".into()));
                }
                adjust = Some(price_adjustment(a).map_err(fail)?);
                continue;
            }
            for pair in tok.split(',').filter(|p| !p.is_empty()) {
                let Some((key, val)) = pair.split_once('=') else {
                    return Err(fail(format!("{pair:?} is not <key>=<value>")));
                };
                let r = Requirement::from_parts(key, Operator::In, vec![val.to_string()])
                    .map_err(|e| fail(e.to_string()))?;
                reqs.add(r);
                pairs += 1;
            }
        }
        if pairs == 0 {
            return Err(fail("no <key>=<value> pairs".into()));
        }
        let Some(adjust) = adjust else {
            return Err(fail("missing adjust=<price adjustment>".into()));
        };
        let r = Requirement::from_parts(name_key, Operator::In, vec![pool.to_string()])
            .map_err(|e| fail(e.to_string()))?;
        reqs.add(r);
        out.push(NodeOverlay {
            name: format!("{pool}/preference.{weight}"),
            weight,
            requirements: reqs,
            price_adjustment: Some(adjust),
            price: None,
            capacity: Default::default(),
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OverlaySpec {
    #[serde(default)]
    requirements: Vec<ReqDoc>,
    #[serde(default)]
    weight: Option<i32>,
    #[serde(default)]
    price_adjustment: Option<KQuantity>,
    #[serde(default)]
    price: Option<KQuantity>,
    #[serde(default)]
    capacity: Option<BTreeMap<String, KQuantity>>,
}

/// A NodeOverlay (karpenter.sh/v1alpha1).
pub(crate) fn node_overlay(ctx: &Ctx, d: &Doc) -> Result<NodeOverlay, InputError> {
    let (m, spec): (meta::ObjectMeta, OverlaySpec) = object(ctx, d, "NodeOverlay")?;
    let mut requirements = Requirements::new();
    for (i, r) in spec.requirements.iter().enumerate() {
        let p = format!("spec.requirements[{i}]");
        requirements.add(requirement(
            ctx,
            &p,
            &r.key,
            &r.operator,
            r.values.clone().unwrap_or_default(),
        )?);
    }
    if spec.price.is_some() && spec.price_adjustment.is_some() {
        return Err(ctx.err(
            "spec.price",
            "price and priceAdjustment are mutually exclusive",
        ));
    }
    let price_adjustment = spec
        .price_adjustment
        .as_ref()
        .map(|p| price_adjustment(&p.0).map_err(|e| ctx.err("spec.priceAdjustment", e)))
        .transpose()?;
    let price = spec
        .price
        .as_ref()
        .map(|p| price(&p.0).map_err(|e| ctx.err("spec.price", e)))
        .transpose()?;
    Ok(NodeOverlay {
        name: m.name.unwrap_or_default(),
        weight: match spec.weight {
            None => 0,
            Some(w) if w >= 0 => w,
            Some(w) => {
                return Err(ctx.err(
                    "spec.weight",
                    format!("weight must not be negative, got {w}"),
                ))
            }
        },
        requirements,
        price_adjustment,
        price,
        capacity: resources(ctx, "spec.capacity", spec.capacity.as_ref())?,
    })
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NodeClassSpec {
    #[serde(default)]
    ami_family: Option<String>,
    #[serde(default)]
    ami_selector_terms: Option<Vec<AmiTerm>>,
    #[serde(default)]
    block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// v1 location of the kubelet configuration.
    #[serde(default)]
    kubelet: Option<KubeletDoc>,
}

#[derive(Deserialize)]
struct AmiTerm {
    #[serde(default)]
    alias: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDeviceMapping {
    #[serde(default)]
    device_name: Option<String>,
    #[serde(default)]
    root_volume: Option<bool>,
    #[serde(default)]
    ebs: Option<Ebs>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ebs {
    /// A quantity (`100Gi`) or a number of GiB, as the launch stage reads it.
    #[serde(default)]
    volume_size: Option<Value>,
    #[serde(default)]
    volume_type: Option<String>,
    #[serde(default)]
    iops: Option<i64>,
    #[serde(default)]
    throughput: Option<i64>,
}

/// `volumeSize`: a quantity string, or a positive number of GiB; the size
/// (the quantity) and the GiB it is billed for (rounded up, saturating).
fn volume_size(ctx: &Ctx, path: &str, v: &Value) -> Result<(Quantity, u64), InputError> {
    const GIB: i64 = 1 << 30;
    let q = match v {
        Value::String(s) => quantity(ctx, path, s)?,
        Value::Number(n) => match n.as_u64().filter(|g| *g > 0) {
            Some(g) => Quantity::from_millis(
                i64::try_from(g)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(GIB)
                    .saturating_mul(1000),
            ),
            None => return Err(ctx.err(path, format!("{n} is not a positive number of GiB"))),
        },
        other => return Err(ctx.err(path, format!("{other} is not a quantity"))),
    };
    let bytes = q.millis().div_euclid(1000);
    if bytes <= 0 {
        return Err(ctx.err(path, "must be positive"));
    }
    let gib = bytes
        .div_euclid(GIB)
        .saturating_add(i64::from(bytes % GIB != 0));
    Ok((q, u64::try_from(gib).unwrap_or(u64::MAX)))
}

/// The EBS volumes of `blockDeviceMappings`, validated (type, size, IOPS,
/// throughput); a mapping without `ebs` has no volume to price.
fn volumes(ctx: &Ctx, bdms: &[BlockDeviceMapping]) -> Result<Vec<EbsVolume>, InputError> {
    let mut out = Vec::new();
    for (i, b) in bdms.iter().enumerate() {
        let Some(e) = &b.ebs else { continue };
        let f = |k: &str| format!("spec.blockDeviceMappings[{i}].ebs.{k}");
        let volume_type = match e.volume_type.as_deref() {
            None => VolumeType::Gp3,
            Some(t) => VolumeType::parse(t).ok_or_else(|| {
                ctx.err(
                    &f("volumeType"),
                    format!(
                        "unknown volume type {t:?} (expected one of {})",
                        VolumeType::NAMES.join(", ")
                    ),
                )
            })?,
        };
        let size_gib = match &e.volume_size {
            None => ebs::DEFAULT_VOLUME_GIB,
            Some(v) => volume_size(ctx, &f("volumeSize"), v)?.1,
        };
        let count = |k: &str, v: Option<i64>| -> Result<Option<u64>, InputError> {
            v.map(|n| u64::try_from(n).map_err(|_| ctx.err(&f(k), format!("{n} is negative"))))
                .transpose()
        };
        out.push(EbsVolume {
            device_name: b.device_name.clone().unwrap_or_default(),
            size_gib,
            volume_type,
            iops: count("iops", e.iops)?,
            throughput: count("throughput", e.throughput)?,
        });
    }
    Ok(out)
}

/// The part of an EC2NodeClass's `status` the drift checks read.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NodeClassStatusDoc {
    #[serde(default)]
    amis: Option<Vec<StatusAmi>>,
    #[serde(default)]
    subnets: Option<Vec<StatusId>>,
    #[serde(default)]
    security_groups: Option<Vec<StatusId>>,
}

#[derive(Deserialize)]
struct StatusAmi {
    id: String,
    #[serde(default)]
    requirements: Option<Vec<StatusReq>>,
}

#[derive(Deserialize)]
struct StatusReq {
    key: String,
    operator: String,
    #[serde(default)]
    values: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct StatusId {
    id: String,
}

/// `status.amis`, `status.subnets` and `status.securityGroups` (what the
/// selector terms resolved to), for the drift checks; absent: unknown.
fn node_class_status(ctx: &Ctx, doc: &Value) -> Result<NodeClassStatus, InputError> {
    let Some(v) = doc.get("status").filter(|v| !v.is_null()) else {
        return Ok(NodeClassStatus::default());
    };
    let s: NodeClassStatusDoc = ctx.de(v, "status")?;
    let ids = |field: &str, list: Option<Vec<StatusId>>| -> Result<Vec<String>, InputError> {
        let mut out = Vec::new();
        for (i, x) in list.into_iter().flatten().enumerate() {
            if x.id.is_empty() {
                return Err(ctx.err(&format!("status.{field}[{i}].id"), "must not be empty"));
            }
            out.push(x.id);
        }
        Ok(out)
    };
    let mut amis = Vec::new();
    for (i, a) in s.amis.into_iter().flatten().enumerate() {
        if a.id.is_empty() {
            return Err(ctx.err(&format!("status.amis[{i}].id"), "must not be empty"));
        }
        let mut requirements = Requirements::new();
        for (j, r) in a.requirements.into_iter().flatten().enumerate() {
            let path = format!("status.amis[{i}].requirements[{j}]");
            let values = r.values.unwrap_or_default();
            requirements.add(requirement(ctx, &path, &r.key, &r.operator, values)?);
        }
        amis.push(NodeClassAmi {
            id: a.id,
            requirements,
        });
    }
    Ok(NodeClassStatus {
        amis,
        subnets: ids("subnets", s.subnets)?,
        security_groups: ids("securityGroups", s.security_groups)?,
    })
}

fn ami_family(s: &str) -> Option<AmiFamily> {
    Some(match s.to_ascii_lowercase().as_str() {
        "al2023" => AmiFamily::AL2023,
        "al2" => AmiFamily::AL2,
        "bottlerocket" => AmiFamily::Bottlerocket,
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        "custom" => AmiFamily::Custom,
        _ => return None,
    })
}

/// An EC2NodeClass (v1, v1beta1) or AWSNodeTemplate (v1alpha1), with its
/// `spec.kubelet` (the v1 home of the kubelet configuration), if any.
///
/// The AMI family comes from an `amiSelectorTerms` alias (`al2023@latest`),
/// else `amiFamily`, else AL2023 (EC2NodeClass) / AL2 (AWSNodeTemplate).
/// The root volume is the block device mapping with `rootVolume: true`, else
/// the family's root device (`/dev/xvdb` for Bottlerocket, `/dev/sda1` for
/// Windows, `/dev/xvda` otherwise).
pub(crate) fn node_class(
    ctx: &Ctx,
    d: &Doc,
    warnings: &mut Vec<String>,
) -> Result<(NodeClass, Option<KubeletConfig>), InputError> {
    let kind = d.kind().to_string();
    let o: Object<NodeClassSpec> = ctx.de(&d.value, "")?;
    let name = match o.metadata.name {
        Some(n) if !n.is_empty() => n,
        _ => return Err(ctx.err("metadata.name", format!("an {kind} needs a name"))),
    };
    let spec = o.spec.unwrap_or_default();
    let mut family = match spec.ami_family.as_deref() {
        None => None,
        Some("Ubuntu") => {
            warnings.push(format!("{}: amiFamily Ubuntu is treated as Custom", ctx.here()));
            Some(AmiFamily::Custom)
        }
        Some(f) => Some(ami_family(f).ok_or_else(|| {
            ctx.err(
                "spec.amiFamily",
                format!("unknown amiFamily {f:?} (expected AL2023, AL2, Bottlerocket, Windows2019, Windows2022 or Custom)"),
            )
        })?),
    };
    for (i, t) in spec.ami_selector_terms.iter().flatten().enumerate() {
        let Some(alias) = &t.alias else { continue };
        let p = format!("spec.amiSelectorTerms[{i}].alias");
        let fam = alias.split('@').next().unwrap_or_default();
        let f = ami_family(fam)
            .filter(|f| *f != AmiFamily::Custom)
            .ok_or_else(|| ctx.err(&p, format!("unknown AMI alias {alias:?} (expected e.g. al2023@latest or bottlerocket@latest)")))?;
        if let Some(prev) = &family {
            if spec.ami_family.is_some() && *prev != f {
                return Err(ctx.err(
                    &p,
                    format!(
                        "alias {alias:?} conflicts with amiFamily {:?}",
                        spec.ami_family.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
        family = Some(f);
    }
    let family = family.unwrap_or(if kind == "AWSNodeTemplate" {
        AmiFamily::AL2
    } else {
        AmiFamily::AL2023
    });
    let root_device = match family {
        AmiFamily::Bottlerocket => "/dev/xvdb",
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => "/dev/sda1",
        _ => "/dev/xvda",
    };
    let bdms = spec.block_device_mappings.as_deref().unwrap_or_default();
    let root = bdms
        .iter()
        .position(|b| b.root_volume == Some(true))
        .or_else(|| {
            bdms.iter()
                .position(|b| b.device_name.as_deref() == Some(root_device))
        });
    let root_volume_size = match root {
        None => None,
        Some(i) => match bdms[i].ebs.as_ref().and_then(|e| e.volume_size.as_ref()) {
            None => None,
            Some(v) => Some(
                volume_size(
                    ctx,
                    &format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
                    v,
                )?
                .0,
            ),
        },
    };
    // No mappings (or `[]`): the AMI's own volumes, priced as the family's
    // defaults.
    let volumes = match bdms {
        [] => None,
        b => Some(volumes(ctx, b)?),
    };
    let kubelet_config = match &spec.kubelet {
        None => None,
        Some(k) => Some(kubelet(ctx, "spec.kubelet", Some(k))?),
    };
    let template_hash = hash::nodeclass_hash(d.value.get("spec").unwrap_or(&Value::Null), &family);
    let status = node_class_status(ctx, &d.value)?;
    let nc = NodeClass {
        status,
        name,
        kind,
        ami_family: family,
        root_volume_size,
        volumes,
        template_hash: Some(template_hash),
        spec: d.value.get("spec").cloned().unwrap_or(Value::Null),
    };
    // `capacityReservationSelectorTerms` are read strictly, like the rest
    // of the Karpenter objects (the scheduler re-reads them from `spec`).
    flotilla_core::reservations::selector_terms(&nc).map_err(|e| ctx.err(&e.path, e.message))?;
    Ok((nc, kubelet_config))
}
