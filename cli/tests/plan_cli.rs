//! End-to-end tests of the `flotilla` binary over the YAML fixtures in
//! `tests/fixtures/` and the sample workloads in `examples/demo/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The workspace root (fixture paths in messages are relative to it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn flotilla(args: &[&str]) -> Output {
    flotilla_with_stdin(args, None)
}

fn flotilla_with_stdin(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("flotilla starts");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(bytes).expect("write stdin");
        drop(pipe);
    }
    child.wait_with_output().expect("flotilla runs")
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

const BASIC: &str = "tests/fixtures/basic.yaml";

#[test]
fn demo_prints_a_plan_with_node_claims() {
    let o = flotilla(&["demo"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("Flotilla demo"), "intro line missing:\n{out}");
    assert!(out.contains("NODECLAIM"), "table header missing:\n{out}");
    assert!(out.contains("new NodeClaim(s)"), "summary missing:\n{out}");
    // The pod asking for 16 GPUs is reported with a reason.
    assert!(out.contains("UNSCHEDULABLE"), "{out}");
    assert!(out.contains("ml/train-giant-model"), "{out}");
}

#[test]
fn demo_json_has_node_claims_and_the_unschedulable_pod() {
    let plan = json(&flotilla(&["demo", "-o", "json"]));
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims array");
    assert!(!claims.is_empty());
    let pools: Vec<&str> = claims
        .iter()
        .map(|c| c["nodePool"].as_str().unwrap())
        .collect();
    assert!(pools.contains(&"default"), "{pools:?}");
    assert!(pools.contains(&"gpu"), "{pools:?}");
    let unschedulable = plan["unschedulable"].as_array().unwrap();
    assert!(
        unschedulable.iter().any(
            |u| u["pod"] == "ml/train-giant-model" && !u["reason"].as_str().unwrap().is_empty()
        ),
        "{unschedulable:?}"
    );
    // The existing node takes some of the pending pods.
    let existing = plan["existingNodes"].as_array().unwrap();
    assert!(existing
        .iter()
        .any(|n| n["name"] == "ip-10-0-12-34.us-west-2.compute.internal"));
}

#[test]
fn plan_json_has_the_documented_shape() {
    let plan = json(&flotilla(&["plan", "-f", BASIC, "-o", "json"]));
    let obj = plan.as_object().expect("top level is an object");
    for key in ["nodeClaims", "existingNodes", "unschedulable", "summary"] {
        assert!(obj.contains_key(key), "missing {key}: {plan:#}");
    }
    let s = &plan["summary"];
    assert_eq!(s["pods"], 3, "{s}");
    assert_eq!(s["scheduled"], 3, "{s}");
    let n = s["nodeClaims"].as_u64().expect("summary.nodeClaims");
    assert!(n >= 1);
    assert_eq!(n as usize, plan["nodeClaims"].as_array().unwrap().len());
    assert!(s["hourlyPrice"].as_f64().expect("summary.hourlyPrice") > 0.0);

    let nc = &plan["nodeClaims"][0];
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
        assert!(nc.get(key).is_some(), "nodeClaims[0] lacks {key}: {nc:#}");
    }
    assert_eq!(nc["nodePool"], "default");
    assert!(nc["name"].as_str().unwrap().starts_with("default-"));
    assert!(nc["resources"].get("requests").is_some());
    assert!(nc["resources"].get("allocatable").is_some());
    for key in ["min", "instanceType", "zone", "capacityType"] {
        assert!(nc["price"].get(key).is_some(), "price lacks {key}");
    }
    assert_eq!(nc["price"]["capacityType"], "on-demand");
    let types = nc["instanceTypes"].as_array().unwrap();
    assert_eq!(types[0], nc["price"]["instanceType"], "cheapest first");
}

#[test]
fn table_is_the_default_output() {
    let o = flotilla(&["plan", "-f", BASIC]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("NODECLAIM"), "{out}");
    assert!(
        out.contains("3 pending pod(s): 3 scheduled, 0 unschedulable"),
        "{out}"
    );
}

#[test]
fn typo_in_a_nodepool_names_file_object_and_field() {
    let o = flotilla(&["plan", "-f", "tests/fixtures/typo-nodepool.yaml"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("tests/fixtures/typo-nodepool.yaml"), "{err}");
    assert!(err.contains("NodePool typo"), "{err}");
    assert!(err.contains("requirments"), "{err}");
    assert!(o.stdout.is_empty(), "no plan on error: {}", stdout(&o));
}

#[test]
fn bad_quantity_names_the_field() {
    let o = flotilla(&["plan", "-f", "tests/fixtures/bad-quantity.yaml"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("tests/fixtures/bad-quantity.yaml"), "{err}");
    assert!(
        err.contains("spec.containers[0].resources.requests.cpu"),
        "{err}"
    );
    assert!(err.contains("2 cores"), "{err}");
}

#[test]
fn unknown_kind_warns_and_still_plans() {
    let o = flotilla(&[
        "plan",
        "-f",
        BASIC,
        "-f",
        "tests/fixtures/unknown-kind.yaml",
        "-o",
        "json",
    ]);
    let err = stderr(&o);
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains("Frobnicator"), "{err}");
    let plan = json(&o);
    assert_eq!(plan["summary"]["pods"], 4);
    assert_eq!(plan["summary"]["scheduled"], 4);
}

#[test]
fn same_input_gives_byte_identical_json() {
    let args = ["plan", "-f", "examples/demo", "-o", "json"];
    let a = flotilla(&args);
    let b = flotilla(&args);
    assert_exit(&a, 0);
    assert_exit(&b, 0);
    assert_eq!(stdout(&a), stdout(&b));
    // The embedded demo is the same input as the directory.
    let demo = flotilla(&["demo", "-o", "json"]);
    assert_exit(&demo, 0);
    assert_eq!(stdout(&a), stdout(&demo));
}

#[test]
fn dash_reads_stdin() {
    let yaml = std::fs::read(root().join(BASIC)).unwrap();
    let from_stdin = flotilla_with_stdin(&["plan", "-f", "-", "-o", "json"], Some(&yaml));
    let from_file = flotilla(&["plan", "-f", BASIC, "-o", "json"]);
    let plan = json(&from_stdin);
    assert_eq!(plan["summary"]["pods"], 3);
    assert_eq!(stdout(&from_stdin), stdout(&from_file));
}

#[test]
fn missing_file_is_an_input_error() {
    let o = flotilla(&["plan", "-f", "tests/fixtures/does-not-exist.yaml"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("does-not-exist.yaml"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2() {
    assert_exit(&flotilla(&["plan"]), 2);
    assert_exit(&flotilla(&["plan", "-f", BASIC, "-o", "yaml"]), 2);
}

#[test]
fn regions_and_catalog_list_something() {
    let o = flotilla(&["regions"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).lines().any(|l| l.trim() == "us-west-2"));

    let cat = json(&flotilla(&[
        "catalog",
        "--region",
        "us-west-2",
        "-o",
        "json",
    ]));
    assert_eq!(cat["region"], "us-west-2");
    assert!(!cat["source"].as_str().unwrap().is_empty());
    let types = cat["instanceTypes"].as_array().unwrap();
    assert!(!types.is_empty());
    for key in [
        "name",
        "vcpu",
        "memoryMib",
        "architecture",
        "gpus",
        "spotPrice",
        "onDemandPrice",
        "zones",
    ] {
        assert!(types[0].get(key).is_some(), "catalog row lacks {key}");
    }

    let o = flotilla(&["catalog"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("INSTANCE TYPE"));
    assert!(stdout(&o).contains("source:"));
}

/// Scheduling semantics through the whole path (YAML → input → scheduler →
/// JSON) on the embedded us-west-2 catalog.
#[test]
fn semantics_fixture_end_to_end() {
    let o = flotilla(&["plan", "-f", "tests/fixtures/semantics.yaml", "-o", "json"]);
    assert_exit(&o, 0);
    let plan = json(&o);
    let claims = plan["nodeClaims"].as_array().expect("nodeClaims");
    let claim_of = |pod: &str| {
        claims
            .iter()
            .find(|c| {
                c["pods"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|x| x == pod))
            })
            .unwrap_or_else(|| panic!("{pod} not planned: {plan:#}"))
    };
    assert_eq!(
        plan["summary"]["scheduled"], 13,
        "{:#}",
        plan["unschedulable"]
    );

    // Zone spread, maxSkew 1 over the three zones the pods allow (zone d is
    // not counted: nodeAffinityPolicy Honor): two pods per zone.
    let mut per_zone = std::collections::BTreeMap::new();
    for c in claims {
        for p in c["pods"].as_array().unwrap() {
            if p.as_str().unwrap().starts_with("shop/web-") {
                assert_eq!(c["zones"].as_array().unwrap().len(), 1);
                *per_zone
                    .entry(c["zones"][0].as_str().unwrap().to_string())
                    .or_insert(0) += 1;
            }
        }
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{per_zone:?}"
    );
    assert!(!per_zone.contains_key("us-west-2d"));

    // Volume topology through the EBS alias label.
    for p in ["shop/db-0", "shop/db-1"] {
        assert_eq!(claim_of(p)["zones"], serde_json::json!(["us-west-2b"]));
    }

    // Required hostname anti-affinity: three cache pods, three NodeClaims.
    let cache_claims = claims
        .iter()
        .filter(|c| {
            c["pods"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_str().unwrap().starts_with("shop/cache-"))
        })
        .collect::<Vec<_>>();
    assert_eq!(cache_claims.len(), 3);
    assert!(cache_claims.iter().all(|c| c["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.as_str().unwrap().starts_with("shop/cache-"))
        .count()
        == 1));

    // A custom label the NodePool defines with Exists.
    assert_eq!(
        claim_of("shop/blue-job")["labels"]["example.com/team"],
        "blue"
    );

    // The GPU pod goes to the tainted GPU pool, on NVIDIA types with ≥ 2 GPUs.
    let gpu = claim_of("ml/trainer");
    assert_eq!(gpu["nodePool"], "gpu");
    assert!(
        gpu["resources"]["allocatable"]["nvidia.com/gpu"]
            .as_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 2
    );
    // Spot is preferred where the pool allows it (default pool: spot + on-demand).
    assert_eq!(claim_of("shop/blue-job")["price"]["capacityType"], "spot");
    // The gpu pool says nothing about capacity type: on-demand by default.
    assert_eq!(gpu["capacityTypes"], serde_json::json!(["on-demand"]));
}

/// A NodePool preferring reserved capacity, its EC2NodeClass selecting one
/// ODCR of two m5.large, three pods that each need a node of their own, and
/// the `aws ec2 describe-capacity-reservations` output.
const RESERVED: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["reserved", "on-demand"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["m5.large"]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: test
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: test
  capacityReservationSelectorTerms:
    - id: cr-0123456789abcdef0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: big
  namespace: default
spec:
  replicas: 3
  selector:
    matchLabels:
      app: big
  template:
    metadata:
      labels:
        app: big
    spec:
      containers:
        - name: big
          image: public.ecr.aws/docker/library/busybox:1.36
          resources:
            requests:
              cpu: 1500m
              memory: 1Gi
---
{"CapacityReservations": [{
  "CapacityReservationId": "cr-0123456789abcdef0",
  "InstanceType": "m5.large",
  "InstancePlatform": "Linux/UNIX",
  "AvailabilityZone": "us-west-2a",
  "Tenancy": "default",
  "TotalInstanceCount": 4,
  "AvailableInstanceCount": 2,
  "State": "active",
  "InstanceMatchCriteria": "targeted",
  "OwnerId": "111122223333"
}]}
"#;

#[test]
fn plan_shows_reservation_use() {
    let args = ["plan", "-f", "-", "--reserved-capacity", "-o", "json"];
    let plan = json(&flotilla_with_stdin(&args, Some(RESERVED.as_bytes())));
    let r = &plan["reservations"];
    assert_eq!(r.as_array().map(Vec::len), Some(1), "{plan:#}");
    assert_eq!(r[0]["id"], "cr-0123456789abcdef0");
    assert_eq!(r[0]["instanceType"], "m5.large");
    assert_eq!(r[0]["zone"], "us-west-2a");
    assert_eq!(r[0]["reservationType"], "default");
    assert_eq!(r[0]["instanceMatchCriteria"], "targeted");
    assert_eq!(
        (r[0]["used"].as_u64(), r[0]["available"].as_u64()),
        (Some(2), Some(2))
    );
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 3);
    let reserved: Vec<&Value> = claims
        .iter()
        .filter(|c| c["price"]["capacityType"] == "reserved")
        .collect();
    assert_eq!(reserved.len(), 2);
    for c in &reserved {
        assert_eq!(c["labels"]["karpenter.sh/capacity-type"], "reserved");
        assert_eq!(
            c["labels"]["karpenter.k8s.aws/capacity-reservation-id"],
            "cr-0123456789abcdef0"
        );
        assert_eq!(
            c["labels"]["karpenter.k8s.aws/capacity-reservation-type"],
            "default"
        );
    }

    let table = flotilla_with_stdin(
        &["plan", "-f", "-", "--reserved-capacity"],
        Some(RESERVED.as_bytes()),
    );
    assert_exit(&table, 0);
    let out = stdout(&table);
    let line = out
        .lines()
        .find(|l| l.starts_with("cr-0123456789abcdef0"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("2 / 2"), "{line}");

    // Gate off: the reservation is not used and not reported.
    let plan = json(&flotilla_with_stdin(
        &["plan", "-f", "-", "-o", "json"],
        Some(RESERVED.as_bytes()),
    ));
    assert!(plan.get("reservations").is_none(), "{plan:#}");
    assert!(plan["nodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["price"]["capacityType"] == "on-demand"));
}

/// Every commercial region of the embedded catalog plans offline, in its
/// own zones; `catalog` names the price source (its own table for
/// us-east-1, us-east-1's ASSUMED elsewhere).
#[test]
fn plans_offline_in_every_embedded_region() {
    let o = flotilla(&["regions"]);
    assert_exit(&o, 0);
    let listed: Vec<String> = stdout(&o).lines().map(|l| l.trim().to_string()).collect();
    for r in [
        "eu-central-1",
        "ap-southeast-2",
        "sa-east-1",
        "il-central-1",
        "ca-west-1",
    ] {
        assert!(listed.contains(&r.to_string()), "{r} not in {listed:?}");
    }
    assert!(listed
        .iter()
        .all(|r| !r.starts_with("us-gov-") && !r.starts_with("cn-")));

    for r in ["eu-central-1", "ap-northeast-1", "sa-east-1"] {
        let plan = json(&flotilla(&[
            "plan", "-f", BASIC, "--region", r, "-o", "json",
        ]));
        assert_eq!(plan["summary"]["scheduled"], 3, "{r}: {plan:#}");
        for nc in plan["nodeClaims"].as_array().unwrap() {
            let zone = nc["price"]["zone"].as_str().unwrap();
            assert!(zone.starts_with(r), "{r}: planned in {zone}");
        }
        let cat = json(&flotilla(&["catalog", "--region", r, "-o", "json"]));
        let source = cat["source"].as_str().unwrap();
        assert!(
            source.contains("us-east-1's prices ASSUMED"),
            "{r}: {source}"
        );
    }
    let cat = json(&flotilla(&[
        "catalog",
        "--region",
        "us-east-1",
        "-o",
        "json",
    ]));
    let source = cat["source"].as_str().unwrap();
    assert!(
        source.contains("karpenter-provider-aws") && !source.contains("ASSUMED"),
        "{source}"
    );
}

/// `--min-values-policy`: strict (the default) leaves the pod pending with
/// a reason naming minValues; best-effort plans it, relaxed and annotated.
#[test]
fn min_values_policy_flag() {
    let doc = br#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m6g.large, m6g.nosuch], minValues: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]
"#;
    for (policy, relaxed) in [
        (None, None),
        (Some("strict"), None),
        (Some("best-effort"), Some("true")),
    ] {
        let mut args = vec!["plan", "-f", "-", "-o", "json"];
        if let Some(p) = policy {
            args.extend(["--min-values-policy", p]);
        }
        let o = flotilla_with_stdin(&args, Some(doc));
        assert_exit(&o, 0);
        let v = json(&o);
        match relaxed {
            None => {
                let reason = v["unschedulable"][0]["reason"].as_str().unwrap_or_default();
                assert!(reason.contains("minValues"), "{policy:?}: {reason}");
            }
            Some(r) => {
                let nc = &v["nodeClaims"][0];
                assert_eq!(
                    nc["annotations"]["karpenter.sh/nodeclaim-min-values-relaxed"],
                    r
                );
                assert_eq!(
                    nc["requirements"]
                        .as_array()
                        .and_then(|a| a
                            .iter()
                            .find(|q| q["key"] == "node.kubernetes.io/instance-type"))
                        .map(|q| q["minValues"].clone()),
                    Some(serde_json::json!(1))
                );
            }
        }
    }
}
