//! The sweep handler: the one-minute schedule (`aws.events`, `Scheduled
//! Event`) runs the full reconciliation; `aws.ec2` notices (spot
//! interruption, rebalance, state change, capacity reservation / block)
//! act on one instance or run the sweep.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_lambda::metrics::{self as m, dropped, Metrics, Stage};
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::sweep::{self, Ec2Notice, SweepReport};
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
    let mut metrics = Metrics::new(Stage::Sweep);
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
    let result = match (event.source.as_str(), event.detail_type.as_str()) {
        ("aws.events" | "aws.scheduler", _) => {
            sweep::sweep(&p.store, &p.ec2, &p.bus, &p.clock, &p.config).await
        }
        ("aws.ec2", detail_type) => match Ec2Notice::parse(detail_type, &event.detail) {
            Some(notice) => {
                sweep::on_ec2_notice(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &notice).await
            }
            None => {
                tracing::info!(detail_type, "EC2 event not acted on");
                return Ok(serde_json::json!({"ignored": detail_type}));
            }
        },
        (source, detail_type) => {
            tracing::warn!(source, detail_type, "event not for this stage");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::NOT_FOR_STAGE, 1);
            return Ok(serde_json::json!({"ignored": detail_type}));
        }
    };
    match result {
        Ok(report) => {
            record(metrics, &report);
            Ok(serde_json::to_value(report)?)
        }
        Err(e) if e.is_retryable() => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "sweep failed");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::FAILED, 1);
            Ok(serde_json::json!({"failed": e.to_string()}))
        }
    }
}

fn record(metrics: &mut Metrics, report: &SweepReport) {
    metrics.count(m::REGISTRATION_TIMEOUTS, report.registration_timeouts.len());
    metrics.count(
        m::INSTANCES_TERMINATED,
        report.registration_timeouts.len() + report.leaked_terminated.len(),
    );
    metrics.count(m::TERMINATION_ERRORS, report.termination_errors.len());
    // A level, known only when the clusters were swept (not for a notice
    // about one instance): reported then only, so that it never reads 0
    // for "not looked at".
    if report.clusters > 0 {
        metrics.gauge(m::RESERVATION_SLOTS_USED, report.reservation_slots_used);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_report_becomes_timeouts_terminations_and_slots() {
        let report = SweepReport {
            clusters: 2,
            registration_timeouts: vec!["a".into(), "b".into()],
            leaked_terminated: vec!["i-1".into()],
            termination_errors: vec!["i-2: UnauthorizedOperation".into()],
            reservation_slots_used: 4,
            ..SweepReport::default()
        };
        let mut metrics = Metrics::new(Stage::Sweep);
        record(&mut metrics, &report);
        assert_eq!(metrics.get(m::REGISTRATION_TIMEOUTS), Some(2.0));
        assert_eq!(metrics.get(m::INSTANCES_TERMINATED), Some(3.0));
        assert_eq!(metrics.get(m::TERMINATION_ERRORS), Some(1.0));
        assert_eq!(metrics.get(m::RESERVATION_SLOTS_USED), Some(4.0));
        // A notice about one instance: no level reported.
        let mut notice = Metrics::new(Stage::Sweep);
        record(&mut notice, &SweepReport::default());
        assert_eq!(notice.get(m::REGISTRATION_TIMEOUTS), Some(0.0));
        assert_eq!(notice.get(m::RESERVATION_SLOTS_USED), None);
    }
}
