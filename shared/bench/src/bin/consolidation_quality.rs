//! Disruption quality on fragmented clusters (`flotilla_bench::fragmented`):
//! the cluster's $/h before, after Flotilla's decisions, after the
//! Karpenter-style baseline (`flotilla_bench::disruption_baseline`), after
//! a fresh plan of the same pods by the scheduler, and the LP lower bound
//! of the pods (`shared/bench/bound.py`, HiGHS, as `--bin quality`).
//! `lpBoundPinned` is a tighter bound of what consolidation may reach: the
//! nodes no decision may remove (a do-not-disrupt pod or node,
//! `disruption_rounds::pinned`) at their price, plus the LP bound of every
//! other pod placed on their room or on new nodes (the spread-aware bound
//! when bound.py has one: `spreadLpBound`, zone spreads at zone prices;
//! `gapOursPinnedPercent`).
//!
//! `cargo run --release -p flotilla-bench --bin consolidation_quality --
//!  [--nodes 100,300,1000] [--pods-per-node 30] [--mix NAME]... [--seeds K]
//!  [--budget PERCENT] [--max-rounds N] [--baseline-max-commands N]
//!  [--baseline-time-limit SECS] [--python PATH] [--out DIR]
//!  [--lp-time-limit SECS] [--no-bound] [--region R]`
//!
//! Both deciders run to a fixed point under the NodePool's budget (default
//! 10%, Karpenter's): decide, carry the decisions out, decide again on the
//! result, until nothing is decided (ours: at most `--max-rounds` runs;
//! the baseline: one command per round, at most `--baseline-max-commands`
//! and `--baseline-time-limit` of decision time). After every round the
//! cluster is checked (`disruption_apply::violations`); at the fixed point
//! one more run an hour later must decide nothing (stability).
//!
//! Prints one JSON object per (mix, nodes, seed), then a summary object.
//! The fixed mix runs seed 1; `fragmented-random` seeds 1..=K (default 3).

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use flotilla_bench::disruption_rounds::{self, pods_beside_pinned, pods_only, price, Rounds};
use flotilla_bench::fragmented::{self, Params, NOW};
use flotilla_bench::mixes::Rng;
use flotilla_bench::scenario;
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use serde_json::{json, Value};

struct Args {
    nodes: Vec<usize>,
    pods_per_node: usize,
    mixes: Vec<String>,
    seeds: u64,
    budget: u32,
    max_rounds: usize,
    baseline_max_commands: usize,
    baseline_time_limit: f64,
    python: String,
    out: PathBuf,
    lp_time_limit: f64,
    bound: bool,
    region: String,
}

fn usage() -> &'static str {
    "usage: consolidation_quality [--nodes N,N (default 100,300,1000)] [--pods-per-node K (default 30)] \
     [--mix fragmented|fragmented-random]... [--seeds K (fragmented-random seeds 1..=K, default 3)] \
     [--budget PERCENT (default 10)] [--max-rounds N (default 60)] \
     [--baseline-max-commands N (default 5000)] [--baseline-time-limit SECS (per case, default 900)] \
     [--python PATH (default $HOME/.cache/flotilla/venv/bin/python)] [--out DIR] \
     [--lp-time-limit SECS (default 60)] [--no-bound] [--region R]"
}

fn parse() -> Result<Args, String> {
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    let mut a = Args {
        nodes: vec![100, 300, 1_000],
        pods_per_node: 30,
        mixes: vec![],
        seeds: 3,
        budget: 10,
        max_rounds: 60,
        baseline_max_commands: 5_000,
        baseline_time_limit: 900.0,
        python: format!("{home}/.cache/flotilla/venv/bin/python"),
        out: std::env::temp_dir().join("flotilla-consolidation-quality"),
        lp_time_limit: 60.0,
        bound: true,
        region: "us-west-2".into(),
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
            "--seeds" => a.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--budget" => a.budget = value()?.parse().map_err(|e| format!("--budget: {e}"))?,
            "--max-rounds" => {
                a.max_rounds = value()?.parse().map_err(|e| format!("--max-rounds: {e}"))?
            }
            "--baseline-max-commands" => {
                a.baseline_max_commands = value()?
                    .parse()
                    .map_err(|e| format!("--baseline-max-commands: {e}"))?
            }
            "--baseline-time-limit" => {
                a.baseline_time_limit = value()?
                    .parse()
                    .map_err(|e| format!("--baseline-time-limit: {e}"))?
            }
            "--python" => a.python = value()?,
            "--out" => a.out = PathBuf::from(value()?),
            "--lp-time-limit" => {
                a.lp_time_limit = value()?
                    .parse()
                    .map_err(|e| format!("--lp-time-limit: {e}"))?
            }
            "--no-bound" => a.bound = false,
            "--region" => a.region = value()?,
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
    if a.baseline_time_limit.is_nan() || a.baseline_time_limit < 0.0 {
        return Err("--baseline-time-limit must be >= 0".into());
    }
    Ok(a)
}

fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn nodes_json(r: &Rounds) -> Value {
    json!({
        "rounds": r.rounds,
        "converged": r.converged,
        "nodesDisrupted": r.nodes_disrupted,
        "nodesByReason": r.nodes_by_reason,
        "replacements": r.replacements,
        "podsMoved": r.pods_moved,
        "claimedSaving": r4(r.claimed_saving),
        "decisionSeconds": r2(r.decision_seconds),
        "maxRoundSeconds": r4(r.max_round_seconds),
        "roundSeconds": r.round_seconds.iter().map(|s| r2(*s)).collect::<Vec<_>>(),
        "valid": r.violations.is_empty() && r.apply_errors.is_empty(),
        "violations": r.violations,
        "applyErrors": r.apply_errors,
        "secondRunDecisions": r.second_run_decisions,
    })
}

/// One (mix, nodes, seed): the row (without the bound) and the scenario
/// file for bound.py.
fn case(a: &Args, catalog: &Catalog, mix: &str, nodes: usize, seed: u64) -> Result<Value, String> {
    let pods = nodes * a.pods_per_node;
    let params = Params::of_mix(mix, nodes, pods, seed)
        .ok_or_else(|| format!("unknown mix {mix}"))?
        .with_budget(a.budget);
    let start = fragmented::build(&params, catalog).map_err(|e| e.to_string())?;
    let summary = fragmented::summarise(&start);
    let before = price(catalog, &start);
    let initial_violations = flotilla_bench::disruption_apply::violations(&start).len();

    let pending = pods_only(&start);
    let t = Instant::now();
    let fresh = schedule(&pending, catalog, &SchedulerOptions::default());
    let fresh_seconds = t.elapsed().as_secs_f64();

    let mut ours_state = start.clone();
    let ours = disruption_rounds::ours(
        &mut ours_state,
        catalog,
        NOW,
        a.max_rounds,
        &mut Rng::new(seed),
    );
    let ours_price = price(catalog, &ours_state);
    eprintln!(
        "{mix} × {nodes} seed {seed}: ours {:.2} → {:.2} $/h in {} rounds ({:.1} s)",
        before, ours_price, ours.rounds, ours.decision_seconds
    );

    let mut base_state = start.clone();
    let base = disruption_rounds::baseline(
        &mut base_state,
        catalog,
        NOW,
        a.baseline_max_commands,
        Duration::try_from_secs_f64(a.baseline_time_limit).unwrap_or(Duration::MAX),
        &mut Rng::new(seed.wrapping_add(1)),
    );
    let base_price = price(catalog, &base_state);
    eprintln!(
        "{mix} × {nodes} seed {seed}: baseline {:.2} → {:.2} $/h in {} commands ({:.1} s)",
        before, base_price, base.rounds, base.decision_seconds
    );

    let mut sc = scenario::export(&pending, catalog);
    sc["mix"] = json!(mix);
    sc["seed"] = json!(seed);
    // The fresh plan places every pod: its price caps an exact search.
    if fresh.unschedulable.is_empty() {
        sc["upperBound"] = json!(fresh.summary.total_hourly_price);
    }
    let file = format!("{mix}-{nodes}-{seed}.json");
    // The same with the nodes no decision may remove kept as they are.
    let (beside, pinned_nodes) = pods_beside_pinned(&start);
    let pinned_price = price(catalog, &beside);
    let mut pinned_sc = scenario::export(&beside, catalog);
    pinned_sc["mix"] = json!(mix);
    pinned_sc["seed"] = json!(seed);
    let pinned_file = format!("{mix}-{nodes}-{seed}-pinned.json");
    if a.bound {
        std::fs::write(a.out.join(&file), sc.to_string()).map_err(|e| format!("{file}: {e}"))?;
        std::fs::write(a.out.join(&pinned_file), pinned_sc.to_string())
            .map_err(|e| format!("{pinned_file}: {e}"))?;
    }
    Ok(json!({
        "file": file,
        "pinnedFile": pinned_file,
        "pinnedNodes": pinned_nodes,
        "pinnedPrice": r4(pinned_price),
        "mix": mix,
        "seed": seed,
        "nodes": summary.nodes,
        "pods": summary.pods,
        "emptyNodes": summary.empty_nodes,
        "meanFill": r4(summary.mean_fill),
        "budgetPercent": a.budget,
        "mode": format!("fixed point under a {}% budget (decide, carry out, repeat until nothing is decided)", a.budget),
        "initialViolations": initial_violations,
        "priceBefore": r4(before),
        "priceOurs": r4(ours_price),
        "priceBaseline": r4(base_price),
        "priceFreshPlan": r4(fresh.summary.total_hourly_price),
        "freshPlanUnschedulable": fresh.unschedulable.len(),
        "freshPlanSeconds": r2(fresh_seconds),
        "nodesBefore": start.nodes.len(),
        "nodesOurs": ours_state.nodes.len(),
        "nodesBaseline": base_state.nodes.len(),
        "nodesFreshPlan": fresh.node_claims.len(),
        "ours": nodes_json(&ours),
        "baseline": nodes_json(&base),
        "oursLeBaseline": ours_price <= base_price + 1e-6,
        "savingOursPercent": r2((1.0 - ours_price / before) * 100.0),
        "savingBaselinePercent": r2((1.0 - base_price / before) * 100.0),
    }))
}

/// How far `row[key]` ($/h) is above `bound`, in percent (2 decimals).
fn gap_percent(row: &Value, key: &str, bound: f64) -> f64 {
    let p = row[key].as_f64().unwrap_or(f64::NAN);
    r2((p / bound - 1.0) * 100.0)
}

/// The best bound bound.py found for one scenario: the spread-aware one
/// when it has it (never below the plain LP bound), else the LP bound.
fn best_bound(b: &Value) -> Option<f64> {
    b["spreadLpBound"]
        .as_f64()
        .or_else(|| b["lpBound"].as_f64())
}

/// Runs bound.py over `dir`; its JSON array, or why not.
fn bounds(a: &Args) -> Result<Vec<Value>, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bound.py");
    let o = Command::new(&a.python)
        .arg(&script)
        .arg(&a.out)
        .arg("--lp-time-limit")
        .arg(a.lp_time_limit.to_string())
        .arg("--spread")
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} (install highspy: see shared/bench/README.md): {e}",
                a.python
            )
        })?;
    if !o.status.success() {
        return Err(format!(
            "{} {} failed ({}): {}",
            a.python,
            script.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    match serde_json::from_slice::<Value>(&o.stdout) {
        Ok(Value::Array(v)) => Ok(v),
        _ => Err(format!(
            "bound.py printed no JSON array:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )),
    }
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
    if a.bound {
        if let Err(e) = std::fs::create_dir_all(&a.out) {
            eprintln!("{}: {e}", a.out.display());
            return ExitCode::FAILURE;
        }
        // Only this run's scenarios for bound.py.
        if let Ok(rd) = std::fs::read_dir(&a.out) {
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "json") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    let mut rows = Vec::new();
    for mix in &a.mixes {
        let seeds: Vec<u64> = if mix == "fragmented" {
            vec![1]
        } else {
            (1..=a.seeds.max(1)).collect()
        };
        for &n in &a.nodes {
            for &seed in &seeds {
                match case(&a, &catalog, mix, n, seed) {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        eprintln!("{mix} × {n} seed {seed}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    let found = if a.bound {
        match bounds(&a) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{e}");
                vec![]
            }
        }
    } else {
        vec![]
    };
    let (mut all_le, mut all_valid, mut all_stable) = (true, true, true);
    let mut gaps = Vec::new();
    let mut pinned_gaps = Vec::new();
    for mut row in rows {
        let b = found.iter().find(|b| b["file"] == row["file"]);
        let lp = b.and_then(|b| b["lpBound"].as_f64()).filter(|x| *x > 0.0);
        let gap = |key: &str| lp.map(|lp| gap_percent(&row, key, lp));
        let (g_ours, g_base, g_before, g_fresh) = (
            gap("priceOurs"),
            gap("priceBaseline"),
            gap("priceBefore"),
            gap("priceFreshPlan"),
        );
        row["lpBound"] = json!(lp.map(r4));
        row["lpStatus"] = b.map_or(Value::Null, |b| b["lpStatus"].clone());
        row["lpSeconds"] = b.map_or(Value::Null, |b| b["lpSeconds"].clone());
        row["gapOursPercent"] = json!(g_ours);
        row["gapBaselinePercent"] = json!(g_base);
        row["gapBeforePercent"] = json!(g_before);
        row["gapFreshPlanPercent"] = json!(g_fresh);
        row["withinFivePercentOfBound"] = json!(g_ours.map(|g| g <= 5.0));
        // The bound with pinned nodes: their price plus the LP bound of
        // the other pods beside them (never below the plain bound).
        let pb = found.iter().find(|b| b["file"] == row["pinnedFile"]);
        let pinned = pb
            .and_then(best_bound)
            .zip(row["pinnedPrice"].as_f64())
            .map(|(lp, kept)| lp + kept)
            .map(|x| lp.map_or(x, |lp| x.max(lp)));
        let g_pinned = pinned.map(|b| gap_percent(&row, "priceOurs", b));
        row["lpBoundPinned"] = json!(pinned.map(r4));
        // The spread-aware bound of all the pods (zone spreads, zone
        // prices), and the gap to it.
        let spread = b.and_then(|b| b["spreadLpBound"].as_f64());
        row["spreadLpBound"] = json!(spread.map(r4));
        row["gapOursSpreadPercent"] = json!(spread.map(|s| gap_percent(&row, "priceOurs", s)));
        row["lpStatusPinned"] = pb.map_or(Value::Null, |b| b["lpStatus"].clone());
        row["gapOursPinnedPercent"] = json!(g_pinned);
        if let Some(g) = g_pinned {
            pinned_gaps.push(g);
        }
        if let Some(g) = g_ours {
            gaps.push(g);
        }
        all_le &= row["oursLeBaseline"].as_bool().unwrap_or(false);
        all_valid &= row["ours"]["valid"].as_bool().unwrap_or(false);
        all_stable &= row["ours"]["secondRunDecisions"].as_u64() == Some(0);
        println!("{row}");
    }
    gaps.sort_by(f64::total_cmp);
    pinned_gaps.sort_by(f64::total_cmp);
    println!(
        "{}",
        json!({
            "summary": true,
            "oursNeverWorseThanBaseline": all_le,
            "oursAlwaysValid": all_valid,
            "oursAlwaysStable": all_stable,
            "gapOursPercentMin": gaps.first(),
            "gapOursPercentMedian": gaps.get(gaps.len() / 2),
            "gapOursPercentMax": gaps.last(),
            "gapOursPinnedPercentMin": pinned_gaps.first(),
            "gapOursPinnedPercentMedian": pinned_gaps.get(pinned_gaps.len() / 2),
            "gapOursPinnedPercentMax": pinned_gaps.last(),
        })
    );
    ExitCode::SUCCESS
}
