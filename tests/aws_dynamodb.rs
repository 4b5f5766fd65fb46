//! `DynamoStore` against a local moto server.

use std::sync::Arc;

use flotilla_aws::DynamoStore;
use flotilla_ports::{Condition, Item, Key, PortError, Store, Write};
use flotilla_tests::{unique_name, Moto};

async fn store(moto: &Moto) -> DynamoStore {
    let s = DynamoStore::new(&moto.config().await, unique_name("flotilla"));
    s.create_table().await.expect("create table");
    // Idempotent.
    s.create_table().await.expect("create table again");
    s
}

fn item(pk: &str, sk: &str, body: &str) -> Item {
    Item::new(Key::new(pk, sk), body.as_bytes().to_vec())
}

fn put(item: Item, condition: Condition) -> Write {
    Write::Put { item, condition }
}

fn condition_failed<T: std::fmt::Debug>(r: Result<T, PortError>) {
    assert!(
        matches!(r, Err(PortError::ConditionFailed(_))),
        "expected ConditionFailed, got {r:?}"
    );
}

#[tokio::test]
async fn put_get_and_every_condition() {
    let moto = Moto::start();
    let s = store(&moto).await;
    let k = Key::new("c#1", "claim#a");
    assert_eq!(s.get(&k).await.unwrap(), None);

    // Absent: succeeds once.
    let mut a = item("c#1", "claim#a", "{\"v\":1}");
    a.expires_at = Some(2_000_000_000);
    s.write(put(a.clone(), Condition::Absent { now_secs: 1_000 }))
        .await
        .unwrap();
    assert_eq!(s.get(&k).await.unwrap(), Some(a.clone()));
    condition_failed(
        s.write(put(a.clone(), Condition::Absent { now_secs: 1_000 }))
            .await,
    );

    // Version: only the matching version wins.
    let mut b = a.clone();
    b.version = 2;
    b.body = b"{\"v\":2}".to_vec();
    condition_failed(s.write(put(b.clone(), Condition::Version(5))).await);
    s.write(put(b.clone(), Condition::Version(1)))
        .await
        .unwrap();
    assert_eq!(s.get(&k).await.unwrap(), Some(b.clone()));
    condition_failed(s.write(put(b.clone(), Condition::Version(1))).await);
    // Version on a missing item fails.
    condition_failed(
        s.write(put(item("c#1", "nope", "x"), Condition::Version(1)))
            .await,
    );

    // Always overwrites; an empty body and no TTL round-trip.
    let c = item("c#1", "claim#a", "");
    s.write(put(c.clone(), Condition::Always)).await.unwrap();
    assert_eq!(s.get(&k).await.unwrap(), Some(c.clone()));

    // Delete under each condition.
    condition_failed(
        s.write(Write::Delete {
            key: k.clone(),
            condition: Condition::Version(9),
        })
        .await,
    );
    s.write(Write::Delete {
        key: k.clone(),
        condition: Condition::Version(1),
    })
    .await
    .unwrap();
    assert_eq!(s.get(&k).await.unwrap(), None);
    // Deleting a missing item unconditionally is fine.
    s.write(Write::Delete {
        key: k.clone(),
        condition: Condition::Always,
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn expired_items_count_as_absent() {
    let moto = Moto::start();
    let s = store(&moto).await;
    let mut lease = item("lock", "batch", "owner-a");
    lease.expires_at = Some(100);
    s.write(put(lease.clone(), Condition::Absent { now_secs: 50 }))
        .await
        .unwrap();
    // Not yet expired at 99.
    let mut other = item("lock", "batch", "owner-b");
    other.expires_at = Some(300);
    condition_failed(
        s.write(put(other.clone(), Condition::Absent { now_secs: 99 }))
            .await,
    );
    // Expired at 100 (expiresAt <= now): the item is taken over.
    s.write(put(other.clone(), Condition::Absent { now_secs: 100 }))
        .await
        .unwrap();
    let got = s.get(&other.key).await.unwrap().unwrap();
    assert_eq!(got.body, b"owner-b");
    assert!(got.is_live(200) && !got.is_live(300));
    // An item without TTL never expires.
    s.write(put(item("lock", "forever", "x"), Condition::Always))
        .await
        .unwrap();
    condition_failed(
        s.write(put(
            item("lock", "forever", "y"),
            Condition::Absent { now_secs: i64::MAX },
        ))
        .await,
    );
}

#[tokio::test]
async fn add_stays_within_bounds() {
    let moto = Moto::start();
    let s = store(&moto).await;
    let k = Key::new("limits", "cpu");
    let add = |delta, min, max| Write::Add {
        key: k.clone(),
        delta,
        min,
        max,
    };
    // Missing item: condition fails, nothing is created.
    condition_failed(s.write(add(1, 0, 10)).await);
    assert_eq!(s.get(&k).await.unwrap(), None);

    s.write(put(
        Item::new(k.clone(), b"body".to_vec()),
        Condition::Always,
    ))
    .await
    .unwrap();
    s.write(add(7, 0, 10)).await.unwrap();
    s.write(add(3, 0, 10)).await.unwrap();
    // Never above max.
    condition_failed(s.write(add(1, 0, 10)).await);
    s.write(add(-10, 0, 10)).await.unwrap();
    // Never below min.
    condition_failed(s.write(add(-1, 0, 10)).await);
    s.write(add(4, 0, 10)).await.unwrap();
    condition_failed(s.write(add(-5, 0, 10)).await);
    let got = s.get(&k).await.unwrap().unwrap();
    assert_eq!(got.counter, 4);
    // Version and body untouched.
    assert_eq!((got.version, got.body.as_slice()), (1, b"body".as_slice()));
}

#[tokio::test]
async fn concurrent_takers_never_overdraw_a_counter() {
    const N: i64 = 12;
    const TASKS: usize = 40;
    let moto = Moto::start();
    let s = Arc::new(store(&moto).await);
    let k = Key::new("quota", "launches");
    let mut quota = Item::new(k.clone(), Vec::new());
    quota.counter = N;
    s.write(put(quota, Condition::Always)).await.unwrap();

    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let s = Arc::clone(&s);
        let k = k.clone();
        handles.push(tokio::spawn(async move {
            loop {
                match s
                    .write(Write::Add {
                        key: k.clone(),
                        delta: -1,
                        min: 0,
                        max: N,
                    })
                    .await
                {
                    Ok(()) => return true,
                    Err(PortError::ConditionFailed(_)) => return false,
                    Err(e) if e.is_retryable() => continue,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    let mut won = 0;
    for h in handles {
        if h.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, N);
    assert_eq!(s.get(&k).await.unwrap().unwrap().counter, 0);
}

#[tokio::test]
async fn transactions_are_all_or_nothing() {
    let moto = Moto::start();
    let s = store(&moto).await;
    let mut counter = item("c", "counter", "");
    counter.counter = 1;
    s.write(put(counter, Condition::Always)).await.unwrap();
    s.write(put(item("c", "old", "x"), Condition::Always))
        .await
        .unwrap();

    // The last write's condition fails: nothing happens.
    let failing = vec![
        put(item("c", "new-1", "a"), Condition::Absent { now_secs: 0 }),
        Write::Delete {
            key: Key::new("c", "old"),
            condition: Condition::Version(1),
        },
        Write::Add {
            key: Key::new("c", "counter"),
            delta: -1,
            min: 0,
            max: 10,
        },
        put(item("c", "old-2", "b"), Condition::Version(3)),
    ];
    condition_failed(s.transact(failing).await);
    assert_eq!(s.get(&Key::new("c", "new-1")).await.unwrap(), None);
    assert!(s.get(&Key::new("c", "old")).await.unwrap().is_some());
    assert_eq!(
        s.get(&Key::new("c", "counter"))
            .await
            .unwrap()
            .unwrap()
            .counter,
        1
    );

    // An Add out of bounds fails the whole transaction too.
    condition_failed(
        s.transact(vec![
            put(item("c", "new-1", "a"), Condition::Absent { now_secs: 0 }),
            Write::Add {
                key: Key::new("c", "counter"),
                delta: -2,
                min: 0,
                max: 10,
            },
        ])
        .await,
    );
    assert_eq!(s.get(&Key::new("c", "new-1")).await.unwrap(), None);

    // All conditions hold: everything happens.
    s.transact(vec![
        put(item("c", "new-1", "a"), Condition::Absent { now_secs: 0 }),
        Write::Delete {
            key: Key::new("c", "old"),
            condition: Condition::Version(1),
        },
        Write::Add {
            key: Key::new("c", "counter"),
            delta: -1,
            min: 0,
            max: 10,
        },
    ])
    .await
    .unwrap();
    assert!(s.get(&Key::new("c", "new-1")).await.unwrap().is_some());
    assert_eq!(s.get(&Key::new("c", "old")).await.unwrap(), None);
    assert_eq!(
        s.get(&Key::new("c", "counter"))
            .await
            .unwrap()
            .unwrap()
            .counter,
        0
    );
    // Empty transactions are a no-op; oversized ones are rejected locally.
    s.transact(Vec::new()).await.unwrap();
    let too_many = (0..101)
        .map(|i| put(item("c", &format!("t{i}"), ""), Condition::Always))
        .collect();
    assert!(matches!(
        s.transact(too_many).await,
        Err(PortError::Rejected(_))
    ));
}

#[tokio::test]
async fn query_pages_through_more_than_a_megabyte() {
    let moto = Moto::start();
    let s = store(&moto).await;
    // 40 items of 100 KB: 4 MB, several 1 MB pages.
    let body = vec![b'x'; 100 * 1024];
    for i in 0..40 {
        let it = Item::new(Key::new("big", format!("claim#{i:03}")), body.clone());
        s.write(put(it, Condition::Always)).await.unwrap();
    }
    s.write(put(item("big", "other#1", "y"), Condition::Always))
        .await
        .unwrap();
    s.write(put(item("small", "claim#000", "z"), Condition::Always))
        .await
        .unwrap();

    let got = s.query("big", "claim#").await.unwrap();
    assert_eq!(got.len(), 40);
    let keys: Vec<&str> = got.iter().map(|i| i.key.sk.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "sort-key order");
    assert!(got.iter().all(|i| i.body.len() == 100 * 1024));
    // An empty prefix is the whole partition.
    assert_eq!(s.query("big", "").await.unwrap().len(), 41);
    assert!(s.query("none", "claim#").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_table_is_rejected_and_names_the_key() {
    let moto = Moto::start();
    let s = DynamoStore::new(&moto.config().await, "no-such-table");
    let err = s.get(&Key::new("a", "b")).await.unwrap_err();
    match err {
        PortError::Rejected(m) => assert!(m.contains("GetItem a / b"), "{m}"),
        other => panic!("{other:?}"),
    }
}
