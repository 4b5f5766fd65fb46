//! PodDisruptionBudgets: how many more evictions each allows, and which pod
//! a graceful disruption could not evict.
//!
//! A PDB's allowance is its `status.disruptionsAllowed` when the document
//! carries one (the disruption controller knows the pods' health), else it
//! is computed over the bound pods it selects, all taken as healthy:
//! `maxUnavailable` (percent of the selected pods, rounded up), or the
//! selected pods minus `minAvailable` (percent rounded up).
//!
//! As Karpenter's `CanEvictPods`, per node: a node is blocked when one of
//! its pods is covered by more than one PDB (the Eviction API refuses those
//! pods) or by a PDB that allows no eviction now. A node with more pods of
//! a PDB than it allows is not blocked: the drain evicts through the
//! Eviction API, one at a time as the PDB allows. Beyond Karpenter (which
//! checks each command alone), the accounting is run-wide: each graceful
//! decision, and each node already disrupting, uses up per PDB its pods
//! there, at most what the PDB has left, so a later node whose PDB has
//! nothing left is blocked. The nodes of one decision are each checked
//! so, as Karpenter checks a command's candidates: their drains evict one
//! at a time as the PDB allows.

use std::collections::BTreeMap;

use crate::model::{ClusterState, IntOrPercent, Pod, PodDisruptionBudget};

pub(crate) struct Pdbs<'a> {
    pdbs: &'a [PodDisruptionBudget],
    /// Evictions each PDB still allows.
    allowed: Vec<u32>,
    /// Evictions each PDB allowed before this run's decisions.
    initial: Vec<u32>,
    by_namespace: BTreeMap<&'a str, Vec<usize>>,
}

impl<'a> Pdbs<'a> {
    pub fn new(state: &'a ClusterState) -> Pdbs<'a> {
        let mut by_namespace: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, p) in state.pdbs.iter().enumerate() {
            by_namespace
                .entry(p.namespace.as_str())
                .or_default()
                .push(i);
        }
        let mut selected = vec![0usize; state.pdbs.len()];
        if state.pdbs.iter().any(|p| p.disruptions_allowed.is_none()) {
            for pod in state.nodes.iter().flat_map(|n| &n.pods) {
                if pod.terminating {
                    continue;
                }
                for &i in by_namespace
                    .get(pod.namespace.as_str())
                    .into_iter()
                    .flatten()
                {
                    if state.pdbs[i].selector.matches(&pod.labels) {
                        selected[i] += 1;
                    }
                }
            }
        }
        let allowed: Vec<u32> = state
            .pdbs
            .iter()
            .zip(&selected)
            .map(|(p, &n)| allowance(p, n))
            .collect();
        Pdbs {
            pdbs: &state.pdbs,
            initial: allowed.clone(),
            allowed,
            by_namespace,
        }
    }

    fn covering(&self, pod: &Pod) -> Vec<usize> {
        self.by_namespace
            .get(pod.namespace.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|&i| self.pdbs[i].selector.matches(&pod.labels))
            .collect()
    }

    /// Why evicting `pods` would be refused now, naming the PDB and a
    /// pod: a pod covered by more than one PDB, or by a PDB with no
    /// allowance left (decisions of this run may have used it up).
    pub fn blocker<'p>(&self, pods: impl IntoIterator<Item = &'p Pod>) -> Option<String> {
        for pod in pods {
            let cover = self.covering(pod);
            if cover.len() > 1 {
                let names: Vec<String> = cover.iter().map(|&i| self.pdbs[i].key()).collect();
                return Some(format!(
                    "pod {} is selected by more than one PodDisruptionBudget ({}); the Eviction API refuses to evict it",
                    pod.key(),
                    names.join(", ")
                ));
            }
            if let Some(&i) = cover.first() {
                if self.allowed[i] == 0 {
                    return Some(self.refusal(i, pod));
                }
            }
        }
        None
    }

    /// Why PDB `i` (no allowance left) refuses to evict `pod` now.
    fn refusal(&self, i: usize, pod: &Pod) -> String {
        let (key, left, first) = (self.pdbs[i].key(), self.allowed[i], self.initial[i]);
        let used = first.saturating_sub(left);
        let spent = if used > 0 {
            format!(" (decisions of this run evict {used} of the {first} it allowed)")
        } else {
            String::new()
        };
        format!(
            "PodDisruptionBudget {key} allows no more disruptions{spent} (pod {})",
            pod.key()
        )
    }

    /// Whether the PDBs hold `pod` whatever their allowance (Karpenter's
    /// "fully blocking"): more than one covers it (the Eviction API refuses
    /// it), or one whose spec allows no disruption (`maxUnavailable: 0` or
    /// `"0%"`, `minAvailable: "100%"`). No capacity is made for such a pod.
    pub fn fully_block(&self, pod: &Pod) -> bool {
        let cover = self.covering(pod);
        cover.len() > 1
            || cover.first().is_some_and(|&i| {
                let p = &self.pdbs[i];
                matches!(
                    p.max_unavailable,
                    Some(IntOrPercent::Int(0) | IntOrPercent::Percent(0))
                ) || matches!(p.min_available, Some(IntOrPercent::Percent(100)))
            })
    }

    /// Use up the allowances of the PDBs covering `pods` (evicted): each
    /// by its pods among them, at most to zero.
    pub fn consume<'p>(&mut self, pods: impl IntoIterator<Item = &'p Pod>) {
        for pod in pods {
            for i in self.covering(pod) {
                self.allowed[i] = self.allowed[i].saturating_sub(1);
            }
        }
    }
}

/// Evictions a PDB allows with `selected` healthy pods.
fn allowance(p: &PodDisruptionBudget, selected: usize) -> u32 {
    if let Some(a) = p.disruptions_allowed {
        return a;
    }
    let n = if let Some(max) = p.max_unavailable {
        max.of(selected, true)
    } else if let Some(min) = p.min_available {
        selected.saturating_sub(min.of(selected, true))
    } else {
        selected
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IntOrPercent, LabelSelector, Node, PodTemplate};

    fn pod(ns: &str, name: &str, app: &str) -> Pod {
        Pod {
            name: name.into(),
            ..Pod::from(PodTemplate {
                namespace: ns.into(),
                labels: [("app".to_string(), app.to_string())].into(),
                ..PodTemplate::default()
            })
        }
    }

    fn pdb(
        name: &str,
        app: &str,
        min: Option<IntOrPercent>,
        max: Option<IntOrPercent>,
    ) -> PodDisruptionBudget {
        PodDisruptionBudget {
            namespace: "default".into(),
            name: name.into(),
            selector: LabelSelector {
                match_labels: [("app".to_string(), app.to_string())].into(),
                match_expressions: vec![],
            },
            min_available: min,
            max_unavailable: max,
            disruptions_allowed: None,
        }
    }

    fn state(pods: Vec<Pod>, pdbs: Vec<PodDisruptionBudget>) -> ClusterState {
        ClusterState {
            nodes: vec![Node {
                name: "n".into(),
                pods,
                ..Node::default()
            }],
            pdbs,
            ..ClusterState::default()
        }
    }

    #[test]
    fn allowances() {
        use IntOrPercent::*;
        let three = vec![
            pod("default", "a", "web"),
            pod("default", "b", "web"),
            pod("default", "c", "web"),
        ];
        // (min, max, status, allowed with three healthy pods)
        let cases = [
            (Some(Int(3)), None, None, 0),
            (Some(Int(2)), None, None, 1),
            (Some(Percent(50)), None, None, 1), // ceil(1.5) = 2 must stay
            (None, Some(Int(1)), None, 1),
            (None, Some(Percent(10)), None, 1), // ceil(0.3) = 1
            (None, Some(Int(0)), None, 0),
            (None, None, None, 3),
            (Some(Int(0)), None, Some(0), 0), // the status wins
        ];
        for (min, max, status, want) in cases {
            let mut b = pdb("web", "web", min, max);
            b.disruptions_allowed = status;
            let s = state(three.clone(), vec![b]);
            let p = Pdbs::new(&s);
            assert_eq!(p.allowed[0], want, "{min:?} {max:?} {status:?}");
        }
    }

    #[test]
    fn blocks_names_the_budget_and_is_used_up() {
        let pods = vec![pod("default", "a", "web"), pod("default", "b", "web")];
        let s = state(
            pods.clone(),
            vec![pdb("web-pdb", "web", None, Some(IntOrPercent::Int(1)))],
        );
        let mut p = Pdbs::new(&s);
        // Both pods on one node under an allowance of one: not blocked
        // (the drain evicts them one at a time).
        assert_eq!(p.blocker(&pods), None);
        assert_eq!(p.blocker(&pods[..1]), None);
        p.consume(&pods[..1]);
        let why = p.blocker(&pods[1..]).unwrap_or_default();
        assert!(
            why.contains("default/web-pdb") && why.contains("default/b"),
            "{why}"
        );
        // Another namespace's pod with the same labels is not covered.
        assert_eq!(p.blocker(&[pod("other", "x", "web")]), None);
    }

    #[test]
    fn a_node_is_blocked_only_by_a_pdb_with_nothing_left() {
        // (allowed, pods per node of the PDB): a node alone is blocked
        // exactly when it holds pods of a PDB that allows no eviction,
        // however many of its pods that PDB covers.
        let cases: [(u32, &[usize]); 5] = [
            (1, &[1, 1, 1]),
            (1, &[2, 1]),
            (2, &[3, 1]),
            (0, &[1, 0]),
            (0, &[2, 1]),
        ];
        for (allowed, per_node) in cases {
            let nodes: Vec<Vec<Pod>> = per_node
                .iter()
                .enumerate()
                .map(|(n, &k)| {
                    (0..k)
                        .map(|j| pod("default", &format!("n{n}p{j}"), "web"))
                        .collect()
                })
                .collect();
            let all: Vec<Pod> = nodes.iter().flatten().cloned().collect();
            let s = state(
                all,
                vec![pdb("web", "web", None, Some(IntOrPercent::Int(allowed)))],
            );
            let p = Pdbs::new(&s);
            for (n, &k) in nodes.iter().zip(per_node) {
                let why = p.blocker(n);
                assert_eq!(
                    why.is_some(),
                    k > 0 && allowed == 0,
                    "{per_node:?}: {why:?}"
                );
            }
        }
    }

    #[test]
    fn an_allowance_used_by_this_run_is_named() {
        let pods = vec![pod("default", "a", "web"), pod("default", "b", "web")];
        let mut b = pdb("web-pdb", "web", None, None);
        b.disruptions_allowed = Some(1);
        let s = state(pods.clone(), vec![b]);
        let mut p = Pdbs::new(&s);
        p.consume(&pods[..1]);
        let why = p.blocker(&pods[1..]).unwrap_or_default();
        assert!(
            why.contains("default/web-pdb") && why.contains("this run evict 1 of the 1"),
            "{why}"
        );
    }

    #[test]
    fn two_budgets_on_one_pod_block() {
        let pods = vec![pod("default", "a", "web")];
        let s = state(
            pods.clone(),
            vec![
                pdb("one", "web", None, Some(IntOrPercent::Int(5))),
                pdb("two", "web", None, Some(IntOrPercent::Int(5))),
            ],
        );
        let why = Pdbs::new(&s).blocker(&pods).unwrap_or_default();
        assert!(why.contains("more than one"), "{why}");
    }
}
