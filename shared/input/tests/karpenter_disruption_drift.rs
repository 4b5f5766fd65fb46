//! Karpenter's drift disruption tests, ported as tables.
//!
//! Source: kubernetes-sigs/karpenter
//! `pkg/controllers/disruption/drift_test.go`, every `It`. Each case is the
//! Go test's cluster written as Kubernetes documents (NodePools
//! `karpenter.sh/v1` with budgets, Nodes with their NodeClaims and their
//! `Drifted` / `Consolidatable` conditions, bound Pods with owners and
//! annotations, PodDisruptionBudgets), read by `flotilla_input::load` and
//! decided by `flotilla_core::disruption::disrupt` at a fixed time on the
//! embedded us-west-2 catalog. The conventions (fake instance types, zones,
//! clock, reconciles) are in `karpenter_disruption_common/mod.rs`; here
//! also:
//!
//! * the node is drifted the way the Go test says: its NodeClaim's
//!   `Drifted` condition (Karpenter's nodeclaim disruption controller sets
//!   it; Flotilla reads it, and finds no other drift: the nodes satisfy
//!   their NodePool);
//! * a pod of 150 CPU, which no fake instance type holds, is a pod of 1000
//!   CPU (the catalog has types of 192 vCPU and more);
//! * the fake `current-on-demand` (8 CPU, no available offering) and
//!   `replacement-on-demand` (3 CPU) types of "can replace drifted nodes
//!   with multiple nodes" are `m5.2xlarge` and a NodePool that allows only
//!   `c5.xlarge` (4 vCPU, so one 2-CPU pod per node).
//!
//! The Go `BeforeEach`: a NodePool with `consolidateAfter: 1h` and one
//! budget of `100%`; a node on the fake `mostExpensiveInstance`, 32 CPU and
//! 100 pods allocatable. `Context("Drift")` marks its NodeClaim `Drifted`
//! and clears `Consolidatable`.
//!
//! A case with `known_difference: Some(..)` is where Flotilla answers
//! differently from Karpenter; it is run and its status printed, never
//! failed. Every other case must behave as in Karpenter.
//!
//! Tally: `drift_test.go` has 24 `It`s: 23 are ported (all 23 behave as in
//! Karpenter, 20 when first ported; none is a known difference), 1 is in
//! [`NOT_PORTED`]. The three fixed on the way: drifted nodes are taken
//! empty ones first, then earliest drift first (2 cases), and a static
//! NodePool's nodes are no drift candidates. With a NodeClaim
//! `terminationGracePeriod`, a node whose pods a PDB holds drifts without
//! a replacement for those pods (drained within the grace period), as in
//! Karpenter (the case checks the decision, beyond what the Go test
//! asserts).
//!
//! `cargo test -p flotilla-input --test karpenter_disruption_drift -- --nocapture`
//! prints each case's status.

mod karpenter_disruption_common;

use karpenter_disruption_common::*;
use serde_json::Value;

const FILE: &str = "drift_test.go";

/// The `BeforeEach` NodePool.
fn pool() -> Np {
    np("default")
        .consolidate_after("1h")
        .budgets(vec![budget("100%")])
}

/// The `BeforeEach` node, drifted as `Context("Drift")` marks it.
fn node() -> Nc {
    nc("node", "default").drifted()
}

/// A second node made in the test (a second after the first), not drifted.
fn node2() -> Nc {
    nc("node2", "default").created(CREATED + 1)
}

fn d(nps: &[Np], nodes: &[Nc], pods: &[P]) -> Vec<Value> {
    docs(nps, nodes, pods, vec![])
}

fn at(docs: Vec<Value>, now: i64, checks: Vec<Check>) -> Step {
    Step { docs, now, checks }
}

#[test]
fn drift() {
    let dnd = |v: &'static str| pod("p").on("node").annotate(DO_NOT_DISRUPT, v);
    // Budgets: ten nodes on the most expensive type, in one NodePool.
    let ten = |drifted: usize| -> Vec<Nc> {
        (0..10)
            .map(|i| {
                let n = nc(&format!("node-{i}"), "default").created(CREATED + i as i64);
                if i < drifted {
                    n.drifted()
                } else {
                    n
                }
            })
            .collect()
    };
    let five_pods: Vec<P> = (0..5)
        .map(|i| {
            pod(&format!("p-{i}"))
                .on(&format!("node-{i}"))
                .cpu("1")
                .rs()
        })
        .collect();
    // Ten NodePools of three drifted nodes, two with a pod.
    let mut pools_1 = vec![pool()];
    let mut nodes_1 = vec![];
    let mut pods_1 = vec![];
    for i in 0..10 {
        let name = format!("np-{i}");
        pools_1.push(
            np(&name)
                .consolidate_after("Never")
                .expire_after("Never")
                .budgets(vec![budget("1")]),
        );
        for k in 0..3 {
            let n = format!("{name}-node-{k}");
            nodes_1.push(nc(&n, &name).drifted().created(CREATED + k));
            if k < 2 {
                pods_1.push(pod(&format!("{name}-p-{k}")).on(&n).cpu("1").rs());
            }
        }
    }
    let cases = vec![
        steps(
            "Drift / Metrics / should correctly report eligible drifted nodes",
            vec![
                // not drifted yet, and a do-not-disrupt pod: nothing
                at(
                    d(&[pool()], &[nc("node", "default")], &[dnd("true")]),
                    NOW,
                    vec![Check::Nothing],
                ),
                // the annotation removed, the NodeClaim drifted
                at(
                    d(&[pool()], &[node()], &[pod("p").on("node")]),
                    NOW,
                    vec![Check::First(Drifted, names(&["node"]), Some(1))],
                ),
            ],
        ),
        // Go checks NodePoolAllowedDisruptions == 3 for Drifted: three of
        // the ten (empty, drifted) nodes go, the budget holds the rest.
        one(
            "Drift / Budgets / should only consider 3 nodes allowed to be disrupted because of budgets",
            d(&[pool().budgets(vec![budget("30%")])], &ten(10), &[]),
            vec![
                Check::RemovedCount(3, Drifted),
                Check::OneNodePerDecision,
                Check::RestBlocked("node-", "disruption budget"),
            ],
        ),
        // Five reconciles: three commands, one node each.
        one(
            "Drift / Budgets / should disrupt 3 nodes, taking into account commands in progress",
            d(&[pool().budgets(vec![budget("30%")])], &ten(5), &five_pods),
            vec![
                Check::RemovedCount(3, Drifted),
                Check::Decisions(3),
                Check::OneNodePerDecision,
            ],
        ),
        // Thirty reconciles: ten commands, one per NodePool.
        one(
            "Drift / Budgets / should respect budgets for multiple nodepools",
            d(&pools_1, &nodes_1, &pods_1),
            vec![
                Check::Decisions(10),
                Check::RemovedCount(10, Drifted),
                Check::PerPool("np-", 1),
            ],
        ),
        one(
            "Drift / Drift / should continue to the next drifted node if the first cannot reschedule all pods",
            d(
                &[pool()],
                &[node(), node2().cpu("1").drifted()],
                &[
                    pod("big").on("node").cpu("1000"),
                    pod("small").on("node2").cpu("1"),
                ],
            ),
            vec![
                Check::First(Drifted, names(&["node2"]), Some(1)),
                Check::Decisions(1),
                Check::Blocked("node", "would fit nowhere"),
            ],
        ),
        one(
            "Drift / Drift / should ignore nodes without the drifted status condition",
            d(&[pool()], &[nc("node", "default")], &[]),
            vec![Check::Nothing],
        ),
        one(
            "Drift / Drift / should ignore nodes with the drifted status condition set to false",
            d(&[pool()], &[nc("node", "default").drifted_false()], &[]),
            vec![Check::Nothing],
        ),
        one(
            "Drift / Drift / should ignore nodes with the karpenter.sh/do-not-disrupt annotation set to true",
            d(&[pool()], &[node().annotate(DO_NOT_DISRUPT, "true")], &[]),
            vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
        ),
        one(
            "Drift / Drift / should delete drifted nodes with the karpenter.sh/do-not-disrupt annotation set to false",
            d(
                &[pool()],
                &[node().annotate(DO_NOT_DISRUPT, "false"), node2()],
                &[pod("p").on("node").rs()],
            ),
            vec![
                Check::First(Drifted, names(&["node"]), Some(0)),
                Check::Kept("node2"),
            ],
        ),
        one(
            "Drift / Drift / should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true",
            d(&[pool()], &[node()], &[dnd("true")]),
            vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
        ),
        one(
            "Drift / Drift / should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true when the NodePool's TerminationGracePeriod is not nil",
            d(&[pool()], &[node()], &[dnd("true")]),
            vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
        ),
        // The Go test checks only that no replacement is made (it does not
        // run the queue). Karpenter does start a Drift command here: with
        // the NodeClaim's terminationGracePeriod set, a PDB does not keep
        // the node from being an (eventual) drift candidate, and the pod
        // the PDB holds is left out of the simulation, so the node is
        // drained without a replacement, the PDB waited for up to the grace
        // period. Flotilla decides the same.
        one(
            "Drift / Drift / should not create replacements for drifted nodes that have pods with the blocking PDBs when the NodePool's TerminationGracePeriod is not nil",
            docs(
                &[pool()],
                &[node().claim_termination_grace_period("300s")],
                &[pod("p").on("node").label("test", "value")],
                vec![pdb("pdb", &[("test", "value")], 0)],
            ),
            vec![
                Check::NoReplacements,
                Check::First(Drifted, names(&["node"]), Some(0)),
            ],
        ),
        steps(
            "Drift / Drift / should not drift nodes with pods that have a duration-based do-not-disrupt annotation that is still active",
            vec![
                at(
                    d(&[pool()], &[node()], &[dnd("2m").started(NOW)]),
                    NOW,
                    vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
                ),
                // env.Clock.Step(3 * time.Minute): a replacement NodeClaim
                at(
                    d(&[pool()], &[node()], &[dnd("2m").started(NOW)]),
                    NOW + 180,
                    vec![Check::First(Drifted, names(&["node"]), Some(1))],
                ),
            ],
        ),
        one(
            "Drift / Drift / should drift nodes with pods that have an invalid do-not-disrupt annotation format",
            d(
                &[pool()],
                &[node(), node2()],
                &[pod("p").on("node").rs().annotate(DO_NOT_DISRUPT, "invalid-format")],
            ),
            vec![
                Check::First(Drifted, names(&["node"]), Some(0)),
                Check::Kept("node2"),
            ],
        ),
        steps(
            "Drift / Drift / should not drift nodes until the longest duration-based do-not-disrupt grace period expires across multiple pods",
            {
                let pods = [
                    pod("p1").on("node").annotate(DO_NOT_DISRUPT, "1m").started(NOW),
                    pod("p2").on("node").annotate(DO_NOT_DISRUPT, "3m").started(NOW),
                ];
                vec![
                    at(
                        d(&[pool()], &[node()], &pods),
                        NOW,
                        vec![Check::Nothing, Check::Blocked("node", DO_NOT_DISRUPT)],
                    ),
                    at(
                        d(&[pool()], &[node()], &pods),
                        NOW + 120,
                        vec![Check::Nothing, Check::Blocked("node", "default/p2")],
                    ),
                    at(
                        d(&[pool()], &[node()], &pods),
                        NOW + 240,
                        vec![Check::First(Drifted, names(&["node"]), Some(1))],
                    ),
                ]
            },
        ),
        one(
            "Drift / Drift / should replace drifted nodes",
            d(&[pool()], &[node()], &[pod("p").on("node").rs()]),
            vec![
                Check::First(Drifted, names(&["node"]), Some(1)),
                Check::Decisions(1),
            ],
        ),
        one(
            "Drift / Drift / should delete drifted nodes",
            d(&[pool()], &[node(), node2()], &[pod("p").on("node").rs()]),
            vec![
                Check::First(Drifted, names(&["node"]), Some(0)),
                Check::Decisions(1),
                Check::Kept("node2"),
            ],
        ),
        one(
            "Drift / Drift / should delete drifted nodes when they are empty and consolidation is disabled",
            d(&[pool().consolidate_after("Never")], &[node()], &[]),
            vec![Check::First(Drifted, names(&["node"]), Some(0))],
        ),
        // One reconcile: the empty node goes first; the node with the pod
        // is left to Karpenter's next reconcile.
        one(
            "Drift / Drift / should drift empty nodes before non-empty nodes",
            d(
                &[pool().consolidate_after("Never")],
                &[node(), node2().drifted()],
                &[pod("p").on("node").rs()],
            ),
            vec![Check::First(Drifted, names(&["node2"]), Some(0))],
        ),
        // Karpenter's `NewMethods` runs Emptiness before Drift (the Go
        // suite's order is Drift first): the node goes, without a
        // replacement, as either.
        one(
            "Drift / Drift / should delete drifted nodes when they are empty and consolidatable",
            d(&[pool()], &[node().consolidatable()], &[]),
            vec![
                Check::Removed("node", vec![Drifted, Empty], Some(0)),
                Check::Decisions(1),
            ],
        ),
        one(
            "Drift / Drift / can replace drifted nodes with multiple nodes",
            d(
                &[pool().req(req(ITYPE, "In", &["c5.xlarge"]))],
                &[node().itype("m5.2xlarge").cpu("8").no_pods_allocatable()],
                &[
                    pod("p-0").on("node").cpu("2").rs(),
                    pod("p-1").on("node").cpu("2").rs(),
                    pod("p-2").on("node").cpu("2").rs(),
                ],
            ),
            vec![Check::First(Drifted, names(&["node"]), Some(3))],
        ),
        // node2 drifted an hour before node: it goes first.
        one(
            "Drift / Drift / should drift one non-empty node at a time, starting with the earliest drift",
            d(
                &[pool()],
                &[node().cpu("32"), node2().drifted_at(NOW - 3600)],
                &[
                    pod("p-0").on("node").cpu("30").rs(),
                    pod("p-1").on("node2").cpu("30").rs(),
                ],
            ),
            vec![
                Check::First(Drifted, names(&["node2"]), Some(1)),
                Check::OneNodePerDecision,
            ],
        ),
        one(
            "Drift / Static NodePool / should not consider static nodepool for drift",
            d(
                &[np("static").replicas(2)],
                &ncs("static-node", 2, |n| n.drifted(), "static"),
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

const NOT_PORTED: &[(&str, &str)] = &[(
    "drift_test.go: Drift / Drift / should untaint nodes when drift replacement fails",
    "the orchestration queue's rollback when a replacement NodeClaim is deleted before it is ready (the pipeline's launch and drain stages, not the decision)",
)];
