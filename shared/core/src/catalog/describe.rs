//! Maps DescribeInstanceTypes output (`{"InstanceTypes": [...]}`, the shape
//! of `aws ec2 describe-instance-types` and of the embedded catalog) to
//! [`InstanceTypeInfo`]. Errors name the entry and the field.

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

fn opt_bool(v: &Value, path: &[&str]) -> bool {
    field(v, path).and_then(Value::as_bool).unwrap_or(false)
}

fn opt_str<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    field(v, path).and_then(Value::as_str).unwrap_or("")
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

    let gpu = field(v, &["GpuInfo", "Gpus"])
        .and_then(Value::as_array)
        .and_then(|g| g.first())
        .map(|g| GpuInfo {
            name: opt_str(g, &["Name"]).to_ascii_lowercase(),
            manufacturer: opt_str(g, &["Manufacturer"]).to_ascii_lowercase(),
            count: opt_u64(g, &["Count"]) as u32,
            memory_mib: opt_u64(g, &["MemoryInfo", "SizeInMiB"]),
        });
    let (mut neuron_devices, mut neuron_cores) = (0u64, 0u64);
    if let Some(devs) = field(v, &["NeuronInfo", "NeuronDevices"]).and_then(Value::as_array) {
        for d in devs {
            let n = opt_u64(d, &["Count"]);
            neuron_devices += n;
            neuron_cores += n * opt_u64(d, &["CoreInfo", "Count"]);
        }
    } else if let Some(accs) =
        field(v, &["InferenceAcceleratorInfo", "Accelerators"]).and_then(Value::as_array)
    {
        // Older Inferentia types only report inference accelerators.
        for a in accs
            .iter()
            .filter(|a| opt_str(a, &["Manufacturer"]) == "AWS")
        {
            neuron_devices += opt_u64(a, &["Count"]);
        }
    }
    let nvme = opt_str(v, &["InstanceStorageInfo", "NvmeSupport"]);
    let local_nvme_gib = if !nvme.is_empty() && nvme != "unsupported" {
        opt_u64(v, &["InstanceStorageInfo", "TotalSizeInGB"])
    } else {
        0
    };
    let card_gbps = field(v, &["NetworkInfo", "NetworkCards"])
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("BaselineBandwidthInGbps"))
        .and_then(Value::as_f64);
    let network_bandwidth_mbps = match card_gbps {
        Some(g) => (g * 1000.0).round() as u64,
        None => parse_network_performance(opt_str(v, &["NetworkInfo", "NetworkPerformance"])),
    };
    let usage: Vec<&str> = field(v, &["SupportedUsageClasses"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| vec!["on-demand"]);
    Ok(InstanceTypeInfo {
        architecture: architecture.to_string(),
        vcpu: vcpu.min(u32::MAX as u64) as u32,
        memory_mib,
        hypervisor: opt_str(v, &["Hypervisor"]).to_string(),
        bare_metal: opt_bool(v, &["BareMetal"]),
        current_generation: opt_bool(v, &["CurrentGeneration"]),
        encryption_in_transit: opt_bool(v, &["NetworkInfo", "EncryptionInTransitSupported"]),
        cpu_manufacturer: opt_str(v, &["ProcessorInfo", "Manufacturer"]).to_ascii_lowercase(),
        gpu,
        neuron_devices: neuron_devices as u32,
        neuron_cores: neuron_cores as u32,
        local_nvme_gib,
        network_bandwidth_mbps,
        ebs_bandwidth_mbps: opt_u64(
            v,
            &["EbsInfo", "EbsOptimizedInfo", "BaselineBandwidthInMbps"],
        ),
        max_network_interfaces: opt_u64(v, &["NetworkInfo", "MaximumNetworkInterfaces"]) as u32,
        ipv4_per_interface: opt_u64(v, &["NetworkInfo", "Ipv4AddressesPerInterface"]) as u32,
        efa_interfaces: opt_u64(v, &["NetworkInfo", "EfaInfo", "MaximumEfaInterfaces"]) as u32,
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
    fn network_performance_fallback() {
        assert_eq!(parse_network_performance("Up to 10 Gigabit"), 10_000);
        assert_eq!(parse_network_performance("100 Megabit"), 100);
        assert_eq!(parse_network_performance("High"), 0);
    }
}
