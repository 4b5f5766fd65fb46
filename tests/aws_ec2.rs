//! `Ec2Client` against a local moto server.
//!
//! Not covered here because moto does not implement them faithfully:
//! `ClientToken` idempotency of CreateFleet and DescribeCapacityReservations
//! (both are covered by unit tests of the request/response mapping in
//! `flotilla-aws` and by the EC2 simulator).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use flotilla_aws::Ec2Client;
use flotilla_core::catalog::CapacityType;
use flotilla_core::ec2::{Filter, InstanceState};
use flotilla_core::launch::fleet::{Ami, CandidateOffering, FleetInput, Subnet, TemplateKey};
use flotilla_core::launch::launch_template::{BlockDeviceMapping, Ebs, MetadataOptions};
use flotilla_core::launch::{build_fleet_request, template_name, LaunchTemplateConfig};
use flotilla_ports::Ec2;
use flotilla_tests::{unique_name, Moto};

const CLUSTER: &str = "moto-cluster";
const DISCOVERY: &str = "karpenter.sh/discovery";

fn tags(resource: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

struct Network {
    subnets: Vec<(String, String)>,
    security_group: String,
}

/// A VPC with two tagged subnets (two zones), one untagged subnet and a
/// tagged security group next to an untagged one.
async fn network(sdk: &aws_sdk_ec2::Client) -> Network {
    let vpc = sdk
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let mut subnets = Vec::new();
    for (i, zone, tagged) in [
        (1, "us-east-1a", true),
        (2, "us-east-1b", true),
        (3, "us-east-1c", false),
    ] {
        let mut req = sdk
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(format!("10.0.{i}.0/24"))
            .availability_zone(zone);
        if tagged {
            req = req.tag_specifications(tags(
                ResourceType::Subnet,
                &[(DISCOVERY, CLUSTER), ("Name", &format!("private-{i}"))],
            ));
        }
        let s = req.send().await.unwrap();
        if tagged {
            subnets.push((
                s.subnet().unwrap().subnet_id().unwrap().to_string(),
                zone.to_string(),
            ));
        }
    }
    let sg = sdk
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(tags(ResourceType::SecurityGroup, &[(DISCOVERY, CLUSTER)]))
        .send()
        .await
        .unwrap();
    sdk.create_security_group()
        .group_name("other")
        .description("other")
        .vpc_id(&vpc_id)
        .send()
        .await
        .unwrap();
    Network {
        subnets,
        security_group: sg.group_id().unwrap().to_string(),
    }
}

fn template_config(image_id: &str, security_group: &str) -> LaunchTemplateConfig {
    LaunchTemplateConfig {
        image_id: image_id.into(),
        iam_instance_profile: "KarpenterNodeInstanceProfile".into(),
        security_group_ids: vec![security_group.into()],
        user_data: "#!/bin/bash\necho hello\n".into(),
        block_device_mappings: vec![BlockDeviceMapping {
            device_name: "/dev/xvda".into(),
            ebs: Ebs {
                volume_size: 20,
                volume_type: "gp3".into(),
                encrypted: true,
                delete_on_termination: true,
                iops: Some(3000),
                throughput: Some(125),
                kms_key_id: None,
                snapshot_id: None,
            },
        }],
        metadata_options: MetadataOptions::default(),
        associate_public_ip_address: None,
        tags: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            (
                format!("kubernetes.io/cluster/{CLUSTER}"),
                "owned".to_string(),
            ),
        ]),
        capacity_reservation_id: None,
        market_type: None,
    }
}

#[tokio::test]
async fn subnets_and_security_groups_by_tag() {
    let moto = Moto::start();
    let config = moto.config().await;
    let sdk = aws_sdk_ec2::Client::new(&config);
    let net = network(&sdk).await;
    let ec2 = Ec2Client::new(&config);

    let tag = [Filter::new(format!("tag:{DISCOVERY}"), [CLUSTER])];
    let mut subnets = ec2.describe_subnets(&tag).await.unwrap();
    subnets.sort_by(|a, b| a.zone.cmp(&b.zone));
    let got: Vec<(String, String)> = subnets
        .iter()
        .map(|s| (s.id.clone(), s.zone.clone()))
        .collect();
    assert_eq!(got, net.subnets);
    assert!(subnets.iter().all(|s| s.available_ips > 200
        && !s.vpc_id.is_empty()
        && !s.zone_id.is_empty()
        && s.tags.get(DISCOVERY).map(String::as_str) == Some(CLUSTER)));
    // A tag-key filter and an id filter.
    let by_id = ec2
        .describe_subnets(&[Filter::new("subnet-id", [net.subnets[1].0.clone()])])
        .await
        .unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].zone, "us-east-1b");

    let sgs = ec2.describe_security_groups(&tag).await.unwrap();
    assert_eq!(sgs.len(), 1);
    assert_eq!(sgs[0].id, net.security_group);
    assert_eq!(sgs[0].name, "nodes");
    let none = ec2
        .describe_security_groups(&[Filter::new(format!("tag:{DISCOVERY}"), ["other"])])
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn instance_types_offerings_and_spot_prices() {
    let moto = Moto::start();
    let ec2 = Ec2Client::new(&moto.config().await);
    let types = ec2.describe_instance_types().await.unwrap();
    assert!(types.len() > 300, "{} types", types.len());
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large");
    assert_eq!((m5.vcpu, m5.memory_mib), (2, 8192));
    assert_eq!(m5.architecture, "amd64");
    assert!(m5.max_network_interfaces >= 3 && m5.ipv4_per_interface >= 10);
    let graviton = types.iter().find(|t| t.name == "m6g.large").expect("m6g");
    assert_eq!(graviton.architecture, "arm64");
    let gpu = types
        .iter()
        .find(|t| t.name.starts_with('g') && t.gpu.is_some())
        .expect("a GPU type");
    assert!(
        gpu.gpu.as_ref().is_some_and(|g| g.count >= 1),
        "{}",
        gpu.name
    );
    // Sorted and unique, as core's parser returns them.
    assert!(types.windows(2).all(|w| w[0].name < w[1].name));

    let offerings = ec2.describe_instance_type_offerings().await.unwrap();
    assert!(offerings
        .iter()
        .any(|(t, z)| t == "m5.large" && z.starts_with("us-east-1")));

    // moto's spot price history is generated; just check the shape.
    let prices = ec2.describe_spot_prices().await.unwrap();
    let mut keys: Vec<(&str, &str)> = prices
        .iter()
        .map(|p| (p.instance_type.as_str(), p.zone.as_str()))
        .collect();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "one price per (type, zone)");
    assert!(prices.iter().all(|p| p.price >= 0.0));
}

#[tokio::test]
async fn launch_templates_are_idempotent() {
    let moto = Moto::start();
    let config = moto.config().await;
    let sdk = aws_sdk_ec2::Client::new(&config);
    let net = network(&sdk).await;
    let ec2 = Ec2Client::new(&config);
    let lt = template_config("ami-12c6146b", &net.security_group);
    let name = template_name(&lt);

    ec2.create_launch_template(&name, &lt).await.unwrap();
    ec2.create_launch_template(&name, &lt).await.unwrap();
    let names = ec2.describe_launch_templates(&[]).await.unwrap();
    assert_eq!(names, vec![name.clone()]);
    let by_tag = ec2
        .describe_launch_templates(&[Filter::new("tag:karpenter.sh/nodepool", ["default"])])
        .await
        .unwrap();
    assert_eq!(by_tag, vec![name.clone()]);

    // What was stored: base64 user data, IMDSv2, block devices.
    let v = sdk
        .describe_launch_template_versions()
        .launch_template_name(&name)
        .send()
        .await
        .unwrap();
    let data = v.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    assert_eq!(data.image_id(), Some("ami-12c6146b"));
    let user_data = decode_base64(data.user_data().unwrap());
    assert_eq!(user_data, lt.user_data);
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );
    assert_eq!(
        data.block_device_mappings()[0]
            .ebs()
            .and_then(|e| e.volume_size()),
        Some(20)
    );

    ec2.delete_launch_template(&name).await.unwrap();
    ec2.delete_launch_template(&name).await.unwrap();
    assert!(ec2.describe_launch_templates(&[]).await.unwrap().is_empty());
}

/// Minimal base64 decoding for the assertion (standard alphabet).
fn decode_base64(s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c).expect("base64") as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn create_fleet_launches_a_tagged_instance_and_terminates_it() {
    let moto = Moto::start();
    let config = moto.config().await;
    let sdk = aws_sdk_ec2::Client::new(&config);
    let net = network(&sdk).await;
    let ec2 = Ec2Client::new(&config);

    // An amd64 AMI from moto's catalog.
    let images = ec2
        .describe_images(&[Filter::new("architecture", ["x86_64"])], &[])
        .await
        .unwrap();
    let image = images.first().expect("moto ships AMIs");
    assert!(!image.id.is_empty() && image.architecture == "x86_64");

    let lt = template_config(&image.id, &net.security_group);
    let lt_name = template_name(&lt);
    ec2.create_launch_template(&lt_name, &lt).await.unwrap();

    let node_claim = unique_name("default");
    let mut tags = lt.tags.clone();
    tags.insert("karpenter.sh/nodeclaim".into(), node_claim.clone());
    let offering = |ty: &str, zone: &str, price: f64| CandidateOffering {
        instance_type: ty.into(),
        architecture: "amd64".into(),
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        price,
        adjusted_price: price,
        reservation: None,
    };
    let input = FleetInput {
        cluster_name: CLUSTER.into(),
        node_claim_name: node_claim.clone(),
        attempt: 0,
        capacity_type: CapacityType::OnDemand,
        offerings: vec![
            offering("m5.large", "us-east-1a", 0.096),
            offering("m5.large", "us-east-1b", 0.096),
            offering("c5.large", "us-east-1a", 0.085),
        ],
        subnets: net
            .subnets
            .iter()
            .map(|(id, zone)| Subnet {
                id: id.clone(),
                zone: zone.clone(),
                available_ips: 250,
            })
            .collect(),
        amis: vec![Ami {
            id: image.id.clone(),
            architecture: "amd64".into(),
        }],
        launch_templates: BTreeMap::from([(TemplateKey::ami(&image.id), lt_name.clone())]),
        overlay: false,
        target_count: 1,
        tags,
        excluded: Vec::new(),
        min_values: Vec::new(),
    };
    let request = build_fleet_request(&input).unwrap();
    let response = ec2.create_fleet(&request).await.unwrap();
    assert!(response.errors.is_empty(), "{:?}", response.errors);
    assert_eq!(response.instances.len(), 1, "{response:?}");
    let launched = &response.instances[0];
    assert_eq!(launched.instance_ids.len(), 1);
    assert_eq!(launched.lifecycle, "on-demand");
    assert!(["m5.large", "c5.large"].contains(&launched.instance_type.as_str()));
    let id = launched.instance_ids[0].clone();

    // Found again through the NodeClaim tag.
    let claim_filter = [Filter::new(
        "tag:karpenter.sh/nodeclaim",
        [node_claim.clone()],
    )];
    let found = ec2.describe_instances(&claim_filter).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let inst = &found[0];
    assert_eq!(inst.id, id);
    assert_eq!(inst.instance_type, launched.instance_type);
    assert!(inst.zone.starts_with("us-east-1"));
    assert!(matches!(
        inst.state,
        InstanceState::Pending | InstanceState::Running
    ));
    assert_eq!(inst.lifecycle, "on-demand");
    assert!(inst.launch_time > 0);
    assert_eq!(
        inst.tags.get("karpenter.sh/nodepool").map(String::as_str),
        Some("default")
    );
    assert_eq!(
        inst.tags
            .get(&format!("kubernetes.io/cluster/{CLUSTER}"))
            .map(String::as_str),
        Some("owned")
    );

    // Terminate, twice, plus an id that never existed.
    ec2.terminate_instances(std::slice::from_ref(&id))
        .await
        .unwrap();
    ec2.terminate_instances(&[id.clone(), "i-0123456789abcdef0".into()])
        .await
        .unwrap();
    ec2.terminate_instances(&[]).await.unwrap();
    let after = ec2.describe_instances(&claim_filter).await.unwrap();
    assert!(after.iter().all(|i| i.state.is_gone()), "{after:?}");
}
