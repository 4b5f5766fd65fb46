//! The four stages of the pipeline as services generic over the ports
//! (`flotilla-ports`): the Lambda binaries in `functions/` parse their event,
//! build the AWS adapters and call one method here; the tests call the same
//! methods over the in-memory simulator.
//!
//! Decisions (what to schedule, what to launch, what to do on a capacity
//! error) are made by `flotilla-core`; this crate only sequences reads,
//! conditional writes and events so that every step is safe to repeat:
//!
//! - intake stores a batch in chunks, moves the cluster's pending pointer
//!   (a version-checked write) and puts `BatchAccepted`;
//! - schedule debounces (idle / max window), takes the cluster's scheduling
//!   lease, plans with in-flight NodeClaims counted as capacity, writes each
//!   NodeClaim only if absent (reservation counters in the same transaction)
//!   and puts `NodeClaimsPlanned`;
//! - launch moves a NodeClaim `Pending → Launching` under a lease, adopts an
//!   instance already tagged with the NodeClaim before calling CreateFleet
//!   (so a retry never launches twice even where EC2's client token is not
//!   honoured) and records `Launched` or `Failed`;
//! - sweep reconciles NodeClaims with EC2 and runs the reservation policy.
//!
//! The table layout is in [`keys`].

pub mod codec;
pub mod intake;
pub mod keys;
pub mod offerings;
pub mod records;
pub mod schedule;

use flotilla_ports::PortError;

/// Configuration shared by the stages (from the Lambda environment).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// AWS region of the EC2 calls and the offering cache.
    pub region: String,
    /// The ReservedCapacity feature gate.
    pub reserved_capacity: bool,
    /// Batching: schedule once no batch arrived for this long...
    pub batch_idle_ms: i64,
    /// ...or once the oldest unscheduled batch is this old.
    pub batch_max_ms: i64,
    /// How long a scheduling or launch lease is held before another
    /// invocation may take over (longer than the Lambda timeout).
    pub lease_ms: i64,
    /// Largest request body intake accepts (Lambda's payload limit is 6 MB).
    pub max_body_bytes: usize,
    /// Most pending pods in one batch.
    pub max_pending_pods: usize,
    /// How long batches, results and contexts are kept.
    pub retention_secs: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            region: "us-west-2".into(),
            reserved_capacity: false,
            batch_idle_ms: 1_000,
            batch_max_ms: 10_000,
            lease_ms: 16 * 60 * 1000,
            max_body_bytes: 6 * 1024 * 1024,
            max_pending_pods: 100_000,
            retention_secs: 24 * 3600,
        }
    }
}

/// What a stage can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The caller's input was wrong: a 4xx for intake, a dropped event
    /// elsewhere (retrying cannot fix it).
    #[error("{0}")]
    BadRequest(String),
    /// The caller may not act on this cluster.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A port failed; retryable ones should make the Lambda fail so that
    /// EventBridge / the agent retries.
    #[error("{context}: {source}")]
    Port {
        context: String,
        #[source]
        source: PortError,
    },
    /// Stored data could not be read back (corrupt or from a newer version).
    #[error("stored data {key}: {reason}")]
    Corrupt { key: String, reason: String },
}

impl ServiceError {
    pub fn port(context: impl Into<String>) -> impl FnOnce(PortError) -> ServiceError {
        let context = context.into();
        move |source| ServiceError::Port { context, source }
    }

    /// Worth failing the invocation so the platform retries it.
    pub fn is_retryable(&self) -> bool {
        match self {
            ServiceError::Port { source, .. } => {
                source.is_retryable() || matches!(source, PortError::ConditionFailed(_))
            }
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, ServiceError>;
