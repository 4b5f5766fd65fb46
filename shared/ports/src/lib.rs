//! Ports: the only way Flotilla's stage services reach the outside world.
//!
//! Each port is a small trait with plain-data arguments. Three families of
//! implementations exist:
//! - `flotilla-aws`: DynamoDB, EC2 (with the Price List API) and
//!   EventBridge through the AWS SDK;
//! - `flotilla-sim`: in-memory store and bus, and an EC2 simulator that
//!   honours `ClientToken`, injects capacity errors and faults;
//! - test fakes built on the simulator.
//!
//! The traits return `impl Future + Send` so that services generic over them
//! can run on any executor (the Lambdas use tokio; core stays executor-free).
//! Implementations may simply write `async fn`.
//!
//! The event contracts between the stages live in [`events`]: they carry
//! ids only (EventBridge entries are at most 256 KB); data lives in the
//! store.

pub mod ec2;
pub mod events;
pub mod pricing;
pub mod store;

pub use ec2::{Ec2, Filter, Image, Instance, InstanceState, SecurityGroup, SpotPrice, Subnet};
pub use events::{Bus, Event};
pub use pricing::PriceList;
pub use store::{Condition, Item, Key, Store, Write, MAX_BODY_BYTES, MAX_TRANSACT_WRITES};

/// What a port call can fail with. Adapters map their SDK errors onto these
/// so services can decide between retrying, giving up and losing a race.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// A conditional write's condition did not hold (someone else won the
    /// race, the item already exists, a counter would leave its bounds).
    #[error("condition failed: {0}")]
    ConditionFailed(String),
    /// The service asked us to slow down (DynamoDB
    /// ProvisionedThroughputExceeded, EC2 RequestLimitExceeded, ...).
    #[error("throttled: {0}")]
    Throttled(String),
    /// A 5xx, a timeout or a dropped connection: the call may or may not
    /// have taken effect. Retry with the same idempotency key.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request was wrong (4xx other than throttling); retrying will not
    /// help.
    #[error("rejected: {0}")]
    Rejected(String),
}

impl PortError {
    /// Worth retrying the same call (with the same idempotency key).
    pub fn is_retryable(&self) -> bool {
        matches!(self, PortError::Throttled(_) | PortError::Unavailable(_))
    }
}

pub type PortResult<T> = Result<T, PortError>;

/// Wall-clock time, injected so expiry logic is testable without sleeping.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
    /// Seconds since the Unix epoch.
    fn now_secs(&self) -> i64 {
        self.now_millis().div_euclid(1000)
    }
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

impl<T: Clock + ?Sized> Clock for std::sync::Arc<T> {
    fn now_millis(&self) -> i64 {
        (**self).now_millis()
    }
}
