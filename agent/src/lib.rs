//! Flotilla's cluster agent.
//!
//! It watches the cluster (reflectors, no polling LISTs), posts batches of
//! unschedulable pods with the state the scheduler needs to the intake
//! Function URL (SigV4-signed, gzip'd, under Lambda's payload limit), reads
//! the cluster's NodeClaims and actions back and applies them (labels and
//! taints on registered nodes, cordon, drain through the Eviction API,
//! relabel), then acknowledges them. Two replicas elect a leader through a
//! `coordination.k8s.io` Lease; only the leader posts and applies.
//!
//! The decisions are pure functions, tested without a cluster:
//! [`docs`] (which pods are pending, what of each object is sent),
//! [`batch`] (batching window, body assembly under the size limit),
//! [`plan`] (what to do for each action and newly registered node),
//! [`leader`] (the lease decision), [`pods`] (what is kept of each pod). The rest wires them to kube-rs, the
//! intake HTTP client ([`intake`]) and the metrics server ([`metrics`]).

pub mod apply;
pub mod batch;
pub mod changes;
pub mod config;
pub mod docs;
pub mod intake;
pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod plan;
pub mod pods;
pub mod run;
pub mod watch;

/// Choose rustls' crypto provider for the process (ring). Both ring (kube,
/// reqwest) and aws-lc-rs (aws-config) are linked, so rustls cannot pick
/// one by itself and would panic at the first TLS client. Idempotent.
pub fn install_crypto_provider() {
    // Err means a provider is already installed: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The agent's Kubernetes client. kube's default retry layer is turned
/// off: it retries 429 up to 15 times with delays growing to 1,000 s, and
/// a 429 from the Eviction API means a PodDisruptionBudget says "not now",
/// which the drain handles itself (next round, until the deadline). The
/// agent's loops retry everything else (watch backoff, the next lease
/// round, the next results round).
pub fn kube_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    install_crypto_provider();
    config.default_retry = false;
    kube::Client::try_from(config)
}
