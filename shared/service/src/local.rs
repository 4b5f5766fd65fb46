//! Routing Flotilla's own events to their stage in process: what
//! EventBridge and the Lambdas do in AWS, for `flotilla simulate` and the
//! tests.

use flotilla_ports::events::FlotillaEvent;
use flotilla_ports::{Bus, Clock, Ec2, Event, Store};

use crate::schedule::ScheduleOutcome;
use crate::{launch, schedule, Ports, Result, ServiceError};

/// Deliver one event to its stage. A batching-window wait calls
/// `wait(ms)` (advance a manual clock, or sleep) and asks again.
pub async fn dispatch<S: Store, E: Ec2, B: Bus, C: Clock>(
    p: &Ports<S, E, B, C>,
    event: &Event,
    wait: &(dyn Fn(i64) + Sync),
) -> Result<()> {
    let detail: serde_json::Value = serde_json::from_str(&event.detail)
        .map_err(|e| ServiceError::BadRequest(format!("{}: {e}", event.detail_type)))?;
    let parsed =
        FlotillaEvent::from_parts(&event.detail_type, &detail).map_err(ServiceError::BadRequest)?;
    match parsed {
        FlotillaEvent::BatchAccepted(ev) => loop {
            match schedule::on_batch_accepted(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &ev)
                .await?
            {
                ScheduleOutcome::Wait { retry_after_ms } => wait(retry_after_ms),
                _ => return Ok(()),
            }
        },
        FlotillaEvent::NodeClaimsPlanned(ev) => {
            launch::on_node_claims_planned(&p.store, &p.ec2, &p.bus, &p.clock, &p.config, &ev)
                .await
                .map(|_| ())
        }
        FlotillaEvent::PodsUnschedulable(ev) => {
            schedule::on_pods_unschedulable(&p.store, &p.bus, &p.clock, &p.config, &ev)
                .await
                .map(|_| ())
        }
    }
}
