//! `flotilla simulate`: the whole pipeline in memory. The documents are
//! posted to the intake stage, scheduled, and launched by the launch stage
//! into the EC2 simulator (capacity pools, ICE, spot → on-demand fallback,
//! client tokens), exactly as the Lambdas would; the output is what was
//! actually launched and what it costs, which can differ from the plan when
//! capacity runs out (`--capacity`).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use flotilla_core::catalog::CapacityType;
use flotilla_core::ec2::{SecurityGroup, Subnet};
use flotilla_core::launch::nodeclass::parse_node_class;
use flotilla_ports::Clock;
use flotilla_service::intake::{self, Access, Caller};
use flotilla_service::records::{NodeClaimRecord, NodeClaimState};
use flotilla_service::{Config, Ports};
use flotilla_sim::{block_on, Ec2Sim, ManualClock, MemBus, MemStore};
use serde::Serialize;

use crate::inputs::Input;

/// `TYPE[:ZONE][:CAPACITY-TYPE]=N`: at most N instances of that pool.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityLimit {
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: Option<CapacityType>,
    pub count: u32,
}

pub fn parse_capacity(s: &str) -> Result<CapacityLimit, String> {
    let (pool, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected TYPE[:ZONE][:CAPACITY-TYPE]=N"))?;
    let count = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a count"))?;
    let mut parts = pool.split(':');
    let instance_type = parts.next().unwrap_or_default().to_string();
    if instance_type.is_empty() {
        return Err(format!("{s:?}: no instance type"));
    }
    let mut zone = None;
    let mut capacity_type = None;
    for p in parts {
        match CapacityType::parse(p) {
            Some(ct) => capacity_type = Some(ct),
            None if !p.is_empty() => zone = Some(p.to_string()),
            None => {}
        }
    }
    Ok(CapacityLimit {
        instance_type,
        zone,
        capacity_type,
        count,
    })
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Launched {
    node_claim: String,
    node_pool: String,
    instance_id: String,
    instance_type: String,
    zone: String,
    capacity_type: String,
    price: f64,
    pods: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Failed {
    node_claim: String,
    reason: String,
    pods: usize,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    launched: Vec<Launched>,
    failed: Vec<Failed>,
    /// Pods the last scheduling run could not place, with reasons.
    unschedulable: Vec<(String, String)>,
    create_fleet_calls: usize,
    /// USD/hour of the launched instances.
    hourly_price: f64,
}

/// YAML / JSON documents (multi-document) as JSON values.
fn documents(inputs: &[Input]) -> Result<Vec<serde_json::Value>> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for input in inputs {
        for (i, doc) in serde_yaml_ng::Deserializer::from_slice(&input.bytes).enumerate() {
            let v = serde_json::Value::deserialize(doc)
                .with_context(|| format!("{} doc {}", input.name, i + 1))?;
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// What [`post_changes`] sent.
struct Posted {
    objects: usize,
    pods: usize,
    templates: usize,
    parts: usize,
    bytes: usize,
    pending_pods: usize,
}

/// Post `documents` to intake the way the agent does: a resync of the
/// whole cluster by changes (pods as templates plus rows), in parts under
/// intake's body limit, so a cluster of any size goes through.
fn post_changes(
    ports: &Ports<MemStore, Ec2Sim, MemBus, Arc<ManualClock>>,
    documents: Vec<serde_json::Value>,
) -> Result<Posted> {
    use flotilla_core::state::{changes::changes_since, ClusterCache, Resync, Sequence};
    let list = serde_json::to_vec(
        &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": documents}),
    )?;
    let pending_pods = flotilla_input::load(&[flotilla_input::Source {
        name: "inputs",
        bytes: &list,
    }])?
    .pending_pods
    .len();
    for (i, d) in documents.iter().enumerate() {
        if d.get("kind").is_none() {
            bail!(
                "input document {}: not a Kubernetes object (simulate posts the cluster as the agent does; \
                 AWS CLI outputs are read by `flotilla plan` only)",
                i + 1
            );
        }
    }
    let cache =
        ClusterCache::from_documents(documents).map_err(|e| anyhow::anyhow!("inputs: {e}"))?;
    let envelope = 64 * 1024;
    let parts = changes_since(&Default::default(), &cache)
        .split(ports.config.max_body_bytes.saturating_sub(envelope));
    let n = u32::try_from(parts.len()).context("too many parts")?;
    let mut posted = Posted {
        objects: cache.objects.len(),
        pods: cache.pods.len(),
        templates: cache.templates.len(),
        parts: parts.len(),
        bytes: 0,
        pending_pods,
    };
    for (i, changes) in parts.iter().enumerate() {
        let body = serde_json::to_vec(&serde_json::json!({
            "clusterId": "simulated",
            "cluster": {
                "name": "simulated",
                "endpoint": "https://simulated.eks.example.com",
                "caBundle": "c2ltdWxhdGVk",
                "serviceCidr": "10.100.0.0/16",
                "kubernetesVersion": flotilla_sim::ec2::DEFAULT_K8S_VERSION,
            },
            "sequence": Sequence {
                stream: "simulate-1".into(),
                seq: 1,
                resync: Some(Resync { part: u32::try_from(i)?, parts: n }),
            },
            "pendingPods": pending_pods,
            "changes": changes,
        }))?;
        posted.bytes += body.len();
        block_on(flotilla_service::changes::accept_changes(
            &ports.store,
            &ports.bus,
            &ports.clock,
            &ports.config,
            &ports.access,
            &Caller {
                principal: Some(SIMULATED_AGENT.into()),
            },
            &body,
        ))?;
    }
    Ok(posted)
}

/// The IAM principal `flotilla simulate` posts as, granted its cluster
/// (intake denies clusters nobody was granted).
const SIMULATED_AGENT: &str = "arn:aws:sts::000000000000:assumed-role/flotilla-agent/simulate";

/// The instance profile the simulated deployment made for its node role
/// (the default of AWSNodeTemplates without one, as in a deployed stack).
const SIMULATED_PROFILE: &str = "flotilla-simulated";

/// Subnets and security groups that the EC2NodeClasses' selector terms
/// find, one subnet per zone, so any EC2NodeClass resolves in the
/// simulator.
fn seed_network(sim: &Ec2Sim, inputs: &[Input]) -> Result<Option<String>> {
    let sources: Vec<_> = inputs.iter().map(Input::source).collect();
    let state = flotilla_input::load(&sources)?;
    let zones = sim.catalog().zones.clone();
    let mut role = None;
    for (n, nc) in state.node_classes.iter().enumerate() {
        let spec = match parse_node_class(nc) {
            Ok(s) => s,
            Err(e) => {
                // Its NodeClaims fail to launch, with this reason.
                eprintln!("warning: {e}");
                continue;
            }
        };
        role = role.or(spec.role.clone());
        for (t, term) in spec.subnet_selector_terms.iter().enumerate() {
            for (z, zone) in zones.iter().enumerate() {
                let id = term
                    .id
                    .clone()
                    .filter(|_| z == 0)
                    .unwrap_or_else(|| format!("subnet-sim{n:02}{t:02}{z:02}"));
                sim.add_subnet(Subnet {
                    id,
                    zone: zone.clone(),
                    zone_id: format!("sim-az{z}"),
                    vpc_id: sim.vpc_id().to_string(),
                    available_ips: 4000,
                    tags: term.tags.clone(),
                });
            }
        }
        for (t, term) in spec.security_group_selector_terms.iter().enumerate() {
            sim.add_security_group(SecurityGroup {
                id: term
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("sg-sim{n:02}{t:02}")),
                name: term.name.clone().unwrap_or_else(|| format!("sim-{n}-{t}")),
                vpc_id: sim.vpc_id().to_string(),
                tags: term.tags.clone(),
            });
        }
    }
    Ok(role)
}

pub fn run(
    inputs: &[Input],
    region: &str,
    capacity: &[CapacityLimit],
    reserved_capacity: bool,
    json: bool,
) -> Result<()> {
    let clock = Arc::new(ManualClock::default());
    let sim = Ec2Sim::builder(region)
        .cluster("simulated")
        .clock(clock.clone())
        .build()
        .map_err(|e| anyhow::anyhow!("simulator: {e}"))?;
    let role = seed_network(&sim, inputs)?;
    for c in capacity {
        let zones: Vec<String> = match &c.zone {
            Some(z) => vec![z.clone()],
            None => sim.catalog().zones.clone(),
        };
        let cts = match c.capacity_type {
            Some(ct) => vec![ct],
            None => vec![CapacityType::Spot, CapacityType::OnDemand],
        };
        for z in &zones {
            for ct in &cts {
                sim.set_capacity(&c.instance_type, z, *ct, c.count);
            }
        }
    }
    let ports = Ports {
        store: MemStore::new(),
        ec2: sim,
        bus: MemBus::new(),
        clock: clock.clone(),
        config: Config {
            region: region.to_string(),
            reserved_capacity,
            node_role: role,
            instance_profile: Some(SIMULATED_PROFILE.into()),
            ..Config::default()
        },
        access: Access::default().allow("simulated", SIMULATED_AGENT),
    };
    let posted = post_changes(&ports, documents(inputs)?)?;
    if posted.pending_pods == 0 {
        bail!("no pending pods in the inputs");
    }
    eprintln!(
        "posted the cluster as the agent does: {} objects, {} pods over {} templates, {} part(s), {} bytes",
        posted.objects, posted.pods, posted.templates, posted.parts, posted.bytes
    );
    let wait = {
        let clock = clock.clone();
        move |ms: i64| {
            clock.advance_millis(ms);
        }
    };
    for _ in 0..10_000 {
        let events = ports.bus.take();
        if events.is_empty() {
            break;
        }
        for e in &events {
            block_on(flotilla_service::local::dispatch(&ports, e, &wait))?;
        }
    }
    let records: Vec<NodeClaimRecord> = block_on(flotilla_service::schedule::node_claims(
        &ports.store,
        "simulated",
    ))?
    .into_iter()
    .map(|(_, r)| r)
    .collect();
    let catalog = ports.ec2.catalog();
    let price_of = |t: &str, z: &str, ct: &str| -> f64 {
        catalog
            .get(t)
            .and_then(|e| {
                e.offerings
                    .iter()
                    .find(|o| o.zone == z && o.capacity_type.as_str() == ct)
            })
            .map_or(0.0, |o| o.price)
    };
    let mut report = Report {
        launched: Vec::new(),
        failed: Vec::new(),
        unschedulable: Vec::new(),
        create_fleet_calls: ports.ec2.create_fleet_calls(),
        hourly_price: 0.0,
    };
    for r in &records {
        match (&r.state, &r.instance) {
            (NodeClaimState::Launched, Some(i)) => {
                let price = price_of(&i.instance_type, &i.zone, &i.capacity_type);
                report.hourly_price += price;
                report.launched.push(Launched {
                    node_claim: r.name.clone(),
                    node_pool: r.plan.node_pool.clone(),
                    instance_id: i.instance_id.clone(),
                    instance_type: i.instance_type.clone(),
                    zone: i.zone.clone(),
                    capacity_type: i.capacity_type.clone(),
                    price,
                    pods: r.plan.pods.len(),
                });
            }
            (NodeClaimState::Failed, _) => report.failed.push(Failed {
                node_claim: r.name.clone(),
                reason: r.reason.clone().unwrap_or_default(),
                pods: r.plan.pods.len(),
            }),
            _ => {}
        }
    }
    let view = block_on(intake::cluster_view(
        &ports.store,
        &ports.clock,
        &ports.config,
        &ports.access,
        &Caller {
            principal: Some(SIMULATED_AGENT.into()),
        },
        "simulated",
    ))?;
    if let Some(last) = view.last_result {
        report.unschedulable = last.unschedulable;
    }
    let _ = ports.clock.now_millis();
    if json {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        crate::json_out::write(&mut out, &report)?;
        use std::io::Write;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    let mut by_pool: BTreeMap<(&str, &str), (usize, f64)> = BTreeMap::new();
    println!(
        "{:<28} {:<20} {:<16} {:<12} {:<10} {:>8} {:>5}",
        "NODECLAIM", "INSTANCE", "TYPE", "ZONE", "CAPACITY", "$/HOUR", "PODS"
    );
    for l in &report.launched {
        println!(
            "{:<28} {:<20} {:<16} {:<12} {:<10} {:>8.4} {:>5}",
            l.node_claim, l.instance_id, l.instance_type, l.zone, l.capacity_type, l.price, l.pods
        );
        let e = by_pool
            .entry((l.instance_type.as_str(), l.capacity_type.as_str()))
            .or_default();
        e.0 += 1;
        e.1 += l.price;
    }
    for f in &report.failed {
        println!("FAILED {} ({} pods): {}", f.node_claim, f.pods, f.reason);
    }
    for (pod, reason) in &report.unschedulable {
        println!("unschedulable {pod}: {reason}");
    }
    println!(
        "\n{} instance(s) launched at ${:.4}/hour with {} CreateFleet call(s); {} NodeClaim(s) failed",
        report.launched.len(),
        report.hourly_price,
        report.create_fleet_calls,
        report.failed.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_limits_parse_and_reject_garbage() {
        let c = parse_capacity("m5.large:us-west-2a:spot=0").unwrap();
        assert_eq!(c.instance_type, "m5.large");
        assert_eq!(c.zone.as_deref(), Some("us-west-2a"));
        assert_eq!(c.capacity_type, Some(CapacityType::Spot));
        assert_eq!(c.count, 0);
        let c = parse_capacity("c6i.xlarge=3").unwrap();
        assert_eq!((c.zone, c.capacity_type, c.count), (None, None, 3));
        assert!(parse_capacity("m5.large").is_err());
        assert!(parse_capacity("=3").is_err());
        assert!(parse_capacity("m5.large=-1").is_err());
    }
}
