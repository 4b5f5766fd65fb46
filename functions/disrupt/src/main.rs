//! The `disrupt` Lambda (its own one-minute schedule rule).

// The handler's future is deep (service → ports → SDK futures); a release
// build computes its layout past rustc's default query depth of 128 (the
// arm64 `sam build` of intake failed so: "queries overflow the depth limit").
#![recursion_limit = "256"]

/// mimalloc, as the `flotilla` CLI: the stage's plans and decisions
/// allocate small requirement sets millions of times (see
/// `shared/bench/README.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    flotilla_lambda::serve_eventbridge(|ports, event| async move {
        flotilla_fn_disrupt::handle(ports, &event).await
    })
    .await
}
