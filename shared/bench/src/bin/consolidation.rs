//! Decision time of `flotilla_core::disruption::disrupt` on fragmented
//! clusters (`flotilla_bench::fragmented`).
//!
//! `cargo run --release -p flotilla-bench --bin consolidation -- [--nodes 1000,5000]
//!  [--pods-per-node 30] [--mix fragmented|fragmented-random]... [--seed S]
//!  [--budget PERCENT] [--runs K] [--region R] [--steady]`
//!
//! Prints one JSON object per (mix, size, run): the whole `disrupt` call's
//! wall time and CPU time (one core: CPU ≈ wall), peak RSS, decisions,
//! nodes disrupted, replacements, blocked candidates, the $/h the decisions
//! save. Each run is a child process of its own, so its peak RSS is its
//! own.
//!
//! `--steady` also carries the decisions out (`disruption_rounds::
//! apply_decisions`) and runs again, until a run decides nothing (at most
//! [`MAX_STEADY_ROUNDS`] rounds): that last run, on the consolidated
//! cluster, is timed as `steadySeconds`, with the process's peak RSS
//! during it (`steadyPeakRssMib`, the peak restarted before it) and what it
//! added to the RSS it started from (`steadyAddedRssMib`). A steady
//! cluster should be quick to leave alone.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use flotilla_bench::disruption_rounds::{apply_decisions, ROUND_SECONDS};
use flotilla_bench::fragmented::{self, Params, NOW};
use flotilla_bench::measure::{peak_rss_kib, restart_peak_rss};
use flotilla_bench::mixes::Rng;
use flotilla_core::catalog::Catalog;
use flotilla_core::disruption::{disrupt, DisruptOptions, Disruptions};
use flotilla_core::model::ClusterState;
use serde_json::json;

/// Rounds `--steady` carries out before it gives up on a fixed point.
const MAX_STEADY_ROUNDS: usize = 40;

struct Args {
    nodes: Vec<usize>,
    pods_per_node: usize,
    mixes: Vec<String>,
    seed: u64,
    budget: u32,
    runs: usize,
    region: String,
    single: bool,
    steady: bool,
}

fn usage() -> &'static str {
    "usage: consolidation [--nodes N,N (default 1000,5000)] [--pods-per-node K (default 30)] \
     [--mix fragmented|fragmented-random]... [--seed S (default 1)] [--budget PERCENT (default 10)] \
     [--runs K (default 1)] [--region R] [--steady]"
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
        steady: false,
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
            "--steady" => a.steady = true,
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

/// What the run on the consolidated cluster took.
struct Steady {
    rounds: usize,
    converged: bool,
    seconds: f64,
    /// Peak RSS while the last run ran (the process's, MiB).
    peak_rss_mib: Option<f64>,
    /// What the last run added to the RSS it started from, MiB.
    added_rss_mib: Option<f64>,
    decisions: usize,
    nodes: usize,
}

/// Carry `first` out on `state`, then rounds until a run decides nothing
/// (or [`MAX_STEADY_ROUNDS`]); the figures of that last run.
fn steady(
    mut state: ClusterState,
    catalog: &Catalog,
    first: &Disruptions,
    seed: u64,
) -> Result<Steady, String> {
    let mut rng = Rng::new(seed);
    let mut decisions = first.decisions.clone();
    let mut at = NOW;
    let mut s = Steady {
        rounds: 0,
        converged: decisions.is_empty(),
        seconds: 0.0,
        peak_rss_mib: None,
        added_rss_mib: None,
        decisions: decisions.len(),
        nodes: state.nodes.len(),
    };
    while !decisions.is_empty() && s.rounds < MAX_STEADY_ROUNDS {
        s.rounds += 1;
        let prefix = format!("r{}-", s.rounds);
        apply_decisions(&mut state, catalog, &decisions, at, &prefix, &mut rng)?;
        at += ROUND_SECONDS;
        let opts = DisruptOptions {
            now: at,
            ..DisruptOptions::default()
        };
        let base = restart_peak_rss();
        let start = Instant::now();
        decisions = disrupt(&state, catalog, &opts).decisions;
        s.seconds = start.elapsed().as_secs_f64();
        let peak = peak_rss_kib();
        s.peak_rss_mib = peak.map(|p| round(p as f64 / 1024.0, 1));
        s.added_rss_mib = peak
            .zip(base)
            .map(|(p, b)| round(p.saturating_sub(b) as f64 / 1024.0, 1));
        let removed: usize = decisions.iter().map(|d| d.nodes.len()).sum();
        let launched: usize = decisions.iter().map(|d| d.replacements.len()).sum();
        let relaunched = decisions
            .iter()
            .flat_map(|d| &d.nodes)
            .filter(|n| {
                n.starts_with('r')
                    && n[1..]
                        .split('-')
                        .next()
                        .is_some_and(|r| r.parse::<usize>().is_ok())
            })
            .count();
        let saved: f64 = decisions
            .iter()
            .map(|d| d.price.before - d.price.after)
            .sum();
        eprintln!(
            "steady round {}: {} nodes; {} decisions remove {removed} ({relaunched} launched by earlier rounds), launch {launched}, save ${saved:.2}/h; {:.2} s",
            s.rounds,
            state.nodes.len(),
            decisions.len(),
            s.seconds
        );
        s.converged = decisions.is_empty();
        s.decisions = decisions.len();
        s.nodes = state.nodes.len();
    }
    Ok(s)
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
    let v = if a.steady {
        let s = steady(state, catalog, &out, a.seed)?;
        let mut v = v;
        if let Some(o) = v.as_object_mut() {
            o.insert("steadyRounds".into(), json!(s.rounds));
            o.insert("steadyConverged".into(), json!(s.converged));
            o.insert("steadyNodes".into(), json!(s.nodes));
            o.insert("steadySeconds".into(), json!(round(s.seconds, 4)));
            o.insert("steadyPeakRssMib".into(), json!(s.peak_rss_mib));
            o.insert("steadyAddedRssMib".into(), json!(s.added_rss_mib));
            o.insert("steadyDecisions".into(), json!(s.decisions));
        }
        v
    } else {
        v
    };
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
                    .args(a.steady.then_some("--steady"))
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
