//! The EC2 port over the AWS SDK.
//!
//! Requests are built from core's plain structs by pure functions
//! ([`launch_template_input`], [`fleet_input`]) and answers are mapped back
//! by pure functions too, so both directions are unit-tested without a
//! server. Wire strings for core's enums come from core's own `Serialize`
//! impls (the names AWS uses), not from a second table here.

use std::collections::BTreeMap;

use aws_sdk_ec2::operation::create_fleet::{CreateFleetInput, CreateFleetOutput};
use aws_sdk_ec2::operation::create_launch_template::CreateLaunchTemplateInput;
use aws_sdk_ec2::types as sdk;
use aws_sdk_ec2::Client;
use aws_smithy_types::date_time::Format;
use aws_smithy_types::DateTime;
use flotilla_core::catalog::describe::parse_describe_instance_types;
use flotilla_core::catalog::InstanceTypeInfo;
use flotilla_core::ec2::{
    Filter, Image, Instance, InstanceState, SecurityGroup, SpotPrice, Subnet,
};
use flotilla_core::launch::fleet::FleetRequest;
use flotilla_core::launch::ice::{
    FleetError, FleetInstance, FleetResponse, LaunchTemplateAndOverrides, ResponseOverrides,
};
use flotilla_core::launch::LaunchTemplateConfig;
use flotilla_core::model::{CapacityReservation, ReservationType};
use flotilla_ports::{Ec2, PortError, PortResult, PriceList};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::{classify, code};
use crate::pricing::PriceListClient;

/// TerminateInstances takes at most this many ids per call.
const TERMINATE_BATCH: usize = 1000;

/// [`Ec2`] over the AWS SDK.
#[derive(Debug, Clone)]
pub struct Ec2Client {
    client: Client,
    /// The on-demand price list EC2 itself lacks (see [`crate::pricing`]).
    prices: Option<PriceListClient>,
}

/// The AWS wire string of a core enum (its serde name).
fn wire<T: Serialize>(t: &T) -> String {
    match serde_json::to_value(t) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

fn rejected(what: &str, detail: impl std::fmt::Display) -> PortError {
    PortError::Rejected(format!("{what}: {detail}"))
}

pub(crate) fn sdk_filters(filters: &[Filter]) -> Vec<sdk::Filter> {
    filters
        .iter()
        .map(|f| {
            sdk::Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

fn filters_opt(filters: &[Filter]) -> Option<Vec<sdk::Filter>> {
    (!filters.is_empty()).then(|| sdk_filters(filters))
}

pub(crate) fn tag_map(tags: &[sdk::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            t.key()
                .map(|k| (k.to_string(), t.value().unwrap_or_default().to_string()))
        })
        .collect()
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Vec<sdk::Tag> {
    tags.iter()
        .map(|(k, v)| sdk::Tag::builder().key(k).value(v).build())
        .collect()
}

fn rfc3339(t: &DateTime) -> String {
    t.fmt(Format::DateTime).unwrap_or_default()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// DescribeInstanceTypes → the JSON shape core's parser reads.

/// Inserts `value` under `key` only when present (the parser treats a
/// missing field and a present one differently from `null`).
fn put(m: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        m.insert(key.to_string(), v);
    }
}

fn obj(fields: Vec<(&str, Option<Value>)>) -> Option<Value> {
    let mut m = Map::new();
    for (k, v) in fields {
        put(&mut m, k, v);
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

fn jn<T: Into<serde_json::Number>>(v: Option<T>) -> Option<Value> {
    v.map(|n| Value::Number(n.into()))
}

fn jf(v: Option<f64>) -> Option<Value> {
    v.and_then(serde_json::Number::from_f64).map(Value::Number)
}

fn js(v: Option<&str>) -> Option<Value> {
    v.map(|s| Value::String(s.to_string()))
}

fn jb(v: Option<bool>) -> Option<Value> {
    v.map(Value::Bool)
}

/// One SDK `InstanceTypeInfo` as the `aws ec2 describe-instance-types` JSON
/// entry (the fields `flotilla_core::catalog::describe` reads).
pub(crate) fn instance_type_json(t: &sdk::InstanceTypeInfo) -> Value {
    let processor = t.processor_info().and_then(|p| {
        obj(vec![
            (
                "SupportedArchitectures",
                Some(json!(p
                    .supported_architectures()
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>())),
            ),
            ("Manufacturer", js(p.manufacturer())),
        ])
    });
    let gpus = t.gpu_info().map(|g| {
        Value::Array(
            g.gpus()
                .iter()
                .filter_map(|d| {
                    obj(vec![
                        ("Name", js(d.name())),
                        ("Manufacturer", js(d.manufacturer())),
                        ("Count", jn(d.count())),
                        (
                            "MemoryInfo",
                            d.memory_info()
                                .and_then(|m| obj(vec![("SizeInMiB", jn(m.size_in_mib()))])),
                        ),
                    ])
                })
                .collect(),
        )
    });
    let neuron = t.neuron_info().map(|n| {
        Value::Array(
            n.neuron_devices()
                .iter()
                .filter_map(|d| {
                    obj(vec![
                        ("Name", js(d.name())),
                        ("Count", jn(d.count())),
                        (
                            "CoreInfo",
                            d.core_info()
                                .and_then(|c| obj(vec![("Count", jn(c.count()))])),
                        ),
                    ])
                })
                .collect(),
        )
    });
    let inference = t.inference_accelerator_info().map(|a| {
        Value::Array(
            a.accelerators()
                .iter()
                .filter_map(|d| {
                    obj(vec![
                        ("Name", js(d.name())),
                        ("Manufacturer", js(d.manufacturer())),
                        ("Count", jn(d.count())),
                    ])
                })
                .collect(),
        )
    });
    let network = t.network_info().and_then(|n| {
        let cards: Vec<Value> = n
            .network_cards()
            .iter()
            .filter_map(|c| {
                obj(vec![
                    ("NetworkCardIndex", jn(c.network_card_index())),
                    ("NetworkPerformance", js(c.network_performance())),
                    (
                        "MaximumNetworkInterfaces",
                        jn(c.maximum_network_interfaces()),
                    ),
                    (
                        "BaselineBandwidthInGbps",
                        jf(c.baseline_bandwidth_in_gbps()),
                    ),
                ])
            })
            .collect();
        obj(vec![
            ("NetworkPerformance", js(n.network_performance())),
            (
                "MaximumNetworkInterfaces",
                jn(n.maximum_network_interfaces()),
            ),
            (
                "DefaultNetworkCardIndex",
                jn(n.default_network_card_index()),
            ),
            ("NetworkCards", (!cards.is_empty()).then(|| json!(cards))),
            (
                "Ipv4AddressesPerInterface",
                jn(n.ipv4_addresses_per_interface()),
            ),
            (
                "EncryptionInTransitSupported",
                jb(n.encryption_in_transit_supported()),
            ),
            (
                "EfaInfo",
                n.efa_info().and_then(|e| {
                    obj(vec![(
                        "MaximumEfaInterfaces",
                        jn(e.maximum_efa_interfaces()),
                    )])
                }),
            ),
        ])
    });
    let usage = t.supported_usage_classes();
    obj(vec![
        (
            "InstanceType",
            js(t.instance_type().map(sdk::InstanceType::as_str)),
        ),
        ("CurrentGeneration", jb(t.current_generation())),
        ("BareMetal", jb(t.bare_metal())),
        (
            "Hypervisor",
            js(t.hypervisor().map(sdk::InstanceTypeHypervisor::as_str)),
        ),
        (
            "SupportedUsageClasses",
            (!usage.is_empty()).then(|| {
                json!(usage
                    .iter()
                    .map(sdk::UsageClassType::as_str)
                    .collect::<Vec<_>>())
            }),
        ),
        ("ProcessorInfo", processor),
        (
            "VCpuInfo",
            t.v_cpu_info()
                .and_then(|v| obj(vec![("DefaultVCpus", jn(v.default_v_cpus()))])),
        ),
        (
            "MemoryInfo",
            t.memory_info()
                .and_then(|m| obj(vec![("SizeInMiB", jn(m.size_in_mib()))])),
        ),
        ("GpuInfo", gpus.map(|g| json!({ "Gpus": g }))),
        ("NeuronInfo", neuron.map(|d| json!({ "NeuronDevices": d }))),
        (
            "InferenceAcceleratorInfo",
            inference.map(|a| json!({ "Accelerators": a })),
        ),
        (
            "InstanceStorageInfo",
            t.instance_storage_info().and_then(|s| {
                obj(vec![
                    ("TotalSizeInGB", jn(s.total_size_in_gb())),
                    (
                        "NvmeSupport",
                        js(s.nvme_support().map(sdk::EphemeralNvmeSupport::as_str)),
                    ),
                ])
            }),
        ),
        ("NetworkInfo", network),
        (
            "EbsInfo",
            t.ebs_info().and_then(|e| {
                obj(vec![(
                    "EbsOptimizedInfo",
                    e.ebs_optimized_info().and_then(|o| {
                        obj(vec![(
                            "BaselineBandwidthInMbps",
                            jn(o.baseline_bandwidth_in_mbps()),
                        )])
                    }),
                )])
            }),
        ),
    ])
    .unwrap_or_else(|| json!({}))
}

// ---------------------------------------------------------------------------
// Launch templates.

fn lt_ebs(
    e: &flotilla_core::launch::launch_template::Ebs,
) -> sdk::LaunchTemplateEbsBlockDeviceRequest {
    let i32c = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
    sdk::LaunchTemplateEbsBlockDeviceRequest::builder()
        .volume_size(i32c(e.volume_size))
        .volume_type(sdk::VolumeType::from(e.volume_type.as_str()))
        .encrypted(e.encrypted)
        .delete_on_termination(e.delete_on_termination)
        .set_iops(e.iops.map(i32c))
        .set_throughput(e.throughput.map(i32c))
        .set_kms_key_id(e.kms_key_id.clone())
        .set_snapshot_id(e.snapshot_id.clone())
        .build()
}

/// The CreateLaunchTemplate request for `config`: user data base64-encoded,
/// tags on the template and (TagSpecifications) on instances and volumes.
pub fn launch_template_input(
    name: &str,
    config: &LaunchTemplateConfig,
) -> Result<CreateLaunchTemplateInput, String> {
    let m = &config.metadata_options;
    let metadata = sdk::LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(sdk::LaunchTemplateInstanceMetadataEndpointState::from(
            m.http_endpoint.as_str(),
        ))
        .http_protocol_ipv6(sdk::LaunchTemplateInstanceMetadataProtocolIpv6::from(
            m.http_protocol_ipv6.as_str(),
        ))
        .http_put_response_hop_limit(i32::try_from(m.http_put_response_hop_limit).unwrap_or(1))
        .http_tokens(sdk::LaunchTemplateHttpTokensState::from(
            m.http_tokens.as_str(),
        ))
        .build();
    let tags = sdk_tags(&config.tags);
    let resource_tags = |rt: &str| {
        sdk::LaunchTemplateTagSpecificationRequest::builder()
            .resource_type(sdk::ResourceType::from(rt))
            .set_tags(Some(tags.clone()))
            .build()
    };
    let mut data = sdk::RequestLaunchTemplateData::builder()
        .image_id(&config.image_id)
        .iam_instance_profile(
            sdk::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(&config.iam_instance_profile)
                .build(),
        )
        .user_data(aws_smithy_types::base64::encode(
            config.user_data.as_bytes(),
        ))
        .set_block_device_mappings(Some(
            config
                .block_device_mappings
                .iter()
                .map(|b| {
                    sdk::LaunchTemplateBlockDeviceMappingRequest::builder()
                        .device_name(&b.device_name)
                        .ebs(lt_ebs(&b.ebs))
                        .build()
                })
                .collect(),
        ))
        .metadata_options(metadata);
    // An explicit public-IP choice needs a network interface spec, which
    // then carries the security groups (EC2 refuses both places at once).
    data = match config.associate_public_ip_address {
        Some(public) => data.network_interfaces(
            sdk::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .device_index(0)
                .associate_public_ip_address(public)
                .set_groups(Some(config.security_group_ids.clone()))
                .build(),
        ),
        None => data.set_security_group_ids(Some(config.security_group_ids.clone())),
    };
    if !tags.is_empty() {
        data = data
            .tag_specifications(resource_tags("instance"))
            .tag_specifications(resource_tags("volume"));
    }
    if let Some(id) = &config.capacity_reservation_id {
        data = data.capacity_reservation_specification(
            sdk::LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_target(
                    sdk::CapacityReservationTarget::builder()
                        .capacity_reservation_id(id)
                        .build(),
                )
                .build(),
        );
    }
    if let Some(mt) = &config.market_type {
        data = data.instance_market_options(
            sdk::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(sdk::MarketType::from(mt.as_str()))
                .build(),
        );
    }
    let mut input = CreateLaunchTemplateInput::builder()
        .launch_template_name(name)
        .launch_template_data(data.build());
    if !tags.is_empty() {
        input = input.tag_specifications(
            sdk::TagSpecification::builder()
                .resource_type(sdk::ResourceType::LaunchTemplate)
                .set_tags(Some(tags.clone()))
                .build(),
        );
    }
    input.build().map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------
// CreateFleet.

/// The CreateFleet request for core's [`FleetRequest`].
pub fn fleet_input(r: &FleetRequest) -> Result<CreateFleetInput, String> {
    let tcs = &r.target_capacity_specification;
    let target = sdk::TargetCapacitySpecificationRequest::builder()
        .total_target_capacity(i32::try_from(tcs.total_target_capacity).unwrap_or(i32::MAX))
        .default_target_capacity_type(sdk::DefaultTargetCapacityType::from(
            wire(&tcs.default_target_capacity_type).as_str(),
        ))
        .build();
    let spot = r.spot_options.as_ref().map(|s| {
        sdk::SpotOptionsRequest::builder()
            .allocation_strategy(sdk::SpotAllocationStrategy::from(
                wire(&s.allocation_strategy).as_str(),
            ))
            .build()
    });
    let on_demand = r.on_demand_options.as_ref().map(|o| {
        sdk::OnDemandOptionsRequest::builder()
            .allocation_strategy(sdk::FleetOnDemandAllocationStrategy::from(
                wire(&o.allocation_strategy).as_str(),
            ))
            .set_capacity_reservation_options(o.capacity_reservation_options.as_ref().map(|c| {
                sdk::CapacityReservationOptionsRequest::builder()
                    .usage_strategy(sdk::FleetCapacityReservationUsageStrategy::from(
                        wire(&c.usage_strategy).as_str(),
                    ))
                    .build()
            }))
            .build()
    });
    let configs = r
        .launch_template_configs
        .iter()
        .map(|c| {
            let spec = &c.launch_template_specification;
            sdk::FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    sdk::FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(&spec.launch_template_name)
                        .version(&spec.version)
                        .build(),
                )
                .set_overrides(Some(
                    c.overrides
                        .iter()
                        .map(|o| {
                            sdk::FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(sdk::InstanceType::from(o.instance_type.as_str()))
                                .subnet_id(&o.subnet_id)
                                .image_id(&o.image_id)
                                .availability_zone(&o.availability_zone)
                                .set_priority(o.priority)
                                .build()
                        })
                        .collect(),
                ))
                .build()
        })
        .collect();
    let tag_specs = r
        .tag_specifications
        .iter()
        .map(|t| {
            sdk::TagSpecification::builder()
                .resource_type(sdk::ResourceType::from(t.resource_type.as_str()))
                .set_tags(Some(
                    t.tags
                        .iter()
                        .map(|t| sdk::Tag::builder().key(&t.key).value(&t.value).build())
                        .collect(),
                ))
                .build()
        })
        .collect::<Vec<_>>();
    CreateFleetInput::builder()
        .client_token(&r.client_token)
        .r#type(sdk::FleetType::from(wire(&r.fleet_type).as_str()))
        .target_capacity_specification(target)
        .set_spot_options(spot)
        .set_on_demand_options(on_demand)
        .set_launch_template_configs(Some(configs))
        .set_tag_specifications((!tag_specs.is_empty()).then_some(tag_specs))
        .build()
        .map_err(|e| e.to_string())
}

fn response_overrides(
    lto: Option<&sdk::LaunchTemplateAndOverridesResponse>,
) -> Option<LaunchTemplateAndOverrides> {
    let o = lto?.overrides()?;
    Some(LaunchTemplateAndOverrides {
        overrides: Some(ResponseOverrides {
            instance_type: o.instance_type().map(|t| t.as_str().to_string()),
            availability_zone: o.availability_zone().map(str::to_string),
            subnet_id: o.subnet_id().map(str::to_string),
        }),
    })
}

/// The parts of a CreateFleet response core reads.
pub fn fleet_response(out: &CreateFleetOutput) -> FleetResponse {
    FleetResponse {
        fleet_id: out.fleet_id().map(str::to_string),
        instances: out
            .instances()
            .iter()
            .map(|i| {
                let mut lto = response_overrides(i.launch_template_and_overrides());
                // Newer responses also carry the zone and subnet on the
                // instance itself.
                if lto.is_none() && (i.availability_zone().is_some() || i.subnet_id().is_some()) {
                    lto = Some(LaunchTemplateAndOverrides {
                        overrides: Some(ResponseOverrides {
                            instance_type: i.instance_type().map(|t| t.as_str().to_string()),
                            availability_zone: i.availability_zone().map(str::to_string),
                            subnet_id: i.subnet_id().map(str::to_string),
                        }),
                    });
                }
                FleetInstance {
                    instance_ids: i.instance_ids().to_vec(),
                    instance_type: i
                        .instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    lifecycle: i
                        .lifecycle()
                        .map(|l| l.as_str().to_string())
                        .unwrap_or_else(|| "on-demand".into()),
                    launch_template_and_overrides: lto,
                }
            })
            .collect(),
        errors: out
            .errors()
            .iter()
            .map(|e| FleetError {
                error_code: e.error_code().unwrap_or_default().to_string(),
                error_message: e.error_message().unwrap_or_default().to_string(),
                launch_template_and_overrides: response_overrides(
                    e.launch_template_and_overrides(),
                ),
            })
            .collect(),
    }
}

// ---------------------------------------------------------------------------
// Other answers.

pub(crate) fn instance(i: &sdk::Instance) -> Option<Instance> {
    Some(Instance {
        id: i.instance_id()?.to_string(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        state: InstanceState::parse(i.state()?.name()?.as_str())?,
        lifecycle: i
            .instance_lifecycle()
            .map(|l| l.as_str().to_string())
            .unwrap_or_else(|| "on-demand".into()),
        launch_time: i.launch_time().map(|t| t.secs()).unwrap_or(0),
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_string),
        tags: tag_map(i.tags()),
    })
}

pub(crate) fn capacity_reservation(r: &sdk::CapacityReservation) -> Option<CapacityReservation> {
    let u32c = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    Some(CapacityReservation {
        id: r.capacity_reservation_id()?.to_string(),
        instance_type: r.instance_type().unwrap_or_default().to_string(),
        availability_zone: r.availability_zone().unwrap_or_default().to_string(),
        total_instance_count: u32c(r.total_instance_count()),
        available_instance_count: u32c(r.available_instance_count()),
        state: r
            .state()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        instance_match_criteria: r
            .instance_match_criteria()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        reservation_type: match r.reservation_type().map(|t| t.as_str()) {
            Some("capacity-block") => ReservationType::CapacityBlock,
            _ => ReservationType::Default,
        },
        platform: r
            .instance_platform()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        tenancy: r
            .tenancy()
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        end_date: r.end_date().map(rfc3339),
        tags: tag_map(r.tags()),
    })
}

/// Keeps the newest price per (type, zone), sorted by (type, zone).
pub(crate) fn newest_spot_prices(prices: impl IntoIterator<Item = SpotPrice>) -> Vec<SpotPrice> {
    let mut newest: BTreeMap<(String, String), SpotPrice> = BTreeMap::new();
    for p in prices {
        let k = (p.instance_type.clone(), p.zone.clone());
        match newest.get(&k) {
            Some(cur) if cur.timestamp >= p.timestamp => {}
            _ => {
                newest.insert(k, p);
            }
        }
    }
    newest.into_values().collect()
}

fn image(i: &sdk::Image, now: i64) -> Option<Image> {
    let deprecated = i
        .deprecation_time()
        .and_then(|t| DateTime::from_str(t, Format::DateTime).ok())
        .is_some_and(|t| t.secs() <= now);
    Some(Image {
        id: i.image_id()?.to_string(),
        name: i.name().unwrap_or_default().to_string(),
        owner_id: i.owner_id().unwrap_or_default().to_string(),
        architecture: i
            .architecture()
            .map(|a| a.as_str())
            .unwrap_or_default()
            .to_string(),
        creation_date: i.creation_date().unwrap_or_default().to_string(),
        deprecated,
        tags: tag_map(i.tags()),
    })
}

// ---------------------------------------------------------------------------

impl Ec2Client {
    /// EC2 in the configuration's region, with the Price List API (pinned
    /// to [`PRICE_LIST_REGION`](crate::pricing::PRICE_LIST_REGION)) for
    /// on-demand prices.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Ec2Client {
            client: Client::new(config),
            prices: Some(PriceListClient::new(config)),
        }
    }

    /// EC2 through `client`, without a price list: [`PriceList`] calls are
    /// rejected (the services fall back to the embedded table).
    pub fn from_client(client: Client) -> Self {
        Ec2Client {
            client,
            prices: None,
        }
    }

    pub async fn from_env() -> Self {
        Self::new(&crate::load_config().await)
    }

    async fn terminate_batch(&self, ids: &[String]) -> PortResult<()> {
        let what = format!("EC2 TerminateInstances {}", ids.join(","));
        match self
            .client
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("InvalidInstanceID.NotFound") => {
                if ids.len() <= 1 {
                    return Ok(());
                }
                // One unknown id fails the whole call: terminate the others
                // one by one.
                for id in ids {
                    match self
                        .client
                        .terminate_instances()
                        .instance_ids(id)
                        .send()
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if code(&e) == Some("InvalidInstanceID.NotFound") => {}
                        Err(e) => {
                            return Err(classify(&format!("EC2 TerminateInstances {id}"), &e))
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(classify(&what, &e)),
        }
    }
}

impl PriceList for Ec2Client {
    async fn on_demand_prices(&self, region: &str) -> PortResult<BTreeMap<String, f64>> {
        match &self.prices {
            Some(p) => p.on_demand_prices(region).await,
            None => Err(PortError::Rejected(
                "Pricing GetProducts: this EC2 client has no Price List client".into(),
            )),
        }
    }
}

impl Ec2 for Ec2Client {
    async fn describe_instance_types(&self) -> PortResult<Vec<InstanceTypeInfo>> {
        let what = "EC2 DescribeInstanceTypes";
        let mut raw = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_instance_types()
                .max_results(100)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            raw.extend(out.instance_types().iter().map(instance_type_json));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        parse_describe_instance_types(&json!({ "InstanceTypes": raw }))
            .map_err(|e| rejected(what, e))
    }

    async fn describe_instance_type_offerings(&self) -> PortResult<Vec<(String, String)>> {
        let what = "EC2 DescribeInstanceTypeOfferings";
        let mut out_list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_instance_type_offerings()
                .location_type(sdk::LocationType::AvailabilityZone)
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            out_list.extend(out.instance_type_offerings().iter().filter_map(|o| {
                Some((
                    o.instance_type()?.as_str().to_string(),
                    o.location()?.to_string(),
                ))
            }));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        out_list.sort();
        out_list.dedup();
        Ok(out_list)
    }

    async fn describe_spot_prices(&self) -> PortResult<Vec<SpotPrice>> {
        let what = "EC2 DescribeSpotPriceHistory";
        let mut prices = Vec::new();
        let mut token = None;
        let start = DateTime::from_secs(now_secs());
        loop {
            let out = self
                .client
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .start_time(start)
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            prices.extend(out.spot_price_history().iter().filter_map(|p| {
                Some(SpotPrice {
                    instance_type: p.instance_type()?.as_str().to_string(),
                    zone: p.availability_zone()?.to_string(),
                    price: p.spot_price()?.parse().ok()?,
                    timestamp: p.timestamp().map(|t| t.secs()).unwrap_or(0),
                })
            }));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(newest_spot_prices(prices))
    }

    async fn describe_subnets(&self, filters: &[Filter]) -> PortResult<Vec<Subnet>> {
        let what = "EC2 DescribeSubnets";
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_subnets()
                .set_filters(filters_opt(filters))
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(out.subnets().iter().filter_map(|s| {
                Some(Subnet {
                    id: s.subnet_id()?.to_string(),
                    zone: s.availability_zone().unwrap_or_default().to_string(),
                    zone_id: s.availability_zone_id().unwrap_or_default().to_string(),
                    vpc_id: s.vpc_id().unwrap_or_default().to_string(),
                    available_ips: s
                        .available_ip_address_count()
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0),
                    tags: tag_map(s.tags()),
                })
            }));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(list)
    }

    async fn describe_security_groups(&self, filters: &[Filter]) -> PortResult<Vec<SecurityGroup>> {
        let what = "EC2 DescribeSecurityGroups";
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_security_groups()
                .set_filters(filters_opt(filters))
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(out.security_groups().iter().filter_map(|g| {
                Some(SecurityGroup {
                    id: g.group_id()?.to_string(),
                    name: g.group_name().unwrap_or_default().to_string(),
                    vpc_id: g.vpc_id().unwrap_or_default().to_string(),
                    tags: tag_map(g.tags()),
                })
            }));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(list)
    }

    async fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> PortResult<Vec<Image>> {
        let what = "EC2 DescribeImages";
        let now = now_secs();
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_images()
                .set_filters(filters_opt(filters))
                .set_owners((!owners.is_empty()).then(|| owners.to_vec()))
                .include_deprecated(true)
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(out.images().iter().filter_map(|i| image(i, now)));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(list)
    }

    async fn describe_capacity_reservations(
        &self,
        filters: &[Filter],
    ) -> PortResult<Vec<CapacityReservation>> {
        let what = "EC2 DescribeCapacityReservations";
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_capacity_reservations()
                .set_filters(filters_opt(filters))
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(
                out.capacity_reservations()
                    .iter()
                    .filter_map(capacity_reservation),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(list)
    }

    async fn create_launch_template(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> PortResult<()> {
        let what = format!("EC2 CreateLaunchTemplate {name}");
        let i = launch_template_input(name, config).map_err(|e| rejected(&what, e))?;
        let result = self
            .client
            .create_launch_template()
            .set_launch_template_name(i.launch_template_name)
            .set_launch_template_data(i.launch_template_data)
            .set_tag_specifications(i.tag_specifications)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Names are content hashes: same name, same content.
            Err(e) if code(&e) == Some("InvalidLaunchTemplateName.AlreadyExistsException") => {
                Ok(())
            }
            Err(e) => Err(classify(&what, &e)),
        }
    }

    async fn describe_launch_templates(&self, filters: &[Filter]) -> PortResult<Vec<String>> {
        let what = "EC2 DescribeLaunchTemplates";
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_launch_templates()
                .set_filters(filters_opt(filters))
                .max_results(200)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(
                out.launch_templates()
                    .iter()
                    .filter_map(|t| t.launch_template_name().map(str::to_string)),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        list.sort();
        list.dedup();
        Ok(list)
    }

    async fn delete_launch_template(&self, name: &str) -> PortResult<()> {
        let what = format!("EC2 DeleteLaunchTemplate {name}");
        match self
            .client
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    code(&e),
                    Some(
                        "InvalidLaunchTemplateName.NotFoundException"
                            | "InvalidLaunchTemplateId.NotFound"
                            | "InvalidLaunchTemplateName.NotFound"
                    )
                ) =>
            {
                Ok(())
            }
            Err(e) => {
                // Some EC2-compatible endpoints (moto) answer a missing
                // template with another 4xx: gone is gone.
                let err = classify(&what, &e);
                if matches!(err, PortError::Rejected(_)) {
                    let filters = [Filter::new("launch-template-name", [name])];
                    if let Ok(existing) = self.describe_launch_templates(&filters).await {
                        if existing.iter().all(|n| n != name) {
                            return Ok(());
                        }
                    }
                }
                Err(err)
            }
        }
    }

    async fn create_fleet(&self, request: &FleetRequest) -> PortResult<FleetResponse> {
        let what = format!("EC2 CreateFleet (client token {})", request.client_token);
        let i = fleet_input(request).map_err(|e| rejected(&what, e))?;
        let out = self
            .client
            .create_fleet()
            .set_client_token(i.client_token)
            .set_type(i.r#type)
            .set_target_capacity_specification(i.target_capacity_specification)
            .set_spot_options(i.spot_options)
            .set_on_demand_options(i.on_demand_options)
            .set_launch_template_configs(i.launch_template_configs)
            .set_tag_specifications(i.tag_specifications)
            .send()
            .await
            .map_err(|e| classify(&what, &e))?;
        Ok(fleet_response(&out))
    }

    async fn describe_instances(&self, filters: &[Filter]) -> PortResult<Vec<Instance>> {
        let what = "EC2 DescribeInstances";
        let mut list = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .describe_instances()
                .set_filters(filters_opt(filters))
                .max_results(1000)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(what, &e))?;
            list.extend(
                out.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(instance),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => break,
            }
        }
        Ok(list)
    }

    async fn terminate_instances(&self, ids: &[String]) -> PortResult<()> {
        for batch in ids.chunks(TERMINATE_BATCH) {
            self.terminate_batch(batch).await?;
        }
        Ok(())
    }
}
