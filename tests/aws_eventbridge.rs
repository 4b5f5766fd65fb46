//! `EventBridgeBus` against a local moto server: events are counted by an
//! archive on the bus whose pattern matches Flotilla's source.

use aws_sdk_eventbridge::Client;
use flotilla_aws::EventBridgeBus;
use flotilla_ports::{Bus, Event, PortError};
use flotilla_tests::{unique_name, Moto};

async fn bus_with_archive(moto: &Moto) -> (EventBridgeBus, Client, String) {
    let config = moto.config().await;
    let client = Client::new(&config);
    let name = unique_name("flotilla-bus");
    let bus = client.create_event_bus().name(&name).send().await.unwrap();
    let archive = unique_name("archive");
    client
        .create_archive()
        .archive_name(&archive)
        .event_source_arn(bus.event_bus_arn().unwrap())
        .event_pattern(r#"{"source": ["flotilla"]}"#)
        .send()
        .await
        .unwrap();
    (
        EventBridgeBus::new(&config, &name).with_base_delay(std::time::Duration::from_millis(10)),
        client,
        archive,
    )
}

async fn archived(client: &Client, archive: &str) -> i64 {
    client
        .describe_archive()
        .archive_name(archive)
        .send()
        .await
        .unwrap()
        .event_count()
}

#[tokio::test]
async fn puts_25_events_in_chunks_of_ten() {
    let moto = Moto::start();
    let (bus, client, archive) = bus_with_archive(&moto).await;
    let events: Vec<Event> = (0..25)
        .map(|i| Event {
            detail_type: "NodeClaimsPlanned".into(),
            detail: format!(r#"{{"clusterId":"c","batchId":"b{i}","nodeClaims":[]}}"#),
        })
        .collect();
    bus.put(events).await.unwrap();
    assert_eq!(archived(&client, &archive).await, 25);
    // Nothing to put is fine.
    bus.put(Vec::new()).await.unwrap();
    assert_eq!(archived(&client, &archive).await, 25);
}

#[tokio::test]
async fn malformed_details_are_rejected_without_retrying() {
    let moto = Moto::start();
    let (bus, client, archive) = bus_with_archive(&moto).await;
    let err = bus
        .put(vec![
            Event {
                detail_type: "BatchAccepted".into(),
                detail: r#"{"clusterId":"c","batchId":"b"}"#.into(),
            },
            Event {
                detail_type: "BatchAccepted".into(),
                detail: "not json".into(),
            },
        ])
        .await
        .unwrap_err();
    match err {
        PortError::Rejected(m) => assert!(m.contains("MalformedDetail"), "{m}"),
        other => panic!("{other:?}"),
    }
    // The valid entry of the call went through once.
    assert_eq!(archived(&client, &archive).await, 1);
}
