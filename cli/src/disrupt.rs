//! `flotilla disrupt`: the decisions Karpenter's disruption controller would
//! take now (the engine is `flotilla_core::disruption`), as a table for
//! people or JSON for programs.
//!
//! This is the imperative shell: the clock is read here (`--now` absent),
//! never in core.

use std::fmt::Write as _;

use flotilla_core::catalog::Catalog;
use flotilla_core::disruption::{self, Decision, DisruptOptions, Disruptions};
use flotilla_core::model::ClusterState;
use flotilla_core::scheduler::SchedulerOptions;

/// `--now`: an RFC 3339 timestamp (`2026-11-25T06:00:00Z`, or with an
/// offset) → Unix seconds. A clap value parser, so a bad value is a usage
/// error (exit 2) naming the flag.
pub fn parse_now(s: &str) -> Result<i64, String> {
    let t: jiff::Timestamp = s
        .trim()
        .parse()
        .map_err(|e| format!("not an RFC 3339 timestamp such as 2026-11-25T06:00:00Z ({e})"))?;
    Ok(t.as_second())
}

/// The wall clock, in Unix seconds (0 if it reads before 1970).
pub fn clock_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Runs the engine with the CLI's options: the decision time, and the
/// scheduler's (replacements) with the same time and the reservation gate.
pub fn decide(
    state: &ClusterState,
    catalog: &Catalog,
    now: i64,
    reserved_capacity: bool,
    min_values_policy: flotilla_core::scheduler::MinValuesPolicy,
) -> Disruptions {
    let opts = DisruptOptions {
        now,
        scheduler: SchedulerOptions {
            reserved_capacity,
            min_values_policy,
            now: Some(now),
            ..SchedulerOptions::default()
        },
        ..DisruptOptions::default()
    };
    disruption::disrupt(state, catalog, &opts)
}

/// `now` as RFC 3339 (UTC), for the table's heading.
fn rfc3339(now: i64) -> String {
    match jiff::Timestamp::from_second(now) {
        Ok(t) => t.to_string(),
        Err(_) => format!("{now} (Unix seconds)"),
    }
}

/// `$x.xxxx/h`, never a negative zero (an empty sum of `f64` is `-0.0`,
/// and a tiny negative rounds to one).
fn per_hour(x: f64) -> String {
    let r = (x * 1e4).round() / 1e4;
    let r = if r == 0.0 || !r.is_finite() { 0.0 } else { r };
    format!("${r:.4}/h")
}

/// `+$x/h` saved or `$x/h more`, for a price change.
fn saving(before: f64, after: f64) -> String {
    let delta = before - after;
    if delta >= 0.0 {
        format!("saves {}", per_hour(delta))
    } else {
        format!("costs {} more", per_hour(-delta))
    }
}

fn decision_block(out: &mut String, d: &Decision) {
    let _ = writeln!(
        out,
        "{}{}  nodepool {}",
        d.reason.as_str(),
        if d.reason.is_forceful() {
            " (forceful)"
        } else {
            ""
        },
        d.node_pool
    );
    let _ = writeln!(out, "  remove   {}", d.nodes.join(", "));
    if let Some(why) = &d.detail {
        let _ = writeln!(out, "  why      {why}");
    }
    for r in &d.replacements {
        let alts = r.instance_types.len().saturating_sub(1);
        let _ = writeln!(
            out,
            "  launch   {}  {}  {}  {}  {}  {} pod(s){}",
            r.name,
            r.price.instance_type,
            r.price.zone,
            r.price.capacity_type.as_str(),
            per_hour(r.price.min),
            r.pods.len(),
            if alts == 0 {
                String::new()
            } else {
                format!("  (+{alts} types)")
            }
        );
    }
    let to_replacements = d
        .moves
        .iter()
        .filter(|m| d.replacements.iter().any(|r| r.name == m.to))
        .count();
    let _ = writeln!(
        out,
        "  moves    {} pod(s): {} to existing nodes, {} to replacements",
        d.moves.len(),
        d.moves.len() - to_replacements,
        to_replacements
    );
    let _ = writeln!(
        out,
        "  price    {} -> {} ({})",
        per_hour(d.price.before),
        per_hour(d.price.after),
        saving(d.price.before, d.price.after)
    );
    let _ = writeln!(
        out,
        "  volumes  {} -> {} (EBS; decided on the totals {} -> {})",
        per_hour(d.price.volumes_before),
        per_hour(d.price.volumes_after),
        per_hour(d.price.total_before),
        per_hour(d.price.total_after)
    );
    if let Some(s) = d.termination_grace_period_seconds {
        let _ = writeln!(out, "  drain    bounded by terminationGracePeriod {s}s");
    }
}

/// The table: one block per decision, the blocked nodes, a summary line.
pub fn to_table(d: &Disruptions, now: i64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Disruption decisions at {}\n", rfc3339(now));
    for decision in &d.decisions {
        decision_block(&mut out, decision);
        out.push('\n');
    }
    if !d.blocked.is_empty() {
        let _ = writeln!(out, "BLOCKED");
        for b in &d.blocked {
            let _ = writeln!(out, "  {}: {}", b.node, b.reason);
        }
        out.push('\n');
    }
    let removed: usize = d.decisions.iter().map(|x| x.nodes.len()).sum();
    let launched: usize = d.decisions.iter().map(|x| x.replacements.len()).sum();
    let before = d
        .decisions
        .iter()
        .map(|x| x.price.before)
        .fold(0.0, |a, b| a + b);
    let after = d
        .decisions
        .iter()
        .map(|x| x.price.after)
        .fold(0.0, |a, b| a + b);
    let _ = writeln!(
        out,
        "{} decision(s): {} node(s) removed, {} replacement(s) launched, {} blocked; \
         {} -> {} ({})",
        d.decisions.len(),
        removed,
        launched,
        d.blocked.len(),
        per_hour(before),
        per_hour(after),
        saving(before, after)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::disruption::{Blocked, Move, PriceChange};
    use flotilla_core::model::DisruptionReason;

    #[test]
    fn now_parses_rfc3339_and_refuses_anything_else() {
        let cases: &[(&str, Option<i64>)] = &[
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-25T06:00:00Z", Some(1_795_586_400)),
            ("2026-11-25T07:00:00+01:00", Some(1_795_586_400)),
            ("2026-11-25T06:00:00.5Z", Some(1_795_586_400)),
            (" 2026-11-25T06:00:00Z ", Some(1_795_586_400)),
            ("2026-11-25", None),
            ("2026-11-25T06:00:00", None),
            ("yesterday", None),
            ("1795586400", None),
            ("", None),
        ];
        for (input, want) in cases {
            let got = parse_now(input);
            match want {
                Some(w) => assert_eq!(got.as_ref().ok(), Some(w), "{input:?}: {got:?}"),
                None => {
                    let err = got.expect_err(input);
                    assert!(err.contains("RFC 3339"), "{input:?}: {err}");
                }
            }
        }
    }

    #[test]
    fn clock_is_after_the_parsed_release_date() {
        let release = parse_now("2026-01-01T00:00:00Z").unwrap_or(i64::MAX);
        assert!(clock_now() > release);
    }

    fn decision(reason: DisruptionReason, nodes: &[&str], before: f64, after: f64) -> Decision {
        Decision {
            reason,
            node_pool: "general".into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            replacements: vec![],
            moves: vec![Move {
                pod: "shop/web-1".into(),
                to: "ip-10-0-1-10".into(),
            }],
            price: PriceChange {
                before,
                after,
                volumes_before: 0.0,
                volumes_after: 0.0,
                total_before: before,
                total_after: after,
            },
            termination_grace_period_seconds: None,
            detail: None,
        }
    }

    #[test]
    fn table_has_a_block_per_decision_the_blocked_list_and_a_summary() {
        let d = Disruptions {
            decisions: vec![
                decision(DisruptionReason::Expired, &["n-old"], 0.192, 0.25),
                decision(DisruptionReason::Underutilized, &["n-a", "n-b"], 0.384, 0.0),
            ],
            blocked: vec![Blocked {
                node: "n-pdb".into(),
                reason: "PodDisruptionBudget shop/checkout allows no eviction".into(),
            }],
            warnings: vec![],
        };
        let t = to_table(&d, 1_795_586_400);
        for want in [
            "Disruption decisions at 2026-11-25T06:00:00Z",
            "Expired (forceful)  nodepool general",
            "Underutilized  nodepool general",
            "remove   n-a, n-b",
            "moves    1 pod(s): 1 to existing nodes, 0 to replacements",
            "$0.1920/h -> $0.2500/h (costs $0.0580/h more)",
            "$0.3840/h -> $0.0000/h (saves $0.3840/h)",
            "BLOCKED\n  n-pdb: PodDisruptionBudget shop/checkout allows no eviction",
            "2 decision(s): 3 node(s) removed, 0 replacement(s) launched, 1 blocked; \
             $0.5760/h -> $0.2500/h (saves $0.3260/h)",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
    }

    #[test]
    fn empty_table_still_summarises() {
        let t = to_table(&Disruptions::default(), 0);
        assert!(!t.contains("BLOCKED"), "{t}");
        assert!(
            t.contains("0 decision(s): 0 node(s) removed, 0 replacement(s) launched, 0 blocked"),
            "{t}"
        );
        // Nothing decided costs $0, never a negative zero.
        assert!(
            t.contains("$0.0000/h -> $0.0000/h (saves $0.0000/h)"),
            "{t}"
        );
        assert!(!t.contains("-0.0000"), "{t}");
    }

    #[test]
    fn hourly_prices_never_print_a_negative_zero() {
        // (value, printed)
        let cases = [
            (-0.0, "$0.0000/h"),
            (0.0, "$0.0000/h"),
            (-0.00001, "$0.0000/h"),
            (0.12345, "$0.1235/h"),
            (-0.5, "$-0.5000/h"),
            (f64::NAN, "$0.0000/h"),
        ];
        for (x, want) in cases {
            assert_eq!(per_hour(x), want, "{x}");
        }
    }
}
