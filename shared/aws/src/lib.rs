//! The AWS adapters of Flotilla's ports, over the AWS SDK for Rust:
//!
//! - [`DynamoStore`]: the [`Store`](flotilla_ports::Store) port on one
//!   DynamoDB table (`pk`/`sk` keys, TTL attribute `expiresAt`);
//! - [`EventBridgeBus`]: the [`Bus`](flotilla_ports::Bus) port (PutEvents);
//! - [`Ec2Client`]: the [`Ec2`](flotilla_ports::Ec2) port, with
//!   [`PriceListClient`] (the AWS Price List API, pinned to us-east-1) as
//!   its [`PriceList`](flotilla_ports::PriceList);
//! - [`iam`]: the IAM actions each port call needs through these adapters
//!   (what `infra/template.yaml` grants, checked by `tests/least_privilege.rs`).
//!
//! SDK types stay inside this crate: the ports speak plain data from
//! `flotilla-core`. Every adapter is built from an [`aws_config::SdkConfig`],
//! so `AWS_ENDPOINT_URL` (or [`static_config`]) points them at a local
//! endpoint such as moto.
//!
//! SDK errors are mapped onto [`PortError`](flotilla_ports::PortError) by
//! [`classify`]: failed conditions, throttling (retry later), unavailable
//! (5xx, timeouts, dropped connections: retry with the same idempotency key)
//! and rejected (any other 4xx).

mod dynamo;
mod ec2;
mod error;
mod eventbridge;
pub mod iam;
pub mod pricing;

pub use aws_config::SdkConfig;
pub use dynamo::DynamoStore;
pub use ec2::Ec2Client;
pub use error::{classify, ErrorKind};
pub use eventbridge::EventBridgeBus;
pub use pricing::PriceListClient;

/// The SDK configuration from the environment (region, credentials,
/// `AWS_ENDPOINT_URL`, ...), as the Lambdas and the CLI use it.
pub async fn load_config() -> SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A configuration with static credentials and a fixed endpoint, for a
/// local AWS-compatible endpoint (moto, LocalStack, DynamoDB Local).
pub async fn static_config(
    endpoint_url: &str,
    region: &str,
    access_key_id: &str,
    secret_access_key: &str,
) -> SdkConfig {
    let credentials = aws_sdk_dynamodb::config::Credentials::new(
        access_key_id,
        secret_access_key,
        None,
        None,
        "flotilla-static",
    );
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_string()))
        .credentials_provider(credentials)
        .endpoint_url(endpoint_url)
        .load()
        .await
}
