#![no_main]
//! Scenario files (TOML): any text gives a topology or an error naming where, never a panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = fencepost_spec::topology_from_text(text, "fuzz", None);
    }
});
