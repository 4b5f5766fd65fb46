//! A manual clock: time moves only when a test says so.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use flotilla_ports::Clock;

/// 2026-01-01T00:00:00Z, the default start of a [`ManualClock`].
pub const DEFAULT_START_SECS: i64 = 1_767_225_600;

/// A [`Clock`] that is set and advanced explicitly. Share it as
/// `Arc<ManualClock>` (the ports implement [`Clock`] for `Arc<T>`): every
/// holder sees every change.
#[derive(Debug)]
pub struct ManualClock {
    millis: AtomicI64,
}

impl Default for ManualClock {
    /// Starts at [`DEFAULT_START_SECS`].
    fn default() -> Self {
        ManualClock::at_secs(DEFAULT_START_SECS)
    }
}

impl ManualClock {
    /// A clock showing `millis` milliseconds since the Unix epoch.
    pub fn at_millis(millis: i64) -> Self {
        ManualClock {
            millis: AtomicI64::new(millis),
        }
    }

    /// A clock showing `secs` seconds since the Unix epoch.
    pub fn at_secs(secs: i64) -> Self {
        ManualClock::at_millis(secs.saturating_mul(1000))
    }

    /// Set the time (milliseconds since the epoch); may go backwards.
    pub fn set_millis(&self, millis: i64) {
        self.millis.store(millis, Ordering::SeqCst);
    }

    /// Set the time (seconds since the epoch); may go backwards.
    pub fn set_secs(&self, secs: i64) {
        self.set_millis(secs.saturating_mul(1000));
    }

    /// Move forward by `millis` (negative moves back); returns the new time.
    pub fn advance_millis(&self, millis: i64) -> i64 {
        self.millis
            .fetch_add(millis, Ordering::SeqCst)
            .saturating_add(millis)
    }

    /// Move forward by `secs` seconds; returns the new time in milliseconds.
    pub fn advance_secs(&self, secs: i64) -> i64 {
        self.advance_millis(secs.saturating_mul(1000))
    }

    /// Move forward by `d`; returns the new time in milliseconds.
    pub fn advance(&self, d: Duration) -> i64 {
        self.advance_millis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.millis.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn set_and_advance_are_seen_by_every_holder() {
        let c = Arc::new(ManualClock::default());
        let other: Arc<dyn Clock> = c.clone();
        assert_eq!(other.now_secs(), DEFAULT_START_SECS);
        c.advance_secs(90);
        assert_eq!(other.now_secs(), DEFAULT_START_SECS + 90);
        assert_eq!(
            c.advance(Duration::from_millis(1500)),
            (DEFAULT_START_SECS + 91) * 1000 + 500
        );
        c.set_secs(10);
        assert_eq!(other.now_millis(), 10_000);
        c.set_millis(-1);
        assert_eq!(other.now_secs(), -1, "seconds round towards minus infinity");
    }
}
