//! Wall time and peak resident memory of one scheduling run.

use std::time::Instant;

use flotilla_core::catalog::Catalog;
use flotilla_core::model::ClusterState;
use flotilla_core::plan::Plan;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use serde::Serialize;

/// Peak resident set size of this process in KiB (`VmHWM`), if the
/// platform reports it.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFigures {
    pub mix: String,
    pub pods: usize,
    pub wall_seconds: f64,
    pub pods_per_second: f64,
    /// Peak RSS of the process by the end of the run (includes the catalog
    /// and the generated cluster; run one measurement per process), MiB.
    pub peak_rss_mib: Option<f64>,
    pub node_claims: usize,
    pub scheduled: usize,
    pub hourly_price: f64,
}

/// Schedules `state` once and measures it.
pub fn run(mix: &str, state: &ClusterState, catalog: &Catalog) -> (RunFigures, Plan) {
    let start = Instant::now();
    let plan = schedule(state, catalog, &SchedulerOptions::default());
    let wall = start.elapsed().as_secs_f64();
    let figures = RunFigures {
        mix: mix.to_string(),
        pods: state.pending_pods.len(),
        wall_seconds: wall,
        pods_per_second: if wall > 0.0 {
            state.pending_pods.len() as f64 / wall
        } else {
            0.0
        },
        peak_rss_mib: peak_rss_kib().map(|k| k as f64 / 1024.0),
        node_claims: plan.summary.node_claims,
        scheduled: plan.summary.scheduled,
        hourly_price: plan.summary.hourly_price,
    };
    (figures, plan)
}
