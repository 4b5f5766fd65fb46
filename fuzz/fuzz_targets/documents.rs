//! `flotilla plan` on any input file: the loader, the catalog of an
//! `InstanceTypes` document, and the scheduler (on small expansions, so an
//! execution stays fast). A plan or an error, never a panic.
#![no_main]
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};
use flotilla_input::{load, Source};
use libfuzzer_sys::fuzz_target;

/// The embedded catalog, parsed once (parsing dominates a small input).
fn embedded() -> Option<&'static Catalog> {
    static CATALOG: std::sync::OnceLock<Option<Catalog>> = std::sync::OnceLock::new();
    CATALOG
        .get_or_init(|| Catalog::embedded("us-west-2").ok())
        .as_ref()
}

/// Plans larger than this are loaded but not scheduled.
const MAX_SCHEDULED_PODS: usize = 300;

fuzz_target!(|bytes: &[u8]| {
    let Ok(state) = load(&[Source { name: "fuzz.yaml", bytes }]) else {
        return;
    };
    if state.pending_pods.len() > MAX_SCHEDULED_PODS || state.nodes.len() > MAX_SCHEDULED_PODS {
        return;
    }
    let owned;
    let catalog: &Catalog = match &state.instance_types {
        Some(infos) => match Catalog::from_infos("us-west-2", infos.clone()) {
            Ok(c) => {
                owned = c;
                &owned
            }
            Err(_) => return,
        },
        None => match embedded() {
            Some(c) => c,
            None => return,
        },
    };
    let plan = schedule(&state, catalog, &SchedulerOptions::default());
    let _ = serde_json::to_vec(&plan);
});
