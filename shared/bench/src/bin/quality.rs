//! Plan-quality report: for each workload mix, our scheduler's price, the
//! first-fit-decreasing baseline's price, and proven lower bounds (the
//! bin-packing LP over packing patterns by column generation, the older
//! compact LP, plus exact ILP optima for small scenarios) from
//! `shared/bench/bound.py` (HiGHS). See `shared/bench/README.md`.
//!
//! Usage: quality [--pods N] [--seed S] [--small] [--seeds K]
//!                [--python PATH] [--out DIR] [--time-limit SECS]
//!                [--lp-time-limit SECS] [--plans]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use flotilla_bench::{baseline, measure, mixes, scenario};
use flotilla_core::catalog::Catalog;
use serde_json::{json, Value};

struct Args {
    pods: usize,
    seed: u64,
    small: bool,
    seeds: u64,
    python: String,
    out: PathBuf,
    time_limit: f64,
    lp_time_limit: f64,
    mixes: Vec<String>,
    /// Also write our plans (`DIR/plans/MIX-PODS-SEED.plan.json`).
    plans: bool,
}

fn usage() -> &'static str {
    "usage: quality [--pods N (default 500)] [--seed S (default 1)] [--small (20-pod ILP cases)] \
     [--seeds K (small mode, default 3)] [--mix NAME]... [--python PATH \
     (default $HOME/.cache/flotilla/venv/bin/python)] [--out DIR] [--time-limit SECS (per ILP, default 120)] \
     [--lp-time-limit SECS (column generation per scenario, default 60)] \
     [--plans (also write our plans to DIR/plans/)]"
}

fn parse_args() -> Result<Args, String> {
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    let mut a = Args {
        pods: 500,
        seed: 1,
        small: false,
        seeds: 3,
        python: format!("{home}/.cache/flotilla/venv/bin/python"),
        out: std::env::temp_dir().join("flotilla-quality"),
        time_limit: 120.0,
        lp_time_limit: 60.0,
        mixes: vec![],
        plans: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--pods" => a.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--seeds" => a.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--small" => a.small = true,
            "--plans" => a.plans = true,
            "--python" => a.python = value()?,
            "--out" => a.out = PathBuf::from(value()?),
            "--mix" => a.mixes.push(value()?),
            "--time-limit" => {
                a.time_limit = value()?.parse().map_err(|e| format!("--time-limit: {e}"))?
            }
            "--lp-time-limit" => {
                a.lp_time_limit = value()?
                    .parse()
                    .map_err(|e| format!("--lp-time-limit: {e}"))?
            }
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if a.mixes.is_empty() {
        a.mixes = mixes::MIXES.iter().map(|m| m.to_string()).collect();
    }
    Ok(a)
}

fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let catalog = match Catalog::embedded("us-west-2") {
        Ok(c) => c,
        Err(e) => {
            eprintln!("catalog: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("{}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    // Clear scenario files of earlier runs so bound.py reads only ours.
    if let Ok(rd) = std::fs::read_dir(&args.out) {
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "json") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    let (pods, seeds): (usize, Vec<u64>) = if args.small {
        (20, (1..=args.seeds).collect())
    } else {
        (args.pods, vec![args.seed])
    };
    let mut rows: Vec<(String, Value)> = Vec::new();
    for mix in &args.mixes {
        for &seed in &seeds {
            let Some(state) = mixes::build(mix, pods, seed) else {
                eprintln!("unknown mix {mix:?}");
                return ExitCode::from(2);
            };
            let (ours, plan) = measure::run(mix, &state, &catalog);
            let ffd = baseline::plan(&state, &catalog);
            let mut sc = scenario::export_beside(&state, &catalog, Some(&plan));
            let unplaceable = sc["unplaceable"].as_u64().unwrap_or(0) as usize;
            // A plan that places every placeable pod is feasible for the
            // relaxation, so its price caps the ILP's search.
            let mut ub = f64::INFINITY;
            if ours.scheduled + unplaceable >= pods {
                ub = ub.min(ours.total_hourly_price);
            }
            // FFD ignores topology spread: its plan caps the search only when
            // no class carries a spread constraint the ILP may model.
            let spread = sc["spreadGroups"].as_array().is_some_and(|g| !g.is_empty());
            if ffd.unschedulable <= unplaceable && !spread {
                ub = ub.min(ffd.total_hourly_price);
            }
            // What our plan does with each spread group: bound.py's
            // spreadHonouredLpBound holds the spreads it honours.
            sc["planSpread"] = scenario::plan_spread(&state, &plan);
            if args.plans {
                let dir = args.out.join("plans");
                let file = dir.join(format!("{mix}-{pods}-{seed}.plan.json"));
                let written = std::fs::create_dir_all(&dir).and_then(|_| {
                    std::fs::write(&file, serde_json::to_string(&plan).unwrap_or_default())
                });
                if let Err(e) = written {
                    eprintln!("{}: {e}", file.display());
                    return ExitCode::FAILURE;
                }
            }
            sc["mix"] = json!(mix);
            sc["seed"] = json!(seed);
            if ub.is_finite() {
                sc["upperBound"] = json!(ub);
            }
            let file = format!("{mix}-{pods}-{seed}.json");
            if let Err(e) = std::fs::write(args.out.join(&file), sc.to_string()) {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
            rows.push((
                file,
                json!({
                    "mix": mix,
                    "seed": seed,
                    "pods": pods,
                    "ourPrice": round(ours.total_hourly_price),
                    "ourInstancePrice": round(ours.hourly_price),
                    "ourNodeClaims": ours.node_claims,
                    "ourUnschedulable": pods - ours.scheduled,
                    "ffdPrice": ffd.total_hourly_price,
                    "ffdNodeClaims": ffd.node_claims,
                    "ffdUnschedulable": ffd.unschedulable,
                    "unplaceableInRelaxation": unplaceable,
                }),
            ));
        }
    }

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bound.py");
    let output = Command::new(&args.python)
        .arg(&script)
        .arg(&args.out)
        .arg("--time-limit")
        .arg(args.time_limit.to_string())
        .arg("--lp-time-limit")
        .arg(args.lp_time_limit.to_string())
        .arg("--spread")
        .output();
    let bounds: Vec<Value> = match output {
        Ok(o) if o.status.success() => match serde_json::from_slice::<Value>(&o.stdout) {
            Ok(Value::Array(v)) => v,
            Ok(_) | Err(_) => {
                eprintln!(
                    "bound.py printed no JSON array:\n{}",
                    String::from_utf8_lossy(&o.stderr)
                );
                vec![]
            }
        },
        Ok(o) => {
            eprintln!(
                "{} {} failed ({}): {}",
                args.python,
                script.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            vec![]
        }
        Err(e) => {
            eprintln!(
                "cannot run {} (install highspy: see shared/bench/README.md): {e}",
                args.python
            );
            vec![]
        }
    };

    let report: Vec<Value> = rows
        .into_iter()
        .map(|(file, mut row)| {
            let b = bounds
                .iter()
                .find(|b| b["file"].as_str() == Some(file.as_str()));
            // lpBound: the pattern (column-generation) LP bound;
            // compactLpBound: the older compact LP, kept for comparison.
            let lp = b.and_then(|b| b["lpBound"].as_f64());
            let compact = b.and_then(|b| b["compactLpBound"].as_f64());
            let ilp = b.and_then(|b| b["ilpOptimum"].as_f64());
            let ours = row["ourPrice"].as_f64().unwrap_or(f64::NAN);
            let ffd = row["ffdPrice"].as_f64().unwrap_or(f64::NAN);
            let best = ilp.or(lp);
            let gap_to = |p: f64, b: Option<f64>| {
                b.filter(|b| *b > 0.0).map(|b| round((p / b - 1.0) * 100.0))
            };
            row["lpBound"] = json!(lp);
            row["compactLpBound"] = json!(compact);
            row["ilpOptimum"] = json!(ilp);
            row["gapPercent"] = json!(gap_to(ours, best));
            row["ffdGapPercent"] = json!(gap_to(ffd, best));
            row["compactGapPercent"] = json!(gap_to(ours, compact));
            // The spread-aware bound (zone spreads and zone prices).
            let spread = b.and_then(|b| b["spreadLpBound"].as_f64());
            row["spreadLpBound"] = json!(spread);
            row["spreadGapPercent"] = json!(gap_to(ours, spread));
            // The same over plans that honour the spreads ours honours
            // (a comparison basis, not a bound on every valid plan).
            let honoured = b.and_then(|b| b["spreadHonouredLpBound"].as_f64());
            row["spreadHonouredLpBound"] = json!(honoured);
            row["spreadHonouredGapPercent"] = json!(gap_to(ours, honoured));
            row["gapBasis"] = json!(if ilp.is_some() {
                "ilpOptimum"
            } else {
                "lpBound"
            });
            if let Some(b) = b {
                for k in [
                    "lpStatus",
                    "lpBoundFrom",
                    "lpIterations",
                    "lpColumns",
                    "lpSeconds",
                    "ilpStatus",
                    "ilpDualBound",
                    "ilpIncumbent",
                    "ilpSeconds",
                    "ilpModels",
                    "ilpSkippedSpread",
                    "spreadLpStatus",
                    "spreadGroupsSplit",
                    "spreadSkipped",
                    "spreadLpSeconds",
                    "spreadHonouredLpStatus",
                    "spreadHonouredGroups",
                    "spreadHonouredSkipped",
                    "spreadHonouredLpSeconds",
                    "lpNodes",
                    "lpNodeTypes",
                    "spreadLpNodes",
                    "spreadHonouredLpNodes",
                    "spreadHonouredLpNodeTypes",
                    "keptTypes",
                    "classes",
                    "seconds",
                    "error",
                ] {
                    if !b[k].is_null() {
                        row[k] = b[k].clone();
                    }
                }
            }
            row
        })
        .collect();
    match serde_json::to_string_pretty(&report) {
        Ok(s) => println!("{s}"),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    if bounds.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
