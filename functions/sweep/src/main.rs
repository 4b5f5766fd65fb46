//! The `sweep` Lambda (one-minute schedule and `aws.ec2` notice rules).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::serve_eventbridge(|ports, event| async move {
        flotilla_fn_sweep::handle(ports, &event).await
    })
    .await
}
