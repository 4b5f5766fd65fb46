//! Maps DescribeInstanceTypes output (`{"InstanceTypes": [...]}`, the shape
//! of `aws ec2 describe-instance-types`) to [`InstanceTypeInfo`]. Errors name
//! the entry and the field.
//!
//! The embedded catalog is already in [`InstanceTypeInfo`]'s shape: its
//! generator (`shared/core/data/generate_catalog.py`, `to_info`) applies the
//! same mapping in Python, and a test in `embedded` checks that both agree on
//! the raw entries the generator embeds as `describeSample`. Mapping rules
//! (Karpenter's, where it has one):
//!
//! * architecture: `arm64` if listed, else `amd64` for `x86_64`; other
//!   architectures (i386-only, `*_mac`) are skipped;
//! * GPU: the first `GpuInfo.Gpus` entry, name and manufacturer in lower
//!   kebab case (`RTX PRO 4500` → `rtx-pro-4500`), count summed over entries
//!   of that manufacturer, memory per GPU;
//! * Neuron: `NeuronInfo` devices and devices × cores; without `NeuronInfo`,
//!   AWS-made `InferenceAcceleratorInfo` accelerators count as devices;
//! * local NVMe: `InstanceStorageInfo.TotalSizeInGB` unless `NvmeSupport` is
//!   absent or `unsupported`;
//! * network bandwidth: the sum of `NetworkCards[*].BaselineBandwidthInGbps`
//!   × 1000 (equal to card 0 for single-card types; the instance total, as in
//!   Karpenter's bandwidth table, for multi-card ones), else parsed from
//!   `NetworkPerformance`;
//! * ENIs: `MaximumNetworkInterfaces` of the default network card (the VPC
//!   CNI uses only that card, so p4d.24xlarge gets 15 × 49 + 2 = 737 pods),
//!   else `NetworkInfo.MaximumNetworkInterfaces`;
//! * EBS bandwidth: `EbsOptimizedInfo.BaselineBandwidthInMbps`;
//! * spot / on-demand support from `SupportedUsageClasses` (absent: on-demand).

use serde_json::Value;

use super::{CatalogError, GpuInfo, InstanceTypeInfo};

fn field<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k))
}

fn err(i: usize, path: &str, what: &str) -> CatalogError {
    CatalogError::Describe(format!("InstanceTypes[{i}].{path}: {what}"))
}

fn req_u64(v: &Value, i: usize, path: &[&str]) -> Result<u64, CatalogError> {
    match field(v, path) {
        None => Err(err(i, &path.join("."), "missing")),
        Some(x) => x
            .as_u64()
            .ok_or_else(|| err(i, &path.join("."), "not a non-negative integer")),
    }
}

fn opt_u64(v: &Value, path: &[&str]) -> u64 {
    field(v, path).and_then(Value::as_u64).unwrap_or(0)
}

/// Clamped to `u32` (hostile or absurd inputs saturate instead of wrapping).
fn u32c(n: u64) -> u32 {
    n.min(u32::MAX as u64) as u32
}

fn opt_bool(v: &Value, path: &[&str]) -> bool {
    field(v, path).and_then(Value::as_bool).unwrap_or(false)
}

fn opt_str<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    field(v, path).and_then(Value::as_str).unwrap_or("")
}

/// Karpenter's `lowerKabobCase`: lower case, spaces to dashes.
fn kebab(s: &str) -> String {
    s.replace(' ', "-").to_ascii_lowercase()
}

/// "Up to 10 Gigabit" / "25 Gigabit" / "100 Megabit" → Mbps.
fn parse_network_performance(s: &str) -> u64 {
    let words: Vec<&str> = s.split_whitespace().collect();
    for w in words.windows(2) {
        if let Ok(n) = w[0]
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse::<f64>()
        {
            let mult = if w[1].starts_with("Gigabit") || w[1] == "G" {
                1000.0
            } else {
                1.0
            };
            return (n * mult) as u64;
        }
    }
    0
}

/// One entry of `InstanceTypes`.
pub fn parse_instance_type(v: &Value, i: usize) -> Result<InstanceTypeInfo, CatalogError> {
    let name = field(v, &["InstanceType"])
        .and_then(Value::as_str)
        .ok_or_else(|| err(i, "InstanceType", "missing or not a string"))?
        .to_string();
    let archs: Vec<&str> = field(v, &["ProcessorInfo", "SupportedArchitectures"])
        .and_then(Value::as_array)
        .ok_or_else(|| {
            err(
                i,
                "ProcessorInfo.SupportedArchitectures",
                "missing or not a list",
            )
        })?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let architecture = if archs.contains(&"arm64") {
        "arm64"
    } else if archs.contains(&"x86_64") {
        "amd64"
    } else {
        return Err(err(
            i,
            "ProcessorInfo.SupportedArchitectures",
            &format!("{name}: no x86_64 or arm64 architecture ({archs:?})"),
        ));
    };
    let vcpu = req_u64(v, i, &["VCpuInfo", "DefaultVCpus"])?;
    let memory_mib = req_u64(v, i, &["MemoryInfo", "SizeInMiB"])?;

    let gpus = field(v, &["GpuInfo", "Gpus"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let gpu = gpus.first().map(|g| {
        let manufacturer = opt_str(g, &["Manufacturer"]);
        GpuInfo {
            name: kebab(opt_str(g, &["Name"])),
            manufacturer: kebab(manufacturer),
            count: gpus
                .iter()
                .filter(|x| opt_str(x, &["Manufacturer"]) == manufacturer)
                .map(|x| opt_u64(x, &["Count"]))
                .fold(0u64, u64::saturating_add)
                .min(u32::MAX as u64) as u32,
            memory_mib: opt_u64(g, &["MemoryInfo", "SizeInMiB"]),
        }
    });
    let (mut neuron_devices, mut neuron_cores) = (0u64, 0u64);
    if let Some(devs) = field(v, &["NeuronInfo", "NeuronDevices"]).and_then(Value::as_array) {
        for d in devs {
            let n = opt_u64(d, &["Count"]);
            neuron_devices = neuron_devices.saturating_add(n);
            neuron_cores =
                neuron_cores.saturating_add(n.saturating_mul(opt_u64(d, &["CoreInfo", "Count"])));
        }
    } else if let Some(accs) =
        field(v, &["InferenceAcceleratorInfo", "Accelerators"]).and_then(Value::as_array)
    {
        // Older Inferentia types only report inference accelerators.
        for a in accs
            .iter()
            .filter(|a| opt_str(a, &["Manufacturer"]) == "AWS")
        {
            neuron_devices = neuron_devices.saturating_add(opt_u64(a, &["Count"]));
        }
    }
    let nvme = opt_str(v, &["InstanceStorageInfo", "NvmeSupport"]);
    let local_nvme_gib = if !nvme.is_empty() && nvme != "unsupported" {
        opt_u64(v, &["InstanceStorageInfo", "TotalSizeInGB"])
    } else {
        0
    };
    let cards = field(v, &["NetworkInfo", "NetworkCards"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let card_gbps: Vec<f64> = cards
        .iter()
        .filter_map(|c| c.get("BaselineBandwidthInGbps").and_then(Value::as_f64))
        .collect();
    let network_bandwidth_mbps = if card_gbps.is_empty() {
        parse_network_performance(opt_str(v, &["NetworkInfo", "NetworkPerformance"]))
    } else {
        (card_gbps.iter().sum::<f64>() * 1000.0).round() as u64
    };
    let default_card = opt_u64(v, &["NetworkInfo", "DefaultNetworkCardIndex"]);
    let enis = cards
        .iter()
        .find(|c| opt_u64(c, &["NetworkCardIndex"]) == default_card)
        .or_else(|| cards.first())
        .and_then(|c| c.get("MaximumNetworkInterfaces"))
        .and_then(Value::as_u64)
        .unwrap_or_else(|| opt_u64(v, &["NetworkInfo", "MaximumNetworkInterfaces"]));
    let usage: Vec<&str> = field(v, &["SupportedUsageClasses"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| vec!["on-demand"]);
    Ok(InstanceTypeInfo {
        architecture: architecture.to_string(),
        vcpu: u32c(vcpu),
        memory_mib,
        hypervisor: opt_str(v, &["Hypervisor"]).to_string(),
        bare_metal: opt_bool(v, &["BareMetal"]),
        current_generation: opt_bool(v, &["CurrentGeneration"]),
        encryption_in_transit: opt_bool(v, &["NetworkInfo", "EncryptionInTransitSupported"]),
        cpu_manufacturer: kebab(opt_str(v, &["ProcessorInfo", "Manufacturer"])),
        gpu,
        neuron_devices: u32c(neuron_devices),
        neuron_cores: u32c(neuron_cores),
        local_nvme_gib,
        network_bandwidth_mbps,
        ebs_bandwidth_mbps: opt_u64(
            v,
            &["EbsInfo", "EbsOptimizedInfo", "BaselineBandwidthInMbps"],
        ),
        max_network_interfaces: u32c(enis),
        ipv4_per_interface: u32c(opt_u64(v, &["NetworkInfo", "Ipv4AddressesPerInterface"])),
        efa_interfaces: u32c(opt_u64(
            v,
            &["NetworkInfo", "EfaInfo", "MaximumEfaInterfaces"],
        )),
        // Trunk-interface limits are not in DescribeInstanceTypes.
        pod_eni: 0,
        supports_spot: usage.contains(&"spot"),
        supports_on_demand: usage.contains(&"on-demand"),
        name,
    })
}

/// The whole document. Entries whose architecture Flotilla cannot run
/// (i386-only, mac) are skipped; any other malformed entry is an error.
pub fn parse_describe_instance_types(doc: &Value) -> Result<Vec<InstanceTypeInfo>, CatalogError> {
    let list = doc
        .get("InstanceTypes")
        .and_then(Value::as_array)
        .ok_or_else(|| CatalogError::Describe("InstanceTypes: missing or not a list".into()))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        match parse_instance_type(v, i) {
            Ok(info) => out.push(info),
            Err(CatalogError::Describe(m)) if m.contains("no x86_64 or arm64") => {
                tracing::debug!("skipping {m}");
            }
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m5() -> Value {
        json!({
            "InstanceType": "m5.large",
            "CurrentGeneration": true,
            "Hypervisor": "nitro",
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel"},
            "VCpuInfo": {"DefaultVCpus": 2},
            "MemoryInfo": {"SizeInMiB": 8192},
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                            "NetworkPerformance": "Up to 10 Gigabit",
                            "NetworkCards": [{"BaselineBandwidthInGbps": 0.75}]},
            "SupportedUsageClasses": ["on-demand", "spot"]
        })
    }

    #[test]
    fn maps_fields() {
        let v = parse_describe_instance_types(&json!({"InstanceTypes": [m5()]})).unwrap();
        let i = &v[0];
        assert_eq!(
            (i.vcpu, i.memory_mib, i.architecture.as_str()),
            (2, 8192, "amd64")
        );
        assert_eq!(i.network_bandwidth_mbps, 750);
        assert_eq!(i.eni_limited_pods(), 29);
        assert!(i.supports_spot && i.supports_on_demand);
        assert_eq!(i.cpu_manufacturer, "intel");
    }

    #[test]
    fn errors_name_entry_and_field() {
        let mut bad = m5();
        bad["VCpuInfo"] = json!({"DefaultVCpus": "two"});
        let e = parse_describe_instance_types(&json!({"InstanceTypes": [m5(), bad]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "describe-instance-types document: InstanceTypes[1].VCpuInfo.DefaultVCpus: not a non-negative integer"
        );
        let mut bad = m5();
        bad.as_object_mut().unwrap().remove("MemoryInfo");
        let e = parse_describe_instance_types(&json!({"InstanceTypes": [bad]})).unwrap_err();
        assert!(
            e.to_string()
                .contains("InstanceTypes[0].MemoryInfo.SizeInMiB: missing"),
            "{e}"
        );
        assert!(parse_describe_instance_types(&json!({"Other": []})).is_err());
    }

    #[test]
    fn skips_unsupported_architectures() {
        let mut mac = m5();
        mac["InstanceType"] = json!("mac1.metal");
        mac["ProcessorInfo"]["SupportedArchitectures"] = json!(["x86_64_mac"]);
        let v = parse_describe_instance_types(&json!({"InstanceTypes": [mac, m5()]})).unwrap();
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn multi_card_gpu_and_neuron_mapping() {
        let mut p = m5();
        p["InstanceType"] = json!("p4d.24xlarge");
        p["NetworkInfo"] = json!({
            "MaximumNetworkInterfaces": 60, "Ipv4AddressesPerInterface": 50,
            "DefaultNetworkCardIndex": 0,
            "EfaInfo": {"MaximumEfaInterfaces": 4},
            "NetworkCards": [
                {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 15, "BaselineBandwidthInGbps": 100.0},
                {"NetworkCardIndex": 1, "MaximumNetworkInterfaces": 15, "BaselineBandwidthInGbps": 100.0},
                {"NetworkCardIndex": 2, "MaximumNetworkInterfaces": 15, "BaselineBandwidthInGbps": 100.0},
                {"NetworkCardIndex": 3, "MaximumNetworkInterfaces": 15, "BaselineBandwidthInGbps": 100.0}
            ]
        });
        p["GpuInfo"] = json!({"Gpus": [{"Name": "RTX PRO 4500", "Manufacturer": "NVIDIA",
                                        "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]});
        p["NeuronInfo"] = json!({"NeuronDevices": [{"Count": 16, "CoreInfo": {"Count": 2}}]});
        p["InstanceStorageInfo"] = json!({"TotalSizeInGB": 8000, "NvmeSupport": "required"});
        p["SupportedUsageClasses"] = json!(["on-demand", "capacity-block"]);
        let v = parse_describe_instance_types(&json!({"InstanceTypes": [p]})).unwrap();
        let i = &v[0];
        assert_eq!(i.max_network_interfaces, 15);
        assert_eq!(i.eni_limited_pods(), 737);
        assert_eq!(i.network_bandwidth_mbps, 400_000);
        assert_eq!(i.efa_interfaces, 4);
        let g = i.gpu.as_ref().unwrap();
        assert_eq!(
            (
                g.name.as_str(),
                g.manufacturer.as_str(),
                g.count,
                g.memory_mib
            ),
            ("rtx-pro-4500", "nvidia", 8, 40960)
        );
        assert_eq!((i.neuron_devices, i.neuron_cores), (16, 32));
        assert_eq!(i.local_nvme_gib, 8000);
        assert!(i.supports_on_demand && !i.supports_spot);
    }

    #[test]
    fn hostile_numbers_saturate_instead_of_panicking() {
        let mut p = m5();
        p["NeuronInfo"] = json!({"NeuronDevices": [
            {"Count": u64::MAX, "CoreInfo": {"Count": u64::MAX}},
            {"Count": u64::MAX}
        ]});
        p["VCpuInfo"]["DefaultVCpus"] = json!(u64::MAX);
        let v = parse_describe_instance_types(&json!({"InstanceTypes": [p]})).unwrap();
        assert_eq!((v[0].vcpu, v[0].neuron_cores), (u32::MAX, u32::MAX));
        let mut p = m5();
        p["InstanceType"] = json!(3);
        let e =
            parse_describe_instance_types(&json!({"InstanceTypes": [m5(), m5(), p]})).unwrap_err();
        assert!(
            e.to_string().contains("InstanceTypes[2].InstanceType"),
            "{e}"
        );
    }

    #[test]
    fn network_performance_fallback() {
        assert_eq!(parse_network_performance("Up to 10 Gigabit"), 10_000);
        assert_eq!(parse_network_performance("100 Megabit"), 100);
        assert_eq!(parse_network_performance("High"), 0);
    }
}
