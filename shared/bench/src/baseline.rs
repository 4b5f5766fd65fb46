//! A plain Karpenter-style first-fit-decreasing planner, as a price
//! baseline for the benches (not product code).
//!
//! Pods are sorted by CPU then memory, descending. Each pod goes to the
//! first open bin (bins tried fewest pods first, as Karpenter sorts its
//! in-flight NodeClaims) whose remaining instance types can hold it, else a
//! new bin with every type the pod's NodePool allows. A bin costs its
//! cheapest remaining type. Only resources, NodePool/pod requirements,
//! taints, NodePool limits (charged Karpenter's way: the largest type a
//! NodeClaim could be), self hostname anti-affinity and zone topology
//! spread (DoNotSchedule; Karpenter's way: a pod may only go to zones
//! within maxSkew of the least loaded, a new NodeClaim takes the least
//! loaded, and a NodeClaim is pinned to the zone of its first spreading
//! pod, priced at that zone's offerings) are modelled: enough for the
//! mixes' price to be comparable.

use flotilla_core::allocatable;
use flotilla_core::catalog::{ebs, CapacityType, Catalog};
use flotilla_core::labels;
use std::collections::BTreeMap;

use flotilla_core::model::{
    untolerated, ClusterState, KubeletConfig, NodePool, Pod, WhenUnsatisfiable,
};
use flotilla_core::{Requirement, Requirements, Resources};

struct Ty {
    price: f64,
    /// The cheapest allowed offering per zone.
    zone_price: BTreeMap<String, f64>,
    alloc: Resources,
    capacity: Resources,
    reqs: Requirements,
}

struct Bin {
    pool: usize,
    types: Vec<usize>,
    requests: Resources,
    pods: usize,
    anti_groups: Vec<String>,
    /// The zone a spreading pod pinned it to.
    zone: Option<String>,
}

/// A zone spread constraint: (namespace, selector, maxSkew) → pods per zone.
type SpreadKey = (String, String, u32);

/// Zones pod `pod` may go to under its zone spread constraints (`None`:
/// it has none), least loaded first (then by name).
fn spread_zones(
    pod: &Pod,
    zones: &[String],
    counts: &BTreeMap<SpreadKey, BTreeMap<String, u32>>,
) -> Option<Vec<String>> {
    let mut out: Option<Vec<(u32, String)>> = None;
    for c in &pod.topology_spread {
        if c.topology_key != labels::ZONE
            || c.when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule
        {
            continue;
        }
        let key = spread_key(pod, c);
        let count = |z: &str| {
            counts
                .get(&key)
                .and_then(|m| m.get(z))
                .copied()
                .unwrap_or(0)
        };
        let eligible: Vec<&String> = zones
            .iter()
            .filter(|z| pod.node_selector.allows(labels::ZONE, z))
            .collect();
        let min = eligible.iter().map(|z| count(z)).min().unwrap_or(0);
        let ok: Vec<(u32, String)> = eligible
            .into_iter()
            .filter(|z| count(z) + 1 - min <= c.max_skew)
            .map(|z| (count(z), z.clone()))
            .collect();
        out = Some(match out {
            None => ok,
            Some(prev) => prev
                .into_iter()
                .filter(|(_, z)| ok.iter().any(|(_, o)| o == z))
                .map(|(n, z)| (n.max(count(&z)), z))
                .collect(),
        });
    }
    out.map(|mut v| {
        v.sort();
        v.into_iter().map(|(_, z)| z).collect()
    })
}

fn spread_key(pod: &Pod, c: &flotilla_core::model::TopologySpreadConstraint) -> SpreadKey {
    (
        pod.namespace.clone(),
        format!("{:?}", c.label_selector),
        c.max_skew,
    )
}

/// Counts a pod placed in `zone` in every spread group that selects it.
fn count_in(
    counts: &mut BTreeMap<SpreadKey, BTreeMap<String, u32>>,
    selectors: &[(SpreadKey, flotilla_core::model::LabelSelector)],
    pod: &Pod,
    zone: &str,
) {
    for (key, sel) in selectors {
        if key.0 == pod.namespace && sel.matches(&pod.labels) {
            *counts
                .entry(key.clone())
                .or_default()
                .entry(zone.to_string())
                .or_default() += 1;
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BaselinePlan {
    pub node_claims: usize,
    /// Instances only.
    pub hourly_price: f64,
    /// Instances plus each node's EBS volumes (its NodePool's node class).
    pub total_hourly_price: f64,
    pub unschedulable: usize,
}

/// Plans `state` with first-fit decreasing; prices are the cheapest allowed
/// offering (spot when allowed) of the cheapest type that fits each bin.
pub fn plan(state: &ClusterState, catalog: &Catalog) -> BaselinePlan {
    let mut pools: Vec<_> = state.node_pools.iter().collect();
    pools.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    let pool_types: Vec<(Vec<Ty>, Resources)> = pools
        .iter()
        .map(|np| {
            let mut overhead = Resources::new();
            for ds in &state.daemon_sets {
                if untolerated(&np.taints, &ds.pod.tolerations).is_none() {
                    overhead.add_assign(&ds.pod.requests);
                }
            }
            let types = catalog
                .entries
                .iter()
                .filter_map(|e| {
                    let mut reqs = e.info.requirements();
                    if np.requirements.intersects(&reqs).is_err() {
                        return None;
                    }
                    let mut zone_price: BTreeMap<String, f64> = BTreeMap::new();
                    for o in e
                        .offerings
                        .iter()
                        .filter(|o| {
                            np.requirements
                                .allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
                        })
                        .filter(|o| o.capacity_type != CapacityType::Reserved)
                        .filter(|o| np.requirements.allows(labels::ZONE, &o.zone))
                    {
                        let p = zone_price.entry(o.zone.clone()).or_insert(o.price);
                        *p = p.min(o.price);
                    }
                    let price = zone_price.values().copied().reduce(f64::min)?;
                    reqs.add(Requirement::in_values(
                        labels::ZONE,
                        e.offerings.iter().map(|o| o.zone.clone()),
                    ));
                    let kubelet: &KubeletConfig = &np.kubelet;
                    let nr = allocatable::compute(&e.info, kubelet, None, 0.075);
                    Some(Ty {
                        price,
                        zone_price,
                        alloc: nr.allocatable,
                        capacity: nr.capacity,
                        reqs,
                    })
                })
                .collect();
            (types, overhead)
        })
        .collect();

    let mut order: Vec<usize> = (0..state.pending_pods.len()).collect();
    let pods = &state.pending_pods;
    order.sort_by(|&a, &b| {
        pods[b]
            .requests
            .cpu()
            .cmp(&pods[a].requests.cpu())
            .then_with(|| pods[b].requests.memory().cmp(&pods[a].requests.memory()))
            .then_with(|| pods[a].name.cmp(&pods[b].name))
    });

    // Zone spread: every constraint's selector, and the pods it counts per
    // zone (existing nodes' pods included).
    let zones: Vec<String> = catalog.zones.clone();
    let mut selectors: Vec<(SpreadKey, flotilla_core::model::LabelSelector)> = Vec::new();
    for p in pods {
        for c in &p.topology_spread {
            let key = spread_key(p, c);
            if c.topology_key == labels::ZONE && !selectors.iter().any(|(k, _)| *k == key) {
                selectors.push((key, c.label_selector.clone()));
            }
        }
    }
    let mut counts: BTreeMap<SpreadKey, BTreeMap<String, u32>> = BTreeMap::new();
    for n in &state.nodes {
        if let Some(z) = n.labels.get(labels::ZONE) {
            for p in &n.pods {
                count_in(&mut counts, &selectors, p, z);
            }
        }
    }
    let mut bins: Vec<Bin> = Vec::new();
    let mut charged: Vec<Resources> = vec![Resources::new(); pools.len()];
    let mut unschedulable = 0;
    // Karpenter tries in-flight NodeClaims fewest pods first (O(bins log bins)
    // per pod: run the baseline on the quality sizes, not the speed sizes).
    for &pi in &order {
        let pod = &pods[pi];
        let mut reqs: Requirements = pod.node_selector.clone();
        if let Some(t) = pod.required_terms.first() {
            reqs.add_all(t);
        }
        let anti: Vec<String> = pod
            .pod_anti_affinity
            .iter()
            .filter(|t| t.topology_key == labels::HOSTNAME && t.label_selector.matches(&pod.labels))
            .map(|t| format!("{:?}", t.label_selector))
            .collect();
        let spread = spread_zones(pod, &zones, &counts);
        let mut placed = false;
        let mut by_count: Vec<usize> = (0..bins.len()).collect();
        by_count.sort_by_key(|&b| bins[b].pods);
        for b in by_count {
            let bin = &bins[b];
            if anti.iter().any(|g| bin.anti_groups.contains(g)) {
                continue;
            }
            let (types, _) = &pool_types[bin.pool];
            // A spreading pod needs the bin's zone among its own, or pins
            // an unpinned bin to the least loaded of them its types offer.
            let zone = match (&spread, &bin.zone) {
                (None, z) => z.clone(),
                (Some(ok), Some(z)) => match ok.contains(z) {
                    true => Some(z.clone()),
                    false => continue,
                },
                (Some(ok), None) => {
                    match ok.iter().find(|z| {
                        bin.types
                            .iter()
                            .any(|&t| types[t].zone_price.contains_key(*z))
                    }) {
                        Some(z) => Some(z.clone()),
                        None => continue,
                    }
                }
            };
            let need = bin.requests.plus(&pod.requests);
            let keep: Vec<usize> = bin
                .types
                .iter()
                .copied()
                .filter(|&t| {
                    need.fits_in(&types[t].alloc)
                        && types[t].reqs.intersects(&reqs).is_ok()
                        && zone
                            .as_ref()
                            .is_none_or(|z| types[t].zone_price.contains_key(z))
                })
                .collect();
            if keep.is_empty() {
                continue;
            }
            let bin = &mut bins[b];
            bin.types = keep;
            bin.requests = need;
            bin.pods += 1;
            bin.anti_groups.extend(anti.iter().cloned());
            if let Some(z) = &zone {
                count_in(&mut counts, &selectors, pod, z);
            }
            bin.zone = zone;
            placed = true;
            break;
        }
        if placed {
            continue;
        }
        for (p, np) in pools.iter().enumerate() {
            if untolerated(&np.taints, &pod.tolerations).is_some()
                || np.requirements.compatible(&reqs).is_err()
            {
                continue;
            }
            let (types, overhead) = &pool_types[p];
            let need = overhead.plus(&pod.requests);
            // Karpenter's limits: a new NodeClaim may only use types whose
            // capacity fits what is left, and is charged its largest type.
            let within_limits = |t: usize| {
                np.limits.as_ref().is_none_or(|limits| {
                    limits
                        .iter()
                        .all(|(k, q)| charged[p].get(k) + types[t].capacity.get(k) <= q)
                })
            };
            let fits = |t: usize| {
                need.fits_in(&types[t].alloc)
                    && types[t].reqs.intersects(&reqs).is_ok()
                    && within_limits(t)
            };
            // A spreading pod's NodeClaim goes to the least loaded zone it
            // may use that some fitting type offers.
            let zone = match &spread {
                None => None,
                Some(ok) => match ok.iter().find(|z| {
                    (0..types.len()).any(|t| fits(t) && types[t].zone_price.contains_key(*z))
                }) {
                    Some(z) => Some(z.clone()),
                    None => continue,
                },
            };
            let keep: Vec<usize> = (0..types.len())
                .filter(|&t| {
                    fits(t)
                        && zone
                            .as_ref()
                            .is_none_or(|z| types[t].zone_price.contains_key(z))
                })
                .collect();
            if keep.is_empty() {
                continue;
            }
            if let Some(z) = &zone {
                count_in(&mut counts, &selectors, pod, z);
            }
            let mut max_cap = Resources::new();
            for &t in &keep {
                max_cap.max_assign(&types[t].capacity);
            }
            charged[p].add_assign(&max_cap);
            bins.push(Bin {
                pool: p,
                types: keep,
                requests: need,
                pods: 1,
                anti_groups: anti.clone(),
                zone,
            });
            placed = true;
            break;
        }
        if !placed {
            unschedulable += 1;
        }
    }
    let total: f64 = bins
        .iter()
        .map(|b| {
            let (types, _) = &pool_types[b.pool];
            b.types
                .iter()
                .map(|&t| match &b.zone {
                    Some(z) => types[t].zone_price.get(z).copied().unwrap_or(f64::INFINITY),
                    None => types[t].price,
                })
                .fold(f64::INFINITY, f64::min)
        })
        .sum();
    let volumes: f64 = bins
        .iter()
        .map(|b| volume_price(state, catalog, pools[b.pool]))
        .sum();
    BaselinePlan {
        node_claims: bins.len(),
        hourly_price: (total * 1e6).round() / 1e6,
        total_hourly_price: (ebs::node_hourly(total, volumes) * 1e6).round() / 1e6,
        unschedulable,
    }
}

/// $/h of the EBS volumes of one node of `np` (its node class's).
pub fn volume_price(state: &ClusterState, catalog: &Catalog, np: &NodePool) -> f64 {
    let nc = np
        .node_class
        .as_ref()
        .and_then(|n| state.node_classes.iter().find(|c| &c.name == n));
    ebs::node_class_hourly(&catalog.region, nc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mixes;

    #[test]
    fn zone_spread_pods_are_spread_over_every_zone() {
        // Deployments of five replicas spread over us-west-2's four zones
        // (maxSkew 1): each zone holds some, so at least one NodeClaim per
        // zone, where a spread-blind first fit packs all on one node.
        let catalog = Catalog::embedded("us-west-2").expect("embedded catalog");
        let state = mixes::build("zone-spread", 20, 1).expect("mix");
        let ffd = plan(&state, &catalog);
        assert_eq!(ffd.unschedulable, 0);
        assert!(ffd.node_claims >= 4, "{ffd:?}");
    }
}
