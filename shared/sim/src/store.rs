//! [`MemStore`]: the [`Store`] port in memory, with DynamoDB's semantics
//! for the subset Flotilla uses.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_ports::store::{
    Condition, Item, Key, Store, Write, MAX_BODY_BYTES, MAX_TRANSACT_WRITES,
};
use flotilla_ports::{PortError, PortResult};

use crate::faults::{ops, Faults};

/// An in-memory table. Cheap to clone; clones share the table.
///
/// Semantics (as DynamoDB's, see `flotilla_ports::store`):
/// - [`Condition::Absent`] holds when there is no item or its `expires_at`
///   is at or before `now_secs`; [`Condition::Version`] when an item exists
///   (expired or not: DynamoDB deletes lazily) with exactly that version;
/// - [`Write::Add`] needs an existing item and a result within
///   `[min, max]`, else [`PortError::ConditionFailed`];
/// - [`Store::transact`] takes 1 to [`MAX_TRANSACT_WRITES`] writes on
///   distinct keys (else [`PortError::Rejected`]), checks every condition
///   first and applies all or nothing;
/// - empty key attributes and bodies over [`MAX_BODY_BYTES`] are
///   [`PortError::Rejected`].
///
/// Faults: `store.get`, `store.query`, `store.write`, `store.transact`.
#[derive(Debug, Clone, Default)]
pub struct MemStore {
    items: Arc<Mutex<BTreeMap<Key, Item>>>,
    faults: Faults,
}

fn validate(w: &Write) -> PortResult<()> {
    let key = w.key();
    if key.pk.is_empty() || key.sk.is_empty() {
        return Err(PortError::Rejected(format!(
            "ValidationException: key attributes must not be empty ({key})"
        )));
    }
    if let Write::Put { item, .. } = w {
        if item.body.len() > MAX_BODY_BYTES {
            return Err(PortError::Rejected(format!(
                "ValidationException: item {key} body is {} bytes, more than {MAX_BODY_BYTES}",
                item.body.len()
            )));
        }
    }
    Ok(())
}

fn condition_holds(existing: Option<&Item>, condition: Condition) -> bool {
    match condition {
        Condition::Always => true,
        Condition::Absent { now_secs } => existing.is_none_or(|i| !i.is_live(now_secs)),
        Condition::Version(v) => existing.is_some_and(|i| i.version == v),
    }
}

/// Checks `w` against the table; on success returns the new counter of an
/// `Add`.
fn check(items: &BTreeMap<Key, Item>, w: &Write) -> Result<Option<i64>, String> {
    let existing = items.get(w.key());
    match w {
        Write::Put { condition, .. } | Write::Delete { condition, .. } => {
            if condition_holds(existing, *condition) {
                Ok(None)
            } else {
                Err(format!(
                    "{}: {condition:?} does not hold (item {})",
                    w.key(),
                    match existing {
                        None => "absent".to_string(),
                        Some(i) => format!("version {}, expires_at {:?}", i.version, i.expires_at),
                    }
                ))
            }
        }
        Write::Add {
            key,
            delta,
            min,
            max,
        } => {
            let Some(item) = existing else {
                return Err(format!("{key}: add on a missing item"));
            };
            match item.counter.checked_add(*delta) {
                Some(n) if (*min..=*max).contains(&n) => Ok(Some(n)),
                _ => Err(format!(
                    "{key}: counter {} + {delta} leaves [{min}, {max}]",
                    item.counter
                )),
            }
        }
    }
}

fn apply(items: &mut BTreeMap<Key, Item>, w: Write, counter: Option<i64>) {
    match w {
        Write::Put { item, .. } => {
            items.insert(item.key.clone(), item);
        }
        Write::Delete { key, .. } => {
            items.remove(&key);
        }
        Write::Add { key, .. } => {
            if let (Some(item), Some(n)) = (items.get_mut(&key), counter) {
                item.counter = n;
            }
        }
    }
}

impl MemStore {
    /// An empty table with its own (empty) fault plan.
    pub fn new() -> Self {
        MemStore::default()
    }

    /// An empty table that consults `faults`.
    pub fn with_faults(faults: Faults) -> Self {
        MemStore {
            items: Arc::default(),
            faults,
        }
    }

    /// The fault plan this store consults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Item>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of items, expired ones included.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when the table holds no item.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Every item in key order, expired ones included.
    pub fn dump(&self) -> Vec<Item> {
        self.lock().values().cloned().collect()
    }

    /// The item at `key` without going through the port (no faults).
    pub fn peek(&self, key: &Key) -> Option<Item> {
        self.lock().get(key).cloned()
    }

    /// Put `item` unconditionally, without going through the port (test
    /// setup; no faults, no validation).
    pub fn insert(&self, item: Item) {
        self.lock().insert(item.key.clone(), item);
    }

    /// Remove every item whose TTL has passed at `now_secs` (what
    /// DynamoDB's TTL sweeper eventually does); returns how many.
    pub fn purge_expired(&self, now_secs: i64) -> usize {
        let mut items = self.lock();
        let before = items.len();
        items.retain(|_, i| i.is_live(now_secs));
        before - items.len()
    }
}

impl Store for MemStore {
    async fn get(&self, key: &Key) -> PortResult<Option<Item>> {
        self.faults.before(ops::STORE_GET)?;
        let item = self.lock().get(key).cloned();
        self.faults.after(ops::STORE_GET)?;
        Ok(item)
    }

    async fn query(&self, pk: &str, sk_prefix: &str) -> PortResult<Vec<Item>> {
        self.faults.before(ops::STORE_QUERY)?;
        let start = Key::new(pk, sk_prefix);
        let items: Vec<Item> = self
            .lock()
            .range(start..)
            .take_while(|(k, _)| k.pk == pk && k.sk.starts_with(sk_prefix))
            .map(|(_, i)| i.clone())
            .collect();
        self.faults.after(ops::STORE_QUERY)?;
        Ok(items)
    }

    async fn write(&self, write: Write) -> PortResult<()> {
        self.faults.before(ops::STORE_WRITE)?;
        validate(&write)?;
        {
            let mut items = self.lock();
            let counter = check(&items, &write).map_err(PortError::ConditionFailed)?;
            apply(&mut items, write, counter);
        }
        self.faults.after(ops::STORE_WRITE)
    }

    async fn transact(&self, writes: Vec<Write>) -> PortResult<()> {
        self.faults.before(ops::STORE_TRANSACT)?;
        if writes.is_empty() || writes.len() > MAX_TRANSACT_WRITES {
            return Err(PortError::Rejected(format!(
                "ValidationException: a transaction takes 1 to {MAX_TRANSACT_WRITES} writes, got {}",
                writes.len()
            )));
        }
        let mut keys = BTreeSet::new();
        for w in &writes {
            validate(w)?;
            if !keys.insert(w.key()) {
                return Err(PortError::Rejected(format!(
                    "ValidationException: transaction has more than one write on {}",
                    w.key()
                )));
            }
        }
        {
            let mut items = self.lock();
            let mut counters = Vec::with_capacity(writes.len());
            let mut reasons = Vec::new();
            for (i, w) in writes.iter().enumerate() {
                match check(&items, w) {
                    Ok(c) => counters.push(c),
                    Err(r) => reasons.push(format!("[{i}] {r}")),
                }
            }
            if !reasons.is_empty() {
                return Err(PortError::ConditionFailed(format!(
                    "transaction cancelled: {}",
                    reasons.join("; ")
                )));
            }
            for (w, c) in writes.into_iter().zip(counters) {
                apply(&mut items, w, c);
            }
        }
        self.faults.after(ops::STORE_TRANSACT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on;

    fn key(pk: &str, sk: &str) -> Key {
        Key::new(pk, sk)
    }

    fn put(item: Item, condition: Condition) -> Write {
        Write::Put { item, condition }
    }

    fn item(pk: &str, sk: &str, version: u64) -> Item {
        let mut i = Item::new(key(pk, sk), format!("{pk}/{sk}@{version}").into_bytes());
        i.version = version;
        i
    }

    fn add(pk: &str, sk: &str, delta: i64, min: i64, max: i64) -> Write {
        Write::Add {
            key: key(pk, sk),
            delta,
            min,
            max,
        }
    }

    fn failed(r: PortResult<()>) -> bool {
        matches!(r, Err(PortError::ConditionFailed(_)))
    }

    #[test]
    fn absent_condition_treats_expired_items_as_gone() {
        let s = MemStore::new();
        let w = |i: Item, now| block_on(s.write(put(i, Condition::Absent { now_secs: now })));
        assert_eq!(w(item("p", "a", 1), 100), Ok(()));
        assert!(failed(w(item("p", "a", 2), 100)));
        assert_eq!(s.peek(&key("p", "a")).unwrap().version, 1);

        let mut leased = item("p", "lease", 1);
        leased.expires_at = Some(200);
        assert_eq!(w(leased, 100), Ok(()));
        assert!(failed(w(item("p", "lease", 2), 199)), "still live at 199");
        assert_eq!(w(item("p", "lease", 2), 200), Ok(()), "expired at 200");
        assert_eq!(s.peek(&key("p", "lease")).unwrap().version, 2);
    }

    #[test]
    fn version_condition_needs_an_item_with_that_version() {
        let s = MemStore::new();
        assert!(failed(block_on(
            s.write(put(item("p", "a", 2), Condition::Version(1)))
        )));
        s.insert(item("p", "a", 1));
        assert!(failed(block_on(
            s.write(put(item("p", "a", 3), Condition::Version(2)))
        )));
        assert_eq!(
            block_on(s.write(put(item("p", "a", 2), Condition::Version(1)))),
            Ok(())
        );
        assert_eq!(s.peek(&key("p", "a")).unwrap().version, 2);
        // Deletes are conditional too; unconditional delete of nothing is fine.
        let del = |c| Write::Delete {
            key: key("p", "a"),
            condition: c,
        };
        assert!(failed(block_on(s.write(del(Condition::Version(1))))));
        assert_eq!(block_on(s.write(del(Condition::Version(2)))), Ok(()));
        assert_eq!(block_on(s.write(del(Condition::Always))), Ok(()));
        assert!(s.is_empty());
    }

    #[test]
    fn always_overwrites() {
        let s = MemStore::new();
        s.insert(item("p", "a", 7));
        assert_eq!(
            block_on(s.write(put(item("p", "a", 1), Condition::Always))),
            Ok(())
        );
        assert_eq!(s.peek(&key("p", "a")).unwrap().version, 1);
    }

    #[test]
    fn add_respects_bounds_and_leaves_the_rest_alone() {
        let s = MemStore::new();
        assert!(
            failed(block_on(s.write(add("p", "c", 1, 0, 10)))),
            "missing item"
        );
        s.insert(item("p", "c", 5));
        assert_eq!(block_on(s.write(add("p", "c", 3, 0, 3))), Ok(()));
        assert!(
            failed(block_on(s.write(add("p", "c", 1, 0, 3)))),
            "above max"
        );
        assert!(
            failed(block_on(s.write(add("p", "c", -4, 0, 3)))),
            "below min"
        );
        assert_eq!(block_on(s.write(add("p", "c", -3, 0, 3))), Ok(()));
        let i = s.peek(&key("p", "c")).unwrap();
        assert_eq!((i.counter, i.version, i.body), (0, 5, b"p/c@5".to_vec()));
        // Overflow is a failed condition, not a panic.
        s.insert(Item {
            counter: i64::MAX,
            ..item("p", "big", 1)
        });
        assert!(failed(block_on(s.write(add(
            "p",
            "big",
            1,
            i64::MIN,
            i64::MAX
        )))));
    }

    #[test]
    fn add_never_leaves_bounds_under_interleaved_calls() {
        let s = MemStore::new();
        s.insert(item("p", "c", 1));
        let max = 7;
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut rng = crate::rng::SplitMix64::new(t);
                    let mut net = 0i64;
                    for _ in 0..500 {
                        let delta = if rng.next_u64() % 2 == 0 { 1 } else { -1 };
                        if block_on(s.write(add("p", "c", delta, 0, max))).is_ok() {
                            net += delta;
                        }
                        let c = s.peek(&key("p", "c")).unwrap().counter;
                        assert!((0..=max).contains(&c), "{c}");
                    }
                    net
                })
            })
            .collect();
        let net: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let c = s.peek(&key("p", "c")).unwrap().counter;
        assert!((0..=max).contains(&c));
        assert_eq!(c, net, "every successful add counted exactly once");
    }

    #[test]
    fn transact_is_all_or_nothing() {
        let s = MemStore::new();
        s.insert(item("p", "a", 1));
        s.insert(item("p", "c", 1));
        let bad = vec![
            put(item("p", "a", 2), Condition::Version(1)),
            put(item("p", "b", 1), Condition::Absent { now_secs: 0 }),
            add("p", "c", -1, 0, 10), // fails: would go negative
        ];
        let e = block_on(s.transact(bad)).unwrap_err();
        assert!(
            matches!(&e, PortError::ConditionFailed(m) if m.contains("[2]")),
            "{e}"
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.peek(&key("p", "a")).unwrap().version, 1);

        let good = vec![
            put(item("p", "a", 2), Condition::Version(1)),
            put(item("p", "b", 1), Condition::Absent { now_secs: 0 }),
            add("p", "c", 4, 0, 10),
            Write::Delete {
                key: key("p", "zz"),
                condition: Condition::Always,
            },
        ];
        assert_eq!(block_on(s.transact(good)), Ok(()));
        assert_eq!(s.peek(&key("p", "a")).unwrap().version, 2);
        assert_eq!(s.peek(&key("p", "c")).unwrap().counter, 4);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn transact_limits_are_rejections() {
        let s = MemStore::new();
        let rejected = |r: PortResult<()>| matches!(r, Err(PortError::Rejected(_)));
        assert!(rejected(block_on(s.transact(vec![]))));
        let too_many: Vec<_> = (0..=MAX_TRANSACT_WRITES)
            .map(|i| put(item("p", &format!("{i:03}"), 1), Condition::Always))
            .collect();
        assert!(rejected(block_on(s.transact(too_many))));
        let dup = vec![
            put(item("p", "a", 1), Condition::Always),
            add("p", "a", 1, 0, 1),
        ];
        assert!(rejected(block_on(s.transact(dup))));
        let max: Vec<_> = (0..MAX_TRANSACT_WRITES)
            .map(|i| put(item("p", &format!("{i:03}"), 1), Condition::Always))
            .collect();
        assert_eq!(block_on(s.transact(max)), Ok(()));
        assert_eq!(s.len(), MAX_TRANSACT_WRITES);
    }

    #[test]
    fn oversized_bodies_and_empty_keys_are_rejected() {
        let s = MemStore::new();
        let mut big = item("p", "a", 1);
        big.body = vec![b'x'; MAX_BODY_BYTES + 1];
        let r = block_on(s.write(put(big.clone(), Condition::Always)));
        assert!(matches!(r, Err(PortError::Rejected(_))), "{r:?}");
        let r = block_on(s.transact(vec![put(big.clone(), Condition::Always)]));
        assert!(matches!(r, Err(PortError::Rejected(_))), "{r:?}");
        big.body.pop();
        assert_eq!(block_on(s.write(put(big, Condition::Always))), Ok(()));
        let r = block_on(s.write(put(item("", "a", 1), Condition::Always)));
        assert!(matches!(r, Err(PortError::Rejected(_))));
    }

    #[test]
    fn query_is_prefix_and_sort_key_ordered() {
        let s = MemStore::new();
        for (pk, sk) in [
            ("c1", "claim#b"),
            ("c1", "claim#a"),
            ("c1", "batch#1"),
            ("c0", "claim#z"),
            ("c2", "claim#a"),
            ("c1", "claim"),
        ] {
            s.insert(item(pk, sk, 1));
        }
        let sks = |pk, prefix| -> Vec<String> {
            block_on(s.query(pk, prefix))
                .unwrap()
                .into_iter()
                .map(|i| i.key.sk)
                .collect()
        };
        assert_eq!(sks("c1", "claim#"), ["claim#a", "claim#b"]);
        assert_eq!(sks("c1", ""), ["batch#1", "claim", "claim#a", "claim#b"]);
        assert!(sks("c3", "").is_empty());
        // Expired items are returned; readers filter.
        let mut e = item("c1", "claim#c", 1);
        e.expires_at = Some(5);
        s.insert(e);
        let items = block_on(s.query("c1", "claim#")).unwrap();
        assert_eq!(items.iter().filter(|i| i.is_live(10)).count(), 2);
        assert_eq!(items.len(), 3);
        assert_eq!(s.purge_expired(10), 1);
    }

    #[test]
    fn faults_before_and_after_effect() {
        let s = MemStore::new();
        s.faults()
            .fail_next(ops::STORE_WRITE, PortError::Throttled("slow down".into()));
        let w = || put(item("p", "a", 1), Condition::Absent { now_secs: 0 });
        assert!(matches!(
            block_on(s.write(w())),
            Err(PortError::Throttled(_))
        ));
        assert!(s.is_empty(), "no effect before");

        s.faults()
            .fail_after_effect_next(ops::STORE_WRITE, PortError::Unavailable("timeout".into()));
        assert!(matches!(
            block_on(s.write(w())),
            Err(PortError::Unavailable(_))
        ));
        assert_eq!(s.len(), 1, "effect happened");
        // The retry now loses to its own earlier success.
        assert!(failed(block_on(s.write(w()))));
        assert_eq!(s.faults().calls(ops::STORE_WRITE), 3);

        s.faults()
            .fail_after_effect_next(ops::STORE_TRANSACT, PortError::Unavailable("t".into()));
        let r = block_on(s.transact(vec![put(item("p", "b", 1), Condition::Always)]));
        assert!(r.is_err());
        assert_eq!(s.len(), 2);
        s.faults()
            .fail_next(ops::STORE_GET, PortError::Unavailable("t".into()));
        assert!(block_on(s.get(&key("p", "a"))).is_err());
        assert!(block_on(s.get(&key("p", "a"))).unwrap().is_some());
    }
}
