//! Fault injection shared by the simulators.
//!
//! Every port method of [`MemStore`](crate::MemStore),
//! [`MemBus`](crate::MemBus) and [`Ec2Sim`](crate::Ec2Sim) asks its
//! [`Faults`] twice: [`Faults::before`] (the call fails without effect) and
//! [`Faults::after`] (the effect has happened, then the caller sees an
//! error: a timeout after success, the case idempotency keys exist for).
//! Operations are named `"<port>.<method>"`, see [`ops`].
//!
//! Scripted faults are consumed in order per operation; the random mode
//! fails any operation with the given probability, independently before
//! and after the effect, from a seeded generator (same seed and same call
//! sequence, same faults).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_ports::PortError;

use crate::rng::SplitMix64;

/// The operation names the simulators report.
pub mod ops {
    pub const STORE_GET: &str = "store.get";
    pub const STORE_QUERY: &str = "store.query";
    pub const STORE_WRITE: &str = "store.write";
    pub const STORE_TRANSACT: &str = "store.transact";
    pub const BUS_PUT: &str = "bus.put";
    pub const EC2_DESCRIBE_INSTANCE_TYPES: &str = "ec2.describe_instance_types";
    pub const EC2_DESCRIBE_INSTANCE_TYPE_OFFERINGS: &str = "ec2.describe_instance_type_offerings";
    pub const EC2_DESCRIBE_SPOT_PRICES: &str = "ec2.describe_spot_prices";
    pub const EC2_DESCRIBE_SUBNETS: &str = "ec2.describe_subnets";
    pub const EC2_DESCRIBE_SECURITY_GROUPS: &str = "ec2.describe_security_groups";
    pub const EC2_DESCRIBE_IMAGES: &str = "ec2.describe_images";
    pub const EC2_DESCRIBE_CAPACITY_RESERVATIONS: &str = "ec2.describe_capacity_reservations";
    pub const EC2_CREATE_LAUNCH_TEMPLATE: &str = "ec2.create_launch_template";
    pub const EC2_DESCRIBE_LAUNCH_TEMPLATES: &str = "ec2.describe_launch_templates";
    pub const EC2_DELETE_LAUNCH_TEMPLATE: &str = "ec2.delete_launch_template";
    pub const EC2_CREATE_FLEET: &str = "ec2.create_fleet";
    pub const EC2_DESCRIBE_INSTANCES: &str = "ec2.describe_instances";
    pub const EC2_TERMINATE_INSTANCES: &str = "ec2.terminate_instances";
    pub const PRICING_GET_PRODUCTS: &str = "pricing.get_products";
}

/// When a scripted fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The call fails without any effect.
    BeforeEffect,
    /// The call takes effect, then the caller gets the error.
    AfterEffect,
}

#[derive(Debug, Default)]
struct Random {
    rng: Option<SplitMix64>,
    probability: f64,
}

#[derive(Debug, Default)]
struct Plan {
    scripted: BTreeMap<String, VecDeque<(Phase, PortError)>>,
    random: Random,
    calls: BTreeMap<String, u64>,
    injected: BTreeMap<String, u64>,
    /// Calls left before the simulated process dies (see
    /// [`Faults::crash_after`]); `Some(0)`: dead.
    crash: Option<u64>,
}

/// A fault-injection plan, cheap to clone; clones share the plan, so one
/// `Faults` given to several simulators scripts them all.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    plan: Arc<Mutex<Plan>>,
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Faults::default()
    }

    fn lock(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next call of `op` (after any faults already scripted for it)
    /// fails with `err` without effect.
    pub fn fail_next(&self, op: &str, err: PortError) {
        self.script(op, Phase::BeforeEffect, err);
    }

    /// The next call of `op` (after any faults already scripted for it)
    /// takes effect and then fails with `err`.
    pub fn fail_after_effect_next(&self, op: &str, err: PortError) {
        self.script(op, Phase::AfterEffect, err);
    }

    /// Script a fault for the next unscripted call of `op`.
    pub fn script(&self, op: &str, phase: Phase, err: PortError) {
        self.lock()
            .scripted
            .entry(op.to_string())
            .or_default()
            .push_back((phase, err));
    }

    /// Fail every operation with `probability` (0..=1) before its effect
    /// (with [`PortError::Throttled`] or [`PortError::Unavailable`]) and,
    /// independently, with `probability` after it (with
    /// [`PortError::Unavailable`]: a throttled call never takes effect).
    /// Draws come from a generator seeded with `seed`. Scripted faults
    /// take precedence.
    pub fn random(&self, seed: u64, probability: f64) {
        let mut p = self.lock();
        p.random = Random {
            rng: Some(SplitMix64::new(seed)),
            probability: probability.clamp(0.0, 1.0),
        };
    }

    /// Turn the random mode off.
    pub fn stop_random(&self) {
        self.lock().random = Random::default();
    }

    /// Forget all scripted faults, turn the random mode off and end a
    /// simulated crash (counters are kept).
    pub fn clear(&self) {
        let mut p = self.lock();
        p.scripted.clear();
        p.random = Random::default();
        p.crash = None;
    }

    /// Simulate a process that dies after `calls` more port calls (of any
    /// operation): those calls behave normally, every later one fails
    /// before its effect with [`PortError::Unavailable`] until
    /// [`Faults::recover`]. A handler driven through a crash makes no
    /// further side effect, its clean-up included: a crash between any two
    /// side effects, as a Lambda timeout or an out-of-memory kill leaves it.
    pub fn crash_after(&self, calls: u64) {
        self.lock().crash = Some(calls);
    }

    /// End a simulated crash (the next invocation runs normally).
    pub fn recover(&self) {
        self.lock().crash = None;
    }

    /// True while a simulated crash is in effect (the budget is spent).
    pub fn crashed(&self) -> bool {
        self.lock().crash == Some(0)
    }

    /// Scripted faults not yet consumed for `op`.
    pub fn pending(&self, op: &str) -> usize {
        self.lock().scripted.get(op).map_or(0, VecDeque::len)
    }

    /// Calls of `op` so far (including failed ones).
    pub fn calls(&self, op: &str) -> u64 {
        self.lock().calls.get(op).copied().unwrap_or(0)
    }

    /// Faults injected into `op` so far (both phases).
    pub fn injected(&self, op: &str) -> u64 {
        self.lock().injected.get(op).copied().unwrap_or(0)
    }

    /// Calls per operation so far.
    pub fn all_calls(&self) -> BTreeMap<String, u64> {
        self.lock().calls.clone()
    }

    /// Called by a simulator on entry to `op`: counts the call and returns
    /// the fault that strikes before the effect, if any.
    pub fn before(&self, op: &str) -> Result<(), PortError> {
        let mut p = self.lock();
        *p.calls.entry(op.to_string()).or_default() += 1;
        match p.crash {
            Some(0) => {
                *p.injected.entry(op.to_string()).or_default() += 1;
                return Err(PortError::Unavailable(format!(
                    "injected: the process crashed before {op}"
                )));
            }
            Some(n) => p.crash = Some(n - 1),
            None => {}
        }
        self.strike(&mut p, op, Phase::BeforeEffect)
    }

    /// Called by a simulator once `op`'s effect has happened: returns the
    /// fault that strikes after it, if any.
    pub fn after(&self, op: &str) -> Result<(), PortError> {
        let mut p = self.lock();
        self.strike(&mut p, op, Phase::AfterEffect)
    }

    fn strike(&self, p: &mut Plan, op: &str, phase: Phase) -> Result<(), PortError> {
        let mut fault = None;
        if let Some(queue) = p.scripted.get_mut(op) {
            match queue.front() {
                Some((ph, _)) if *ph == phase => fault = queue.pop_front().map(|(_, e)| e),
                // An after-effect fault is scripted for this call: the
                // random mode stays out of it.
                Some(_) => return Ok(()),
                None => {}
            }
        }
        if fault.is_none() {
            let probability = p.random.probability;
            if let Some(rng) = p.random.rng.as_mut() {
                if rng.next_f64() < probability {
                    let throttle = phase == Phase::BeforeEffect && rng.next_u64() % 2 == 0;
                    fault = Some(if throttle {
                        PortError::Throttled(format!("injected: {op} rate exceeded"))
                    } else {
                        PortError::Unavailable(format!(
                            "injected: {op} timed out ({})",
                            match phase {
                                Phase::BeforeEffect => "before effect",
                                Phase::AfterEffect => "after effect",
                            }
                        ))
                    });
                }
            }
        }
        match fault {
            Some(e) => {
                *p.injected.entry(op.to_string()).or_default() += 1;
                tracing::debug!(op, ?phase, error = %e, "injected fault");
                Err(e)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> PortError {
        PortError::Unavailable("boom".into())
    }

    #[test]
    fn scripted_faults_are_consumed_in_order_per_op() {
        let f = Faults::new();
        f.fail_next("a", unavailable());
        f.fail_after_effect_next("a", PortError::Throttled("x".into()));
        assert_eq!(f.pending("a"), 2);
        // Call 1: fails before.
        assert_eq!(f.before("a"), Err(unavailable()));
        // Call 2: passes before, fails after.
        assert_eq!(f.before("a"), Ok(()));
        assert_eq!(f.after("a"), Err(PortError::Throttled("x".into())));
        // Call 3: clean; other ops unaffected.
        assert_eq!(f.before("a"), Ok(()));
        assert_eq!(f.after("a"), Ok(()));
        assert_eq!(f.before("b"), Ok(()));
        assert_eq!((f.calls("a"), f.injected("a"), f.calls("b")), (3, 2, 1));
        assert_eq!(f.pending("a"), 0);
    }

    #[test]
    fn a_crash_stops_every_later_call_until_recovery() {
        let f = Faults::new();
        f.crash_after(2);
        assert_eq!(f.before("a"), Ok(()));
        assert_eq!(f.after("a"), Ok(()));
        assert!(!f.crashed());
        assert_eq!(f.before("b"), Ok(()));
        assert!(f.crashed());
        assert!(matches!(f.before("a"), Err(PortError::Unavailable(_))));
        assert!(matches!(f.before("c"), Err(PortError::Unavailable(_))));
        assert_eq!(f.injected("a"), 1);
        f.recover();
        assert_eq!(f.before("a"), Ok(()));
        f.crash_after(0);
        assert!(f.before("a").is_err());
        f.clear();
        assert_eq!(f.before("a"), Ok(()));
    }

    #[test]
    fn clones_share_the_plan() {
        let f = Faults::new();
        let g = f.clone();
        g.fail_next("x", unavailable());
        assert!(f.before("x").is_err());
        assert_eq!(g.calls("x"), 1);
    }

    #[test]
    fn random_mode_is_seeded_and_roughly_at_rate() {
        let run = |seed| {
            let f = Faults::new();
            f.random(seed, 0.2);
            (0..2000)
                .map(|_| (f.before("op").is_err(), f.after("op").is_err()))
                .collect::<Vec<_>>()
        };
        let a = run(42);
        assert_eq!(a, run(42));
        assert_ne!(a, run(43));
        let before = a.iter().filter(|(b, _)| *b).count();
        let after = a.iter().filter(|(_, x)| *x).count();
        assert!((300..500).contains(&before), "{before}");
        assert!((300..500).contains(&after), "{after}");

        let f = Faults::new();
        f.random(1, 1.0);
        let mut kinds = std::collections::BTreeSet::new();
        for _ in 0..50 {
            match f.before("op") {
                Err(PortError::Throttled(_)) => kinds.insert("throttled"),
                Err(PortError::Unavailable(_)) => kinds.insert("unavailable"),
                other => panic!("{other:?}"),
            };
            assert!(matches!(f.after("op"), Err(PortError::Unavailable(_))));
        }
        assert_eq!(kinds.len(), 2);
        f.clear();
        assert_eq!(f.before("op"), Ok(()));
    }
}
