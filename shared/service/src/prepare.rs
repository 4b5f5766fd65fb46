//! From a stored NodeClaim and its batch's launch context to the pure
//! `flotilla_core::launch::prepare_launch` input.

use flotilla_core::launch::nodeclass::ResolvedNodeClass;
use flotilla_core::launch::prepare::{prepare_launch, PrepareInput, PreparedLaunch};
use flotilla_core::launch::{template_name, ClusterInfo};

use crate::instances::{CLUSTER_ID_TAG, STACK_TAG};
use crate::launch_env::LaunchEnv;
use crate::records::NodeClaimRecord;
use crate::Config;

/// The instance profile to launch with: the EC2NodeClass's
/// `spec.instanceProfile`, or for `spec.role` the profile the deployment
/// created for the node role (`FLOTILLA_INSTANCE_PROFILE` for
/// `FLOTILLA_NODE_ROLE`), or for an AWSNodeTemplate without one that
/// profile (the default instance profile). Flotilla holds no IAM permissions, so a role it
/// has no profile for is an error naming the fix.
fn instance_profile(resolved: &ResolvedNodeClass, config: &Config) -> Result<String, String> {
    if let Some(p) = &resolved.spec.instance_profile {
        return Ok(p.clone());
    }
    if resolved.spec.default_instance_profile {
        // An AWSNodeTemplate without one: the deployment's node instance
        // profile, as Karpenter's `aws.defaultInstanceProfile` was.
        return config.instance_profile.clone().ok_or_else(|| {
            format!(
                "AWSNodeTemplate {:?} at spec.instanceProfile: required (no default instance \
                 profile: FLOTILLA_INSTANCE_PROFILE is not set)",
                resolved.name
            )
        });
    }
    let role = resolved.spec.role.clone().unwrap_or_default();
    let role_name = role.rsplit('/').next().unwrap_or(&role);
    match (&config.node_role, &config.instance_profile) {
        (Some(node_role), Some(profile))
            if node_role.rsplit('/').next().unwrap_or(node_role) == role_name =>
        {
            Ok(profile.clone())
        }
        _ => Err(format!(
            "EC2NodeClass {:?}: spec.role {role:?} has no instance profile Flotilla may use; \
             set spec.instanceProfile, or deploy with NodeRoleArn set to this role",
            resolved.name
        )),
    }
}

pub(crate) fn prepare(
    env: &LaunchEnv,
    resolved: &ResolvedNodeClass,
    record: &NodeClaimRecord,
    cluster_id: &str,
    config: &Config,
) -> Result<PreparedLaunch, String> {
    let pool_name = &record.plan.node_pool;
    let node_pool = env
        .state
        .node_pools
        .iter()
        .find(|p| &p.name == pool_name)
        .ok_or_else(|| format!("NodePool {pool_name:?} is not in the batch's launch context"))?;
    let node_class = env
        .state
        .node_classes
        .iter()
        .find(|c| c.name == record.node_class)
        .ok_or_else(|| {
            format!(
                "EC2NodeClass {:?} is not in the batch's launch context",
                record.node_class
            )
        })?;
    let mut resolved = resolved.clone();
    resolved.spec.instance_profile = Some(instance_profile(&resolved, config)?);
    let meta = &env.context.cluster;
    let cluster = ClusterInfo {
        name: meta.name.clone(),
        endpoint: meta.endpoint.clone(),
        ca_bundle: meta.ca_bundle.clone(),
        service_cidr: meta.service_cidr.clone().unwrap_or_default(),
    };
    let unavailable: Vec<_> = env
        .unavailable
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let input = PrepareInput {
        claim: &record.plan,
        node_pool,
        node_class,
        resolved: &resolved,
        catalog: &env.catalog,
        overlays: &env.state.overlays,
        unavailable: &unavailable,
        cluster: &cluster,
        kubelet: &node_pool.kubelet,
        cluster_name: &meta.name,
        attempt: record.attempts,
        target_count: 1,
    };
    let mut prepared = prepare_launch(&input).map_err(|e| e.to_string())?;
    let tags = &mut prepared.fleet.tags;
    tags.insert(CLUSTER_ID_TAG.to_string(), cluster_id.to_string());
    tags.insert(STACK_TAG.to_string(), config.stack_id.clone());
    // The stack tag goes on the templates too, and into their
    // content-addressed names: two stacks in one region never share one.
    let mut renamed = std::collections::BTreeMap::new();
    for (name, template) in &mut prepared.launch_templates {
        template
            .tags
            .insert(STACK_TAG.to_string(), config.stack_id.clone());
        let new_name = template_name(template);
        renamed.insert(std::mem::replace(name, new_name.clone()), new_name);
    }
    for name in prepared.fleet.launch_templates.values_mut() {
        if let Some(new_name) = renamed.get(name) {
            name.clone_from(new_name);
        }
    }
    Ok(prepared)
}
