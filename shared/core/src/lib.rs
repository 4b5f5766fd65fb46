//! Flotilla's domain core: the Kubernetes scheduling model, the instance-type
//! catalog and the provisioning decisions, as pure synchronous functions over
//! plain data. No AWS SDK, no Lambda runtime, no async.

pub mod allocatable;
pub mod catalog;
pub mod disruption;
pub mod ec2;
pub mod instance_type_names;
pub mod labels;
pub mod launch;
pub mod model;
pub mod plan;
pub mod quantity;
pub mod requirements;
pub mod reservations;
pub mod resources;
pub mod scheduler;
pub mod state;

pub use quantity::Quantity;
pub use requirements::{Operator, Requirement, Requirements};
pub use resources::Resources;
