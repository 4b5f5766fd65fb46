//! Scheduling simulation: where the pods of some nodes would go if those
//! nodes were gone, asked of the scheduler `flotilla plan` uses (same
//! semantics, NodeOverlays and reservations), as Karpenter's disruption
//! asks its provisioner. The working state carries the decisions already
//! taken in this run: removed nodes are no destination, pods moved to a
//! node count there, replacements are nodes the next simulation can use.

use std::collections::BTreeMap;

use crate::catalog::{CapacityType, Catalog};
use crate::labels;
use crate::model::{ClusterState, Node, Pod};
use crate::plan::{NodeClaimPlan, Unschedulable};
use crate::scheduler::{self, SchedulerOptions};

use super::candidate::moves;
use super::decision::Move;
use super::price::Cost;

pub(crate) struct Work<'a> {
    /// The input's nodes (same indices), then the replacements of the
    /// decisions taken; no pending pods between simulations.
    state: ClusterState,
    catalog: &'a Catalog,
    opts: SchedulerOptions,
    /// The NodePools' views, made once for every simulation (only nodes
    /// and pods change between them).
    prepared: scheduler::Prepared,
    /// Per node: no destination (removed, or disrupting already).
    out: Vec<bool>,
    by_name: BTreeMap<String, usize>,
    /// Replacement NodeClaims named so far (names unique in the output).
    seq: BTreeMap<String, usize>,
    /// Simulations run (for reports and benchmarks).
    pub simulations: usize,
}

/// How a simulation asks the scheduler (beyond the run's options).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    /// Pack the fewest NodeClaims, first fit, as Karpenter's simulation
    /// does ([`SchedulerOptions::pack_fewest_nodes`]); otherwise plan's
    /// cost rule, repack and rebalancing.
    pub pack: bool,
    /// Stop once more NodeClaims than this are needed
    /// ([`SchedulerOptions::max_node_claims`]).
    pub max_node_claims: Option<usize>,
    /// New NodeClaims only of types whose node costs less than this
    /// ([`SchedulerOptions::new_node_price_limit`]).
    pub price_limit: Option<f64>,
}

impl Ask {
    /// First fit onto at most `max` new NodeClaims.
    pub fn packed(max: usize) -> Ask {
        Ask {
            pack: true,
            max_node_claims: Some(max),
            price_limit: None,
        }
    }

    /// Plan's cost rule onto at most `max` new NodeClaims.
    pub fn cheapest(max: usize) -> Ask {
        Ask {
            pack: false,
            max_node_claims: Some(max),
            price_limit: None,
        }
    }

    /// [`Ask::packed`] onto nodes cheaper than `limit` $/h each.
    pub fn packed_under(max: usize, limit: f64) -> Ask {
        Ask {
            price_limit: Some(limit),
            ..Ask::packed(max)
        }
    }
}

/// The outcome of one simulation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sim {
    pub moves: Vec<Move>,
    pub replacements: Vec<NodeClaimPlan>,
    pub unschedulable: Vec<Unschedulable>,
    /// The moved pods, as they were bound.
    pods: Vec<Pod>,
}

impl Sim {
    pub fn all_placed(&self) -> bool {
        self.unschedulable.is_empty()
    }

    /// What the replacements cost (reserved capacity free).
    pub fn cost(&self) -> Cost {
        self.replacements
            .iter()
            .map(replacement_cost)
            .fold(Cost::default(), std::ops::Add::add)
    }
}

pub(crate) fn replacement_cost(r: &NodeClaimPlan) -> Cost {
    let instance = if r.price.capacity_type == CapacityType::Reserved {
        Cost {
            reserved: r.price.min,
            ..Cost::default()
        }
    } else {
        Cost {
            dollars: r.price.min,
            ..Cost::default()
        }
    };
    instance.with_volumes(r.volume_price)
}

impl<'a> Work<'a> {
    /// `out[i]`: node `i` of `state` is no destination.
    pub fn new(
        state: &ClusterState,
        catalog: &'a Catalog,
        opts: &SchedulerOptions,
        out: Vec<bool>,
    ) -> Work<'a> {
        let working = ClusterState {
            pending_pods: vec![],
            nodes: state.nodes.clone(),
            node_pools: state.node_pools.clone(),
            node_classes: state.node_classes.clone(),
            daemon_sets: state.daemon_sets.clone(),
            storage_classes: state.storage_classes.clone(),
            pvcs: state.pvcs.clone(),
            pvs: state.pvs.clone(),
            overlays: state.overlays.clone(),
            instance_types: None,
            capacity_reservations: state.capacity_reservations.clone(),
            pdbs: vec![],
            node_claims: vec![],
            instances: Default::default(),
            warnings: vec![],
        };
        let by_name = working
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut prepared = scheduler::Prepared::new(&working, catalog, opts);
        // Simulations leave nodes out; only `apply` changes a node's pods.
        prepared.keep_existing_counts();
        Work {
            state: working,
            catalog,
            // No zone rebalancing in simulations (see
            // SchedulerOptions::rebalance_zones).
            opts: SchedulerOptions {
                rebalance_zones: false,
                ..opts.clone()
            },
            prepared,
            out,
            by_name,
            seq: BTreeMap::new(),
            simulations: 0,
        }
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.state.nodes[i]
    }

    pub fn is_out(&self, i: usize) -> bool {
        self.out.get(i).copied().unwrap_or(true)
    }

    /// Where the movable pods of `remove` (node indices) would go.
    pub fn simulate(&mut self, remove: &[usize]) -> Sim {
        self.simulate_leaving(remove, &|_| false)
    }

    /// [`Self::simulate`], with the pods `stays` picks left out: they wait
    /// on their node until its drain's deadline, and no capacity is made
    /// for them (Karpenter's `IsCurrentlyReschedulable`).
    pub fn simulate_leaving(&mut self, remove: &[usize], stays: &dyn Fn(&Pod) -> bool) -> Sim {
        self.simulations += 1;
        let mut removing = vec![false; self.state.nodes.len()];
        for &i in remove {
            if let Some(r) = removing.get_mut(i) {
                *r = true;
            }
        }
        let nodes = std::mem::take(&mut self.state.nodes);
        let mut kept = Vec::with_capacity(nodes.len());
        let mut held = Vec::new();
        let mut pending = Vec::new();
        for (i, n) in nodes.into_iter().enumerate() {
            if removing[i] {
                for p in n.pods.iter().filter(|p| moves(p) && !stays(p)) {
                    let mut q = p.clone();
                    q.node_name = None;
                    pending.push(q);
                }
            }
            if removing[i] || self.out[i] {
                held.push((i, n));
            } else {
                kept.push((i, n));
            }
        }
        let (kept_idx, kept_nodes): (Vec<usize>, Vec<Node>) = kept.into_iter().unzip();
        self.state.nodes = kept_nodes;
        self.state.pending_pods = pending;
        let plan =
            scheduler::schedule_prepared(&self.state, self.catalog, &self.opts, &self.prepared);
        let pods = std::mem::take(&mut self.state.pending_pods);
        // Restore the nodes in their order.
        let kept_nodes = std::mem::take(&mut self.state.nodes);
        let mut all: Vec<(usize, Node)> = kept_idx.into_iter().zip(kept_nodes).collect();
        all.extend(held);
        all.sort_by_key(|(i, _)| *i);
        self.state.nodes = all.into_iter().map(|(_, n)| n).collect();

        let mut moves = Vec::new();
        for e in &plan.existing_nodes {
            for p in &e.pods {
                moves.push(Move {
                    pod: p.clone(),
                    to: e.name.clone(),
                });
            }
        }
        // A simulation names its NodeClaims from 1 again, as plan does:
        // keep those names apart from the working state's nodes (earlier
        // decisions' replacements carry such names), so that each move
        // names one destination.
        let mut replacements = plan.node_claims;
        for (k, r) in replacements.iter_mut().enumerate() {
            if self.by_name.contains_key(&r.name) {
                let mut name = format!("{}~{k}", r.name);
                while self.by_name.contains_key(&name) {
                    name.push('~');
                }
                r.name = name;
            }
        }
        for r in &replacements {
            for p in &r.pods {
                moves.push(Move {
                    pod: p.clone(),
                    to: r.name.clone(),
                });
            }
        }
        moves.sort();
        Sim {
            moves,
            replacements,
            unschedulable: plan.unschedulable,
            pods,
        }
    }

    /// [`Self::simulate`], asking the scheduler as `ask` says.
    pub fn simulate_as(&mut self, remove: &[usize], ask: Ask) -> Sim {
        let was = (
            self.opts.pack_fewest_nodes,
            self.opts.max_node_claims,
            self.opts.new_node_price_limit,
        );
        self.opts.pack_fewest_nodes = ask.pack;
        self.opts.max_node_claims = ask.max_node_claims;
        self.opts.new_node_price_limit = ask.price_limit;
        let sim = self.simulate(remove);
        (
            self.opts.pack_fewest_nodes,
            self.opts.max_node_claims,
            self.opts.new_node_price_limit,
        ) = was;
        sim
    }

    /// Name `sim`'s replacements uniquely in this run (`<nodepool>-<n>`, as
    /// plan names NodeClaims; a simulation's own names restart at 1).
    fn rename(&mut self, sim: &mut Sim) {
        let mut renamed: BTreeMap<String, String> = BTreeMap::new();
        for r in &mut sim.replacements {
            let n = self.seq.entry(r.node_pool.clone()).or_insert(0);
            let mut name;
            loop {
                *n += 1;
                name = format!("{}-{}", r.node_pool, n);
                if !self.by_name.contains_key(&name) {
                    break;
                }
            }
            renamed.insert(std::mem::replace(&mut r.name, name.clone()), name);
        }
        // A move to one of the simulation's own replacements names it as
        // the simulation did: no node had that name then (`simulate` keeps
        // them apart), though an earlier decision's replacement may have
        // taken it since.
        for m in &mut sim.moves {
            if let Some(n) = renamed.get(&m.to) {
                m.to = n.clone();
            }
        }
        sim.moves.sort();
    }

    /// Take the decision `sim` made for `remove`: the nodes are gone, the
    /// moved pods are bound where they went, the replacements are nodes
    /// (named for good: the returned simulation carries the names).
    pub fn apply(&mut self, remove: &[usize], mut sim: Sim) -> Sim {
        self.rename(&mut sim);
        self.prepared.forget_existing_counts();
        let kept = sim.clone();
        for &i in remove {
            if let Some(o) = self.out.get_mut(i) {
                *o = true;
            }
        }
        let mut pods: BTreeMap<String, Pod> = sim.pods.into_iter().map(|p| (p.key(), p)).collect();
        let mut to_replacement: BTreeMap<&str, Vec<Pod>> = BTreeMap::new();
        for m in &sim.moves {
            let Some(mut p) = pods.remove(&m.pod) else {
                continue;
            };
            p.node_name = Some(m.to.clone());
            match self.by_name.get(&m.to) {
                Some(&i) => self.state.nodes[i].pods.push(p),
                None => to_replacement.entry(m.to.as_str()).or_default().push(p),
            }
        }
        for r in &sim.replacements {
            let node = replacement_node(
                r,
                to_replacement.remove(r.name.as_str()).unwrap_or_default(),
            );
            self.by_name
                .insert(node.name.clone(), self.state.nodes.len());
            self.state.nodes.push(node);
            self.out.push(false);
        }
        kept
    }

    /// Mark node `i` as no destination (it starts disrupting without a
    /// simulation, e.g. empty).
    pub fn remove(&mut self, i: usize) {
        if let Some(o) = self.out.get_mut(i) {
            *o = true;
        }
    }
}

/// A replacement as a node: its cheapest offering's type and zone, the
/// NodeClaim's labels and taints, its allocatable, and the pods it takes.
fn replacement_node(r: &NodeClaimPlan, pods: Vec<Pod>) -> Node {
    let mut l = r.labels.clone();
    l.insert(labels::HOSTNAME.into(), r.name.clone());
    l.insert(labels::INSTANCE_TYPE.into(), r.price.instance_type.clone());
    l.insert(labels::ZONE.into(), r.price.zone.clone());
    l.insert(
        labels::CAPACITY_TYPE.into(),
        r.price.capacity_type.as_str().into(),
    );
    // Room for what the NodeClaim was sized for: allocatable minus its
    // requests (DaemonSet overhead included), plus the pods it carries,
    // which the scheduler subtracts again.
    let mut allocatable = r.resources.allocatable.minus(&r.resources.requests);
    for p in &pods {
        allocatable.add_assign(&p.requests);
    }
    Node {
        name: r.name.clone(),
        labels: l,
        taints: r.taints.clone(),
        allocatable,
        pods,
        ..Node::default()
    }
}
