#![no_main]
//! The mahimahi trace parser: any text is a trace or a TraceError naming a line.

use fencepost_link::Trace;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(trace) = Trace::parse(text) {
            assert!(trace.period_ms() > 0);
            assert_eq!(Trace::parse(&trace.to_text()).as_ref(), Ok(&trace));
        }
    }
});
