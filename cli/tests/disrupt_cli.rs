//! End-to-end tests of `flotilla disrupt` over the sample cluster in
//! `examples/disruption/` (see its README for what each node shows), at a
//! fixed `--now`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The workspace root (example paths are relative to it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("flotilla runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("stderr is UTF-8")
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

#[track_caller]
fn json(o: &Output) -> Value {
    assert_exit(o, 0);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("stdout is not JSON ({e}):\n{}", stdout(o));
    })
}

const EXAMPLE: &str = "examples/disruption";
/// Wednesday 06:00 UTC: outside the NodePool's business-hours budget.
const NOW: &str = "2026-11-25T06:00:00Z";
/// Wednesday 10:00 UTC: inside it (no Underutilized consolidation).
const BUSINESS_HOURS: &str = "2026-11-25T10:00:00Z";

const BUSY: &str = "ip-10-0-1-11.us-west-2.compute.internal";
const EMPTY: &str = "ip-10-0-2-12.us-west-2.compute.internal";
const UNDER_A: &str = "ip-10-0-1-13.us-west-2.compute.internal";
const UNDER_B: &str = "ip-10-0-3-14.us-west-2.compute.internal";
const EXPIRED: &str = "ip-10-0-2-15.us-west-2.compute.internal";
const DRIFTED: &str = "ip-10-0-3-16.us-west-2.compute.internal";
const DO_NOT_DISRUPT: &str = "ip-10-0-1-17.us-west-2.compute.internal";
const PDB: &str = "ip-10-0-2-18.us-west-2.compute.internal";
const SYSTEM: &str = "ip-10-0-3-19.us-west-2.compute.internal";

fn disrupt_json(now: &str) -> Value {
    json(&flotilla(&[
        "disrupt", "-f", EXAMPLE, "--now", now, "-o", "json",
    ]))
}

fn decisions(d: &Value) -> &Vec<Value> {
    d["decisions"].as_array().expect("decisions is an array")
}

fn blocked(d: &Value) -> &Vec<Value> {
    d["blocked"].as_array().expect("blocked is an array")
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|s| s.as_str().expect("a string"))
        .collect()
}

/// The decisions that remove `node`, with their reasons.
fn reasons_for<'a>(d: &'a Value, node: &str) -> Vec<&'a str> {
    decisions(d)
        .iter()
        .filter(|x| strs(&x["nodes"]).contains(&node))
        .map(|x| x["reason"].as_str().expect("reason is a string"))
        .collect()
}

fn blocked_reason<'a>(d: &'a Value, node: &str) -> Option<&'a str> {
    blocked(d)
        .iter()
        .find(|b| b["node"] == node)
        .map(|b| b["reason"].as_str().expect("blocked reason is a string"))
}

/// Bound pods of the example (`namespace/name` → node), read from the YAML
/// so the test follows the example.
fn bound_pods() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(EXAMPLE))
        .expect("examples/disruption exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable");
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).expect("YAML");
            if v["kind"] == "Pod" {
                let key = format!(
                    "{}/{}",
                    v["metadata"]["namespace"].as_str().expect("namespace"),
                    v["metadata"]["name"].as_str().expect("name")
                );
                let node = v["spec"]["nodeName"].as_str().expect("bound").to_string();
                out.insert(key, node);
            }
        }
    }
    out
}

fn is_daemon_set_pod(pod: &str) -> bool {
    pod.starts_with("kube-system/node-agent-")
}

#[test]
fn json_has_the_documented_shape() {
    let d = disrupt_json(NOW);
    let obj = d.as_object().expect("top level is an object");
    for key in obj.keys() {
        assert!(
            ["decisions", "blocked", "warnings"].contains(&key.as_str()),
            "undocumented top-level field {key}: {d:#}"
        );
    }
    assert!(!decisions(&d).is_empty(), "no decisions: {d:#}");
    assert!(!blocked(&d).is_empty(), "nothing blocked: {d:#}");
    for x in decisions(&d) {
        assert!(
            ["Empty", "Underutilized", "Expired", "Drifted"]
                .contains(&x["reason"].as_str().expect("reason")),
            "{x:#}"
        );
        assert_eq!(x["nodePool"], "general", "{x:#}");
        let nodes = strs(&x["nodes"]);
        assert!(!nodes.is_empty(), "{x:#}");
        let mut sorted = nodes.clone();
        sorted.sort();
        assert_eq!(nodes, sorted, "nodes are sorted: {x:#}");
        for r in x["replacements"].as_array().expect("replacements") {
            // Shaped exactly like plan's nodeClaims.
            for key in [
                "name",
                "nodePool",
                "instanceTypes",
                "capacityTypes",
                "zones",
                "requirements",
                "labels",
                "taints",
                "resources",
                "pods",
                "price",
            ] {
                assert!(r.get(key).is_some(), "replacement lacks {key}: {r:#}");
            }
            for key in ["min", "instanceType", "zone", "capacityType"] {
                assert!(r["price"].get(key).is_some(), "price lacks {key}: {r:#}");
            }
            assert_eq!(r["nodePool"], "general", "{r:#}");
        }
        let moves = x["moves"].as_array().expect("moves");
        for m in moves {
            let pod = m["pod"].as_str().expect("moves[].pod");
            assert!(pod.contains('/'), "pod is namespace/name: {m}");
            assert!(m["to"].as_str().is_some_and(|t| !t.is_empty()), "{m}");
        }
        let pods: Vec<&str> = moves.iter().map(|m| m["pod"].as_str().unwrap()).collect();
        let mut sorted = pods.clone();
        sorted.sort();
        assert_eq!(pods, sorted, "moves are sorted by pod: {x:#}");
        let before = x["price"]["before"].as_f64().expect("price.before");
        let after = x["price"]["after"].as_f64().expect("price.after");
        assert!(before > 0.0 && after >= 0.0, "{x:#}");
    }
    for b in blocked(&d) {
        assert!(b["node"].as_str().is_some_and(|n| !n.is_empty()), "{b}");
        assert!(b["reason"].as_str().is_some_and(|r| r.len() > 10), "{b}");
    }
}

#[test]
fn output_is_byte_identical_across_runs() {
    for output in ["json", "table"] {
        let args = ["disrupt", "-f", EXAMPLE, "--now", NOW, "-o", output];
        let a = flotilla(&args);
        let b = flotilla(&args);
        assert_exit(&a, 0);
        assert_exit(&b, 0);
        assert_eq!(stdout(&a), stdout(&b), "-o {output} differs between runs");
    }
}

#[test]
fn each_reason_fires_for_its_node() {
    let d = disrupt_json(NOW);
    assert_eq!(reasons_for(&d, EMPTY), ["Empty"], "{d:#}");
    assert_eq!(reasons_for(&d, EXPIRED), ["Expired"], "{d:#}");
    assert_eq!(reasons_for(&d, DRIFTED), ["Drifted"], "{d:#}");
    let under: Vec<&Value> = decisions(&d)
        .iter()
        .filter(|x| x["reason"] == "Underutilized")
        .collect();
    assert!(!under.is_empty(), "no Underutilized decision: {d:#}");
    let consolidated: BTreeSet<&str> = under.iter().flat_map(|x| strs(&x["nodes"])).collect();
    assert!(
        consolidated.contains(UNDER_A) || consolidated.contains(UNDER_B),
        "the underutilized pair is not consolidated: {d:#}"
    );
    for x in &under {
        let before = x["price"]["before"].as_f64().unwrap();
        let after = x["price"]["after"].as_f64().unwrap();
        assert!(after < before, "an Underutilized decision must save: {x:#}");
    }
    // The Empty node's only pod is the DaemonSet's: nothing to launch or move.
    let empty = decisions(&d)
        .iter()
        .find(|x| x["reason"] == "Empty")
        .unwrap();
    assert_eq!(empty["replacements"].as_array().unwrap().len(), 0, "{d:#}");
    assert_eq!(empty["moves"].as_array().unwrap().len(), 0, "{d:#}");
    assert_eq!(empty["price"]["after"].as_f64(), Some(0.0), "{d:#}");
    // The Drifted node's replacement satisfies today's NodePool
    // (generation > 5).
    let drifted = decisions(&d)
        .iter()
        .find(|x| x["reason"] == "Drifted")
        .unwrap();
    for r in drifted["replacements"].as_array().unwrap() {
        let t = r["price"]["instanceType"].as_str().unwrap();
        assert!(
            !t.starts_with("m5."),
            "drift replaced by a drifted type {t}"
        );
    }
    // No node is removed twice; blocked and untouched nodes are not removed.
    let mut seen = BTreeSet::new();
    for x in decisions(&d) {
        for n in strs(&x["nodes"]) {
            assert!(seen.insert(n), "{n} removed twice: {d:#}");
        }
    }
    for n in [DO_NOT_DISRUPT, PDB, SYSTEM, BUSY] {
        assert!(!seen.contains(n), "{n} must not be disrupted: {d:#}");
    }
}

/// Decisions are taken in order, each on the state the earlier ones leave:
/// the moves of a decision are exactly the non-DaemonSet pods on its nodes
/// at that point, and each goes to one of its replacements or to a node
/// still there (not removed by this or an earlier decision, not the tainted
/// system node).
#[test]
fn every_evicted_pod_has_a_place() {
    let d = disrupt_json(NOW);
    let mut location = bound_pods();
    let mut nodes_left: BTreeSet<String> = location.values().cloned().collect();
    for x in decisions(&d) {
        let nodes = strs(&x["nodes"]);
        for n in &nodes {
            assert!(nodes_left.remove(*n), "{n} is not a node left: {x:#}");
        }
        let replacements: BTreeSet<&str> = x["replacements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let moved: BTreeMap<&str, &str> = x["moves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["pod"].as_str().unwrap(), m["to"].as_str().unwrap()))
            .collect();
        let evicted: BTreeSet<&str> = location
            .iter()
            .filter(|(p, n)| nodes.contains(&n.as_str()) && !is_daemon_set_pod(p))
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(
            moved.keys().copied().collect::<BTreeSet<_>>(),
            evicted,
            "moves must cover exactly the evicted non-DaemonSet pods: {x:#}"
        );
        for (pod, to) in moved {
            assert!(
                replacements.contains(to) || nodes_left.contains(to),
                "{pod} moves to {to}, neither a replacement nor a remaining node: {x:#}"
            );
            assert_ne!(to, SYSTEM, "the system node's taint is not tolerated");
            location.insert(pod.to_string(), to.to_string());
        }
        nodes_left.extend(replacements.iter().map(|r| r.to_string()));
    }
}

#[test]
fn do_not_disrupt_and_pdb_blocks_name_what_blocks() {
    let d = disrupt_json(NOW);
    let dnd = blocked_reason(&d, DO_NOT_DISRUPT)
        .unwrap_or_else(|| panic!("{DO_NOT_DISRUPT} not blocked: {d:#}"));
    assert!(dnd.contains("karpenter.sh/do-not-disrupt"), "{dnd}");
    assert!(dnd.contains("analytics/train-churn-model-x8k2p"), "{dnd}");
    let pdb = blocked_reason(&d, PDB).unwrap_or_else(|| panic!("{PDB} not blocked: {d:#}"));
    assert!(pdb.contains("shop/checkout"), "{pdb}");
    // A node of no NodePool is never a candidate: neither removed nor listed.
    assert!(blocked_reason(&d, SYSTEM).is_none(), "{d:#}");
    assert!(reasons_for(&d, SYSTEM).is_empty(), "{d:#}");
    // Blocked entries are sorted by node.
    let nodes: Vec<&str> = blocked(&d)
        .iter()
        .map(|b| b["node"].as_str().unwrap())
        .collect();
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(nodes, sorted);
}

#[test]
fn business_hours_budget_stops_consolidation_only() {
    let d = disrupt_json(BUSINESS_HOURS);
    assert!(
        decisions(&d).iter().all(|x| x["reason"] != "Underutilized"),
        "the business-hours budget allows no Underutilized: {d:#}"
    );
    let budget_blocked: Vec<&str> = [UNDER_A, UNDER_B]
        .into_iter()
        .filter_map(|n| blocked_reason(&d, n))
        .collect();
    assert!(
        budget_blocked.iter().any(|r| r.contains("budget")),
        "the budget is named as the blocker: {d:#}"
    );
    // The budget limits Underutilized only: the other reasons still fire.
    assert_eq!(reasons_for(&d, EMPTY), ["Empty"], "{d:#}");
    assert_eq!(reasons_for(&d, EXPIRED), ["Expired"], "{d:#}");
    assert_eq!(reasons_for(&d, DRIFTED), ["Drifted"], "{d:#}");
}

#[test]
fn table_shows_decisions_blocked_nodes_and_a_summary() {
    let o = flotilla(&["disrupt", "-f", EXAMPLE, "--now", NOW]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.starts_with("Disruption decisions at 2026-11-25T06:00:00Z"),
        "{out}"
    );
    for want in [
        "Empty  nodepool general",
        "Expired (forceful)  nodepool general",
        "Drifted  nodepool general",
        "Underutilized  nodepool general",
        EMPTY,
        "BLOCKED",
        DO_NOT_DISRUPT,
        PDB,
        " decision(s): ",
        " node(s) removed, ",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    let summary = out.lines().last().unwrap_or_default();
    let d = disrupt_json(NOW);
    assert!(
        summary.starts_with(&format!("{} decision(s)", decisions(&d).len())),
        "{summary}"
    );
}

#[test]
fn bad_now_is_a_usage_error_naming_the_flag() {
    for bad in [
        "yesterday",
        "2026-11-25",
        "2026-11-25T06:00:00",
        "1795586400",
    ] {
        let o = flotilla(&["disrupt", "-f", EXAMPLE, "--now", bad]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains("--now"), "{bad}: {err}");
        assert!(err.contains("RFC 3339"), "{bad}: {err}");
        assert!(o.stdout.is_empty(), "{bad}: {}", stdout(&o));
    }
}

#[test]
fn input_errors_exit_1_and_missing_files_are_usage_errors() {
    let o = flotilla(&[
        "disrupt",
        "-f",
        "tests/fixtures/typo-nodepool.yaml",
        "--now",
        NOW,
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("requirments"), "{}", stderr(&o));
    let o = flotilla(&["disrupt", "--now", NOW]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--filename"), "{}", stderr(&o));
}

#[test]
fn now_defaults_to_the_clock() {
    let o = flotilla(&["disrupt", "-f", EXAMPLE, "-o", "json"]);
    let d = json(&o);
    assert!(
        d["decisions"].is_array() && d["blocked"].is_array(),
        "{d:#}"
    );
}

/// Cloud-provider drift (`tests/fixtures/cloud-drift`): the EC2NodeClass's
/// status lists the AMIs and subnets it resolves to now; the node whose
/// NodeClaim runs the previous AMI and the node whose instance (from
/// `describe-instances`) is in a retired subnet drift, each replaced, the
/// reason staying `Drifted` with what changed in `detail`; the current
/// node stays.
#[test]
fn cloud_provider_drift_replaces_the_nodes_on_an_old_ami_or_subnet() {
    let d = json(&flotilla(&[
        "disrupt",
        "-f",
        "tests/fixtures/cloud-drift",
        "--now",
        NOW,
        "-o",
        "json",
    ]));
    let got: Vec<(&str, Vec<&str>, &str, usize)> = decisions(&d)
        .iter()
        .map(|x| {
            (
                x["reason"].as_str().expect("reason"),
                strs(&x["nodes"]),
                x["detail"].as_str().expect("detail"),
                x["replacements"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "Drifted",
                vec!["ip-10-0-1-20.us-west-2.compute.internal"],
                "NodeClaim general-old-ami runs image ami-0old0000000000amd, no longer among \
                 EC2NodeClass default's AMIs (ami-0new0000000000amd)",
                1
            ),
            (
                "Drifted",
                vec!["ip-10-0-1-21.us-west-2.compute.internal"],
                "NodeClaim general-old-subnet's instance is in subnet subnet-retired, no longer \
                 among EC2NodeClass default's subnets (subnet-0a, subnet-0b)",
                1
            ),
        ],
        "{d:#}"
    );
    assert!(blocked(&d).is_empty(), "{d:#}");
    let table = stdout(&flotilla(&[
        "disrupt",
        "-f",
        "tests/fixtures/cloud-drift",
        "--now",
        NOW,
    ]));
    assert!(
        table.contains("  why      NodeClaim general-old-ami runs image ami-0old0000000000amd"),
        "{table}"
    );
}
