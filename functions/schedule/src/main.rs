//! The `schedule` Lambda (EventBridge rules on `BatchAccepted` and
//! `PodsUnschedulable`).

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::init_tracing();
    let ports = flotilla_lambda::aws_ports().await?;
    let ports = &ports;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            flotilla_fn_schedule::handle(ports, &event.payload, |ms| {
                tokio::time::sleep(std::time::Duration::from_millis(ms))
            })
            .await
            .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}
