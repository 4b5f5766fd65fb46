//! Agent settings (flags or environment variables).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

/// The cluster facts intake needs for the node bootstrap (the batch's
/// `cluster` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMeta {
    pub name: String,
    pub endpoint: String,
    pub ca_bundle: String,
    pub service_cidr: String,
    pub kubernetes_version: String,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "flotilla-agent", version, about = "Flotilla's cluster agent")]
pub struct Args {
    /// Intake Function URL, e.g. https://abc.lambda-url.us-west-2.on.aws/
    #[arg(long, env = "FLOTILLA_INTAKE_URL")]
    pub intake_url: String,
    /// Flotilla cluster id (1-63 of [a-z0-9-]).
    #[arg(long, env = "FLOTILLA_CLUSTER_ID")]
    pub cluster_id: String,
    /// EKS cluster name.
    #[arg(long, env = "FLOTILLA_CLUSTER_NAME")]
    pub cluster_name: String,
    /// API server endpoint nodes join (https://...).
    #[arg(long, env = "FLOTILLA_CLUSTER_ENDPOINT")]
    pub cluster_endpoint: String,
    /// Base64 CA bundle of the API server.
    #[arg(long, env = "FLOTILLA_CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: String,
    /// Service CIDR (for the node bootstrap).
    #[arg(long, env = "FLOTILLA_SERVICE_CIDR")]
    pub service_cidr: String,
    /// Kubernetes version like 1.33; read from the API server when unset.
    #[arg(long, env = "FLOTILLA_KUBERNETES_VERSION")]
    pub kubernetes_version: Option<String>,
    /// Region of the Function URL (SigV4 signing region).
    #[arg(long, env = "AWS_REGION")]
    pub region: String,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "flotilla-system")]
    pub namespace: String,
    /// This replica's identity in the Lease.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    #[arg(long, env = "FLOTILLA_LEASE_NAME", default_value = "flotilla-agent")]
    pub lease_name: String,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "FLOTILLA_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Batching: post once no pending pod changed for this long (seconds)...
    #[arg(long, env = "FLOTILLA_BATCH_IDLE_SECONDS", default_value_t = 1.0)]
    pub batch_idle_seconds: f64,
    /// ...or once the first change is this old.
    #[arg(long, env = "FLOTILLA_BATCH_MAX_SECONDS", default_value_t = 10.0)]
    pub batch_max_seconds: f64,
    /// Post a heartbeat (nodes, no pods) at least this often (seconds).
    #[arg(long, env = "FLOTILLA_HEARTBEAT_SECONDS", default_value_t = 60.0)]
    pub heartbeat_seconds: f64,
    /// Read NodeClaims and actions back this often (seconds).
    #[arg(long, env = "FLOTILLA_RESULTS_SECONDS", default_value_t = 10.0)]
    pub results_seconds: f64,
    /// Largest uncompressed batch body (intake's limit is 6 MiB).
    #[arg(long, env = "FLOTILLA_MAX_BODY_BYTES", default_value_t = crate::batch::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Leader lease duration (seconds): a replica takes over after seeing
    /// the lease unrenewed this long.
    #[arg(long, env = "FLOTILLA_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u32,
    /// The leader steps down when it could not renew for this long (seconds).
    #[arg(long, env = "FLOTILLA_RENEW_DEADLINE_SECONDS", default_value_t = 10.0)]
    pub renew_deadline_seconds: f64,
    /// How the cluster is posted: `changes` (what changed since intake's
    /// last acknowledgement, `POST /changes`) or `batches` (the whole
    /// cluster in every post, `POST /batches`: for an intake that predates
    /// changes, and limited to clusters that fit one 6 MiB body).
    #[arg(long, env = "FLOTILLA_INTAKE_PROTOCOL", value_enum, default_value_t = Protocol::Changes)]
    pub intake_protocol: Protocol,
    /// Send the whole cluster again (a resync) at least this often
    /// (seconds), repairing anything a change post missed.
    #[arg(long, env = "FLOTILLA_RESYNC_SECONDS", default_value_t = 3600.0)]
    pub resync_seconds: f64,
    /// How often the lease is renewed or tried (seconds).
    #[arg(long, env = "FLOTILLA_LEASE_RETRY_SECONDS", default_value_t = 2.0)]
    pub lease_retry_seconds: f64,
}

/// Timing and limits of the agent's loops.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub idle: Duration,
    pub max: Duration,
    pub heartbeat: Duration,
    pub results: Duration,
    pub max_body_bytes: usize,
    /// After posting a batch that left pods out (too big), wait at most
    /// this long for its result before posting the next part.
    pub part_hold: Duration,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub lease_retry: Duration,
    pub retry: crate::intake::RetryPolicy,
    pub protocol: Protocol,
    pub resync_every: Duration,
}

/// How the agent posts the cluster (`FLOTILLA_INTAKE_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// `POST /changes`: changes since the last acknowledged post.
    Changes,
    /// `POST /batches`: the whole cluster in every post.
    Batches,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
            heartbeat: Duration::from_secs(60),
            results: Duration::from_secs(10),
            max_body_bytes: crate::batch::DEFAULT_MAX_BODY_BYTES,
            part_hold: Duration::from_secs(30),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            lease_retry: Duration::from_secs(2),
            retry: crate::intake::RetryPolicy::default(),
            protocol: Protocol::Changes,
            resync_every: Duration::from_secs(3600),
        }
    }
}

fn secs(name: &str, v: f64, max: f64) -> anyhow::Result<Duration> {
    if !(0.0..=max).contains(&v) || !v.is_finite() {
        anyhow::bail!("{name}={v} must be within 0..={max}");
    }
    Ok(Duration::from_secs_f64(v))
}

impl Args {
    pub fn settings(&self) -> anyhow::Result<Settings> {
        if self.max_body_bytes < 64 * 1024 || self.max_body_bytes > 6 * 1024 * 1024 {
            anyhow::bail!(
                "FLOTILLA_MAX_BODY_BYTES={} must be within 65536..=6291456",
                self.max_body_bytes
            );
        }
        if !(1..=300).contains(&self.lease_seconds) {
            anyhow::bail!(
                "FLOTILLA_LEASE_SECONDS={} must be within 1..=300",
                self.lease_seconds
            );
        }
        let renew_deadline = secs(
            "FLOTILLA_RENEW_DEADLINE_SECONDS",
            self.renew_deadline_seconds,
            300.0,
        )?;
        let lease_retry = secs(
            "FLOTILLA_LEASE_RETRY_SECONDS",
            self.lease_retry_seconds,
            60.0,
        )?;
        if renew_deadline >= Duration::from_secs(u64::from(self.lease_seconds))
            || lease_retry >= renew_deadline
        {
            anyhow::bail!(
                "lease timing: need FLOTILLA_LEASE_RETRY_SECONDS < FLOTILLA_RENEW_DEADLINE_SECONDS < FLOTILLA_LEASE_SECONDS"
            );
        }
        Ok(Settings {
            idle: secs("FLOTILLA_BATCH_IDLE_SECONDS", self.batch_idle_seconds, 60.0)?,
            max: secs("FLOTILLA_BATCH_MAX_SECONDS", self.batch_max_seconds, 600.0)?,
            heartbeat: secs("FLOTILLA_HEARTBEAT_SECONDS", self.heartbeat_seconds, 3600.0)?,
            results: secs("FLOTILLA_RESULTS_SECONDS", self.results_seconds, 600.0)?,
            max_body_bytes: self.max_body_bytes,
            part_hold: Duration::from_secs(30),
            lease_duration: Duration::from_secs(u64::from(self.lease_seconds)),
            renew_deadline,
            lease_retry,
            retry: crate::intake::RetryPolicy::default(),
            protocol: self.intake_protocol,
            resync_every: secs(
                "FLOTILLA_RESYNC_SECONDS",
                self.resync_seconds,
                7.0 * 86_400.0,
            )?,
        })
    }

    /// Reject what intake would reject, before the first post.
    pub fn validate(&self) -> anyhow::Result<()> {
        let id = self.cluster_id.as_bytes();
        if id.is_empty()
            || id.len() > 63
            || !id
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            || id.first() == Some(&b'-')
            || id.last() == Some(&b'-')
        {
            anyhow::bail!(
                "FLOTILLA_CLUSTER_ID {:?}: must be 1-63 characters of [a-z0-9-], not starting or ending with '-'",
                self.cluster_id
            );
        }
        if !self.intake_url.starts_with("https://") && !self.intake_url.starts_with("http://127.") {
            anyhow::bail!(
                "FLOTILLA_INTAKE_URL {:?}: must be an https:// URL",
                self.intake_url
            );
        }
        if !self.cluster_endpoint.starts_with("https://") {
            anyhow::bail!(
                "FLOTILLA_CLUSTER_ENDPOINT {:?}: must be an https:// URL",
                self.cluster_endpoint
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        let mut v = vec![
            "flotilla-agent",
            "--intake-url",
            "https://abc.lambda-url.us-west-2.on.aws/",
            "--cluster-id",
            "demo",
            "--cluster-name",
            "demo",
            "--cluster-endpoint",
            "https://EXAMPLE.eks.amazonaws.com",
            "--cluster-ca-bundle",
            "LS0=",
            "--service-cidr",
            "10.100.0.0/16",
            "--region",
            "us-west-2",
        ];
        for pair in extra.chunks(2) {
            match v.iter().position(|a| *a == pair[0]) {
                Some(i) => v[i + 1] = pair[1],
                None => v.extend_from_slice(pair),
            }
        }
        Args::try_parse_from(v)
    }

    #[test]
    fn defaults_are_karpenters_windows_and_client_gos_lease() {
        let a = args(&[]).expect("args");
        a.validate().expect("valid");
        let s = a.settings().expect("settings");
        assert_eq!(s.idle, Duration::from_secs(1));
        assert_eq!(s.max, Duration::from_secs(10));
        assert_eq!(s.lease_duration, Duration::from_secs(15));
        assert_eq!(s.renew_deadline, Duration::from_secs(10));
        assert_eq!(s.lease_retry, Duration::from_secs(2));
        assert!(s.max_body_bytes < 6 * 1024 * 1024);
    }

    #[test]
    fn bad_settings_are_named() {
        let e = args(&["--cluster-id", "Demo_1"])
            .expect("args")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("FLOTILLA_CLUSTER_ID"), "{e}");
        let e = args(&["--cluster-id", "demo-"])
            .expect("args")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("FLOTILLA_CLUSTER_ID"), "{e}");
        let e = args(&["--intake-url", "http://example.com"])
            .expect("args")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("FLOTILLA_INTAKE_URL"), "{e}");
        let e = args(&["--batch-idle-seconds=-1"])
            .expect("args")
            .settings()
            .unwrap_err();
        assert!(e.to_string().contains("FLOTILLA_BATCH_IDLE_SECONDS"), "{e}");
        let e = args(&["--renew-deadline-seconds", "20"])
            .expect("args")
            .settings()
            .unwrap_err();
        assert!(e.to_string().contains("lease timing"), "{e}");
        let e = args(&["--max-body-bytes", "7000000"])
            .expect("args")
            .settings()
            .unwrap_err();
        assert!(e.to_string().contains("FLOTILLA_MAX_BODY_BYTES"), "{e}");
    }
}
