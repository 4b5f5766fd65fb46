//! Bootstrap user data for a NodeClaim: its labels, taints (including
//! startup taints) and kubelet settings, for AL2023 (`nodeadm` NodeConfig in
//! a MIME multi-part document) and Bottlerocket (TOML settings).
//!
//! Deep-dive rule (phase 2, "Launch Template Generation"): the launch
//! template resolved per AMI carries the bootstrap configuration; every
//! label and taint the NodeClaim registers with comes from here.
//!
//! Everything interpolated into the document is validated first: label and
//! taint keys with [`labels::validate_key`], label and taint values with
//! [`labels::validate_value`] (taint effects are a closed enum), cluster
//! fields with character whitelists. Nothing is escaped, so nothing can
//! break out of a YAML or TOML string.
//!
//! Merging with the user's own user data:
//! - AL2023: the user's parts (a MIME multi-part document, a NodeConfig or a
//!   `#!` script) come first, Flotilla's NodeConfig last, so `nodeadm`'s
//!   in-order merge lets Flotilla's cluster and kubelet fields win.
//! - Bottlerocket: user keys are kept; on a key Flotilla writes, Flotilla
//!   wins; a user key that is a table where Flotilla writes a value (or the
//!   reverse) is an error. Multi-line values and arrays of tables in the
//!   user's TOML are rejected.
//! - Custom: the user's data is used verbatim.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::LaunchError;
use crate::labels;
use crate::model::{AmiFamily, KubeletConfig, Taint, TaintEffect, Threshold};

/// The MIME boundary of generated AL2023 documents.
pub const MIME_BOUNDARY: &str = "//FLOTILLA-BOUNDARY//";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    /// `https://...`
    pub endpoint: String,
    /// Base64 PEM bundle.
    pub ca_bundle: String,
    /// Service CIDR.
    pub service_cidr: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UserDataInput {
    pub ami_family: AmiFamily,
    pub cluster: ClusterInfo,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub kubelet: KubeletConfig,
    /// `spec.userData` of the EC2NodeClass.
    pub user_data: Option<String>,
}

fn effect(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

fn check_chars(field: &str, v: &str, ok: impl Fn(char) -> bool) -> Result<(), LaunchError> {
    if v.is_empty() {
        return Err(LaunchError::InvalidBootstrapField {
            field: field.into(),
            reason: "must not be empty".into(),
        });
    }
    match v.chars().find(|c| !ok(*c)) {
        Some(c) => Err(LaunchError::InvalidBootstrapField {
            field: field.into(),
            reason: format!("character {c:?} not allowed"),
        }),
        None => Ok(()),
    }
}

/// Validates everything that will be interpolated; returns the taints and
/// startup taints, deduplicated, in order.
fn validate(input: &UserDataInput) -> Result<Vec<Taint>, LaunchError> {
    for (k, v) in &input.labels {
        for r in [labels::validate_key(k), labels::validate_value(v)] {
            r.map_err(|e| LaunchError::InvalidLabel {
                key: k.clone(),
                reason: e.to_string(),
            })?;
        }
    }
    let mut taints: Vec<Taint> = Vec::new();
    for t in input.taints.iter().chain(&input.startup_taints) {
        for r in [
            labels::validate_key(&t.key),
            labels::validate_value(&t.value),
        ] {
            r.map_err(|e| LaunchError::InvalidTaint {
                key: t.key.clone(),
                reason: e.to_string(),
            })?;
        }
        if !taints.contains(t) {
            taints.push(t.clone());
        }
    }
    let c = &input.cluster;
    check_chars("cluster name", &c.name, |ch| {
        ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'
    })?;
    if c.name.len() > 100 {
        return Err(LaunchError::InvalidBootstrapField {
            field: "cluster name".into(),
            reason: "longer than 100 characters".into(),
        });
    }
    check_chars("API endpoint", &c.endpoint, |ch| {
        ch.is_ascii_alphanumeric() || ".-:/_".contains(ch)
    })?;
    if !c.endpoint.starts_with("https://") {
        return Err(LaunchError::InvalidBootstrapField {
            field: "API endpoint".into(),
            reason: "must start with https://".into(),
        });
    }
    check_chars("certificate authority", &c.ca_bundle, |ch| {
        ch.is_ascii_alphanumeric() || "+/=".contains(ch)
    })?;
    check_chars("service CIDR", &c.service_cidr, |ch| {
        ch.is_ascii_hexdigit() || ".:/".contains(ch)
    })?;
    let k = &input.kubelet;
    for ip in &k.cluster_dns {
        check_chars("clusterDNS", ip, |ch| {
            ch.is_ascii_hexdigit() || ".:".contains(ch)
        })?;
    }
    for key in k
        .eviction_hard
        .keys()
        .chain(k.eviction_soft.keys())
        .chain(k.eviction_soft_grace_period.keys())
    {
        check_chars("eviction signal", key, |ch| {
            ch.is_ascii_alphanumeric() || ch == '.'
        })?;
    }
    for v in k.eviction_soft_grace_period.values() {
        check_chars("eviction grace period", v, |ch| {
            ch.is_ascii_alphanumeric() || ch == '.'
        })?;
    }
    for (name, _) in k.kube_reserved.iter().chain(k.system_reserved.iter()) {
        check_chars("reserved resource", name, |ch| {
            ch.is_ascii_alphanumeric() || "-./_".contains(ch)
        })?;
    }
    Ok(taints)
}

fn threshold(t: &Threshold) -> String {
    match t {
        Threshold::Quantity(q) => q.to_k8s_string(),
        Threshold::Percent(p) => format!("{p}%"),
    }
}

fn max_pod_grace_seconds(k: &KubeletConfig) -> Result<Option<u64>, LaunchError> {
    let Some(v) = &k.eviction_max_pod_grace_period else {
        return Ok(None);
    };
    v.strip_suffix('s')
        .unwrap_or(v)
        .parse::<u64>()
        .map(Some)
        .map_err(|_| LaunchError::InvalidBootstrapField {
            field: "evictionMaxPodGracePeriod".into(),
            reason: format!("{v:?} is not a number of seconds"),
        })
}

/// Generates the user data for `input.ami_family`.
pub fn generate_user_data(input: &UserDataInput) -> Result<String, LaunchError> {
    let taints = validate(input)?;
    match input.ami_family {
        AmiFamily::AL2023 => al2023(input, &taints),
        AmiFamily::Bottlerocket => bottlerocket(input, &taints),
        AmiFamily::Custom => Ok(input.user_data.clone().unwrap_or_default()),
        ref other => Err(LaunchError::UnsupportedAmiFamily(format!("{other:?}"))),
    }
}

// ---------------------------------------------------------------- AL2023

fn node_config(input: &UserDataInput, taints: &[Taint]) -> Result<String, LaunchError> {
    let c = &input.cluster;
    let k = &input.kubelet;
    let mut y = String::new();
    y.push_str("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n");
    let _ = writeln!(y, "    name: \"{}\"", c.name);
    let _ = writeln!(y, "    apiServerEndpoint: \"{}\"", c.endpoint);
    let _ = writeln!(y, "    certificateAuthority: \"{}\"", c.ca_bundle);
    let _ = writeln!(y, "    cidr: \"{}\"", c.service_cidr);

    let mut config = String::new();
    if let Some(m) = k.max_pods {
        let _ = writeln!(config, "      maxPods: {m}");
    }
    if let Some(m) = k.pods_per_core {
        let _ = writeln!(config, "      podsPerCore: {m}");
    }
    if !k.cluster_dns.is_empty() {
        config.push_str("      clusterDNS:\n");
        for ip in &k.cluster_dns {
            let _ = writeln!(config, "        - \"{ip}\"");
        }
    }
    for (name, res) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        if !res.is_zero() {
            let _ = writeln!(config, "      {name}:");
            for (r, q) in res.iter() {
                let _ = writeln!(config, "        \"{r}\": \"{}\"", q.to_k8s_string());
            }
        }
    }
    for (name, map) in [
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
    ] {
        if !map.is_empty() {
            let _ = writeln!(config, "      {name}:");
            for (s, t) in map {
                let _ = writeln!(config, "        \"{s}\": \"{}\"", threshold(t));
            }
        }
    }
    if !k.eviction_soft_grace_period.is_empty() {
        config.push_str("      evictionSoftGracePeriod:\n");
        for (s, d) in &k.eviction_soft_grace_period {
            let _ = writeln!(config, "        \"{s}\": \"{d}\"");
        }
    }
    if let Some(g) = max_pod_grace_seconds(k)? {
        let _ = writeln!(config, "      evictionMaxPodGracePeriod: {g}");
    }

    let mut flags = Vec::new();
    if !input.labels.is_empty() {
        let l: Vec<String> = input
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        flags.push(format!("--node-labels={}", l.join(",")));
    }
    if !taints.is_empty() {
        let t: Vec<String> = taints
            .iter()
            .map(|t| format!("{}={}:{}", t.key, t.value, effect(t.effect)))
            .collect();
        flags.push(format!("--register-with-taints={}", t.join(",")));
    }
    if !config.is_empty() || !flags.is_empty() {
        y.push_str("  kubelet:\n");
        if !config.is_empty() {
            y.push_str("    config:\n");
            y.push_str(&config);
        }
        if !flags.is_empty() {
            y.push_str("    flags:\n");
            for f in flags {
                let _ = writeln!(y, "      - \"{f}\"");
            }
        }
    }
    Ok(y)
}

/// The user's AL2023 user data as MIME parts (headers + body each).
fn user_parts(user: &str) -> Result<Vec<String>, LaunchError> {
    let user = user.replace("\r\n", "\n");
    let trimmed = user.trim_start();
    if trimmed.trim().is_empty() {
        return Ok(Vec::new());
    }
    let header_end = trimmed.find("\n\n").unwrap_or(trimmed.len());
    let headers = &trimmed[..header_end];
    let multipart = headers.lines().find(|l| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("content-type:") && lower.contains("multipart/")
    });
    let Some(ct) = multipart else {
        let content_type = if trimmed.contains("kind: NodeConfig") {
            "application/node.eks.aws"
        } else if trimmed.starts_with("#!") {
            "text/x-shellscript; charset=\"us-ascii\""
        } else if trimmed.starts_with("#cloud-config") {
            "text/cloud-config; charset=\"us-ascii\""
        } else {
            return Err(LaunchError::UserData(
                "AL2023 user data must be a MIME multi-part document, a NodeConfig or a #! script"
                    .into(),
            ));
        };
        return Ok(vec![format!(
            "Content-Type: {content_type}\n\n{}",
            trimmed.trim_end()
        )]);
    };
    let lower = ct.to_ascii_lowercase();
    let boundary = lower
        .find("boundary=")
        .map(|i| &ct[i + "boundary=".len()..])
        .map(|b| {
            let b = b.trim();
            match b.strip_prefix('"') {
                Some(rest) => rest.split('"').next().unwrap_or(""),
                None => b.split([';', ' ']).next().unwrap_or(""),
            }
        })
        .filter(|b| !b.is_empty())
        .ok_or_else(|| LaunchError::UserData("multi-part user data without a boundary".into()))?;
    let delimiter = format!("--{boundary}");
    let close = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in trimmed[header_end..].lines() {
        if line.trim_end() == close {
            break;
        }
        if line.trim_end() == delimiter {
            if let Some(p) = current.take() {
                parts.push(p.join("\n").trim_end().to_string());
            }
            current = Some(Vec::new());
        } else if let Some(p) = current.as_mut() {
            p.push(line);
        }
    }
    if let Some(p) = current.take() {
        parts.push(p.join("\n").trim_end().to_string());
    }
    if parts.is_empty() {
        return Err(LaunchError::UserData(format!(
            "multi-part user data has no parts delimited by {delimiter:?}"
        )));
    }
    Ok(parts)
}

fn al2023(input: &UserDataInput, taints: &[Taint]) -> Result<String, LaunchError> {
    let mut parts = match &input.user_data {
        Some(u) => user_parts(u)?,
        None => Vec::new(),
    };
    if parts.iter().any(|p| p.contains(MIME_BOUNDARY)) {
        return Err(LaunchError::UserData(format!(
            "user data must not contain {MIME_BOUNDARY:?}"
        )));
    }
    parts.push(format!(
        "Content-Type: application/node.eks.aws\n\n{}",
        node_config(input, taints)?.trim_end()
    ));
    let mut out = format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n"
    );
    for p in parts {
        let _ = write!(out, "--{MIME_BOUNDARY}\n{p}\n\n");
    }
    let _ = writeln!(out, "--{MIME_BOUNDARY}--");
    Ok(out)
}

// ----------------------------------------------------------- Bottlerocket

type TomlPath = Vec<String>;

fn toml_err(line: usize, msg: &str) -> LaunchError {
    LaunchError::UserData(format!("Bottlerocket TOML line {line}: {msg}"))
}

/// Splits `s` at top-level occurrences of `sep` (outside quotes), stopping
/// at a `#` comment. Errors on an unterminated string.
fn split_outside_quotes(s: &str, sep: Option<char>) -> Result<Vec<String>, &'static str> {
    let mut out = vec![String::new()];
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in s.chars() {
        if let Some(q) = quote {
            if let Some(last) = out.last_mut() {
                last.push(c);
            }
            if escaped {
                escaped = false;
            } else if c == '\\' && q == '"' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => {
                quote = Some(c);
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
            '#' => break,
            c if Some(c) == sep => out.push(String::new()),
            c => {
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated string (multi-line strings are not supported)");
    }
    Ok(out)
}

fn parse_key(s: &str) -> Result<TomlPath, &'static str> {
    let mut path = Vec::new();
    for seg in split_outside_quotes(s, Some('.'))? {
        let seg = seg.trim();
        let inner = if let Some(q) = seg.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            q
        } else if let Some(q) = seg.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
            q
        } else if !seg.is_empty()
            && seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            seg
        } else {
            return Err("invalid key");
        };
        if inner.contains(['"', '\\', '\'', '\n']) {
            return Err("quotes and escapes in keys are not supported");
        }
        path.push(inner.to_string());
    }
    Ok(path)
}

/// Parses single-line TOML into (full key path → raw value).
fn parse_toml(s: &str) -> Result<BTreeMap<TomlPath, String>, LaunchError> {
    let mut out = BTreeMap::new();
    let mut table: TomlPath = Vec::new();
    for (n, raw) in s.lines().enumerate() {
        let n = n + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("[[") {
            return Err(toml_err(n, "arrays of tables are not supported"));
        }
        if let Some(rest) = line.strip_prefix('[') {
            let body = split_outside_quotes(rest, None).map_err(|m| toml_err(n, m))?;
            let body = body.concat();
            let inner = body
                .trim()
                .strip_suffix(']')
                .ok_or_else(|| toml_err(n, "unterminated table header"))?;
            table = parse_key(inner).map_err(|m| toml_err(n, m))?;
            continue;
        }
        let parts = split_outside_quotes(line, Some('=')).map_err(|m| toml_err(n, m))?;
        let [key, value @ ..] = parts.as_slice() else {
            return Err(toml_err(n, "expected key = value"));
        };
        if value.is_empty() {
            return Err(toml_err(n, "expected key = value"));
        }
        let value = value.join("=").trim().to_string();
        if value.is_empty() {
            return Err(toml_err(n, "empty value"));
        }
        if value.starts_with("\"\"\"") || value.starts_with("'''") {
            return Err(toml_err(n, "multi-line strings are not supported"));
        }
        let stripped = split_outside_quotes(&value, None)
            .map_err(|m| toml_err(n, m))?
            .concat();
        let unquoted: String = {
            // Brackets outside strings must balance on the line.
            let mut depth = 0i64;
            let mut quote: Option<char> = None;
            for c in stripped.chars() {
                match (quote, c) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), _) => {}
                    (None, '"' | '\'') => quote = Some(c),
                    (None, '[' | '{') => depth += 1,
                    (None, ']' | '}') => depth -= 1,
                    _ => {}
                }
            }
            if depth != 0 {
                return Err(toml_err(
                    n,
                    "multi-line arrays and tables are not supported",
                ));
            }
            stripped
        };
        let mut path = table.clone();
        path.extend(parse_key(key).map_err(|m| toml_err(n, m))?);
        if out.insert(path, unquoted.trim().to_string()).is_some() {
            return Err(toml_err(n, "duplicate key"));
        }
    }
    Ok(out)
}

fn toml_key(seg: &str) -> String {
    if !seg.is_empty()
        && seg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        seg.to_string()
    } else {
        format!("\"{seg}\"")
    }
}

fn k8s_path(rest: &[&str]) -> TomlPath {
    ["settings", "kubernetes"]
        .iter()
        .chain(rest)
        .map(|s| s.to_string())
        .collect()
}

fn bottlerocket(input: &UserDataInput, taints: &[Taint]) -> Result<String, LaunchError> {
    let c = &input.cluster;
    let k = &input.kubelet;
    let mut ours: BTreeMap<TomlPath, String> = BTreeMap::new();
    let q = |s: &str| format!("\"{s}\"");
    ours.insert(k8s_path(&["cluster-name"]), q(&c.name));
    ours.insert(k8s_path(&["api-server"]), q(&c.endpoint));
    ours.insert(k8s_path(&["cluster-certificate"]), q(&c.ca_bundle));
    if let Some(m) = k.max_pods {
        ours.insert(k8s_path(&["max-pods"]), m.to_string());
    }
    match k.cluster_dns.as_slice() {
        [] => {}
        [one] => {
            ours.insert(k8s_path(&["cluster-dns-ip"]), q(one));
        }
        many => {
            let v: Vec<String> = many.iter().map(|s| q(s)).collect();
            ours.insert(k8s_path(&["cluster-dns-ip"]), format!("[{}]", v.join(", ")));
        }
    }
    for (table, res) in [
        ("kube-reserved", &k.kube_reserved),
        ("system-reserved", &k.system_reserved),
    ] {
        for (r, qty) in res.iter() {
            ours.insert(k8s_path(&[table, r]), q(&qty.to_k8s_string()));
        }
    }
    for (table, map) in [
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
    ] {
        for (s, t) in map {
            ours.insert(k8s_path(&[table, s]), q(&threshold(t)));
        }
    }
    for (s, d) in &k.eviction_soft_grace_period {
        ours.insert(k8s_path(&["eviction-soft-grace-period", s]), q(d));
    }
    if let Some(g) = max_pod_grace_seconds(k)? {
        ours.insert(k8s_path(&["eviction-max-pod-grace-period"]), g.to_string());
    }
    for (lk, lv) in &input.labels {
        ours.insert(k8s_path(&["node-labels", lk]), q(lv));
    }
    let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for t in taints {
        by_key
            .entry(&t.key)
            .or_default()
            .push(q(&format!("{}:{}", t.value, effect(t.effect))));
    }
    for (tk, vals) in by_key {
        ours.insert(
            k8s_path(&["node-taints", tk]),
            format!("[{}]", vals.join(", ")),
        );
    }

    let mut merged = match &input.user_data {
        Some(u) => parse_toml(u)?,
        None => BTreeMap::new(),
    };
    for user_path in merged.keys() {
        if let Some(conflict) = ours.keys().find(|p| {
            p.len() != user_path.len()
                && (p.starts_with(user_path.as_slice()) || user_path.starts_with(p.as_slice()))
        }) {
            return Err(LaunchError::UserData(format!(
                "user setting {} conflicts with Flotilla's {}",
                user_path.join("."),
                conflict.join(".")
            )));
        }
    }
    // Flotilla's keys win.
    merged.extend(ours);

    let mut tables: BTreeMap<&[String], Vec<(&str, &str)>> = BTreeMap::new();
    for (path, value) in &merged {
        if let Some((last, parent)) = path.split_last() {
            tables.entry(parent).or_default().push((last, value));
        }
    }
    let mut out = String::new();
    for (parent, entries) in tables {
        if !parent.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            let header: Vec<String> = parent.iter().map(|s| toml_key(s)).collect();
            let _ = writeln!(out, "[{}]", header.join("."));
        }
        for (key, value) in entries {
            let _ = writeln!(out, "{} = {value}", toml_key(key));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;
    use crate::resources::Resources;

    fn input(family: AmiFamily) -> UserDataInput {
        let mut kubelet = KubeletConfig {
            max_pods: Some(29),
            cluster_dns: vec!["10.100.0.10".into()],
            ..Default::default()
        };
        kubelet.system_reserved = Resources::new().with("cpu", Quantity::parse("100m").unwrap());
        kubelet.kube_reserved = Resources::new().with("memory", Quantity::parse("512Mi").unwrap());
        kubelet
            .eviction_hard
            .insert("memory.available".into(), Threshold::Percent(5.0));
        kubelet.eviction_max_pod_grace_period = Some("60s".into());
        UserDataInput {
            ami_family: family,
            cluster: ClusterInfo {
                name: "prod".into(),
                endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com".into(),
                ca_bundle: "LS0tLS1CRUdJTg==".into(),
                service_cidr: "10.100.0.0/16".into(),
            },
            labels: BTreeMap::from([
                ("team".to_string(), "team-alpha".to_string()),
                ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: TaintEffect::NoSchedule,
            }],
            startup_taints: vec![Taint {
                key: "node.cilium.io/agent-not-ready".into(),
                value: String::new(),
                effect: TaintEffect::NoExecute,
            }],
            kubelet,
            user_data: None,
        }
    }

    #[test]
    fn al2023_node_config() {
        let out = generate_user_data(&input(AmiFamily::AL2023)).unwrap();
        assert!(out.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed;"));
        for want in [
            "Content-Type: application/node.eks.aws",
            "kind: NodeConfig",
            "    name: \"prod\"",
            "    apiServerEndpoint: \"https://ABC.gr7.us-east-1.eks.amazonaws.com\"",
            "    certificateAuthority: \"LS0tLS1CRUdJTg==\"",
            "    cidr: \"10.100.0.0/16\"",
            "      maxPods: 29",
            "        - \"10.100.0.10\"",
            "      systemReserved:\n        \"cpu\": \"100m\"",
            "      kubeReserved:\n        \"memory\": \"512Mi\"",
            "      evictionHard:\n        \"memory.available\": \"5%\"",
            "      evictionMaxPodGracePeriod: 60",
            "      - \"--node-labels=karpenter.sh/nodepool=default,team=team-alpha\"",
            "      - \"--register-with-taints=dedicated=gpu:NoSchedule,node.cilium.io/agent-not-ready=:NoExecute\"",
        ] {
            assert!(out.contains(want), "missing {want:?} in\n{out}");
        }
        assert!(out.trim_end().ends_with(&format!("--{MIME_BOUNDARY}--")));
        assert_eq!(out.matches("team-alpha").count(), 1);
    }

    #[test]
    fn al2023_merges_user_parts_before_flotilla() {
        let mut i = input(AmiFamily::AL2023);
        i.user_data = Some("#!/bin/bash\necho hello\n".into());
        let out = generate_user_data(&i).unwrap();
        let script = out.find("echo hello").unwrap();
        let ours = out.find("kind: NodeConfig").unwrap();
        assert!(script < ours);
        assert!(out.contains("Content-Type: text/x-shellscript"));

        i.user_data = Some(
            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\r\n\r\n--BOUNDARY\r\nContent-Type: application/node.eks.aws\r\n\r\napiVersion: node.eks.aws/v1alpha1\r\nkind: NodeConfig\r\nspec:\r\n  instance:\r\n    localStorage:\r\n      strategy: RAID0\r\n--BOUNDARY\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/bash\r\necho two\r\n--BOUNDARY--\r\n"
                .into(),
        );
        let out = generate_user_data(&i).unwrap();
        assert_eq!(out.matches(&format!("--{MIME_BOUNDARY}\n")).count(), 3);
        assert!(!out.contains("--BOUNDARY"));
        assert!(out.find("strategy: RAID0").unwrap() < out.find("echo two").unwrap());
        assert!(out.find("echo two").unwrap() < out.rfind("kind: NodeConfig").unwrap());

        i.user_data = Some("just some text".into());
        assert!(matches!(
            generate_user_data(&i),
            Err(LaunchError::UserData(_))
        ));
    }

    #[test]
    fn bottlerocket_settings_merged_with_user_toml() {
        let mut i = input(AmiFamily::Bottlerocket);
        i.user_data = Some(
            "[settings.kubernetes]\ncluster-name = \"evil\" # comment\nallowed-unsafe-sysctls = [\"net.core.somaxconn\"]\n\n[settings.kubernetes.node-labels]\n\"team\" = \"old\"\nmine = \"kept\"\n\n[settings.host-containers.admin]\nenabled = true\n"
                .into(),
        );
        let out = generate_user_data(&i).unwrap();
        for want in [
            "[settings.kubernetes]\n",
            "api-server = \"https://ABC.gr7.us-east-1.eks.amazonaws.com\"\n",
            "cluster-certificate = \"LS0tLS1CRUdJTg==\"\n",
            "cluster-name = \"prod\"\n",
            "max-pods = 29\n",
            "cluster-dns-ip = \"10.100.0.10\"\n",
            "eviction-max-pod-grace-period = 60\n",
            "allowed-unsafe-sysctls = [\"net.core.somaxconn\"]\n",
            "[settings.kubernetes.node-labels]\n\"karpenter.sh/nodepool\" = \"default\"\nmine = \"kept\"\nteam = \"team-alpha\"\n",
            "[settings.kubernetes.node-taints]\ndedicated = [\"gpu:NoSchedule\"]\n\"node.cilium.io/agent-not-ready\" = [\":NoExecute\"]\n",
            "[settings.kubernetes.kube-reserved]\nmemory = \"512Mi\"\n",
            "[settings.kubernetes.system-reserved]\ncpu = \"100m\"\n",
            "[settings.kubernetes.eviction-hard]\n\"memory.available\" = \"5%\"\n",
            "[settings.host-containers.admin]\nenabled = true\n",
        ] {
            assert!(out.contains(want), "missing {want:?} in\n{out}");
        }
        assert!(!out.contains("evil") && !out.contains("old"));
        assert_eq!(out.matches("team-alpha").count(), 1);
        assert_eq!(out.matches("[settings.kubernetes]").count(), 1);
    }

    #[test]
    fn bottlerocket_rejects_conflicting_or_unsupported_user_toml() {
        let mut i = input(AmiFamily::Bottlerocket);
        for bad in [
            "[settings.kubernetes]\nnode-labels = { team = \"x\" }\n",
            "[settings]\nkubernetes = \"x\"\n",
            "[[settings.x]]\na = 1\n",
            "[settings.x]\na = [\n1]\n",
            "[settings.x]\na = \"\"\"\nb\"\"\"\n",
            "[settings.x]\na = \"unterminated\n",
            "not toml\n",
        ] {
            i.user_data = Some(bad.into());
            assert!(
                matches!(generate_user_data(&i), Err(LaunchError::UserData(_))),
                "{bad:?} accepted"
            );
        }
    }

    const BAD: &[&str] = &[
        "$(reboot)",
        "a\nb",
        "a\"b",
        "a]b",
        "\"",
        "a b",
        "x'y",
        "a=b,c=d",
    ];

    #[test]
    fn rejects_injection_in_label_keys_and_values() {
        for family in [AmiFamily::AL2023, AmiFamily::Bottlerocket] {
            for bad in BAD {
                let mut i = input(family.clone());
                i.labels.insert("ok".into(), bad.to_string());
                match generate_user_data(&i) {
                    Err(LaunchError::InvalidLabel { key, .. }) => assert_eq!(key, "ok"),
                    other => panic!("value {bad:?} gave {other:?}"),
                }
                let mut i = input(family.clone());
                i.labels.insert(bad.to_string(), "ok".into());
                match generate_user_data(&i) {
                    Err(LaunchError::InvalidLabel { key, .. }) => assert_eq!(key, *bad),
                    other => panic!("key {bad:?} gave {other:?}"),
                }
            }
        }
    }

    #[test]
    fn rejects_injection_in_taints_and_startup_taints() {
        for bad in BAD {
            let mut i = input(AmiFamily::AL2023);
            i.taints[0].value = bad.to_string();
            match generate_user_data(&i) {
                Err(LaunchError::InvalidTaint { key, .. }) => assert_eq!(key, "dedicated"),
                other => panic!("taint value {bad:?} gave {other:?}"),
            }
            let mut i = input(AmiFamily::Bottlerocket);
            i.startup_taints[0].key = bad.to_string();
            match generate_user_data(&i) {
                Err(LaunchError::InvalidTaint { key, .. }) => assert_eq!(key, *bad),
                other => panic!("startup taint key {bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn rejects_injection_in_cluster_and_kubelet_fields() {
        let mut i = input(AmiFamily::AL2023);
        i.cluster.name = "prod\"\nkind: x".into();
        assert!(matches!(
            generate_user_data(&i),
            Err(LaunchError::InvalidBootstrapField { .. })
        ));
        let mut i = input(AmiFamily::Bottlerocket);
        i.cluster.endpoint = "https://x\"]".into();
        assert!(matches!(
            generate_user_data(&i),
            Err(LaunchError::InvalidBootstrapField { .. })
        ));
        let mut i = input(AmiFamily::AL2023);
        i.kubelet
            .eviction_soft_grace_period
            .insert("memory.available".into(), "1m\"".into());
        assert!(matches!(
            generate_user_data(&i),
            Err(LaunchError::InvalidBootstrapField { .. })
        ));
        let mut i = input(AmiFamily::AL2023);
        i.kubelet.cluster_dns = vec!["$(reboot)".into()];
        assert!(generate_user_data(&i).is_err());
    }

    #[test]
    fn other_families() {
        let mut i = input(AmiFamily::Custom);
        i.user_data = Some("anything".into());
        assert_eq!(generate_user_data(&i).unwrap(), "anything");
        assert!(matches!(
            generate_user_data(&input(AmiFamily::Windows2022)),
            Err(LaunchError::UnsupportedAmiFamily(_))
        ));
    }
}
