//! `flotilla catalog`: the instance types of one region with their cheapest
//! prices.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use flotilla_core::catalog::{CapacityType, Catalog, CatalogEntry};
use serde::Serialize;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Listing<'a> {
    region: &'a str,
    source: &'a str,
    zones: &'a [String],
    instance_types: Vec<Row<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    name: &'a str,
    vcpu: u32,
    memory_mib: u64,
    architecture: &'a str,
    gpus: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_name: Option<&'a str>,
    /// Cheapest spot offering, USD/hour.
    spot_price: Option<f64>,
    /// Cheapest on-demand offering, USD/hour.
    on_demand_price: Option<f64>,
    /// Zones with at least one offering.
    zones: usize,
}

fn cheapest(e: &CatalogEntry, ct: CapacityType) -> Option<f64> {
    e.offerings
        .iter()
        .filter(|o| o.capacity_type == ct)
        .map(|o| o.price)
        .reduce(f64::min)
}

fn row(e: &CatalogEntry) -> Row<'_> {
    let zones: BTreeSet<&str> = e.offerings.iter().map(|o| o.zone.as_str()).collect();
    Row {
        name: &e.info.name,
        vcpu: e.info.vcpu,
        memory_mib: e.info.memory_mib,
        architecture: &e.info.architecture,
        gpus: e.info.gpu.as_ref().map_or(0, |g| g.count),
        gpu_name: e.info.gpu.as_ref().map(|g| g.name.as_str()),
        spot_price: cheapest(e, CapacityType::Spot),
        on_demand_price: cheapest(e, CapacityType::OnDemand),
        zones: zones.len(),
    }
}

pub fn json(c: &Catalog) -> Result<String> {
    let listing = Listing {
        region: &c.region,
        source: &c.source,
        zones: &c.zones,
        instance_types: c.entries.iter().map(row).collect(),
    };
    let mut s = serde_json::to_string_pretty(&listing).context("serialising the catalog")?;
    s.push('\n');
    Ok(s)
}

pub fn table(c: &Catalog) -> String {
    let price = |p: Option<f64>| p.map_or_else(|| "-".to_string(), |p| format!("{p:.4}"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>5} {:>10} {:<6} {:>4} {:>10} {:>11} {:>5}",
        "INSTANCE TYPE", "VCPU", "MEMORY GiB", "ARCH", "GPUS", "SPOT $/H", "ON-DEMAND", "ZONES"
    );
    for e in &c.entries {
        let r = row(e);
        let _ = writeln!(
            out,
            "{:<22} {:>5} {:>10} {:<6} {:>4} {:>10} {:>11} {:>5}",
            r.name,
            r.vcpu,
            format_gib(r.memory_mib),
            r.architecture,
            r.gpus,
            price(r.spot_price),
            price(r.on_demand_price),
            r.zones
        );
    }
    let _ = writeln!(
        out,
        "\n{} instance types in {} ({} zones: {})\nsource: {}",
        c.entries.len(),
        c.region,
        c.zones.len(),
        c.zones.join(", "),
        c.source
    );
    out
}

/// MiB as GiB with at most 3 decimals, trailing zeros dropped.
fn format_gib(mib: u64) -> String {
    let s = format!("{:.3}", mib as f64 / 1024.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::format_gib;

    #[test]
    fn gib() {
        assert_eq!(format_gib(8192), "8");
        assert_eq!(format_gib(512), "0.5");
        assert_eq!(format_gib(3840), "3.75");
    }
}
