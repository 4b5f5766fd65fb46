//! Least privilege: each function's IAM role in `infra/template.yaml` holds
//! exactly the actions its code calls, scoped as tightly as the services
//! allow.
//!
//! The calls are derived from the code, not from a list kept here: every
//! handler (`flotilla_fn_*::handle`) runs over the simulator behind
//! recording ports, through a scenario that drives every port call site of
//! `shared/service` (the test fails when a call site is never reached, so a
//! new call forces the scenario, and therefore the check, to cover it). Each
//! recorded call maps to IAM actions through `flotilla_aws::iam` (the table
//! the AWS adapters are checked against). Then, per function:
//!
//! - the role's DynamoDB / EventBridge / EC2 / IAM actions equal the
//!   recorded calls' actions (an action the code no longer uses fails, and
//!   so does a call the template does not allow);
//! - the only other actions are writing its own log group and its own DLQ;
//! - `Resource: "*"` only for EC2 Describe* calls and the Price List's
//!   `pricing:GetProducts` (no resource-level permissions exist for them);
//!   the table, the bus and the node role are named; EC2 ARNs are
//!   region-scoped;
//! - `ec2:CreateFleet` / `ec2:RunInstances` on instances, volumes and fleets
//!   only with request-tag conditions, launch templates only with the
//!   cluster's resource tag; CreateLaunchTemplate with request tags;
//!   CreateTags only on create; TerminateInstances / DeleteLaunchTemplate
//!   only on resources carrying the cluster tag; and the tags those
//!   conditions require are the tags the code actually sets.
//!
//! The rules that route events are checked too: every sample in `events/`
//! reaches exactly the function that acts on it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest;
use flotilla_aws::iam::{iam_actions, PortCall};
use flotilla_core::catalog::{CapacityType, InstanceTypeInfo};
use flotilla_core::launch::{FleetRequest, FleetResponse, LaunchTemplateConfig};
use flotilla_core::model::CapacityReservation;
use flotilla_ports::{
    Bus, Ec2, Event, Filter, Image, Instance, InstanceState, Item, Key, PortResult, PriceList,
    SecurityGroup, SpotPrice, Store, Subnet, Write,
};
use flotilla_service::intake::Access;
use flotilla_service::records::NodeClaimState;
use flotilla_service::{keys, Config, Ports};
use flotilla_sim::{Ec2Sim, ManualClock, MemBus, MemStore};
use flotilla_tests::{repo_root as root, sam_template as template, yaml_get as get};
use serde_json::{json, Value};
use serde_yaml_ng::Value as Yaml;

// ---------------------------------------------------------------------------
// Recording ports.

/// Call sites (`file:line`) per port call, for one function.
#[derive(Default)]
struct Calls(Mutex<BTreeMap<PortCall, BTreeSet<String>>>);

impl Calls {
    fn note(&self, call: PortCall, at: &Location<'_>) {
        let site = format!("{}:{}", at.file().replace('\\', "/"), at.line());
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(call)
            .or_default()
            .insert(site);
    }

    fn snapshot(&self) -> BTreeMap<PortCall, BTreeSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A port that records every call (and where the code made it) before
/// passing it on.
struct Rec<T> {
    inner: T,
    calls: Arc<Calls>,
    /// The next CreateFleet answers with one surplus instance (EC2
    /// over-filling a fleet), which launch must terminate.
    overfill_next_fleet: AtomicBool,
}

impl<T> Rec<T> {
    fn new(inner: T, calls: Arc<Calls>) -> Self {
        Rec {
            inner,
            calls,
            overfill_next_fleet: AtomicBool::new(false),
        }
    }
}

impl<S: Store> Store for Rec<S> {
    #[track_caller]
    fn get(&self, key: &Key) -> impl Future<Output = PortResult<Option<Item>>> + Send {
        self.calls.note(PortCall::StoreGet, Location::caller());
        self.inner.get(key)
    }
    #[track_caller]
    fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> impl Future<Output = PortResult<Vec<Item>>> + Send {
        self.calls.note(PortCall::StoreQuery, Location::caller());
        self.inner.query(pk, sk_prefix)
    }
    #[track_caller]
    fn write(&self, write: Write) -> impl Future<Output = PortResult<()>> + Send {
        self.calls
            .note(PortCall::of_write(&write), Location::caller());
        self.inner.write(write)
    }
    #[track_caller]
    fn transact(&self, writes: Vec<Write>) -> impl Future<Output = PortResult<()>> + Send {
        let at = Location::caller();
        for w in &writes {
            self.calls.note(PortCall::of_write(w), at);
        }
        self.inner.transact(writes)
    }
}

impl<B: Bus> Bus for Rec<B> {
    #[track_caller]
    fn put(&self, events: Vec<Event>) -> impl Future<Output = PortResult<()>> + Send {
        self.calls.note(PortCall::BusPut, Location::caller());
        self.inner.put(events)
    }
}

impl<P: PriceList> PriceList for Rec<P> {
    #[track_caller]
    fn on_demand_prices(
        &self,
        region: &str,
    ) -> impl Future<Output = PortResult<BTreeMap<String, f64>>> + Send {
        self.calls
            .note(PortCall::PricingGetProducts, Location::caller());
        self.inner.on_demand_prices(region)
    }
}

impl<E: Ec2> Ec2 for Rec<E> {
    #[track_caller]
    fn describe_instance_types(
        &self,
    ) -> impl Future<Output = PortResult<Vec<InstanceTypeInfo>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeInstanceTypes, Location::caller());
        self.inner.describe_instance_types()
    }
    #[track_caller]
    fn describe_instance_type_offerings(
        &self,
    ) -> impl Future<Output = PortResult<Vec<(String, String)>>> + Send {
        self.calls.note(
            PortCall::Ec2DescribeInstanceTypeOfferings,
            Location::caller(),
        );
        self.inner.describe_instance_type_offerings()
    }
    #[track_caller]
    fn describe_spot_prices(&self) -> impl Future<Output = PortResult<Vec<SpotPrice>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeSpotPrices, Location::caller());
        self.inner.describe_spot_prices()
    }
    #[track_caller]
    fn describe_subnets(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Subnet>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeSubnets, Location::caller());
        self.inner.describe_subnets(filters)
    }
    #[track_caller]
    fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<SecurityGroup>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeSecurityGroups, Location::caller());
        self.inner.describe_security_groups(filters)
    }
    #[track_caller]
    fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> impl Future<Output = PortResult<Vec<Image>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeImages, Location::caller());
        self.inner.describe_images(filters, owners)
    }
    #[track_caller]
    fn describe_capacity_reservations(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<CapacityReservation>>> + Send {
        self.calls.note(
            PortCall::Ec2DescribeCapacityReservations,
            Location::caller(),
        );
        self.inner.describe_capacity_reservations(filters)
    }
    #[track_caller]
    fn create_launch_template(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> impl Future<Output = PortResult<()>> + Send {
        self.calls
            .note(PortCall::Ec2CreateLaunchTemplate, Location::caller());
        self.inner.create_launch_template(name, config)
    }
    #[track_caller]
    fn describe_launch_templates(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<String>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeLaunchTemplates, Location::caller());
        self.inner.describe_launch_templates(filters)
    }
    #[track_caller]
    fn delete_launch_template(&self, name: &str) -> impl Future<Output = PortResult<()>> + Send {
        self.calls
            .note(PortCall::Ec2DeleteLaunchTemplate, Location::caller());
        self.inner.delete_launch_template(name)
    }
    #[track_caller]
    fn create_fleet(
        &self,
        request: &FleetRequest,
    ) -> impl Future<Output = PortResult<FleetResponse>> + Send {
        self.calls
            .note(PortCall::Ec2CreateFleet, Location::caller());
        let overfill = self.overfill_next_fleet.swap(false, Ordering::SeqCst);
        async move {
            let mut response = self.inner.create_fleet(request).await?;
            if overfill {
                let mut again = request.clone();
                again.client_token = format!("{}-surplus", request.client_token);
                let extra = self.inner.create_fleet(&again).await?;
                response.instances.extend(extra.instances);
            }
            Ok(response)
        }
    }
    #[track_caller]
    fn describe_instances(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Instance>>> + Send {
        self.calls
            .note(PortCall::Ec2DescribeInstances, Location::caller());
        self.inner.describe_instances(filters)
    }
    #[track_caller]
    fn terminate_instances(&self, ids: &[String]) -> impl Future<Output = PortResult<()>> + Send {
        self.calls
            .note(PortCall::Ec2TerminateInstances, Location::caller());
        self.inner.terminate_instances(ids)
    }
}

// ---------------------------------------------------------------------------
// The world: one simulated region, four functions with their own recorders.

type FnPorts = Ports<Rec<Arc<MemStore>>, Rec<Arc<Ec2Sim>>, Rec<Arc<MemBus>>, Arc<ManualClock>>;

const FUNCTIONS: [&str; 5] = ["intake", "schedule", "launch", "sweep", "disrupt"];
const CLUSTER: &str = "demo";
const RESERVATION: &str = "cr-0123456789abcdef0";

struct World {
    store: Arc<MemStore>,
    ec2: Arc<Ec2Sim>,
    bus: Arc<MemBus>,
    clock: Arc<ManualClock>,
    ports: BTreeMap<&'static str, FnPorts>,
    calls: BTreeMap<&'static str, Arc<Calls>>,
}

fn sample(name: &str) -> Value {
    let path = root().join("events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl World {
    fn new() -> World {
        let clock = Arc::new(ManualClock::at_millis(1_800_000_000_000));
        let ec2 = Arc::new(
            Ec2Sim::builder("us-west-2")
                .cluster(CLUSTER)
                .clock(clock.clone())
                .capacity_reservation(flotilla_sim::ec2::odcr(
                    RESERVATION,
                    "m5.xlarge",
                    "us-west-2a",
                    2,
                ))
                .build()
                .expect("simulator"),
        );
        let store = Arc::new(MemStore::new());
        let bus = Arc::new(MemBus::new());
        let config = Config {
            region: "us-west-2".into(),
            reserved_capacity: true,
            live_offerings: true,
            node_role: Some("KarpenterNodeRole-demo".into()),
            instance_profile: Some("flotilla-nodes".into()),
            ..Config::default()
        };
        let mut ports = BTreeMap::new();
        let mut calls = BTreeMap::new();
        for f in FUNCTIONS {
            let c = Arc::new(Calls::default());
            ports.insert(
                f,
                Ports {
                    store: Rec::new(store.clone(), c.clone()),
                    ec2: Rec::new(ec2.clone(), c.clone()),
                    bus: Rec::new(bus.clone(), c.clone()),
                    clock: clock.clone(),
                    config: config.clone(),
                    access: Access::default().allow(CLUSTER, flotilla_tests::SAMPLE_AGENT),
                },
            );
            calls.insert(f, c);
        }
        World {
            store,
            ec2,
            bus,
            clock,
            ports,
            calls,
        }
    }

    /// The price cache expires: the next stage to price offerings asks the
    /// Price List API itself.
    async fn drop_price_cache(&self) {
        self.store
            .write(Write::Delete {
                key: keys::prices("us-west-2"),
                condition: flotilla_ports::Condition::Always,
            })
            .await
            .expect("price cache dropped");
    }

    fn port(&self, f: &str) -> &FnPorts {
        &self.ports[f]
    }

    async fn intake(&self, req: &LambdaFunctionUrlRequest) -> (i64, Value) {
        let r = flotilla_fn_intake::handle(self.port("intake"), req).await;
        let body = r
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        (r.status_code, body)
    }

    async fn post(&self, body: &Value) -> Value {
        let mut req = sample("intake-post.json");
        req["body"] = json!(body.to_string());
        req["isBase64Encoded"] = json!(false);
        let req: LambdaFunctionUrlRequest = serde_json::from_value(req).expect("request");
        let (status, body) = self.intake(&req).await;
        assert_eq!(status, 202, "{body}");
        body
    }

    /// Deliver one EventBridge event to a function's handler.
    async fn deliver(&self, f: &str, event: &Value) -> Value {
        let ev: EventBridgeEvent<Value> = serde_json::from_value(event.clone()).expect("event");
        let p = self.port(f);
        let clock = self.clock.clone();
        let out = match f {
            "schedule" => {
                flotilla_fn_schedule::handle(p, &ev, move |ms| {
                    clock.advance_millis(i64::try_from(ms).unwrap_or(i64::MAX));
                    std::future::ready(())
                })
                .await
            }
            "launch" => flotilla_fn_launch::handle(p, &ev).await,
            "sweep" => flotilla_fn_sweep::handle(p, &ev).await,
            "disrupt" => flotilla_fn_disrupt::handle(p, &ev).await,
            other => panic!("no EventBridge handler {other}"),
        };
        out.unwrap_or_else(|e| panic!("{f} failed on {}: {e:#}", ev.detail_type))
    }

    /// An EventBridge event of Flotilla's own, as the bus delivers it.
    fn flotilla_event(e: &Event) -> Value {
        let mut v = sample("batch-accepted.json");
        v["detail-type"] = json!(e.detail_type);
        v["detail"] = serde_json::from_str(&e.detail).expect("detail");
        v
    }

    /// Deliver what is on the bus (and what that puts) to the functions
    /// the template's rules route it to, until the bus is quiet; events
    /// whose detail type is in `hold` stay undelivered.
    /// Returns the held events.
    async fn drain(&self, hold: &[&str]) -> Vec<Event> {
        let mut held = Vec::new();
        for _ in 0..100 {
            let (h, events): (Vec<Event>, Vec<Event>) = self
                .bus
                .take()
                .into_iter()
                .partition(|e| hold.contains(&e.detail_type.as_str()));
            held.extend(h);
            if events.is_empty() {
                return held;
            }
            for e in events {
                let f = match e.detail_type.as_str() {
                    "BatchAccepted" | "PodsUnschedulable" => "schedule",
                    "NodeClaimsPlanned" => "launch",
                    other => panic!("no rule for {other}"),
                };
                self.deliver(f, &Self::flotilla_event(&e)).await;
            }
        }
        panic!("the bus never went quiet");
    }

    async fn claims(&self) -> Vec<flotilla_service::records::NodeClaimRecord> {
        flotilla_service::schedule::node_claims(&self.store, CLUSTER)
            .await
            .expect("claims")
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    async fn ec2_notice(&self, file: &str, instance_id: &str) -> Value {
        let mut ev = sample(file);
        ev["detail"]["instance-id"] = json!(instance_id);
        self.deliver("sweep", &ev).await
    }

    /// An instance launched outside any live NodeClaim (a crashed launch's
    /// orphan), tagged for `cluster`.
    async fn orphan(&self, cluster: &str, node_claim: &str) -> Vec<String> {
        // Replay the latest fleet request that still gets an instance (a
        // reservation's may be used up by now).
        let requests = self.ec2.fleet_requests();
        for (n, request) in requests.iter().rev().enumerate() {
            let mut request = request.clone();
            request.client_token = format!("orphan-{cluster}-{node_claim}-{n}");
            for spec in &mut request.tag_specifications {
                for t in &mut spec.tags {
                    if t.key == flotilla_service::sweep::CLUSTER_ID_TAG {
                        t.value = cluster.to_string();
                    }
                    if t.key == "karpenter.sh/nodeclaim" {
                        t.value = node_claim.to_string();
                    }
                }
            }
            let r = self.ec2.create_fleet(&request).await.expect("orphan");
            let ids: Vec<String> = r
                .instances
                .iter()
                .flat_map(|i| i.instance_ids.iter().cloned())
                .collect();
            if !ids.is_empty() {
                return ids;
            }
        }
        panic!(
            "none of {} fleet requests launches an orphan",
            requests.len()
        );
    }
}

fn reserved_batch() -> Value {
    let mut body: Value =
        serde_json::from_str(sample("intake-post.json")["body"].as_str().expect("body"))
            .expect("json");
    let docs = json!([
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
         "metadata": {"name": "reserved"},
         "spec": {"weight": 50, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "reserved"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}
            ]}}}},
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
         "metadata": {"name": "reserved"},
         "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole-demo",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "capacityReservationSelectorTerms": [{"id": RESERVATION}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "job-0", "namespace": "default"},
         "spec": {"containers": [{"name": "job", "image": "job",
            "resources": {"requests": {"cpu": "3", "memory": "10Gi"}}}]}}
    ]);
    body["documents"] = docs;
    body
}

/// Drive every stage through every path that reaches a port: intake POST
/// and GET; schedule (live offerings, capacity reservations, the batching
/// wait, PodsUnschedulable); launch (templates, fleets, an over-filled
/// fleet's surplus); sweep (the schedule, each EC2 notice, vanished
/// instances, registration timeouts, orphans of known and unknown
/// clusters, stuck NodeClaims, the reservation policy, template GC).
async fn scenario(w: &World) {
    // intake → schedule → launch, with an over-filled first fleet.
    let body: Value =
        serde_json::from_str(sample("intake-post.json")["body"].as_str().expect("body"))
            .expect("json");
    w.post(&body).await;
    w.port("launch")
        .ec2
        .overfill_next_fleet
        .store(true, Ordering::SeqCst);
    w.drain(&[]).await;
    // Launch templates carry the tags CreateLaunchTemplate's request-tag and
    // DeleteLaunchTemplate's resource-tag conditions name.
    let templates = w.ec2.launch_template_names();
    assert!(!templates.is_empty(), "launch created templates");
    for name in templates {
        let lt = w.ec2.launch_template(&name).expect("template");
        assert_eq!(
            lt.tags
                .get(&format!("kubernetes.io/cluster/{CLUSTER}"))
                .map(String::as_str),
            Some("owned"),
            "{name}"
        );
        assert!(lt
            .tags
            .contains_key(flotilla_core::launch::launch_template::TAG_NODEPOOL));
    }
    let get: LambdaFunctionUrlRequest =
        serde_json::from_value(sample("intake-get.json")).expect("GET request");
    let (status, view) = w.intake(&get).await;
    assert_eq!(status, 200, "{view}");

    // A batch for the capacity reservation.
    w.post(&reserved_batch()).await;
    w.drain(&[]).await;
    let claims = w.claims().await;
    assert!(
        claims
            .iter()
            .any(|c| c.reservation.is_some() && c.state == NodeClaimState::Launched),
        "a NodeClaim launched into the reservation: {claims:#?}"
    );
    // A launch that fails: every spot and on-demand pool is empty, so
    // CreateFleet ICEs on every offering, the NodeClaim fails and its pods
    // go back (PodsUnschedulable, held here).
    let pools: Vec<(String, String, CapacityType)> = w
        .ec2
        .catalog()
        .entries
        .iter()
        .flat_map(|e| {
            e.offerings
                .iter()
                .filter(|o| o.capacity_type != CapacityType::Reserved)
                .map(|o| (e.info.name.clone(), o.zone.clone(), o.capacity_type))
        })
        .collect();
    for (t, z, c) in &pools {
        w.ec2.set_capacity(t, z, *c, 0);
    }
    let mut starved = body.clone();
    // Too big for the room left on the NodeClaims in flight.
    starved["documents"][0]["items"][2]["metadata"]["name"] = json!("web-starved");
    starved["documents"][0]["items"][2]["spec"]["containers"][0]["resources"]["requests"] =
        json!({"cpu": "14", "memory": "8Gi"});
    w.post(&starved).await;
    w.drain(&["PodsUnschedulable"]).await;
    assert!(
        w.claims()
            .await
            .iter()
            .any(|c| c.state == NodeClaimState::Failed),
        "a NodeClaim failed for want of capacity"
    );
    for (t, z, c) in &pools {
        w.ec2.clear_capacity(t, z, *c);
    }
    // Past the ICE entries' lifetime.
    w.clock.advance_millis(60_000);

    // A NodeClaim planned into the reservation whose launch finds it full
    // (taken outside Flotilla between schedule and launch): it fails and
    // gives its reservation count back.
    let mut second = reserved_batch();
    let mut job = second["documents"][2].clone();
    job["metadata"]["name"] = json!("job-1");
    second["documents"]
        .as_array_mut()
        .expect("documents")
        .push(job);
    w.post(&second).await;
    let planned = w.drain(&["NodeClaimsPlanned"]).await;
    assert!(
        !planned.is_empty(),
        "NodeClaims planned into the reservation"
    );
    let before = w
        .ec2
        .capacity_reservation(RESERVATION)
        .expect("reservation");
    let mut full = before.clone();
    full.available_instance_count = 0;
    w.ec2.add_capacity_reservation(full);
    // Launch prices offerings too: with the price cache gone (expired) it
    // asks the Price List API itself.
    w.drop_price_cache().await;
    for e in &planned {
        w.deliver("launch", &World::flotilla_event(e)).await;
    }
    w.drain(&["PodsUnschedulable"]).await;
    assert!(
        w.claims()
            .await
            .iter()
            .any(|c| c.state == NodeClaimState::Failed && c.reservation.is_some()),
        "a reserved NodeClaim failed"
    );
    w.ec2.add_capacity_reservation(before);

    // PodsUnschedulable for a NodeClaim that exists.
    let mut unsched = sample("pods-unschedulable.json");
    unsched["detail"]["nodeClaim"] = json!(claims[0].name);
    w.deliver("schedule", &unsched).await;
    w.drain(&["BatchAccepted"]).await;
    w.bus.take();

    let launched: Vec<_> = w
        .claims()
        .await
        .into_iter()
        .filter(|c| c.state == NodeClaimState::Launched && c.reservation.is_none())
        .collect();
    assert!(!launched.is_empty(), "on-demand/spot NodeClaims launched");
    let id = |i: usize| {
        launched[i % launched.len()]
            .instance
            .as_ref()
            .expect("instance")
            .instance_id
            .clone()
    };

    // The sweep: schedule, notices, capacity reservation / block notices.
    w.deliver("sweep", &sample("sweep-schedule.json")).await;
    w.ec2_notice("ec2-spot-interruption.json", &id(0)).await;
    w.ec2_notice("ec2-rebalance.json", &id(0)).await;
    w.ec2_notice("ec2-capacity-reservation-interruption.json", &id(0))
        .await;
    w.ec2.set_instance_state(&id(0), InstanceState::Terminated);
    w.ec2_notice("ec2-state-change.json", &id(0)).await;
    for f in [
        "ec2-capacity-block-delivered.json",
        "ec2-capacity-block-expiration-warning.json",
        "ec2-capacity-reservation-expired.json",
    ] {
        w.deliver("sweep", &sample(f)).await;
    }
    // An instance that vanished without a notice.
    let vanished = w
        .claims()
        .await
        .into_iter()
        .filter(|c| c.state == NodeClaimState::Launched)
        .find_map(|c| c.instance.map(|i| i.instance_id))
        .expect("another launched NodeClaim");
    w.ec2
        .set_instance_state(&vanished, InstanceState::Terminated);
    w.deliver("sweep", &sample("sweep-schedule.json")).await;

    // Orphans (known and unknown cluster), a NodeClaim stuck in Pending,
    // then the registration timeout.
    let mut orphans = w.orphan(CLUSTER, "ghost").await;
    orphans.extend(w.orphan("gone-cluster", "ghost").await);
    orphans.sort();
    // The sweep first waits for an agent's report of the unknown
    // cluster's nodes (none comes: it is collected 16 minutes later).
    w.deliver("sweep", &sample("sweep-schedule.json")).await;
    let mut more = body.clone();
    more["documents"][0]["items"][2]["metadata"]["name"] = json!("web-late");
    w.post(&more).await;
    w.drain(&["NodeClaimsPlanned"]).await;
    w.clock.advance_millis(16 * 60_000);
    let report = w.deliver("sweep", &sample("sweep-schedule.json")).await;
    let mut terminated: Vec<String> = report["leakedTerminated"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    terminated.sort();
    for o in &orphans {
        assert!(terminated.contains(o), "orphan {o} terminated: {report}");
    }
    // Whatever else went was no live NodeClaim's instance (e.g. the
    // instance of a NodeClaim its pods were handed back from).
    for c in w.claims().await.iter().filter(|c| c.state.is_live()) {
        if let Some(i) = &c.instance {
            assert!(
                !terminated.contains(&i.instance_id),
                "{} of live NodeClaim {} terminated as leaked: {report}",
                i.instance_id,
                c.name
            );
        }
    }
    w.drain(&[]).await;

    disruption_phase(w, &body).await;

    // A day later: unused launch templates are deleted.
    w.clock.advance_millis(26 * 3600 * 1000);
    w.deliver("sweep", &sample("sweep-schedule.json")).await;
    w.deliver("sweep", &sample("sweep-schedule.json")).await;
}

/// The Node document the agent sends for a live NodeClaim's instance, with
/// `pods` bound to it.
fn node_doc(c: &flotilla_service::records::NodeClaimRecord) -> Option<(String, Value)> {
    let i = c.instance.as_ref()?;
    let name = format!("ip-{}", i.instance_id);
    let doc = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2027-01-15T08:00:00Z", "labels": {
            flotilla_service::records::NODECLAIM_LABEL: c.name,
            "karpenter.sh/nodepool": c.plan.node_pool,
            "kubernetes.io/hostname": name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": i.instance_type,
            "topology.kubernetes.io/zone": i.zone,
            "karpenter.sh/capacity-type": i.capacity_type}},
        "spec": {"providerID": format!("aws:///{}/{}", i.zone, i.instance_id)},
        "status": {"allocatable": {"cpu": "1500m", "memory": "6Gi", "pods": "29"}}
    });
    Some((name, doc))
}

/// The disrupt stage end to end: the agent's heartbeat shows the default
/// pool's nodes (one holding a pod, the others empty); the stage decides
/// (Empty, and a replacement for the busy node's pod), launches the
/// replacement, taints and drains once it registered, terminates the
/// drained instances and releases its markers; a spot interruption's
/// decision replaces at once.
async fn disruption_phase(w: &World, body: &Value) {
    let mut pool = body["documents"][0]["items"][0].clone();
    pool["spec"]["disruption"] = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]});
    let class = body["documents"][0]["items"][1].clone();
    let reserved = reserved_batch();
    let (reserved_pool, reserved_class) = (
        reserved["documents"][0].clone(),
        reserved["documents"][1].clone(),
    );
    // More nodes: two pods too large to share one.
    let mut more = body.clone();
    let pod = more["documents"][0]["items"][2].clone();
    let items = more["documents"][0]["items"].as_array_mut().expect("items");
    items.truncate(2);
    for name in ["batch-0", "batch-1"] {
        let mut p = pod.clone();
        p["metadata"]["name"] = json!(name);
        p["spec"]["containers"][0]["resources"]["requests"] = json!({"cpu": "3", "memory": "4Gi"});
        items.push(p);
    }
    w.post(&more).await;
    w.drain(&[]).await;
    // The disrupt stage is the first to find the offering and price caches
    // stale: it refreshes them itself.
    w.clock.advance_millis(16 * 60_000);
    w.drop_price_cache().await;
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let mut decided = false;
    let mut busy_node: Option<(String, String)> = None;
    for round in 0..12 {
        let mut docs = vec![
            pool.clone(),
            class.clone(),
            reserved_pool.clone(),
            reserved_class.clone(),
        ];
        for c in w.claims().await {
            if !c.state.is_live() {
                continue;
            }
            let Some((name, node)) = node_doc(&c) else {
                continue;
            };
            if gone.contains(&name) {
                continue;
            }
            docs.push(node);
            if busy_node.is_none() && c.plan.node_pool == "default" {
                let id = c
                    .instance
                    .as_ref()
                    .map(|i| i.instance_id.clone())
                    .unwrap_or_default();
                busy_node = Some((name.clone(), id));
            }
            if busy_node.as_ref().is_some_and(|(n, _)| n == &name) {
                docs.push(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "api-0", "namespace": "default",
                        "creationTimestamp": "2027-01-15T08:00:00Z"},
                    "spec": {"nodeName": name, "containers": [{"name": "api", "image": "api",
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}]},
                    "status": {"phase": "Running", "startTime": "2027-01-15T08:00:00Z"}}));
            }
        }
        let mut heartbeat = body.clone();
        heartbeat["documents"] = json!(docs);
        w.post(&heartbeat).await;
        if round == 1 {
            // EC2 warns that the busy (spot) node goes in two minutes: its
            // replacement launches at once.
            if let Some((_, id)) = &busy_node {
                w.ec2_notice("ec2-spot-interruption.json", id).await;
            }
        }
        w.clock.advance_millis(60_000);
        let report = w.deliver("disrupt", &sample("sweep-schedule.json")).await;
        decided |= report["clusters"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["started"].as_array().is_some_and(|s| !s.is_empty()))
        });
        w.drain(&[]).await;
        // The agent applies its actions and acknowledges them; a drained
        // node leaves the cluster once its instance is gone.
        let get: LambdaFunctionUrlRequest =
            serde_json::from_value(sample("intake-get.json")).expect("GET request");
        let (status, view) = w.intake(&get).await;
        assert_eq!(status, 200, "{view}");
        let acks: Vec<Value> = view["actions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|a| json!({"id": a["id"], "outcome": "done"}))
                    .collect()
            })
            .unwrap_or_default();
        if !acks.is_empty() {
            let mut req = sample("intake-post.json");
            req["rawPath"] = json!("/clusters/demo/actions");
            req["requestContext"]["http"]["path"] = json!("/clusters/demo/actions");
            req["body"] = json!(json!({"acks": acks}).to_string());
            req["isBase64Encoded"] = json!(false);
            let req: LambdaFunctionUrlRequest = serde_json::from_value(req).expect("acks");
            let (status, out) = w.intake(&req).await;
            assert!((200..300).contains(&status), "acks refused: {status} {out}");
        }
        for c in w.claims().await {
            if let Some((name, _)) = node_doc(&c) {
                if !c.state.is_live() {
                    gone.insert(name);
                }
            }
        }
        if round > 3
            && decided
            && w.calls["disrupt"]
                .snapshot()
                .contains_key(&PortCall::StoreDelete)
        {
            break;
        }
    }
    assert!(decided, "the disrupt stage took a decision");
    let terminated = w.calls["disrupt"]
        .snapshot()
        .contains_key(&PortCall::Ec2TerminateInstances);
    assert!(
        terminated,
        "the disrupt stage terminated a drained node's instance"
    );
}

// ---------------------------------------------------------------------------
// Static call sites of the ports in shared/service.

/// Every `.rs` file under `dir` (modules in subdirectories included,
/// e.g. `disruption/mod.rs`), sorted.
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// shared/service's production sources: (path relative to the repository,
/// the code before its test module).
fn service_sources() -> Vec<(String, String)> {
    let root = root();
    rust_files(&root.join("shared").join("service").join("src"))
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("source");
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or(&text)
                .to_string();
            let rel = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            (rel, code)
        })
        .collect()
}

/// `file:line` of every Ec2 / Bus port call in shared/service's sources
/// (outside test modules).
fn static_call_sites() -> BTreeMap<String, PortCall> {
    let mut out = BTreeMap::new();
    for (rel, code) in service_sources() {
        for (n, line) in code.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            for call in PortCall::ALL {
                let method = match (call.ec2_method(), call) {
                    (Some(m), _) => m,
                    (None, PortCall::BusPut) => "put",
                    (None, PortCall::PricingGetProducts) => "on_demand_prices",
                    _ => continue,
                };
                let pat = format!(".{method}(");
                let is_bus = call == PortCall::BusPut;
                if line.contains(&pat) && (!is_bus || line.contains("bus")) {
                    out.insert(format!("{rel}:{}", n + 1), call);
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The template.

/// A CloudFormation value as text: plain strings as they are,
/// `!GetAtt X.Arn` as `GetAtt:X.Arn`, `!Ref X` as `Ref:X`, `!Sub s` as `s`,
/// anything else as its YAML.
fn text(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Tagged(t) => {
            let tag = t.tag.to_string();
            let tag = tag.trim_start_matches('!');
            match (tag, &t.value) {
                ("Sub", Yaml::String(s)) => s.clone(),
                (tag, Yaml::String(s)) => format!("{tag}:{s}"),
                (tag, other) => format!(
                    "{tag}:{}",
                    serde_yaml_ng::to_string(other).unwrap_or_default().trim()
                ),
            }
        }
        Yaml::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().expect("one entry");
            let k = k.as_str().unwrap_or_default();
            match (k, v) {
                ("Fn::GetAtt", Yaml::Sequence(s)) => format!(
                    "GetAtt:{}",
                    s.iter().map(text).collect::<Vec<_>>().join(".")
                ),
                ("Fn::GetAtt", v) => format!("GetAtt:{}", text(v)),
                ("Ref", v) => format!("Ref:{}", text(v)),
                ("Fn::Sub", v) => text(v),
                _ => serde_yaml_ng::to_string(v).unwrap_or_default(),
            }
        }
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// One policy statement, normalised to JSON (from YAML, or from a `!Sub`
/// JSON document with its `${...}` left in place).
#[derive(Debug, Clone)]
struct Statement {
    policy: String,
    actions: Vec<String>,
    resources: Vec<String>,
    condition: Value,
}

fn yaml_to_json(v: &Yaml) -> Value {
    match v {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => json!(b),
        Yaml::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Yaml::String(s) => json!(s),
        Yaml::Sequence(s) => Value::Array(s.iter().map(yaml_to_json).collect()),
        Yaml::Mapping(m)
            if m.len() == 1
                && m.keys()
                    .next()
                    .and_then(Yaml::as_str)
                    .is_some_and(|k| k == "Ref" || k.starts_with("Fn::")) =>
        {
            json!(text(v))
        }
        Yaml::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), yaml_to_json(v)))
                .collect(),
        ),
        Yaml::Tagged(_) => json!(text(v)),
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Null => vec![],
        other => vec![other.to_string()],
    }
}

fn role_statements(t: &Yaml, role: &str) -> Vec<Statement> {
    let resources = get(t, "Resources").expect("Resources");
    let r = get(resources, role).unwrap_or_else(|| panic!("no resource {role}"));
    assert_eq!(
        get(r, "Type").and_then(Yaml::as_str),
        Some("AWS::IAM::Role"),
        "{role}"
    );
    let props = get(r, "Properties").expect("Properties");
    assert!(
        get(props, "ManagedPolicyArns").is_none(),
        "{role}: managed policies grant more than the code calls"
    );
    let mut out = Vec::new();
    for p in get(props, "Policies")
        .and_then(Yaml::as_sequence)
        .expect("Policies")
    {
        let name = get(p, "PolicyName").map(text).unwrap_or_default();
        let doc = get(p, "PolicyDocument").expect("PolicyDocument");
        let doc: Value = match doc {
            Yaml::Tagged(_) => serde_json::from_str(&text(doc))
                .unwrap_or_else(|e| panic!("{role}/{name}: the !Sub document is not JSON: {e}")),
            other => yaml_to_json(other),
        };
        for s in doc["Statement"].as_array().expect("Statement list") {
            assert_eq!(s["Effect"], "Allow", "{role}/{name}: only Allow statements");
            assert!(
                s.get("NotAction").is_none() && s.get("NotResource").is_none(),
                "{role}/{name}: NotAction / NotResource grant everything else"
            );
            out.push(Statement {
                policy: format!("{role}/{name}"),
                actions: strings(&s["Action"]),
                resources: strings(&s["Resource"]),
                condition: s.get("Condition").cloned().unwrap_or(Value::Null),
            });
        }
    }
    out
}

fn function_role(t: &Yaml, function: &str) -> String {
    let f = get(get(t, "Resources").expect("Resources"), function).expect("function");
    let role = text(get(get(f, "Properties").expect("Properties"), "Role").expect("Role"));
    role.strip_prefix("GetAtt:")
        .and_then(|r| r.strip_suffix(".Arn"))
        .unwrap_or_else(|| panic!("{function}: Role must be !GetAtt <Role>.Arn, got {role}"))
        .to_string()
}

fn logical_id(function: &str) -> String {
    let mut c = function.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// The condition value at `op` / `key` (e.g. `StringEquals` /
/// `aws:RequestTag/...`).
fn cond<'a>(s: &'a Statement, op: &str, key: &str) -> Option<&'a Value> {
    s.condition.get(op).and_then(|o| o.get(key))
}

const CLUSTER_TAG: &str = "kubernetes.io/cluster/${ClusterName}";

// ---------------------------------------------------------------------------
// Event routing: a small EventBridge pattern matcher (exact strings and
// `wildcard`, which is all the template uses).

fn pattern_matches(pattern: &Value, event: &Value) -> bool {
    let field = |name: &str| event.get(name).and_then(Value::as_str).unwrap_or_default();
    pattern.as_object().is_some_and(|p| {
        p.iter().all(|(k, allowed)| {
            let v = field(k);
            allowed.as_array().is_some_and(|alts| {
                alts.iter().any(|a| match a {
                    Value::String(s) => s == v,
                    Value::Object(o) => o
                        .get("wildcard")
                        .and_then(Value::as_str)
                        .is_some_and(|w| wildcard(w, v)),
                    _ => false,
                })
            })
        })
    })
}

fn wildcard(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(j) => rest = &rest[j + part.len()..],
                None => return false,
            }
        }
    }
    rest.is_empty()
}

/// (rule logical id, pattern, target function logical ids, on the custom bus).
fn rules(t: &Yaml) -> Vec<(String, Value, Vec<String>, bool)> {
    let mut out = Vec::new();
    if let Some(Yaml::Mapping(m)) = get(t, "Resources") {
        for (id, r) in m {
            if get(r, "Type").and_then(Yaml::as_str) != Some("AWS::Events::Rule") {
                continue;
            }
            let props = get(r, "Properties").expect("Properties");
            let Some(pattern) = get(props, "EventPattern") else {
                continue;
            };
            let on_custom_bus = get(props, "EventBusName").map(text).as_deref() == Some("Ref:Bus");
            let targets = get(props, "Targets")
                .and_then(Yaml::as_sequence)
                .map(|ts| {
                    ts.iter()
                        .filter_map(|t| get(t, "Arn"))
                        .map(|a| {
                            text(a)
                                .trim_start_matches("GetAtt:")
                                .trim_end_matches(".Arn")
                                .to_string()
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                id.as_str().unwrap_or_default().to_string(),
                yaml_to_json(pattern),
                targets,
                on_custom_bus,
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn each_role_holds_exactly_the_actions_its_code_calls() {
    let w = World::new();
    scenario(&w).await;
    let recorded: BTreeMap<&str, BTreeMap<PortCall, BTreeSet<String>>> =
        w.calls.iter().map(|(f, c)| (*f, c.snapshot())).collect();

    // 1. Every Ec2 / Bus call site of shared/service was reached by some
    //    function (otherwise the scenario, and so this test, misses it).
    let reached: BTreeSet<&String> = recorded
        .values()
        .flat_map(|m| m.values().flatten())
        .collect();
    let sites = static_call_sites();
    assert!(
        sites.len() >= 10,
        "call-site scan found too little: {sites:?}"
    );
    let missed: Vec<_> = sites
        .iter()
        .filter(|(site, _)| !reached.contains(site))
        .collect();
    assert!(
        missed.is_empty(),
        "port call sites the scenario never reaches (extend `scenario` so the \
         least-privilege check covers them): {missed:#?}\nreached: {reached:#?}"
    );
    // Every kind of store write the services make was recorded too.
    let service_src: String = service_sources()
        .into_iter()
        .map(|(_, code)| code)
        .collect();
    let all: BTreeSet<PortCall> = recorded.values().flat_map(|m| m.keys().copied()).collect();
    for (variant, call) in [
        ("Write::Put", PortCall::StorePut),
        ("Write::Delete", PortCall::StoreDelete),
        ("Write::Add", PortCall::StoreAdd),
    ] {
        if service_src.contains(variant) {
            assert!(
                all.contains(&call),
                "{variant} is written but never recorded"
            );
        }
    }

    // 2. Per function: the role's service actions equal the calls' actions.
    let t = template();
    for f in FUNCTIONS {
        let id = logical_id(f);
        let role = function_role(&t, &id);
        let statements = role_statements(&t, &role);
        let calls = &recorded[f];
        let needed: BTreeSet<String> = iam_actions(calls.keys().copied())
            .into_iter()
            .map(str::to_string)
            .collect();
        let service = |a: &str| {
            ["dynamodb:", "events:", "ec2:", "iam:", "pricing:"]
                .iter()
                .any(|p| a.starts_with(p))
        };
        let granted: BTreeSet<String> = statements
            .iter()
            .flat_map(|s| s.actions.iter().cloned())
            .filter(|a| service(a))
            .collect();
        let missing: Vec<_> = needed.difference(&granted).collect();
        let extra: Vec<_> = granted.difference(&needed).collect();
        let why: Vec<String> = calls
            .iter()
            .map(|(c, sites)| format!("{} at {:?}", c.method(), sites))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{role} (function {id}): missing {missing:?}, not called {extra:?}\n\
             the code calls: {why:#?}"
        );

        for s in &statements {
            for a in &s.actions {
                assert!(!a.contains('*'), "{}: wildcard action {a}", s.policy);
            }
            // 3. Platform actions: own log group, own DLQ only; X-Ray's
            //    (active tracing), which has no resource-level permissions.
            let platform: Vec<&String> = s.actions.iter().filter(|a| !service(a)).collect();
            if !platform.is_empty() {
                assert_eq!(
                    platform.len(),
                    s.actions.len(),
                    "{}: keep platform and service actions apart",
                    s.policy
                );
                for a in platform {
                    match a.as_str() {
                        "logs:CreateLogStream" | "logs:PutLogEvents" => {
                            assert_eq!(
                                s.resources,
                                vec![format!("GetAtt:{id}Logs.Arn")],
                                "{}",
                                s.policy
                            )
                        }
                        "sqs:SendMessage" => {
                            assert_eq!(
                                s.resources,
                                vec![format!("GetAtt:{id}Dlq.Arn")],
                                "{}",
                                s.policy
                            )
                        }
                        "xray:PutTraceSegments" | "xray:PutTelemetryRecords" => {
                            assert_eq!(s.resources, vec!["*".to_string()], "{}", s.policy)
                        }
                        other => panic!("{}: unexpected action {other}", s.policy),
                    }
                }
                continue;
            }
            // 4. Resources.
            let describe_only = s
                .actions
                .iter()
                .all(|a| a.starts_with("ec2:Describe") || a == "pricing:GetProducts");
            for r in &s.resources {
                if r == "*" {
                    assert!(
                        describe_only,
                        "{}: Resource \"*\" for {:?}: only EC2 Describe* calls and pricing:GetProducts lack resource-level permissions",
                        s.policy, s.actions
                    );
                    continue;
                }
                for a in &s.actions {
                    let ok = match a.split(':').next() {
                        Some("dynamodb") => r == "GetAtt:Table.Arn",
                        Some("events") => r == "GetAtt:Bus.Arn",
                        Some("iam") if a == "iam:CreateServiceLinkedRole" => r.ends_with(
                            ":role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot",
                        ),
                        Some("iam") => r.starts_with("If:") && r.contains("NodeRole"),
                        Some("ec2") => r.starts_with("arn:${AWS::Partition}:ec2:${AWS::Region}:"),
                        _ => false,
                    };
                    assert!(
                        ok,
                        "{}: {a} on {r} is not scoped to Flotilla's own resource",
                        s.policy
                    );
                }
            }
            if describe_only {
                assert_eq!(s.resources, vec!["*".to_string()], "{}", s.policy);
            }
            // 5. Conditions.
            let has = |a: &str| s.actions.iter().any(|x| x == a);
            let on = |kind: &str| s.resources.iter().any(|r| r.contains(&format!(":{kind}/")));
            if has("iam:PassRole") {
                assert_eq!(s.actions, vec!["iam:PassRole"], "{}", s.policy);
                assert!(
                    cond(s, "StringEquals", "iam:PassedToService")
                        .is_some_and(|v| v.as_str().is_some_and(|v| v.starts_with("ec2."))),
                    "{}: PassRole only to EC2",
                    s.policy
                );
            }
            if has("iam:CreateServiceLinkedRole") {
                assert_eq!(
                    s.actions,
                    vec!["iam:CreateServiceLinkedRole"],
                    "{}",
                    s.policy
                );
                assert_eq!(
                    cond(s, "StringEquals", "iam:AWSServiceName"),
                    Some(&json!("spot.amazonaws.com")),
                    "{}: only the spot service-linked role",
                    s.policy
                );
            }
            if has("ec2:CreateFleet") || has("ec2:RunInstances") {
                if on("instance") || on("fleet") || on("volume") {
                    assert_eq!(
                        cond(s, "StringEquals", &format!("aws:RequestTag/{CLUSTER_TAG}")),
                        Some(&json!("owned")),
                        "{}: CreateFleet/RunInstances must require the cluster tag on what they create",
                        s.policy
                    );
                    for key in ["karpenter.sh/nodepool", "flotilla.io/cluster-id"] {
                        assert!(
                            cond(s, "StringLike", &format!("aws:RequestTag/{key}")).is_some(),
                            "{}: CreateFleet/RunInstances must require the {key} request tag",
                            s.policy
                        );
                    }
                } else if on("launch-template") {
                    assert_eq!(
                        cond(s, "StringEquals", &format!("aws:ResourceTag/{CLUSTER_TAG}")),
                        Some(&json!("owned")),
                        "{}: only the cluster's launch templates",
                        s.policy
                    );
                } else {
                    for r in &s.resources {
                        let kind = r.rsplit(':').next().unwrap_or_default();
                        assert!(
                            [
                                "image/*",
                                "snapshot/*",
                                "subnet/*",
                                "security-group/*",
                                "capacity-reservation/*",
                                "network-interface/*",
                                "spot-instances-request/*"
                            ]
                            .contains(&kind),
                            "{}: unconditioned CreateFleet/RunInstances on {r}",
                            s.policy
                        );
                    }
                }
            }
            if has("ec2:CreateLaunchTemplate") {
                assert_eq!(
                    cond(s, "StringEquals", &format!("aws:RequestTag/{CLUSTER_TAG}")),
                    Some(&json!("owned")),
                    "{}",
                    s.policy
                );
            }
            if has("ec2:CreateTags") {
                assert_eq!(s.actions, vec!["ec2:CreateTags"], "{}", s.policy);
                let on_create: BTreeSet<String> = cond(s, "StringEquals", "ec2:CreateAction")
                    .map(strings)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                assert!(
                    !on_create.is_empty()
                        && on_create.iter().all(|a| {
                            ["CreateFleet", "RunInstances", "CreateLaunchTemplate"]
                                .contains(&a.as_str())
                        }),
                    "{}: CreateTags only while creating",
                    s.policy
                );
                assert!(
                    cond(s, "StringEquals", &format!("aws:RequestTag/{CLUSTER_TAG}")).is_some()
                );
            }
            if has("ec2:TerminateInstances") || has("ec2:DeleteLaunchTemplate") {
                assert_eq!(
                    cond(s, "StringEquals", &format!("aws:ResourceTag/{CLUSTER_TAG}")),
                    Some(&json!("owned")),
                    "{}: only the cluster's own resources",
                    s.policy
                );
            }
            // Isolation through IAM: every EC2 mutation that creates or
            // touches a tagged resource requires this stack's cluster tag
            // and stack tag on it, so no function of this stack can create,
            // launch from, tag, terminate or delete another cluster's or
            // another stack's instances and templates.
            let launch = has("ec2:CreateFleet") || has("ec2:RunInstances");
            let tag_kind = if has("ec2:TerminateInstances")
                || has("ec2:DeleteLaunchTemplate")
                || (launch && on("launch-template"))
            {
                Some("ResourceTag")
            } else if has("ec2:CreateLaunchTemplate")
                || has("ec2:CreateTags")
                || (launch && (on("instance") || on("fleet") || on("volume")))
            {
                Some("RequestTag")
            } else {
                None
            };
            if let Some(kind) = tag_kind {
                assert_eq!(
                    cond(s, "StringEquals", &format!("aws:{kind}/{CLUSTER_TAG}")),
                    Some(&json!("owned")),
                    "{}: {:?} must be conditioned on aws:{kind}/{CLUSTER_TAG}",
                    s.policy,
                    s.actions
                );
                assert_eq!(
                    cond(
                        s,
                        "StringEquals",
                        &format!("aws:{kind}/{}", flotilla_service::sweep::STACK_TAG)
                    ),
                    Some(&json!("${AWS::StackId}")),
                    "{}: {:?} must be conditioned on this stack's tag (aws:{kind}/flotilla.io/stack = ${{AWS::StackId}})",
                    s.policy,
                    s.actions
                );
            }
        }
    }

    // 6. The tags the conditions require are the tags the code sets.
    let instances = w.ec2.instances();
    assert!(!instances.is_empty());
    for i in &instances {
        assert_eq!(
            i.tags
                .get(&format!("kubernetes.io/cluster/{CLUSTER}"))
                .map(String::as_str),
            Some("owned"),
            "{i:?}"
        );
        assert!(i
            .tags
            .contains_key(flotilla_core::launch::launch_template::TAG_NODEPOOL));
        assert!(i.tags.contains_key(flotilla_service::sweep::CLUSTER_ID_TAG));
        assert_eq!(
            i.tags.get(flotilla_service::sweep::STACK_TAG),
            Some(&w.ports["launch"].config.stack_id),
            "{i:?}"
        );
        assert_eq!(
            i.tags
                .get(flotilla_core::launch::launch_template::TAG_EKS_CLUSTER_NAME)
                .map(String::as_str),
            Some(CLUSTER),
            "{i:?}"
        );
    }
    for request in w.ec2.fleet_requests() {
        let kinds: BTreeSet<&str> = request
            .tag_specifications
            .iter()
            .map(|s| s.resource_type.as_str())
            .collect();
        assert_eq!(
            kinds,
            BTreeSet::from(["fleet", "instance", "volume"]),
            "the resources the LaunchTaggedInstances statement conditions on request tags"
        );
        for spec in &request.tag_specifications {
            let keys: BTreeSet<&str> = spec.tags.iter().map(|t| t.key.as_str()).collect();
            for k in [
                "karpenter.sh/nodepool",
                "flotilla.io/cluster-id",
                "kubernetes.io/cluster/demo",
                "flotilla.io/stack",
                "eks:eks-cluster-name",
            ] {
                assert!(keys.contains(k), "{} tags lack {k}", spec.resource_type);
            }
        }
    }
    assert!(
        recorded["sweep"].contains_key(&PortCall::Ec2DeleteLaunchTemplate),
        "the sweep deleted unused templates"
    );
}

#[test]
fn rules_route_every_sample_to_the_function_that_acts_on_it() {
    let t = template();
    let rules = rules(&t);
    let dir = root().join("events");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("events/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut checked = 0;
    for path in files {
        let ev: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let (Some(source), Some(detail_type)) = (
            ev.get("source").and_then(Value::as_str),
            ev.get("detail-type").and_then(Value::as_str),
        ) else {
            continue; // Function URL requests
        };
        if source == "aws.events" {
            continue; // the schedule rule has no pattern
        }
        let expected: Option<&str> = match source {
            flotilla_ports::events::SOURCE => {
                match flotilla_ports::events::FlotillaEvent::from_parts(detail_type, &ev["detail"])
                    .expect("sample parses")
                {
                    flotilla_ports::events::FlotillaEvent::BatchAccepted(_)
                    | flotilla_ports::events::FlotillaEvent::PodsUnschedulable(_) => {
                        Some("Schedule")
                    }
                    flotilla_ports::events::FlotillaEvent::NodeClaimsPlanned(_) => Some("Launch"),
                }
            }
            "aws.ec2" => flotilla_service::sweep::Ec2Notice::parse(detail_type, &ev["detail"])
                .map(|_| "Sweep"),
            _ => None,
        };
        let routed: Vec<&String> = rules
            .iter()
            .filter(|(_, p, _, custom)| {
                *custom == (source == "flotilla") && pattern_matches(p, &ev)
            })
            .flat_map(|(_, _, targets, _)| targets)
            .collect();
        assert_eq!(
            routed.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            expected.into_iter().collect::<Vec<_>>(),
            "{}: {source} / {detail_type}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} samples checked");
    // The EC2 rule matches what the sweep acts on, and nothing else.
    let ec2_rule = rules
        .iter()
        .find(|(_, p, _, _)| p["source"] == json!(["aws.ec2"]))
        .expect("an aws.ec2 rule");
    for dt in [
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Capacity Reservation Instance Interruption Warning",
        "Capacity Block Reservation Delivered",
        "EC2 Capacity Reservation Something New",
        "EC2 AMI State Change",
        "EC2 Fast Launch State-change Notification",
    ] {
        let detail = json!({"instance-id": "i-1", "state": "running"});
        let acts = flotilla_service::sweep::Ec2Notice::parse(dt, &detail).is_some();
        let ev = json!({"source": "aws.ec2", "detail-type": dt, "detail": detail});
        assert_eq!(pattern_matches(&ec2_rule.1, &ev), acts, "{dt}");
    }
    assert!(wildcard("*Capacity Block*", "Capacity Block Delivered"));
    assert!(!wildcard("*Capacity Block*", "Capacity Bloc"));
    assert!(wildcard("EC2 *", "EC2 x") && !wildcard("EC2 *", "AEC2 x"));
}
