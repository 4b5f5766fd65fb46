//! NodeClaim records in the table (`CLUSTER#<c> / NODECLAIM#<name>`):
//! reading them, and version-checked writes that take or give back a
//! capacity reservation's slot in the same transaction. Shared by the
//! stages (intake registers nodes, schedule writes, launch, sweep and
//! disrupt move and end them), so that no stage module depends on another
//! for them.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::model::ClusterState;
use flotilla_core::plan::NodeClaimPlan;
use flotilla_ports::events::{FlotillaEvent, PodsUnschedulable};
use flotilla_ports::{Bus, Condition, Ec2, Item, PortError, Store, Write};

use crate::records::{NodeClaimRecord, NodeClaimState, NODECLAIM_LABEL};
use crate::{codec, keys, Config, Result, ServiceError};

/// All NodeClaim records of a cluster.
pub async fn node_claims<S: Store>(
    store: &S,
    cluster: &str,
) -> Result<Vec<(Item, NodeClaimRecord)>> {
    let items = store
        .query(&keys::cluster_pk(cluster), keys::NODECLAIM_PREFIX)
        .await
        .map_err(ServiceError::port("query NodeClaims"))?;
    items
        .into_iter()
        .map(|item| {
            let r = codec::from_json(&item.key.to_string(), &item.body)?;
            Ok((item, r))
        })
        .collect()
}

/// One NodeClaim record and its item.
pub async fn node_claim_item<S: Store>(
    store: &S,
    cluster: &str,
    name: &str,
) -> Result<Option<(Item, NodeClaimRecord)>> {
    let key = keys::node_claim(cluster, name);
    match store
        .get(&key)
        .await
        .map_err(ServiceError::port("read NodeClaim"))?
    {
        None => Ok(None),
        Some(item) => {
            let r = codec::from_json(&key.to_string(), &item.body)?;
            Ok(Some((item, r)))
        }
    }
}

/// The item [`update_claim`] writes for `record` over `item` (the next
/// version; what a caller holds once the write succeeded).
pub fn claim_written(item: &Item, record: &NodeClaimRecord) -> Item {
    Item {
        version: item.version + 1,
        body: codec::to_json(record),
        ..item.clone()
    }
}

/// Write a NodeClaim record over `item` (version-checked). `Ok(false)`: lost
/// the race.
pub async fn update_claim<S: Store>(
    store: &S,
    item: &Item,
    record: &NodeClaimRecord,
) -> Result<bool> {
    update_claim_releasing(store, item, record, None).await
}

/// [`update_claim`], giving back the reservation slot `release` in the same
/// transaction: the NodeClaim ends (or its slot is freed) and the counter
/// drops together or not at all, so a write that times out after taking
/// effect, or a handler that dies between two writes, can never leave an
/// ended NodeClaim's slot taken (its redelivery sees the NodeClaim ended
/// and does nothing more). `Ok(false)`: the NodeClaim changed meanwhile
/// (an end finding exactly its own bytes there counts as written: the SDK
/// retried it after it took effect, or a concurrent writer ended it alike).
pub async fn update_claim_releasing<S: Store>(
    store: &S,
    item: &Item,
    record: &NodeClaimRecord,
    release: Option<&str>,
) -> Result<bool> {
    let next = claim_written(item, record);
    let put = Write::Put {
        item: next.clone(),
        condition: Condition::Version(item.version),
    };
    let failed = |e| ServiceError::port(format!("update NodeClaim {}", record.name))(e);
    // Only for ends: a concurrent writer of the same bytes did the same
    // thing; a take (`Pending → Launching`) written twice with the same
    // bytes by two launchers must still have one loser.
    let end = release.is_some() || !record.state.is_live();
    let mut release = release;
    loop {
        let slot = release.map(SlotChange::release);
        match put_counting(store, put.clone(), slot).await {
            Ok(()) => return Ok(true),
            Err(PortError::ConditionFailed(_)) => {
                // The SDK may have retried a write that had taken effect
                // (its own success fails the condition): look.
                match store.get(&item.key).await.map_err(failed)? {
                    Some(cur) if end && cur.version == next.version && cur.body == next.body => {
                        return Ok(true)
                    }
                    Some(cur) if cur.version == item.version && release.is_some() => {
                        // Unchanged: only the counter refused (already at
                        // zero, which no holder should see). End the
                        // NodeClaim anyway.
                        tracing::warn!(node_claim = %record.name, reservation = ?release, "reservation counter already at zero");
                        release = None;
                    }
                    _ => return Ok(false),
                }
            }
            Err(e) => return Err(failed(e)),
        }
    }
}

/// A reservation slot taken (`+1`, up to the reservation's size) or given
/// back (`-1`, never below zero) with a NodeClaim write.
pub(crate) struct SlotChange<'a> {
    reservation: &'a str,
    delta: i64,
    max: i64,
}

impl<'a> SlotChange<'a> {
    pub(crate) fn take(reservation: &'a str, size: i64) -> Self {
        SlotChange {
            reservation,
            delta: 1,
            max: size,
        }
    }

    pub(crate) fn release(reservation: &'a str) -> Self {
        SlotChange {
            reservation,
            delta: -1,
            max: i64::MAX,
        }
    }
}

/// `put`, and the slot change with it in one transaction (both or neither).
pub(crate) async fn put_counting<S: Store>(
    store: &S,
    put: Write,
    slot: Option<SlotChange<'_>>,
) -> std::result::Result<(), PortError> {
    match slot {
        Some(c) => {
            store
                .transact(vec![
                    put,
                    Write::Add {
                        key: keys::reservation(c.reservation),
                        delta: c.delta,
                        min: 0,
                        max: c.max,
                    },
                ])
                .await
        }
        None => store.write(put).await,
    }
}

/// Put a failed NodeClaim's `PodsUnschedulable` (the schedule stage plans
/// its pods again), then note it put. The failure is written first, so the
/// re-planning never finds the NodeClaim still carrying the pods; a put
/// that fails leaves the note unwritten for the launch's redelivery or the
/// sweep, and one put twice re-plans once more (idempotent).
pub async fn announce_failure<S: Store, B: Bus>(
    store: &S,
    bus: &B,
    cluster: &str,
    item: &Item,
    record: &mut NodeClaimRecord,
) -> Result<()> {
    if record.notes.contains_key(crate::records::DISRUPTION_NOTE) {
        // A replacement: its pods are bound where they were; the
        // disruption stage abandons its decision on seeing it failed.
        record.unannounced = false;
        update_claim(store, item, record).await?;
        return Ok(());
    }
    let reason = record.reason.as_deref().unwrap_or("launch failed");
    let ev = FlotillaEvent::PodsUnschedulable(PodsUnschedulable {
        cluster_id: cluster.to_string(),
        node_claim: record.name.clone(),
        reason: reason.chars().take(1000).collect(),
    });
    bus.put(vec![ev.to_event()])
        .await
        .map_err(ServiceError::port("put PodsUnschedulable"))?;
    record.unannounced = false;
    update_claim(store, item, record).await?;
    Ok(())
}

/// End a NodeClaim (`Deleted`) and free its reservation slot.
pub async fn end_claim<S: Store>(
    store: &S,
    item: &Item,
    record: &mut NodeClaimRecord,
    reason: &str,
    now: i64,
    retention_secs: i64,
) -> Result<bool> {
    if !record.state.can_become(NodeClaimState::Deleted) {
        return Ok(false);
    }
    record.state = NodeClaimState::Deleted;
    record.reason = Some(reason.to_string());
    record.updated_at = now;
    record.lease_until = None;
    let mut ended = item.clone();
    ended.expires_at = Some(now / 1000 + retention_secs);
    let release = record.reservation.clone();
    update_claim_releasing(store, &ended, record, release.as_deref()).await
}

/// How long a launched NodeClaim's node has to register before the sweep
/// ends it (and the disruption stage gives up on a replacement).
pub const REGISTRATION_TIMEOUT_MS: i64 = 15 * 60_000;

/// Label Karpenter puts on NodeClaims launched into a reservation.
pub const RESERVATION_ID_LABEL: &str = "karpenter.k8s.aws/capacity-reservation-id";

/// The name a planned NodeClaim is stored under: derived from the run and
/// the pods it carries, at most 63 characters (it is also a label value).
/// A redelivered or taken-over run that plans the same NodeClaim writes the
/// same name (written only if absent: nothing twice); a takeover of a run
/// that died part-way plans the remaining pods afresh, and the scheduler's
/// numbering (`default-0`, `default-1`, ...) restarts, so the pods are part
/// of the name: a different NodeClaim never collides with one already
/// written (and never passes for it).
pub fn claim_name(plan_name: &str, run_id: &str, pods: &[String]) -> String {
    let mut key = run_id.as_bytes().to_vec();
    for p in pods {
        key.push(b'\n');
        key.extend_from_slice(p.as_bytes());
    }
    let h = codec::content_hash(&key);
    let name = format!("{plan_name}-{}", &h[..8]);
    if name.len() <= 63 {
        name
    } else {
        format!("nodeclaim-{}", codec::content_hash(name.as_bytes()))
    }
}

/// What a NodeClaim is launched from, as hashes recorded on it at planning
/// time: a later change of either drifts its node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TemplateHashes {
    /// The NodePool's template hash (`karpenter.sh/nodepool-hash`).
    pub nodepool: Option<String>,
    /// The pool's EC2NodeClass's hash (`karpenter.k8s.aws/ec2nodeclass-hash`).
    pub nodeclass: Option<String>,
}

impl TemplateHashes {
    /// The current hashes of NodePool `pool` of `state` and of its node
    /// class (`None` each when unknown or not computed).
    pub fn of(state: &ClusterState, pool: &str) -> TemplateHashes {
        let Some(p) = state.node_pools.iter().find(|p| p.name == pool) else {
            return TemplateHashes::default();
        };
        let nodeclass = p
            .node_class
            .as_deref()
            .and_then(|n| state.node_classes.iter().find(|c| c.name == n))
            .and_then(|c| c.template_hash.clone());
        TemplateHashes {
            nodepool: p.template_hash.clone(),
            nodeclass,
        }
    }
}

/// A planned NodeClaim as first stored (`Pending`), under `name`, with the
/// NodePool's and EC2NodeClass's hashes at planning time (drift detection).
pub(crate) fn new_record(
    cluster: &str,
    batch: &str,
    name: &str,
    planned: &NodeClaimPlan,
    node_class: Option<&str>,
    hashes: &TemplateHashes,
    now: i64,
) -> NodeClaimRecord {
    let mut plan = planned.clone();
    plan.name = name.to_string();
    plan.labels
        .insert(NODECLAIM_LABEL.to_string(), name.to_string());
    NodeClaimRecord {
        name: name.to_string(),
        cluster_id: cluster.to_string(),
        batch_id: batch.to_string(),
        state: NodeClaimState::Pending,
        node_class: node_class.unwrap_or_default().to_string(),
        reservation: plan.labels.get(RESERVATION_ID_LABEL).cloned(),
        created_at: now,
        updated_at: now,
        lease_until: None,
        instance: None,
        reason: None,
        attempts: 0,
        notes: BTreeMap::new(),
        unannounced: false,
        nodepool_hash: hashes.nodepool.clone(),
        nodeclass_hash: hashes.nodeclass.clone(),
        plan,
    }
}

/// How many NodeClaims hold reservation `id` (creating its counter at 0).
async fn reservation_used<S: Store>(store: &S, id: &str, total: i64, now_secs: i64) -> Result<i64> {
    let key = keys::reservation(id);
    if let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read reservation counter"))?
    {
        return Ok(item.counter);
    }
    let mut item = Item::new(key, codec::to_json(&serde_json::json!({"total": total})));
    item.counter = 0;
    match store
        .write(Write::Put {
            item,
            condition: Condition::Absent { now_secs },
        })
        .await
    {
        Ok(()) | Err(PortError::ConditionFailed(_)) => Ok(0),
        Err(e) => Err(ServiceError::port("create reservation counter")(e)),
    }
}

/// Reservations: the state's own DescribeCapacityReservations documents,
/// plus what the EC2NodeClasses' capacityReservationSelectorTerms find
/// live; each reservation's `available_instance_count` is lowered to what
/// its counter leaves, so nothing is planned past it. Returns each
/// reservation's size (the bound of its counter). Nothing without the
/// ReservedCapacity gate.
pub(crate) async fn reservation_totals<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    config: &Config,
    state: &mut ClusterState,
    now_secs: i64,
) -> Result<BTreeMap<String, i64>> {
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    if config.reserved_capacity {
        let mut known: BTreeSet<String> = state
            .capacity_reservations
            .iter()
            .map(|r| r.id.clone())
            .collect();
        for nc in &state.node_classes {
            let Ok(spec) = flotilla_core::launch::nodeclass::parse_node_class(nc) else {
                continue; // its NodeClaims fail at launch, with the reason
            };
            for filters in spec.capacity_reservation_queries() {
                for r in ec2
                    .describe_capacity_reservations(&filters)
                    .await
                    .map_err(ServiceError::port("DescribeCapacityReservations"))?
                {
                    if known.insert(r.id.clone()) {
                        state.capacity_reservations.push(r);
                    }
                }
            }
        }
        for r in &mut state.capacity_reservations {
            let total = i64::from(r.total_instance_count);
            totals.insert(r.id.clone(), total);
            let used = reservation_used(store, &r.id, total, now_secs).await?;
            let left = u32::try_from((total - used).max(0)).unwrap_or(0);
            r.available_instance_count = r.available_instance_count.min(left);
        }
    }
    Ok(totals)
}
