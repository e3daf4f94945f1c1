//! Block discovery, the walker's cache (as libipt's block decoder keeps
//! one): a straight run of instructions read through the image from a start
//! address up to the first control-flow instruction, classified once and
//! kept in the history's [`BlockTable`]; and, per block, the blocks its
//! branch led to (taken or only target, fall-through), so that a walk along
//! a path seen before looks nothing up.

use crate::history::{AddressMap, BlockTable};
use crate::image::Memory;
use crate::item::FlowError;
use crate::x86::{classify, ExecMode, FlowKind};

/// Longest block discovered in one go.
const MAX_BLOCK: usize = 1024;

/// No successor known yet.
const UNKNOWN: u32 = u32::MAX;

/// Where the blocks found so far start, and where their branches led.
#[derive(Debug, Default)]
pub(super) struct BlockCache {
    /// Blocks by start address, one map per execution mode.
    by_start: [AddressMap<u64, u32>; 3],
    /// Per block id: the successor through the taken (or only) target and
    /// through the fall-through.
    successors: Vec<[u32; 2]>,
    /// Instruction lengths of the block being read.
    lens: Vec<u8>,
}

impl BlockCache {
    /// The block starting at `ip` in execution `mode`, discovering it from
    /// `memory` into `table` if needed. An unknown mode (none given yet, or
    /// a reserved one) decodes nothing, as in libipt.
    pub(super) fn block_at(&mut self, table: &mut BlockTable, ip: u64, mode: Option<ExecMode>, memory: &impl Memory) -> Result<u32, FlowError> {
        let Some(mode) = mode else {
            return Err(FlowError::BadInstruction(ip));
        };
        if let Some(&id) = self.by_start[mode as usize].get(&ip) {
            return Ok(id);
        }
        self.lens.clear();
        let mut at = ip;
        let mut last = None;
        let mut bytes = [0u8; 15];
        for _ in 0..MAX_BLOCK {
            let n = memory.read(at, &mut bytes);
            let insn = match (n, classify(&bytes[..n], at, mode)) {
                (_, Some(insn)) => insn,
                (0, None) if last.is_none() => return Err(FlowError::NoMemory(at)),
                (_, None) if last.is_none() => return Err(FlowError::BadInstruction(at)),
                (_, None) => break, // the block ends before the bad instruction
            };
            self.lens.push(insn.len);
            last = Some(insn);
            if insn.kind != FlowKind::Other {
                break;
            }
            at += insn.len as u64;
        }
        let last = last.expect("at least one instruction");
        let id = table.add(ip, &self.lens, last, mode);
        self.by_start[mode as usize].insert(ip, id);
        Ok(id)
    }

    /// The block at `target` reached from block `from` through successor
    /// slot `slot` (0: taken/only target, 1: fall-through), cached. The
    /// successor is decoded in the mode of `from`.
    #[inline]
    pub(super) fn successor(&mut self, table: &mut BlockTable, from: u32, slot: usize, target: u64, memory: &impl Memory) -> Result<u32, FlowError> {
        if let Some(&cached) = self.successors.get(from as usize).map(|s| &s[slot]) {
            if cached != UNKNOWN {
                return Ok(cached);
            }
        }
        let id = self.block_at(table, target, Some(table.mode(from)), memory)?;
        if self.successors.len() <= from as usize {
            self.successors.resize(table.len().max(from as usize + 1), [UNKNOWN; 2]);
        }
        self.successors[from as usize][slot] = id;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    #[test]
    fn blocks_end_at_control_flow_and_prefixes_share_lengths() {
        let mut image = Image::new();
        // nop; mov %rax,%rbx (3 bytes); nop; jmp .-7
        image.add_raw("code", 0x1000, vec![0x90, 0x48, 0x89, 0xc3, 0x90, 0xeb, 0xf9, 0xcc]);
        let (mut table, mut cache) = (BlockTable::default(), BlockCache::default());
        let id = cache.block_at(&mut table, 0x1000, Some(ExecMode::Bits64), &image).unwrap();
        assert_eq!(table.addresses(id).collect::<Vec<_>>(), [0x1000, 0x1001, 0x1004, 0x1005]);
        assert_eq!(table.get(id).last.kind, FlowKind::Jump { target: 0x1000 });
        assert_eq!(cache.block_at(&mut table, 0x1000, Some(ExecMode::Bits64), &image).unwrap(), id); // cached
        assert_eq!(table.index_of(id, 0x1004), Some(2));
        assert_eq!(table.index_of(id, 0x1002), None); // not an instruction boundary
        let prefix = table.prefix(id, 2);
        assert_eq!(table.addresses(prefix).collect::<Vec<_>>(), [0x1000, 0x1001]);
        assert_eq!(table.prefix(id, 2), prefix);
        assert_eq!(cache.block_at(&mut table, 0x3000, Some(ExecMode::Bits64), &image), Err(FlowError::NoMemory(0x3000)));
    }

}
