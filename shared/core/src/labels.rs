//! Well-known labels, label-key aliases and Kubernetes label syntax checks.
//!
//! Label values end up in node user data later (issue: fleet launch), so the
//! validation here is strict: exactly the API server's rules, which exclude
//! every shell or TOML metacharacter.

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const OS: &str = "kubernetes.io/os";
pub const ARCH: &str = "kubernetes.io/arch";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const PROVISIONER_NAME: &str = "karpenter.sh/provisioner-name";
pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";

pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_PODS: &str = "karpenter.k8s.aws/instance-pods";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";

/// Annotation (pods and nodes): never disrupt gracefully; on pods the value
/// may be a duration (`"1h"`) after the pod's start.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// v1alpha5 spelling of [`DO_NOT_DISRUPT`] on pods (`karpenter.sh/do-not-evict`).
pub const DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";
/// v1alpha5 node annotation: never consolidate this node.
pub const DO_NOT_CONSOLIDATE: &str = "karpenter.sh/do-not-consolidate";
/// Annotation on NodeClaims and nodes: the NodePool template hash at launch.
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Annotation on NodeClaims and nodes: the EC2NodeClass hash at launch.
pub const NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Taint key Karpenter puts on nodes being disrupted (`NoSchedule`).
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// Pod annotation: lower costs are evicted first (the ReplicaSet's rule).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Labels whose values the cloud provider knows: a pod may require them even
/// when no NodePool mentions them.
pub const WELL_KNOWN: &[&str] = &[
    ZONE,
    REGION,
    HOSTNAME,
    INSTANCE_TYPE,
    OS,
    ARCH,
    WINDOWS_BUILD,
    CAPACITY_TYPE,
    NODEPOOL,
    PROVISIONER_NAME,
    NODECLASS,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_FAMILY,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_MEMORY,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_PODS,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_LOCAL_NVME,
    INSTANCE_EBS_BANDWIDTH,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
];

/// Label domains Karpenter v1 reserves (`karpenter.sh`, and the AWS
/// provider's `karpenter.k8s.aws`): a NodePool may not set arbitrary labels
/// under them (well-known ones excepted). `kubernetes.io` and `k8s.io` are
/// allowed since Karpenter v1, as its tests "should label nodes with labels
/// in the kubernetes domains" show.
pub const RESTRICTED_DOMAINS: &[&str] = &["karpenter.sh", "karpenter.k8s.aws"];

pub fn is_well_known(key: &str) -> bool {
    WELL_KNOWN.contains(&key)
}

/// Well-known labels an instance type does not decide: its offering's,
/// its NodePool's, its node's.
const NOT_INSTANCE_TYPE: &[&str] = &[
    ZONE,
    REGION,
    HOSTNAME,
    CAPACITY_TYPE,
    NODEPOOL,
    PROVISIONER_NAME,
    NODECLASS,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
];

/// Whether the instance type alone decides this label (architecture, OS,
/// family, size, ...): whether a type may run a pod requiring it is known
/// from the type, whatever node it becomes.
pub fn is_instance_type_label(key: &str) -> bool {
    is_well_known(key) && !NOT_INSTANCE_TYPE.contains(&key)
}

/// Maps deprecated and CSI-specific aliases to the label Karpenter reasons
/// about (`topology.ebs.csi.aws.com/zone` → `topology.kubernetes.io/zone`).
pub fn normalize_key(key: &str) -> &str {
    match key {
        "topology.ebs.csi.aws.com/zone" | "failure-domain.beta.kubernetes.io/zone" => ZONE,
        "failure-domain.beta.kubernetes.io/region" => REGION,
        "beta.kubernetes.io/arch" => ARCH,
        "beta.kubernetes.io/os" => OS,
        "beta.kubernetes.io/instance-type" => INSTANCE_TYPE,
        other => other,
    }
}

/// Whether a NodePool may set this label key (custom labels outside the
/// restricted domains, or well-known ones).
pub fn is_restricted_for_nodepool(key: &str) -> bool {
    // Karpenter's RestrictedLabels: a node's hostname is its own.
    if key == HOSTNAME {
        return true;
    }
    if is_well_known(key) {
        return false;
    }
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    RESTRICTED_DOMAINS
        .iter()
        .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {0:?} is invalid: {1}")]
    Key(String, &'static str),
    #[error("label value {0:?} is invalid: {1}")]
    Value(String, &'static str),
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.'
}

fn check_name(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("name part must not be empty");
    }
    if s.len() > 63 {
        return Err("name part must be at most 63 characters");
    }
    let b = s.as_bytes();
    if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return Err("name part must start and end with an alphanumeric character");
    }
    if !b.iter().all(|c| is_name_char(*c)) {
        return Err("name part may contain only alphanumerics, '-', '_' and '.'");
    }
    Ok(())
}

fn check_dns_subdomain(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 253 {
        return Err("prefix must be a DNS subdomain of at most 253 characters");
    }
    for part in s.split('.') {
        let b = part.as_bytes();
        if b.is_empty()
            || !b[0].is_ascii_alphanumeric()
            || !b[b.len() - 1].is_ascii_alphanumeric()
            || !b
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        {
            return Err("prefix must be a lowercase DNS subdomain");
        }
    }
    Ok(())
}

/// Validates a label key (`[prefix/]name`) as the API server does.
pub fn validate_key(key: &str) -> Result<(), LabelError> {
    let err = |m| LabelError::Key(key.to_string(), m);
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix).map_err(err)?;
            check_name(name).map_err(err)
        }
        None => check_name(key).map_err(err),
    }
}

/// Validates a label value: empty, or at most 63 characters of
/// `[A-Za-z0-9._-]` starting and ending with an alphanumeric.
pub fn validate_value(v: &str) -> Result<(), LabelError> {
    if v.is_empty() {
        return Ok(());
    }
    check_name(v).map_err(|m| LabelError::Value(v.to_string(), m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_type_labels_are_the_well_known_ones_a_type_decides() {
        for (key, decided) in [
            (ARCH, true),
            (OS, true),
            (INSTANCE_TYPE, true),
            (INSTANCE_FAMILY, true),
            (INSTANCE_GPU_COUNT, true),
            (ZONE, false),
            (CAPACITY_TYPE, false),
            (HOSTNAME, false),
            (NODEPOOL, false),
            (CAPACITY_RESERVATION_ID, false),
            ("team", false),
        ] {
            assert_eq!(is_instance_type_label(key), decided, "{key}");
        }
    }

    #[test]
    fn keys() {
        assert!(validate_key("app").is_ok());
        assert!(validate_key("example.com/team").is_ok());
        assert!(validate_key("karpenter.k8s.aws/instance-cpu").is_ok());
        assert!(validate_key("").is_err());
        assert!(validate_key("Example.com/x").is_err());
        assert!(validate_key("a/b/c").is_err());
        assert!(validate_key("-app").is_err());
        assert!(validate_key(&"a".repeat(64)).is_err());
    }

    #[test]
    fn values_reject_injection() {
        assert!(validate_value("").is_ok());
        assert!(validate_value("team-a_1.x").is_ok());
        for bad in [
            "a b",
            "$(reboot)",
            "a\nb",
            "a\"b",
            "x;y",
            "a'b",
            "a]b",
            "`id`",
            "é",
        ] {
            assert!(validate_value(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn aliases_and_domains() {
        assert_eq!(normalize_key("topology.ebs.csi.aws.com/zone"), ZONE);
        assert_eq!(normalize_key("app"), "app");
        assert!(is_restricted_for_nodepool("karpenter.sh/foo"));
        assert!(!is_restricted_for_nodepool("kubernetes.io/foo"));
        assert!(!is_restricted_for_nodepool("k8s.io/foo"));
        assert!(is_restricted_for_nodepool("karpenter.k8s.aws/foo"));
        assert!(is_restricted_for_nodepool(HOSTNAME));
        assert!(!is_restricted_for_nodepool("node.kubernetes.io/foo"));
        assert!(!is_restricted_for_nodepool(ZONE));
        assert!(!is_restricted_for_nodepool("example.com/foo"));
    }
}
