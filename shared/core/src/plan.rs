//! The provisioning decision: the public `flotilla plan -o json` format.
//!
//! Stability: fields are only ever added. Field names are camelCase, lists
//! are in a deterministic order (NodeClaims in creation order, pods sorted by
//! `namespace/name` within each NodeClaim, unschedulable pods by key).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::catalog::CapacityType;
use crate::model::Taint;
use crate::requirements::NodeSelectorRequirement;
use crate::resources::Resources;

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub node_claims: Vec<NodeClaimPlan>,
    pub existing_nodes: Vec<ExistingNodePlan>,
    pub unschedulable: Vec<Unschedulable>,
    pub summary: Summary,
    /// Non-fatal findings (e.g. a pod's PersistentVolumeClaim missing from
    /// the inputs). Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Capacity reservations the NodePools could launch into (ReservedCapacity
    /// gate on), sorted by id: how many of their instances were available to
    /// this run and how many NodeClaims the plan launches into each (the
    /// service takes exactly `used` from each reservation's counter).
    /// Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<ReservationUse>,
}

/// Use of one capacity reservation by a plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationUse {
    /// `cr-...`
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// `default` (ODCR) or `capacity-block`.
    pub reservation_type: String,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    /// Instances the run could launch into it (AvailableInstanceCount,
    /// capped by the reservation counter).
    pub available: u32,
    /// NodeClaims of this plan launching into it (never more than `available`).
    pub used: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimPlan {
    /// Deterministic name: `<nodepool>-<n>`.
    pub name: String,
    pub node_pool: String,
    /// Every instance type that can run this NodeClaim, cheapest first.
    /// (Shared between NodeClaims with the same list: a 50,000-pod plan
    /// would otherwise hold millions of copies of the same names.)
    pub instance_types: crate::instance_type_names::InstanceTypeNames,
    pub capacity_types: Vec<CapacityType>,
    pub zones: Vec<String>,
    pub requirements: Vec<NodeSelectorRequirement>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Taints the node starts with that pods need not tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// The NodeClaim's annotations: the NodePool template's, and
    /// `karpenter.sh/nodeclaim-min-values-relaxed` (`"true"` when the
    /// BestEffort `minValues` policy lowered a `minValues`) for a NodePool
    /// with `minValues`. Omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub resources: NodeClaimResources,
    pub pods: Vec<String>,
    pub price: Price,
    /// USD/hour of the node's EBS volumes (its EC2NodeClass's
    /// `blockDeviceMappings`, else its AMI family's defaults; see
    /// `catalog::ebs`), on top of `price.min`, rounded to 1e-6. Added after the first
    /// release: 0 when read from a record written before it.
    #[serde(default)]
    pub volume_price: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimResources {
    /// Sum of pod requests plus daemonset overhead.
    pub requests: Resources,
    /// Allocatable of the cheapest compatible instance type.
    pub allocatable: Resources,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    /// USD/hour of the cheapest compatible offering.
    pub min: f64,
    /// The offering behind `min`.
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExistingNodePlan {
    pub name: String,
    /// Pending pods placed on this node.
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Pending pods considered.
    pub pods: usize,
    /// Pods placed on existing nodes or new NodeClaims.
    pub scheduled: usize,
    pub node_claims: usize,
    /// Sum of `price.min` over NodeClaims, USD/hour (instances only).
    pub hourly_price: f64,
    /// Sum of `volumePrice` over NodeClaims, USD/hour.
    pub volume_hourly_price: f64,
    /// What the NodeClaims cost, USD/hour: `hourlyPrice` plus
    /// `volumeHourlyPrice`. The scheduler minimises this.
    pub total_hourly_price: f64,
}

impl Plan {
    /// A human-readable rendering of the same information.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if !self.node_claims.is_empty() {
            let _ = writeln!(
                out,
                "{:<24} {:<14} {:<16} {:<12} {:<12} {:>9} {:>5}  ALTERNATIVES",
                "NODECLAIM", "NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/HOUR", "PODS"
            );
            for nc in &self.node_claims {
                let alts = nc.instance_types.len().saturating_sub(1);
                let _ = writeln!(
                    out,
                    "{:<24} {:<14} {:<16} {:<12} {:<12} {:>9.4} {:>5}  {}",
                    nc.name,
                    nc.node_pool,
                    nc.price.instance_type,
                    nc.price.zone,
                    nc.price.capacity_type.as_str(),
                    nc.price.min,
                    nc.pods.len(),
                    if alts == 0 {
                        "-".to_string()
                    } else {
                        format!("+{alts} types")
                    }
                );
            }
        }
        for n in &self.existing_nodes {
            let _ = writeln!(out, "existing node {}: {} pod(s)", n.name, n.pods.len());
        }
        if !self.reservations.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<24} {:<16} {:<12} {:<15} {:<9} {:>5} / AVAILABLE",
                "RESERVATION", "INSTANCE TYPE", "ZONE", "TYPE", "MATCH", "USED"
            );
            for r in &self.reservations {
                let _ = writeln!(
                    out,
                    "{:<24} {:<16} {:<12} {:<15} {:<9} {:>5} / {}{}",
                    r.id,
                    r.instance_type,
                    r.zone,
                    r.reservation_type,
                    r.instance_match_criteria,
                    r.used,
                    r.available,
                    if r.available > 0 && r.used == r.available {
                        "  (exhausted)"
                    } else {
                        ""
                    }
                );
            }
        }
        if !self.unschedulable.is_empty() {
            let _ = writeln!(out, "\nUNSCHEDULABLE");
            for u in &self.unschedulable {
                let _ = writeln!(out, "  {}: {}", u.pod, u.reason);
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "\n{} pending pod(s): {} scheduled, {} unschedulable; {} new NodeClaim(s) at ${:.4}/hour \
             (+ ${:.4}/hour EBS volumes)",
            s.pods,
            s.scheduled,
            s.pods - s.scheduled,
            s.node_claims,
            s.hourly_price,
            s.volume_hourly_price
        );
        out
    }
}
