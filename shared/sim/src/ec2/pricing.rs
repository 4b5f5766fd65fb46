//! The [`PriceList`] port of [`Ec2Sim`]: the AWS Price List API's on-demand
//! prices, from the simulator's catalog.
//!
//! Each type's price is its catalog on-demand price (the embedded table's,
//! for a simulator built from the embedded catalog) unless a test set
//! another with [`Ec2Sim::set_on_demand_price`]; a type can be left out of
//! the list with a negative price (the Price List API not knowing it). A
//! region other than the simulator's gets an empty list, as the real API
//! answers a `regionCode` it has no products for. Fault operation:
//! [`ops::PRICING_GET_PRODUCTS`](crate::ops::PRICING_GET_PRODUCTS).

use std::collections::BTreeMap;

use flotilla_core::catalog::CapacityType;
use flotilla_ports::{PortResult, PriceList};

use super::Ec2Sim;
use crate::faults::ops;

impl Ec2Sim {
    /// The Price List price of `instance_type` from now on (USD/hour); a
    /// negative price leaves the type out of the list.
    pub fn set_on_demand_price(&self, instance_type: &str, price: f64) {
        self.lock()
            .on_demand_prices
            .insert(instance_type.to_string(), price);
    }

    /// How many Price List calls reached the simulator.
    pub fn price_list_calls(&self) -> usize {
        self.lock().price_list_calls
    }
}

impl PriceList for Ec2Sim {
    async fn on_demand_prices(&self, region: &str) -> PortResult<BTreeMap<String, f64>> {
        self.call(ops::PRICING_GET_PRODUCTS, |st, inner| {
            st.price_list_calls = st.price_list_calls.saturating_add(1);
            if region != inner.region {
                return Ok(BTreeMap::new());
            }
            let mut out = BTreeMap::new();
            for e in &inner.catalog.entries {
                let listed = e
                    .offerings
                    .iter()
                    .find(|o| o.capacity_type == CapacityType::OnDemand)
                    .map(|o| o.price);
                let price = st.on_demand_prices.get(&e.info.name).copied().or(listed);
                if let Some(p) = price.filter(|p| *p >= 0.0) {
                    out.insert(e.info.name.clone(), p);
                }
            }
            for (t, p) in &st.on_demand_prices {
                if *p >= 0.0 {
                    out.entry(t.clone()).or_insert(*p);
                }
            }
            Ok(out)
        })
    }
}
