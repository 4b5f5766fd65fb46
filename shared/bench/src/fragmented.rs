//! Fragmented clusters for the disruption benchmarks: the shape a day of
//! scale-ups and scale-downs leaves behind. Deterministic from
//! ([`Params`], seed); built directly as a [`ClusterState`] (no YAML).
//!
//! - One NodePool `default` (spot and on-demand, linux, the region's first
//!   three zones; consolidation
//!   `WhenEmptyOrUnderutilized`, `consolidateAfter: 0`, one budget of
//!   [`Params::budget_percent`] of the nodes, Karpenter's default 10%).
//! - `nodes` nodes of realistic types of the catalog (m5 / m5a / m6i / c5 /
//!   c6i / r5 / r6i, and Graviton m6g / c6g / r6g, large to 12xlarge) in the
//!   region's first three zones, mostly on-demand and some spot, labelled
//!   exactly as Karpenter labels its nodes (NodePool, instance type and every
//!   well-known instance label of the type, zone, region, capacity type,
//!   hostname, arch, os), with the allocatable the scheduler computes for
//!   the type (`allocatable::compute` under the NodePool's kubelet config),
//!   a provider id and a creation time in the past day.
//! - A DaemonSet pod on every node; `pods` pods of `deployments`
//!   Deployments of a dozen request shapes, bound so that every node is
//!   [`Params::fill_low`]–[`Params::fill_high`] full (its largest share of
//!   cpu / memory) except a few empty ones; some Deployments spread over
//!   zones (maxSkew 1, placed round-robin so the skew holds), some with
//!   required hostname anti-affinity (at most one replica per node), a few
//!   PodDisruptionBudgets, a few `karpenter.sh/do-not-disrupt` pods.
//!
//! [`Params::fixed`] is the reference shape; [`Params::randomised`] draws
//! every shape parameter from the seed (the project's rule: a randomised
//! mix beside the fixed ones).

use std::collections::BTreeMap;

use flotilla_core::allocatable;
use flotilla_core::catalog::{CapacityType, Catalog, InstanceTypeInfo};
use flotilla_core::labels;
use flotilla_core::model::*;
use flotilla_core::{Quantity, Requirement, Requirements, Resources};

use crate::mixes::Rng;

/// The generator's mixes, by name.
pub const MIXES: &[&str] = &["fragmented", "fragmented-random"];

/// 2026-01-01T00:00:00Z: the time the benchmarks take their decisions at.
pub const NOW: i64 = 1_767_225_600;

/// Fraction of memory the hypervisor keeps (the scheduler's default).
const VM_MEMORY_OVERHEAD: f64 = 0.075;

/// Pod request shapes: (cpu millicores, memory MiB, weight).
pub const SHAPES: &[(i64, i64, u32)] = &[
    (50, 64, 8),
    (100, 128, 12),
    (100, 256, 10),
    (250, 256, 10),
    (250, 512, 14),
    (500, 512, 8),
    (500, 1024, 12),
    (1000, 1024, 6),
    (1000, 2048, 8),
    (1000, 4096, 4),
    (2000, 4096, 5),
    (4000, 8192, 3),
];

/// Instance families by role: (general purpose, compute, memory), amd64
/// then arm64.
const FAMILIES_AMD64: [&[&str]; 3] = [&["m5", "m5a", "m6i"], &["c5", "c6i"], &["r5", "r6i"]];
const FAMILIES_ARM64: [&[&str]; 3] = [&["m6g"], &["c6g"], &["r6g"]];
/// Sizes and their vCPUs (the families above all follow this ladder).
const SIZES: &[(&str, u32)] = &[
    ("large", 2),
    ("xlarge", 4),
    ("2xlarge", 8),
    ("4xlarge", 16),
    ("8xlarge", 32),
    ("12xlarge", 48),
];

/// Namespaces the Deployments live in.
const NAMESPACES: &[&str] = &["shop", "payments", "search", "batch", "platform"];

/// The shape of a fragmented cluster.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Params {
    pub nodes: usize,
    pub pods: usize,
    pub seed: u64,
    /// The NodePool's one budget, percent of its nodes (10: Karpenter's
    /// default; 100: not budget-capped).
    pub budget_percent: u32,
    /// Deployments (at most 64).
    pub deployments: usize,
    /// Share of Deployments with a zone topology spread constraint.
    pub spread_share: f64,
    /// Share of Deployments with required hostname anti-affinity.
    pub anti_share: f64,
    /// PodDisruptionBudgets (on distinct Deployments).
    pub pdbs: usize,
    /// Pods annotated `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: usize,
    /// Share of nodes on spot.
    pub spot_share: f64,
    /// Share of Graviton (arm64) nodes.
    pub arm_share: f64,
    /// Share of nodes left with only their DaemonSet pod.
    pub empty_share: f64,
    /// Fill range of the other nodes (largest share of cpu / memory).
    pub fill_low: f64,
    pub fill_high: f64,
    /// Weight of each of [`SHAPES`] (same length).
    pub shape_weights: Vec<u32>,
}

impl Params {
    /// The reference shape: 40 Deployments, 20% spread, 15% anti-affinity,
    /// 4 PDBs, one do-not-disrupt pod per 100 nodes, 20% spot, 20% arm64,
    /// 4% empty nodes, the others 15–95% full.
    pub fn fixed(nodes: usize, pods: usize, seed: u64) -> Params {
        Params {
            nodes,
            pods,
            seed,
            budget_percent: 10,
            deployments: 40,
            spread_share: 0.2,
            anti_share: 0.15,
            pdbs: 4,
            do_not_disrupt: (nodes / 100).max(1),
            spot_share: 0.2,
            arm_share: 0.2,
            empty_share: 0.04,
            fill_low: 0.15,
            fill_high: 0.95,
            shape_weights: SHAPES.iter().map(|s| s.2).collect(),
        }
    }

    /// Every shape parameter drawn from `seed` (same seed, same cluster).
    pub fn randomised(nodes: usize, pods: usize, seed: u64) -> Params {
        let mut rng = Rng::new(seed ^ 0x5EED_F4A6_0000_0001);
        let mut unit = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let deployments = 20 + (unit() * 44.0) as usize;
        let spread_share = unit() * 0.4;
        let anti_share = unit() * 0.3;
        let pdbs = (unit() * 9.0) as usize;
        let dnd_per_100 = unit() * 3.0;
        let spot_share = unit() * 0.5;
        let arm_share = unit() * 0.4;
        let empty_share = unit() * 0.1;
        let fill_low = 0.1 + unit() * 0.2;
        let fill_high = 0.7 + unit() * 0.25;
        let shape_weights = SHAPES
            .iter()
            .map(|s| ((s.2 as f64) * (0.25 + 1.5 * unit())).round().max(1.0) as u32)
            .collect();
        Params {
            nodes,
            pods,
            seed,
            budget_percent: 10,
            deployments,
            spread_share,
            anti_share,
            pdbs,
            do_not_disrupt: ((nodes as f64) * dnd_per_100 / 100.0).round() as usize,
            spot_share,
            arm_share,
            empty_share,
            fill_low,
            fill_high,
            shape_weights,
        }
    }

    /// The parameters of mix `name` ([`MIXES`]).
    pub fn of_mix(name: &str, nodes: usize, pods: usize, seed: u64) -> Option<Params> {
        match name {
            "fragmented" => Some(Params::fixed(nodes, pods, seed)),
            "fragmented-random" => Some(Params::randomised(nodes, pods, seed)),
            _ => None,
        }
    }

    pub fn with_budget(mut self, percent: u32) -> Params {
        self.budget_percent = percent;
        self
    }
}

/// Why a cluster could not be generated.
#[derive(Debug)]
pub enum GenerateError {
    NoTypes {
        region: String,
        wanted: String,
        zones: Vec<String>,
    },
    Zones(String),
    Params(String),
}

impl std::fmt::Display for GenerateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenerateError::NoTypes {
                region,
                wanted,
                zones,
            } => write!(
                f,
                "catalog {region}: none of the benchmark's instance types ({wanted}) is offered in zones {zones:?}"
            ),
            GenerateError::Zones(region) => write!(f, "catalog {region}: fewer than three zones"),
            GenerateError::Params(what) => write!(f, "params: {what}"),
        }
    }
}

impl std::error::Error for GenerateError {}

/// One Deployment of the generated cluster.
#[derive(Debug, Clone)]
struct Deployment {
    namespace: &'static str,
    app: String,
    hash: String,
    cpu: i64,
    mem: i64,
    replicas: usize,
    /// `Some(DoNotSchedule?)`: zone spread.
    spread: Option<bool>,
    anti: bool,
}

/// An instance type the generator can launch.
struct NodeType<'a> {
    info: &'a InstanceTypeInfo,
    role: usize,
    arm: bool,
    vcpu: u32,
    allocatable: Resources,
    cpu: i64,
    mem: i64,
    pods: i64,
}

fn mib(q: Quantity) -> i64 {
    q.millis() / (1024 * 1024 * 1000)
}

fn label_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: label_map(&[("app", app)]),
        match_expressions: vec![],
    }
}

/// Lower-case base-36-ish suffix Kubernetes would generate (deterministic).
fn suffix(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len())] as char)
        .collect()
}

/// The default NodePool of the fragmented clusters (in `zones`: the
/// cluster's subnets).
pub fn node_pool(budget_percent: u32, zones: &[String]) -> NodePool {
    let mut np = NodePool::new(
        "default",
        Requirements::from_iter_reqs([
            Requirement::in_values(
                labels::CAPACITY_TYPE,
                [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND],
            ),
            Requirement::in_values(labels::OS, ["linux"]),
            Requirement::in_values(labels::ZONE, zones.iter().cloned()),
        ]),
    );
    np.disruption = Disruption {
        consolidation_policy: Some("WhenEmptyOrUnderutilized".into()),
        consolidate_after_seconds: Some(0),
        expire_after_seconds: None,
        budgets: vec![Budget {
            nodes: IntOrPercent::Percent(budget_percent.min(100)),
            ..Budget::default_budget()
        }],
        termination_grace_period_seconds: None,
    };
    np
}

/// The cluster's one DaemonSet (its template pod).
pub fn daemon_set() -> DaemonSet {
    DaemonSet {
        namespace: "kube-system".into(),
        name: "node-agent".into(),
        pod: Pod {
            name: "node-agent".into(),
            ..Pod::from(PodTemplate {
                namespace: "kube-system".into(),
                labels: label_map(&[("app", "node-agent")]),
                requests: Resources::new()
                    .with("cpu", Quantity::from_millis(100))
                    .with("memory", Quantity::from_mib(128))
                    .with("pods", Quantity::from_units(1)),
                owner: Some("DaemonSet/kube-system/node-agent".into()),
                tolerations: vec![Toleration {
                    key: String::new(),
                    operator: TolerationOperator::Exists,
                    value: String::new(),
                    effect: None,
                }],
                ..PodTemplate::default()
            })
        },
    }
}

/// Whether `p` is a DaemonSet pod (never moved by disruption).
pub fn is_daemon_pod(p: &Pod) -> bool {
    p.owner
        .as_deref()
        .is_some_and(|o| o.starts_with("DaemonSet/"))
}

/// The DaemonSet pod bound to node `node` created at `at`.
pub fn daemon_pod(ds: &DaemonSet, node: &str, at: i64, rng: &mut Rng) -> Pod {
    let mut p = ds.pod.clone();
    p.name = format!("{}-{}", ds.name, suffix(rng, 5));
    p.node_name = Some(node.to_string());
    p.created_at = Some(at);
    p
}

/// Karpenter's labels for a node of `info` in `zone` / `capacity` of
/// NodePool `np` named `name`.
pub fn node_labels(
    np: &NodePool,
    info: &InstanceTypeInfo,
    region: &str,
    zone: &str,
    capacity: CapacityType,
    name: &str,
) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = info
        .label_values()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    l.extend(np.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (k, v) in [
        (labels::NODEPOOL, np.name.as_str()),
        (labels::ZONE, zone),
        (labels::REGION, region),
        (labels::CAPACITY_TYPE, capacity.as_str()),
        (labels::HOSTNAME, name),
        ("karpenter.sh/registered", "true"),
        ("karpenter.sh/initialized", "true"),
    ] {
        l.insert(k.to_string(), v.to_string());
    }
    if let Some(nc) = &np.node_class {
        l.insert(labels::NODECLASS.to_string(), nc.clone());
    }
    l
}

/// The allocatable the scheduler computes for `info` under `np`.
pub fn node_allocatable(np: &NodePool, info: &InstanceTypeInfo) -> Resources {
    allocatable::compute(info, &np.kubelet, None, VM_MEMORY_OVERHEAD).allocatable
}

/// A node of `np` as Karpenter would have launched it: labels,
/// allocatable, provider id, its DaemonSet pod.
#[allow(clippy::too_many_arguments)]
pub fn launched_node(
    np: &NodePool,
    catalog: &Catalog,
    info: &InstanceTypeInfo,
    zone: &str,
    capacity: CapacityType,
    name: &str,
    created_at: i64,
    ds: &DaemonSet,
    rng: &mut Rng,
) -> Node {
    let mut annotations = BTreeMap::new();
    if let Some(h) = &np.template_hash {
        annotations.insert(labels::NODEPOOL_HASH.to_string(), h.clone());
    }
    Node {
        name: name.to_string(),
        labels: node_labels(np, info, &catalog.region, zone, capacity, name),
        annotations,
        created_at: Some(created_at),
        provider_id: Some(format!("aws:///{zone}/i-0{:016x}", rng.next_u64())),
        taints: vec![],
        allocatable: node_allocatable(np, info),
        unschedulable: false,
        deleting: false,
        ready: Some(true),
        pods: vec![daemon_pod(ds, name, created_at, rng)],
    }
}

/// The EC2-style private DNS name of node `i`.
pub fn node_name(region: &str, i: usize) -> String {
    format!(
        "ip-10-{}-{}-{}.{region}.compute.internal",
        i / 62_500 % 250 + 1,
        i / 250 % 250,
        i % 250 + 1
    )
}

/// Builds the fragmented cluster of `p` over `catalog`.
pub fn build(p: &Params, catalog: &Catalog) -> Result<ClusterState, GenerateError> {
    if p.deployments == 0 || p.deployments > 64 {
        return Err(GenerateError::Params(format!(
            "deployments must be 1..=64, got {}",
            p.deployments
        )));
    }
    if p.shape_weights.len() != SHAPES.len() || p.shape_weights.iter().all(|w| *w == 0) {
        return Err(GenerateError::Params(
            "shape_weights: one positive weight per shape".into(),
        ));
    }
    if !(0.0..=1.0).contains(&p.fill_low) || !(p.fill_low..=1.0).contains(&p.fill_high) {
        return Err(GenerateError::Params(format!(
            "fill range {}..{} is not within 0..1",
            p.fill_low, p.fill_high
        )));
    }
    let zones: Vec<String> = catalog.zones.iter().take(3).cloned().collect();
    if zones.len() < 3 {
        return Err(GenerateError::Zones(catalog.region.clone()));
    }
    let np = node_pool(p.budget_percent, &zones);
    let ds = daemon_set();
    let ds_req = ds.pod.requests.clone();
    let mut rng = Rng::new(p.seed.wrapping_add(0xF4A6_0000));

    // Launchable types: offered on-demand and spot in all three zones.
    let mut types: Vec<NodeType> = Vec::new();
    for (arm, fams) in [(false, FAMILIES_AMD64), (true, FAMILIES_ARM64)] {
        for (role, fs) in fams.iter().enumerate() {
            for f in fs.iter() {
                for (size, vcpu) in SIZES {
                    let Some(e) = catalog.get(&format!("{f}.{size}")) else {
                        continue;
                    };
                    let offered = zones.iter().all(|z| {
                        [CapacityType::OnDemand, CapacityType::Spot]
                            .iter()
                            .all(|ct| {
                                e.offerings.iter().any(|o| {
                                    &o.zone == z && o.capacity_type == *ct && o.available > 0
                                })
                            })
                    });
                    if !offered {
                        continue;
                    }
                    let alloc = node_allocatable(&np, &e.info).minus(&ds_req);
                    types.push(NodeType {
                        info: &e.info,
                        role,
                        arm,
                        vcpu: *vcpu,
                        cpu: alloc.cpu().millis(),
                        mem: mib(alloc.memory()),
                        pods: alloc.pods().units_floor(),
                        allocatable: alloc,
                    });
                }
            }
        }
    }
    if types.is_empty() {
        return Err(GenerateError::NoTypes {
            region: catalog.region.clone(),
            wanted: "m5, m5a, m6i, c5, c6i, r5, r6i, m6g, c6g, r6g".into(),
            zones,
        });
    }

    // Deployments: a shape each, replicas summing to `pods`.
    let mut deps: Vec<Deployment> = Vec::with_capacity(p.deployments);
    for d in 0..p.deployments {
        let shape = rng.weighted(p.shape_weights.iter().map(|&w| w as usize));
        let (cpu, mem, _) = SHAPES[shape];
        let roll = |rng: &mut Rng| (rng.next_u64() % 10_000) as f64 / 10_000.0;
        let anti = roll(&mut rng) < p.anti_share;
        let spread = (!anti && roll(&mut rng) < p.spread_share).then(|| rng.below(3) != 0);
        let app = format!("svc-{d:02}");
        deps.push(Deployment {
            namespace: NAMESPACES[d % NAMESPACES.len()],
            hash: suffix(&mut rng, 10),
            app,
            cpu,
            mem,
            replicas: 0,
            spread,
            anti,
        });
    }
    // Anti-affinity Deployments are small (at most a third of the nodes);
    // the rest share what is left by random weights, more replicas for
    // smaller pods.
    let mut left = p.pods;
    for d in deps.iter_mut().filter(|d| d.anti) {
        let cap = (p.nodes / 3).clamp(1, 40);
        d.replicas = (2 + rng.below(cap)).min(left);
        left -= d.replicas;
    }
    let weights: Vec<f64> = deps
        .iter()
        .map(|d| {
            if d.anti {
                0.0
            } else {
                (0.2 + (rng.next_u64() % 1000) as f64 / 1000.0) / (d.cpu as f64).sqrt()
            }
        })
        .collect();
    let wsum: f64 = weights.iter().sum();
    if wsum > 0.0 {
        let mut given = 0;
        let last = weights.iter().rposition(|w| *w > 0.0).unwrap_or(0);
        for (i, d) in deps.iter_mut().enumerate() {
            if weights[i] > 0.0 {
                d.replicas = if i == last {
                    left - given
                } else {
                    ((left as f64) * weights[i] / wsum).floor() as usize
                };
                given += d.replicas;
            }
        }
    }
    let demand_cpu: i64 = deps.iter().map(|d| d.cpu * d.replicas as i64).sum();
    let demand_mem: i64 = deps.iter().map(|d| d.mem * d.replicas as i64).sum();

    // Nodes: a role (general / compute / memory, by the pods' memory per
    // cpu), an arch, a size around what the demand asks at the mean fill.
    let mean_fill = (p.fill_low + p.fill_high) / 2.0;
    let busy = ((p.nodes as f64) * (1.0 - p.empty_share)).max(1.0);
    let want_vcpu = (demand_cpu as f64 / 1000.0 / busy / mean_fill / 0.95).max(2.0);
    let want_pods = p.pods as f64 / busy / mean_fill;
    let mem_per_cpu = if demand_cpu > 0 {
        demand_mem as f64 / demand_cpu as f64 // MiB per millicore
    } else {
        2.0
    };
    // General purpose 4 GiB/vCPU ≈ 4.1 MiB per millicore.
    let role_weights: [u32; 3] = if mem_per_cpu > 5.0 {
        [4, 1, 5]
    } else if mem_per_cpu < 2.5 {
        [4, 4, 2]
    } else {
        [6, 2, 2]
    };
    struct Slot {
        ty: usize,
        zone: usize,
        spot: bool,
        created: i64,
        cap_cpu: i64,
        cap_mem: i64,
        cap_pods: i64,
        cpu: i64,
        mem: i64,
        pods: i64,
        deps: u64,
        bound: Vec<(usize, usize)>,
    }
    let mut slots: Vec<Slot> = Vec::with_capacity(p.nodes);
    for i in 0..p.nodes {
        let role = {
            let mut r = rng.below(10) as u32;
            let mut role = 0;
            for (k, w) in role_weights.iter().enumerate() {
                if r < *w {
                    role = k;
                    break;
                }
                r -= w;
            }
            role
        };
        let arm = (rng.next_u64() % 10_000) as f64 / 10_000.0 < p.arm_share;
        // Size: log2 vCPU around the wanted one (±1 step, sometimes 2), at
        // least enough pod slots for the average node.
        let log_want = want_vcpu.log2();
        let jitter = [-2.0, -1.0, -1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0][rng.below(9)];
        let target = (log_want + jitter).round();
        let pick = |arm: bool, role: usize| {
            types
                .iter()
                .enumerate()
                .filter(|(_, t)| t.arm == arm && t.role == role)
                .min_by(|(_, a), (_, b)| {
                    let da = ((a.vcpu as f64).log2() - target).abs();
                    let db = ((b.vcpu as f64).log2() - target).abs();
                    let short = |t: &NodeType| (t.pods as f64) < want_pods;
                    da.total_cmp(&db)
                        .then_with(|| short(a).cmp(&short(b)))
                        .then_with(|| a.info.name.cmp(&b.info.name))
                })
                .map(|(ti, _)| ti)
        };
        // Among the types of that role and arch nearest the size, pick one
        // family at random.
        let ty = match pick(arm, role).or_else(|| pick(!arm, role)).or(Some(0)) {
            Some(best) => {
                let same: Vec<usize> = types
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| {
                        t.vcpu == types[best].vcpu && t.arm == types[best].arm && t.role == role
                    })
                    .map(|(k, _)| k)
                    .collect();
                if same.is_empty() {
                    best
                } else {
                    same[rng.below(same.len())]
                }
            }
            None => 0,
        };
        let empty = (rng.next_u64() % 10_000) as f64 / 10_000.0 < p.empty_share;
        let fill = if empty {
            0.0
        } else {
            p.fill_low + (p.fill_high - p.fill_low) * (rng.next_u64() % 10_000) as f64 / 10_000.0
        };
        let t = &types[ty];
        let spot = (rng.next_u64() % 10_000) as f64 / 10_000.0 < p.spot_share;
        // Launched in the past day (at least ten minutes ago).
        let created = NOW - 600 - rng.below(86_400 - 600) as i64;
        slots.push(Slot {
            ty,
            zone: i % 3,
            spot,
            created,
            cap_cpu: (t.cpu as f64 * fill) as i64,
            cap_mem: (t.mem as f64 * fill) as i64,
            cap_pods: t.pods,
            cpu: 0,
            mem: 0,
            pods: 0,
            deps: 0,
            bound: vec![],
        });
    }
    // Scale the fills so that the nodes' room at their fill matches the
    // demand (within the fill range).
    let room: i64 = slots.iter().map(|s| s.cap_cpu).sum();
    if room > 0 {
        let scale = demand_cpu as f64 / room as f64;
        for s in &mut slots {
            if s.cap_cpu == 0 {
                continue;
            }
            let t = &types[s.ty];
            let fill = (s.cap_cpu as f64 / t.cpu as f64 * scale).clamp(p.fill_low, p.fill_high);
            s.cap_cpu = (t.cpu as f64 * fill) as i64;
            s.cap_mem = (t.mem as f64 * fill) as i64;
        }
    }

    // Pods in random order (spread replicas round-robin over zones).
    let mut order: Vec<(usize, usize)> = deps
        .iter()
        .enumerate()
        .flat_map(|(d, dep)| (0..dep.replicas).map(move |r| (d, r)))
        .collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let zone_start: Vec<usize> = deps.iter().map(|_| rng.below(3)).collect();
    let mut open: [Vec<usize>; 3] = [vec![], vec![], vec![]];
    for (i, s) in slots.iter().enumerate() {
        if s.cap_cpu > 0 {
            open[s.zone].push(i);
        }
    }
    let fits = |s: &Slot, d: &Deployment, di: usize, hard: bool| {
        let (cc, cm) = if hard {
            let t = &types[s.ty];
            (
                (t.cpu as f64 * p.fill_high.max(0.95)) as i64,
                (t.mem as f64 * p.fill_high.max(0.95)) as i64,
            )
        } else {
            (s.cap_cpu, s.cap_mem)
        };
        s.cpu + d.cpu <= cc
            && s.mem + d.mem <= cm
            && s.pods < s.cap_pods
            && !(d.anti && s.deps & (1u64 << di) != 0)
    };
    let mut dropped = 0usize;
    for &(di, r) in &order {
        let d = &deps[di];
        let zone_order: Vec<usize> = match d.spread {
            Some(_) => vec![(zone_start[di] + r) % 3],
            None => {
                let z = rng.below(3);
                vec![z, (z + 1) % 3, (z + 2) % 3]
            }
        };
        let mut placed = None;
        'pass: for hard in [false, true] {
            for &z in &zone_order {
                let list = &open[z];
                if list.is_empty() {
                    continue;
                }
                for _ in 0..24 {
                    let si = list[rng.below(list.len())];
                    if fits(&slots[si], d, di, hard) {
                        placed = Some(si);
                        break 'pass;
                    }
                }
                let start = rng.below(list.len());
                for k in 0..list.len() {
                    let si = list[(start + k) % list.len()];
                    if fits(&slots[si], d, di, hard) {
                        placed = Some(si);
                        break 'pass;
                    }
                }
            }
        }
        let Some(si) = placed else {
            dropped += 1;
            continue;
        };
        let s = &mut slots[si];
        s.cpu += d.cpu;
        s.mem += d.mem;
        s.pods += 1;
        s.deps |= 1u64 << di;
        s.bound.push((di, r));
    }
    let _ = dropped;

    // Materialise nodes and pods.
    let region = catalog.region.clone();
    let mut nodes = Vec::with_capacity(p.nodes);
    let mut all_pods: Vec<(usize, usize)> = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let t = &types[s.ty];
        let name = node_name(&region, i);
        let capacity = if s.spot {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let mut node = launched_node(
            &np,
            catalog,
            t.info,
            &zones[s.zone],
            capacity,
            &name,
            s.created,
            &ds,
            &mut rng,
        );
        debug_assert!(t.allocatable.fits_in(&node.allocatable));
        for &(di, r) in &s.bound {
            let d = &deps[di];
            let mut pod = Pod {
                name: format!("{}-{}-{}", d.app, d.hash, suffix(&mut rng, 5)),
                node_name: Some(name.clone()),
                created_at: Some(s.created + rng.below((NOW - s.created).max(1) as usize) as i64),
                ..Pod::from(PodTemplate {
                    namespace: d.namespace.into(),
                    labels: label_map(&[("app", &d.app), ("pod-template-hash", &d.hash)]),
                    requests: Resources::new()
                        .with("cpu", Quantity::from_millis(d.cpu))
                        .with("memory", Quantity::from_mib(d.mem))
                        .with("pods", Quantity::from_units(1)),
                    owner: Some(format!("ReplicaSet/{}/{}-{}", d.namespace, d.app, d.hash)),
                    ..PodTemplate::default()
                })
            };
            // Unique even if two suffixes collide.
            pod.name = format!("{}{}", pod.name, r);
            if let Some(hard) = d.spread {
                pod.topology_spread.push(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: labels::ZONE.into(),
                    when_unsatisfiable: if hard {
                        WhenUnsatisfiable::DoNotSchedule
                    } else {
                        WhenUnsatisfiable::ScheduleAnyway
                    },
                    label_selector: selector(&d.app),
                    min_domains: None,
                    node_affinity_policy: InclusionPolicy::Honor,
                    node_taints_policy: InclusionPolicy::Ignore,
                });
            }
            if d.anti {
                pod.pod_anti_affinity.push(PodAffinityTerm {
                    label_selector: selector(&d.app),
                    namespaces: vec![],
                    all_namespaces: false,
                    topology_key: labels::HOSTNAME.into(),
                });
            }
            all_pods.push((i, node.pods.len()));
            node.pods.push(pod);
        }
        nodes.push(node);
    }
    // do-not-disrupt pods.
    for _ in 0..p.do_not_disrupt.min(all_pods.len()) {
        let (ni, pi) = all_pods[rng.below(all_pods.len())];
        nodes[ni].pods[pi]
            .annotations
            .insert(labels::DO_NOT_DISRUPT.into(), "true".into());
    }
    // PDBs on distinct non-anti Deployments: maxUnavailable 1 or
    // minAvailable 80%.
    let mut pdbs = Vec::new();
    let mut candidates: Vec<usize> = (0..deps.len())
        .filter(|&d| !deps[d].anti && deps[d].replicas > 0)
        .collect();
    for k in 0..p.pdbs.min(candidates.len()) {
        let d = &deps[candidates.swap_remove(rng.below(candidates.len()))];
        pdbs.push(PodDisruptionBudget {
            namespace: d.namespace.into(),
            name: format!("{}-pdb", d.app),
            selector: selector(&d.app),
            min_available: (k % 2 == 1).then_some(IntOrPercent::Percent(80)),
            max_unavailable: (k % 2 == 0).then_some(IntOrPercent::Int(1)),
            disruptions_allowed: None,
        });
    }
    pdbs.sort_by_key(|a| a.key());

    Ok(ClusterState {
        nodes,
        node_pools: vec![np],
        daemon_sets: vec![ds],
        pdbs,
        ..Default::default()
    })
}

/// Cluster facts for reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub nodes: usize,
    /// Bound pods, DaemonSet pods excluded.
    pub pods: usize,
    pub empty_nodes: usize,
    pub spot_nodes: usize,
    pub arm64_nodes: usize,
    /// Mean fill (largest share of cpu / memory requests, DaemonSet
    /// included) over the nodes.
    pub mean_fill: f64,
}

/// Counts of `state` (a generated cluster) for reports.
pub fn summarise(state: &ClusterState) -> Summary {
    let mut s = Summary {
        nodes: state.nodes.len(),
        ..Default::default()
    };
    let mut fill_sum = 0.0;
    for n in &state.nodes {
        let mut used = Resources::new();
        let mut pods = 0;
        for p in &n.pods {
            used.add_assign(&p.requests);
            if !is_daemon_pod(p) {
                pods += 1;
            }
        }
        s.pods += pods;
        if pods == 0 {
            s.empty_nodes += 1;
        }
        if n.labels.get(labels::CAPACITY_TYPE).map(String::as_str) == Some("spot") {
            s.spot_nodes += 1;
        }
        if n.labels.get(labels::ARCH).map(String::as_str) == Some("arm64") {
            s.arm64_nodes += 1;
        }
        fill_sum += fill(&used, &n.allocatable);
    }
    if !state.nodes.is_empty() {
        s.mean_fill = fill_sum / state.nodes.len() as f64;
    }
    s
}

/// Largest share of cpu / memory of `alloc` that `used` takes.
pub fn fill(used: &Resources, alloc: &Resources) -> f64 {
    let share = |u: Quantity, a: Quantity| {
        if a.millis() > 0 {
            u.millis() as f64 / a.millis() as f64
        } else {
            0.0
        }
    };
    share(used.cpu(), alloc.cpu()).max(share(used.memory(), alloc.memory()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn catalog() -> Catalog {
        Catalog::embedded("us-west-2").expect("embedded catalog")
    }

    fn fingerprint(s: &ClusterState) -> Vec<(String, String, Vec<String>)> {
        s.nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    n.labels[labels::INSTANCE_TYPE].clone(),
                    n.pods.iter().map(|p| p.name.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn deterministic_from_the_seed() {
        let c = catalog();
        for mix in MIXES {
            let p = Params::of_mix(mix, 120, 3600, 7).unwrap();
            let a = build(&p, &c).unwrap();
            let b = build(&p, &c).unwrap();
            assert_eq!(fingerprint(&a), fingerprint(&b), "{mix}");
            let other = build(&Params::of_mix(mix, 120, 3600, 8).unwrap(), &c).unwrap();
            assert_ne!(fingerprint(&a), fingerprint(&other), "{mix}");
        }
        assert!(Params::of_mix("nope", 1, 1, 1).is_none());
        // The randomised mix draws different shapes per seed.
        assert_ne!(
            Params::randomised(10, 10, 1).deployments,
            Params::randomised(10, 10, 2).deployments
        );
    }

    #[test]
    fn nodes_are_karpenter_nodes_filled_as_asked() {
        let c = catalog();
        let p = Params::fixed(300, 9000, 3);
        let s = build(&p, &c).unwrap();
        let sum = summarise(&s);
        assert_eq!(sum.nodes, 300);
        // Nearly every pod found a place.
        assert!(sum.pods >= 8900, "{sum:?}");
        assert!(sum.empty_nodes >= 3 && sum.empty_nodes <= 40, "{sum:?}");
        assert!(sum.spot_nodes > 20 && sum.spot_nodes < 110, "{sum:?}");
        assert!(sum.arm64_nodes > 20, "{sum:?}");
        assert!(sum.mean_fill > 0.3 && sum.mean_fill < 0.8, "{sum:?}");
        let np = &s.node_pools[0];
        let mut names = BTreeSet::new();
        let mut zones = BTreeSet::new();
        for n in &s.nodes {
            assert!(names.insert(n.name.clone()), "duplicate {}", n.name);
            for k in [
                labels::NODEPOOL,
                labels::INSTANCE_TYPE,
                labels::ZONE,
                labels::REGION,
                labels::CAPACITY_TYPE,
                labels::HOSTNAME,
                labels::ARCH,
                labels::OS,
                labels::INSTANCE_FAMILY,
            ] {
                assert!(n.labels.contains_key(k), "{}: {k}", n.name);
            }
            assert_eq!(n.labels[labels::HOSTNAME], n.name);
            assert_eq!(n.nodepool(), Some("default"));
            zones.insert(n.labels[labels::ZONE].clone());
            let ty = c.get(&n.labels[labels::INSTANCE_TYPE]).unwrap();
            assert_eq!(n.allocatable, node_allocatable(np, &ty.info));
            assert_eq!(n.labels[labels::ARCH], ty.info.architecture);
            // Exactly one DaemonSet pod; requests within allocatable; the
            // non-empty ones 15–95% full (the fill can exceed its target
            // by one pod only in the second pass, capped at 95%).
            assert_eq!(n.pods.iter().filter(|p| is_daemon_pod(p)).count(), 1);
            let mut used = Resources::new();
            let mut anti = BTreeSet::new();
            for p in &n.pods {
                used.add_assign(&p.requests);
                assert_eq!(p.node_name.as_deref(), Some(n.name.as_str()));
                assert!(p.created_at.unwrap() >= n.created_at.unwrap());
                assert!(p.created_at.unwrap() < NOW);
                if !p.pod_anti_affinity.is_empty() {
                    assert!(anti.insert(p.labels["app"].clone()), "{}", n.name);
                }
            }
            assert!(used.fits_in(&n.allocatable), "{}", n.name);
            let f = fill(&used, &n.allocatable);
            if n.pods.len() > 1 {
                assert!(f <= 0.97, "{}: {f}", n.name);
            }
        }
        assert_eq!(zones.len(), 3);
        // Zone spread (DoNotSchedule) holds: per app, zone counts differ by
        // at most one.
        let mut per: HashMap<String, [i64; 3]> = HashMap::new();
        let zl: Vec<String> = zones.into_iter().collect();
        for n in &s.nodes {
            let z = zl
                .iter()
                .position(|z| *z == n.labels[labels::ZONE])
                .unwrap();
            for p in &n.pods {
                if p.topology_spread
                    .iter()
                    .any(|t| t.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
                {
                    per.entry(p.labels["app"].clone()).or_default()[z] += 1;
                }
            }
        }
        assert!(!per.is_empty());
        for (app, c) in per {
            let (mx, mn) = (c.iter().max().unwrap(), c.iter().min().unwrap());
            assert!(mx - mn <= 1, "{app}: {c:?}");
        }
        assert_eq!(s.pdbs.len(), 4);
        let dnd = s
            .nodes
            .iter()
            .flat_map(|n| &n.pods)
            .filter(|p| p.annotations.contains_key(labels::DO_NOT_DISRUPT))
            .count();
        assert!((1..=3).contains(&dnd), "{dnd}");
        assert_eq!(
            np.disruption.budgets[0].nodes,
            IntOrPercent::Percent(10),
            "default budget"
        );
        let full = build(&p.clone().with_budget(100), &c).unwrap();
        assert_eq!(
            full.node_pools[0].disruption.budgets[0].nodes,
            IntOrPercent::Percent(100)
        );
        assert_eq!(
            fingerprint(&full),
            fingerprint(&s),
            "budget changes nothing else"
        );
    }

    #[test]
    fn fills_span_the_range() {
        let c = catalog();
        let s = build(&Params::fixed(400, 12_000, 1), &c).unwrap();
        let fills: Vec<f64> = s
            .nodes
            .iter()
            .filter(|n| n.pods.len() > 1)
            .map(|n| {
                let mut u = Resources::new();
                n.pods.iter().for_each(|p| u.add_assign(&p.requests));
                fill(&u, &n.allocatable)
            })
            .collect();
        let low = fills.iter().filter(|f| **f < 0.35).count();
        let high = fills.iter().filter(|f| **f > 0.75).count();
        assert!(low > 20 && high > 20, "low {low} high {high}");
    }

    #[test]
    fn rejects_bad_params() {
        let c = catalog();
        let mut p = Params::fixed(10, 10, 1);
        p.deployments = 65;
        assert!(build(&p, &c)
            .unwrap_err()
            .to_string()
            .contains("deployments"));
        let mut p = Params::fixed(10, 10, 1);
        p.shape_weights.pop();
        assert!(build(&p, &c).is_err());
    }
}
