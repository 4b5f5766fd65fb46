//! The intake Function URL client: SigV4-signed (service `lambda`),
//! gzip'd requests, retried with exponential backoff on 5xx, 429 and
//! transport errors.
//!
//! | call | route |
//! |------|-------|
//! | [`IntakeClient::post_batch`] | `POST /batches` |
//! | [`IntakeClient::post_changes`] | `POST /changes` |
//! | [`IntakeClient::cluster`] | `GET /clusters/<id>` |
//! | [`IntakeClient::acknowledge`] | `POST /clusters/<id>/actions` |

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use backon::{ExponentialBuilder, Retryable};
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::plan::{Ack, ClusterView};

/// How requests are retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Retries after the first attempt.
    pub max_times: usize,
    /// Per attempt.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            max_times: 6,
            timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("intake {method} {path}: {source}")]
    Transport {
        method: &'static str,
        path: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("intake {method} {path}: HTTP {status}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("intake {path}: unexpected response body: {message}")]
    Decode { path: String, message: String },
    #[error("AWS credentials: {0}")]
    Credentials(String),
    #[error("SigV4 signing of {path}: {message}")]
    Sign { path: String, message: String },
}

impl IntakeError {
    /// Worth another attempt: throttled, a server error, or the network.
    pub fn is_retryable(&self) -> bool {
        match self {
            IntakeError::Transport { .. } => true,
            IntakeError::Status { status, .. } => *status == 429 || *status >= 500,
            // Credentials are fetched again on the next attempt (IRSA token
            // refresh, Pod Identity agent restart).
            IntakeError::Credentials(_) => true,
            IntakeError::Decode { .. } | IntakeError::Sign { .. } => false,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            IntakeError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Intake (or the Function URL in front of it) refused the caller.
    pub fn is_forbidden(&self) -> bool {
        self.status() == Some(403)
    }
}

/// What to fix when intake answers 403, from the refusal's message. Two
/// refusals look alike: the Function URL's IAM check (Lambda answers before
/// intake runs), and intake's own mapping of principals to clusters.
pub fn forbidden_hint(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    if lower.contains("may not act for") || lower.contains("clusterprincipals") {
        return "intake does not map this IAM principal to the cluster: add the agent's role \
                ARN under the cluster id in the stack's ClusterPrincipals parameter"
            .into();
    }
    if lower.contains("signature") {
        return "the Function URL refused the SigV4 signature: check the agent's region \
                (the intake function's region) and the node's clock"
            .into();
    }
    "the Function URL refused the agent's IAM principal: since October 2025 a caller \
     needs both lambda:InvokeFunctionUrl and lambda:InvokeFunction on the intake function; \
     set the stack's AgentPrincipalArn parameter to the agent's role (the stack grants both), \
     or attach infra/agent/iam-policy.json (both actions) to that role"
        .into()
}

/// `POST /batches` → 202.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Accepted {
    pub cluster_id: String,
    /// Empty for a batch without pending pods (a heartbeat).
    pub batch_id: String,
    pub pending_pods: usize,
    pub deduplicated: bool,
    pub registered: usize,
}

/// `POST /changes` → 202.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ChangesAccepted {
    pub cluster_id: String,
    pub stream: String,
    pub seq: u64,
    /// False for a post intake had already applied.
    pub applied: bool,
    /// Of a resync: the parts intake still waits for.
    pub missing_parts: Vec<u32>,
    /// The batch scheduled over the new state (pending pods), if any.
    pub batch_id: String,
}

/// `POST /clusters/<id>/actions` → 200.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AckReport {
    pub acknowledged: usize,
    pub already: usize,
    pub unknown: Vec<String>,
}

#[derive(Serialize)]
struct AckBody<'a> {
    acks: &'a [Ack],
}

/// The signed client of one intake endpoint.
#[derive(Clone)]
pub struct IntakeClient {
    http: reqwest::Client,
    base: String,
    region: String,
    credentials: SharedCredentialsProvider,
    retry: RetryPolicy,
    metrics: Option<Arc<Metrics>>,
}

/// Largest response body read (a cluster view with many NodeClaims is a
/// few MB at most).
const MAX_RESPONSE_BYTES: usize = 32 << 20;

impl IntakeClient {
    pub fn new(
        base_url: &str,
        region: &str,
        credentials: SharedCredentialsProvider,
        retry: RetryPolicy,
    ) -> Result<Self, IntakeError> {
        let http = reqwest::Client::builder()
            .timeout(retry.timeout)
            .user_agent(concat!("flotilla-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| IntakeError::Transport {
                method: "-",
                path: base_url.to_string(),
                source: e,
            })?;
        Ok(IntakeClient {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            region: region.to_string(),
            credentials,
            retry,
            metrics: None,
        })
    }

    /// Count retries in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Post a batch body (uncompressed `BatchRequest` JSON); it is gzip'd.
    pub async fn post_batch(&self, body: &[u8]) -> Result<Accepted, IntakeError> {
        let z = crate::batch::gzip(body);
        let bytes = self.send("POST", "/batches", Some(&z)).await?;
        decode("/batches", &bytes)
    }

    /// Post a change body (uncompressed `ChangeRequest` JSON); it is gzip'd.
    /// A 409 (resync required) is an [`IntakeError::Status`] and is not
    /// retried.
    pub async fn post_changes(&self, body: &[u8]) -> Result<ChangesAccepted, IntakeError> {
        let z = crate::batch::gzip(body);
        let bytes = self.send("POST", "/changes", Some(&z)).await?;
        decode("/changes", &bytes)
    }

    /// The cluster's NodeClaims, pending actions and last result.
    pub async fn cluster(&self, cluster_id: &str) -> Result<ClusterView, IntakeError> {
        let path = format!("/clusters/{cluster_id}");
        let bytes = self.send("GET", &path, None).await?;
        decode(&path, &bytes)
    }

    /// Report what was applied.
    pub async fn acknowledge(
        &self,
        cluster_id: &str,
        acks: &[Ack],
    ) -> Result<AckReport, IntakeError> {
        let path = format!("/clusters/{cluster_id}/actions");
        let body = serde_json::to_vec(&AckBody { acks }).map_err(|e| IntakeError::Decode {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let z = crate::batch::gzip(&body);
        let bytes = self.send("POST", &path, Some(&z)).await?;
        decode(&path, &bytes)
    }

    async fn send(
        &self,
        method: &'static str,
        path: &str,
        gz_body: Option<&[u8]>,
    ) -> Result<Vec<u8>, IntakeError> {
        let policy = ExponentialBuilder::default()
            .with_min_delay(self.retry.min_delay)
            .with_max_delay(self.retry.max_delay)
            .with_max_times(self.retry.max_times)
            .with_jitter();
        let out = (|| self.send_once(method, path, gz_body))
            .retry(policy)
            .sleep(tokio::time::sleep)
            .when(IntakeError::is_retryable)
            .notify(|e, after| {
                if let Some(m) = &self.metrics {
                    m.retries.inc();
                }
                tracing::warn!(error = %e, retry_in_ms = after.as_millis() as u64, "intake request failed; retrying");
            })
            .await;
        if let Err(IntakeError::Status {
            status: 403,
            message,
            ..
        }) = &out
        {
            if let Some(m) = &self.metrics {
                m.intake_forbidden.inc();
            }
            tracing::error!(
                method,
                path,
                status = 403,
                message = %message,
                fix = %forbidden_hint(message),
                "intake refused the agent (HTTP 403)"
            );
        }
        out
    }

    async fn send_once(
        &self,
        method: &'static str,
        path: &str,
        gz_body: Option<&[u8]>,
    ) -> Result<Vec<u8>, IntakeError> {
        let url = format!("{}{path}", self.base);
        let credentials = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| IntakeError::Credentials(e.to_string()))?;
        let mut headers: Vec<(&str, &str)> = vec![("accept", "application/json")];
        if gz_body.is_some() {
            headers.push(("content-type", "application/json"));
            headers.push(("content-encoding", "gzip"));
        }
        let body = gz_body.unwrap_or(&[]);
        let sign_err = |message: String| IntakeError::Sign {
            path: path.to_string(),
            message,
        };
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("lambda")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| sign_err(e.to_string()))?
            .into();
        let signable = SignableRequest::new(
            method,
            &url,
            headers.iter().copied(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| sign_err(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| sign_err(e.to_string()))?
            .into_parts();
        let m =
            reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| sign_err(e.to_string()))?;
        let mut req = self.http.request(m, &url);
        for (k, v) in headers.iter().copied().chain(instructions.headers()) {
            req = req.header(k, v);
        }
        if gz_body.is_some() {
            req = req.body(body.to_vec());
        }
        let transport = |source| IntakeError::Transport {
            method,
            path: path.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(transport)?;
        if bytes.len() > MAX_RESPONSE_BYTES {
            return Err(IntakeError::Decode {
                path: path.to_string(),
                message: format!("response of {} bytes", bytes.len()),
            });
        }
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect());
            return Err(IntakeError::Status {
                method,
                path: path.to_string(),
                status,
                message,
            });
        }
        Ok(bytes.to_vec())
    }
}

fn decode<T: serde::de::DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T, IntakeError> {
    serde_json::from_slice(bytes).map_err(|e| IntakeError::Decode {
        path: path.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_throttling_server_and_network_errors_are_retried() {
        let status = |status| IntakeError::Status {
            method: "POST",
            path: "/batches".into(),
            status,
            message: String::new(),
        };
        assert!(status(500).is_retryable());
        assert!(status(503).is_retryable());
        assert!(status(429).is_retryable());
        assert!(!status(400).is_retryable());
        assert!(!status(403).is_retryable());
        assert!(!status(413).is_retryable());
        assert!(!IntakeError::Decode {
            path: "/".into(),
            message: String::new()
        }
        .is_retryable());
    }

    #[test]
    fn a_403_names_what_to_fix() {
        // The Function URL's own refusal (Lambda's body).
        let url = forbidden_hint(r#"{"Message":"Forbidden"}"#);
        for needle in [
            "lambda:InvokeFunctionUrl",
            "lambda:InvokeFunction ",
            "AgentPrincipalArn",
            "infra/agent/iam-policy.json",
        ] {
            assert!(url.contains(needle), "{needle} missing from {url}");
        }
        // Intake's refusal of a principal for a cluster.
        let mapping = forbidden_hint(
            "forbidden: arn:aws:sts::1:assumed-role/agent/x may not act for cluster \"demo\"",
        );
        assert!(mapping.contains("ClusterPrincipals"), "{mapping}");
        assert!(!mapping.contains("InvokeFunctionUrl"), "{mapping}");
        let sig = forbidden_hint("The request signature we calculated does not match");
        assert!(sig.contains("region") && sig.contains("clock"), "{sig}");

        let e = IntakeError::Status {
            method: "POST",
            path: "/batches".into(),
            status: 403,
            message: String::new(),
        };
        assert!(e.is_forbidden() && !e.is_retryable());
    }

    #[test]
    fn responses_decode_leniently_and_name_the_route_when_they_do_not() {
        let a: Accepted = decode(
            "/batches",
            br#"{"clusterId":"demo","batchId":"b1","pendingPods":3,"deduplicated":false,"registered":0}"#,
        )
        .expect("accepted");
        assert_eq!(a.batch_id, "b1");
        assert_eq!(a.pending_pods, 3);
        let e = decode::<Accepted>("/batches", b"<html>").unwrap_err();
        assert!(e.to_string().contains("/batches"), "{e}");
    }
}
