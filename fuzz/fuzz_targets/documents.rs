//! `flotilla plan` on any input file: the loader, the catalog of an
//! `InstanceTypes` document, and the scheduler (on small expansions, so an
//! execution stays fast). A plan or an error, never a panic.
#![no_main]
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_input::{load, Source};
use libfuzzer_sys::fuzz_target;

/// Plans larger than this are loaded but not scheduled.
const MAX_SCHEDULED_PODS: usize = 300;

fuzz_target!(|bytes: &[u8]| {
    let Ok(state) = load(&[Source { name: "fuzz.yaml", bytes }]) else {
        return;
    };
    if state.pending_pods.len() > MAX_SCHEDULED_PODS || state.nodes.len() > MAX_SCHEDULED_PODS {
        return;
    }
    let catalog = match &state.instance_types {
        Some(infos) => match Catalog::from_infos("us-west-2", infos.clone()) {
            Ok(c) => c,
            Err(_) => return,
        },
        None => match Catalog::embedded("us-west-2") {
            Ok(c) => c,
            Err(_) => return,
        },
    };
    let plan = schedule(&state, &catalog, &SchedulerOptions::default());
    let _ = serde_json::to_vec(&plan);
});
