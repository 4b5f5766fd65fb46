//! Resolving an EC2NodeClass's selector terms against EC2: the launch
//! stage resolves each node class once per invocation; the disruption
//! stage compares what the pipeline launched with what the node class
//! resolves to now (Karpenter's cloud-provider drift), with the resolution
//! cached in the table for [`STATUS_MAX_AGE_SECS`]
//! (`CLUSTER#<c> / NODECLASS#<name>`).

use flotilla_core::disruption::hash::template_hash;
use flotilla_core::launch::nodeclass::{self, ResolvedNodeClass};
use flotilla_core::model::NodeClass;
use flotilla_ports::{Condition, Ec2, Item, Store, Write};
use serde::{Deserialize, Serialize};

use crate::{codec, keys, Result, ServiceError};

/// How long the disruption stage uses a node class's resolution before
/// asking EC2 again (a newer AMI drifts the nodes at most this much later).
pub const STATUS_MAX_AGE_SECS: i64 = 5 * 60;

/// `nc` resolved against EC2: its subnets, security groups and the AMIs
/// of Kubernetes `k8s_version`. `Ok(Err(reason))`: the node class is
/// invalid or selects nothing.
pub async fn resolve_node_class<E: Ec2>(
    ec2: &E,
    nc: &NodeClass,
    k8s_version: &str,
) -> Result<std::result::Result<ResolvedNodeClass, String>> {
    let spec = match nodeclass::parse_node_class(nc) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut subnets = Vec::new();
    for q in spec.subnet_queries() {
        subnets.extend(
            ec2.describe_subnets(&q)
                .await
                .map_err(ServiceError::port("DescribeSubnets"))?,
        );
    }
    let mut groups = Vec::new();
    for q in spec.security_group_queries() {
        groups.extend(
            ec2.describe_security_groups(&q)
                .await
                .map_err(ServiceError::port("DescribeSecurityGroups"))?,
        );
    }
    let mut images = Vec::new();
    for q in spec.image_queries(k8s_version) {
        images.extend(
            ec2.describe_images(&q.filters, &q.owners)
                .await
                .map_err(ServiceError::port("DescribeImages"))?,
        );
    }
    Ok(nodeclass::resolve(&spec, subnets, groups, images).map_err(|e| e.to_string()))
}

/// A cached resolution: of which spec and Kubernetes version, when, and
/// its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedResolution {
    /// [`template_hash`] of the whole spec (selector terms included).
    spec_hash: String,
    kubernetes_version: String,
    fetched_at: i64,
    resolved: std::result::Result<ResolvedNodeClass, String>,
}

/// [`resolve_node_class`] through the table's cache: a resolution of the
/// same spec and Kubernetes version younger than [`STATUS_MAX_AGE_SECS`]
/// is reused.
pub async fn cached_resolution<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    cluster: &str,
    nc: &NodeClass,
    k8s_version: &str,
    now_secs: i64,
) -> Result<std::result::Result<ResolvedNodeClass, String>> {
    let key = keys::node_class(cluster, &nc.name);
    let spec_hash = template_hash(&nc.spec);
    let cached = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read node class resolution"))?;
    if let Some(item) = cached.filter(|i| i.is_live(now_secs)) {
        // An unreadable entry (an older layout) is resolved anew.
        if let Ok(c) = codec::from_json::<CachedResolution>(&key.to_string(), &item.body) {
            if c.spec_hash == spec_hash
                && c.kubernetes_version == k8s_version
                && now_secs.saturating_sub(c.fetched_at) < STATUS_MAX_AGE_SECS
            {
                return Ok(c.resolved);
            }
        }
    }
    let resolved = resolve_node_class(ec2, nc, k8s_version).await?;
    let entry = CachedResolution {
        spec_hash,
        kubernetes_version: k8s_version.to_string(),
        fetched_at: now_secs,
        resolved: resolved.clone(),
    };
    let mut item = Item::new(key, codec::to_json(&entry));
    item.expires_at = Some(now_secs.saturating_add(STATUS_MAX_AGE_SECS));
    store
        .write(Write::Put {
            item,
            condition: Condition::Always,
        })
        .await
        .map_err(ServiceError::port("write node class resolution"))?;
    Ok(resolved)
}
