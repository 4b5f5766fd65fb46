//! What a node costs, for deciding: dollars per hour, with reserved capacity
//! counted as free (pre-paid: "Karpenter will model them as free") and
//! ordered among reservations by the on-demand price of the reserved type
//! (the reserved-capacity RFC), so a large reserved node still consolidates
//! down to a smaller reserved one.

use std::collections::BTreeMap;

use crate::catalog::{ebs, CapacityType, Catalog};
use crate::labels;
use crate::model::{NodeOverlay, NodePool};
use crate::resources::Resources;
use crate::scheduler::{labels_satisfy, overlay_adjusted_price};

/// Relative saving below which a replacement is not worth a disruption
/// (churn for rounding errors is the top consolidation complaint).
pub const MIN_RELATIVE_SAVING: f64 = 0.01;
/// Absolute saving ($/h) below which nothing is worth a disruption.
pub const MIN_ABSOLUTE_SAVING: f64 = 1e-4;

/// A cost as disruption compares them: dollars first, then the on-demand
/// price of reserved capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// $/h actually paid: spot and on-demand offerings plus every node's
    /// EBS volumes (`ebs::node_hourly`; reserved nodes pay their volumes).
    pub dollars: f64,
    /// Sum of on-demand prices of the reserved capacity used.
    pub reserved: f64,
    /// The part of `dollars` that is EBS volumes.
    pub volumes: f64,
}

impl std::ops::Add for Cost {
    type Output = Cost;

    fn add(self, o: Cost) -> Cost {
        Cost {
            dollars: self.dollars + o.dollars,
            reserved: self.reserved + o.reserved,
            volumes: self.volumes + o.volumes,
        }
    }
}

impl Cost {
    /// Whether `after` saves enough over `self` to disrupt for: fewer
    /// dollars, or (dollars equal) less on-demand value of reserved
    /// capacity, by at least [`MIN_RELATIVE_SAVING`] of what is compared.
    pub fn worth_replacing_by(self, after: Cost) -> bool {
        let enough = |before: f64, after: f64| {
            before - after > (before * MIN_RELATIVE_SAVING).max(MIN_ABSOLUTE_SAVING)
        };
        if enough(self.dollars, after.dollars) {
            return true;
        }
        (self.dollars - after.dollars).abs() <= MIN_ABSOLUTE_SAVING
            && enough(self.reserved, after.reserved)
    }

    /// The figure reported as `price.before` / `price.after`: instances
    /// only, reserved capacity $0 (volumes are reported beside it).
    pub fn reported(self) -> f64 {
        round6(self.dollars - self.volumes)
    }

    /// This cost with `volumes` $/h of EBS volumes added (see
    /// [`ebs::node_hourly`]).
    pub fn with_volumes(self, volumes: f64) -> Cost {
        Cost {
            dollars: ebs::node_hourly(self.dollars, volumes),
            volumes: self.volumes + volumes,
            ..self
        }
    }
}

pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// The cost of a running node's instance from its labels (instance type,
/// zone, capacity type): its offering's price, NodeOverlay-adjusted (its
/// volumes are added by the caller, [`Cost::with_volumes`]). `None` when
/// the catalog does not know the type or the labels are missing.
pub fn node_cost(
    catalog: &Catalog,
    overlays: &[&NodeOverlay],
    node_labels: &BTreeMap<String, String>,
) -> Option<Cost> {
    let ty = node_labels.get(labels::INSTANCE_TYPE)?;
    let entry = catalog.get(ty)?;
    let zone = node_labels.get(labels::ZONE);
    let ct = node_labels
        .get(labels::CAPACITY_TYPE)
        .and_then(|c| CapacityType::parse(c))
        .unwrap_or(CapacityType::OnDemand);
    let lookup = |ct: CapacityType| {
        let of_ct = || {
            entry
                .offerings
                .iter()
                .filter(move |o| o.capacity_type == ct)
        };
        zone.and_then(|z| of_ct().find(|o| &o.zone == z))
            .or_else(|| of_ct().min_by(|a, b| a.price.total_cmp(&b.price)))
            .map(|o| o.price)
    };
    let base = match ct {
        CapacityType::Reserved => lookup(CapacityType::OnDemand).or_else(|| lookup(ct))?,
        _ => lookup(ct)?,
    };
    let mut full = node_labels.clone();
    for (k, v) in entry.info.label_values() {
        full.entry(k.to_string()).or_insert(v);
    }
    let price = overlay_adjusted_price(overlays, &full, base).unwrap_or(base);
    Some(match ct {
        CapacityType::Reserved => Cost {
            reserved: price,
            ..Cost::default()
        },
        _ => Cost {
            dollars: price,
            ..Cost::default()
        },
    })
}

/// Cheapest $/h per CPU core and per GiB of memory over the instance types
/// and offerings a NodePool allows (capacity, not allocatable: a lower
/// bound). Reserved offerings count free, so a pool that may use them has
/// no bound above zero.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitPrices {
    pub per_cpu: f64,
    pub per_gib: f64,
}

impl UnitPrices {
    pub fn of(catalog: &Catalog, pool: &NodePool, reserved_capacity: bool) -> UnitPrices {
        let mut per_cpu = f64::INFINITY;
        let mut per_gib = f64::INFINITY;
        for e in &catalog.entries {
            let mut tl: BTreeMap<String, String> = BTreeMap::new();
            for (k, v) in e.info.label_values() {
                tl.insert(k.to_string(), v);
            }
            // Only the type's own keys: zone and capacity type are checked
            // per offering below.
            let type_ok = pool
                .requirements
                .iter()
                .filter(|r| tl.contains_key(&r.key))
                .all(|r| tl.get(&r.key).is_some_and(|v| r.has(v)));
            if !type_ok {
                continue;
            }
            for o in &e.offerings {
                if !pool.requirements.allows(labels::ZONE, &o.zone)
                    || !pool
                        .requirements
                        .allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
                {
                    continue;
                }
                let price = if o.capacity_type == CapacityType::Reserved {
                    if !reserved_capacity {
                        continue;
                    }
                    0.0
                } else {
                    o.price
                };
                let cpu = f64::from(e.info.vcpu.max(1));
                let gib = (e.info.memory_mib.max(1) as f64) / 1024.0;
                per_cpu = per_cpu.min(price / cpu);
                per_gib = per_gib.min(price / gib);
            }
        }
        UnitPrices {
            per_cpu: if per_cpu.is_finite() { per_cpu } else { 0.0 },
            per_gib: if per_gib.is_finite() { per_gib } else { 0.0 },
        }
    }

    /// A lower bound of what capacity for `requests` costs in this pool.
    pub fn lower_bound(&self, requests: &Resources) -> f64 {
        let cpu = requests.get("cpu").millis() as f64 / 1000.0;
        let gib = requests.get("memory").millis() as f64 / 1000.0 / (1u64 << 30) as f64;
        (cpu * self.per_cpu).max(gib * self.per_gib)
    }
}

/// Whether `labels` (a node's, completed with its type's) satisfy `pool`'s
/// requirements; the first one they do not, for drift reports. The
/// on-demand default of a NodePool that says nothing of capacity types
/// ([`NodePool::default_capacity_type`]) is not held against a node:
/// Karpenter drifts by the NodePool's own requirements only, so removing a
/// `karpenter.sh/capacity-type In [spot]` requirement does not replace the
/// spot nodes.
pub fn unsatisfied_requirement(
    pool: &NodePool,
    labels: &BTreeMap<String, String>,
) -> Option<String> {
    let own;
    let reqs = if pool.default_capacity_type {
        let mut r = pool.requirements.clone();
        r.remove(crate::labels::CAPACITY_TYPE);
        own = r;
        &own
    } else {
        &pool.requirements
    };
    labels_satisfy(labels, reqs).err().map(|r| r.to_string())
}
