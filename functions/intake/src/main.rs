//! The `intake` Lambda (Function URL, `AWS_IAM` auth).

// The handler's future is deep (service → ports → SDK futures); a release
// build computes its layout past rustc's default query depth of 128 (the
// arm64 `sam build` of intake failed so: "queries overflow the depth limit").
#![recursion_limit = "256"]

use aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest;
use lambda_runtime::{service_fn, LambdaEvent};

/// mimalloc, as the `flotilla` CLI: the stage's plans and decisions
/// allocate small requirement sets millions of times (see
/// `shared/bench/README.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::init_tracing();
    let ports = flotilla_lambda::aws_ports().await?;
    let ports = &ports;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<LambdaFunctionUrlRequest>| async move {
            Ok::<_, lambda_runtime::Error>(flotilla_fn_intake::handle(ports, &event.payload).await)
        },
    ))
    .await
}
