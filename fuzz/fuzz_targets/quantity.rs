//! The quantity parser on any string: a value or an error, never a panic;
//! a value re-parses from its canonical form to itself.
#![no_main]
use flotilla_core::quantity::Quantity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    if let Ok(q) = Quantity::parse(s) {
        assert_eq!(Quantity::parse(&q.to_string()), Ok(q), "{s:?}");
    }
});
