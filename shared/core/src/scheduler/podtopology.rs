//! The topology in force for one pod at its relaxation: the groups it
//! counts in, the domains it may reach, and the taints that keep it off nodes.

use std::collections::{BTreeMap, BTreeSet};

use crate::labels;
use crate::model::{untolerated, Pod, Taint};
use crate::requirements::{Requirement, Requirements};

use super::index::{PodIdx, PoolIdx};
use super::pools::Pool;
use crate::model::{untolerated_strict, Node};

use super::nodeclaim::ZoneMask;
use super::topology::{DomainSource, ExistingCounts, Kind, PodGroups, Topology};
use super::{pod_view, Relaxation, Run};

/// The topology groups in force for a pod and the requirements that decide
/// which of their domains it may use.
pub(super) struct ActiveTopology {
    pub(super) groups: Vec<(usize, Kind)>,
    pub(super) domains: Requirements,
    /// The pod's relaxation tolerates `PreferNoSchedule` taints.
    pub(super) tolerate_prefer_no_schedule: bool,
    /// Per NodePool: its taints keep the pod off its nodes.
    pub(super) pool_blocked: Vec<bool>,
    /// A required affinity term rules out every node
    /// ([`Topology::affinity_unmet`]).
    pub(super) affinity_unmet: bool,
    /// The zones the pod's affinity terms admit, whatever the node
    /// ([`Topology::affinity_admits`]).
    pub(super) affinity_zones: Option<BTreeSet<String>>,
    /// [`Self::affinity_zones`] among the first 64 of the catalog's zone
    /// list, as bits (see `nodeclaim::ZoneMask`).
    pub(super) affinity_zone_bits: u64,
    /// Per NodeClaim zone mask met in this trial, whether topology admits
    /// it on the zone key (see `Run::zone_topology_admits`).
    pub(super) zone_verdicts: std::cell::RefCell<Vec<(ZoneMask, bool)>>,
    /// Topology may pin a domain for the pod ([`Topology::may_pin`]): a
    /// trial builds the NodeClaim's merged requirements to pin it.
    pub(super) pins: bool,
}

impl ActiveTopology {
    /// A cheap necessary condition for topology: a node whose zones are
    /// known (`zones`: those a NodeClaim's requirement names, or an existing
    /// node's label) has one the pod's affinity terms admit.
    pub(super) fn affinity_zone_ok<'z>(&self, mut zones: impl Iterator<Item = &'z String>) -> bool {
        match &self.affinity_zones {
            Some(ok) => zones.any(|z| ok.contains(z)),
            None => true,
        }
    }
}

impl ActiveTopology {
    /// The first taint of `taints` that keeps the pod off a node.
    pub(super) fn blocking_taint<'t>(&self, taints: &'t [Taint], pod: &Pod) -> Option<&'t Taint> {
        if self.tolerate_prefer_no_schedule {
            untolerated(taints, &pod.tolerations)
        } else {
            untolerated_strict(taints, &pod.tolerations)
        }
    }
}

/// The domains a NodePool's new nodes may land in, per key: zones and
/// capacity types of its offerings, the labels every node carries, and the
/// values its requirements and labels name; with the taints its nodes carry.
pub(super) fn pool_domains(pool: &Pool, region: &str) -> DomainSource {
    let mut domains: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Most calls name a key and value already there: look them up before
    // allocating either.
    let mut add = |k: &str, v: &str| match domains.get_mut(k) {
        Some(values) if values.contains(v) => {}
        Some(values) => {
            values.insert(v.to_string());
        }
        None => {
            domains.insert(k.to_string(), BTreeSet::from([v.to_string()]));
        }
    };
    // Zones and capacity types repeat over every type's offerings: they
    // are gathered as bits first (by name past the 64th zone).
    let (mut zone_bits, mut capacity_types) = (0u64, BTreeSet::new());
    for o in pool.types.iter().flat_map(|t| &t.offerings) {
        if o.zone_bit == 0 {
            add(labels::ZONE, &o.zone);
        }
        zone_bits |= o.zone_bit;
        capacity_types.insert(o.capacity_type);
    }
    for (i, zone) in pool.zones.iter().enumerate().take(64) {
        if zone_bits & (1u64 << i) != 0 {
            add(labels::ZONE, zone);
        }
    }
    for c in capacity_types {
        add(labels::CAPACITY_TYPE, c.as_str());
    }
    for t in pool.types.iter() {
        for key in [labels::ARCH, labels::OS, labels::INSTANCE_TYPE] {
            if let Some(r) = t.requirements.get(key).filter(|r| !r.is_complement()) {
                for v in r.values() {
                    add(key, v);
                }
            }
        }
    }
    add(labels::NODEPOOL, &pool.np.name);
    add(labels::REGION, region);
    for r in pool.requirements.iter() {
        if !r.is_complement() && r.key != labels::ZONE && r.key != labels::CAPACITY_TYPE {
            for v in r.values() {
                add(&r.key, v);
            }
        }
    }
    for (k, v) in &pool.np.labels {
        add(k, v);
    }
    DomainSource {
        domains,
        taints: pool.taints.clone(),
    }
}

/// The topology of the run: every NodePool's domains (the universe of
/// each key), the pods' groups, and what `nodes` already count.
pub(super) fn build_topology(
    pods: &[Pod],
    domains: &PoolDomains,
    nodes: &[Node],
    kept: Option<&ExistingCounts>,
) -> (Topology, Vec<PodGroups>) {
    Topology::build(
        pods,
        nodes,
        domains.universe.clone(),
        domains.sources.clone(),
        kept,
    )
}

/// Every NodePool's domains (see [`pool_domains`]), and per key the values
/// any of them offers: what the topology starts from before it looks at
/// the nodes.
#[derive(Debug, Clone, Default)]
pub(super) struct PoolDomains {
    sources: std::sync::Arc<Vec<DomainSource>>,
    universe: BTreeMap<String, BTreeSet<String>>,
}

impl PoolDomains {
    pub(super) fn new(pools: &[Pool], region: &str) -> PoolDomains {
        let sources: Vec<DomainSource> = pools
            .iter()
            .map(|pool| pool_domains(pool, region))
            .collect();
        let mut universe: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for src in &sources {
            for (k, v) in &src.domains {
                universe
                    .entry(k.clone())
                    .or_default()
                    .extend(v.iter().cloned());
            }
        }
        PoolDomains {
            sources: std::sync::Arc::new(sources),
            universe,
        }
    }
}

impl Run<'_> {
    /// The topology in force for pod `p` at relaxation `r`.
    pub(super) fn active_topology(&self, p: PodIdx, r: &Relaxation) -> ActiveTopology {
        let pod = &self.pods[p];
        let mut groups = ActiveTopology {
            groups: self.active_groups(p, r),
            domains: self
                .reachable_domains(p, pod_view::domain_requirements(pod, &self.volume[p], r)),
            tolerate_prefer_no_schedule: r.tolerate_prefer_no_schedule,
            pool_blocked: Vec::new(),
            affinity_unmet: false,
            affinity_zones: None,
            affinity_zone_bits: 0,
            zone_verdicts: Default::default(),
            pins: false,
        };
        groups.pins = self.topology.may_pin(pod, &groups.groups);
        groups.pool_blocked = (self.pools.iter())
            .map(|pool| groups.blocking_taint(&pool.taints, pod).is_some())
            .collect();
        groups.affinity_unmet = self.topology.is_active()
            && self
                .topology
                .affinity_unmet(pod, &groups.groups, &groups.domains);
        groups.affinity_zones =
            self.topology
                .affinity_admits(pod, &groups.groups, &groups.domains, labels::ZONE);
        groups.affinity_zone_bits = self.zone_bits(&groups.affinity_zones);
        groups
    }

    /// Topology groups in force for pod `p` at relaxation `r`.
    pub(super) fn active_groups(&self, p: PodIdx, r: &Relaxation) -> Vec<(usize, Kind)> {
        let pod = &self.pods[p];
        let g = &self.groups[p];
        let mut out = Vec::new();
        for (i, c) in pod.topology_spread.iter().enumerate() {
            if !(r.dropped_schedule_anyway
                && c.when_unsatisfiable == crate::model::WhenUnsatisfiable::ScheduleAnyway)
            {
                out.push((g.spread[i], Kind::Spread));
            }
        }
        out.extend(g.affinity.iter().map(|&i| (i, Kind::Affinity)));
        out.extend(g.anti_affinity.iter().map(|&i| (i, Kind::AntiAffinity)));
        // The preferred terms still in force: the heaviest first, those the
        // relaxation dropped left out.
        let mut preferred = |weights: Vec<i32>, dropped: usize, groups: &[usize], kind: Kind| {
            let mut idx: Vec<usize> = (0..weights.len()).collect();
            idx.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
            out.extend(idx.into_iter().skip(dropped).map(|i| (groups[i], kind)));
        };
        preferred(
            pod.preferred_pod_affinity
                .iter()
                .map(|t| t.weight)
                .collect(),
            r.dropped_preferred_affinity,
            &g.preferred_affinity,
            Kind::Affinity,
        );
        preferred(
            pod.preferred_pod_anti_affinity
                .iter()
                .map(|t| t.weight)
                .collect(),
            r.dropped_preferred_anti_affinity,
            &g.preferred_anti_affinity,
            Kind::AntiAffinity,
        );
        out
    }

    /// `strict` (the pod's own node requirements) narrowed, on each key the
    /// pod spreads over (but hostname), to the domains it can reach: those
    /// of the NodePools whose taints it tolerates and whose requirements it
    /// is compatible with, and those of the existing nodes. A domain only a
    /// NodePool the pod cannot use offers (a tainted GPU pool's fourth
    /// zone) would otherwise hold the spread's minimum at zero and make
    /// every zone the pod can use look full; no node the pod could count
    /// ever appears there unless planned, and then it is counted.
    pub(super) fn reachable_domains(&self, p: PodIdx, mut strict: Requirements) -> Requirements {
        let pod = &self.pods[p];
        for c in &pod.topology_spread {
            let key = c.topology_key.as_str();
            if key == labels::HOSTNAME {
                continue;
            }
            let mut reach: BTreeSet<&str> = BTreeSet::new();
            for (pi, pool) in PoolIdx::enumerate(&self.pools) {
                if untolerated(&pool.taints, &pod.tolerations).is_none()
                    && pool.requirements.compatible_ok(&strict)
                {
                    if let Some(d) = self.topology.pool_domains(pi, key) {
                        reach.extend(d.iter().map(String::as_str));
                    }
                }
            }
            if let Some(values) = self.existing_domains.get(key) {
                reach.extend(values.iter().map(String::as_str));
            }
            if !reach.is_empty() {
                strict.add(Requirement::in_values(key, reach));
            }
        }
        strict
    }
}
