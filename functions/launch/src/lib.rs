//! The launch handler: `NodeClaimsPlanned` → CreateFleet per NodeClaim.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_ports::events::FlotillaEvent;
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::{launch, Ports};

/// Handle one EventBridge event. Retryable failures fail the invocation
/// (EventBridge redelivers; every step is idempotent); the rest are logged.
pub async fn handle<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let parsed = match flotilla_lambda::flotilla_event(event) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "dropping unreadable event");
            return Ok(serde_json::json!({"dropped": e.to_string()}));
        }
    };
    let FlotillaEvent::NodeClaimsPlanned(ev) = parsed else {
        tracing::warn!(
            detail_type = parsed.detail_type(),
            "event not for this stage"
        );
        return Ok(serde_json::json!({"ignored": parsed.detail_type()}));
    };
    match launch::on_node_claims_planned(
        &ports.store,
        &ports.ec2,
        &ports.bus,
        &ports.clock,
        &ports.config,
        &ev,
    )
    .await
    {
        Ok(report) => Ok(serde_json::to_value(report)?),
        Err(e) if e.is_retryable() => Err(e.into()),
        Err(e) => {
            tracing::error!(cluster = %ev.cluster_id, batch = %ev.batch_id, error = %e, "NodeClaims cannot be launched");
            Ok(serde_json::json!({"failed": e.to_string()}))
        }
    }
}
