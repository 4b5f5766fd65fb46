//! The launch handler: `NodeClaimsPlanned` → CreateFleet per NodeClaim.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_lambda::metrics::{self as m, dropped, Metrics, Stage};
use flotilla_ports::events::FlotillaEvent;
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::launch::LaunchReport;
use flotilla_service::{launch, Ports};

/// Handle one EventBridge event and print its metrics (EMF).
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
    let mut metrics = Metrics::new(Stage::Launch);
    let out = run(ports, event, &mut metrics).await;
    metrics.count(m::ERRORS, usize::from(out.is_err()));
    metrics.latency(ports.clock.now_millis().saturating_sub(started));
    (out, metrics)
}

/// Retryable failures fail the invocation (EventBridge redelivers; every
/// step is idempotent); the rest are logged and counted as dropped.
async fn run<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
    metrics: &mut Metrics,
) -> anyhow::Result<serde_json::Value> {
    let parsed = match flotilla_lambda::flotilla_event(event) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "dropping unreadable event");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::UNREADABLE, 1);
            return Ok(serde_json::json!({"dropped": e.to_string()}));
        }
    };
    let FlotillaEvent::NodeClaimsPlanned(ev) = parsed else {
        tracing::warn!(
            detail_type = parsed.detail_type(),
            "event not for this stage"
        );
        metrics.count_reason(m::EVENTS_DROPPED, dropped::NOT_FOR_STAGE, 1);
        return Ok(serde_json::json!({"ignored": parsed.detail_type()}));
    };
    metrics.property(m::CLUSTER_ID, &ev.cluster_id);
    metrics.property(m::BATCH_ID, &ev.batch_id);
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
        Ok(report) => {
            record(metrics, &report);
            Ok(serde_json::to_value(report)?)
        }
        Err(e) if e.is_retryable() => Err(e.into()),
        Err(e) => {
            tracing::error!(cluster = %ev.cluster_id, batch = %ev.batch_id, error = %e, "NodeClaims cannot be launched");
            metrics.count_reason(m::EVENTS_DROPPED, dropped::FAILED, 1);
            Ok(serde_json::json!({"failed": e.to_string()}))
        }
    }
}

fn record(metrics: &mut Metrics, report: &LaunchReport) {
    metrics.count(m::NODE_CLAIMS_LAUNCHED, report.launched.len());
    metrics.count(m::NODE_CLAIMS_FAILED, 0);
    for (_, reason) in &report.failed {
        metrics.count_reason(m::NODE_CLAIMS_FAILED, &failure_reason(reason), 1);
    }
    metrics.count(m::ICE_HITS, report.ice_hits);
}

/// A launch failure's reason as a bounded code (a metric dimension):
/// `InsufficientCapacity`, the EC2 error code of a refused CreateFleet
/// (`UnauthorizedOperation`, `InvalidParameterValue`, ...), `NoInstances`,
/// `NodeClass` (the EC2NodeClass does not resolve: subnets, security
/// groups, AMIs, role), or `Other`.
pub fn failure_reason(reason: &str) -> String {
    let lower = reason.to_ascii_lowercase();
    if lower.contains("insufficient capacity") || lower.contains("offerings left") {
        return "InsufficientCapacity".into();
    }
    if let Some((_, rest)) = reason.split_once(" failed: ") {
        let code = rest.split([':', ';']).next().unwrap_or("").trim();
        let is_code = !code.is_empty()
            && code.len() <= m::MAX_REASON_LEN
            && code.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
        return if is_code {
            code.to_string()
        } else {
            "CreateFleetError".into()
        };
    }
    // A CreateFleet refused as a whole (its message carries the EC2 code).
    const SPOT_ROLE: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
    if reason.contains(SPOT_ROLE) {
        return SPOT_ROLE.into();
    }
    if reason.starts_with("CreateFleet refused") {
        return "CreateFleetRefused".into();
    }
    if lower.contains("returned no instances") {
        return "NoInstances".into();
    }
    let node_class = ["EC2NodeClass", "AMI"].iter().any(|w| reason.contains(w))
        || ["subnet", "security group", "instance profile", " role"]
            .iter()
            .any(|w| lower.contains(w));
    if node_class {
        return "NodeClass".into();
    }
    "Other".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reasons_become_bounded_codes() {
        for (reason, code) in [
            (
                "insufficient capacity for NodeClaim a: all offerings exhausted (m5.large/us-west-2a/spot) and no other capacity type allowed",
                "InsufficientCapacity",
            ),
            ("insufficient capacity after 8 CreateFleet calls", "InsufficientCapacity"),
            ("no spot offerings left to launch NodeClaim a", "InsufficientCapacity"),
            (
                "CreateFleet for NodeClaim a failed: UnauthorizedOperation: You are not authorized",
                "UnauthorizedOperation",
            ),
            (
                "CreateFleet for NodeClaim a failed: AuthFailure.ServiceLinkedRoleCreationNotPermitted: no; InvalidParameterValue: x",
                "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
            ),
            ("CreateFleet for NodeClaim a failed: some words here", "CreateFleetError"),
            (
                "CreateFleet for NodeClaim a returned no instances and no capacity errors",
                "NoInstances",
            ),
            ("EC2NodeClass legacy at spec.instanceProfile: required", "NodeClass"),
            ("no subnet in any offering zone (offering zones: [])", "NodeClass"),
            ("unsupported AMI family Windows2022 for user data generation", "NodeClass"),
            ("a dynamic failure", "Other"),
            (
                "CreateFleet refused: CreateFleet: AuthFailure.ServiceLinkedRoleCreationNotPermitted (the account has no spot service-linked role)",
                "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
            ),
            ("CreateFleet refused: CreateFleet: the role may not", "CreateFleetRefused"),
            ("something else entirely", "Other"),
        ] {
            assert_eq!(failure_reason(reason), code, "{reason}");
        }
    }

    #[test]
    fn a_report_becomes_counts_by_stage_and_reason() {
        let report = LaunchReport {
            launched: vec![("a".into(), "i-1".into()), ("b".into(), "i-2".into())],
            failed: vec![
                (
                    "c".into(),
                    "insufficient capacity after 8 CreateFleet calls".into(),
                ),
                (
                    "d".into(),
                    "CreateFleet for NodeClaim d failed: UnauthorizedOperation: no".into(),
                ),
                (
                    "e".into(),
                    "insufficient capacity after 2 CreateFleet calls".into(),
                ),
            ],
            skipped: vec!["f".into()],
            fleet_calls: 12,
            ice_hits: 5,
        };
        let mut metrics = Metrics::new(Stage::Launch);
        record(&mut metrics, &report);
        assert_eq!(metrics.get(m::NODE_CLAIMS_LAUNCHED), Some(2.0));
        assert_eq!(metrics.get(m::NODE_CLAIMS_FAILED), Some(3.0));
        assert_eq!(metrics.get(m::ICE_HITS), Some(5.0));
        assert_eq!(
            metrics.get_reason(m::NODE_CLAIMS_FAILED, "InsufficientCapacity"),
            Some(2.0)
        );
        assert_eq!(
            metrics.get_reason(m::NODE_CLAIMS_FAILED, "UnauthorizedOperation"),
            Some(1.0)
        );
        // Nothing failed: the count is there, at 0.
        let mut quiet = Metrics::new(Stage::Launch);
        record(&mut quiet, &LaunchReport::default());
        assert_eq!(quiet.get(m::NODE_CLAIMS_FAILED), Some(0.0));
        assert_eq!(quiet.documents(0).len(), 1);
    }
}
