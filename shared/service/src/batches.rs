//! The cluster's batches as the stages hand them over: the scheduler
//! pointer (pending, running and last completed batch, the scheduling
//! lease) and the `BatchAccepted` event. Intake and the change service move
//! the pointer to new batches, schedule takes them; neither stage module
//! depends on the other for it.

use flotilla_ports::events::{BatchAccepted, FlotillaEvent};
use flotilla_ports::{Bus, Condition, Item, PortError, Store, Write};

use crate::records::{PendingBatch, SchedulerPointer};
use crate::{codec, keys, Result, ServiceError};

/// Read-modify-write of the scheduler pointer with optimistic locking.
/// `f` returns whether to write the changed pointer, and a value.
pub(crate) async fn update_pointer<S: Store, T>(
    store: &S,
    cluster: &str,
    now_secs: i64,
    mut f: impl FnMut(&mut SchedulerPointer) -> (bool, T),
) -> Result<T> {
    let key = keys::scheduler(cluster);
    for _ in 0..16 {
        let current = store
            .get(&key)
            .await
            .map_err(ServiceError::port("read scheduler pointer"))?;
        let (mut pointer, condition, version) = match &current {
            Some(item) => (
                codec::from_json::<SchedulerPointer>(&key.to_string(), &item.body)?,
                Condition::Version(item.version),
                item.version + 1,
            ),
            None => (
                SchedulerPointer::default(),
                Condition::Absent { now_secs },
                1,
            ),
        };
        let (write, out) = f(&mut pointer);
        if !write {
            return Ok(out);
        }
        let mut item = Item::new(key.clone(), codec::to_json(&pointer));
        item.version = version;
        match store.write(Write::Put { item, condition }).await {
            Ok(()) => return Ok(out),
            Err(PortError::ConditionFailed(_)) => continue,
            Err(e) => return Err(ServiceError::port("write scheduler pointer")(e)),
        }
    }
    Err(ServiceError::Port {
        context: format!("scheduler pointer of {cluster}"),
        source: PortError::Throttled("too much contention".into()),
    })
}

/// Put `BatchAccepted` for a stored batch.
pub(crate) async fn put_accepted<B: Bus>(bus: &B, cluster: &str, batch: &str) -> Result<()> {
    let event = FlotillaEvent::BatchAccepted(BatchAccepted {
        cluster_id: cluster.to_string(),
        batch_id: batch.to_string(),
    });
    bus.put(vec![event.to_event()])
        .await
        .map_err(ServiceError::port("put BatchAccepted"))
}

/// Make `batch_id` (content `hash`) the cluster's pending batch, keeping
/// the start of the batching window of a batch it supersedes.
pub(crate) async fn make_pending<S: Store>(
    store: &S,
    cluster: &str,
    batch_id: &str,
    hash: &str,
    now: i64,
    now_secs: i64,
) -> Result<()> {
    update_pointer(store, cluster, now_secs, |p| {
        let first_at = p.pending.as_ref().map_or(now, |old| old.first_at);
        p.rearms = 0;
        p.pending = Some(PendingBatch {
            batch_id: batch_id.to_string(),
            content_hash: hash.to_string(),
            first_at,
            last_at: now,
        });
        (true, ())
    })
    .await
}
