//! In-memory, deterministic implementations of Flotilla's ports, for fast
//! tests of the pipeline without AWS:
//!
//! - [`MemStore`] ([`Store`](flotilla_ports::Store)): DynamoDB's
//!   conditional writes, bounded counters and transactions;
//! - [`MemBus`] ([`Bus`](flotilla_ports::Bus)): records events;
//! - [`ManualClock`] ([`Clock`](flotilla_ports::Clock)): time moves when a
//!   test says so;
//! - [`Ec2Sim`] ([`Ec2`](flotilla_ports::Ec2)): an EC2 region built from the
//!   embedded catalog, with what moto lacks: CreateFleet `ClientToken`
//!   idempotency, capacity pools with insufficient-capacity errors and
//!   partial fills, capacity reservations, spot prices from the catalog;
//! - [`Faults`]: scripted or random failures before or after the effect
//!   of any port call, shared by all of the above.
//!
//! Everything is deterministic: no wall clock, no OS randomness, ordered
//! maps. The port methods never wait, so any executor (or [`block_on`])
//! drives them; no lock is held across an `.await`.

pub mod bus;
pub mod clock;
pub mod ec2;
pub mod faults;
pub mod rng;
pub mod store;

pub use bus::MemBus;
pub use clock::ManualClock;
pub use ec2::{Ec2Sim, Ec2SimBuilder, SimError};
pub use faults::{ops, Faults, Phase};
pub use store::MemStore;

use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Run `f` to completion on the current thread by polling it with a no-op
/// waker. Meant for futures that never wait on I/O, like every port method
/// of this crate; a future that does wait is polled in a busy loop.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn block_on_runs_ready_futures() {
        assert_eq!(super::block_on(async { 1 + 1 }), 2);
    }
}
