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
    status_kib("VmHWM:")
}

/// A KiB figure of `/proc/self/status` (the line starting with `field`).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Resident set size of this process now in KiB (`VmRSS`).
pub fn rss_kib() -> Option<u64> {
    status_kib("VmRSS:")
}

/// Starts a new peak: memory the allocator holds but no longer uses goes
/// back to the system, and the kernel's peak (`VmHWM`) restarts from the
/// current RSS. Returns the RSS the new peak starts from (KiB), or `None`
/// where the platform cannot restart the peak. What one stage of a process
/// peaks at is then [`peak_rss_kib`] minus it.
pub fn restart_peak_rss() -> Option<u64> {
    trim_heap();
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    rss_kib()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: glibc's malloc_trim only releases free heap pages; it takes
    // no pointers and is safe to call at any time.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

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
    /// Peak RSS before the run started (catalog and generated cluster, the
    /// scheduler's input), MiB: `peakRssMib` minus this is what the run
    /// itself added.
    pub input_rss_mib: Option<f64>,
    pub node_claims: usize,
    pub scheduled: usize,
    /// Instances only (the plan's `hourlyPrice`).
    pub hourly_price: f64,
    /// The NodeClaims' EBS volumes (`volumeHourlyPrice`).
    pub volume_hourly_price: f64,
    /// Instances and volumes (`totalHourlyPrice`): what the LP bound bounds.
    pub total_hourly_price: f64,
}

/// Schedules `state` once and measures it.
pub fn run(mix: &str, state: &ClusterState, catalog: &Catalog) -> (RunFigures, Plan) {
    let input_rss_mib = peak_rss_kib().map(|k| k as f64 / 1024.0);
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
        input_rss_mib,
        node_claims: plan.summary.node_claims,
        scheduled: plan.summary.scheduled,
        hourly_price: plan.summary.hourly_price,
        volume_hourly_price: plan.summary.volume_hourly_price,
        total_hourly_price: plan.summary.total_hourly_price,
    };
    (figures, plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{baseline, mixes};
    use std::collections::BTreeMap;

    /// Consolidation (the scheduler's repack) keeps plans valid and makes
    /// the resource-only mixes cheaper than the online pass alone was.
    #[test]
    fn consolidated_plans_are_valid_and_cheaper() {
        let catalog = Catalog::embedded("us-west-2").expect("embedded catalog");
        // Prices of the online pass alone (before consolidation), seed 1.
        for (mix, before) in [("mixed", 2.41346), ("existing-nodes", 0.90545)] {
            let state = mixes::build(mix, 500, 1).expect("mix");
            let (fig, plan) = run(mix, &state, &catalog);
            assert_eq!(fig.scheduled, 500, "{mix}");
            assert!(
                fig.hourly_price < before - 0.01,
                "{mix}: {}",
                fig.hourly_price
            );
            assert!(
                fig.hourly_price <= baseline::plan(&state, &catalog).hourly_price,
                "{mix}"
            );
            let requests: BTreeMap<String, &flotilla_core::Resources> = state
                .pending_pods
                .iter()
                .map(|p| (p.key(), &p.requests))
                .collect();
            let mut seen = 0;
            for c in &plan.node_claims {
                let mut sum = flotilla_core::Resources::new();
                for p in &c.pods {
                    sum.add_assign(requests[p]);
                }
                seen += c.pods.len();
                // The daemonset (100m, 128Mi) is part of the requests.
                assert!(sum.fits_in(&c.resources.requests), "{mix} {}", c.name);
                assert!(
                    c.resources.requests.fits_in(&c.resources.allocatable),
                    "{mix} {}: {} in {}",
                    c.name,
                    c.resources.requests,
                    c.resources.allocatable
                );
                assert!(c.instance_types.contains(&c.price.instance_type));
            }
            let names: std::collections::BTreeSet<&str> =
                plan.node_claims.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names.len(), plan.node_claims.len(), "{mix}: names");
            let on_existing: usize = plan.existing_nodes.iter().map(|e| e.pods.len()).sum();
            assert_eq!(seen + on_existing, 500, "{mix}");
        }
    }
}
