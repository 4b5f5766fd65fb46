//! On-demand prices of live catalogs: the AWS Price List API (the
//! simulator's fake), cached in the table, with the embedded table as the
//! fallback and the source of each price recorded.

mod common;

use std::sync::Arc;

use flotilla_core::catalog::embedded::on_demand_prices;
use flotilla_core::catalog::pricelist::PriceOrigin;
use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::model::ClusterState;
use flotilla_ports::{PortError, Store};
use flotilla_service::offerings::{self, PRICES_MAX_AGE_SECS, PRICES_RETRY_SECS};
use flotilla_service::{keys, ServiceError};
use flotilla_sim::{ops, Ec2Sim};

use common::{world, SimPorts};

fn od(c: &Catalog, t: &str) -> f64 {
    c.get(t)
        .and_then(|e| {
            e.offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand)
        })
        .map(|o| o.price)
        .unwrap_or_else(|| panic!("{t} has no on-demand offering"))
}

async fn catalog(p: &SimPorts) -> Result<Catalog, ServiceError> {
    offerings::catalog(
        &p.store,
        &p.ec2,
        &p.clock,
        &p.config,
        &ClusterState::default(),
    )
    .await
}

#[tokio::test]
async fn price_list_prices_are_used_cached_and_named() {
    let p = world();
    let embedded = on_demand_prices("us-west-2").unwrap()["m5.large"];
    p.ec2.set_on_demand_price("m5.large", 0.5);
    let c = catalog(&p).await.unwrap();
    assert_eq!(od(&c, "m5.large"), 0.5);
    assert!(
        c.source
            .contains("from the AWS Price List API (fetched 2027-"),
        "{}",
        c.source
    );
    assert_eq!(p.ec2.price_list_calls(), 1);
    assert!(p
        .store
        .get(&keys::prices("us-west-2"))
        .await
        .unwrap()
        .is_some());

    // Cached: a new price is not seen until the cache is old.
    p.ec2.set_on_demand_price("m5.large", 0.6);
    p.clock.advance_secs(PRICES_MAX_AGE_SECS - 60);
    let c = catalog(&p).await.unwrap();
    assert_eq!((od(&c, "m5.large"), p.ec2.price_list_calls()), (0.5, 1));
    p.clock.advance_secs(120);
    let c = catalog(&p).await.unwrap();
    assert_eq!((od(&c, "m5.large"), p.ec2.price_list_calls()), (0.6, 2));
    assert_ne!(embedded, 0.6);
}

#[tokio::test]
async fn failures_fall_back_to_the_embedded_table_and_are_retried_later() {
    let p = world();
    let embedded = on_demand_prices("us-west-2").unwrap()["m5.large"];
    p.ec2.set_on_demand_price("m5.large", 0.5);
    p.ec2.faults().fail_next(
        ops::PRICING_GET_PRODUCTS,
        PortError::Rejected("AccessDeniedException: pricing:GetProducts".into()),
    );
    let c = catalog(&p).await.unwrap();
    assert_eq!(od(&c, "m5.large"), embedded);
    assert!(!c.source.contains("Price List"), "{}", c.source);
    assert!(
        c.source
            .contains("from the embedded table (aws/karpenter-provider-aws"),
        "{}",
        c.source
    );
    assert!(
        c.source.contains("ASSUMED"),
        "us-west-2 borrows us-east-1's table: {}",
        c.source
    );

    // The failure is cached: no call for a while, then a retry. (A call
    // refused by a fault does not reach the simulator's counter.)
    p.clock.advance_secs(PRICES_RETRY_SECS - 1);
    catalog(&p).await.unwrap();
    assert_eq!(p.ec2.price_list_calls(), 0);
    p.clock.advance_secs(2);
    let c = catalog(&p).await.unwrap();
    assert_eq!((od(&c, "m5.large"), p.ec2.price_list_calls()), (0.5, 1));
}

#[tokio::test]
async fn each_price_records_its_origin() {
    let p = world();
    // The Price List lacks c5.large: its price comes from the embedded table.
    p.ec2.set_on_demand_price("c5.large", -1.0);
    p.ec2.set_on_demand_price("m5.large", 0.5);
    let prices = offerings::on_demand(&p.store, &p.ec2, &p.clock, "us-west-2")
        .await
        .unwrap();
    assert_eq!(prices.origin("m5.large"), Some(PriceOrigin::PriceList));
    assert_eq!(prices.origin("c5.large"), Some(PriceOrigin::Embedded));
    assert_eq!(
        prices.usd()["c5.large"],
        on_demand_prices("us-west-2").unwrap()["c5.large"]
    );
    // Every type the Price List lacks and the embedded table has is
    // counted as embedded.
    let embedded = prices
        .prices
        .values()
        .filter(|(_, o)| *o == PriceOrigin::Embedded)
        .count();
    assert!(embedded >= 1);
    let s = prices.summary();
    assert!(
        s.contains(&format!("{embedded} from the embedded table")),
        "{s}"
    );
    assert!(s.contains("from the AWS Price List API"), "{s}");
}

/// A region the embedded catalog does not cover: the simulator's catalog is
/// us-west-2's, renamed.
fn foreign_world() -> SimPorts {
    let rename = |z: &str| z.replace("us-west-2", "xx-west-9");
    let mut cat = Catalog::embedded("us-west-2").unwrap();
    cat.region = "xx-west-9".into();
    cat.zones = cat.zones.iter().map(|z| rename(z)).collect();
    for e in &mut cat.entries {
        for o in &mut e.offerings {
            o.zone = rename(&o.zone);
        }
    }
    let mut p = world();
    p.config.region = "xx-west-9".into();
    p.ec2 = Arc::new(
        Ec2Sim::builder("xx-west-9")
            .cluster(common::CLUSTER)
            .clock(p.clock.clone())
            .catalog(cat)
            .build()
            .unwrap(),
    );
    p
}

#[tokio::test]
async fn a_region_outside_the_embedded_catalog_plans_on_live_prices() {
    let p = foreign_world();
    assert!(Catalog::embedded("xx-west-9").is_err());
    p.ec2.set_on_demand_price("m5.large", 0.123);
    let c = catalog(&p).await.unwrap();
    assert_eq!(c.region, "xx-west-9");
    assert!(c.zones.iter().all(|z| z.starts_with("xx-west-9")));
    assert_eq!(od(&c, "m5.large"), 0.123);
    assert!(!c.source.contains("embedded"), "{}", c.source);

    // Without the fallback a failure is the error, retryable so the
    // invocation fails and is retried (not a silently empty plan).
    let p = foreign_world();
    p.ec2.faults().fail_next(
        ops::PRICING_GET_PRODUCTS,
        PortError::Unavailable("pricing endpoint timed out".into()),
    );
    let e = catalog(&p).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("Pricing GetProducts"), "{e}");
    // ... and not cached: the next run asks again and succeeds.
    assert!(catalog(&p).await.is_ok());
}
