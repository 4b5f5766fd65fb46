//! The EC2NodeClass as the launch stage reads it: the typed, validated
//! `spec` ([`Ec2NodeClassSpec`], from [`NodeClass::spec`]), the EC2 queries
//! its selector terms stand for, and the resolution of their answers into
//! subnets, security groups and one AMI per architecture
//! ([`ResolvedNodeClass`]).
//!
//! Parsing follows Karpenter's v1 CRD (and the v1beta1 fields Karpenter
//! still reads): unknown fields are errors (`deny_unknown_fields`, as the
//! CRD's structural schema prunes nothing silently for typos we could
//! catch), every error names the EC2NodeClass and the field path
//! (`spec.subnetSelectorTerms[0].id`), and the CRD's validation rules hold:
//! each selector term is non-empty, `id` (and for security groups `name`,
//! for AMIs `alias`) is exclusive with the other fields of its term, an
//! `alias` term is the only AMI term, exactly one of `role` /
//! `instanceProfile`, no tag keys Karpenter reserves, IMDS options within
//! their enums.
//!
//! An AWSNodeTemplate (v1alpha1) is converted: `subnetSelector` /
//! `securityGroupSelector` / `amiSelector` maps become terms (`aws-ids` /
//! `aws::ids` one `id` term each, `aws::name` + `aws::owners` AMI name
//! terms, other keys one tag term), AL2 is the default family and
//! `launchTemplate` is refused. Without `instanceProfile` the spec names
//! neither a role nor a profile and is marked
//! [`default_instance_profile`](Ec2NodeClassSpec::default_instance_profile):
//! the launch stage uses the deployment's node instance profile, as
//! Karpenter's `aws.defaultInstanceProfile` setting did for v1alpha5.
//!
//! Queries: each selector term is one EC2 query (its filters are AND'ed),
//! the results of all terms are unioned. AMI aliases (`al2023@latest`,
//! `bottlerocket@v1.26.2`) become `DescribeImages` **name patterns** of the
//! EKS-optimized AMIs owned by `amazon`, not the SSM parameters Karpenter
//! reads: the `Ec2` port has no SSM call, and the public AMI names carry the
//! same family, Kubernetes version, architecture and release.
//! `latest` matches every release and [`resolve`] keeps the newest.
//!
//! Aliases also match the accelerated variants (NVIDIA, Neuron), as
//! Karpenter's alias resolution does: each resolved AMI has an
//! [`AmiVariant`], and an instance type goes to the AMI of its architecture
//! whose variant serves it (NVIDIA GPU types to the `nvidia` AMI, Neuron
//! types to the `neuron` one, every other type to `standard`; AMIs chosen by
//! id, name or tags serve every type of their architecture).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fleet;
use super::LaunchError;
use crate::catalog::InstanceTypeInfo;
use crate::ec2::{Filter, Image, SecurityGroup, Subnet};
use crate::labels;
use crate::model::{AmiFamily, NodeClass, NodeClassAmi, NodeClassStatus};
use crate::quantity::Quantity;
use crate::requirements::{Requirement, Requirements};

/// Tag keys Karpenter sets itself; an EC2NodeClass may not set them.
pub const RESERVED_TAG_KEYS: &[&str] = &[
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
    "eks:eks-cluster-name",
];

/// Owner of the EKS-optimized AMIs.
pub const AMAZON_OWNER: &str = "amazon";

/// Karpenter's `maxItems` for every selector-term list.
const MAX_TERMS: usize = 30;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiSelectorTerm {
    /// `<family>@<version>`: `al2023@latest`, `bottlerocket@v1.26.2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Karpenter ≥ 1.3; rejected (no SSM access), kept so the error says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptionsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMappingSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDeviceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_initialization_rate: Option<i64>,
    /// A quantity (`100Gi`) or a number of GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
}

/// `EC2NodeClass.spec` (karpenter.k8s.aws/v1, plus the v1beta1 fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ec2NodeClassSpec {
    /// The EC2NodeClass's name (not part of the spec document).
    #[serde(skip)]
    pub name: String,
    #[serde(default)]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    #[serde(default)]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    #[serde(default)]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_mappings: Vec<BlockDeviceMappingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptionsSpec>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The v1 kubelet configuration, as written (the input layer turns it
    /// into a [`KubeletConfig`](crate::model::KubeletConfig)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Value>,
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// An AWSNodeTemplate without `instanceProfile`: neither `role` nor
    /// `instanceProfile` is set, and the launch stage uses the default
    /// instance profile of the deployment (v1alpha5's
    /// `aws.defaultInstanceProfile`). Never set for an EC2NodeClass.
    #[serde(skip)]
    pub default_instance_profile: bool,
}

/// An AMI alias, `<family>@<version>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmiAlias {
    pub family: AmiFamily,
    /// `latest` or a release (`v20251101`, `v1.26.2`; a missing `v` is added).
    pub version: String,
}

/// One `DescribeImages` call: filters AND'ed, `owners` empty = any owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageQuery {
    pub filters: Vec<Filter>,
    pub owners: Vec<String>,
}

fn field_err(node_class: &str, field: impl Into<String>, reason: impl Into<String>) -> LaunchError {
    LaunchError::NodeClassField {
        node_class: node_class.to_string(),
        field: field.into(),
        reason: reason.into(),
    }
}

fn family_name(f: &AmiFamily) -> &'static str {
    match f {
        AmiFamily::AL2023 => "AL2023",
        AmiFamily::AL2 => "AL2",
        AmiFamily::Bottlerocket => "Bottlerocket",
        AmiFamily::Windows2019 => "Windows2019",
        AmiFamily::Windows2022 => "Windows2022",
        AmiFamily::Custom => "Custom",
    }
}

/// `amiFamily` values Karpenter accepts (Ubuntu, dropped in v1, reads as
/// Custom like the input layer does).
fn parse_family(s: &str) -> Option<AmiFamily> {
    Some(match s {
        "AL2023" => AmiFamily::AL2023,
        "AL2" => AmiFamily::AL2,
        "Bottlerocket" => AmiFamily::Bottlerocket,
        "Windows2019" => AmiFamily::Windows2019,
        "Windows2022" => AmiFamily::Windows2022,
        "Custom" | "Ubuntu" => AmiFamily::Custom,
        _ => return None,
    })
}

fn is_release(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 40
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
}

/// Parses an alias as Karpenter does (`^[a-zA-Z0-9]+@.+$`, at most 30
/// characters, a known family, Windows only `@latest`). The version may not
/// contain pattern characters (`*`, `?`, `,`), so it cannot widen the query.
pub fn parse_alias(alias: &str) -> Result<AmiAlias, String> {
    if alias.len() > 30 {
        return Err(format!("alias {alias:?} is longer than 30 characters"));
    }
    let Some((fam, ver)) = alias.split_once('@') else {
        return Err(format!(
            "alias {alias:?} is not <family>@<version> (e.g. al2023@latest)"
        ));
    };
    let family = match fam.to_ascii_lowercase().as_str() {
        "al2023" => AmiFamily::AL2023,
        "al2" => AmiFamily::AL2,
        "bottlerocket" => AmiFamily::Bottlerocket,
        "windows2019" => AmiFamily::Windows2019,
        "windows2022" => AmiFamily::Windows2022,
        _ => {
            return Err(format!(
                "unknown alias family {fam:?} (expected al2023, al2, bottlerocket, windows2019 or windows2022)"
            ))
        }
    };
    if !is_release(ver) {
        return Err(format!(
            "alias version {ver:?} must be `latest` or a release like v20251101 / v1.26.2"
        ));
    }
    let windows = matches!(family, AmiFamily::Windows2019 | AmiFamily::Windows2022);
    if windows && ver != "latest" {
        return Err(format!(
            "Windows aliases only support `latest`, got {ver:?}"
        ));
    }
    let version = if ver == "latest" || ver.starts_with('v') {
        ver.to_string()
    } else {
        format!("v{ver}")
    };
    Ok(AmiAlias { family, version })
}

fn check_tags(nc: &str, field: &str, tags: &BTreeMap<String, String>) -> Result<(), LaunchError> {
    for (k, v) in tags {
        if k.is_empty() {
            return Err(field_err(nc, field, "empty tag keys aren't supported"));
        }
        if v.is_empty() {
            return Err(field_err(
                nc,
                format!("{field}.{k}"),
                "empty tag values aren't supported",
            ));
        }
    }
    Ok(())
}

fn check_id(nc: &str, field: &str, id: &str, prefix: &str) -> Result<(), LaunchError> {
    let ok = id.strip_prefix(prefix).is_some_and(|r| {
        !r.is_empty()
            && r.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    });
    if ok {
        Ok(())
    } else {
        Err(field_err(
            nc,
            field,
            format!("{id:?} does not match {prefix}[0-9a-z]+"),
        ))
    }
}

fn check_len(nc: &str, field: &str, n: usize, required: bool) -> Result<(), LaunchError> {
    if required && n == 0 {
        return Err(field_err(nc, field, "required: at least one term"));
    }
    if n > MAX_TERMS {
        return Err(field_err(
            nc,
            field,
            format!("at most {MAX_TERMS} terms, got {n}"),
        ));
    }
    Ok(())
}

fn check_enum(
    nc: &str,
    field: &str,
    v: Option<&String>,
    allowed: &[&str],
) -> Result<(), LaunchError> {
    match v {
        Some(v) if !allowed.contains(&v.as_str()) => Err(field_err(
            nc,
            field,
            format!("{v:?} is not one of {allowed:?}"),
        )),
        _ => Ok(()),
    }
}

/// Whether a tag key is one Karpenter (and so Flotilla) sets itself.
pub fn is_reserved_tag_key(key: &str) -> bool {
    RESERVED_TAG_KEYS.contains(&key)
        || key
            .strip_prefix("kubernetes.io/cluster/")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// `AWSNodeTemplate.spec` (karpenter.k8s.aws/v1alpha1), converted to an
/// [`Ec2NodeClassSpec`] by [`parse_node_class`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AwsNodeTemplateSpec {
    #[serde(default)]
    subnet_selector: BTreeMap<String, String>,
    #[serde(default)]
    security_group_selector: BTreeMap<String, String>,
    #[serde(default)]
    ami_selector: BTreeMap<String, String>,
    #[serde(default)]
    ami_family: Option<String>,
    #[serde(default)]
    instance_profile: Option<String>,
    #[serde(default)]
    user_data: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    #[serde(default)]
    metadata_options: Option<MetadataOptionsSpec>,
    #[serde(default)]
    block_device_mappings: Vec<BlockDeviceMappingSpec>,
    #[serde(default)]
    detailed_monitoring: Option<bool>,
    #[serde(default)]
    context: Option<String>,
    /// Unsupported (a user-managed launch template); kept for the error.
    #[serde(default)]
    launch_template: Option<Value>,
}

fn deserialize<T: serde::de::DeserializeOwned>(name: &str, doc: &Value) -> Result<T, LaunchError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let field = if path.is_empty() || path == "." {
            "spec".to_string()
        } else {
            format!("spec.{path}")
        };
        field_err(name, field, e.into_inner().to_string())
    })
}

/// The ids of a v1alpha1 selector (`aws-ids` / `aws::ids`, comma-separated)
/// and its remaining keys (tags).
fn split_ids(
    nc: &str,
    field: &str,
    selector: &BTreeMap<String, String>,
) -> Result<(Vec<String>, BTreeMap<String, String>), LaunchError> {
    let mut ids = Vec::new();
    let mut tags = BTreeMap::new();
    for (k, v) in selector {
        match k.as_str() {
            "aws-ids" | "aws::ids" => ids.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            ),
            _ => {
                tags.insert(k.clone(), v.clone());
            }
        }
    }
    if !ids.is_empty() && !tags.is_empty() {
        return Err(field_err(nc, field, "aws-ids cannot be combined with tags"));
    }
    Ok((ids, tags))
}

impl AwsNodeTemplateSpec {
    /// The EC2NodeClass equivalent: selectors become one term per id or one
    /// tag term; `aws::name` / `aws::owners` become AMI name terms (one per
    /// owner); the AMI family defaults to AL2 (v1alpha1's default).
    fn convert(self, nc: &str) -> Result<Ec2NodeClassSpec, LaunchError> {
        if self.launch_template.is_some() {
            return Err(field_err(
                nc,
                "spec.launchTemplate",
                "user-managed launch templates are not supported",
            ));
        }
        let default_instance_profile = self.instance_profile.is_none();
        let (ids, tags) = split_ids(nc, "spec.subnetSelector", &self.subnet_selector)?;
        let subnet_selector_terms = if ids.is_empty() {
            vec![SubnetSelectorTerm { tags, id: None }]
        } else {
            ids.into_iter()
                .map(|id| SubnetSelectorTerm {
                    tags: BTreeMap::new(),
                    id: Some(id),
                })
                .collect()
        };
        let (ids, tags) = split_ids(
            nc,
            "spec.securityGroupSelector",
            &self.security_group_selector,
        )?;
        let security_group_selector_terms = if ids.is_empty() {
            vec![SecurityGroupSelectorTerm {
                tags,
                ..Default::default()
            }]
        } else {
            ids.into_iter()
                .map(|id| SecurityGroupSelectorTerm {
                    id: Some(id),
                    ..Default::default()
                })
                .collect()
        };
        let mut ami = self.ami_selector;
        let name = ami.remove("aws::name");
        let owners: Vec<String> = ami
            .remove("aws::owners")
            .map(|o| {
                o.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (ids, tags) = split_ids(nc, "spec.amiSelector", &ami)?;
        let ami_selector_terms: Vec<AmiSelectorTerm> = if !ids.is_empty() {
            ids.into_iter()
                .map(|id| AmiSelectorTerm {
                    id: Some(id),
                    ..Default::default()
                })
                .collect()
        } else if name.is_none() && tags.is_empty() {
            vec![]
        } else if owners.is_empty() {
            vec![AmiSelectorTerm {
                name,
                tags,
                ..Default::default()
            }]
        } else {
            owners
                .into_iter()
                .map(|o| AmiSelectorTerm {
                    name: name.clone(),
                    tags: tags.clone(),
                    owner: Some(o),
                    ..Default::default()
                })
                .collect()
        };
        Ok(Ec2NodeClassSpec {
            name: nc.to_string(),
            subnet_selector_terms,
            security_group_selector_terms,
            ami_selector_terms,
            ami_family: Some(self.ami_family.unwrap_or_else(|| "AL2".into())),
            instance_profile: self.instance_profile,
            default_instance_profile,
            user_data: self.user_data,
            tags: self.tags,
            metadata_options: self.metadata_options,
            block_device_mappings: self.block_device_mappings,
            detailed_monitoring: self.detailed_monitoring,
            context: self.context,
            ..Default::default()
        })
    }
}

/// Parses and validates `nc.spec` as an EC2NodeClass spec (an
/// AWSNodeTemplate's v1alpha1 spec is converted first).
pub fn parse_node_class(nc: &NodeClass) -> Result<Ec2NodeClassSpec, LaunchError> {
    let name = nc.name.as_str();
    let empty = Value::Object(Default::default());
    let doc = if nc.spec.is_null() { &empty } else { &nc.spec };
    let mut spec = if nc.kind == "AWSNodeTemplate" {
        deserialize::<AwsNodeTemplateSpec>(name, doc)?.convert(name)?
    } else {
        deserialize::<Ec2NodeClassSpec>(name, doc)?
    };
    spec.name = name.to_string();
    spec.validate()?;
    Ok(spec)
}

impl Ec2NodeClassSpec {
    /// Karpenter's CRD rules (see the module documentation).
    pub fn validate(&self) -> Result<(), LaunchError> {
        let nc = self.name.as_str();

        check_len(
            nc,
            "spec.subnetSelectorTerms",
            self.subnet_selector_terms.len(),
            true,
        )?;
        for (i, t) in self.subnet_selector_terms.iter().enumerate() {
            let f = format!("spec.subnetSelectorTerms[{i}]");
            if t.tags.is_empty() && t.id.is_none() {
                return Err(field_err(nc, f, "expected at least one of tags, id"));
            }
            if let Some(id) = &t.id {
                if !t.tags.is_empty() {
                    return Err(field_err(nc, f, "'id' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                check_id(nc, &format!("{f}.id"), id, "subnet-")?;
            }
            check_tags(nc, &format!("{f}.tags"), &t.tags)?;
        }

        check_len(
            nc,
            "spec.securityGroupSelectorTerms",
            self.security_group_selector_terms.len(),
            true,
        )?;
        for (i, t) in self.security_group_selector_terms.iter().enumerate() {
            let f = format!("spec.securityGroupSelectorTerms[{i}]");
            let set = usize::from(!t.tags.is_empty())
                + usize::from(t.id.is_some())
                + usize::from(t.name.is_some());
            if set == 0 {
                return Err(field_err(nc, f, "expected at least one of tags, id, name"));
            }
            if let Some(id) = &t.id {
                if set > 1 {
                    return Err(field_err(nc, f, "'id' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                check_id(nc, &format!("{f}.id"), id, "sg-")?;
            }
            if let Some(n) = &t.name {
                if set > 1 {
                    return Err(field_err(nc, f, "'name' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                if n.is_empty() {
                    return Err(field_err(nc, format!("{f}.name"), "must not be empty"));
                }
            }
            check_tags(nc, &format!("{f}.tags"), &t.tags)?;
        }

        check_len(
            nc,
            "spec.capacityReservationSelectorTerms",
            self.capacity_reservation_selector_terms.len(),
            false,
        )?;
        for (i, t) in self.capacity_reservation_selector_terms.iter().enumerate() {
            let f = format!("spec.capacityReservationSelectorTerms[{i}]");
            if t.tags.is_empty() && t.id.is_none() {
                return Err(field_err(nc, f, "expected at least one of tags, id"));
            }
            if let Some(id) = &t.id {
                if !t.tags.is_empty() || t.owner_id.is_some() {
                    return Err(field_err(nc, f, "'id' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                check_id(nc, &format!("{f}.id"), id, "cr-")?;
            }
            if let Some(o) = &t.owner_id {
                if o.len() != 12 || !o.chars().all(|c| c.is_ascii_digit()) {
                    return Err(field_err(
                        nc,
                        format!("{f}.ownerID"),
                        format!("{o:?} is not a 12-digit AWS account id"),
                    ));
                }
            }
            check_tags(nc, &format!("{f}.tags"), &t.tags)?;
        }

        let family = match &self.ami_family {
            None => None,
            Some(f) => Some(parse_family(f).ok_or_else(|| {
                field_err(
                    nc,
                    "spec.amiFamily",
                    format!("unknown amiFamily {f:?} (expected AL2023, AL2, Bottlerocket, Windows2019, Windows2022 or Custom)"),
                )
            })?),
        };
        check_len(
            nc,
            "spec.amiSelectorTerms",
            self.ami_selector_terms.len(),
            false,
        )?;
        if self.ami_selector_terms.is_empty() {
            match family {
                None => {
                    return Err(field_err(
                        nc,
                        "spec.amiSelectorTerms",
                        "required: at least one term (or an amiFamily)",
                    ))
                }
                Some(AmiFamily::Custom) => {
                    return Err(field_err(
                        nc,
                        "spec.amiSelectorTerms",
                        "required when amiFamily is Custom",
                    ))
                }
                Some(_) => {}
            }
        }
        let has_alias = self.ami_selector_terms.iter().any(|t| t.alias.is_some());
        if has_alias && self.ami_selector_terms.len() > 1 {
            return Err(field_err(
                nc,
                "spec.amiSelectorTerms",
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            ));
        }
        if !has_alias && !self.ami_selector_terms.is_empty() && family.is_none() {
            return Err(field_err(
                nc,
                "spec.amiFamily",
                "required when amiSelectorTerms has no alias",
            ));
        }
        for (i, t) in self.ami_selector_terms.iter().enumerate() {
            let f = format!("spec.amiSelectorTerms[{i}]");
            if t.ssm_parameter.is_some() {
                return Err(field_err(
                    nc,
                    format!("{f}.ssmParameter"),
                    "not supported (Flotilla reads no SSM parameters); use an alias, id, name or tags",
                ));
            }
            let others = usize::from(!t.tags.is_empty())
                + usize::from(t.name.is_some())
                + usize::from(t.owner.is_some());
            if t.alias.is_none() && t.id.is_none() && t.tags.is_empty() && t.name.is_none() {
                return Err(field_err(
                    nc,
                    f,
                    "expected at least one of alias, tags, id, name",
                ));
            }
            if let Some(a) = &t.alias {
                if others > 0 || t.id.is_some() {
                    return Err(field_err(nc, f, "'alias' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                let alias = parse_alias(a).map_err(|r| field_err(nc, format!("{f}.alias"), r))?;
                if let Some(fam) = &family {
                    if *fam != alias.family {
                        return Err(field_err(
                            nc,
                            format!("{f}.alias"),
                            format!("alias {a:?} conflicts with amiFamily {}", family_name(fam)),
                        ));
                    }
                }
            }
            if let Some(id) = &t.id {
                if others > 0 {
                    return Err(field_err(nc, f, "'id' is mutually exclusive, cannot be set with a combination of other fields"));
                }
                check_id(nc, &format!("{f}.id"), id, "ami-")?;
            }
            if t.owner.as_deref() == Some("") {
                return Err(field_err(nc, format!("{f}.owner"), "must not be empty"));
            }
            if t.name.as_deref() == Some("") {
                return Err(field_err(nc, format!("{f}.name"), "must not be empty"));
            }
            check_tags(nc, &format!("{f}.tags"), &t.tags)?;
        }

        match (&self.role, &self.instance_profile) {
            (None, None) if self.default_instance_profile => {}
            (Some(r), None) if !r.is_empty() => {}
            (None, Some(p)) if !p.is_empty() => {}
            (Some(_), Some(_)) | (None, None) => {
                return Err(field_err(
                    nc,
                    "spec",
                    "must specify exactly one of ['role', 'instanceProfile']",
                ))
            }
            (Some(_), None) => return Err(field_err(nc, "spec.role", "must not be empty")),
            (None, Some(_)) => {
                return Err(field_err(nc, "spec.instanceProfile", "must not be empty"))
            }
        }

        for k in self.tags.keys() {
            if k.is_empty() {
                return Err(field_err(
                    nc,
                    "spec.tags",
                    "empty tag keys aren't supported",
                ));
            }
            if is_reserved_tag_key(k) {
                return Err(field_err(
                    nc,
                    format!("spec.tags.{k}"),
                    format!("tag key {k:?} is reserved by Karpenter"),
                ));
            }
        }

        if let Some(m) = &self.metadata_options {
            let f = "spec.metadataOptions";
            check_enum(
                nc,
                &format!("{f}.httpEndpoint"),
                m.http_endpoint.as_ref(),
                &["enabled", "disabled"],
            )?;
            check_enum(
                nc,
                &format!("{f}.httpProtocolIPv6"),
                m.http_protocol_ipv6.as_ref(),
                &["enabled", "disabled"],
            )?;
            check_enum(
                nc,
                &format!("{f}.httpTokens"),
                m.http_tokens.as_ref(),
                &["required", "optional"],
            )?;
            if let Some(h) = m.http_put_response_hop_limit {
                if !(1..=64).contains(&h) {
                    return Err(field_err(
                        nc,
                        format!("{f}.httpPutResponseHopLimit"),
                        format!("{h} is not within 1..64"),
                    ));
                }
            }
        }

        if self.block_device_mappings.len() > 50 {
            return Err(field_err(
                nc,
                "spec.blockDeviceMappings",
                "at most 50 mappings",
            ));
        }
        if self
            .block_device_mappings
            .iter()
            .filter(|b| b.root_volume == Some(true))
            .count()
            > 1
        {
            return Err(field_err(
                nc,
                "spec.blockDeviceMappings",
                "must have only one blockDeviceMappings with rootVolume",
            ));
        }
        for (i, b) in self.block_device_mappings.iter().enumerate() {
            let f = format!("spec.blockDeviceMappings[{i}]");
            if b.device_name.as_deref().is_none_or(str::is_empty) {
                return Err(field_err(nc, format!("{f}.deviceName"), "required"));
            }
            let Some(e) = &b.ebs else { continue };
            check_enum(
                nc,
                &format!("{f}.ebs.volumeType"),
                e.volume_type.as_ref(),
                &["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"],
            )?;
            match &e.volume_size {
                None => {}
                Some(Value::String(s)) => {
                    let q = Quantity::parse(s).map_err(|err| {
                        field_err(nc, format!("{f}.ebs.volumeSize"), err.to_string())
                    })?;
                    if q.millis() <= 0 {
                        return Err(field_err(
                            nc,
                            format!("{f}.ebs.volumeSize"),
                            "must be positive",
                        ));
                    }
                }
                Some(Value::Number(n)) if n.as_u64().is_some_and(|g| g > 0) => {}
                Some(v) => {
                    return Err(field_err(
                        nc,
                        format!("{f}.ebs.volumeSize"),
                        format!("{v} is not a positive quantity"),
                    ))
                }
            }
        }
        check_enum(
            nc,
            "spec.instanceStorePolicy",
            self.instance_store_policy.as_ref(),
            &["RAID0"],
        )?;
        Ok(())
    }

    /// The AMI family: the alias's, else `amiFamily`, else AL2023.
    pub fn family(&self) -> AmiFamily {
        self.alias()
            .map(|a| a.family)
            .or_else(|| self.ami_family.as_deref().and_then(parse_family))
            .unwrap_or(AmiFamily::AL2023)
    }

    /// The alias term's alias; for a v1beta1 class with an `amiFamily` and
    /// no `amiSelectorTerms`, that family's `@latest` (Karpenter's default
    /// AMIs of the family).
    pub fn alias(&self) -> Option<AmiAlias> {
        if self.ami_selector_terms.is_empty() {
            let family = self.ami_family.as_deref().and_then(parse_family)?;
            return (family != AmiFamily::Custom).then_some(AmiAlias {
                family,
                version: "latest".into(),
            });
        }
        self.ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .and_then(|a| parse_alias(a).ok())
    }

    /// One `DescribeSubnets` filter set per term.
    pub fn subnet_queries(&self) -> Vec<Vec<Filter>> {
        self.subnet_selector_terms
            .iter()
            .map(|t| match &t.id {
                Some(id) => vec![Filter::new("subnet-id", [id])],
                None => tag_filters(&t.tags),
            })
            .collect()
    }

    /// One `DescribeSecurityGroups` filter set per term.
    pub fn security_group_queries(&self) -> Vec<Vec<Filter>> {
        self.security_group_selector_terms
            .iter()
            .map(|t| {
                if let Some(id) = &t.id {
                    vec![Filter::new("group-id", [id])]
                } else if let Some(n) = &t.name {
                    vec![Filter::new("group-name", [n])]
                } else {
                    tag_filters(&t.tags)
                }
            })
            .collect()
    }

    /// One `DescribeCapacityReservations` filter set per term, each limited
    /// to `state=active`.
    pub fn capacity_reservation_queries(&self) -> Vec<Vec<Filter>> {
        self.capacity_reservation_selector_terms
            .iter()
            .map(|t| {
                let mut f = match &t.id {
                    Some(id) => vec![Filter::new("capacity-reservation-id", [id])],
                    None => tag_filters(&t.tags),
                };
                if let Some(o) = &t.owner_id {
                    f.push(Filter::new("owner-id", [o]));
                }
                f.push(Filter::new("state", ["active"]));
                f
            })
            .collect()
    }

    /// One `DescribeImages` query per AMI term for Kubernetes
    /// `k8s_version` (`1.31`; used by aliases only).
    ///
    /// Aliases match the EKS-optimized AMI names, owner `amazon`
    /// (`latest` → every release, [`resolve`] keeps the newest):
    ///
    /// | alias | name patterns (`{v}` = release or `v*`) |
    /// |---|---|
    /// | `al2023@…` | `amazon-eks-node-al2023-{x86_64,arm64}-{standard,nvidia}-{k8s}-{v}`, `amazon-eks-node-al2023-x86_64-neuron-{k8s}-{v}` |
    /// | `al2@…` | `amazon-eks-node-{k8s}-{v}`, `amazon-eks-arm64-node-{k8s}-{v}`, `amazon-eks-gpu-node-{k8s}-{v}` |
    /// | `bottlerocket@…` | `bottlerocket-aws-k8s-{k8s}-{,nvidia-}{x86_64,aarch64}-{v}-*` |
    /// | `windows2022@latest` | `Windows_Server-2022-English-Core-EKS_Optimized-{k8s}-*` |
    ///
    /// Other terms: `id` → `image-id`; `name` → `name` with owners
    /// `self, amazon` unless `owner` is set (Karpenter's default, so
    /// cross-account AMIs need an explicit owner); `tags` → `tag:<k>`
    /// (`*` → `tag-key`); `owner` → the owners.
    pub fn image_queries(&self, k8s_version: &str) -> Vec<ImageQuery> {
        if let Some(alias) = self.alias() {
            return vec![ImageQuery {
                filters: vec![Filter::new(
                    "name",
                    alias_name_patterns(&alias, k8s_version),
                )],
                owners: vec![AMAZON_OWNER.to_string()],
            }];
        }
        self.ami_selector_terms
            .iter()
            .map(|t| {
                if let Some(id) = &t.id {
                    return ImageQuery {
                        filters: vec![Filter::new("image-id", [id])],
                        owners: vec![],
                    };
                }
                let mut owners: Vec<String> = t.owner.iter().cloned().collect();
                let mut filters = Vec::new();
                if let Some(n) = &t.name {
                    if owners.is_empty() {
                        owners = vec!["self".into(), AMAZON_OWNER.into()];
                    }
                    filters.push(Filter::new("name", [n]));
                }
                filters.extend(tag_filters(&t.tags));
                ImageQuery { filters, owners }
            })
            .collect()
    }
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::new("tag-key", [k])
            } else {
                Filter::new(format!("tag:{k}"), [v])
            }
        })
        .collect()
}

/// DescribeImages name patterns of the EKS-optimized AMIs for an alias.
pub fn alias_name_patterns(alias: &AmiAlias, k8s_version: &str) -> Vec<String> {
    let k = k8s_version.trim();
    let v = if alias.version == "latest" {
        "v*".to_string()
    } else {
        alias.version.clone()
    };
    match alias.family {
        AmiFamily::AL2023 => vec![
            format!("amazon-eks-node-al2023-x86_64-standard-{k}-{v}"),
            format!("amazon-eks-node-al2023-arm64-standard-{k}-{v}"),
            format!("amazon-eks-node-al2023-x86_64-nvidia-{k}-{v}"),
            format!("amazon-eks-node-al2023-arm64-nvidia-{k}-{v}"),
            format!("amazon-eks-node-al2023-x86_64-neuron-{k}-{v}"),
        ],
        AmiFamily::AL2 => vec![
            format!("amazon-eks-node-{k}-{v}"),
            format!("amazon-eks-arm64-node-{k}-{v}"),
            format!("amazon-eks-gpu-node-{k}-{v}"),
        ],
        AmiFamily::Bottlerocket => vec![
            format!("bottlerocket-aws-k8s-{k}-x86_64-{v}-*"),
            format!("bottlerocket-aws-k8s-{k}-aarch64-{v}-*"),
            format!("bottlerocket-aws-k8s-{k}-nvidia-x86_64-{v}-*"),
            format!("bottlerocket-aws-k8s-{k}-nvidia-aarch64-{v}-*"),
        ],
        AmiFamily::Windows2019 => {
            vec![format!(
                "Windows_Server-2019-English-Core-EKS_Optimized-{k}-*"
            )]
        }
        AmiFamily::Windows2022 => {
            vec![format!(
                "Windows_Server-2022-English-Core-EKS_Optimized-{k}-*"
            )]
        }
        AmiFamily::Custom => vec![],
    }
}

/// EC2's architecture name → the `kubernetes.io/arch` value; `None` for
/// architectures Kubernetes nodes do not run (`i386`, `*_mac`).
pub fn kube_architecture(ec2_arch: &str) -> Option<&'static str> {
    match ec2_arch {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

/// Which instance types of its architecture an AMI serves.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AmiVariant {
    /// Chosen by id, name or tags: every type.
    #[default]
    Any,
    /// An alias's standard AMI: types without NVIDIA GPUs or Neuron devices.
    Standard,
    /// NVIDIA GPU types.
    Nvidia,
    /// AWS Inferentia / Trainium types.
    Neuron,
    /// AL2's `amazon-eks-gpu-node`: NVIDIA and Neuron types.
    Accelerated,
}

impl AmiVariant {
    /// The variant of an EKS-optimized AMI, from its name.
    pub fn of_alias_image(family: &AmiFamily, name: &str) -> Self {
        match family {
            AmiFamily::AL2 if name.starts_with("amazon-eks-gpu-node-") => AmiVariant::Accelerated,
            AmiFamily::AL2023 | AmiFamily::Bottlerocket if name.contains("-nvidia-") => {
                AmiVariant::Nvidia
            }
            AmiFamily::AL2023 if name.contains("-neuron-") => AmiVariant::Neuron,
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Custom => AmiVariant::Any,
            _ => AmiVariant::Standard,
        }
    }

    /// The variant an instance type needs (`Standard` for CPU types and
    /// GPUs of other vendors).
    pub fn needed_by(info: &InstanceTypeInfo) -> Self {
        if info
            .gpu
            .as_ref()
            .is_some_and(|g| g.count > 0 && g.manufacturer.eq_ignore_ascii_case("nvidia"))
        {
            AmiVariant::Nvidia
        } else if info.neuron_devices > 0 {
            AmiVariant::Neuron
        } else {
            AmiVariant::Standard
        }
    }

    /// Whether an AMI of this variant serves a type needing `need`.
    pub fn serves(self, need: AmiVariant) -> bool {
        match self {
            AmiVariant::Any => true,
            AmiVariant::Accelerated => matches!(need, AmiVariant::Nvidia | AmiVariant::Neuron),
            v => v == need,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AmiVariant::Any => "any",
            AmiVariant::Standard => "standard",
            AmiVariant::Nvidia => "nvidia",
            AmiVariant::Neuron => "neuron",
            AmiVariant::Accelerated => "accelerated",
        }
    }
}

/// An AMI chosen for one architecture (and variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    pub id: String,
    pub name: String,
    /// `amd64` / `arm64` (`kubernetes.io/arch`).
    pub architecture: String,
    pub creation_date: String,
    #[serde(default)]
    pub variant: AmiVariant,
}

impl ResolvedImage {
    /// The key offerings and AMIs are matched on in the fleet input:
    /// the architecture, plus `/<variant>` for accelerated variants.
    pub fn fleet_key(&self) -> String {
        match self.variant {
            AmiVariant::Any | AmiVariant::Standard => self.architecture.clone(),
            v => format!("{}/{}", self.architecture, v.as_str()),
        }
    }
}

/// An EC2NodeClass with its selector terms resolved against EC2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedNodeClass {
    pub name: String,
    pub spec: Ec2NodeClassSpec,
    /// Unique by id, sorted by id.
    pub subnets: Vec<Subnet>,
    /// Unique by id, sorted by id.
    pub security_groups: Vec<SecurityGroup>,
    /// The newest non-deprecated AMI per architecture and variant, newest
    /// first (ties: by id).
    pub images: Vec<ResolvedImage>,
}

impl ResolvedNodeClass {
    /// The newest AMI for a `kubernetes.io/arch` value, any variant.
    pub fn image_for(&self, architecture: &str) -> Option<&ResolvedImage> {
        self.images.iter().find(|i| i.architecture == architecture)
    }

    /// The AMI an instance type launches with: its architecture, a variant
    /// that serves it ([`AmiVariant::needed_by`]), newest first.
    pub fn image_for_type(&self, info: &InstanceTypeInfo) -> Option<&ResolvedImage> {
        let need = AmiVariant::needed_by(info);
        self.images
            .iter()
            .find(|i| i.architecture == info.architecture && i.variant.serves(need))
    }

    /// Architectures with an AMI, sorted.
    pub fn architectures(&self) -> Vec<String> {
        self.images
            .iter()
            .map(|i| i.architecture.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    pub fn security_group_ids(&self) -> Vec<String> {
        self.security_groups.iter().map(|s| s.id.clone()).collect()
    }

    /// The subnets in `zones`, as the fleet builder takes them.
    pub fn fleet_subnets(&self, zones: &[String]) -> Vec<fleet::Subnet> {
        self.subnets
            .iter()
            .filter(|s| zones.contains(&s.zone))
            .map(|s| fleet::Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                available_ips: s.available_ips,
            })
            .collect()
    }

    /// The node class's `status` as Karpenter reports it: its AMIs, each
    /// with the requirements of the instance types it serves (the
    /// architecture; NVIDIA GPU types for the `nvidia` variant, the other
    /// types for the `standard` one), its subnets and its security groups.
    pub fn status(&self) -> NodeClassStatus {
        let amis = self
            .images
            .iter()
            .map(|i| {
                let mut requirements = Requirements::new();
                requirements.add(Requirement::in_values(labels::ARCH, [&i.architecture]));
                let nvidia = [String::from("nvidia")];
                match i.variant {
                    AmiVariant::Nvidia => requirements.add(Requirement::in_values(
                        labels::INSTANCE_GPU_MANUFACTURER,
                        nvidia,
                    )),
                    AmiVariant::Standard => requirements.add(Requirement::not_in(
                        labels::INSTANCE_GPU_MANUFACTURER,
                        nvidia,
                    )),
                    AmiVariant::Any | AmiVariant::Neuron | AmiVariant::Accelerated => {}
                }
                NodeClassAmi {
                    id: i.id.clone(),
                    requirements,
                }
            })
            .collect();
        NodeClassStatus {
            amis,
            subnets: self.subnets.iter().map(|s| s.id.clone()).collect(),
            security_groups: self.security_group_ids(),
        }
    }

    /// The AMIs as the fleet builder takes them (keyed by
    /// [`ResolvedImage::fleet_key`]).
    pub fn fleet_amis(&self) -> Vec<fleet::Ami> {
        self.images
            .iter()
            .map(|i| fleet::Ami {
                id: i.id.clone(),
                architecture: i.fleet_key(),
            })
            .collect()
    }
}

/// Combines the answers to the queries of `spec` (all terms' results
/// together, in any order, duplicates allowed): subnets and security groups
/// deduplicated by id; images without the deprecated ones and those of
/// architectures nodes do not run, then the newest per architecture and
/// [`AmiVariant`] (Karpenter's `List`: a later creation date wins across all
/// terms, equal dates go to the lexically greater name). Errors name the
/// selector that matched nothing.
pub fn resolve(
    spec: &Ec2NodeClassSpec,
    subnets: Vec<Subnet>,
    security_groups: Vec<SecurityGroup>,
    images: Vec<Image>,
) -> Result<ResolvedNodeClass, LaunchError> {
    let unresolved = |reason: String| LaunchError::NodeClassUnresolved {
        node_class: spec.name.clone(),
        reason,
    };
    let subnets: Vec<Subnet> = subnets
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect();
    if subnets.is_empty() {
        return Err(unresolved(
            "no subnet matches spec.subnetSelectorTerms".into(),
        ));
    }
    let security_groups: Vec<SecurityGroup> = security_groups
        .into_iter()
        .map(|s| (s.id.clone(), s))
        .collect::<BTreeMap<_, _>>()
        .into_values()
        .collect();
    if security_groups.is_empty() {
        return Err(unresolved(
            "no security group matches spec.securityGroupSelectorTerms".into(),
        ));
    }

    let total = images.len();
    let mut deprecated = 0;
    let mut foreign_arch = BTreeSet::new();
    let alias_family = spec.alias().map(|a| a.family);
    let mut newest: BTreeMap<(&'static str, AmiVariant), Image> = BTreeMap::new();
    for img in images {
        if img.deprecated {
            deprecated += 1;
            continue;
        }
        let Some(arch) = kube_architecture(&img.architecture) else {
            foreign_arch.insert(img.architecture.clone());
            continue;
        };
        let variant = alias_family.as_ref().map_or(AmiVariant::Any, |f| {
            AmiVariant::of_alias_image(f, &img.name)
        });
        let replace = match newest.get(&(arch, variant)) {
            None => true,
            Some(cur) => {
                (img.creation_date.as_str(), img.name.as_str())
                    > (cur.creation_date.as_str(), cur.name.as_str())
            }
        };
        if replace {
            newest.insert((arch, variant), img);
        }
    }
    if newest.is_empty() {
        let mut why = format!("no usable AMI matches spec.amiSelectorTerms ({total} found");
        if deprecated > 0 {
            why.push_str(&format!(", {deprecated} deprecated"));
        }
        if !foreign_arch.is_empty() {
            why.push_str(&format!(", unsupported architectures {foreign_arch:?}"));
        }
        why.push(')');
        return Err(unresolved(why));
    }
    let mut images: Vec<ResolvedImage> = newest
        .into_iter()
        .map(|((arch, variant), i)| ResolvedImage {
            id: i.id,
            name: i.name,
            architecture: arch.to_string(),
            creation_date: i.creation_date,
            variant,
        })
        .collect();
    images.sort_by(|a, b| {
        b.creation_date
            .cmp(&a.creation_date)
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(ResolvedNodeClass {
        name: spec.name.clone(),
        spec: spec.clone(),
        subnets,
        security_groups,
        images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nc(spec: Value) -> NodeClass {
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

    fn base() -> Value {
        json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole-prod",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
        })
    }

    fn with(patch: Value) -> Value {
        let mut v = base();
        for (k, x) in patch.as_object().unwrap() {
            if x.is_null() {
                v.as_object_mut().unwrap().remove(k);
            } else {
                v[k] = x.clone();
            }
        }
        v
    }

    /// The error for `spec`, as (field, reason).
    fn err(spec: Value) -> (String, String) {
        match parse_node_class(&nc(spec)) {
            Err(LaunchError::NodeClassField {
                node_class,
                field,
                reason,
            }) => {
                assert_eq!(node_class, "default");
                (field, reason)
            }
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_full_v1_spec() {
        let s = parse_node_class(&nc(json!({
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"alias": "al2023@v20251101"}],
            "instanceProfile": "KarpenterNodeInstanceProfile",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod", "tier": "*"}}, {"id": "subnet-0abc"}],
            "securityGroupSelectorTerms": [{"name": "nodes"}, {"id": "sg-0123"}],
            "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}, "ownerID": "123456789012"}, {"id": "cr-0abc"}],
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "kmsKeyID": "k", "encrypted": true}}],
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"},
            "tags": {"team": "platform"},
            "userData": "#!/bin/bash\necho hi\n",
            "kubelet": {"maxPods": 110},
            "associatePublicIPAddress": false,
            "detailedMonitoring": true,
            "instanceStorePolicy": "RAID0"
        })))
        .unwrap();
        assert_eq!(s.name, "default");
        assert_eq!(s.family(), AmiFamily::AL2023);
        assert_eq!(
            s.instance_profile.as_deref(),
            Some("KarpenterNodeInstanceProfile")
        );
        assert_eq!(s.associate_public_ip_address, Some(false));
        assert_eq!(s.capacity_reservation_selector_terms.len(), 2);
        assert_eq!(
            s.metadata_options
                .as_ref()
                .unwrap()
                .http_protocol_ipv6
                .as_deref(),
            Some("disabled")
        );
        assert_eq!(
            s.block_device_mappings[0]
                .ebs
                .as_ref()
                .unwrap()
                .kms_key_id
                .as_deref(),
            Some("k")
        );
    }

    #[test]
    fn parse_errors_name_the_node_class_and_the_field() {
        let (f, r) = err(with(json!({"subnetSelectorTerms": [{"tagz": {"a": "b"}}]})));
        assert_eq!(f, "spec.subnetSelectorTerms[0].tagz");
        assert!(r.contains("unknown field `tagz`"), "{r}");
        let (f, r) = err(with(json!({"amiSelectorTerm": []})));
        assert_eq!(f, "spec.amiSelectorTerm");
        assert!(r.contains("unknown field"), "{r}");
        let (f, _) = err(with(
            json!({"metadataOptions": {"httpPutResponseHopLimit": "2"}}),
        ));
        assert_eq!(f, "spec.metadataOptions.httpPutResponseHopLimit");
        let (f, _) = err(with(
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSiz": "1Gi"}}]}),
        ));
        assert_eq!(f, "spec.blockDeviceMappings[0].ebs.volumeSiz");
        let e = parse_node_class(&nc(with(json!({"subnetSelectorTerms": []})))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "EC2NodeClass default at spec.subnetSelectorTerms: required: at least one term"
        );
    }

    #[test]
    fn selector_term_rules() {
        let cases = [
            (
                json!({"subnetSelectorTerms": [{}]}),
                "spec.subnetSelectorTerms[0]",
                "at least one",
            ),
            (
                json!({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}),
                "spec.subnetSelectorTerms[0]",
                "mutually exclusive",
            ),
            (
                json!({"subnetSelectorTerms": [{"id": "sg-1"}]}),
                "spec.subnetSelectorTerms[0].id",
                "subnet-",
            ),
            (
                json!({"subnetSelectorTerms": [{"tags": {"a": ""}}]}),
                "spec.subnetSelectorTerms[0].tags.a",
                "empty tag values",
            ),
            (
                json!({"securityGroupSelectorTerms": []}),
                "spec.securityGroupSelectorTerms",
                "required",
            ),
            (
                json!({"securityGroupSelectorTerms": [{"name": "n", "tags": {"a": "b"}}]}),
                "spec.securityGroupSelectorTerms[0]",
                "'name' is mutually exclusive",
            ),
            (
                json!({"securityGroupSelectorTerms": [{"id": "sg-1", "name": "n"}]}),
                "spec.securityGroupSelectorTerms[0]",
                "'id' is mutually exclusive",
            ),
            (
                json!({"securityGroupSelectorTerms": [{"id": "sg-UPPER"}]}),
                "spec.securityGroupSelectorTerms[0].id",
                "sg-",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}),
                "spec.amiSelectorTerms",
                "'alias' is mutually exclusive",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "al2023@latest", "owner": "self"}]}),
                "spec.amiSelectorTerms[0]",
                "'alias' is mutually exclusive",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
                "spec.amiSelectorTerms[0].alias",
                "unknown alias family",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "al2023"}]}),
                "spec.amiSelectorTerms[0].alias",
                "<family>@<version>",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "al2023@v2025*"}]}),
                "spec.amiSelectorTerms[0].alias",
                "version",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "windows2022@v1"}]}),
                "spec.amiSelectorTerms[0].alias",
                "latest",
            ),
            (
                json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "amiFamily": "AL2023"}),
                "spec.amiSelectorTerms[0].alias",
                "conflicts",
            ),
            (
                json!({"amiSelectorTerms": [{"id": "ami-1", "name": "x"}], "amiFamily": "AL2023"}),
                "spec.amiSelectorTerms[0]",
                "'id' is mutually exclusive",
            ),
            (
                json!({"amiSelectorTerms": [{"owner": "self"}], "amiFamily": "AL2023"}),
                "spec.amiSelectorTerms[0]",
                "at least one",
            ),
            (
                json!({"amiSelectorTerms": [{"name": "my-ami-*"}]}),
                "spec.amiFamily",
                "required when amiSelectorTerms has no alias",
            ),
            (
                json!({"amiSelectorTerms": [{"ssmParameter": "/x"}], "amiFamily": "AL2023"}),
                "spec.amiSelectorTerms[0].ssmParameter",
                "not supported",
            ),
            (
                json!({"amiSelectorTerms": null}),
                "spec.amiSelectorTerms",
                "required",
            ),
            (
                json!({"amiSelectorTerms": null, "amiFamily": "Custom"}),
                "spec.amiSelectorTerms",
                "Custom",
            ),
            (
                json!({"amiFamily": "Fedora"}),
                "spec.amiFamily",
                "unknown amiFamily",
            ),
            (
                json!({"capacityReservationSelectorTerms": [{"id": "cr-1", "ownerID": "123456789012"}]}),
                "spec.capacityReservationSelectorTerms[0]",
                "mutually exclusive",
            ),
            (
                json!({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}),
                "spec.capacityReservationSelectorTerms[0]",
                "at least one",
            ),
            (
                json!({"capacityReservationSelectorTerms": [{"tags": {"a": "b"}, "ownerID": "12"}]}),
                "spec.capacityReservationSelectorTerms[0].ownerID",
                "12-digit",
            ),
            (
                json!({"instanceProfile": "p"}),
                "spec",
                "exactly one of ['role', 'instanceProfile']",
            ),
            (json!({"role": null}), "spec", "exactly one"),
            (json!({"role": ""}), "spec.role", "empty"),
            (
                json!({"metadataOptions": {"httpTokens": "maybe"}}),
                "spec.metadataOptions.httpTokens",
                "not one of",
            ),
            (
                json!({"metadataOptions": {"httpPutResponseHopLimit": 65}}),
                "spec.metadataOptions.httpPutResponseHopLimit",
                "1..64",
            ),
            (
                json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true}, {"deviceName": "/dev/xvdb", "rootVolume": true}]}),
                "spec.blockDeviceMappings",
                "only one",
            ),
            (
                json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp9"}}]}),
                "spec.blockDeviceMappings[0].ebs.volumeType",
                "not one of",
            ),
            (
                json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "lots"}}]}),
                "spec.blockDeviceMappings[0].ebs.volumeSize",
                "",
            ),
            (
                json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "1Gi"}}]}),
                "spec.blockDeviceMappings[0].deviceName",
                "required",
            ),
            (
                json!({"instanceStorePolicy": "RAID5"}),
                "spec.instanceStorePolicy",
                "not one of",
            ),
        ];
        for (patch, field, reason) in cases {
            let (f, r) = err(with(patch.clone()));
            assert_eq!(f, field, "{patch}: {r}");
            assert!(r.contains(reason), "{patch}: {r}");
        }
    }

    fn template(spec: Value) -> Result<Ec2NodeClassSpec, LaunchError> {
        parse_node_class(&NodeClass {
            kind: "AWSNodeTemplate".into(),
            ami_family: AmiFamily::AL2,
            ..nc(spec)
        })
    }

    #[test]
    fn aws_node_templates_convert_to_terms() {
        let s = template(json!({
            "subnetSelector": {"karpenter.sh/discovery": "prod"},
            "securityGroupSelector": {"aws-ids": "sg-1, sg-2"},
            "instanceProfile": "KarpenterNodeInstanceProfile",
            "tags": {"team": "a"}
        }))
        .unwrap();
        assert_eq!(s.family(), AmiFamily::AL2);
        assert_eq!(
            s.subnet_queries(),
            vec![vec![Filter::new("tag:karpenter.sh/discovery", ["prod"])]]
        );
        assert_eq!(
            s.security_group_queries(),
            vec![
                vec![Filter::new("group-id", ["sg-1"])],
                vec![Filter::new("group-id", ["sg-2"])],
            ]
        );
        // No amiSelector: AL2's EKS-optimized AMIs.
        assert_eq!(
            names(&s.image_queries("1.28"))[0],
            "amazon-eks-node-1.28-v*"
        );
        let s = template(json!({
            "subnetSelector": {"aws::ids": "subnet-1"},
            "securityGroupSelector": {"a": "b"},
            "amiSelector": {"aws::name": "my-ami-*", "aws::owners": "self,123456789012"},
            "amiFamily": "Bottlerocket",
            "instanceProfile": "p"
        }))
        .unwrap();
        assert_eq!(s.family(), AmiFamily::Bottlerocket);
        let q = s.image_queries("1.28");
        assert_eq!(q.len(), 2);
        assert_eq!(q[1].owners, ["123456789012"]);
        assert_eq!(q[1].filters, [Filter::new("name", ["my-ami-*"])]);

        // No instanceProfile: the deployment's default (v1alpha5's
        // aws.defaultInstanceProfile), marked for the launch stage.
        let s =
            template(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}}))
                .unwrap();
        assert!(s.default_instance_profile);
        assert_eq!(
            (s.role.as_deref(), s.instance_profile.as_deref()),
            (None, None)
        );
        let s = template(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}))
            .unwrap();
        assert!(!s.default_instance_profile);
        // An EC2NodeClass still needs exactly one of role / instanceProfile.
        let e = parse_node_class(&nc(json!({
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}]
        })))
        .unwrap_err();
        assert!(e.to_string().contains("exactly one of"), "{e}");

        for (spec, field) in [
            (
                json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": ""}),
                "spec.instanceProfile",
            ),
            (
                json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p", "launchTemplate": "lt"}),
                "spec.launchTemplate",
            ),
            (
                json!({"subnetSelector": {"aws-ids": "subnet-1", "a": "b"}, "securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}),
                "spec.subnetSelector",
            ),
            (
                json!({"subnetSelectorTerms": [], "instanceProfile": "p"}),
                "spec.subnetSelectorTerms",
            ),
            (
                json!({"securityGroupSelector": {"a": "b"}, "instanceProfile": "p"}),
                "spec.subnetSelectorTerms[0]",
            ),
        ] {
            match template(spec.clone()) {
                Err(LaunchError::NodeClassField { field: f, .. }) => assert_eq!(f, field, "{spec}"),
                other => panic!("{spec}: {other:?}"),
            }
        }
    }

    #[test]
    fn reserved_tag_keys_are_rejected() {
        for key in [
            "kubernetes.io/cluster/prod",
            "karpenter.sh/nodepool",
            "karpenter.sh/nodeclaim",
            "karpenter.k8s.aws/ec2nodeclass",
            "eks:eks-cluster-name",
        ] {
            let (f, r) = err(with(json!({ "tags": { key: "x" } })));
            assert_eq!(f, format!("spec.tags.{key}"));
            assert!(r.contains("reserved"), "{r}");
        }
        // Near misses are fine.
        let ok = parse_node_class(&nc(with(json!({"tags": {
            "kubernetes.io/cluster": "x",
            "karpenter.sh/nodepool-owner": "x",
            "team": "a"
        }}))));
        assert!(ok.is_ok(), "{ok:?}");
        assert!(!is_reserved_tag_key("kubernetes.io/cluster/a/b"));
    }

    fn spec(patch: Value) -> Ec2NodeClassSpec {
        parse_node_class(&nc(with(patch))).unwrap()
    }

    #[test]
    fn subnet_security_group_and_reservation_queries() {
        let s = spec(json!({
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod", "tier": "*"}}, {"id": "subnet-0abc"}],
            "securityGroupSelectorTerms": [{"name": "nodes"}, {"id": "sg-0123"}, {"tags": {"a": "b"}}],
            "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}, "ownerID": "123456789012"}, {"id": "cr-0abc"}]
        }));
        assert_eq!(
            s.subnet_queries(),
            vec![
                vec![
                    Filter::new("tag:karpenter.sh/discovery", ["prod"]),
                    Filter::new("tag-key", ["tier"]),
                ],
                vec![Filter::new("subnet-id", ["subnet-0abc"])],
            ]
        );
        assert_eq!(
            s.security_group_queries(),
            vec![
                vec![Filter::new("group-name", ["nodes"])],
                vec![Filter::new("group-id", ["sg-0123"])],
                vec![Filter::new("tag:a", ["b"])],
            ]
        );
        assert_eq!(
            s.capacity_reservation_queries(),
            vec![
                vec![
                    Filter::new("tag:team", ["ml"]),
                    Filter::new("owner-id", ["123456789012"]),
                    Filter::new("state", ["active"]),
                ],
                vec![
                    Filter::new("capacity-reservation-id", ["cr-0abc"]),
                    Filter::new("state", ["active"]),
                ],
            ]
        );
    }

    fn names(q: &[ImageQuery]) -> Vec<String> {
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].owners, ["amazon"]);
        assert_eq!(q[0].filters.len(), 1);
        assert_eq!(q[0].filters[0].name, "name");
        q[0].filters[0].values.clone()
    }

    #[test]
    fn aliases_become_eks_optimized_name_patterns() {
        let q = spec(json!({})).image_queries("1.31");
        assert_eq!(
            names(&q),
            [
                "amazon-eks-node-al2023-x86_64-standard-1.31-v*",
                "amazon-eks-node-al2023-arm64-standard-1.31-v*",
                "amazon-eks-node-al2023-x86_64-nvidia-1.31-v*",
                "amazon-eks-node-al2023-arm64-nvidia-1.31-v*",
                "amazon-eks-node-al2023-x86_64-neuron-1.31-v*"
            ]
        );
        let q = spec(json!({"amiSelectorTerms": [{"alias": "al2023@v20251101"}]}))
            .image_queries("1.32");
        assert_eq!(
            names(&q),
            [
                "amazon-eks-node-al2023-x86_64-standard-1.32-v20251101",
                "amazon-eks-node-al2023-arm64-standard-1.32-v20251101",
                "amazon-eks-node-al2023-x86_64-nvidia-1.32-v20251101",
                "amazon-eks-node-al2023-arm64-nvidia-1.32-v20251101",
                "amazon-eks-node-al2023-x86_64-neuron-1.32-v20251101"
            ]
        );
        for alias in ["bottlerocket@v1.2.3", "bottlerocket@1.2.3"] {
            let s = spec(json!({ "amiSelectorTerms": [{"alias": alias}] }));
            assert_eq!(s.family(), AmiFamily::Bottlerocket);
            assert_eq!(
                names(&s.image_queries("1.31")),
                [
                    "bottlerocket-aws-k8s-1.31-x86_64-v1.2.3-*",
                    "bottlerocket-aws-k8s-1.31-aarch64-v1.2.3-*",
                    "bottlerocket-aws-k8s-1.31-nvidia-x86_64-v1.2.3-*",
                    "bottlerocket-aws-k8s-1.31-nvidia-aarch64-v1.2.3-*"
                ]
            );
        }
        let q = spec(json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}))
            .image_queries("1.31");
        assert_eq!(
            names(&q),
            [
                "bottlerocket-aws-k8s-1.31-x86_64-v*-*",
                "bottlerocket-aws-k8s-1.31-aarch64-v*-*",
                "bottlerocket-aws-k8s-1.31-nvidia-x86_64-v*-*",
                "bottlerocket-aws-k8s-1.31-nvidia-aarch64-v*-*"
            ]
        );
        let q = spec(json!({"amiSelectorTerms": [{"alias": "al2@latest"}]})).image_queries("1.30");
        assert_eq!(
            names(&q),
            [
                "amazon-eks-node-1.30-v*",
                "amazon-eks-arm64-node-1.30-v*",
                "amazon-eks-gpu-node-1.30-v*"
            ]
        );
        let q = spec(json!({"amiSelectorTerms": [{"alias": "windows2022@latest"}]}))
            .image_queries("1.31");
        assert_eq!(
            names(&q),
            ["Windows_Server-2022-English-Core-EKS_Optimized-1.31-*"]
        );
        // v1beta1: an amiFamily without terms means that family's latest.
        let s = spec(json!({"amiSelectorTerms": null, "amiFamily": "Bottlerocket"}));
        assert_eq!(
            names(&s.image_queries("1.31"))[0],
            "bottlerocket-aws-k8s-1.31-x86_64-v*-*"
        );
    }

    #[test]
    fn id_name_tag_and_owner_terms() {
        let s = spec(json!({
            "amiFamily": "AL2023",
            "amiSelectorTerms": [
                {"id": "ami-0abc"},
                {"name": "my-ami-*"},
                {"name": "shared-*", "owner": "123456789012"},
                {"tags": {"team": "a", "any": "*"}, "owner": "self"}
            ]
        }));
        assert_eq!(
            s.image_queries("1.31"),
            vec![
                ImageQuery {
                    filters: vec![Filter::new("image-id", ["ami-0abc"])],
                    owners: vec![]
                },
                ImageQuery {
                    filters: vec![Filter::new("name", ["my-ami-*"])],
                    owners: vec!["self".into(), "amazon".into()]
                },
                ImageQuery {
                    filters: vec![Filter::new("name", ["shared-*"])],
                    owners: vec!["123456789012".into()]
                },
                ImageQuery {
                    filters: vec![
                        Filter::new("tag-key", ["any"]),
                        Filter::new("tag:team", ["a"])
                    ],
                    owners: vec!["self".into()]
                },
            ]
        );
        assert!(s.alias().is_none());
    }

    fn subnet(id: &str, zone: &str) -> Subnet {
        Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: String::new(),
            vpc_id: "vpc-1".into(),
            available_ips: 10,
            tags: Default::default(),
        }
    }

    fn sg(id: &str) -> SecurityGroup {
        SecurityGroup {
            id: id.into(),
            name: id.into(),
            vpc_id: "vpc-1".into(),
            tags: Default::default(),
        }
    }

    fn img(id: &str, name: &str, arch: &str, date: &str, deprecated: bool) -> Image {
        Image {
            id: id.into(),
            name: name.into(),
            owner_id: "amazon".into(),
            architecture: arch.into(),
            creation_date: date.into(),
            deprecated,
            tags: Default::default(),
        }
    }

    #[test]
    fn resolve_dedupes_and_keeps_the_newest_ami_per_architecture() {
        let s = spec(json!({}));
        let r = resolve(
            &s,
            vec![
                subnet("subnet-b", "us-west-2b"),
                subnet("subnet-a", "us-west-2a"),
                subnet("subnet-b", "us-west-2b"),
            ],
            vec![sg("sg-2"), sg("sg-1"), sg("sg-2")],
            vec![
                img(
                    "ami-x1",
                    "x-v1",
                    "x86_64",
                    "2025-10-01T00:00:00.000Z",
                    false,
                ),
                img(
                    "ami-x2",
                    "x-v2",
                    "x86_64",
                    "2025-11-01T00:00:00.000Z",
                    false,
                ),
                // Newer but deprecated: never chosen.
                img("ami-x3", "x-v3", "x86_64", "2025-12-01T00:00:00.000Z", true),
                img("ami-a1", "a-v1", "arm64", "2025-09-01T00:00:00.000Z", false),
                // Same date: the greater name wins (Karpenter).
                img("ami-a0", "a-v0", "arm64", "2025-09-01T00:00:00.000Z", false),
                img(
                    "ami-mac",
                    "m",
                    "x86_64_mac",
                    "2026-01-01T00:00:00.000Z",
                    false,
                ),
                img(
                    "ami-x2",
                    "x-v2",
                    "x86_64",
                    "2025-11-01T00:00:00.000Z",
                    false,
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            r.subnets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["subnet-a", "subnet-b"]
        );
        assert_eq!(r.security_group_ids(), ["sg-1", "sg-2"]);
        assert_eq!(
            r.images
                .iter()
                .map(|i| (i.id.as_str(), i.architecture.as_str()))
                .collect::<Vec<_>>(),
            [("ami-x2", "amd64"), ("ami-a1", "arm64")]
        );
        assert_eq!(r.image_for("arm64").unwrap().id, "ami-a1");
        assert_eq!(r.architectures(), ["amd64", "arm64"]);
        assert_eq!(r.fleet_subnets(&["us-west-2b".into()]).len(), 1);
        assert_eq!(kube_architecture("x86_64"), Some("amd64"));
        assert_eq!(kube_architecture("arm64"), Some("arm64"));
        assert_eq!(kube_architecture("i386"), None);
    }

    #[test]
    fn alias_variants_resolve_per_architecture_and_serve_their_types() {
        let s = spec(json!({}));
        let al = |v: &str, a: &str, d: &str| {
            img(
                &format!("ami-{a}-{v}-{d}"),
                &format!("amazon-eks-node-al2023-{a}-{v}-1.31-v2025{d}"),
                a,
                &format!("2025-{d}-01T00:00:00.000Z"),
                false,
            )
        };
        let r = resolve(
            &s,
            vec![subnet("subnet-a", "a")],
            vec![sg("sg-1")],
            vec![
                al("standard", "x86_64", "10"),
                al("standard", "x86_64", "11"),
                al("nvidia", "x86_64", "09"),
                al("nvidia", "x86_64", "08"),
                al("neuron", "x86_64", "07"),
                al("standard", "arm64", "11"),
            ],
        )
        .unwrap();
        let got: Vec<(&str, AmiVariant)> = r
            .images
            .iter()
            .map(|i| (i.id.as_str(), i.variant))
            .collect();
        assert_eq!(
            got,
            [
                ("ami-arm64-standard-11", AmiVariant::Standard),
                ("ami-x86_64-standard-11", AmiVariant::Standard),
                ("ami-x86_64-nvidia-09", AmiVariant::Nvidia),
                ("ami-x86_64-neuron-07", AmiVariant::Neuron),
            ]
        );
        let cpu = InstanceTypeInfo::synthetic("m5.large", "amd64", 2, 8192, 0);
        let gpu = InstanceTypeInfo::synthetic("p3.2xlarge", "amd64", 8, 62464, 1);
        let mut inf = InstanceTypeInfo::synthetic("inf2.xlarge", "amd64", 4, 16384, 0);
        inf.neuron_devices = 1;
        let arm_gpu = InstanceTypeInfo::synthetic("g5g.xlarge", "arm64", 4, 8192, 1);
        assert_eq!(r.image_for_type(&cpu).unwrap().id, "ami-x86_64-standard-11");
        assert_eq!(r.image_for_type(&gpu).unwrap().id, "ami-x86_64-nvidia-09");
        assert_eq!(r.image_for_type(&inf).unwrap().id, "ami-x86_64-neuron-07");
        // No arm64 NVIDIA AMI resolved: the type has no AMI.
        assert!(r.image_for_type(&arm_gpu).is_none());
        assert_eq!(r.images[2].fleet_key(), "amd64/nvidia");
        assert_eq!(r.images[1].fleet_key(), "amd64");

        // AMIs chosen by id / name / tags serve every type.
        let s = spec(json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"name": "mine-*"}]}));
        let r = resolve(
            &s,
            vec![subnet("subnet-a", "a")],
            vec![sg("sg-1")],
            vec![img(
                "ami-1",
                "mine-nvidia-1",
                "x86_64",
                "2025-01-01T00:00:00Z",
                false,
            )],
        )
        .unwrap();
        assert_eq!(r.images[0].variant, AmiVariant::Any);
        assert_eq!(r.image_for_type(&gpu).unwrap().id, "ami-1");
        assert_eq!(r.image_for_type(&cpu).unwrap().id, "ami-1");

        // AL2's accelerated AMI serves NVIDIA and Neuron types.
        assert_eq!(
            AmiVariant::of_alias_image(&AmiFamily::AL2, "amazon-eks-gpu-node-1.30-v20250101"),
            AmiVariant::Accelerated
        );
        assert!(AmiVariant::Accelerated.serves(AmiVariant::Nvidia));
        assert!(AmiVariant::Accelerated.serves(AmiVariant::Neuron));
        assert!(!AmiVariant::Accelerated.serves(AmiVariant::Standard));
        assert_eq!(
            AmiVariant::of_alias_image(
                &AmiFamily::Bottlerocket,
                "bottlerocket-aws-k8s-1.31-nvidia-x86_64-v1.26.2-360b7a38"
            ),
            AmiVariant::Nvidia
        );
    }

    #[test]
    fn resolve_errors_name_what_is_empty() {
        let s = spec(json!({}));
        let ok_img = || vec![img("ami-1", "x", "x86_64", "2025-01-01T00:00:00Z", false)];
        let e = resolve(&s, vec![], vec![sg("sg-1")], ok_img()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "EC2NodeClass default: no subnet matches spec.subnetSelectorTerms"
        );
        let e = resolve(&s, vec![subnet("subnet-a", "a")], vec![], ok_img()).unwrap_err();
        assert!(e.to_string().contains("securityGroupSelectorTerms"), "{e}");
        let e = resolve(
            &s,
            vec![subnet("subnet-a", "a")],
            vec![sg("sg-1")],
            vec![img("ami-1", "x", "x86_64", "2025-01-01T00:00:00Z", true)],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "EC2NodeClass default: no usable AMI matches spec.amiSelectorTerms (1 found, 1 deprecated)"
        );
    }

    #[test]
    fn resolved_node_class_round_trips_through_json() {
        let s = spec(json!({"tags": {"team": "a"}}));
        let r = resolve(
            &s,
            vec![subnet("subnet-a", "a")],
            vec![sg("sg-1")],
            vec![img("ami-1", "x", "arm64", "2025-01-01T00:00:00Z", false)],
        )
        .unwrap();
        let back: ResolvedNodeClass =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        // The spec's name is not part of the document; the resolved name is.
        assert_eq!(back.name, "default");
        assert_eq!(back.images, r.images);
        assert_eq!(back.spec.tags, r.spec.tags);
    }
}
