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
//! [`leader`] (the lease decision). The rest wires them to kube-rs, the
//! intake HTTP client ([`intake`]) and the metrics server ([`metrics`]).

pub mod apply;
pub mod batch;
pub mod config;
pub mod docs;
pub mod intake;
pub mod leader;
pub mod metrics;
pub mod plan;
pub mod run;
pub mod watch;
