//! Failures you can see: the EMF metrics each stage's handler emits for a
//! known run over the simulator (intake → schedule → launch → sweep, an
//! emptied cluster the disrupt stage scales down, an out-of-capacity
//! launch, dropped and failed events), and the template's
//! alarms, which must watch metrics the code emits (names read from
//! `flotilla_lambda::metrics`, so renaming one breaks this test).

use std::collections::BTreeSet;
use std::sync::Arc;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_core::catalog::CapacityType;
use flotilla_lambda::metrics::{self as m, dropped, Metrics};
use flotilla_ports::{Clock, PortError};
use flotilla_service::records::NodeClaimState;
use flotilla_sim::{Faults, MemStore};
use flotilla_tests::{
    bridge, events_dir, repo_root as root, sam_template as template, sample_batch, sim_ports,
    url_request, yaml_get as get, SimPorts,
};
use serde_json::{json, Value};
use serde_yaml_ng::Value as Yaml;

type Ports = SimPorts<Arc<MemStore>>;

const CLUSTER: &str = "demo";

fn ports(store: MemStore) -> Ports {
    let mut p = sim_ports(Arc::new(store), CLUSTER);
    // Whatever the default access rule, the sample's caller may post for
    // the cluster.
    let caller = url_request("GET", "/", None)
        .request_context
        .authorizer
        .and_then(|a| a.iam)
        .and_then(|i| i.user_arn)
        .expect("the sample request names its caller");
    p.access = flotilla_lambda::access_from(Some(&json!({ CLUSTER: [caller] }).to_string()))
        .expect("access rules");
    p
}

fn sample(name: &str) -> EventBridgeEvent<Value> {
    let text = std::fs::read_to_string(events_dir().join(name)).expect("sample event");
    serde_json::from_str(&text).expect("EventBridge event")
}

async fn post(p: &Ports, body: String) -> (i64, Metrics) {
    let (r, metrics) =
        flotilla_fn_intake::handle_measured(p, &url_request("POST", "/batches", Some(body))).await;
    (r.status_code, metrics)
}

async fn schedule(p: &Ports, ev: &EventBridgeEvent<Value>) -> Metrics {
    let clock = p.clock.clone();
    let (out, metrics) = flotilla_fn_schedule::handle_measured(p, ev, move |ms| {
        clock.advance_millis(i64::try_from(ms).unwrap_or(i64::MAX));
        std::future::ready(())
    })
    .await;
    out.expect("schedule");
    metrics
}

async fn launch(p: &Ports, ev: &EventBridgeEvent<Value>) -> Metrics {
    let (out, metrics) = flotilla_fn_launch::handle_measured(p, ev).await;
    out.expect("launch");
    metrics
}

/// Deliver what is on the bus of `detail_type` to `f`; the metrics of each
/// invocation.
async fn deliver(p: &Ports, detail_type: &str) -> Vec<Metrics> {
    let mut out = Vec::new();
    for e in p.bus.take() {
        assert_eq!(e.detail_type, detail_type, "unexpected event on the bus");
        let ev = bridge(&e);
        out.push(match detail_type {
            "BatchAccepted" => schedule(p, &ev).await,
            "NodeClaimsPlanned" => launch(p, &ev).await,
            other => panic!("no stage for {other}"),
        });
    }
    assert!(!out.is_empty(), "no {detail_type} on the bus");
    out
}

fn total(ms: &[Metrics], name: &str) -> f64 {
    ms.iter().filter_map(|x| x.get(name)).sum()
}

fn total_reason(ms: &[Metrics], name: &str, reason: &str) -> f64 {
    ms.iter().filter_map(|x| x.get_reason(name, reason)).sum()
}

fn pending_pods(batch: &Value) -> usize {
    batch["documents"]
        .as_array()
        .map_or(0, |d| d.iter().filter(|d| d["kind"] == "Pod").count())
}

async fn claims(p: &Ports) -> Vec<flotilla_service::records::NodeClaimRecord> {
    flotilla_service::schedule::node_claims(&p.store, CLUSTER)
        .await
        .expect("NodeClaims")
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

#[tokio::test]
async fn every_stage_reports_its_figures_for_a_known_batch() {
    let p = ports(MemStore::new());
    let batch = sample_batch(CLUSTER, CLUSTER, 6);

    let (status, intake) = post(&p, batch.to_string()).await;
    assert_eq!(status, 202);
    assert_eq!(intake.get(m::BATCHES_ACCEPTED), Some(1.0));
    assert_eq!(intake.get(m::BATCHES_REFUSED), Some(0.0));
    assert_eq!(intake.documents(0)[0][m::CLUSTER_ID], CLUSTER);
    let (status, refused) = post(&p, "{".into()).await;
    assert_eq!(status, 400);
    assert_eq!(
        refused.get_reason(m::BATCHES_REFUSED, "BadRequest"),
        Some(1.0)
    );
    assert_eq!(refused.get(m::ERRORS), Some(0.0));

    // schedule: every pending pod planned, onto the NodeClaims it stored;
    // its latency is the batching window it waited (on the clock port).
    let scheduled = deliver(&p, "BatchAccepted").await;
    let planned = claims(&p).await;
    assert!(!planned.is_empty());
    assert_eq!(
        total(&scheduled, m::PODS_PLANNED),
        pending_pods(&batch) as f64
    );
    assert_eq!(total(&scheduled, m::PODS_UNSCHEDULABLE), 0.0);
    assert_eq!(
        total(&scheduled, m::NODE_CLAIMS_PLANNED),
        planned.len() as f64
    );
    assert!(
        total(&scheduled, m::LATENCY) >= p.config.batch_idle_ms as f64,
        "{scheduled:?}"
    );

    // launch: each NodeClaim launched, nothing failed, no ICE.
    let launched = deliver(&p, "NodeClaimsPlanned").await;
    let live = claims(&p).await;
    let n_launched = live
        .iter()
        .filter(|c| c.state == NodeClaimState::Launched)
        .count();
    assert_eq!(n_launched, planned.len());
    assert_eq!(total(&launched, m::NODE_CLAIMS_LAUNCHED), n_launched as f64);
    assert_eq!(total(&launched, m::NODE_CLAIMS_FAILED), 0.0);
    assert_eq!(total(&launched, m::ICE_HITS), 0.0);
    assert_eq!(total(&launched, m::ERRORS), 0.0);

    // sweep, 16 minutes on: no node registered, so every NodeClaim timed
    // out and its instance was terminated.
    p.clock.advance_secs(16 * 60);
    let (out, swept) = flotilla_fn_sweep::handle_measured(&p, &sample("sweep-schedule.json")).await;
    let report = out.expect("sweep");
    let timeouts = report["registrationTimeouts"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(timeouts, n_launched, "{report}");
    assert_eq!(swept.get(m::REGISTRATION_TIMEOUTS), Some(timeouts as f64));
    assert!(swept.get(m::INSTANCES_TERMINATED).unwrap_or(0.0) >= timeouts as f64);
    assert_eq!(swept.get(m::RESERVATION_SLOTS_USED), Some(0.0));
    assert_eq!(swept.get(m::EVENTS_DROPPED), Some(0.0));

    // Each invocation's lines are EMF documents of its stage.
    for (x, stage) in [
        (&intake, "intake"),
        (&scheduled[0], "schedule"),
        (&launched[0], "launch"),
        (&swept, "sweep"),
    ] {
        for doc in x.documents(p.clock.now_millis()) {
            assert_eq!(doc[m::STAGE], stage);
            assert_eq!(
                doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                m::NAMESPACE
            );
        }
    }
}

#[tokio::test]
async fn a_launch_out_of_capacity_reports_ice_hits_and_failures_by_reason() {
    let p = ports(MemStore::new());
    // One instance type, spot only, and no spot capacity for it anywhere.
    let mut batch = sample_batch(CLUSTER, CLUSTER, 2);
    batch["documents"][0]["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
    ]);
    let zones: BTreeSet<String> = p.ec2.subnets().into_iter().map(|s| s.zone).collect();
    for z in &zones {
        p.ec2.set_capacity("m5.large", z, CapacityType::Spot, 0);
    }
    assert_eq!(post(&p, batch.to_string()).await.0, 202);
    deliver(&p, "BatchAccepted").await;
    let planned = claims(&p).await.len();
    assert!(planned > 0);

    let launched = deliver(&p, "NodeClaimsPlanned").await;
    assert_eq!(total(&launched, m::NODE_CLAIMS_LAUNCHED), 0.0);
    assert_eq!(total(&launched, m::NODE_CLAIMS_FAILED), planned as f64);
    assert_eq!(
        total_reason(&launched, m::NODE_CLAIMS_FAILED, "InsufficientCapacity"),
        planned as f64
    );
    let ice = total(&launched, m::ICE_HITS);
    assert!(
        ice >= 1.0 && ice <= zones.len() as f64 * planned as f64,
        "{ice}"
    );
    // The failure is a figure, not an error: the invocation succeeded.
    assert_eq!(total(&launched, m::ERRORS), 0.0);
}

#[tokio::test]
async fn events_that_are_dropped_or_fail_are_counted() {
    let p = ports(MemStore::new());
    let mut foreign = sample("batch-accepted.json");
    foreign.source = "evil".into();
    let dropped_by = |x: &Metrics, reason: &str| x.get_reason(m::EVENTS_DROPPED, reason);

    let s = schedule(&p, &foreign).await;
    assert_eq!(dropped_by(&s, dropped::UNREADABLE), Some(1.0));
    assert_eq!(s.get(m::EVENTS_DROPPED), Some(1.0));
    assert_eq!(s.get(m::ERRORS), Some(0.0));

    let l = launch(&p, &sample("batch-accepted.json")).await;
    assert_eq!(dropped_by(&l, dropped::NOT_FOR_STAGE), Some(1.0));
    // NodeClaims of a batch whose launch context is gone: never launchable.
    let l = launch(&p, &sample("node-claims-planned.json")).await;
    assert_eq!(dropped_by(&l, dropped::FAILED), Some(1.0));

    let mut s3 = sample("sweep-schedule.json");
    s3.source = "aws.s3".into();
    let (_, w) = flotilla_fn_sweep::handle_measured(&p, &s3).await;
    assert_eq!(dropped_by(&w, dropped::NOT_FOR_STAGE), Some(1.0));
    // Disruption runs on its schedule only: Flotilla's own events are not
    // for it.
    let (out, d) = flotilla_fn_disrupt::handle_measured(&p, &sample("batch-accepted.json")).await;
    assert!(out.is_ok());
    assert_eq!(dropped_by(&d, dropped::NOT_FOR_STAGE), Some(1.0));
    assert_eq!(d.get(m::DISRUPTIONS_STARTED), None, "nothing ran");

    // A retryable failure fails the invocation, and counts as an error.
    let faults = Faults::new();
    let p = ports(MemStore::with_faults(faults.clone()));
    faults.fail_next(
        flotilla_sim::ops::STORE_QUERY,
        PortError::Throttled("slow down".into()),
    );
    let (out, w) = flotilla_fn_sweep::handle_measured(&p, &sample("sweep-schedule.json")).await;
    assert!(out.is_err());
    assert_eq!(w.get(m::ERRORS), Some(1.0));
    assert_eq!(w.get(m::EVENTS_DROPPED), Some(0.0));
    // The same for a disruption run that cannot read the cluster registry.
    faults.fail_next(
        flotilla_sim::ops::STORE_QUERY,
        PortError::Throttled("slow down".into()),
    );
    let (out, d) = flotilla_fn_disrupt::handle_measured(&p, &sample("sweep-schedule.json")).await;
    assert!(out.is_err(), "{out:?}");
    assert_eq!(d.get(m::ERRORS), Some(1.0));
    assert_eq!(d.get(m::EVENTS_DROPPED), Some(0.0));
}

// ---------------------------------------------------------------------------
// The template's alarms.

/// `!Ref X` as `Ref:X`, `!GetAtt X.Y` as `GetAtt:X.Y`, strings as they are.
fn text(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Tagged(t) => format!(
            "{}:{}",
            t.tag.to_string().trim_start_matches('!'),
            text(&t.value)
        ),
        other => serde_yaml_ng::to_string(other).unwrap_or_default(),
    }
}

/// A watched metric: namespace, name, dimensions (name=value, sorted).
type Watched = (String, String, Vec<String>);

fn metric(props: &Yaml) -> Watched {
    let dims = get(props, "Dimensions")
        .and_then(Yaml::as_sequence)
        .map(|d| {
            let mut d: Vec<String> = d
                .iter()
                .map(|x| {
                    let name = get(x, "Name").map(text).unwrap_or_default();
                    let value = get(x, "Value").map(text).unwrap_or_default();
                    format!("{name}={value}")
                })
                .collect();
            d.sort();
            d
        })
        .unwrap_or_default();
    (
        get(props, "Namespace").map(text).unwrap_or_default(),
        get(props, "MetricName").map(text).unwrap_or_default(),
        dims,
    )
}

/// Each alarm's logical id and the metrics it watches (one, or each
/// MetricStat of a metric-math alarm).
fn alarms(t: &Yaml) -> Vec<(String, Yaml, Vec<Watched>)> {
    let resources = get(t, "Resources")
        .and_then(Yaml::as_mapping)
        .expect("Resources");
    let mut out = Vec::new();
    for (id, r) in resources {
        if get(r, "Type").and_then(Yaml::as_str) != Some("AWS::CloudWatch::Alarm") {
            continue;
        }
        let props = get(r, "Properties").expect("Properties").clone();
        let watched = match get(&props, "Metrics").and_then(Yaml::as_sequence) {
            Some(list) => list
                .iter()
                .filter_map(|q| get(q, "MetricStat").and_then(|s| get(s, "Metric")))
                .map(metric)
                .collect(),
            None => vec![metric(&props)],
        };
        out.push((text(id), props, watched));
    }
    out
}

/// The (name, dimensions) of every metric the stages emit, from one
/// invocation of each handler that reports every metric its stage has.
async fn emitted() -> BTreeSet<(String, Vec<String>)> {
    let p = ports(MemStore::new());
    let mut all = Vec::new();
    let (_, intake) = post(&p, sample_batch(CLUSTER, CLUSTER, 2).to_string()).await;
    all.push(intake);
    all.extend(deliver(&p, "BatchAccepted").await);
    all.extend(deliver(&p, "NodeClaimsPlanned").await);
    let (_, swept) = flotilla_fn_sweep::handle_measured(&p, &sample("sweep-schedule.json")).await;
    all.push(swept);
    let (_, disrupted) =
        flotilla_fn_disrupt::handle_measured(&p, &sample("sweep-schedule.json")).await;
    all.push(disrupted);
    let mut set = BTreeSet::new();
    for x in &all {
        for doc in x.documents(0) {
            let directive = &doc["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], m::NAMESPACE);
            let dims: Vec<&str> = directive["Dimensions"][0]
                .as_array()
                .expect("dimension set")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let mut values: Vec<String> = dims
                .iter()
                .map(|d| format!("{d}={}", doc[*d].as_str().unwrap_or_default()))
                .collect();
            values.sort();
            for def in directive["Metrics"].as_array().expect("metrics") {
                let name = def["Name"].as_str().unwrap_or_default().to_string();
                set.insert((name, values.clone()));
            }
        }
    }
    set
}

#[tokio::test]
async fn the_alarms_watch_what_the_code_emits_and_notify_the_optional_topic() {
    let t = template();
    let alarms = alarms(&t);
    let emitted = emitted().await;
    let stage = |s: &str| vec![format!("{}={s}", m::STAGE)];

    // Every Flotilla metric an alarm watches is emitted, by that dimension set.
    let mut watched_flotilla = BTreeSet::new();
    for (id, _, watched) in &alarms {
        for (ns, name, dims) in watched {
            assert!(!name.is_empty(), "{id}: no MetricName");
            if ns == m::NAMESPACE {
                assert!(
                    emitted.contains(&(name.clone(), dims.clone())),
                    "{id} watches {name} {dims:?}, which no stage emits: {emitted:#?}"
                );
                watched_flotilla.insert((name.clone(), dims.clone()));
            }
        }
    }
    // The alarms the operations guide describes.
    for (name, dims) in [
        (m::REGISTRATION_TIMEOUTS, stage("sweep")),
        (m::TERMINATION_ERRORS, stage("sweep")),
        (m::NODE_CLAIMS_FAILED, stage("launch")),
        (m::EVENTS_DROPPED, stage("schedule")),
        (m::EVENTS_DROPPED, stage("launch")),
        (m::EVENTS_DROPPED, stage("sweep")),
        (m::EVENTS_DROPPED, stage("disrupt")),
        (m::DISRUPTIONS_ABANDONED, stage("disrupt")),
        (m::DISRUPTION_ERRORS, stage("disrupt")),
        (m::ERRORS, stage("intake")),
    ] {
        assert!(
            watched_flotilla.contains(&(name.to_string(), dims.clone())),
            "no alarm on {name} {dims:?}"
        );
    }
    let watches = |ns: &str, name: &str, dim: String| {
        alarms.iter().any(|(_, _, w)| {
            w.iter()
                .any(|x| x.0 == ns && x.1 == name && x.2 == [dim.clone()])
        })
    };
    for q in ["ScheduleDlq", "LaunchDlq", "SweepDlq", "DisruptDlq"] {
        assert!(
            watches(
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                format!("QueueName=GetAtt:{q}.QueueName")
            ),
            "no alarm on the depth of {q}"
        );
    }
    for f in ["Intake", "Schedule", "Launch", "Sweep", "Disrupt"] {
        assert!(
            watches("AWS/Lambda", "Errors", format!("FunctionName=Ref:{f}")),
            "no alarm on the errors of {f}"
        );
    }
    // The stage whose run time grows with the cluster: throttled or near
    // its timeout.
    for metric in ["Throttles", "Duration"] {
        assert!(
            watches("AWS/Lambda", metric, "FunctionName=Ref:Disrupt".to_string()),
            "no alarm on the {metric} of Disrupt"
        );
    }

    // Every alarm notifies AlarmTopicArn when set, and nothing otherwise.
    let topic = get(get(&t, "Parameters").expect("Parameters"), "AlarmTopicArn")
        .expect("parameter AlarmTopicArn");
    assert_eq!(get(topic, "Default").map(text).as_deref(), Some(""));
    for (id, props, _) in &alarms {
        for key in ["AlarmActions", "OKActions"] {
            let v = get(props, key).map(text).unwrap_or_default();
            assert!(
                v.starts_with("If:") && v.contains("HasAlarmTopic") && v.contains("AlarmTopicArn"),
                "{id}.{key}: {v}"
            );
        }
        assert_eq!(
            get(props, "TreatMissingData").map(text).as_deref(),
            Some("notBreaching"),
            "{id}"
        );
    }
}

#[test]
fn active_tracing_comes_with_the_permission_to_send_traces() {
    let t = template();
    let tracing = get(get(&t, "Globals").expect("Globals"), "Function")
        .and_then(|f| get(f, "Tracing"))
        .map(text);
    assert_eq!(tracing.as_deref(), Some("Active"));
    let resources = get(&t, "Resources").expect("Resources");
    for f in ["Intake", "Schedule", "Launch", "Sweep", "Disrupt"] {
        let role = get(get(resources, f).expect("function"), "Properties")
            .and_then(|p| get(p, "Role"))
            .map(text)
            .expect("Role");
        let role = role
            .trim_start_matches("GetAtt:")
            .trim_end_matches(".Arn")
            .to_string();
        let policies = get(get(resources, &role).expect("role"), "Properties")
            .and_then(|p| get(p, "Policies"))
            .map(|p| serde_yaml_ng::to_string(p).unwrap_or_default())
            .unwrap_or_default();
        for action in ["xray:PutTraceSegments", "xray:PutTelemetryRecords"] {
            assert!(policies.contains(action), "{role} lacks {action}");
        }
    }
}

#[tokio::test]
async fn the_dashboard_shows_metrics_the_code_emits() {
    let text = std::fs::read_to_string(root().join("docs/dashboard.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let emitted = emitted().await;
    let mut shown = 0;
    for w in dashboard["widgets"].as_array().expect("widgets") {
        for line in w["properties"]["metrics"].as_array().expect("metrics") {
            let parts: Vec<&str> = line
                .as_array()
                .expect("line")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            match parts.as_slice() {
                [ns, name, dim, value] if *ns == m::NAMESPACE => {
                    let key = (name.to_string(), vec![format!("{dim}={value}")]);
                    assert!(
                        emitted.contains(&key),
                        "the dashboard shows {key:?}, never emitted"
                    );
                    shown += 1;
                }
                _ => {}
            }
            let expression = line[0]["expression"].as_str().unwrap_or_default();
            if expression.contains(&format!("{{{},", m::NAMESPACE)) {
                let name = expression
                    .split("MetricName=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap_or_default();
                assert!(m::ALL.contains(&name), "the dashboard searches {name}");
                shown += 1;
            }
        }
    }
    // Every metric appears somewhere on the dashboard.
    for name in m::ALL {
        assert!(
            text.contains(&format!("\"{name}\"")) || text.contains(&format!("\\\"{name}\\\"")),
            "{name} is not on the dashboard"
        );
    }
    assert!(shown > m::ALL.len());
}
