//! What the launch stage holds while launching a batch's NodeClaims
//! ([`LaunchEnv`]): read by the launch itself and by [`crate::prepare`],
//! which turns a NodeClaim into a launch request.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use flotilla_core::launch::{ice::UnavailableOffering, nodeclass};
use flotilla_core::model::ClusterState;

use crate::records::LaunchContext;

/// What launching needs besides the NodeClaim: the batch's NodePools,
/// EC2NodeClasses and overlays, and the cluster's bootstrap facts.
pub struct LaunchEnv {
    pub context: LaunchContext,
    pub state: ClusterState,
    pub catalog: flotilla_core::catalog::Catalog,
    /// The ICE cache, plus what this invocation's launches ran into.
    pub unavailable: Mutex<BTreeSet<UnavailableOffering>>,
    pub(crate) resolved:
        Mutex<BTreeMap<String, std::result::Result<nodeclass::ResolvedNodeClass, String>>>,
    /// Launch templates created (and their use recorded) by this invocation.
    pub(crate) ensured: Mutex<BTreeSet<String>>,
}
