//! The `schedule` Lambda (EventBridge rules on `BatchAccepted` and
//! `PodsUnschedulable`).

// The scheduling future is deep (service → ports → SDK futures).
#![recursion_limit = "256"]

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::serve_eventbridge(|ports, event| async move {
        flotilla_fn_schedule::handle(ports, &event, |ms| {
            tokio::time::sleep(std::time::Duration::from_millis(ms))
        })
        .await
    })
    .await
}
