//! The store port: a key-value table with conditional writes, bounded
//! counters and small transactions: exactly the subset of DynamoDB that
//! Flotilla's single-table design uses (see `docs/dynamodb.md`).
//!
//! Items have a partition key `pk`, a sort key `sk`, an optimistic-locking
//! `version`, an optional TTL (`expires_at`, Unix seconds), one counter
//! attribute and an opaque body (JSON written by the services, at most
//! [`MAX_BODY_BYTES`]). Expired items may linger (DynamoDB deletes them
//! up to days late), so readers filter with [`Item::is_live`] and
//! [`Condition::Absent`] treats an expired item as absent.

use std::future::Future;

use crate::PortResult;

/// DynamoDB items are at most 400 KB including attribute names; bodies are
/// kept well below so keys and metadata always fit.
pub const MAX_BODY_BYTES: usize = 350 * 1024;

/// DynamoDB TransactWriteItems takes at most 100 actions.
pub const MAX_TRANSACT_WRITES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

impl Key {
    pub fn new(pk: impl Into<String>, sk: impl Into<String>) -> Self {
        Key {
            pk: pk.into(),
            sk: sk.into(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {}", self.pk, self.sk)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Key,
    /// Optimistic-concurrency version, chosen by the writer (usually the
    /// previous version + 1) and checked with [`Condition::Version`].
    pub version: u64,
    /// Unix seconds after which the item counts as gone (the table's TTL
    /// attribute).
    pub expires_at: Option<i64>,
    /// The counter attribute, changed only by [`Write::Add`].
    pub counter: i64,
    /// Opaque payload, at most [`MAX_BODY_BYTES`].
    pub body: Vec<u8>,
}

impl Item {
    pub fn new(key: Key, body: Vec<u8>) -> Self {
        Item {
            key,
            version: 1,
            expires_at: None,
            counter: 0,
            body,
        }
    }

    /// False once the item's TTL has passed at `now_secs`.
    pub fn is_live(&self, now_secs: i64) -> bool {
        self.expires_at.is_none_or(|t| t > now_secs)
    }
}

/// The condition a write is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Unconditional.
    Always,
    /// No item with this key, or only one whose TTL has passed at `now_secs`.
    Absent { now_secs: i64 },
    /// An item with this key exists and has exactly this version.
    Version(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Put {
        item: Item,
        condition: Condition,
    },
    Delete {
        key: Key,
        condition: Condition,
    },
    /// `counter += delta` on an existing item, only if the result stays
    /// within `[min, max]`; otherwise [`crate::PortError::ConditionFailed`].
    /// The item's version and body are untouched.
    Add {
        key: Key,
        delta: i64,
        min: i64,
        max: i64,
    },
}

impl Write {
    pub fn key(&self) -> &Key {
        match self {
            Write::Put { item, .. } => &item.key,
            Write::Delete { key, .. } | Write::Add { key, .. } => key,
        }
    }
}

pub trait Store: Send + Sync {
    /// Strongly consistent read.
    fn get(&self, key: &Key) -> impl Future<Output = PortResult<Option<Item>>> + Send;

    /// Every item of partition `pk` whose sort key starts with `sk_prefix`,
    /// in sort-key order (strongly consistent; pagination is the adapter's
    /// job). Expired items are included: filter with [`Item::is_live`].
    fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> impl Future<Output = PortResult<Vec<Item>>> + Send;

    /// One conditional write.
    fn write(&self, write: Write) -> impl Future<Output = PortResult<()>> + Send;

    /// All or nothing: at most [`MAX_TRANSACT_WRITES`] writes on distinct
    /// keys. Any failed condition fails the whole transaction with
    /// [`crate::PortError::ConditionFailed`].
    fn transact(&self, writes: Vec<Write>) -> impl Future<Output = PortResult<()>> + Send;
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn get(&self, key: &Key) -> impl Future<Output = PortResult<Option<Item>>> + Send {
        (**self).get(key)
    }
    fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> impl Future<Output = PortResult<Vec<Item>>> + Send {
        (**self).query(pk, sk_prefix)
    }
    fn write(&self, write: Write) -> impl Future<Output = PortResult<()>> + Send {
        (**self).write(write)
    }
    fn transact(&self, writes: Vec<Write>) -> impl Future<Output = PortResult<()>> + Send {
        (**self).transact(writes)
    }
}
