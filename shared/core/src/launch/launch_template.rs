//! Launch-template configurations, content-addressed names and garbage
//! collection.
//!
//! Deep-dive rule (phase 2, "AMI-Based Grouping"): one launch template per
//! AMI (architecture), each referenced by name with `Version: $Latest` in
//! the CreateFleet request. Flotilla names a template
//! `flotilla/<16 hex digits>`, the FNV-1a hash of the canonical JSON of its
//! configuration, so identical configurations share a template and any
//! change (AMI, user data, security groups, metadata options, ...) creates a
//! new one; templates no longer referenced are deleted after a grace period
//! ([`unused_templates`]).
//!
//! The per-NodeClaim tag `karpenter.sh/nodeclaim` is *not* part of the
//! template (it would give every NodeClaim its own template); it goes on the
//! instance and its volumes through the CreateFleet `TagSpecifications`
//! (see [`instance_tags`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::{fnv1a64, LaunchError};
use crate::catalog::ReservationRef;
use crate::model::{AmiFamily, NodeClass, ReservationType};
use crate::quantity::Quantity;

pub const NAME_PREFIX: &str = "flotilla/";
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
/// The EKS cluster name, as Karpenter tags what it launches.
pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct LaunchTemplateConfig {
    pub image_id: String,
    /// Instance profile name.
    pub iam_instance_profile: String,
    /// Sorted, without duplicates.
    pub security_group_ids: Vec<String>,
    /// Plain text; the adapter base64-encodes it.
    pub user_data: String,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub metadata_options: MetadataOptions,
    pub tags: BTreeMap<String, String>,
    /// `CapacityReservationSpecification.CapacityReservationTarget`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// `InstanceMarketOptions.MarketType` (`capacity-block`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub market_type: Option<String>,
    /// `spec.associatePublicIPAddress`: the adapter puts it (and the
    /// security groups) on a `NetworkInterfaces[0]` entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub associate_public_ip_address: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BlockDeviceMapping {
    pub device_name: String,
    pub ebs: Ebs,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Ebs {
    /// GiB.
    pub volume_size: u64,
    pub volume_type: String,
    pub encrypted: bool,
    pub delete_on_termination: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetadataOptions {
    pub http_endpoint: String,
    pub http_protocol_ipv6: String,
    pub http_put_response_hop_limit: u32,
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    /// IMDSv2 only, one hop (pods cannot reach the node's credentials).
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: "disabled".into(),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
        }
    }
}

/// Inputs resolved by the adapters (AMI, profile, security groups) plus the
/// EC2NodeClass and the generated user data.
#[derive(Debug, Clone)]
pub struct LaunchTemplateInput<'a> {
    pub cluster_name: &'a str,
    pub node_pool: &'a str,
    pub node_class: &'a NodeClass,
    pub ami_id: &'a str,
    pub instance_profile: &'a str,
    pub security_group_ids: &'a [String],
    pub user_data: &'a str,
    pub reservation: Option<&'a ReservationRef>,
}

fn invalid(field: &str, reason: impl Into<String>) -> LaunchError {
    LaunchError::InvalidNodeClass {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Tags on the launch template (and, through it, on what it launches):
/// NodePool, EC2NodeClass, cluster ownership
/// (`kubernetes.io/cluster/<name>=owned`, `eks:eks-cluster-name=<name>`),
/// then `spec.tags` for keys Flotilla does not own.
pub fn template_tags(
    cluster: &str,
    node_pool: &str,
    node_class: &NodeClass,
) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = node_class
        .spec
        .get("tags")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    tags.insert(TAG_NODEPOOL.into(), node_pool.into());
    tags.insert(TAG_NODECLASS.into(), node_class.name.clone());
    tags.insert(format!("kubernetes.io/cluster/{cluster}"), "owned".into());
    tags.insert(TAG_EKS_CLUSTER_NAME.into(), cluster.into());
    tags
}

/// Tags for the CreateFleet `TagSpecifications` of one NodeClaim: the
/// template tags plus `karpenter.sh/nodeclaim`.
pub fn instance_tags(
    cluster: &str,
    node_pool: &str,
    node_class: &NodeClass,
    node_claim: &str,
) -> BTreeMap<String, String> {
    let mut tags = template_tags(cluster, node_pool, node_class);
    tags.insert(TAG_NODECLAIM.into(), node_claim.into());
    tags
}

fn metadata_options(spec: &Value) -> Result<MetadataOptions, LaunchError> {
    let mut m = MetadataOptions::default();
    let Some(o) = spec.get("metadataOptions") else {
        return Ok(m);
    };
    let string = |key: &str, allowed: &[&str]| -> Result<Option<String>, LaunchError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(Some(s.clone())),
            Some(v) => Err(invalid(
                &format!("metadataOptions.{key}"),
                format!("{v} is not one of {allowed:?}"),
            )),
        }
    };
    if let Some(v) = string("httpEndpoint", &["enabled", "disabled"])? {
        m.http_endpoint = v;
    }
    if let Some(v) = string("httpProtocolIPv6", &["enabled", "disabled"])? {
        m.http_protocol_ipv6 = v;
    }
    if let Some(v) = string("httpTokens", &["required", "optional"])? {
        m.http_tokens = v;
    }
    match o.get("httpPutResponseHopLimit") {
        None | Some(Value::Null) => {}
        Some(v) => {
            m.http_put_response_hop_limit = v
                .as_u64()
                .filter(|n| (1..=64).contains(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    invalid(
                        "metadataOptions.httpPutResponseHopLimit",
                        format!("{v} is not 1..64"),
                    )
                })?;
        }
    }
    Ok(m)
}

fn gib(field: &str, v: &Value) -> Result<u64, LaunchError> {
    let q = match v {
        Value::String(s) => Quantity::parse(s).map_err(|e| invalid(field, e.to_string()))?,
        Value::Number(n) => n
            .as_u64()
            .map(|g| g.saturating_mul(1 << 30))
            .map(|b| {
                Quantity::from_millis(i64::try_from(b.saturating_mul(1000)).unwrap_or(i64::MAX))
            })
            .ok_or_else(|| invalid(field, "not a positive integer"))?,
        _ => return Err(invalid(field, "not a quantity")),
    };
    let bytes = q.millis().div_euclid(1000);
    if bytes <= 0 {
        return Err(invalid(field, "must be positive"));
    }
    Ok((bytes as u64).div_ceil(1 << 30))
}

fn default_block_devices(family: &AmiFamily) -> Vec<BlockDeviceMapping> {
    let dev = |name: &str, size: u64| BlockDeviceMapping {
        device_name: name.into(),
        ebs: Ebs {
            volume_size: size,
            volume_type: "gp3".into(),
            encrypted: true,
            delete_on_termination: true,
            iops: None,
            throughput: None,
            kms_key_id: None,
            snapshot_id: None,
        },
    };
    match family {
        AmiFamily::Bottlerocket => vec![dev("/dev/xvda", 4), dev("/dev/xvdb", 20)],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => vec![dev("/dev/sda1", 50)],
        _ => vec![dev("/dev/xvda", 20)],
    }
}

fn block_devices(node_class: &NodeClass) -> Result<Vec<BlockDeviceMapping>, LaunchError> {
    let Some(list) = node_class
        .spec
        .get("blockDeviceMappings")
        .and_then(Value::as_array)
    else {
        return Ok(default_block_devices(&node_class.ami_family));
    };
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let field = |f: &str| format!("blockDeviceMappings[{i}].{f}");
        let device_name = m
            .get("deviceName")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(&field("deviceName"), "missing"))?;
        let ebs = m.get("ebs").cloned().unwrap_or(Value::Null);
        let volume_size = match ebs.get("volumeSize") {
            Some(v) => gib(&field("ebs.volumeSize"), v)?,
            None => 20,
        };
        let s = |k: &str| ebs.get(k).and_then(Value::as_str).map(str::to_string);
        let n = |k: &str| ebs.get(k).and_then(Value::as_u64);
        let b = |k: &str, d: bool| ebs.get(k).and_then(Value::as_bool).unwrap_or(d);
        out.push(BlockDeviceMapping {
            device_name: device_name.into(),
            ebs: Ebs {
                volume_size,
                volume_type: s("volumeType").unwrap_or_else(|| "gp3".into()),
                encrypted: b("encrypted", true),
                delete_on_termination: b("deleteOnTermination", true),
                iops: n("iops"),
                throughput: n("throughput"),
                kms_key_id: s("kmsKeyID"),
                snapshot_id: s("snapshotID"),
            },
        });
    }
    Ok(out)
}

/// The launch-template configuration for one (NodeClass, AMI, reservation).
pub fn launch_template_config(
    input: &LaunchTemplateInput,
) -> Result<LaunchTemplateConfig, LaunchError> {
    let spec = &input.node_class.spec;
    let security_group_ids: Vec<String> = input
        .security_group_ids
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Ok(LaunchTemplateConfig {
        image_id: input.ami_id.into(),
        iam_instance_profile: input.instance_profile.into(),
        security_group_ids,
        user_data: input.user_data.into(),
        block_device_mappings: block_devices(input.node_class)?,
        metadata_options: metadata_options(spec)?,
        tags: template_tags(input.cluster_name, input.node_pool, input.node_class),
        capacity_reservation_id: input.reservation.map(|r| r.id.clone()),
        market_type: input
            .reservation
            .filter(|r| r.reservation_type == ReservationType::CapacityBlock)
            .map(|_| "capacity-block".to_string()),
        associate_public_ip_address: spec
            .get("associatePublicIPAddress")
            .and_then(Value::as_bool),
    })
}

/// `flotilla/<hex FNV-1a of the canonical JSON>` (struct fields in
/// declaration order, maps sorted).
pub fn template_name(config: &LaunchTemplateConfig) -> String {
    let canonical = serde_json::to_string(config).unwrap_or_default();
    format!("{NAME_PREFIX}{:016x}", fnv1a64(canonical.as_bytes()))
}

/// Flotilla templates (by name prefix) that are not in use and were last
/// used at least `grace_seconds` ago, sorted.
pub fn unused_templates(
    existing: &[(String, u64)],
    in_use: &BTreeSet<String>,
    now: u64,
    grace_seconds: u64,
) -> Vec<String> {
    existing
        .iter()
        .filter(|(name, last_used)| {
            name.starts_with(NAME_PREFIX)
                && !in_use.contains(name)
                && now.saturating_sub(*last_used) >= grace_seconds
        })
        .map(|(name, _)| name.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_class(spec: Value) -> NodeClass {
        NodeClass {
            name: "default".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: None,
            template_hash: None,
            status: Default::default(),
            spec,
        }
    }

    fn config(nc: &NodeClass, user_data: &str, sgs: &[String]) -> LaunchTemplateConfig {
        launch_template_config(&LaunchTemplateInput {
            cluster_name: "prod",
            node_pool: "general",
            node_class: nc,
            ami_id: "ami-1",
            instance_profile: "KarpenterNodeProfile",
            security_group_ids: sgs,
            user_data,
            reservation: None,
        })
        .unwrap()
    }

    #[test]
    fn names_are_content_addressed() {
        let nc = node_class(json!({}));
        let sgs = vec!["sg-b".to_string(), "sg-a".to_string()];
        let a = config(&nc, "ud", &sgs);
        let name = template_name(&a);
        assert!(
            name.starts_with("flotilla/") && name.len() == "flotilla/".len() + 16,
            "{name}"
        );
        // Same configuration (security groups in another order) → same name.
        let reordered = vec!["sg-a".to_string(), "sg-b".to_string(), "sg-a".to_string()];
        assert_eq!(template_name(&config(&nc, "ud", &reordered)), name);
        assert_eq!(a.security_group_ids, ["sg-a", "sg-b"]);
        // Any change → new name.
        assert_ne!(template_name(&config(&nc, "ud2", &sgs)), name);
        let imds = node_class(json!({"metadataOptions": {"httpPutResponseHopLimit": 2}}));
        assert_ne!(template_name(&config(&imds, "ud", &sgs)), name);
    }

    #[test]
    fn imdsv2_and_one_hop_by_default_overridable() {
        let a = config(&node_class(json!({})), "", &[]);
        assert_eq!(a.metadata_options.http_tokens, "required");
        assert_eq!(a.metadata_options.http_put_response_hop_limit, 1);
        assert_eq!(a.metadata_options.http_endpoint, "enabled");
        let nc = node_class(
            json!({"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 2, "httpProtocolIPv6": "enabled"}}),
        );
        let b = config(&nc, "", &[]);
        assert_eq!(b.metadata_options.http_tokens, "optional");
        assert_eq!(b.metadata_options.http_put_response_hop_limit, 2);
        assert_eq!(b.metadata_options.http_protocol_ipv6, "enabled");
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["MetadataOptions"]["HttpTokens"], "required");
        assert_eq!(json["MetadataOptions"]["HttpPutResponseHopLimit"], 1);

        for bad in [
            json!({"httpTokens": "maybe"}),
            json!({"httpPutResponseHopLimit": 0}),
            json!({"httpPutResponseHopLimit": "2"}),
        ] {
            let nc = node_class(json!({ "metadataOptions": bad }));
            let r = launch_template_config(&LaunchTemplateInput {
                cluster_name: "prod",
                node_pool: "general",
                node_class: &nc,
                ami_id: "ami-1",
                instance_profile: "p",
                security_group_ids: &[],
                user_data: "",
                reservation: None,
            });
            assert!(
                matches!(r, Err(LaunchError::InvalidNodeClass { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn tags_and_nodeclaim_tag() {
        let nc = node_class(json!({"tags": {"team": "a", "karpenter.sh/nodepool": "spoofed"}}));
        let a = config(&nc, "", &[]);
        assert_eq!(a.tags[TAG_NODEPOOL], "general");
        assert_eq!(a.tags[TAG_NODECLASS], "default");
        assert_eq!(a.tags["kubernetes.io/cluster/prod"], "owned");
        assert_eq!(a.tags[TAG_EKS_CLUSTER_NAME], "prod");
        assert_eq!(a.tags["team"], "a");
        assert!(!a.tags.contains_key(TAG_NODECLAIM));
        let t = instance_tags("prod", "general", &nc, "general-1");
        assert_eq!(t[TAG_NODECLAIM], "general-1");
        assert_eq!(t[TAG_NODEPOOL], "general");
    }

    #[test]
    fn block_devices_default_and_from_spec() {
        let a = config(&node_class(json!({})), "", &[]);
        assert_eq!(a.block_device_mappings.len(), 1);
        assert_eq!(a.block_device_mappings[0].ebs.volume_size, 20);
        let mut br = node_class(json!({}));
        br.ami_family = AmiFamily::Bottlerocket;
        assert_eq!(config(&br, "", &[]).block_device_mappings.len(), 2);
        let nc = node_class(
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 3000, "encrypted": false, "kmsKeyID": "k"}}]}),
        );
        let b = config(&nc, "", &[]);
        let e = &b.block_device_mappings[0].ebs;
        assert_eq!(
            (e.volume_size, e.volume_type.as_str(), e.iops, e.encrypted),
            (100, "io2", Some(3000), false)
        );
        assert_eq!(e.kms_key_id.as_deref(), Some("k"));
    }

    #[test]
    fn reservations_target_the_template() {
        let nc = node_class(json!({}));
        let r = ReservationRef {
            id: "cr-1".into(),
            reservation_type: ReservationType::CapacityBlock,
        };
        let c = launch_template_config(&LaunchTemplateInput {
            cluster_name: "prod",
            node_pool: "general",
            node_class: &nc,
            ami_id: "ami-1",
            instance_profile: "p",
            security_group_ids: &[],
            user_data: "",
            reservation: Some(&r),
        })
        .unwrap();
        assert_eq!(c.capacity_reservation_id.as_deref(), Some("cr-1"));
        assert_eq!(c.market_type.as_deref(), Some("capacity-block"));
        assert_ne!(template_name(&c), template_name(&config(&nc, "", &[])));
    }

    #[test]
    fn gc_keeps_in_use_recent_and_foreign_templates() {
        let existing = vec![
            ("flotilla/old-unused".to_string(), 1_000),
            ("flotilla/in-use".to_string(), 1_000),
            ("flotilla/recent".to_string(), 9_500),
            ("someone-else/old".to_string(), 0),
            ("flotilla/a-old".to_string(), 0),
        ];
        let in_use = BTreeSet::from(["flotilla/in-use".to_string()]);
        assert_eq!(
            unused_templates(&existing, &in_use, 10_000, 3_600),
            ["flotilla/a-old", "flotilla/old-unused"]
        );
        assert!(unused_templates(&existing, &in_use, 10_000, 100_000).is_empty());
    }
}
