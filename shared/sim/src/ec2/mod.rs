//! [`Ec2Sim`]: the [`Ec2`] port as an in-memory EC2 region.
//!
//! Built from the embedded instance-type catalog of a region, seeded with a
//! VPC (one subnet per zone and a node security group, both tagged
//! `karpenter.sh/discovery=<cluster>`) and EKS-optimized AL2023 and
//! Bottlerocket AMIs for `x86_64` and `arm64`. On top of what moto offers
//! it models:
//!
//! - CreateFleet `ClientToken` idempotency: the same token and request
//!   return the first response again without launching; the same token with
//!   a different request is `IdempotentParameterMismatch`;
//! - capacity pools per (instance type, zone, capacity type), unlimited
//!   unless [`Ec2Sim::set_capacity`] limits them, with EC2's
//!   `InsufficientInstanceCapacity` errors and partial fills;
//! - capacity reservations (ODCRs and capacity blocks) that launches take
//!   from and terminations give back to, `ReservationCapacityExceeded`;
//! - spot prices from the catalog, timestamped by the clock;
//! - the AWS Price List API's on-demand prices ([`PriceList`](flotilla_ports::PriceList),
//!   `pricing` module), from the catalog unless a test sets others;
//! - [`Faults`] before and after the effect of every call.
//!
//! Everything is deterministic for a given seed and call sequence.

mod filter;
mod fleet;
mod pricing;
mod seed;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use flotilla_core::catalog::{CapacityType, Catalog, CatalogError, InstanceTypeInfo};
use flotilla_core::launch::{FleetRequest, FleetResponse, LaunchTemplateConfig};
use flotilla_core::model::CapacityReservation;
use flotilla_ports::{
    Clock, Ec2, Filter, Image, Instance, InstanceState, PortError, PortResult, SecurityGroup,
    SpotPrice, Subnet,
};

use crate::clock::ManualClock;
use crate::faults::{ops, Faults};
use crate::rng::SplitMix64;
use filter::{select, Filterable};

pub use seed::{
    capacity_block, odcr, ACCOUNT_ID, AMAZON_OWNER_IDS, BOTTLEROCKET_AMI_OWNER_ID,
    DEFAULT_K8S_VERSION, DISCOVERY_TAG, EKS_AMI_OWNER_ID,
};

/// Terminated instances stay visible to DescribeInstances this long (EC2
/// keeps them about an hour).
pub const TERMINATED_VISIBLE_SECS: i64 = 3600;

/// Why a simulator could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The region has no embedded catalog.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// An instance with the launch details the [`Instance`] port type does not
/// carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord {
    pub instance: Instance,
    pub subnet_id: String,
    pub vpc_id: String,
    pub image_id: String,
    /// Name of the launch template it was launched from.
    pub launch_template: String,
    /// The client token of the CreateFleet call that launched it.
    pub client_token: String,
    /// Unix seconds of termination (set with the `Terminated` state).
    pub terminated_at: Option<i64>,
}

/// A launch template as stored.
#[derive(Debug, Clone, PartialEq)]
struct Template {
    name: String,
    config: LaunchTemplateConfig,
}

#[derive(Debug)]
pub(crate) struct State {
    rng: SplitMix64,
    subnets: BTreeMap<String, Subnet>,
    security_groups: BTreeMap<String, SecurityGroup>,
    images: BTreeMap<String, Image>,
    reservations: BTreeMap<String, CapacityReservation>,
    templates: BTreeMap<String, Template>,
    instances: BTreeMap<String, InstanceRecord>,
    /// Remaining capacity of limited pools; absent = unlimited.
    pools: BTreeMap<(String, String, CapacityType), u32>,
    spot_prices: BTreeMap<(String, String), f64>,
    /// Client token → (request, response) of successful CreateFleet calls.
    fleets: BTreeMap<String, (FleetRequest, FleetResponse)>,
    /// Every CreateFleet request that reached the simulator, in order.
    fleet_requests: Vec<FleetRequest>,
    /// The account lacks the spot service-linked role (and the caller may
    /// not create it): spot launches fail.
    no_spot_role: bool,
    /// Price List prices set by tests (see `pricing`).
    on_demand_prices: BTreeMap<String, f64>,
    price_list_calls: usize,
}

struct Inner {
    region: String,
    cluster: String,
    vpc_id: String,
    catalog: Catalog,
    clock: Arc<dyn Clock>,
    faults: Faults,
    state: Mutex<State>,
}

/// An in-memory EC2 region implementing [`Ec2`]. Cheap to clone; clones
/// share the region. Create one with [`Ec2Sim::new`] or
/// [`Ec2Sim::builder`].
///
/// Fault operations: `ec2.<method>` (see [`crate::ops`]).
#[derive(Clone)]
pub struct Ec2Sim {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Ec2Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Sim")
            .field("region", &self.inner.region)
            .field("cluster", &self.inner.cluster)
            .field("vpc_id", &self.inner.vpc_id)
            .finish_non_exhaustive()
    }
}

/// Configures an [`Ec2Sim`]; see [`Ec2Sim::builder`].
pub struct Ec2SimBuilder {
    region: String,
    cluster: String,
    k8s_version: String,
    seed: u64,
    clock: Option<Arc<dyn Clock>>,
    faults: Faults,
    catalog: Option<Catalog>,
    defaults: bool,
    subnets: Vec<Subnet>,
    security_groups: Vec<SecurityGroup>,
    images: Vec<Image>,
    reservations: Vec<CapacityReservation>,
    capacity: Vec<(String, String, CapacityType, u32)>,
}

impl Ec2SimBuilder {
    /// The cluster name in the discovery tags of the default subnets and
    /// security group (default `flotilla`).
    pub fn cluster(mut self, name: &str) -> Self {
        self.cluster = name.to_string();
        self
    }

    /// Kubernetes version in the default AMI names (default
    /// [`DEFAULT_K8S_VERSION`]).
    pub fn k8s_version(mut self, version: &str) -> Self {
        self.k8s_version = version.to_string();
        self
    }

    /// Seed of the resource ids (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The clock for launch times and spot-price timestamps (default: a
    /// [`ManualClock`] at its default start).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The fault plan to consult (default: an empty one of its own).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Use this catalog instead of the embedded one of the region.
    pub fn catalog(mut self, catalog: Catalog) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// Do not create the default VPC, subnets, security groups and AMIs.
    pub fn without_defaults(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// Add a subnet (replacing a default one with the same id).
    pub fn subnet(mut self, subnet: Subnet) -> Self {
        self.subnets.push(subnet);
        self
    }

    /// Add a security group.
    pub fn security_group(mut self, group: SecurityGroup) -> Self {
        self.security_groups.push(group);
        self
    }

    /// Add an image.
    pub fn image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
    }

    /// Add a capacity reservation (see [`odcr`], [`capacity_block`]).
    pub fn capacity_reservation(mut self, reservation: CapacityReservation) -> Self {
        self.reservations.push(reservation);
        self
    }

    /// Limit a capacity pool, as [`Ec2Sim::set_capacity`].
    pub fn capacity(
        mut self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        count: u32,
    ) -> Self {
        self.capacity
            .push((instance_type.into(), zone.into(), capacity_type, count));
        self
    }

    /// Build the simulator.
    pub fn build(self) -> Result<Ec2Sim, SimError> {
        let catalog = match self.catalog {
            Some(c) => c,
            None => Catalog::embedded(&self.region)?,
        };
        let mut rng = SplitMix64::new(self.seed);
        let vpc_id = seed::resource_id(&mut rng, "vpc");
        let mut state = State {
            rng,
            subnets: BTreeMap::new(),
            security_groups: BTreeMap::new(),
            images: BTreeMap::new(),
            reservations: BTreeMap::new(),
            templates: BTreeMap::new(),
            instances: BTreeMap::new(),
            pools: BTreeMap::new(),
            spot_prices: BTreeMap::new(),
            fleets: BTreeMap::new(),
            fleet_requests: Vec::new(),
            no_spot_role: false,
            on_demand_prices: BTreeMap::new(),
            price_list_calls: 0,
        };
        let mut subnets = Vec::new();
        let mut groups = Vec::new();
        let mut images = Vec::new();
        if self.defaults {
            subnets = seed::subnets(
                &mut state.rng,
                &self.region,
                &vpc_id,
                &catalog.zones,
                &self.cluster,
            );
            groups = seed::security_groups(&mut state.rng, &vpc_id, &self.cluster);
            images = seed::images(&mut state.rng, &self.k8s_version);
        }
        for s in subnets.into_iter().chain(self.subnets) {
            state.subnets.insert(s.id.clone(), s);
        }
        for g in groups.into_iter().chain(self.security_groups) {
            state.security_groups.insert(g.id.clone(), g);
        }
        for i in images.into_iter().chain(self.images) {
            state.images.insert(i.id.clone(), i);
        }
        for r in self.reservations {
            state.reservations.insert(r.id.clone(), r);
        }
        for (t, z, c, n) in self.capacity {
            state.pools.insert((t, z, c), n);
        }
        Ok(Ec2Sim {
            inner: Arc::new(Inner {
                region: self.region,
                cluster: self.cluster,
                vpc_id,
                catalog,
                clock: self
                    .clock
                    .unwrap_or_else(|| Arc::new(ManualClock::default())),
                faults: self.faults,
                state: Mutex::new(state),
            }),
        })
    }
}

impl Ec2Sim {
    /// A builder for `region` (one of the embedded catalog's regions).
    pub fn builder(region: &str) -> Ec2SimBuilder {
        Ec2SimBuilder {
            region: region.to_string(),
            cluster: "flotilla".into(),
            k8s_version: DEFAULT_K8S_VERSION.into(),
            seed: 0,
            clock: None,
            faults: Faults::default(),
            catalog: None,
            defaults: true,
            subnets: Vec::new(),
            security_groups: Vec::new(),
            images: Vec::new(),
            reservations: Vec::new(),
            capacity: Vec::new(),
        }
    }

    /// The simulator of `region` with the defaults.
    pub fn new(region: &str) -> Result<Ec2Sim, SimError> {
        Ec2Sim::builder(region).build()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One port call: fault before, `f` under the lock, fault after.
    fn call<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut State, &Inner) -> PortResult<T>,
    ) -> PortResult<T> {
        self.inner.faults.before(op)?;
        let out = {
            let mut st = self.lock();
            f(&mut st, &self.inner)?
        };
        self.inner.faults.after(op)?;
        Ok(out)
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.inner.region
    }

    /// The cluster name of the discovery tags.
    pub fn cluster(&self) -> &str {
        &self.inner.cluster
    }

    /// The id of the default VPC.
    pub fn vpc_id(&self) -> &str {
        &self.inner.vpc_id
    }

    /// The catalog behind the instance types, offerings and prices.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The fault plan this simulator consults.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The clock it reads.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    /// Add a subnet (replacing one with the same id).
    pub fn add_subnet(&self, subnet: Subnet) {
        self.lock().subnets.insert(subnet.id.clone(), subnet);
    }

    /// Add a security group (replacing one with the same id).
    pub fn add_security_group(&self, group: SecurityGroup) {
        self.lock().security_groups.insert(group.id.clone(), group);
    }

    /// Add an image (replacing one with the same id).
    pub fn add_image(&self, image: Image) {
        self.lock().images.insert(image.id.clone(), image);
    }

    /// Add a capacity reservation (replacing one with the same id).
    pub fn add_capacity_reservation(&self, reservation: CapacityReservation) {
        self.lock()
            .reservations
            .insert(reservation.id.clone(), reservation);
    }

    /// Every subnet, by id.
    pub fn subnets(&self) -> Vec<Subnet> {
        self.lock().subnets.values().cloned().collect()
    }

    /// Every security group, by id.
    pub fn security_groups(&self) -> Vec<SecurityGroup> {
        self.lock().security_groups.values().cloned().collect()
    }

    /// Every image, by id.
    pub fn images(&self) -> Vec<Image> {
        self.lock().images.values().cloned().collect()
    }

    /// Every capacity reservation, by id.
    pub fn capacity_reservations(&self) -> Vec<CapacityReservation> {
        self.lock().reservations.values().cloned().collect()
    }

    /// One capacity reservation.
    pub fn capacity_reservation(&self, id: &str) -> Option<CapacityReservation> {
        self.lock().reservations.get(id).cloned()
    }

    /// Limit the pool (instance type, zone, capacity type) to `count` more
    /// launches. Launches into capacity reservations do not use pools;
    /// terminations do not refill them.
    pub fn set_capacity(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        count: u32,
    ) {
        self.lock()
            .pools
            .insert((instance_type.into(), zone.into(), capacity_type), count);
    }

    /// Make the pool unlimited again.
    pub fn clear_capacity(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) {
        self.lock()
            .pools
            .remove(&(instance_type.into(), zone.into(), capacity_type));
    }

    /// Remaining launches of a limited pool; `None` when unlimited.
    pub fn capacity(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> Option<u32> {
        self.lock()
            .pools
            .get(&(instance_type.into(), zone.into(), capacity_type))
            .copied()
    }

    /// Whether the account has the spot service-linked role
    /// (`AWSServiceRoleForEC2Spot`; it has by default). Without it, every
    /// spot CreateFleet fails with EC2's
    /// `AuthFailure.ServiceLinkedRoleCreationNotPermitted` for each
    /// override, launching nothing.
    pub fn set_spot_service_linked_role(&self, present: bool) {
        self.lock().no_spot_role = !present;
    }

    /// Launch an instance outside Flotilla (another stack, a user's
    /// RunInstances) with `tags`, in the first subnet of `zone`. Returns
    /// its id.
    pub fn run_instance(
        &self,
        instance_type: &str,
        zone: &str,
        tags: BTreeMap<String, String>,
    ) -> String {
        let now = self.inner.clock.now_secs();
        let mut st = self.lock();
        let id = fleet::new_instance_id(&mut st);
        let subnet_id = st
            .subnets
            .values()
            .find(|s| s.zone == zone)
            .map(|s| s.id.clone())
            .unwrap_or_default();
        st.instances.insert(
            id.clone(),
            InstanceRecord {
                instance: Instance {
                    id: id.clone(),
                    instance_type: instance_type.to_string(),
                    zone: zone.to_string(),
                    state: InstanceState::Running,
                    lifecycle: "on-demand".into(),
                    launch_time: now,
                    capacity_reservation_id: None,
                    tags,
                },
                subnet_id,
                vpc_id: self.inner.vpc_id.clone(),
                image_id: String::new(),
                launch_template: String::new(),
                client_token: String::new(),
                terminated_at: None,
            },
        );
        id
    }

    /// Override the catalog's spot price of (instance type, zone).
    pub fn set_spot_price(&self, instance_type: &str, zone: &str, price: f64) {
        self.lock()
            .spot_prices
            .insert((instance_type.into(), zone.into()), price);
    }

    fn end_reservation(&self, id: &str, state: &str) -> bool {
        let now = self.inner.clock.now_secs();
        let mut st = self.lock();
        let Some(r) = st.reservations.get_mut(id) else {
            return false;
        };
        r.state = state.to_string();
        r.available_instance_count = 0;
        let block = r.reservation_type == flotilla_core::model::ReservationType::CapacityBlock;
        if block {
            // A capacity block's instances end with it.
            for rec in st.instances.values_mut() {
                if rec.instance.capacity_reservation_id.as_deref() == Some(id)
                    && !rec.instance.state.is_gone()
                {
                    rec.instance.state = InstanceState::Terminated;
                    rec.terminated_at = Some(now);
                }
            }
        }
        true
    }

    /// The reservation reaches its end date: state `expired`, nothing
    /// available; a capacity block's instances are terminated (an ODCR's
    /// keep running as plain on-demand instances). False if unknown.
    pub fn expire_reservation(&self, id: &str) -> bool {
        self.end_reservation(id, "expired")
    }

    /// The reservation is cancelled: state `cancelled`, otherwise as
    /// [`Ec2Sim::expire_reservation`]. False if unknown.
    pub fn cancel_reservation(&self, id: &str) -> bool {
        self.end_reservation(id, "cancelled")
    }

    /// Reclaim a running spot instance (it becomes `Terminated`). False if
    /// it is unknown, not spot or already gone.
    pub fn interrupt_spot(&self, id: &str) -> bool {
        let now = self.inner.clock.now_secs();
        let mut st = self.lock();
        match st.instances.get_mut(id) {
            Some(rec) if rec.instance.lifecycle == "spot" && !rec.instance.state.is_gone() => {
                rec.instance.state = InstanceState::Terminated;
                rec.terminated_at = Some(now);
                true
            }
            _ => false,
        }
    }

    /// Set an instance's state (e.g. `Stopped`, `ShuttingDown`) for tests.
    /// False if unknown. Reservation capacity is not touched.
    pub fn set_instance_state(&self, id: &str, state: InstanceState) -> bool {
        let now = self.inner.clock.now_secs();
        let mut st = self.lock();
        match st.instances.get_mut(id) {
            Some(rec) => {
                rec.instance.state = state;
                if state == InstanceState::Terminated && rec.terminated_at.is_none() {
                    rec.terminated_at = Some(now);
                }
                true
            }
            None => false,
        }
    }

    /// DeleteTags of `key` on instance `id` (e.g. to stand for an instance
    /// launched before a tag existed). False when there is no such instance.
    pub fn remove_tag(&self, id: &str, key: &str) -> bool {
        let mut st = self.lock();
        match st.instances.get_mut(id) {
            Some(rec) => {
                rec.instance.tags.remove(key);
                true
            }
            None => false,
        }
    }

    /// Every instance ever launched (terminated ones included), by id.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock()
            .instances
            .values()
            .map(|r| r.instance.clone())
            .collect()
    }

    /// Instances not terminated or shutting down, by id.
    pub fn live_instances(&self) -> Vec<Instance> {
        self.lock()
            .instances
            .values()
            .filter(|r| !r.instance.state.is_gone())
            .map(|r| r.instance.clone())
            .collect()
    }

    /// One instance with its launch details.
    pub fn instance_record(&self, id: &str) -> Option<InstanceRecord> {
        self.lock().instances.get(id).cloned()
    }

    /// The configuration of launch template `name`.
    pub fn launch_template(&self, name: &str) -> Option<LaunchTemplateConfig> {
        self.lock().templates.get(name).map(|t| t.config.clone())
    }

    /// Names of the existing launch templates, sorted.
    pub fn launch_template_names(&self) -> Vec<String> {
        self.lock().templates.keys().cloned().collect()
    }

    /// CreateFleet calls that reached the simulator (past injected
    /// before-effect faults), including idempotent replays and rejected
    /// requests.
    pub fn create_fleet_calls(&self) -> usize {
        self.lock().fleet_requests.len()
    }

    /// The requests of those calls, in order.
    pub fn fleet_requests(&self) -> Vec<FleetRequest> {
        self.lock().fleet_requests.clone()
    }
}

impl Filterable for Subnet {
    const KIND: &'static str = "subnets";
    const NAMES: &'static [&'static str] = &[
        "subnet-id",
        "vpc-id",
        "availability-zone",
        "availability-zone-id",
        "state",
    ];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        match name {
            "subnet-id" => vec![self.id.clone()],
            "vpc-id" => vec![self.vpc_id.clone()],
            "availability-zone" => vec![self.zone.clone()],
            "availability-zone-id" => vec![self.zone_id.clone()],
            "state" => vec!["available".into()],
            _ => vec![],
        }
    }
}

impl Filterable for SecurityGroup {
    const KIND: &'static str = "security groups";
    const NAMES: &'static [&'static str] = &["group-id", "group-name", "vpc-id"];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        match name {
            "group-id" => vec![self.id.clone()],
            "group-name" => vec![self.name.clone()],
            "vpc-id" => vec![self.vpc_id.clone()],
            _ => vec![],
        }
    }
}

fn amazon_owned(image: &Image) -> bool {
    image.owner_id == "amazon" || AMAZON_OWNER_IDS.contains(&image.owner_id.as_str())
}

impl Filterable for Image {
    const KIND: &'static str = "images";
    const NAMES: &'static [&'static str] = &[
        "image-id",
        "name",
        "architecture",
        "owner-id",
        "owner-alias",
        "state",
        "image-type",
    ];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        match name {
            "image-id" => vec![self.id.clone()],
            "name" => vec![self.name.clone()],
            "architecture" => vec![self.architecture.clone()],
            "owner-id" => vec![self.owner_id.clone()],
            "owner-alias" if amazon_owned(self) => vec!["amazon".into()],
            "state" => vec!["available".into()],
            "image-type" => vec!["machine".into()],
            _ => vec![],
        }
    }
}

impl Filterable for CapacityReservation {
    const KIND: &'static str = "capacity reservations";
    const NAMES: &'static [&'static str] = &[
        "capacity-reservation-id",
        "instance-type",
        "availability-zone",
        "state",
        "owner-id",
        "instance-match-criteria",
        "tenancy",
        "instance-platform",
    ];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        match name {
            "capacity-reservation-id" => vec![self.id.clone()],
            "instance-type" => vec![self.instance_type.clone()],
            "availability-zone" => vec![self.availability_zone.clone()],
            "state" => vec![self.state.clone()],
            "owner-id" => vec![self.owner_id.clone()],
            "instance-match-criteria" => vec![self.instance_match_criteria.clone()],
            "tenancy" => vec![self.tenancy.clone()],
            "instance-platform" => vec![self.platform.clone()],
            _ => vec![],
        }
    }
}

impl Filterable for InstanceRecord {
    const KIND: &'static str = "instances";
    const NAMES: &'static [&'static str] = &[
        "instance-id",
        "instance-state-name",
        "instance-type",
        "availability-zone",
        "capacity-reservation-id",
        "instance-lifecycle",
        "subnet-id",
        "vpc-id",
        "image-id",
    ];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.instance.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        let i = &self.instance;
        match name {
            "instance-id" => vec![i.id.clone()],
            "instance-state-name" => vec![state_name(i.state).into()],
            "instance-type" => vec![i.instance_type.clone()],
            "availability-zone" => vec![i.zone.clone()],
            "capacity-reservation-id" => i.capacity_reservation_id.iter().cloned().collect(),
            // EC2 sets InstanceLifecycle only for spot (and scheduled,
            // capacity-block) instances.
            "instance-lifecycle" if i.lifecycle == "spot" => vec!["spot".into()],
            "subnet-id" => vec![self.subnet_id.clone()],
            "vpc-id" => vec![self.vpc_id.clone()],
            "image-id" => vec![self.image_id.clone()],
            _ => vec![],
        }
    }
}

impl Filterable for Template {
    const KIND: &'static str = "launch templates";
    const NAMES: &'static [&'static str] = &["launch-template-name"];
    fn tags(&self) -> &BTreeMap<String, String> {
        &self.config.tags
    }
    fn values(&self, name: &str) -> Vec<String> {
        match name {
            "launch-template-name" => vec![self.name.clone()],
            _ => vec![],
        }
    }
}

/// EC2's name of an instance state.
pub fn state_name(s: InstanceState) -> &'static str {
    match s {
        InstanceState::Pending => "pending",
        InstanceState::Running => "running",
        InstanceState::ShuttingDown => "shutting-down",
        InstanceState::Terminated => "terminated",
        InstanceState::Stopping => "stopping",
        InstanceState::Stopped => "stopped",
    }
}

/// EC2's launch-template name rule: 3 to 128 of `a-zA-Z0-9()./_-`.
fn valid_template_name(name: &str) -> bool {
    (3..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "()./_-".contains(c))
}

impl Ec2 for Ec2Sim {
    async fn describe_instance_types(&self) -> PortResult<Vec<InstanceTypeInfo>> {
        self.call(ops::EC2_DESCRIBE_INSTANCE_TYPES, |_, inner| {
            Ok(inner
                .catalog
                .entries
                .iter()
                .map(|e| e.info.clone())
                .collect())
        })
    }

    async fn describe_instance_type_offerings(&self) -> PortResult<Vec<(String, String)>> {
        self.call(ops::EC2_DESCRIBE_INSTANCE_TYPE_OFFERINGS, |_, inner| {
            let pairs: BTreeSet<(String, String)> = inner
                .catalog
                .entries
                .iter()
                .flat_map(|e| {
                    e.offerings
                        .iter()
                        .filter(|o| o.capacity_type != CapacityType::Reserved)
                        .map(|o| (e.info.name.clone(), o.zone.clone()))
                })
                .collect();
            Ok(pairs.into_iter().collect())
        })
    }

    async fn describe_spot_prices(&self) -> PortResult<Vec<SpotPrice>> {
        self.call(ops::EC2_DESCRIBE_SPOT_PRICES, |st, inner| {
            let now = inner.clock.now_secs();
            let mut out: Vec<SpotPrice> = inner
                .catalog
                .entries
                .iter()
                .flat_map(|e| {
                    e.offerings
                        .iter()
                        .filter(|o| o.capacity_type == CapacityType::Spot)
                        .map(|o| SpotPrice {
                            instance_type: e.info.name.clone(),
                            zone: o.zone.clone(),
                            price: st
                                .spot_prices
                                .get(&(e.info.name.clone(), o.zone.clone()))
                                .copied()
                                .unwrap_or(o.price),
                            timestamp: now,
                        })
                })
                .collect();
            out.sort_by(|a, b| (&a.instance_type, &a.zone).cmp(&(&b.instance_type, &b.zone)));
            Ok(out)
        })
    }

    async fn describe_subnets(&self, filters: &[Filter]) -> PortResult<Vec<Subnet>> {
        self.call(ops::EC2_DESCRIBE_SUBNETS, |st, _| {
            select(st.subnets.values(), filters, Subnet::clone)
        })
    }

    async fn describe_security_groups(&self, filters: &[Filter]) -> PortResult<Vec<SecurityGroup>> {
        self.call(ops::EC2_DESCRIBE_SECURITY_GROUPS, |st, _| {
            select(st.security_groups.values(), filters, SecurityGroup::clone)
        })
    }

    async fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> PortResult<Vec<Image>> {
        self.call(ops::EC2_DESCRIBE_IMAGES, |st, _| {
            let owned = |i: &&Image| {
                owners.is_empty()
                    || owners.iter().any(|o| match o.as_str() {
                        "self" => i.owner_id == ACCOUNT_ID,
                        "amazon" => amazon_owned(i),
                        id => i.owner_id == id,
                    })
            };
            select(st.images.values().filter(owned), filters, Image::clone)
        })
    }

    async fn describe_capacity_reservations(
        &self,
        filters: &[Filter],
    ) -> PortResult<Vec<CapacityReservation>> {
        self.call(ops::EC2_DESCRIBE_CAPACITY_RESERVATIONS, |st, _| {
            select(
                st.reservations.values(),
                filters,
                CapacityReservation::clone,
            )
        })
    }

    async fn create_launch_template(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> PortResult<()> {
        self.call(ops::EC2_CREATE_LAUNCH_TEMPLATE, |st, _| {
            if !valid_template_name(name) {
                return Err(PortError::Rejected(format!(
                    "InvalidLaunchTemplateName.MalformedException: {name:?} (3 to 128 of a-zA-Z0-9()./_-)"
                )));
            }
            st.templates.entry(name.to_string()).or_insert_with(|| Template {
                name: name.to_string(),
                config: config.clone(),
            });
            Ok(())
        })
    }

    async fn describe_launch_templates(&self, filters: &[Filter]) -> PortResult<Vec<String>> {
        self.call(ops::EC2_DESCRIBE_LAUNCH_TEMPLATES, |st, _| {
            select(st.templates.values(), filters, |t| t.name.clone())
        })
    }

    async fn delete_launch_template(&self, name: &str) -> PortResult<()> {
        self.call(ops::EC2_DELETE_LAUNCH_TEMPLATE, |st, _| {
            st.templates.remove(name);
            Ok(())
        })
    }

    async fn create_fleet(&self, request: &FleetRequest) -> PortResult<FleetResponse> {
        self.call(ops::EC2_CREATE_FLEET, |st, inner| {
            let now = inner.clock.now_secs();
            fleet::create_fleet(st, &inner.catalog, request, now)
        })
    }

    async fn describe_instances(&self, filters: &[Filter]) -> PortResult<Vec<Instance>> {
        self.call(ops::EC2_DESCRIBE_INSTANCES, |st, inner| {
            let now = inner.clock.now_secs();
            let visible = st.instances.values().filter(|r| {
                r.terminated_at
                    .is_none_or(|t| now - t < TERMINATED_VISIBLE_SECS)
            });
            select(visible, filters, |r| r.instance.clone())
        })
    }

    async fn terminate_instances(&self, ids: &[String]) -> PortResult<()> {
        self.call(ops::EC2_TERMINATE_INSTANCES, |st, inner| {
            if let Some(bad) = ids.iter().find(|id| !fleet::valid_instance_id(id)) {
                return Err(PortError::Rejected(format!(
                    "InvalidInstanceID.Malformed: {bad:?}"
                )));
            }
            let now = inner.clock.now_secs();
            for id in ids {
                let Some(rec) = st.instances.get_mut(id) else {
                    continue;
                };
                if rec.instance.state == InstanceState::Terminated {
                    continue;
                }
                rec.instance.state = InstanceState::Terminated;
                rec.terminated_at = Some(now);
                if let Some(r) = rec
                    .instance
                    .capacity_reservation_id
                    .as_ref()
                    .and_then(|rid| st.reservations.get_mut(rid))
                {
                    if r.state == "active" && r.available_instance_count < r.total_instance_count {
                        r.available_instance_count += 1;
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
