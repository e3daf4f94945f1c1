//! Fuzzes the trace-bundle description parser (LLDB's trace.json schema).
#![no_main]

use libfuzzer_sys::fuzz_target;
use retrace_decoder::bundle::TraceBundle;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<TraceBundle>(data);
});
