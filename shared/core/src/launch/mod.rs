//! The pure half of launching a NodeClaim: turning the scheduler's
//! [`NodeClaimPlan`](crate::plan::NodeClaimPlan) into a CreateFleet request
//! (`fleet`), reading the CreateFleet response and deciding the next attempt
//! (`ice`), bootstrap user data (`userdata`) and content-addressed launch
//! templates (`launch_template`); the EC2NodeClass as the launch stage reads
//! it: parsed, validated, its selector terms turned into EC2 queries and
//! their answers resolved (`nodeclass`); and the step that ties them
//! together for one NodeClaim, from plan and EC2 facts to launch templates
//! and the first [`FleetInput`] (`prepare`).
//!
//! Implements phases 2 and 3 of `instance-selection-deep-dive.txt`
//! (AMI grouping, price ordering, 60-type truncation, allocation strategies,
//! Priority = adjusted price with NodeOverlays). Nothing here calls AWS: the
//! Lambda adapters send these plain structs and hand the answers back.

pub mod fleet;
pub mod ice;
pub mod launch_template;
pub mod nodeclass;
pub mod prepare;
pub mod userdata;

pub use fleet::{build_fleet_request, FleetInput, FleetRequest, MAX_INSTANCE_TYPES};
pub use ice::{next_attempt, FleetResponse, Outcome, ICE_TTL_SECONDS};
pub use launch_template::{
    instance_tags, launch_template_config, template_name, unused_templates, LaunchTemplateConfig,
    LaunchTemplateInput,
};
pub use nodeclass::{
    parse_node_class, resolve, Ec2NodeClassSpec, ImageQuery, ResolvedImage, ResolvedNodeClass,
};
pub use prepare::{prepare_launch, PrepareInput, PreparedLaunch};
pub use userdata::{generate_user_data, ClusterInfo, UserDataInput};

/// Why a launch request could not be built or a launch cannot proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("no {capacity_type} offerings left to launch NodeClaim {node_claim}")]
    NoOfferings {
        node_claim: String,
        capacity_type: String,
    },
    #[error("no subnet in any offering zone (offering zones: {offering_zones:?}; subnet zones: {subnet_zones:?})")]
    NoSubnetInOfferingZones {
        offering_zones: Vec<String>,
        subnet_zones: Vec<String>,
    },
    #[error(
        "no AMI for architecture(s) {architectures:?} (AMIs resolved for: {ami_architectures:?})"
    )]
    NoCompatibleAmi {
        architectures: Vec<String>,
        ami_architectures: Vec<String>,
    },
    #[error("no launch template name for AMI {ami_id} (reservation {reservation:?})")]
    MissingLaunchTemplate {
        ami_id: String,
        reservation: Option<String>,
    },
    #[error("target capacity must be at least 1")]
    ZeroTargetCapacity,
    #[error("invalid label {key:?}: {reason}")]
    InvalidLabel { key: String, reason: String },
    #[error("invalid taint {key:?}: {reason}")]
    InvalidTaint { key: String, reason: String },
    #[error("invalid bootstrap field {field}: {reason}")]
    InvalidBootstrapField { field: String, reason: String },
    #[error("user data: {0}")]
    UserData(String),
    #[error("unsupported AMI family {0} for user data generation")]
    UnsupportedAmiFamily(String),
    #[error("invalid EC2NodeClass field {field}: {reason}")]
    InvalidNodeClass { field: String, reason: String },
    /// An EC2NodeClass spec that does not parse or breaks a Karpenter
    /// validation rule; `field` is the path (`spec.subnetSelectorTerms[0].id`).
    #[error("EC2NodeClass {node_class} at {field}: {reason}")]
    NodeClassField {
        node_class: String,
        field: String,
        reason: String,
    },
    /// An EC2NodeClass whose selector terms matched nothing usable.
    #[error("EC2NodeClass {node_class}: {reason}")]
    NodeClassUnresolved { node_class: String, reason: String },
    /// The NodeClaim cannot be launched as planned (unknown instance types,
    /// nothing left after the ICE cache, ...).
    #[error("NodeClaim {node_claim}: {reason}")]
    NodeClaim { node_claim: String, reason: String },
    /// The candidate types cannot keep a `minValues` of the NodeClaim.
    #[error("minValues requirement is not met for {key}: {min} values needed, the instance types offer {have}")]
    MinValues { key: String, min: u32, have: usize },
    /// Keeping every `minValues` takes more types than one request holds.
    #[error("keeping every minValues takes {needed} instance types, more than the {max} a request holds")]
    MinValuesTruncation { needed: usize, max: usize },
}

/// 64-bit FNV-1a: a stable hash (unlike std's randomly seeded hasher) for
/// client tokens, MIME boundaries and launch-template names.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv_known_vectors() {
        assert_eq!(super::fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
