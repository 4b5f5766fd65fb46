//! The default resources of a simulated region: a VPC with one subnet per
//! zone, security groups, EKS-optimized AMIs; and constructors for
//! capacity reservations.

use std::collections::BTreeMap;

use flotilla_core::model::{CapacityReservation, ReservationType};
use flotilla_ports::{Image, SecurityGroup, Subnet};

use crate::rng::SplitMix64;

/// The simulated account (owner of what `self` means in DescribeImages,
/// of the capacity reservations, ...).
pub const ACCOUNT_ID: &str = "111122223333";

/// The account that publishes the EKS-optimized AL2023 AMIs (owner alias
/// `amazon`).
pub const EKS_AMI_OWNER_ID: &str = "602401143452";

/// The account that publishes the Bottlerocket AMIs (owner alias
/// `amazon`).
pub const BOTTLEROCKET_AMI_OWNER_ID: &str = "092701018921";

/// Accounts whose images carry the owner alias `amazon`.
pub const AMAZON_OWNER_IDS: &[&str] =
    &[EKS_AMI_OWNER_ID, BOTTLEROCKET_AMI_OWNER_ID, "137112412989"];

/// The tag Karpenter's getting-started guide puts on subnets and
/// security groups.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

/// Kubernetes version of the default AMIs.
pub const DEFAULT_K8S_VERSION: &str = "1.33";

/// `us-west-2` → `usw2`, `ap-southeast-1` → `apse1` (the prefix of zone
/// ids).
pub(crate) fn region_short(region: &str) -> String {
    let parts: Vec<&str> = region.split('-').collect();
    match parts.as_slice() {
        [geo, dir, num] => {
            let d = match *dir {
                "northeast" => "ne".to_string(),
                "northwest" => "nw".to_string(),
                "southeast" => "se".to_string(),
                "southwest" => "sw".to_string(),
                other => other.chars().take(1).collect(),
            };
            format!("{geo}{d}{num}")
        }
        _ => region.replace('-', ""),
    }
}

/// `us-west-2b` → `usw2-az2`.
pub(crate) fn zone_id(region: &str, zone: &str) -> String {
    let n = zone
        .strip_prefix(region)
        .and_then(|s| s.chars().next())
        .filter(char::is_ascii_lowercase)
        .map_or(1, |c| u32::from(c) - u32::from('a') + 1);
    format!("{}-az{n}", region_short(region))
}

/// A resource id: `prefix-` and 17 hex digits.
pub(crate) fn resource_id(rng: &mut SplitMix64, prefix: &str) -> String {
    format!("{prefix}-{}", rng.hex(17))
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The default VPC's subnets: one per zone, tagged for discovery.
pub(crate) fn subnets(
    rng: &mut SplitMix64,
    region: &str,
    vpc_id: &str,
    zones: &[String],
    cluster: &str,
) -> Vec<Subnet> {
    zones
        .iter()
        .map(|zone| Subnet {
            id: resource_id(rng, "subnet"),
            zone: zone.clone(),
            zone_id: zone_id(region, zone),
            vpc_id: vpc_id.to_string(),
            available_ips: 8187,
            tags: tags(&[
                (DISCOVERY_TAG, cluster),
                ("Name", &format!("{cluster}-private-{zone}")),
                ("kubernetes.io/role/internal-elb", "1"),
            ]),
        })
        .collect()
}

/// The VPC's `default` group (untagged) and the cluster's node group
/// (tagged for discovery).
pub(crate) fn security_groups(
    rng: &mut SplitMix64,
    vpc_id: &str,
    cluster: &str,
) -> Vec<SecurityGroup> {
    let default = SecurityGroup {
        id: resource_id(rng, "sg"),
        name: "default".into(),
        vpc_id: vpc_id.to_string(),
        tags: BTreeMap::new(),
    };
    let node = SecurityGroup {
        id: resource_id(rng, "sg"),
        name: format!("eks-cluster-sg-{cluster}"),
        vpc_id: vpc_id.to_string(),
        tags: tags(&[
            (DISCOVERY_TAG, cluster),
            (&format!("kubernetes.io/cluster/{cluster}"), "owned"),
        ]),
    };
    vec![default, node]
}

/// Two releases each of the EKS-optimized AL2023 (standard, NVIDIA, and for
/// `x86_64` Neuron) and Bottlerocket (standard, NVIDIA) AMIs for `x86_64`
/// and `arm64`, for Kubernetes `k8s`.
pub(crate) fn images(rng: &mut SplitMix64, k8s: &str) -> Vec<Image> {
    let releases = [
        ("v20251001", "v1.49.0-9a5bd0f1", "2025-10-01T08:12:45.000Z"),
        ("v20251101", "v1.50.0-4d0a6bcd", "2025-11-01T08:14:03.000Z"),
    ];
    let mut out = Vec::new();
    for (al2023, bottlerocket, created) in releases {
        for (arch, br_arch) in [("x86_64", "x86_64"), ("arm64", "aarch64")] {
            out.push(Image {
                id: resource_id(rng, "ami"),
                name: format!("amazon-eks-node-al2023-{arch}-standard-{k8s}-{al2023}"),
                owner_id: EKS_AMI_OWNER_ID.into(),
                architecture: arch.into(),
                creation_date: created.into(),
                deprecated: false,
                tags: BTreeMap::new(),
            });
            for variant in ["nvidia", "neuron"] {
                if variant == "neuron" && arch != "x86_64" {
                    continue;
                }
                out.push(Image {
                    id: resource_id(rng, "ami"),
                    name: format!("amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{al2023}"),
                    owner_id: EKS_AMI_OWNER_ID.into(),
                    architecture: arch.into(),
                    creation_date: created.into(),
                    deprecated: false,
                    tags: BTreeMap::new(),
                });
            }
            out.push(Image {
                id: resource_id(rng, "ami"),
                name: format!("bottlerocket-aws-k8s-{k8s}-nvidia-{br_arch}-{bottlerocket}"),
                owner_id: BOTTLEROCKET_AMI_OWNER_ID.into(),
                architecture: arch.into(),
                creation_date: created.into(),
                deprecated: false,
                tags: BTreeMap::new(),
            });
            out.push(Image {
                id: resource_id(rng, "ami"),
                name: format!("bottlerocket-aws-k8s-{k8s}-{br_arch}-{bottlerocket}"),
                owner_id: BOTTLEROCKET_AMI_OWNER_ID.into(),
                architecture: arch.into(),
                creation_date: created.into(),
                deprecated: false,
                tags: BTreeMap::new(),
            });
        }
    }
    out
}

/// An active, targeted on-demand capacity reservation (ODCR) of `count`
/// instances of `instance_type` in `zone`, owned by [`ACCOUNT_ID`], with
/// no end date.
pub fn odcr(id: &str, instance_type: &str, zone: &str, count: u32) -> CapacityReservation {
    CapacityReservation {
        id: id.into(),
        instance_type: instance_type.into(),
        availability_zone: zone.into(),
        total_instance_count: count,
        available_instance_count: count,
        state: "active".into(),
        instance_match_criteria: "targeted".into(),
        reservation_type: ReservationType::Default,
        platform: "Linux/UNIX".into(),
        tenancy: "default".into(),
        owner_id: ACCOUNT_ID.into(),
        end_date: None,
        tags: BTreeMap::new(),
    }
}

/// An active capacity block of `count` instances ending at `end_date`
/// (RFC 3339).
pub fn capacity_block(
    id: &str,
    instance_type: &str,
    zone: &str,
    count: u32,
    end_date: &str,
) -> CapacityReservation {
    CapacityReservation {
        reservation_type: ReservationType::CapacityBlock,
        end_date: Some(end_date.into()),
        ..odcr(id, instance_type, zone, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_ids() {
        assert_eq!(zone_id("us-west-2", "us-west-2b"), "usw2-az2");
        assert_eq!(zone_id("ap-southeast-1", "ap-southeast-1a"), "apse1-az1");
        assert_eq!(zone_id("eu-central-1", "eu-central-1c"), "euc1-az3");
    }
}
