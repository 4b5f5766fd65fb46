//! Benchmark support for Flotilla: deterministic workload mixes, a
//! Karpenter-style first-fit-decreasing baseline, and measurement helpers.
//! Used by the criterion benches and `flotilla bench`; not product code.

pub mod baseline;
pub mod measure;
pub mod mixes;
pub mod scenario;
