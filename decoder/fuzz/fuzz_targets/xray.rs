//! Fuzzes the XRay log readers (basic and FDR, raw and expanded records,
//! call timelines) and the instrumentation-map parser. The first byte picks
//! a header (mode, version, byte order) so that the fuzzer spends its time
//! in record bodies; the rest is the log body.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::xray::fdr::RawRecords;
use retrace_decoder::xray::instr_map::InstrMap;
use retrace_decoder::xray::timeline::Timeline;
use retrace_decoder::xray::{Log, Mode};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let fdr = selector & 1 == 1;
    let version = if fdr { 1 + u16::from(selector >> 1) % 5 } else { 1 + u16::from(selector >> 1) % 3 };
    let big = selector & 0x80 != 0;
    let mut log = Vec::with_capacity(32 + body.len());
    let (version_bytes, kind_bytes) = if big {
        (version.to_be_bytes(), u16::from(fdr).to_be_bytes())
    } else {
        (version.to_le_bytes(), u16::from(fdr).to_le_bytes())
    };
    log.extend_from_slice(&version_bytes);
    log.extend_from_slice(&kind_bytes);
    log.extend_from_slice(&[3, 0, 0, 0]);
    log.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    log.extend_from_slice(&256u64.to_le_bytes());
    log.extend_from_slice(&[0; 8]);
    log.extend_from_slice(body);
    for bytes in [&log[..], data] {
        let Ok(parsed) = Log::parse(bytes) else { continue };
        let mut last = 0;
        for item in parsed.records() {
            match item {
                Ok(record) => {
                    assert!(record.offset >= last && record.offset < bytes.len());
                    last = record.offset;
                }
                Err(error) => assert!(error.offset <= bytes.len()),
            }
        }
        if parsed.header.mode == Mode::Fdr {
            for item in RawRecords::new(parsed.header, bytes) {
                if let Ok((offset, _)) = item {
                    assert!(offset < bytes.len());
                }
            }
        }
        let _ = Timeline::build(&parsed);
    }
    let _ = InstrMap::parse(data);
});
