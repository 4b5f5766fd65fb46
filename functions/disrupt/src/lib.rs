//! The disrupt handler: the one-minute schedule (`aws.events`, `Scheduled
//! Event`, its own rule) runs the disruption stage over every registered
//! cluster (`flotilla_service::disruption::disrupt`); anything else is
//! dropped and counted.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_lambda::metrics::{self as m, dropped, Metrics, Stage};
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::disruption::{self, DisruptReport};
use flotilla_service::Ports;

/// Handle one event and print its metrics (EMF).
pub async fn handle<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let (out, metrics) = handle_measured(ports, event).await;
    metrics.emit(ports.clock.now_millis());
    out
}

/// [`handle`], returning the metrics instead of printing them.
pub async fn handle_measured<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
) -> (anyhow::Result<serde_json::Value>, Metrics) {
    let started = ports.clock.now_millis();
    let mut metrics = Metrics::new(Stage::Disrupt);
    let out = run(ports, event, &mut metrics).await;
    metrics.count(m::ERRORS, usize::from(out.is_err()));
    metrics.latency(ports.clock.now_millis().saturating_sub(started));
    (out, metrics)
}

async fn run<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
    metrics: &mut Metrics,
) -> anyhow::Result<serde_json::Value> {
    let p = ports;
    match (event.source.as_str(), event.detail_type.as_str()) {
        ("aws.events" | "aws.scheduler", _) => {}
        (source, detail_type) => {
            tracing::warn!(source, detail_type, "event not for this stage");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::NOT_FOR_STAGE, 1);
            return Ok(serde_json::json!({"ignored": detail_type}));
        }
    }
    match disruption::disrupt(&p.store, &p.ec2, &p.bus, &p.clock, &p.config).await {
        Ok(report) => {
            record(metrics, &report);
            log(&report);
            Ok(serde_json::to_value(report)?)
        }
        Err(e) if e.is_retryable() => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "disruption failed");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::FAILED, 1);
            Ok(serde_json::json!({"failed": e.to_string()}))
        }
    }
}

/// The report's figures, summed over the clusters. Every figure is
/// emitted, 0 included, so that alarms and graphs see a zero and not
/// missing data; [`m::DISRUPTIONS_BLOCKED`] is a level (the candidates
/// blocked now).
fn record(metrics: &mut Metrics, report: &DisruptReport) {
    let sum = |f: fn(&disruption::ClusterDisruptReport) -> usize| -> usize {
        report.clusters.iter().map(f).sum()
    };
    metrics.count(m::DISRUPTIONS_STARTED, sum(|c| c.started.len()));
    metrics.count(m::DISRUPTIONS_COMPLETED, sum(|c| c.completed.len()));
    metrics.count(m::DISRUPTIONS_ABANDONED, sum(|c| c.abandoned.len()));
    metrics.count(m::INSTANCES_TERMINATED, sum(|c| c.terminated.len()));
    metrics.count(m::DISRUPTION_ERRORS, sum(|c| c.errors.len()));
    metrics.gauge(m::DISRUPTIONS_BLOCKED, sum(|c| c.blocked));
}

/// One log line per cluster that did something (names included, for Logs
/// Insights), and each non-fatal problem on its own.
fn log(report: &DisruptReport) {
    for c in &report.clusters {
        for e in &c.errors {
            tracing::warn!(cluster_id = %c.cluster_id, error = %e, "disruption problem");
        }
        let busy = !(c.started.is_empty()
            && c.replacements_launched.is_empty()
            && c.tainted.is_empty()
            && c.drained.is_empty()
            && c.terminated.is_empty()
            && c.completed.is_empty()
            && c.abandoned.is_empty()
            && c.not_owned.is_empty());
        if busy {
            tracing::info!(
                cluster_id = %c.cluster_id,
                started = ?c.started,
                replacements = ?c.replacements_launched,
                tainted = ?c.tainted,
                drained = ?c.drained,
                terminated = ?c.terminated,
                completed = ?c.completed,
                abandoned = ?c.abandoned,
                blocked = c.blocked,
                not_owned = ?c.not_owned,
                "disruption"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use disruption::ClusterDisruptReport;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_report_becomes_the_stage_figures_summed_over_clusters() {
        let report = DisruptReport {
            clusters: vec![
                ClusterDisruptReport {
                    cluster_id: "a".into(),
                    started: names(&["d1", "d2"]),
                    replacements_launched: names(&["r1"]),
                    terminated: names(&["n1/i-1"]),
                    completed: names(&["d0"]),
                    blocked: 3,
                    ..ClusterDisruptReport::default()
                },
                ClusterDisruptReport {
                    cluster_id: "b".into(),
                    started: names(&["d3"]),
                    terminated: names(&["n2/i-2", "n3/i-3"]),
                    abandoned: names(&["d4"]),
                    blocked: 1,
                    errors: names(&["cluster b: state unreadable"]),
                    ..ClusterDisruptReport::default()
                },
            ],
        };
        let mut metrics = Metrics::new(Stage::Disrupt);
        record(&mut metrics, &report);
        for (name, value) in [
            (m::DISRUPTIONS_STARTED, 3.0),
            (m::DISRUPTIONS_COMPLETED, 1.0),
            (m::DISRUPTIONS_ABANDONED, 1.0),
            (m::INSTANCES_TERMINATED, 3.0),
            (m::DISRUPTION_ERRORS, 1.0),
            (m::DISRUPTIONS_BLOCKED, 4.0),
        ] {
            assert_eq!(metrics.get(name), Some(value), "{name}");
        }
        // No cluster registered: every figure is a zero, not missing.
        let mut idle = Metrics::new(Stage::Disrupt);
        record(&mut idle, &DisruptReport::default());
        for name in [
            m::DISRUPTIONS_STARTED,
            m::DISRUPTIONS_COMPLETED,
            m::DISRUPTIONS_ABANDONED,
            m::INSTANCES_TERMINATED,
            m::DISRUPTION_ERRORS,
            m::DISRUPTIONS_BLOCKED,
        ] {
            assert_eq!(idle.get(name), Some(0.0), "{name}");
        }
        assert_eq!(idle.documents(0)[0][m::STAGE], "disrupt");
    }
}
