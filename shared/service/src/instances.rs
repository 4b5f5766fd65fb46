//! The instances (fleets, launch templates) Flotilla launches: the tags
//! that name their cluster and deployment, and which of them this
//! deployment may touch. Read by launch, prepare, sweep and disruption.

use flotilla_ports::Instance;

use crate::Config;

/// Tag naming the Flotilla cluster id on everything Flotilla launches (so
/// the sweep never touches instances of another provisioner, Karpenter
/// included, which share the `karpenter.sh/*` tags).
pub const CLUSTER_ID_TAG: &str = "flotilla.io/cluster-id";

/// Tag naming the deployment (CloudFormation stack id,
/// [`Config::stack_id`]) that launched an instance, fleet or launch
/// template. The sweep collects only instances carrying its own: another
/// stack's (a replaced stack, a table restored under another name) and
/// untagged instances are never touched.
pub const STACK_TAG: &str = "flotilla.io/stack";

/// Launched by this deployment: tagged [`STACK_TAG`] with its stack id.
pub fn of_this_stack(i: &Instance, config: &Config) -> bool {
    i.tags.get(STACK_TAG) == Some(&config.stack_id)
}
