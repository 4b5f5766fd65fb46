//! Karpenter's consolidation test suite, ported as tables.
//!
//! Source: kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/consolidation_test.go` (every `It` and
//! every `DescribeTable`). Each case is what a Karpenter user would see:
//! Kubernetes documents (Nodes with their bound Pods, NodeClaims, NodePools
//! `karpenter.sh/v1` with their disruption settings, PodDisruptionBudgets)
//! written as YAML, read by `flotilla_input::load` and decided by
//! `flotilla_core::disruption::disrupt` on the embedded us-west-2 catalog at
//! a fixed `now`. The conventions are those of `karpenter_topology.rs` and
//! `karpenter_provisioning.rs`:
//!
//! * `test-zone-1/2/3` are `us-west-2a/b/c`; every NodePool that does not
//!   restrict zones itself is given `topology.kubernetes.io/zone In
//!   [us-west-2a, us-west-2b, us-west-2c]`;
//! * the fake cloud provider's assorted instance types are real EC2 types:
//!   the `c5`, `m5` and `r5` families, every size ([`TYPES`]; the NodePool
//!   allows exactly those, as the fake provider offers exactly its own), at
//!   their real prices. `leastExpensiveInstance` / `mostExpensiveInstance`
//!   (and their spot twins) are computed from the catalog exactly as the Go
//!   suite computes them from the fake provider: the cheapest and dearest of
//!   those types by their cheapest on-demand (spot) offering in the three
//!   zones, in that offering's zone. A Go test that sets its own prices or
//!   types (`cloudProvider.InstanceTypes = ...`) is given a catalog whose
//!   offerings are edited the same way (real types, the Go test's prices);
//! * `test.NodeClaimAndNode` is a Node and its NodeClaim (`status.nodeName`,
//!   the `Consolidatable` condition as the Go test sets it), the Node with
//!   the NodeClaim's labels and `status.allocatable` (32 CPU, 100 pods, as
//!   the Go tests give it) and Ready and initialized
//!   (`ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated`);
//! * `test.Pod` is a pod with no requests owned by a ReplicaSet, bound to
//!   its node (`ExpectManualBinding`);
//! * Karpenter takes one command per reconcile and the Go test then counts
//!   the NodeClaims left; Flotilla takes every decision of the moment in one
//!   run. "`cmds` has 1, N NodeClaims are left" is checked as: these nodes
//!   removed (no others), this many replacements; "no command" as: no
//!   decision, and where Flotilla reports it, the node listed as blocked
//!   with the budget / PDB / annotation;
//! * a replacement's `Spec.Requirements` on the instance type is the
//!   decision's replacement `instanceTypes`.
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never
//! failed. Every other case must behave as in Karpenter.
//!
//! Tally: the Go file has 73 `It`s and 17 `DescribeTable`s (37 entries).
//! 56 `It`s are ported: 54 behave as in Karpenter, 2 are known
//! differences (41 and 15 when first ported: 13 were fixed in
//! `flotilla_core::disruption`, the static NodePool by the emptiness and
//! drift port's `spec.replicas`); 17 are in [`NOT_PORTED`]. 11 tables
//! (22 entries) are ported: 18 entries behave as in Karpenter, 4 are known
//! differences (2 fixed in core); 6 tables (15 entries) are in
//! [`NOT_PORTED`]. The known differences left are listed above
//! [`NOT_PORTED`].
//!
//! `cargo test -p flotilla-input --test karpenter_disruption_consolidation -- --nocapture`
//! prints each case's status.

mod karpenter_disruption_common;

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::disruption::{disrupt, DisruptOptions, Disruptions};
use flotilla_core::model::DisruptionReason;
use flotilla_core::scheduler::MinValuesPolicy;
use karpenter_disruption_common::{
    catalog, check_not_ported, load_docs, map, node_class, node_class_ref, pdb_in, req, run_cases,
    ts, Empty, Np, Underutilized, CT, DO_NOT_DISRUPT as DND, HOST, ITYPE, NODEPOOL, NOW, OD, SPOT,
    Z1, Z2, Z3, ZONE, ZONES,
};
use serde_json::{json, Value};

const FILE: &str = "consolidation_test.go";

/// The known difference of the "can merge 3 nodes into 1" cases.
const MERGE: &str = "Flotilla's delete pass runs before the replace passes (docs/disruption.md, Underutilized 1-3): the two nodes whose pods fit on the third are removed now and the third, which received pods, is replaced by a cheaper one in the next run; Karpenter's multi-node consolidation takes the largest prefix of candidates (all three) onto one new NodeClaim at once";

// ---------------------------------------------------------------------------
// Vocabulary (beside the common one: zones, labels, `NOW` the moment of
// every decision, the Go suite's fake clock)

/// The fake provider's assorted instance types, as real EC2 types.
const TYPES: &[&str] = &[
    "c5.large",
    "c5.xlarge",
    "c5.2xlarge",
    "c5.4xlarge",
    "c5.9xlarge",
    "c5.12xlarge",
    "c5.18xlarge",
    "c5.24xlarge",
    "m5.large",
    "m5.xlarge",
    "m5.2xlarge",
    "m5.4xlarge",
    "m5.8xlarge",
    "m5.12xlarge",
    "m5.16xlarge",
    "m5.24xlarge",
    "r5.large",
    "r5.xlarge",
    "r5.2xlarge",
    "r5.4xlarge",
    "r5.8xlarge",
    "r5.12xlarge",
    "r5.16xlarge",
    "r5.24xlarge",
];

// ---------------------------------------------------------------------------
// The fake provider's least and most expensive instances

#[derive(Clone, Debug)]
struct Offer {
    ty: String,
    zone: String,
    price: f64,
}

/// Every type of [`TYPES`] with its cheapest offering of `ct` in the three
/// zones, cheapest first (the Go suite's `onDemandInstances` /
/// `spotInstances`, sorted by `Offerings.Cheapest().Price`).
fn by_price_in(cat: &Catalog, types: &[&str], ct: CapacityType) -> Vec<Offer> {
    let mut v: Vec<Offer> = types
        .iter()
        .filter_map(|t| {
            let e = cat.get(t)?;
            e.offerings
                .iter()
                .filter(|o| o.capacity_type == ct && ZONES.contains(&o.zone.as_str()))
                .min_by(|a, b| a.price.total_cmp(&b.price).then(a.zone.cmp(&b.zone)))
                .map(|o| Offer {
                    ty: t.to_string(),
                    zone: o.zone.clone(),
                    price: o.price,
                })
        })
        .collect();
    v.sort_by(|a, b| a.price.total_cmp(&b.price).then(a.ty.cmp(&b.ty)));
    v
}

fn by_price(ct: CapacityType) -> Vec<Offer> {
    by_price_in(catalog(), TYPES, ct)
}

fn least() -> Offer {
    by_price(CapacityType::OnDemand)[0].clone()
}
fn most() -> Offer {
    by_price(CapacityType::OnDemand).last().unwrap().clone()
}
fn most_spot() -> Offer {
    by_price(CapacityType::Spot).last().unwrap().clone()
}
fn least_spot() -> Offer {
    by_price(CapacityType::Spot)[0].clone()
}

/// The cheapest on-demand type in `zone` (`leastExpensiveInstanceWithZone`)
/// and the dearest (`mostExpensiveInstanceWithZone`).
fn in_zone(zone: &str, dearest: bool) -> String {
    let mut v: Vec<(f64, &str)> = TYPES
        .iter()
        .filter_map(|t| {
            catalog()
                .get(t)?
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand && o.zone == zone)
                .map(|o| (o.price, *t))
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    if dearest {
        v.last().unwrap().1.to_string()
    } else {
        v[0].1.to_string()
    }
}

// ---------------------------------------------------------------------------
// Documents

/// `test.NodePool(...)` with the suite's BeforeEach disruption settings:
/// the fake provider's types, the three zones, both capacity types, one
/// budget of `nodes: 100%`; no limits, no zones added to requirements
/// that name none.
fn np(name: &str) -> Np {
    karpenter_disruption_common::np(name)
        .reqs(vec![
            req(ITYPE, "In", TYPES),
            req(ZONE, "In", &ZONES),
            req(CT, "In", &[SPOT, OD]),
        ])
        .budget("100%")
        .policy("WhenEmptyOrUnderutilized")
        .consolidate_after("0s")
        .without_limits()
        .without_default_zones()
}

/// The suite's NodePool where the Go test relies on the least expensive
/// instance having no cheaper replacement: the fake provider prices spot
/// as on-demand, EC2 does not, so the NodePool is on-demand only.
fn od_np() -> Np {
    np("default").reqs(vec![
        req(ITYPE, "In", TYPES),
        req(ZONE, "In", &ZONES),
        req(CT, "In", &[OD]),
    ])
}

/// `test.NodeClaimAndNode(...)`: a Node and its NodeClaim.
#[derive(Clone)]
struct N {
    name: String,
    pool: String,
    ty: Option<String>,
    ct: Option<&'static str>,
    zone: Option<String>,
    cpu: &'static str,
    memory: Option<&'static str>,
    pods: &'static str,
    extra_labels: Vec<(String, String)>,
    annotations: Vec<(&'static str, &'static str)>,
    /// The NodeClaim's `Consolidatable` condition: since when (None: not set).
    consolidatable: Option<i64>,
    claim: bool,
    claim_tgp: Option<&'static str>,
    /// Not initialized (`karpenter.sh/initialized` not set; the
    /// registration taint left on).
    uninitialized: bool,
    created: i64,
}

fn node(name: &str, o: &Offer, ct: &'static str) -> N {
    N {
        name: name.into(),
        pool: "default".into(),
        ty: Some(o.ty.clone()),
        ct: Some(ct),
        zone: Some(o.zone.clone()),
        cpu: "32",
        memory: None,
        pods: "100",
        extra_labels: vec![],
        annotations: vec![],
        consolidatable: Some(NOW - 3600),
        claim: true,
        claim_tgp: None,
        uninitialized: false,
        created: NOW - 86_400,
    }
}

/// The suite's `node` / `nodeClaim`: the most expensive on-demand instance.
fn od_node(name: &str) -> N {
    node(name, &most(), OD)
}

/// The suite's `spotNode` / `spotNodeClaim`.
fn spot_node(name: &str) -> N {
    node(name, &most_spot(), SPOT)
}

impl N {
    fn pool(mut self, p: &str) -> Self {
        self.pool = p.into();
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.extra_labels.push((k.into(), v.into()));
        self
    }
    fn annotate(mut self, k: &'static str, v: &'static str) -> Self {
        self.annotations.push((k, v));
        self
    }
    fn ty(mut self, t: &str, ct: &'static str, zone: &str) -> Self {
        self.ty = Some(t.into());
        self.ct = Some(ct);
        self.zone = Some(zone.into());
        self
    }
    fn docs(&self) -> Vec<Value> {
        let mut labels: BTreeMap<String, String> = BTreeMap::new();
        labels.insert(NODEPOOL.into(), self.pool.clone());
        if let Some(t) = &self.ty {
            labels.insert(ITYPE.into(), t.clone());
        }
        if let Some(c) = self.ct {
            labels.insert(CT.into(), c.into());
        }
        if let Some(z) = &self.zone {
            labels.insert(ZONE.into(), z.clone());
        }
        for (k, v) in &self.extra_labels {
            labels.insert(k.clone(), v.clone());
        }
        let claim_labels = labels.clone();
        labels.insert(HOST.into(), self.name.clone());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("karpenter.sh/registered".into(), "true".into());
        if !self.uninitialized {
            labels.insert("karpenter.sh/initialized".into(), "true".into());
        }
        let provider_id = format!(
            "aws:///{}/i-{:017x}",
            self.zone.as_deref().unwrap_or(Z1),
            self.name
                .bytes()
                .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
                & 0xffff_ffff_ffff
        );
        let mut alloc = json!({ "cpu": self.cpu, "pods": self.pods });
        if let Some(m) = self.memory {
            alloc["memory"] = json!(m);
        }
        let mut n = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "creationTimestamp": ts(self.created),
            },
            "spec": { "providerID": provider_id },
            "status": {
                "allocatable": alloc,
                "capacity": alloc,
                "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": ts(self.created) }],
            },
        });
        if !self.annotations.is_empty() {
            n["metadata"]["annotations"] = map(&self.annotations);
        }
        if self.uninitialized {
            n["spec"]["taints"] =
                json!([{ "key": "karpenter.sh/unregistered", "effect": "NoExecute" }]);
        }
        let mut out = vec![n];
        if self.claim {
            let mut conditions = vec![
                json!({ "type": "Launched", "status": "True", "lastTransitionTime": ts(self.created) }),
            ];
            if !self.uninitialized {
                conditions.push(json!({ "type": "Initialized", "status": "True", "lastTransitionTime": ts(self.created) }));
            }
            if let Some(s) = self.consolidatable {
                conditions.push(json!({ "type": "Consolidatable", "status": "True", "lastTransitionTime": ts(s) }));
            }
            let mut c = json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": format!("{}-claim", self.name),
                    "labels": claim_labels,
                    "creationTimestamp": ts(self.created),
                },
                "spec": {
                    "nodeClassRef": node_class_ref(),
                    "requirements": [],
                },
                "status": {
                    "nodeName": self.name,
                    "providerID": provider_id,
                    "allocatable": alloc,
                    "conditions": conditions,
                },
            });
            if !self.annotations.is_empty() {
                c["metadata"]["annotations"] = map(&self.annotations);
            }
            if let Some(t) = self.claim_tgp {
                c["spec"]["terminationGracePeriod"] = json!(t);
            }
            out.push(c);
        }
        out
    }
}

/// `test.Pod(...)`: bound to `node` (None: pending).
#[derive(Clone)]
struct P {
    labels: Vec<(&'static str, &'static str)>,
    cpu: Option<&'static str>,
    memory: Option<&'static str>,
    annotations: Vec<(&'static str, &'static str)>,
    owned: bool,
    node_selector: Vec<(&'static str, &'static str)>,
    anti: Vec<Value>,
    anti_pref: Vec<Value>,
    node_prefs: Vec<Value>,
    tsc: Vec<Value>,
    started: i64,
    conditions: Option<Value>,
    ns: &'static str,
}

/// A pod of the ReplicaSet with the suite's `labels` (`app: test`).
fn p() -> P {
    P {
        labels: vec![("app", "test")],
        cpu: None,
        memory: None,
        annotations: vec![],
        owned: true,
        node_selector: vec![],
        anti: vec![],
        anti_pref: vec![],
        node_prefs: vec![],
        tsc: vec![],
        started: NOW - 86_400,
        conditions: None,
        ns: "default",
    }
}

impl P {
    fn cpu(mut self, c: &'static str) -> Self {
        self.cpu = Some(c);
        self
    }
    fn memory(mut self, m: &'static str) -> Self {
        self.memory = Some(m);
        self
    }
    fn no_labels(mut self) -> Self {
        self.labels.clear();
        self
    }
    fn annotate(mut self, k: &'static str, v: &'static str) -> Self {
        self.annotations.push((k, v));
        self
    }
    fn unowned(mut self) -> Self {
        self.owned = false;
        self
    }
    fn selector(mut self, k: &'static str, v: &'static str) -> Self {
        self.node_selector.push((k, v));
        self
    }
    fn started(mut self, t: i64) -> Self {
        self.started = t;
        self
    }
    fn build(&self, name: &str, node: Option<&str>) -> Value {
        let mut meta = json!({
            "name": name,
            "namespace": self.ns,
            "creationTimestamp": ts(self.started),
        });
        if !self.labels.is_empty() {
            meta["labels"] = map(&self.labels);
        }
        if !self.annotations.is_empty() {
            meta["annotations"] = map(&self.annotations);
        }
        if self.owned {
            meta["ownerReferences"] = json!([{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "00000000-0000-4000-8000-000000000001", "controller": true,
            }]);
        }
        let mut container = json!({ "name": "app", "image": "pause" });
        let mut requests = serde_json::Map::new();
        if let Some(c) = self.cpu {
            requests.insert("cpu".into(), json!(c));
        }
        if let Some(m) = self.memory {
            requests.insert("memory".into(), json!(m));
        }
        if !requests.is_empty() {
            container["resources"] = json!({ "requests": requests });
        }
        let mut spec = json!({ "containers": [container] });
        if !self.node_selector.is_empty() {
            spec["nodeSelector"] = map(&self.node_selector);
        }
        let mut affinity = serde_json::Map::new();
        let mut anti = serde_json::Map::new();
        if !self.anti.is_empty() {
            anti.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                json!(self.anti),
            );
        }
        if !self.anti_pref.is_empty() {
            anti.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                json!(self.anti_pref),
            );
        }
        if !anti.is_empty() {
            affinity.insert("podAntiAffinity".into(), Value::Object(anti));
        }
        if !self.node_prefs.is_empty() {
            affinity.insert(
                "nodeAffinity".into(),
                json!({ "preferredDuringSchedulingIgnoredDuringExecution": [{ "weight": 1, "preference": { "matchExpressions": self.node_prefs } }] }),
            );
        }
        if !affinity.is_empty() {
            spec["affinity"] = Value::Object(affinity);
        }
        if !self.tsc.is_empty() {
            spec["topologySpreadConstraints"] = json!(self.tsc);
        }
        let mut pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec });
        if let Some(n) = node {
            pod["spec"]["nodeName"] = json!(n);
            pod["status"] = json!({ "phase": "Running", "startTime": ts(self.started) });
        } else {
            pod["status"] = json!({ "phase": "Pending" });
        }
        if let Some(c) = &self.conditions {
            pod["status"]["conditions"] = c.clone();
        }
        pod
    }
}

/// `n` pods named `{prefix}-{i}`, bound to the nodes given, in order.
fn bound(prefix: &str, t: &P, nodes: &[&str]) -> Vec<Value> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| t.build(&format!("{prefix}-{i}"), Some(n)))
        .collect()
}

/// `test.PodDisruptionBudget`: selecting `app: test`, with its status.
fn pdb(ns: &str, max_unavailable: i64, allowed: Option<u32>) -> Value {
    pdb_in(ns, "pdb", &[("app", "test")], max_unavailable, allowed)
}

fn nodes_docs(ns: &[N]) -> Vec<Value> {
    ns.iter().flat_map(|n| n.docs()).collect()
}

// ---------------------------------------------------------------------------
// Checks on the decisions

type Check = Box<dyn Fn(&Disruptions) -> Result<(), String>>;

fn all_removed(d: &Disruptions) -> BTreeSet<String> {
    d.decisions
        .iter()
        .flat_map(|x| x.nodes.iter().cloned())
        .collect()
}

fn replacements_of(d: &Disruptions) -> Vec<&flotilla_core::plan::NodeClaimPlan> {
    d.decisions
        .iter()
        .flat_map(|x| x.replacements.iter())
        .collect()
}

/// Exactly these nodes are removed (by all decisions together).
fn removed(names: &[&str]) -> Check {
    let want: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    Box::new(move |d| {
        let got = all_removed(d);
        if got == want {
            Ok(())
        } else {
            Err(format!("removed {got:?}, want {want:?}"))
        }
    })
}

/// Nothing is disrupted ("`cmds` has 0", every NodeClaim left).
fn nothing() -> Check {
    Box::new(|d| {
        if d.decisions.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} decisions, want none: removed {:?}",
                d.decisions.len(),
                all_removed(d)
            ))
        }
    })
}

/// `node` is in no Empty or Underutilized decision. (A node without its
/// instance type, capacity type or zone label is also Drifted, as
/// Karpenter's drift controller finds it — `InstanceTypeNotFound`,
/// `RequirementsDrifted` — which the Go suite does not run.)
fn not_consolidated(node: &'static str) -> Check {
    Box::new(move |d| {
        match d.decisions.iter().find(|x| {
            matches!(x.reason, Empty | Underutilized) && x.nodes.iter().any(|n| n == node)
        }) {
            None => Ok(()),
            Some(x) => Err(format!("{node} consolidated: {:?}", x.reason)),
        }
    })
}

/// This many nodes removed, whichever.
fn removed_count(n: usize) -> Check {
    Box::new(move |d| {
        let got = all_removed(d);
        if got.len() == n {
            Ok(())
        } else {
            Err(format!("removed {} nodes {got:?}, want {n}", got.len()))
        }
    })
}

/// This many replacement NodeClaims are launched.
fn replacements(n: usize) -> Check {
    Box::new(move |d| {
        let got = replacements_of(d).len();
        if got == n {
            Ok(())
        } else {
            Err(format!("{got} replacements, want {n}"))
        }
    })
}

/// Every decision has this reason.
fn reason(r: DisruptionReason) -> Check {
    Box::new(move |d| match d.decisions.iter().find(|x| x.reason != r) {
        None => Ok(()),
        Some(x) => Err(format!(
            "decision {:?} is {:?}, want {r:?}",
            x.nodes, x.reason
        )),
    })
}

/// Every replacement's instance types exclude (or include) `ty`.
fn types_have(ty: String, want: bool) -> Check {
    Box::new(move |d| {
        for r in replacements_of(d) {
            if r.instance_types.contains(&ty) != want {
                return Err(format!(
                    "replacement {} lists {:?}; {ty} {}",
                    r.name,
                    r.instance_types,
                    if want { "missing" } else { "listed" }
                ));
            }
        }
        Ok(())
    })
}

/// Karpenter's `Offerings.WorstLaunchPrice`: of type `t`'s offerings in
/// the replacement's zones and capacity types, spot first, else
/// on-demand, the dearest.
fn worst_launch_price(r: &flotilla_core::plan::NodeClaimPlan, t: &str) -> f64 {
    let e = catalog().get(t).expect("type");
    for ct in [CapacityType::Spot, CapacityType::OnDemand] {
        if !r.capacity_types.contains(&ct) {
            continue;
        }
        let worst = e
            .offerings
            .iter()
            .filter(|o| o.capacity_type == ct && (r.zones.is_empty() || r.zones.contains(&o.zone)))
            .map(|o| o.price)
            .max_by(f64::total_cmp);
        if let Some(p) = worst {
            return p;
        }
    }
    f64::MAX
}

/// "the new nodeclaim does not request the most expensive instance type":
/// the Go test's fake provider prices every offering of a type alike, so
/// its most expensive type is the one type not cheaper than the node. On
/// EC2 prices the rule it checks (`RemoveInstanceTypeOptionsByPriceAndMinValues`)
/// reads: every instance type of the replacement launches cheaper than the
/// node, wherever and however it launches (its worst launch price).
fn cheaper_than_node(node: Offer) -> Check {
    Box::new(move |d| {
        let rs = replacements_of(d);
        if rs.is_empty() {
            return Err("no replacement".into());
        }
        for r in rs {
            for t in r.instance_types.iter() {
                let w = worst_launch_price(r, t);
                if w >= node.price {
                    return Err(format!(
                        "replacement {} lists {t} (worst launch price {w}), not cheaper than the node's {} ({})",
                        r.name, node.ty, node.price
                    ));
                }
            }
        }
        Ok(())
    })
}

/// Every replacement lists exactly these types (any order).
fn types_exactly(tys: Vec<String>) -> Check {
    let want: BTreeSet<String> = tys.into_iter().collect();
    Box::new(move |d| {
        for r in replacements_of(d) {
            let got: BTreeSet<String> = r.instance_types.iter().cloned().collect();
            if got != want {
                return Err(format!(
                    "replacement {} lists {got:?}, want {want:?}",
                    r.name
                ));
            }
        }
        Ok(())
    })
}

/// Every replacement is in this zone.
fn replacement_zone(z: &'static str) -> Check {
    Box::new(move |d| {
        for r in replacements_of(d) {
            if r.zones != vec![z.to_string()] {
                return Err(format!(
                    "replacement {} zones {:?}, want [{z}]",
                    r.name, r.zones
                ));
            }
        }
        Ok(())
    })
}

/// `node` is listed as blocked with a reason containing `what`.
fn blocked(node: &'static str, what: &'static str) -> Check {
    Box::new(move |d| match d.blocked.iter().find(|b| b.node == node) {
        Some(b) if b.reason.contains(what) => Ok(()),
        Some(b) => Err(format!("{node} blocked by {:?}, want {what:?}", b.reason)),
        None => Err(format!("{node} not blocked, want {what:?}")),
    })
}

// ---------------------------------------------------------------------------
// Cases

struct Case {
    /// `Context / It` (or `DescribeTable / Entry`), verbatim.
    name: String,
    docs: Vec<Value>,
    /// (now, checks): the Go test's reconciles, each at its clock.
    steps: Vec<(i64, Vec<Check>)>,
    catalog: Option<Catalog>,
    min_values_policy: MinValuesPolicy,
    known_difference: Option<&'static str>,
}

fn case(name: &str, docs: Vec<Vec<Value>>, checks: Vec<Check>) -> Case {
    Case {
        name: name.into(),
        docs: docs.into_iter().flatten().collect(),
        steps: vec![(NOW, checks)],
        catalog: None,
        min_values_policy: MinValuesPolicy::Strict,
        known_difference: None,
    }
}

impl Case {
    fn differs(mut self, what: &'static str) -> Self {
        self.known_difference = Some(what);
        self
    }
    fn catalog(mut self, c: Catalog) -> Self {
        self.catalog = Some(c);
        self
    }
    fn then(mut self, at: i64, checks: Vec<Check>) -> Self {
        self.steps.push((at, checks));
        self
    }
}

fn run_case(c: &Case) -> Result<(), String> {
    let mut docs = vec![node_class()];
    docs.extend(c.docs.iter().cloned());
    let state = load_docs("case.yaml", &docs)?;
    let cat = c.catalog.as_ref().unwrap_or_else(|| catalog());
    for (i, (now, checks)) in c.steps.iter().enumerate() {
        let mut opts = DisruptOptions {
            now: *now,
            ..DisruptOptions::default()
        };
        opts.scheduler.min_values_policy = c.min_values_policy;
        let d = disrupt(&state, cat, &opts);
        let errs: Vec<String> = checks.iter().filter_map(|ch| ch(&d).err()).collect();
        if !errs.is_empty() {
            return Err(format!(
                "at step {} ({}): {}\n{}",
                i + 1,
                ts(*now),
                errs.join("; "),
                describe(&d)
            ));
        }
    }
    Ok(())
}

fn describe(d: &Disruptions) -> String {
    let mut out = String::new();
    for x in &d.decisions {
        out.push_str(&format!(
            "  decision {:?} {:?} {:.4} -> {:.4}\n",
            x.reason, x.nodes, x.price.before, x.price.after
        ));
        for r in &x.replacements {
            out.push_str(&format!(
                "    replacement {} {:?} {:?} {:?}\n",
                r.name, r.capacity_types, r.zones, r.instance_types
            ));
        }
    }
    for b in &d.blocked {
        out.push_str(&format!("  blocked {}: {}\n", b.node, b.reason));
    }
    for w in &d.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    out
}

/// Runs a Context's table: every case without a known difference must
/// pass; the known differences are run and reported.
fn run_table(context: &str, cases: Vec<Case>) {
    let results = cases
        .iter()
        .map(|c| (c.name.as_str(), c.known_difference, run_case(c)));
    run_cases(
        &format!("{FILE}: Consolidation / {context} / "),
        &format!("{context} cases"),
        results,
    );
}

/// `Entry("if the candidate is on-demand node", false)` and the spot one.
fn entries(table: &str, f: impl Fn(bool) -> Case) -> Vec<Case> {
    [false, true]
        .into_iter()
        .map(|spot| {
            let mut c = f(spot);
            c.name = format!(
                "{table} / if the candidate is {} node",
                if spot { "spot" } else { "on-demand" }
            );
            c
        })
        .collect()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

/// A catalog holding only `types` (in the three zones), each type's
/// offerings replaced by `offers(type)`.
fn edited_catalog(
    types: &[&str],
    offers: impl Fn(&str) -> Vec<(CapacityType, &'static str, f64)>,
) -> Catalog {
    let mut c = catalog().clone();
    c.entries.retain(|e| types.contains(&e.info.name.as_str()));
    for e in &mut c.entries {
        let template = e.offerings[0].clone();
        e.offerings = offers(&e.info.name)
            .into_iter()
            .map(|(ct, zone, price)| {
                let mut o = template.clone();
                o.capacity_type = ct;
                o.zone = zone.into();
                o.price = price;
                o.reservation = None;
                o
            })
            .collect();
    }
    c
}

// ---------------------------------------------------------------------------
// Describe("Consolidation") / Context("Events"): the decisions behind them

#[test]
fn events() {
    let cases = vec![
        case(
            "should not fire an event for ConsolidationDisabled when the NodePool has consolidation set to WhenEmptyOrUnderutilized",
            vec![vec![np("default").doc()], od_node("node").docs(), bound("pod", &p(), &["node"])],
            vec![removed(&["node"]), replacements(1), reason(Underutilized)],
        ),
        case(
            "should fire an event for ConsolidationDisabled when the NodePool has consolidation set to WhenEmpty",
            vec![
                vec![np("default").when_empty().doc()],
                od_node("node").docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![nothing()],
        ),
        case(
            "should fire an event for ConsolidationDisabled when the NodePool has consolidateAfter set to 'Never'",
            vec![
                vec![np("default").consolidate_after("Never").doc()],
                od_node("node").docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![nothing()],
        ),
        case(
            "should fire an event when a candidate does not have a resolvable instance type",
            vec![
                vec![np("default").doc()],
                N { ty: None, ..od_node("node") }.docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![not_consolidated("node")],
        ),
        case(
            "should fire an event when a candidate does not have the capacity type label",
            vec![
                vec![np("default").doc()],
                N { ct: None, ..od_node("node") }.docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![not_consolidated("node")],
        ),
        case(
            "should fire an event when a candidate does not have the zone label",
            vec![
                vec![np("default").doc()],
                N { zone: None, ..od_node("node") }.docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![not_consolidated("node")],
        ),
    ];
    run_table("Events", cases);
}

// ---------------------------------------------------------------------------
// Context("Budgets")

/// The Budgets context's 10 nodes (most expensive on-demand, 32 CPU,
/// 100 pods) of `pool`.
fn ten(pool: &str, prefix: &str, n: usize) -> Vec<N> {
    names(prefix, n)
        .into_iter()
        .map(|x| od_node(&x).pool(pool))
        .collect()
}

#[test]
fn budgets() {
    let nodes = ten("default", "node", 10);
    let node_names = names("node", 10);
    let all = strs(&node_names);
    let ten_pools = |budget: &str| -> Vec<Value> {
        (0..10)
            .map(|i| np(&format!("pool-{i}")).budget(budget).doc())
            .collect()
    };
    let thirty: Vec<N> = (0..10)
        .flat_map(|i| ten(&format!("pool-{i}"), &format!("p{i}-node"), 3))
        .collect();
    let with_pods = |cpu: &'static str| -> Vec<Value> { bound("pod", &p().cpu(cpu), &all) };
    let cases = vec![
        case(
            "should only allow 3 empty nodes to be disrupted",
            vec![vec![np("default").budget("30%").doc()], nodes_docs(&nodes)],
            vec![removed_count(3), replacements(0), reason(Empty)],
        ),
        case(
            "should allow all empty nodes to be disrupted",
            vec![vec![np("default").budget("100%").doc()], nodes_docs(&nodes)],
            vec![removed(&all), reason(Empty)],
        ),
        case(
            "should allow no empty nodes to be disrupted",
            vec![vec![np("default").budget("0%").doc()], nodes_docs(&nodes)],
            vec![nothing(), blocked("node-0", "disruption budget")],
        ),
        case(
            "should only allow 3 nodes to be deleted in multi node consolidation delete",
            vec![vec![np("default").budget("30%").doc()], nodes_docs(&nodes), with_pods("100m")],
            vec![removed_count(3), replacements(0)],
        ),
        case(
            "should only allow 3 nodes to be deleted in single node consolidation delete",
            vec![vec![np("default").budget("30%").doc()], nodes_docs(&nodes), with_pods("15")],
            vec![removed_count(3), replacements(0)],
        ),
        case(
            "should allow 2 nodes from each nodePool to be deleted",
            vec![vec![np("default").doc()], ten_pools("50%"), nodes_docs(&thirty)],
            vec![removed_count(20), Box::new(|d| {
                for i in 0..10 {
                    let n = all_removed(d).iter().filter(|x| x.starts_with(&format!("p{i}-"))).count();
                    if n != 2 {
                        return Err(format!("pool-{i}: {n} removed, want 2"));
                    }
                }
                Ok(())
            })],
        ),
        case(
            "should allow all nodes from each nodePool to be deleted",
            vec![vec![np("default").doc()], ten_pools("100%"), nodes_docs(&thirty)],
            vec![removed_count(30)],
        ),
        case(
            "should allow no nodes from each nodePool to be deleted",
            vec![vec![np("default").doc()], ten_pools("0%"), nodes_docs(&thirty)],
            vec![nothing(), blocked("p0-node-0", "disruption budget")],
        ),
        // The "should not mark ... consolidated" Its compute the method's
        // commands directly (no command) and then ask IsConsolidated()
        // (controller caching, no counterpart): ported as the commands.
        case(
            "should not mark empty node consolidated if the candidates can't be disrupted due to budgets with one nodepool",
            vec![vec![np("default").budget("0%").doc()], nodes_docs(&nodes)],
            vec![nothing(), blocked("node-0", "disruption budget")],
        ),
        case(
            "should not mark empty node consolidated if all candidates can't be disrupted due to budgets with many nodepools",
            vec![vec![np("default").doc()], ten_pools("0%"), nodes_docs(&thirty)],
            vec![nothing(), blocked("p9-node-2", "disruption budget")],
        ),
        case(
            "should not mark multi node consolidated if the candidates can't be disrupted due to budgets with one nodepool",
            vec![vec![np("default").budget("0%").doc()], nodes_docs(&nodes), with_pods("100m")],
            vec![nothing(), blocked("node-0", "disruption budget")],
        ),
        case(
            "should not mark multi node consolidated if all candidates can't be disrupted due to budgets with many nodepools",
            vec![
                vec![np("default").doc()],
                ten_pools("0%"),
                nodes_docs(&thirty),
                bound("pod", &p().cpu("100m"), &strs(&thirty.iter().map(|n| n.name.clone()).collect::<Vec<_>>())),
            ],
            vec![nothing(), blocked("p0-node-0", "disruption budget")],
        ),
        case(
            "should not mark single node consolidated if the candidates can't be disrupted due to budgets with one nodepool",
            vec![vec![np("default").budget("0%").doc()], nodes_docs(&nodes), with_pods("15")],
            vec![nothing(), blocked("node-0", "disruption budget")],
        ),
        case(
            "should not mark single node consolidated if all candidates can't be disrupted due to budgets with many nodepools",
            vec![
                vec![np("default").doc()],
                ten_pools("0%"),
                nodes_docs(&thirty),
                bound("pod", &p().cpu("15"), &strs(&thirty.iter().map(|n| n.name.clone()).collect::<Vec<_>>())),
            ],
            vec![nothing(), blocked("p0-node-0", "disruption budget")],
        ),
    ];
    run_table("Budgets", cases);
}

// ---------------------------------------------------------------------------
// Context("Replace")

/// 18 spot types priced 1.0, 1.1, ... (the 17th 0.001), as the
/// "spot to spot consolidation should ..." Its set them: the types, and a
/// catalog with only those offerings (spot, us-west-2a).
fn eighteen_spot() -> (Vec<&'static str>, Catalog) {
    let types: Vec<&'static str> = TYPES[..18].to_vec();
    let prices: BTreeMap<&str, f64> = types
        .iter()
        .enumerate()
        .map(|(i, t)| (*t, if i == 16 { 0.001 } else { 1.0 + i as f64 * 0.1 }))
        .collect();
    let cat = edited_catalog(&types, |t| vec![(CapacityType::Spot, Z1, prices[t])]);
    (types, cat)
}

#[test]
fn replace() {
    let mut cases = Vec::new();
    let pick = |spot: bool, name: &str| if spot { spot_node(name) } else { od_node(name) };
    cases.extend(entries("can replace node", |spot| {
        case(
            "",
            vec![
                vec![np("default").doc()],
                pick(spot, "node").docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![
                removed(&["node"]),
                replacements(1),
                cheaper_than_node(if spot { most_spot() } else { most() }),
            ],
        )
    }));
    // 5 types only, the first offered on spot at $0.001: one spot type
    // cheaper than the node, 15 needed.
    {
        let types = &TYPES[..5];
        let cat = edited_catalog(types, |t| {
            if t == types[0] {
                vec![(CapacityType::Spot, Z1, 0.001)]
            } else {
                vec![
                    (CapacityType::OnDemand, Z1, 1.0),
                    (CapacityType::Spot, Z1, 0.5),
                ]
            }
        });
        cases.push(
            case(
                "cannot replace spot with spot if less than minimum InstanceTypes flexibility",
                vec![
                    vec![np("default").doc()],
                    node("node", &Offer { ty: types[4].into(), zone: Z1.into(), price: 0.5 }, SPOT).docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![nothing(), blocked("node", "spot-to-spot consolidation needs at least 15 cheaper instance types; 1 found")],
            )
            .catalog(cat),
        );
    }
    {
        // 20 types by price, the cheapest at $0.001 spot; the node is the
        // second cheapest spot type: not 15 cheaper ones.
        let sp = by_price(CapacityType::Spot);
        let second = sp[1].clone();
        cases.push(case(
            "cannot replace spot with spot if it is part of the 15 cheapest instance types.",
            vec![
                vec![np("default").doc()],
                node("node", &second, SPOT).docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![nothing()],
        ));
    }
    for (name, min_values, want) in [
        ("spot to spot consolidation should order the instance types by price before enforcing minimum flexibility.", None, 15usize),
        ("spot to spot consolidation should consider the max of default and minimum number of instanceTypeOptions from minValues in requirement for truncation if minimum number of instanceTypeOptions from minValues in requirement is greater than 15.", Some(16), 16),
        ("spot to spot consolidation should consider the default for truncation if minimum number of instanceTypeOptions from minValues in requirement is less than 15.", Some(10), 15),
    ] {
        let (types, cat) = eighteen_spot();
        let mut pool = np("default").reqs(vec![
            req(ITYPE, "In", &types),
            req(ZONE, "In", &ZONES),
            req(CT, "In", &[SPOT, OD]),
        ]);
        if let Some(m) = min_values {
            pool = pool.req(json!({ "key": ITYPE, "operator": "Exists", "minValues": m }));
        }
        // cheapest first: [16] at 0.001, then [0], [1], ...
        let mut order: Vec<String> = vec![types[16].to_string()];
        order.extend(types[..16].iter().map(|t| t.to_string()));
        cases.push(
            case(
                name,
                vec![
                    vec![pool.doc()],
                    node("node", &Offer { ty: types[17].into(), zone: Z1.into(), price: 2.7 }, SPOT).docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![
                    removed(&["node"]),
                    replacements(1),
                    types_have(types[17].to_string(), false),
                    types_have(types[16].to_string(), true),
                    types_exactly(order[..want].to_vec()),
                ],
            )
            .catalog(cat),
        );
    }
    {
        // current-on-demand ($0.5) and other-on-demand ($0.4), 5 CPU each,
        // test-zone-1a; minValues 2 on the instance type; 3 nodes of the
        // current type (4 CPU allocatable), pods of 2 CPU: one on each of
        // the first two, two on the third.
        let types = ["c5.xlarge", "c5.large"];
        let cat = edited_catalog(&types, |t| {
            vec![(
                CapacityType::OnDemand,
                Z1,
                if t == "c5.xlarge" { 0.5 } else { 0.4 },
            )]
        });
        let pool = np("default").reqs(vec![
            json!({ "key": ITYPE, "operator": "Exists", "minValues": 2 }),
            req(CT, "In", &[OD]),
            req(ZONE, "In", &ZONES),
        ]);
        let cur = Offer {
            ty: "c5.xlarge".into(),
            zone: Z1.into(),
            price: 0.5,
        };
        let ns: Vec<N> = (0..3)
            .map(|i| N {
                cpu: "4",
                ..node(&format!("node-{i}"), &cur, OD)
            })
            .collect();
        cases.push(
            case(
                "should handle failing filterOutSameInstanceType correctly (without a panic) when minValues isn't satisfied",
                vec![
                    vec![pool.doc()],
                    nodes_docs(&ns),
                    bound("pod", &p().cpu("2"), &["node-0", "node-1", "node-2", "node-2"]),
                ],
                vec![removed_count(1), replacements(0), Box::new(|d| {
                    if all_removed(d).contains("node-2") {
                        Err("node-2 (two pods) removed; want one of the first two".into())
                    } else {
                        Ok(())
                    }
                })],
            )
            .catalog(cat),
        );
    }
    cases.extend(entries(
        "Consolidation should fail if filterByPrice breaks the minimum requirement from the NodePools.",
        |spot| {
            let ct = if spot { CapacityType::Spot } else { CapacityType::OnDemand };
            let list: Vec<Offer> = by_price(ct).into_iter().take(18).collect();
            let types: Vec<&str> = list.iter().map(|o| o.ty.as_str()).collect();
            let pool = np("default").reqs(vec![
                req(ITYPE, "In", &types),
                json!({ "key": ITYPE, "operator": "Exists", "minValues": 16 }),
                req(ZONE, "In", &ZONES),
                // The fake provider prices spot as on-demand: the node is
                // the 16th cheapest either way. On EC2 prices an
                // on-demand node has far more cheaper spot types, so the
                // on-demand entry keeps to on-demand.
                if spot { req(CT, "In", &[SPOT, OD]) } else { req(CT, "In", &[OD]) },
            ]);
            case(
                "",
                vec![
                    vec![pool.doc()],
                    node("node", &list[15], if spot { SPOT } else { OD }).docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![nothing()],
            )
        },
    ));
    cases.extend(entries(
        "can replace nodes if another nodePool returns no instance types",
        |spot| {
            case(
                "",
                vec![
                    vec![
                        np("default").doc(),
                        np("other")
                            .reqs(vec![req(ITYPE, "In", &["no-such-type"])])
                            .doc(),
                    ],
                    pick(spot, "node").docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![
                    removed(&["node"]),
                    replacements(1),
                    cheaper_than_node(if spot { most_spot() } else { most() }),
                ],
            )
        },
    ));
    cases.extend(entries("can replace nodes, considers PDB", |spot| {
        case(
            "",
            vec![
                vec![np("default").doc(), pdb("default", 0, Some(0))],
                pick(spot, "node").docs(),
                bound("pod", &p(), &["node", "node", "node"]),
            ],
            vec![
                nothing(),
                blocked("node", "PodDisruptionBudget default/pdb"),
            ],
        )
    }));
    cases.extend(entries("can replace nodes, considers PDB policy", |spot| {
        let mut pd = pdb("default", 0, Some(0));
        pd["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        let unhealthy = P {
            conditions: Some(json!([{ "type": "Ready", "status": "False" }])),
            ..p()
        };
        case(
            "",
            vec![
                vec![np("default").doc(), pd],
                pick(spot, "node").docs(),
                bound("pod", &unhealthy, &["node", "node", "node"]),
            ],
            vec![removed(&["node"]), replacements(1)],
        )
        .differs("a PDB's allowance is its status.disruptionsAllowed (or computed with every selected pod healthy); pod readiness and spec.unhealthyPodEvictionPolicy: AlwaysAllow (unhealthy pods may always be evicted) are not read")
    }));
    cases.extend(entries(
        "can replace nodes, PDB namespace must match",
        |spot| {
            case(
                "",
                vec![
                    vec![np("default").doc(), pdb("other-namespace", 0, Some(0))],
                    pick(spot, "node").docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![removed(&["node"]), replacements(1)],
            )
        },
    ));
    cases.extend(entries(
        "can replace nodes, considers karpenter.sh/do-not-disrupt set to true on nodes",
        |spot| {
            case(
                "",
                vec![
                    vec![np("default").doc()],
                    pick(spot, "node").docs(),
                    N {
                        cpu: "5",
                        ..pick(spot, "annotated").annotate(DND, "true")
                    }
                    .docs(),
                    bound("pod", &p().cpu("2"), &["node", "node", "annotated"]),
                ],
                vec![
                    removed(&["node"]),
                    replacements(1),
                    blocked("annotated", DND),
                ],
            )
        },
    ));
    cases.extend(entries(
        "can replace nodes, considers karpenter.sh/do-not-disrupt set to true on pods",
        |spot| {
            let mut pods = bound("pod", &p().cpu("2"), &["node", "node"]);
            pods.push(
                p().cpu("2")
                    .annotate(DND, "true")
                    .build("pod-2", Some("node2")),
            );
            case(
                "",
                vec![
                    vec![np("default").doc()],
                    pick(spot, "node").docs(),
                    N {
                        cpu: "5",
                        ..pick(spot, "node2")
                    }
                    .docs(),
                    pods,
                ],
                vec![removed(&["node"]), replacements(1), blocked("node2", DND)],
            )
        },
    ));
    {
        // current-on-demand: on-demand test-zone-1a $0.5 (unavailable);
        // potential-spot-replacement: spot 1a $1.0, 1b $0.2, 1c $0.4.
        let cat = edited_catalog(&["c5.xlarge", "c5.large"], |t| {
            if t == "c5.xlarge" {
                vec![(CapacityType::OnDemand, Z1, 0.5)]
            } else {
                vec![
                    (CapacityType::Spot, Z1, 1.0),
                    (CapacityType::Spot, Z2, 0.2),
                    (CapacityType::Spot, Z3, 0.4),
                ]
            }
        });
        let cur = Offer {
            ty: "c5.xlarge".into(),
            zone: Z1.into(),
            price: 0.5,
        };
        cases.push(
            case(
                "won't replace node if any spot replacement is more expensive",
                vec![
                    vec![np("default").doc()],
                    node("node", &cur, OD).docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![nothing()],
            )
            .catalog(cat),
        );
        // on-demand-replacement: on-demand 1a $0.6, 1b $0.6, spot 1b
        // $0.2, 1c $0.3; the NodePool requires on-demand.
        let cat = edited_catalog(&["c5.xlarge", "c5.large"], |t| {
            if t == "c5.xlarge" {
                vec![(CapacityType::OnDemand, Z1, 0.5)]
            } else {
                vec![
                    (CapacityType::OnDemand, Z1, 0.6),
                    (CapacityType::OnDemand, Z2, 0.6),
                    (CapacityType::Spot, Z2, 0.2),
                    (CapacityType::Spot, Z3, 0.3),
                ]
            }
        });
        cases.push(
            case(
                "won't replace on-demand node if on-demand replacement is more expensive",
                vec![
                    vec![np("default").req(req(CT, "In", &[OD])).doc()],
                    node("node", &cur, OD).docs(),
                    bound("pod", &p(), &["node"]),
                ],
                vec![nothing()],
            )
            .catalog(cat),
        );
    }
    run_table("Replace", cases);
}

// ---------------------------------------------------------------------------
// Context("Delete")

/// The Delete context's two nodes: the least expensive instance, 32 CPU.
fn two() -> Vec<N> {
    vec![node("node-0", &least(), OD), node("node-1", &least(), OD)]
}

/// pods[0], pods[1] on node-0, pods[2] on node-1.
const SPREAD: [&str; 3] = ["node-0", "node-0", "node-1"];

#[test]
fn delete() {
    let base = || vec![od_np().doc()];
    let mut cases = vec![
        case(
            "can delete nodes",
            vec![base(), nodes_docs(&two()), bound("pod", &p(), &SPREAD)],
            vec![removed(&["node-1"]), replacements(0), reason(Underutilized)],
        ),
        case(
            "can delete nodes if another nodePool has no node template",
            vec![
                base(),
                vec![np("no-node-class").without_node_class().doc()],
                nodes_docs(&two()),
                bound("pod", &p(), &SPREAD),
            ],
            vec![removed(&["node-1"]), replacements(0)],
        ),
        case(
            "can delete nodes, when non-Karpenter capacity can fit pods",
            vec![
                base(),
                vec![json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": { "name": "unmanaged", "labels": { HOST: "unmanaged" } },
                    "spec": { "providerID": "aws:///us-west-2a/i-0000000000000ffff" },
                    "status": { "allocatable": { "cpu": "32", "pods": "100" } },
                })],
                nodes_docs(&two()[..1]),
                bound("pod", &p(), &["node-0", "node-0", "node-0"]),
            ],
            vec![removed(&["node-0"]), replacements(0)],
        ),
        {
            let mut pods = bound("pod", &p().no_labels(), &["node-0", "node-0"]);
            pods.push(p().build("pod-2", Some("node-1")));
            case(
                "can delete nodes, considers PDB",
                vec![
                    base(),
                    vec![pdb("default", 0, Some(0))],
                    nodes_docs(&two()),
                    pods,
                ],
                vec![
                    removed(&["node-0"]),
                    replacements(0),
                    blocked("node-1", "PodDisruptionBudget default/pdb"),
                ],
            )
        },
        {
            let ns = vec![
                node("node-0", &least(), OD),
                node("node-1", &least(), OD).annotate(DND, "true"),
            ];
            case(
                "can delete nodes, considers karpenter.sh/do-not-disrupt set to true on nodes",
                vec![base(), nodes_docs(&ns), bound("pod", &p(), &SPREAD)],
                vec![
                    removed(&["node-0"]),
                    replacements(0),
                    blocked("node-1", DND),
                ],
            )
        },
        {
            let mut pods = bound("pod", &p(), &["node-0", "node-0"]);
            pods.push(p().annotate(DND, "true").build("pod-2", Some("node-1")));
            case(
                "can delete nodes, considers karpenter.sh/do-not-disrupt set to true on pods",
                vec![base(), nodes_docs(&two()), pods],
                vec![
                    removed(&["node-0"]),
                    replacements(0),
                    blocked("node-1", DND),
                ],
            )
        },
        {
            let ns: Vec<N> = two()
                .into_iter()
                .map(|n| N {
                    claim_tgp: Some("300s"),
                    ..n
                })
                .collect();
            case(
                "does not consolidate nodes with karpenter.sh/do-not-disrupt set to true on pods when the NodePool's TerminationGracePeriod is not nil",
                vec![base(), nodes_docs(&ns), bound("pod", &p().annotate(DND, "true"), &SPREAD)],
                vec![nothing(), blocked("node-0", DND), blocked("node-1", DND)],
            )
        },
        {
            let ns: Vec<N> = two()
                .into_iter()
                .map(|n| N {
                    claim_tgp: Some("300s"),
                    ..n
                })
                .collect();
            case(
                "does not consolidate nodes with pods with blocking PDBs when the NodePool's TerminationGracePeriod is not nil",
                vec![base(), vec![pdb("default", 0, None)], nodes_docs(&ns), bound("pod", &p(), &SPREAD)],
                vec![nothing(), blocked("node-0", "PodDisruptionBudget default/pdb")],
            )
        },
        {
            let mut pods = bound("pod", &p(), &["node-0", "node-0"]);
            pods.push(
                p().annotate(DND, "2m")
                    .started(NOW)
                    .build("pod-2", Some("node-1")),
            );
            case(
                "does not consolidate nodes with pods that have a duration-based do-not-disrupt annotation that is still active",
                vec![base(), nodes_docs(&two()), pods],
                vec![removed(&["node-0"]), replacements(0), blocked("node-1", DND)],
            )
        },
        case(
            "can consolidate nodes after duration-based do-not-disrupt annotation expires",
            vec![
                base(),
                nodes_docs(&two()),
                bound("pod", &p().annotate(DND, "2m").started(NOW), &SPREAD),
            ],
            vec![nothing()],
        )
        .then(NOW + 180, vec![removed_count(1), replacements(0)]),
        {
            let mut pods = bound("pod", &p(), &["node-0", "node-0"]);
            pods.push(
                p().annotate(DND, "invalid-format")
                    .build("pod-2", Some("node-1")),
            );
            case(
                "can delete nodes, considers invalid do-not-disrupt annotation format as not blocking",
                vec![base(), nodes_docs(&two()), pods],
                vec![removed(&["node-1"]), replacements(0)],
            )
        },
        {
            let mut pods = bound("pod", &p(), &["node-0", "node-0"]);
            pods.push(p().unowned().build("pod-2", Some("node-1")));
            case(
                "can delete nodes, evicts pods without an ownerRef",
                vec![base(), nodes_docs(&two()), pods],
                vec![removed(&["node-1"]), replacements(0)],
            )
        },
        {
            // node-0 (two pods) is initialized; node-1 is not.
            let ns = vec![
                node("node-0", &least(), OD),
                N {
                    uninitialized: true,
                    ..node("node-1", &least(), OD)
                },
            ];
            case(
                "won't delete node if it would require pods to schedule on an uninitialized node",
                vec![base(), nodes_docs(&ns), bound("pod", &p(), &SPREAD)],
                vec![nothing()],
            )
        },
        {
            // consolidateAfter 1m; node-1 (the source) has been
            // Consolidatable for an hour, node-0 (the only destination) had
            // a pod start 30s ago and has no Consolidatable condition yet.
            let ns = vec![
                N {
                    consolidatable: None,
                    ..node("node-0", &least(), OD)
                },
                node("node-1", &least(), OD),
            ];
            let mut pods = bound("pod", &p(), &["node-0"]);
            pods.push(p().started(NOW - 30).build("pod-1", Some("node-0")));
            pods.push(p().build("pod-2", Some("node-1")));
            case(
                "should not consolidate pods onto a destination node that is under its consolidateAfter window",
                vec![vec![od_np().consolidate_after("1m").doc()], nodes_docs(&ns), pods],
                vec![nothing()],
            )
            .then(NOW + 120, vec![removed_count(1), replacements(0)])
        },
        case(
            "should consolidate pods onto a destination node with consolidateAfter set to Never",
            vec![
                base(),
                vec![np("destination").consolidate_after("Never").doc()],
                nodes_docs(&[
                    node("node-0", &least(), OD),
                    N {
                        consolidatable: Some(NOW),
                        ..node("destination", &least(), OD).pool("destination")
                    },
                ]),
                bound("pod", &p(), &["node-0"]),
            ],
            vec![removed(&["node-0"]), replacements(0)],
        ),
        case(
            "should replace a node with a cheaper one even when consolidateAfter has not expired",
            vec![
                vec![np("default").consolidate_after("1m").doc()],
                od_node("node").docs(),
                bound("pod", &p(), &["node"]),
            ],
            vec![removed(&["node"]), replacements(1)],
        ),
        {
            // default-instance-type (3Gi) and small-instance-type (1Gi):
            // c5.large (4GiB) and t3.micro-like small: m5 and c5 with
            // memory as the Go test has it. 100 nodes of 3Gi with a 2Gi pod
            // each, one of them initialized; one more node (1Gi, small type)
            // with a 1Gi pod that fits only on the initialized one.
            let types = ["c5.large", "c5.xlarge"];
            let cat = edited_catalog(&types, |t| {
                vec![(
                    CapacityType::OnDemand,
                    Z1,
                    if t == "c5.large" { 0.1 } else { 0.2 },
                )]
            });
            let def = Offer {
                ty: "c5.xlarge".into(),
                zone: Z1.into(),
                price: 0.2,
            };
            let small = Offer {
                ty: "c5.large".into(),
                zone: Z1.into(),
                price: 0.1,
            };
            let elem = 37;
            let mut ns: Vec<N> = (0..100)
                .map(|i| N {
                    memory: Some("3Gi"),
                    uninitialized: i != elem,
                    ..node(&format!("node-{i:03}"), &def, OD)
                })
                .collect();
            ns.push(N {
                memory: Some("1Gi"),
                ..node("consolidatable", &small, OD)
            });
            let all: Vec<String> = (0..100).map(|i| format!("node-{i:03}")).collect();
            let mut pods = bound("pod", &p().memory("2Gi"), &strs(&all));
            pods.push(
                p().memory("1Gi")
                    .build("consolidatable-pod", Some("consolidatable")),
            );
            case(
                "should consider initialized nodes before uninitialized nodes",
                vec![
                    vec![np("default")
                        .reqs(vec![req(ITYPE, "In", &types), req(ZONE, "In", &ZONES)])
                        .doc()],
                    nodes_docs(&ns),
                    pods,
                ],
                vec![
                    removed(&["consolidatable"]),
                    replacements(0),
                    Box::new(|d| {
                        match d
                            .decisions
                            .iter()
                            .flat_map(|x| &x.moves)
                            .find(|m| m.pod == "default/consolidatable-pod")
                        {
                            Some(m) if m.to == "node-037" => Ok(()),
                            m => Err(format!("consolidatable-pod moves to {m:?}, want node-037")),
                        }
                    }),
                ],
            )
            .catalog(cat)
        },
        {
            let mut docs = vec![base(), nodes_docs(&two()), bound("pod", &p(), &SPREAD)];
            docs.push(vec![p()
                .selector("non-existent", "node-label")
                .build("pending", None)]);
            case("can delete nodes with a permanently pending pod", docs, vec![removed(&["node-1"]), replacements(0)])
                .differs("documented: while pods are pending, Underutilized consolidation waits (docs/disruption.md); Karpenter simulates with the pending pods and goes ahead when none of the moved pods would be left pending")
        },
        {
            let ns = vec![
                node("node-0", &least(), OD).label("foo", "1"),
                node("node-1", &least(), OD).label("foo", "2"),
            ];
            let mut pods = bound("pod", &p().selector("foo", "1"), &["node-0", "node-0"]);
            pods.push(p().selector("foo", "2").build("pod-2", Some("node-1")));
            case(
                "won't delete nodes if it would make a non-pending pod go pending",
                vec![base(), nodes_docs(&ns), pods],
                vec![nothing()],
            )
        },
        case(
            "can delete nodes while an invalid node pool exists",
            vec![
                base(),
                vec![json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                    "metadata": { "name": "bad-nodepool" },
                    "spec": { "template": { "spec": {
                        "requirements": [],
                        "nodeClassRef": { "group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "non-existent" },
                    }}},
                })],
                nodes_docs(&two()),
                bound("pod", &p(), &SPREAD),
            ],
            vec![removed(&["node-1"]), replacements(0)],
        ),
    ];
    let _ = &mut cases;
    run_table("Delete", cases);
}

// ---------------------------------------------------------------------------
// Context("Multi-NodeClaim")

#[test]
fn multi_node_claim() {
    let three = |spot: bool| -> Vec<N> {
        (0..3)
            .map(|i| {
                if spot {
                    spot_node(&format!("node-{i}"))
                } else {
                    od_node(&format!("node-{i}"))
                }
            })
            .collect()
    };
    let mut cases = Vec::new();
    cases.extend(entries("can merge 3 nodes into 1", |spot| {
        case(
            "",
            vec![
                vec![np("default").doc()],
                nodes_docs(&three(spot)),
                bound("pod", &p(), &["node-0", "node-1", "node-2"]),
            ],
            vec![removed(&["node-0", "node-1", "node-2"]), replacements(1)],
        )
        .differs(MERGE)
    }));
    {
        let mut ns = three(false);
        ns[2] = spot_node("node-2");
        cases.push(
            case(
                "can merge 3 nodes into 1 if the candidates have both spot and on-demand",
                vec![
                    vec![np("default").doc()],
                    nodes_docs(&ns),
                    bound("pod", &p(), &["node-0", "node-1", "node-2"]),
                ],
                vec![removed(&["node-0", "node-1", "node-2"]), replacements(1)],
            )
            .differs(MERGE),
        );
    }
    // The Go table swaps the entries (`lo.Ternary(spotToSpot, nodeClaims,
    // spotNodeClaims)`): the "on-demand" entry uses the spot nodes on the
    // least expensive spot instance, and the other way round.
    cases.extend(entries(
        "won't merge 2 nodes into 1 of the same type",
        |spot| {
            let (o, ct) = if spot {
                (least(), OD)
            } else {
                (least_spot(), SPOT)
            };
            let ns = vec![node("node-0", &o, ct), node("node-1", &o, ct)];
            case(
                "",
                vec![
                    vec![np("default").doc()],
                    nodes_docs(&ns),
                    bound("pod", &p(), &["node-0", "node-1", "node-1"]),
                ],
                vec![removed(&["node-0"]), replacements(0)],
            )
        },
    ));
    cases.extend(entries(
        "should consolidate multiple empty nodes via multi-nodeclaim consolidation",
        |spot| {
            case(
                "",
                vec![vec![np("default").doc()], nodes_docs(&three(!spot))],
                vec![removed(&["node-0", "node-1", "node-2"]), replacements(0)],
            )
        },
    ));
    run_table("Multi-NodeClaim", cases);
}

// ---------------------------------------------------------------------------
// Contexts "Node Lifetime Consideration", "Topology Consideration",
// "MinValuesPolicy", "Preferences", "Static NodePool"

#[test]
fn other_contexts() {
    let mut cases = Vec::new();
    // Node Lifetime Consideration: expireAfter 3s (not yet reached: the
    // nodes are 2s old in Go; here they expire in the future).
    {
        let ns: Vec<N> = (0..2)
            .map(|i| N {
                created: NOW - 2 + i,
                ..node(&format!("node-{i}"), &least(), OD)
            })
            .collect();
        let mut pool = od_np().doc();
        pool["spec"]["template"]["spec"]["expireAfter"] = json!("3s");
        cases.push(case(
            "Node Lifetime Consideration / should consolidate the node with best savings ratio first",
            vec![vec![pool], nodes_docs(&ns), bound("pod", &p(), &SPREAD)],
            vec![removed(&["node-1"]), replacements(0)],
        ));
    }
    // Topology Consideration: node-0 the cheapest in test-zone-1, node-1
    // the dearest in test-zone-2, node-2 the cheapest in test-zone-3.
    {
        let topo = |z2_cheap: bool| -> Vec<N> {
            vec![
                node("node-0", &least(), OD).ty(&in_zone(Z1, false), OD, Z1),
                node("node-1", &least(), OD).ty(&in_zone(Z2, !z2_cheap), OD, Z2),
                node("node-2", &least(), OD).ty(&in_zone(Z3, false), OD, Z3),
            ]
        };
        let spread = P {
            labels: vec![("app", "test-zonal-spread")],
            tsc: vec![json!({
                "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": { "matchLabels": { "app": "test-zonal-spread" } },
            })],
            ..p()
        };
        cases.push(case(
            "Topology Consideration / can replace node maintaining zonal topology spread",
            vec![
                vec![od_np().doc()],
                nodes_docs(&topo(false)),
                bound("pod", &spread, &["node-0", "node-1", "node-2"]),
            ],
            vec![removed(&["node-1"]), replacements(1), replacement_zone(Z2)],
        ));
        let anti = P {
            anti: vec![
                json!({ "labelSelector": { "matchLabels": { "app": "test" } }, "topologyKey": HOST }),
            ],
            ..p()
        };
        cases.push(case(
            "Topology Consideration / won't delete node if it would violate pod anti-affinity",
            vec![
                vec![od_np().doc()],
                nodes_docs(&topo(true)),
                bound("pod", &anti, &["node-0", "node-1", "node-2"]),
            ],
            vec![nothing()],
        ));
    }
    // Preferences (PreferencePolicy=Ignore).
    {
        let anti_pref = P {
            anti_pref: vec![json!({ "weight": 1, "podAffinityTerm": {
                "topologyKey": HOST, "labelSelector": { "matchLabels": { "app": "foo" } },
            }})],
            ..p()
        };
        cases.push(case(
            "Preferences / should consolidate a node through deletion when ignoring preferences",
            vec![
                vec![od_np().doc()],
                nodes_docs(&two()),
                bound("pod", &anti_pref, &SPREAD),
            ],
            vec![removed(&["node-1"]), replacements(0)],
        ));
        let pref = P {
            node_prefs: vec![req(ITYPE, "In", &[&most().ty])],
            ..p()
        };
        cases.push(case(
            "Preferences / should consolidate a node through replacement when ignoring preferences",
            vec![
                vec![np("default").doc()],
                od_node("node").docs(),
                bound("pod", &pref, &["node"]),
            ],
            vec![
                removed(&["node"]),
                replacements(1),
                cheaper_than_node(most()),
            ],
        ));
    }
    // MinValuesPolicy: instance type In [all] minValues 3, while the
    // provider has only the least and the most expensive types.
    {
        let types = [least().ty, most().ty];
        let tys: Vec<&str> = types.iter().map(|s| s.as_str()).collect();
        let cat = {
            let mut c = catalog().clone();
            c.entries.retain(|e| tys.contains(&e.info.name.as_str()));
            c
        };
        let pool = np("min-values")
            .reqs(vec![
                json!({ "key": ITYPE, "operator": "In", "values": TYPES, "minValues": 3 }),
                req(ZONE, "In", &ZONES),
            ])
            .weight(100);
        let mut c = case(
            "MinValuesPolicy / should not consolidate a node by relaxing min values when policy is set to BestEffort",
            vec![vec![pool.doc()], od_node("node").pool("min-values").docs(), bound("pod", &p(), &["node"])],
            vec![nothing()],
        )
        .catalog(cat);
        c.min_values_policy = MinValuesPolicy::BestEffort;
        cases.push(c);
    }
    // Static NodePool: spec.replicas 2, nodes of 10 CPU.
    {
        let pool = np("static").replicas(2);
        let ns: Vec<N> = (0..2)
            .map(|i| N {
                cpu: "10",
                pods: "2",
                ..od_node(&format!("node-{i}")).pool("static")
            })
            .collect();
        cases.push(case(
            "Static NodePool / should not consolidate static NodePool nodes",
            vec![vec![pool.doc()], nodes_docs(&ns)],
            vec![nothing()],
        ));
    }
    run_table("Other contexts", cases);
}

#[test]
fn not_ported_cases_name_a_reason() {
    check_not_ported(NOT_PORTED, FILE, "cases");
}

// ---------------------------------------------------------------------------
// Known differences left (see each case's `differs`):
// * "can delete nodes with a permanently pending pod": while pods are
//   pending, Underutilized consolidation waits (documented design);
// * "can merge 3 nodes into 1" (2 entries, and the It with both capacity
//   types): the delete pass runs first, the third node is replaced in the
//   next run (documented pass order);
// * "can replace nodes, considers PDB policy" (2 entries): pod readiness
//   and unhealthyPodEvictionPolicy are not read.
//
// The `It`s and `DescribeTable`s not ported, with the reason
// (file: Describe / Context / It).

const NOT_PORTED: &[(&str, &str)] = &[
    (
        "consolidation_test.go: Consolidation / Metrics / should correctly report eligible nodes",
        "the karpenter_voluntary_disruption_eligible_nodes metric; Flotilla has no metrics of its own (blocked lists the candidates it holds back)",
    ),
    (
        "consolidation_test.go: Consolidation / Metrics / should correctly report invalidated commands for emptiness disruption (DescribeTable, 3 entries)",
        "metrics of commands invalidated by the validator after the consolidateAfter wait; Flotilla decides once on the documents, there is no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / Metrics / should correctly report invalidated commands for multi node disruption (DescribeTable, 3 entries)",
        "as above: validator invalidation metrics, no counterpart",
    ),
    (
        "consolidation_test.go: Consolidation / Metrics / should correctly report invalidated commands for single node disruption (DescribeTable, 3 entries)",
        "as above: validator invalidation metrics, no counterpart",
    ),
    (
        "consolidation_test.go: Consolidation / Replace / cannot replace spot with spot if the spotToSpotConsolidation is disabled",
        "the SpotToSpotConsolidation feature gate; Flotilla has no such gate (spot-to-spot is always on, under Karpenter's 15-type flexibility rule, ported above)",
    ),
    (
        "consolidation_test.go: Consolidation / Delete / does not delete nodes with pod churn, deletes nodes without pod churn",
        "the emptiness validator re-checks candidates after the wait and a test validator binds a pod meanwhile; Flotilla has no validation step (a later run sees the new pod)",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should wait for the node TTL for non-empty nodes before consolidating",
        "the validation wait (consolidationTTL, 15s/30s) on the fake clock; controller mechanics",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not consolidate if the action picks different instance types after the node TTL wait",
        "the validation after the wait re-simulates with changed instance types; no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not consolidate if the action becomes invalid during the node TTL wait",
        "cluster changes during the validation wait; no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not replace node if a pod schedules with karpenter.sh/do-not-disrupt set to true during the TTL wait",
        "cluster changes during the validation wait; no validation step (a do-not-disrupt pod blocks its node: Delete cases above)",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not replace node if a pod schedules with a blocking PDB during the TTL wait",
        "cluster changes during the validation wait; no validation step (blocking PDBs: Replace and Delete cases above)",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not delete node if pods schedule with karpenter.sh/do-not-disrupt set to true during the TTL wait",
        "cluster changes during the validation wait; no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / TTL / should not delete node if pods schedule with a blocking PDB during the TTL wait",
        "cluster changes during the validation wait; no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / Multi-NodeClaim / should wait for the node TTL for non-empty nodes before consolidating (multi-node) (DescribeTable, 2 entries)",
        "the validation wait of multi-node consolidation on the fake clock; controller mechanics",
    ),
    (
        "consolidation_test.go: Consolidation / Multi-NodeClaim / should continue to single nodeclaim consolidation when multi-nodeclaim consolidation fails validation after the node ttl (DescribeTable, 2 entries)",
        "pods bound during the validation wait invalidate the multi-node command; no validation step",
    ),
    (
        "consolidation_test.go: Consolidation / Parallelization / should not schedule an additional node when receiving pending pods while consolidating",
        "the provisioner scheduling a pending pod onto a replacement of a command in flight (cluster-state nominations); the pipeline's in-flight decisions, not the disruption function",
    ),
    (
        "consolidation_test.go: Consolidation / Parallelization / should not consolidate a node that is launched for pods on a deleting node",
        "the nomination cache and its 10s expiry (cluster.MarkForDeletion, time.Sleep); DisruptOptions::nominated is the pipeline's counterpart, covered by the core tests",
    ),
    (
        "consolidation_test.go: Consolidation / Reserved Capacity / can consolidate from one reserved offering to another",
        "needs capacity reservations (describe-capacity-reservations documents, reservation ids as offerings) not ported in this pass; reserved capacity consolidation is covered by the core tests (docs/disruption.md, Reserved capacity)",
    ),
    (
        "consolidation_test.go: Consolidation / Reserved Capacity / can consolidate into reserved capacity for the same instance pool (DescribeTable, 2 entries)",
        "as above: capacity reservations not ported in this pass",
    ),
    (
        "consolidation_test.go: Consolidation / Buffer Pods / should not empty-consolidate a node with only buffer pods",
        "capacity buffer pods (cluster.UpdateBufferPodCounts, virtual pods of the CapacityBuffer feature); no counterpart",
    ),
    (
        "consolidation_test.go: Consolidation / Buffer Pods / should allow consolidation of a node with real pods and buffer pods to a cheaper instance",
        "capacity buffer pods; no counterpart",
    ),
    (
        "consolidation_test.go: Consolidation / Buffer Pods / should skip buffer-only nodes in single-node consolidation but protect via emptiness",
        "capacity buffer pods; no counterpart",
    ),
    (
        "consolidation_test.go: Consolidation / Buffer Pods / should consolidate a buffer node once buffer pods are cleared",
        "capacity buffer pods; no counterpart",
    ),
];
