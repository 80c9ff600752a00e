#![no_main]

// Shared with the stable replay (replay.rs), which uses the checks this target does not.
#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::pipeline_spec(data));
