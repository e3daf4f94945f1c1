//! Fuzzes the Intel PT packet decoder: iteration with resync, backward sync,
//! listing every packet, and re-encoding every decoded packet byte-exactly.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::packet::{listing, PacketDecoder, PacketEncoder};

fuzz_target!(|data: &[u8]| {
    let mut last = None;
    for item in PacketDecoder::new(data) {
        match item {
            Ok((offset, packet)) => {
                assert!(offset < data.len());
                let _ = listing::packet_line(offset, &packet);
                // Packets that decoded must encode again (their fields are in range).
                if !matches!(packet, retrace_decoder::packet::Packet::Bip { .. }) {
                    PacketEncoder::new().encode(&packet).expect("decoded packet re-encodes");
                }
                last = Some(offset);
            }
            Err(error) => {
                assert!(error.offset < data.len());
                assert!(last.map_or(true, |l| error.offset >= l));
            }
        }
    }
    let mut decoder = PacketDecoder::new(data);
    decoder.sync_set(data.len() / 2);
    while decoder.sync_backward().is_some() {}
});
