//! Leader election over a `coordination.k8s.io/v1` Lease (client-go's
//! algorithm): the holder renews every retry period; another replica takes
//! over only after it has seen the same lease record unchanged for a whole
//! lease duration on its own clock (no trust in clock sync between pods),
//! and writes are optimistic (resourceVersion), so two replicas can never
//! both win the same record.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// What to do with the lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No lease: create it holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free, or its holder stopped renewing: take it over.
    TakeOver,
    /// Someone else holds it.
    Follow { holder: String },
}

/// The lease decision for `identity`. `unchanged_since` is when this
/// replica first saw the current record (resourceVersion) of the lease.
pub fn decide(
    identity: &str,
    lease: Option<&Lease>,
    unchanged_since: Instant,
    now: Instant,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("");
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .filter(|d| *d > 0)
        .unwrap_or(15);
    if now.duration_since(unchanged_since) >= Duration::from_secs(duration as u64) {
        Decision::TakeOver
    } else {
        Decision::Follow {
            holder: holder.to_string(),
        }
    }
}

/// A lease lock for one identity.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// (resourceVersion, first seen at).
    observed: Mutex<Option<(String, Instant)>>,
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaseLock {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        LeaseLock {
            api,
            name: name.into(),
            identity: identity.into(),
            duration,
            observed: Mutex::new(None),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn unchanged_since(&self, lease: Option<&Lease>, now: Instant) -> Instant {
        let rv = lease
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let mut o = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match o.as_ref() {
            Some((seen, at)) if *seen == rv => *at,
            _ => {
                *o = Some((rv, now));
                now
            }
        }
    }

    /// One round: acquire or renew. `Ok(true)` while we hold the lease.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Instant::now();
        let current = self.api.get_opt(&self.name).await?;
        let since = self.unchanged_since(current.as_ref(), now);
        let decision = decide(&self.identity, current.as_ref(), since, now);
        let secs = i32::try_from(self.duration.as_secs()).unwrap_or(15);
        let result = match (&decision, current) {
            (Decision::Follow { .. }, _) => return Ok(false),
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(now_micro()),
                        renew_time: Some(now_micro()),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
            (d, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if *d == Decision::TakeOver {
                    spec.acquire_time = Some(now_micro());
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                    tracing::info!(
                        previous = spec.holder_identity.as_deref().unwrap_or(""),
                        identity = %self.identity,
                        "taking over the leader lease"
                    );
                }
                spec.holder_identity = Some(self.identity.clone());
                spec.lease_duration_seconds = Some(secs);
                spec.renew_time = Some(now_micro());
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the lease up (on shutdown) so the other replica takes over at
    /// once instead of after a lease duration.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now_micro());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_taken_over_only_after_a_full_unchanged_duration() {
        let t0 = Instant::now();
        assert_eq!(decide("a", None, t0, t0), Decision::Create);
        assert_eq!(
            decide("a", Some(&lease(Some("a"), "1")), t0, t0),
            Decision::Renew
        );
        assert_eq!(
            decide("a", Some(&lease(None, "1")), t0, t0),
            Decision::TakeOver
        );
        let b = lease(Some("b"), "1");
        assert_eq!(
            decide("a", Some(&b), t0, t0 + Duration::from_secs(14)),
            Decision::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide("a", Some(&b), t0, t0 + Duration::from_secs(15)),
            Decision::TakeOver
        );
    }
}
