//! `flotilla simulate`: the pipeline in memory, launching into the EC2
//! simulator, with capacity limits forcing the ICE fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn simulate(extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["simulate", "-f", "examples/demo", "-o", "json"])
        .args(extra)
        .current_dir(root())
        .env("RUST_LOG", "error")
        .output()
        .expect("run flotilla");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn launched(v: &Value) -> Vec<(String, String)> {
    v["launched"]
        .as_array()
        .expect("launched")
        .iter()
        .map(|l| {
            (
                l["instanceType"].as_str().unwrap_or_default().to_string(),
                l["capacityType"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_demo_launches_and_exhausted_pools_fall_back() {
    let free = simulate(&[]);
    let first = launched(&free);
    assert!(first.len() >= 5, "{free}");
    assert!(free["hourlyPrice"].as_f64().unwrap_or(0.0) > 0.0);
    // Nothing fails: the legacy AWSNodeTemplate has no instance profile and
    // launches with the deployment's (Karpenter's
    // `aws.defaultInstanceProfile`).
    assert_eq!(free["failed"], serde_json::json!([]), "{free}");
    assert!(
        free["launched"]
            .as_array()
            .expect("launched")
            .iter()
            .any(|l| l["nodePool"] == "legacy-team"),
        "{free}"
    );

    // No spot capacity for the type the first NodeClaim launched: EC2
    // (the simulator) skips the exhausted pool inside the same CreateFleet
    // call and the NodeClaim lands on the next offering.
    let (ty, ct) = first[0].clone();
    assert_eq!(ct, "spot");
    let limited = simulate(&["--capacity", &format!("{ty}:spot=0")]);
    let after = launched(&limited);
    assert_eq!(after.len(), first.len(), "every NodeClaim still launches");
    assert!(
        !after.contains(&(ty.clone(), "spot".to_string())),
        "{limited}"
    );
}

#[test]
fn bad_capacity_limits_are_usage_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["simulate", "-f", "examples/demo", "--capacity", "m5.large"])
        .current_dir(root())
        .output()
        .expect("run flotilla");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TYPE[:ZONE]"));
}
