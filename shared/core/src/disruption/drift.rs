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
//!   not compared: unknown is not drifted;
//! - cloud-provider drift (Karpenter's `isAMIDrifted`, `isSubnetDrifted`,
//!   `areSecurityGroupsDrifted`), against what the node class resolves to
//!   now (its `status`): the image the NodeClaim runs (`status.imageID`,
//!   else the instance's) is not among the node class's AMIs whose
//!   requirements the node satisfies; the instance's subnet is not among
//!   its subnets; the instance's security groups are not exactly its
//!   security groups. The instance is found by the provider ID in
//!   [`ClusterState::instances`]. A node class without that status, or an
//!   image, subnet or security groups not known, is not drifted.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::Catalog;
use crate::labels;
use crate::model::{ClusterState, InstanceFacts, Node, NodeClaimObject, NodeClass};
use crate::scheduler::labels_satisfy;

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
    let class = class?;
    cloud_drifted(state, class, node, claim, &full)
}

/// The instance id of a provider ID (`aws:///<zone>/<instance-id>`).
fn instance_id(provider_id: &str) -> Option<&str> {
    let id = provider_id.strip_prefix("aws://")?.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

/// Cloud-provider drift of a node of `class`, whose labels (completed from
/// the catalog) are `full`.
fn cloud_drifted(
    state: &ClusterState,
    class: &NodeClass,
    node: &Node,
    claim: Option<&NodeClaimObject>,
    full: &BTreeMap<String, String>,
) -> Option<String> {
    let who = match claim {
        Some(c) => format!("NodeClaim {}", c.name),
        None => format!("node {}", node.name),
    };
    let instance: Option<&InstanceFacts> = claim
        .and_then(|c| c.provider_id.as_deref())
        .or(node.provider_id.as_deref())
        .and_then(instance_id)
        .and_then(|id| state.instances.get(id));
    let image = claim
        .and_then(|c| c.image_id.as_deref())
        .or_else(|| instance.and_then(|i| i.image_id.as_deref()));
    ami_drifted(&who, class, image, full)
        .or_else(|| subnet_drifted(&who, class, instance.and_then(|i| i.subnet_id.as_deref())))
        .or_else(|| {
            let groups = instance.map_or(&[][..], |i| i.security_group_ids.as_slice());
            security_groups_drifted(&who, class, groups)
        })
}

/// The image is not among the class's AMIs that serve the node (those
/// whose requirements its labels satisfy; Karpenter's `AMIDrift`).
pub(crate) fn ami_drifted(
    who: &str,
    class: &NodeClass,
    image: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    let image = image.filter(|i| !i.is_empty())?;
    if class.status.amis.is_empty() {
        return None;
    }
    let serving: Vec<&str> = class
        .status
        .amis
        .iter()
        .filter(|a| labels_satisfy(labels, &a.requirements).is_ok())
        .map(|a| a.id.as_str())
        .collect();
    if serving.contains(&image) {
        return None;
    }
    let now = if serving.is_empty() {
        "none serves its instance type".to_string()
    } else {
        serving.join(", ")
    };
    Some(format!(
        "{who} runs image {image}, no longer among {} {}'s AMIs ({now})",
        class.kind, class.name
    ))
}

/// The instance's subnet is not among the class's subnets.
pub(crate) fn subnet_drifted(who: &str, class: &NodeClass, subnet: Option<&str>) -> Option<String> {
    let subnet = subnet.filter(|s| !s.is_empty())?;
    let want = &class.status.subnets;
    if want.is_empty() || want.iter().any(|s| s == subnet) {
        return None;
    }
    Some(format!(
        "{who}'s instance is in subnet {subnet}, no longer among {} {}'s subnets ({})",
        class.kind,
        class.name,
        want.join(", ")
    ))
}

/// The instance's security groups differ from the class's (as sets).
pub(crate) fn security_groups_drifted(
    who: &str,
    class: &NodeClass,
    groups: &[String],
) -> Option<String> {
    let want: BTreeSet<&str> = class
        .status
        .security_groups
        .iter()
        .map(String::as_str)
        .collect();
    let have: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
    if want.is_empty() || have.is_empty() || want == have {
        return None;
    }
    let list = |s: &BTreeSet<&str>| s.iter().copied().collect::<Vec<_>>().join(", ");
    Some(format!(
        "{who}'s instance has security groups {}, not {} {}'s ({})",
        list(&have),
        class.kind,
        class.name,
        list(&want)
    ))
}
