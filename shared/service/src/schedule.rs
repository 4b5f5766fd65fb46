//! Schedule: on `BatchAccepted`, debounce, take the cluster's scheduling
//! lease, plan the batch with in-flight NodeClaims counted as capacity, and
//! persist the new NodeClaims (conditional writes; reservation counters in
//! the same transaction) before announcing them with `NodeClaimsPlanned`.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::catalog::Catalog;
use flotilla_core::labels;
use flotilla_core::model::{ClusterState, Node, Pod};
use flotilla_core::plan::Plan;
use flotilla_core::resources::Resources;
use flotilla_core::scheduler::{self, SchedulerOptions};
use flotilla_ports::events::{
    BatchAccepted, FlotillaEvent, NodeClaimsPlanned, NODE_CLAIMS_PER_EVENT,
};
use flotilla_ports::{Bus, Clock, Condition, Ec2, Item, PortError, Store, Write};
use serde::Serialize;

use crate::batches::update_pointer;

pub use crate::nodeclaims::{
    claim_written, node_claim_item, node_claims, update_claim, update_claim_releasing,
};
pub(crate) use crate::nodeclaims::{put_counting, SlotChange, TemplateHashes};
use crate::records::{BatchResult, NodeClaimRecord, NodeClaimState, RunningBatch, NODECLAIM_LABEL};
use crate::{codec, keys, offerings, Config, Result, ServiceError};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ScheduleOutcome {
    /// This batch is not the cluster's pending batch any more: a newer one
    /// replaced it, or it was already scheduled. Nothing to do.
    Superseded,
    /// Call again after this many milliseconds: the batching window is
    /// still open.
    Wait {
        retry_after_ms: i64,
    },
    /// Another invocation is scheduling this cluster; it announces this
    /// batch again when it finishes. Nothing to do.
    Busy,
    Scheduled(ScheduleReport),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleReport {
    pub batch_id: String,
    pub pending_pods: usize,
    /// Pods already on their way on an in-flight NodeClaim.
    pub in_flight_pods: usize,
    pub node_claims: Vec<String>,
    pub unschedulable: usize,
    pub hourly_price: f64,
}

enum Claim {
    Run(String),
    Wait(i64),
    Busy,
    Superseded,
}

/// Decide (and record) whether this invocation schedules `batch` now.
fn claim(
    p: &mut crate::records::SchedulerPointer,
    batch: &str,
    now: i64,
    config: &Config,
) -> (bool, Claim) {
    let lease_free = p.running.as_ref().is_none_or(|r| r.lease_until <= now);
    match &p.pending {
        Some(pending) if pending.batch_id == batch => {
            let idle_left = config.batch_idle_ms - (now - pending.last_at);
            let max_left = config.batch_max_ms - (now - pending.first_at);
            if idle_left > 0 && max_left > 0 {
                return (false, Claim::Wait(idle_left.min(max_left)));
            }
            if !lease_free {
                // The run in progress re-announces the pending batch when
                // it releases the lease (see `on_batch_accepted`).
                return (false, Claim::Busy);
            }
            p.pending = None;
            let run_id = format!("{batch}@{now}");
            p.running = Some(RunningBatch {
                batch_id: batch.to_string(),
                lease_until: now + config.lease_ms,
                run_id: run_id.clone(),
            });
            (true, Claim::Run(run_id))
        }
        // A redelivery of a batch whose run crashed: take it over once the
        // lease lapsed, unless a newer batch is waiting (it supersedes).
        _ if p.pending.is_none()
            && lease_free
            && p.running.as_ref().is_some_and(|r| r.batch_id == batch) =>
        {
            let run_id = p
                .running
                .as_ref()
                .map(|r| r.run_id.clone())
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| format!("{batch}@{now}"));
            p.running = Some(RunningBatch {
                batch_id: batch.to_string(),
                lease_until: now + config.lease_ms,
                run_id: run_id.clone(),
            });
            (true, Claim::Run(run_id))
        }
        _ => (false, Claim::Superseded),
    }
}

pub async fn on_batch_accepted<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    event: &BatchAccepted,
) -> Result<ScheduleOutcome> {
    let cluster = &event.cluster_id;
    let batch = &event.batch_id;
    let now = clock.now_millis();
    let decision = update_pointer(store, cluster, clock.now_secs(), |p| {
        claim(p, batch, now, config)
    })
    .await?;
    let run_id = match decision {
        Claim::Superseded => {
            tracing::info!(cluster = %cluster, batch = %batch, "batch superseded or done");
            return Ok(ScheduleOutcome::Superseded);
        }
        Claim::Wait(ms) => return Ok(ScheduleOutcome::Wait { retry_after_ms: ms }),
        Claim::Busy => return Ok(ScheduleOutcome::Busy),
        Claim::Run(run_id) => run_id,
    };
    let report = run(store, ec2, bus, clock, config, cluster, batch, &run_id).await;
    // Release the lease whatever happened. A finished run clears it; a
    // failed one leaves it lapsed (not cleared), so that the redelivery of
    // this event takes the run over with the same run id (writing the same
    // NodeClaims) instead of finding nothing to do and losing the batch.
    let finished = report.is_ok();
    let released_at = clock.now_millis();
    let waiting = update_pointer(store, cluster, clock.now_secs(), |p| {
        let waiting = p.pending.as_ref().map(|b| b.batch_id.clone());
        match p.running.as_mut() {
            Some(r) if r.batch_id == *batch && finished => {
                p.running = None;
                p.last_completed = Some(batch.clone());
                (true, waiting)
            }
            Some(r) if r.batch_id == *batch => {
                r.lease_until = r.lease_until.min(released_at);
                (true, waiting)
            }
            _ => (false, waiting),
        }
    })
    .await?;
    // A batch that arrived during this run was told we were busy.
    if let Some(next) = waiting {
        crate::batches::put_accepted(bus, cluster, &next).await?;
    }
    report.map(ScheduleOutcome::Scheduled)
}

/// Ended NodeClaims of one run carrying the same pods that [`persist`]
/// names a new one apart from (a taken-over run re-planning pods whose
/// NodeClaim's launch failed).
const MAX_NAMESAKES: u32 = 16;

/// Re-schedules of one batch after failed launches.
pub const MAX_REARMS: u32 = 3;

/// On `PodsUnschedulable` (a launch gave up): schedule the cluster's
/// newest batch again, so its pods are re-planned (the failed NodeClaim no longer
/// carries them and its offerings are in the ICE cache) without waiting for
/// the agent's next post. Does nothing when a newer batch is pending. Past
/// [`MAX_REARMS`] re-schedules, the NodeClaim's pods are reported
/// unschedulable in its batch's result, with the launch's reason (the
/// agent's next post tries them again).
pub async fn on_pods_unschedulable<S: Store, B: Bus, C: Clock>(
    store: &S,
    bus: &B,
    clock: &C,
    config: &Config,
    event: &flotilla_ports::events::PodsUnschedulable,
) -> Result<Option<String>> {
    let cluster = &event.cluster_id;
    let now = clock.now_millis();
    let mut exhausted = false;
    let rearmed = update_pointer(store, cluster, clock.now_secs(), |p| {
        exhausted = false;
        if p.pending.is_some() {
            return (false, None);
        }
        // The newest batch: one being scheduled (it may have read the
        // NodeClaim as in flight before its launch failed: it runs again
        // once done), else the last one done. Never an older batch than
        // the one running: it would supersede it.
        let Some(last) = p
            .running
            .as_ref()
            .map(|r| r.batch_id.clone())
            .or_else(|| p.last_completed.clone())
        else {
            return (false, None);
        };
        if p.rearms >= MAX_REARMS {
            exhausted = true;
            return (false, None);
        }
        p.rearms += 1;
        p.pending = Some(crate::records::PendingBatch {
            batch_id: last.clone(),
            content_hash: String::new(),
            first_at: now,
            last_at: now,
        });
        (true, Some(last))
    })
    .await?;
    if let Some(batch) = &rearmed {
        crate::batches::put_accepted(bus, cluster, batch).await?;
        tracing::info!(cluster = %cluster, batch = %batch, node_claim = %event.node_claim, "re-scheduling after a failed launch");
    } else if exhausted {
        report_launch_failure(store, clock, config, event).await?;
    }
    Ok(rearmed)
}

/// Add a failed NodeClaim's pods to its batch's result as unschedulable
/// (version-checked: a concurrent run's result wins, and this retries).
async fn report_launch_failure<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    config: &Config,
    event: &flotilla_ports::events::PodsUnschedulable,
) -> Result<()> {
    let cluster = &event.cluster_id;
    let Some((_, record)) = node_claim_item(store, cluster, &event.node_claim).await? else {
        return Ok(());
    };
    let reason = format!(
        "launch failed {} times in a row, retried with the next batch: {}",
        MAX_REARMS + 1,
        event.reason
    );
    let key = keys::result(cluster, &record.batch_id);
    for _ in 0..8 {
        let now_secs = clock.now_secs();
        let existing = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read batch result"))?
            .filter(|i| i.is_live(now_secs));
        let (mut result, condition, version, expires_at) = match &existing {
            Some(item) => (
                codec::from_json::<BatchResult>(&key.to_string(), &item.body)?,
                Condition::Version(item.version),
                item.version + 1,
                item.expires_at,
            ),
            None => (
                BatchResult {
                    batch_id: record.batch_id.clone(),
                    finished_at: clock.now_millis(),
                    pending_pods: 0,
                    node_claims: Vec::new(),
                    unschedulable: Vec::new(),
                    unschedulable_total: 0,
                    warnings: Vec::new(),
                },
                Condition::Absent { now_secs },
                0,
                Some(now_secs + config.retention_secs),
            ),
        };
        let listed: BTreeSet<String> = result
            .unschedulable
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        let new: Vec<&String> = record
            .plan
            .pods
            .iter()
            .filter(|p| !listed.contains(*p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        result.unschedulable_total += new.len();
        for pod in new {
            if result.unschedulable.len() < BatchResult::MAX_LISTED {
                result.unschedulable.push((pod.clone(), reason.clone()));
            }
        }
        result.unschedulable.sort();
        let mut item = Item::new(key.clone(), codec::to_json(&result));
        item.version = version;
        item.expires_at = expires_at;
        match store.write(Write::Put { item, condition }).await {
            Ok(()) => {
                tracing::warn!(cluster = %cluster, node_claim = %record.name, pods = record.plan.pods.len(), "launch retries exhausted: pods reported unschedulable");
                return Ok(());
            }
            Err(PortError::ConditionFailed(_)) => continue,
            Err(e) => return Err(ServiceError::port("store batch result")(e)),
        }
    }
    Err(ServiceError::port("store batch result")(
        PortError::Throttled("the batch result kept changing".into()),
    ))
}

pub use crate::cluster_state::{cluster_state, load_batch};
pub use crate::nodeclaims::{claim_name, RESERVATION_ID_LABEL};
pub(crate) use crate::nodeclaims::{new_record, reservation_totals};
pub use crate::offerings::unavailable_offerings;

/// An in-flight NodeClaim as a node the scheduler can add pods to: its
/// allocatable minus everything already planned onto it, with the pods it
/// carries that are still pending bound to it.
fn virtual_node(record: &NodeClaimRecord, carried: Vec<Pod>) -> Node {
    let mut labels: BTreeMap<String, String> = record.plan.labels.clone();
    labels.insert(labels::HOSTNAME.to_string(), record.name.clone());
    if let Some(i) = &record.instance {
        labels.insert(labels::ZONE.to_string(), i.zone.clone());
        labels.insert(labels::INSTANCE_TYPE.to_string(), i.instance_type.clone());
        labels.insert(labels::CAPACITY_TYPE.to_string(), i.capacity_type.clone());
    } else {
        if let [zone] = record.plan.zones.as_slice() {
            labels.insert(labels::ZONE.to_string(), zone.clone());
        }
        if let [ty] = record.plan.instance_types.as_slice() {
            labels.insert(labels::INSTANCE_TYPE.to_string(), ty.clone());
        }
    }
    // allocatable - requests(all planned) + requests(carried): the
    // scheduler subtracts the carried pods again. Pods that left the batch
    // keep their room reserved (conservative: never overcommit).
    let mut allocatable: Resources = record
        .plan
        .resources
        .allocatable
        .minus(&record.plan.resources.requests);
    for p in &carried {
        allocatable.add_assign(&p.requests);
    }
    Node {
        name: record.name.clone(),
        labels,
        taints: record.plan.taints.clone(),
        allocatable,
        unschedulable: false,
        pods: carried,
        ..Node::default()
    }
}

#[allow(clippy::too_many_arguments)]
async fn run<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    cluster: &str,
    batch: &str,
    run_id: &str,
) -> Result<ScheduleReport> {
    let mut state = crate::cluster_state::load(store, cluster, batch).await?;
    let now = clock.now_millis();
    let now_secs = clock.now_secs();
    let catalog: Catalog = offerings::catalog(store, ec2, clock, config, &state).await?;
    let unavailable = unavailable_offerings(store, &config.region, now_secs).await?;

    // In-flight NodeClaims: registered ones are real nodes now; the others
    // are capacity the pending pods may use, and the pods they carry are
    // not pending any more.
    let registered: BTreeSet<&str> = state
        .nodes
        .iter()
        .filter_map(|n| n.labels.get(NODECLAIM_LABEL).map(String::as_str))
        .collect();
    let mut to_register = Vec::new();
    let mut in_flight = Vec::new();
    for (item, record) in node_claims(store, cluster).await? {
        if !record.state.is_live() || record.state == NodeClaimState::Registered {
            continue;
        }
        if registered.contains(record.name.as_str()) {
            if record.state == NodeClaimState::Launched {
                to_register.push((item, record));
            }
            continue;
        }
        in_flight.push(record);
    }
    for (item, mut record) in to_register {
        record.state = NodeClaimState::Registered;
        record.updated_at = now;
        update_claim(store, &item, &record).await?;
    }
    let carried_keys: BTreeSet<&str> = in_flight
        .iter()
        .flat_map(|r| r.plan.pods.iter().map(String::as_str))
        .collect();
    let pending_total = state.pending_pods.len();
    let (carried, still_pending): (Vec<Pod>, Vec<Pod>) = std::mem::take(&mut state.pending_pods)
        .into_iter()
        .partition(|p| carried_keys.contains(p.key().as_str()));
    let in_flight_pods = carried.len();
    let mut carried_by: BTreeMap<String, Pod> = carried.into_iter().map(|p| (p.key(), p)).collect();
    for record in &in_flight {
        let pods: Vec<Pod> = record
            .plan
            .pods
            .iter()
            .filter_map(|k| carried_by.remove(k))
            .collect();
        state.nodes.push(virtual_node(record, pods));
    }
    state.pending_pods = still_pending;

    let totals = reservation_totals(store, ec2, config, &mut state, now_secs).await?;

    let in_flight_names: BTreeSet<String> = in_flight.iter().map(|r| r.name.clone()).collect();
    let pod_requests: BTreeMap<String, Resources> = state
        .pending_pods
        .iter()
        .map(|p| (p.key(), p.requests.clone()))
        .collect();
    let opts = SchedulerOptions {
        reserved_capacity: config.reserved_capacity,
        unavailable,
        ..SchedulerOptions::default()
    };
    let plan = scheduler::schedule(&state, &catalog, &opts);
    // Pods placed on in-flight NodeClaims join them (so the next batch
    // sees them carried, and their room taken).
    for placed in plan
        .existing_nodes
        .iter()
        .filter(|n| in_flight_names.contains(&n.name) && !n.pods.is_empty())
    {
        if let Some((item, mut record)) = node_claim_item(store, cluster, &placed.name).await? {
            for pod in &placed.pods {
                if !record.plan.pods.contains(pod) {
                    if let Some(r) = pod_requests.get(pod) {
                        record.plan.resources.requests.add_assign(r);
                    }
                    record.plan.pods.push(pod.clone());
                }
            }
            record.plan.pods.sort();
            record.updated_at = now;
            if !update_claim(store, &item, &record).await? {
                tracing::info!(node_claim = %placed.name, "NodeClaim changed concurrently; its new pods wait for the next batch");
            }
        }
    }
    let mut persisted = persist(
        store, cluster, batch, run_id, &plan, &state, &totals, now, now_secs,
    )
    .await?;
    let mut unschedulable: Vec<(String, String)> = plan
        .unschedulable
        .iter()
        .map(|u| (u.pod.clone(), u.reason.clone()))
        .collect();
    let mut hourly = persisted.hourly;

    // A concurrent run took the reservation first: plan those pods again
    // without it (spot / on-demand fallback).
    if !persisted.lost_reservation.is_empty() {
        let lost: BTreeSet<String> = persisted
            .lost_reservation
            .iter()
            .map(|(r, _)| r.clone())
            .collect();
        let pods: BTreeSet<String> = persisted
            .lost_reservation
            .iter()
            .flat_map(|(_, p)| p.iter().cloned())
            .collect();
        tracing::warn!(cluster = %cluster, reservations = ?lost, pods = pods.len(), "reservation taken by a concurrent run; replanning without it");
        let mut retry = state.clone();
        retry.pending_pods.retain(|p| pods.contains(&p.key()));
        for r in &mut retry.capacity_reservations {
            if lost.contains(&r.id) {
                r.available_instance_count = 0;
            }
        }
        let second = scheduler::schedule(&retry, &catalog, &opts);
        // Its NodeClaims are numbered from 0 again: name them apart.
        let retry_run = format!("{run_id}/retry");
        let again = persist(
            store, cluster, batch, &retry_run, &second, &retry, &totals, now, now_secs,
        )
        .await?;
        for (res, pods) in again.lost_reservation {
            for p in pods {
                unschedulable.push((p, format!("capacity reservation {res} was exhausted by a concurrent scheduling run; retried with the next batch")));
            }
        }
        unschedulable.extend(
            second
                .unschedulable
                .iter()
                .map(|u| (u.pod.clone(), u.reason.clone())),
        );
        persisted.names.extend(again.names);
        persisted.announce.extend(again.announce);
        hourly += again.hourly;
    }

    // Announce (ids only, in chunks).
    let events: Vec<_> = persisted
        .announce
        .chunks(NODE_CLAIMS_PER_EVENT)
        .map(|names| {
            FlotillaEvent::NodeClaimsPlanned(NodeClaimsPlanned {
                cluster_id: cluster.to_string(),
                batch_id: batch.to_string(),
                node_claims: names.to_vec(),
            })
            .to_event()
        })
        .collect();
    if !events.is_empty() {
        bus.put(events)
            .await
            .map_err(ServiceError::port("put NodeClaimsPlanned"))?;
    }

    unschedulable.sort();
    let result = BatchResult {
        batch_id: batch.to_string(),
        finished_at: clock.now_millis(),
        pending_pods: pending_total,
        node_claims: persisted.names.clone(),
        unschedulable_total: unschedulable.len(),
        unschedulable: unschedulable
            .iter()
            .take(BatchResult::MAX_LISTED)
            .cloned()
            .collect(),
        warnings: plan.warnings.iter().take(100).cloned().collect(),
    };
    let mut item = Item::new(keys::result(cluster, batch), codec::to_json(&result));
    item.expires_at = Some(now_secs + config.retention_secs);
    store
        .write(Write::Put {
            item,
            condition: Condition::Always,
        })
        .await
        .map_err(ServiceError::port("store batch result"))?;
    tracing::info!(cluster = %cluster, batch = %batch, node_claims = persisted.names.len(), unschedulable = unschedulable.len(), in_flight_pods, "batch scheduled");
    Ok(ScheduleReport {
        batch_id: batch.to_string(),
        pending_pods: pending_total,
        in_flight_pods,
        node_claims: persisted.names,
        unschedulable: unschedulable.len(),
        hourly_price: hourly,
    })
}

#[derive(Default)]
struct Persisted {
    /// Every NodeClaim of the plan now in the store.
    names: Vec<String>,
    /// Those still `Pending` (to announce).
    announce: Vec<String>,
    /// (reservation, pods) of NodeClaims whose reservation was full.
    lost_reservation: Vec<(String, Vec<String>)>,
    hourly: f64,
}

#[allow(clippy::too_many_arguments)]
async fn persist<S: Store>(
    store: &S,
    cluster: &str,
    batch: &str,
    run_id: &str,
    plan: &Plan,
    state: &ClusterState,
    totals: &BTreeMap<String, i64>,
    now: i64,
    now_secs: i64,
) -> Result<Persisted> {
    let node_class_of: BTreeMap<&str, &str> = state
        .node_pools
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.node_class.as_deref()?)))
        .collect();
    let hashes_of: BTreeMap<&str, TemplateHashes> = state
        .node_pools
        .iter()
        .map(|p| (p.name.as_str(), TemplateHashes::of(state, &p.name)))
        .collect();
    let mut out = Persisted::default();
    for planned in &plan.node_claims {
        let reservation = planned.labels.get(RESERVATION_ID_LABEL).cloned();
        let slot = || {
            reservation
                .as_deref()
                .map(|res| SlotChange::take(res, totals.get(res).copied().unwrap_or(0)))
        };
        // A NodeClaim of the same name that ended (a taken-over run with
        // this run id planned it, and its launch failed or its instance
        // went) carries none of these pods any more: name this one apart.
        for namesake in 0..=MAX_NAMESAKES {
            let run = if namesake == 0 {
                run_id.to_string()
            } else {
                format!("{run_id}#{namesake}")
            };
            let name = claim_name(&planned.name, &run, &planned.pods);
            let node_class = node_class_of.get(planned.node_pool.as_str()).copied();
            let hashes = hashes_of
                .get(planned.node_pool.as_str())
                .cloned()
                .unwrap_or_default();
            let record = new_record(cluster, batch, &name, planned, node_class, &hashes, now);
            let key = keys::node_claim(cluster, &name);
            let put = Write::Put {
                item: Item::new(key.clone(), codec::to_json(&record)),
                condition: Condition::Absent { now_secs },
            };
            match put_counting(store, put, slot()).await {
                Ok(()) => {
                    out.names.push(name.clone());
                    out.announce.push(name);
                    out.hourly += planned.price.min;
                }
                Err(PortError::ConditionFailed(_)) => {
                    // A redelivery wrote it already, an ended namesake
                    // holds the name, or the reservation is full.
                    let existing = store
                        .get(&key)
                        .await
                        .map_err(ServiceError::port("read NodeClaim"))?
                        .filter(|i| i.is_live(now_secs));
                    let Some(item) = existing else {
                        out.lost_reservation.push((
                            reservation.clone().unwrap_or_default(),
                            planned.pods.clone(),
                        ));
                        break;
                    };
                    let r: NodeClaimRecord = codec::from_json(&key.to_string(), &item.body)?;
                    if !r.state.is_live() {
                        if namesake < MAX_NAMESAKES {
                            continue;
                        }
                        return Err(ServiceError::Corrupt {
                            key: key.to_string(),
                            reason: format!(
                                "{MAX_NAMESAKES} ended NodeClaims of this run carry the same pods"
                            ),
                        });
                    }
                    out.names.push(name.clone());
                    out.hourly += planned.price.min;
                    if r.state == NodeClaimState::Pending {
                        out.announce.push(name);
                    }
                }
                Err(e) => return Err(ServiceError::port(format!("persist NodeClaim {name}"))(e)),
            }
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{PendingBatch, SchedulerPointer};

    fn pointer(batch: &str, first: i64, last: i64) -> SchedulerPointer {
        SchedulerPointer {
            pending: Some(PendingBatch {
                batch_id: batch.into(),
                content_hash: "h".into(),
                first_at: first,
                last_at: last,
            }),
            running: None,
            last_completed: None,
            rearms: 0,
        }
    }

    /// A NodeClaim holding a slot of reservation `cr-1` (counter at 1).
    fn held_claim() -> (flotilla_sim::MemStore, Item, NodeClaimRecord) {
        let record: NodeClaimRecord = serde_json::from_value(serde_json::json!({
            "name": "default-ab12cd34", "clusterId": "c", "batchId": "b",
            "state": "Launched", "nodeClass": "default", "reservation": "cr-1",
            "createdAt": 0, "updatedAt": 0,
            "plan": {
                "name": "default-ab12cd34", "nodePool": "default",
                "instanceTypes": ["m5.large"], "capacityTypes": ["reserved"],
                "zones": ["us-west-2a"], "requirements": [], "labels": {}, "taints": [],
                "resources": {"requests": {}, "allocatable": {}},
                "pods": ["default/p"],
                "price": {"min": 0.0, "instanceType": "m5.large", "zone": "us-west-2a", "capacityType": "reserved"}
            }
        }))
        .expect("record");
        let store = flotilla_sim::MemStore::new();
        let item = Item::new(keys::node_claim("c", &record.name), codec::to_json(&record));
        store.insert(item.clone());
        let mut counter = Item::new(keys::reservation("cr-1"), Vec::new());
        counter.counter = 1;
        store.insert(counter);
        (store, item, record)
    }

    #[test]
    fn an_end_gives_its_slot_back_once_even_when_the_write_is_retried_after_success() {
        use flotilla_sim::{block_on, ops, Phase};
        let (store, item, mut record) = held_claim();
        record.state = NodeClaimState::Deleted;
        store.faults().script(
            ops::STORE_TRANSACT,
            Phase::AfterEffect,
            PortError::ConditionFailed("retried after success".into()),
        );
        let ended = block_on(update_claim_releasing(&store, &item, &record, Some("cr-1")));
        assert!(matches!(ended, Ok(true)), "{ended:?}");
        let counter =
            |s: &flotilla_sim::MemStore| s.peek(&keys::reservation("cr-1")).map(|i| i.counter);
        assert_eq!(counter(&store), Some(0));
        // A second writer from the same read ends it alike: no second release.
        let again = block_on(update_claim_releasing(&store, &item, &record, Some("cr-1")));
        assert!(matches!(again, Ok(true)), "{again:?}");
        assert_eq!(counter(&store), Some(0));

        // A timeout after the effect: the write and the release both landed.
        let (store, item, _) = held_claim();
        store.faults().script(
            ops::STORE_TRANSACT,
            Phase::AfterEffect,
            PortError::Unavailable("timeout".into()),
        );
        assert!(block_on(update_claim_releasing(&store, &item, &record, Some("cr-1"))).is_err());
        assert_eq!(counter(&store), Some(0));
        let stored = store.peek(&item.key).expect("record");
        assert_eq!(stored.version, item.version + 1);

        // The counter at zero (never with a holder): the NodeClaim still ends.
        let (store, item, _) = held_claim();
        let mut zero = Item::new(keys::reservation("cr-1"), Vec::new());
        zero.counter = 0;
        store.insert(zero);
        assert!(matches!(
            block_on(update_claim_releasing(&store, &item, &record, Some("cr-1"))),
            Ok(true)
        ));
        assert_eq!(counter(&store), Some(0));
    }

    #[test]
    fn two_takes_of_the_same_bytes_have_one_loser() {
        use flotilla_sim::block_on;
        let (store, item, mut record) = held_claim();
        record.state = NodeClaimState::Launching;
        record.lease_until = Some(1);
        assert!(matches!(
            block_on(update_claim(&store, &item, &record)),
            Ok(true)
        ));
        assert!(matches!(
            block_on(update_claim(&store, &item, &record)),
            Ok(false)
        ));
    }

    #[test]
    fn debounce_waits_for_idle_then_runs_and_max_window_caps_the_wait() {
        let c = Config::default();
        let mut p = pointer("b", 0, 0);
        assert!(matches!(
            claim(&mut p, "b", 400, &c),
            (false, Claim::Wait(600))
        ));
        let (w, d) = claim(&mut p, "b", 1_000, &c);
        assert!(w && matches!(d, Claim::Run(_)));
        assert!(p.pending.is_none());
        // Batches every 500 ms: the max window (10 s) still forces a run.
        let mut p = pointer("b", 0, 9_800);
        assert!(matches!(
            claim(&mut p, "b", 9_900, &c),
            (false, Claim::Wait(100))
        ));
        assert!(matches!(
            claim(&mut p, "b", 10_000, &c),
            (true, Claim::Run(_))
        ));
    }

    #[test]
    fn older_batches_are_superseded_and_a_held_lease_makes_others_wait() {
        let c = Config::default();
        let mut p = pointer("new", 0, 0);
        assert!(matches!(
            claim(&mut p, "old", 5_000, &c),
            (false, Claim::Superseded)
        ));
        p.running = Some(RunningBatch {
            batch_id: "x".into(),
            lease_until: 60_000,
            run_id: "x@0".into(),
        });
        assert!(matches!(
            claim(&mut p, "new", 5_000, &c),
            (false, Claim::Busy)
        ));
        // Lease lapsed (crashed run): the pending batch runs.
        assert!(matches!(
            claim(&mut p, "new", 60_000, &c),
            (true, Claim::Run(_))
        ));
        // Redelivery of the running batch while its lease holds: superseded.
        assert!(matches!(
            claim(&mut p, "new", 61_000, &c),
            (false, Claim::Superseded)
        ));
        // ...and after the lease lapsed with no newer batch: taken over.
        let later = 60_000 + c.lease_ms;
        assert!(matches!(
            claim(&mut p, "new", later, &c),
            (true, Claim::Run(_))
        ));
    }

    #[test]
    fn claim_names_are_stable_unique_per_run_and_content_and_label_safe() {
        let pods = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = pods(&["default/a"]);
        assert_eq!(
            claim_name("default-0", "b1", &a),
            claim_name("default-0", "b1", &a)
        );
        assert_ne!(
            claim_name("default-0", "b1", &a),
            claim_name("default-0", "b2", &a)
        );
        // A takeover's re-plan numbers from 0 again: the same plan name with
        // other pods is another NodeClaim.
        assert_ne!(
            claim_name("default-0", "b1", &a),
            claim_name("default-0", "b1", &pods(&["default/b"]))
        );
        let long = "p".repeat(70);
        assert!(claim_name(&long, "b1", &a).len() <= 63);
    }
}
