//! Capacity reservations (On-Demand Capacity Reservations and Capacity
//! Blocks for ML), pure: which reservations an EC2NodeClass selects, the
//! `reserved` offerings they become, and the expiry policy for nodes
//! running in them.
//!
//! * **Selection.** `spec.capacityReservationSelectorTerms`: a reservation
//!   is selected when *any* term matches it (the documented example selects
//!   "everything tagged `application: foobar` in addition to
//!   `cr-56fac701cc1951b03`"); within a term every given field must match
//!   (`id`, every `tags` entry — value `*` matches any value — and
//!   `ownerID`). A NodeClass without terms selects nothing: Karpenter's
//!   native support never uses an ODCR implicitly.
//! * **Usable** ([`unusable_reason`]): state `active`, an instance type of the
//!   catalog, a zone of the catalog's region, platform `Linux/UNIX`
//!   (`Windows` for the Windows AMI families), tenancy `default`, and
//!   `instanceMatchCriteria` `open` or `targeted`. Both criteria are used
//!   when selected — a launch into a reservation always targets it — and
//!   neither is used when not selected: an `open` ODCR that a NodeClass does
//!   not select is never planned as `reserved` capacity (EC2 may still place
//!   an on-demand instance in it; that instance is then plain on-demand to
//!   the scheduler, as in Karpenter). A capacity block whose drain time
//!   ([`drain_at`]) has passed is not offered either.
//! * **Offerings** ([`offering`]): one per (reservation, type, zone), capacity
//!   type `reserved`, `available` = the instances still free, priced at the
//!   type's on-demand price (the reserved-capacity RFC: keeps the relative
//!   order between reservations of different sizes; the scheduler prefers a
//!   reserved offering over spot and on-demand regardless of price, i.e.
//!   treats it as already paid for).
//! * **Expiry** ([`expiry_actions`]): capacity blocks are drained 10 minutes
//!   before EC2 starts reclaiming (30 minutes before the end, 60 for
//!   UltraServers); after the end, and for an instance whose ODCR has gone,
//!   the reservation counts are freed; an instance left outside its ODCR is
//!   relabelled `on-demand`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::{CapacityType, Catalog, Offering, ReservationRef};
use crate::labels;
use crate::model::{AmiFamily, CapacityReservation, NodeClass, ReservationType};

/// `State` of a reservation that can take instances.
pub const STATE_ACTIVE: &str = "active";
/// `InstancePlatform` of Linux reservations.
pub const PLATFORM_LINUX: &str = "Linux/UNIX";
/// `InstancePlatform` of Windows reservations.
pub const PLATFORM_WINDOWS: &str = "Windows";
/// The only tenancy Flotilla launches.
pub const TENANCY_DEFAULT: &str = "default";

/// EC2 starts terminating instances of a capacity block this long before
/// its end (instance types).
pub const EC2_RECLAIM_LEAD_SECS: i64 = 30 * 60;
/// The same for UltraServer capacity blocks.
pub const EC2_RECLAIM_LEAD_ULTRASERVER_SECS: i64 = 60 * 60;
/// Flotilla drains capacity-block nodes this long before EC2's reclaim.
pub const DRAIN_LEAD_SECS: i64 = 10 * 60;

/// The `karpenter.k8s.aws/capacity-reservation-type` label value.
pub fn reservation_type_label(t: ReservationType) -> &'static str {
    match t {
        ReservationType::Default => "default",
        ReservationType::CapacityBlock => "capacity-block",
    }
}

/// One entry of `spec.capacityReservationSelectorTerms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

impl SelectorTerm {
    /// Every field given matches (`tags` value `*`: any value).
    pub fn matches(&self, r: &CapacityReservation) -> bool {
        self.id.as_ref().is_none_or(|id| *id == r.id)
            && self.owner_id.as_ref().is_none_or(|o| *o == r.owner_id)
            && self
                .tags
                .iter()
                .all(|(k, v)| r.tags.get(k).is_some_and(|have| v == "*" || have == v))
    }
}

/// A malformed selector term: `path` is relative to the object
/// (`spec.capacityReservationSelectorTerms[1].id`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TermError {
    pub path: String,
    pub message: String,
}

/// Parses the terms of one `spec.capacityReservationSelectorTerms` value
/// (`Null` or absent: none). A term needs `id` or `tags`; `id` excludes
/// `tags` and `ownerID` (the Karpenter CRD's rules).
pub fn parse_selector_terms(v: Option<&serde_json::Value>) -> Result<Vec<SelectorTerm>, TermError> {
    const FIELD: &str = "spec.capacityReservationSelectorTerms";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(vec![]);
    };
    let Some(list) = v.as_array() else {
        return Err(TermError {
            path: FIELD.into(),
            message: "expected a list of terms".into(),
        });
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let path = format!("{FIELD}[{i}]");
        let term: SelectorTerm = serde_json::from_value(t.clone()).map_err(|e| TermError {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let err = |m: &str| TermError {
            path: path.clone(),
            message: m.into(),
        };
        if term.id.is_none() && term.tags.is_empty() {
            return Err(err("a term needs `id` or `tags`"));
        }
        if term.id.is_some() && (!term.tags.is_empty() || term.owner_id.is_some()) {
            return Err(err("`id` cannot be combined with `tags` or `ownerID`"));
        }
        if term.tags.iter().any(|(k, _)| k.is_empty()) {
            return Err(err("empty tag key"));
        }
        out.push(term);
    }
    Ok(out)
}

/// The selector terms of a NodeClass (from its raw spec).
pub fn selector_terms(nc: &NodeClass) -> Result<Vec<SelectorTerm>, TermError> {
    parse_selector_terms(nc.spec.get("capacityReservationSelectorTerms"))
}

/// The `InstancePlatform` a NodeClass's instances have.
pub fn platform(family: &AmiFamily) -> &'static str {
    match family {
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => PLATFORM_WINDOWS,
        _ => PLATFORM_LINUX,
    }
}

/// Why reservation `r` cannot take instances of a NodeClass with `platform`
/// (`None`: it can). An empty platform or tenancy (a hand-written input) is
/// read as `Linux/UNIX` / `default`. `now` (Unix seconds), if given, rules
/// out capacity blocks past their drain time.
pub fn unusable_reason(
    r: &CapacityReservation,
    catalog: &Catalog,
    platform: &str,
    now: Option<i64>,
) -> Option<String> {
    if r.state != STATE_ACTIVE {
        return Some(format!("state {:?} is not active", r.state));
    }
    if !matches!(r.instance_match_criteria.as_str(), "open" | "targeted") {
        return Some(format!(
            "instanceMatchCriteria {:?} is neither open nor targeted",
            r.instance_match_criteria
        ));
    }
    if catalog.get(&r.instance_type).is_none() {
        return Some(format!(
            "instance type {} is not in the catalog",
            r.instance_type
        ));
    }
    if !catalog.zones.contains(&r.availability_zone) {
        return Some(format!(
            "zone {} is not in region {}",
            r.availability_zone, catalog.region
        ));
    }
    let have = if r.platform.is_empty() {
        PLATFORM_LINUX
    } else {
        r.platform.as_str()
    };
    if have != platform {
        return Some(format!(
            "platform {have:?}, the NodeClass launches {platform:?}"
        ));
    }
    let tenancy = if r.tenancy.is_empty() {
        TENANCY_DEFAULT
    } else {
        r.tenancy.as_str()
    };
    if tenancy != TENANCY_DEFAULT {
        return Some(format!("tenancy {tenancy:?} (only default is launched)"));
    }
    if let (Some(now), Some(drain)) = (now, drain_at(r, false)) {
        if now >= drain {
            return Some("the capacity block is about to end".into());
        }
    }
    None
}

/// Indices into `reservations` of those the NodeClass selects and can use.
pub fn select(
    nc: &NodeClass,
    terms: &[SelectorTerm],
    reservations: &[CapacityReservation],
    catalog: &Catalog,
    now: Option<i64>,
) -> Vec<usize> {
    let platform = platform(&nc.ami_family);
    reservations
        .iter()
        .enumerate()
        .filter(|(_, r)| terms.iter().any(|t| t.matches(r)))
        .filter(|(_, r)| unusable_reason(r, catalog, platform, now).is_none())
        .map(|(i, _)| i)
        .collect()
}

/// The on-demand price of `instance_type` in `zone` (else its cheapest
/// on-demand price anywhere, else 0): the price of its reserved offerings.
pub fn on_demand_price(catalog: &Catalog, instance_type: &str, zone: &str) -> f64 {
    let Some(e) = catalog.get(instance_type) else {
        return 0.0;
    };
    let od = || {
        e.offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
    };
    od().find(|o| o.zone == zone)
        .map(|o| o.price)
        .or_else(|| od().map(|o| o.price).reduce(f64::min))
        .unwrap_or(0.0)
}

/// The `reserved` offering of reservation `r` with `available` instances
/// still free.
pub fn offering(r: &CapacityReservation, catalog: &Catalog, available: u32) -> Offering {
    Offering {
        zone: r.availability_zone.clone(),
        capacity_type: CapacityType::Reserved,
        price: on_demand_price(catalog, &r.instance_type, &r.availability_zone),
        available,
        reservation: Some(ReservationRef {
            id: r.id.clone(),
            reservation_type: r.reservation_type,
        }),
    }
}

/// Instances of `r` a schedule run may still plan: its
/// `AvailableInstanceCount`, capped by `left` (the service's counter:
/// reservation id → instances still available), when it has an entry.
pub fn available(r: &CapacityReservation, left: Option<&BTreeMap<String, u32>>) -> u32 {
    let n = r.available_instance_count;
    match left.and_then(|m| m.get(&r.id)) {
        Some(&l) => n.min(l),
        None => n,
    }
}

/// Parses an RFC 3339 timestamp (`2026-11-23T04:00:00Z`,
/// `2026-11-23T04:00:00.000+00:00`) to Unix seconds (fractions dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |a: usize, z: usize| -> Option<i64> {
        let t = s.get(a..z)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        rest = &frac[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                return None;
            }
            let oh: i64 = rest[1..3].parse().ok()?;
            let om: i64 = rest[4..6].parse().ok()?;
            let o = oh * 3600 + om * 60;
            if rb[0] == b'-' {
                -o
            } else {
                o
            }
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// The end of `r` in Unix seconds, if it has a (parsable) end date.
pub fn end_at(r: &CapacityReservation) -> Option<i64> {
    r.end_date.as_deref().and_then(parse_rfc3339)
}

/// When EC2 starts terminating the instances of capacity block `r`
/// (`None` for ODCRs and blocks without an end).
pub fn reclaim_at(r: &CapacityReservation, ultraserver: bool) -> Option<i64> {
    if r.reservation_type != ReservationType::CapacityBlock {
        return None;
    }
    let lead = if ultraserver {
        EC2_RECLAIM_LEAD_ULTRASERVER_SECS
    } else {
        EC2_RECLAIM_LEAD_SECS
    };
    end_at(r).map(|e| e - lead)
}

/// When Flotilla starts draining the nodes of capacity block `r`: 10
/// minutes before [`reclaim_at`].
pub fn drain_at(r: &CapacityReservation, ultraserver: bool) -> Option<i64> {
    reclaim_at(r, ultraserver).map(|t| t - DRAIN_LEAD_SECS)
}

/// A node (or NodeClaim not yet registered) launched into a reservation,
/// as the sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservedNode {
    /// Node name, or NodeClaim name before the node registers.
    pub name: String,
    /// The NodeClaim holding the reservation counter, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    /// Its `karpenter.k8s.aws/capacity-reservation-id` label.
    pub reservation_id: String,
    /// Runs on an UltraServer (EC2 reclaims 60 minutes before the end).
    #[serde(default)]
    pub ultraserver: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ActionKind {
    /// Mark the node unschedulable.
    Cordon,
    /// Evict the node's pods (respecting PodDisruptionBudgets) before `deadline`.
    Drain,
    /// Set `setLabels` and remove `removeLabels` on the node and its NodeClaim.
    Relabel,
    /// The instance no longer holds its reservation: give the NodeClaim's
    /// slot back to the reservation counter.
    FreeReservation,
    /// Add the `karpenter.sh/disrupted:NoSchedule` taint (a disruption
    /// decision is about to drain the node).
    Taint,
    /// Remove the `karpenter.sh/disrupted` taint and uncordon (the
    /// decision was abandoned: the node is back in service).
    Untaint,
}

/// One step for the cluster agent / the sweep, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Action {
    pub kind: ActionKind,
    /// Node name (or NodeClaim name before registration).
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    pub reservation_id: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_labels: Vec<String>,
    /// Unix seconds by which the action must be complete: for cordon and
    /// drain, when EC2 starts terminating; otherwise `now`.
    pub deadline: i64,
    pub reason: String,
}

/// The expiry policy at `now` (Unix seconds; injected, never read from a
/// clock). `reservations` should be everything DescribeCapacityReservations
/// reports for the account (expired and cancelled ones included while EC2
/// still lists them): a node whose reservation is missing is treated as
/// having left it.
///
/// Per node, in input order:
/// * capacity block, `drain_at <= now < end`: `Cordon` and `Drain`, deadline
///   = when EC2 starts terminating (end − 30 min, − 60 min on UltraServers);
///   from `end` on (or the block no longer `active`/`scheduled`-listed):
///   `FreeReservation` only (EC2 has terminated the instance);
/// * ODCR (`default`) that is gone, not `active`, or past its end date:
///   `Relabel` (`karpenter.sh/capacity-type=on-demand`, reservation labels
///   removed) and `FreeReservation`;
/// * otherwise nothing.
pub fn expiry_actions(
    now: i64,
    reservations: &[CapacityReservation],
    nodes: &[ReservedNode],
) -> Vec<Action> {
    let by_id: BTreeMap<&str, &CapacityReservation> =
        reservations.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut out = Vec::new();
    for n in nodes {
        let action = |kind, deadline, reason: String| Action {
            kind,
            node: n.name.clone(),
            node_claim: n.node_claim.clone(),
            reservation_id: n.reservation_id.clone(),
            set_labels: BTreeMap::new(),
            remove_labels: vec![],
            deadline,
            reason,
        };
        let r = by_id.get(n.reservation_id.as_str()).copied();
        let ended = r.and_then(end_at).is_some_and(|e| now >= e);
        let listed_live = r.is_some_and(|r| {
            r.state == STATE_ACTIVE || r.state == "scheduled" || r.state == "pending"
        });
        let is_block = r.is_some_and(|r| r.reservation_type == ReservationType::CapacityBlock);
        if is_block {
            let r = r.expect("checked above");
            if ended || !listed_live {
                out.push(action(
                    ActionKind::FreeReservation,
                    now,
                    format!("capacity block {} has ended (state {})", r.id, r.state),
                ));
                continue;
            }
            let (Some(drain), Some(reclaim)) =
                (drain_at(r, n.ultraserver), reclaim_at(r, n.ultraserver))
            else {
                continue;
            };
            if now >= drain {
                let why = format!(
                    "capacity block {} ends at {}; EC2 terminates its instances from {reclaim}",
                    r.id,
                    r.end_date.as_deref().unwrap_or_default()
                );
                out.push(action(ActionKind::Cordon, reclaim, why.clone()));
                out.push(action(ActionKind::Drain, reclaim, why));
            }
            continue;
        }
        if r.is_some() && listed_live && !ended {
            continue;
        }
        let why = match r {
            None => format!("capacity reservation {} no longer exists", n.reservation_id),
            Some(r) if ended => format!(
                "capacity reservation {} ended at {}",
                r.id,
                r.end_date.as_deref().unwrap_or_default()
            ),
            Some(r) => format!("capacity reservation {} is {}", r.id, r.state),
        };
        let mut relabel = action(
            ActionKind::Relabel,
            now,
            format!("{why}; the instance keeps running as on-demand"),
        );
        relabel.set_labels.insert(
            labels::CAPACITY_TYPE.into(),
            labels::CAPACITY_TYPE_ON_DEMAND.into(),
        );
        relabel.remove_labels = vec![
            labels::CAPACITY_RESERVATION_ID.into(),
            labels::CAPACITY_RESERVATION_TYPE.into(),
        ];
        out.push(relabel);
        out.push(action(ActionKind::FreeReservation, now, why));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CatalogEntry, InstanceTypeInfo, UNLIMITED};

    pub(crate) fn reservation(id: &str, ty: &str, zone: &str, n: u32) -> CapacityReservation {
        CapacityReservation {
            id: id.into(),
            instance_type: ty.into(),
            availability_zone: zone.into(),
            total_instance_count: n,
            available_instance_count: n,
            state: "active".into(),
            instance_match_criteria: "targeted".into(),
            reservation_type: ReservationType::Default,
            platform: "Linux/UNIX".into(),
            tenancy: "default".into(),
            owner_id: "111122223333".into(),
            end_date: None,
            tags: BTreeMap::new(),
        }
    }

    fn catalog() -> Catalog {
        let info = InstanceTypeInfo::synthetic("m5.large", "amd64", 2, 8192, 0);
        Catalog {
            region: "test-1".into(),
            zones: vec!["test-1a".into(), "test-1b".into()],
            entries: vec![CatalogEntry {
                info,
                offerings: vec![Offering {
                    zone: "test-1b".into(),
                    capacity_type: CapacityType::OnDemand,
                    price: 0.096,
                    available: UNLIMITED,
                    reservation: None,
                }],
            }],
            source: "test".into(),
        }
    }

    fn node_class(terms: serde_json::Value) -> NodeClass {
        NodeClass {
            name: "default".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: None,
            template_hash: None,
            status: Default::default(),
            spec: serde_json::json!({ "capacityReservationSelectorTerms": terms }),
        }
    }

    #[test]
    fn terms_select_by_id_tags_and_owner() {
        let mut a = reservation("cr-a", "m5.large", "test-1a", 1);
        a.tags.insert("application".into(), "foobar".into());
        let b = reservation("cr-b", "m5.large", "test-1a", 1);
        let mut c = reservation("cr-c", "m5.large", "test-1a", 1);
        c.tags.insert("application".into(), "foobar".into());
        c.owner_id = "999".into();
        let all = [a, b, c];
        let sel = |terms| {
            let nc = node_class(terms);
            let t = selector_terms(&nc).unwrap();
            select(&nc, &t, &all, &catalog(), None)
        };
        assert_eq!(
            sel(serde_json::json!([{"tags": {"application": "foobar"}}, {"id": "cr-b"}])),
            vec![0, 1, 2]
        );
        assert_eq!(
            sel(serde_json::json!([{"tags": {"application": "foobar"}, "ownerID": "999"}])),
            vec![2]
        );
        assert_eq!(
            sel(serde_json::json!([{"tags": {"application": "*"}}])),
            vec![0, 2]
        );
        assert_eq!(sel(serde_json::json!([{"id": "cr-b"}])), vec![1]);
        assert_eq!(sel(serde_json::Value::Null), Vec::<usize>::new());
    }

    #[test]
    fn malformed_terms_name_the_field() {
        let e = parse_selector_terms(Some(&serde_json::json!([{"id": "cr-1"}, {"idd": "x"}])))
            .unwrap_err();
        assert!(e.path.ends_with("[1]"), "{e}");
        let e = parse_selector_terms(Some(&serde_json::json!([{"ownerID": "1"}]))).unwrap_err();
        assert!(e.message.contains("`id` or `tags`"), "{e}");
        let e = parse_selector_terms(Some(
            &serde_json::json!([{"id": "cr-1", "tags": {"a": "b"}}]),
        ))
        .unwrap_err();
        assert!(e.message.contains("cannot be combined"), "{e}");
    }

    #[test]
    fn mismatched_reservations_are_unusable() {
        let cat = catalog();
        let ok = reservation("cr", "m5.large", "test-1a", 1);
        assert_eq!(unusable_reason(&ok, &cat, PLATFORM_LINUX, None), None);
        let mut open = ok.clone();
        open.instance_match_criteria = "open".into();
        assert_eq!(unusable_reason(&open, &cat, PLATFORM_LINUX, None), None);
        type Mutate = Box<dyn Fn(&mut CapacityReservation)>;
        let cases: Vec<(&str, Mutate)> = vec![
            ("state", Box::new(|r| r.state = "expired".into())),
            ("platform", Box::new(|r| r.platform = "Windows".into())),
            ("tenancy", Box::new(|r| r.tenancy = "dedicated".into())),
            (
                "zone",
                Box::new(|r| r.availability_zone = "other-1a".into()),
            ),
            (
                "instance type",
                Box::new(|r| r.instance_type = "x9.huge".into()),
            ),
            (
                "instanceMatchCriteria",
                Box::new(|r| r.instance_match_criteria = String::new()),
            ),
        ];
        for (what, f) in cases {
            let mut r = ok.clone();
            f(&mut r);
            let why = unusable_reason(&r, &cat, PLATFORM_LINUX, None);
            assert!(
                why.as_deref().is_some_and(|w| w.contains(what)),
                "{what}: {why:?}"
            );
        }
        // Windows NodeClasses need Windows reservations.
        assert!(unusable_reason(&ok, &cat, PLATFORM_WINDOWS, None).is_some());
    }

    #[test]
    fn offerings_are_priced_on_demand_and_capped_by_the_counter() {
        let cat = catalog();
        let r = reservation("cr", "m5.large", "test-1a", 5);
        // No on-demand offering in test-1a: the type's cheapest elsewhere.
        let o = offering(&r, &cat, available(&r, None));
        assert_eq!(
            (o.price, o.available, o.capacity_type),
            (0.096, 5, CapacityType::Reserved)
        );
        let left: BTreeMap<String, u32> = [("cr".to_string(), 2)].into();
        assert_eq!(available(&r, Some(&left)), 2);
        let left: BTreeMap<String, u32> = [("cr".to_string(), 9)].into();
        assert_eq!(available(&r, Some(&left)), 5);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-23T04:15:00Z"), Some(1_795_407_300));
        assert_eq!(
            parse_rfc3339("2026-11-23T04:15:00.123Z"),
            Some(1_795_407_300)
        );
        assert_eq!(
            parse_rfc3339("2026-11-23T05:15:00+01:00"),
            Some(1_795_407_300)
        );
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    fn block(end: &str) -> CapacityReservation {
        let mut r = reservation("cr-blk", "m5.large", "test-1a", 2);
        r.reservation_type = ReservationType::CapacityBlock;
        r.end_date = Some(end.into());
        r
    }

    fn node(name: &str, res: &str, ultraserver: bool) -> ReservedNode {
        ReservedNode {
            name: name.into(),
            node_claim: Some(format!("{name}-claim")),
            reservation_id: res.into(),
            ultraserver,
        }
    }

    fn kinds(a: &[Action]) -> Vec<ActionKind> {
        a.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn capacity_blocks_drain_ten_minutes_before_ec2_reclaims() {
        let r = block("2026-11-23T12:00:00Z");
        let end = parse_rfc3339("2026-11-23T12:00:00Z").unwrap();
        let reclaim = end - 30 * 60;
        let drain = reclaim - 10 * 60;
        let nodes = [node("n1", "cr-blk", false)];
        let at = |t| expiry_actions(t, std::slice::from_ref(&r), &nodes);
        assert!(at(drain - 1).is_empty());
        let a = at(drain);
        assert_eq!(kinds(&a), vec![ActionKind::Cordon, ActionKind::Drain]);
        assert!(a.iter().all(|a| a.deadline == reclaim && a.node == "n1"));
        assert_eq!(
            kinds(&at(end - 1)),
            vec![ActionKind::Cordon, ActionKind::Drain]
        );
        let a = at(end);
        assert_eq!(kinds(&a), vec![ActionKind::FreeReservation]);
        assert_eq!(a[0].node_claim.as_deref(), Some("n1-claim"));
        // UltraServers: EC2 reclaims 60 minutes before the end.
        let us = [node("u1", "cr-blk", true)];
        let drain_us = end - 70 * 60;
        assert!(expiry_actions(drain_us - 1, std::slice::from_ref(&r), &us).is_empty());
        let a = expiry_actions(drain_us, std::slice::from_ref(&r), &us);
        assert_eq!(kinds(&a), vec![ActionKind::Cordon, ActionKind::Drain]);
        assert_eq!(a[1].deadline, end - 60 * 60);
    }

    #[test]
    fn capacity_blocks_are_not_offered_past_their_drain_time() {
        let cat = catalog();
        let r = block("2026-11-23T12:00:00Z");
        let drain = drain_at(&r, false).unwrap();
        assert_eq!(
            unusable_reason(&r, &cat, PLATFORM_LINUX, Some(drain - 1)),
            None
        );
        assert!(unusable_reason(&r, &cat, PLATFORM_LINUX, Some(drain)).is_some());
        assert_eq!(unusable_reason(&r, &cat, PLATFORM_LINUX, None), None);
    }

    #[test]
    fn instances_outside_their_odcr_are_relabelled_on_demand() {
        let live = reservation("cr-live", "m5.large", "test-1a", 2);
        let mut cancelled = reservation("cr-gone", "m5.large", "test-1a", 2);
        cancelled.state = "cancelled".into();
        let mut ending = reservation("cr-end", "m5.large", "test-1a", 2);
        ending.end_date = Some("2026-11-23T12:00:00Z".into());
        let end = parse_rfc3339("2026-11-23T12:00:00Z").unwrap();
        let rs = [live, cancelled, ending];
        let nodes = [
            node("a", "cr-live", false),
            node("b", "cr-gone", false),
            node("c", "cr-missing", false),
            node("d", "cr-end", false),
        ];
        let a = expiry_actions(end - 1, &rs, &nodes);
        let names: Vec<(&str, ActionKind)> = a.iter().map(|a| (a.node.as_str(), a.kind)).collect();
        assert_eq!(
            names,
            vec![
                ("b", ActionKind::Relabel),
                ("b", ActionKind::FreeReservation),
                ("c", ActionKind::Relabel),
                ("c", ActionKind::FreeReservation),
            ]
        );
        let relabel = &a[0];
        assert_eq!(
            relabel
                .set_labels
                .get(labels::CAPACITY_TYPE)
                .map(String::as_str),
            Some("on-demand")
        );
        assert_eq!(
            relabel.remove_labels,
            vec![
                labels::CAPACITY_RESERVATION_ID,
                labels::CAPACITY_RESERVATION_TYPE
            ]
        );
        // At its end date the ODCR releases its instances.
        let a = expiry_actions(end, &rs, &nodes[3..]);
        assert_eq!(
            kinds(&a),
            vec![ActionKind::Relabel, ActionKind::FreeReservation]
        );
        // Plain data: serialises to camelCase JSON.
        let json = serde_json::to_value(&a[0]).unwrap();
        assert_eq!(json["kind"], "relabel");
        assert_eq!(json["setLabels"]["karpenter.sh/capacity-type"], "on-demand");
        assert_eq!(json["deadline"], end);
    }
}
