//! Carrying disruption decisions out on a [`ClusterState`], for the
//! quality benchmark: remove the decided nodes, add the replacements as
//! nodes (labelled and sized as Karpenter would launch them, with their
//! DaemonSet pod) and bind the moved pods where the decision says. Plus the
//! cluster's price and a validity check of the result.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::disruption::Decision;
use flotilla_core::labels;
use flotilla_core::model::{ClusterState, DaemonSet, Node, WhenUnsatisfiable};
use flotilla_core::plan::{NodeClaimPlan, Plan};
use flotilla_core::Resources;

use crate::fragmented::{self, is_daemon_pod};
use crate::mixes::Rng;

/// One change to carry out: nodes to remove, NodeClaims to launch, and
/// where every evicted (non-DaemonSet) pod goes (`ns/name` → an existing
/// node's name or a replacement's `name`).
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub removed: Vec<String>,
    pub replacements: Vec<NodeClaimPlan>,
    pub moves: Vec<(String, String)>,
}

impl Change {
    pub fn from_decision(d: &Decision) -> Change {
        Change {
            removed: d.nodes.clone(),
            replacements: d.replacements.clone(),
            moves: d
                .moves
                .iter()
                .map(|m| (m.pod.clone(), m.to.clone()))
                .collect(),
        }
    }

    /// `removed` and a scheduler `plan` of their pods (pods placed on
    /// existing nodes and on the plan's NodeClaims).
    pub fn from_plan(removed: Vec<String>, plan: &Plan) -> Change {
        let mut moves = Vec::new();
        for e in &plan.existing_nodes {
            moves.extend(e.pods.iter().map(|p| (p.clone(), e.name.clone())));
        }
        for c in &plan.node_claims {
            moves.extend(c.pods.iter().map(|p| (p.clone(), c.name.clone())));
        }
        Change {
            removed,
            replacements: plan.node_claims.clone(),
            moves,
        }
    }
}

/// Why a change could not be carried out.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyError {
    UnknownNode(String),
    RemovedTwice(String),
    Replacement { claim: String, what: String },
    NotMoved(String),
    NotEvicted(String),
    UnknownDestination { pod: String, to: String },
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::UnknownNode(n) => write!(f, "node {n} to remove is not in the cluster"),
            ApplyError::RemovedTwice(n) => write!(f, "node {n} is removed twice"),
            ApplyError::Replacement { claim, what } => write!(f, "replacement {claim}: {what}"),
            ApplyError::NotMoved(p) => {
                write!(f, "pod {p} is evicted but the change moves it nowhere")
            }
            ApplyError::NotEvicted(p) => write!(f, "pod {p} is moved but no removed node held it"),
            ApplyError::UnknownDestination { pod, to } => write!(
                f,
                "pod {pod} moves to {to}, which is neither a remaining node nor a replacement"
            ),
        }
    }
}

impl std::error::Error for ApplyError {}

/// $/hour of `node`: its offering (instance type, zone, capacity type).
pub fn node_price(catalog: &Catalog, node: &Node) -> Result<f64, String> {
    let get = |k: &str| {
        node.labels
            .get(k)
            .ok_or_else(|| format!("node {}: no label {k}", node.name))
    };
    let ty = get(labels::INSTANCE_TYPE)?;
    let zone = get(labels::ZONE)?;
    let ct = get(labels::CAPACITY_TYPE)?;
    let ct = CapacityType::parse(ct)
        .ok_or_else(|| format!("node {}: capacity type {ct:?}", node.name))?;
    catalog
        .get(ty)
        .and_then(|e| {
            e.offerings
                .iter()
                .filter(|o| &o.zone == zone && o.capacity_type == ct)
                .map(|o| o.price)
                .reduce(f64::min)
        })
        .ok_or_else(|| format!("node {}: no offering {ty} {zone} {ct:?}", node.name))
}

/// $/hour of every node of the cluster: offerings plus each node's EBS
/// volumes (its NodePool's node class; none for a node of no NodePool).
pub fn cluster_price(catalog: &Catalog, state: &ClusterState) -> Result<f64, String> {
    state
        .nodes
        .iter()
        .map(|n| {
            let pool = n
                .nodepool()
                .and_then(|p| state.node_pools.iter().find(|np| np.name == p));
            let volumes = pool.map_or(0.0, |np| crate::baseline::volume_price(state, catalog, np));
            Ok(flotilla_core::catalog::ebs::node_hourly(
                node_price(catalog, n)?,
                volumes,
            ))
        })
        .sum()
}

/// Carries `change` out at `now`. New nodes are named `prefix` + the
/// replacement's name; returns their names. On error `state` is unchanged.
pub fn apply(
    state: &mut ClusterState,
    catalog: &Catalog,
    change: &Change,
    now: i64,
    prefix: &str,
    rng: &mut Rng,
) -> Result<Vec<String>, ApplyError> {
    let mut removed: BTreeSet<&str> = BTreeSet::new();
    for n in &change.removed {
        if !state.nodes.iter().any(|x| &x.name == n) {
            return Err(ApplyError::UnknownNode(n.clone()));
        }
        if !removed.insert(n) {
            return Err(ApplyError::RemovedTwice(n.clone()));
        }
    }
    let ds = state
        .daemon_sets
        .first()
        .cloned()
        .unwrap_or_else(fragmented::daemon_set);
    // New nodes, by replacement name.
    let mut new_nodes: BTreeMap<String, Node> = BTreeMap::new();
    for c in &change.replacements {
        let name = format!("{prefix}{}", c.name);
        let err = |what: String| ApplyError::Replacement {
            claim: c.name.clone(),
            what,
        };
        let node = claim_node(state, catalog, c, &name, now, &ds, rng).map_err(err)?;
        if new_nodes.insert(c.name.clone(), node).is_some() {
            return Err(err("two replacements share this name".into()));
        }
    }
    // Evicted pods.
    let mut evicted = BTreeMap::new();
    for n in state
        .nodes
        .iter()
        .filter(|n| removed.contains(n.name.as_str()))
    {
        for p in n.pods.iter().filter(|p| !is_daemon_pod(p)) {
            evicted.insert(p.key(), p.clone());
        }
    }
    let remaining: BTreeSet<&str> = state
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| !removed.contains(n))
        .collect();
    let mut to_existing: BTreeMap<String, Vec<flotilla_core::model::Pod>> = BTreeMap::new();
    for (pod, to) in &change.moves {
        let Some(mut p) = evicted.remove(pod) else {
            return Err(ApplyError::NotEvicted(pod.clone()));
        };
        p.created_at = Some(now);
        if let Some(node) = new_nodes.get_mut(to) {
            p.node_name = Some(node.name.clone());
            node.pods.push(p);
        } else if remaining.contains(to.as_str()) {
            p.node_name = Some(to.clone());
            to_existing.entry(to.clone()).or_default().push(p);
        } else {
            return Err(ApplyError::UnknownDestination {
                pod: pod.clone(),
                to: to.clone(),
            });
        }
    }
    if let Some(pod) = evicted.into_keys().next() {
        return Err(ApplyError::NotMoved(pod));
    }
    state.nodes.retain(|n| !removed.contains(n.name.as_str()));
    for n in &mut state.nodes {
        if let Some(pods) = to_existing.remove(&n.name) {
            n.pods.extend(pods);
        }
    }
    let names = new_nodes.values().map(|n| n.name.clone()).collect();
    state.nodes.extend(new_nodes.into_values());
    Ok(names)
}

/// The node NodeClaim `c` launches as, named `name`, created at `now`:
/// its offering, its NodePool's labels and DaemonSet pod (see
/// `fragmented::launched_node`), the NodeClaim's labels (but hostname)
/// and taints; what is missing when its NodePool or instance type is.
#[allow(clippy::too_many_arguments)]
fn claim_node(
    state: &ClusterState,
    catalog: &Catalog,
    c: &NodeClaimPlan,
    name: &str,
    now: i64,
    ds: &DaemonSet,
    rng: &mut Rng,
) -> Result<Node, String> {
    let np = (state.node_pools.iter())
        .find(|p| p.name == c.node_pool)
        .ok_or_else(|| format!("no NodePool {}", c.node_pool))?;
    let entry = (catalog.get(&c.price.instance_type))
        .ok_or_else(|| format!("no instance type {}", c.price.instance_type))?;
    let (zone, ct) = (&c.price.zone, c.price.capacity_type);
    let mut node =
        fragmented::launched_node(np, catalog, &entry.info, zone, ct, name, now, ds, rng);
    for (k, v) in &c.labels {
        if k != labels::HOSTNAME {
            node.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    node.taints = c.taints.clone();
    Ok(node)
}

/// `state` with `plan` carried out: every NodeClaim of the plan launched
/// as a node (its offering, labels and taints, created at `launched_at`,
/// no DaemonSet pod: the plan's mixes have none) holding its pods, every
/// pod placed on an existing node bound there, and the pods the plan
/// left pending still pending. Every NodePool consolidates
/// `WhenEmptyOrUnderutilized` after 0 s without budgets, so that a
/// disruption run asks only whether the plan could cost less.
pub fn launch_plan(
    state: &ClusterState,
    plan: &Plan,
    catalog: &Catalog,
    launched_at: i64,
    rng: &mut Rng,
) -> Result<ClusterState, String> {
    let mut out = state.clone();
    let mut pending: BTreeMap<String, flotilla_core::model::Pod> =
        out.pending_pods.drain(..).map(|p| (p.key(), p)).collect();
    let mut take = |key: &str, node: &str| -> Result<flotilla_core::model::Pod, String> {
        let mut pod = pending
            .remove(key)
            .ok_or_else(|| format!("plan places pod {key}, which is not pending"))?;
        pod.node_name = Some(node.to_string());
        pod.created_at = Some(launched_at);
        Ok(pod)
    };
    for e in &plan.existing_nodes {
        let mut pods = Vec::with_capacity(e.pods.len());
        for key in &e.pods {
            pods.push(take(key, &e.name)?);
        }
        let node = (out.nodes.iter_mut())
            .find(|n| n.name == e.name)
            .ok_or_else(|| {
                format!(
                    "plan places pods on node {}, which is not in the cluster",
                    e.name
                )
            })?;
        node.pods.extend(pods);
    }
    let ds = fragmented::daemon_set();
    for c in &plan.node_claims {
        let mut node = claim_node(state, catalog, c, &c.name, launched_at, &ds, rng)
            .map_err(|what| format!("NodeClaim {}: {what}", c.name))?;
        node.pods.clear();
        for key in &c.pods {
            node.pods.push(take(key, &c.name)?);
        }
        out.nodes.push(node);
    }
    out.pending_pods = pending.into_values().collect();
    for np in &mut out.node_pools {
        np.disruption.consolidation_policy = Some("WhenEmptyOrUnderutilized".into());
        np.disruption.consolidate_after_seconds = Some(0);
        np.disruption.budgets.clear();
    }
    Ok(out)
}

/// What is wrong with the placement of `state`'s pods: nodes whose
/// requests exceed their allocatable, required hostname anti-affinity
/// broken, zone spread (DoNotSchedule) groups above their maxSkew. Empty:
/// a valid cluster.
pub fn violations(state: &ClusterState) -> Vec<String> {
    let mut out = Vec::new();
    let zones: BTreeSet<&str> = state
        .nodes
        .iter()
        .filter_map(|n| n.labels.get(labels::ZONE).map(String::as_str))
        .collect();
    // (namespace, selector) → (maxSkew, per-zone count)
    let mut spread: BTreeMap<String, (u32, BTreeMap<&str, i64>)> = BTreeMap::new();
    for n in &state.nodes {
        let mut used = Resources::new();
        for p in &n.pods {
            used.add_assign(&p.requests);
            for t in &p.pod_anti_affinity {
                if t.topology_key != labels::HOSTNAME {
                    continue;
                }
                let clash = n.pods.iter().any(|o| {
                    !std::ptr::eq(o, p) && t.selects(&p.namespace, &o.namespace, &o.labels)
                });
                if clash {
                    out.push(format!(
                        "node {}: pod {} shares the node with a pod its anti-affinity excludes",
                        n.name,
                        p.key()
                    ));
                }
            }
        }
        if !used.fits_in(&n.allocatable) {
            out.push(format!(
                "node {}: requests {} exceed allocatable {}",
                n.name, used, n.allocatable
            ));
        }
    }
    for n in &state.nodes {
        let Some(z) = n.labels.get(labels::ZONE) else {
            continue;
        };
        for p in &n.pods {
            // A pod counts once per group, however many of its constraints
            // name the group (a Deployment may repeat one).
            let mut seen: BTreeSet<String> = BTreeSet::new();
            for c in &p.topology_spread {
                if c.topology_key != labels::ZONE
                    || c.when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule
                {
                    continue;
                }
                let key = format!("{}|{:?}", p.namespace, c.label_selector);
                if !seen.insert(key.clone()) {
                    continue;
                }
                let e = spread
                    .entry(key)
                    .or_insert_with(|| (c.max_skew, zones.iter().map(|z| (*z, 0)).collect()));
                if let Some(count) = e.1.get_mut(z.as_str()) {
                    *count += 1;
                }
            }
        }
    }
    for (group, (max_skew, counts)) in spread {
        let hi = counts.values().max().copied().unwrap_or(0);
        let lo = counts.values().min().copied().unwrap_or(0);
        if hi - lo > max_skew as i64 {
            out.push(format!(
                "spread group {group}: zone counts {counts:?} exceed maxSkew {max_skew}"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragmented::{build, Params};
    use flotilla_core::model::{InclusionPolicy, LabelSelector, TopologySpreadConstraint};
    use flotilla_core::plan::{NodeClaimResources, Price};

    fn catalog() -> Catalog {
        Catalog::embedded("us-west-2").expect("embedded catalog")
    }

    fn claim(name: &str, ty: &str, zone: &str) -> NodeClaimPlan {
        NodeClaimPlan {
            name: name.into(),
            node_pool: "default".into(),
            instance_types: vec![ty.into()].into(),
            capacity_types: vec![CapacityType::OnDemand],
            zones: vec![zone.into()],
            requirements: vec![],
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            annotations: Default::default(),
            resources: NodeClaimResources {
                requests: Resources::new(),
                allocatable: Resources::new(),
            },
            pods: vec![],
            price: Price {
                min: 0.0,
                instance_type: ty.into(),
                zone: zone.into(),
                capacity_type: CapacityType::OnDemand,
            },
            volume_price: 0.0,
        }
    }

    #[test]
    fn apply_moves_pods_and_prices_the_cluster() {
        let c = catalog();
        let mut s = build(&Params::fixed(20, 300, 2), &c).unwrap();
        assert!(violations(&s).is_empty(), "{:?}", violations(&s));
        let before = cluster_price(&c, &s).unwrap();
        let victim = s.nodes[0].clone();
        let pods: Vec<String> = victim
            .pods
            .iter()
            .filter(|p| !is_daemon_pod(p))
            .map(|p| p.key())
            .collect();
        assert!(!pods.is_empty());
        let zone = victim.labels[labels::ZONE].clone();
        let change = Change {
            removed: vec![victim.name.clone()],
            replacements: vec![claim("default-1", "m5.4xlarge", &zone)],
            moves: pods
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let to = if i == 0 {
                        s.nodes[1].name.clone()
                    } else {
                        "default-1".to_string()
                    };
                    (p.clone(), to)
                })
                .collect(),
        };
        let mut rng = Rng::new(1);
        // Errors leave the cluster as it was.
        let mut bad = change.clone();
        bad.moves.pop();
        let mut t = s.clone();
        assert!(matches!(
            apply(&mut t, &c, &bad, 5, "r1-", &mut rng),
            Err(ApplyError::NotMoved(_))
        ));
        assert_eq!(t.nodes.len(), s.nodes.len());
        let mut bad = change.clone();
        bad.moves[0].1 = victim.name.clone();
        assert!(matches!(
            apply(&mut t, &c, &bad, 5, "r1-", &mut rng),
            Err(ApplyError::UnknownDestination { .. })
        ));
        let mut bad = change.clone();
        bad.removed.push(victim.name.clone());
        assert!(matches!(
            apply(&mut t, &c, &bad, 5, "r1-", &mut rng),
            Err(ApplyError::RemovedTwice(_))
        ));

        let new = apply(&mut s, &c, &change, 5, "r1-", &mut rng).unwrap();
        assert_eq!(new, vec!["r1-default-1".to_string()]);
        assert_eq!(s.nodes.len(), 20);
        assert!(!s.nodes.iter().any(|n| n.name == victim.name));
        let repl = s.nodes.iter().find(|n| n.name == "r1-default-1").unwrap();
        assert_eq!(repl.labels[labels::INSTANCE_TYPE], "m5.4xlarge");
        assert_eq!(repl.labels[labels::HOSTNAME], "r1-default-1");
        assert_eq!(repl.pods.len(), pods.len()); // the rest + a DaemonSet pod
        assert!(repl
            .pods
            .iter()
            .all(|p| p.node_name.as_deref() == Some("r1-default-1")));
        assert!(s.nodes[0].pods.iter().any(|p| p.key() == pods[0]));
        let od = |t: &str| {
            c.get(t)
                .unwrap()
                .offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type == CapacityType::OnDemand)
                .unwrap()
                .price
        };
        let after = cluster_price(&c, &s).unwrap();
        let victim_price = node_price(&c, &victim).unwrap();
        assert!((after - (before - victim_price + od("m5.4xlarge"))).abs() < 1e-9);
    }

    #[test]
    fn violations_name_overfull_nodes() {
        let c = catalog();
        let mut s = build(&Params::fixed(10, 200, 4), &c).unwrap();
        assert!(violations(&s).is_empty());
        let big = s.nodes[0].allocatable.clone();
        s.nodes[0].pods[0].requests = big;
        let v = violations(&s);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains(&s.nodes[0].name));
    }

    /// A pod that repeats a spread constraint (two identical ones, as a
    /// Deployment may carry) counts once in its group.
    #[test]
    fn a_repeated_spread_counts_its_pod_once() {
        let c = catalog();
        let mut s = build(&Params::fixed(10, 200, 4), &c).unwrap();
        let spread = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: labels::ZONE.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: LabelSelector {
                match_labels: [("app".to_string(), "lone".to_string())].into(),
                match_expressions: vec![],
            },
            min_domains: None,
            node_affinity_policy: InclusionPolicy::Honor,
            node_taints_policy: InclusionPolicy::Ignore,
        };
        let pod = s.nodes[0]
            .pods
            .iter_mut()
            .find(|p| !is_daemon_pod(p))
            .unwrap();
        pod.topology_spread = vec![spread.clone(), spread];
        assert!(violations(&s).is_empty(), "{:?}", violations(&s));
    }

    /// A launched plan holds every pod where the plan put it and costs
    /// what the plan says (instances and volumes).
    #[test]
    fn a_launched_plan_costs_what_the_plan_says() {
        let c = catalog();
        let s = crate::mixes::build("random", 300, 2).unwrap();
        let plan = flotilla_core::scheduler::schedule(&s, &c, &Default::default());
        let launched = launch_plan(&s, &plan, &c, 5, &mut Rng::new(1)).unwrap();
        assert_eq!(launched.nodes.len(), plan.node_claims.len());
        assert_eq!(launched.pending_pods.len(), plan.unschedulable.len());
        for claim in &plan.node_claims {
            let node = launched
                .nodes
                .iter()
                .find(|n| n.name == claim.name)
                .unwrap();
            let on: Vec<String> = node.pods.iter().map(|p| p.key()).collect();
            assert_eq!(on, claim.pods);
            assert_eq!(node.labels[labels::ZONE], claim.price.zone);
        }
        let price = cluster_price(&c, &launched).unwrap();
        let want = plan.summary.total_hourly_price;
        assert!((price - want).abs() < 1e-3 * want, "{price} vs {want}");
        // A pod the plan places twice is refused.
        let mut twice = plan.clone();
        let first = twice.node_claims[0].pods[0].clone();
        twice.node_claims[1].pods.push(first);
        assert!(launch_plan(&s, &twice, &c, 5, &mut Rng::new(1)).is_err());
    }
}
