//! Fuzzes the instruction-flow decoder: the first 256 bytes are code mapped
//! at 0x1000, the rest is the Intel PT stream. Must never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retrace_decoder::flow::FlowDecoder;
use retrace_decoder::image::Image;

fuzz_target!(|data: &[u8]| {
    let split = data.len().min(256);
    let mut image = Image::new();
    image.add_raw("fuzz", 0x1000, data[..split].to_vec());
    let _ = FlowDecoder::new(&data[split..], &image).decode_all();
});
