//! Applying what intake sends back: node patches (registration labels and
//! taints, cordon, relabel) and evictions through the Eviction API, which
//! answers 429 while a PodDisruptionBudget forbids the disruption; the
//! drain then tries again next round until the action's deadline.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kube::Client;
use serde_json::Value;

use crate::metrics::{ActionLabel, KindLabel, Metrics};
use crate::plan::{
    self, Ack, AckOutcome, ClusterView, NodeFacts, Outcome, PendingAction, PodFacts,
};

/// The field manager of the agent's patches.
pub const FIELD_MANAGER: &str = "flotilla-agent";

/// What an eviction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// 429: a PodDisruptionBudget does not allow it now.
    Blocked(String),
    /// The pod is already gone.
    Gone,
}

/// The kube-rs side of applying.
#[derive(Clone)]
pub struct Applier {
    client: Client,
}

impl Applier {
    pub fn new(client: Client) -> Self {
        Applier { client }
    }

    /// JSON merge patch of a node (labels set to `null` are removed).
    pub async fn patch_node(&self, name: &str, patch: &Value) -> Result<(), kube::Error> {
        let api: Api<Node> = Api::all(self.client.clone());
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        api.patch(name, &pp, &Patch::Merge(patch)).await.map(|_| ())
    }

    /// Evict one pod (`POST .../pods/<name>/eviction`).
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<Eviction, kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(Eviction::Blocked(s.message)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Eviction::Gone),
            Err(e) => Err(e),
        }
    }
}

/// An acknowledgement waiting to be sent, with what the metrics need.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingAck {
    pub ack: Ack,
    pub kind: String,
    /// Unix seconds the action was stored.
    pub created_at: i64,
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Round {
    pub registered: usize,
    pub patched: usize,
    pub evicted: usize,
    pub blocked: usize,
    pub errors: usize,
}

/// Remembers, across rounds, which actions were acknowledged (intake stops
/// listing them once it has the ack) and which acks still have to be sent.
#[derive(Debug, Default)]
pub struct ActionRunner {
    /// Acknowledged ids; forgotten once intake no longer lists them.
    acked: HashSet<String>,
    /// Decided but not yet delivered (the POST failed): sent again.
    unsent: HashMap<String, PendingAck>,
}

fn hex_id(v: &Value) -> Option<String> {
    let id = v.get("id")?.as_str()?;
    (!id.is_empty() && id.len() <= 64 && id.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| id.to_string())
}

impl ActionRunner {
    pub fn new() -> Self {
        Self::default()
    }

    /// The acks to send now (new and previously unsent).
    pub fn outbox(&self) -> Vec<PendingAck> {
        let mut v: Vec<PendingAck> = self.unsent.values().cloned().collect();
        v.sort_by(|a, b| a.ack.id.cmp(&b.ack.id));
        v
    }

    /// Intake has the acks: do not send them again.
    pub fn delivered(&mut self, acks: &[PendingAck], metrics: Option<&Metrics>, now_secs: i64) {
        for a in acks {
            if self.unsent.remove(&a.ack.id).is_some() {
                if let Some(m) = metrics {
                    let outcome = match a.ack.outcome {
                        AckOutcome::Done => "done",
                        AckOutcome::Failed => "failed",
                        AckOutcome::Skipped => "skipped",
                    };
                    m.actions
                        .get_or_create(&ActionLabel {
                            kind: a.kind.clone(),
                            outcome: outcome.into(),
                        })
                        .inc();
                    if a.created_at > 0 {
                        m.action_latency
                            .get_or_create(&KindLabel {
                                kind: a.kind.clone(),
                            })
                            .observe((now_secs - a.created_at).max(0) as f64);
                    }
                }
            }
        }
    }

    fn decide(&mut self, ack: PendingAck) {
        tracing::info!(id = %ack.ack.id, kind = %ack.kind, outcome = ?ack.ack.outcome, message = %ack.ack.message, "action finished");
        self.acked.insert(ack.ack.id.clone());
        self.unsent.insert(ack.ack.id.clone(), ack);
    }

    /// One round over a cluster view: registration patches for new nodes,
    /// then each pending action not yet decided. Acks land in
    /// [`ActionRunner::outbox`].
    pub async fn round(
        &mut self,
        view: &ClusterView,
        nodes: &[NodeFacts],
        pods: &[PodFacts],
        now_secs: i64,
        applier: &Applier,
        metrics: Option<&Metrics>,
    ) -> Round {
        let mut round = Round::default();
        for p in plan::plan_registrations(&view.node_claims, nodes) {
            match applier.patch_node(&p.node, &p.patch).await {
                Ok(()) => {
                    round.registered += 1;
                    if let Some(m) = metrics {
                        m.nodes_registered.inc();
                    }
                    tracing::info!(node = %p.node, nodeclaim = %p.node_claim, "node given its NodeClaim's labels and taints");
                }
                Err(e) => {
                    round.errors += 1;
                    tracing::warn!(node = %p.node, error = %e, "registration patch failed; next round retries");
                }
            }
        }

        // Forget acks intake no longer lists (it has them).
        let listed: HashSet<String> = view.actions.iter().filter_map(hex_id).collect();
        self.acked
            .retain(|id| listed.contains(id) || self.unsent.contains_key(id));

        let mut actions = Vec::new();
        for (i, v) in view.actions.iter().enumerate() {
            match serde_json::from_value::<PendingAction>(v.clone()) {
                Ok(a) => actions.push(a),
                Err(e) => {
                    let message = format!("actions[{i}]: {e}");
                    tracing::warn!(error = %message, "malformed action");
                    // Acknowledge what has an id, so it is not listed forever.
                    match hex_id(v) {
                        Some(id) if !self.acked.contains(&id) => self.decide(PendingAck {
                            ack: Ack {
                                id,
                                outcome: AckOutcome::Skipped,
                                message: truncate(&format!("cannot parse the action: {message}")),
                            },
                            kind: "unknown".into(),
                            created_at: 0,
                        }),
                        _ => {}
                    }
                }
            }
        }
        for a in actions {
            if self.acked.contains(&a.id) {
                continue;
            }
            let step = plan::plan_action(&a, nodes, pods, now_secs);
            let kind = serde_json::to_value(step.kind)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            if let (Some(node), Some(patch)) = (&step.node, &step.patch) {
                match applier.patch_node(node, patch).await {
                    Ok(()) => round.patched += 1,
                    Err(e) => {
                        round.errors += 1;
                        tracing::warn!(id = %a.id, node = %node, error = %e, "action patch failed; next round retries");
                        continue;
                    }
                }
            }
            for (ns, name) in &step.evict {
                match applier.evict(ns, name).await {
                    Ok(Eviction::Evicted) => {
                        round.evicted += 1;
                        tracing::info!(id = %a.id, pod = %format!("{ns}/{name}"), "evicted");
                    }
                    Ok(Eviction::Gone) => {}
                    Ok(Eviction::Blocked(why)) => {
                        round.blocked += 1;
                        if let Some(m) = metrics {
                            m.evictions_blocked.inc();
                        }
                        tracing::info!(id = %a.id, pod = %format!("{ns}/{name}"), reason = %why, "eviction refused (PodDisruptionBudget); retrying next round");
                    }
                    Err(e) => {
                        round.errors += 1;
                        tracing::warn!(id = %a.id, pod = %format!("{ns}/{name}"), error = %e, "eviction failed; retrying next round");
                    }
                }
            }
            if let Outcome::Ack(outcome, message) = step.outcome {
                self.decide(PendingAck {
                    ack: Ack {
                        id: a.id.clone(),
                        outcome,
                        message: truncate(&message),
                    },
                    kind,
                    created_at: a.created_at,
                });
            }
        }
        round
    }
}

/// Intake accepts messages of at most 2048 bytes.
fn truncate(s: &str) -> String {
    if s.len() <= 2000 {
        return s.to_string();
    }
    let mut end = 2000;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_on_a_char_boundary_under_intakes_limit() {
        let long = "é".repeat(3000);
        let t = truncate(&long);
        assert!(t.len() <= 2048);
        assert!(t.ends_with("..."));
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn ids_are_read_only_when_hex() {
        assert_eq!(
            hex_id(&serde_json::json!({"id": "ab12"})),
            Some("ab12".into())
        );
        assert_eq!(hex_id(&serde_json::json!({"id": "../x"})), None);
        assert_eq!(hex_id(&serde_json::json!({"id": 3})), None);
    }
}
