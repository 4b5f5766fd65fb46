//! What consolidation finds on a fresh plan: plan a mix
//! (`flotilla_bench::mixes`), launch the plan as nodes
//! (`disruption_apply::launch_plan`), then run Flotilla's disruption
//! engine to its fixed point (`disruption_rounds::ours`) with every
//! NodePool consolidating at once and without budgets. A plan that
//! consolidation makes much cheaper right after it launched leaves money
//! on the table, and in a real cluster it churns: nodes launched and
//! drained within minutes.
//!
//! `cargo run --release -p flotilla-bench --bin plan_stability --
//!  [--mix NAME]... [--pods N (default 2000)] [--seeds K (1..=K, default 3)]
//!  [--max-rounds N (default 30)] [--region R]`
//!
//! Prints one JSON object per (mix, seed): the plan's $/h, after
//! consolidation, the saving in percent, nodes, rounds, and what the
//! bench's validity check (`disruption_apply::violations`) finds on the
//! consolidated cluster that it did not on the plan.

use std::process::ExitCode;

use flotilla_bench::disruption_apply::{cluster_price, launch_plan, violations};
use flotilla_bench::disruption_rounds;
use flotilla_bench::fragmented::NOW;
use flotilla_bench::mixes::{self, Rng};
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use serde_json::json;

struct Args {
    mixes: Vec<String>,
    pods: usize,
    seeds: u64,
    max_rounds: usize,
    region: String,
}

fn usage() -> &'static str {
    "usage: plan_stability [--mix NAME]... [--pods N (default 2000)] [--seeds K (default 3)] \
     [--max-rounds N (default 30)] [--region R]"
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        mixes: vec![],
        pods: 2_000,
        seeds: 3,
        max_rounds: 30,
        region: "us-west-2".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--mix" => a.mixes.push(value()?),
            "--pods" => a.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--seeds" => a.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--max-rounds" => {
                a.max_rounds = value()?.parse().map_err(|e| format!("--max-rounds: {e}"))?
            }
            "--region" => a.region = value()?,
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if a.mixes.is_empty() {
        a.mixes = ["independent", "random", "assorted"]
            .map(String::from)
            .to_vec();
    }
    Ok(a)
}

fn one(a: &Args, catalog: &Catalog, mix: &str, seed: u64) -> Result<serde_json::Value, String> {
    let state = mixes::build(mix, a.pods, seed)
        .ok_or_else(|| format!("unknown mix {mix:?}; mixes: {}", mixes::MIXES.join(", ")))?;
    let plan = schedule(&state, catalog, &SchedulerOptions::default());
    let mut rng = Rng::new(seed);
    let mut launched = launch_plan(&state, &plan, catalog, NOW - 3_600, &mut rng)?;
    let before = cluster_price(catalog, &launched)?;
    // The check (`violations`) counts a zone spread's pods by who carries
    // the constraint, not by its selector: on mixes whose selectors match
    // pods without it (`independent`) it flags valid plans. What counts is
    // what consolidation adds to what the plan shows.
    let in_plan = violations(&launched);
    let nodes_before = launched.nodes.len();
    let r = disruption_rounds::ours(&mut launched, catalog, NOW, a.max_rounds, &mut rng);
    let after = cluster_price(catalog, &launched)?;
    let added: Vec<String> = (violations(&launched).into_iter())
        .filter(|v| !in_plan.contains(v))
        .collect();
    Ok(json!({
        "mix": mix,
        "pods": a.pods,
        "seed": seed,
        "planHourlyPrice": before,
        "consolidatedHourlyPrice": after,
        "savingPercent": if before > 0.0 { (1.0 - after / before) * 100.0 } else { 0.0 },
        "nodesBefore": nodes_before,
        "nodesAfter": launched.nodes.len(),
        "nodesDisrupted": r.nodes_disrupted,
        "replacements": r.replacements,
        "podsMoved": r.pods_moved,
        "rounds": r.rounds,
        "converged": r.converged,
        "decisionSeconds": r.decision_seconds,
        "violationsAdded": added,
        "applyErrors": r.apply_errors,
    }))
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// Every (mix, seed); whether all of them ran.
fn run() -> Result<bool, String> {
    let a = parse()?;
    let catalog = Catalog::embedded(&a.region).map_err(|e| format!("catalog {}: {e}", a.region))?;
    let mut all = true;
    for mix in &a.mixes {
        for seed in 1..=a.seeds {
            match one(&a, &catalog, mix, seed) {
                Ok(v) => println!("{v}"),
                Err(e) => {
                    eprintln!("{mix} seed {seed}: {e}");
                    all = false;
                }
            }
        }
    }
    Ok(all)
}
