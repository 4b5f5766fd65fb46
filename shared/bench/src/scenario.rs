//! Exports a scheduling problem as a self-contained bin-packing LP input,
//! for `shared/bench/bound.py` to compute a proven lower bound on the hourly
//! price of any plan (and exact optima of small instances).
//!
//! The export is a *relaxation* of what the scheduler must satisfy, so
//! whatever the solver finds is a valid lower bound:
//!
//! - `types`: one entry per (NodePool, instance type) the NodePool may launch
//!   (same filtering as the scheduler: type requirements intersect the
//!   NodePool's, offerings allowed by its zone / capacity-type requirements,
//!   reserved offerings off), with usable capacity = allocatable under the
//!   NodePool's kubelet config minus its daemonset overhead, and the price of
//!   the cheapest allowed offering. Existing schedulable nodes follow as
//!   free types (`price` 0, `maxCount` 1) with their remaining room.
//! - `classes`: pending pods grouped by identical requests and identical
//!   sets of usable types, with their count. A pod may use a type if some
//!   required node-affinity term (OR semantics, as the scheduler falls back
//!   through them) plus its node selector is compatible with the type and
//!   NodePool, it tolerates the NodePool's taints, and its requests fit.
//!   Topology spread, pod affinity, volumes, host ports, NodePool limits and
//!   NodeOverlays are ignored (a relaxation). Self hostname anti-affinity is
//!   kept as `maxPerNode: 1` (each such class is one anti-affinity group).
//!
//! For the exact ILP of small scenarios, NodePool weights and limits are
//! described too: `pools` lists every NodePool (heaviest first, then by
//! name) with its `weight` and `limits` (export units, null when none);
//! each type carries its `poolIndex` and, for a NodePool with limits, its
//! `limitCapacity` (capacity in the limited resources, as limits charge it).
//!
//! For the exact ILP of small scenarios, topology spread is described as
//! well (the LP bound ignores it): `zones` lists the zones NodePools can
//! launch in plus existing nodes' zones (the scheduler's domains for
//! `topology.kubernetes.io/zone`); each type carries `zonePrices`, the
//! cheapest allowed offering per zone (`price` stays the minimum over them);
//! `spreadGroups` lists the spread constraints of pending pods, one per
//! distinct (namespace, label selector, topology key, maxSkew, minDomains,
//! nodeAffinityPolicy, whenUnsatisfiable), with the matching pods already
//! bound per zone (`existing`); each class lists the constraints it carries
//! (`spread`: group, topologyKey, maxSkew, whenUnsatisfiable, minDomains and
//! `eligibleZones`, the zones its node requirements allow when
//! nodeAffinityPolicy is Honor, else all of `zones`; null when its
//! alternative node-affinity terms allow different zones) and the groups
//! whose selector counts its pods (`spreadCounted`).
//!
//! Beside a plan (`export_beside`, for `spreadHonouredLpBound`), a class
//! also carries `honouredTypes` when the preferences the plan holds for its
//! pods narrow its types: each preferred node-affinity term its NodeClaim
//! satisfies (every zone, capacity type and instance type of it) keeps the
//! types compatible with the term, and a NodeClaim of the heaviest NodePool
//! the pods may use keeps that weight's types (Karpenter holds preferences
//! while it can and tries NodePools heaviest first). Pods the plan treats
//! differently are classes apart. Preferred pod affinity is not modelled.
//!
//! Units: `cpu` in millicores, `memory` (and `ephemeral-storage`,
//! `hugepages-*`) in MiB, everything else in whole units. Requests are
//! rounded down and capacities up, so rounding never tightens the bound.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::allocatable;
use flotilla_core::catalog::{ebs, CapacityType, Catalog, Offering};
use flotilla_core::labels;
use flotilla_core::model::{
    untolerated, ClusterState, InclusionPolicy, NodePool, Pod, TopologySpreadConstraint,
    WhenUnsatisfiable,
};
use flotilla_core::plan::{NodeClaimPlan, Plan};
use flotilla_core::{Quantity, Requirement, Requirements, Resources};
use serde_json::{json, Value};

/// Fraction of memory the hypervisor keeps (the scheduler's default).
const VM_MEMORY_OVERHEAD: f64 = 0.075;

const MIB_MILLIS: i64 = 1024 * 1024 * 1000;

fn is_bytes(resource: &str) -> bool {
    resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
}

/// A request in export units, rounded down.
fn request_units(resource: &str, q: Quantity) -> i64 {
    let m = q.millis();
    if resource == "cpu" {
        m
    } else if is_bytes(resource) {
        m.div_euclid(MIB_MILLIS)
    } else {
        q.units_floor()
    }
}

/// A capacity in export units, rounded up.
fn capacity_units(resource: &str, q: Quantity) -> i64 {
    let m = q.millis();
    if resource == "cpu" {
        m
    } else if is_bytes(resource) {
        (m + MIB_MILLIS - 1).div_euclid(MIB_MILLIS)
    } else {
        q.units_ceil()
    }
}

/// `r` in export units for the resources NodePool `np` limits (`null`
/// without limits).
fn limited_units(np: Option<&NodePool>, r: &Resources) -> Value {
    match np.and_then(|np| np.limits.as_ref()) {
        None => Value::Null,
        Some(limits) => limits
            .iter()
            .map(|(k, _)| (k.to_string(), json!(capacity_units(k, r.get(k)))))
            .collect::<serde_json::Map<String, Value>>()
            .into(),
    }
}

/// One launchable (NodePool, instance type) or one existing node.
struct ExportType {
    pool: Option<String>,
    name: String,
    capacity: Resources,
    price: f64,
    /// Cheapest allowed offering per zone (existing nodes: their zone, 0).
    zone_prices: BTreeMap<String, f64>,
    max_count: Option<u32>,
    /// For pool types: pool index and the type's requirements (static labels
    /// plus zone / capacity type over the allowed offerings).
    pool_index: Option<usize>,
    requirements: Requirements,
    /// Capacity as NodePool limits charge it (pool types).
    limit_capacity: Resources,
    /// For existing nodes: the node's labels and taints.
    node: Option<usize>,
}

struct PoolView<'a> {
    np: &'a NodePool,
    requirements: Requirements,
}

/// The pod's requirement alternatives: node selector plus each required
/// term (or the node selector alone).
fn alternatives(pod: &Pod) -> Vec<Requirements> {
    if pod.required_terms.is_empty() {
        return vec![pod.node_selector.clone()];
    }
    pod.required_terms
        .iter()
        .map(|t| {
            let mut r = pod.node_selector.clone();
            r.add_all(t);
            r
        })
        .collect()
}

fn labels_satisfy(node_labels: &BTreeMap<String, String>, reqs: &Requirements) -> bool {
    reqs.iter().all(|r| match node_labels.get(&r.key) {
        Some(v) => r.has(v),
        None => matches!(
            r.operator(),
            flotilla_core::Operator::NotIn | flotilla_core::Operator::DoesNotExist
        ),
    })
}

/// The self hostname anti-affinity group of a pod, if it has one.
fn anti_group(pod: &Pod) -> Option<String> {
    pod.pod_anti_affinity
        .iter()
        .find(|t| {
            t.topology_key == labels::HOSTNAME
                && !t.all_namespaces
                && (t.namespaces.is_empty() || t.namespaces.contains(&pod.namespace))
                && t.label_selector.matches(&pod.labels)
        })
        .map(|t| format!("{}|{:?}", pod.namespace, t.label_selector))
}

/// One distinct topology spread constraint of the pending pods (the pods it
/// counts: its selector in the owning pod's namespace, as the scheduler's
/// spread groups).
struct SpreadGroup {
    namespace: String,
    c: TopologySpreadConstraint,
}

impl SpreadGroup {
    fn key(ns: &str, c: &TopologySpreadConstraint) -> String {
        format!(
            "{ns}|{}|{:?}|{}|{:?}|{:?}|{:?}",
            c.topology_key,
            c.label_selector,
            c.max_skew,
            c.min_domains,
            c.node_affinity_policy,
            c.when_unsatisfiable
        )
    }

    fn counts(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace && self.c.label_selector.matches(&pod.labels)
    }
}

fn when_str(w: WhenUnsatisfiable) -> &'static str {
    match w {
        WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
        WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
    }
}

/// The zones of `universe` a pod's spread constraint counts as eligible:
/// those its node requirements allow (nodeAffinityPolicy Honor), else all;
/// `None` when its alternatives disagree.
fn eligible_zones(
    pod: &Pod,
    c: &TopologySpreadConstraint,
    universe: &BTreeSet<String>,
) -> Option<Vec<String>> {
    if c.node_affinity_policy != InclusionPolicy::Honor {
        return Some(universe.iter().cloned().collect());
    }
    let sets: Vec<Vec<String>> = alternatives(pod)
        .iter()
        .map(|a| {
            universe
                .iter()
                .filter(|z| a.allows(labels::ZONE, z))
                .cloned()
                .collect()
        })
        .collect();
    if sets.windows(2).all(|w| w[0] == w[1]) {
        sets.into_iter().next()
    } else {
        None
    }
}

/// The spread groups of `pods`, in order of first appearance, and the
/// index of each group's key.
fn spread_groups_of(pods: &[Pod]) -> (Vec<SpreadGroup>, BTreeMap<String, usize>) {
    let mut spread_groups: Vec<SpreadGroup> = Vec::new();
    let mut spread_index: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        for c in &pod.topology_spread {
            spread_index
                .entry(SpreadGroup::key(&pod.namespace, c))
                .or_insert_with(|| {
                    spread_groups.push(SpreadGroup {
                        namespace: pod.namespace.clone(),
                        c: c.clone(),
                    });
                    spread_groups.len() - 1
                });
        }
    }
    (spread_groups, spread_index)
}

/// What `plan` does with each of [`export`]'s `spreadGroups` (same order,
/// same ids), for `bound.py`'s `spreadHonouredLpBound`: per group, the
/// pending pods its selector counts that the plan places, per zone
/// (`zoneCounts`; a NodeClaim that may still launch in several zones puts
/// its pods in `undetermined` instead), the most of them on one node
/// (`maxPerNode`), and `unplaced`, the counted pending pods the plan does
/// not place. Zones are the NodeClaim's single allowed zone or an existing
/// node's zone label.
pub fn plan_spread(state: &ClusterState, plan: &Plan) -> Value {
    let (groups, _) = spread_groups_of(&state.pending_pods);
    let pods: BTreeMap<String, &Pod> = state.pending_pods.iter().map(|p| (p.key(), p)).collect();
    let node_zone: BTreeMap<&str, Option<&String>> = state
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.labels.get(labels::ZONE)))
        .collect();
    // (zone or None, pod keys) per node of the plan.
    let nodes: Vec<(Option<&String>, &Vec<String>)> = plan
        .node_claims
        .iter()
        .map(|c| ((c.zones.len() == 1).then(|| &c.zones[0]), &c.pods))
        .chain(
            plan.existing_nodes
                .iter()
                .map(|e| (node_zone.get(e.name.as_str()).copied().flatten(), &e.pods)),
        )
        .collect();
    let out: Vec<Value> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let mut zones: BTreeMap<&str, u32> = BTreeMap::new();
            let (mut undetermined, mut most, mut placed) = (0u32, 0u32, 0usize);
            for (zone, keys) in &nodes {
                let here = keys
                    .iter()
                    .filter(|k| pods.get(k.as_str()).is_some_and(|p| g.counts(p)))
                    .count() as u32;
                placed += here as usize;
                most = most.max(here);
                match zone {
                    Some(z) if here > 0 => *zones.entry(z.as_str()).or_default() += here,
                    None => undetermined += here,
                    _ => {}
                }
            }
            let counted = state.pending_pods.iter().filter(|p| g.counts(p)).count();
            json!({
                "group": gi,
                "zoneCounts": zones,
                "undetermined": undetermined,
                "maxPerNode": most,
                "unplaced": counted - placed,
            })
        })
        .collect();
    Value::Array(out)
}

/// Builds the LP input for `state` (see the module docs for the format).
pub fn export(state: &ClusterState, catalog: &Catalog) -> Value {
    export_beside(state, catalog, None)
}

/// [`export`], and with `plan`, each class's `honouredTypes`: the types
/// left to its pods by the preferences `plan` holds for them (see
/// [`honoured_types`]); pods the plan treats differently are classes apart.
pub fn export_beside(state: &ClusterState, catalog: &Catalog, plan: Option<&Plan>) -> Value {
    let mut nps: Vec<&NodePool> = state.node_pools.iter().collect();
    nps.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    let pools: Vec<PoolView> = nps
        .iter()
        .map(|np| {
            let mut requirements = np.requirements.clone();
            requirements.add(Requirement::in_values(labels::NODEPOOL, [np.name.as_str()]));
            requirements.add(Requirement::not_in(
                labels::CAPACITY_TYPE,
                [labels::CAPACITY_TYPE_RESERVED],
            ));
            PoolView { np, requirements }
        })
        .collect();

    let mut types: Vec<ExportType> = Vec::new();
    for (pi, pool) in pools.iter().enumerate() {
        let np = pool.np;
        let overhead = flotilla_core::scheduler::daemon_overhead(
            &np.taints,
            &pool.requirements,
            &state.daemon_sets,
        );
        let root_volume = np
            .node_class
            .as_ref()
            .and_then(|n| state.node_classes.iter().find(|c| &c.name == n))
            .and_then(|c| c.root_volume_size);
        let volumes = crate::baseline::volume_price(state, catalog, np);
        for entry in &catalog.entries {
            let mut reqs = entry.info.requirements();
            if pool.requirements.intersects(&reqs).is_err() {
                continue;
            }
            let allowed: Vec<_> = entry
                .offerings
                .iter()
                .filter(|o| {
                    o.available > 0
                        && o.reservation.is_none()
                        && o.capacity_type != CapacityType::Reserved
                        && pool
                            .requirements
                            .allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
                        && pool.requirements.allows(labels::ZONE, &o.zone)
                })
                .collect();
            // A node's price: its offering plus its node class's volumes.
            let node = |o: &&Offering| ebs::node_hourly(o.price, volumes);
            let Some(price) = allowed.iter().map(node).reduce(f64::min) else {
                continue;
            };
            let mut zone_prices: BTreeMap<String, f64> = BTreeMap::new();
            for o in &allowed {
                let p = zone_prices.entry(o.zone.clone()).or_insert(node(o));
                *p = p.min(node(o));
            }
            reqs.add(Requirement::in_values(
                labels::ZONE,
                allowed.iter().map(|o| o.zone.clone()),
            ));
            reqs.add(Requirement::in_values(
                labels::CAPACITY_TYPE,
                allowed.iter().map(|o| o.capacity_type.as_str().to_string()),
            ));
            let nr =
                allocatable::compute(&entry.info, &np.kubelet, root_volume, VM_MEMORY_OVERHEAD);
            types.push(ExportType {
                pool: Some(np.name.clone()),
                name: entry.info.name.clone(),
                capacity: nr.allocatable.minus(&overhead),
                price,
                zone_prices,
                max_count: None,
                pool_index: Some(pi),
                requirements: reqs,
                limit_capacity: nr.capacity.clone(),
                node: None,
            });
        }
    }
    for (ni, n) in state.nodes.iter().enumerate() {
        if n.unschedulable {
            continue;
        }
        let mut used = Resources::new();
        for p in &n.pods {
            used.add_assign(&p.requests);
        }
        types.push(ExportType {
            pool: None,
            name: format!("existing/{}", n.name),
            capacity: n.allocatable.minus(&used),
            price: 0.0,
            zone_prices: n
                .labels
                .get(labels::ZONE)
                .map(|z| (z.clone(), 0.0))
                .into_iter()
                .collect(),
            max_count: Some(1),
            pool_index: None,
            requirements: Requirements::new(),
            limit_capacity: Resources::new(),
            node: Some(ni),
        });
    }

    // The scheduler's zone domains: zones of allowed offerings of every
    // NodePool type, plus existing nodes' zones.
    let universe: BTreeSet<String> = types
        .iter()
        .flat_map(|t| t.zone_prices.keys().cloned())
        .collect();
    let (spread_groups, spread_index) = spread_groups_of(&state.pending_pods);
    let mut spread_existing: Vec<BTreeMap<String, u32>> =
        vec![BTreeMap::new(); spread_groups.len()];
    for n in &state.nodes {
        for p in &n.pods {
            for (gi, g) in spread_groups.iter().enumerate() {
                if let Some(d) = n.labels.get(&g.c.topology_key) {
                    if g.counts(p) {
                        *spread_existing[gi].entry(d.clone()).or_default() += 1;
                    }
                }
            }
        }
    }

    // Resources any pending pod requests, in canonical order.
    let mut resources: Vec<String> = Vec::new();
    for p in &state.pending_pods {
        for (k, _) in p.requests.iter() {
            if !resources.iter().any(|r| r == k) {
                resources.push(k.to_string());
            }
        }
    }
    let canon = |r: &str| match r {
        "cpu" => (0, String::new()),
        "memory" => (1, String::new()),
        "pods" => (2, String::new()),
        other => (3, other.to_string()),
    };
    resources.sort_by_key(|r| canon(r));

    // Usable types per pod, cached by the pod's scheduling-relevant fields.
    let mut compat_cache: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    type Spread = (usize, Option<Vec<String>>);
    type Class = (
        Vec<i64>,
        Vec<usize>,
        bool,
        Vec<Spread>,
        Vec<usize>,
        Option<Vec<usize>>,
        usize,
    );
    let mut classes: BTreeMap<String, Class> = BTreeMap::new();
    let mut unplaceable = 0usize;
    // Per NodeClaim of the plan, its export types (once, not per pod).
    let claims: Vec<(&NodeClaimPlan, Vec<usize>)> = (plan.iter())
        .flat_map(|p| &p.node_claims)
        .map(|c| (c, claim_types(c, &types)))
        .collect();
    let claim_of: BTreeMap<&str, &(&NodeClaimPlan, Vec<usize>)> = (claims.iter())
        .flat_map(|held| held.0.pods.iter().map(move |k| (k.as_str(), held)))
        .collect();
    for pod in &state.pending_pods {
        let key = format!(
            "{:?}|{:?}|{:?}|{:?}",
            pod.requests, pod.node_selector, pod.required_terms, pod.tolerations
        );
        let allowed = compat_cache
            .entry(key)
            .or_insert_with(|| usable_types(pod, &pools, &types, state))
            .clone();
        if allowed.is_empty() {
            unplaceable += 1;
            continue;
        }
        let group = anti_group(pod);
        let requests: Vec<i64> = resources
            .iter()
            .map(|r| request_units(r, pod.requests.get(r)))
            .collect();
        let spread: Vec<Spread> = pod
            .topology_spread
            .iter()
            .map(|c| {
                (
                    spread_index[&SpreadGroup::key(&pod.namespace, c)],
                    eligible_zones(pod, c, &universe),
                )
            })
            .collect();
        let counted: Vec<usize> = (0..spread_groups.len())
            .filter(|&gi| spread_groups[gi].counts(pod))
            .collect();
        let claim = claim_of.get(pod.key().as_str()).copied();
        let honoured =
            claim.and_then(|(c, ct)| honoured_types(pod, &allowed, &types, &pools, c, ct));
        let ckey =
            format!("{requests:?}|{group:?}|{allowed:?}|{spread:?}|{counted:?}|{honoured:?}");
        classes
            .entry(ckey)
            .or_insert_with(|| {
                let anti = group.is_some();
                (requests, allowed, anti, spread, counted, honoured, 0)
            })
            .6 += 1;
    }

    // Keep only types some class may use, renumbered.
    let mut used = vec![false; types.len()];
    for (_, allowed, _, _, _, _, _) in classes.values() {
        for &t in allowed {
            used[t] = true;
        }
    }
    let mut renumber = vec![usize::MAX; types.len()];
    let mut out_types = Vec::new();
    for (i, t) in types.iter().enumerate().filter(|(i, _)| used[*i]) {
        renumber[i] = out_types.len();
        out_types.push(json!({
            "pool": t.pool,
            "name": t.name,
            "capacity": resources
                .iter()
                .map(|r| capacity_units(r, t.capacity.get(r)))
                .collect::<Vec<_>>(),
            "price": t.price,
            "zonePrices": t.zone_prices,
            "maxCount": t.max_count,
            "poolIndex": t.pool_index,
            "limitCapacity": limited_units(t.pool_index.map(|pi| pools[pi].np), &t.limit_capacity),
        }));
    }
    let mut out_classes: Vec<(Vec<i64>, Value)> = classes
        .into_values()
        .map(
            |(requests, allowed, anti, spread, counted, honoured, count)| {
                let spread: Vec<Value> = spread
                    .into_iter()
                    .map(|(gi, eligible)| {
                        let c = &spread_groups[gi].c;
                        json!({
                            "group": gi,
                            "topologyKey": c.topology_key,
                            "maxSkew": c.max_skew,
                            "whenUnsatisfiable": when_str(c.when_unsatisfiable),
                            "minDomains": c.min_domains,
                            "eligibleZones": eligible,
                        })
                    })
                    .collect();
                let mut v = json!({
                    "count": count,
                    "requests": requests,
                    "types": allowed.iter().map(|&t| renumber[t]).collect::<Vec<_>>(),
                    "maxPerNode": if anti { Some(1) } else { None },
                    "spread": spread,
                    "spreadCounted": counted,
                });
                if let Some(h) = honoured {
                    v["honouredTypes"] = json!(h.iter().map(|&t| renumber[t]).collect::<Vec<_>>());
                }
                (requests, v)
            },
        )
        .collect();
    // Largest first, for readability; ties keep the key order.
    out_classes.sort_by(|a, b| b.0.cmp(&a.0));

    json!({
        "resources": resources,
        "units": resources
            .iter()
            .map(|r| if r == "cpu" { "millicores" } else if is_bytes(r) { "MiB" } else { "units" })
            .collect::<Vec<_>>(),
        "pods": state.pending_pods.len(),
        "unplaceable": unplaceable,
        "types": out_types,
        "classes": out_classes.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        "pools": pools
            .iter()
            .map(|p| json!({
                "name": p.np.name,
                "weight": p.np.weight,
                "limits": p.np.limits.as_ref().map_or(Value::Null, |l| l
                    .iter()
                    .map(|(k, q)| (k.to_string(), json!(capacity_units(k, q))))
                    .collect::<serde_json::Map<String, Value>>()
                    .into()),
            }))
            .collect::<Vec<_>>(),
        "zones": universe,
        "spreadGroups": spread_groups
            .iter()
            .zip(&spread_existing)
            .enumerate()
            .map(|(gi, (g, existing))| json!({
                "id": gi,
                "namespace": g.namespace,
                "selector": format!("{:?}", g.c.label_selector),
                "topologyKey": g.c.topology_key,
                "maxSkew": g.c.max_skew,
                "whenUnsatisfiable": when_str(g.c.when_unsatisfiable),
                "minDomains": g.c.min_domains,
                "nodeAffinityPolicy": format!("{:?}", g.c.node_affinity_policy),
                "existing": existing,
            }))
            .collect::<Vec<_>>(),
    })
}

/// The export types NodeClaim `claim` may become: its NodePool's types
/// that it lists.
fn claim_types(claim: &NodeClaimPlan, types: &[ExportType]) -> Vec<usize> {
    let names: BTreeSet<&str> = claim.instance_types.iter().map(String::as_str).collect();
    (types.iter().enumerate())
        .filter(|(_, t)| t.pool.as_deref() == Some(claim.node_pool.as_str()))
        .filter(|(_, t)| names.contains(t.name.as_str()))
        .map(|(i, _)| i)
        .collect()
}

/// The types of `allowed` (pod `pod`'s) left by the preferences the plan
/// holds for it on NodeClaim `claim`, of types `claim_types` (`None` when
/// it holds none that narrow them), as Karpenter holds them while it can:
///
/// - each preferred node-affinity term every type and zone of `claim`
///   satisfies: the types compatible with it;
/// - NodePool weight, when `claim` is of the heaviest NodePool among
///   `allowed`'s: the types of NodePools of that weight (and existing
///   nodes, which come first).
///
/// Not modelled: preferred pod affinity and anti-affinity.
fn honoured_types(
    pod: &Pod,
    allowed: &[usize],
    types: &[ExportType],
    pools: &[PoolView],
    claim: &NodeClaimPlan,
    claim_types: &[usize],
) -> Option<Vec<usize>> {
    let weight = |t: &ExportType| t.pool_index.map(|pi| pools[pi].np.weight);
    let heaviest = allowed.iter().filter_map(|&t| weight(&types[t])).max();
    let claim_weight = pools
        .iter()
        .find(|p| p.np.name == claim.node_pool)
        .map(|p| p.np.weight);
    let claim_types: Vec<&ExportType> = claim_types.iter().map(|&t| &types[t]).collect();
    let held: Vec<&Requirements> = pod
        .preferred_terms
        .iter()
        .map(|t| &t.requirements)
        .filter(|term| claim_holds(claim, &claim_types, term))
        .collect();
    let by_weight = heaviest.is_some() && claim_weight == heaviest;
    if held.is_empty() && !by_weight {
        return None;
    }
    let kept: Vec<usize> = (allowed.iter().copied())
        .filter(|&t| {
            let ty = &types[t];
            if ty.pool_index.is_none() {
                return true;
            }
            (!by_weight || weight(ty) == heaviest)
                && held
                    .iter()
                    .all(|term| ty.requirements.intersects(term).is_ok())
        })
        .collect();
    (kept.len() < allowed.len()).then_some(kept)
}

/// Whether every node NodeClaim `claim` may become satisfies `term`: its
/// zones and capacity types for those keys, else each of its instance
/// types (`claim_types`, whose other labels have one value each).
fn claim_holds(claim: &NodeClaimPlan, claim_types: &[&ExportType], term: &Requirements) -> bool {
    !claim_types.is_empty()
        && term.iter().all(|r| match r.key.as_str() {
            labels::ZONE => claim.zones.iter().all(|z| r.has(z)),
            labels::CAPACITY_TYPE => claim.capacity_types.iter().all(|c| r.has(c.as_str())),
            _ => {
                let one = Requirements::from_iter_reqs([r.clone()]);
                claim_types.iter().all(|t| {
                    t.requirements.get(&r.key).is_some() && t.requirements.intersects(&one).is_ok()
                })
            }
        })
}

/// Indices of `types` pod `pod` may run on.
fn usable_types(
    pod: &Pod,
    pools: &[PoolView],
    types: &[ExportType],
    state: &ClusterState,
) -> Vec<usize> {
    let alts = alternatives(pod);
    // Per pool: the merged requirements of each compatible alternative.
    let merged: Vec<Vec<Requirements>> = pools
        .iter()
        .map(|p| {
            if untolerated(&p.np.taints, &pod.tolerations).is_some() {
                return vec![];
            }
            alts.iter()
                .filter(|a| p.requirements.compatible(a).is_ok())
                .map(|a| p.requirements.intersection(a))
                .collect()
        })
        .collect();
    types
        .iter()
        .enumerate()
        .filter(|(_, t)| pod.requests.fits_in(&t.capacity))
        .filter(|(_, t)| match (t.pool_index, t.node) {
            (Some(pi), _) => merged[pi]
                .iter()
                .any(|m| t.requirements.intersects(m).is_ok()),
            (None, Some(ni)) => {
                let node = &state.nodes[ni];
                let mut node_labels = node.labels.clone();
                node_labels
                    .entry(labels::HOSTNAME.into())
                    .or_insert_with(|| node.name.clone());
                untolerated(&node.taints, &pod.tolerations).is_none()
                    && alts.iter().any(|a| labels_satisfy(&node_labels, a))
            }
            (None, None) => false,
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::catalog::{CatalogEntry, InstanceTypeInfo, Offering, UNLIMITED};
    use flotilla_core::model::*;

    fn info(name: &str, vcpu: u32, mem_mib: u64, gpus: u32) -> InstanceTypeInfo {
        InstanceTypeInfo {
            max_network_interfaces: 4,
            ipv4_per_interface: 15,
            network_bandwidth_mbps: 1000,
            ebs_bandwidth_mbps: 1000,
            ..InstanceTypeInfo::synthetic(name, "amd64", vcpu, mem_mib, gpus)
        }
    }

    fn catalog() -> Catalog {
        let entries = [
            (info("g4.8xlarge", 32, 131072, 4), 4.0),
            (info("m5.large", 2, 8192, 0), 0.096),
            (info("m5.xlarge", 4, 16384, 0), 0.192),
        ]
        .into_iter()
        .map(|(info, od)| CatalogEntry {
            info,
            offerings: vec![
                Offering {
                    zone: "test-1a".into(),
                    capacity_type: CapacityType::OnDemand,
                    price: od,
                    available: UNLIMITED,
                    reservation: None,
                },
                Offering {
                    zone: "test-1a".into(),
                    capacity_type: CapacityType::Spot,
                    price: od * 0.4,
                    available: UNLIMITED,
                    reservation: None,
                },
            ],
        })
        .collect();
        Catalog {
            region: "test-1".into(),
            zones: vec!["test-1a".into()],
            entries,
            source: "test".into(),
        }
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
        Pod {
            name: name.into(),
            ..Pod::from(PodTemplate {
                namespace: "default".into(),
                requests: Resources::new()
                    .with("cpu", q(cpu))
                    .with("memory", q(mem))
                    .with("pods", q("1")),
                ..PodTemplate::default()
            })
        }
    }

    fn pool(name: &str, reqs: Vec<Requirement>) -> NodePool {
        NodePool::new(name, Requirements::from_iter_reqs(reqs))
    }

    #[test]
    fn exports_types_and_classes() {
        // "cpu" pool: on-demand only, no GPU types. "gpu" pool: tainted, GPU types.
        let cpu_pool = pool(
            "cpu",
            vec![
                Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                Requirement::does_not_exist(labels::INSTANCE_GPU_COUNT),
            ],
        );
        let mut gpu_pool = pool("gpu", vec![Requirement::exists(labels::INSTANCE_GPU_COUNT)]);
        gpu_pool.taints = vec![Taint {
            key: "gpu".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        }];
        let mut gpu_pod = pod("g", "1", "1Gi");
        gpu_pod.requests.set("nvidia.com/gpu", q("1"));
        gpu_pod.tolerations.push(Toleration {
            key: "gpu".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        });
        let state = ClusterState {
            node_pools: vec![gpu_pool, cpu_pool],
            daemon_sets: vec![DaemonSet {
                namespace: "kube-system".into(),
                name: "ds".into(),
                pod: pod("ds", "100m", "128Mi"),
            }],
            pending_pods: vec![
                pod("a", "500m", "1Gi"),
                pod("b", "500m", "1Gi"),
                pod("c", "3", "1Gi"),
                gpu_pod,
            ],
            ..Default::default()
        };
        let v = export(&state, &catalog());
        assert_eq!(
            v["resources"],
            json!(["cpu", "memory", "pods", "nvidia.com/gpu"])
        );
        assert_eq!(v["pods"], json!(4));
        assert_eq!(v["unplaceable"], json!(0));
        let types = v["types"].as_array().unwrap();
        // Pools in name order at equal weight: "cpu" (m5.large, m5.xlarge),
        // then "gpu" (g4.8xlarge only; the daemonset does not tolerate the
        // taint, so no overhead there).
        let names: Vec<_> = types
            .iter()
            .map(|t| (t["pool"].as_str().unwrap(), t["name"].as_str().unwrap()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("cpu", "m5.large"),
                ("cpu", "m5.xlarge"),
                ("gpu", "g4.8xlarge")
            ]
        );
        // m5.large (hand-computed): cpu 2000m - 70m kube-reserved - 100m
        // daemonset = 1830m; memory 8192 MiB - ceil(7.5%) 615 - kube-reserved
        // (11 * 58 pods + 255) 893 - eviction 100 - daemonset 128 = 6456 MiB;
        // pods 4 ENIs * 14 + 2 = 58, minus the daemonset pod = 57; on-demand
        // only -> 0.096, plus the 20 GiB gp3 root of a NodePool without a
        // node class (us-east-1's rates for region test-1): $1.60 a month.
        let root = 1.6 / 730.0;
        assert_eq!(types[0]["capacity"], json!([1830, 6456, 57, 0]));
        assert!((types[0]["price"].as_f64().unwrap() - (0.096 + root)).abs() < 1e-12);
        assert_eq!(types[0]["maxCount"], Value::Null);
        // m5.xlarge: 4000 - 80 - 100 = 3820m.
        assert_eq!(types[1]["capacity"][0], json!(3820));
        // g4.8xlarge in the tainted gpu pool: the daemonset does not
        // tolerate the taint, so no overhead; 32000 - 150m kube-reserved;
        // spot allowed -> 4.0 * 0.4.
        assert_eq!(types[2]["capacity"][0], json!(31850));
        assert_eq!(types[2]["capacity"][3], json!(4));
        assert!((types[2]["price"].as_f64().unwrap() - (1.6 + root)).abs() < 1e-9);

        let classes = v["classes"].as_array().unwrap();
        let summary: Vec<_> = classes
            .iter()
            .map(|c| {
                (
                    c["count"].as_u64().unwrap(),
                    c["requests"].clone(),
                    c["types"].clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                // 3 CPUs fit only m5.xlarge (3820m).
                (1, json!([3000, 1024, 1, 0]), json!([1])),
                // The GPU pod tolerates the taint; needs a GPU type.
                (1, json!([1000, 1024, 1, 1]), json!([2])),
                // Two identical small pods: one class, both CPU types.
                (2, json!([500, 1024, 1, 0]), json!([0, 1])),
            ]
        );
    }

    /// `plan_spread` follows `export`'s group ids and counts what the plan
    /// places: every pod of the zone-spread mix, each Deployment within
    /// its maxSkew over the zones the plan decided.
    #[test]
    fn plan_spread_counts_the_plan_per_group() {
        let catalog = Catalog::embedded("us-west-2").expect("embedded catalog");
        let state = crate::mixes::build("zone-spread", 120, 1).expect("mix");
        let plan = flotilla_core::scheduler::schedule(
            &state,
            &catalog,
            &flotilla_core::scheduler::SchedulerOptions::default(),
        );
        let sc = export(&state, &catalog);
        let ps = plan_spread(&state, &plan);
        let groups = sc["spreadGroups"].as_array().unwrap();
        let ps = ps.as_array().unwrap();
        assert_eq!(ps.len(), groups.len());
        let mut placed = 0;
        for (g, p) in groups.iter().zip(ps) {
            assert_eq!(g["id"], p["group"]);
            assert_eq!(p["unplaced"], 0);
            let counts: Vec<u64> = p["zoneCounts"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let undetermined = p["undetermined"].as_u64().unwrap();
            placed += counts.iter().sum::<u64>() + undetermined;
            if undetermined == 0 && counts.len() == 4 {
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{p}");
            }
            assert!(p["maxPerNode"].as_u64().unwrap() >= 1);
        }
        assert_eq!(placed, 120);
    }

    /// `honouredTypes`: a held preferred arch term narrows a class to the
    /// types of that arch, a NodeClaim of the heaviest NodePool to that
    /// NodePool's types; a NodeClaim that may be either arch, of a lighter
    /// NodePool, holds neither.
    #[test]
    fn honoured_types_follow_what_the_plan_holds() {
        let mut cat = catalog();
        let mut arm = cat.entries[1].clone();
        arm.info = InstanceTypeInfo {
            architecture: "arm64".into(),
            ..info("m6g.large", 2, 8192, 0)
        };
        for o in &mut arm.offerings {
            o.price *= 0.8;
        }
        cat.entries.push(arm);
        let mut heavy = pool("heavy", vec![]);
        heavy.weight = 10;
        let mut p = pod("p", "500m", "1Gi");
        p.preferred_terms.push(PreferredNodeTerm {
            weight: 50,
            requirements: Requirements::from_iter_reqs([Requirement::in_values(
                labels::ARCH,
                ["amd64"],
            )]),
        });
        let state = ClusterState {
            node_pools: vec![pool("light", vec![]), heavy],
            pending_pods: vec![p, pod("q", "500m", "1Gi")],
            ..Default::default()
        };
        let mut plan = flotilla_core::scheduler::schedule(
            &state,
            &cat,
            &flotilla_core::scheduler::SchedulerOptions::default(),
        );
        assert_eq!(plan.node_claims.len(), 1, "premise: one NodeClaim");
        assert_eq!(plan.node_claims[0].node_pool, "heavy", "premise");
        let honoured = |v: &Value| -> Vec<Option<Vec<(String, String)>>> {
            let types = v["types"].as_array().unwrap();
            let mut out: Vec<_> = (v["classes"].as_array().unwrap().iter())
                .map(|c| {
                    c.get("honouredTypes").map(|h| {
                        (h.as_array().unwrap().iter())
                            .map(|t| &types[t.as_u64().unwrap() as usize])
                            .map(|t| (t["pool"].to_string(), t["name"].to_string()))
                            .collect()
                    })
                })
                .collect();
            out.sort();
            out
        };
        assert!(honoured(&export(&state, &cat)).iter().all(Option::is_none));
        let pair = |p: &str, n: &str| (format!("\"{p}\""), format!("\"{n}\""));
        let heavy_types = vec![
            pair("heavy", "g4.8xlarge"),
            pair("heavy", "m5.large"),
            pair("heavy", "m5.xlarge"),
            pair("heavy", "m6g.large"),
        ];
        let heavy_amd64 = vec![
            pair("heavy", "g4.8xlarge"),
            pair("heavy", "m5.large"),
            pair("heavy", "m5.xlarge"),
        ];
        let mut want = vec![Some(heavy_types), Some(heavy_amd64)];
        want.sort();
        assert!(
            plan.node_claims[0]
                .instance_types
                .iter()
                .all(|t| t != "m6g.large"),
            "premise: p's preference holds its NodeClaim on amd64"
        );
        assert_eq!(honoured(&export_beside(&state, &cat, Some(&plan))), want);
        // Either arch, and the lighter NodePool: nothing held, so p and q
        // are one class again.
        let claim = &mut plan.node_claims[0];
        claim.node_pool = "light".into();
        claim.instance_types = vec!["m6g.large".to_string(), "m5.large".to_string()].into();
        assert_eq!(
            honoured(&export_beside(&state, &cat, Some(&plan))),
            vec![None]
        );
    }

    #[test]
    fn exports_zone_prices_and_spread_groups() {
        let mut cat = catalog();
        cat.zones.push("test-1b".into());
        for e in &mut cat.entries {
            let mut o = e.offerings[1].clone();
            o.zone = "test-1b".into();
            o.price *= 2.0;
            e.offerings.push(o);
        }
        let spread = |app: &str| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: LabelSelector {
                match_labels: [("app".to_string(), app.to_string())].into(),
                match_expressions: vec![],
            },
            min_domains: None,
            node_affinity_policy: InclusionPolicy::Honor,
            node_taints_policy: InclusionPolicy::Ignore,
        };
        let mut pods = Vec::new();
        for app in ["a", "b"] {
            for i in 0..2 {
                let mut p = pod(&format!("{app}{i}"), "500m", "1Gi");
                p.labels.insert("app".into(), app.into());
                p.topology_spread.push(spread(app));
                pods.push(p);
            }
        }
        // Pinned to test-1a: only that zone is eligible.
        pods[3]
            .node_selector
            .add(Requirement::in_values(labels::ZONE, ["test-1a"]));
        let state = ClusterState {
            node_pools: vec![pool("default", vec![])],
            pending_pods: pods,
            ..Default::default()
        };
        let v = export(&state, &cat);
        assert_eq!(v["zones"], json!(["test-1a", "test-1b"]));
        let types = v["types"].as_array().unwrap();
        let large = types.iter().find(|t| t["name"] == "m5.large").unwrap();
        // Spot offerings plus the default 20 GiB gp3 root ($1.60 a month).
        let root = 1.6 / 730.0;
        let zp = |z: &str| large["zonePrices"][z].as_f64().unwrap();
        assert!((zp("test-1a") - (0.0384 + root)).abs() < 1e-9);
        assert!((zp("test-1b") - (0.0768 + root)).abs() < 1e-9);
        assert_eq!(v["spreadGroups"].as_array().unwrap().len(), 2);
        let classes = v["classes"].as_array().unwrap();
        // a (2 pods), b unpinned, b pinned: one class each per group and zones.
        let summary: Vec<_> = classes
            .iter()
            .map(|c| {
                (
                    c["count"].as_u64().unwrap(),
                    c["spread"][0]["group"].as_u64().unwrap(),
                    c["spread"][0]["eligibleZones"].clone(),
                    c["spreadCounted"].clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (2, 0, json!(["test-1a", "test-1b"]), json!([0])),
                (1, 1, json!(["test-1a", "test-1b"]), json!([1])),
                (1, 1, json!(["test-1a"]), json!([1])),
            ]
        );
        assert_eq!(
            classes[0]["spread"][0]["whenUnsatisfiable"],
            json!("DoNotSchedule")
        );
    }

    #[test]
    fn existing_nodes_are_free_and_anti_affinity_caps_per_node() {
        let mut s = ClusterState {
            node_pools: vec![pool("default", vec![])],
            ..Default::default()
        };
        s.nodes = vec![Node {
            name: "n1".into(),
            labels: BTreeMap::new(),
            taints: vec![],
            allocatable: Resources::new()
                .with("cpu", q("2"))
                .with("memory", q("4Gi"))
                .with("pods", q("10")),
            unschedulable: false,
            pods: vec![pod("bound", "1", "1Gi")],
            ..Node::default()
        }];
        let mut p = pod("x", "100m", "1Mi");
        p.labels.insert("app".into(), "x".into());
        p.pod_anti_affinity.push(PodAffinityTerm {
            label_selector: LabelSelector {
                match_labels: [("app".to_string(), "x".to_string())].into(),
                match_expressions: vec![],
            },
            namespaces: vec![],
            all_namespaces: false,
            topology_key: labels::HOSTNAME.into(),
        });
        s.pending_pods = vec![p.clone(), p];
        let v = export(&s, &catalog());
        let types = v["types"].as_array().unwrap();
        let last = types.last().unwrap();
        assert_eq!(last["name"], json!("existing/n1"));
        assert_eq!(last["capacity"], json!([1000, 3072, 9]));
        assert_eq!(last["price"], json!(0.0));
        assert_eq!(last["maxCount"], json!(1));
        let classes = v["classes"].as_array().unwrap();
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0]["count"], json!(2));
        assert_eq!(classes[0]["maxPerNode"], json!(1));
        assert_eq!(classes[0]["types"].as_array().unwrap().len(), types.len());
    }

    #[test]
    fn pools_carry_weights_limits_and_what_limits_charge() {
        let mut heavy = pool("heavy", vec![]);
        heavy.weight = 10;
        heavy.limits = Some(Resources::new().with("cpu", q("8")).into());
        let light = pool("light", vec![]);
        let state = ClusterState {
            node_pools: vec![light, heavy],
            pending_pods: vec![pod("a", "500m", "1Gi")],
            ..Default::default()
        };
        let v = export(&state, &catalog());
        // Heaviest first; limits in export units (millicores).
        assert_eq!(
            v["pools"],
            json!([
                {"name": "heavy", "weight": 10, "limits": {"cpu": 8000}},
                {"name": "light", "weight": 0, "limits": null},
            ])
        );
        let types = v["types"].as_array().unwrap();
        let large = types
            .iter()
            .find(|t| t["pool"] == "heavy" && t["name"] == "m5.large")
            .unwrap();
        // The whole 2 vCPU count against the limit, not the allocatable.
        assert_eq!(large["poolIndex"], json!(0));
        assert_eq!(large["limitCapacity"], json!({"cpu": 2000}));
        let light = types.iter().find(|t| t["pool"] == "light").unwrap();
        assert_eq!(light["poolIndex"], json!(1));
        assert_eq!(light["limitCapacity"], Value::Null);
    }
}
