//! One thread's trace kept as the hardware keeps it for a debugger: a ring
//! of a fixed size (LLDB's `iptTraceSize`) that always holds the newest
//! data. The software backend writes the flow into a [`ThreadPtWriter`];
//! what falls out of the ring is dropped as it goes, a whole PSB slice at
//! a time, so memory stays near the ring's size however long the program
//! runs.
//!
//! Read out ([`TraceRing::contents`]), the ring is exactly its size, oldest
//! byte first, and starts with zeros (PAD packets) up to the oldest PSB it
//! still holds, so a decoder syncs there and sees no torn packet — what a
//! read-only (snapshot mode) AUX buffer gives after libipt's sync.

use retrace_decoder::x86::InsnInfo;

use crate::pt_writer::ThreadPtWriter;

/// The smallest ring, as the kernel's AUX buffer (one page) and LLDB's
/// `iptTraceSize` rule allow.
pub const MIN_RING_SIZE: usize = 4096;

/// A thread's trace ring.
#[derive(Debug, Clone)]
pub struct TraceRing {
    writer: ThreadPtWriter,
    size: usize,
    /// Written bytes beyond which the oldest are dropped.
    trim_at: usize,
}

impl TraceRing {
    /// A ring of `size` bytes (a power of two, at least [`MIN_RING_SIZE`])
    /// with a PSB every `psb_period` bytes or so. A ring that may hold no
    /// PSB is no use to a decoder: the period is capped at a quarter of the
    /// ring, so the newest bytes always begin with a sync point.
    pub fn new(size: usize, psb_period: usize) -> Self {
        let size = size.max(MIN_RING_SIZE);
        let period = psb_period.clamp(64, size / 4);
        TraceRing { writer: ThreadPtWriter::new(period), size, trim_at: 2 * size + 4 * period }
    }

    /// The same ring with no TSC packets in its trace.
    pub fn without_timestamps(mut self) -> Self {
        self.writer = self.writer.without_timestamps();
        self
    }

    /// The ring's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Instructions recorded since the ring was made (including those
    /// dropped from it).
    pub fn instructions(&self) -> u64 {
        self.writer.instructions()
    }

    /// The instruction at `ip` executed and control went on at `next_ip`
    /// (see [`ThreadPtWriter::executed`]); `tsc` is the time.
    pub fn executed(&mut self, ip: u64, insn: &InsnInfo, next_ip: Option<u64>, tsc: u64) {
        self.writer.executed(ip, insn, next_ip, tsc);
        if self.writer.len() >= self.trim_at {
            self.writer.discard_older_than(self.size);
        }
    }

    /// The thread stopped (or its flow cannot be followed) before the
    /// instruction at `ip`: FUP + TIP.PGD, which decoders show as tracing
    /// disabled by software, as a kernel's trace shows every stop of a
    /// debugged thread. The next [`Self::executed`] enables it again.
    pub fn stopped(&mut self, ip: u64) {
        self.writer.disable_async(ip);
    }

    /// The ring's bytes: exactly [`Self::size`] of them, zeros first, then
    /// the newest data from the oldest PSB that fits.
    pub fn contents(&self) -> Vec<u8> {
        let bytes = self.writer.snapshot();
        let mut out = vec![0u8; self.size];
        let from = self.writer.psb_offsets().iter().copied().find(|&at| bytes.len() - at <= self.size);
        if let Some(from) = from {
            let kept = &bytes[from..];
            out[self.size - kept.len()..].copy_from_slice(kept);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrace_decoder::x86::{classify, ExecMode};

    /// A loop body: `dec ecx` (Other), `jnz` back (a conditional branch).
    fn run(ring: &mut TraceRing, iterations: u64) {
        let dec = classify(&[0xff, 0xc9], 0x1000, ExecMode::Bits64).unwrap();
        let jnz = classify(&[0x75, 0xfc], 0x1002, ExecMode::Bits64).unwrap();
        for i in 0..iterations {
            ring.executed(0x1000, &dec, Some(0x1002), i);
            let next = if i + 1 == iterations { 0x1004 } else { 0x1000 };
            ring.executed(0x1002, &jnz, Some(next), i);
        }
    }

    fn is_psb(bytes: &[u8]) -> bool {
        bytes.len() >= 16 && bytes[..16].chunks(2).all(|pair| pair == [0x02, 0x82])
    }

    #[test]
    fn a_short_trace_is_padded_in_front_and_starts_at_its_psb() {
        let mut ring = TraceRing::new(4096, 4096);
        run(&mut ring, 10);
        ring.stopped(0x1004);
        let contents = ring.contents();
        assert_eq!(contents.len(), 4096);
        let start = contents.iter().position(|&b| b != 0).unwrap();
        assert!(is_psb(&contents[start..]), "{:02x?}", &contents[start..]);
        // FUP(0x1004) + TIP.PGD (suppressed) end it.
        assert_eq!(contents[4096 - 1], 0x01);
    }

    #[test]
    fn a_long_trace_keeps_the_newest_bytes_from_a_psb_in_bounded_memory() {
        let mut ring = TraceRing::new(4096, 4096);
        let mut whole = ThreadPtWriter::new(1024);
        let dec = classify(&[0xff, 0xc9], 0x1000, ExecMode::Bits64).unwrap();
        let jnz = classify(&[0x75, 0xfc], 0x1002, ExecMode::Bits64).unwrap();
        for i in 0..200_000u64 {
            let next = if i % 7 == 6 { 0x1004 } else { 0x1000 };
            for (ip, insn, next) in [(0x1000, &dec, 0x1002), (0x1002, &jnz, next)] {
                ring.executed(ip, insn, Some(next), i);
                whole.executed(ip, insn, Some(next), i);
            }
            assert!(ring.writer.len() < 3 * 4096 + 4096, "the ring grew to {}", ring.writer.len());
        }
        ring.stopped(0x1000);
        whole.disable_async(0x1000);
        let contents = ring.contents();
        let whole = whole.into_bytes();
        let start = contents.iter().position(|&b| b != 0).unwrap();
        assert!(is_psb(&contents[start..]));
        assert!(whole.len() > 4 * 4096, "{} bytes", whole.len());
        // The same writer rules (period capped at 1024): the ring's data is
        // the whole stream's end.
        assert!(whole.ends_with(&contents[start..]), "the ring is a suffix of the stream");
        assert!(4096 - start > 4096 - 2 * 1024 - 64, "a PSB within the last two periods: {start}");
    }
}
