//! Instructions decoded at a tracer's stops, kept where the code cannot
//! change under the tracer: wholly inside a mapping no one can write. Both
//! software recorders (`retrace record`'s and the stub's) decode the
//! instruction a thread stands at on every stop; code in a writable mapping
//! (JIT) is decoded afresh each time. The owner empties the cache when the
//! mappings change.

use std::collections::HashMap;

use retrace_decoder::x86::{classify, ExecMode, InsnInfo};

use crate::process::Mapping;

/// Whether `start..start + len` lies wholly in one mapping of `maps` that
/// is not writable.
pub fn is_fixed_code(maps: &[Mapping], start: u64, len: u64) -> bool {
    maps.iter().any(|m| m.start <= start && start + len <= m.end && !m.writable)
}

/// Address → the instruction there and its first byte.
#[derive(Debug, Default, Clone)]
pub struct CodeCache {
    decoded: HashMap<u64, (InsnInfo, u8)>,
}

impl CodeCache {
    /// The instruction at `ip`, if kept.
    pub fn get(&self, ip: u64) -> Option<(InsnInfo, u8)> {
        self.decoded.get(&ip).copied()
    }

    /// The instruction at `ip` and its first byte: kept, or decoded from
    /// what `read` puts in a 16-byte buffer (the program's bytes there,
    /// breakpoints hidden; it returns how many it read) and kept when it
    /// is fixed code in the mappings `maps` gives. `read` and `maps` run
    /// only when the instruction is not kept. `None`: not an instruction.
    pub fn decode<'m>(&mut self, ip: u64, read: impl FnOnce(&mut [u8]) -> usize, maps: impl FnOnce() -> &'m [Mapping]) -> Option<(InsnInfo, u8)> {
        if let Some(known) = self.get(ip) {
            return Some(known);
        }
        let mut bytes = [0u8; 16];
        let n = read(&mut bytes).min(bytes.len());
        let insn = classify(&bytes[..n], ip, ExecMode::Bits64)?;
        let decoded = (insn, bytes[0]);
        if is_fixed_code(maps(), ip, u64::from(insn.len)) {
            self.decoded.insert(ip, decoded);
        }
        Some(decoded)
    }

    /// Forgets every instruction (the mappings changed, or may have).
    pub fn clear(&mut self) {
        self.decoded.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, writable: bool) -> Mapping {
        Mapping { start, end, readable: true, writable, executable: true, offset: 0, path: String::new() }
    }

    #[test]
    fn only_instructions_wholly_in_unwritable_mappings_are_kept() {
        let maps = [mapping(0x1000, 0x2000, false), mapping(0x2000, 0x3000, true)];
        let mut cache = CodeCache::default();
        let code = |bytes: &'static [u8]| move |buf: &mut [u8]| {
            buf[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        };
        // nop; in fixed code: kept.
        assert_eq!(cache.decode(0x1800, code(&[0x90]), || &maps).map(|(i, b)| (i.len, b)), Some((1, 0x90)));
        assert!(cache.get(0x1800).is_some());
        // Kept: neither the memory nor the mappings are read again.
        assert!(cache.decode(0x1800, |_| unreachable!("read again"), || unreachable!("maps read again")).is_some());
        // In writable code: decoded, not kept.
        assert!(cache.decode(0x2800, code(&[0x90]), || &maps).is_some());
        assert!(cache.get(0x2800).is_none());
        // A 5-byte call straddling into the writable mapping: not kept.
        assert!(cache.decode(0x1ffe, code(&[0xe8, 0, 0, 0, 0]), || &maps).is_some());
        assert!(cache.get(0x1ffe).is_none());
        // Outside every mapping: not kept.
        assert!(cache.decode(0x9000, code(&[0x90]), || &maps).is_some());
        assert!(cache.get(0x9000).is_none());
        cache.clear();
        assert!(cache.get(0x1800).is_none());
        assert!(cache.decode(0x1800, |_| 0, || &maps).is_none(), "no bytes: no instruction");
    }
}
