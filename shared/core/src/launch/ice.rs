//! Reading a CreateFleet response: launched, retry without the offerings
//! that had insufficient capacity (ICE), fall back to the next capacity type,
//! or fail.
//!
//! Deep-dive rule ("How AWS makes the final selection", "When x86 gets
//! selected"): AWS may skip the preferred pools for lack of capacity and
//! reports them in `Errors`; an instance in `Instances` means the launch
//! succeeded even if other overrides failed. Offerings reported as
//! unavailable are removed from the next attempt and returned for the
//! unavailable-offerings cache (Karpenter keeps them [`ICE_TTL_SECONDS`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::fleet::{build_fleet_request, FleetInput};
use crate::catalog::CapacityType;

/// How long an offering that returned insufficient capacity stays out.
pub const ICE_TTL_SECONDS: u64 = 45;

/// Error codes that mean "no capacity for this offering", not "this request
/// is wrong".
pub const CAPACITY_ERROR_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "MaxSpotInstanceCountExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "ReservationCapacityExceeded",
];

pub fn is_capacity_error(code: &str) -> bool {
    CAPACITY_ERROR_CODES.contains(&code)
}

/// The error EC2 answers a spot launch with when the account has no spot
/// service-linked role (`AWSServiceRoleForEC2Spot`) and the caller may not
/// create it (`iam:CreateServiceLinkedRole` for `spot.amazonaws.com`).
pub const SPOT_SERVICE_LINKED_ROLE_ERROR: &str =
    "AuthFailure.ServiceLinkedRoleCreationNotPermitted";

/// The command that creates the spot service-linked role.
pub const SPOT_SERVICE_LINKED_ROLE_FIX: &str =
    "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com";

/// What to tell the operator when an error (its code, or a message
/// carrying it) is [`SPOT_SERVICE_LINKED_ROLE_ERROR`]; `None` otherwise.
pub fn spot_service_linked_role_hint(error: &str) -> Option<String> {
    error.contains(SPOT_SERVICE_LINKED_ROLE_ERROR).then(|| {
        format!(
            "the account has no spot service-linked role (AWSServiceRoleForEC2Spot) and the \
             launch role may not create it; create it once with `{SPOT_SERVICE_LINKED_ROLE_FIX}`"
        )
    })
}

/// An offering that had no capacity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableOffering {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
}

impl UnavailableOffering {
    /// When the ICE cache entry for this offering expires.
    pub fn expires_at(&self, now_unix: u64) -> u64 {
        now_unix.saturating_add(ICE_TTL_SECONDS)
    }
}

impl std::fmt::Display for UnavailableOffering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.instance_type, self.zone, self.capacity_type
        )
    }
}

/// The parts of a CreateFleet response Flotilla reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct FleetResponse {
    pub fleet_id: Option<String>,
    pub instances: Vec<FleetInstance>,
    pub errors: Vec<FleetError>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct FleetInstance {
    pub instance_ids: Vec<String>,
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub lifecycle: String,
    pub launch_template_and_overrides: Option<LaunchTemplateAndOverrides>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LaunchTemplateAndOverrides {
    pub overrides: Option<ResponseOverrides>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ResponseOverrides {
    pub instance_type: Option<String>,
    pub availability_zone: Option<String>,
    pub subnet_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct FleetError {
    pub error_code: String,
    pub error_message: String,
    pub launch_template_and_overrides: Option<LaunchTemplateAndOverrides>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchedInstance {
    pub instance_id: String,
    pub instance_type: String,
    /// Empty only if AWS reported neither a zone nor a known subnet.
    pub zone: String,
    pub capacity_type: CapacityType,
}

/// What to do after a CreateFleet call. Every variant carries the offerings
/// to put in the ICE cache for [`ICE_TTL_SECONDS`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Launched {
        instances: Vec<LaunchedInstance>,
        unavailable: Vec<UnavailableOffering>,
    },
    /// Only capacity errors and offerings of the same capacity type remain:
    /// call CreateFleet again with `next` (attempt + 1, new client token).
    Retry {
        unavailable: Vec<UnavailableOffering>,
        next: FleetInput,
    },
    /// Every offering of the requested capacity type is exhausted; `next`
    /// launches the next allowed capacity type (spot → on-demand).
    FallBack {
        unavailable: Vec<UnavailableOffering>,
        next: FleetInput,
    },
    Failed {
        reason: String,
        unavailable: Vec<UnavailableOffering>,
    },
}

fn overrides(o: &Option<LaunchTemplateAndOverrides>) -> Option<&ResponseOverrides> {
    o.as_ref().and_then(|l| l.overrides.as_ref())
}

fn zone_of(input: &FleetInput, o: Option<&ResponseOverrides>) -> Option<String> {
    let o = o?;
    if let Some(z) = o.availability_zone.as_ref().filter(|z| !z.is_empty()) {
        return Some(z.clone());
    }
    let subnet = o.subnet_id.as_ref()?;
    input
        .subnets
        .iter()
        .find(|s| &s.id == subnet)
        .map(|s| s.zone.clone())
}

/// Decides what follows `previous`'s CreateFleet call given its `response`.
pub fn next_attempt(previous: &FleetInput, response: &FleetResponse) -> Outcome {
    let ct = previous.capacity_type;
    // The (type, zone) pairs the request actually offered.
    let sent: BTreeSet<(String, String)> = build_fleet_request(previous)
        .map(|r| {
            r.launch_template_configs
                .iter()
                .flat_map(|c| &c.overrides)
                .map(|o| (o.instance_type.clone(), o.availability_zone.clone()))
                .collect()
        })
        .unwrap_or_default();

    let mut ice: BTreeSet<(String, String)> = BTreeSet::new();
    let mut other_errors: Vec<String> = Vec::new();
    for e in &response.errors {
        if !is_capacity_error(&e.error_code) {
            other_errors.push(format!("{}: {}", e.error_code, e.error_message));
            continue;
        }
        let ov = overrides(&e.launch_template_and_overrides);
        let ty = ov
            .and_then(|o| o.instance_type.clone())
            .filter(|t| !t.is_empty());
        let zone = zone_of(previous, ov);
        // The spot instance limit is account-wide: every spot pool is out.
        let whole_capacity_type =
            e.error_code == "MaxSpotInstanceCountExceeded" && ct == CapacityType::Spot;
        for (t, z) in &sent {
            let hit = whole_capacity_type
                || (ty.as_ref().is_none_or(|x| x == t) && zone.as_ref().is_none_or(|x| x == z));
            if hit {
                ice.insert((t.clone(), z.clone()));
            }
        }
    }
    let unavailable: Vec<UnavailableOffering> = ice
        .iter()
        .map(|(t, z)| UnavailableOffering {
            instance_type: t.clone(),
            zone: z.clone(),
            capacity_type: ct,
        })
        .collect();

    let mut launched = Vec::new();
    for inst in &response.instances {
        let ov = overrides(&inst.launch_template_and_overrides);
        let ty = if inst.instance_type.is_empty() {
            ov.and_then(|o| o.instance_type.clone()).unwrap_or_default()
        } else {
            inst.instance_type.clone()
        };
        let capacity_type = match (inst.lifecycle.as_str(), ct) {
            ("spot", _) => CapacityType::Spot,
            (_, CapacityType::Reserved) => CapacityType::Reserved,
            (_, CapacityType::Spot) if inst.lifecycle.is_empty() => CapacityType::Spot,
            _ => CapacityType::OnDemand,
        };
        let zone = zone_of(previous, ov).unwrap_or_default();
        for id in &inst.instance_ids {
            launched.push(LaunchedInstance {
                instance_id: id.clone(),
                instance_type: ty.clone(),
                zone: zone.clone(),
                capacity_type,
            });
        }
    }
    if !launched.is_empty() {
        return Outcome::Launched {
            instances: launched,
            unavailable,
        };
    }
    if !other_errors.is_empty() {
        let hint = response
            .errors
            .iter()
            .find_map(|e| spot_service_linked_role_hint(&e.error_code))
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        return Outcome::Failed {
            reason: format!(
                "CreateFleet for NodeClaim {} failed: {}{hint}",
                previous.node_claim_name,
                other_errors.join("; ")
            ),
            unavailable,
        };
    }
    if unavailable.is_empty() {
        return Outcome::Failed {
            reason: format!(
                "CreateFleet for NodeClaim {} returned no instances and no capacity errors",
                previous.node_claim_name
            ),
            unavailable,
        };
    }

    let mut next = previous.clone();
    next.attempt = next.attempt.saturating_add(1);
    next.offerings.retain(|o| {
        !(o.capacity_type == ct && ice.contains(&(o.instance_type.clone(), o.zone.clone())))
    });
    next.excluded.extend(unavailable.iter().cloned());
    next.excluded.sort();
    next.excluded.dedup();
    if build_fleet_request(&next).is_ok() {
        return Outcome::Retry { unavailable, next };
    }
    // Fall back to the next capacity type the NodeClaim allows
    // (reserved → spot → on-demand).
    let fallbacks: BTreeSet<CapacityType> = next
        .offerings
        .iter()
        .map(|o| o.capacity_type)
        .filter(|c| *c > ct)
        .collect();
    for fb in fallbacks {
        let mut candidate = next.clone();
        candidate.capacity_type = fb;
        if build_fleet_request(&candidate).is_ok() {
            return Outcome::FallBack {
                unavailable,
                next: candidate,
            };
        }
    }
    let exhausted: Vec<String> = next.excluded.iter().map(|u| u.to_string()).collect();
    Outcome::Failed {
        reason: format!(
            "insufficient capacity for NodeClaim {}: all offerings exhausted ({}) and no other capacity type allowed",
            previous.node_claim_name,
            exhausted.join(", ")
        ),
        unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::fleet::tests::{input, offering};

    const SPOT: CapacityType = CapacityType::Spot;
    const OD: CapacityType = CapacityType::OnDemand;

    fn ice(ty: &str, zone: &str) -> FleetError {
        FleetError {
            error_code: "InsufficientInstanceCapacity".into(),
            error_message: format!("We currently do not have sufficient {ty} capacity"),
            launch_template_and_overrides: Some(LaunchTemplateAndOverrides {
                overrides: Some(ResponseOverrides {
                    instance_type: Some(ty.into()),
                    availability_zone: Some(zone.into()),
                    subnet_id: None,
                }),
            }),
        }
    }

    fn instance(id: &str, ty: &str, lifecycle: &str, subnet: &str) -> FleetInstance {
        FleetInstance {
            instance_ids: vec![id.into()],
            instance_type: ty.into(),
            lifecycle: lifecycle.into(),
            launch_template_and_overrides: Some(LaunchTemplateAndOverrides {
                overrides: Some(ResponseOverrides {
                    instance_type: Some(ty.into()),
                    availability_zone: None,
                    subnet_id: Some(subnet.into()),
                }),
            }),
        }
    }

    fn spot_input() -> FleetInput {
        input(vec![
            offering("m6g.large", "arm64", "us-east-1a", SPOT, 0.03),
            offering("m5.large", "amd64", "us-east-1a", SPOT, 0.04),
            offering("m5.large", "amd64", "us-east-1b", SPOT, 0.045),
        ])
    }

    fn requested(i: &FleetInput) -> Vec<(String, String)> {
        build_fleet_request(i)
            .unwrap()
            .launch_template_configs
            .iter()
            .flat_map(|c| &c.overrides)
            .map(|o| (o.instance_type.clone(), o.availability_zone.clone()))
            .collect()
    }

    #[test]
    fn partial_ice_then_success() {
        let first = spot_input();
        let resp = FleetResponse {
            errors: vec![
                ice("m6g.large", "us-east-1a"),
                ice("m5.large", "us-east-1a"),
            ],
            ..Default::default()
        };
        let Outcome::Retry { unavailable, next } = next_attempt(&first, &resp) else {
            panic!("expected retry");
        };
        assert_eq!(
            unavailable
                .iter()
                .map(|u| u.to_string())
                .collect::<Vec<_>>(),
            ["m5.large/us-east-1a/spot", "m6g.large/us-east-1a/spot"]
        );
        assert_eq!(unavailable[0].expires_at(1000), 1045);
        assert_eq!(next.attempt, 1);
        assert_eq!(next.capacity_type, SPOT);
        assert_ne!(
            build_fleet_request(&next).unwrap().client_token,
            build_fleet_request(&first).unwrap().client_token
        );
        assert_eq!(
            requested(&next),
            [("m5.large".to_string(), "us-east-1b".to_string())]
        );

        let resp = FleetResponse {
            instances: vec![instance("i-123", "m5.large", "spot", "subnet-b1")],
            ..Default::default()
        };
        let Outcome::Launched {
            instances,
            unavailable,
        } = next_attempt(&next, &resp)
        else {
            panic!("expected launch");
        };
        assert!(unavailable.is_empty());
        assert_eq!(
            instances,
            [LaunchedInstance {
                instance_id: "i-123".into(),
                instance_type: "m5.large".into(),
                zone: "us-east-1b".into(),
                capacity_type: SPOT,
            }]
        );
    }

    #[test]
    fn launched_despite_errors_still_reports_ice() {
        let resp = FleetResponse {
            instances: vec![instance("i-1", "m5.large", "spot", "subnet-a2")],
            errors: vec![ice("m6g.large", "us-east-1a")],
            ..Default::default()
        };
        let Outcome::Launched {
            instances,
            unavailable,
        } = next_attempt(&spot_input(), &resp)
        else {
            panic!("expected launch");
        };
        assert_eq!(instances[0].zone, "us-east-1a");
        assert_eq!(unavailable.len(), 1);
    }

    #[test]
    fn full_spot_ice_falls_back_to_on_demand() {
        let mut i = spot_input();
        i.offerings
            .push(offering("m5.large", "amd64", "us-east-1a", OD, 0.096));
        let resp = FleetResponse {
            errors: vec![
                ice("m6g.large", "us-east-1a"),
                ice("m5.large", "us-east-1a"),
                ice("m5.large", "us-east-1b"),
            ],
            ..Default::default()
        };
        let Outcome::FallBack { unavailable, next } = next_attempt(&i, &resp) else {
            panic!("expected fallback");
        };
        assert_eq!(unavailable.len(), 3);
        assert_eq!(next.capacity_type, OD);
        let r = build_fleet_request(&next).unwrap();
        assert!(r.on_demand_options.is_some() && r.spot_options.is_none());
        assert_eq!(
            requested(&next),
            [("m5.large".to_string(), "us-east-1a".to_string())]
        );
    }

    #[test]
    fn spot_instance_limit_exhausts_every_spot_pool() {
        let mut i = spot_input();
        i.offerings
            .push(offering("m5.large", "amd64", "us-east-1a", OD, 0.096));
        let resp = FleetResponse {
            errors: vec![FleetError {
                error_code: "MaxSpotInstanceCountExceeded".into(),
                error_message: "Max spot instance count exceeded".into(),
                launch_template_and_overrides: None,
            }],
            ..Default::default()
        };
        let Outcome::FallBack { unavailable, next } = next_attempt(&i, &resp) else {
            panic!("expected fallback");
        };
        assert_eq!(unavailable.len(), 3);
        assert_eq!(next.capacity_type, OD);
    }

    #[test]
    fn nothing_left_fails_naming_the_exhausted_offerings() {
        let resp = FleetResponse {
            errors: vec![
                ice("m6g.large", "us-east-1a"),
                ice("m5.large", "us-east-1a"),
            ],
            ..Default::default()
        };
        let Outcome::Retry { next, .. } = next_attempt(&spot_input(), &resp) else {
            panic!("expected retry");
        };
        let resp = FleetResponse {
            errors: vec![ice("m5.large", "us-east-1b")],
            ..Default::default()
        };
        let Outcome::Failed {
            reason,
            unavailable,
        } = next_attempt(&next, &resp)
        else {
            panic!("expected failure");
        };
        assert_eq!(unavailable.len(), 1);
        for o in [
            "m6g.large/us-east-1a/spot",
            "m5.large/us-east-1a/spot",
            "m5.large/us-east-1b/spot",
            "default-1",
        ] {
            assert!(reason.contains(o), "{reason}");
        }
    }

    #[test]
    fn non_capacity_errors_fail() {
        for code in ["InvalidParameter", "UnauthorizedOperation"] {
            let resp = FleetResponse {
                errors: vec![
                    ice("m5.large", "us-east-1a"),
                    FleetError {
                        error_code: code.into(),
                        error_message: "nope".into(),
                        launch_template_and_overrides: None,
                    },
                ],
                ..Default::default()
            };
            let Outcome::Failed { reason, .. } = next_attempt(&spot_input(), &resp) else {
                panic!("expected failure for {code}");
            };
            assert!(reason.contains(code), "{reason}");
        }
        let Outcome::Failed { .. } = next_attempt(&spot_input(), &FleetResponse::default()) else {
            panic!("an empty response is a failure");
        };
    }

    #[test]
    fn a_missing_spot_service_linked_role_names_the_fix() {
        let resp = FleetResponse {
            errors: vec![FleetError {
                error_code: SPOT_SERVICE_LINKED_ROLE_ERROR.into(),
                error_message: "The provided credentials do not have permission to create the \
                    service-linked role for EC2 Spot Instances."
                    .into(),
                launch_template_and_overrides: None,
            }],
            ..Default::default()
        };
        let Outcome::Failed { reason, .. } = next_attempt(&spot_input(), &resp) else {
            panic!("expected a failure");
        };
        assert!(reason.contains("AWSServiceRoleForEC2Spot"), "{reason}");
        assert!(reason.contains(SPOT_SERVICE_LINKED_ROLE_FIX), "{reason}");
        // Other failures carry no such hint.
        assert_eq!(spot_service_linked_role_hint("UnauthorizedOperation"), None);
    }

    #[test]
    fn parses_the_pascal_case_response() {
        let json = r#"{"FleetId":"fleet-1","Instances":[{"InstanceIds":["i-0708"],"InstanceType":"m6g.large","Lifecycle":"spot",
            "LaunchTemplateAndOverrides":{"Overrides":{"InstanceType":"m6g.large","AvailabilityZone":"us-east-1a","SubnetId":"subnet-a2","Priority":0.6}}}],
            "Errors":[{"ErrorCode":"InsufficientInstanceCapacity","ErrorMessage":"x","LaunchTemplateAndOverrides":{"Overrides":{"InstanceType":"m5.large","AvailabilityZone":"us-east-1a"}}}]}"#;
        let resp: FleetResponse = serde_json::from_str(json).unwrap();
        let Outcome::Launched {
            instances,
            unavailable,
        } = next_attempt(&spot_input(), &resp)
        else {
            panic!("expected launch");
        };
        assert_eq!(instances[0].instance_id, "i-0708");
        assert_eq!(instances[0].capacity_type, SPOT);
        assert_eq!(unavailable[0].to_string(), "m5.large/us-east-1a/spot");
    }
}
