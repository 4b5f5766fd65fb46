//! The agent's loops: reflectors in every replica (a warm cache for a fast
//! failover), and in the leader only, batching and posting pending pods,
//! reading results back and applying actions.
//!
//! At most one batch is in flight: posts happen one after the other in
//! the main loop, and a batch that had to be cut in parts (body limit)
//! waits for the result of each part before the next, since intake lets a
//! newer pending batch supersede an older one.
//!
//! A post that fails (refused with 403 included) keeps its pods: they are
//! posted again after a backoff (the batching idle time, doubling, at most
//! the heartbeat), not dropped until the next change or heartbeat.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch as signal;
use tokio::time::Instant;

use crate::apply::{ActionRunner, Applier};
use crate::batch::{self, Window};
use crate::changes::{self, ChangeStream};
use crate::config::Protocol;
use crate::config::{ClusterMeta, Settings};
use crate::intake::IntakeClient;
use crate::leader::LeaseLock;
use crate::metrics::Metrics;
use crate::plan;
use crate::watch::{self, Cache};

/// Everything the agent runs with.
pub struct Agent {
    pub cluster_id: String,
    pub cluster: ClusterMeta,
    pub settings: Settings,
    pub client: kube::Client,
    pub intake: IntakeClient,
    pub metrics: Arc<Metrics>,
    /// This replica's name in the Lease.
    pub identity: String,
    /// Namespace and name of the Lease.
    pub lease_namespace: String,
    pub lease_name: String,
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Hold or follow the leader lease until `shutdown`, publishing whether
/// this replica leads; give the lease up on the way out.
pub async fn lead(
    lock: LeaseLock,
    settings: Settings,
    leading_tx: signal::Sender<bool>,
    mut shutdown: signal::Receiver<bool>,
    metrics: Arc<Metrics>,
) {
    let mut last_renewed: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let was = *leading_tx.borrow();
        let leading = match tokio::time::timeout(
            settings.renew_deadline,
            lock.try_acquire_or_renew(),
        )
        .await
        {
            Ok(Ok(held)) => {
                if held {
                    last_renewed = Some(now);
                }
                held
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leader lease round failed");
                was && last_renewed.is_some_and(|t| now.duration_since(t) < settings.renew_deadline)
            }
            Err(_) => {
                tracing::warn!("leader lease round timed out");
                was && last_renewed.is_some_and(|t| now.duration_since(t) < settings.renew_deadline)
            }
        };
        if leading != was {
            tracing::info!(identity = %lock.identity(), leading, "leadership changed");
            leading_tx.send_replace(leading);
            metrics.leader.set(i64::from(leading));
        }
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.lease_retry) => {}
            _ = shutdown.changed() => break,
        }
    }
    if *leading_tx.borrow() {
        leading_tx.send_replace(false);
        metrics.leader.set(0);
        match lock.release().await {
            Ok(()) => tracing::info!(identity = %lock.identity(), "leader lease released"),
            Err(e) => tracing::warn!(error = %e, "could not release the leader lease"),
        }
    }
}

struct Poster {
    cluster_id: String,
    meta: Vec<u8>,
    settings: Settings,
    intake: IntakeClient,
    metrics: Arc<Metrics>,
    /// When each pending pod was last posted (pods left out of a part go
    /// first next time).
    last_sent: HashMap<String, Instant>,
    /// Posts failed in a row (the next try backs off).
    failures: u32,
    /// Posting by changes (`POST /changes`); `None`: whole batches
    /// (`POST /batches`, for an intake that predates changes).
    changes: Option<ChangeStream>,
}

impl Poster {
    /// [`Self::post`], abandoned as soon as leadership is lost. Returns when
    /// to try again if the post failed (its pods were kept).
    async fn post_while_leading(
        &mut self,
        cache: &Cache,
        leading: &signal::Receiver<bool>,
    ) -> Option<Instant> {
        let mut lost = leading.clone();
        let delivered = tokio::select! {
            d = self.post(cache, leading) => d,
            _ = lost.wait_for(|l| !*l) => {
                tracing::warn!("leadership lost while posting; post abandoned");
                return None;
            }
        };
        if delivered {
            self.failures = 0;
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        let delay = batch::retry_delay(
            self.failures,
            self.settings.idle.max(Duration::from_millis(100)),
            self.settings.heartbeat,
        );
        tracing::warn!(
            failures = self.failures,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "pending pods kept for the next post"
        );
        Some(Instant::now() + delay)
    }

    /// Post the pending pods (or, with none, a heartbeat), in parts if they
    /// do not fit in one body. False when a part was not delivered: its
    /// pods stay pending (never marked sent) for the next try.
    async fn post(&mut self, cache: &Cache, leading: &signal::Receiver<bool>) -> bool {
        if self.changes.is_some() {
            return self.post_changes(cache, leading).await;
        }
        let mut sent: HashSet<String> = HashSet::new();
        let mut part = 0usize;
        loop {
            if !*leading.borrow() {
                return true;
            }
            let snap = cache.snapshot();
            let current: HashSet<&str> = snap.pending.iter().map(|p| p.key.as_str()).collect();
            self.last_sent.retain(|k, _| current.contains(k.as_str()));
            let mut pending: Vec<_> = snap
                .pending
                .iter()
                .filter(|p| !sent.contains(&p.key))
                .cloned()
                .collect();
            if part > 0 && pending.is_empty() {
                return true;
            }
            batch::order_pending(&mut pending, &self.last_sent);
            let assembled = match batch::assemble(
                &self.cluster_id,
                &self.meta,
                &snap.context,
                &pending,
                self.settings.max_body_bytes,
            ) {
                Ok(a) => a,
                Err(e) => {
                    self.metrics.batch("rejected");
                    tracing::error!(error = %e, "cannot build a batch");
                    return false;
                }
            };
            self.metrics
                .batch_bytes
                .observe(assembled.body.len() as f64);
            match self.intake.post_batch(&assembled.body).await {
                Ok(accepted) => {
                    self.metrics.batch("accepted");
                    tracing::info!(
                        batch = %accepted.batch_id,
                        pods = assembled.included.len(),
                        deferred = assembled.deferred,
                        bytes = assembled.body.len(),
                        deduplicated = accepted.deduplicated,
                        registered = accepted.registered,
                        part,
                        "batch posted"
                    );
                    let now = Instant::now();
                    for k in &assembled.included {
                        self.last_sent.insert(k.clone(), now);
                        sent.insert(k.clone());
                    }
                    if assembled.deferred == 0 {
                        return true;
                    }
                    if assembled.included.is_empty() {
                        tracing::error!(
                            left = assembled.deferred,
                            "pending pods too large for any batch with the cluster state"
                        );
                        return true;
                    }
                    if !accepted.batch_id.is_empty() {
                        self.wait_result(&accepted.batch_id).await;
                    }
                    part += 1;
                }
                Err(e) => {
                    let rejected = e
                        .status()
                        .is_some_and(|s| (400..500).contains(&s) && s != 429);
                    self.metrics.batch(if e.is_forbidden() {
                        "forbidden"
                    } else if rejected {
                        "rejected"
                    } else {
                        "failed"
                    });
                    tracing::error!(error = %e, pods = assembled.included.len(), "batch not posted");
                    return false;
                }
            }
        }
    }

    /// Post what changed since intake's last acknowledgement (a resync
    /// when due), in parts under the body limit. False when a part was not
    /// delivered: the next post sends its changes again (intake applies a
    /// post once, and asks for a resync when it cannot apply one).
    async fn post_changes(&mut self, cache: &Cache, leading: &signal::Receiver<bool>) -> bool {
        let Some(stream) = self.changes.as_mut() else {
            return false;
        };
        let (observed, pending) = cache.observed();
        // The envelope (ids, cluster facts, sequence) around the changes.
        let limit = self
            .settings
            .max_body_bytes
            .saturating_sub(self.meta.len() + 1024);
        let mut prepared = stream.prepare(observed, limit, Instant::now());
        let parts = prepared.parts();
        for i in 0..parts {
            if !*leading.borrow() {
                return true;
            }
            // Built now, and what it was built from freed: a part that
            // fails is prepared again by the next post.
            let Some(mut part) = prepared.take_part(i) else {
                return false;
            };
            let body = changes::body(
                &self.cluster_id,
                &self.meta,
                &part.sequence,
                pending,
                &std::mem::take(&mut part.changes),
            );
            let sequence = &part.sequence;
            self.metrics.batch_bytes.observe(body.len() as f64);
            match self.intake.post_changes(&body).await {
                Ok(accepted) => {
                    let last = i + 1 == parts;
                    if last && !accepted.missing_parts.is_empty() {
                        tracing::warn!(missing = ?accepted.missing_parts, "intake lacks resync parts; resyncing");
                        stream.resync_required();
                        return false;
                    }
                    if sequence.resync.is_none() {
                        stream.delivered(sequence);
                    }
                    self.metrics.batch("accepted");
                    tracing::info!(
                        stream = %sequence.stream,
                        seq = sequence.seq,
                        part = i,
                        parts,
                        resync = prepared.resync,
                        objects = part.objects,
                        pods = part.pods,
                        deleted = part.deleted,
                        bytes = body.len(),
                        applied = accepted.applied,
                        batch = %accepted.batch_id,
                        "changes posted"
                    );
                }
                Err(e) => {
                    if e.status() == Some(409) {
                        self.metrics.batch("resync");
                        tracing::warn!(error = %e, "intake asks for a resync");
                        stream.resync_required();
                    } else {
                        self.metrics.batch(if e.is_forbidden() {
                            "forbidden"
                        } else {
                            "failed"
                        });
                        tracing::error!(error = %e, "changes not posted");
                    }
                    return false;
                }
            }
        }
        stream.delivered_all(prepared, Instant::now());
        true
    }

    /// Wait (at most `part_hold`) until intake reports the batch scheduled.
    async fn wait_result(&self, batch_id: &str) {
        let until = Instant::now() + self.settings.part_hold;
        let every = self.settings.idle.max(Duration::from_millis(20));
        while Instant::now() < until {
            match self.intake.cluster(&self.cluster_id).await {
                Ok(v)
                    if v.last_result
                        .as_ref()
                        .is_some_and(|r| r.batch_id == batch_id) =>
                {
                    return
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "reading the batch result"),
            }
            tokio::time::sleep(every).await;
        }
        tracing::warn!(batch = %batch_id, "no result for the batch part in time; posting the next part");
    }
}

/// Read the cluster's NodeClaims and actions, apply, acknowledge.
async fn results_round(
    cluster_id: &str,
    intake: &IntakeClient,
    cache: &Cache,
    runner: &mut ActionRunner,
    applier: &Applier,
    metrics: &Metrics,
) {
    match intake.cluster(cluster_id).await {
        Ok(view) => {
            let nodes = cache.node_facts();
            // Only drains read pods: those of the nodes they name.
            let pods = cache.pod_facts_on(&plan::drained_nodes(&view, &nodes));
            let round = runner
                .round(&view, &nodes, &pods, unix_now(), applier, Some(metrics))
                .await;
            tracing::debug!(?round, "results round");
        }
        Err(e) => tracing::warn!(error = %e, "reading NodeClaims and actions"),
    }
    let outbox = runner.outbox();
    if outbox.is_empty() {
        return;
    }
    let acks: Vec<_> = outbox.iter().map(|p| p.ack.clone()).collect();
    match intake.acknowledge(cluster_id, &acks).await {
        Ok(report) => {
            runner.delivered(&outbox, Some(metrics), unix_now());
            if !report.unknown.is_empty() {
                tracing::warn!(unknown = ?report.unknown, "acknowledged actions intake no longer has");
            }
        }
        Err(e) => tracing::warn!(error = %e, "acknowledging actions; retrying next round"),
    }
}

/// Run until `shutdown` turns true.
pub async fn run(agent: Agent, mut shutdown: signal::Receiver<bool>) -> anyhow::Result<()> {
    let Agent {
        cluster_id,
        cluster,
        settings,
        client,
        intake,
        metrics,
        identity,
        lease_namespace,
        lease_name,
    } = agent;
    let (cache, mut changes, tasks) = watch::start(client.clone(), Some(metrics.clone()));
    let (leading_tx, mut leading) = signal::channel(false);
    let lock = LeaseLock::new(
        Api::<Lease>::namespaced(client.clone(), &lease_namespace),
        &lease_name,
        &identity,
        settings.lease_duration,
    );
    let leader = tokio::spawn(lead(
        lock,
        settings.clone(),
        leading_tx,
        shutdown.clone(),
        metrics.clone(),
    ));
    let stop = |tasks: Vec<tokio::task::JoinHandle<()>>| {
        for t in tasks {
            t.abort();
        }
    };

    tokio::select! {
        _ = cache.wait_ready(Duration::from_millis(50)) => {}
        _ = shutdown.changed() => {
            stop(tasks);
            let _ = leader.await;
            return Ok(());
        }
    }
    metrics.set_ready(true);
    tracing::info!(cluster = %cluster_id, identity = %identity, "caches synced");

    let mut poster = Poster {
        cluster_id: cluster_id.clone(),
        meta: serde_json::to_vec(&cluster)?,
        settings: settings.clone(),
        intake: intake.clone().with_metrics(metrics.clone()),
        metrics: metrics.clone(),
        last_sent: HashMap::new(),
        failures: 0,
        changes: match settings.protocol {
            Protocol::Changes => Some(ChangeStream::new(
                format!("{identity}.{}", unix_now()),
                settings.resync_every,
            )),
            Protocol::Batches => None,
        },
    };
    let applier = Applier::new(client.clone());
    let mut runner = ActionRunner::new();
    let mut window = Window::new(settings.idle, settings.max);
    // Whatever is pending at start (the first LIST) is a change.
    window.observe(Instant::now());
    let mut heartbeat = tokio::time::interval(settings.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;
    let mut results = tokio::time::interval(settings.results);
    results.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let far = Duration::from_secs(86_400);

    loop {
        metrics.tick();
        let deadline = window.deadline();
        tokio::select! {
            // Shutdown first: the leader task ends on it too, closing `leading`.
            biased;
            _ = shutdown.changed() => break,
            r = changes.changed() => {
                if r.is_err() {
                    if *shutdown.borrow() {
                        break;
                    }
                    anyhow::bail!("the pod watch ended");
                }
                window.observe(Instant::now());
            }
            r = leading.changed() => {
                if r.is_err() {
                    if *shutdown.borrow() {
                        break;
                    }
                    anyhow::bail!("the leader election ended");
                }
                if *leading.borrow() {
                    // A new leader posts the current state soon.
                    window.observe(Instant::now());
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(|| Instant::now() + far)), if deadline.is_some() => {
                window.reset();
                if *leading.borrow() {
                    tokio::select! {
                        retry = poster.post_while_leading(&cache, &leading) => {
                            if let Some(at) = retry {
                                window.retry_at(at);
                            }
                        }
                        _ = shutdown.changed() => break,
                    }
                    heartbeat.reset();
                }
            }
            _ = heartbeat.tick() => {
                if *leading.borrow() {
                    tokio::select! {
                        retry = poster.post_while_leading(&cache, &leading) => {
                            if let Some(at) = retry {
                                window.retry_at(at);
                            }
                        }
                        _ = shutdown.changed() => break,
                    }
                }
            }
            _ = results.tick() => {
                if *leading.borrow() {
                    tokio::select! {
                        _ = results_round(&cluster_id, &poster.intake, &cache, &mut runner, &applier, &metrics) => {}
                        _ = shutdown.changed() => break,
                    }
                }
            }
        }
    }
    tracing::info!("shutting down");
    metrics.set_ready(false);
    let _ = leader.await;
    stop(tasks);
    Ok(())
}
