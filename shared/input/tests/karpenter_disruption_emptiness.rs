//! Karpenter's emptiness disruption tests, ported as tables.
//!
//! Source: kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/emptiness_test.go`, every `It`. Each case is
//! the Go test's cluster written as Kubernetes documents (a NodePool
//! `karpenter.sh/v1` with its disruption settings, Nodes with their
//! NodeClaims and conditions, bound and pending Pods, DaemonSets), read by
//! `flotilla_input::load` and decided by `flotilla_core::disruption::disrupt`
//! at a fixed time on the embedded us-west-2 catalog. The conventions
//! (fake instance types, zones, clock, reconciles) are in
//! `karpenter_disruption_common/mod.rs`.
//!
//! The Go `BeforeEach`: a NodePool with `consolidateAfter: 0s`,
//! `consolidationPolicy: WhenEmpty` and one budget of `100%`; two nodes on
//! the fake `leastExpensiveSpotInstance`, 32 CPU and 100 pods allocatable,
//! their NodeClaims `Consolidatable`.
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never
//! failed. Every other case must behave as in Karpenter.
//!
//! Tally: `emptiness_test.go` has 26 `It`s: 19 are ported (17 behave as in
//! Karpenter, 11 when first ported; 2 known differences, both a NodeClaim
//! without `Consolidatable=True`: see [`WITHOUT_CONDITION`]), 7 are in
//! [`NOT_PORTED`] (the validator's wait, and the six "Buffer pod
//! protection" cases: Flotilla has no virtual buffer pods). The six fixed
//! on the way: Karpenter's requirement drift does not hold spot nodes to
//! the on-demand default of a NodePool without a capacity-type requirement
//! (2 cases), a `Consolidatable=True` NodeClaim is consolidatable at once
//! (2), a terminating StatefulSet pod keeps its node from being empty, a
//! static NodePool's nodes are no emptiness candidates.
//!
//! `cargo test -p flotilla-input --test karpenter_disruption_emptiness -- --nocapture`
//! prints each case's status.

mod karpenter_disruption_common;

use karpenter_disruption_common::*;
use serde_json::Value;

const FILE: &str = "emptiness_test.go";

/// The `BeforeEach` NodePool.
fn pool() -> Np {
    np("default")
        .consolidate_after("0s")
        .when_empty()
        .budgets(vec![budget("100%")])
}

/// The `BeforeEach` nodes (`node`, `node2`), `Consolidatable`.
fn node() -> Nc {
    nc("node", "default").cheap_spot().consolidatable()
}
fn node2() -> Nc {
    nc("node2", "default").cheap_spot().consolidatable()
}

/// `numNodes` (10) consolidatable nodes on the fake `leastExpensiveInstance`.
fn ten(pool: &str) -> Vec<Nc> {
    ncs("node", 10, |n| n.cheap().consolidatable(), pool)
}

/// Ten NodePools (`np-0` .. `np-9`) of three consolidatable nodes each.
fn ten_pools(budget_nodes: &str) -> (Vec<Np>, Vec<Nc>) {
    let mut pools = vec![pool()];
    let mut nodes = vec![];
    for i in 0..10 {
        let name = format!("np-{i}");
        pools.push(
            np(&name)
                .consolidate_after("30s")
                .when_empty()
                .budgets(vec![budget(budget_nodes)]),
        );
        nodes.extend(ncs(
            &format!("{name}-node"),
            3,
            |n| n.cheap().consolidatable(),
            &name,
        ));
    }
    (pools, nodes)
}

/// Both cases where the NodeClaim has no `Consolidatable=True` condition.
const WITHOUT_CONDITION: &str = "Flotilla reads a NodeClaim's Consolidatable=True condition as the time the node became consolidatable, and without it measures consolidateAfter from the documents' times (docs/disruption.md, \"Time\"): the condition is not required, since NodeClaims written by hand, by Flotilla's pipeline, or left by a Karpenter no longer running carry none or a stale one. With consolidateAfter 0s the empty node goes";

fn d(nps: &[Np], nodes: &[Nc], pods: &[P]) -> Vec<Value> {
    docs(nps, nodes, pods, vec![])
}

#[test]
fn emptiness() {
    let (pools_50, nodes_50) = ten_pools("50%");
    let (pools_100, nodes_100) = ten_pools("100%");
    let cases = vec![
        steps(
            "Emptiness / Metrics / should correctly report eligible nodes",
            vec![
                // a node with a pod is no emptiness candidate
                Step {
                    docs: d(&[pool()], &[node()], &[pod("p").on("node")]),
                    now: NOW,
                    checks: vec![Check::Nothing],
                },
                // the pod deleted: the node is empty, emptiness takes it
                Step {
                    docs: d(&[pool()], &[node()], &[]),
                    now: NOW,
                    checks: vec![Check::First(Empty, names(&["node"]), Some(0))],
                },
            ],
        ),
        one(
            "Emptiness / Budgets / should allow all empty nodes to be disrupted",
            d(&[pool().budgets(vec![budget("100%")])], &ten("default"), &[]),
            vec![Check::RemovedCount(10, Empty), Check::Decisions(1)],
        ),
        one(
            "Emptiness / Budgets / should allow no empty nodes to be disrupted",
            d(&[pool().budgets(vec![budget("0%")])], &ten("default"), &[]),
            vec![
                Check::Nothing,
                Check::RestBlocked("node-", "disruption budget"),
            ],
        ),
        one(
            "Emptiness / Budgets / should only allow 3 empty nodes to be disrupted",
            d(&[pool().budgets(vec![budget("30%")])], &ten("default"), &[]),
            vec![
                Check::RemovedCount(3, Empty),
                Check::Decisions(1),
                Check::RestBlocked("node-", "disruption budget"),
            ],
        ),
        one(
            "Emptiness / Budgets / should allow 2 nodes from each nodePool to be deleted",
            d(&pools_50, &nodes_50, &[]),
            vec![
                Check::RemovedCount(20, Empty),
                Check::PerPool("np-", 2),
                Check::RestBlocked("np-", "disruption budget"),
            ],
        ),
        one(
            "Emptiness / Budgets / should allow all nodes from each nodePool to be deleted",
            d(&pools_100, &nodes_100, &[]),
            vec![Check::RemovedCount(30, Empty), Check::PerPool("np-", 3)],
        ),
        one(
            "Emptiness / Emptiness / can delete empty nodes",
            d(&[pool()], &[node()], &[]),
            vec![Check::First(Empty, names(&["node"]), Some(0))],
        ),
        // Karpenter's `NewMethods` runs Emptiness before Drift (the Go
        // suite's `NewMethodsWithNopValidator` puts Drift first and checks
        // a "drifted" metric): the node goes, without a replacement.
        one(
            "Emptiness / Emptiness / can delete empty and drifted nodes",
            d(&[pool()], &[node().drifted()], &[]),
            vec![Check::Removed("node", vec![Empty, Drifted], Some(0))],
        ),
        one(
            "Emptiness / Emptiness / should ignore nodes without the consolidatable status condition",
            d(&[pool()], &[nc("node", "default").cheap_spot()], &[]),
            vec![Check::Nothing],
        )
        .differs(WITHOUT_CONDITION),
        one(
            "Emptiness / Emptiness / should ignore nodes with the karpenter.sh/do-not-disrupt annotation",
            d(&[pool()], &[node().annotate(DO_NOT_DISRUPT, "true")], &[]),
            vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
        ),
        one(
            "Emptiness / Emptiness / should delete nodes with the karpenter.sh/do-not-disrupt annotation set to false",
            d(&[pool()], &[node().annotate(DO_NOT_DISRUPT, "false")], &[]),
            vec![Check::First(Empty, names(&["node"]), Some(0))],
        ),
        one(
            "Emptiness / Emptiness / should ignore nodes that have pods",
            d(&[pool()], &[node()], &[pod("p").on("node")]),
            vec![Check::Nothing],
        ),
        one(
            "Emptiness / Emptiness / should ignore nodes with the consolidatable status condition set to false",
            d(&[pool()], &[nc("node", "default").cheap_spot().consolidatable_false()], &[]),
            vec![Check::Nothing],
        )
        .differs(WITHOUT_CONDITION),
        one(
            "Emptiness / can delete multiple empty nodes",
            d(&[pool()], &[node(), node2()], &[]),
            vec![
                Check::First(Empty, names(&["node", "node2"]), Some(0)),
                Check::Decisions(1),
            ],
        ),
        // The cheapest fake type of at least 64 CPU, with 64 CPU allocatable;
        // a pending pod of 62 CPU needs it.
        one(
            "Emptiness / considers pending pods when consolidating",
            d(
                &[pool()],
                &[nc("node", "default").itype("c5a.16xlarge").cpu("64").consolidatable()],
                &[pod("p").on("node").cpu("1"), pod("unsched").cpu("62")],
            ),
            vec![Check::Nothing, Check::Kept("node")],
        ),
        one(
            "Emptiness / will consider a node with a DaemonSet pod as empty",
            docs(
                &[pool()],
                &[node().cheap()],
                &[pod("ds-pod").on("node").owned("DaemonSet", "ds")],
                vec![daemon_set("ds")],
            ),
            vec![Check::First(Empty, names(&["node"]), Some(0))],
        ),
        one(
            "Emptiness / will consider a node with terminating Deployment pods as empty",
            d(
                &[pool()],
                &[node().cheap()],
                &[
                    pod("p-0").on("node").rs().terminating(),
                    pod("p-1").on("node").rs().terminating(),
                    pod("p-2").on("node").rs().terminating(),
                ],
            ),
            vec![Check::First(Empty, names(&["node"]), Some(0))],
        ),
        one(
            "Emptiness / will not consider a node with a terminating StatefulSet pod as empty",
            d(
                &[pool()],
                &[node().cheap()],
                &[pod("ss-0").on("node").owned("StatefulSet", "ss").terminating()],
            ),
            vec![Check::Nothing, Check::Kept("node")],
        ),
        // The static NodePool (`spec.replicas: 2`, `Disruption{}`: the CRD
        // defaults) with two empty, consolidatable nodes: no candidate for
        // emptiness or consolidation.
        one(
            "Emptiness / Static NodePool / should not consolidate static NodePool nodes",
            d(
                &[np("static").replicas(2)],
                &ncs("static-node", 2, |n| n.consolidatable(), "static"),
                &[],
            ),
            vec![Check::Nothing],
        ),
    ];
    run_table(FILE, cases);
}

#[test]
fn not_ported_cases_name_a_reason() {
    check_not_ported(NOT_PORTED, "", "It cases");
}

// The `It`s not ported, with the reason (file: Describe / Context / It).

const NOT_PORTED: &[(&str, &str)] = &[
    (
        "emptiness_test.go: Emptiness / should wait for the node TTL for empty nodes before consolidating",
        "the emptiness validator's 30s wait on the controller clock before the command is executed (commandValidationDelay); a Flotilla run decides at one instant",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should not disrupt a node that hosts virtual buffer pods",
        "virtual buffer pods (CapacityBuffer, counted by the provisioner into cluster state) have no counterpart among Flotilla's inputs",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should disrupt a node once buffer pods are cleared",
        "virtual buffer pods (CapacityBuffer) have no counterpart among Flotilla's inputs",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should only protect the specific node with buffer pods, not others",
        "virtual buffer pods (CapacityBuffer) have no counterpart among Flotilla's inputs",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should not consider a node with real pods AND buffer pods as empty",
        "virtual buffer pods (CapacityBuffer) have no counterpart among Flotilla's inputs",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should protect multiple nodes that each host buffer pods",
        "virtual buffer pods (CapacityBuffer) have no counterpart among Flotilla's inputs",
    ),
    (
        "emptiness_test.go: Emptiness / Buffer pod protection / should not protect a node with zero buffer pod count",
        "virtual buffer pods (CapacityBuffer) have no counterpart among Flotilla's inputs (without them it is \"can delete empty nodes\")",
    ),
];
