#![allow(clippy::cloned_ref_to_slice_refs)] // `[x.clone()]` reads better in assertions
use std::collections::BTreeMap;

use flotilla_core::launch::fleet::{
    FleetLaunchTemplateConfig, FleetOverride, FleetType, LaunchTemplateSpecification,
    OnDemandAllocationStrategy, OnDemandOptions, SpotAllocationStrategy, SpotOptions, Tag,
    TagSpecification, TargetCapacitySpecification, TargetCapacityType,
};
use flotilla_core::launch::launch_template::MetadataOptions;

use super::*;
use crate::block_on;

const REGION: &str = "us-west-2";
const A: &str = "us-west-2a";
const B: &str = "us-west-2b";

fn sim() -> Ec2Sim {
    Ec2Sim::builder(REGION).cluster("prod").build().unwrap()
}

fn f(name: &str, values: &[&str]) -> Filter {
    Filter::new(name, values.iter().copied())
}

fn config(image_id: &str) -> LaunchTemplateConfig {
    LaunchTemplateConfig {
        image_id: image_id.into(),
        iam_instance_profile: "prod-node".into(),
        security_group_ids: vec![],
        user_data: String::new(),
        block_device_mappings: vec![],
        metadata_options: MetadataOptions::default(),
        tags: BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]),
        capacity_reservation_id: None,
        market_type: None,
        associate_public_ip_address: None,
    }
}

/// The newest AL2023 x86_64 AMI of the sim.
fn ami(s: &Ec2Sim) -> String {
    let mut images = block_on(s.describe_images(
        &[f(
            "name",
            &["amazon-eks-node-al2023-x86_64-standard-1.33-v*"],
        )],
        &["amazon".into()],
    ))
    .unwrap();
    images.sort_by(|a, b| b.creation_date.cmp(&a.creation_date));
    images[0].id.clone()
}

fn subnet(s: &Ec2Sim, zone: &str) -> String {
    block_on(s.describe_subnets(&[f("availability-zone", &[zone])])).unwrap()[0]
        .id
        .clone()
}

/// A sim with template `lt` (AL2023 x86_64).
fn with_template() -> (Ec2Sim, String) {
    let s = sim();
    let image = ami(&s);
    block_on(s.create_launch_template("flotilla/lt", &config(&image))).unwrap();
    (s, image)
}

fn ov(s: &Ec2Sim, ty: &str, zone: &str, priority: Option<f64>) -> FleetOverride {
    FleetOverride {
        instance_type: ty.into(),
        subnet_id: subnet(s, zone),
        image_id: ami(s),
        availability_zone: zone.into(),
        priority,
    }
}

fn request(
    token: &str,
    market: TargetCapacityType,
    target: u32,
    configs: Vec<(&str, Vec<FleetOverride>)>,
) -> FleetRequest {
    FleetRequest {
        client_token: token.into(),
        fleet_type: FleetType::Instant,
        target_capacity_specification: TargetCapacitySpecification {
            total_target_capacity: target,
            default_target_capacity_type: market,
        },
        spot_options: (market == TargetCapacityType::Spot).then_some(SpotOptions {
            allocation_strategy: SpotAllocationStrategy::PriceCapacityOptimized,
        }),
        on_demand_options: (market == TargetCapacityType::OnDemand).then_some(OnDemandOptions {
            allocation_strategy: OnDemandAllocationStrategy::LowestPrice,
            capacity_reservation_options: None,
        }),
        launch_template_configs: configs
            .into_iter()
            .map(|(name, overrides)| FleetLaunchTemplateConfig {
                launch_template_specification: LaunchTemplateSpecification {
                    launch_template_name: name.into(),
                    version: "$Latest".into(),
                },
                overrides,
                capacity_reservation: None,
            })
            .collect(),
        tag_specifications: vec![TagSpecification {
            resource_type: "instance".into(),
            tags: vec![Tag {
                key: "karpenter.sh/nodeclaim".into(),
                value: "default-1".into(),
            }],
        }],
    }
}

fn price(s: &Ec2Sim, ty: &str, zone: &str, ct: CapacityType) -> f64 {
    s.catalog()
        .get(ty)
        .unwrap()
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == ct)
        .unwrap()
        .price
}

fn launched(r: &FleetResponse) -> Vec<(String, String)> {
    r.instances
        .iter()
        .flat_map(|i| {
            let zone = i
                .launch_template_and_overrides
                .as_ref()
                .and_then(|l| l.overrides.as_ref())
                .and_then(|o| o.availability_zone.clone())
                .unwrap_or_default();
            i.instance_ids
                .iter()
                .map(move |_| (i.instance_type.clone(), zone.clone()))
        })
        .collect()
}

fn rejected_with(r: PortResult<impl std::fmt::Debug>, code: &str) {
    match r {
        Err(PortError::Rejected(m)) => assert!(m.contains(code), "{m}"),
        other => panic!("expected Rejected({code}), got {other:?}"),
    }
}

#[test]
fn default_region_and_filters() {
    let s = sim();
    let zones = &s.catalog().zones;
    let subnets =
        block_on(s.describe_subnets(&[f("tag:karpenter.sh/discovery", &["prod"])])).unwrap();
    assert_eq!(subnets.len(), zones.len());
    assert!(subnets.iter().all(|x| x.vpc_id == s.vpc_id()));
    let mut got: Vec<_> = subnets.iter().map(|x| x.zone.clone()).collect();
    got.sort();
    assert_eq!(&got, zones);
    assert_eq!(
        subnets
            .iter()
            .find(|x| x.zone == "us-west-2b")
            .unwrap()
            .zone_id,
        "usw2-az2"
    );
    // Wildcards, tag-key, AND across filters, OR within one.
    let q = |fs: &[Filter]| block_on(s.describe_subnets(fs)).unwrap().len();
    assert_eq!(q(&[f("tag:karpenter.sh/discovery", &["pr*"])]), zones.len());
    assert_eq!(q(&[f("tag:karpenter.sh/discovery", &["*"])]), zones.len());
    assert_eq!(q(&[f("tag:karpenter.sh/discovery", &["other"])]), 0);
    assert_eq!(q(&[f("tag-key", &["kubernetes.io/role/*"])]), zones.len());
    assert_eq!(q(&[f("availability-zone", &[A, B])]), 2);
    assert_eq!(
        q(&[
            f("availability-zone", &[A]),
            f("tag:Name", &["prod-private-us-west-2b"])
        ]),
        0
    );
    assert_eq!(q(&[f("subnet-id", &[&subnet(&s, A)])]), 1);
    assert_eq!(q(&[f("vpc-id", &[s.vpc_id()])]), zones.len());
    assert_eq!(
        q(&[f("tag:karpenter.sh/discovery", &[])]),
        0,
        "no values, no match"
    );
    rejected_with(
        block_on(s.describe_subnets(&[f("zone", &[A])])),
        "InvalidParameterValue",
    );
    rejected_with(
        block_on(s.describe_subnets(&[f("tag:", &["x"])])),
        "InvalidParameterValue",
    );

    let groups =
        block_on(s.describe_security_groups(&[f("tag:karpenter.sh/discovery", &["prod"])]))
            .unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "eks-cluster-sg-prod");
    let by_name = block_on(s.describe_security_groups(&[f("group-name", &["default"])])).unwrap();
    assert_eq!(by_name.len(), 1);
    let by_id = block_on(s.describe_security_groups(&[f("group-id", &[&groups[0].id])])).unwrap();
    assert_eq!(by_id, groups);
    rejected_with(
        block_on(s.describe_security_groups(&[f("image-id", &["x"])])),
        "InvalidParameterValue",
    );
}

#[test]
fn images_by_alias_patterns_owner_and_architecture() {
    let s = sim();
    let names = |fs: &[Filter], owners: &[&str]| -> Vec<String> {
        let owners: Vec<String> = owners.iter().map(|o| o.to_string()).collect();
        let mut v: Vec<String> = block_on(s.describe_images(fs, &owners))
            .unwrap()
            .into_iter()
            .map(|i| i.name)
            .collect();
        v.sort();
        v
    };
    let al2023 = f(
        "name",
        &[
            "amazon-eks-node-al2023-x86_64-standard-1.33-v*",
            "amazon-eks-node-al2023-arm64-standard-1.33-v*",
        ],
    );
    assert_eq!(
        names(std::slice::from_ref(&al2023), &["amazon"]),
        [
            "amazon-eks-node-al2023-arm64-standard-1.33-v20251001",
            "amazon-eks-node-al2023-arm64-standard-1.33-v20251101",
            "amazon-eks-node-al2023-x86_64-standard-1.33-v20251001",
            "amazon-eks-node-al2023-x86_64-standard-1.33-v20251101",
        ]
    );
    assert!(names(std::slice::from_ref(&al2023), &["self"]).is_empty());
    assert_eq!(
        names(std::slice::from_ref(&al2023), &[EKS_AMI_OWNER_ID]).len(),
        4
    );
    let br = f("name", &["bottlerocket-aws-k8s-1.33-aarch64-v*-*"]);
    let arm = names(&[br.clone(), f("architecture", &["arm64"])], &["amazon"]);
    assert_eq!(
        arm,
        [
            "bottlerocket-aws-k8s-1.33-aarch64-v1.49.0-9a5bd0f1",
            "bottlerocket-aws-k8s-1.33-aarch64-v1.50.0-4d0a6bcd"
        ]
    );
    assert!(names(&[br, f("architecture", &["x86_64"])], &[]).is_empty());
    assert_eq!(names(&[f("owner-alias", &["amazon"])], &[]).len(), 18);

    let mine = Image {
        id: "ami-0123456789abcdef0".into(),
        name: "custom-node".into(),
        owner_id: ACCOUNT_ID.into(),
        architecture: "x86_64".into(),
        creation_date: "2025-12-01T00:00:00.000Z".into(),
        deprecated: false,
        tags: BTreeMap::from([("team".into(), "infra".into())]),
    };
    s.add_image(mine.clone());
    assert_eq!(
        names(&[f("name", &["custom-*"])], &["self", "amazon"]),
        ["custom-node"]
    );
    assert_eq!(
        block_on(s.describe_images(&[f("tag:team", &["infra"])], &[])).unwrap(),
        [mine.clone()]
    );
    assert_eq!(
        block_on(s.describe_images(&[f("image-id", &[&mine.id])], &[])).unwrap(),
        [mine]
    );
    assert_eq!(names(&[f("owner-id", &[ACCOUNT_ID])], &[]), ["custom-node"]);
    rejected_with(
        block_on(s.describe_images(&[f("group-id", &["x"])], &[])),
        "InvalidParameterValue",
    );
}

#[test]
fn catalog_calls_and_spot_prices_on_the_clock() {
    let clock = Arc::new(ManualClock::at_secs(1_000));
    let s = Ec2Sim::builder(REGION)
        .clock(clock.clone())
        .build()
        .unwrap();
    let types = block_on(s.describe_instance_types()).unwrap();
    assert_eq!(types.len(), s.catalog().entries.len());
    let offerings = block_on(s.describe_instance_type_offerings()).unwrap();
    assert!(offerings.contains(&("m5.large".to_string(), A.to_string())));
    clock.advance_secs(5);
    let prices = block_on(s.describe_spot_prices()).unwrap();
    assert!(prices.iter().all(|p| p.timestamp == 1_005 && p.price > 0.0));
    let m5 = prices
        .iter()
        .find(|p| p.instance_type == "m5.large" && p.zone == A)
        .unwrap();
    assert_eq!(m5.price, price(&s, "m5.large", A, CapacityType::Spot));
    s.set_spot_price("m5.large", A, 0.5);
    let prices = block_on(s.describe_spot_prices()).unwrap();
    assert_eq!(
        prices
            .iter()
            .find(|p| p.instance_type == "m5.large" && p.zone == A)
            .unwrap()
            .price,
        0.5
    );
}

#[test]
fn launch_templates_create_describe_delete() {
    let s = sim();
    let image = ami(&s);
    block_on(s.create_launch_template("flotilla/aaaa", &config(&image))).unwrap();
    // Same name again: success, first content kept.
    let mut other = config(&image);
    other.user_data = "changed".into();
    block_on(s.create_launch_template("flotilla/aaaa", &other)).unwrap();
    assert_eq!(s.launch_template("flotilla/aaaa").unwrap().user_data, "");
    let mut tagged = config(&image);
    tagged
        .tags
        .insert("karpenter.k8s.aws/ec2nodeclass".into(), "gpu".into());
    block_on(s.create_launch_template("flotilla/bbbb", &tagged)).unwrap();
    let names = |fs: &[Filter]| block_on(s.describe_launch_templates(fs)).unwrap();
    assert_eq!(names(&[]), ["flotilla/aaaa", "flotilla/bbbb"]);
    assert_eq!(
        names(&[f("tag:karpenter.k8s.aws/ec2nodeclass", &["gpu"])]),
        ["flotilla/bbbb"]
    );
    assert_eq!(names(&[f("tag-key", &["karpenter.sh/nodepool"])]).len(), 2);
    assert_eq!(
        names(&[f("launch-template-name", &["flotilla/a*"])]),
        ["flotilla/aaaa"]
    );
    block_on(s.delete_launch_template("flotilla/aaaa")).unwrap();
    block_on(s.delete_launch_template("flotilla/aaaa")).unwrap();
    assert_eq!(names(&[]), ["flotilla/bbbb"]);
    rejected_with(
        block_on(s.create_launch_template("bad name!", &config(&image))),
        "Malformed",
    );
    rejected_with(
        block_on(s.describe_launch_templates(&[f("name", &["x"])])),
        "InvalidParameterValue",
    );
}

#[test]
fn on_demand_lowest_price_and_prioritized() {
    let (s, _) = with_template();
    let types = ["m5.xlarge", "m5.large", "c5.large"];
    let cheapest = types
        .iter()
        .min_by(|a, b| {
            price(&s, a, A, CapacityType::OnDemand).total_cmp(&price(
                &s,
                b,
                A,
                CapacityType::OnDemand,
            ))
        })
        .unwrap();
    let ovs: Vec<_> = types.iter().map(|t| ov(&s, t, A, None)).collect();
    let r = block_on(s.create_fleet(&request(
        "t1",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", ovs)],
    )))
    .unwrap();
    assert_eq!(launched(&r), [(cheapest.to_string(), A.to_string())]);
    assert!(r.errors.is_empty());
    assert_eq!(r.instances[0].lifecycle, "on-demand");

    // Prioritized: lowest Priority wins, whatever the price.
    let ovs = vec![
        ov(&s, "m5.large", A, Some(2.0)),
        ov(&s, "m5.xlarge", A, Some(1.0)),
        ov(&s, "c5.large", A, None),
    ];
    let mut req = request(
        "t2",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", ovs)],
    );
    req.on_demand_options = Some(OnDemandOptions {
        allocation_strategy: OnDemandAllocationStrategy::Prioritized,
        capacity_reservation_options: None,
    });
    let r = block_on(s.create_fleet(&req)).unwrap();
    assert_eq!(launched(&r), [("m5.xlarge".to_string(), A.to_string())]);
}

#[test]
fn spot_price_capacity_optimized_and_prioritized() {
    let (s, _) = with_template();
    s.set_spot_price("m5.large", A, 0.30);
    s.set_spot_price("m5.large", B, 0.20);
    s.set_spot_price("c5.large", A, 0.25);
    let ovs = vec![
        ov(&s, "m5.large", A, Some(1.0)),
        ov(&s, "c5.large", A, Some(2.0)),
        ov(&s, "m5.large", B, Some(3.0)),
    ];
    let r = block_on(s.create_fleet(&request(
        "t1",
        TargetCapacityType::Spot,
        1,
        vec![("flotilla/lt", ovs.clone())],
    )))
    .unwrap();
    assert_eq!(launched(&r), [("m5.large".to_string(), B.to_string())]);
    assert_eq!(r.instances[0].lifecycle, "spot");
    let id = &r.instances[0].instance_ids[0];
    let inst = s.instance_record(id).unwrap();
    assert_eq!(inst.instance.lifecycle, "spot");
    assert_eq!(inst.instance.state, InstanceState::Running);
    assert_eq!(inst.subnet_id, subnet(&s, B));
    assert_eq!(inst.vpc_id, s.vpc_id());
    assert_eq!(inst.launch_template, "flotilla/lt");
    // Tags: the template's plus the instance TagSpecifications.
    assert_eq!(
        inst.instance.tags.get("karpenter.sh/nodepool").unwrap(),
        "default"
    );
    assert_eq!(
        inst.instance.tags.get("karpenter.sh/nodeclaim").unwrap(),
        "default-1"
    );

    let mut req = request(
        "t2",
        TargetCapacityType::Spot,
        1,
        vec![("flotilla/lt", ovs)],
    );
    req.spot_options = Some(SpotOptions {
        allocation_strategy: SpotAllocationStrategy::CapacityOptimizedPrioritized,
    });
    let r = block_on(s.create_fleet(&req)).unwrap();
    assert_eq!(launched(&r), [("m5.large".to_string(), A.to_string())]);
}

#[test]
fn client_token_makes_create_fleet_idempotent() {
    let (s, _) = with_template();
    let req = request(
        "tok",
        TargetCapacityType::OnDemand,
        2,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    );
    let first = block_on(s.create_fleet(&req)).unwrap();
    assert_eq!(first.instances[0].instance_ids.len(), 2);
    let again = block_on(s.create_fleet(&req)).unwrap();
    assert_eq!(again, first);
    assert_eq!(s.instances().len(), 2);
    assert_eq!(s.create_fleet_calls(), 2);

    let mut changed = req.clone();
    changed.target_capacity_specification.total_target_capacity = 3;
    rejected_with(
        block_on(s.create_fleet(&changed)),
        "IdempotentParameterMismatch",
    );
    assert_eq!(s.instances().len(), 2);

    // A timeout after success: the retry with the same token gets the
    // instances of the first call, nothing new is launched.
    s.faults().fail_after_effect_next(
        ops::EC2_CREATE_FLEET,
        PortError::Unavailable("timeout".into()),
    );
    let req2 = request(
        "tok-2",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    );
    assert!(matches!(
        block_on(s.create_fleet(&req2)),
        Err(PortError::Unavailable(_))
    ));
    assert_eq!(s.instances().len(), 3, "the effect happened");
    let retry = block_on(s.create_fleet(&req2)).unwrap();
    assert_eq!(retry.instances[0].instance_ids.len(), 1);
    assert!(s
        .instance_record(&retry.instances[0].instance_ids[0])
        .is_some());
    assert_eq!(s.instances().len(), 3);

    // Before the effect: nothing launched, the call does not reach EC2.
    s.faults().fail_next(
        ops::EC2_CREATE_FLEET,
        PortError::Throttled("RequestLimitExceeded".into()),
    );
    let req3 = request(
        "tok-3",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    );
    assert!(block_on(s.create_fleet(&req3)).is_err());
    assert_eq!(s.instances().len(), 3);
    assert_eq!(s.create_fleet_calls(), 5);
    assert_eq!(s.faults().calls(ops::EC2_CREATE_FLEET), 6);
    let r = block_on(s.create_fleet(&req3)).unwrap();
    assert_eq!(launched(&r).len(), 1);

    // Without a token there is no idempotency.
    let anon = request(
        "",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    );
    block_on(s.create_fleet(&anon)).unwrap();
    block_on(s.create_fleet(&anon)).unwrap();
    assert_eq!(s.instances().len(), 6);
}

#[test]
fn insufficient_capacity_errors_look_like_ec2() {
    let (s, _) = with_template();
    s.set_spot_price("m5.large", A, 0.01);
    s.set_capacity("m5.large", A, CapacityType::Spot, 0);
    let ovs = vec![ov(&s, "m5.large", A, None), ov(&s, "m5.large", B, None)];
    let r = block_on(s.create_fleet(&request(
        "t",
        TargetCapacityType::Spot,
        1,
        vec![("flotilla/lt", ovs)],
    )))
    .unwrap();
    assert_eq!(launched(&r), [("m5.large".to_string(), B.to_string())]);
    assert_eq!(r.errors.len(), 1);
    let e = &r.errors[0];
    assert_eq!(e.error_code, "InsufficientInstanceCapacity");
    assert!(
        e.error_message.contains("m5.large") && e.error_message.contains(A),
        "{}",
        e.error_message
    );
    let o = e
        .launch_template_and_overrides
        .as_ref()
        .unwrap()
        .overrides
        .as_ref()
        .unwrap();
    assert_eq!(o.instance_type.as_deref(), Some("m5.large"));
    assert_eq!(o.availability_zone.as_deref(), Some(A));
    assert_eq!(o.subnet_id, Some(subnet(&s, A)));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["Errors"][0]["ErrorCode"],
        "InsufficientInstanceCapacity"
    );
    assert_eq!(
        json["Errors"][0]["LaunchTemplateAndOverrides"]["Overrides"]["AvailabilityZone"],
        A
    );
    assert!(json["FleetId"].as_str().unwrap().starts_with("fleet-"));
    // On-demand is a different pool.
    let r = block_on(s.create_fleet(&request(
        "t2",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    )))
    .unwrap();
    assert!(r.errors.is_empty() && launched(&r).len() == 1);
    s.clear_capacity("m5.large", A, CapacityType::Spot);
    assert_eq!(s.capacity("m5.large", A, CapacityType::Spot), None);
}

#[test]
fn partial_fills() {
    let (s, _) = with_template();
    s.set_capacity("m5.large", A, CapacityType::OnDemand, 2);
    let r = block_on(s.create_fleet(&request(
        "t1",
        TargetCapacityType::OnDemand,
        5,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    )))
    .unwrap();
    assert_eq!(launched(&r).len(), 2);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(s.capacity("m5.large", A, CapacityType::OnDemand), Some(0));

    // The rest comes from the next pool; the exhausted one is reported.
    s.set_capacity("m5.large", A, CapacityType::OnDemand, 1);
    s.set_capacity("m5.large", B, CapacityType::OnDemand, 10);
    let ovs = vec![
        ov(&s, "m5.large", A, Some(0.0)),
        ov(&s, "m5.large", B, Some(1.0)),
    ];
    let mut req = request(
        "t2",
        TargetCapacityType::OnDemand,
        4,
        vec![("flotilla/lt", ovs)],
    );
    req.on_demand_options = Some(OnDemandOptions {
        allocation_strategy: OnDemandAllocationStrategy::Prioritized,
        capacity_reservation_options: None,
    });
    let r = block_on(s.create_fleet(&req)).unwrap();
    let zones: Vec<String> = launched(&r).into_iter().map(|(_, z)| z).collect();
    assert_eq!(zones, [A, B, B, B]);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(s.capacity("m5.large", B, CapacityType::OnDemand), Some(7));
}

#[test]
fn unsupported_offerings_are_per_override_errors() {
    let (s, _) = with_template();
    // A type without any offering in zone d of us-west-2 (if every type is
    // offered everywhere, check the unknown-type rejection only).
    let catalog = s.catalog().clone();
    let missing = catalog.entries.iter().find_map(|e| {
        catalog
            .zones
            .iter()
            .find(|z| !e.offerings.iter().any(|o| &o.zone == *z))
            .map(|z| (e.info.name.clone(), z.clone()))
    });
    if let Some((ty, zone)) = missing {
        let r = block_on(s.create_fleet(&request(
            "t",
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", vec![ov(&s, &ty, &zone, None)])],
        )))
        .unwrap();
        assert!(r.instances.is_empty());
        assert_eq!(r.errors[0].error_code, "Unsupported");
    }
    rejected_with(
        block_on(s.create_fleet(&request(
            "t2",
            TargetCapacityType::OnDemand,
            1,
            vec![(
                "flotilla/lt",
                vec![FleetOverride {
                    instance_type: "x9.huge".into(),
                    ..ov(&s, "m5.large", A, None)
                }],
            )],
        ))),
        "InvalidParameterValue",
    );
}

#[test]
fn create_fleet_validation_fails_the_whole_call() {
    let (s, _) = with_template();
    let good = || vec![ov(&s, "m5.large", A, None)];
    rejected_with(
        block_on(s.create_fleet(&request(
            "a",
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", good()), ("flotilla/missing", good())],
        ))),
        "InvalidLaunchTemplateName.NotFoundException",
    );
    rejected_with(
        block_on(s.create_fleet(&request(
            "b",
            TargetCapacityType::OnDemand,
            0,
            vec![("flotilla/lt", good())],
        ))),
        "InvalidTargetCapacitySpecification",
    );
    let mut wrong_zone = ov(&s, "m5.large", A, None);
    wrong_zone.availability_zone = B.into();
    rejected_with(
        block_on(s.create_fleet(&request(
            "c",
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", vec![wrong_zone])],
        ))),
        "InvalidParameterValue",
    );
    let mut no_subnet = ov(&s, "m5.large", A, None);
    no_subnet.subnet_id = "subnet-0000".into();
    rejected_with(
        block_on(s.create_fleet(&request(
            "d",
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", vec![no_subnet])],
        ))),
        "InvalidSubnetID.NotFound",
    );
    let mut no_ami = ov(&s, "m5.large", A, None);
    no_ami.image_id = "ami-0000".into();
    rejected_with(
        block_on(s.create_fleet(&request(
            "e",
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", vec![no_ami])],
        ))),
        "InvalidAMIID.NotFound",
    );
    rejected_with(
        block_on(s.create_fleet(&request(
            &"x".repeat(65),
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/lt", good())],
        ))),
        "client token",
    );
    assert!(s.instances().is_empty());
    // A rejected call does not burn its token.
    let r = block_on(s.create_fleet(&request(
        "a",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", good())],
    )))
    .unwrap();
    assert_eq!(launched(&r).len(), 1);
}

fn reserved_template(s: &Ec2Sim, name: &str, reservation: &str, block: bool) {
    let mut c = config(&ami(s));
    c.capacity_reservation_id = Some(reservation.into());
    if block {
        c.market_type = Some("capacity-block".into());
    }
    block_on(s.create_launch_template(name, &c)).unwrap();
}

#[test]
fn reservations_are_consumed_and_given_back() {
    let s = Ec2Sim::builder(REGION)
        .capacity_reservation(odcr("cr-0123456789abcdef0", "m5.large", A, 2))
        .build()
        .unwrap();
    reserved_template(&s, "flotilla/cr", "cr-0123456789abcdef0", false);
    let req = |token: &str| {
        request(
            token,
            TargetCapacityType::OnDemand,
            1,
            vec![("flotilla/cr", vec![ov(&s, "m5.large", A, None)])],
        )
    };
    let mut ids = Vec::new();
    for t in ["r1", "r2"] {
        let r = block_on(s.create_fleet(&req(t))).unwrap();
        assert!(r.errors.is_empty());
        ids.push(r.instances[0].instance_ids[0].clone());
    }
    let inst = s.instance_record(&ids[0]).unwrap().instance;
    assert_eq!(
        inst.capacity_reservation_id.as_deref(),
        Some("cr-0123456789abcdef0")
    );
    assert_eq!(inst.lifecycle, "on-demand");
    assert_eq!(
        s.capacity_reservation("cr-0123456789abcdef0")
            .unwrap()
            .available_instance_count,
        0
    );

    let r = block_on(s.create_fleet(&req("r3"))).unwrap();
    assert!(r.instances.is_empty());
    assert_eq!(r.errors[0].error_code, "ReservationCapacityExceeded");
    assert!(flotilla_core::launch::ice::is_capacity_error(
        &r.errors[0].error_code
    ));

    // Describe with filters.
    let q = |fs: &[Filter]| block_on(s.describe_capacity_reservations(fs)).unwrap();
    assert_eq!(
        q(&[
            f("capacity-reservation-id", &["cr-0123456789abcdef0"]),
            f("state", &["active"])
        ])
        .len(),
        1
    );
    assert_eq!(
        q(&[f("instance-type", &["m5.*"]), f("owner-id", &[ACCOUNT_ID])]).len(),
        1
    );
    assert!(q(&[f("availability-zone", &[B])]).is_empty());
    rejected_with(
        block_on(s.describe_capacity_reservations(&[f("reservation", &["x"])])),
        "InvalidParameterValue",
    );
    let by_res =
        block_on(s.describe_instances(&[f("capacity-reservation-id", &["cr-0123456789abcdef0"])]))
            .unwrap();
    assert_eq!(by_res.len(), 2);

    // Terminating gives the capacity back (once).
    block_on(s.terminate_instances(&[ids[0].clone(), ids[0].clone()])).unwrap();
    block_on(s.terminate_instances(&[ids[0].clone()])).unwrap();
    assert_eq!(
        s.capacity_reservation("cr-0123456789abcdef0")
            .unwrap()
            .available_instance_count,
        1
    );
    let r = block_on(s.create_fleet(&req("r4"))).unwrap();
    assert_eq!(launched(&r).len(), 1);

    // Expired: nothing available, launches fail, running ODCR instances stay.
    assert!(s.expire_reservation("cr-0123456789abcdef0"));
    assert!(!s.expire_reservation("cr-missing"));
    assert_eq!(q(&[f("state", &["active"])]).len(), 0);
    let r = block_on(s.create_fleet(&req("r5"))).unwrap();
    assert_eq!(r.errors[0].error_code, "ReservationCapacityExceeded");
    assert_eq!(
        s.instance_record(&ids[1]).unwrap().instance.state,
        InstanceState::Running
    );
}

#[test]
fn reservation_target_capacity_is_partial_and_open_odcrs_apply() {
    let mut open = odcr("cr-open", "m5.large", B, 1);
    open.instance_match_criteria = "open".into();
    let s = Ec2Sim::builder(REGION)
        .capacity_reservation(odcr("cr-t", "m5.large", A, 2))
        .capacity_reservation(open)
        .build()
        .unwrap();
    reserved_template(&s, "flotilla/cr", "cr-t", false);
    let r = block_on(s.create_fleet(&request(
        "p",
        TargetCapacityType::OnDemand,
        3,
        vec![("flotilla/cr", vec![ov(&s, "m5.large", A, None)])],
    )))
    .unwrap();
    assert_eq!(launched(&r).len(), 2);
    assert_eq!(r.errors[0].error_code, "ReservationCapacityExceeded");

    // A plain on-demand launch matching an open ODCR uses it first.
    block_on(s.create_launch_template("flotilla/lt", &config(&ami(&s)))).unwrap();
    let r = block_on(s.create_fleet(&request(
        "o",
        TargetCapacityType::OnDemand,
        2,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", B, None)])],
    )))
    .unwrap();
    let ids = &r.instances[0].instance_ids;
    assert_eq!(ids.len(), 2);
    let reservations: Vec<_> = ids
        .iter()
        .map(|id| {
            s.instance_record(id)
                .unwrap()
                .instance
                .capacity_reservation_id
        })
        .collect();
    assert_eq!(reservations, [Some("cr-open".to_string()), None]);
    assert_eq!(
        s.capacity_reservation("cr-open")
            .unwrap()
            .available_instance_count,
        0
    );
    // Spot cannot target a reservation.
    rejected_with(
        block_on(s.create_fleet(&request(
            "s",
            TargetCapacityType::Spot,
            1,
            vec![("flotilla/cr", vec![ov(&s, "m5.large", A, None)])],
        ))),
        "InvalidParameterCombination",
    );
}

#[test]
fn capacity_blocks_need_their_market_and_end_with_their_instances() {
    let s = Ec2Sim::builder(REGION)
        .capacity_reservation(capacity_block(
            "cr-blk",
            "m5.large",
            A,
            2,
            "2026-01-02T00:00:00Z",
        ))
        .build()
        .unwrap();
    reserved_template(&s, "flotilla/blk", "cr-blk", true);
    let mk = |t: &str, m| {
        request(
            t,
            m,
            2,
            vec![("flotilla/blk", vec![ov(&s, "m5.large", A, None)])],
        )
    };
    rejected_with(
        block_on(s.create_fleet(&mk("x", TargetCapacityType::OnDemand))),
        "InvalidParameterCombination",
    );
    let r = block_on(s.create_fleet(&mk("y", TargetCapacityType::CapacityBlock))).unwrap();
    assert_eq!(launched(&r).len(), 2);
    block_on(s.create_launch_template("flotilla/lt", &config(&ami(&s)))).unwrap();
    rejected_with(
        block_on(s.create_fleet(&request(
            "z",
            TargetCapacityType::CapacityBlock,
            1,
            vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
        ))),
        "InvalidParameterCombination",
    );
    assert!(s.cancel_reservation("cr-blk"));
    assert!(
        s.live_instances().is_empty(),
        "a capacity block's instances end with it"
    );
    assert_eq!(s.capacity_reservation("cr-blk").unwrap().state, "cancelled");
}

#[test]
fn describe_terminate_and_interrupt() {
    let clock = Arc::new(ManualClock::at_secs(50_000));
    let s = Ec2Sim::builder(REGION)
        .clock(clock.clone())
        .build()
        .unwrap();
    block_on(s.create_launch_template("flotilla/lt", &config(&ami(&s)))).unwrap();
    let spot = block_on(s.create_fleet(&request(
        "s",
        TargetCapacityType::Spot,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
    )))
    .unwrap();
    let od = block_on(s.create_fleet(&request(
        "o",
        TargetCapacityType::OnDemand,
        1,
        vec![("flotilla/lt", vec![ov(&s, "m5.large", B, None)])],
    )))
    .unwrap();
    let spot_id = spot.instances[0].instance_ids[0].clone();
    let od_id = od.instances[0].instance_ids[0].clone();
    assert!(valid_id(&spot_id));
    let q = |fs: &[Filter]| -> Vec<String> {
        block_on(s.describe_instances(fs))
            .unwrap()
            .into_iter()
            .map(|i| i.id)
            .collect()
    };
    assert_eq!(
        q(&[f("tag:karpenter.sh/nodeclaim", &["default-1"])]).len(),
        2
    );
    assert_eq!(q(&[f("instance-lifecycle", &["spot"])]), [spot_id.clone()]);
    assert_eq!(q(&[f("instance-id", &[&od_id])]), [od_id.clone()]);
    assert_eq!(
        q(&[
            f("availability-zone", &[B]),
            f("instance-state-name", &["running", "pending"])
        ]),
        [od_id.clone()]
    );
    assert_eq!(q(&[f("subnet-id", &[&subnet(&s, A)])]), [spot_id.clone()]);
    rejected_with(
        block_on(s.describe_instances(&[f("state", &["running"])])),
        "InvalidParameterValue",
    );
    let inst = s.instance_record(&od_id).unwrap().instance;
    assert_eq!(inst.launch_time, 50_000);

    assert!(s.interrupt_spot(&spot_id));
    assert!(!s.interrupt_spot(&spot_id), "already gone");
    assert!(!s.interrupt_spot(&od_id), "not spot");
    assert_eq!(
        q(&[f("instance-state-name", &["terminated"])]),
        [spot_id.clone()]
    );

    block_on(s.terminate_instances(&[od_id.clone(), "i-0123456789abcdef0".into()])).unwrap();
    block_on(s.terminate_instances(&[])).unwrap();
    rejected_with(
        block_on(s.terminate_instances(&["node-1".into()])),
        "InvalidInstanceID.Malformed",
    );
    assert_eq!(q(&[f("instance-state-name", &["terminated"])]).len(), 2);
    clock.advance_secs(TERMINATED_VISIBLE_SECS);
    assert!(
        q(&[]).is_empty(),
        "terminated instances disappear after an hour"
    );
    assert_eq!(s.instances().len(), 2);

    s.faults().fail_after_effect_next(
        ops::EC2_TERMINATE_INSTANCES,
        PortError::Unavailable("t".into()),
    );
    assert!(block_on(s.terminate_instances(&[od_id])).is_err());
}

fn valid_id(id: &str) -> bool {
    id.len() == 19 && fleet::valid_instance_id(id)
}

#[test]
fn deterministic_for_a_seed() {
    let run = |seed| {
        let s = Ec2Sim::builder(REGION).seed(seed).build().unwrap();
        block_on(s.create_launch_template("flotilla/lt", &config(&ami(&s)))).unwrap();
        let r = block_on(s.create_fleet(&request(
            "t",
            TargetCapacityType::OnDemand,
            3,
            vec![("flotilla/lt", vec![ov(&s, "m5.large", A, None)])],
        )))
        .unwrap();
        (s.subnets(), r)
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1).1, run(2).1);
}

#[test]
fn random_faults_hit_describe_calls_too() {
    let faults = Faults::new();
    let s = Ec2Sim::builder(REGION)
        .faults(faults.clone())
        .build()
        .unwrap();
    faults.random(9, 0.5);
    let results: Vec<bool> = (0..200)
        .map(|_| block_on(s.describe_subnets(&[])).is_ok())
        .collect();
    let ok = results.iter().filter(|x| **x).count();
    assert!((20..90).contains(&ok), "{ok} of 200 passed both draws");
    assert_eq!(faults.calls(ops::EC2_DESCRIBE_SUBNETS), 200);
    faults.clear();
    assert!(block_on(s.describe_subnets(&[])).is_ok());
}

/// The sim speaks the core's CreateFleet dialect: a request from
/// `build_fleet_request`, its response read by `next_attempt`.
#[test]
fn round_trip_with_the_core_launch_logic() {
    use flotilla_core::launch::fleet::{
        Ami, CandidateOffering, FleetInput, Subnet as FleetSubnet, TemplateKey,
    };
    use flotilla_core::launch::{build_fleet_request, next_attempt, Outcome};

    let (s, image) = with_template();
    s.set_spot_price("m5.large", A, 0.01);
    s.set_spot_price("m5.large", B, 0.02);
    s.set_capacity("m5.large", A, CapacityType::Spot, 0);
    let offering = |zone: &str, p: f64| CandidateOffering {
        instance_type: "m5.large".into(),
        architecture: "amd64".into(),
        zone: zone.into(),
        capacity_type: CapacityType::Spot,
        price: p,
        adjusted_price: p,
        reservation: None,
    };
    let input = FleetInput {
        cluster_name: "prod".into(),
        node_claim_name: "default-1".into(),
        attempt: 0,
        capacity_type: CapacityType::Spot,
        offerings: vec![offering(A, 0.01), offering(B, 0.02)],
        subnets: s
            .subnets()
            .into_iter()
            .map(|x| FleetSubnet {
                id: x.id,
                zone: x.zone,
                available_ips: x.available_ips,
            })
            .collect(),
        amis: vec![Ami {
            id: image.clone(),
            architecture: "amd64".into(),
        }],
        launch_templates: BTreeMap::from([(TemplateKey::ami(&image), "flotilla/lt".to_string())]),
        overlay: false,
        target_count: 1,
        tags: BTreeMap::from([(
            "karpenter.sh/nodeclaim".to_string(),
            "default-1".to_string(),
        )]),
        excluded: vec![],
        min_values: vec![],
    };
    let req = build_fleet_request(&input).unwrap();
    let resp = block_on(s.create_fleet(&req)).unwrap();
    match next_attempt(&input, &resp) {
        Outcome::Launched {
            instances,
            unavailable,
        } => {
            assert_eq!(instances.len(), 1);
            assert_eq!(instances[0].zone, B);
            assert_eq!(instances[0].capacity_type, CapacityType::Spot);
            assert_eq!(unavailable.len(), 1);
            assert_eq!(unavailable[0].zone, A);
        }
        other => panic!("{other:?}"),
    }

    // Everything spot is gone: the core falls back to on-demand.
    s.set_capacity("m5.large", B, CapacityType::Spot, 0);
    let mut input2 = input.clone();
    input2.node_claim_name = "default-2".into();
    input2.offerings.push(CandidateOffering {
        capacity_type: CapacityType::OnDemand,
        ..offering(A, 0.096)
    });
    let req = build_fleet_request(&input2).unwrap();
    let resp = block_on(s.create_fleet(&req)).unwrap();
    assert!(resp.instances.is_empty());
    assert_eq!(resp.errors.len(), 2);
    let next = match next_attempt(&input2, &resp) {
        Outcome::FallBack { next, .. } => next,
        other => panic!("{other:?}"),
    };
    let resp = block_on(s.create_fleet(&build_fleet_request(&next).unwrap())).unwrap();
    assert!(matches!(
        next_attempt(&next, &resp),
        Outcome::Launched { .. }
    ));
    assert_eq!(resp.instances[0].lifecycle, "on-demand");
}

#[test]
fn price_list_answers_catalog_prices_per_region() {
    use flotilla_ports::PriceList;
    let s = Ec2Sim::new(REGION).unwrap();
    let prices = block_on(s.on_demand_prices(REGION)).unwrap();
    let m5 = s.catalog().get("m5.large").unwrap();
    let od = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap()
        .price;
    assert_eq!(prices["m5.large"], od);
    assert_eq!(prices.len(), s.catalog().entries.len());
    // Another region's products: none (as the API answers).
    assert!(block_on(s.on_demand_prices("eu-west-1"))
        .unwrap()
        .is_empty());

    s.set_on_demand_price("m5.large", 0.5);
    s.set_on_demand_price("c5.large", -1.0);
    s.set_on_demand_price("zz9.large", 2.0);
    let prices = block_on(s.on_demand_prices(REGION)).unwrap();
    assert_eq!(prices["m5.large"], 0.5);
    assert_eq!(prices["zz9.large"], 2.0);
    assert!(!prices.contains_key("c5.large"), "left out of the list");
    assert_eq!(s.price_list_calls(), 3);

    s.faults().fail_next(
        ops::PRICING_GET_PRODUCTS,
        PortError::Unavailable("pricing down".into()),
    );
    assert!(block_on(s.on_demand_prices(REGION)).is_err());
    assert!(block_on(s.on_demand_prices(REGION)).is_ok());
}
