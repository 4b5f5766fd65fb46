//! AWS CLI outputs: `describe-instance-types` and
//! `describe-capacity-reservations`.

use std::collections::BTreeMap;

use flotilla_core::catalog::InstanceTypeInfo;
use flotilla_core::model::{CapacityReservation, ReservationType};
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
