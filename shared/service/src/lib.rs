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

pub mod actions;
pub mod batches;
pub mod changes;
pub mod cluster_state;
pub mod codec;
pub mod disruption;
pub mod instances;
pub mod intake;
pub mod keys;
pub mod launch;
pub mod launch_env;
pub mod local;
pub mod nodeclaims;
pub mod offerings;
mod prepare;
pub mod records;
pub mod reports;
pub mod resolve;
pub mod schedule;
pub mod sweep;

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
    /// invocation may take over (longer than the Lambda timeouts, which the
    /// template sets to at most 5 minutes).
    pub lease_ms: i64,
    /// Largest request body intake accepts (Lambda's payload limit is 6 MB).
    pub max_body_bytes: usize,
    /// Most pending pods in one batch.
    pub max_pending_pods: usize,
    /// How long batches, results and contexts are kept.
    pub retention_secs: i64,
    /// Read instance types, offerings and spot prices from EC2 (cached in
    /// the table) instead of the embedded catalog.
    pub live_offerings: bool,
    /// The node IAM role the deployment made an instance profile for, and
    /// that profile (used for EC2NodeClasses that name `spec.role`).
    pub node_role: Option<String>,
    pub instance_profile: Option<String>,
    /// The EKS cluster this deployment provisions for (`ClusterName`,
    /// `FLOTILLA_CLUSTER_NAME`): intake refuses batches for another one.
    /// `None` (local use): any cluster name.
    pub cluster_name: Option<String>,
    /// This deployment's identity (`FLOTILLA_STACK_ID`, the CloudFormation
    /// stack id): launches tag everything `flotilla.io/stack` with it, and
    /// the sweep collects only instances carrying it.
    pub stack_id: String,
    /// Deltas kept over a cluster's state snapshot before intake folds
    /// them into a new one ([`changes::MAX_DELTAS`]).
    pub state_max_deltas: usize,
}

/// The default [`Config::stack_id`] (local use: `flotilla simulate`, tests).
pub const LOCAL_STACK_ID: &str = "local";

impl Default for Config {
    fn default() -> Self {
        Config {
            region: "us-west-2".into(),
            reserved_capacity: false,
            batch_idle_ms: 1_000,
            batch_max_ms: 10_000,
            lease_ms: 6 * 60 * 1000,
            max_body_bytes: 6 * 1024 * 1024,
            max_pending_pods: 100_000,
            retention_secs: 24 * 3600,
            live_offerings: true,
            node_role: None,
            instance_profile: None,
            cluster_name: None,
            stack_id: LOCAL_STACK_ID.into(),
            state_max_deltas: changes::MAX_DELTAS,
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
    /// A change post intake cannot apply over the state it holds (a gap in
    /// the sequence, another agent stream, no state stored): the agent
    /// must send a full resync (intake answers 409).
    #[error("resync required: {0}")]
    ResyncRequired(String),
}

/// Write `items` unconditionally, one after the other (chunks of a
/// stored body: a key's content never changes); `what` names them in an
/// error.
pub(crate) async fn put_all<S: flotilla_ports::Store>(
    store: &S,
    items: Vec<flotilla_ports::Item>,
    what: &str,
) -> Result<()> {
    for item in items {
        store
            .write(flotilla_ports::Write::Put {
                item,
                condition: flotilla_ports::Condition::Always,
            })
            .await
            .map_err(ServiceError::port(format!("store {what}")))?;
    }
    Ok(())
}

/// The item at `key`, which must exist (a chunk a header or head names):
/// a missing one is [`ServiceError::Corrupt`] with `missing` as reason.
pub(crate) async fn required_item<S: flotilla_ports::Store>(
    store: &S,
    key: &flotilla_ports::Key,
    what: &str,
    missing: &str,
) -> Result<flotilla_ports::Item> {
    store
        .get(key)
        .await
        .map_err(ServiceError::port(format!("read {what}")))?
        .ok_or_else(|| ServiceError::Corrupt {
            key: key.to_string(),
            reason: missing.into(),
        })
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

/// Everything a stage talks to: the adapters plus configuration. The
/// Lambdas build it from AWS adapters, the tests from the simulator.
#[derive(Debug, Clone)]
pub struct Ports<S, E, B, C> {
    pub store: S,
    pub ec2: E,
    pub bus: B,
    pub clock: C,
    pub config: Config,
    pub access: intake::Access,
}

impl Config {
    /// Read the configuration from `FLOTILLA_*` variables through `get`
    /// (the environment in the Lambdas). Unset variables keep the default;
    /// malformed ones are an error naming the variable.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> std::result::Result<Config, String> {
        let mut c = Config::default();
        if let Some(r) = get("AWS_REGION").filter(|r| !r.is_empty()) {
            c.region = r;
        }
        fn parse<T: std::str::FromStr>(name: &str, v: &str) -> std::result::Result<T, String> {
            v.trim()
                .parse()
                .map_err(|_| format!("{name}={v:?} is not a valid value"))
        }
        if let Some(v) = get("FLOTILLA_RESERVED_CAPACITY") {
            c.reserved_capacity = parse("FLOTILLA_RESERVED_CAPACITY", &v.to_ascii_lowercase())?;
        }
        if let Some(v) = get("FLOTILLA_BATCH_IDLE_SECONDS") {
            let s: f64 = parse("FLOTILLA_BATCH_IDLE_SECONDS", &v)?;
            if !(0.0..=60.0).contains(&s) {
                return Err(format!(
                    "FLOTILLA_BATCH_IDLE_SECONDS={v} must be within 0..=60"
                ));
            }
            c.batch_idle_ms = (s * 1000.0) as i64;
        }
        if let Some(v) = get("FLOTILLA_BATCH_MAX_SECONDS") {
            let s: f64 = parse("FLOTILLA_BATCH_MAX_SECONDS", &v)?;
            if !(0.0..=600.0).contains(&s) {
                return Err(format!(
                    "FLOTILLA_BATCH_MAX_SECONDS={v} must be within 0..=600"
                ));
            }
            c.batch_max_ms = (s * 1000.0) as i64;
        }
        c.node_role = get("FLOTILLA_NODE_ROLE").filter(|v| !v.is_empty());
        c.instance_profile = get("FLOTILLA_INSTANCE_PROFILE").filter(|v| !v.is_empty());
        c.cluster_name = get("FLOTILLA_CLUSTER_NAME").filter(|v| !v.is_empty());
        if let Some(v) = get("FLOTILLA_STACK_ID").filter(|v| !v.is_empty()) {
            c.stack_id = v;
        }
        if let Some(v) = get("FLOTILLA_LIVE_OFFERINGS") {
            c.live_offerings = parse("FLOTILLA_LIVE_OFFERINGS", &v.to_ascii_lowercase())?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn the_cluster_name_and_stack_id_come_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = Config::from_lookup(env(&[
            ("FLOTILLA_CLUSTER_NAME", "prod"),
            (
                "FLOTILLA_STACK_ID",
                "arn:aws:cloudformation:us-west-2:1:stack/f/1",
            ),
        ]))
        .expect("config");
        assert_eq!(c.cluster_name.as_deref(), Some("prod"));
        assert_eq!(c.stack_id, "arn:aws:cloudformation:us-west-2:1:stack/f/1");
        // Unset or empty: local use.
        let c = Config::from_lookup(env(&[("FLOTILLA_CLUSTER_NAME", "")])).expect("config");
        assert_eq!(c.cluster_name, None);
        assert_eq!(c.stack_id, LOCAL_STACK_ID);
    }
}
