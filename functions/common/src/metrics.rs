//! CloudWatch metrics of the stages, in the Embedded Metric Format (EMF).
//!
//! Each invocation collects its figures in a [`Metrics`] and prints them as
//! JSON lines on stdout (one per dimension set; usually one, plus one per
//! failure reason). Lambda ships stdout to CloudWatch Logs, which turns EMF
//! lines into metrics of namespace [`NAMESPACE`]: no `PutMetricData` call,
//! no extra IAM permission, nothing to fail.
//!
//! Dimensions stay few so that the metric count is bounded: every figure
//! by [`STAGE`] (`intake`, `schedule`, `launch`, `sweep`, `disrupt`), and the figures
//! that have a reason also by [`STAGE`] + [`REASON`] (bounded, sanitized
//! codes). The cluster id and the batch id are properties (searchable with
//! Logs Insights), never dimensions. `docs/operations.md` lists the metrics,
//! the alarms on them, and the queries an operator uses.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Map, Value};

/// The CloudWatch namespace of every Flotilla metric.
pub const NAMESPACE: &str = "Flotilla";
/// Dimension: the stage ([`Stage::as_str`]).
pub const STAGE: &str = "Stage";
/// Dimension: why (a bounded code, see [`reason_code`]).
pub const REASON: &str = "Reason";
/// Property (not a dimension): the cluster id.
pub const CLUSTER_ID: &str = "ClusterId";
/// Property (not a dimension): the batch id.
pub const BATCH_ID: &str = "BatchId";

/// intake: batches accepted (202).
pub const BATCHES_ACCEPTED: &str = "BatchesAccepted";
/// intake: batches refused (4xx/5xx), also by reason.
pub const BATCHES_REFUSED: &str = "BatchesRefused";
/// schedule: pending pods the plan placed (on new NodeClaims or free room).
pub const PODS_PLANNED: &str = "PodsPlanned";
/// schedule: pending pods no NodePool can take.
pub const PODS_UNSCHEDULABLE: &str = "PodsUnschedulable";
/// schedule: NodeClaims planned and persisted.
pub const NODE_CLAIMS_PLANNED: &str = "NodeClaimsPlanned";
/// launch: NodeClaims that got an instance.
pub const NODE_CLAIMS_LAUNCHED: &str = "NodeClaimsLaunched";
/// launch: NodeClaims given up, also by reason.
pub const NODE_CLAIMS_FAILED: &str = "NodeClaimsFailed";
/// launch: offerings CreateFleet reported out of capacity (ICE).
pub const ICE_HITS: &str = "IceHits";
/// sweep: NodeClaims whose node did not register in time (instance
/// terminated).
pub const REGISTRATION_TIMEOUTS: &str = "RegistrationTimeouts";
/// sweep: instances terminated (registration timeouts and leaks);
/// disrupt: the instances of disrupted nodes, terminated once drained.
pub const INSTANCES_TERMINATED: &str = "InstancesTerminated";
/// sweep, disrupt: terminations EC2 refused or that failed (tried again by
/// the next run; the instance bills meanwhile).
pub const TERMINATION_ERRORS: &str = "TerminationErrors";
/// sweep: capacity reservation slots held by live NodeClaims (a gauge,
/// emitted by full sweeps only).
pub const RESERVATION_SLOTS_USED: &str = "ReservationSlotsUsed";
/// disrupt: decisions started (replacements planned, or the drain begun
/// for a decision without replacements), also by reason (`Empty`,
/// `Underutilized`, `Drifted`, `Expired`, `Interrupted`).
pub const DISRUPTIONS_STARTED: &str = "DisruptionsStarted";
/// disrupt: decisions carried out to the end (old nodes drained, their
/// instances terminated, their NodeClaims ended).
pub const DISRUPTIONS_COMPLETED: &str = "DisruptionsCompleted";
/// disrupt: decisions given up because a replacement failed or never
/// registered (the old nodes are untainted and keep running).
pub const DISRUPTIONS_ABANDONED: &str = "DisruptionsAbandoned";
/// disrupt: candidate nodes that could not be disrupted this run (a
/// PodDisruptionBudget, `karpenter.sh/do-not-disrupt`, a budget, a pod that
/// fits nowhere): a gauge, emitted by runs that looked at the clusters.
pub const DISRUPTIONS_BLOCKED: &str = "DisruptionsBlocked";
/// disrupt: problems a run logged and went on past (a cluster whose state
/// could not be read, a termination EC2 refused); the next run tries again.
pub const DISRUPTION_ERRORS: &str = "DisruptionErrors";
/// every stage: the invocation's duration.
pub const LATENCY: &str = "Latency";
/// every stage: events that can never be processed, logged and dropped
/// (neither Lambda's Errors metric nor a DLQ sees them), also by reason.
pub const EVENTS_DROPPED: &str = "EventsDropped";
/// every stage: invocations that failed (retried by the platform), and
/// intake's 5xx answers.
pub const ERRORS: &str = "Errors";

/// Every metric name, for the template checks (`tests/alarms.rs`).
pub const ALL: &[&str] = &[
    BATCHES_ACCEPTED,
    BATCHES_REFUSED,
    PODS_PLANNED,
    PODS_UNSCHEDULABLE,
    NODE_CLAIMS_PLANNED,
    NODE_CLAIMS_LAUNCHED,
    NODE_CLAIMS_FAILED,
    ICE_HITS,
    REGISTRATION_TIMEOUTS,
    INSTANCES_TERMINATED,
    TERMINATION_ERRORS,
    RESERVATION_SLOTS_USED,
    DISRUPTIONS_STARTED,
    DISRUPTIONS_COMPLETED,
    DISRUPTIONS_ABANDONED,
    DISRUPTIONS_BLOCKED,
    DISRUPTION_ERRORS,
    LATENCY,
    EVENTS_DROPPED,
    ERRORS,
];

/// [`EVENTS_DROPPED`] reasons.
pub mod dropped {
    /// Not one of Flotilla's events, or its detail does not parse.
    pub const UNREADABLE: &str = "Unreadable";
    /// A Flotilla event of a type this stage does not handle (a rule
    /// routes it wrongly).
    pub const NOT_FOR_STAGE: &str = "NotForStage";
    /// Processing failed in a way retrying cannot fix.
    pub const FAILED: &str = "Failed";
}

/// The five stages (their function names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Intake,
    Schedule,
    Launch,
    Sweep,
    Disrupt,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Intake,
        Stage::Schedule,
        Stage::Launch,
        Stage::Sweep,
        Stage::Disrupt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Intake => "intake",
            Stage::Schedule => "schedule",
            Stage::Launch => "launch",
            Stage::Sweep => "sweep",
            Stage::Disrupt => "disrupt",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// Longest [`REASON`] value.
pub const MAX_REASON_LEN: usize = 64;

/// A reason as a dimension value: ASCII letters, digits, `.`, `_` and `-`
/// only (anything else dropped), at most [`MAX_REASON_LEN`] characters,
/// `Unknown` when nothing is left.
pub fn reason_code(reason: &str) -> String {
    let code: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(MAX_REASON_LEN)
        .collect();
    if code.is_empty() {
        "Unknown".into()
    } else {
        code
    }
}

/// The figures of one invocation of one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    stage: Stage,
    values: BTreeMap<&'static str, (f64, Unit)>,
    /// reason → metric → count.
    by_reason: BTreeMap<String, BTreeMap<&'static str, f64>>,
    properties: BTreeMap<&'static str, String>,
}

impl Metrics {
    /// Errors and EventsDropped start at 0, so that every invocation
    /// reports them (alarms see 0, not missing data).
    pub fn new(stage: Stage) -> Self {
        let mut m = Metrics {
            stage,
            values: BTreeMap::new(),
            by_reason: BTreeMap::new(),
            properties: BTreeMap::new(),
        };
        m.count(ERRORS, 0);
        m.count(EVENTS_DROPPED, 0);
        m
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Add `n` to a count (creating it at `n`, so 0 reports a zero).
    pub fn count(&mut self, name: &'static str, n: usize) {
        let n = n as f64;
        self.values
            .entry(name)
            .and_modify(|(v, _)| *v += n)
            .or_insert((n, Unit::Count));
    }

    /// Add `n` to a count, and to its count for `reason` (a [`reason_code`]).
    pub fn count_reason(&mut self, name: &'static str, reason: &str, n: usize) {
        self.count(name, n);
        *self
            .by_reason
            .entry(reason_code(reason))
            .or_default()
            .entry(name)
            .or_insert(0.0) += n as f64;
    }

    /// Set a gauge (a count that is a level, not a sum).
    pub fn gauge(&mut self, name: &'static str, value: usize) {
        self.values.insert(name, (value as f64, Unit::Count));
    }

    /// The invocation took `ms` (negative, from a clock stepping back: 0).
    pub fn latency(&mut self, ms: i64) {
        self.values
            .insert(LATENCY, (ms.max(0) as f64, Unit::Milliseconds));
    }

    /// A property ([`CLUSTER_ID`], [`BATCH_ID`]): logged, not a dimension.
    pub fn property(&mut self, key: &'static str, value: &str) {
        self.properties.insert(key, value.to_string());
    }

    /// The value of a metric (by stage).
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).map(|(v, _)| *v)
    }

    /// The value of a metric for one reason.
    pub fn get_reason(&self, name: &str, reason: &str) -> Option<f64> {
        self.by_reason.get(reason)?.get(name).copied()
    }

    /// The EMF documents: one by [`STAGE`] with every metric, then one by
    /// [`STAGE`] + [`REASON`] per reason.
    pub fn documents(&self, timestamp_ms: i64) -> Vec<Value> {
        let mut docs = Vec::with_capacity(1 + self.by_reason.len());
        let stage_metrics = self.values.iter().map(|(n, (v, u))| (*n, *v, *u));
        docs.push(self.document(timestamp_ms, None, stage_metrics));
        for (reason, metrics) in &self.by_reason {
            let metrics = metrics.iter().map(|(n, v)| (*n, *v, Unit::Count));
            docs.push(self.document(timestamp_ms, Some(reason), metrics));
        }
        docs
    }

    fn document(
        &self,
        timestamp_ms: i64,
        reason: Option<&str>,
        metrics: impl Iterator<Item = (&'static str, f64, Unit)>,
    ) -> Value {
        let mut root = Map::new();
        let mut definitions = Vec::new();
        for (name, value, unit) in metrics {
            definitions.push(json!({"Name": name, "Unit": unit.as_str()}));
            root.insert(name.to_string(), json!(value));
        }
        let dimensions = match reason {
            Some(r) => {
                root.insert(REASON.into(), json!(r));
                json!([[STAGE, REASON]])
            }
            None => json!([[STAGE]]),
        };
        root.insert(STAGE.into(), json!(self.stage.as_str()));
        for (k, v) in &self.properties {
            root.insert((*k).to_string(), json!(v));
        }
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": dimensions,
                    "Metrics": definitions,
                }],
            }),
        );
        Value::Object(root)
    }

    /// [`Self::documents`] as JSON lines.
    pub fn lines(&self, timestamp_ms: i64) -> Vec<String> {
        self.documents(timestamp_ms)
            .iter()
            .map(Value::to_string)
            .collect()
    }

    /// Print the lines on stdout (where Lambda's log capture reads EMF).
    /// A failed write is ignored: metrics never fail an invocation.
    pub fn emit(&self, timestamp_ms: i64) {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for line in self.lines(timestamp_ms) {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded_dimension_values() {
        for (raw, code) in [
            ("InsufficientCapacity", "InsufficientCapacity"),
            (
                "UnauthorizedOperation: you are not",
                "UnauthorizedOperationyouarenot",
            ),
            ("Auth.Failure_x-y", "Auth.Failure_x-y"),
            ("", "Unknown"),
            ("???", "Unknown"),
            ("é", "Unknown"),
        ] {
            assert_eq!(reason_code(raw), code, "{raw:?}");
        }
        assert_eq!(reason_code(&"A".repeat(500)).len(), MAX_REASON_LEN);
    }

    #[test]
    fn documents_follow_the_embedded_metric_format() {
        let mut m = Metrics::new(Stage::Launch);
        m.count(NODE_CLAIMS_LAUNCHED, 2);
        m.count(NODE_CLAIMS_LAUNCHED, 1);
        m.count_reason(NODE_CLAIMS_FAILED, "InsufficientCapacity", 1);
        m.count_reason(NODE_CLAIMS_FAILED, "Unauthorized Operation", 2);
        m.latency(42);
        m.property(CLUSTER_ID, "demo");
        let docs = m.documents(1_800_000_000_000);
        assert_eq!(docs.len(), 3, "{docs:#?}");

        let stage = &docs[0];
        assert_eq!(
            stage["_aws"],
            json!({
                "Timestamp": 1_800_000_000_000_i64,
                "CloudWatchMetrics": [{
                    "Namespace": "Flotilla",
                    "Dimensions": [["Stage"]],
                    "Metrics": [
                        {"Name": "Errors", "Unit": "Count"},
                        {"Name": "EventsDropped", "Unit": "Count"},
                        {"Name": "Latency", "Unit": "Milliseconds"},
                        {"Name": "NodeClaimsFailed", "Unit": "Count"},
                        {"Name": "NodeClaimsLaunched", "Unit": "Count"},
                    ],
                }],
            })
        );
        assert_eq!(stage["Stage"], "launch");
        assert_eq!(stage["ClusterId"], "demo");
        assert_eq!(stage["NodeClaimsLaunched"], 3.0);
        assert_eq!(stage["NodeClaimsFailed"], 3.0);
        assert_eq!(stage["Latency"], 42.0);
        assert_eq!(stage["Errors"], 0.0);
        assert!(stage.get("Reason").is_none());

        // One document per reason, the reason a dimension, the cluster not.
        let ice = &docs[1];
        assert_eq!(
            ice["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stage", "Reason"]])
        );
        assert_eq!(ice["Reason"], "InsufficientCapacity");
        assert_eq!(ice["NodeClaimsFailed"], 1.0);
        assert_eq!(ice["ClusterId"], "demo");
        assert_eq!(docs[2]["Reason"], "UnauthorizedOperation");
        assert_eq!(docs[2]["NodeClaimsFailed"], 2.0);
        assert_eq!(
            m.get_reason(NODE_CLAIMS_FAILED, "UnauthorizedOperation"),
            Some(2.0)
        );

        // Every value a document declares is in it, and each line is one
        // JSON object.
        for d in &docs {
            for def in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .expect("metrics")
            {
                let name = def["Name"].as_str().expect("name");
                assert!(d[name].is_number(), "{name} missing in {d}");
                assert!(ALL.contains(&name), "{name} not in ALL");
            }
        }
        for line in m.lines(0) {
            assert!(!line.contains('\n'));
            assert!(serde_json::from_str::<Value>(&line).is_ok());
        }
    }

    #[test]
    fn every_invocation_reports_errors_and_drops_and_latency_never_goes_negative() {
        let mut m = Metrics::new(Stage::Sweep);
        assert_eq!(m.get(ERRORS), Some(0.0));
        assert_eq!(m.get(EVENTS_DROPPED), Some(0.0));
        m.latency(-5);
        assert_eq!(m.get(LATENCY), Some(0.0));
        m.gauge(RESERVATION_SLOTS_USED, 3);
        m.gauge(RESERVATION_SLOTS_USED, 2);
        assert_eq!(m.get(RESERVATION_SLOTS_USED), Some(2.0));
        assert_eq!(m.documents(0).len(), 1);
        let stages: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(stages, ["intake", "schedule", "launch", "sweep", "disrupt"]);
    }
}
