//! The bus port on an EventBridge event bus (PutEvents).

use std::time::Duration;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use aws_sdk_eventbridge::Client;
use flotilla_ports::events::{MAX_PUT_ENTRIES, SOURCE};
use flotilla_ports::{Bus, Event, PortError, PortResult};

use crate::error::classify;

/// PutEvents calls per chunk before giving up (entries EventBridge reports
/// as failed are re-sent, alone).
pub const MAX_ATTEMPTS: u32 = 6;

/// Entry error codes that retrying cannot fix.
const PERMANENT_ENTRY_ERRORS: &[&str] = &[
    "InvalidArgument",
    "MalformedDetail",
    "ValidationException",
    "AccessDeniedException",
    "NotAuthorizedForSourceException",
    "NotAuthorizedForDetailTypeException",
    "ResourceNotFoundException",
];

/// [`Bus`] on one EventBridge bus; every entry has source `flotilla`.
#[derive(Debug, Clone)]
pub struct EventBridgeBus {
    client: Client,
    bus_name: String,
    base_delay: Duration,
}

/// Backoff before attempt `attempt` (1-based retries): base × 2^(n-1),
/// capped at 2 s.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.saturating_sub(1).min(10))
        .min(Duration::from_secs(2))
}

/// The outcome of one PutEvents call for the entries it carried: indices
/// (into the call's entries) to re-send, or a permanent error.
pub(crate) fn failed_entries(
    codes: &[Option<(String, String)>],
) -> Result<Vec<usize>, (usize, String, String)> {
    let mut retry = Vec::new();
    for (i, c) in codes.iter().enumerate() {
        if let Some((code, message)) = c {
            if PERMANENT_ENTRY_ERRORS.contains(&code.as_str()) {
                return Err((i, code.clone(), message.clone()));
            }
            retry.push(i);
        }
    }
    Ok(retry)
}

impl EventBridgeBus {
    pub fn new(config: &aws_config::SdkConfig, bus_name: impl Into<String>) -> Self {
        EventBridgeBus {
            client: Client::new(config),
            bus_name: bus_name.into(),
            base_delay: Duration::from_millis(100),
        }
    }

    pub async fn from_env(bus_name: impl Into<String>) -> Self {
        Self::new(&crate::load_config().await, bus_name)
    }

    /// The first retry's delay (doubling afterwards).
    pub fn with_base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    pub fn bus_name(&self) -> &str {
        &self.bus_name
    }

    fn entry(&self, e: &Event) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .source(SOURCE)
            .detail_type(&e.detail_type)
            .detail(&e.detail)
            .event_bus_name(&self.bus_name)
            .build()
    }

    async fn put_chunk(&self, chunk: &[Event]) -> PortResult<()> {
        let what = format!("EventBridge PutEvents on {}", self.bus_name);
        let mut pending: Vec<&Event> = chunk.iter().collect();
        let mut last = String::new();
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(backoff(self.base_delay, attempt)).await;
            }
            let entries = pending.iter().map(|e| self.entry(e)).collect();
            let out = match self
                .client
                .put_events()
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    let err = classify(&what, &e);
                    if !err.is_retryable() {
                        return Err(err);
                    }
                    last = err.to_string();
                    continue;
                }
            };
            let results = out.entries();
            let codes: Vec<Option<(String, String)>> = (0..pending.len())
                .map(|i| match results.get(i) {
                    // No result for an entry: treat as failed.
                    None => Some(("Missing".to_string(), "no result entry".to_string())),
                    Some(r) => r.error_code().filter(|c| !c.is_empty()).map(|c| {
                        (
                            c.to_string(),
                            r.error_message().unwrap_or_default().to_string(),
                        )
                    }),
                })
                .collect();
            match failed_entries(&codes) {
                Err((i, code, message)) => {
                    return Err(PortError::Rejected(format!(
                        "{what}: entry {:?}: {code}: {message}",
                        pending[i].detail_type
                    )))
                }
                Ok(retry) if retry.is_empty() => return Ok(()),
                Ok(retry) => {
                    if let Some(Some((code, message))) = retry.first().map(|&i| &codes[i]) {
                        last = format!("{} entries failed, e.g. {code}: {message}", retry.len());
                    }
                    tracing::debug!(attempt, failed = retry.len(), "re-sending failed entries");
                    pending = retry.into_iter().map(|i| pending[i]).collect();
                }
            }
        }
        Err(PortError::Unavailable(format!(
            "{what}: {} entries not accepted after {MAX_ATTEMPTS} attempts: {last}",
            pending.len()
        )))
    }
}

impl Bus for EventBridgeBus {
    async fn put(&self, events: Vec<Event>) -> PortResult<()> {
        for chunk in events.chunks(MAX_PUT_ENTRIES) {
            self.put_chunk(chunk).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failed_entries_are_resent() {
        let codes = vec![
            None,
            Some(("InternalFailure".to_string(), "x".to_string())),
            None,
            Some(("ThrottlingException".to_string(), "y".to_string())),
        ];
        assert_eq!(failed_entries(&codes), Ok(vec![1, 3]));
        assert_eq!(failed_entries(&[None, None]), Ok(vec![]));
    }

    #[test]
    fn malformed_entries_are_rejected_at_once() {
        let codes = vec![
            Some(("InternalFailure".to_string(), "x".to_string())),
            Some(("MalformedDetail".to_string(), "bad json".to_string())),
        ];
        assert_eq!(
            failed_entries(&codes),
            Err((1, "MalformedDetail".into(), "bad json".into()))
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let b = Duration::from_millis(100);
        assert_eq!(backoff(b, 1), Duration::from_millis(100));
        assert_eq!(backoff(b, 2), Duration::from_millis(200));
        assert_eq!(backoff(b, 3), Duration::from_millis(400));
        assert_eq!(backoff(b, 30), Duration::from_secs(2));
    }
}
