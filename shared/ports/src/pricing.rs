//! The price-list port: on-demand prices of a region from the AWS Price
//! List API (`GetProducts`, service code `AmazonEC2`).
//!
//! EC2 itself has no on-demand price call, so the [`Ec2`](crate::Ec2) port
//! requires this one: a stage that reads EC2's offerings can price them.
//! The Price List API is a separate service served from us-east-1 (and
//! ap-south-1, eu-central-1) whatever the cluster's region; the adapter
//! pins its client there. The service caches the answer in the table and
//! falls back to the embedded table when the call fails.

use std::collections::BTreeMap;
use std::future::Future;

use crate::PortResult;

pub trait PriceList: Send + Sync {
    /// The on-demand Linux, shared-tenancy, no-pre-installed-software
    /// prices of `region`: instance type → USD per hour. Products the
    /// adapter cannot read are left out (and logged), not an error.
    fn on_demand_prices(
        &self,
        region: &str,
    ) -> impl Future<Output = PortResult<BTreeMap<String, f64>>> + Send;
}

impl<T: PriceList + ?Sized> PriceList for std::sync::Arc<T> {
    fn on_demand_prices(
        &self,
        region: &str,
    ) -> impl Future<Output = PortResult<BTreeMap<String, f64>>> + Send {
        (**self).on_demand_prices(region)
    }
}
