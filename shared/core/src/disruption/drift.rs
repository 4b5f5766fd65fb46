//! Drift: a node no longer matches what its NodePool would launch now.
//!
//! - a NodeClaim given among the inputs says so (`Drifted=True`);
//! - the node's labels (completed with its instance type's well-known
//!   labels from the catalog) no longer satisfy the NodePool's
//!   requirements;
//! - the NodePool's (or its node class's) template changed since launch:
//!   the node or its NodeClaim carries the template hash it was launched
//!   with (`karpenter.sh/nodepool-hash`, `karpenter.k8s.aws/ec2nodeclass-hash`),
//!   written by Flotilla with its own hash-version annotation
//!   (`karpenter.sh/nodepool-hash-version`,
//!   `karpenter.k8s.aws/ec2nodeclass-hash-version`: each hash is compared
//!   when its own version annotation is ours). A hash written by
//!   another version (Karpenter's own hashes are computed differently) is
//!   not compared: unknown is not drifted.

use std::collections::BTreeMap;

use crate::catalog::Catalog;
use crate::labels;
use crate::model::{ClusterState, NodeClaimObject};

use super::candidate::Candidate;
use super::hash::{recorded_hash, NODECLASS_HASH_VERSION, NODEPOOL_HASH_VERSION};
use super::price::unsatisfied_requirement;

/// Why candidate `c` has drifted, if it has.
pub(crate) fn drifted(state: &ClusterState, catalog: &Catalog, c: &Candidate) -> Option<String> {
    let node = &state.nodes[c.node];
    let pool = &state.node_pools[c.pool];
    let claim: Option<&NodeClaimObject> = c.claim.and_then(|i| state.node_claims.get(i));
    if let Some(cl) = claim.filter(|cl| cl.drifted) {
        return Some(format!("NodeClaim {} reports Drifted", cl.name));
    }
    let mut full: BTreeMap<String, String> = node.labels.clone();
    if let Some(e) = node
        .labels
        .get(labels::INSTANCE_TYPE)
        .and_then(|t| catalog.get(t))
    {
        for (k, v) in e.info.label_values() {
            full.entry(k.to_string()).or_insert(v);
        }
    }
    if let Some(req) = unsatisfied_requirement(pool, &full) {
        return Some(format!(
            "its labels no longer satisfy NodePool {}'s requirement {req}",
            pool.name
        ));
    }
    // Each hash counts only under its own version annotation: the node's
    // first, else its NodeClaim's.
    let recorded = |key: &str, version: &str| -> Option<&str> {
        recorded_hash(&node.annotations, key, version)
            .or_else(|| claim.and_then(|cl| recorded_hash(&cl.annotations, key, version)))
    };
    if let (Some(have), Some(want)) = (
        recorded(labels::NODEPOOL_HASH, NODEPOOL_HASH_VERSION),
        pool.template_hash.as_deref(),
    ) {
        if have != want {
            return Some(format!(
                "NodePool {}'s template changed since launch ({} {have}, now {want})",
                pool.name,
                labels::NODEPOOL_HASH
            ));
        }
    }
    let class = pool
        .node_class
        .as_deref()
        .and_then(|n| state.node_classes.iter().find(|c| c.name == n));
    if let (Some(have), Some(class)) = (
        recorded(labels::NODECLASS_HASH, NODECLASS_HASH_VERSION),
        class,
    ) {
        if let Some(want) = class.template_hash.as_deref() {
            if have != want {
                return Some(format!(
                    "{} {}'s spec changed since launch ({} {have}, now {want})",
                    class.kind,
                    class.name,
                    labels::NODECLASS_HASH
                ));
            }
        }
    }
    None
}
