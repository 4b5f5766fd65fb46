//! `flotilla-agent`: see the crate documentation.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use flotilla_agent::config::{Args, ClusterMeta};
use flotilla_agent::intake::IntakeClient;
use flotilla_agent::metrics::{self, Metrics};
use flotilla_agent::run::{self, Agent};
use tokio::sync::watch;

/// `1.33` from the API server's version (EKS reports minors like `33+`).
fn version_of(info: &k8s_openapi::apimachinery::pkg::version::Info) -> anyhow::Result<String> {
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    let (major, minor) = (digits(&info.major), digits(&info.minor));
    if major.is_empty() || minor.is_empty() {
        anyhow::bail!(
            "API server version {:?}.{:?}: set FLOTILLA_KUBERNETES_VERSION",
            info.major,
            info.minor
        );
    }
    Ok(format!("{major}.{minor}"))
}

async fn shutdown_signal(tx: watch::Sender<bool>) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
    tracing::info!("signal received; shutting down");
    tx.send_replace(true);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    flotilla_agent::install_crypto_provider();
    let args = Args::parse();
    args.validate()?;
    let settings = args.settings()?;

    let config = kube::Config::infer()
        .await
        .context("Kubernetes client config (in-cluster service account or KUBECONFIG)")?;
    let client = flotilla_agent::kube_client(config).context("Kubernetes client")?;
    let kubernetes_version = match &args.kubernetes_version {
        Some(v) => v.clone(),
        None => version_of(
            &client
                .apiserver_version()
                .await
                .context("reading the API server version")?,
        )?,
    };
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(args.region.clone()))
        .load()
        .await;
    let credentials = sdk
        .credentials_provider()
        .context("no AWS credentials provider (IRSA or EKS Pod Identity)")?;
    let intake = IntakeClient::new(
        &args.intake_url,
        &args.region,
        credentials,
        settings.retry.clone(),
    )?;

    let metrics = Arc::new(Metrics::new());
    let (addr, _server) = metrics::spawn_server(args.metrics_addr, metrics.clone())
        .await
        .with_context(|| format!("binding {}", args.metrics_addr))?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");

    let identity = args.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("flotilla-agent-{}", std::process::id()))
    });
    let (tx, rx) = watch::channel(false);
    tokio::spawn(shutdown_signal(tx));
    run::run(
        Agent {
            cluster_id: args.cluster_id.clone(),
            cluster: ClusterMeta {
                name: args.cluster_name.clone(),
                endpoint: args.cluster_endpoint.clone(),
                ca_bundle: args.cluster_ca_bundle.clone(),
                service_cidr: args.service_cidr.clone(),
                kubernetes_version,
            },
            settings,
            client,
            intake,
            metrics,
            identity,
            lease_namespace: args.namespace.clone(),
            lease_name: args.lease_name.clone(),
        },
        rx,
    )
    .await
}
