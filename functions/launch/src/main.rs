//! The `launch` Lambda (EventBridge rule on `NodeClaimsPlanned`).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::serve_eventbridge(|ports, event| async move {
        flotilla_fn_launch::handle(ports, &event).await
    })
    .await
}
