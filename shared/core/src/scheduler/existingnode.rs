//! Existing nodes (and in-flight NodeClaims) as the scheduler sees them,
//! and an index that walks them in Karpenter's order without visiting the
//! ones that cannot take a pod.
//!
//! A pending pod is tried on the existing nodes first, in order, and goes to
//! the first that takes it. At 100,000 nodes a plain walk costs a trial per
//! node per pod. Instead the nodes are grouped into classes (same taints,
//! same values of every label key a pending pod's constraints read, the
//! hostname aside), and each class keeps a max-tree of its nodes' room. A
//! pod then skips whole classes its requirements, tolerations or zone
//! spreads exclude, and inside a class jumps to the next node with room
//! for its requests. The filters are necessary conditions only: every node
//! they let through still gets the full trial, so the first node that takes
//! the pod is the one the plain walk would have found.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use super::index::PodIdx;
use super::volumes::VolumeTerms;
use crate::labels;
use crate::model::{Node, NodePool, Pod, Taint};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{self, Resources};

use super::podtopology::ActiveTopology;
use super::{labels_satisfy, Run, Trial};

/// An existing node and what this run has placed on it.
#[derive(Clone)]
pub(super) struct ExistingNode<'a> {
    pub node: &'a Node,
    /// The taints that keep pods off it (see `effective_taints`).
    pub taints: Vec<Taint>,
    /// The node's labels, with its hostname label added when missing.
    pub labels: Cow<'a, BTreeMap<String, String>>,
    pub remaining: Resources,
    pub host_ports: BTreeSet<(String, i32)>,
    pub placed: Vec<PodIdx>,
}

/// Each node's free room and host ports in use, kept between plans of one
/// cluster whose nodes' pods do not change (see
/// `topology::ExistingCounts`, kept and forgotten with it).
#[derive(Debug, Clone, Default)]
pub struct KeptRoom {
    /// Per node name: its pod count when summed (a node whose count
    /// differs is summed afresh), its room and its host ports.
    nodes: std::cell::RefCell<HashMap<String, NodeRoom>>,
}

#[derive(Debug, Clone)]
struct NodeRoom {
    pods: usize,
    remaining: Resources,
    host_ports: BTreeSet<(String, i32)>,
}

impl KeptRoom {
    /// Drops every node's room (a node's pods changed).
    pub fn forget(&self) {
        self.nodes.borrow_mut().clear();
    }

    /// Node `node`'s room, summed once.
    fn of(&self, node: &Node) -> NodeRoom {
        if let Some(r) = self.nodes.borrow().get(&node.name) {
            if r.pods == node.pods.len() {
                return r.clone();
            }
        }
        let r = NodeRoom::of(node);
        self.nodes.borrow_mut().insert(node.name.clone(), r.clone());
        r
    }
}

impl NodeRoom {
    fn of(node: &Node) -> NodeRoom {
        let mut used = Resources::new();
        let mut host_ports = BTreeSet::new();
        for p in &node.pods {
            used.add_assign(&p.requests);
            host_ports.extend(p.host_ports.iter().cloned());
        }
        NodeRoom {
            pods: node.pods.len(),
            remaining: node.allocatable.minus(&used),
            host_ports,
        }
    }
}

impl<'a> ExistingNode<'a> {
    fn with_room(node: &'a Node, taints: Vec<Taint>, room: NodeRoom) -> Self {
        let mut labels = Cow::Borrowed(&node.labels);
        if !labels.contains_key(labels::HOSTNAME) {
            labels
                .to_mut()
                .insert(labels::HOSTNAME.into(), node.name.clone());
        }
        ExistingNode {
            node,
            taints,
            labels,
            remaining: room.remaining,
            host_ports: room.host_ports,
            placed: vec![],
        }
    }

    /// The labels as `In` requirements (what topology reads).
    pub fn requirements(&self) -> Requirements {
        Requirements::from_iter_reqs(
            self.labels
                .iter()
                .map(|(k, v)| Requirement::in_values(k, [v.as_str()])),
        )
    }
}

/// Index of a class in [`ExistingNodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct NodeClassId(u32);

/// Nodes alike for every filter of [`ExistingNodes::candidates`].
#[derive(Clone)]
pub(super) struct NodeClass {
    /// The members' values of the keys pending pods read (hostname aside).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Indices into the node list, ascending.
    members: Vec<u32>,
    room: RoomTree,
}

/// The existing nodes in trial order, grouped into classes.
#[derive(Clone)]
pub(super) struct ExistingNodes<'a> {
    nodes: Vec<ExistingNode<'a>>,
    class_of: Vec<NodeClassId>,
    /// Position of each node within its class's `members`.
    position: Vec<u32>,
    classes: Vec<NodeClass>,
    /// The label keys classes are told apart by (see [`keys_pods_read`]).
    keys: BTreeSet<String>,
}

/// The label keys a pending pod's constraints may read: node selectors,
/// node affinity (required and preferred), volume topology, and topology
/// keys of spreads and pod (anti-)affinity. Hostname is left out: it is
/// unique per node and checked on the node itself.
pub(super) fn keys_pods_read(pods: &[Pod], volume: &[VolumeTerms]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (p, v) in pods.iter().zip(volume) {
        keys.extend(p.node_selector.keys().cloned());
        keys.extend(v.keys().cloned());
        for t in &p.required_terms {
            keys.extend(t.keys().cloned());
        }
        for t in &p.preferred_terms {
            keys.extend(t.requirements.keys().cloned());
        }
        keys.extend(p.topology_spread.iter().map(|c| c.topology_key.clone()));
        let terms = p.pod_affinity.iter().chain(&p.pod_anti_affinity);
        let weighted = p.preferred_pod_affinity.iter();
        let weighted = weighted.chain(&p.preferred_pod_anti_affinity);
        keys.extend(
            terms
                .chain(weighted.map(|w| &w.term))
                .map(|t| t.topology_key.clone()),
        );
    }
    keys.remove(labels::HOSTNAME);
    keys
}

/// A node class as `ExistingNodes::new` finds it: the labels pods read
/// and the taints, borrowed from the node.
type ClassKey<'n> = (Vec<(&'n str, &'n str)>, &'n [Taint]);

impl<'a> ExistingNodes<'a> {
    /// `nodes` in trial order; `keys`: see [`keys_pods_read`].
    pub fn new(nodes: Vec<ExistingNode<'a>>, keys: &BTreeSet<String>) -> Self {
        // Classes by borrowed labels and taints (ids in order of first
        // appearance): a simulation builds this index over every node, so
        // a node copies nothing unless it starts a class.
        let mut ids: HashMap<ClassKey, NodeClassId> = HashMap::new();
        let mut classes: Vec<NodeClass> = vec![];
        let mut class_of = Vec::with_capacity(nodes.len());
        let mut position = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            // The keys pods read are few, a node's labels many.
            let read = keys
                .iter()
                .filter_map(|k| n.labels.get_key_value(k.as_str()));
            let key: Vec<(&str, &str)> = read.map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let id = *ids
                .entry((key, n.taints.as_slice()))
                .or_insert_with_key(|(key, _)| {
                    let labels = key
                        .iter()
                        .map(|&(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    classes.push(NodeClass {
                        labels,
                        taints: n.taints.clone(),
                        members: vec![],
                        room: RoomTree::default(),
                    });
                    NodeClassId(u32::try_from(classes.len() - 1).unwrap_or(u32::MAX))
                });
            let members = &mut classes[id.0 as usize].members;
            position.push(u32::try_from(members.len()).unwrap_or(u32::MAX));
            members.push(u32::try_from(i).unwrap_or(u32::MAX));
            class_of.push(id);
        }
        for c in &mut classes {
            let rooms: Vec<Room> = c
                .members
                .iter()
                .map(|&i| room(&nodes[i as usize].remaining))
                .collect();
            c.room = RoomTree::new(&rooms);
        }
        ExistingNodes {
            nodes,
            class_of,
            position,
            classes,
            keys: keys.clone(),
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn get(&self, i: usize) -> &ExistingNode<'a> {
        &self.nodes[i]
    }

    pub fn iter(&self) -> impl Iterator<Item = &ExistingNode<'a>> {
        self.nodes.iter()
    }

    /// Places pod `p` (requests, host ports) on node `i`.
    pub fn place(&mut self, i: usize, p: PodIdx, pod: &Pod) {
        let e = &mut self.nodes[i];
        e.remaining = e.remaining.minus(&pod.requests);
        e.host_ports.extend(pod.host_ports.iter().cloned());
        e.placed.push(p);
        let r = room(&e.remaining);
        let class = &mut self.classes[self.class_of[i].0 as usize];
        class.room.set(self.position[i] as usize, r);
    }

    /// Nodes at index `from` or later, ascending, of the classes whose
    /// labels may satisfy `reqs` and that `class_ok` admits, with room for
    /// `requests` in cpu, memory, pods and ephemeral storage: a superset of
    /// the nodes that can take the pod.
    pub fn candidates<'s>(
        &'s self,
        from: usize,
        requests: &Resources,
        reqs: &Requirements,
        mut class_ok: impl FnMut(&NodeClass) -> bool,
    ) -> Candidates<'s, 'a> {
        let need = room(requests);
        let mut heap = BinaryHeap::new();
        for (c, class) in self.classes.iter().enumerate() {
            if !class.room.root_fits(&need) || !self.may_satisfy(class, reqs) || !class_ok(class) {
                continue;
            }
            let start = class.members.partition_point(|&m| (m as usize) < from);
            if let Some(pos) = class.room.first_fit(start, &need) {
                heap.push(Reverse((class.members[pos], c as u32, pos as u32)));
            }
        }
        Candidates {
            index: self,
            need,
            heap,
        }
    }
}

impl ExistingNodes<'_> {
    /// False when no node of `class` can satisfy `reqs`, judged on the keys
    /// classes are told apart by (the others pass).
    fn may_satisfy(&self, class: &NodeClass, reqs: &Requirements) -> bool {
        reqs.iter().all(|r| {
            if !self.keys.contains(&r.key) {
                return true;
            }
            match class.labels.get(&r.key) {
                Some(v) => r.has(v),
                None => matches!(
                    r.operator(),
                    crate::Operator::NotIn | crate::Operator::DoesNotExist
                ),
            }
        })
    }
}

/// See [`ExistingNodes::candidates`].
pub(super) struct Candidates<'s, 'a> {
    index: &'s ExistingNodes<'a>,
    need: Room,
    /// (node index, class, position in class) of each class's next node.
    heap: BinaryHeap<Reverse<(u32, u32, u32)>>,
}

impl Iterator for Candidates<'_, '_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let Reverse((node, c, pos)) = self.heap.pop()?;
        let class = &self.index.classes[c as usize];
        if let Some(next) = class.room.first_fit(pos as usize + 1, &self.need) {
            self.heap
                .push(Reverse((class.members[next], c, next as u32)));
        }
        Some(node as usize)
    }
}

/// Room in the dimensions every pod has: cpu, memory, pods, ephemeral
/// storage (in millis).
const DIMS: usize = 4;
type Room = [i64; DIMS];

fn room(r: &Resources) -> Room {
    [
        r.cpu().millis(),
        r.memory().millis(),
        r.pods().millis(),
        r.get(resources::EPHEMERAL_STORAGE).millis(),
    ]
}

fn fits(need: &Room, have: &Room) -> bool {
    need.iter().zip(have).all(|(n, h)| n <= h)
}

/// A max-tree over a class's nodes: per subtree, the largest room in each
/// dimension (taken separately, so a subtree that fails is skipped whole
/// and one that passes may still hold no fitting node).
#[derive(Clone, Default)]
struct RoomTree {
    /// Leaves start at `leaves`; node `k` has children `2k`, `2k + 1`.
    leaves: usize,
    max: Vec<Room>,
}

const EMPTY: Room = [i64::MIN; DIMS];

impl RoomTree {
    fn new(rooms: &[Room]) -> Self {
        let leaves = rooms.len().next_power_of_two().max(1);
        let mut max = vec![EMPTY; 2 * leaves];
        max[leaves..leaves + rooms.len()].copy_from_slice(rooms);
        for k in (1..leaves).rev() {
            max[k] = merge(&max[2 * k], &max[2 * k + 1]);
        }
        RoomTree { leaves, max }
    }

    fn root_fits(&self, need: &Room) -> bool {
        self.max.get(1).is_some_and(|r| fits(need, r))
    }

    fn set(&mut self, pos: usize, r: Room) {
        let mut k = self.leaves + pos;
        self.max[k] = r;
        while k > 1 {
            k /= 2;
            self.max[k] = merge(&self.max[2 * k], &self.max[2 * k + 1]);
        }
    }

    /// The first position at or after `from` whose room fits `need`.
    fn first_fit(&self, from: usize, need: &Room) -> Option<usize> {
        if from >= self.leaves {
            return None;
        }
        self.find(1, 0, self.leaves, from, need)
    }

    fn find(&self, k: usize, lo: usize, hi: usize, from: usize, need: &Room) -> Option<usize> {
        if hi <= from || !fits(need, &self.max[k]) {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = lo + (hi - lo) / 2;
        self.find(2 * k, lo, mid, from, need)
            .or_else(|| self.find(2 * k + 1, mid, hi, from, need))
    }
}

fn merge(a: &Room, b: &Room) -> Room {
    let mut out = *a;
    for (o, x) in out.iter_mut().zip(b) {
        *o = (*o).max(*x);
    }
    out
}

/// The nodes pods may be placed on (not cordoned), with the taints that
/// keep pods off them, in Karpenter's order.
pub(super) fn existing_nodes<'n>(
    nodes: &'n [Node],
    pools: &[NodePool],
    kept: Option<&KeptRoom>,
) -> Vec<ExistingNode<'n>> {
    let mut existing: Vec<(bool, ExistingNode)> = nodes
        .iter()
        .filter(|n| !n.unschedulable)
        .map(|n| {
            let room = kept.map_or_else(|| NodeRoom::of(n), |k| k.of(n));
            let e = ExistingNode::with_room(n, effective_taints(n, pools), room);
            (n.initialized(), e)
        })
        .collect();
    // Initialized nodes first (Karpenter's order), then by name.
    existing.sort_by(|(ia, a), (ib, b)| ib.cmp(ia).then_with(|| a.node.name.cmp(&b.node.name)));
    existing.into_iter().map(|(_, e)| e).collect()
}

/// For each key a pending pod spreads over (but hostname), the values the
/// existing nodes carry for it.
pub(super) fn existing_domains(
    pods: &[Pod],
    existing: &[ExistingNode],
) -> BTreeMap<String, BTreeSet<String>> {
    let keys: BTreeSet<&str> = pods
        .iter()
        .flat_map(|p| p.topology_spread.iter())
        .map(|c| c.topology_key.as_str())
        .filter(|k| *k != labels::HOSTNAME)
        .collect();
    keys.into_iter()
        .map(|k| {
            let mut values = BTreeSet::new();
            super::topology::add_values(
                &mut values,
                existing.iter().filter_map(|e| e.labels.get(k)),
            );
            (k.to_string(), values)
        })
        .collect()
}

/// Taints the kubelet or cloud provider put on a node for a while, which
/// Karpenter never lets keep pods off it (`KnownEphemeralTaints`).
pub(crate) const EPHEMERAL_TAINTS: [&str; 3] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// Karpenter's own registration taint (`karpenter.sh/unregistered:NoExecute`)
/// and the Node Readiness Controller's (`readiness.k8s.io/*`): ephemeral
/// taints (`KnownEphemeralTaints`) that do not keep pods off a NodePool's
/// node until it is initialized.
pub(crate) fn registration_taint(t: &Taint) -> bool {
    (t.key == "karpenter.sh/unregistered" && t.effect == crate::model::TaintEffect::NoExecute)
        || t.key.starts_with("readiness.k8s.io/")
}

/// The taints that keep pods off an existing node, as Karpenter's state
/// node reports them: never the ephemeral `NoSchedule` ones (Karpenter's
/// `KnownEphemeralTaints`); until a NodePool's node is initialized, not
/// the registration taints, the ephemeral keys with any effect (the
/// kubelet's `not-ready:NoExecute`) and that NodePool's startup taints. On
/// an initialized node `not-ready:NoExecute` blocks.
pub(super) fn effective_taints(n: &Node, pools: &[crate::model::NodePool]) -> Vec<Taint> {
    if n.taints.is_empty() {
        return Vec::new();
    }
    let startup: &[Taint] = match n.nodepool() {
        Some(name) if !n.initialized() => pools
            .iter()
            .find(|p| p.name == name)
            .map_or(&[], |p| p.startup_taints.as_slice()),
        _ => &[],
    };
    let uninitialized = n.nodepool().is_some() && !n.initialized();
    n.taints
        .iter()
        .filter(|t| {
            let ephemeral = EPHEMERAL_TAINTS.contains(&t.key.as_str());
            !(ephemeral && t.effect == crate::model::TaintEffect::NoSchedule)
                && !(uninitialized && (ephemeral || registration_taint(t)))
        })
        .filter(|t| {
            !startup
                .iter()
                .any(|s| s.key == t.key && s.effect == t.effect)
        })
        .cloned()
        .collect()
}

impl Run<'_> {
    pub(super) fn try_existing(
        &self,
        i: usize,
        p: PodIdx,
        pod_reqs: &Requirements,
        groups: &ActiveTopology,
    ) -> Option<Requirements> {
        let e = self.existing.get(i);
        let pod = &self.pods[p];
        if !pod.requests.fits_in(&e.remaining) {
            return None;
        }
        if groups.blocking_taint(&e.taints, pod).is_some() {
            return None;
        }
        if pod.host_ports.iter().any(|hp| e.host_ports.contains(hp)) {
            return None;
        }
        labels_satisfy(&e.labels, pod_reqs).ok()?;
        if !self.topology.is_active() {
            return Some(e.requirements());
        }
        let zone_admitted = match e.labels.get(labels::ZONE) {
            Some(z) => groups.affinity_zone_ok(std::iter::once(z)),
            None => true,
        };
        if groups.affinity_unmet || !zone_admitted {
            return None;
        }
        let host = e.labels.get(labels::HOSTNAME)?;
        if !self.topology.admits_host(pod, &groups.groups, host) {
            return None;
        }
        self.topology
            .add_requirements(pod, &groups.groups, &groups.domains, &e.requirements())
            .ok()
    }
}

impl Run<'_> {
    /// Step 1 of `add`: the first existing node (Karpenter's order) that
    /// takes the pod; whether one did.
    pub(super) fn place_on_existing(&mut self, t: &Trial) -> bool {
        let (p, shape) = (t.p, t.shape);
        let (pod_reqs, groups, zones_admitted) = (&t.pod_reqs, &t.groups, &t.zones_admitted);
        let pod = &self.pods[p];
        let first = shape.map_or(0, |s| self.hints.existing_hint(s));
        let found = self
            .existing
            .candidates(first, &pod.requests, pod_reqs, |class| {
                groups.blocking_taint(&class.taints, pod).is_none()
                    && match (zones_admitted, class.labels.get(labels::ZONE)) {
                        (Some(ok), Some(zone)) => ok.contains(zone),
                        _ => true,
                    }
            })
            .find_map(|i| Some((i, self.try_existing(i, p, pod_reqs, groups)?)));
        if let Some((i, reqs)) = found {
            {
                self.existing.place(i, p, pod);
                let node = self.existing.get(i).node;
                self.topology
                    .record(pod, &self.groups[p].inverse, &reqs, &node.taints);
                self.hints.placed(p);
                if let Some(s) = shape {
                    self.hints.set_existing_hint(s, i);
                }
                return true;
            }
        }
        if let Some(s) = shape {
            self.hints.set_existing_hint(s, self.existing.len());
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodTemplate;

    fn rooms(v: &[(i64, i64)]) -> Vec<Room> {
        v.iter().map(|&(c, m)| [c, m, 10, 0]).collect()
    }

    #[test]
    fn first_fit_finds_the_first_position_with_room_in_every_dimension() {
        let t = RoomTree::new(&rooms(&[(1, 9), (9, 1), (5, 5), (2, 2), (9, 9)]));
        let cases = [
            // (from, need cpu, need memory, expected)
            (0, 1, 1, Some(0)),
            (0, 4, 4, Some(2)),
            (3, 4, 4, Some(4)),
            (0, 9, 2, Some(4)),
            (0, 10, 1, None),
            (5, 1, 1, None),
            (1, 1, 9, Some(4)),
        ];
        for (from, c, m, want) in cases {
            assert_eq!(
                t.first_fit(from, &[c, m, 1, 0]),
                want,
                "from {from} need {c},{m}"
            );
        }
    }

    #[test]
    fn set_updates_what_first_fit_sees() {
        let mut t = RoomTree::new(&rooms(&[(4, 4), (4, 4), (4, 4)]));
        t.set(0, [1, 1, 10, 0]);
        assert_eq!(t.first_fit(0, &[2, 2, 1, 0]), Some(1));
        t.set(1, [0, 0, 10, 0]);
        t.set(2, [0, 0, 10, 0]);
        assert_eq!(t.first_fit(0, &[2, 2, 1, 0]), None);
        assert!(!t.root_fits(&[2, 2, 1, 0]));
    }

    fn node(i: usize, zone: &str, cpu: i64, memory: i64) -> Node {
        let labels = [
            (labels::ZONE.to_string(), zone.to_string()),
            ("unread".to_string(), format!("v{i}")),
        ];
        Node {
            name: format!("n{i}"),
            labels: labels.into_iter().collect(),
            allocatable: Resources::new()
                .with(resources::CPU, crate::quantity::Quantity::from_millis(cpu))
                .with(
                    resources::MEMORY,
                    crate::quantity::Quantity::from_mib(memory),
                )
                .with(resources::PODS, crate::quantity::Quantity::from_units(110)),
            ..Node::default()
        }
    }

    proptest::proptest! {
        /// The index yields exactly the nodes a plain walk would keep:
        /// from `from` on, in order, labels satisfying the zone
        /// requirement, room for the request, after any placements.
        #[test]
        fn candidates_are_the_plain_walk_filtered(
            specs in proptest::collection::vec((0usize..3, 0i64..4000, 0i64..4096), 0..60),
            placed in proptest::collection::vec(0usize..60, 0..30),
            from in 0usize..70,
            want_cpu in 0i64..3000,
            want_mib in 0i64..3000,
            zones in proptest::collection::btree_set(0usize..3, 1..3),
        ) {
            const ZONES: [&str; 3] = ["a", "b", "c"];
            let nodes: Vec<Node> = specs
                .iter()
                .enumerate()
                .map(|(i, &(z, c, m))| node(i, ZONES[z], c, m))
                .collect();
            let keys: BTreeSet<String> = [labels::ZONE.to_string()].into_iter().collect();
            let mut index = ExistingNodes::new(
                nodes.iter().map(|n| ExistingNode::with_room(n, vec![], NodeRoom::of(n))).collect(),
                &keys,
            );
            let small = Pod::from(PodTemplate { requests: Resources::new()
                    .with(resources::CPU, crate::quantity::Quantity::from_millis(500))
                    .with(resources::PODS, crate::quantity::Quantity::from_units(1)), ..PodTemplate::default() });
            for &i in placed.iter().filter(|&&i| i < nodes.len()) {
                index.place(i, PodIdx::new(0), &small);
            }
            let want = Resources::new()
                .with(resources::CPU, crate::quantity::Quantity::from_millis(want_cpu))
                .with(resources::MEMORY, crate::quantity::Quantity::from_mib(want_mib))
                .with(resources::PODS, crate::quantity::Quantity::from_units(1));
            let reqs = Requirements::from_iter_reqs([Requirement::in_values(
                labels::ZONE,
                zones.iter().map(|&z| ZONES[z]),
            )]);
            let got: Vec<usize> = index.candidates(from, &want, &reqs, |_| true).collect();
            let plain: Vec<usize> = (from..index.len())
                .filter(|&i| {
                    let e = index.get(i);
                    want.fits_in(&e.remaining) && crate::scheduler::labels_satisfy(&e.labels, &reqs).is_ok()
                })
                .collect();
            proptest::prop_assert_eq!(got, plain);
        }
    }

    #[test]
    fn an_empty_tree_fits_nothing() {
        let t = RoomTree::new(&[]);
        assert_eq!(t.first_fit(0, &[0, 0, 0, 0]), None);
        assert!(!t.root_fits(&[0, 0, 0, 0]));
    }
}
