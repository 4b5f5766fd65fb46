//! Intake's request body parser (the agent's posts) on any bytes: a
//! request or a 400 naming the field, never a panic.
#![no_main]
use flotilla_service::{intake, Config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let config = Config::default();
    let _ = intake::parse_batch(body, &config);
    let _ = intake::parse_acks(body);
});
