//! The catalog a scheduling run plans against.
//!
//! Order of precedence: an `InstanceTypes` document in the batch (the
//! agent's own `describe-instance-types`), then the live offering cache
//! (when enabled), then the embedded catalog of the region.

use flotilla_core::catalog::Catalog;
use flotilla_core::model::ClusterState;
use flotilla_ports::{Clock, Ec2, Store};

use crate::{Config, Result, ServiceError};

fn catalog_error(e: impl std::fmt::Display) -> ServiceError {
    ServiceError::BadRequest(format!("catalog: {e}"))
}

pub async fn catalog<S: Store, E: Ec2, C: Clock>(
    _store: &S,
    _ec2: &E,
    _clock: &C,
    config: &Config,
    state: &ClusterState,
) -> Result<Catalog> {
    if let Some(infos) = &state.instance_types {
        return Catalog::from_infos(&config.region, infos.clone()).map_err(catalog_error);
    }
    Catalog::embedded(&config.region).map_err(catalog_error)
}
