//! On-demand prices from the AWS Price List API, and where each price a
//! catalog uses came from.
//!
//! `GetProducts` (service code `AmazonEC2`) answers with `PriceList`, a list
//! of JSON documents, one per product (SKU). [`parse_product`] reads one:
//! the instance type and region from `product.attributes`, the hourly USD
//! price from `terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD`. The
//! adapter asks only for Linux, shared tenancy, no pre-installed software,
//! capacity status `Used` and "No License required"; the parser checks
//! those attributes again where present, so a stray product (a Windows or
//! dedicated SKU, a capacity-reservation line) is refused, not mispriced.
//!
//! [`OnDemandPrices`] merges a live table with the embedded one (the
//! fallback) and records per type which of the two a price came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a Price List document gives no on-demand Linux price.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceListError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("missing or not a string: {0}")]
    Missing(&'static str),
    #[error("{attribute} is {value:?}, not {wanted:?}")]
    OtherProduct {
        attribute: &'static str,
        value: String,
        wanted: &'static str,
    },
    #[error("no OnDemand hourly USD price")]
    NoHourlyPrice,
    #[error("price {0:?} is not a positive finite number")]
    BadPrice(String),
}

/// One product's on-demand price.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductPrice {
    pub instance_type: String,
    /// `regionCode` (absent in some older documents: empty).
    pub region: String,
    /// USD per hour.
    pub usd_per_hour: f64,
}

/// The attribute values a price of Flotilla's must have (when present).
const WANTED: [(&str, &str); 5] = [
    ("operatingSystem", "Linux"),
    ("tenancy", "Shared"),
    ("preInstalledSw", "NA"),
    ("capacitystatus", "Used"),
    ("licenseModel", "No License required"),
];

fn str_at<'a>(v: &'a Value, path: &[&str], what: &'static str) -> Result<&'a str, PriceListError> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .ok_or(PriceListError::Missing(what))
}

/// Parses one `PriceList` entry of a `GetProducts` answer.
pub fn parse_product(doc: &str) -> Result<ProductPrice, PriceListError> {
    let v: Value = serde_json::from_str(doc).map_err(|e| PriceListError::NotJson(e.to_string()))?;
    let attrs = v
        .get("product")
        .and_then(|p| p.get("attributes"))
        .ok_or(PriceListError::Missing("product.attributes"))?;
    let instance_type = str_at(attrs, &["instanceType"], "product.attributes.instanceType")?;
    if instance_type.is_empty() {
        return Err(PriceListError::Missing("product.attributes.instanceType"));
    }
    for (attribute, wanted) in WANTED {
        if let Some(value) = attrs.get(attribute).and_then(Value::as_str) {
            if value != wanted {
                return Err(PriceListError::OtherProduct {
                    attribute,
                    value: value.to_string(),
                    wanted,
                });
            }
        }
    }
    let region = attrs
        .get("regionCode")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(ProductPrice {
        instance_type: instance_type.to_string(),
        region: region.to_string(),
        usd_per_hour: hourly_usd(&v)?,
    })
}

/// The lowest hourly USD price among the product's on-demand price
/// dimensions (there is one in practice; the lowest keeps the choice
/// deterministic when there are more).
fn hourly_usd(v: &Value) -> Result<f64, PriceListError> {
    let terms = v
        .get("terms")
        .and_then(|t| t.get("OnDemand"))
        .and_then(Value::as_object)
        .ok_or(PriceListError::NoHourlyPrice)?;
    let mut best: Option<f64> = None;
    for term in terms.values() {
        let Some(dims) = term.get("priceDimensions").and_then(Value::as_object) else {
            continue;
        };
        for dim in dims.values() {
            let unit = dim.get("unit").and_then(Value::as_str).unwrap_or("");
            if !unit.eq_ignore_ascii_case("hrs") {
                continue;
            }
            let Some(usd) = dim
                .get("pricePerUnit")
                .and_then(|p| p.get("USD"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            let price = usd
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p > 0.0)
                .ok_or_else(|| PriceListError::BadPrice(usd.chars().take(40).collect()))?;
            best = Some(best.map_or(price, |b| b.min(price)));
        }
    }
    best.ok_or(PriceListError::NoHourlyPrice)
}

/// Where one on-demand price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PriceOrigin {
    /// The AWS Price List API (`GetProducts`), fetched at
    /// [`OnDemandPrices::price_list_fetched_at`].
    PriceList,
    /// The embedded table ([`OnDemandPrices::embedded_source`]).
    Embedded,
}

/// The on-demand prices a catalog is built with, and their origin.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OnDemandPrices {
    pub region: String,
    /// Instance type → (USD/hour, origin).
    pub prices: BTreeMap<String, (f64, PriceOrigin)>,
    /// When the Price List table used was fetched (Unix seconds), if one was.
    pub price_list_fetched_at: Option<i64>,
    /// The embedded table's description (source, commit, date; "ASSUMED"
    /// when borrowed from us-east-1), if it priced anything.
    pub embedded_source: Option<String>,
}

impl OnDemandPrices {
    /// Live prices where the Price List has them, the embedded table's for
    /// the other types. Non-positive or non-finite prices are ignored.
    pub fn merge(
        region: &str,
        live: Option<(&BTreeMap<String, f64>, i64)>,
        embedded: Option<(&BTreeMap<String, f64>, &str)>,
    ) -> OnDemandPrices {
        let valid = |p: &f64| p.is_finite() && *p > 0.0;
        let mut prices = BTreeMap::new();
        if let Some((table, _)) = live {
            for (t, p) in table.iter().filter(|(_, p)| valid(p)) {
                prices.insert(t.clone(), (*p, PriceOrigin::PriceList));
            }
        }
        let mut borrowed = false;
        if let Some((table, _)) = embedded {
            for (t, p) in table.iter().filter(|(_, p)| valid(p)) {
                if !prices.contains_key(t) {
                    prices.insert(t.clone(), (*p, PriceOrigin::Embedded));
                    borrowed = true;
                }
            }
        }
        OnDemandPrices {
            region: region.to_string(),
            prices,
            price_list_fetched_at: live.map(|(_, at)| at),
            embedded_source: embedded.filter(|_| borrowed).map(|(_, s)| s.to_string()),
        }
    }

    /// Instance type → USD/hour (what [`Catalog::from_live`](super::Catalog::from_live) takes).
    pub fn usd(&self) -> BTreeMap<String, f64> {
        self.prices
            .iter()
            .map(|(t, (p, _))| (t.clone(), *p))
            .collect()
    }

    pub fn origin(&self, instance_type: &str) -> Option<PriceOrigin> {
        self.prices.get(instance_type).map(|(_, o)| *o)
    }

    /// One line for a catalog's `source`: how many prices came from where.
    pub fn summary(&self) -> String {
        let live = self
            .prices
            .values()
            .filter(|(_, o)| *o == PriceOrigin::PriceList)
            .count();
        let embedded = self.prices.len() - live;
        let mut parts = Vec::new();
        if let Some(at) = self.price_list_fetched_at {
            parts.push(format!(
                "{live} from the AWS Price List API (fetched {})",
                rfc3339(at)
            ));
        }
        if let Some(src) = &self.embedded_source {
            parts.push(format!("{embedded} from the embedded table ({src})"));
        }
        if parts.is_empty() {
            return "no on-demand prices".into();
        }
        parts.join(", ")
    }
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn product(attrs: Value, dims: Value) -> String {
        json!({
            "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": "ABC"},
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"ABC.JRTCKXETXF": {
                "priceDimensions": dims, "sku": "ABC", "offerTermCode": "JRTCKXETXF"}}},
            "publicationDate": "2026-08-01T00:00:00Z"
        })
        .to_string()
    }

    fn linux(t: &str) -> Value {
        json!({"instanceType": t, "regionCode": "eu-west-1", "operatingSystem": "Linux",
               "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
               "licenseModel": "No License required", "location": "EU (Ireland)"})
    }

    fn hrs(usd: &str) -> Value {
        json!({"ABC.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd},
               "beginRange": "0", "endRange": "Inf", "description": "per hour"}})
    }

    #[test]
    fn products_parse_table() {
        let with = |k: &str, v: &str| {
            let mut a = linux("m5.large");
            a[k] = v.into();
            a
        };
        let ok = |p: f64| {
            Ok(ProductPrice {
                instance_type: "m5.large".into(),
                region: "eu-west-1".into(),
                usd_per_hour: p,
            })
        };
        let two_dims = json!({
            "a": {"unit": "Hrs", "pricePerUnit": {"USD": "0.2"}},
            "b": {"unit": "Hrs", "pricePerUnit": {"USD": "0.107"}},
            "c": {"unit": "Quantity", "pricePerUnit": {"USD": "0.001"}},
        });
        let cases: Vec<(&str, String, Result<ProductPrice, PriceListError>)> = vec![
            (
                "plain",
                product(linux("m5.large"), hrs("0.1070000000")),
                ok(0.107),
            ),
            (
                "lowest hourly dimension",
                product(linux("m5.large"), two_dims),
                ok(0.107),
            ),
            (
                "windows",
                product(with("operatingSystem", "Windows"), hrs("0.2")),
                Err(PriceListError::OtherProduct {
                    attribute: "operatingSystem",
                    value: "Windows".into(),
                    wanted: "Linux",
                }),
            ),
            (
                "dedicated",
                product(with("tenancy", "Dedicated"), hrs("0.2")),
                Err(PriceListError::OtherProduct {
                    attribute: "tenancy",
                    value: "Dedicated".into(),
                    wanted: "Shared",
                }),
            ),
            (
                "unused reservation",
                product(
                    with("capacitystatus", "UnusedCapacityReservation"),
                    hrs("0.1"),
                ),
                Err(PriceListError::OtherProduct {
                    attribute: "capacitystatus",
                    value: "UnusedCapacityReservation".into(),
                    wanted: "Used",
                }),
            ),
            (
                "zero",
                product(linux("m5.large"), hrs("0.0000000000")),
                Err(PriceListError::BadPrice("0.0000000000".into())),
            ),
            (
                "garbage price",
                product(linux("m5.large"), hrs("cheap")),
                Err(PriceListError::BadPrice("cheap".into())),
            ),
            (
                "nan",
                product(linux("m5.large"), hrs("NaN")),
                Err(PriceListError::BadPrice("NaN".into())),
            ),
            (
                "no dimensions",
                product(linux("m5.large"), json!({})),
                Err(PriceListError::NoHourlyPrice),
            ),
            (
                "no instance type",
                product(json!({"operatingSystem": "Linux"}), hrs("0.1")),
                Err(PriceListError::Missing("product.attributes.instanceType")),
            ),
            (
                "instance type not a string",
                product(json!({"instanceType": 5}), hrs("0.1")),
                Err(PriceListError::Missing("product.attributes.instanceType")),
            ),
            (
                "no product",
                json!({"terms": {}}).to_string(),
                Err(PriceListError::Missing("product.attributes")),
            ),
            (
                "no terms",
                json!({"product": {"attributes": linux("m5.large")}}).to_string(),
                Err(PriceListError::NoHourlyPrice),
            ),
        ];
        for (name, doc, want) in cases {
            assert_eq!(parse_product(&doc), want, "{name}");
        }
        assert!(matches!(
            parse_product("{"),
            Err(PriceListError::NotJson(_))
        ));
        assert!(matches!(parse_product(""), Err(PriceListError::NotJson(_))));
        // No regionCode (older documents): the region is left empty.
        let mut a = linux("t3.micro");
        a.as_object_mut().unwrap().remove("regionCode");
        assert_eq!(
            parse_product(&product(a, hrs("0.0104"))).unwrap().region,
            ""
        );
    }

    #[test]
    fn merge_prefers_live_and_records_origin() {
        let live = BTreeMap::from([
            ("m5.large".to_string(), 0.107),
            ("bad.large".to_string(), f64::NAN),
        ]);
        let embedded = BTreeMap::from([
            ("m5.large".to_string(), 0.096),
            ("c5.large".to_string(), 0.085),
            ("bad.large".to_string(), 0.5),
        ]);
        let p = OnDemandPrices::merge(
            "eu-west-1",
            Some((&live, 1_785_000_000)),
            Some((&embedded, "karpenter 2026-07-20, ASSUMED")),
        );
        assert_eq!(p.usd()["m5.large"], 0.107);
        assert_eq!(p.origin("m5.large"), Some(PriceOrigin::PriceList));
        assert_eq!(p.origin("c5.large"), Some(PriceOrigin::Embedded));
        assert_eq!(p.usd()["bad.large"], 0.5, "a NaN live price falls back");
        assert_eq!(p.origin("x.large"), None);
        let s = p.summary();
        assert!(
            s.contains("1 from the AWS Price List API (fetched 2026-"),
            "{s}"
        );
        assert!(
            s.contains("2 from the embedded table (karpenter 2026-07-20, ASSUMED)"),
            "{s}"
        );

        let only_embedded = OnDemandPrices::merge("eu-west-1", None, Some((&embedded, "e")));
        assert!(only_embedded
            .prices
            .values()
            .all(|(_, o)| *o == PriceOrigin::Embedded));
        assert_eq!(only_embedded.price_list_fetched_at, None);
        // The embedded table is not named when it priced nothing.
        let only_live = OnDemandPrices::merge("x", Some((&live, 1)), Some((&BTreeMap::new(), "e")));
        assert_eq!(only_live.embedded_source, None);
        assert_eq!(
            OnDemandPrices::merge("x", None, None).summary(),
            "no on-demand prices"
        );
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_407_300), "2026-11-23T04:15:00Z");
        assert_eq!(rfc3339(1_709_164_800), "2024-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(s in ".{0,400}") {
            let _ = parse_product(&s);
        }

        #[test]
        fn arbitrary_json_shapes_never_panic(
            t in ".{0,20}", usd in ".{0,20}", unit in "(Hrs|hrs|Quantity|.{0,5})",
            os in "(Linux|Windows|.{0,5})",
        ) {
            let doc = product(
                json!({"instanceType": t, "operatingSystem": os}),
                json!({"d": {"unit": unit, "pricePerUnit": {"USD": usd}}}),
            );
            if let Ok(p) = parse_product(&doc) {
                prop_assert!(p.usd_per_hour.is_finite() && p.usd_per_hour > 0.0);
            }
        }
    }
}
