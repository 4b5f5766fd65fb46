//! Plain-data mirrors of the EC2 resources Flotilla reads (subnets,
//! security groups, images, instances, spot prices) and EC2 API filters.
//! No SDK types: the AWS adapter converts, the simulator produces them
//! directly, and the launch logic in this crate consumes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An EC2 API filter. A value `*` in a `tag:` filter matches any value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    pub fn new(
        name: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Filter {
            name: name.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpotPrice {
    pub instance_type: String,
    pub zone: String,
    /// USD per hour.
    pub price: f64,
    /// Unix seconds of the price change.
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: String,
    pub vpc_id: String,
    pub available_ips: u64,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub vpc_id: String,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub id: String,
    pub name: String,
    pub owner_id: String,
    /// EC2's names: `x86_64`, `arm64`.
    pub architecture: String,
    /// RFC 3339.
    pub creation_date: String,
    pub deprecated: bool,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl InstanceState {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            _ => return None,
        })
    }
    /// Gone or going: it will never run a pod again.
    pub fn is_gone(self) -> bool {
        matches!(
            self,
            InstanceState::ShuttingDown | InstanceState::Terminated
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub state: InstanceState,
    /// `spot` or `on-demand` (EC2's InstanceLifecycle, absent → on-demand).
    pub lifecycle: String,
    /// Unix seconds.
    pub launch_time: i64,
    pub capacity_reservation_id: Option<String>,
    pub tags: BTreeMap<String, String>,
}
