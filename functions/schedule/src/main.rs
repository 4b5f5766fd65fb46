//! The `schedule` Lambda (EventBridge rules on `BatchAccepted` and
//! `PodsUnschedulable`).

// The scheduling future is deep (service → ports → SDK futures).
#![recursion_limit = "256"]

/// mimalloc, as the `flotilla` CLI: the stage's plans and decisions
/// allocate small requirement sets millions of times (see
/// `shared/bench/README.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
