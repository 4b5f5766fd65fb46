//! What a node costs in the scheduler's choices: its EBS volumes priced
//! into every comparison (`Pool::node_price`), and the NodePool's
//! `flotilla.dev/consolidate-tolerance`. See docs/scheduling.md, "What a
//! node costs".

use super::*;
use crate::catalog::ebs::{self, EbsVolume};
use crate::catalog::{CatalogEntry, InstanceTypeInfo, Offering, UNLIMITED};
use crate::model::{AmiFamily, NodeClass, NodePool, Pod, PodTemplate};
use crate::quantity::Quantity;
use crate::requirements::Requirement;
use crate::resources::Resources;

/// Two arm64 spot types in one zone: two `m6g.medium`s (2 pods each) cost
/// 3.4% less than one `m6g.large` (4 pods) before volumes.
const MEDIUM: f64 = 0.0140;
const LARGE: f64 = 0.0290;

fn catalog() -> Catalog {
    let entry = |name: &str, vcpu: u32, mib: u64, price: f64| CatalogEntry {
        info: InstanceTypeInfo {
            max_network_interfaces: 4,
            ipv4_per_interface: 15,
            ..InstanceTypeInfo::synthetic(name, "arm64", vcpu, mib, 0)
        },
        offerings: vec![Offering {
            zone: "us-west-2a".into(),
            capacity_type: CapacityType::Spot,
            price,
            available: UNLIMITED,
            reservation: None,
        }],
    };
    Catalog {
        region: "us-west-2".into(),
        zones: vec!["us-west-2a".into()],
        entries: vec![
            entry("m6g.large", 2, 8192, LARGE),
            entry("m6g.medium", 1, 4096, MEDIUM),
        ],
        source: "test".into(),
    }
}

fn pods(n: usize) -> Vec<Pod> {
    let q = |s: &str| Quantity::parse(s).unwrap();
    (0..n)
        .map(|i| Pod {
            name: format!("p{i:02}"),
            ..Pod::from(PodTemplate {
                namespace: "default".into(),
                requests: Resources::new()
                    .with("cpu", q("400m"))
                    .with("memory", q("1Gi"))
                    .with("pods", q("1")),
                ..PodTemplate::default()
            })
        })
        .collect()
}

/// A NodePool of spot nodes whose EC2NodeClass has one gp3 root volume of
/// `gib` (None: no node class, AL2023's 20 GiB default), with `tolerance`.
fn state(n: usize, gib: Option<u64>, tolerance: f64) -> ClusterState {
    let mut np = NodePool::new(
        "default",
        Requirements::from_iter_reqs([Requirement::in_values(labels::CAPACITY_TYPE, ["spot"])]),
    );
    np.consolidate_tolerance = tolerance;
    let mut node_classes = vec![];
    if let Some(g) = gib {
        np.node_class = Some("nc".into());
        node_classes.push(NodeClass {
            name: "nc".into(),
            kind: "EC2NodeClass".into(),
            ami_family: AmiFamily::AL2023,
            root_volume_size: None,
            volumes: Some(vec![EbsVolume::gp3("/dev/xvda", g)]),
            spec: serde_json::Value::Null,
            template_hash: None,
        });
    }
    ClusterState {
        pending_pods: pods(n),
        node_pools: vec![np],
        node_classes,
        ..Default::default()
    }
}

fn shapes(p: &Plan) -> Vec<&str> {
    p.node_claims
        .iter()
        .map(|c| c.price.instance_type.as_str())
        .collect()
}

fn plan(s: &ClusterState) -> Plan {
    schedule(s, &catalog(), &SchedulerOptions::default())
}

#[test]
fn root_volumes_make_fewer_larger_nodes_win() {
    // A 1 GiB root barely costs: two mediums per four pods stay cheaper.
    let tiny = plan(&state(8, Some(1), 0.0));
    assert_eq!(shapes(&tiny), ["m6g.medium"; 4], "{:?}", tiny.summary);
    // Karpenter's default 20 GiB gp3 root ($0.0022/h, a sixth of a medium):
    // a large per four pods is now cheaper.
    let default = plan(&state(8, None, 0.0));
    assert_eq!(shapes(&default), ["m6g.large"; 2], "{:?}", default.summary);
    let vol = 20.0 * 0.08 / ebs::HOURS_PER_MONTH;
    assert!(
        (default.node_claims[0].volume_price - vol).abs() < 1e-6,
        "rounded to 1e-6"
    );
    let s = &default.summary;
    assert!((s.hourly_price - 2.0 * LARGE).abs() < 1e-6, "{s:?}");
    assert!((s.volume_hourly_price - 2.0 * vol).abs() < 1e-6, "{s:?}");
    assert!(
        (s.total_hourly_price - 2.0 * (LARGE + vol)).abs() < 1e-6,
        "{s:?}"
    );
    // The plan that won costs less in total than the tiny-volume shape
    // would with 20 GiB roots.
    assert!(s.total_hourly_price < 4.0 * (MEDIUM + vol));
    // Larger volumes only widen the gap.
    assert_eq!(shapes(&plan(&state(8, Some(100), 0.0))), ["m6g.large"; 2]);
}

#[test]
fn consolidate_tolerance_prefers_fewer_nodes_within_it() {
    // 1 GiB roots: one large costs 3.2% more than two mediums.
    let t = |tol: f64| shapes(&plan(&state(4, Some(1), tol))).join(",");
    assert_eq!(t(0.0), "m6g.medium,m6g.medium");
    assert_eq!(t(0.02), "m6g.medium,m6g.medium", "2% is not enough");
    assert_eq!(t(0.05), "m6g.large", "within 5%: fewer nodes");
    assert_eq!(shapes(&plan(&state(8, Some(1), 0.05))), ["m6g.large"; 2]);
}

#[test]
fn same_input_same_prices() {
    let s = state(8, None, 0.05);
    let a = serde_json::to_string(&plan(&s)).unwrap();
    assert_eq!(a, serde_json::to_string(&plan(&s)).unwrap());
    assert!(a.contains("\"volumePrice\""), "{a}");
    assert!(a.contains("\"totalHourlyPrice\""), "{a}");
}
