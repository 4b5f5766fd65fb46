//! The schedule handler: `BatchAccepted` → plan (after the batching
//! window), `PodsUnschedulable` → schedule the last batch again.

use std::future::Future;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_lambda::metrics::{self as m, dropped, Metrics, Stage};
use flotilla_ports::events::FlotillaEvent;
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::schedule::{self, ScheduleOutcome, ScheduleReport};
use flotilla_service::Ports;

/// Longest this invocation waits for a batching window to close before
/// leaving the batch to the next event (the windows are 1 s / 10 s).
pub const MAX_WAIT_MS: i64 = 30_000;

/// Handle one EventBridge event and print its metrics (EMF). `sleep(ms)`
/// waits (tokio's timer in the Lambda; the tests advance a manual clock).
/// Errors that retrying can fix fail the invocation so EventBridge
/// redelivers; the rest are logged, counted as dropped, and dropped (a
/// malformed event will never parse).
pub async fn handle<S, E, B, C, F, Fut>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
    sleep: F,
) -> anyhow::Result<serde_json::Value>
where
    S: Store,
    E: Ec2,
    B: Bus,
    C: Clock,
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let (out, metrics) = handle_measured(ports, event, sleep).await;
    metrics.emit(ports.clock.now_millis());
    out
}

/// [`handle`], returning the metrics instead of printing them.
pub async fn handle_measured<S, E, B, C, F, Fut>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
    sleep: F,
) -> (anyhow::Result<serde_json::Value>, Metrics)
where
    S: Store,
    E: Ec2,
    B: Bus,
    C: Clock,
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let started = ports.clock.now_millis();
    let mut metrics = Metrics::new(Stage::Schedule);
    let out = run(ports, event, sleep, &mut metrics).await;
    metrics.count(m::ERRORS, usize::from(out.is_err()));
    metrics.latency(ports.clock.now_millis().saturating_sub(started));
    (out, metrics)
}

async fn run<S, E, B, C, F, Fut>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
    sleep: F,
    metrics: &mut Metrics,
) -> anyhow::Result<serde_json::Value>
where
    S: Store,
    E: Ec2,
    B: Bus,
    C: Clock,
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let parsed = match flotilla_lambda::flotilla_event(event) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "dropping unreadable event");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::UNREADABLE, 1);
            return Ok(serde_json::json!({"dropped": e.to_string()}));
        }
    };
    match parsed {
        FlotillaEvent::BatchAccepted(ev) => {
            metrics.property(m::CLUSTER_ID, &ev.cluster_id);
            metrics.property(m::BATCH_ID, &ev.batch_id);
            let mut waited = 0;
            loop {
                let outcome = schedule::on_batch_accepted(
                    &ports.store,
                    &ports.ec2,
                    &ports.bus,
                    &ports.clock,
                    &ports.config,
                    &ev,
                )
                .await;
                match outcome {
                    Ok(ScheduleOutcome::Wait { retry_after_ms }) if waited < MAX_WAIT_MS => {
                        let ms = retry_after_ms.clamp(1, MAX_WAIT_MS - waited);
                        waited += ms;
                        sleep(u64::try_from(ms).unwrap_or(1)).await;
                    }
                    Ok(o) => {
                        if let ScheduleOutcome::Scheduled(report) = &o {
                            record(metrics, report);
                        }
                        return Ok(serde_json::to_value(o)?);
                    }
                    Err(e) if e.is_retryable() => return Err(e.into()),
                    Err(e) => {
                        tracing::error!(cluster = %ev.cluster_id, batch = %ev.batch_id, error = %e, "batch cannot be scheduled");
                        metrics.count_reason(m::EVENTS_DROPPED, dropped::FAILED, 1);
                        return Ok(serde_json::json!({"failed": e.to_string()}));
                    }
                }
            }
        }
        FlotillaEvent::PodsUnschedulable(ev) => {
            metrics.property(m::CLUSTER_ID, &ev.cluster_id);
            let rearmed = schedule::on_pods_unschedulable(
                &ports.store,
                &ports.bus,
                &ports.clock,
                &ports.config,
                &ev,
            )
            .await?;
            Ok(serde_json::json!({ "rescheduled": rearmed }))
        }
        other => {
            tracing::warn!(
                detail_type = other.detail_type(),
                "event not for this stage"
            );
            metrics.count_reason(m::EVENTS_DROPPED, dropped::NOT_FOR_STAGE, 1);
            Ok(serde_json::json!({"ignored": other.detail_type()}))
        }
    }
}

/// Pods planned: the batch's pending pods, less those already on their way
/// on an in-flight NodeClaim and those no NodePool can take.
fn record(metrics: &mut Metrics, report: &ScheduleReport) {
    let planned = report
        .pending_pods
        .saturating_sub(report.in_flight_pods)
        .saturating_sub(report.unschedulable);
    metrics.count(m::PODS_PLANNED, planned);
    metrics.count(m::PODS_UNSCHEDULABLE, report.unschedulable);
    metrics.count(m::NODE_CLAIMS_PLANNED, report.node_claims.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_report_becomes_pods_and_node_claims() {
        let report = ScheduleReport {
            batch_id: "b1".into(),
            pending_pods: 10,
            in_flight_pods: 3,
            node_claims: vec!["a".into(), "b".into()],
            unschedulable: 2,
            hourly_price: 0.2,
        };
        let mut metrics = Metrics::new(Stage::Schedule);
        record(&mut metrics, &report);
        assert_eq!(metrics.get(m::PODS_PLANNED), Some(5.0));
        assert_eq!(metrics.get(m::PODS_UNSCHEDULABLE), Some(2.0));
        assert_eq!(metrics.get(m::NODE_CLAIMS_PLANNED), Some(2.0));
    }
}
