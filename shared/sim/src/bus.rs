//! [`MemBus`]: the [`Bus`] port in memory.

use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_ports::events::{Bus, Event, FlotillaEvent, MAX_DETAIL_BYTES};
use flotilla_ports::{PortError, PortResult};

use crate::faults::{ops, Faults};

/// Records every event put, in order. Cheap to clone; clones share the
/// record.
///
/// A `put` is all or nothing here: either every event of the call is
/// recorded or none. Events with an empty detail type, a detail that is
/// not a JSON object or one over [`MAX_DETAIL_BYTES`] are
/// [`PortError::Rejected`] (EventBridge insists on a JSON object detail).
///
/// Faults: `bus.put`.
#[derive(Debug, Clone, Default)]
pub struct MemBus {
    events: Arc<Mutex<Vec<Event>>>,
    faults: Faults,
}

impl MemBus {
    /// An empty bus with its own (empty) fault plan.
    pub fn new() -> Self {
        MemBus::default()
    }

    /// An empty bus that consults `faults`.
    pub fn with_faults(faults: Faults) -> Self {
        MemBus {
            events: Arc::default(),
            faults,
        }
    }

    /// The fault plan this bus consults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every event put so far, oldest first.
    pub fn published(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// Remove and return every event put so far, oldest first.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.lock())
    }

    /// Number of events recorded (and not taken).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no event is recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The recorded events parsed as Flotilla's stage events; entries that
    /// do not parse come back as `Err` with the reason.
    pub fn decoded(&self) -> Vec<Result<FlotillaEvent, String>> {
        self.lock()
            .iter()
            .map(|e| {
                let detail: serde_json::Value =
                    serde_json::from_str(&e.detail).map_err(|err| err.to_string())?;
                FlotillaEvent::from_parts(&e.detail_type, &detail)
            })
            .collect()
    }
}

fn validate(e: &Event) -> PortResult<()> {
    if e.detail_type.is_empty() {
        return Err(PortError::Rejected(
            "ValidationException: empty detail type".into(),
        ));
    }
    if e.detail.len() > MAX_DETAIL_BYTES {
        return Err(PortError::Rejected(format!(
            "ValidationException: {} detail is {} bytes, more than {MAX_DETAIL_BYTES}",
            e.detail_type,
            e.detail.len()
        )));
    }
    match serde_json::from_str::<serde_json::Value>(&e.detail) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(PortError::Rejected(format!(
            "ValidationException: {} detail is not a JSON object",
            e.detail_type
        ))),
    }
}

impl Bus for MemBus {
    async fn put(&self, events: Vec<Event>) -> PortResult<()> {
        self.faults.before(ops::BUS_PUT)?;
        events.iter().try_for_each(validate)?;
        self.lock().extend(events);
        self.faults.after(ops::BUS_PUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on;
    use flotilla_ports::events::BatchAccepted;

    fn ev(n: u32) -> Event {
        FlotillaEvent::BatchAccepted(BatchAccepted {
            cluster_id: "c".into(),
            batch_id: format!("b{n}"),
        })
        .to_event()
    }

    #[test]
    fn records_in_order_take_drains() {
        let bus = MemBus::new();
        block_on(bus.put(vec![ev(1), ev(2)])).unwrap();
        block_on(bus.put(vec![ev(3)])).unwrap();
        assert_eq!(bus.published(), [ev(1), ev(2), ev(3)]);
        assert!(
            matches!(&bus.decoded()[2], Ok(FlotillaEvent::BatchAccepted(b)) if b.batch_id == "b3")
        );
        assert_eq!(bus.take(), [ev(1), ev(2), ev(3)]);
        assert!(bus.is_empty());
        block_on(bus.put(vec![])).unwrap();
        assert_eq!(bus.len(), 0);
    }

    #[test]
    fn invalid_events_reject_the_whole_call() {
        let bus = MemBus::new();
        let bad = Event {
            detail_type: "X".into(),
            detail: "[1]".into(),
        };
        assert!(matches!(
            block_on(bus.put(vec![ev(1), bad])),
            Err(PortError::Rejected(_))
        ));
        let big = Event {
            detail_type: "X".into(),
            detail: format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_DETAIL_BYTES)),
        };
        assert!(block_on(bus.put(vec![big])).is_err());
        assert!(bus.is_empty());
    }

    #[test]
    fn faults_before_and_after_effect() {
        let bus = MemBus::new();
        bus.faults()
            .fail_next(ops::BUS_PUT, PortError::Throttled("t".into()));
        assert!(block_on(bus.put(vec![ev(1)])).is_err());
        assert!(bus.is_empty());
        bus.faults()
            .fail_after_effect_next(ops::BUS_PUT, PortError::Unavailable("u".into()));
        assert!(block_on(bus.put(vec![ev(1)])).is_err());
        assert_eq!(
            bus.published(),
            [ev(1)],
            "delivered although the caller saw an error"
        );
        assert_eq!(bus.faults().calls(ops::BUS_PUT), 2);
    }
}
