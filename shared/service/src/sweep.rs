//! Sweep: every minute (and on EC2 notices) reconcile what the table says
//! with what EC2 runs, per cluster:
//!
//! - `Pending` NodeClaims not launched after [`REDRIVE_AFTER_MS`], and
//!   `Launching` ones whose lease lapsed, are announced again (a lost
//!   `NodeClaimsPlanned` or a crashed launch);
//! - `Launched` NodeClaims whose node has not registered after
//!   [`REGISTRATION_TIMEOUT_MS`] are terminated;
//! - NodeClaims whose instance is gone become `Deleted`;
//! - instances of this stack (tagged [`STACK_TAG`] with
//!   [`Config::stack_id`]) tagged for a cluster with no live NodeClaim are
//!   collected (leaks: a launch that lost its record): terminated at once
//!   when their node is not in the cluster, else drained through the agent
//!   first and terminated once the drain is acknowledged or the node is
//!   gone ([`collect_leaks`]). Instances of other stacks and untagged ones
//!   are never touched; a refused termination is reported
//!   ([`SweepReport::termination_errors`]) and the sweep goes on;
//! - every end frees the NodeClaim's reservation slot, once;
//! - failed NodeClaims whose `PodsUnschedulable` was not put get it put;
//! - the capacity-reservation expiry policy
//!   (`flotilla_core::reservations::expiry_actions`) turns into stored
//!   actions for the cluster agent (cordon, drain, relabel);
//! - launch templates unused for a day are deleted.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::CapacityType;
use flotilla_core::launch::launch_template::TAG_NODECLAIM;
use flotilla_core::reservations::{self, Action, ActionKind, ReservedNode};
use flotilla_ports::events::{FlotillaEvent, NodeClaimsPlanned, NODE_CLAIMS_PER_EVENT};
use flotilla_ports::{Bus, Clock, Condition, Ec2, Filter, Instance, Item, PortError, Store, Write};
use serde::Serialize;

pub use crate::actions::{store_actions, StoredAction};
pub use crate::instances::{of_this_stack, CLUSTER_ID_TAG, STACK_TAG};
use crate::nodeclaims::{
    announce_failure, end_claim, node_claims, update_claim, update_claim_releasing,
};
use crate::records::{
    InterruptionKind, InterruptionRecord, NodeClaimRecord, NodeClaimState, SchedulerPointer,
};
use crate::{codec, keys, Config, Result, ServiceError};

pub const REDRIVE_AFTER_MS: i64 = 60_000;
pub use crate::nodeclaims::REGISTRATION_TIMEOUT_MS;
/// Instances younger than this are never treated as leaked (their
/// NodeClaim's write may be in flight).
pub const LEAK_GRACE_SECS: i64 = 5 * 60;
pub const TEMPLATE_GRACE_SECS: i64 = 24 * 3600;
/// How long the agent has to drain a leaked instance's node (its drain
/// action's deadline); the instance is terminated once the agent
/// acknowledges the drain, whatever the outcome (as Karpenter's
/// `terminationGracePeriod` ends a blocked drain).
pub const LEAK_DRAIN_SECS: i64 = 10 * 60;
/// How long the sweep waits for the agent's first report of a cluster's
/// nodes (several heartbeats) before collecting the cluster's leaked
/// instances without one (a cluster whose agent is gone for good).
pub const NODES_REPORT_WAIT_MS: i64 = 10 * 60_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    pub clusters: usize,
    pub redriven: Vec<String>,
    /// `cluster/batch` re-announced with `BatchAccepted` (a scheduling run
    /// that died holding the lease, or a batch whose announcement was
    /// lost).
    pub batches_redriven: Vec<String>,
    pub registration_timeouts: Vec<String>,
    pub deleted: Vec<String>,
    pub leaked_terminated: Vec<String>,
    /// Leaked instances whose node is in the cluster, waiting for the
    /// agent's drain (`cluster/instance`).
    pub leaked_draining: Vec<String>,
    /// Terminations EC2 refused or that failed (`instance: error`): logged,
    /// tried again by the next sweep; the rest of the sweep went on.
    pub termination_errors: Vec<String>,
    pub reservations_freed: Vec<String>,
    /// Failed NodeClaims whose `PodsUnschedulable` the launch could not
    /// put, put now.
    pub announced: Vec<String>,
    pub actions: usize,
    pub templates_deleted: Vec<String>,
    /// Capacity reservation slots held by live NodeClaims when swept.
    pub reservation_slots_used: usize,
}

fn capacity_type_of(i: &Instance) -> &'static str {
    if i.lifecycle == "spot" {
        "spot"
    } else if i.capacity_reservation_id.is_some() {
        "reserved"
    } else {
        "on-demand"
    }
}

pub async fn sweep<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
) -> Result<SweepReport> {
    let mut report = SweepReport::default();
    let now = clock.now_millis();
    let now_secs = clock.now_secs();
    let clusters = store
        .query(keys::CLUSTERS, "")
        .await
        .map_err(ServiceError::port("list clusters"))?;
    let instances = ec2
        .describe_instances(&[
            Filter::new(format!("tag:{STACK_TAG}"), [config.stack_id.as_str()]),
            Filter::new("tag-key", [CLUSTER_ID_TAG]),
            Filter::new(
                "instance-state-name",
                ["pending", "running", "stopping", "stopped"],
            ),
        ])
        .await
        .map_err(ServiceError::port("DescribeInstances"))?;
    let mut by_cluster: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
    // Checked again here: whatever the filter let through, only this
    // stack's instances are ever collected.
    for i in instances.into_iter().filter(|i| of_this_stack(i, config)) {
        if let Some(c) = i.tags.get(CLUSTER_ID_TAG) {
            by_cluster.entry(c.clone()).or_default().push(i);
        }
    }
    for c in &clusters {
        report.clusters += 1;
        let cluster = c.key.sk.clone();
        let running = by_cluster.remove(&cluster).unwrap_or_default();
        sweep_cluster(
            store,
            ec2,
            bus,
            clock,
            config,
            &cluster,
            &running,
            &mut report,
        )
        .await?;
    }
    // Instances of clusters we do not know at all (registry lost): leaks,
    // collected the same way (drained first if their node is in the
    // cluster).
    for (cluster, list) in by_cluster {
        collect_leaks(
            store,
            ec2,
            config,
            &cluster,
            &list,
            &BTreeSet::new(),
            now_secs,
            &mut report,
        )
        .await?;
    }
    gc_templates(store, ec2, config, now_secs, &mut report).await?;
    let _ = now;
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
async fn sweep_cluster<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    cluster: &str,
    running: &[Instance],
    report: &mut SweepReport,
) -> Result<()> {
    let now = clock.now_millis();
    let now_secs = clock.now_secs();
    redrive_batch(store, bus, config, cluster, now, report).await?;
    let running_by_id: BTreeMap<&str, &Instance> =
        running.iter().map(|i| (i.id.as_str(), i)).collect();
    let claims = node_claims(store, cluster).await?;
    let mut redrive: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut live_names: BTreeSet<String> = BTreeSet::new();
    let mut reserved_nodes = Vec::new();
    let mut by_name: BTreeMap<String, (Item, NodeClaimRecord)> = BTreeMap::new();
    for (item, mut record) in claims {
        let name = record.name.clone();
        match record.state {
            NodeClaimState::Pending if now - record.created_at >= REDRIVE_AFTER_MS => {
                redrive
                    .entry(record.batch_id.clone())
                    .or_default()
                    .push(name.clone());
            }
            NodeClaimState::Launching if record.lease_until.is_none_or(|t| t <= now) => {
                redrive
                    .entry(record.batch_id.clone())
                    .or_default()
                    .push(name.clone());
            }
            NodeClaimState::Launched | NodeClaimState::Registered => {
                let Some(inst) = record.instance.clone() else {
                    continue;
                };
                if !running_by_id.contains_key(inst.instance_id.as_str()) {
                    // Not among the live instances: confirm it is gone.
                    let seen = ec2
                        .describe_instances(&[Filter::new(
                            "instance-id",
                            [inst.instance_id.as_str()],
                        )])
                        .await
                        .map_err(ServiceError::port("DescribeInstances"))?;
                    if seen.iter().all(|i| i.state.is_gone()) {
                        if end_claim(
                            store,
                            &item,
                            &mut record,
                            "instance terminated",
                            now,
                            config.retention_secs,
                        )
                        .await?
                        {
                            report.deleted.push(name.clone());
                        }
                        continue;
                    }
                }
                if record.state == NodeClaimState::Launched
                    && now - inst.launched_at >= REGISTRATION_TIMEOUT_MS
                {
                    let ids = std::slice::from_ref(&inst.instance_id);
                    if !terminate(ec2, ids, "node never registered", report).await {
                        // Ended by the next sweep, once terminated.
                        continue;
                    }
                    if end_claim(
                        store,
                        &item,
                        &mut record,
                        REGISTRATION_TIMEOUT_REASON,
                        now,
                        config.retention_secs,
                    )
                    .await?
                    {
                        report.registration_timeouts.push(name.clone());
                    }
                    continue;
                }
                if let Some(res) = &record.reservation {
                    reserved_nodes.push(ReservedNode {
                        name: record.node_name().to_string(),
                        node_claim: Some(name.clone()),
                        reservation_id: res.clone(),
                        ultraserver: false,
                    });
                }
            }
            NodeClaimState::Failed if record.unannounced => {
                // The launch failed it and could not say so.
                announce_failure(store, bus, cluster, &item, &mut record).await?;
                report.announced.push(name.clone());
                continue;
            }
            NodeClaimState::Failed | NodeClaimState::Deleted if item.expires_at.is_none() => {
                let mut expiring = item.clone();
                expiring.expires_at = Some(now_secs + config.retention_secs);
                update_claim(store, &expiring, &record).await?;
                continue;
            }
            _ => {}
        }
        if record.state.is_live() {
            live_names.insert(name.clone());
        }
        by_name.insert(name, (item, record));
    }
    report.reservation_slots_used += by_name
        .values()
        .filter(|(_, r)| r.state.is_live() && r.reservation.is_some())
        .count();

    collect_leaks(
        store,
        ec2,
        config,
        cluster,
        running,
        &live_names,
        now_secs,
        report,
    )
    .await?;

    // Re-announce stuck NodeClaims.
    let mut events = Vec::new();
    for (batch, names) in &redrive {
        for chunk in names.chunks(NODE_CLAIMS_PER_EVENT) {
            events.push(
                FlotillaEvent::NodeClaimsPlanned(NodeClaimsPlanned {
                    cluster_id: cluster.to_string(),
                    batch_id: batch.clone(),
                    node_claims: chunk.to_vec(),
                })
                .to_event(),
            );
        }
        report.redriven.extend(names.iter().cloned());
    }
    if !events.is_empty() {
        bus.put(events)
            .await
            .map_err(ServiceError::port("put NodeClaimsPlanned"))?;
    }

    // Reservation expiry policy.
    if !reserved_nodes.is_empty() {
        let ids: BTreeSet<&str> = reserved_nodes
            .iter()
            .map(|n| n.reservation_id.as_str())
            .collect();
        let described = ec2
            .describe_capacity_reservations(&[Filter::new("capacity-reservation-id", ids)])
            .await
            .map_err(ServiceError::port("DescribeCapacityReservations"))?;
        let actions = reservations::expiry_actions(now_secs, &described, &reserved_nodes);
        let mut for_agent = Vec::new();
        for a in actions {
            if a.kind == ActionKind::FreeReservation {
                let Some((item, record)) = a.node_claim.as_ref().and_then(|n| by_name.get_mut(n))
                else {
                    continue;
                };
                let Some(freed) = record.reservation.take() else {
                    continue;
                };
                record
                    .notes
                    .insert("reservationFreed".into(), a.reason.clone());
                record.updated_at = now;
                if update_claim_releasing(store, item, record, Some(&freed)).await? {
                    report.reservations_freed.push(record.name.clone());
                }
            } else {
                for_agent.push(a);
            }
        }
        report.actions +=
            store_actions(store, cluster, &for_agent, now_secs, config.retention_secs).await?;
    }
    Ok(())
}

/// Why a NodeClaim whose node never registered was ended: the usual cause
/// first (kubelet refused because the node role is not mapped into the
/// cluster), so the operator reading the NodeClaim knows what to check.
pub const REGISTRATION_TIMEOUT_REASON: &str = "node did not register within 15 minutes: if \
     kubelet was refused, map the node role into the cluster (an EKS access entry of type \
     EC2_LINUX, the stack's NodeAccessEntry parameter, or an aws-auth mapRoles entry; see \
     infra/README.md, \"Before the first node\"); else check that the node reaches the API server";

/// Whether `instance_id` is the instance the NodeClaim `record` launched.
fn launched_by(record: &NodeClaimRecord, instance_id: &str) -> bool {
    record
        .instance
        .as_ref()
        .is_some_and(|i| i.instance_id == instance_id)
}

/// Terminate `ids` (one call each, so that one refused instance does not
/// keep the others). A refusal or failure is logged and reported, never
/// fatal: the next sweep tries again. True if every call succeeded.
async fn terminate<E: Ec2>(ec2: &E, ids: &[String], why: &str, report: &mut SweepReport) -> bool {
    let mut all = true;
    for id in ids {
        if let Err(e) = ec2.terminate_instances(std::slice::from_ref(id)).await {
            tracing::warn!(instance = %id, error = %e, reason = why, "TerminateInstances failed; the next sweep tries again");
            report.termination_errors.push(format!("{id}: {e}"));
            all = false;
        }
    }
    all
}

/// The id of the drain action of a leaked instance (one per instance, so
/// every sweep finds the same one).
fn leak_drain_id(instance_id: &str) -> String {
    codec::content_hash(format!("leak-drain/{instance_id}").as_bytes())
}

/// Collect a cluster's leaked instances: this stack's instances (the
/// caller passes only those) without a live NodeClaim, older than
/// [`LEAK_GRACE_SECS`]. One whose node is not in the agent's last
/// [`NodesReport`](crate::reports::NodesReport) (never registered, or gone)
/// is terminated; one whose node is there gets a drain action for the
/// agent and is terminated once the agent acknowledges it (or the node
/// leaves the report). Without a report from the agent nothing is
/// collected for [`NODES_REPORT_WAIT_MS`] from the first sweep that found
/// the cluster's instances (a node we cannot see may be serving pods: a
/// table replaced under a running cluster); after that the agent is taken
/// for gone and the instances are collected.
#[allow(clippy::too_many_arguments)]
async fn collect_leaks<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    config: &Config,
    cluster: &str,
    running: &[Instance],
    live_names: &BTreeSet<String>,
    now_secs: i64,
    report: &mut SweepReport,
) -> Result<()> {
    let unclaimed: Vec<&Instance> = running
        .iter()
        .filter(|i| of_this_stack(i, config) && !i.state.is_gone())
        .filter(|i| {
            i.tags
                .get(TAG_NODECLAIM)
                .is_none_or(|n| !live_names.contains(n))
        })
        .collect();
    if unclaimed.is_empty() {
        return Ok(());
    }
    let nodes = crate::reports::nodes_report(store, cluster).await?;
    let waiting = match &nodes {
        None => {
            note_no_report(store, cluster, now_secs).await?;
            true
        }
        Some(r) => r.placeholder && now_secs * 1000 - r.at < NODES_REPORT_WAIT_MS,
    };
    let leaked: Vec<&Instance> = unclaimed
        .into_iter()
        .filter(|i| now_secs - i.launch_time >= LEAK_GRACE_SECS)
        .collect();
    if waiting {
        if !leaked.is_empty() {
            tracing::warn!(cluster = %cluster, instances = leaked.len(), "leaked instances wait for the agent's first report of the cluster's nodes");
        }
        report
            .leaked_draining
            .extend(leaked.iter().map(|i| format!("{cluster}/{}", i.id)));
        return Ok(());
    }
    let nodes = nodes.unwrap_or_default();
    for i in leaked {
        let node = i.tags.get(TAG_NODECLAIM).and_then(|c| nodes.nodes.get(c));
        let Some(node) = node else {
            tracing::warn!(cluster = %cluster, instance = %i.id, "terminating an instance without a live NodeClaim whose node is not in the cluster");
            if terminate(ec2, std::slice::from_ref(&i.id), "leaked", report).await {
                report.leaked_terminated.push(i.id.clone());
            }
            continue;
        };
        let key = keys::action(cluster, &leak_drain_id(&i.id));
        let drain = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read drain action"))?
            .filter(|a| a.is_live(now_secs));
        let acknowledged = match &drain {
            Some(item) => codec::from_json::<serde_json::Value>(&key.to_string(), &item.body)?
                .get(crate::reports::ACK_FIELD)
                .is_some(),
            None => false,
        };
        if acknowledged {
            tracing::warn!(cluster = %cluster, instance = %i.id, node = %node, "terminating a drained instance without a live NodeClaim");
            if terminate(ec2, std::slice::from_ref(&i.id), "leaked, drained", report).await {
                report.leaked_terminated.push(i.id.clone());
            }
            continue;
        }
        if drain.is_none() {
            tracing::warn!(cluster = %cluster, instance = %i.id, node = %node, "draining the node of an instance without a live NodeClaim before terminating it");
            report.actions += store_leak_drain(store, cluster, i, node, now_secs, config).await?;
        }
        report.leaked_draining.push(format!("{cluster}/{}", i.id));
    }
    Ok(())
}

/// Note (create-if-absent) that a cluster with this stack's instances has
/// no nodes report: the sweep waits [`NODES_REPORT_WAIT_MS`] from here for
/// the agent's.
async fn note_no_report<S: Store>(store: &S, cluster: &str, now_secs: i64) -> Result<()> {
    let placeholder = crate::reports::NodesReport {
        at: now_secs * 1000,
        nodes: BTreeMap::new(),
        placeholder: true,
    };
    let item = Item::new(
        keys::nodes(cluster),
        codec::gzip(&codec::to_json(&placeholder)),
    );
    match store
        .write(Write::Put {
            item,
            condition: Condition::Absent { now_secs },
        })
        .await
    {
        Ok(()) | Err(PortError::ConditionFailed(_)) => Ok(()),
        Err(e) => Err(ServiceError::port("note missing nodes report")(e)),
    }
}

/// Store the drain action of a leaked instance's node (create-if-absent).
async fn store_leak_drain<S: Store>(
    store: &S,
    cluster: &str,
    instance: &Instance,
    node: &str,
    now_secs: i64,
    config: &Config,
) -> Result<usize> {
    let deadline = now_secs + LEAK_DRAIN_SECS;
    let stored = StoredAction {
        id: leak_drain_id(&instance.id),
        action: Action {
            kind: ActionKind::Drain,
            node: node.to_string(),
            node_claim: instance.tags.get(TAG_NODECLAIM).cloned(),
            reservation_id: String::new(),
            set_labels: BTreeMap::new(),
            remove_labels: vec![],
            deadline,
            reason: format!(
                "instance {} has no live NodeClaim (leaked): drained, then terminated",
                instance.id
            ),
        },
        created_at: now_secs,
    };
    let mut item = Item::new(keys::action(cluster, &stored.id), codec::to_json(&stored));
    item.expires_at = Some(deadline + config.retention_secs);
    match store
        .write(Write::Put {
            item,
            condition: Condition::Absent { now_secs },
        })
        .await
    {
        Ok(()) => Ok(1),
        Err(PortError::ConditionFailed(_)) => Ok(0),
        Err(e) => Err(ServiceError::port("store drain action")(e)),
    }
}

/// Re-announce a cluster's batch that nobody will schedule otherwise: the
/// run holding the lease died (its lease lapsed, no clean-up ran), or a
/// pending batch's `BatchAccepted` was consumed while another run held the
/// lease and that run died before announcing it again. The schedule stage
/// is idempotent per batch, so a needless announcement costs one read.
async fn redrive_batch<S: Store, B: Bus>(
    store: &S,
    bus: &B,
    config: &Config,
    cluster: &str,
    now: i64,
    report: &mut SweepReport,
) -> Result<()> {
    let key = keys::scheduler(cluster);
    let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read scheduler pointer"))?
    else {
        return Ok(());
    };
    let p: SchedulerPointer = codec::from_json(&key.to_string(), &item.body)?;
    let stuck = match (&p.pending, &p.running) {
        (Some(b), _)
            if now - b.first_at
                >= config.batch_max_ms.max(config.batch_idle_ms) + REDRIVE_AFTER_MS =>
        {
            Some(b.batch_id.clone())
        }
        (None, Some(r)) if r.lease_until <= now => Some(r.batch_id.clone()),
        _ => None,
    };
    if let Some(batch) = stuck {
        tracing::warn!(cluster = %cluster, batch = %batch, "re-announcing a batch nobody is scheduling");
        crate::batches::put_accepted(bus, cluster, &batch).await?;
        report.batches_redriven.push(format!("{cluster}/{batch}"));
    }
    Ok(())
}

/// Delete Flotilla launch templates unused for a day.
async fn gc_templates<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    config: &Config,
    now_secs: i64,
    report: &mut SweepReport,
) -> Result<()> {
    let pk = format!("LAUNCHTEMPLATE#{}", config.region);
    let items = store
        .query(&pk, "")
        .await
        .map_err(ServiceError::port("list launch templates"))?;
    for item in items {
        let last: i64 = codec::from_json::<serde_json::Value>(&item.key.to_string(), &item.body)?
            .get("lastUsed")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0);
        if now_secs - last < TEMPLATE_GRACE_SECS {
            continue;
        }
        let name = item.key.sk.clone();
        // Delete the record first (version-checked: a launch that just used
        // the template wins, and the template stays).
        match store
            .write(Write::Delete {
                key: item.key.clone(),
                condition: Condition::Version(item.version),
            })
            .await
        {
            Ok(()) => {}
            Err(PortError::ConditionFailed(_)) => continue,
            Err(e) => return Err(ServiceError::port("delete launch template record")(e)),
        }
        ec2.delete_launch_template(&name)
            .await
            .map_err(ServiceError::port("DeleteLaunchTemplate"))?;
        report.templates_deleted.push(name);
    }
    Ok(())
}

/// An EC2 notice routed to the sweep by an EventBridge rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ec2Notice {
    /// `EC2 Spot Instance Interruption Warning`: two minutes left.
    SpotInterruption { instance_id: String },
    /// `EC2 Capacity Reservation Instance Interruption Warning` (an
    /// interruptible reservation is reclaimed): two minutes left.
    ReservationInterruption { instance_id: String },
    /// `EC2 Instance Rebalance Recommendation`.
    Rebalance { instance_id: String },
    /// `EC2 Instance State-change Notification`.
    StateChange { instance_id: String, state: String },
    /// Any capacity-reservation / capacity-block notice: run the sweep.
    Reservation,
}

impl Ec2Notice {
    /// Read an `aws.ec2` event. `None`: not one we act on.
    pub fn parse(detail_type: &str, detail: &serde_json::Value) -> Option<Ec2Notice> {
        let id = || {
            detail
                .get("instance-id")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        match detail_type {
            "EC2 Spot Instance Interruption Warning" => {
                Some(Ec2Notice::SpotInterruption { instance_id: id()? })
            }
            "EC2 Capacity Reservation Instance Interruption Warning" => {
                Some(Ec2Notice::ReservationInterruption { instance_id: id()? })
            }
            "EC2 Instance Rebalance Recommendation" => {
                Some(Ec2Notice::Rebalance { instance_id: id()? })
            }
            "EC2 Instance State-change Notification" => Some(Ec2Notice::StateChange {
                instance_id: id()?,
                state: detail.get("state")?.as_str()?.to_string(),
            }),
            t if t.contains("Capacity Reservation") || t.contains("Capacity Block") => {
                Some(Ec2Notice::Reservation)
            }
            _ => None,
        }
    }
}

/// How long an interruption note is kept (the disruption stage reads it
/// while the NodeClaim is live).
pub const INTERRUPTION_TTL_SECS: i64 = 24 * 3600;

/// Write the NodeClaim's [`InterruptionRecord`] if absent; returns the
/// deadline of the first notice (the one its actions carry).
#[allow(clippy::too_many_arguments)]
async fn note_interruption<S: Store>(
    store: &S,
    cluster: &str,
    record: &NodeClaimRecord,
    instance_id: &str,
    kind: InterruptionKind,
    now_secs: i64,
    deadline: i64,
) -> Result<i64> {
    let key = keys::interrupted(cluster, &record.name);
    let note = InterruptionRecord {
        node_claim: record.name.clone(),
        instance_id: instance_id.to_string(),
        kind,
        at: now_secs,
        deadline,
    };
    let mut item = Item::new(key.clone(), codec::to_json(&note));
    item.expires_at = Some(now_secs + INTERRUPTION_TTL_SECS);
    match store
        .write(Write::Put {
            item,
            condition: Condition::Absent { now_secs },
        })
        .await
    {
        Ok(()) => Ok(deadline),
        Err(PortError::ConditionFailed(_)) => {
            let existing = store
                .get(&key)
                .await
                .map_err(ServiceError::port("read interruption note"))?
                .filter(|i| i.is_live(now_secs));
            match existing {
                Some(item) => {
                    let first: InterruptionRecord = codec::from_json(&key.to_string(), &item.body)?;
                    if first.kind == InterruptionKind::Rebalance
                        && kind != InterruptionKind::Rebalance
                    {
                        // A rebalance recommendation, then the interruption
                        // itself: the interruption's note and deadline win.
                        let mut next = item.clone();
                        next.version = item.version + 1;
                        next.body = codec::to_json(&note);
                        match store
                            .write(Write::Put {
                                item: next,
                                condition: Condition::Version(item.version),
                            })
                            .await
                        {
                            Ok(()) => return Ok(deadline),
                            Err(PortError::ConditionFailed(_)) => {}
                            Err(e) => return Err(ServiceError::port("write interruption note")(e)),
                        }
                    }
                    Ok(first.deadline)
                }
                None => Ok(deadline),
            }
        }
        Err(e) => Err(ServiceError::port("write interruption note")(e)),
    }
}

/// React to one EC2 notice.
pub async fn on_ec2_notice<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    notice: &Ec2Notice,
) -> Result<SweepReport> {
    let (instance_id, spot, interrupted, state) = match notice {
        Ec2Notice::Reservation => return sweep(store, ec2, bus, clock, config).await,
        Ec2Notice::SpotInterruption { instance_id } => (instance_id, true, true, None),
        Ec2Notice::ReservationInterruption { instance_id } => (instance_id, false, true, None),
        Ec2Notice::Rebalance { instance_id } => (instance_id, false, false, None),
        Ec2Notice::StateChange { instance_id, state } => {
            (instance_id, false, false, Some(state.as_str()))
        }
    };
    let mut report = SweepReport::default();
    let found = ec2
        .describe_instances(&[Filter::new("instance-id", [instance_id.as_str()])])
        .await
        .map_err(ServiceError::port("DescribeInstances"))?;
    let Some(inst) = found.into_iter().next() else {
        return Ok(report);
    };
    let (Some(cluster), Some(claim)) =
        (inst.tags.get(CLUSTER_ID_TAG), inst.tags.get(TAG_NODECLAIM))
    else {
        return Ok(report); // not ours
    };
    if inst.tags.contains_key(STACK_TAG) && !of_this_stack(&inst, config) {
        return Ok(report); // another stack's, whatever NodeClaim name it carries
    }
    let now = clock.now_millis();
    let now_secs = clock.now_secs();
    let Some((item, mut record)) =
        crate::nodeclaims::node_claim_item(store, cluster, claim).await?
    else {
        return Ok(report);
    };
    if !of_this_stack(&inst, config) && !launched_by(&record, &inst.id) {
        // Untagged and not the instance this NodeClaim launched: not ours,
        // though it names one of our NodeClaims. (An untagged instance that
        // is exactly the NodeClaim's own was launched before the stack tag
        // existed: its interruption is handled like any other.)
        return Ok(report);
    }
    if spot {
        // Karpenter marks the interrupted offering unavailable too.
        let mut ice = Item::new(
            keys::ice(
                &config.region,
                &inst.instance_type,
                &inst.zone,
                CapacityType::Spot.as_str(),
            ),
            Vec::new(),
        );
        ice.expires_at =
            Some(now_secs + i64::try_from(flotilla_core::launch::ICE_TTL_SECONDS).unwrap_or(45));
        store
            .write(Write::Put {
                item: ice,
                condition: Condition::Always,
            })
            .await
            .map_err(ServiceError::port("write ICE entry"))?;
    }
    match state {
        Some("shutting-down" | "terminated") => {
            if end_claim(
                store,
                &item,
                &mut record,
                &format!("instance {}", state.unwrap_or("")),
                now,
                config.retention_secs,
            )
            .await?
            {
                report.deleted.push(record.name.clone());
            }
        }
        Some(_) => {}
        None => {
            let reason = if spot {
                "spot interruption: EC2 reclaims the instance in 2 minutes"
            } else if interrupted {
                "capacity reservation interruption: EC2 reclaims the instance in 2 minutes"
            } else {
                "EC2 rebalance recommendation: elevated interruption risk"
            };
            let kind = if spot {
                InterruptionKind::Spot
            } else if interrupted {
                InterruptionKind::Reservation
            } else {
                InterruptionKind::Rebalance
            };
            let deadline = if interrupted {
                now_secs + 120
            } else {
                now_secs + 600
            };
            // Recorded once per NodeClaim (the disruption stage launches
            // its replacement at once); a redelivered notice finds it and
            // stores the same actions (same deadline, same ids): nothing
            // twice.
            let deadline =
                note_interruption(store, cluster, &record, &inst.id, kind, now_secs, deadline)
                    .await?;
            let mk = |kind| Action {
                kind,
                node: record.node_name().to_string(),
                node_claim: Some(record.name.clone()),
                reservation_id: record.reservation.clone().unwrap_or_default(),
                set_labels: BTreeMap::new(),
                remove_labels: vec![],
                deadline,
                reason: format!("{reason} ({}, {})", inst.id, capacity_type_of(&inst)),
            };
            let actions = if interrupted {
                vec![mk(ActionKind::Cordon), mk(ActionKind::Drain)]
            } else {
                vec![mk(ActionKind::Cordon)]
            };
            report.actions +=
                store_actions(store, cluster, &actions, now_secs, config.retention_secs).await?;
        }
    }
    Ok(report)
}
