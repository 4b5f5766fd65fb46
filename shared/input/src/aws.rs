//! AWS CLI outputs: `describe-instance-types`,
//! `describe-capacity-reservations` and `describe-instances`.

use std::collections::BTreeMap;

use flotilla_core::catalog::InstanceTypeInfo;
use flotilla_core::model::{CapacityReservation, InstanceFacts, ReservationType};
use serde::Deserialize;
use serde_json::Value;

use crate::util::Ctx;
use crate::InputError;

/// Whether `v` is an AWS CLI output with top-level key `key` (and not a
/// Kubernetes object).
fn aws_output<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let m = v.as_object()?;
    if m.contains_key("kind") || m.contains_key("apiVersion") {
        return None;
    }
    m.get(key)
}

/// `{"InstanceTypes": [...]}`, parsed by the catalog.
pub(crate) fn instance_types(
    ctx: &Ctx,
    v: &Value,
) -> Result<Option<Vec<InstanceTypeInfo>>, InputError> {
    if aws_output(v, "InstanceTypes").is_none() {
        return Ok(None);
    }
    // The catalog's errors name the entry and field (`InstanceTypes[3].VCpuInfo...`).
    flotilla_core::catalog::describe::parse_describe_instance_types(v)
        .map(Some)
        .map_err(|e| ctx.err("", e))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Tag {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Reservation {
    capacity_reservation_id: String,
    instance_type: String,
    availability_zone: String,
    #[serde(default)]
    total_instance_count: u32,
    #[serde(default)]
    available_instance_count: u32,
    #[serde(default)]
    state: String,
    #[serde(default)]
    instance_match_criteria: String,
    #[serde(default)]
    reservation_type: Option<ReservationType>,
    #[serde(default)]
    instance_platform: String,
    #[serde(default)]
    tenancy: String,
    #[serde(default)]
    owner_id: String,
    #[serde(default)]
    end_date: Option<String>,
    #[serde(default)]
    tags: Vec<Tag>,
}

/// `{"CapacityReservations": [...]}`.
pub(crate) fn capacity_reservations(
    ctx: &Ctx,
    v: &Value,
) -> Result<Option<Vec<CapacityReservation>>, InputError> {
    let Some(list) = aws_output(v, "CapacityReservations") else {
        return Ok(None);
    };
    let rs: Vec<Reservation> = ctx.de(list, "CapacityReservations")?;
    Ok(Some(
        rs.into_iter()
            .map(|r| CapacityReservation {
                id: r.capacity_reservation_id,
                instance_type: r.instance_type,
                availability_zone: r.availability_zone,
                total_instance_count: r.total_instance_count,
                available_instance_count: r.available_instance_count,
                state: r.state,
                instance_match_criteria: r.instance_match_criteria,
                reservation_type: r.reservation_type.unwrap_or(ReservationType::Default),
                platform: r.instance_platform,
                tenancy: r.tenancy,
                owner_id: r.owner_id,
                end_date: r.end_date,
                tags: r
                    .tags
                    .into_iter()
                    .map(|t| (t.key, t.value))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect(),
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InstanceReservation {
    #[serde(default)]
    instances: Vec<InstanceDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InstanceDoc {
    instance_id: String,
    #[serde(default)]
    image_id: Option<String>,
    #[serde(default)]
    subnet_id: Option<String>,
    #[serde(default)]
    security_groups: Vec<GroupDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GroupDoc {
    group_id: String,
}

/// `{"Reservations": [{"Instances": [...]}]}` (`describe-instances`): per
/// instance id, its image, subnet and security groups (the drift checks).
pub(crate) fn instances(
    ctx: &Ctx,
    v: &Value,
) -> Result<Option<BTreeMap<String, InstanceFacts>>, InputError> {
    let Some(list) = aws_output(v, "Reservations") else {
        return Ok(None);
    };
    let rs: Vec<InstanceReservation> = ctx.de(list, "Reservations")?;
    let mut out = BTreeMap::new();
    for (i, r) in rs.into_iter().enumerate() {
        for (j, inst) in r.instances.into_iter().enumerate() {
            if inst.instance_id.is_empty() {
                let path = format!("Reservations[{i}].Instances[{j}].InstanceId");
                return Err(ctx.err(&path, "must not be empty"));
            }
            let mut groups: Vec<String> = inst
                .security_groups
                .into_iter()
                .map(|g| g.group_id)
                .collect();
            groups.sort();
            groups.dedup();
            let facts = InstanceFacts {
                image_id: inst.image_id.filter(|s| !s.is_empty()),
                subnet_id: inst.subnet_id.filter(|s| !s.is_empty()),
                security_group_ids: groups,
            };
            out.insert(inst.instance_id, facts);
        }
    }
    Ok(Some(out))
}
