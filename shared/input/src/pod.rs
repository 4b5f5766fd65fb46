//! Pod specs to scheduler pods: effective requests, node selectors and
//! affinity, tolerations, topology spread, pod (anti-)affinity, volumes.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::labels::{self, HOSTNAME};
use flotilla_core::model::{
    ClusterState, InclusionPolicy, LabelSelector, PersistentVolumeClaim, Pod, PodAffinityTerm,
    PodTemplate, PreferredNodeTerm, Toleration, TolerationOperator, TopologySpreadConstraint,
    WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use flotilla_core::requirements::{Operator, Requirement, Requirements};
use flotilla_core::resources::{self, Resources};
use flotilla_core::Quantity;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use crate::util::{check_labels, indexed, join, quantity, taint_effect, Ctx};
use crate::workload::Env;
use crate::{Doc, InputError};
use flotilla_core::state::PodRow;
use serde_json::Value;

/// A `kind: Pod` document. `None` for finished pods (Succeeded / Failed),
/// which hold no resources, and for pending DaemonSet pods (kept in
/// `daemon_pods`: their requests stand for their DaemonSet's).
pub(crate) fn pod_object(
    ctx: &Ctx,
    d: &Doc,
    env: &Env,
    state: &mut ClusterState,
    daemon_pods: &mut Vec<Pod>,
) -> Result<Option<Pod>, InputError> {
    let p: core::Pod = ctx.de(&d.value, "")?;
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded") | Some("Failed")) {
        return Ok(None);
    }
    let Some(spec) = p.spec.as_ref() else {
        return Err(ctx.err("spec", "a Pod needs a spec"));
    };
    let ns = p
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = p.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(ctx.err("metadata.name", "a Pod needs a name"));
    }
    let mut pod = convert(
        ctx,
        &ns,
        Some(&p.metadata),
        "metadata",
        spec,
        "spec",
        env,
        &mut state.warnings,
    )?;
    pod.node_name = spec.node_name.clone().filter(|n| !n.is_empty());
    // Disruption's notion of the pod's last change: the later of its
    // creation and its start.
    let created = p
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let started = p
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.as_second());
    pod.created_at = created.max(started);
    pod.terminating = p.metadata.deletion_timestamp.is_some();
    if pod.owner.is_none() {
        pod.owner = p
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| {
                o.iter()
                    .find(|r| r.controller == Some(true))
                    .or_else(|| o.first())
            })
            .map(|r| format!("{}/{ns}/{}", r.kind, r.name));
    }
    if pod.node_name.is_none()
        && pod
            .owner
            .as_deref()
            .is_some_and(|o| o.starts_with("DaemonSet/"))
    {
        // Karpenter does not provision for DaemonSet pods; their overhead
        // comes from the DaemonSet itself.
        tracing::debug!("skipping pending DaemonSet pod {ns}/{name}");
        pod.name = name;
        daemon_pods.push(pod);
        return Ok(None);
    }
    if pod.node_name.is_none()
        && spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty())
    {
        state.warnings.push(format!(
            "{}: skipping pod with scheduling gates (not schedulable until they are removed)",
            ctx.here()
        ));
        return Ok(None);
    }
    name_pod(&mut pod, &name, spec, &mut state.pvcs, env.existing_pvcs);
    Ok(Some(pod))
}

/// Sets the pod's name and adds the PVCs of its generic ephemeral volumes
/// (`<pod>-<volume>`) unless the inputs already hold them.
pub(crate) fn name_pod(
    pod: &mut Pod,
    name: &str,
    spec: &core::PodSpec,
    pvcs: &mut Vec<PersistentVolumeClaim>,
    existing: &BTreeSet<(String, String)>,
) {
    pod.name = name.to_string();
    for v in spec.volumes.iter().flatten() {
        if let Some(e) = &v.ephemeral {
            let claim = format!("{name}-{}", v.name);
            let storage_class = e
                .volume_claim_template
                .as_ref()
                .and_then(|t| t.spec.storage_class_name.clone());
            if !existing.contains(&(pod.namespace.clone(), claim.clone())) {
                pvcs.push(PersistentVolumeClaim {
                    namespace: pod.namespace.clone(),
                    name: claim.clone(),
                    storage_class,
                    volume_name: None,
                    deleting: false,
                    lost: false,
                });
            }
            pod.pvc_names.push(claim);
        }
    }
}

/// Converts a pod spec (and its metadata) to a pod without a name.
#[allow(clippy::too_many_arguments)]
pub(crate) fn convert(
    ctx: &Ctx,
    namespace: &str,
    metadata: Option<&meta::ObjectMeta>,
    meta_path: &str,
    spec: &core::PodSpec,
    spec_path: &str,
    env: &Env,
    warnings: &mut Vec<String>,
) -> Result<Pod, InputError> {
    let labels = metadata.and_then(|m| m.labels.clone()).unwrap_or_default();
    check_labels(ctx, &join(meta_path, "labels"), &labels, true)?;
    let annotations = metadata
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();

    let mut pod = Pod::from(PodTemplate {
        namespace: namespace.to_string(),
        requests: requests(ctx, spec_path, spec)?,
        ..PodTemplate::default()
    });

    for (k, v) in spec.node_selector.iter().flatten() {
        let r = Requirement::from_parts(k, Operator::In, vec![v.clone()])
            .map_err(|e| ctx.err(&join(&join(spec_path, "nodeSelector"), k), e))?;
        pod.node_selector.add(r);
    }

    let aff = spec.affinity.as_ref();
    let ap = join(spec_path, "affinity");
    if let Some(na) = aff.and_then(|a| a.node_affinity.as_ref()) {
        let np = join(&ap, "nodeAffinity");
        if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
            let tp = join(
                &np,
                "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            );
            for (i, t) in req.node_selector_terms.iter().enumerate() {
                pod.required_terms
                    .push(node_selector_term(ctx, &indexed(&tp, i), t)?);
            }
        }
        let pp = join(&np, "preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let p = indexed(&pp, i);
            if !(1..=100).contains(&t.weight) {
                return Err(ctx.err(
                    &join(&p, "weight"),
                    format!("weight {} is not in 1..100", t.weight),
                ));
            }
            pod.preferred_terms.push(PreferredNodeTerm {
                weight: t.weight,
                requirements: node_selector_term(ctx, &join(&p, "preference"), &t.preference)?,
            });
        }
    }

    let here = ctx.here();
    for (which, terms) in [
        (
            "podAffinity",
            aff.and_then(|a| a.pod_affinity.as_ref()).map(|a| {
                (
                    &a.required_during_scheduling_ignored_during_execution,
                    &a.preferred_during_scheduling_ignored_during_execution,
                )
            }),
        ),
        (
            "podAntiAffinity",
            aff.and_then(|a| a.pod_anti_affinity.as_ref()).map(|a| {
                (
                    &a.required_during_scheduling_ignored_during_execution,
                    &a.preferred_during_scheduling_ignored_during_execution,
                )
            }),
        ),
    ] {
        let Some((req, pref)) = terms else { continue };
        let wp = join(&ap, which);
        let mut required = Vec::new();
        let rp = join(&wp, "requiredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in req.iter().flatten().enumerate() {
            required.push(affinity_term(
                ctx,
                &indexed(&rp, i),
                t,
                &labels,
                (&here, env.namespaces),
                warnings,
            )?);
        }
        let mut preferred = Vec::new();
        let pp = join(&wp, "preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in pref.iter().flatten().enumerate() {
            let p = indexed(&pp, i);
            if !(1..=100).contains(&t.weight) {
                return Err(ctx.err(
                    &join(&p, "weight"),
                    format!("weight {} is not in 1..100", t.weight),
                ));
            }
            preferred.push(WeightedPodAffinityTerm {
                weight: t.weight,
                term: affinity_term(
                    ctx,
                    &join(&p, "podAffinityTerm"),
                    &t.pod_affinity_term,
                    &labels,
                    (&here, env.namespaces),
                    warnings,
                )?,
            });
        }
        if which == "podAffinity" {
            pod.pod_affinity = required;
            pod.preferred_pod_affinity = preferred;
        } else {
            pod.pod_anti_affinity = required;
            pod.preferred_pod_anti_affinity = preferred;
        }
    }

    let tp = join(spec_path, "tolerations");
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        pod.tolerations.push(toleration(ctx, &indexed(&tp, i), t)?);
    }

    let sp = join(spec_path, "topologySpreadConstraints");
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        // Without a selector no pod is counted: the constraint is a no-op.
        if c.label_selector.is_none() {
            continue;
        }
        pod.topology_spread
            .push(spread(ctx, &indexed(&sp, i), c, &labels)?);
    }

    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.persistent_volume_claim {
            pod.pvc_names.push(c.claim_name.clone());
        }
    }

    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            if let Some(hp) = p.host_port.filter(|hp| *hp > 0) {
                pod.host_ports
                    .push((p.protocol.clone().unwrap_or_else(|| "TCP".into()), hp));
            }
        }
    }

    pod.priority = match (spec.priority, spec.priority_class_name.as_deref()) {
        (Some(p), _) => p,
        (None, Some(c)) if !c.is_empty() => match env.priority_classes.get(c) {
            Some(v) => *v,
            None if c == "system-node-critical" => 2_000_001_000,
            None if c == "system-cluster-critical" => 2_000_000_000,
            None => {
                warnings.push(format!(
                    "{here}: priority class {c:?} is not in the inputs; assuming priority 0"
                ));
                0
            }
        },
        _ => env.default_priority,
    };
    pod.labels = labels;
    pod.annotations = annotations;
    Ok(pod)
}

/// One container's requests; a resource with a limit but no request is
/// requested at its limit (as the API server defaults it).
fn container_requests(ctx: &Ctx, path: &str, c: &core::Container) -> Result<Resources, InputError> {
    let mut r = Resources::new();
    let Some(res) = &c.resources else {
        return Ok(r);
    };
    let rp = join(path, "resources.requests");
    for (k, q) in res.requests.iter().flatten() {
        r.set(k, quantity(ctx, &join(&rp, k), &q.0)?);
    }
    let lp = join(path, "resources.limits");
    for (k, q) in res.limits.iter().flatten() {
        let lim = quantity(ctx, &join(&lp, k), &q.0)?;
        if res.requests.as_ref().is_none_or(|m| !m.contains_key(k)) {
            r.set(k, lim);
        }
    }
    Ok(r)
}

/// Effective pod requests, as the kube-scheduler computes them:
/// `max(init peak, app containers + sidecars) + overhead`, where the init
/// peak is the largest of each regular init container plus the restartable
/// (sidecar) init containers started before it, and each sidecar start.
/// Pod-level `spec.resources.requests` replace the per-container sum for the
/// resources they name. `pods` is 1.
fn requests(ctx: &Ctx, spec_path: &str, spec: &core::PodSpec) -> Result<Resources, InputError> {
    let mut app = Resources::new();
    let cp = join(spec_path, "containers");
    for (i, c) in spec.containers.iter().enumerate() {
        app.add_assign(&container_requests(ctx, &indexed(&cp, i), c)?);
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    let ip = join(spec_path, "initContainers");
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let r = container_requests(ctx, &indexed(&ip, i), c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add_assign(&r);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&r.plus(&sidecars));
        }
    }
    let mut total = app.plus(&sidecars).max(&init_peak);
    if let Some(pr) = spec.resources.as_ref() {
        let mut pod_level = BTreeMap::new();
        let rp = join(spec_path, "resources.requests");
        for (k, q) in pr.requests.iter().flatten() {
            pod_level.insert(k.clone(), quantity(ctx, &join(&rp, k), &q.0)?);
        }
        let lp = join(spec_path, "resources.limits");
        for (k, q) in pr.limits.iter().flatten() {
            let lim = quantity(ctx, &join(&lp, k), &q.0)?;
            pod_level.entry(k.clone()).or_insert(lim);
        }
        for (k, q) in pod_level {
            total.set(&k, q);
        }
    }
    let op = join(spec_path, "overhead");
    for (k, q) in spec.overhead.iter().flatten() {
        let o = quantity(ctx, &join(&op, k), &q.0)?;
        total.set(k, total.get(k) + o);
    }
    total.set(resources::PODS, Quantity::from_units(1));
    Ok(total)
}

/// A node selector term (matchExpressions AND matchFields).
pub(crate) fn node_selector_term(
    ctx: &Ctx,
    path: &str,
    t: &core::NodeSelectorTerm,
) -> Result<Requirements, InputError> {
    let mut reqs = Requirements::new();
    let ep = join(path, "matchExpressions");
    for (i, e) in t.match_expressions.iter().flatten().enumerate() {
        let p = indexed(&ep, i);
        reqs.add(requirement(
            ctx,
            &p,
            &e.key,
            &e.operator,
            e.values.clone().unwrap_or_default(),
        )?);
    }
    let fp = join(path, "matchFields");
    for (i, e) in t.match_fields.iter().flatten().enumerate() {
        let p = indexed(&fp, i);
        if e.key != "metadata.name" {
            return Err(ctx.err(
                &join(&p, "key"),
                format!(
                    "unsupported field selector key {:?} (only metadata.name)",
                    e.key
                ),
            ));
        }
        reqs.add(requirement(
            ctx,
            &p,
            HOSTNAME,
            &e.operator,
            e.values.clone().unwrap_or_default(),
        )?);
    }
    Ok(reqs)
}

/// One `{key, operator, values}` requirement of a pod, validated (the
/// operators Kubernetes takes).
pub(crate) fn requirement(
    ctx: &Ctx,
    path: &str,
    key: &str,
    op: &str,
    values: Vec<String>,
) -> Result<Requirement, InputError> {
    parse_requirement(ctx, path, key, op, values, false)
}

/// A karpenter.sh requirement: the pod operators plus `Gte` and `Lte`.
pub(crate) fn karpenter_requirement(
    ctx: &Ctx,
    path: &str,
    key: &str,
    op: &str,
    values: Vec<String>,
) -> Result<Requirement, InputError> {
    parse_requirement(ctx, path, key, op, values, true)
}

fn parse_requirement(
    ctx: &Ctx,
    path: &str,
    key: &str,
    op: &str,
    values: Vec<String>,
    karpenter: bool,
) -> Result<Requirement, InputError> {
    let expected = if karpenter {
        "In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte"
    } else {
        "In, NotIn, Exists, DoesNotExist, Gt or Lt"
    };
    let o = Operator::parse(op)
        .filter(|o| karpenter || !matches!(o, Operator::Gte | Operator::Lte))
        .ok_or_else(|| {
            ctx.err(
                &join(path, "operator"),
                format!("unknown operator {op:?} (expected {expected})"),
            )
        })?;
    Requirement::from_parts(key, o, values).map_err(|e| ctx.err(path, e))
}

fn toleration(ctx: &Ctx, path: &str, t: &core::Toleration) -> Result<Toleration, InputError> {
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(o) => {
            return Err(ctx.err(
                &join(path, "operator"),
                format!("unknown toleration operator {o:?} (expected Equal or Exists)"),
            ))
        }
    };
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(taint_effect(ctx, &join(path, "effect"), e)?),
    };
    Ok(Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

/// A metav1 label selector; a missing one is empty (matches everything).
pub(crate) fn label_selector(
    ctx: &Ctx,
    path: &str,
    s: Option<&meta::LabelSelector>,
) -> Result<LabelSelector, InputError> {
    let mut out = LabelSelector::default();
    let Some(s) = s else { return Ok(out) };
    out.match_labels = s.match_labels.clone().unwrap_or_default();
    let ep = join(path, "matchExpressions");
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let p = indexed(&ep, i);
        let op = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            o => {
                return Err(ctx.err(
                    &join(&p, "operator"),
                    format!(
                    "unknown selector operator {o:?} (expected In, NotIn, Exists or DoesNotExist)"
                ),
                ))
            }
        };
        let values = e.values.clone().unwrap_or_default();
        if matches!(op, Operator::In | Operator::NotIn) && values.is_empty() {
            return Err(ctx.err(
                &join(&p, "values"),
                format!("operator {} needs values", e.operator),
            ));
        }
        out.match_expressions.push((e.key.clone(), op, values));
    }
    Ok(out)
}

fn spread(
    ctx: &Ctx,
    path: &str,
    c: &core::TopologySpreadConstraint,
    pod_labels: &BTreeMap<String, String>,
) -> Result<TopologySpreadConstraint, InputError> {
    if c.max_skew <= 0 {
        return Err(ctx.err(
            &join(path, "maxSkew"),
            format!("maxSkew must be positive, got {}", c.max_skew),
        ));
    }
    labels::validate_key(&c.topology_key).map_err(|e| ctx.err(&join(path, "topologyKey"), e))?;
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
        "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
        o => {
            return Err(ctx.err(
                &join(path, "whenUnsatisfiable"),
                format!("unknown value {o:?} (expected DoNotSchedule or ScheduleAnyway)"),
            ))
        }
    };
    let min_domains = match c.min_domains {
        None => None,
        Some(n) if n > 0 => Some(n as u32),
        Some(n) => {
            return Err(ctx.err(
                &join(path, "minDomains"),
                format!("minDomains must be positive, got {n}"),
            ))
        }
    };
    let policy = |field: &str, v: Option<&str>, default| match v {
        None | Some("") => Ok(default),
        Some("Honor") => Ok(InclusionPolicy::Honor),
        Some("Ignore") => Ok(InclusionPolicy::Ignore),
        Some(o) => Err(ctx.err(
            &join(path, field),
            format!("unknown policy {o:?} (expected Honor or Ignore)"),
        )),
    };
    let mut label_selector =
        label_selector(ctx, &join(path, "labelSelector"), c.label_selector.as_ref())?;
    for k in c.match_label_keys.iter().flatten() {
        if let Some(v) = pod_labels.get(k) {
            label_selector.match_labels.insert(k.clone(), v.clone());
        }
    }
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew as u32,
        topology_key: labels::normalize_key(&c.topology_key).to_string(),
        when_unsatisfiable,
        label_selector,
        min_domains,
        node_affinity_policy: policy(
            "nodeAffinityPolicy",
            c.node_affinity_policy.as_deref(),
            InclusionPolicy::Honor,
        )?,
        node_taints_policy: policy(
            "nodeTaintsPolicy",
            c.node_taints_policy.as_deref(),
            InclusionPolicy::Ignore,
        )?,
    })
}

fn affinity_term(
    ctx: &Ctx,
    path: &str,
    t: &core::PodAffinityTerm,
    pod_labels: &BTreeMap<String, String>,
    (here, known): (&str, &BTreeMap<String, BTreeMap<String, String>>),
    warnings: &mut Vec<String>,
) -> Result<PodAffinityTerm, InputError> {
    if t.topology_key.is_empty() {
        return Err(ctx.err(&join(path, "topologyKey"), "topologyKey must not be empty"));
    }
    labels::validate_key(&t.topology_key).map_err(|e| ctx.err(&join(path, "topologyKey"), e))?;
    // A term without a selector selects no pods.
    let mut label_selector = match t.label_selector.as_ref() {
        Some(sel) => label_selector(ctx, &join(path, "labelSelector"), Some(sel))?,
        None => LabelSelector {
            match_expressions: vec![("flotilla.io/no-selector".into(), Operator::In, Vec::new())],
            ..LabelSelector::default()
        },
    };
    for k in t.match_label_keys.iter().flatten() {
        if let Some(v) = pod_labels.get(k) {
            label_selector.match_labels.insert(k.clone(), v.clone());
        }
    }
    for k in t.mismatch_label_keys.iter().flatten() {
        if let Some(v) = pod_labels.get(k) {
            label_selector
                .match_expressions
                .push((k.clone(), Operator::NotIn, vec![v.clone()]));
        }
    }
    let mut all_namespaces = false;
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if let Some(ns) = &t.namespace_selector {
        let empty = ns.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && ns.match_expressions.as_ref().is_none_or(Vec::is_empty);
        if empty {
            all_namespaces = true;
        } else if known.is_empty() {
            warnings.push(format!(
                "{here}: {path}.namespaceSelector selects namespaces by label and the inputs hold no Namespace objects; using the listed namespaces (or the pod's own)"
            ));
        } else {
            // The listed namespaces and those the selector matches; none at
            // all selects no pod (no namespace is named "").
            let sel = self::label_selector(ctx, &join(path, "namespaceSelector"), Some(ns))?;
            namespaces.extend(
                known
                    .iter()
                    .filter(|(_, l)| sel.matches(l))
                    .map(|(n, _)| n.clone()),
            );
            namespaces.sort();
            namespaces.dedup();
            if namespaces.is_empty() {
                namespaces.push(String::new());
            }
        }
    }
    Ok(PodAffinityTerm {
        label_selector,
        namespaces,
        all_namespaces,
        topology_key: labels::normalize_key(&t.topology_key).to_string(),
    })
}

/// Whether bound pods of `template` may be read once for all: nothing in
/// the pod depends on its name but the name (ephemeral volumes name a
/// claim after the pod).
pub(crate) fn shareable(template: &Value) -> bool {
    !template
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .is_some_and(|vs| vs.iter().any(|v| v.get("ephemeral").is_some()))
}

/// The bound pods of `rows` over their shared `template`: the first row's
/// document is read as any pod is, and each row gets a copy with its own
/// name, node and times, appended to `out`.
pub(crate) fn templated_pods(
    template: &Value,
    rows: Vec<PodRow>,
    env: &Env,
    state: &mut ClusterState,
    out: &mut Vec<Pod>,
) -> Result<(), InputError> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let doc = Doc {
        file: "state",
        index: 1,
        prefix: String::new(),
        value: first.expand(template),
    };
    let ctx = Ctx::for_doc(&doc);
    // Bound pods only: a pending DaemonSet pod never comes here.
    let mut daemon_pods = Vec::new();
    let Some(model) = pod_object(&ctx, &doc, env, state, &mut daemon_pods)? else {
        return Ok(());
    };
    out.reserve(rows.len());
    for row in rows {
        let mut p = model.clone();
        let time = |v: &Option<Value>, field: &str| -> Result<Option<i64>, InputError> {
            v.as_ref()
                .map(|v| {
                    <meta::Time as serde::Deserialize>::deserialize(v)
                        .map(|t| t.0.as_second())
                        .map_err(|e| ctx.err(field, format!("pod {}: {e}", row.name)))
                })
                .transpose()
        };
        p.created_at = time(&row.created, "metadata.creationTimestamp")?
            .max(time(&row.started, "status.startTime")?);
        p.terminating = row.deleting.is_some();
        p.name = row.name;
        p.node_name = row.node;
        out.push(p);
    }
    Ok(())
}
