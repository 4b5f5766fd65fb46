//! Disruption: every minute (its own Lambda on the EventBridge schedule),
//! per registered cluster, carry the decisions in flight one step further,
//! then take the new decisions of `flotilla_core::disruption::disrupt` on
//! the cluster's newest stored state and start them. Karpenter's way:
//!
//! ```text
//! Replacing ──▶ Draining ──▶ Terminating ──▶ Done
//!     │            │
//!     └────────────┴──▶ Abandoned (untaint)
//! ```
//!
//! - `Replacing`: the replacement NodeClaims are written `Pending` (the
//!   schedule stage's record, reservation counter in the same transaction)
//!   and announced with `NodeClaimsPlanned`: the launch stage launches them.
//!   Once every one is `Registered` and its node, in the newest cluster
//!   state the agent posted, is Ready and initialized (no startup or
//!   ephemeral taint left: `flotilla_core::disruption::readiness`): taint
//!   and drain.
//! - `Draining`: `Taint` (`karpenter.sh/disrupted:NoSchedule`) and `Drain`
//!   actions are stored for the agent (deadline: the NodePool's
//!   `terminationGracePeriod`, else [`DEFAULT_DRAIN_SECS`]). A node is
//!   drained when the agent acknowledged its drain, or it left the agent's
//!   nodes report.
//! - `Terminating`: the instance is terminated (only this stack's) and the
//!   NodeClaim ended `Deleted`, its reservation slot released in the same
//!   transaction.
//! - `Abandoned`: a replacement failed or was not ready in time, or a
//!   graceful drain was refused without a grace period: tainted nodes get
//!   `Untaint` actions; launched replacements stay (empty, they are
//!   consolidated by a later decision).
//!
//! Forceful decisions (`Expired`, `Interrupted`) taint and drain at once,
//! with their replacements launching alongside, and terminate at the
//! deadline even when the drain is blocked.
//!
//! Idempotency: a decision's id is a content hash of (reason, nodes,
//! replacements); its record is written only if absent together with one
//! `DISRUPTING#<node>` marker per node (one transaction), so a redelivered
//! run writes nothing twice and two overlapping runs never start two
//! decisions for one node. Every later change is a version-checked write;
//! actions, replacement NodeClaims and terminations are idempotent. See
//! `docs/pipeline.md`, "Disruption".

use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::disruption::{self as engine, hash, DisruptOptions};
use flotilla_core::labels;
use flotilla_core::model::{
    ClusterState, DisruptionReason, InstanceFacts, NodeClaimObject, NodeClassStatus,
};
use flotilla_core::plan::NodeClaimPlan;
use flotilla_core::reservations::{Action, ActionKind};
use flotilla_core::scheduler::SchedulerOptions;
use flotilla_ports::events::{FlotillaEvent, NodeClaimsPlanned, NODE_CLAIMS_PER_EVENT};
use flotilla_ports::{Bus, Clock, Condition, Ec2, Filter, Item, PortError, Store, Write};
use serde::Serialize;

use crate::actions::StoredAction;
use crate::instances::of_this_stack;
use crate::nodeclaims::{
    claim_name, new_record, node_claims, put_counting, reservation_totals, SlotChange,
    TemplateHashes,
};
use crate::nodeclaims::{end_claim, REGISTRATION_TIMEOUT_MS};
use crate::offerings::unavailable_offerings;
use crate::records::{
    DisruptedNode, DisruptingMarker, DisruptionRecord, DisruptionState, InterruptionKind,
    InterruptionRecord, NodeClaimRecord, NodeClaimState, NodeTime, NodeTimes, Replacement,
    NODECLAIM_LABEL, REPLACE_ON_REBALANCE,
};
use crate::reports::{AckOutcome, AckRecord, NodesReport, ACK_FIELD};
use crate::{cluster_state, codec, keys, offerings, Config, Result, ServiceError};

mod replacements;

/// How long a graceful decision without `terminationGracePeriod` lets the
/// agent drain (its drain action's deadline). A drain the agent reports
/// failed (pods a PodDisruptionBudget kept) abandons the decision.
pub const DEFAULT_DRAIN_SECS: i64 = 15 * 60;
/// An interrupted node's drain deadline: EC2 reclaims it after 2 minutes.
pub const INTERRUPTION_DRAIN_SECS: i64 = 120;
/// An expired node's drain deadline without `terminationGracePeriod`
/// (forceful: terminated at the deadline, drained or not).
pub const EXPIRED_DRAIN_SECS: i64 = 60 * 60;
/// How long replacements may take to register and become Ready before a
/// graceful decision is abandoned (the sweep's registration timeout, plus
/// the launch).
pub const REPLACEMENT_TIMEOUT_MS: i64 = REGISTRATION_TIMEOUT_MS + 5 * 60_000;
/// Decisions are taken only on a cluster state the agent posted this
/// recently (it posts at least every minute): never on a stale view.
pub const MAX_STATE_AGE_MS: i64 = 10 * 60_000;
/// Nodes of one decision: its record and markers are one transaction
/// (DynamoDB: at most 100 items). The engine cuts its decisions to this
/// size (it was 90 here while the engine took up to 99: decisions of
/// 91-99 nodes were refused every run).
pub const MAX_NODES_PER_DECISION: usize = engine::MAX_DECISION_NODES;
const _: () = assert!(MAX_NODES_PER_DECISION < flotilla_ports::MAX_TRANSACT_WRITES);

/// What one disruption run did, per cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptReport {
    pub clusters: Vec<ClusterDisruptReport>,
}

impl DisruptReport {
    /// The first cluster's error, if any cluster failed.
    pub fn first_error(&self) -> Option<&str> {
        self.clusters
            .iter()
            .find_map(|c| c.errors.first())
            .map(String::as_str)
    }
}

/// One cluster's part of a [`DisruptReport`]. Names are decision ids,
/// NodeClaim names or node names as the field says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDisruptReport {
    pub cluster_id: String,
    /// Decisions written by this run (decision ids).
    pub started: Vec<String>,
    /// Replacement NodeClaims written and announced.
    pub replacements_launched: Vec<String>,
    /// Nodes a taint action was stored for.
    pub tainted: Vec<String>,
    /// Nodes a drain action was stored for.
    pub drained: Vec<String>,
    /// Instances terminated (`node/instance`).
    pub terminated: Vec<String>,
    /// Decisions finished (`Done`).
    pub completed: Vec<String>,
    /// Decisions given up (a replacement failed or never registered, or a
    /// graceful drain was refused).
    pub abandoned: Vec<String>,
    /// Nodes given back (`Untaint` stored) by abandoned decisions.
    pub untainted: Vec<String>,
    /// Candidates the engine reported blocked.
    pub blocked: usize,
    /// Nodes the engine proposed that the pipeline does not own (no live
    /// NodeClaim record of ours): reported, never disrupted.
    pub not_owned: Vec<String>,
    /// Decisions another run started first (same id or a node already
    /// taken): nothing written.
    pub lost_races: usize,
    /// Why no new decision was taken, when none could be (no state yet, a
    /// stale state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Errors (the run goes on with the next cluster; the next run tries
    /// again).
    pub errors: Vec<String>,
}

/// Run the disruption stage over every registered cluster. A cluster that
/// fails is reported in its `errors` and the run goes on with the others.
pub async fn disrupt<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
) -> Result<DisruptReport> {
    let clusters = store
        .query(keys::CLUSTERS, "")
        .await
        .map_err(ServiceError::port("list clusters"))?;
    let mut report = DisruptReport::default();
    for c in &clusters {
        let cluster = c.key.sk.clone();
        let mut r = ClusterDisruptReport {
            cluster_id: cluster.clone(),
            ..ClusterDisruptReport::default()
        };
        if let Err(e) = disrupt_cluster(store, ec2, bus, clock, config, &cluster, &mut r).await {
            tracing::warn!(cluster = %cluster, error = %e, "disruption run failed; the next run tries again");
            r.errors.push(e.to_string());
        }
        report.clusters.push(r);
    }
    Ok(report)
}

/// The cluster's live decisions (items and records).
pub async fn decisions<S: Store>(
    store: &S,
    cluster: &str,
    now_secs: i64,
) -> Result<Vec<(Item, DisruptionRecord)>> {
    store
        .query(&keys::cluster_pk(cluster), keys::DISRUPTION_PREFIX)
        .await
        .map_err(ServiceError::port("query disruptions"))?
        .into_iter()
        .filter(|i| i.is_live(now_secs))
        .map(|item| {
            let r = codec::from_json(&item.key.to_string(), &item.body)?;
            Ok((item, r))
        })
        .collect()
}

/// Everything one step of a decision reads.
struct Env<'a> {
    cluster: &'a str,
    config: &'a Config,
    now: i64,
    now_secs: i64,
    claims: &'a BTreeMap<String, (Item, NodeClaimRecord)>,
    nodes: Option<&'a NodesReport>,
    /// NodeClaims whose node is Ready and initialized in the newest state.
    ready: &'a BTreeSet<String>,
}

#[allow(clippy::too_many_arguments)]
async fn disrupt_cluster<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    cluster: &str,
    report: &mut ClusterDisruptReport,
) -> Result<()> {
    let now = clock.now_millis();
    let now_secs = clock.now_secs();
    let claims: BTreeMap<String, (Item, NodeClaimRecord)> = node_claims(store, cluster)
        .await?
        .into_iter()
        .filter(|(i, _)| i.is_live(now_secs))
        .map(|(i, r)| (r.name.clone(), (i, r)))
        .collect();
    let nodes = crate::reports::nodes_report(store, cluster)
        .await?
        .filter(|r| !r.placeholder);
    let loaded = cluster_state::latest(store, cluster).await?;
    let ready = loaded
        .as_ref()
        .map(|l| ready_claims(&l.state))
        .unwrap_or_default();
    let env = Env {
        cluster,
        config,
        now,
        now_secs,
        claims: &claims,
        nodes: nodes.as_ref(),
        ready: &ready,
    };

    // 1. The decisions in flight, one step each.
    let mut in_flight: Vec<DisruptionRecord> = Vec::new();
    for (item, record) in decisions(store, cluster, now_secs).await? {
        if record.state.is_final() {
            continue;
        }
        let record = advance(store, ec2, bus, &env, item, record, report).await?;
        if !record.state.is_final() {
            in_flight.push(record);
        }
    }
    gc_markers(store, cluster, &in_flight, now_secs).await?;

    // 2. New decisions, on a recent state only.
    let Some(loaded) = loaded else {
        report.skipped = Some("no cluster state stored yet".into());
        return Ok(());
    };
    if now - loaded.accepted_at > MAX_STATE_AGE_MS {
        report.skipped = Some(format!(
            "the newest cluster state (batch {}) is {} s old; decisions wait for a fresher one",
            loaded.batch_id,
            (now - loaded.accepted_at) / 1000
        ));
        return Ok(());
    }
    let batch_id = loaded.batch_id.clone();
    let mut state = loaded.state;
    let since = node_times(store, cluster, &state, loaded.accepted_at / 1000, now_secs).await?;
    add_node_claims(&mut state, &claims);
    resolve_statuses(
        store, ec2, cluster, &batch_id, &mut state, &claims, now_secs,
    )
    .await?;
    let interrupted = interrupted_nodes(store, cluster, &state, &claims, now_secs).await?;
    let mut disrupting: BTreeMap<String, DisruptionReason> = BTreeMap::new();
    for d in &in_flight {
        for n in d.node_names() {
            disrupting.insert(n.to_string(), d.reason);
        }
    }
    let catalog = offerings::catalog(store, ec2, clock, config, &state).await?;
    let unavailable = unavailable_offerings(store, &config.region, now_secs).await?;
    let totals = reservation_totals(store, ec2, config, &mut state, now_secs).await?;
    let opts = DisruptOptions {
        now: now_secs,
        scheduler: SchedulerOptions {
            reserved_capacity: config.reserved_capacity,
            unavailable,
            now: Some(now_secs),
            ..SchedulerOptions::default()
        },
        since,
        disrupting,
        interrupted,
        nominated: nominated_nodes(&state, &claims, &in_flight),
    };
    let out = engine::disrupt(&state, &catalog, &opts);
    report.blocked += out.blocked.len();

    // 3. Start them (ours only).
    for decision in &out.decisions {
        let Some(nodes) = owned_nodes(&state, &claims, &decision.nodes) else {
            tracing::info!(cluster = %cluster, nodes = ?decision.nodes, reason = decision.reason.as_str(), "decision over nodes the pipeline did not launch: reported, not carried out");
            report.not_owned.extend(decision.nodes.iter().cloned());
            continue;
        };
        if nodes.len() > MAX_NODES_PER_DECISION {
            report.errors.push(format!(
                "a decision over {} nodes exceeds {MAX_NODES_PER_DECISION}: not started",
                nodes.len()
            ));
            continue;
        }
        let (record, plans) = new_decision(&env, &batch_id, &state, &totals, decision, nodes);
        if !start(store, &env, &record, plans).await? {
            report.lost_races += 1;
            continue;
        }
        tracing::info!(cluster = %cluster, decision = %record.id, reason = record.reason.as_str(), nodes = ?decision.nodes, replacements = record.replacement_names.len(), "disruption started");
        report.started.push(record.id.clone());
        let item = decision_item(&env, &record);
        advance(store, ec2, bus, &env, item, record, report).await?;
    }
    Ok(())
}

/// The decision id: a content hash of (reason, sorted nodes, replacement
/// names as the engine planned them).
pub fn decision_id(reason: DisruptionReason, nodes: &[String], replacements: &[String]) -> String {
    let mut nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    let mut key = format!("{}\n", reason.as_str());
    for n in nodes {
        key.push_str("node:");
        key.push_str(n);
        key.push('\n');
    }
    for r in replacements {
        key.push_str("replacement:");
        key.push_str(r);
        key.push('\n');
    }
    codec::content_hash(key.as_bytes())
}

/// The nodes of a decision with their NodeClaims, if every one is a node
/// the pipeline launched (a live NodeClaim record whose registered node it
/// is); `None` otherwise.
fn owned_nodes(
    state: &ClusterState,
    claims: &BTreeMap<String, (Item, NodeClaimRecord)>,
    names: &[String],
) -> Option<Vec<DisruptedNode>> {
    let mut out = Vec::new();
    for name in names {
        let node = state.nodes.iter().find(|n| &n.name == name)?;
        let claim = node.labels.get(NODECLAIM_LABEL)?;
        let (_, record) = claims.get(claim)?;
        if !record.state.is_live() || record.node_name() != name {
            return None;
        }
        out.push(DisruptedNode {
            node: name.clone(),
            node_claim: record.name.clone(),
            instance_id: record.instance.as_ref().map(|i| i.instance_id.clone()),
        });
    }
    Some(out)
}

/// A new decision's record (`Replacing`), its replacements under their
/// stored names, and the items that store their plans.
fn new_decision(
    env: &Env<'_>,
    batch_id: &str,
    state: &ClusterState,
    totals: &BTreeMap<String, i64>,
    d: &engine::Decision,
    nodes: Vec<DisruptedNode>,
) -> (DisruptionRecord, Vec<Item>) {
    let planned: Vec<String> = d.replacements.iter().map(|r| r.name.clone()).collect();
    let id = decision_id(d.reason, &d.nodes, &planned);
    let run = format!("disruption-{}", &id[..16.min(id.len())]);
    let plans: Vec<Replacement> = d
        .replacements
        .iter()
        .map(|plan| {
            let pool = state.node_pools.iter().find(|p| p.name == plan.node_pool);
            let name = claim_name(&plan.name, &run, &plan.pods);
            let mut plan: NodeClaimPlan = plan.clone();
            plan.name = name.clone();
            plan.labels.insert(NODECLAIM_LABEL.to_string(), name);
            let reservation_size = plan
                .labels
                .get(crate::nodeclaims::RESERVATION_ID_LABEL)
                .map(|r| totals.get(r).copied().unwrap_or(0));
            let hashes = TemplateHashes::of(state, &plan.node_pool);
            Replacement {
                plan,
                node_class: pool.and_then(|p| p.node_class.clone()).unwrap_or_default(),
                nodepool_hash: hashes.nodepool,
                nodeclass_hash: hashes.nodeclass,
                reservation_size,
            }
        })
        .collect();
    let (stored, items) = if plans.is_empty() {
        (None, vec![])
    } else {
        let (at, items) = replacements::stored(env.cluster, &id, &plans, env.now_secs);
        (Some(at), items)
    };
    let record = DisruptionRecord {
        id,
        cluster_id: env.cluster.to_string(),
        batch_id: batch_id.to_string(),
        reason: d.reason,
        node_pool: d.node_pool.clone(),
        nodes,
        replacement_names: plans.iter().map(|r| r.plan.name.clone()).collect(),
        replacement_plans: stored,
        replacements: vec![],
        state: DisruptionState::Replacing,
        price_before: d.price.before,
        price_after: d.price.after,
        grace_seconds: d.termination_grace_period_seconds,
        created_at: env.now,
        updated_at: env.now,
        drain_started: None,
        deadline: None,
        tainted: false,
        outcome: None,
    };
    (record, items)
}

fn decision_item(env: &Env<'_>, record: &DisruptionRecord) -> Item {
    Item::new(
        keys::disruption(env.cluster, &record.id),
        codec::to_json(record),
    )
}

/// Write a new decision's replacement plans, then the decision and its
/// per-node markers, all or nothing. `false`: another run started it (or
/// another decision over one of its nodes).
async fn start<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
    plans: Vec<Item>,
) -> Result<bool> {
    replacements::write(store, plans).await?;
    let mut writes = vec![Write::Put {
        item: decision_item(env, record),
        condition: Condition::Absent {
            now_secs: env.now_secs,
        },
    }];
    for n in &record.nodes {
        let marker = DisruptingMarker {
            decision: record.id.clone(),
            reason: record.reason,
        };
        writes.push(Write::Put {
            item: Item::new(
                keys::disrupting(env.cluster, &n.node),
                codec::to_json(&marker),
            ),
            condition: Condition::Absent {
                now_secs: env.now_secs,
            },
        });
    }
    match store.transact(writes).await {
        Ok(()) => Ok(true),
        Err(PortError::ConditionFailed(_)) => {
            // Our own write retried after it took effect looks the same as
            // a lost race: look.
            let key = keys::disruption(env.cluster, &record.id);
            let existing = store
                .get(&key)
                .await
                .map_err(ServiceError::port("read disruption"))?;
            Ok(existing.is_some_and(|i| {
                i.version == 1
                    && codec::from_json::<DisruptionRecord>(&key.to_string(), &i.body)
                        .is_ok_and(|r| r.created_at == record.created_at)
            }))
        }
        Err(e) => Err(ServiceError::port("start disruption")(e)),
    }
}

/// Write `record` over `item` (version-checked). `None`: it changed
/// meanwhile (another run moved it; this one leaves it).
async fn update<S: Store>(
    store: &S,
    env: &Env<'_>,
    item: &Item,
    record: &DisruptionRecord,
) -> Result<Option<Item>> {
    let mut next = item.clone();
    next.version = item.version + 1;
    next.body = codec::to_json(record);
    if record.state.is_final() {
        next.expires_at = Some(env.now_secs + env.config.retention_secs);
    }
    match store
        .write(Write::Put {
            item: next.clone(),
            condition: Condition::Version(item.version),
        })
        .await
    {
        Ok(()) => Ok(Some(next)),
        Err(PortError::ConditionFailed(_)) => {
            let cur = store
                .get(&item.key)
                .await
                .map_err(ServiceError::port("read disruption"))?;
            // Retried after it took effect: ours.
            Ok(cur
                .filter(|c| c.version == next.version && c.body == next.body)
                .map(|_| next))
        }
        Err(e) => Err(ServiceError::port(format!(
            "update disruption {}",
            record.id
        ))(e)),
    }
}

/// Carry a decision as far as it can go now; returns it as it is stored
/// afterwards.
#[allow(clippy::too_many_arguments)]
async fn advance<S: Store, E: Ec2, B: Bus>(
    store: &S,
    ec2: &E,
    bus: &B,
    env: &Env<'_>,
    mut item: Item,
    mut record: DisruptionRecord,
    report: &mut ClusterDisruptReport,
) -> Result<DisruptionRecord> {
    loop {
        let next = match record.state {
            DisruptionState::Replacing => replacing(store, bus, env, &record, report).await?,
            DisruptionState::Draining => draining(store, env, &record, report).await?,
            DisruptionState::Terminating => terminating(store, ec2, env, &record, report).await?,
            DisruptionState::Done | DisruptionState::Abandoned => return Ok(record),
        };
        let Some((state, outcome)) = next else {
            return Ok(record);
        };
        if !record.state.can_become(state) {
            return Err(ServiceError::Corrupt {
                key: item.key.to_string(),
                reason: format!("disruption cannot go {:?} → {state:?}", record.state),
            });
        }
        let mut changed = record.clone();
        changed.state = state;
        changed.updated_at = env.now;
        if outcome.is_some() {
            changed.outcome = outcome;
        }
        if state == DisruptionState::Draining {
            let secs = drain_secs(&changed);
            changed.drain_started = Some(env.now_secs);
            changed.deadline = Some(env.now_secs.saturating_add(secs));
            changed.tainted = true;
        }
        let Some(written) = update(store, env, &item, &changed).await? else {
            tracing::info!(cluster = %env.cluster, decision = %record.id, "disruption moved by another run");
            return Ok(record);
        };
        tracing::info!(cluster = %env.cluster, decision = %record.id, from = ?record.state, to = ?state, "disruption");
        item = written;
        record = changed;
        match state {
            DisruptionState::Done => {
                report.completed.push(record.id.clone());
                release_markers(store, env, &record).await?;
            }
            DisruptionState::Abandoned => {
                report.abandoned.push(record.id.clone());
                if record.tainted {
                    let stored =
                        store_node_actions(store, env, &record, ActionKind::Untaint).await?;
                    report.untainted.extend(stored);
                }
                release_markers(store, env, &record).await?;
            }
            _ => {}
        }
    }
}

/// The drain deadline of a decision, in seconds from the drain's start.
fn drain_secs(record: &DisruptionRecord) -> i64 {
    if let Some(g) = record.grace_seconds {
        return i64::try_from(g).unwrap_or(i64::MAX);
    }
    match record.reason {
        DisruptionReason::Interrupted => INTERRUPTION_DRAIN_SECS,
        DisruptionReason::Expired => EXPIRED_DRAIN_SECS,
        _ => DEFAULT_DRAIN_SECS,
    }
}

type Step = Option<(DisruptionState, Option<String>)>;

/// `Replacing`: write the replacements (if absent) and announce the new
/// ones; move on once every one registered and its node is Ready and
/// initialized (graceful), or at once (forceful); abandon when one ended
/// or they took too long.
async fn replacing<S: Store, B: Bus>(
    store: &S,
    bus: &B,
    env: &Env<'_>,
    record: &DisruptionRecord,
    report: &mut ClusterDisruptReport,
) -> Result<Step> {
    let forceful = record.reason.is_forceful();
    let mut announce = Vec::new();
    let mut failed: Option<String> = None;
    let mut ready = 0;
    let plans = match replacements::read(store, record, env.now_secs).await? {
        Some(plans) => plans,
        None => {
            failed = Some(format!(
                "the replacements' plans expired (stored for {} hours)",
                replacements::PLANS_TTL_SECS / 3600
            ));
            vec![]
        }
    };
    for r in &plans {
        let name = &r.plan.name;
        let state = match env.claims.get(name) {
            Some((_, c)) => Some(c.state),
            None => write_replacement(store, env, record, r).await?,
        };
        match state {
            None => {
                failed.get_or_insert(format!(
                    "replacement {name}: its capacity reservation is full"
                ));
            }
            Some(NodeClaimState::Registered) if env.ready.contains(name) => ready += 1,
            Some(s) if !s.is_live() => {
                failed.get_or_insert(format!("replacement {name} ended ({s:?})"));
            }
            Some(NodeClaimState::Pending) if !env.claims.contains_key(name) => {
                announce.push(name.clone());
            }
            Some(_) => {}
        }
    }
    if !announce.is_empty() {
        let events: Vec<_> = announce
            .chunks(NODE_CLAIMS_PER_EVENT)
            .map(|names| {
                FlotillaEvent::NodeClaimsPlanned(NodeClaimsPlanned {
                    cluster_id: env.cluster.to_string(),
                    batch_id: record.batch_id.clone(),
                    node_claims: names.to_vec(),
                })
                .to_event()
            })
            .collect();
        // A lost announcement is made by the sweep (Pending for a minute).
        if let Err(e) = bus.put(events).await {
            tracing::warn!(cluster = %env.cluster, error = %e, "put NodeClaimsPlanned failed; the sweep re-announces");
        }
        report.replacements_launched.extend(announce);
    }
    if forceful {
        return Ok(Some((DisruptionState::Draining, None)));
    }
    if let Some(why) = failed {
        return Ok(Some((DisruptionState::Abandoned, Some(why))));
    }
    if ready == plans.len() {
        return Ok(Some((DisruptionState::Draining, None)));
    }
    if env.now - record.created_at >= REPLACEMENT_TIMEOUT_MS {
        return Ok(Some((
            DisruptionState::Abandoned,
            Some(format!(
                "replacements not registered and Ready within {} minutes",
                REPLACEMENT_TIMEOUT_MS / 60_000
            )),
        )));
    }
    Ok(None)
}

/// Write a replacement's NodeClaim record if absent (reservation slot in
/// the same transaction). Its state afterwards; `None`: the reservation is
/// full.
async fn write_replacement<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
    r: &Replacement,
) -> Result<Option<NodeClaimState>> {
    let name = &r.plan.name;
    let mut claim = new_record(
        env.cluster,
        &record.batch_id,
        name,
        &r.plan,
        Some(r.node_class.as_str()).filter(|c| !c.is_empty()),
        &TemplateHashes {
            nodepool: r.nodepool_hash.clone(),
            nodeclass: r.nodeclass_hash.clone(),
        },
        env.now,
    );
    claim.notes.insert(
        crate::records::DISRUPTION_NOTE.to_string(),
        record.id.clone(),
    );
    let key = keys::node_claim(env.cluster, name);
    let put = Write::Put {
        item: Item::new(key.clone(), codec::to_json(&claim)),
        condition: Condition::Absent {
            now_secs: env.now_secs,
        },
    };
    let slot = claim
        .reservation
        .as_deref()
        .map(|res| SlotChange::take(res, r.reservation_size.unwrap_or(0)));
    match put_counting(store, put, slot).await {
        Ok(()) => Ok(Some(NodeClaimState::Pending)),
        Err(PortError::ConditionFailed(_)) => {
            let existing = store
                .get(&key)
                .await
                .map_err(ServiceError::port("read NodeClaim"))?
                .filter(|i| i.is_live(env.now_secs));
            match existing {
                Some(item) => {
                    let c: NodeClaimRecord = codec::from_json(&key.to_string(), &item.body)?;
                    Ok(Some(c.state))
                }
                None => Ok(None),
            }
        }
        Err(e) => Err(ServiceError::port(format!("write replacement {name}"))(e)),
    }
}

/// How one node's drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Drained (acknowledged done or skipped), gone from the cluster, or
    /// its NodeClaim already ended.
    Finished,
    /// The agent gave up (a PodDisruptionBudget kept pods past the
    /// deadline), or our deadline passed.
    Blocked,
    Waiting,
}

/// `Draining`: store the taint and drain actions (if absent), then move on
/// once every node is drained; a blocked drain ends forceful decisions and
/// those with a grace period anyway, and abandons the others.
async fn draining<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
    report: &mut ClusterDisruptReport,
) -> Result<Step> {
    report
        .tainted
        .extend(store_node_actions(store, env, record, ActionKind::Taint).await?);
    report
        .drained
        .extend(store_node_actions(store, env, record, ActionKind::Drain).await?);
    let deadline = record.deadline.unwrap_or(env.now_secs);
    let mut blocked = Vec::new();
    let mut waiting = false;
    for n in &record.nodes {
        match drain_state(store, env, record, n, deadline).await? {
            Drain::Finished => {}
            Drain::Blocked => blocked.push(n.node.clone()),
            Drain::Waiting => waiting = true,
        }
    }
    if waiting {
        return Ok(None);
    }
    if blocked.is_empty() || record.reason.is_forceful() || record.grace_seconds.is_some() {
        let note = (!blocked.is_empty()).then(|| {
            format!(
                "terminated past the drain deadline with pods left on {}",
                blocked.join(", ")
            )
        });
        return Ok(Some((DisruptionState::Terminating, note)));
    }
    Ok(Some((
        DisruptionState::Abandoned,
        Some(format!(
            "the drain of {} was refused (pods a PodDisruptionBudget or karpenter.sh/do-not-disrupt kept) and the NodePool sets no terminationGracePeriod",
            blocked.join(", ")
        )),
    )))
}

async fn drain_state<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
    n: &DisruptedNode,
    deadline: i64,
) -> Result<Drain> {
    let live = env
        .claims
        .get(&n.node_claim)
        .is_some_and(|(_, c)| c.state.is_live());
    if !live {
        return Ok(Drain::Finished);
    }
    if let (Some(report), Some(started)) = (env.nodes, record.drain_started) {
        if report.at >= started.saturating_mul(1000) && !report.nodes.contains_key(&n.node_claim) {
            return Ok(Drain::Finished); // left the cluster
        }
    }
    let key = keys::action(
        env.cluster,
        &action_id(&record.id, ActionKind::Drain, &n.node),
    );
    if let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read drain action"))?
    {
        let v: serde_json::Value = codec::from_json(&key.to_string(), &item.body)?;
        if let Some(ack) = v.get(ACK_FIELD) {
            let ack: AckRecord =
                serde_json::from_value(ack.clone()).map_err(|e| ServiceError::Corrupt {
                    key: key.to_string(),
                    reason: format!("ack: {e}"),
                })?;
            return Ok(match ack.outcome {
                AckOutcome::Done | AckOutcome::Skipped => Drain::Finished,
                AckOutcome::Failed => Drain::Blocked,
            });
        }
    }
    Ok(if env.now_secs >= deadline {
        Drain::Blocked
    } else {
        Drain::Waiting
    })
}

/// `Terminating`: terminate each node's instance (this stack's only) and
/// end its NodeClaim (`Deleted`, reservation slot released with it).
async fn terminating<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    env: &Env<'_>,
    record: &DisruptionRecord,
    report: &mut ClusterDisruptReport,
) -> Result<Step> {
    let mut left = false;
    let mut notes = Vec::new();
    for n in &record.nodes {
        let Some((item, claim)) = env.claims.get(&n.node_claim) else {
            continue; // expired: ended long ago
        };
        if !claim.state.is_live() {
            continue;
        }
        if let Some(inst) = &claim.instance {
            let found = ec2
                .describe_instances(&[Filter::new("instance-id", [inst.instance_id.as_str()])])
                .await
                .map_err(ServiceError::port("DescribeInstances"))?;
            let running = found.iter().find(|i| !i.state.is_gone());
            if let Some(i) = running {
                if !of_this_stack(i, env.config) {
                    notes.push(format!(
                        "instance {} of {} is not tagged with this stack: left running",
                        i.id, n.node
                    ));
                    continue;
                }
                if let Err(e) = ec2.terminate_instances(std::slice::from_ref(&i.id)).await {
                    tracing::warn!(instance = %i.id, error = %e, "TerminateInstances failed; the next run tries again");
                    report.errors.push(format!("{}: {e}", i.id));
                    left = true;
                    continue;
                }
                report.terminated.push(format!("{}/{}", n.node, i.id));
            }
        }
        let mut ended = claim.clone();
        let why = format!(
            "disrupted ({}): decision {}",
            record.reason.as_str(),
            record.id
        );
        if !end_claim(
            store,
            item,
            &mut ended,
            &why,
            env.now,
            env.config.retention_secs,
        )
        .await?
        {
            left = true; // changed meanwhile: the next run looks again
        }
    }
    if left {
        return Ok(None);
    }
    Ok(Some((
        DisruptionState::Done,
        (!notes.is_empty()).then(|| notes.join("; ")),
    )))
}

/// The id of a decision's action for a node.
pub fn action_id(decision: &str, kind: ActionKind, node: &str) -> String {
    codec::content_hash(format!("disruption/{decision}/{kind:?}/{node}").as_bytes())
}

/// Store one action of `kind` per node of the decision (create-if-absent).
/// Returns the nodes an action was newly stored for.
async fn store_node_actions<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
    kind: ActionKind,
) -> Result<Vec<String>> {
    let deadline = record.deadline.unwrap_or(env.now_secs);
    let mut stored = Vec::new();
    for n in &record.nodes {
        let live = env
            .claims
            .get(&n.node_claim)
            .is_some_and(|(_, c)| c.state.is_live());
        if !live {
            continue;
        }
        let id = action_id(&record.id, kind, &n.node);
        let what = match kind {
            ActionKind::Taint => "tainted karpenter.sh/disrupted:NoSchedule",
            ActionKind::Drain => "drained",
            ActionKind::Untaint => "given back (taint removed, uncordoned)",
            _ => "acted on",
        };
        let action = StoredAction {
            id: id.clone(),
            action: Action {
                kind,
                node: n.node.clone(),
                node_claim: Some(n.node_claim.clone()),
                reservation_id: String::new(),
                set_labels: BTreeMap::new(),
                remove_labels: vec![],
                deadline: if kind == ActionKind::Untaint {
                    env.now_secs
                } else {
                    deadline
                },
                reason: format!(
                    "disruption {} ({}): {what}",
                    record.id,
                    record.reason.as_str()
                ),
            },
            created_at: env.now_secs,
        };
        let mut item = Item::new(keys::action(env.cluster, &id), codec::to_json(&action));
        item.expires_at = Some(deadline.max(env.now_secs) + env.config.retention_secs);
        match store
            .write(Write::Put {
                item,
                condition: Condition::Absent {
                    now_secs: env.now_secs,
                },
            })
            .await
        {
            Ok(()) => stored.push(n.node.clone()),
            Err(PortError::ConditionFailed(_)) => {}
            Err(e) => return Err(ServiceError::port("store disruption action")(e)),
        }
    }
    Ok(stored)
}

/// Delete the decision's per-node markers (those still naming it).
async fn release_markers<S: Store>(
    store: &S,
    env: &Env<'_>,
    record: &DisruptionRecord,
) -> Result<()> {
    for n in &record.nodes {
        let key = keys::disrupting(env.cluster, &n.node);
        let Some(item) = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read disruption marker"))?
        else {
            continue;
        };
        let m: DisruptingMarker = codec::from_json(&key.to_string(), &item.body)?;
        if m.decision == record.id {
            delete_marker(store, &item).await?;
        }
    }
    Ok(())
}

async fn delete_marker<S: Store>(store: &S, item: &Item) -> Result<()> {
    match store
        .write(Write::Delete {
            key: item.key.clone(),
            condition: Condition::Version(item.version),
        })
        .await
    {
        Ok(()) | Err(PortError::ConditionFailed(_)) => Ok(()),
        Err(e) => Err(ServiceError::port("delete disruption marker")(e)),
    }
}

/// Markers whose decision is no longer in flight (a run that died between
/// ending a decision and releasing its markers): deleted.
async fn gc_markers<S: Store>(
    store: &S,
    cluster: &str,
    in_flight: &[DisruptionRecord],
    now_secs: i64,
) -> Result<()> {
    let live: BTreeSet<&str> = in_flight.iter().map(|d| d.id.as_str()).collect();
    let markers = store
        .query(&keys::cluster_pk(cluster), keys::DISRUPTING_PREFIX)
        .await
        .map_err(ServiceError::port("query disruption markers"))?;
    for item in markers.iter().filter(|i| i.is_live(now_secs)) {
        let m: DisruptingMarker = codec::from_json(&item.key.to_string(), &item.body)?;
        if live.contains(m.decision.as_str()) {
            continue;
        }
        // Not in flight as read at the start of this run: a decision
        // started since (by a concurrent run) is newer than our read.
        let key = keys::disruption(cluster, &m.decision);
        let current = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read disruption"))?
            .filter(|i| i.is_live(now_secs));
        let ended = match current {
            None => true,
            Some(i) => codec::from_json::<DisruptionRecord>(&key.to_string(), &i.body)?
                .state
                .is_final(),
        };
        if ended {
            delete_marker(store, item).await?;
        }
    }
    Ok(())
}

/// Since when each node of the state has had its current pods: the
/// stored time when its pods are unchanged, else the state's time (the
/// change happened by then). Written back when it changed (best effort: a
/// concurrent run's write wins).
async fn node_times<S: Store>(
    store: &S,
    cluster: &str,
    state: &ClusterState,
    state_secs: i64,
    now_secs: i64,
) -> Result<BTreeMap<String, i64>> {
    let key = keys::node_times(cluster);
    let current = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read node times"))?;
    let old: NodeTimes = match &current {
        Some(item) => codec::from_json(&key.to_string(), &item.body)?,
        None => NodeTimes::default(),
    };
    let mut next = NodeTimes::default();
    for node in &state.nodes {
        let mut pods: Vec<String> = node.pods.iter().map(|p| p.key()).collect();
        pods.sort_unstable();
        let digest = codec::content_hash(pods.join("\n").as_bytes());
        let since = match old.nodes.get(&node.name) {
            Some(t) if t.digest == digest => t.since,
            _ => state_secs,
        };
        next.nodes
            .insert(node.name.clone(), NodeTime { digest, since });
    }
    if next != old {
        let (condition, version) = match &current {
            Some(item) => (Condition::Version(item.version), item.version + 1),
            None => (Condition::Absent { now_secs }, 1),
        };
        let mut item = Item::new(key, codec::to_json(&next));
        item.version = version;
        match store.write(Write::Put { item, condition }).await {
            Ok(()) | Err(PortError::ConditionFailed(_)) => {}
            Err(e) => return Err(ServiceError::port("write node times")(e)),
        }
    }
    Ok(next
        .nodes
        .into_iter()
        .map(|(name, t)| (name, t.since))
        .collect())
}

/// The NodeClaims whose node, in `state`, is Ready and initialized
/// (`flotilla_core::disruption::readiness`): only then is a replacement
/// up, as Karpenter waits for its replacements to initialize.
fn ready_claims(state: &ClusterState) -> BTreeSet<String> {
    state
        .nodes
        .iter()
        .filter_map(|n| {
            let claim = n.labels.get(NODECLAIM_LABEL)?;
            let pool = engine::pool_of(n, &state.node_pools);
            engine::readiness(n, pool).is_ready().then(|| claim.clone())
        })
        .collect()
}

/// Karpenter's nominated nodes, from what the pipeline knows: the nodes of
/// the replacement NodeClaims of decisions in flight (empty until the
/// drained pods arrive), and of live NodeClaims planned for pods that are
/// still pending. Neither is disrupted (nor receives moved pods) while so.
fn nominated_nodes(
    state: &ClusterState,
    claims: &BTreeMap<String, (Item, NodeClaimRecord)>,
    in_flight: &[DisruptionRecord],
) -> BTreeSet<String> {
    let replacements: BTreeSet<&str> = in_flight
        .iter()
        .flat_map(DisruptionRecord::replacement_names)
        .collect();
    let pending: BTreeSet<String> = state.pending_pods.iter().map(|p| p.key()).collect();
    let awaited: BTreeSet<&str> = claims
        .values()
        .filter(|(_, r)| r.state.is_live() && r.plan.pods.iter().any(|p| pending.contains(p)))
        .map(|(_, r)| r.name.as_str())
        .collect();
    state
        .nodes
        .iter()
        .filter(|n| {
            n.labels
                .get(NODECLAIM_LABEL)
                .is_some_and(|c| replacements.contains(c.as_str()) || awaited.contains(c.as_str()))
        })
        .map(|n| n.name.clone())
        .collect()
}

/// The pipeline's NodeClaims as `karpenter.sh/v1 NodeClaim` objects of the
/// state (unless the documents carry one of the same name): the node each
/// became, its NodePool, when it was created, and the NodePool and
/// EC2NodeClass hashes it was launched with (each with its version
/// annotation).
fn add_node_claims(state: &mut ClusterState, claims: &BTreeMap<String, (Item, NodeClaimRecord)>) {
    let known: BTreeSet<String> = state.node_claims.iter().map(|c| c.name.clone()).collect();
    for (_, r) in claims.values() {
        if !r.state.is_live() || known.contains(&r.name) {
            continue;
        }
        let mut annotations = BTreeMap::new();
        for (h, key, version) in [
            (
                &r.nodepool_hash,
                labels::NODEPOOL_HASH,
                hash::NODEPOOL_HASH_VERSION,
            ),
            (
                &r.nodeclass_hash,
                labels::NODECLASS_HASH,
                hash::NODECLASS_HASH_VERSION,
            ),
        ] {
            if let Some(h) = h {
                annotations.insert(key.to_string(), h.clone());
                annotations.insert(version.to_string(), hash::HASH_VERSION.to_string());
            }
        }
        state.node_claims.push(NodeClaimObject {
            image_id: r.instance.as_ref().and_then(|i| i.image_id.clone()),
            name: r.name.clone(),
            node_pool: Some(r.plan.node_pool.clone()),
            node_name: r.notes.get(crate::records::NODE_NOTE).cloned(),
            provider_id: r
                .instance
                .as_ref()
                .map(|i| format!("aws:///{}/{}", i.zone, i.instance_id)),
            labels: r.plan.labels.clone(),
            annotations,
            created_at: Some(r.created_at / 1000),
            ..NodeClaimObject::default()
        });
    }
    state.node_claims.sort_by(|a, b| a.name.cmp(&b.name));
    add_instances(state, claims);
}

/// What the pipeline's live NodeClaims' instances were launched with (the
/// cloud-provider drift checks compare it with the node class's status);
/// a NodeClaim document of the same name without `status.imageID` takes
/// the recorded image.
fn add_instances(state: &mut ClusterState, claims: &BTreeMap<String, (Item, NodeClaimRecord)>) {
    for (_, r) in claims.values() {
        let Some(i) = r.instance.as_ref().filter(|_| r.state.is_live()) else {
            continue;
        };
        let facts = InstanceFacts {
            image_id: i.image_id.clone(),
            subnet_id: i.subnet_id.clone(),
            security_group_ids: i.security_group_ids.clone(),
        };
        if facts != InstanceFacts::default() {
            state
                .instances
                .entry(i.instance_id.clone())
                .or_insert(facts);
        }
        // `add_node_claims` left them sorted by name.
        let at = (state.node_claims).binary_search_by(|c| c.name.as_str().cmp(&r.name));
        if let Ok(k) = at {
            let c = &mut state.node_claims[k];
            if c.image_id.is_none() {
                c.image_id.clone_from(&i.image_id);
            }
        }
    }
}

/// The status of each EC2NodeClass the pipeline launched live NodeClaims
/// from: what it resolves to now (cached, see [`crate::resolve`]), in place
/// of the status posted (the pipeline launches from its own resolution).
/// A node class that resolves to nothing, or a batch whose launch context
/// is gone, leaves the status unknown: no cloud-provider drift.
#[allow(clippy::too_many_arguments)]
async fn resolve_statuses<S: Store, E: Ec2>(
    store: &S,
    ec2: &E,
    cluster: &str,
    batch_id: &str,
    state: &mut ClusterState,
    claims: &BTreeMap<String, (Item, NodeClaimRecord)>,
    now_secs: i64,
) -> Result<()> {
    let launched: BTreeSet<&str> = claims
        .values()
        .filter(|(_, r)| r.state.is_live() && r.instance.is_some())
        .map(|(_, r)| r.node_class.as_str())
        .collect();
    if !state
        .node_classes
        .iter()
        .any(|c| launched.contains(c.name.as_str()))
    {
        return Ok(());
    }
    let k8s = launch_context(store, cluster, batch_id)
        .await?
        .map(|c| c.cluster.kubernetes_version);
    for nc in &mut state.node_classes {
        if !launched.contains(nc.name.as_str()) {
            continue;
        }
        nc.status = NodeClassStatus::default();
        let Some(k8s) = k8s.as_deref() else {
            continue;
        };
        // EC2 refusing or failing to describe (throttling, a missing
        // permission) leaves the status unknown: the other decisions go on.
        match crate::resolve::cached_resolution(store, ec2, cluster, nc, k8s, now_secs).await {
            Ok(Ok(r)) => nc.status = r.status(),
            Ok(Err(reason)) => {
                tracing::warn!(cluster = %cluster, node_class = %nc.name, reason = %reason, "node class does not resolve: no cloud-provider drift on its nodes")
            }
            Err(e) => {
                tracing::warn!(cluster = %cluster, node_class = %nc.name, error = %e, "node class resolution failed: no cloud-provider drift on its nodes this run")
            }
        }
    }
    Ok(())
}

/// The launch context of batch `batch_id` (`None`: gone).
async fn launch_context<S: Store>(
    store: &S,
    cluster: &str,
    batch_id: &str,
) -> Result<Option<crate::records::LaunchContext>> {
    let key = keys::context(cluster, batch_id);
    let Some(item) = store
        .get(&key)
        .await
        .map_err(ServiceError::port("read launch context"))?
    else {
        return Ok(None);
    };
    let body = codec::gunzip(&key.to_string(), &item.body)?;
    codec::from_json(&key.to_string(), &body).map(Some)
}

/// Nodes with a live interruption note: spot and reservation
/// interruptions always, rebalance recommendations when the node's
/// NodePool opts in ([`REPLACE_ON_REBALANCE`]).
async fn interrupted_nodes<S: Store>(
    store: &S,
    cluster: &str,
    state: &ClusterState,
    claims: &BTreeMap<String, (Item, NodeClaimRecord)>,
    now_secs: i64,
) -> Result<BTreeSet<String>> {
    let items = store
        .query(&keys::cluster_pk(cluster), keys::INTERRUPTED_PREFIX)
        .await
        .map_err(ServiceError::port("query interruption notes"))?;
    let mut out = BTreeSet::new();
    for item in items.iter().filter(|i| i.is_live(now_secs)) {
        let note: InterruptionRecord = codec::from_json(&item.key.to_string(), &item.body)?;
        let Some((_, claim)) = claims.get(&note.node_claim) else {
            continue;
        };
        if claim.state != NodeClaimState::Registered {
            continue;
        }
        if note.kind == InterruptionKind::Rebalance {
            let opted_in = state
                .node_pools
                .iter()
                .find(|p| p.name == claim.plan.node_pool)
                .and_then(|p| p.annotations.get(REPLACE_ON_REBALANCE))
                .is_some_and(|v| v == "true");
            if !opted_in {
                continue;
            }
        }
        out.insert(claim.node_name().to_string());
    }
    Ok(out)
}

/// A `Replacing` record of cluster `c` over no nodes, for tests.
#[cfg(test)]
fn sample_record(reason: DisruptionReason) -> DisruptionRecord {
    DisruptionRecord {
        id: "d1".into(),
        cluster_id: "c".into(),
        batch_id: "b".into(),
        reason,
        node_pool: "default".into(),
        nodes: vec![],
        replacement_names: vec![],
        replacement_plans: None,
        replacements: vec![],
        state: DisruptionState::Replacing,
        price_before: 0.0,
        price_after: 0.0,
        grace_seconds: None,
        created_at: 0,
        updated_at: 0,
        drain_started: None,
        deadline: None,
        tainted: false,
        outcome: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_ids_name_the_content_and_ignore_node_order() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = decision_id(DisruptionReason::Empty, &n(&["b", "a"]), &[]);
        assert_eq!(
            a,
            decision_id(DisruptionReason::Empty, &n(&["a", "b"]), &[])
        );
        assert_ne!(
            a,
            decision_id(DisruptionReason::Underutilized, &n(&["a", "b"]), &[])
        );
        assert_ne!(
            a,
            decision_id(DisruptionReason::Empty, &n(&["a", "b"]), &n(&["default-0"]))
        );
        assert_ne!(a, decision_id(DisruptionReason::Empty, &n(&["a"]), &[]));
    }

    #[test]
    fn drain_deadlines_follow_the_grace_period_then_the_reason() {
        let mut r = sample_record(DisruptionReason::Empty);
        assert_eq!(drain_secs(&r), DEFAULT_DRAIN_SECS);
        r.reason = DisruptionReason::Interrupted;
        assert_eq!(drain_secs(&r), INTERRUPTION_DRAIN_SECS);
        r.reason = DisruptionReason::Expired;
        assert_eq!(drain_secs(&r), EXPIRED_DRAIN_SECS);
        r.grace_seconds = Some(30);
        assert_eq!(drain_secs(&r), 30);
        r.grace_seconds = Some(u64::MAX);
        assert_eq!(drain_secs(&r), i64::MAX);
    }
}
