//! A [`Store`] that records every call made through it (operation, the
//! kind of item, bytes written, time taken), for benchmarks that say
//! where a stage's time goes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use flotilla_ports::{Item, Key, PortResult, Store, Write};
use serde_json::{json, Value};

/// One store call.
#[derive(Debug, Clone)]
pub struct Call {
    /// `get`, `query`, `put`, `delete`, `add` or `transact`.
    pub op: &'static str,
    /// The sort key's leading upper-case segments (`STATE#HEAD`, `BATCH`,
    /// ...; a query: its prefix's).
    pub kind: String,
    /// Body bytes written (a transaction: all its puts').
    pub bytes: usize,
    pub micros: u128,
}

/// `inner` with its calls recorded.
#[derive(Debug, Default)]
pub struct Counted<S> {
    inner: S,
    calls: Mutex<Vec<Call>>,
}

/// The leading upper-case segments of a sort key: `STATE#DELTA#b-1#…` →
/// `STATE#DELTA`, `BATCH#018f…` → `BATCH`.
fn kind(sk: &str) -> String {
    sk.split('#')
        .take_while(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect::<Vec<_>>()
        .join("#")
}

fn written(w: &Write) -> (&'static str, usize) {
    match w {
        Write::Put { item, .. } => ("put", item.body.len()),
        Write::Delete { .. } => ("delete", 0),
        Write::Add { .. } => ("add", 0),
    }
}

impl<S> Counted<S> {
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            calls: Mutex::new(Vec::new()),
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The calls recorded since the last [`Counted::reset`].
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn reset(&self) {
        if let Ok(mut c) = self.calls.lock() {
            c.clear();
        }
    }

    fn record(&self, op: &'static str, kind: String, bytes: usize, since: Instant) {
        if let Ok(mut c) = self.calls.lock() {
            c.push(Call {
                op,
                kind,
                bytes,
                micros: since.elapsed().as_micros(),
            });
        }
    }

    /// The calls as JSON: how many, the time in them, the bytes written
    /// and the largest item written, by `<op> <kind>`.
    pub fn summary(&self) -> Value {
        let calls = self.calls();
        let mut by: BTreeMap<String, (usize, u128, usize, usize)> = BTreeMap::new();
        for c in &calls {
            let e = by.entry(format!("{} {}", c.op, c.kind)).or_default();
            *e = (e.0 + 1, e.1 + c.micros, e.2 + c.bytes, e.3.max(c.bytes));
        }
        let detail: serde_json::Map<String, Value> = by
            .into_iter()
            .map(|(k, (n, us, bytes, max))| {
                let ms = us as f64 / 1000.0;
                (
                    k,
                    json!({"calls": n, "ms": ms, "bytes": bytes, "maxItemBytes": max}),
                )
            })
            .collect();
        let ms: u128 = calls.iter().map(|c| c.micros).sum();
        json!({"calls": calls.len(), "ms": ms as f64 / 1000.0,
            "bytesWritten": calls.iter().map(|c| c.bytes).sum::<usize>(), "byCall": detail})
    }
}

impl<S: Store> Store for Counted<S> {
    async fn get(&self, key: &Key) -> PortResult<Option<Item>> {
        let t = Instant::now();
        let r = self.inner.get(key).await;
        self.record("get", kind(&key.sk), 0, t);
        r
    }

    async fn query(&self, pk: &str, sk_prefix: &str) -> PortResult<Vec<Item>> {
        let t = Instant::now();
        let r = self.inner.query(pk, sk_prefix).await;
        self.record("query", kind(sk_prefix), 0, t);
        r
    }

    async fn write(&self, write: Write) -> PortResult<()> {
        let (op, bytes) = written(&write);
        let k = kind(&write.key().sk);
        let t = Instant::now();
        let r = self.inner.write(write).await;
        self.record(op, k, bytes, t);
        r
    }

    async fn transact(&self, writes: Vec<Write>) -> PortResult<()> {
        let bytes = writes.iter().map(|w| written(w).1).sum();
        let k = writes
            .first()
            .map(|w| kind(&w.key().sk))
            .unwrap_or_default();
        let t = Instant::now();
        let r = self.inner.transact(writes).await;
        self.record("transact", k, bytes, t);
        r
    }
}
