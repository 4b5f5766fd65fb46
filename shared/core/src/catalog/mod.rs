//! The instance-type catalog: facts per EC2 instance type (as returned by
//! DescribeInstanceTypes) and offerings per (type, zone, capacity type) with
//! a price and an available count.
//!
//! The embedded default catalog (see `embedded`) is generated from public
//! data by `shared/core/data/generate_catalog.py`; a `describe-instance-types`
//! document can replace its facts (see `describe`).

pub mod describe;
pub mod ebs;
pub mod embedded;
pub mod live;
pub mod pricelist;
pub mod pricing;

pub use live::{LiveCatalog, OfferingSnapshot, SkippedType};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::labels;
use crate::requirements::{Requirement, Requirements};

/// Availability of an unlimited offering (spot, on-demand), as in the
/// reserved-capacity RFC.
pub const UNLIMITED: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// Ordered first: reserved capacity is pre-paid and preferred.
    Reserved,
    Spot,
    OnDemand,
}

impl CapacityType {
    /// Every capacity type, in order; `ALL[c as usize] == c`.
    pub const ALL: [CapacityType; 3] = [
        CapacityType::Reserved,
        CapacityType::Spot,
        CapacityType::OnDemand,
    ];

    /// Its bit in a set of capacity types held as a `u8`.
    pub fn bit(self) -> u8 {
        match self {
            CapacityType::Reserved => 1,
            CapacityType::Spot => 2,
            CapacityType::OnDemand => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Reserved => labels::CAPACITY_TYPE_RESERVED,
            CapacityType::Spot => labels::CAPACITY_TYPE_SPOT,
            CapacityType::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "reserved" => CapacityType::Reserved,
            "spot" => CapacityType::Spot,
            "on-demand" => CapacityType::OnDemand,
            _ => return None,
        })
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
    /// Memory per GPU.
    pub memory_mib: u64,
}

/// Facts about one instance type, independent of region and price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeInfo {
    pub name: String,
    /// `amd64` or `arm64` (GOARCH names).
    pub architecture: String,
    pub vcpu: u32,
    pub memory_mib: u64,
    /// `nitro`, `xen` or empty (bare metal).
    pub hypervisor: String,
    pub bare_metal: bool,
    pub current_generation: bool,
    pub encryption_in_transit: bool,
    /// e.g. `intel`, `amd`, `aws`.
    pub cpu_manufacturer: String,
    pub gpu: Option<GpuInfo>,
    /// AWS Inferentia / Trainium devices (`aws.amazon.com/neuron`).
    pub neuron_devices: u32,
    /// NeuronCores (`aws.amazon.com/neuroncore`).
    pub neuron_cores: u32,
    /// Total local NVMe instance storage, GiB.
    pub local_nvme_gib: u64,
    /// Baseline network bandwidth, Mbps.
    pub network_bandwidth_mbps: u64,
    /// Baseline EBS bandwidth, Mbps.
    pub ebs_bandwidth_mbps: u64,
    pub max_network_interfaces: u32,
    pub ipv4_per_interface: u32,
    pub efa_interfaces: u32,
    /// Branch interfaces for security groups for pods (`vpc.amazonaws.com/pod-eni`).
    pub pod_eni: u32,
    pub supports_spot: bool,
    pub supports_on_demand: bool,
}

impl InstanceTypeInfo {
    /// A nitro, current-generation type with the given shape and the
    /// network limits of an m5.large (3 ENIs × 10 IPv4: 29 pods), supporting
    /// spot and on-demand; for tests, simulators and synthetic catalogs.
    /// `gpus > 0` adds that many NVIDIA V100s (16 GiB each).
    pub fn synthetic(
        name: &str,
        architecture: &str,
        vcpu: u32,
        memory_mib: u64,
        gpus: u32,
    ) -> Self {
        InstanceTypeInfo {
            name: name.into(),
            architecture: architecture.into(),
            vcpu,
            memory_mib,
            hypervisor: "nitro".into(),
            bare_metal: false,
            current_generation: true,
            encryption_in_transit: false,
            cpu_manufacturer: "intel".into(),
            gpu: (gpus > 0).then(|| GpuInfo {
                name: "v100".into(),
                manufacturer: "nvidia".into(),
                count: gpus,
                memory_mib: 16384,
            }),
            neuron_devices: 0,
            neuron_cores: 0,
            local_nvme_gib: 0,
            network_bandwidth_mbps: 750,
            ebs_bandwidth_mbps: 650,
            max_network_interfaces: 3,
            ipv4_per_interface: 10,
            efa_interfaces: 0,
            pod_eni: 0,
            supports_spot: true,
            supports_on_demand: true,
        }
    }

    /// `m7i-flex.2xlarge` → (`m7i-flex`, `2xlarge`).
    pub fn family_and_size(&self) -> (&str, &str) {
        self.name
            .split_once('.')
            .unwrap_or((self.name.as_str(), ""))
    }
    pub fn family(&self) -> &str {
        self.family_and_size().0
    }
    pub fn size(&self) -> &str {
        self.family_and_size().1
    }
    /// Letters before the generation digit: `m7i` → `m`, `u-6tb1` → `u`.
    pub fn category(&self) -> &str {
        let f = self.family();
        let end = f.find(|c: char| !c.is_ascii_lowercase()).unwrap_or(f.len());
        &f[..end]
    }
    /// The first run of digits in the family: `m7i` → 7, `inf2` → 2.
    pub fn generation(&self) -> Option<u32> {
        let f = self.family();
        let start = f.find(|c: char| c.is_ascii_digit())?;
        let rest = &f[start..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    }

    /// ENI-limited pod density of the AWS VPC CNI:
    /// `ENIs * (IPv4 per ENI - 1) + 2`.
    pub fn eni_limited_pods(&self) -> u32 {
        let enis = self.max_network_interfaces;
        let ips = self.ipv4_per_interface;
        if enis == 0 || ips == 0 {
            return 110;
        }
        // Saturating: a user-supplied InstanceTypes document may carry any u32.
        enis.saturating_mul(ips.saturating_sub(1)).saturating_add(2)
    }

    /// The well-known label values this type carries (not zone / capacity
    /// type, which depend on the offering).
    pub fn label_values(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (labels::INSTANCE_TYPE, self.name.clone()),
            (labels::ARCH, self.architecture.clone()),
            (labels::OS, "linux".to_string()),
            (labels::INSTANCE_CATEGORY, self.category().to_string()),
            (labels::INSTANCE_FAMILY, self.family().to_string()),
            (labels::INSTANCE_SIZE, self.size().to_string()),
            (labels::INSTANCE_CPU, self.vcpu.to_string()),
            (labels::INSTANCE_MEMORY, self.memory_mib.to_string()),
            (
                labels::INSTANCE_NETWORK_BANDWIDTH,
                self.network_bandwidth_mbps.to_string(),
            ),
            (
                labels::INSTANCE_EBS_BANDWIDTH,
                self.ebs_bandwidth_mbps.to_string(),
            ),
            (
                labels::INSTANCE_ENCRYPTION_IN_TRANSIT,
                self.encryption_in_transit.to_string(),
            ),
        ];
        if let Some(g) = self.generation() {
            v.push((labels::INSTANCE_GENERATION, g.to_string()));
        }
        if !self.hypervisor.is_empty() {
            v.push((labels::INSTANCE_HYPERVISOR, self.hypervisor.clone()));
        }
        if !self.cpu_manufacturer.is_empty() {
            v.push((
                labels::INSTANCE_CPU_MANUFACTURER,
                self.cpu_manufacturer.clone(),
            ));
        }
        if let Some(g) = &self.gpu {
            v.push((labels::INSTANCE_GPU_NAME, g.name.clone()));
            v.push((labels::INSTANCE_GPU_MANUFACTURER, g.manufacturer.clone()));
            v.push((labels::INSTANCE_GPU_COUNT, g.count.to_string()));
            v.push((labels::INSTANCE_GPU_MEMORY, g.memory_mib.to_string()));
        }
        if self.local_nvme_gib > 0 {
            v.push((labels::INSTANCE_LOCAL_NVME, self.local_nvme_gib.to_string()));
        }
        v
    }

    /// Requirements describing this type (one `In` per label value); labels
    /// the type does not have (e.g. GPU name on a CPU type) are
    /// `DoesNotExist`, so `instance-gpu-count Exists` rules them out.
    pub fn requirements(&self) -> Requirements {
        let mut r = Requirements::new();
        for (k, v) in self.label_values() {
            r.add(Requirement::in_values(k, [v]));
        }
        for k in [
            labels::INSTANCE_GPU_NAME,
            labels::INSTANCE_GPU_MANUFACTURER,
            labels::INSTANCE_GPU_COUNT,
            labels::INSTANCE_GPU_MEMORY,
            labels::INSTANCE_LOCAL_NVME,
            labels::INSTANCE_HYPERVISOR,
            labels::INSTANCE_GENERATION,
        ] {
            if !r.has_key(k) {
                r.add(Requirement::does_not_exist(k));
            }
        }
        r
    }
}

/// A capacity reservation an offering launches into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationRef {
    pub id: String,
    pub reservation_type: crate::model::ReservationType,
}

/// (instance type, zone, capacity type, price, available count).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// Instances that may still be launched; [`UNLIMITED`] for spot and
    /// on-demand.
    pub available: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub info: InstanceTypeInfo,
    pub offerings: Vec<Offering>,
}

/// All instance types and offerings of one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub region: String,
    /// Zones of the region, sorted.
    pub zones: Vec<String>,
    /// Sorted by instance type name.
    pub entries: Vec<CatalogEntry>,
    /// Where the data came from (shown by `flotilla catalog`).
    pub source: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("region {0:?} is not in the embedded catalog (available: {1})")]
    UnknownRegion(String, String),
    #[error("embedded catalog is corrupt: {0}")]
    Corrupt(String),
    #[error("describe-instance-types document: {0}")]
    Describe(String),
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&CatalogEntry> {
        self.entries
            .binary_search_by(|e| e.info.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// On-demand price per type name (for reports).
    pub fn on_demand_prices(&self) -> BTreeMap<&str, f64> {
        self.entries
            .iter()
            .filter_map(|e| {
                e.offerings
                    .iter()
                    .filter(|o| o.capacity_type == CapacityType::OnDemand)
                    .map(|o| o.price)
                    .reduce(f64::min)
                    .map(|p| (e.info.name.as_str(), p))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capacity_type_is_listed_at_its_discriminant() {
        let mut bits = 0u8;
        for (i, c) in CapacityType::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i, "{c:?}");
            assert_eq!(CapacityType::parse(c.as_str()), Some(c));
            assert_eq!(bits & c.bit(), 0, "{c:?}: a bit of its own");
            bits |= c.bit();
        }
        // A variant added to the enum must be added to `ALL` (the
        // discriminant check above then places it).
        let listed = |c: CapacityType| match c {
            CapacityType::Reserved | CapacityType::Spot | CapacityType::OnDemand => {
                CapacityType::ALL.contains(&c)
            }
        };
        assert!(CapacityType::ALL.into_iter().all(listed));
    }

    fn info(name: &str) -> InstanceTypeInfo {
        InstanceTypeInfo::synthetic(name, "amd64", 2, 8192, 0)
    }

    #[test]
    fn name_parts() {
        let i = info("m7i-flex.2xlarge");
        assert_eq!(i.family(), "m7i-flex");
        assert_eq!(i.size(), "2xlarge");
        assert_eq!(i.category(), "m");
        assert_eq!(i.generation(), Some(7));
        assert_eq!(info("u-6tb1.metal").category(), "u");
        assert_eq!(info("inf2.xlarge").generation(), Some(2));
        assert_eq!(info("m5.large").eni_limited_pods(), 29);
    }

    #[test]
    fn requirements_gt_on_cpu_and_missing_gpu() {
        use crate::requirements::Operator;
        let r = info("m5.large").requirements();
        let pod = Requirements::from_iter_reqs([Requirement::new(
            labels::INSTANCE_CPU,
            Operator::Gt,
            &["1"],
        )
        .unwrap()]);
        assert!(r.compatible(&pod).is_ok());
        let pod = Requirements::from_iter_reqs([Requirement::new(
            labels::INSTANCE_CPU,
            Operator::Gt,
            &["2"],
        )
        .unwrap()]);
        assert!(r.compatible(&pod).is_err());
        let pod = Requirements::from_iter_reqs([Requirement::exists(labels::INSTANCE_GPU_COUNT)]);
        assert!(r.compatible(&pod).is_err());
    }
}
