//! A plain Karpenter-style first-fit-decreasing planner, as a price
//! baseline for the benches (not product code).
//!
//! Pods are sorted by CPU then memory, descending. Each pod goes to the
//! first open bin (bins tried fewest pods first, as Karpenter sorts its
//! in-flight NodeClaims) whose remaining instance types can hold it, else a
//! new bin with every type the pod's NodePool allows. A bin costs its
//! cheapest remaining type. Only resources, NodePool/pod requirements,
//! taints, NodePool limits (charged Karpenter's way: the largest type a
//! NodeClaim could be) and self hostname anti-affinity are modelled: enough
//! for the mixes' price to be comparable.

use flotilla_core::allocatable;
use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::labels;
use flotilla_core::model::{untolerated, ClusterState, KubeletConfig};
use flotilla_core::{Requirement, Requirements, Resources};

struct Ty {
    price: f64,
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct BaselinePlan {
    pub node_claims: usize,
    pub hourly_price: f64,
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
                    let price = e
                        .offerings
                        .iter()
                        .filter(|o| {
                            np.requirements
                                .allows(labels::CAPACITY_TYPE, o.capacity_type.as_str())
                        })
                        .filter(|o| o.capacity_type != CapacityType::Reserved)
                        .filter(|o| np.requirements.allows(labels::ZONE, &o.zone))
                        .map(|o| o.price)
                        .reduce(f64::min)?;
                    reqs.add(Requirement::in_values(
                        labels::ZONE,
                        e.offerings.iter().map(|o| o.zone.clone()),
                    ));
                    let kubelet: &KubeletConfig = &np.kubelet;
                    let nr = allocatable::compute(&e.info, kubelet, None, 0.075);
                    Some(Ty {
                        price,
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
        let mut placed = false;
        let mut by_count: Vec<usize> = (0..bins.len()).collect();
        by_count.sort_by_key(|&b| bins[b].pods);
        for b in by_count {
            let bin = &bins[b];
            if anti.iter().any(|g| bin.anti_groups.contains(g)) {
                continue;
            }
            let (types, _) = &pool_types[bin.pool];
            let need = bin.requests.plus(&pod.requests);
            let keep: Vec<usize> = bin
                .types
                .iter()
                .copied()
                .filter(|&t| {
                    need.fits_in(&types[t].alloc) && types[t].reqs.intersects(&reqs).is_ok()
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
            let keep: Vec<usize> = (0..types.len())
                .filter(|&t| {
                    need.fits_in(&types[t].alloc)
                        && types[t].reqs.intersects(&reqs).is_ok()
                        && within_limits(t)
                })
                .collect();
            if keep.is_empty() {
                continue;
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
                .map(|&t| types[t].price)
                .fold(f64::INFINITY, f64::min)
        })
        .sum();
    BaselinePlan {
        node_claims: bins.len(),
        hourly_price: (total * 1e6).round() / 1e6,
        unschedulable,
    }
}
