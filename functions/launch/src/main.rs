//! The `launch` Lambda (EventBridge rule on `NodeClaimsPlanned`).

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{service_fn, LambdaEvent};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::init_tracing();
    let ports = flotilla_lambda::aws_ports().await?;
    let ports = &ports;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            flotilla_fn_launch::handle(ports, &event.payload)
                .await
                .map_err(lambda_runtime::Error::from)
        },
    ))
    .await
}
