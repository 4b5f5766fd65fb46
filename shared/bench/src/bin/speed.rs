//! `cargo run --release -p flotilla-bench --bin speed -- [--pods 100,1000,10000] [--mix NAME]... [--region R] [--seed S]`
//!
//! Runs each workload mix once per size against the embedded catalog and
//! prints one JSON object per run: wall time, pods/s, peak RSS, NodeClaims,
//! hourly price, and the Karpenter-style FFD baseline's price (sizes up to
//! `--baseline-max`, default 10000: the baseline is quadratic). Each run is a
//! child process of its own, so its peak RSS is its own. `--seed S` draws
//! another instance of each mix (the default is seed 1), to check that a
//! change holds beyond one draw. `planDigest` hashes the plan's JSON, so
//! that a change meant to keep plans is checked by comparing digests.

use flotilla_bench::{baseline, measure, mixes};
use flotilla_core::catalog::Catalog;

fn main() {
    let mut pods: Vec<usize> = vec![100, 1_000, 10_000];
    let mut selected: Vec<String> = Vec::new();
    let mut region = "us-west-2".to_string();
    let mut baseline_max = 10_000usize;
    let mut single = false;
    let mut seed = 1u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        match (a.as_str(), v) {
            ("--pods", Some(v)) => {
                pods = v.split(',').filter_map(|s| s.trim().parse().ok()).collect();
            }
            ("--mix", Some(v)) => selected.push(v),
            ("--region", Some(v)) => region = v,
            ("--baseline-max", Some(v)) => baseline_max = v.parse().unwrap_or(baseline_max),
            ("--single", Some(v)) => single = v == "1",
            ("--seed", Some(v)) => match v.parse() {
                Ok(s) => seed = s,
                Err(e) => {
                    eprintln!("--seed {v:?}: {e}");
                    std::process::exit(2);
                }
            },
            (other, _) => {
                eprintln!("usage: speed [--pods N,N] [--mix NAME]... [--region R] [--baseline-max N] [--seed S] (bad: {other})");
                std::process::exit(2);
            }
        }
    }
    let catalog = match Catalog::embedded(&region) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let names: Vec<String> = if selected.is_empty() {
        mixes::MIXES.iter().map(|s| s.to_string()).collect()
    } else {
        selected
    };
    if !single {
        // Re-run this binary once per (mix, size) so peak RSS is per run.
        let Ok(exe) = std::env::current_exe() else {
            eprintln!("cannot find this executable");
            std::process::exit(1);
        };
        for name in &names {
            for &n in &pods {
                let status = std::process::Command::new(&exe)
                    .args(["--single", "1", "--mix", name, "--pods", &n.to_string()])
                    .args([
                        "--region",
                        &region,
                        "--baseline-max",
                        &baseline_max.to_string(),
                        "--seed",
                        &seed.to_string(),
                    ])
                    .status();
                if !status.is_ok_and(|s| s.success()) {
                    eprintln!("run {name} × {n} failed");
                    std::process::exit(1);
                }
            }
        }
        return;
    }
    for name in &names {
        for &n in &pods {
            let Some(state) = mixes::build(name, n, seed) else {
                eprintln!("unknown mix {name:?}; mixes: {}", mixes::MIXES.join(", "));
                std::process::exit(2);
            };
            let (fig, plan) = measure::run(name, &state, &catalog);
            let mut v = serde_json::to_value(&fig).unwrap_or_default();
            v["planDigest"] = serde_json::json!(plan_digest(&plan));
            if n <= baseline_max {
                let b = baseline::plan(&state, &catalog);
                v["ffdHourlyPrice"] = serde_json::json!(b.hourly_price);
                v["ffdTotalHourlyPrice"] = serde_json::json!(b.total_hourly_price);
                v["ffdNodeClaims"] = serde_json::json!(b.node_claims);
                v["ffdUnschedulable"] = serde_json::json!(b.unschedulable);
            }
            v["catalogTypes"] = serde_json::json!(catalog.entries.len());
            println!("{v}");
        }
    }
}

/// A digest of the plan's JSON (FNV-1a, 64 bits, hex): two runs planned
/// alike when their digests match, so a change meant to keep plans can be
/// checked mix by mix.
fn plan_digest(plan: &flotilla_core::plan::Plan) -> String {
    let json = serde_json::to_vec(plan).unwrap_or_default();
    format!("{:016x}", flotilla_core::state::compact::fnv(&json))
}
