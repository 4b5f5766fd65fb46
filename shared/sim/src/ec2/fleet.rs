//! CreateFleet (type `instant`): validation, `ClientToken` idempotency,
//! allocation strategies, capacity pools and reservations.

use std::collections::BTreeMap;

use flotilla_core::catalog::{CapacityType, Catalog};
use flotilla_core::launch::fleet::{
    FleetOverride, OnDemandAllocationStrategy, SpotAllocationStrategy, TargetCapacityType,
};
use flotilla_core::launch::ice::{
    FleetError, FleetInstance, LaunchTemplateAndOverrides, ResponseOverrides,
};
use flotilla_core::launch::{FleetRequest, FleetResponse};
use flotilla_core::model::ReservationType;
use flotilla_ports::{Instance, InstanceState, PortError, PortResult};

use super::{seed, InstanceRecord, State};

/// EC2's limit on client tokens.
const MAX_CLIENT_TOKEN_LEN: usize = 64;

/// `i-` and 8 or 17 lowercase hex digits.
pub(super) fn valid_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|h| {
        (h.len() == 8 || h.len() == 17) && h.chars().all(|c| c.is_ascii_hexdigit())
    })
}

fn rejected(code: &str, msg: impl std::fmt::Display) -> PortError {
    PortError::Rejected(format!("{code}: {msg}"))
}

/// The market a call launches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Market {
    Spot,
    OnDemand,
    CapacityBlock,
}

/// One override, resolved against the templates and the catalog.
struct Candidate<'a> {
    order: usize,
    template: &'a str,
    ov: &'a FleetOverride,
    image_id: String,
    vpc_id: String,
    /// The reservation the template targets.
    reservation: Option<String>,
    /// USD/hour on the market of the call; `None` when the type is not
    /// offered there in that zone.
    price: Option<f64>,
    tags: BTreeMap<String, String>,
}

fn response_overrides(ov: &FleetOverride) -> Option<LaunchTemplateAndOverrides> {
    Some(LaunchTemplateAndOverrides {
        overrides: Some(ResponseOverrides {
            instance_type: Some(ov.instance_type.clone()),
            availability_zone: Some(ov.availability_zone.clone()),
            subnet_id: Some(ov.subnet_id.clone()),
        }),
    })
}

fn fleet_error(ov: &FleetOverride, code: &str, message: String) -> FleetError {
    FleetError {
        error_code: code.into(),
        error_message: message,
        launch_template_and_overrides: response_overrides(ov),
    }
}

fn ice(ov: &FleetOverride) -> FleetError {
    fleet_error(
        ov,
        "InsufficientInstanceCapacity",
        format!(
            "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}). \
             Our system will be working on provisioning additional capacity.",
            ov.instance_type, ov.availability_zone
        ),
    )
}

fn reservation_exceeded(ov: &FleetOverride, id: &str) -> FleetError {
    fleet_error(
        ov,
        "ReservationCapacityExceeded",
        format!(
            "There is insufficient capacity in capacity reservation {id} for {} in {}.",
            ov.instance_type, ov.availability_zone
        ),
    )
}

/// Validates `req`, resolves its overrides and orders them as the
/// allocation strategy does.
fn candidates<'a>(
    st: &State,
    catalog: &Catalog,
    req: &'a FleetRequest,
    market: Market,
) -> PortResult<Vec<Candidate<'a>>> {
    let mut out = Vec::new();
    let instance_tags: BTreeMap<String, String> = req
        .tag_specifications
        .iter()
        .filter(|t| t.resource_type == "instance")
        .flat_map(|t| t.tags.iter().map(|t| (t.key.clone(), t.value.clone())))
        .collect();
    for cfg in &req.launch_template_configs {
        let name = cfg
            .launch_template_specification
            .launch_template_name
            .as_str();
        let template = st.templates.get(name).ok_or_else(|| {
            rejected(
                "InvalidLaunchTemplateName.NotFoundException",
                format!("launch template {name} does not exist"),
            )
        })?;
        let from_template = template.config.capacity_reservation_id.clone();
        let from_config = cfg.capacity_reservation.as_ref().map(|r| r.id.clone());
        if let (Some(a), Some(b)) = (&from_template, &from_config) {
            if a != b {
                return Err(rejected(
                    "InvalidParameterCombination",
                    format!("launch template {name} targets reservation {a}, the request {b}"),
                ));
            }
        }
        let reservation = from_template.or(from_config);
        let block = template.config.market_type.as_deref() == Some("capacity-block")
            || cfg
                .capacity_reservation
                .as_ref()
                .is_some_and(|r| r.reservation_type == ReservationType::CapacityBlock);
        match market {
            Market::CapacityBlock if !block || reservation.is_none() => {
                return Err(rejected(
                    "InvalidParameterCombination",
                    format!("capacity-block target capacity needs launch template {name} to target a capacity block"),
                ))
            }
            Market::Spot if reservation.is_some() => {
                return Err(rejected(
                    "InvalidParameterCombination",
                    format!("spot instances cannot launch into the capacity reservation of {name}"),
                ))
            }
            Market::OnDemand if block => {
                return Err(rejected(
                    "InvalidParameterCombination",
                    format!("launch template {name} targets a capacity block: use the capacity-block target capacity type"),
                ))
            }
            _ => {}
        }
        if cfg.overrides.is_empty() {
            return Err(rejected(
                "InvalidParameterValue",
                format!("launch template config {name} has no overrides (the simulator needs instance type and subnet)"),
            ));
        }
        let mut tags = template.config.tags.clone();
        tags.extend(instance_tags.clone());
        for ov in &cfg.overrides {
            let entry = catalog.get(&ov.instance_type).ok_or_else(|| {
                rejected(
                    "InvalidParameterValue",
                    format!("invalid instance type {:?}", ov.instance_type),
                )
            })?;
            let subnet = st.subnets.get(&ov.subnet_id).ok_or_else(|| {
                rejected(
                    "InvalidSubnetID.NotFound",
                    format!("the subnet ID '{}' does not exist", ov.subnet_id),
                )
            })?;
            if !ov.availability_zone.is_empty() && ov.availability_zone != subnet.zone {
                return Err(rejected(
                    "InvalidParameterValue",
                    format!(
                        "subnet {} is in {}, not in the requested zone {}",
                        subnet.id, subnet.zone, ov.availability_zone
                    ),
                ));
            }
            let image_id = if ov.image_id.is_empty() {
                template.config.image_id.clone()
            } else {
                ov.image_id.clone()
            };
            if !st.images.contains_key(&image_id) {
                return Err(rejected(
                    "InvalidAMIID.NotFound",
                    format!("the image id '[{image_id}]' does not exist"),
                ));
            }
            if ov.priority.is_some_and(|p| !p.is_finite() || p < 0.0) {
                return Err(rejected(
                    "InvalidParameterValue",
                    format!("priority {:?} of {}", ov.priority, ov.instance_type),
                ));
            }
            let wanted = match market {
                Market::Spot => CapacityType::Spot,
                Market::OnDemand | Market::CapacityBlock => CapacityType::OnDemand,
            };
            let price = entry
                .offerings
                .iter()
                .find(|o| o.capacity_type == wanted && o.zone == subnet.zone)
                .map(|o| {
                    if wanted == CapacityType::Spot {
                        st.spot_prices
                            .get(&(ov.instance_type.clone(), subnet.zone.clone()))
                            .copied()
                            .unwrap_or(o.price)
                    } else {
                        o.price
                    }
                });
            out.push(Candidate {
                order: out.len(),
                template: name,
                ov,
                image_id,
                vpc_id: subnet.vpc_id.clone(),
                reservation: reservation.clone(),
                price,
                tags: tags.clone(),
            });
        }
    }

    // Allocation strategy: EC2 defaults to lowest price; prioritized
    // strategies go by Priority (lower first, none = last).
    let by_priority = match market {
        Market::Spot => req.spot_options.as_ref().is_some_and(|o| {
            o.allocation_strategy == SpotAllocationStrategy::CapacityOptimizedPrioritized
        }),
        Market::OnDemand => req
            .on_demand_options
            .as_ref()
            .is_some_and(|o| o.allocation_strategy == OnDemandAllocationStrategy::Prioritized),
        Market::CapacityBlock => false,
    };
    let reservations_first = market == Market::OnDemand
        && req
            .on_demand_options
            .as_ref()
            .is_some_and(|o| o.capacity_reservation_options.is_some());
    let key = |c: &Candidate| -> (bool, f64, usize) {
        let has_reservation = reservations_first
            && (c.reservation.is_some() || !open_reservations(st, c.ov).is_empty());
        let rank = if by_priority {
            c.ov.priority.unwrap_or(f64::INFINITY)
        } else if market == Market::CapacityBlock {
            0.0
        } else {
            c.price.unwrap_or(f64::INFINITY)
        };
        (!has_reservation, rank, c.order)
    };
    out.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            .then(ka.2.cmp(&kb.2))
    });
    Ok(out)
}

/// Active `open` reservations with room for this override's type and zone,
/// by id.
fn open_reservations(st: &State, ov: &FleetOverride) -> Vec<String> {
    st.reservations
        .values()
        .filter(|r| {
            r.state == "active"
                && r.instance_match_criteria == "open"
                && r.reservation_type == ReservationType::Default
                && r.instance_type == ov.instance_type
                && r.availability_zone == ov.availability_zone
                && r.available_instance_count > 0
        })
        .map(|r| r.id.clone())
        .collect()
}

/// Takes up to `want` from a reservation; `Err` with the fleet error when
/// it cannot be used at all.
fn take_reservation(
    st: &mut State,
    ov: &FleetOverride,
    id: &str,
    want: u32,
) -> Result<u32, FleetError> {
    let Some(r) = st.reservations.get_mut(id) else {
        return Err(fleet_error(
            ov,
            "InvalidCapacityReservationId.NotFound",
            format!("the capacity reservation '{id}' does not exist"),
        ));
    };
    if r.instance_type != ov.instance_type || r.availability_zone != ov.availability_zone {
        return Err(fleet_error(
            ov,
            "InvalidParameterCombination",
            format!(
                "capacity reservation {id} is for {} in {}",
                r.instance_type, r.availability_zone
            ),
        ));
    }
    if r.state != "active" {
        return Err(reservation_exceeded(ov, id));
    }
    let n = want.min(r.available_instance_count);
    r.available_instance_count -= n;
    Ok(n)
}

/// Takes up to `want` from the (type, zone, capacity type) pool.
fn take_pool(st: &mut State, ov: &FleetOverride, ct: CapacityType, want: u32) -> u32 {
    match st
        .pools
        .get_mut(&(ov.instance_type.clone(), ov.availability_zone.clone(), ct))
    {
        None => want,
        Some(left) => {
            let n = want.min(*left);
            *left -= n;
            n
        }
    }
}

pub(super) fn new_instance_id(st: &mut State) -> String {
    loop {
        let id = seed::resource_id(&mut st.rng, "i");
        if !st.instances.contains_key(&id) {
            return id;
        }
    }
}

fn fleet_id(st: &mut State) -> String {
    let h = st.rng.hex(32);
    format!(
        "fleet-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The whole CreateFleet call under the simulator's lock.
pub(super) fn create_fleet(
    st: &mut State,
    catalog: &Catalog,
    req: &FleetRequest,
    now: i64,
) -> PortResult<FleetResponse> {
    st.fleet_requests.push(req.clone());
    let token = req.client_token.as_str();
    if token.len() > MAX_CLIENT_TOKEN_LEN {
        return Err(rejected(
            "InvalidParameterValue",
            format!("client token longer than {MAX_CLIENT_TOKEN_LEN} characters"),
        ));
    }
    if let Some((previous, response)) = st.fleets.get(token) {
        if previous == req {
            tracing::debug!(token, "CreateFleet replayed for its client token");
            return Ok(response.clone());
        }
        return Err(rejected(
            "IdempotentParameterMismatch",
            format!("client token {token} was used with a different request"),
        ));
    }
    let target = req.target_capacity_specification.total_target_capacity;
    if target == 0 {
        return Err(rejected(
            "InvalidTargetCapacitySpecification",
            "TotalTargetCapacity must be at least 1",
        ));
    }
    if req.launch_template_configs.is_empty() {
        return Err(rejected(
            "MissingParameter",
            "LaunchTemplateConfigs must not be empty",
        ));
    }
    let market = match req
        .target_capacity_specification
        .default_target_capacity_type
    {
        TargetCapacityType::Spot => Market::Spot,
        TargetCapacityType::OnDemand => Market::OnDemand,
        TargetCapacityType::CapacityBlock => Market::CapacityBlock,
    };
    let lifecycle = if market == Market::Spot {
        "spot"
    } else {
        "on-demand"
    };
    let pool_type = if market == Market::Spot {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    };

    // Resolve first (immutable), then launch.
    struct Plan {
        ov: FleetOverride,
        template: String,
        image_id: String,
        vpc_id: String,
        reservation: Option<String>,
        offered: bool,
        tags: BTreeMap<String, String>,
    }
    let plans: Vec<Plan> = candidates(st, catalog, req, market)?
        .into_iter()
        .map(|c| Plan {
            ov: c.ov.clone(),
            template: c.template.to_string(),
            image_id: c.image_id,
            vpc_id: c.vpc_id,
            reservation: c.reservation,
            offered: c.price.is_some(),
            tags: c.tags,
        })
        .collect();

    let mut remaining = target;
    let mut instances = Vec::new();
    let mut errors = Vec::new();
    for p in plans {
        if remaining == 0 {
            break;
        }
        if market == Market::Spot && st.no_spot_role {
            errors.push(fleet_error(
                &p.ov,
                flotilla_core::launch::ice::SPOT_SERVICE_LINKED_ROLE_ERROR,
                "The provided credentials do not have permission to create the service-linked \
                 role for EC2 Spot Instances."
                    .into(),
            ));
            continue;
        }
        if !p.offered {
            errors.push(fleet_error(
                &p.ov,
                "Unsupported",
                format!(
                    "Your requested instance type ({}) is not supported in your requested Availability Zone ({}) for {lifecycle} capacity.",
                    p.ov.instance_type, p.ov.availability_zone
                ),
            ));
            continue;
        }
        // (count, reservation) chunks this override launches.
        let mut chunks: Vec<(u32, Option<String>)> = Vec::new();
        match &p.reservation {
            Some(id) => match take_reservation(st, &p.ov, id, remaining) {
                Err(e) => errors.push(e),
                Ok(n) => {
                    if n < remaining {
                        errors.push(reservation_exceeded(&p.ov, id));
                    }
                    chunks.push((n, Some(id.clone())));
                }
            },
            None => {
                let mut want = remaining;
                if market == Market::OnDemand {
                    // Open ODCRs apply to any matching on-demand launch.
                    for id in open_reservations(st, &p.ov) {
                        if want == 0 {
                            break;
                        }
                        if let Ok(n) = take_reservation(st, &p.ov, &id, want) {
                            want -= n;
                            chunks.push((n, Some(id)));
                        }
                    }
                }
                if want > 0 {
                    let n = take_pool(st, &p.ov, pool_type, want);
                    if n < want {
                        errors.push(ice(&p.ov));
                    }
                    chunks.push((n, None));
                }
            }
        }
        let mut ids = Vec::new();
        for (n, reservation) in chunks {
            for _ in 0..n {
                let id = new_instance_id(st);
                st.instances.insert(
                    id.clone(),
                    InstanceRecord {
                        instance: Instance {
                            id: id.clone(),
                            instance_type: p.ov.instance_type.clone(),
                            zone: p.ov.availability_zone.clone(),
                            state: InstanceState::Running,
                            lifecycle: lifecycle.into(),
                            launch_time: now,
                            capacity_reservation_id: reservation.clone(),
                            tags: p.tags.clone(),
                        },
                        subnet_id: p.ov.subnet_id.clone(),
                        vpc_id: p.vpc_id.clone(),
                        image_id: p.image_id.clone(),
                        launch_template: p.template.clone(),
                        client_token: token.to_string(),
                        terminated_at: None,
                    },
                );
                ids.push(id);
            }
        }
        if !ids.is_empty() {
            remaining -= u32::try_from(ids.len()).unwrap_or(remaining);
            instances.push(FleetInstance {
                instance_ids: ids,
                instance_type: p.ov.instance_type.clone(),
                lifecycle: lifecycle.into(),
                launch_template_and_overrides: response_overrides(&p.ov),
            });
        }
    }

    let response = FleetResponse {
        fleet_id: Some(fleet_id(st)),
        instances,
        errors,
    };
    tracing::debug!(
        token,
        launched = target - remaining,
        target,
        errors = response.errors.len(),
        "CreateFleet"
    );
    if !token.is_empty() {
        st.fleets
            .insert(token.to_string(), (req.clone(), response.clone()));
    }
    Ok(response)
}
