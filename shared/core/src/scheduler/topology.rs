//! Topology spread, pod affinity and pod anti-affinity as counts of matching
//! pods per topology domain, following Karpenter's `Topology`:
//!
//! * a *group* exists per distinct constraint (key, selector, namespaces,
//!   skew); it counts the pods its selector matches in every domain;
//! * placing a pod turns each group it owns into a requirement on the node
//!   (spread: the least-loaded allowed domain; affinity: domains that already
//!   hold a matching pod; anti-affinity: `NotIn` the occupied domains);
//! * *inverse* groups make anti-affinity symmetric: a pod selected by another
//!   pod's anti-affinity term avoids the domains that pod occupies.
//!
//! Domains are iterated in sorted order, so ties break deterministically
//! (Karpenter iterates a Go map and breaks ties at random).

use std::collections::{BTreeMap, BTreeSet};

// Hashed with foldhash, as the scheduler's other caches (seeded per
// process, as std's SipHash is: nothing iterates these maps in an order
// that reaches the plan).
use foldhash::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::labels;
use crate::model::{
    untolerated, InclusionPolicy, LabelSelector, Node, Pod, PodAffinityTerm, PodTemplate, Taint,
    Toleration, TopologySpreadConstraint,
};
use crate::requirements::{Requirement, Requirements};

use super::index::PoolIdx;

/// Which domain [`Topology::pin_domain`] takes: the least or the most
/// loaded (ties by name either way).
#[derive(Debug, Clone, Copy)]
enum Load {
    Fewest,
    Most,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Spread,
    Affinity,
    AntiAffinity,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Namespaces {
    All,
    Only(BTreeSet<String>),
}

impl Namespaces {
    fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(s) => s.contains(ns),
        }
    }
    fn for_term(term: &PodAffinityTerm, own_ns: &str) -> Self {
        if term.all_namespaces {
            Namespaces::All
        } else if term.namespaces.is_empty() {
            Namespaces::Only([own_ns.to_string()].into())
        } else {
            Namespaces::Only(term.namespaces.iter().cloned().collect())
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    kind: Kind,
    key: String,
    namespaces: Namespaces,
    selector: LabelSelector,
    max_skew: u32,
    min_domains: Option<u32>,
    honor_affinity: bool,
    /// Which nodes a spread counts (Karpenter's `TopologyNodeFilter`).
    filter: NodeFilter,
}

/// The nodes a topology spread counts pods on and takes domains from:
/// with `nodeAffinityPolicy: Honor` (the default) those matching the
/// owner's node selector and one of its required node-affinity terms; with
/// `nodeTaintsPolicy: Honor` those whose taints the owner tolerates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeFilter {
    /// OR'd terms (each: node selector ∩ one required term); None: any node.
    terms: Option<Vec<Requirements>>,
    /// The owner's tolerations; None: taints are ignored.
    tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    fn for_spread(c: &TopologySpreadConstraint, owner: &Pod) -> Self {
        let terms = (c.node_affinity_policy == InclusionPolicy::Honor).then(|| {
            if owner.required_terms.is_empty() {
                vec![owner.node_selector.clone()]
            } else {
                owner
                    .required_terms
                    .iter()
                    .map(|t| {
                        let mut r = owner.node_selector.clone();
                        r.add_all(t);
                        r
                    })
                    .collect()
            }
        });
        let terms = terms.filter(|t| t.iter().any(|r| !r.is_empty()));
        let tolerations =
            (c.node_taints_policy == InclusionPolicy::Honor).then(|| owner.tolerations.clone());
        NodeFilter { terms, tolerations }
    }

    fn is_open(&self) -> bool {
        self.terms.is_none() && self.tolerations.is_none()
    }

    fn tolerates(&self, taints: &[Taint]) -> bool {
        self.tolerations
            .as_ref()
            .is_none_or(|t| untolerated(taints, t).is_none())
    }

    /// Whether a node with `reqs` (its labels, or a NodeClaim's
    /// requirements) and `taints` counts.
    pub fn matches(&self, reqs: &Requirements, taints: &[Taint]) -> bool {
        self.tolerates(taints)
            && self
                .terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| reqs.compatible_ok(t)))
    }
}

/// Where new nodes' domains come from: one NodePool's domains per key and
/// the taints its nodes carry.
#[derive(Debug, Clone, Default)]
pub struct DomainSource {
    pub domains: BTreeMap<String, BTreeSet<String>>,
    pub taints: Vec<Taint>,
}

/// An existing node as topology sees it.
#[derive(Debug, Clone)]
struct NodeDomains {
    labels: Requirements,
    taints: Vec<Taint>,
}

impl NodeDomains {
    fn of(n: &Node) -> Self {
        NodeDomains {
            labels: node_requirements(n),
            taints: n.taints.clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct Group {
    id: GroupKey,
    /// Matching pods per domain (spread, affinity: pods the selector matches;
    /// inverse anti-affinity: the owners' domains).
    counts: BTreeMap<String, u32>,
    /// A pending pod's required affinity term on a key other than
    /// hostname: the pods it selects are pinned to one domain of the key
    /// when placed, so that they count (see [`Topology::record`]).
    pins_targets: bool,
    /// How many times [`Topology::record`] changed `counts` (see
    /// [`Topology::stamp`]).
    changes: u64,
}

impl Group {
    fn selects(&self, ns: &str, pod_labels: &BTreeMap<String, String>) -> bool {
        self.id.namespaces.contains(ns) && self.id.selector.matches(pod_labels)
    }
    fn occupied(&self) -> impl Iterator<Item = &String> {
        self.counts.iter().filter(|(_, c)| **c > 0).map(|(d, _)| d)
    }

    /// Whether domain `d` holds a pod of the group.
    fn occupies(&self, d: &str) -> bool {
        self.counts.get(d).is_some_and(|&c| c > 0)
    }
}

/// See [`Topology::spread_view`].
pub struct SpreadView<'a> {
    pub counts: &'a BTreeMap<String, u32>,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    pub honor_affinity: bool,
}

/// Which groups a pending pod owns, parallel to its constraint lists.
#[derive(Debug, Clone, Default)]
pub struct PodGroups {
    pub spread: Vec<usize>,
    pub affinity: Vec<usize>,
    pub preferred_affinity: Vec<usize>,
    pub anti_affinity: Vec<usize>,
    pub preferred_anti_affinity: Vec<usize>,
    /// Inverse groups this pod owns (its required anti-affinity terms).
    pub inverse: Vec<usize>,
}

/// Why topology ruled a placement out. Built on every refused trial, so
/// it carries data; the sentence is made only when it is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyConflict {
    /// The pod's own spread, affinity or anti-affinity term on `key` admits
    /// none of the node's `domains`.
    Term {
        kind: Kind,
        key: String,
        max_skew: u32,
        domains: Requirement,
    },
    /// Another pod's required anti-affinity on `key` excludes the node's
    /// `domains`.
    Inverse { key: String, domains: Requirement },
    /// A pod a required anti-affinity concerns has no known domain of `key`
    /// within `domains` to be pinned to.
    NoPin { key: String, domains: Requirement },
}

/// How a conflict names the hostname of a NodeClaim not made yet.
const NEW_NODE: &str = "a new node";

impl TopologyConflict {
    /// The conflict as met on a new NodeClaim: its hostname (the name the
    /// NodeClaim would have had) is not in the plan, so the sentence says
    /// "a new node" instead.
    pub fn on_new_node(mut self) -> TopologyConflict {
        let (TopologyConflict::Term { key, domains, .. }
        | TopologyConflict::Inverse { key, domains }
        | TopologyConflict::NoPin { key, domains }) = &mut self;
        if key == labels::HOSTNAME && !domains.is_complement() {
            *domains = Requirement::in_values(labels::HOSTNAME, [NEW_NODE]);
        }
        self
    }
}

impl std::fmt::Display for TopologyConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologyConflict::Term {
                kind: Kind::Spread,
                key,
                max_skew,
                domains,
            } => write!(
                f,
                "topology spread on {key} (maxSkew {max_skew}) cannot be satisfied in {}",
                domain_list(domains, "any domain")
            ),
            TopologyConflict::Term {
                kind: Kind::Affinity,
                key,
                domains,
                ..
            } => write!(
                f,
                "pod affinity on {key}: no pod matching the selector runs in {}",
                domain_list(domains, "any domain")
            ),
            TopologyConflict::Term {
                kind: Kind::AntiAffinity,
                key,
                domains,
                ..
            } => write!(
                f,
                "pod anti-affinity on {key}: a matching pod already runs in {}",
                domain_list(domains, "every domain")
            ),
            TopologyConflict::Inverse { key, domains } => write!(
                f,
                "another pod's required anti-affinity on {key} excludes {}",
                domain_list(domains, "every domain")
            ),
            TopologyConflict::NoPin { key, domains } if domains.is_complement() => write!(
                f,
                "required pod anti-affinity on {key}: no known domain to pin the node to"
            ),
            TopologyConflict::NoPin { key, domains } => write!(
                f,
                "required pod anti-affinity on {key}: no known domain in {} to pin the node to",
                domain_list(domains, "any domain")
            ),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    inverse: Vec<Group>,
    inverse_index: HashMap<GroupKey, usize>,
    /// Every known domain per topology key.
    universe: BTreeMap<String, BTreeSet<String>>,
    /// NodePools' domains and taints, and the existing nodes' labels and
    /// taints: filtered spreads take their domains from the ones they count.
    sources: std::sync::Arc<Vec<DomainSource>>,
    nodes: Vec<Rc<NodeDomains>>,
    /// Whether any group or inverse group exists (fast path).
    active: bool,
    /// Whether any required anti-affinity group, or any required affinity
    /// group, is on a key other than hostname (then pods it concerns are
    /// pinned to one domain; see [`Topology::may_pin`]).
    domain_pins: bool,
    /// Groups by one `matchLabels` pair of their selector (a pod can only be
    /// selected by the groups under its own labels), and the groups whose
    /// selector has no `matchLabels`: `record` looks at these only.
    by_label: LabelIndex,
    unindexed: Vec<usize>,
    /// The same index over the inverse groups (`add_requirements`).
    inverse_by_label: LabelIndex,
    inverse_unindexed: Vec<usize>,
    /// The keys of the inverse groups (all made by [`Topology::build`]).
    inverse_keys: BTreeSet<String>,
}

/// Existing pods' counts per node and group, and each node's labels and
/// taints as requirements, kept between plans of one cluster whose nodes
/// do not change (consolidation's simulations leave nodes out, and change
/// a node's pods only when a decision is taken): a node's pods are matched
/// against a group's selector once, and its labels made requirements
/// once, not once per plan. Whoever changes a node calls [`Self::forget`].
#[derive(Debug, Clone, Default)]
pub struct ExistingCounts {
    inner: std::cell::RefCell<CountsInner>,
}

#[derive(Debug, Clone, Default)]
struct CountsInner {
    /// A number per group met so far.
    ids: HashMap<GroupKey, usize>,
    /// Per node name: its pod count when counted (a node whose count
    /// differs is counted afresh), and per group number the node's pods
    /// the group selects (`None`: not counted yet).
    nodes: HashMap<String, (usize, Vec<Option<u32>>)>,
    /// Per node name: its labels and taints as topology reads them.
    domains: HashMap<String, Rc<NodeDomains>>,
}

impl ExistingCounts {
    /// Drops everything kept (a node changed: its pods, labels or taints).
    pub fn forget(&self) {
        let mut inner = self.inner.borrow_mut();
        inner.ids.clear();
        inner.nodes.clear();
        inner.domains.clear();
    }
}

impl CountsInner {
    /// Each node's domains, made once per node name while kept.
    fn domains_of(&mut self, nodes: &[Node]) -> Vec<Rc<NodeDomains>> {
        nodes
            .iter()
            .map(|n| match self.domains.get(&n.name) {
                Some(d) => d.clone(),
                None => {
                    let d = Rc::new(NodeDomains::of(n));
                    self.domains.insert(n.name.clone(), d.clone());
                    d
                }
            })
            .collect()
    }

    fn id_of(&mut self, key: &GroupKey) -> usize {
        let n = self.ids.len();
        *self.ids.entry(key.clone()).or_insert(n)
    }

    /// Node `name`'s (holding `pods` pods) counts for groups `ids`, when
    /// every one is known.
    fn known(&self, name: &str, pods: usize, ids: &[usize]) -> Option<Vec<u32>> {
        let (held, counts) = self.nodes.get(name)?;
        if *held != pods {
            return None;
        }
        ids.iter()
            .map(|&id| counts.get(id).copied().flatten())
            .collect()
    }

    fn remember(&mut self, name: &str, pods: usize, ids: &[usize], counts: &[u32]) {
        let entry = self
            .nodes
            .entry(name.to_string())
            .or_insert_with(|| (pods, Vec::new()));
        if entry.0 != pods {
            *entry = (pods, Vec::new());
        }
        for (&id, &c) in ids.iter().zip(counts) {
            if entry.1.len() <= id {
                entry.1.resize(id + 1, None);
            }
            entry.1[id] = Some(c);
        }
    }
}

/// Groups by label: see `Topology::by_label`.
type LabelIndex = HashMap<String, HashMap<String, Vec<usize>>>;

/// Up to this many groups, a pod's selecting groups are found by asking
/// each group rather than through the label index.
const FEW_GROUPS: usize = 8;

/// Indexes `groups` by one `matchLabels` pair of their selector; the groups
/// without one come second.
fn index_by_label(groups: &[Group]) -> (LabelIndex, Vec<usize>) {
    let mut by_label = LabelIndex::default();
    let mut unindexed = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        match g.id.selector.match_labels.iter().next() {
            Some((k, v)) => by_label
                .entry(k.clone())
                .or_default()
                .entry(v.clone())
                .or_default()
                .push(gi),
            None => unindexed.push(gi),
        }
    }
    (by_label, unindexed)
}

/// Domain values of a node for a key (hostname is the node name).
fn node_domain<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    if key == labels::HOSTNAME {
        return Some(
            node.labels
                .get(key)
                .map(String::as_str)
                .unwrap_or(node.name.as_str()),
        );
    }
    node.labels.get(key).map(String::as_str)
}

/// One node's pods per group while existing pods are counted
/// ([`Topology::count_existing_pods`]); the buffers are reused node after
/// node. Only groups indexed under one of a pod's labels (or not indexed)
/// can select it, and pods of one template are selected by the same groups
/// (found once per template). A group's node filter and the node's domain
/// are looked at once per node, not per pod.
struct NodeTally {
    /// Per group: the node's pods it selects.
    on_node: Vec<u32>,
    /// The groups whose `on_node` is not 0, in the order first met.
    touched: Vec<usize>,
    /// The groups selecting one pod (few groups).
    scratch: Vec<usize>,
    /// The groups selecting each template's pods (many groups).
    selecting: HashMap<*const PodTemplate, Vec<usize>>,
}

impl NodeTally {
    /// Empty buffers for `groups` groups.
    fn new(groups: usize) -> Self {
        NodeTally {
            on_node: vec![0; groups],
            touched: Vec::new(),
            scratch: Vec::new(),
            selecting: HashMap::default(),
        }
    }

    /// Takes the node's counts as remembered (`counts[group]`).
    fn recall(&mut self, counts: &[u32]) {
        for (gi, &c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
            self.touched.push(gi);
            self.on_node[gi] = c;
        }
    }

    /// Counts the node's running `pods` in every group of `t` that selects
    /// them.
    fn select_pods(&mut self, t: &Topology, pods: &[Pod]) {
        for p in pods.iter().filter(|p| !p.terminating) {
            // With many groups, a template's groups are found once.
            let groups = if t.groups.len() > FEW_GROUPS {
                self.selecting
                    .entry(Arc::as_ptr(&p.template))
                    .or_insert_with(|| t.selecting(p))
                    .as_slice()
            } else {
                t.selecting_into(p, &mut self.scratch);
                self.scratch.as_slice()
            };
            for &gi in groups {
                if self.on_node[gi] == 0 {
                    self.touched.push(gi);
                }
                self.on_node[gi] += 1;
            }
        }
    }

    /// Adds node `n`'s counts to the domain it has in each group that
    /// counts it (`nd`: its labels and taints), and clears them.
    fn add_to_groups(&mut self, groups: &mut [Group], n: &Node, nd: &NodeDomains) {
        for gi in self.touched.drain(..) {
            let add = std::mem::take(&mut self.on_node[gi]);
            let g = &mut groups[gi];
            if !g.id.filter.matches(&nd.labels, &nd.taints) {
                continue;
            }
            if let Some(d) = node_domain(n, &g.id.key) {
                match g.counts.get_mut(d) {
                    Some(c) => *c += add,
                    None => {
                        g.counts.insert(d.to_string(), add);
                    }
                }
            }
        }
    }
}

/// The topology keys groups are made for: those of the pending pods'
/// spreads and pod (anti-)affinity terms, and of the existing pods'
/// required anti-affinity terms (their inverse groups). The universe is
/// read only under these keys.
fn topology_keys<'a>(pending: &'a [Pod], nodes: &'a [Node]) -> BTreeSet<&'a str> {
    let mut keys = BTreeSet::new();
    for p in pending {
        keys.extend(p.topology_spread.iter().map(|c| c.topology_key.as_str()));
        let terms = p
            .pod_affinity
            .iter()
            .chain(&p.pod_anti_affinity)
            .chain(p.preferred_pod_affinity.iter().map(|w| &w.term))
            .chain(p.preferred_pod_anti_affinity.iter().map(|w| &w.term));
        keys.extend(terms.map(|t| t.topology_key.as_str()));
    }
    for p in nodes.iter().flat_map(|n| &n.pods) {
        keys.extend(p.pod_anti_affinity.iter().map(|t| t.topology_key.as_str()));
    }
    keys
}

/// Adds every existing node's label values under `keys` to the known
/// domains per key. (Only the keys groups read: every label of every
/// node was looked up in a sorted map on each of a disruption run's
/// simulations. The pass over the existing pods' anti-affinity terms in
/// [`topology_keys`] repeats the one that counts them, which must come
/// after the universe is complete.)
fn add_node_domains(
    universe: &mut BTreeMap<String, BTreeSet<String>>,
    nodes: &[Node],
    keys: &BTreeSet<&str>,
) {
    // Per key (a few), each node's value: a node has dozens of labels.
    for &k in keys {
        let mut found = nodes.iter().filter_map(|n| n.labels.get(k)).peekable();
        if found.peek().is_some() {
            add_values(universe.entry(k.to_string()).or_default(), found);
        }
    }
}

/// Adds `values` to `set`, cloning only those it lacks (many nodes share
/// a value: a zone, a capacity type).
pub(super) fn add_values<'v>(
    set: &mut BTreeSet<String>,
    values: impl IntoIterator<Item = &'v String>,
) {
    for v in values {
        if !set.contains(v) {
            set.insert(v.clone());
        }
    }
}

impl Topology {
    /// Builds the groups of every pending pod and counts the pods already
    /// bound to `nodes`. `universe` lists the domains per key that NodePools
    /// can create (zones, capacity types, custom label values).
    pub fn build(
        pending: &[Pod],
        nodes: &[Node],
        mut universe: BTreeMap<String, BTreeSet<String>>,
        sources: std::sync::Arc<Vec<DomainSource>>,
        kept: Option<&ExistingCounts>,
    ) -> (Topology, Vec<PodGroups>) {
        add_node_domains(&mut universe, nodes, &topology_keys(pending, nodes));
        let node_domains = match kept {
            Some(k) => k.inner.borrow_mut().domains_of(nodes),
            None => nodes.iter().map(|n| Rc::new(NodeDomains::of(n))).collect(),
        };
        let mut t = Topology {
            universe,
            sources,
            nodes: node_domains,
            ..Default::default()
        };
        let mut owned = Vec::with_capacity(pending.len());
        for p in pending {
            owned.push(t.own_groups(p));
        }
        t.count_existing_anti_affinity(nodes);
        (t.by_label, t.unindexed) = index_by_label(&t.groups);
        t.count_existing_pods(nodes, kept);
        (t.inverse_by_label, t.inverse_unindexed) = index_by_label(&t.inverse);
        t.inverse_keys = t.inverse.iter().map(|g| g.id.key.clone()).collect();
        t.active = !t.groups.is_empty() || !t.inverse.is_empty();
        for own in &owned {
            for &gi in &own.affinity {
                let g = &mut t.groups[gi];
                g.pins_targets = g.id.key != labels::HOSTNAME;
            }
        }
        t.domain_pins = t.groups.iter().any(|g| {
            g.pins_targets || (g.id.kind == Kind::AntiAffinity && g.id.key != labels::HOSTNAME)
        });
        (t, owned)
    }

    /// The groups pending pod `p` owns, one per constraint (each group
    /// created when first met).
    fn own_groups(&mut self, p: &Pod) -> PodGroups {
        let mut g = PodGroups::default();
        for c in &p.topology_spread {
            g.spread.push(self.group(spread_key(c, p)));
        }
        let term_key = |kind, term: &PodAffinityTerm| term_key(kind, term, &p.namespace);
        for term in &p.pod_affinity {
            g.affinity.push(self.group(term_key(Kind::Affinity, term)));
        }
        for w in &p.preferred_pod_affinity {
            g.preferred_affinity
                .push(self.group(term_key(Kind::Affinity, &w.term)));
        }
        for term in &p.pod_anti_affinity {
            g.anti_affinity
                .push(self.group(term_key(Kind::AntiAffinity, term)));
            g.inverse
                .push(self.inverse_group(term_key(Kind::AntiAffinity, term)));
        }
        for w in &p.preferred_pod_anti_affinity {
            g.preferred_anti_affinity
                .push(self.group(term_key(Kind::AntiAffinity, &w.term)));
        }
        g
    }

    /// Existing pods' required anti-affinity also repels pending pods: each
    /// term's inverse group counts the domain of the node the pod runs on.
    fn count_existing_anti_affinity(&mut self, nodes: &[Node]) {
        for n in nodes {
            for p in &n.pods {
                for term in &p.pod_anti_affinity {
                    let gi = self.inverse_group(term_key(Kind::AntiAffinity, term, &p.namespace));
                    if let Some(d) = node_domain(n, &term.topology_key) {
                        *self.inverse[gi].counts.entry(d.to_string()).or_default() += 1;
                    }
                }
            }
        }
    }

    /// Counts existing pods in every group that selects them, on the nodes
    /// the group counts (pods being deleted do not count); a node's counts
    /// come from `kept` when it knows them, and are left there otherwise.
    /// Needs `by_label` and `unindexed` built.
    fn count_existing_pods(&mut self, nodes: &[Node], kept: Option<&ExistingCounts>) {
        let mut tally = NodeTally::new(self.groups.len());
        let mut kept = kept.map(|k| k.inner.borrow_mut());
        let ids: Vec<usize> = match kept.as_mut() {
            Some(k) => self.groups.iter().map(|g| k.id_of(&g.id)).collect(),
            None => Vec::new(),
        };
        for (n, nd) in nodes.iter().zip(&self.nodes) {
            let known = kept
                .as_ref()
                .and_then(|k| k.known(&n.name, n.pods.len(), &ids));
            match &known {
                Some(counts) => tally.recall(counts),
                None => tally.select_pods(self, &n.pods),
            }
            if let Some(k) = kept.as_mut().filter(|_| known.is_none()) {
                k.remember(&n.name, n.pods.len(), &ids, &tally.on_node);
            }
            tally.add_to_groups(&mut self.groups, n, nd);
        }
    }

    /// The groups that select pod `p` (by namespace and labels): those
    /// indexed under one of its labels, or not indexed, that match.
    fn selecting(&self, p: &Pod) -> Vec<usize> {
        let mut out = Vec::new();
        self.selecting_into(p, &mut out);
        out
    }

    /// [`Self::selecting`] into `out` (cleared first).
    fn selecting_into(&self, p: &Pod, out: &mut Vec<usize>) {
        out.clear();
        if self.groups.len() <= FEW_GROUPS {
            // Few groups: asking each is cheaper than hashing the labels.
            out.extend(
                (0..self.groups.len())
                    .filter(|&gi| self.groups[gi].selects(&p.namespace, &p.labels)),
            );
            return;
        }
        out.extend(candidates(&self.unindexed, &self.by_label, p));
        out.retain(|&gi| self.groups[gi].selects(&p.namespace, &p.labels));
    }

    /// Whether no topology term on `key` concerns a pod of `groups`: none
    /// of its own terms is on `key`, and no pod's required anti-affinity
    /// is (an inverse group). Then [`Self::admits_on_key`] admits any node
    /// on `key`.
    pub fn key_free(&self, groups: &[(usize, Kind)], key: &str) -> bool {
        !self.inverse_keys.contains(key)
            && groups.iter().all(|&(gi, _)| self.groups[gi].id.key != key)
    }

    /// Whether a topology term (spread, affinity, anti-affinity, owned or
    /// inverse) is on `key`.
    pub fn uses_key(&self, key: &str) -> bool {
        self.inverse_keys.contains(key) || self.groups.iter().any(|g| g.id.key == key)
    }

    /// Per group, the most of its pods a new node may hold when the group
    /// is a topology spread on the hostname that every pending pod it
    /// selects carries (`owned`: each pod's own groups); `None` for every
    /// other group. Karpenter counts a hostname's skew from zero (a new
    /// node holds none), so at most `maxSkew` counted pods per node is the
    /// whole constraint wherever they run; and a pod that carries the
    /// spread counts only pods that carry it, so that cap over the
    /// carriers keeps every carrier's constraint.
    pub fn closed_hostname_spreads(
        &self,
        pending: &[Pod],
        owned: &[PodGroups],
    ) -> Vec<Option<u32>> {
        let mut cap: Vec<Option<u32>> = (self.groups.iter())
            .map(|g| {
                let on_hostname =
                    g.id.kind == Kind::Spread && g.id.key == labels::HOSTNAME && g.id.max_skew > 0;
                on_hostname.then_some(g.id.max_skew)
            })
            .collect();
        if cap.iter().all(Option::is_none) {
            return cap;
        }
        let mut selecting = Vec::new();
        for (p, own) in pending.iter().zip(owned) {
            self.selecting_into(p, &mut selecting);
            for &gi in &selecting {
                if !own.spread.contains(&gi) {
                    cap[gi] = None;
                }
            }
        }
        cap
    }

    /// Whether where pod `p` runs matters to no constraint but required
    /// anti-affinity on the hostname and the hostname spreads `closed`
    /// marks (see [`Self::closed_hostname_spreads`]): every group
    /// selecting it, counting or inverse, is one of those (moving it to
    /// another new node, never one that holds a pod whose term selects it
    /// nor more of a closed spread's pods than its cap, keeps every
    /// constraint).
    pub fn counted_only_by_hostname_terms(&self, p: &Pod, closed: &[Option<u32>]) -> bool {
        self.counted_only_by(p, None, closed)
    }

    /// Whether where pod `p` runs within its zone matters to no constraint
    /// but those [`Self::counted_only_by_hostname_terms`] allows: every
    /// group selecting it, counting or inverse, is on the zone or is one
    /// of those (moving it to another new node of its zone, as that says,
    /// keeps every constraint: the zones' counts do not change).
    pub fn counted_only_by_zone_or_hostname_terms(&self, p: &Pod, closed: &[Option<u32>]) -> bool {
        self.counted_only_by(p, Some(labels::ZONE), closed)
    }

    /// [`Self::counted_only_by_hostname_terms`], with every group on `key`
    /// (whose domain a move keeps) allowed too.
    fn counted_only_by(&self, p: &Pod, key: Option<&str>, closed: &[Option<u32>]) -> bool {
        let kept = |g: &Group| key == Some(g.id.key.as_str());
        let counting_ok = |gi: usize| {
            let g = &self.groups[gi];
            kept(g)
                || (g.id.kind == Kind::AntiAffinity && g.id.key == labels::HOSTNAME)
                || closed.get(gi).is_some_and(Option::is_some)
        };
        let inverse_ok = |g: &Group| kept(g) || g.id.key == labels::HOSTNAME;
        self.selecting(p).iter().all(|&gi| counting_ok(gi))
            && self
                .inverse_candidates(p)
                .iter()
                .map(|&gi| &self.inverse[gi])
                .all(|g| !g.selects(&p.namespace, &p.labels) || inverse_ok(g))
    }

    fn group(&mut self, id: GroupKey) -> usize {
        if let Some(i) = self.index.get(&id) {
            return *i;
        }
        let counts = if id.filter.is_open() {
            self.universe
                .get(&id.key)
                .map(|d| d.iter().map(|v| (v.clone(), 0)).collect())
                .unwrap_or_default()
        } else {
            self.filtered_domains(&id)
        };
        self.groups.push(Group {
            id: id.clone(),
            counts,
            pins_targets: false,
            changes: 0,
        });
        self.index.insert(id, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// The domains of a filtered spread: those of the NodePools whose
    /// taints it tolerates (all of them when taints are ignored) and those
    /// of the existing nodes it counts.
    fn filtered_domains(&self, id: &GroupKey) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for src in self.sources.iter() {
            if id.filter.tolerates(&src.taints) {
                for d in src.domains.get(&id.key).into_iter().flatten() {
                    counts.insert(d.clone(), 0);
                }
            }
        }
        for n in &self.nodes {
            if id.filter.matches(&n.labels, &n.taints) {
                if let Some(d) = n.labels.get(&id.key).and_then(|r| r.values().iter().next()) {
                    counts.insert(d.clone(), 0);
                }
            }
        }
        counts
    }

    fn inverse_group(&mut self, id: GroupKey) -> usize {
        if let Some(i) = self.inverse_index.get(&id) {
            return *i;
        }
        self.inverse.push(Group {
            id: id.clone(),
            counts: BTreeMap::new(),
            pins_targets: false,
            changes: 0,
        });
        self.inverse_index.insert(id, self.inverse.len() - 1);
        self.inverse.len() - 1
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Tightens `node_reqs` (the candidate node's requirements already
    /// intersected with the pod's) with every topology constraint in force.
    /// `pod_reqs` are the pod's own node requirements (domain eligibility).
    pub fn add_requirements(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        node_reqs: &Requirements,
    ) -> Result<Requirements, TopologyConflict> {
        self.add_requirements_over(pod, groups, pod_reqs, node_reqs, &Requirements::default())
    }

    /// [`Self::add_requirements`] for the node `base ∩ extra` (a NodeClaim's
    /// requirements and the pod's), which is built only once topology
    /// admits it: a refused trial allocates no copy of either.
    pub fn add_requirements_over(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        base: &Requirements,
        extra: &Requirements,
    ) -> Result<Requirements, TopologyConflict> {
        let added = self.added_over(pod, groups, pod_reqs, base, extra)?;
        let mut out = base.intersection(extra);
        for r in added {
            out.add(r);
        }
        if self.domain_pins {
            self.pin_domains(pod, groups, &mut out)?;
        }
        Ok(out)
    }

    /// What [`Self::add_requirements_over`] adds to `base ∩ extra`, in the
    /// order [`Requirements::add`] is to apply it, but for the anti-affinity
    /// domains it pins (none unless [`Self::may_pin`]): nothing is
    /// built but the added requirements.
    pub fn added_over(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        base: &Requirements,
        extra: &Requirements,
    ) -> Result<Vec<Requirement>, TopologyConflict> {
        self.narrowing(pod, groups, pod_reqs, None, |key| {
            base.intersection_on(extra, key)
        })
    }

    /// Whether [`Self::added_over`] passes on `key` alone for a node whose
    /// requirement on `key` (with the pod's) is `node`. Each key is
    /// narrowed on its own, so a node this refuses is refused by
    /// [`Self::added_over`] and [`Self::add_requirements_over`].
    pub fn admits_on_key(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        key: &str,
        node: Option<Requirement>,
    ) -> bool {
        self.narrowing(pod, groups, pod_reqs, Some(key), |_| node.clone())
            .is_ok()
    }

    /// The inverse groups that may select `pod`: those indexed under one of
    /// its labels, and those not indexed; in group order, as a scan would
    /// meet them.
    fn inverse_candidates(&self, pod: &Pod) -> Vec<usize> {
        let mut out: Vec<usize> =
            candidates(&self.inverse_unindexed, &self.inverse_by_label, pod).collect();
        out.sort_unstable();
        out
    }

    /// The requirements topology adds to a node whose requirement on a key
    /// is `node(key)`, in the order [`Requirements::add`] is to apply them;
    /// on key `only` alone when given.
    fn narrowing(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        only: Option<&str>,
        node: impl Fn(&str) -> Option<Requirement>,
    ) -> Result<Vec<Requirement>, TopologyConflict> {
        let skipped = |key: &str| only.is_some_and(|k| k != key);
        let mut added: Vec<Requirement> = Vec::new();
        // The node's requirement on `key` with `added` applied, as
        // `Requirements::add` would have left it.
        let current = |added: &[Requirement], key: &str| {
            Requirements::added_on(node(key), added, key)
                .unwrap_or_else(|| Requirement::exists(key))
        };
        for &(gi, kind) in groups {
            let g = &self.groups[gi];
            let key = g.id.key.as_str();
            if skipped(key) {
                continue;
            }
            let node_domains = current(&added, key);
            let allowed = self.term_allows(g, kind, pod, pod_reqs, &node_domains);
            if node_domains.intersection(&allowed).is_empty() {
                return Err(TopologyConflict::Term {
                    kind,
                    key: key.to_string(),
                    max_skew: g.id.max_skew,
                    domains: node_domains,
                });
            }
            added.push(allowed);
        }
        self.narrow_by_inverse(pod, &skipped, &current, &mut added)?;
        Ok(added)
    }

    /// The domains one required spread, affinity or anti-affinity term of
    /// `pod` allows a node whose domains on the term's key are `node_domains`.
    #[inline]
    fn term_allows(
        &self,
        g: &Group,
        kind: Kind,
        pod: &Pod,
        pod_reqs: &Requirements,
        node_domains: &Requirement,
    ) -> Requirement {
        let key = g.id.key.as_str();
        let exists = Requirement::exists(key);
        let pod_domains = if g.id.honor_affinity || kind != Kind::Spread {
            pod_reqs.get(key).unwrap_or(&exists)
        } else {
            &exists
        };
        match kind {
            Kind::Spread => self.next_spread(g, pod, pod_domains, node_domains),
            Kind::Affinity => self.next_affinity(g, pod, pod_domains, node_domains),
            Kind::AntiAffinity => avoid_occupied(g, key, node_domains),
        }
    }

    /// Adds to `added` the domains the existing pods' required
    /// anti-affinity terms that select `pod` leave it (the inverse groups).
    #[inline]
    fn narrow_by_inverse(
        &self,
        pod: &Pod,
        skipped: &impl Fn(&str) -> bool,
        current: &impl Fn(&[Requirement], &str) -> Requirement,
        added: &mut Vec<Requirement>,
    ) -> Result<(), TopologyConflict> {
        for g in self
            .inverse_candidates(pod)
            .into_iter()
            .map(|gi| &self.inverse[gi])
        {
            let key = g.id.key.as_str();
            if skipped(key) || g.counts.is_empty() || !g.selects(&pod.namespace, &pod.labels) {
                continue;
            }
            let node_domains = current(added, key);
            let allowed = avoid_occupied(g, key, &node_domains);
            if node_domains.intersection(&allowed).is_empty() {
                return Err(TopologyConflict::Inverse {
                    key: key.to_string(),
                    domains: node_domains,
                });
            }
            added.push(allowed);
        }
        Ok(())
    }

    /// Whether a required pod affinity term of `groups` rules out every
    /// node, whatever its domains: no pod it selects runs in a domain the
    /// pod may use (`pod_reqs`, as [`Self::add_requirements`] takes them),
    /// and the pod does not select itself, so it cannot start the group.
    /// [`Self::add_requirements`] then fails on every node; callers ask once
    /// per pod instead of once per node.
    pub fn affinity_unmet(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
    ) -> bool {
        // `affinity_admitted` is empty: asked without listing the domains.
        groups.iter().any(|&(gi, kind)| {
            let g = &self.groups[gi];
            kind == Kind::Affinity
                && !g.selects(&pod.namespace, &pod.labels)
                && !g.occupied().any(|d| pod_admits(pod_reqs, &g.id.key, d))
        })
    }

    /// The hostnames `pod`'s required hostname affinity terms (of
    /// `groups`) leave it: where each term's group holds a pod it selects,
    /// among those `pod_reqs` admit; ascending. `None` when it has no
    /// such term but ones it may start itself (no pod selected yet).
    pub fn affinity_hosts(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
    ) -> Option<Vec<&str>> {
        let mut out: Option<Vec<&str>> = None;
        for &(gi, kind) in groups {
            let g = &self.groups[gi];
            if kind != Kind::Affinity || g.id.key != labels::HOSTNAME {
                continue;
            }
            let hosts = (g.occupied()).filter(|d| pod_admits(pod_reqs, labels::HOSTNAME, d));
            let hosts: Vec<&str> = hosts.map(String::as_str).collect();
            if hosts.is_empty() && g.selects(&pod.namespace, &pod.labels) {
                continue;
            }
            out = Some(match out {
                None => hosts,
                Some(prev) => prev
                    .into_iter()
                    .filter(|h| hosts.binary_search(h).is_ok())
                    .collect(),
            });
        }
        out
    }

    /// A cheap necessary condition for [`Self::add_requirements`] on a node
    /// whose hostname is `host`: the pod's own hostname spreads (the
    /// minimum over hostnames is 0) and hostname anti-affinity terms admit
    /// that node. No allocation: the existing-node walk calls it for every
    /// candidate.
    pub fn admits_host(&self, pod: &Pod, groups: &[(usize, Kind)], host: &str) -> bool {
        groups.iter().all(|&(gi, kind)| {
            let g = &self.groups[gi];
            if g.id.key != labels::HOSTNAME {
                return true;
            }
            let count = i64::from(g.counts.get(host).copied().unwrap_or(0));
            match kind {
                Kind::Spread => {
                    count + i64::from(g.selects(&pod.namespace, &pod.labels))
                        <= i64::from(g.id.max_skew)
                }
                Kind::AntiAffinity => count == 0,
                Kind::Affinity => true,
            }
        })
    }

    /// A pod that a required anti-affinity term concerns on a key other
    /// than hostname (it owns such a term, or some pending pod's term
    /// selects it) must land in one known domain of that key: a NodeClaim
    /// left open over several zones could launch in any of them, so no
    /// other domain would be safe for the pods that must avoid it. Pins
    /// the key to the allowed domain with the fewest pods of those groups
    /// (then by name). A pod that a pending pod's required affinity term
    /// selects on such a key is pinned too, to the domain with the most
    /// pods of those groups: its followers need it counted in one.
    fn pin_domains(
        &self,
        pod: &Pod,
        owned: &[(usize, Kind)],
        out: &mut Requirements,
    ) -> Result<(), TopologyConflict> {
        let (apart, together) = self.pin_groups(pod, owned);
        self.pin_keys(&apart, Load::Fewest, out)?;
        self.pin_keys(&together, Load::Most, out)
    }

    /// The groups [`Self::pin_domains`] pins `pod` by (owning the groups
    /// `owned`), each ascending: the required anti-affinity groups off the
    /// hostname that concern it (to their emptiest domain), and the groups
    /// of pending pods' affinity terms off the hostname that select it (to
    /// their fullest).
    fn pin_groups(&self, pod: &Pod, owned: &[(usize, Kind)]) -> (Vec<usize>, Vec<usize>) {
        let apart = self.domain_anti_affinity_of(pod, owned);
        let mut together = self.selecting(pod);
        together.retain(|&gi| self.groups[gi].pins_targets);
        together.sort_unstable();
        together.dedup();
        (apart, together)
    }

    /// Whether placing `pod` (owning the groups `owned`) may pin a node to
    /// a domain beyond what [`Self::added_over`] returns: a required
    /// anti-affinity group on a key other than hostname concerns it (both
    /// sides are pinned), or a pending pod's required affinity term off
    /// the hostname selects it (its targets are pinned: a target on a
    /// NodeClaim whose zone is still open counts in no zone, and the pods
    /// following it would wait for the next round). When not,
    /// [`Self::add_requirements_over`] adds to `base ∩ extra` exactly what
    /// [`Self::added_over`] returns, and a trial need not build it.
    pub fn may_pin(&self, pod: &Pod, owned: &[(usize, Kind)]) -> bool {
        self.domain_pins
            && (!self.domain_anti_affinity_of(pod, owned).is_empty()
                || self
                    .selecting(pod)
                    .iter()
                    .any(|&gi| self.groups[gi].pins_targets))
    }

    /// The keys [`Self::pin_domains`] may pin for `pod` (owning the
    /// groups `owned`), ascending: none unless [`Self::may_pin`].
    pub fn pin_keys_of(&self, pod: &Pod, owned: &[(usize, Kind)]) -> Vec<String> {
        if !self.domain_pins {
            return Vec::new();
        }
        let (apart, together) = self.pin_groups(pod, owned);
        let mut keys: Vec<String> = (apart.iter().chain(&together))
            .map(|&gi| self.groups[gi].id.key.clone())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Pins each key of `groups` (see [`Self::pin_domain`]).
    fn pin_keys(
        &self,
        groups: &[usize],
        by: Load,
        out: &mut Requirements,
    ) -> Result<(), TopologyConflict> {
        let keys: BTreeSet<&str> = groups
            .iter()
            .map(|&gi| self.groups[gi].id.key.as_str())
            .collect();
        for key in keys {
            self.pin_domain(groups, key, by, out)?;
        }
        Ok(())
    }

    /// The required anti-affinity groups on keys other than hostname that
    /// concern `pod` (it owns them, per `owned`, or they select it),
    /// ascending.
    fn domain_anti_affinity_of(&self, pod: &Pod, owned: &[(usize, Kind)]) -> Vec<usize> {
        let mut relevant: Vec<usize> = owned
            .iter()
            .filter(|(_, k)| *k == Kind::AntiAffinity)
            .map(|&(gi, _)| gi)
            .collect();
        relevant.extend(
            self.unindexed
                .iter()
                .copied()
                .chain(
                    pod.labels
                        .iter()
                        .filter_map(|(k, v)| self.by_label.get(k).and_then(|m| m.get(v)))
                        .flatten()
                        .copied(),
                )
                .filter(|&gi| {
                    let g = &self.groups[gi];
                    g.id.kind == Kind::AntiAffinity && g.selects(&pod.namespace, &pod.labels)
                }),
        );
        relevant.retain(|&gi| self.groups[gi].id.key != labels::HOSTNAME);
        relevant.sort_unstable();
        relevant.dedup();
        relevant
    }

    /// Pins `key` in `out`, unless it is pinned already, to the allowed
    /// domain with the fewest (anti-affinity: apart) or the most
    /// (affinity: together) pods of the `relevant` groups on `key`, then
    /// by name.
    fn pin_domain(
        &self,
        relevant: &[usize],
        key: &str,
        by: Load,
        out: &mut Requirements,
    ) -> Result<(), TopologyConflict> {
        let current = match out.get(key) {
            Some(r) => r.clone(),
            None if always_labelled(key) => Requirement::exists(key),
            None => return Ok(()),
        };
        if !current.is_complement() && current.len() <= 1 {
            return Ok(());
        }
        let load = |d: &str| -> u64 {
            relevant
                .iter()
                .map(|&gi| &self.groups[gi])
                .filter(|g| g.id.key == key)
                .map(|g| u64::from(g.counts.get(d).copied().unwrap_or(0)))
                .sum()
        };
        let best = self
            .universe
            .get(key)
            .into_iter()
            .flatten()
            .filter(|d| current.has(d))
            .min_by_key(|d| match by {
                Load::Fewest => load(d),
                Load::Most => u64::MAX - load(d),
            });
        match best {
            Some(d) => out.add(Requirement::in_values(key, [d.clone()])),
            None => {
                return Err(TopologyConflict::NoPin {
                    key: key.to_string(),
                    domains: current,
                })
            }
        }
        Ok(())
    }

    fn min_count(&self, g: &Group, pod_domains: &Requirement) -> i64 {
        if g.id.key == labels::HOSTNAME {
            return 0;
        }
        let mut min = i64::MAX;
        let mut eligible = 0u32;
        for (d, c) in &g.counts {
            if pod_domains.has(d) {
                eligible += 1;
                min = min.min(*c as i64);
            }
        }
        if g.id.min_domains.is_some_and(|m| eligible < m) {
            return 0;
        }
        min
    }

    /// The domains of `key` that every spread group in force (owned by the
    /// pod, on that key) still admits for it, or `None` when no such group
    /// constrains `key`. A cheap necessary condition for
    /// [`Self::add_requirements`]: a node pinned to another domain fails.
    pub fn spread_admits(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        key: &str,
    ) -> Option<BTreeSet<String>> {
        self.admitted(groups, key, Kind::Spread, |g| {
            Some(self.spread_admitted(g, pod, pod_reqs))
        })
    }

    /// [`Self::spread_admits`] for the pod's affinity groups: the domains
    /// of `key` holding pods that each of them selects (`None`: no such
    /// group, or only groups the pod may start itself).
    pub fn affinity_admits(
        &self,
        pod: &Pod,
        groups: &[(usize, Kind)],
        pod_reqs: &Requirements,
        key: &str,
    ) -> Option<BTreeSet<String>> {
        self.admitted(groups, key, Kind::Affinity, |g| {
            affinity_admitted(g, pod, pod_reqs)
        })
    }

    /// The intersection of `admits` over the groups of `kind` on `key`.
    fn admitted(
        &self,
        groups: &[(usize, Kind)],
        key: &str,
        kind: Kind,
        admits: impl Fn(&Group) -> Option<BTreeSet<String>>,
    ) -> Option<BTreeSet<String>> {
        let mut out: Option<BTreeSet<String>> = None;
        for &(gi, k) in groups {
            let g = &self.groups[gi];
            if k != kind || g.id.key != key || key == labels::HOSTNAME {
                continue;
            }
            let Some(ok) = admits(g) else { continue };
            out = Some(match out {
                None => ok,
                Some(prev) => prev.intersection(&ok).cloned().collect(),
            });
        }
        out
    }

    /// The domains where spread group `g` lets `pod` go, whatever the node.
    fn spread_admitted(&self, g: &Group, pod: &Pod, pod_reqs: &Requirements) -> BTreeSet<String> {
        let key = g.id.key.as_str();
        let exists = Requirement::exists(key);
        let pod_domains = if g.id.honor_affinity {
            pod_reqs.get(key).unwrap_or(&exists)
        } else {
            &exists
        };
        let min = self.min_count(g, pod_domains);
        let self_selecting = g.selects(&pod.namespace, &pod.labels) as i64;
        g.counts
            .iter()
            .filter(|(_, c)| {
                (**c as i64 + self_selecting).saturating_sub(min) <= g.id.max_skew as i64
            })
            .map(|(d, _)| d.clone())
            .collect()
    }

    fn next_spread(
        &self,
        g: &Group,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let min = self.min_count(g, pod_domains);
        let self_selecting = g.selects(&pod.namespace, &pod.labels) as i64;
        let key = g.id.key.as_str();
        let mut best: Option<(String, i64)> = None;
        let mut consider = |d: &str, count: i64| {
            let count = count + self_selecting;
            if count.saturating_sub(min) <= g.id.max_skew as i64
                && best.as_ref().is_none_or(|(_, c)| count < *c)
            {
                best = Some((d.to_string(), count));
            }
        };
        if !node_domains.is_complement() {
            // A concrete node (existing, or a NodeClaim with a hostname).
            for d in node_domains.values() {
                if g.counts.contains_key(d) || key == labels::HOSTNAME {
                    consider(d, g.counts.get(d).copied().unwrap_or(0) as i64);
                }
            }
        } else {
            for (d, c) in &g.counts {
                if node_domains.has(d) {
                    consider(d, *c as i64);
                }
            }
        }
        match best {
            Some((d, _)) => Requirement::in_values(key, [d]),
            None => Requirement::does_not_exist(key),
        }
    }

    fn next_affinity(
        &self,
        g: &Group,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let key = g.id.key.as_str();
        // A node of known domains (a NodeClaim's or a node's hostname, a
        // pinned zone) is asked about those alone, so a trial does not
        // list every domain the group occupies (a hostname term's grow
        // with the plan).
        let known = !node_domains.is_complement();
        let options: Vec<&String> = if known {
            (node_domains.values().iter())
                .filter(|d| g.occupies(d) && pod_domains.has(d))
                .collect()
        } else {
            g.occupied().filter(|d| pod_domains.has(d)).collect()
        };
        if !options.is_empty() {
            return Requirement::in_values(key, options.into_iter().cloned());
        }
        if known && g.occupied().any(|d| pod_domains.has(d)) {
            // Near pods elsewhere only.
            return Requirement::does_not_exist(key);
        }
        // Nothing to be near yet: a self-selecting pod bootstraps the group,
        // preferring the candidate node's own domain.
        if g.selects(&pod.namespace, &pod.labels) {
            let both = pod_domains.intersection(node_domains);
            if !both.is_complement() {
                if let Some(d) = both.values().iter().next() {
                    return Requirement::in_values(key, [d.clone()]);
                }
            }
            if let Some(d) = g.counts.keys().find(|d| both.has(d)) {
                return Requirement::in_values(key, [d.clone()]);
            }
        }
        Requirement::does_not_exist(key)
    }

    /// Spread groups on `key` whose selector matches `pod` (the groups that
    /// count it), ascending.
    pub fn spread_selecting(&self, key: &str, pod: &Pod) -> Vec<usize> {
        let by_label = &self.by_label;
        let mut out: Vec<usize> = self
            .unindexed
            .iter()
            .chain(
                pod.labels
                    .iter()
                    .filter_map(|(k, v)| by_label.get(k).and_then(|m| m.get(v)))
                    .flatten(),
            )
            .copied()
            .filter(|&gi| {
                let g = &self.groups[gi];
                g.id.kind == Kind::Spread
                    && g.id.key == key
                    && g.selects(&pod.namespace, &pod.labels)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The domains of `key` NodePool `pool` (in build order) can create.
    pub fn pool_domains(&self, pool: PoolIdx, key: &str) -> Option<&BTreeSet<String>> {
        self.sources
            .get(pool.get())
            .and_then(|s| s.domains.get(key))
    }

    /// A spread group's pods per domain, `maxSkew`, `minDomains` and
    /// whether the owners' node affinity limits its domains.
    pub fn spread_view(&self, gi: usize) -> SpreadView<'_> {
        let g = &self.groups[gi];
        SpreadView {
            counts: &g.counts,
            max_skew: g.id.max_skew,
            min_domains: g.id.min_domains,
            honor_affinity: g.id.honor_affinity,
        }
    }

    /// The groups of required hostname affinity terms that count `pod` on
    /// the node `host` (after [`Self::record`] placed it there).
    pub fn hostname_affinity_holding<'p>(
        &'p self,
        pod: &'p Pod,
        host: &'p str,
    ) -> impl Iterator<Item = usize> + 'p {
        candidates(&self.unindexed, &self.by_label, pod).filter(move |&gi| {
            let g = &self.groups[gi];
            g.id.kind == Kind::Affinity
                && g.id.key == labels::HOSTNAME
                && g.selects(&pod.namespace, &pod.labels)
                && g.occupies(host)
        })
    }

    /// The groups among `groups` of the pod's required hostname affinity
    /// terms.
    pub fn hostname_affinity<'g>(
        &'g self,
        groups: &'g [(usize, Kind)],
    ) -> impl Iterator<Item = usize> + 'g {
        (groups.iter())
            .filter(|&&(gi, kind)| {
                kind == Kind::Affinity && self.groups[gi].id.key == labels::HOSTNAME
            })
            .map(|&(gi, _)| gi)
    }

    /// The domains holding pods of group `gi`.
    pub fn occupied_domains(&self, gi: usize) -> impl Iterator<Item = &str> {
        self.groups[gi].occupied().map(String::as_str)
    }

    /// Whether group `gi`'s selector matches `pod`.
    pub fn group_selects(&self, gi: usize, pod: &Pod) -> bool {
        self.groups[gi].selects(&pod.namespace, &pod.labels)
    }

    /// Records a pod placed with final node requirements `reqs` on a node
    /// with `taints`.
    pub fn record(
        &mut self,
        pod: &Pod,
        inverse_owned: &[usize],
        reqs: &Requirements,
        taints: &[Taint],
    ) {
        if !self.active {
            return;
        }
        for gi in candidates(&self.unindexed, &self.by_label, pod) {
            let g = &mut self.groups[gi];
            if !g.selects(&pod.namespace, &pod.labels) || !g.id.filter.matches(reqs, taints) {
                continue;
            }
            if g.id.kind == Kind::AntiAffinity {
                // Every domain the node may still land in is occupied.
                for d in possible_domains(&self.universe, &g.id.key, reqs) {
                    *g.counts.entry(d).or_default() += 1;
                    g.changes += 1;
                }
                continue;
            }
            let Some(domains) = reqs.get(&g.id.key) else {
                continue;
            };
            if domains.is_complement() {
                continue;
            }
            if domains.values().len() == 1 {
                if let Some(d) = domains.values().iter().next() {
                    *g.counts.entry(d.clone()).or_default() += 1;
                    g.changes += 1;
                }
            }
        }
        for &gi in inverse_owned {
            let g = &mut self.inverse[gi];
            for d in possible_domains(&self.universe, &g.id.key, reqs) {
                *g.counts.entry(d).or_default() += 1;
                g.changes += 1;
            }
        }
    }

    /// A number that changes whenever [`Self::record`] changes the counts
    /// of a group that may decide where `pod` goes: one of its own groups
    /// (`own`, every term whatever its relaxation) or an inverse group
    /// that may select it. Everything topology answers for `pod` is the
    /// same while it is.
    pub fn stamp(&self, pod: &Pod, own: &PodGroups) -> u64 {
        let owned = (own.spread.iter())
            .chain(&own.affinity)
            .chain(&own.preferred_affinity)
            .chain(&own.anti_affinity)
            .chain(&own.preferred_anti_affinity);
        let inverse = candidates(&self.inverse_unindexed, &self.inverse_by_label, pod);
        let changes = owned.map(|&gi| self.groups[gi].changes);
        let inverse_changes = inverse.map(|gi| self.inverse[gi].changes);
        changes.chain(inverse_changes).fold(0, u64::wrapping_add)
    }
}

/// The groups whose selector may match `pod`: those its labels index
/// (see `index_by_label`) and those no label indexes.
fn candidates<'p>(
    unindexed: &'p [usize],
    by_label: &'p LabelIndex,
    pod: &'p Pod,
) -> impl Iterator<Item = usize> + 'p {
    unindexed.iter().copied().chain(
        (pod.labels.iter())
            .filter_map(|(k, v)| by_label.get(k).and_then(|m| m.get(v)))
            .flatten()
            .copied(),
    )
}

/// The domains of `key` a node with requirements `reqs` may land in: its
/// values, or, when it is open (no requirement, `Exists`, `NotIn`), every
/// known domain it allows. An open zone is any zone, never no zone.
fn possible_domains(
    universe: &BTreeMap<String, BTreeSet<String>>,
    key: &str,
    reqs: &Requirements,
) -> Vec<String> {
    match reqs.get(key) {
        Some(d) if !d.is_complement() => d.values().iter().cloned().collect(),
        Some(d) => universe
            .get(key)
            .into_iter()
            .flatten()
            .filter(|v| d.has(v))
            .cloned()
            .collect(),
        None if always_labelled(key) => universe.get(key).into_iter().flatten().cloned().collect(),
        // A key the node has no requirement on: it will not carry the label.
        None => Vec::new(),
    }
}

/// Labels every node a NodePool launches carries, whatever its requirements.
fn always_labelled(key: &str) -> bool {
    [
        labels::ZONE,
        labels::REGION,
        labels::CAPACITY_TYPE,
        labels::INSTANCE_TYPE,
        labels::ARCH,
        labels::OS,
        labels::NODEPOOL,
    ]
    .contains(&key)
}

/// The domains of `node_domains` where the group has no pod. A concrete
/// node (a hostname, a pinned zone) is checked directly, so the cost does not
/// grow with the number of occupied domains (thousands of hostnames).
/// The domains where affinity group `g` lets `pod` go, whatever the node
/// (those of its pods that `pod_reqs` allow, as `next_affinity`), or `None`
/// when that depends on the node (a self-selecting pod starts the group).
fn affinity_admitted(g: &Group, pod: &Pod, pod_reqs: &Requirements) -> Option<BTreeSet<String>> {
    let options: BTreeSet<String> = (g.occupied())
        .filter(|d| pod_admits(pod_reqs, &g.id.key, d))
        .cloned()
        .collect();
    (!options.is_empty() || !g.selects(&pod.namespace, &pod.labels)).then_some(options)
}

/// Whether requirements `pod_reqs` admit domain `d` of `key` (any domain
/// when they do not name `key`).
fn pod_admits(pod_reqs: &Requirements, key: &str, d: &str) -> bool {
    pod_reqs.get(key).is_none_or(|domains| domains.has(d))
}

fn avoid_occupied(g: &Group, key: &str, node_domains: &Requirement) -> Requirement {
    if node_domains.is_complement() {
        return Requirement::not_in(key, g.occupied().cloned());
    }
    Requirement::in_values(
        key,
        node_domains
            .values()
            .iter()
            .filter(|d| !g.occupies(d))
            .cloned(),
    )
}

/// The group of a pod (anti-)affinity term written on a pod in namespace `ns`.
fn term_key(kind: Kind, term: &PodAffinityTerm, ns: &str) -> GroupKey {
    GroupKey {
        kind,
        key: term.topology_key.clone(),
        namespaces: Namespaces::for_term(term, ns),
        selector: term.label_selector.clone(),
        max_skew: 0,
        min_domains: None,
        honor_affinity: false,
        filter: NodeFilter::default(),
    }
}

fn spread_key(c: &TopologySpreadConstraint, owner: &Pod) -> GroupKey {
    GroupKey {
        kind: Kind::Spread,
        key: c.topology_key.clone(),
        namespaces: Namespaces::Only([owner.namespace.clone()].into()),
        selector: c.label_selector.clone(),
        max_skew: c.max_skew,
        min_domains: c.min_domains,
        honor_affinity: c.node_affinity_policy == InclusionPolicy::Honor,
        filter: NodeFilter::for_spread(c, owner),
    }
}

/// A node's labels (and its hostname) as `In` requirements.
fn node_requirements(n: &Node) -> Requirements {
    let mut reqs = Requirements::from_iter_reqs(
        n.labels
            .iter()
            .map(|(k, v)| Requirement::in_values(k, [v.as_str()])),
    );
    if reqs.get(labels::HOSTNAME).is_none() {
        reqs.add(Requirement::in_values(labels::HOSTNAME, [n.name.as_str()]));
    }
    reqs
}

/// The domains of `r`, or `open` ("any domain", "every domain": what
/// reads true in the sentence) when `r` is not a list of values.
fn domain_list(r: &Requirement, open: &str) -> String {
    if r.is_complement() {
        open.to_string()
    } else {
        r.values().iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sentences of a conflict over no listed domains read true: the
    /// pod's own term is satisfied in no domain ("any"), another's rule
    /// holds in all of them ("every"); a list names its domains.
    #[test]
    fn conflicts_name_their_domains() {
        let open = Requirement::not_in(labels::ZONE, ["us-west-2d"]);
        let listed = Requirement::in_values(labels::ZONE, ["us-west-2a", "us-west-2b"]);
        let term = |kind, domains: &Requirement| TopologyConflict::Term {
            kind,
            key: labels::ZONE.into(),
            max_skew: 1,
            domains: domains.clone(),
        };
        let zone = labels::ZONE;
        let cases = [
            (
                term(Kind::Spread, &open),
                format!("topology spread on {zone} (maxSkew 1) cannot be satisfied in any domain"),
            ),
            (
                term(Kind::Affinity, &open),
                format!("pod affinity on {zone}: no pod matching the selector runs in any domain"),
            ),
            (
                term(Kind::AntiAffinity, &open),
                format!("pod anti-affinity on {zone}: a matching pod already runs in every domain"),
            ),
            (
                TopologyConflict::Inverse {
                    key: zone.into(),
                    domains: open.clone(),
                },
                format!("another pod's required anti-affinity on {zone} excludes every domain"),
            ),
            (
                TopologyConflict::NoPin {
                    key: zone.into(),
                    domains: open.clone(),
                },
                format!("required pod anti-affinity on {zone}: no known domain to pin the node to"),
            ),
            (
                term(Kind::Affinity, &listed),
                format!("pod affinity on {zone}: no pod matching the selector runs in us-west-2a, us-west-2b"),
            ),
        ];
        for (conflict, want) in cases {
            assert_eq!(conflict.to_string(), want);
        }
    }

    /// A conflict on a new NodeClaim's hostname names "a new node", not the
    /// name the NodeClaim would have had (it is not in the plan); on
    /// another key it names its domains.
    #[test]
    fn a_new_nodes_conflict_names_a_new_node() {
        let host = Requirement::in_values(labels::HOSTNAME, ["default-21"]);
        let zone = Requirement::in_values(labels::ZONE, ["us-west-2a"]);
        let term = |key: &str, domains: &Requirement| TopologyConflict::Term {
            kind: Kind::Affinity,
            key: key.into(),
            max_skew: 1,
            domains: domains.clone(),
        };
        let h = labels::HOSTNAME;
        let cases = [
            (
                term(h, &host),
                format!("pod affinity on {h}: no pod matching the selector runs in a new node"),
            ),
            (
                TopologyConflict::Inverse {
                    key: h.into(),
                    domains: host.clone(),
                },
                format!("another pod's required anti-affinity on {h} excludes a new node"),
            ),
            (
                term(labels::ZONE, &zone),
                format!(
                    "pod affinity on {}: no pod matching the selector runs in us-west-2a",
                    labels::ZONE
                ),
            ),
        ];
        for (conflict, want) in cases {
            assert_eq!(conflict.on_new_node().to_string(), want);
        }
    }
}
