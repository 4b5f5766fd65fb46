//! The schedule handler: `BatchAccepted` → plan (after the batching
//! window), `PodsUnschedulable` → schedule the last batch again.

use std::future::Future;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_ports::events::FlotillaEvent;
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::schedule::{self, ScheduleOutcome};
use flotilla_service::Ports;

/// Longest this invocation waits for a batching window to close before
/// leaving the batch to the next event (the windows are 1 s / 10 s).
pub const MAX_WAIT_MS: i64 = 30_000;

/// Handle one EventBridge event. `sleep(ms)` waits (tokio's timer in the
/// Lambda; the tests advance a manual clock). Errors that retrying can fix
/// fail the invocation so EventBridge redelivers; the rest are logged and
/// dropped (a malformed event will never parse).
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
    let parsed = match flotilla_lambda::flotilla_event(event) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "dropping unreadable event");
            return Ok(serde_json::json!({"dropped": e.to_string()}));
        }
    };
    match parsed {
        FlotillaEvent::BatchAccepted(ev) => {
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
                    Ok(o) => return Ok(serde_json::to_value(o)?),
                    Err(e) if e.is_retryable() => return Err(e.into()),
                    Err(e) => {
                        tracing::error!(cluster = %ev.cluster_id, batch = %ev.batch_id, error = %e, "batch cannot be scheduled");
                        return Ok(serde_json::json!({"failed": e.to_string()}));
                    }
                }
            }
        }
        FlotillaEvent::PodsUnschedulable(ev) => {
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
            Ok(serde_json::json!({"ignored": other.detail_type()}))
        }
    }
}
