//! Benchmark support for Flotilla: deterministic workload mixes, a
//! Karpenter-style first-fit-decreasing baseline, and measurement helpers.
//! Used by the criterion benches and `flotilla bench`; not product code.
//! For disruption: fragmented clusters (`fragmented`), carrying decisions
//! out (`disruption_apply`), a Karpenter-style consolidation baseline
//! (`disruption_baseline`) and both run to a fixed point
//! (`disruption_rounds`).

/// The allocator the `flotilla` CLI ships with, so that every runner and
/// bench of this crate measures what ships (see the README, "The
/// allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod agent_posts;
pub mod baseline;
pub mod cluster_docs;
pub mod disruption_apply;
pub mod disruption_baseline;
pub mod disruption_rounds;
pub mod fragmented;
pub mod measure;
pub mod mixes;
pub mod scenario;
