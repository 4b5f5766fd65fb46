//! The sweep handler: the one-minute schedule (`aws.events`, `Scheduled
//! Event`) runs the full reconciliation; `aws.ec2` notices (spot
//! interruption, rebalance, state change, capacity reservation / block)
//! act on one instance or run the sweep.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::sweep::{self, Ec2Notice};
use flotilla_service::Ports;

pub async fn handle<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    event: &EventBridgeEvent<serde_json::Value>,
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
            return Ok(serde_json::json!({"ignored": detail_type}));
        }
    };
    match result {
        Ok(report) => Ok(serde_json::to_value(report)?),
        Err(e) if e.is_retryable() => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "sweep failed");
            Ok(serde_json::json!({"failed": e.to_string()}))
        }
    }
}
