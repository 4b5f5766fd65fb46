//! The SAM template as SAM and CloudFormation will read it.
//!
//! - **Build resolution.** SAM's `rust-cargolambda` builder runs
//!   `cargo lambda build --release --arm64 --bin <Binary>` with the working
//!   directory at the function's `CodeUri`. Cargo picks the packages the
//!   way it does for any command: the package whose manifest is the nearest
//!   `Cargo.toml` at or above that directory, or, when that manifest is a
//!   virtual workspace root, the workspace's default members. A `--bin` that
//!   none of them defines fails the whole `sam build` (`no bin target named
//!   'intake' in default-run packages`). [`resolve_bin`] repeats that
//!   selection over `cargo metadata` run in the `CodeUri` directory, so a
//!   template or workspace change that would break `sam build` fails here in
//!   seconds instead of after a 15-minute arm64 build (`cargo xtask
//!   sam-build` runs the real thing).
//! - **Joining and calling.** The node role is mapped into the cluster (an
//!   EKS access entry of type `EC2_LINUX`), the agent gets both Function URL
//!   permissions, and every environment variable the stack sets is one the
//!   code reads (and the reverse).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use flotilla_tests::{repo_root as root, sam_template as template, yaml_get as get};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

fn at<'a>(v: &'a Yaml, path: &[&str]) -> Option<&'a Yaml> {
    path.iter().try_fold(v, |v, k| get(v, k))
}

/// `!Ref X` as `Ref:X`, `!GetAtt X.Y` as `GetAtt:X.Y`, plain scalars as text.
fn text(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Tagged(t) => {
            let tag = t.tag.to_string();
            format!("{}:{}", tag.trim_start_matches('!'), text(&t.value))
        }
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// The resources of `kind`, by logical id.
fn resources<'a>(t: &'a Yaml, kind: &str) -> Vec<(String, &'a Yaml)> {
    let Some(Yaml::Mapping(m)) = get(t, "Resources") else {
        panic!("template without Resources");
    };
    m.iter()
        .filter(|(_, r)| get(r, "Type").and_then(Yaml::as_str) == Some(kind))
        .map(|(id, r)| (text(id), r))
        .collect()
}

/// What cargo would build for `cargo build --bin <bin>` run in `dir`: the
/// package it selects, or the error cargo would give.
fn resolve_bin(metadata: &Value, dir: &Path, bin: &str) -> Result<String, String> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let manifest_of = |p: &Value| PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
    let by_id = |id: &Value| packages.iter().find(|p| p["id"] == *id);
    let nearest = dir
        .ancestors()
        .map(|d| d.join("Cargo.toml"))
        .find(|m| m.exists())
        .ok_or_else(|| format!("no Cargo.toml at or above {}", dir.display()))?;
    let nearest = nearest.canonicalize().map_err(|e| e.to_string())?;
    let selected: Vec<&Value> = match packages.iter().find(|p| manifest_of(p) == nearest) {
        Some(p) => vec![p],
        // A virtual manifest: the default members (all members when unset).
        None => metadata["workspace_default_members"]
            .as_array()
            .or(metadata["workspace_members"].as_array())
            .into_iter()
            .flatten()
            .filter_map(by_id)
            .collect(),
    };
    let defines = |p: &&Value| {
        p["targets"].as_array().into_iter().flatten().any(|t| {
            t["name"] == bin
                && t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
    };
    selected
        .iter()
        .copied()
        .find(defines)
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .ok_or_else(|| {
            let names: Vec<&str> = selected.iter().filter_map(|p| p["name"].as_str()).collect();
            format!("no bin target named '{bin}' in default-run packages {names:?}")
        })
}

fn cargo_metadata(dir: &Path) -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(dir)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON")
}

/// (logical id, CodeUri directory, Binary) of every function SAM builds
/// with cargo-lambda.
fn cargo_lambda_functions(t: &Yaml) -> Vec<(String, PathBuf, String)> {
    resources(t, "AWS::Serverless::Function")
        .into_iter()
        .map(|(id, f)| {
            let method = at(f, &["Metadata", "BuildMethod"]).map(text);
            assert_eq!(
                method.as_deref(),
                Some("rust-cargolambda"),
                "{id}: BuildMethod"
            );
            let bin = at(f, &["Metadata", "BuildProperties", "Binary"])
                .map(text)
                .unwrap_or_else(|| panic!("{id}: Metadata.BuildProperties.Binary"));
            let uri = at(f, &["Properties", "CodeUri"])
                .map(text)
                .unwrap_or_else(|| panic!("{id}: CodeUri"));
            (id, root().join("infra").join(uri), bin)
        })
        .collect()
}

#[test]
fn every_function_binary_resolves_from_its_code_uri_as_sam_builds_it() {
    let t = template();
    let functions = cargo_lambda_functions(&t);
    let bins: BTreeSet<&str> = functions.iter().map(|(_, _, b)| b.as_str()).collect();
    assert_eq!(
        bins,
        BTreeSet::from(["disrupt", "intake", "launch", "schedule", "sweep"]),
        "the five stages, each built once"
    );
    for (id, dir, bin) in &functions {
        assert!(
            dir.is_dir(),
            "{id}: CodeUri {} is not a directory",
            dir.display()
        );
        let resolved = resolve_bin(&cargo_metadata(dir), dir, bin);
        assert!(
            resolved.is_ok(),
            "{id}: `cargo lambda build --bin {bin}` in CodeUri {}: {}",
            dir.display(),
            resolved.unwrap_err()
        );
    }
    // What SAM runs them as: the bootstrap handler of provided.al2023 on arm64.
    let globals = at(&t, &["Globals", "Function"]).expect("Globals.Function");
    assert_eq!(
        get(globals, "Runtime").map(text).as_deref(),
        Some("provided.al2023")
    );
    assert_eq!(
        get(globals, "Handler").map(text).as_deref(),
        Some("bootstrap")
    );
    let arch = get(globals, "Architectures").and_then(Yaml::as_sequence);
    assert_eq!(
        arch.map(|a| a.iter().map(text).collect::<Vec<_>>()),
        Some(vec!["arm64".into()])
    );
}

/// The check itself catches the break the README's `sam build` once hit:
/// from the workspace root, whose default member is the CLI, no function
/// binary resolves; from the crate's own directory it does.
#[test]
fn resolution_refuses_a_bin_the_default_members_do_not_define() {
    let ws = root();
    let metadata = cargo_metadata(&ws);
    let err = resolve_bin(&metadata, &ws, "intake").unwrap_err();
    assert!(err.contains("no bin target named 'intake'"), "{err}");
    let intake = ws.join("functions").join("intake");
    assert_eq!(
        resolve_bin(&metadata, &intake, "intake").as_deref(),
        Ok("flotilla-fn-intake")
    );
    assert!(resolve_bin(&metadata, &intake, "sweep").is_err());
    // The CLI stays the root's default: `cargo run --release -- demo` runs it.
    assert_eq!(
        resolve_bin(&metadata, &ws, "flotilla").as_deref(),
        Ok("flotilla-cli")
    );
}

#[test]
fn the_node_role_is_mapped_into_the_cluster() {
    let t = template();
    let entries = resources(&t, "AWS::EKS::AccessEntry");
    assert_eq!(entries.len(), 1, "one access entry, for the node role");
    let (id, entry) = &entries[0];
    let p = get(entry, "Properties").expect("Properties");
    assert_eq!(
        get(p, "Type").map(text).as_deref(),
        Some("EC2_LINUX"),
        "{id}"
    );
    assert_eq!(
        get(p, "ClusterName").map(text).as_deref(),
        Some("Ref:ClusterName"),
        "{id}"
    );
    let principal = get(p, "PrincipalArn").map(text).unwrap_or_default();
    assert!(
        principal.contains("NodeRole.Arn") && principal.contains("NodeRoleArn"),
        "{id}: the node role the stack creates, else the one given: {principal}"
    );
    // Always for a role the stack creates; on request for a supplied one.
    let condition = get(entry, "Condition").map(text).expect("Condition");
    let cond = at(&t, &["Conditions", &condition])
        .map(text)
        .unwrap_or_default();
    assert!(
        cond.contains("CreateNodeRole") && cond.contains("NodeAccessEntry"),
        "{condition}: {cond}"
    );
}

#[test]
fn the_agent_gets_both_function_url_permissions() {
    let t = template();
    let mut actions = BTreeSet::new();
    for (id, perm) in resources(&t, "AWS::Lambda::Permission") {
        let p = get(perm, "Properties").expect("Properties");
        if get(p, "Principal").map(text).as_deref() != Some("Ref:AgentPrincipalArn") {
            continue;
        }
        assert_eq!(
            get(p, "FunctionName").map(text).as_deref(),
            Some("Ref:Intake"),
            "{id}"
        );
        let action = get(p, "Action").map(text).unwrap_or_default();
        match action.as_str() {
            "lambda:InvokeFunctionUrl" => assert_eq!(
                get(p, "FunctionUrlAuthType").map(text).as_deref(),
                Some("AWS_IAM"),
                "{id}"
            ),
            "lambda:InvokeFunction" => assert_eq!(
                get(p, "InvokedViaFunctionUrl").map(text).as_deref(),
                Some("true"),
                "{id}: only through the URL"
            ),
            other => panic!("{id}: unexpected {other}"),
        }
        actions.insert(action);
    }
    let both = BTreeSet::from([
        "lambda:InvokeFunction".to_string(),
        "lambda:InvokeFunctionUrl".into(),
    ]);
    assert_eq!(actions, both, "the template's grants to AgentPrincipalArn");

    let policy: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("infra/agent/iam-policy.json"))
            .expect("iam-policy.json"),
    )
    .expect("iam-policy.json is JSON");
    let granted: BTreeSet<String> = policy["Statement"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["Effect"] == "Allow")
        .filter_map(|s| s["Action"].as_str().map(str::to_string))
        .collect();
    assert_eq!(granted, both, "infra/agent/iam-policy.json");
}

/// Every variable the template sets in the functions' environment is read by
/// the code (and every `FLOTILLA_*` the code reads is set), so a parameter
/// such as `ClusterName` cannot silently stop reaching the functions.
#[test]
fn the_environment_the_stack_sets_is_the_one_the_code_reads() {
    let t = template();
    let mut set = BTreeSet::new();
    let mut envs = vec![at(&t, &["Globals", "Function", "Environment", "Variables"])];
    for (_, f) in resources(&t, "AWS::Serverless::Function") {
        envs.push(at(f, &["Properties", "Environment", "Variables"]));
    }
    for vars in envs.into_iter().flatten() {
        if let Yaml::Mapping(m) = vars {
            set.extend(m.keys().map(text));
        }
    }
    let globals = at(&t, &["Globals", "Function", "Environment", "Variables"]).expect("env");
    assert_eq!(
        get(globals, "FLOTILLA_CLUSTER_NAME").map(text).as_deref(),
        Some("Ref:ClusterName")
    );
    assert_eq!(
        get(globals, "FLOTILLA_STACK_ID").map(text).as_deref(),
        Some("Ref:AWS::StackId")
    );

    let mut code = String::new();
    for dir in ["functions", "shared/service/src", "shared/aws/src"] {
        collect_rust(&root().join(dir), &mut code);
    }
    let read: BTreeSet<String> = code
        .match_indices('"')
        .filter_map(|(i, _)| {
            let rest = &code[i + 1..];
            let end = rest.find('"')?;
            let word = &rest[..end];
            let env_like = word.starts_with("FLOTILLA_")
                && word.chars().all(|c| c.is_ascii_uppercase() || c == '_');
            env_like.then(|| word.to_string())
        })
        .collect();
    for var in &set {
        if var == "RUST_LOG" {
            continue; // tracing-subscriber's filter
        }
        assert!(
            code.contains(&format!("\"{var}\"")),
            "the template sets {var} but no function code reads it"
        );
    }
    for var in &read {
        assert!(
            set.contains(var),
            "the code reads {var} but the template never sets it"
        );
    }
}

fn collect_rust(dir: &Path, out: &mut String) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "tests") {
            collect_rust(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let src = std::fs::read_to_string(&p).unwrap_or_default();
            // Production code only: test modules may set anything.
            out.push_str(src.split("#[cfg(test)]").next().unwrap_or_default());
        }
    }
}
