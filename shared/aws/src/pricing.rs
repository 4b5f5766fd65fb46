//! The [`PriceList`] port over the AWS Price List API (`GetProducts`,
//! service code `AmazonEC2`).
//!
//! The API is served from a few regions only (us-east-1, ap-south-1,
//! eu-central-1) and answers for every region, so the client is pinned to
//! [`PRICE_LIST_REGION`] whatever the cluster's region; the region asked
//! about is a `regionCode` filter. The other filters select the products
//! Flotilla launches: Linux, shared tenancy, no pre-installed software,
//! capacity status `Used` (not reservation lines), no license. Each
//! `PriceList` entry is a JSON document read by
//! [`flotilla_core::catalog::pricelist::parse_product`]; documents it refuses
//! are counted and logged, not fatal.

use std::collections::BTreeMap;

use aws_sdk_pricing::types::{Filter, FilterType};
use aws_sdk_pricing::Client;
use flotilla_core::catalog::pricelist::parse_product;
use flotilla_ports::{PortError, PortResult, PriceList};

use crate::error::classify;

/// Where the Price List API is called (it is not served in most regions).
pub const PRICE_LIST_REGION: &str = "us-east-1";

/// `(field, value)` TERM_MATCH filters besides `regionCode`.
pub const FILTERS: [(&str, &str); 5] = [
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
];

/// The most pages one region's list is read in (100 products a page; a
/// region has about 1,000 matching products). A guard against an endless
/// pagination token, not a limit met in practice.
const MAX_PAGES: usize = 200;

/// [`PriceList`] over the AWS SDK, pinned to [`PRICE_LIST_REGION`].
#[derive(Debug, Clone)]
pub struct PriceListClient {
    client: Client,
}

impl PriceListClient {
    /// A client from the shared configuration (credentials, endpoint
    /// override), its region replaced by [`PRICE_LIST_REGION`].
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        let conf = aws_sdk_pricing::config::Builder::from(sdk)
            .region(aws_config::Region::new(PRICE_LIST_REGION))
            .build();
        PriceListClient {
            client: Client::from_conf(conf),
        }
    }
}

fn filters(region: &str) -> PortResult<Vec<Filter>> {
    std::iter::once(("regionCode", region))
        .chain(FILTERS)
        .map(|(field, value)| {
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .map_err(|e| PortError::Rejected(format!("Pricing GetProducts filter: {e}")))
        })
        .collect()
}

/// Adds the prices of one page of documents to `out`; returns how many
/// documents were refused. For one type the lowest price wins (the
/// filters leave one product per type; this keeps a duplicate harmless).
pub(crate) fn add_page(docs: &[String], region: &str, out: &mut BTreeMap<String, f64>) -> usize {
    let mut refused = 0;
    for doc in docs {
        match parse_product(doc) {
            Ok(p) if p.region.is_empty() || p.region == region => {
                let e = out.entry(p.instance_type).or_insert(p.usd_per_hour);
                *e = e.min(p.usd_per_hour);
            }
            Ok(p) => {
                refused += 1;
                tracing::debug!(region, other = %p.region, "Price List product of another region");
            }
            Err(e) => {
                refused += 1;
                tracing::debug!(region, error = %e, "Price List product refused");
            }
        }
    }
    refused
}

impl PriceList for PriceListClient {
    async fn on_demand_prices(&self, region: &str) -> PortResult<BTreeMap<String, f64>> {
        let what = format!("Pricing GetProducts AmazonEC2 {region}");
        let filters = filters(region)?;
        let mut out = BTreeMap::new();
        let (mut refused, mut token) = (0usize, None);
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .get_products()
                .service_code("AmazonEC2")
                .format_version("aws_v1")
                .set_filters(Some(filters.clone()))
                .max_results(100)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(&what, &e))?;
            refused = refused.saturating_add(add_page(page.price_list(), region, &mut out));
            match page.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        if token.is_some() {
            return Err(PortError::Unavailable(format!(
                "{what}: more than {MAX_PAGES} pages"
            )));
        }
        tracing::info!(region, prices = out.len(), refused, "Price List read");
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(t: &str, region: &str, usd: &str) -> String {
        json!({
            "product": {"attributes": {"instanceType": t, "regionCode": region,
                "operatingSystem": "Linux", "tenancy": "Shared"}},
            "terms": {"OnDemand": {"X.Y": {"priceDimensions": {"X.Y.Z": {
                "unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}
        })
        .to_string()
    }

    #[test]
    fn pages_add_up_and_refuse_strays() {
        let mut out = BTreeMap::new();
        let refused = add_page(
            &[
                doc("m5.large", "eu-west-1", "0.107"),
                doc("m5.large", "eu-west-1", "0.2"),
                doc("c5.large", "us-east-1", "0.085"),
                "not json".into(),
                doc("r5.large", "", "0.141"),
            ],
            "eu-west-1",
            &mut out,
        );
        assert_eq!(refused, 2);
        assert_eq!(
            out,
            BTreeMap::from([("m5.large".into(), 0.107), ("r5.large".into(), 0.141)])
        );
    }

    #[test]
    fn filters_select_linux_shared_of_the_region() {
        let f = filters("eu-west-1").unwrap();
        let pairs: Vec<(&str, &str)> = f.iter().map(|f| (f.field(), f.value())).collect();
        assert_eq!(pairs[0], ("regionCode", "eu-west-1"));
        assert!(pairs.contains(&("capacitystatus", "Used")));
        assert!(f.iter().all(|f| *f.r#type() == FilterType::TermMatch));
        assert_eq!(f.len(), 6);
    }
}
