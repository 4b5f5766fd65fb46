//! Shared plumbing of the Lambda binaries: JSON logs, [`Ports`] over the
//! AWS adapters from the environment, and reading Flotilla's own events.
//!
//! Environment (set by `infra/template.yaml`): `TABLE_NAME`,
//! `EVENT_BUS_NAME`, `AWS_REGION`, `RUST_LOG`, and the `FLOTILLA_*` settings
//! read by [`flotilla_service::Config::from_lookup`], plus
//! `FLOTILLA_CLUSTER_PRINCIPALS` (JSON: cluster id → IAM principal ARNs
//! allowed to post for it; unset or empty: nobody, every cluster is refused).

pub mod metrics;

use anyhow::{Context, Result};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_aws::{DynamoStore, Ec2Client, EventBridgeBus};
use flotilla_ports::events::{FlotillaEvent, SOURCE};
use flotilla_ports::SystemClock;
use flotilla_service::intake::Access;
use flotilla_service::{Config, Ports};

/// The ports of a deployed Lambda.
pub type AwsPorts = Ports<DynamoStore, Ec2Client, EventBridgeBus, SystemClock>;

/// JSON logs (CloudWatch adds the timestamp), filtered by `RUST_LOG`
/// (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .without_time()
        .init();
}

fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("environment variable {name} is not set"))
}

/// Access rules from `FLOTILLA_CLUSTER_PRINCIPALS`.
pub fn access_from(value: Option<&str>) -> Result<Access> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(Access::default()),
        Some(v) => {
            let clusters = serde_json::from_str(v).context(
                "FLOTILLA_CLUSTER_PRINCIPALS must be a JSON object: cluster id -> [principal ARN]",
            )?;
            Ok(Access { clusters })
        }
    }
}

/// Build the ports from the Lambda environment.
pub async fn aws_ports() -> Result<AwsPorts> {
    let config = Config::from_lookup(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
    let access = access_from(std::env::var("FLOTILLA_CLUSTER_PRINCIPALS").ok().as_deref())?;
    let sdk = flotilla_aws::load_config().await;
    Ok(Ports {
        store: DynamoStore::new(&sdk, env("TABLE_NAME")?),
        // EC2 in the function's region, with the AWS Price List API (its
        // client pinned to us-east-1, where the API is served) for the
        // on-demand prices of live catalogs (role: pricing:GetProducts).
        ec2: Ec2Client::new(&sdk),
        bus: EventBridgeBus::new(&sdk, env("EVENT_BUS_NAME")?),
        clock: SystemClock,
        config,
        access,
    })
}

/// The Lambda main loop of an EventBridge-triggered stage: JSON logs, the
/// ports from the environment (built once, for the process's life), then
/// `handler` per event.
pub async fn serve_eventbridge<F, Fut>(handler: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(&'static AwsPorts, EventBridgeEvent<serde_json::Value>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    init_tracing();
    // One set of ports per process, alive as long as the process.
    let ports: &'static AwsPorts = Box::leak(Box::new(aws_ports().await?));
    let handler = &handler;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            handler(ports, event.payload)
                .await
                .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}

/// One of Flotilla's own events, or why the entry is not one.
pub fn flotilla_event(ev: &EventBridgeEvent<serde_json::Value>) -> Result<FlotillaEvent> {
    if ev.source != SOURCE {
        anyhow::bail!(
            "event from source {:?} (detail-type {:?}) is not a Flotilla event",
            ev.source,
            ev.detail_type
        );
    }
    FlotillaEvent::from_parts(&ev.detail_type, &ev.detail).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rules_parse_and_reject_garbage() {
        assert!(access_from(None).unwrap().clusters.is_empty());
        let a = access_from(Some(r#"{"prod": ["arn:aws:sts::1:assumed-role/agent/*"]}"#)).unwrap();
        assert_eq!(a.clusters["prod"].len(), 1);
        assert!(access_from(Some("[1,2]")).is_err());
    }

    #[test]
    fn foreign_events_are_refused() {
        let ev: EventBridgeEvent<serde_json::Value> = serde_json::from_value(serde_json::json!({
            "detail-type": "BatchAccepted", "source": "evil",
            "detail": {"clusterId": "a", "batchId": "b"}
        }))
        .unwrap();
        assert!(flotilla_event(&ev).is_err());
    }
}
