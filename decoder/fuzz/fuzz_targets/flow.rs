//! Fuzzes the instruction-flow decoder: the first 256 bytes are code mapped
//! at 0x1000, the rest is the Intel PT stream. Must never panic or hang,
//! with and without LLDB's PSB-slice artifact, decoding in one pass or PSB
//! ranges in parallel; the call-tree builder must take whatever comes out.
//! (That the parallel decode equals the one-pass decode is checked on
//! damaged real-code traces by tests/tests/generated_flows.rs; on arbitrary
//! bytes the two can still differ in a few places, so here only that
//! neither panics nor hangs is checked.)
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::calls::{CallEffect, CallForest, Site};
use retrace_decoder::flow::{decode_parallel_with, FlowDecoder, FlowOptions, Item};
use retrace_decoder::image::Image;

fuzz_target!(|data: &[u8]| {
    let split = data.len().min(256);
    let mut image = Image::new();
    image.add_raw("fuzz", 0x1000, data[..split].to_vec());
    let trace = &data[split..];
    for lldb_psb_slices in [false, true] {
        let options = FlowOptions { lldb_psb_slices };
        let items: Vec<Item> = FlowDecoder::new(trace, &image).with_options(options).decode_all();
        let _parallel: Vec<Item> = decode_parallel_with(trace, &image, 3, options).items().collect();
        let forest = CallForest::build(items, |ip| Site {
            scope: ip >> 4,
            entry: ip & 0xf == 0,
            inlined: ip & 0x20 != 0,
            effect: [CallEffect::Call, CallEffect::Return, CallEffect::Other][(ip % 3) as usize],
            tag: 0,
        });
        assert!(forest.roots.iter().all(|&r| r < forest.calls.len()));
    }
});
