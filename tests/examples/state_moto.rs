//! The cluster state kept by changes over moto's DynamoDB: the agent's full
//! resync of a generated cluster and then a steady-state post of changed
//! pods (the same posts as the `state` bench of `flotilla-bench`, made by
//! `flotilla_bench::agent_posts`), each gzip'd and handed to the intake
//! Lambda's handler as a Function URL delivers it, over the DynamoDB
//! adapter on moto's server (the bus in memory, the clock manual). Every
//! run starts on a fresh table; the same runs over the in-memory store
//! come first, and the state the schedule stage's loader reads must be the
//! same on both. One JSON line per step on stdout; medians of `--runs`.
//!
//! `state_moto [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--runs N]`
//!
//! moto's server is started from `$FLOTILLA_MOTO_SERVER` (else
//! `~/.cache/flotilla/venv/bin/moto_server`), or, with
//! `FLOTILLA_MOTO_ENDPOINT=http://127.0.0.1:PORT`, one already running is
//! used.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use flotilla_aws::DynamoStore;
use flotilla_bench::agent_posts::{self, gzip_len, Agent, CLUSTER, DEFAULT_SHAPE};
use flotilla_bench::cluster_docs::Shape;
use flotilla_ports::Store;
use flotilla_sim::MemStore;
use flotilla_tests::counted::Counted;
use flotilla_tests::{gzip_url_request, sim_ports, unique_name, Moto, SimPorts};
use serde_json::{json, Value};

struct Args {
    shape: Shape,
    changed: usize,
    runs: usize,
}

fn args() -> Result<Args> {
    let mut shape = DEFAULT_SHAPE;
    let (mut changed, mut runs) = (1_000, 3);
    agent_posts::parse_counts(
        std::env::args().skip(1),
        &mut [
            ("--nodes", &mut shape.nodes),
            ("--pods", &mut shape.bound_pods),
            ("--pending", &mut shape.pending_pods),
            ("--apps", &mut shape.apps),
            ("--changed", &mut changed),
            ("--runs", &mut runs),
        ],
    )
    .map_err(|e| anyhow!("{e}\nusage: state_moto [--nodes N] [--pods N] [--pending N] [--apps N] [--changed N] [--runs N]"))?;
    Ok(Args {
        shape,
        changed,
        runs: runs.max(1),
    })
}

/// The agent's posts, encoded once.
struct Posts {
    resync: Vec<Vec<u8>>,
    delta: Vec<u8>,
}

/// One run's figures.
struct Run {
    resync_seconds: f64,
    delta_seconds: f64,
    /// The store calls of the delta's apply.
    delta_calls: Value,
    /// The batch the delta scheduled.
    batch: String,
}

/// Post `body` to the intake handler (as the Lambda runtime hands it a
/// Function URL request); its answer.
async fn post<S: Store>(p: &SimPorts<S>, body: &[u8]) -> Result<Value> {
    p.clock.advance_millis(100);
    let req = gzip_url_request("/changes", body);
    let (resp, _metrics) = flotilla_fn_intake::handle_measured(p, &req).await;
    let text = resp.body.unwrap_or_default();
    if resp.status_code != 202 {
        bail!("intake answered {}: {text}", resp.status_code);
    }
    serde_json::from_str(&text).context("intake's answer")
}

/// The resync then the delta over `p`'s store.
async fn run<S: Store>(p: &SimPorts<Counted<S>>, posts: &Posts) -> Result<Run> {
    let t = Instant::now();
    for b in &posts.resync {
        post(p, b).await?;
    }
    let resync_seconds = t.elapsed().as_secs_f64();
    p.store.reset();
    let t = Instant::now();
    let out = post(p, &posts.delta).await?;
    let delta_seconds = t.elapsed().as_secs_f64();
    if out["applied"] != json!(true) {
        bail!("the delta was not applied: {out}");
    }
    let batch = out["batchId"].as_str().unwrap_or_default().to_string();
    Ok(Run {
        resync_seconds,
        delta_seconds,
        delta_calls: p.store.summary(),
        batch,
    })
}

/// What the schedule stage loads of `batch`, and the hash of the state
/// intake holds.
async fn loaded<S: Store>(store: &S, batch: &str) -> Result<Value> {
    let state = flotilla_service::cluster_state::load(store, CLUSTER, batch)
        .await
        .context("loading the state")?;
    let (_, head) = flotilla_service::changes::read_head(store, CLUSTER).await?;
    let cluster = head.cluster.clone().context("the head names no cluster")?;
    let state_ref = flotilla_service::records::StateRef {
        cluster,
        snapshot: head.snapshot.clone(),
        deltas: head.deltas.clone(),
    };
    let cache = flotilla_service::changes::load_state(store, CLUSTER, &state_ref).await?;
    let json = flotilla_service::codec::to_json(&cache);
    Ok(json!({"nodes": state.nodes.len(),
        "boundPods": state.nodes.iter().map(|n| n.pods.len()).sum::<usize>(),
        "pendingPods": state.pending_pods.len(),
        "stateHash": flotilla_service::codec::content_hash(&json), "stateBytes": json.len()}))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `runs` runs over stores `make` gives (each fresh); the figures and
/// what the last run's store loads.
async fn measure<S, F, Fut>(label: &str, runs: usize, posts: &Posts, make: F) -> Result<Value>
where
    S: Store + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<S>>,
{
    let mut done = Vec::new();
    let mut state = Value::Null;
    for _ in 0..runs {
        // The posts are signed by the sample agent role, granted CLUSTER.
        let p = sim_ports(Counted::new(make().await?), CLUSTER);
        let r = run(&p, posts)
            .await
            .with_context(|| format!("{label} run"))?;
        state = loaded(&p.store, &r.batch).await?;
        done.push(r);
    }
    let resync: Vec<f64> = done.iter().map(|r| r.resync_seconds).collect();
    let delta: Vec<f64> = done.iter().map(|r| r.delta_seconds * 1000.0).collect();
    let calls = done
        .last()
        .map(|r| r.delta_calls.clone())
        .unwrap_or_default();
    Ok(json!({"store": label, "runs": runs,
        "resyncApplySeconds": median(resync.clone()), "resyncApplyRuns": resync,
        "deltaApplyMs": median(delta.clone()), "deltaApplyRunsMs": delta,
        "deltaStoreCalls": calls, "loaded": state}))
}

/// moto's server: started here, or the one `FLOTILLA_MOTO_ENDPOINT` names.
fn moto() -> Result<(Option<Moto>, String)> {
    if let Ok(endpoint) = std::env::var("FLOTILLA_MOTO_ENDPOINT") {
        return Ok((None, endpoint));
    }
    let m = Moto::try_start().map_err(|e| anyhow!(e))?;
    let endpoint = m.endpoint();
    Ok((Some(m), endpoint))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let a = args()?;
    let shape = a.shape;
    let mut agent = Agent::new(shape);
    let resync = agent.resync();
    let delta = agent.delta(a.changed).context("no delta")?;
    let posts = Posts {
        resync: resync.bodies,
        delta: delta.body,
    };
    println!(
        "{}",
        json!({"step": "posts", "nodes": shape.nodes, "boundPods": shape.bound_pods,
            "pendingPods": shape.pending_pods, "changedPods": a.changed,
            "resyncParts": posts.resync.len(), "resyncBytes": posts.resync.iter().map(Vec::len).sum::<usize>(),
            "resyncGzipBytes": posts.resync.iter().map(|b| gzip_len(b)).sum::<usize>(),
            "deltaPosts": delta.posts, "deltaPodRows": delta.pod_rows, "deltaDeleted": delta.deleted,
            "deltaTemplates": delta.templates,
            "deltaBytes": posts.delta.len(), "deltaGzipBytes": gzip_len(&posts.delta)})
    );

    let memory = measure("memory", a.runs, &posts, || async { Ok(MemStore::new()) }).await?;
    println!("{memory}");

    let (_server, endpoint) = moto()?;
    let sdk = flotilla_aws::static_config(&endpoint, "us-east-1", "testing", "testing").await;
    let moto = measure("moto", a.runs, &posts, || async {
        let store = DynamoStore::new(&sdk, unique_name("flotilla-state"));
        store.create_table().await.context("creating the table")?;
        Ok(store)
    })
    .await?;
    println!("{moto}");
    if moto["loaded"] != memory["loaded"] {
        bail!(
            "moto's state differs: {} vs {} in memory",
            moto["loaded"],
            memory["loaded"]
        );
    }
    println!("{}", json!({"step": "check", "sameState": true}));
    Ok(())
}
