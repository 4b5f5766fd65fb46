//! Node capacity and allocatable resources as Karpenter computes them for EKS
//! (aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`):
//! capacity from the instance type, minus kube-reserved, system-reserved and
//! the hard eviction threshold.
//!
//! * memory capacity: `MemoryInfo` MiB, minus 64 MiB of CMA reserve on arm64
//!   (Graviton), minus the hypervisor's share
//!   `ceil(mib × VM_MEMORY_OVERHEAD_PERCENT)` (0.075 by default);
//! * pods: kubelet `maxPods`, else the ENI limit; `podsPerCore` caps it;
//! * kube-reserved: CPU curve below, memory `11Mi × pods + 255Mi`,
//!   ephemeral-storage 1Gi; each overridable by kubelet `kubeReserved`;
//! * eviction: `memory.available` 100Mi and `nodefs.available` 10% by default,
//!   overridden by `evictionHard` (a quantity, or a percentage of capacity;
//!   100% disables the signal, as in the kubelet). `evictionSoft` does not
//!   reduce allocatable: the kubelet subtracts hard thresholds only, and
//!   Karpenter stopped taking `max(hard, soft)` (aws/karpenter-provider-aws
//!   #8407).

use crate::catalog::InstanceTypeInfo;
use crate::model::{KubeletConfig, Threshold};
use crate::quantity::Quantity;
use crate::resources::{self as res, Resources};

/// Default root volume (ephemeral-storage capacity) when the node class
/// does not set one: Karpenter's AL2023 default of 20Gi.
pub const DEFAULT_ROOT_VOLUME_GIB: i64 = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct NodeResources {
    pub capacity: Resources,
    /// kube-reserved + system-reserved + eviction threshold.
    pub overhead: Resources,
    pub allocatable: Resources,
}

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// Pods the kubelet will accept: `maxPods` if set, else the ENI limit;
/// `podsPerCore` caps it at `podsPerCore × vCPU`.
pub fn max_pods(info: &InstanceTypeInfo, kubelet: &KubeletConfig) -> u32 {
    let mut pods = kubelet.max_pods.unwrap_or_else(|| info.eni_limited_pods());
    if let Some(ppc) = kubelet.pods_per_core.filter(|p| *p > 0) {
        pods = pods.min(ppc.saturating_mul(info.vcpu));
    }
    pods
}

/// Karpenter's kube-reserved CPU curve, in millicores: 6% of the first core,
/// 1% of the second, 0.5% of the third and fourth, 0.25% of every core above.
pub fn kube_reserved_cpu_millis(vcpu: u32) -> i64 {
    let cores = vcpu as i64;
    let mut m = 0i64;
    // (from core, to core, basis points of 1000 millicores)
    for (from, to, bp) in [(0, 1, 600), (1, 2, 100), (2, 4, 50), (4, i64::MAX, 25)] {
        let n = (cores.min(to) - from).max(0);
        m += n * 1000 * bp / 10_000;
    }
    m
}

/// Graviton instances keep 64 MiB of CMA memory the OS cannot use.
pub const ARM64_CMA_RESERVED_MIB: u64 = 64;

/// An eviction threshold against `capacity`: a quantity as is, a percentage
/// of capacity rounded up; 100% disables the signal (kubelet semantics).
fn threshold(t: &Threshold, capacity: Quantity) -> Quantity {
    match *t {
        Threshold::Quantity(q) => q,
        Threshold::Percent(p) if !p.is_finite() || p >= 100.0 => Quantity::ZERO,
        Threshold::Percent(p) => {
            let p = p.clamp(0.0, 100.0);
            // Percent with two decimals of precision, rounded up.
            capacity.mul_ratio_ceil((p * 100.0).round() as i64, 10_000)
        }
    }
}

/// Memory capacity in MiB: instance memory minus the arm64 CMA reserve minus
/// `ceil(that × vm_overhead_fraction)`.
pub fn memory_capacity_mib(info: &InstanceTypeInfo, vm_overhead_fraction: f64) -> i64 {
    // Clamped to the largest quantity Flotilla represents (8 PiB).
    let max_mib = (crate::quantity::MAX_UNITS / MIB) as u64;
    let mut mib = info.memory_mib.min(max_mib) as i64;
    if info.architecture == "arm64" {
        mib = mib.saturating_sub(ARM64_CMA_RESERVED_MIB as i64);
    }
    let fraction = if vm_overhead_fraction.is_finite() {
        vm_overhead_fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let overhead_mib = ((mib as f64) * fraction).ceil() as i64;
    (mib - overhead_mib).max(0)
}

/// Capacity, overhead and allocatable of `info` under `kubelet`.
/// `root_volume` is the ephemeral-storage capacity (default
/// [`DEFAULT_ROOT_VOLUME_GIB`]); `vm_overhead_percent` is Karpenter's
/// `VM_MEMORY_OVERHEAD_PERCENT` as a fraction (default 0.075).
pub fn compute(
    info: &InstanceTypeInfo,
    kubelet: &KubeletConfig,
    root_volume: Option<Quantity>,
    vm_overhead_percent: f64,
) -> NodeResources {
    let pods = max_pods(info, kubelet);
    let ephemeral = root_volume.unwrap_or(Quantity::from_units(DEFAULT_ROOT_VOLUME_GIB * GIB));

    let mut capacity = Resources::new()
        .with(res::CPU, Quantity::from_units(info.vcpu as i64))
        .with(
            res::MEMORY,
            Quantity::from_units(memory_capacity_mib(info, vm_overhead_percent) * MIB),
        )
        .with(res::PODS, Quantity::from_units(pods as i64))
        .with(res::EPHEMERAL_STORAGE, ephemeral);
    if let Some(g) = &info.gpu {
        let name = match g.manufacturer.to_ascii_lowercase().as_str() {
            "nvidia" => Some(res::NVIDIA_GPU),
            "amd" => Some(res::AMD_GPU),
            "habana" => Some(res::HABANA_GAUDI),
            _ => None,
        };
        if let Some(name) = name {
            capacity.set(name, Quantity::from_units(g.count as i64));
        }
    }
    for (name, n) in [
        (res::AWS_NEURON, info.neuron_devices),
        (res::AWS_NEURON_CORE, info.neuron_cores),
        (res::POD_ENI, info.pod_eni),
        (res::EFA, info.efa_interfaces),
    ] {
        if n > 0 {
            capacity.set(name, Quantity::from_units(n as i64));
        }
    }

    // kube-reserved, each resource overridable.
    let mut kube_reserved = Resources::new()
        .with(
            res::CPU,
            Quantity::from_millis(kube_reserved_cpu_millis(info.vcpu)),
        )
        .with(
            res::MEMORY,
            Quantity::from_units((11 * (pods as i64).min(1 << 24) + 255) * MIB),
        )
        .with(res::EPHEMERAL_STORAGE, Quantity::from_units(GIB));
    for (k, v) in kubelet.kube_reserved.iter() {
        kube_reserved.set(k, v);
    }

    // Eviction: defaults, overridden by evictionHard (evictionSoft does not
    // reduce allocatable; see the module docs).
    let mut eviction = Resources::new()
        .with(res::MEMORY, Quantity::from_units(100 * MIB))
        .with(res::EPHEMERAL_STORAGE, ephemeral.mul_ratio_ceil(10, 100));
    for (signal, resource) in [
        ("memory.available", res::MEMORY),
        ("nodefs.available", res::EPHEMERAL_STORAGE),
    ] {
        if let Some(t) = kubelet.eviction_hard.get(signal) {
            eviction.set(resource, threshold(t, capacity.get(resource)));
        }
    }

    let overhead = kube_reserved.plus(&kubelet.system_reserved).plus(&eviction);
    let allocatable = capacity.minus(&overhead);
    NodeResources {
        capacity,
        overhead,
        allocatable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::GpuInfo;

    fn m5_large() -> InstanceTypeInfo {
        InstanceTypeInfo::synthetic("m5.large", "amd64", 2, 8192, 0)
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn cpu_curve() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn m5_large_by_hand() {
        let r = compute(&m5_large(), &KubeletConfig::default(), None, 0.075);
        // 8192 MiB - ceil(614.4) = 7577 MiB capacity.
        assert_eq!(r.capacity.memory(), q("7577Mi"));
        assert_eq!(r.capacity.pods(), q("29"));
        assert_eq!(r.allocatable.cpu(), q("1930m"));
        // 7577 - (11*29 + 255 = 574) - 100 = 6903 MiB.
        assert_eq!(r.allocatable.memory(), q("6903Mi"));
        // 20Gi - 1Gi - 2Gi (10%).
        assert_eq!(r.allocatable.get("ephemeral-storage"), q("17Gi"));
    }

    #[test]
    fn pods_per_core_and_max_pods_take_the_minimum() {
        let k = KubeletConfig {
            max_pods: Some(20),
            pods_per_core: Some(4),
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large(), &k), 8);
        let k = KubeletConfig {
            max_pods: Some(5),
            pods_per_core: Some(4),
            ..Default::default()
        };
        assert_eq!(max_pods(&m5_large(), &k), 5);
        let r = compute(&m5_large(), &k, None, 0.075);
        // Memory reservation follows the pod count: 11*5 + 255 = 310Mi.
        assert_eq!(
            r.allocatable.memory(),
            q("7577Mi") - q("310Mi") - q("100Mi")
        );
    }

    #[test]
    fn overrides_and_eviction_hard_percent() {
        let k = KubeletConfig {
            kube_reserved: Resources::new().with("cpu", q("200m")),
            system_reserved: Resources::new()
                .with("cpu", q("100m"))
                .with("memory", q("100Mi")),
            eviction_hard: [("memory.available".to_string(), Threshold::Percent(5.0))].into(),
            ..Default::default()
        };
        let r = compute(&m5_large(), &k, Some(q("100Gi")), 0.075);
        // 2 - 0.2 (kube-reserved override) - 0.1 (system-reserved).
        assert_eq!(r.allocatable.cpu(), q("1700m"));
        // 5% of 7577Mi = 378.85Mi, rounded up to the byte.
        let five_percent = q("7577Mi").mul_ratio_ceil(5, 100);
        assert_eq!(
            r.allocatable.memory(),
            q("7577Mi") - q("574Mi") - q("100Mi") - five_percent
        );
        assert_eq!(r.capacity.get("ephemeral-storage"), q("100Gi"));
        // 100Gi - 1Gi kube-reserved - 10Gi (nodefs default 10%).
        assert_eq!(r.allocatable.get("ephemeral-storage"), q("89Gi"));
        assert_eq!(r.overhead, r.capacity.minus(&r.allocatable));
    }

    #[test]
    fn kube_reserved_memory_override_and_nodefs_quantity() {
        let k = KubeletConfig {
            kube_reserved: Resources::new().with("memory", q("1Gi")),
            eviction_hard: [
                (
                    "nodefs.available".to_string(),
                    Threshold::Quantity(q("5Gi")),
                ),
                (
                    "memory.available".to_string(),
                    Threshold::Quantity(q("200Mi")),
                ),
            ]
            .into(),
            ..Default::default()
        };
        let r = compute(&m5_large(), &k, None, 0.075);
        // cpu keeps the computed 70m.
        assert_eq!(r.allocatable.cpu(), q("1930m"));
        assert_eq!(r.allocatable.memory(), q("7577Mi") - q("1Gi") - q("200Mi"));
        assert_eq!(r.allocatable.get("ephemeral-storage"), q("14Gi"));
    }

    #[test]
    fn eviction_soft_does_not_reduce_allocatable_and_100_percent_disables() {
        let soft = KubeletConfig {
            eviction_soft: [(
                "memory.available".to_string(),
                Threshold::Quantity(q("1Gi")),
            )]
            .into(),
            ..Default::default()
        };
        let base = compute(&m5_large(), &KubeletConfig::default(), None, 0.075);
        assert_eq!(compute(&m5_large(), &soft, None, 0.075), base);
        let off = KubeletConfig {
            eviction_hard: [("memory.available".to_string(), Threshold::Percent(100.0))].into(),
            ..Default::default()
        };
        let r = compute(&m5_large(), &off, None, 0.075);
        assert_eq!(r.allocatable.memory(), q("7577Mi") - q("574Mi"));
    }

    #[test]
    fn graviton_cma_and_overhead_parameter() {
        let mut g = m5_large();
        g.architecture = "arm64".into();
        // (8192 - 64) - ceil(8128 × 0.075 = 609.6) = 7518 MiB.
        let r = compute(&g, &KubeletConfig::default(), None, 0.075);
        assert_eq!(r.capacity.memory(), q("7518Mi"));
        // No VM overhead: the instance memory (less CMA) as is.
        let r = compute(&m5_large(), &KubeletConfig::default(), None, 0.0);
        assert_eq!(r.capacity.memory(), q("8192Mi"));
        assert_eq!(memory_capacity_mib(&m5_large(), f64::NAN), 8192);
    }

    #[test]
    fn absurd_inputs_saturate() {
        let mut i = m5_large();
        i.memory_mib = u64::MAX;
        i.vcpu = u32::MAX;
        let k = KubeletConfig {
            max_pods: Some(u32::MAX),
            ..Default::default()
        };
        let r = compute(&i, &k, None, 0.075);
        assert!(r.allocatable.memory() <= r.capacity.memory());
        let mut tiny = m5_large();
        tiny.memory_mib = 256;
        let r = compute(&tiny, &KubeletConfig::default(), None, 0.075);
        assert_eq!(r.allocatable.memory(), Quantity::ZERO);
    }

    #[test]
    fn accelerators_become_resources() {
        let mut i = m5_large();
        i.gpu = Some(GpuInfo {
            name: "a100".into(),
            manufacturer: "NVIDIA".into(),
            count: 8,
            memory_mib: 40960,
        });
        i.neuron_devices = 2;
        i.efa_interfaces = 4;
        let r = compute(&i, &KubeletConfig::default(), None, 0.075);
        assert_eq!(r.allocatable.get("nvidia.com/gpu"), q("8"));
        assert_eq!(r.allocatable.get("aws.amazon.com/neuron"), q("2"));
        assert_eq!(r.allocatable.get("vpc.amazonaws.com/efa"), q("4"));
        assert_eq!(r.allocatable.get("amd.com/gpu"), Quantity::ZERO);
    }
}
