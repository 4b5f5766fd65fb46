//! Whether a node is Ready and initialized, as Karpenter's disruption
//! controller asks before it touches a node or counts it:
//!
//! - a node that is not initialized (Karpenter's `karpenter.sh/initialized`
//!   label missing on a node Karpenter registered; else a startup taint of
//!   its NodePool, a known ephemeral taint such as
//!   `node.cloudprovider.kubernetes.io/uninitialized`, or a registration
//!   taint still on it) is no candidate of a graceful disruption, receives
//!   no moved pods, and does not count towards its NodePool's budget
//!   (`GetCandidates` / `BuildDisruptionBudgetMapping`);
//! - a node whose `Ready` condition is not `True` is no candidate of a
//!   graceful disruption either (its pods cannot be drained gracefully and
//!   it takes no moved pods), and counts as disrupting against its
//!   NodePool's budget, as Karpenter subtracts NotReady nodes from the
//!   allowance;
//! - forceful reasons (spot interruption, expiry) act on such nodes all
//!   the same, as Karpenter's interruption and expiration controllers do.
//!
//! A node whose document reports no conditions (`Node::ready` `None`) is
//! taken as Ready.

use crate::model::{Node, NodePool};
use crate::scheduler::{registration_taint, EPHEMERAL_TAINTS};

/// Karpenter's label on a node it registered.
pub const REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// Karpenter's label on a node it saw initialized.
pub const INITIALIZED_LABEL: &str = "karpenter.sh/initialized";

/// A node's readiness for disruption, with the sentence saying why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Initialized once, or not known not to be, but `Ready` is not `True`:
    /// counted against its NodePool's budget.
    NotReady(String),
    /// Not initialized yet: not counted at all.
    Uninitialized(String),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready)
    }

    /// Why not, if not ready.
    pub fn why(&self) -> Option<&str> {
        match self {
            Readiness::Ready => None,
            Readiness::NotReady(w) | Readiness::Uninitialized(w) => Some(w),
        }
    }
}

/// The readiness of `node`, whose NodePool is `pool` (its startup taints
/// keep it uninitialized until they are gone).
pub fn readiness(node: &Node, pool: Option<&NodePool>) -> Readiness {
    let karpenter_initialized =
        node.labels.get(INITIALIZED_LABEL).map(String::as_str) == Some("true");
    if node.ready == Some(false) {
        return Readiness::NotReady(format!("node {} is not Ready", node.name));
    }
    if karpenter_initialized {
        return Readiness::Ready;
    }
    if node.labels.get(REGISTERED_LABEL).map(String::as_str) == Some("true") {
        return Readiness::Uninitialized(format!(
            "node {} is not initialized yet (no {INITIALIZED_LABEL} label)",
            node.name
        ));
    }
    let startup = pool.map_or(&[][..], |p| p.startup_taints.as_slice());
    let left = node.taints.iter().find(|t| {
        EPHEMERAL_TAINTS.contains(&t.key.as_str())
            || registration_taint(t)
            || startup
                .iter()
                .any(|s| s.key == t.key && s.effect == t.effect)
    });
    match left {
        Some(t) => Readiness::Uninitialized(format!(
            "node {} is not initialized yet (taint {} still on it)",
            node.name, t.key
        )),
        None => Readiness::Ready,
    }
}

/// The node's NodePool (by its label), for [`readiness`].
pub fn pool_of<'a>(node: &Node, pools: &'a [NodePool]) -> Option<&'a NodePool> {
    let name = node.nodepool()?;
    pools.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels;
    use crate::model::{Taint, TaintEffect};
    use crate::Requirements;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        }
    }

    #[test]
    fn table() {
        let mut pool = NodePool::new("default", Requirements::new());
        pool.startup_taints = vec![taint("example.com/agent-not-ready")];
        type Case<'a> = (
            &'a str,
            Option<bool>,
            &'a [(&'a str, &'a str)],
            &'a [&'a str],
            &'a str,
        );
        // (case, Ready, labels, taints, want: ready / notready / uninit)
        let cases: [Case; 9] = [
            ("no conditions reported", None, &[], &[], "ready"),
            ("Ready", Some(true), &[], &[], "ready"),
            ("NotReady", Some(false), &[], &[], "notready"),
            (
                "NotReady though Karpenter initialized it",
                Some(false),
                &[(INITIALIZED_LABEL, "true")],
                &[],
                "notready",
            ),
            (
                "startup taint left",
                Some(true),
                &[],
                &["example.com/agent-not-ready"],
                "uninit",
            ),
            (
                "cloud provider taint left",
                Some(true),
                &[],
                &["node.cloudprovider.kubernetes.io/uninitialized"],
                "uninit",
            ),
            ("another taint", Some(true), &[], &["team"], "ready"),
            (
                "registered by Karpenter, not initialized",
                Some(true),
                &[(REGISTERED_LABEL, "true")],
                &[],
                "uninit",
            ),
            (
                "initialized by Karpenter, startup taint back",
                Some(true),
                &[(REGISTERED_LABEL, "true"), (INITIALIZED_LABEL, "true")],
                &["example.com/agent-not-ready"],
                "ready",
            ),
        ];
        for (case, ready, node_labels, taints, want) in cases {
            let node = Node {
                name: "n".into(),
                labels: node_labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .chain([(labels::NODEPOOL.to_string(), "default".to_string())])
                    .collect(),
                taints: taints.iter().map(|k| taint(k)).collect(),
                ready,
                ..Node::default()
            };
            let got = match readiness(&node, Some(&pool)) {
                Readiness::Ready => "ready",
                Readiness::NotReady(_) => "notready",
                Readiness::Uninitialized(_) => "uninit",
            };
            assert_eq!(got, want, "{case}");
        }
    }
}
