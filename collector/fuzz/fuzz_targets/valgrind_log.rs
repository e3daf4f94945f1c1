//! Fuzzes the reading of retrace's Valgrind tool log: the input (after the
//! magic, which is prepended) converted whole and read piece by piece as
//! from the tool's connection. Must never panic; both give the same
//! threads, traces and warnings.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_collector::valgrind::{convert_log, convert_stream, LogConverter, LOG_MAGIC};

struct Pieces<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(out.len()).min(self.bytes.len());
        out[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else { return };
    let mut log = LOG_MAGIC.to_vec();
    log.extend_from_slice(rest);
    let whole = convert_log(&log, 256, true, None);
    let (_, streamed) = convert_stream(&mut Pieces { bytes: &log, step: step as usize + 1 }, LogConverter::new(256, true), |_| true).unwrap();
    assert_eq!(whole.image.threads.len(), streamed.image.threads.len());
    for (a, b) in whole.image.threads.iter().zip(&streamed.image.threads) {
        assert_eq!(a.trace, b.trace);
        assert_eq!(a.instruction_log, b.instruction_log);
    }
    assert_eq!(whole.warnings.len(), streamed.warnings.len());
});
