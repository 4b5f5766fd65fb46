//! Launch: on `NodeClaimsPlanned`, turn each `Pending` NodeClaim into an
//! instance with CreateFleet, exactly once.
//!
//! Per NodeClaim: take it (`Pending → Launching` with a lease, a
//! version-checked write, so concurrent deliveries launch it once); adopt an
//! instance already tagged with the NodeClaim (a previous attempt that
//! crashed after CreateFleet: EC2's client token would also return it, but
//! we do not depend on that); resolve the EC2NodeClass; ensure the launch
//! templates; call CreateFleet and follow `flotilla_core::launch::next_attempt`
//! (ICE'd offerings into the cache, retry, spot → on-demand fallback); record
//! `Launched` or `Failed` (+ `PodsUnschedulable`, reservation released).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use flotilla_core::launch::{
    self, build_fleet_request, ice::UnavailableOffering, next_attempt, nodeclass, FleetInput,
    Outcome,
};
use flotilla_core::model::ClusterState;
use flotilla_ports::events::NodeClaimsPlanned;
use flotilla_ports::{Bus, Clock, Condition, Ec2, Filter, Item, Store, Write};
use serde::Serialize;

use crate::instances::{of_this_stack, STACK_TAG};
pub use crate::launch_env::LaunchEnv;
pub use crate::nodeclaims::announce_failure;
use crate::nodeclaims::{claim_written, node_claim_item, update_claim, update_claim_releasing};
use crate::records::{LaunchContext, LaunchedInstanceRecord, NodeClaimRecord, NodeClaimState};
use crate::{codec, keys, offerings, Config, Result, ServiceError};

/// CreateFleet calls per NodeClaim per invocation (ICE retries and the
/// on-demand fallback included).
pub const MAX_FLEET_CALLS: u32 = 8;

/// Retries of one CreateFleet call that failed as a whole with a
/// retryable error (same request, same client token).
pub const MAX_TRANSIENT_RETRIES: u32 = 3;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchReport {
    /// (NodeClaim, instance id)
    pub launched: Vec<(String, String)>,
    /// (NodeClaim, reason)
    pub failed: Vec<(String, String)>,
    /// Already launched, failed, being launched elsewhere, or unknown.
    pub skipped: Vec<String>,
    /// CreateFleet calls made.
    pub fleet_calls: u32,
    /// Offerings CreateFleet reported out of capacity (ICE).
    pub ice_hits: usize,
}

/// NodeClaims launched at once by one invocation (each is its own chain
/// of EC2 and DynamoDB calls).
pub const CONCURRENCY: usize = 8;

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub async fn on_node_claims_planned<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    event: &NodeClaimsPlanned,
) -> Result<LaunchReport> {
    let cluster = &event.cluster_id;
    let ckey = keys::context(cluster, &event.batch_id);
    let Some(item) = store
        .get(&ckey)
        .await
        .map_err(ServiceError::port("read launch context"))?
    else {
        return Err(ServiceError::Corrupt {
            key: ckey.to_string(),
            reason: "launch context missing (expired?)".into(),
        });
    };
    let context: LaunchContext = codec::from_json(
        &ckey.to_string(),
        &codec::gunzip(&ckey.to_string(), &item.body)?,
    )?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": context.documents});
    let bytes = codec::to_json(&list);
    let state = flotilla_input::load(&[flotilla_input::Source {
        name: "launch context",
        bytes: &bytes,
    }])
    .map_err(|e| ServiceError::Corrupt {
        key: ckey.to_string(),
        reason: e.to_string(),
    })?;
    let mut catalog = offerings::catalog(store, ec2, clock, config, &state).await?;
    if config.reserved_capacity {
        add_reserved_offerings(ec2, clock, &state, &mut catalog).await?;
    }
    let unavailable =
        crate::offerings::unavailable_offerings(store, &config.region, clock.now_secs())
            .await?
            .into_iter()
            .map(|(instance_type, zone, capacity_type)| UnavailableOffering {
                instance_type,
                zone,
                capacity_type,
            })
            .collect();
    let env = LaunchEnv {
        context,
        state,
        catalog,
        unavailable: Mutex::new(unavailable),
        resolved: Mutex::new(BTreeMap::new()),
        ensured: Mutex::new(BTreeSet::new()),
    };
    let env = &env;
    let mut results: Vec<(LaunchReport, Result<()>)> = Vec::new();
    for chunk in event.node_claims.chunks(CONCURRENCY) {
        let launches = chunk
            .iter()
            .map(|name| launch_reported(store, ec2, bus, clock, config, env, cluster, name));
        results.extend(futures_util::future::join_all(launches).await);
    }
    let mut report = LaunchReport::default();
    let mut first_error = None;
    for (r, out) in results {
        report.launched.extend(r.launched);
        report.failed.extend(r.failed);
        report.skipped.extend(r.skipped);
        report.fleet_calls += r.fleet_calls;
        report.ice_hits += r.ice_hits;
        if let Err(e) = out {
            first_error.get_or_insert(e);
        }
    }
    report.launched.sort();
    report.failed.sort();
    report.skipped.sort();
    if let Some(e) = first_error {
        return Err(e);
    }
    tracing::info!(cluster = %cluster, launched = report.launched.len(), failed = report.failed.len(), skipped = report.skipped.len(), fleet_calls = report.fleet_calls, "launch done");
    Ok(report)
}

/// The `reserved` offerings of the capacity reservations the batch's
/// EC2NodeClasses select (their `capacityReservationSelectorTerms`, read
/// live as the schedule stage does), added to `catalog`: the schedule stage
/// planned NodeClaims into them, and the fleet request can only target a
/// reservation the catalog offers. Availability is EC2's; the reservation
/// counter already kept the plans within the reservation's size.
async fn add_reserved_offerings<E: Ec2, C: Clock>(
    ec2: &E,
    clock: &C,
    state: &ClusterState,
    catalog: &mut flotilla_core::catalog::Catalog,
) -> Result<()> {
    use flotilla_core::reservations;
    let mut found: BTreeMap<String, flotilla_core::model::CapacityReservation> = state
        .capacity_reservations
        .iter()
        .map(|r| (r.id.clone(), r.clone()))
        .collect();
    for nc in &state.node_classes {
        let Ok(spec) = nodeclass::parse_node_class(nc) else {
            continue; // its NodeClaims fail with the reason
        };
        for filters in spec.capacity_reservation_queries() {
            for r in ec2
                .describe_capacity_reservations(&filters)
                .await
                .map_err(ServiceError::port("DescribeCapacityReservations"))?
            {
                found.entry(r.id.clone()).or_insert(r);
            }
        }
    }
    let all: Vec<_> = found.into_values().collect();
    let mut selected = BTreeSet::new();
    for nc in &state.node_classes {
        let terms = reservations::selector_terms(nc).unwrap_or_default();
        selected.extend(reservations::select(
            nc,
            &terms,
            &all,
            catalog,
            Some(clock.now_secs()),
        ));
    }
    for i in selected {
        let r = &all[i];
        let offering = reservations::offering(r, catalog, r.available_instance_count);
        if let Some(entry) = catalog
            .entries
            .iter_mut()
            .find(|e| e.info.name == r.instance_type)
        {
            let known = entry.offerings.iter().any(|o| {
                o.reservation
                    .as_ref()
                    .is_some_and(|x| Some(&x.id) == offering.reservation.as_ref().map(|y| &y.id))
            });
            if !known {
                entry.offerings.push(offering);
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn launch_reported<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    env: &LaunchEnv,
    cluster: &str,
    name: &str,
) -> (LaunchReport, Result<()>) {
    let mut r = LaunchReport::default();
    let out = launch_one(store, ec2, bus, clock, config, env, cluster, name, &mut r).await;
    (r, out)
}

/// Resolve (once per invocation) the EC2NodeClass `name` against EC2.
async fn resolve_node_class<E: Ec2>(
    ec2: &E,
    env: &LaunchEnv,
    name: &str,
) -> Result<std::result::Result<nodeclass::ResolvedNodeClass, String>> {
    if let Some(r) = locked(&env.resolved).get(name) {
        return Ok(r.clone());
    }
    let Some(nc) = env.state.node_classes.iter().find(|n| n.name == name) else {
        let r = Err(format!("EC2NodeClass {name:?} is not in the batch"));
        locked(&env.resolved).insert(name.to_string(), r.clone());
        return Ok(r);
    };
    let k8s = &env.context.cluster.kubernetes_version;
    let r = crate::resolve::resolve_node_class(ec2, nc, k8s).await?;
    locked(&env.resolved).insert(name.to_string(), r.clone());
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
async fn launch_one<S: Store, E: Ec2, B: Bus, C: Clock>(
    store: &S,
    ec2: &E,
    bus: &B,
    clock: &C,
    config: &Config,
    env: &LaunchEnv,
    cluster: &str,
    name: &str,
    report: &mut LaunchReport,
) -> Result<()> {
    let Some((item, mut record)) = node_claim_item(store, cluster, name).await? else {
        report.skipped.push(name.to_string());
        return Ok(());
    };
    if record.state == NodeClaimState::Failed && record.unannounced {
        // An earlier delivery failed it and could not say so.
        report.skipped.push(name.to_string());
        return announce_failure(store, bus, cluster, &item, &mut record).await;
    }
    let now = clock.now_millis();
    let held =
        record.state == NodeClaimState::Launching && record.lease_until.is_some_and(|t| t > now);
    if !matches!(
        record.state,
        NodeClaimState::Pending | NodeClaimState::Launching
    ) || held
    {
        report.skipped.push(name.to_string());
        return Ok(());
    }
    // Take it.
    record.state = NodeClaimState::Launching;
    record.lease_until = Some(now + config.lease_ms);
    record.updated_at = now;
    if !update_claim(store, &item, &record).await? {
        report.skipped.push(name.to_string());
        return Ok(());
    }
    let item = claim_written(&item, &record);

    match launch_taken(store, ec2, clock, config, env, cluster, &mut record, report).await {
        Ok(Ok(instance)) => {
            record.state = NodeClaimState::Launched;
            record.lease_until = None;
            record.reason = None;
            record.updated_at = clock.now_millis();
            report
                .launched
                .push((name.to_string(), instance.instance_id.clone()));
            record.instance = Some(instance);
            if !update_claim(store, &item, &record).await? {
                // Only a concurrent sweep (lease takeover) can get here;
                // the instance is tagged and the sweep adopts or ends it.
                tracing::warn!(node_claim = %name, "NodeClaim changed while launching");
            }
            Ok(())
        }
        Ok(Err(reason)) => {
            fail(store, bus, clock, cluster, &item, &mut record, &reason).await?;
            report.failed.push((name.to_string(), reason));
            Ok(())
        }
        Err(e) => {
            // Let the redelivery (or the sweep) try again straight away.
            record.lease_until = Some(clock.now_millis());
            let _ = update_claim(store, &item, &record).await;
            Err(e)
        }
    }
}

/// Mark a NodeClaim failed, free its reservation, hand its pods back.
async fn fail<S: Store, B: Bus, C: Clock>(
    store: &S,
    bus: &B,
    clock: &C,
    cluster: &str,
    item: &Item,
    record: &mut NodeClaimRecord,
    reason: &str,
) -> Result<()> {
    record.state = NodeClaimState::Failed;
    record.lease_until = None;
    record.reason = Some(reason.to_string());
    record.updated_at = clock.now_millis();
    record.unannounced = true;
    let release = record.reservation.clone();
    if !update_claim_releasing(store, item, record, release.as_deref()).await? {
        return Ok(());
    }
    tracing::warn!(cluster = %cluster, node_claim = %record.name, reason = %reason, "launch failed");
    let item = claim_written(item, record);
    announce_failure(store, bus, cluster, &item, record).await
}

/// Instances of this stack already carrying this NodeClaim's tag
/// (another stack's namesake is never adopted).
pub async fn tagged_instances<E: Ec2>(
    ec2: &E,
    name: &str,
    config: &Config,
) -> Result<Vec<flotilla_ports::Instance>> {
    let filters = [
        Filter::new(
            format!("tag:{}", launch::launch_template::TAG_NODECLAIM),
            [name],
        ),
        Filter::new(format!("tag:{}", STACK_TAG), [config.stack_id.as_str()]),
        Filter::new("instance-state-name", ["pending", "running"]),
    ];
    Ok(ec2
        .describe_instances(&filters)
        .await
        .map_err(ServiceError::port("DescribeInstances"))?
        .into_iter()
        .filter(|i| of_this_stack(i, config))
        .collect())
}

/// The launch proper, with the NodeClaim held. `Ok(Err(reason))`: give up.
#[allow(clippy::too_many_arguments)]
async fn launch_taken<S: Store, E: Ec2, C: Clock>(
    store: &S,
    ec2: &E,
    clock: &C,
    config: &Config,
    env: &LaunchEnv,
    cluster: &str,
    record: &mut NodeClaimRecord,
    report: &mut LaunchReport,
) -> Result<std::result::Result<LaunchedInstanceRecord, String>> {
    // A previous attempt may have launched already.
    if let Some(i) = tagged_instances(ec2, &record.name, config)
        .await?
        .into_iter()
        .min_by(|a, b| a.id.cmp(&b.id))
    {
        tracing::info!(node_claim = %record.name, instance = %i.id, "adopting an instance launched by an earlier attempt");
        return Ok(Ok(LaunchedInstanceRecord {
            instance_id: i.id,
            instance_type: i.instance_type,
            zone: i.zone,
            capacity_type: if i.lifecycle == "spot" {
                "spot".into()
            } else if i.capacity_reservation_id.is_some() {
                "reserved".into()
            } else {
                "on-demand".into()
            },
            launched_at: i.launch_time * 1000,
            // Not known of an adopted instance: no cloud drift on it.
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
        }));
    }
    let resolved = match resolve_node_class(ec2, env, &record.node_class).await? {
        Ok(r) => r,
        Err(reason) => return Ok(Err(reason)),
    };
    let prepared = match crate::prepare::prepare(env, &resolved, record, cluster, config) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let now_secs = clock.now_secs();
    for (name, config_lt) in &prepared.launch_templates {
        if locked(&env.ensured).contains(name) {
            continue;
        }
        ec2.create_launch_template(name, config_lt)
            .await
            .map_err(ServiceError::port(format!("CreateLaunchTemplate {name}")))?;
        let mut used = Item::new(
            keys::launch_template(&config.region, name),
            codec::to_json(&serde_json::json!({"lastUsed": now_secs})),
        );
        used.expires_at = None;
        store
            .write(Write::Put {
                item: used,
                condition: Condition::Always,
            })
            .await
            .map_err(ServiceError::port("record launch template use"))?;
        locked(&env.ensured).insert(name.clone());
    }
    let mut input: FleetInput = prepared.fleet;
    input.attempt = record.attempts;
    let mut last_reason = String::from("no launch attempted");
    for _ in 0..MAX_FLEET_CALLS {
        let request = match build_fleet_request(&input) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let mut tries = 0;
        let response = loop {
            report.fleet_calls += 1;
            match ec2.create_fleet(&request).await {
                Ok(r) => break r,
                Err(e) if e.is_retryable() && tries < MAX_TRANSIENT_RETRIES => {
                    tries += 1;
                    tracing::warn!(node_claim = %record.name, error = %e, "CreateFleet failed; retrying with the same client token");
                }
                Err(flotilla_ports::PortError::Rejected(m))
                    if launch::ice::spot_service_linked_role_hint(&m).is_some() =>
                {
                    // Refused as a whole: no retry can fix it, say how to.
                    let hint = launch::ice::spot_service_linked_role_hint(&m).unwrap_or_default();
                    return Ok(Err(format!("CreateFleet refused: {m} ({hint})")));
                }
                Err(e) => return Err(ServiceError::port("CreateFleet")(e)),
            }
        };
        record.attempts += 1;
        let outcome = next_attempt(&input, &response);
        let unavailable = match &outcome {
            Outcome::Launched { unavailable, .. }
            | Outcome::Retry { unavailable, .. }
            | Outcome::FallBack { unavailable, .. }
            | Outcome::Failed { unavailable, .. } => unavailable.clone(),
        };
        record_ice(store, clock, &config.region, &unavailable).await?;
        report.ice_hits += unavailable.len();
        locked(&env.unavailable).extend(unavailable);
        match outcome {
            Outcome::Launched { mut instances, .. } => {
                instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
                let mut it = instances.into_iter();
                let Some(first) = it.next() else {
                    return Ok(Err(
                        "CreateFleet reported success without an instance".into()
                    ));
                };
                let extra: Vec<String> = it.map(|i| i.instance_id).collect();
                if !extra.is_empty() {
                    ec2.terminate_instances(&extra)
                        .await
                        .map_err(ServiceError::port("terminate surplus instances"))?;
                }
                let mut launched = LaunchedInstanceRecord {
                    instance_id: first.instance_id,
                    instance_type: first.instance_type,
                    zone: first.zone,
                    capacity_type: first.capacity_type.as_str().to_string(),
                    launched_at: clock.now_millis(),
                    image_id: None,
                    subnet_id: None,
                    security_group_ids: Vec::new(),
                };
                launched_with(&mut launched, &request, &prepared.launch_templates);
                return Ok(Ok(launched));
            }
            Outcome::Retry { next, .. } | Outcome::FallBack { next, .. } => {
                last_reason = format!(
                    "insufficient capacity after {} CreateFleet calls",
                    record.attempts
                );
                input = next;
            }
            Outcome::Failed { reason, .. } => return Ok(Err(reason)),
        }
    }
    Ok(Err(last_reason))
}

/// What `instance` was launched with, from the request that launched it:
/// the AMI and subnet of its override, the security groups of its launch
/// template (the disruption stage's drift checks compare them).
fn launched_with(
    instance: &mut LaunchedInstanceRecord,
    request: &launch::FleetRequest,
    templates: &[(String, launch::LaunchTemplateConfig)],
) {
    let Some((config, o)) = request.override_for(&instance.instance_type, &instance.zone) else {
        return;
    };
    instance.image_id = Some(o.image_id.clone());
    instance.subnet_id = Some(o.subnet_id.clone());
    let name = &config.launch_template_specification.launch_template_name;
    if let Some((_, t)) = templates.iter().find(|(n, _)| n == name) {
        instance.security_group_ids = t.security_group_ids.clone();
    }
}

/// Put ICE'd offerings in the cache for 45 s.
async fn record_ice<S: Store, C: Clock>(
    store: &S,
    clock: &C,
    region: &str,
    offerings: &[UnavailableOffering],
) -> Result<()> {
    let now = clock.now_secs();
    for o in offerings {
        let mut item = Item::new(
            keys::ice(region, &o.instance_type, &o.zone, o.capacity_type.as_str()),
            Vec::new(),
        );
        item.expires_at = Some(now + i64::try_from(launch::ICE_TTL_SECONDS).unwrap_or(45));
        store
            .write(Write::Put {
                item,
                condition: Condition::Always,
            })
            .await
            .map_err(ServiceError::port("write ICE entry"))?;
    }
    Ok(())
}
