//! In-flight NodeClaims: `karpenter.sh/v1 NodeClaim` objects among the
//! inputs that have launched (a provider ID and `status.allocatable`) but
//! whose Node is not there yet. Karpenter's cluster state counts them as
//! nodes about to join, and pods are planned onto them like onto existing
//! nodes (`existingNodes` of the plan names them by their node name, else
//! the NodeClaim's). Their labels are the NodeClaim's, over the
//! single-valued requirements; their taints `spec.taints` (startup taints
//! do not keep pods off a node that has not initialized). A NodeClaim
//! being deleted is not capacity.

use std::collections::BTreeSet;

use crate::labels;
use crate::model::{ClusterState, Node, NodeClaimObject};

/// Nodes standing for the in-flight NodeClaims of `state`, by name.
pub(super) fn nodes(state: &ClusterState) -> Vec<Node> {
    if state.node_claims.is_empty() {
        return Vec::new();
    }
    let names: BTreeSet<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    let ids: BTreeSet<&str> = state
        .nodes
        .iter()
        .filter_map(|n| n.provider_id.as_deref())
        .collect();
    let mut out: Vec<Node> = state
        .node_claims
        .iter()
        .filter(|c| !c.deleting && !c.allocatable.is_zero())
        .filter(|c| c.provider_id.as_deref().is_some_and(|id| !ids.contains(id)))
        .filter(|c| !names.contains(node_name(c)))
        .map(node)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

fn node_name(c: &NodeClaimObject) -> &str {
    c.node_name.as_deref().unwrap_or(&c.name)
}

fn node(c: &NodeClaimObject) -> Node {
    let mut node_labels = c.requirements.single_valued_labels();
    node_labels.extend(c.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(p) = &c.node_pool {
        node_labels
            .entry(labels::NODEPOOL.into())
            .or_insert_with(|| p.clone());
    }
    Node {
        name: node_name(c).to_string(),
        labels: node_labels,
        annotations: c.annotations.clone(),
        created_at: c.created_at,
        provider_id: c.provider_id.clone(),
        taints: c.taints.clone(),
        allocatable: c.allocatable.clone(),
        unschedulable: false,
        deleting: false,
        ready: None,
        pods: Vec::new(),
    }
}
