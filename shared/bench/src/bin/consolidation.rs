//! Decision time of `flotilla_core::disruption::disrupt` on fragmented
//! clusters (`flotilla_bench::fragmented`).
//!
//! `cargo run --release -p flotilla-bench --bin consolidation -- [--nodes 1000,5000]
//!  [--pods-per-node 30] [--mix fragmented|fragmented-random]... [--seed S]
//!  [--budget PERCENT] [--runs K] [--region R]`
//!
//! Prints one JSON object per (mix, size, run): the whole `disrupt` call's
//! wall time and CPU time (one core: CPU ≈ wall), peak RSS, decisions,
//! nodes disrupted, replacements, blocked candidates, the $/h the decisions
//! save. Each run is a child process of its own, so its peak RSS is its
//! own.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use flotilla_bench::fragmented::{self, Params, NOW};
use flotilla_bench::measure::peak_rss_kib;
use flotilla_core::catalog::Catalog;
use flotilla_core::disruption::{disrupt, DisruptOptions};
use serde_json::json;

struct Args {
    nodes: Vec<usize>,
    pods_per_node: usize,
    mixes: Vec<String>,
    seed: u64,
    budget: u32,
    runs: usize,
    region: String,
    single: bool,
}

fn usage() -> &'static str {
    "usage: consolidation [--nodes N,N (default 1000,5000)] [--pods-per-node K (default 30)] \
     [--mix fragmented|fragmented-random]... [--seed S (default 1)] [--budget PERCENT (default 10)] \
     [--runs K (default 1)] [--region R]"
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        nodes: vec![1_000, 5_000],
        pods_per_node: 30,
        mixes: vec![],
        seed: 1,
        budget: 10,
        runs: 1,
        region: "us-west-2".into(),
        single: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => {
                a.nodes = value()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--nodes {s:?}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--pods-per-node" => {
                a.pods_per_node = value()?
                    .parse()
                    .map_err(|e| format!("--pods-per-node: {e}"))?
            }
            "--mix" => a.mixes.push(value()?),
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--budget" => a.budget = value()?.parse().map_err(|e| format!("--budget: {e}"))?,
            "--runs" => a.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--region" => a.region = value()?,
            "--single" => a.single = true,
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if a.mixes.is_empty() {
        a.mixes = fragmented::MIXES.iter().map(|s| s.to_string()).collect();
    }
    for m in &a.mixes {
        if !fragmented::MIXES.contains(&m.as_str()) {
            return Err(format!(
                "unknown mix {m:?}; mixes: {}",
                fragmented::MIXES.join(", ")
            ));
        }
    }
    Ok(a)
}

/// CPU time (user + system) of this process so far, seconds, from
/// `/proc/self/stat` (clock ticks of 1/100 s).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

fn one(a: &Args, catalog: &Catalog, mix: &str, nodes: usize) -> Result<(), String> {
    let pods = nodes * a.pods_per_node;
    let params = Params::of_mix(mix, nodes, pods, a.seed)
        .ok_or_else(|| format!("unknown mix {mix}"))?
        .with_budget(a.budget);
    let state = fragmented::build(&params, catalog).map_err(|e| e.to_string())?;
    let summary = fragmented::summarise(&state);
    let opts = DisruptOptions {
        now: NOW,
        ..DisruptOptions::default()
    };
    let input_rss = peak_rss_kib();
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let out = disrupt(&state, catalog, &opts);
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| round(b - a, 2));
    let peak = peak_rss_kib();
    let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut disrupted, mut replacements, mut before, mut after) = (0, 0, 0.0, 0.0);
    for d in &out.decisions {
        *by_reason.entry(d.reason.as_str()).or_default() += d.nodes.len();
        disrupted += d.nodes.len();
        replacements += d.replacements.len();
        before += d.price.before;
        after += d.price.after;
    }
    let v = json!({
        "mix": mix,
        "seed": a.seed,
        "nodes": summary.nodes,
        "pods": summary.pods,
        "emptyNodes": summary.empty_nodes,
        "budgetPercent": a.budget,
        "decisionSeconds": round(wall, 4),
        "cpuSeconds": cpu,
        "peakRssMib": peak.map(|k| round(k as f64 / 1024.0, 1)),
        "inputRssMib": input_rss.map(|k| round(k as f64 / 1024.0, 1)),
        "decisions": out.decisions.len(),
        "nodesDisrupted": disrupted,
        "nodesDisruptedByReason": by_reason,
        "replacements": replacements,
        "blocked": out.blocked.len(),
        "hourlySaving": round(before - after, 4),
        "warnings": out.warnings.len(),
    });
    println!("{v}");
    Ok(())
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let catalog = match Catalog::embedded(&a.region) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if a.single {
        for mix in &a.mixes {
            for &n in &a.nodes {
                if let Err(e) = one(&a, &catalog, mix, n) {
                    eprintln!("{mix} × {n}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    // One child process per run, so its peak RSS is its own.
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("cannot find this executable");
        return ExitCode::FAILURE;
    };
    for mix in &a.mixes {
        for &n in &a.nodes {
            for _ in 0..a.runs.max(1) {
                let status = std::process::Command::new(&exe)
                    .args(["--single", "--mix", mix, "--nodes", &n.to_string()])
                    .args(["--pods-per-node", &a.pods_per_node.to_string()])
                    .args(["--seed", &a.seed.to_string()])
                    .args(["--budget", &a.budget.to_string()])
                    .args(["--region", &a.region])
                    .status();
                if !status.is_ok_and(|s| s.success()) {
                    eprintln!("run {mix} × {n} failed");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
