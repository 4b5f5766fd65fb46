//! The internal cluster model the scheduler works on. The `input` module
//! converts Kubernetes documents (Pods, workloads, NodePools, Provisioners,
//! Nodes, volumes, ...) into these plain structs; nothing here knows about
//! YAML or the Kubernetes API types.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::InstanceTypeInfo;
use crate::quantity::Quantity;
use crate::requirements::{Operator, Requirements};
use crate::resources::Resources;

/// A label selector (`matchLabels` AND `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    /// (key, operator, values); operators are In, NotIn, Exists, DoesNotExist.
    pub match_expressions: Vec<(String, Operator, Vec<String>)>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|(k, op, vals)| {
                let cur = labels.get(k);
                match op {
                    Operator::In => cur.is_some_and(|c| vals.contains(c)),
                    Operator::NotIn => cur.is_none_or(|c| !vals.contains(c)),
                    Operator::Exists => cur.is_some(),
                    Operator::DoesNotExist => cur.is_none(),
                    // Not valid in label selectors; the input layer rejects them.
                    Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => false,
                }
            })
    }

    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty key with `Exists` tolerates everything.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, t: &Taint) -> bool {
        if let Some(e) = self.effect {
            if e != t.effect {
                return false;
            }
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != t.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == t.value,
        }
    }
}

/// Whether `tolerations` tolerate every scheduling-relevant taint
/// (NoSchedule, NoExecute); returns the first taint that is not tolerated.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// Like [`untolerated`], but `PreferNoSchedule` taints count too: Karpenter
/// treats them as hard until a pod's last relaxation tolerates them.
pub fn untolerated_strict<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InclusionPolicy {
    Honor,
    Ignore,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    pub label_selector: LabelSelector,
    pub min_domains: Option<u32>,
    /// Default Honor: only domains allowed by the pod's node affinity count.
    pub node_affinity_policy: InclusionPolicy,
    /// Default Ignore: tainted domains still count.
    pub node_taints_policy: InclusionPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub label_selector: LabelSelector,
    /// Namespaces the selector applies to; empty means the pod's own.
    pub namespaces: Vec<String>,
    /// A namespace selector that matched every namespace (`{}`) widens the
    /// term to all namespaces.
    pub all_namespaces: bool,
    pub topology_key: String,
}

impl PodAffinityTerm {
    /// Whether `other` (in namespace `other_ns` with `labels`) is selected by
    /// this term written on a pod in namespace `own_ns`.
    pub fn selects(&self, own_ns: &str, other_ns: &str, labels: &BTreeMap<String, String>) -> bool {
        let ns_ok = self.all_namespaces
            || if self.namespaces.is_empty() {
                own_ns == other_ns
            } else {
                self.namespaces.iter().any(|n| n == other_ns)
            };
        ns_ok && self.label_selector.matches(labels)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreferredNodeTerm {
    pub weight: i32,
    pub requirements: Requirements,
}

/// A pod as the scheduler sees it: what is its own (name, node, times)
/// and its [`PodTemplate`], shared by the pods of one workload, so that a
/// million bound pods cost a million small rows and one template per
/// workload. Reads of template fields go through [`Deref`]; writes
/// ([`DerefMut`]) copy the template first if other pods share it, so a pod
/// is still a value.
#[derive(Debug, Clone, Default)]
pub struct Pod {
    pub name: String,
    /// `spec.nodeName` (bound pods only).
    pub node_name: Option<String>,
    /// When the pod last changed as far as disruption cares: the latest of
    /// `metadata.creationTimestamp` and `status.startTime` (Unix seconds).
    pub created_at: Option<i64>,
    /// `metadata.deletionTimestamp` is set: the pod is going away.
    pub terminating: bool,
    pub template: Arc<PodTemplate>,
}

/// What the pods of one workload share: everything a scheduling rule reads
/// but the pod's name, node and times.
#[derive(Debug, Clone, Default)]
pub struct PodTemplate {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Effective requests: max(largest init container, sum of app containers
    /// (+ restartable init sidecars)) + pod overhead; `pods` is set to 1.
    pub requests: Resources,
    /// `spec.nodeSelector`, as requirements.
    pub node_selector: Requirements,
    /// Required node affinity terms (OR'd, tried in order). Empty: no terms.
    pub required_terms: Vec<Requirements>,
    /// Preferred node affinity terms.
    pub preferred_terms: Vec<PreferredNodeTerm>,
    pub tolerations: Vec<Toleration>,
    pub topology_spread: Vec<TopologySpreadConstraint>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    pub preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    /// Names of PersistentVolumeClaims the pod mounts (same namespace).
    pub pvc_names: Vec<String>,
    pub priority: i32,
    /// The workload the pod came from (`Deployment/ns/name`), if expanded.
    pub owner: Option<String>,
    /// Host ports requested (protocol/port), which conflict per node.
    pub host_ports: Vec<(String, i32)>,
}

impl Deref for Pod {
    type Target = PodTemplate;
    fn deref(&self) -> &PodTemplate {
        &self.template
    }
}

impl DerefMut for Pod {
    fn deref_mut(&mut self) -> &mut PodTemplate {
        Arc::make_mut(&mut self.template)
    }
}

impl From<PodTemplate> for Pod {
    /// A pod of `template` with no name, node or times yet.
    fn from(template: PodTemplate) -> Pod {
        Pod {
            template: Arc::new(template),
            ..Pod::default()
        }
    }
}

impl Pod {
    pub fn key(&self) -> String {
        namespaced_key(&self.namespace, &self.name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Threshold {
    Quantity(Quantity),
    /// Percentage of capacity, 0..=100.
    Percent(f64),
}

/// Kubelet settings that change allocatable resources or pod density.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<u32>,
    #[serde(skip_serializing_if = "Resources::is_zero")]
    pub system_reserved: Resources,
    /// Overrides per resource of the computed kube-reserved values.
    #[serde(skip_serializing_if = "Resources::is_zero")]
    pub kube_reserved: Resources,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, Threshold>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, Threshold>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
}

/// Why a node is disrupted (Karpenter's disruption reasons, plus the two
/// forceful ones that budgets do not limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DisruptionReason {
    /// Only DaemonSet pods (or none) left, for `consolidateAfter`.
    Empty,
    /// Its pods fit elsewhere, or on fewer / cheaper replacements.
    Underutilized,
    /// It no longer matches its NodePool (requirements or template).
    Drifted,
    /// Older than the NodePool's `expireAfter` (forceful).
    Expired,
    /// A spot interruption warning (forceful; the pipeline only).
    Interrupted,
}

impl DisruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Empty => "Empty",
            DisruptionReason::Underutilized => "Underutilized",
            DisruptionReason::Drifted => "Drifted",
            DisruptionReason::Expired => "Expired",
            DisruptionReason::Interrupted => "Interrupted",
        }
    }

    /// Forceful reasons are not limited by budgets, PDBs or
    /// `karpenter.sh/do-not-disrupt` (bounded by `terminationGracePeriod`).
    pub fn is_forceful(self) -> bool {
        matches!(
            self,
            DisruptionReason::Expired | DisruptionReason::Interrupted
        )
    }
}

/// An absolute count or a percentage (`"10%"`), as in budgets and PDBs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum IntOrPercent {
    Int(u32),
    /// 0..=100
    Percent(u32),
}

impl IntOrPercent {
    /// The count this stands for out of `total`; percentages round up when
    /// `round_up` (Kubernetes' `GetScaledValueFromIntOrPercent`, which
    /// Karpenter's budgets and PDB `maxUnavailable` use) and down otherwise
    /// (PDB `minAvailable` is rounded up too, by its caller).
    pub fn of(self, total: usize, round_up: bool) -> usize {
        match self {
            IntOrPercent::Int(n) => n as usize,
            IntOrPercent::Percent(p) => {
                let p = p.min(100) as usize;
                let num = total.saturating_mul(p);
                if round_up {
                    num.div_ceil(100)
                } else {
                    num / 100
                }
            }
        }
    }
}

/// One entry of a NodePool's `spec.disruption.budgets`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Nodes of the pool that may be disrupting at once.
    pub nodes: IntOrPercent,
    /// Reasons the budget limits; empty: all (graceful) reasons.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DisruptionReason>,
    /// Cron schedule (5 fields, or `@daily`-style macros, UTC) at which the
    /// budget becomes active; `None`: always active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long it stays active after each scheduled time (seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<u64>,
}

impl Budget {
    /// Karpenter's CRD default: `nodes: 10%`, always, for every reason.
    pub fn default_budget() -> Budget {
        Budget {
            nodes: IntOrPercent::Percent(10),
            reasons: vec![],
            schedule: None,
            duration_seconds: None,
        }
    }
}

/// Disruption settings of a NodePool.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// `WhenEmpty` / `WhenEmptyOrUnderutilized` (v1) or derived from
    /// `consolidation.enabled` / `ttlSecondsAfterEmpty` (v1alpha5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    /// Seconds after empty / underutilized before consolidating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidate_after_seconds: Option<u64>,
    /// Node lifetime in seconds (`expireAfter` / `ttlSecondsUntilExpired`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_after_seconds: Option<u64>,
    /// `spec.disruption.budgets` (the input fills in Karpenter's default,
    /// one budget of 10%); empty: unlimited.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<Budget>,
    /// `spec.template.spec.terminationGracePeriod` in seconds: how long a
    /// drain may be blocked (PDBs, do-not-disrupt) before the node goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NodePoolSource {
    NodePool,
    Provisioner,
}

/// A NodePool's `spec.limits`: per resource, explicit zeros included
/// (`Resources` drops zeros, and `cpu: 0` means "no more nodes").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceLimits(pub BTreeMap<String, Quantity>);

impl ResourceLimits {
    pub fn get(&self, name: &str) -> Option<Quantity> {
        self.0.get(name).copied()
    }
    pub fn cpu(&self) -> Option<Quantity> {
        self.get(crate::resources::CPU)
    }
    pub fn memory(&self) -> Option<Quantity> {
        self.get(crate::resources::MEMORY)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> {
        self.0.iter().map(|(k, q)| (k.as_str(), *q))
    }
}

impl From<Resources> for ResourceLimits {
    fn from(r: Resources) -> Self {
        ResourceLimits(r.iter().map(|(k, q)| (k.to_string(), q)).collect())
    }
}

/// A NodePool (karpenter.sh/v1) or Provisioner (v1alpha5), normalised.
#[derive(Debug, Clone)]
pub struct NodePool {
    pub name: String,
    pub source: NodePoolSource,
    /// Higher first; default 0.
    pub weight: i32,
    /// Requirements from the template plus one `In` per template label.
    pub requirements: Requirements,
    /// `minValues` of the requirements, per key (the largest when a key is
    /// given several times, as Karpenter takes the max): a NodeClaim of this
    /// NodePool must keep at least that many distinct values of the key
    /// among its instance types.
    pub min_values: BTreeMap<String, u32>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// `spec.limits` (None: unlimited). A limit of zero is kept: it allows
    /// no new node.
    pub limits: Option<ResourceLimits>,
    pub kubelet: KubeletConfig,
    pub node_class: Option<String>,
    pub disruption: Disruption,
    /// Hash of the NodePool's template as it affects launched nodes
    /// (labels, annotations, taints, startup taints, kubelet, node class
    /// reference, expireAfter, terminationGracePeriod: everything but the
    /// requirements, whose drift is checked against the node's labels).
    /// Recorded on nodes as `karpenter.sh/nodepool-hash`; a node whose
    /// recorded hash differs has drifted. `None`: not computed.
    pub template_hash: Option<String>,
    /// Why Karpenter would not provision from it now (being deleted, its
    /// `Ready` condition is `False`); its nodes are still disruption
    /// candidates.
    pub unavailable: Option<String>,
    /// [`CONSOLIDATE_TOLERANCE_ANNOTATION`] as a fraction (0: off): fewer,
    /// larger nodes are preferred while they cost at most this much more.
    pub consolidate_tolerance: f64,
    /// The `karpenter.sh/capacity-type In [on-demand]` requirement is the
    /// input's default (the NodePool says nothing of capacity types: what
    /// it launches), not the NodePool's own: drift does not hold nodes to
    /// it, as Karpenter's requirement drift reads only the NodePool's
    /// `spec.template.spec.requirements`.
    pub default_capacity_type: bool,
    /// `spec.replicas`: a static NodePool. Its nodes are no candidates of
    /// emptiness, drift or underutilized consolidation (Karpenter's
    /// `OwnedByStaticNodePool`).
    pub replicas: Option<i64>,
}

impl NodePool {
    /// A v1 NodePool with these requirements and every other field at its
    /// default (weight 0, no labels, taints, limits or kubelet settings).
    pub fn new(name: &str, requirements: Requirements) -> Self {
        NodePool {
            name: name.into(),
            source: NodePoolSource::NodePool,
            weight: 0,
            requirements,
            min_values: BTreeMap::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            limits: None,
            kubelet: KubeletConfig::default(),
            node_class: None,
            disruption: Disruption {
                budgets: vec![Budget::default_budget()],
                ..Disruption::default()
            },
            template_hash: None,
            unavailable: None,
            consolidate_tolerance: 0.0,
            default_capacity_type: false,
            replicas: None,
        }
    }
}

/// NodePool annotation: how much dearer (a percentage, `"5%"`) a plan with
/// fewer, larger nodes may be and still be preferred (see
/// `docs/scheduling.md`, "What a node costs"). Absent: 0, the cheapest plan.
pub const CONSOLIDATE_TOLERANCE_ANNOTATION: &str = "flotilla.dev/consolidate-tolerance";

/// Parses a [`CONSOLIDATE_TOLERANCE_ANNOTATION`] value: a percentage from
/// 0% to 100% (`"5%"`, `"2.5%"`), as a fraction.
pub fn parse_tolerance(s: &str) -> Result<f64, String> {
    let n = s
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("{s:?} is not a percentage such as \"5%\""))?;
    if !(0.0..=100.0).contains(&n) {
        return Err(format!("{s:?} is not between 0% and 100%"));
    }
    Ok(n / 100.0)
}

/// AMI families Flotilla knows how to bootstrap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum AmiFamily {
    AL2023,
    AL2,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Custom,
}

/// An EC2NodeClass (v1) or AWSNodeTemplate (v1alpha1), normalised. The raw
/// spec is kept for the launch stage.
#[derive(Debug, Clone)]
pub struct NodeClass {
    pub name: String,
    pub kind: String,
    pub ami_family: AmiFamily,
    /// Root volume size, which becomes the node's ephemeral-storage capacity.
    pub root_volume_size: Option<Quantity>,
    /// The EBS volumes of its `blockDeviceMappings`, validated; `None`
    /// when it has none (the AMI family's defaults apply, see
    /// [`crate::catalog::ebs::node_class_volumes`]).
    pub volumes: Option<Vec<crate::catalog::ebs::EbsVolume>>,
    pub spec: serde_json::Value,
    /// Hash of the spec as it affects launched nodes (all but the selector
    /// terms, which resolve dynamically; see `disruption::hash`). Recorded
    /// on nodes as `karpenter.k8s.aws/ec2nodeclass-hash`; a node whose
    /// recorded hash differs has drifted. `None`: not computed.
    pub template_hash: Option<String>,
    /// What its selector terms resolved to (`status`), the base of the
    /// cloud-provider drift checks; empty lists are unknown.
    pub status: NodeClassStatus,
}

/// An EC2NodeClass's resolved `status`: what its selector terms select
/// now. Each list empty: unknown (no drift is decided on it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClassStatus {
    /// `status.amis`: the AMIs it launches with, each with the
    /// requirements of the instance types it serves.
    pub amis: Vec<NodeClassAmi>,
    /// `status.subnets[].id`.
    pub subnets: Vec<String>,
    /// `status.securityGroups[].id`.
    pub security_groups: Vec<String>,
}

/// One entry of an EC2NodeClass's `status.amis`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClassAmi {
    pub id: String,
    /// `requirements` (e.g. `kubernetes.io/arch In [arm64]`): the instance
    /// types the AMI serves; empty: all.
    pub requirements: Requirements,
}

/// What EC2 says an instance runs with (DescribeInstances, or what the
/// pipeline recorded when it launched the instance). `None` / empty:
/// unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFacts {
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    /// Sorted, without duplicates.
    pub security_group_ids: Vec<String>,
}

/// An existing node with the pods bound to it.
#[derive(Debug, Clone, Default)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `karpenter.sh/do-not-disrupt`, `karpenter.sh/nodepool-hash`, ...
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp` (Unix seconds).
    pub created_at: Option<i64>,
    /// `spec.providerID` (`aws:///<zone>/<instance-id>`).
    pub provider_id: Option<String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub unschedulable: bool,
    /// `metadata.deletionTimestamp` is set: the node is going away, and the
    /// pods on it that will need a place elsewhere are provisioned for
    /// (see `scheduler::reschedulable`).
    pub deleting: bool,
    /// The `Ready` condition (`status.conditions`): `Some(true)` when its
    /// status is `True`, `Some(false)` when `False` or `Unknown`, `None`
    /// when the document reports no conditions (taken as Ready: documents
    /// written by hand, or posted by an agent that did not send them).
    pub ready: Option<bool>,
    /// Pods bound to this node (`spec.nodeName`).
    pub pods: Vec<Pod>,
}

impl Node {
    pub fn nodepool(&self) -> Option<&str> {
        self.labels
            .get(crate::labels::NODEPOOL)
            .or_else(|| self.labels.get(crate::labels::PROVISIONER_NAME))
            .map(String::as_str)
    }

    /// Whether Karpenter has seen the node initialized
    /// (`karpenter.sh/initialized: "true"`); a node of no NodePool always is.
    pub fn initialized(&self) -> bool {
        self.nodepool().is_none()
            || self
                .labels
                .get("karpenter.sh/initialized")
                .map(String::as_str)
                == Some("true")
    }
}

#[derive(Debug, Clone)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    /// The pod template as a pod (requests, selectors, affinity, tolerations).
    pub pod: Pod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeBindingMode {
    Immediate,
    WaitForFirstConsumer,
}

#[derive(Debug, Clone)]
pub struct StorageClass {
    pub name: String,
    pub provisioner: String,
    pub binding_mode: VolumeBindingMode,
    /// `allowedTopologies` terms (OR'd), label keys already normalised.
    pub allowed_topologies: Vec<Requirements>,
    pub is_default: bool,
}

#[derive(Debug, Clone)]
pub struct PersistentVolumeClaim {
    pub namespace: String,
    pub name: String,
    pub storage_class: Option<String>,
    /// Bound volume, if any.
    pub volume_name: Option<String>,
    /// `metadata.deletionTimestamp` is set: a pod using it waits.
    pub deleting: bool,
    /// `status.phase: Lost` (its volume is gone): a pod using it waits.
    pub lost: bool,
}

#[derive(Debug, Clone)]
pub struct PersistentVolume {
    pub name: String,
    /// Required node affinity terms (OR'd), label keys already normalised.
    pub node_affinity: Vec<Requirements>,
    /// A `local` or `hostPath` volume: its hostname affinity is not a
    /// constraint on new nodes (Karpenter ignores it).
    pub local_or_host_path: bool,
    /// `metadata.deletionTimestamp` is set: a pod using it waits.
    pub deleting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum PriceAdjustment {
    /// `-50%` → -50.0
    Percent(f64),
    /// `+0.01` USD/hour
    Absolute(f64),
}

/// A NodeOverlay (karpenter.sh/v1alpha1): price and capacity adjustments
/// for the instance types matching its requirements.
#[derive(Debug, Clone)]
pub struct NodeOverlay {
    pub name: String,
    pub weight: i32,
    pub requirements: Requirements,
    pub price_adjustment: Option<PriceAdjustment>,
    /// Absolute price override.
    pub price: Option<f64>,
    /// Extra capacity (e.g. hugepages) added to matching types.
    pub capacity: Resources,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationType {
    Default,
    CapacityBlock,
}

/// An EC2 capacity reservation (ODCR or capacity block) as returned by
/// DescribeCapacityReservations.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    pub id: String,
    pub instance_type: String,
    pub availability_zone: String,
    pub total_instance_count: u32,
    pub available_instance_count: u32,
    pub state: String,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    pub reservation_type: ReservationType,
    pub platform: String,
    pub tenancy: String,
    pub owner_id: String,
    /// RFC 3339, if the reservation ends.
    pub end_date: Option<String>,
    pub tags: BTreeMap<String, String>,
}

/// A `policy/v1 PodDisruptionBudget`.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDisruptionBudget {
    pub namespace: String,
    pub name: String,
    /// `spec.selector`; an empty selector selects every pod of the namespace.
    pub selector: LabelSelector,
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
    /// `status.disruptionsAllowed`, when the document carries a status (the
    /// disruption controller's answer wins over our count).
    pub disruptions_allowed: Option<u32>,
}

impl PodDisruptionBudget {
    pub fn key(&self) -> String {
        namespaced_key(&self.namespace, &self.name)
    }
}

/// A `karpenter.sh/v1 NodeClaim` given among the inputs: the node it
/// became, when it was last consolidatable, and what it was launched from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClaimObject {
    pub name: String,
    /// `karpenter.sh/nodepool` label.
    pub node_pool: Option<String>,
    /// `status.nodeName`.
    pub node_name: Option<String>,
    /// `status.providerID`.
    pub provider_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp` (Unix seconds).
    pub created_at: Option<i64>,
    /// `lastTransitionTime` of the `Consolidatable=True` condition.
    pub consolidatable_since: Option<i64>,
    /// A `Drifted=True` condition.
    pub drifted: bool,
    /// `lastTransitionTime` of the `Drifted=True` condition: drifted nodes
    /// are replaced earliest drift first, as Karpenter orders them.
    pub drifted_since: Option<i64>,
    /// `status.imageID`: the AMI its instance was launched with.
    pub image_id: Option<String>,
    /// `spec.expireAfter` in seconds, when set on the NodeClaim (wins over
    /// the NodePool's).
    pub expire_after_seconds: Option<u64>,
    /// `spec.terminationGracePeriod` in seconds, when set on the NodeClaim
    /// (Karpenter copies the NodePool's at launch).
    pub termination_grace_period_seconds: Option<u64>,
    /// `spec.requirements`.
    pub requirements: Requirements,
    /// `spec.taints` (its `startupTaints` are left out: they do not keep
    /// pods off a NodeClaim that has not initialized).
    pub taints: Vec<Taint>,
    /// `status.allocatable` (empty until launched).
    pub allocatable: Resources,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// Everything the scheduler needs, as read from the inputs.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// Pods with no `spec.nodeName`.
    pub pending_pods: Vec<Pod>,
    pub nodes: Vec<Node>,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<NodeClass>,
    pub daemon_sets: Vec<DaemonSet>,
    pub storage_classes: Vec<StorageClass>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub pvs: Vec<PersistentVolume>,
    pub overlays: Vec<NodeOverlay>,
    /// Instance types from a `describe-instance-types` document, replacing
    /// the embedded catalog's facts.
    pub instance_types: Option<Vec<InstanceTypeInfo>>,
    pub capacity_reservations: Vec<CapacityReservation>,
    /// PodDisruptionBudgets (read by disruption only).
    pub pdbs: Vec<PodDisruptionBudget>,
    /// `karpenter.sh/v1 NodeClaim` objects (read by disruption only).
    pub node_claims: Vec<NodeClaimObject>,
    /// EC2 instances by instance id (read by disruption's drift checks
    /// only): from a `describe-instances` document, or the pipeline's
    /// records of what it launched.
    pub instances: BTreeMap<String, InstanceFacts>,
    /// Non-fatal findings (unknown kinds skipped, ...).
    pub warnings: Vec<String>,
}

/// `namespace/name`, built by hand: asked for every pod of a plan, where
/// `format!` cost several hundred instructions a key.
pub fn namespaced_key(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_matching() {
        let s = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                ("tier".into(), Operator::In, vec!["a".into(), "b".into()]),
                ("canary".into(), Operator::DoesNotExist, vec![]),
            ],
        };
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")])));
        assert!(LabelSelector::default().matches(&labels(&[])));
    }

    #[test]
    fn tolerations() {
        let t = Taint {
            key: "gpu".into(),
            value: "true".into(),
            effect: TaintEffect::NoSchedule,
        };
        let eq = Toleration {
            key: "gpu".into(),
            operator: TolerationOperator::Equal,
            value: "true".into(),
            effect: Some(TaintEffect::NoSchedule),
        };
        assert!(eq.tolerates(&t));
        let wrong_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..eq.clone()
        };
        assert!(!wrong_effect.tolerates(&t));
        let all = Toleration {
            key: String::new(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        };
        assert!(all.tolerates(&t));
        let pref = Taint {
            effect: TaintEffect::PreferNoSchedule,
            ..t.clone()
        };
        assert!(untolerated(&[pref], &[]).is_none());
        assert!(untolerated(std::slice::from_ref(&t), &[]).is_some());
        assert!(untolerated(&[t], &[eq]).is_none());
    }
}
