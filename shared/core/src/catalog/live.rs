//! A catalog from live EC2 data, and the offering snapshot the service
//! caches it as.
//!
//! [`Catalog::from_live`] combines DescribeInstanceTypes (facts),
//! DescribeInstanceTypeOfferings (which zones offer a type),
//! DescribeSpotPriceHistory (the latest spot price per type and zone) and
//! an on-demand price table (EC2 has no on-demand price call: the service
//! passes the AWS Price List API's prices, with the embedded table
//! [`super::embedded::on_demand_prices`] for what it lacks; see
//! [`super::pricelist`]).
//! A type without an on-demand price is skipped, and listed with the reason;
//! a (type, zone) without a live spot price gets the modelled one
//! ([`pricing::spot_price`]).
//!
//! [`OfferingSnapshot`] is the raw answer of those three calls with the time
//! it was fetched; the service stores it as gzip'd JSON split into chunks
//! that each fit a DynamoDB item ([`OfferingSnapshot::to_chunks`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::{
    pricing, CapacityType, Catalog, CatalogEntry, CatalogError, InstanceTypeInfo, Offering,
    UNLIMITED,
};
use crate::ec2::SpotPrice;

/// A chunk size that leaves room in a 400 KB DynamoDB item for the key and
/// bookkeeping attributes.
pub const DYNAMODB_CHUNK_BYTES: usize = 350 * 1024;

/// An instance type left out of a live catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedType {
    pub instance_type: String,
    pub reason: String,
}

/// A catalog built from live data, and the types it had to leave out.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveCatalog {
    pub catalog: Catalog,
    /// Sorted by instance type.
    pub skipped: Vec<SkippedType>,
    /// (type, zone) spot offerings priced from the live list / the model.
    pub live_spot_prices: usize,
    pub modelled_spot_prices: usize,
}

impl Catalog {
    /// A catalog of `region` from live EC2 answers: `types`
    /// (DescribeInstanceTypes), `offerings` ((type, zone) pairs of
    /// DescribeInstanceTypeOfferings), `spot` (spot price history; the
    /// latest entry per (type, zone) counts) and `on_demand`, the region's
    /// on-demand table (type → USD/hour: the Price List API's and/or the
    /// embedded one, [`OnDemandPrices::usd`](super::pricelist::OnDemandPrices::usd)).
    ///
    /// Per offered zone a type gets a spot offering (if it supports spot;
    /// live price, else modelled from the on-demand price) and an on-demand
    /// one (if it supports on-demand). Types without an on-demand price,
    /// not offered in any zone, or supporting neither market are skipped
    /// and listed. Zones are those of the offerings, sorted; entries sorted
    /// by name (first of duplicate names wins).
    pub fn from_live(
        region: &str,
        types: Vec<InstanceTypeInfo>,
        offerings: &[(String, String)],
        spot: &[SpotPrice],
        on_demand: &BTreeMap<String, f64>,
    ) -> LiveCatalog {
        let mut zones_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (t, z) in offerings {
            zones_of.entry(t.as_str()).or_default().insert(z.as_str());
        }
        // Latest spot price per (type, zone); later timestamps win, equal
        // ones keep the lower price.
        let mut spot_of: BTreeMap<(&str, &str), (i64, f64)> = BTreeMap::new();
        for s in spot {
            if !(s.price.is_finite() && s.price > 0.0) {
                continue;
            }
            let e = spot_of
                .entry((s.instance_type.as_str(), s.zone.as_str()))
                .or_insert((s.timestamp, s.price));
            if (s.timestamp, -s.price) > (e.0, -e.1) {
                *e = (s.timestamp, s.price);
            }
        }

        let mut seen = BTreeSet::new();
        let mut skipped = Vec::new();
        let mut entries = Vec::new();
        let (mut live, mut modelled) = (0usize, 0usize);
        for info in types {
            if !seen.insert(info.name.clone()) {
                continue;
            }
            let skip = |reason: String| SkippedType {
                instance_type: info.name.clone(),
                reason,
            };
            let Some(&od) = on_demand
                .get(&info.name)
                .filter(|p| p.is_finite() && **p > 0.0)
            else {
                skipped.push(skip(format!("no on-demand price for {region}")));
                continue;
            };
            let Some(zones) = zones_of.get(info.name.as_str()) else {
                skipped.push(skip(format!("not offered in any zone of {region}")));
                continue;
            };
            if !info.supports_spot && !info.supports_on_demand {
                skipped.push(skip("supports neither spot nor on-demand".into()));
                continue;
            }
            let mut offs = Vec::with_capacity(zones.len() * 2);
            for z in zones {
                if info.supports_spot {
                    let price = match spot_of.get(&(info.name.as_str(), *z)) {
                        Some((_, p)) => {
                            live += 1;
                            *p
                        }
                        None => {
                            modelled += 1;
                            pricing::spot_price(&info.name, info.category(), z, od)
                        }
                    };
                    offs.push(Offering {
                        zone: z.to_string(),
                        capacity_type: CapacityType::Spot,
                        price,
                        available: UNLIMITED,
                        reservation: None,
                    });
                }
                if info.supports_on_demand {
                    offs.push(Offering {
                        zone: z.to_string(),
                        capacity_type: CapacityType::OnDemand,
                        price: od,
                        available: UNLIMITED,
                        reservation: None,
                    });
                }
            }
            entries.push(CatalogEntry {
                info,
                offerings: offs,
            });
        }
        entries.sort_by(|a, b| a.info.name.cmp(&b.info.name));
        skipped.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
        let zones: Vec<String> = zones_of
            .values()
            .flatten()
            .map(|z| z.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        LiveCatalog {
            catalog: Catalog {
                region: region.to_string(),
                zones,
                entries,
                source: format!(
                    "live EC2 (DescribeInstanceTypes, DescribeInstanceTypeOfferings; spot: {live} live / {modelled} modelled prices)"
                ),
            },
            skipped,
            live_spot_prices: live,
            modelled_spot_prices: modelled,
        }
    }
}

/// The raw live answers a catalog is built from, as cached by the service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferingSnapshot {
    pub region: String,
    /// Unix seconds.
    pub fetched_at: i64,
    pub types: Vec<InstanceTypeInfo>,
    /// (instance type, zone).
    pub offerings: Vec<(String, String)>,
    pub spot_prices: Vec<SpotPrice>,
}

fn corrupt(e: impl std::fmt::Display) -> CatalogError {
    CatalogError::Corrupt(format!("offering snapshot: {e}"))
}

impl OfferingSnapshot {
    /// Gzip'd JSON split into chunks of at most `max_bytes` bytes (at least
    /// one chunk; `max_bytes` 0 counts as 1). Concatenated in order they are
    /// the gzip stream [`from_chunks`](Self::from_chunks) reads.
    pub fn to_chunks(&self, max_bytes: usize) -> Vec<Vec<u8>> {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        // Writing to a Vec cannot fail.
        let _ = gz.write_all(&json);
        let bytes = gz.finish().unwrap_or_default();
        bytes.chunks(max_bytes.max(1)).map(<[u8]>::to_vec).collect()
    }

    /// Reassembles [`to_chunks`](Self::to_chunks) output (in order). A
    /// missing, reordered or damaged chunk is an error (gzip CRC, JSON).
    pub fn from_chunks<B: AsRef<[u8]>>(chunks: &[B]) -> Result<Self, CatalogError> {
        let bytes: Vec<u8> = chunks
            .iter()
            .flat_map(|c| c.as_ref().iter().copied())
            .collect();
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut json)
            .map_err(corrupt)?;
        serde_json::from_slice(&json).map_err(corrupt)
    }

    /// Whether the snapshot is at most `max_age_seconds` old at `now`.
    pub fn is_fresh(&self, now: i64, max_age_seconds: i64) -> bool {
        now.saturating_sub(self.fetched_at) <= max_age_seconds
    }

    /// The catalog of this snapshot ([`Catalog::from_live`]).
    pub fn catalog(&self, on_demand: &BTreeMap<String, f64>) -> LiveCatalog {
        Catalog::from_live(
            &self.region,
            self.types.clone(),
            &self.offerings,
            &self.spot_prices,
            on_demand,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> InstanceTypeInfo {
        InstanceTypeInfo::synthetic(name, "amd64", 2, 8192, 0)
    }

    fn sp(ty: &str, zone: &str, price: f64, ts: i64) -> SpotPrice {
        SpotPrice {
            instance_type: ty.into(),
            zone: zone.into(),
            price,
            timestamp: ts,
        }
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn price(c: &Catalog, ty: &str, zone: &str, ct: CapacityType) -> Option<f64> {
        c.get(ty)?
            .offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == ct)
            .map(|o| o.price)
    }

    #[test]
    fn offerings_prices_and_skipped_types() {
        let od = BTreeMap::from([
            ("m5.large".to_string(), 0.096),
            ("c5.large".to_string(), 0.085),
            ("r5.large".to_string(), 0.126),
        ]);
        let mut od_only = t("r5.large");
        od_only.supports_spot = false;
        let live = Catalog::from_live(
            "us-west-2",
            vec![
                t("m5.large"),
                t("c5.large"),
                t("x9.large"),
                od_only,
                t("m5.large"),
                t("z1.large"),
            ],
            &pairs(&[
                ("m5.large", "us-west-2a"),
                ("m5.large", "us-west-2b"),
                ("c5.large", "us-west-2c"),
                ("r5.large", "us-west-2a"),
                ("x9.large", "us-west-2a"),
            ]),
            &[
                sp("m5.large", "us-west-2a", 0.05, 100),
                sp("m5.large", "us-west-2a", 0.04, 200),
                sp("m5.large", "us-west-2a", 0.07, 150),
                sp("m5.large", "us-west-2b", f64::NAN, 300),
            ],
            &od,
        );
        let c = &live.catalog;
        assert_eq!(c.zones, ["us-west-2a", "us-west-2b", "us-west-2c"]);
        assert_eq!(
            c.entries
                .iter()
                .map(|e| e.info.name.as_str())
                .collect::<Vec<_>>(),
            ["c5.large", "m5.large", "r5.large"]
        );
        // The latest live spot price wins; no live price → the model.
        assert_eq!(
            price(c, "m5.large", "us-west-2a", CapacityType::Spot),
            Some(0.04)
        );
        assert_eq!(
            price(c, "m5.large", "us-west-2b", CapacityType::Spot),
            Some(pricing::spot_price("m5.large", "m", "us-west-2b", 0.096))
        );
        assert_eq!(
            price(c, "m5.large", "us-west-2b", CapacityType::OnDemand),
            Some(0.096)
        );
        // Offered only where DescribeInstanceTypeOfferings says.
        assert_eq!(
            price(c, "c5.large", "us-west-2a", CapacityType::OnDemand),
            None
        );
        assert_eq!(
            price(c, "c5.large", "us-west-2c", CapacityType::OnDemand),
            Some(0.085)
        );
        assert_eq!(price(c, "r5.large", "us-west-2a", CapacityType::Spot), None);
        assert_eq!((live.live_spot_prices, live.modelled_spot_prices), (1, 2));
        assert_eq!(
            live.skipped,
            [
                SkippedType {
                    instance_type: "x9.large".into(),
                    reason: "no on-demand price for us-west-2".into()
                },
                SkippedType {
                    instance_type: "z1.large".into(),
                    reason: "no on-demand price for us-west-2".into()
                },
            ]
        );
        assert!(c.source.contains("1 live / 2 modelled"), "{}", c.source);

        let od = BTreeMap::from([("m5.large".to_string(), 0.096)]);
        let live = Catalog::from_live("us-west-2", vec![t("m5.large")], &[], &[], &od);
        assert_eq!(
            live.skipped[0].reason,
            "not offered in any zone of us-west-2"
        );
    }

    #[test]
    fn embedded_on_demand_table_prices_live_types() {
        let od = super::super::embedded::on_demand_prices("us-west-2").unwrap();
        assert!(od.get("m5.large").is_some_and(|p| *p > 0.0));
        assert!(super::super::embedded::on_demand_prices("mars-1").is_err());
        let live = Catalog::from_live(
            "us-west-2",
            vec![t("m5.large")],
            &pairs(&[("m5.large", "us-west-2a")]),
            &[],
            od,
        );
        assert_eq!(live.catalog.entries.len(), 1);
        assert!(live.skipped.is_empty());
    }

    fn snapshot(n: usize) -> OfferingSnapshot {
        let types: Vec<InstanceTypeInfo> = (0..n).map(|i| t(&format!("m{i}.large"))).collect();
        let mut offerings = Vec::new();
        let mut spot_prices = Vec::new();
        for (i, ty) in types.iter().enumerate() {
            for z in ["us-west-2a", "us-west-2b", "us-west-2c"] {
                offerings.push((ty.name.clone(), z.to_string()));
                // EC2 prices have at most 6 decimals (serde_json parses such
                // numbers exactly; 17-digit ones may move by one ulp).
                let price = (0.01 + i as f64 * 1e-4) * 1e5;
                spot_prices.push(sp(
                    &ty.name,
                    z,
                    price.round() / 1e5,
                    1_700_000_000 + i as i64,
                ));
            }
        }
        OfferingSnapshot {
            region: "us-west-2".into(),
            fetched_at: 1_700_000_000,
            types,
            offerings,
            spot_prices,
        }
    }

    #[test]
    fn snapshot_round_trips_through_bounded_chunks() {
        let s = snapshot(400);
        for max in [DYNAMODB_CHUNK_BYTES, 4096, 1000, 7] {
            let chunks = s.to_chunks(max);
            assert!(!chunks.is_empty());
            assert!(
                chunks.iter().all(|c| !c.is_empty() && c.len() <= max),
                "{max}"
            );
            assert_eq!(OfferingSnapshot::from_chunks(&chunks).unwrap(), s);
        }
        assert!(s.to_chunks(1000).len() > 1);
        assert_eq!(s.to_chunks(DYNAMODB_CHUNK_BYTES).len(), 1);
        assert!(s.to_chunks(0).iter().all(|c| c.len() == 1));

        // A missing or reordered chunk is detected.
        let mut chunks = s.to_chunks(1000);
        chunks.swap(0, 1);
        assert!(OfferingSnapshot::from_chunks(&chunks).is_err());
        let mut chunks = s.to_chunks(1000);
        chunks.remove(1);
        assert!(OfferingSnapshot::from_chunks(&chunks).is_err());
        assert!(OfferingSnapshot::from_chunks::<Vec<u8>>(&[]).is_err());

        assert!(s.is_fresh(1_700_000_100, 300));
        assert!(!s.is_fresh(1_700_000_400, 300));
        let od: BTreeMap<String, f64> = s.types.iter().map(|t| (t.name.clone(), 0.1)).collect();
        let live = s.catalog(&od);
        assert_eq!(live.catalog.entries.len(), 400);
        assert_eq!(live.modelled_spot_prices, 0);
    }
}
