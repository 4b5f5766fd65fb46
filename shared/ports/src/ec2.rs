//! The EC2 port: the calls Flotilla makes, with plain-data arguments and
//! answers. Request and response shapes for CreateFleet and launch templates
//! come from `flotilla_core::launch` (built and read there, purely).
//!
//! Filters are EC2's own (`tag:<key>`, `tag-key`, `subnet-id`, `group-id`,
//! `group-name`, `image-id`, `name`, `architecture`, `state`,
//! `instance-state-name`, `capacity-reservation-id`, `owner-id`, ...): the
//! core turns selector terms into them, the AWS adapter passes them through
//! and the simulator implements the ones Flotilla uses.

use std::future::Future;

use flotilla_core::catalog::InstanceTypeInfo;
pub use flotilla_core::ec2::{
    Filter, Image, Instance, InstanceState, SecurityGroup, SpotPrice, Subnet,
};
use flotilla_core::launch::{FleetRequest, FleetResponse, LaunchTemplateConfig};
use flotilla_core::model::CapacityReservation;

use crate::{PortResult, PriceList};

/// EC2, with the on-demand price list its offerings are priced from
/// ([`PriceList`]: a separate AWS service, required here because EC2 has no
/// on-demand price call).
pub trait Ec2: PriceList + Send + Sync {
    /// Every instance type of the region, as the catalog models it.
    fn describe_instance_types(
        &self,
    ) -> impl Future<Output = PortResult<Vec<InstanceTypeInfo>>> + Send;

    /// (instance type, availability zone) pairs offered in the region
    /// (DescribeInstanceTypeOfferings, location type `availability-zone`).
    fn describe_instance_type_offerings(
        &self,
    ) -> impl Future<Output = PortResult<Vec<(String, String)>>> + Send;

    /// The latest Linux/UNIX spot price per (instance type, zone).
    fn describe_spot_prices(&self) -> impl Future<Output = PortResult<Vec<SpotPrice>>> + Send;

    fn describe_subnets(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Subnet>>> + Send;

    fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<SecurityGroup>>> + Send;

    /// `owners` empty means any owner the caller can see.
    fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> impl Future<Output = PortResult<Vec<Image>>> + Send;

    fn describe_capacity_reservations(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<CapacityReservation>>> + Send;

    /// Create the launch template `name` with this content. A template
    /// that already exists under that name is success (names are content
    /// hashes, so same name means same content).
    fn create_launch_template(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> impl Future<Output = PortResult<()>> + Send;

    /// Names of launch templates matching the filters.
    fn describe_launch_templates(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<String>>> + Send;

    /// Deleting a template that does not exist is success.
    fn delete_launch_template(&self, name: &str) -> impl Future<Output = PortResult<()>> + Send;

    /// CreateFleet (type `instant`). Per-override failures come back in
    /// [`FleetResponse::errors`]; only whole-call failures are `Err`.
    fn create_fleet(
        &self,
        request: &FleetRequest,
    ) -> impl Future<Output = PortResult<FleetResponse>> + Send;

    fn describe_instances(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Instance>>> + Send;

    /// Terminating an instance that is already gone is success.
    fn terminate_instances(&self, ids: &[String]) -> impl Future<Output = PortResult<()>> + Send;
}

impl<T: Ec2 + ?Sized> Ec2 for std::sync::Arc<T> {
    fn describe_instance_types(
        &self,
    ) -> impl Future<Output = PortResult<Vec<InstanceTypeInfo>>> + Send {
        (**self).describe_instance_types()
    }
    fn describe_instance_type_offerings(
        &self,
    ) -> impl Future<Output = PortResult<Vec<(String, String)>>> + Send {
        (**self).describe_instance_type_offerings()
    }
    fn describe_spot_prices(&self) -> impl Future<Output = PortResult<Vec<SpotPrice>>> + Send {
        (**self).describe_spot_prices()
    }
    fn describe_subnets(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Subnet>>> + Send {
        (**self).describe_subnets(filters)
    }
    fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<SecurityGroup>>> + Send {
        (**self).describe_security_groups(filters)
    }
    fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> impl Future<Output = PortResult<Vec<Image>>> + Send {
        (**self).describe_images(filters, owners)
    }
    fn describe_capacity_reservations(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<CapacityReservation>>> + Send {
        (**self).describe_capacity_reservations(filters)
    }
    fn create_launch_template(
        &self,
        name: &str,
        config: &LaunchTemplateConfig,
    ) -> impl Future<Output = PortResult<()>> + Send {
        (**self).create_launch_template(name, config)
    }
    fn describe_launch_templates(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<String>>> + Send {
        (**self).describe_launch_templates(filters)
    }
    fn delete_launch_template(&self, name: &str) -> impl Future<Output = PortResult<()>> + Send {
        (**self).delete_launch_template(name)
    }
    fn create_fleet(
        &self,
        request: &FleetRequest,
    ) -> impl Future<Output = PortResult<FleetResponse>> + Send {
        (**self).create_fleet(request)
    }
    fn describe_instances(
        &self,
        filters: &[Filter],
    ) -> impl Future<Output = PortResult<Vec<Instance>>> + Send {
        (**self).describe_instances(filters)
    }
    fn terminate_instances(&self, ids: &[String]) -> impl Future<Output = PortResult<()>> + Send {
        (**self).terminate_instances(ids)
    }
}
