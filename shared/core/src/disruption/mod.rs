//! Disruption: which nodes to remove or replace now, and why — Karpenter
//! v1's disruption controller (`kubernetes-sigs/karpenter`
//! `pkg/controllers/disruption`) as a pure function.
//!
//! Input: the cluster state (`ClusterState`: nodes with their bound pods,
//! NodePools, PodDisruptionBudgets, NodeClaims), the catalog, and
//! [`DisruptOptions`] (the time of the decision, what the pipeline already
//! knows). Output: [`Disruptions`], the public `flotilla disrupt -o json`
//! format: the decisions the controller takes now and every candidate that
//! is blocked, with the reason.

mod decision;

pub use decision::{Blocked, Decision, Disruptions, Move, PriceChange};

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::Catalog;
use crate::model::{ClusterState, DisruptionReason};
use crate::scheduler::SchedulerOptions;

/// Knobs and pipeline knowledge that are not part of the documents.
#[derive(Debug, Clone, Default)]
pub struct DisruptOptions {
    /// When the decision is taken (Unix seconds).
    pub now: i64,
    /// The scheduler's options for replacements (reservation gate, ICE
    /// cache, reservation counters). Its `now` is set from [`Self::now`].
    pub scheduler: SchedulerOptions,
    /// Node name → since when (Unix seconds) the pipeline knows the node
    /// has been in its current state (its last pod change). Wins over what
    /// the documents show.
    pub since: BTreeMap<String, i64>,
    /// Nodes already being disrupted by decisions in flight, with their
    /// reason: neither candidates nor destinations, and counted against
    /// their NodePool's budgets.
    pub disrupting: BTreeMap<String, DisruptionReason>,
    /// Nodes with a spot interruption warning: replaced at once
    /// (`Interrupted`, forceful).
    pub interrupted: BTreeSet<String>,
}

/// The decisions to take at `opts.now`.
pub fn disrupt(state: &ClusterState, catalog: &Catalog, opts: &DisruptOptions) -> Disruptions {
    let _ = (state, catalog, opts);
    Disruptions::default()
}
