//! The compact history of one thread: what executed, stored as a sequence of
//! basic-block ids (4 bytes per executed block, not per instruction), plus
//! the events and errors between them.
//!
//! Blocks live in a [`BlockTable`]: a straight run of instructions ending at
//! the first control-flow instruction, as the flow decoder found them in the
//! code (`flow::blocks` reads the code; the table only keeps what it found).
//! Item ids follow LLDB's trace items: instructions, events and errors are
//! numbered together from 0.

use std::collections::HashMap;

use crate::item::{Event, FlowError, Item};
use crate::x86::{ExecMode, FlowKind, InsnInfo};

/// A straight run of instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Address of the first instruction.
    pub start: u64,
    /// Address of the last instruction.
    pub last_ip: u64,
    /// Number of instructions.
    pub count: u32,
    /// Index of the first instruction's length in the table's length array.
    lens: u32,
    /// The last instruction (its kind decides where control goes next).
    pub last: InsnInfo,
}

/// A fast hasher for code addresses (multiplicative; addresses are not
/// attacker-chosen keys that need SipHash's protection).
#[derive(Default, Clone, Copy)]
pub struct AddressHasher(u64);

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7cc1_b727_220a_95);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7cc1_b727_220a_95);
    }
    fn write_u32(&mut self, value: u32) {
        self.write_u64(value as u64);
    }
}

/// A map keyed by code addresses.
pub(crate) type AddressMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<AddressHasher>>;

/// Discovered blocks and the instruction lengths they use.
#[derive(Debug, Clone, Default)]
pub struct BlockTable {
    blocks: Vec<Block>,
    lens: Vec<u8>,
    /// The execution mode each block was decoded in (kept apart from
    /// [`Block`], which the hot path copies).
    modes: Vec<ExecMode>,
    /// Blocks made of the first instructions of another block.
    partials: AddressMap<(u64, u32, ExecMode), u32>,
}

impl BlockTable {
    /// The block with this id.
    pub fn get(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }

    /// Number of distinct blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when no block was discovered.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Bytes used by the table.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
            + self.modes.capacity()
            + self.lens.capacity()
            + self.partials.capacity() * 24
    }

    /// The addresses of a block's instructions.
    pub fn addresses(&self, id: u32) -> impl Iterator<Item = u64> + '_ {
        let block = self.get(id);
        let lens = &self.lens[block.lens as usize..block.lens as usize + block.count as usize];
        lens.iter().scan(block.start, |ip, len| {
            let this = *ip;
            *ip += *len as u64;
            Some(this)
        })
    }

    /// The index of the instruction at `ip` within the block, if one starts there.
    pub fn index_of(&self, id: u32, ip: u64) -> Option<u32> {
        let block = self.get(id);
        if ip < block.start || ip > block.last_ip {
            return None;
        }
        self.addresses(id).position(|a| a == ip).map(|i| i as u32)
    }

    /// The execution mode block `id` was decoded in.
    pub fn mode(&self, id: u32) -> ExecMode {
        self.modes[id as usize]
    }

    /// Adds the block of instructions of these lengths at `start`, the last
    /// one being `last`, decoded in `mode`.
    pub(crate) fn add(&mut self, start: u64, lens: &[u8], last: InsnInfo, mode: ExecMode) -> u32 {
        let first = self.lens.len() as u32;
        let last_ip = start + lens[..lens.len() - 1].iter().map(|&l| l as u64).sum::<u64>();
        self.lens.extend_from_slice(lens);
        let id = self.blocks.len() as u32;
        self.blocks.push(Block { start, last_ip, count: lens.len() as u32, lens: first, last });
        self.modes.push(mode);
        id
    }

    /// The first `count` instructions of block `id`, as a block of their own.
    pub fn prefix(&mut self, id: u32, count: u32) -> u32 {
        let block = *self.get(id);
        if count == block.count {
            return id;
        }
        let mode = self.modes[id as usize];
        if let Some(&prefix) = self.partials.get(&(block.start, count, mode)) {
            return prefix;
        }
        let addresses: Vec<u64> = self.addresses(id).take(count as usize).collect();
        let last_ip = *addresses.last().expect("a non-empty prefix");
        let len = self.lens[block.lens as usize + count as usize - 1];
        let prefix = self.blocks.len() as u32;
        self.blocks.push(Block {
            start: block.start,
            last_ip,
            count,
            lens: block.lens,
            last: InsnInfo { len, kind: FlowKind::Other },
        });
        self.modes.push(mode);
        self.partials.insert((block.start, count, mode), prefix);
        prefix
    }
}

/// An event or error between blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extra {
    /// An event.
    Event(Event),
    /// A decode error at a trace offset.
    Error {
        /// Byte offset in the trace.
        offset: usize,
        /// What went wrong.
        error: FlowError,
    },
}

/// Executed blocks between two instruction-count checkpoints.
const CHECKPOINT_EVERY: usize = 64;

/// One thread's decoded execution.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The blocks the history refers to.
    pub table: BlockTable,
    executed: Vec<u32>,
    /// (number of executed blocks before it, the extra)
    extras: Vec<(u32, Extra)>,
    instructions: u64,
    /// Instructions before executed block `i * CHECKPOINT_EVERY`.
    checkpoints: Vec<u64>,
    /// What joining this history after another needs to know about time.
    pub(crate) timing: Timing,
    /// Decoded as a segment, it ended at the next segment's PSB.
    pub(crate) stopped_at_segment_end: bool,
}

/// The time as a decoder of part of a trace left it (see
/// [`History::append`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The index in `extras` of the first event reported before any TSC
    /// was read.
    pub first_timeless_event: Option<usize>,
    /// The last TSC read.
    pub read: Option<u64>,
    /// The last TSC reported (as a clock tick).
    pub notified: Option<u64>,
}

/// A position in a [`History`]: one executed instruction, movable forwards
/// and backwards (what reverse stepping walks).
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'h> {
    history: &'h History,
    block: usize,
    within: u32,
    index: u64,
}

impl<'h> Cursor<'h> {
    /// The instruction's number (0-based, instructions only).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The instruction's address.
    pub fn ip(&self) -> u64 {
        let id = self.history.executed[self.block];
        self.history.table.addresses(id).nth(self.within as usize).expect("cursor inside its block")
    }

    /// Moves to the next instruction; `false` at the end (the cursor stays).
    pub fn next(&mut self) -> bool {
        let count = self.history.table.get(self.history.executed[self.block]).count;
        if self.within + 1 < count {
            self.within += 1;
        } else if self.block + 1 < self.history.executed.len() {
            self.block += 1;
            self.within = 0;
        } else {
            return false;
        }
        self.index += 1;
        true
    }

    /// Moves to the previous instruction; `false` at the beginning.
    pub fn prev(&mut self) -> bool {
        if self.within > 0 {
            self.within -= 1;
        } else if self.block > 0 {
            self.block -= 1;
            self.within = self.history.table.get(self.history.executed[self.block]).count - 1;
        } else {
            return false;
        }
        self.index -= 1;
        true
    }

    /// The LLDB item id of this instruction (events and errors before it count).
    pub fn item_id(&self) -> u64 {
        let extras_before = self.history.extras.partition_point(|(at, _)| (*at as usize) <= self.block);
        self.index + extras_before as u64
    }
}

impl History {
    /// Records an executed block.
    #[inline]
    pub fn push_block(&mut self, id: u32) {
        self.instructions += self.table.get(id).count as u64;
        self.executed.push(id);
    }

    /// Takes back the last instruction pushed (its branch could not be
    /// decoded from the trace, so LLDB does not list it either).
    pub(crate) fn drop_last_instruction(&mut self) {
        if let Some(id) = self.executed.pop() {
            let count = self.table.get(id).count;
            self.instructions -= count as u64;
            if count > 1 {
                let prefix = self.table.prefix(id, count - 1);
                self.push_block(prefix);
            }
        }
    }

    /// Appends the history of the next segment of the same trace. A clock
    /// tick that repeats the last TSC seen is dropped (a continuous decoder
    /// would not have reported it).
    pub fn append(&mut self, mut next: History) {
        let offset = self.table.blocks.len() as u32;
        let lens_offset = self.table.lens.len() as u32;
        for mut block in next.table.blocks.drain(..) {
            block.lens += lens_offset;
            self.table.blocks.push(block);
        }
        self.table.lens.extend_from_slice(&next.table.lens);
        self.table.modes.extend_from_slice(&next.table.modes);
        let base = self.executed.len() as u32;
        // Time carries across segments. `next` was decoded without knowing
        // the time this history ends with: where it first reported an event
        // before reading any TSC, one decoder would have reported the time
        // read here if it was not reported yet; and its first clock tick is
        // no tick if that time was already reported.
        let unreported = self.timing.read.filter(|&tsc| Some(tsc) != self.timing.notified);
        let inserted = unreported.filter(|_| next.timing.first_timeless_event.is_some());
        let reported = inserted.or(self.timing.notified);
        if let Some(first_tick) = next.extras.iter().position(|(_, e)| matches!(e, Extra::Event(Event::ClockTick(_)))) {
            if matches!(next.extras[first_tick].1, Extra::Event(Event::ClockTick(tsc)) if Some(tsc) == reported) {
                next.extras.remove(first_tick);
            }
        }
        if let (Some(tsc), Some(k)) = (inserted, next.timing.first_timeless_event) {
            let at = next.extras.get(k).map_or(next.executed.len() as u32, |e| e.0);
            next.extras.insert(k, (at, Extra::Event(Event::ClockTick(tsc))));
        }
        self.timing = Timing {
            first_timeless_event: self.timing.first_timeless_event,
            read: next.timing.read.or(self.timing.read),
            notified: next.timing.notified.or(reported),
        };
        self.extras.extend(next.extras.into_iter().map(|(at, extra)| (at + base, extra)));
        self.executed.extend(next.executed.iter().map(|id| id + offset));
        self.instructions += next.instructions;
        self.build_checkpoints();
    }

    /// Reserves room for `blocks` more executed blocks.
    pub(crate) fn reserve_blocks(&mut self, blocks: usize) {
        self.executed.reserve(blocks);
    }

    /// Releases spare capacity and indexes the history once decoding is done.
    pub fn shrink_to_fit(&mut self) {
        self.executed.shrink_to_fit();
        self.extras.shrink_to_fit();
        self.build_checkpoints();
    }

    fn build_checkpoints(&mut self) {
        self.checkpoints.clear();
        let mut count = 0u64;
        for chunk in self.executed.chunks(CHECKPOINT_EVERY) {
            self.checkpoints.push(count);
            count += chunk.iter().map(|&id| self.table.get(id).count as u64).sum::<u64>();
        }
    }

    /// A cursor at instruction `index` (0-based), in O(log n) plus one
    /// checkpoint interval.
    pub fn cursor_at(&self, index: u64) -> Option<Cursor<'_>> {
        if index >= self.instructions {
            return None;
        }
        let checkpoint = self.checkpoints.partition_point(|&c| c <= index).checked_sub(1)?;
        let mut block = checkpoint * CHECKPOINT_EVERY;
        let mut before = self.checkpoints[checkpoint];
        loop {
            let count = self.table.get(self.executed[block]).count as u64;
            if index < before + count {
                return Some(Cursor { history: self, block, within: (index - before) as u32, index });
            }
            before += count;
            block += 1;
        }
    }

    /// A cursor at the first instruction.
    pub fn first(&self) -> Option<Cursor<'_>> {
        self.cursor_at(0)
    }

    /// A cursor at the last instruction.
    pub fn last(&self) -> Option<Cursor<'_>> {
        self.instructions.checked_sub(1).and_then(|i| self.cursor_at(i))
    }

    /// Decoded as a segment ([`crate::flow::FlowDecoder::for_segment`]), it
    /// ended at the PSB where the next segment starts (false: it went on to
    /// the end of the trace, past that PSB, which a damaged packet hid).
    pub fn stopped_at_segment_end(&self) -> bool {
        self.stopped_at_segment_end
    }

    /// The number of events and errors so far.
    pub(crate) fn extras_len(&self) -> usize {
        self.extras.len()
    }

    /// Records an event or error at the current position.
    pub fn push_extra(&mut self, extra: Extra) {
        self.extras.push((self.executed.len() as u32, extra));
    }

    /// Instructions executed.
    pub fn instructions(&self) -> u64 {
        self.instructions
    }

    /// Executed blocks.
    pub fn executed_blocks(&self) -> usize {
        self.executed.len()
    }

    /// LLDB's infinite-loop check (`TryIdentifyInfiniteLoop`): the size of
    /// the loop the last instructions repeat — the last instruction's
    /// previous occurrence is `size` instructions back, and the `size`
    /// instructions up to each are the same.
    pub(crate) fn loop_at_end(&self) -> Option<u64> {
        // Instruction addresses from the last one back (no checkpoints are
        // needed: this runs while decoding).
        let mut back = self.executed.iter().rev().flat_map(|&id| {
            let addresses: Vec<u64> = self.table.addresses(id).collect();
            addresses.into_iter().rev()
        });
        let target = back.next()?;
        let mut looped = vec![target];
        loop {
            let ip = back.next()?;
            if ip == target {
                break;
            }
            looped.push(ip);
        }
        for &ip in &looped[1..] {
            if back.next()? != ip {
                return None;
            }
        }
        Some(looped.len() as u64)
    }

    /// The address after the last instruction recorded (where execution
    /// would go on without a branch).
    pub(crate) fn last_instruction_end(&self) -> Option<u64> {
        self.executed.last().map(|&id| {
            let block = self.table.get(id);
            block.last_ip.wrapping_add(block.last.len as u64)
        })
    }

    /// The address of the last instruction recorded.
    pub(crate) fn last_instruction_ip(&self) -> Option<u64> {
        self.executed.last().map(|&id| self.table.get(id).last_ip)
    }

    /// Events and errors.
    pub fn extras(&self) -> impl Iterator<Item = &Extra> {
        self.extras.iter().map(|(_, e)| e)
    }

    /// Bytes the history itself uses (executed blocks, extras, checkpoints),
    /// without the block table.
    pub fn memory_bytes(&self) -> usize {
        self.executed.capacity() * 4
            + self.extras.capacity() * std::mem::size_of::<(u32, Extra)>()
            + self.checkpoints.capacity() * 8
    }

    /// Every item in order (instructions expanded from blocks).
    pub fn items(&self) -> impl Iterator<Item = Item> + '_ {
        let mut extras = self.extras.iter().peekable();
        let mut blocks = self.executed.iter().enumerate();
        let mut current: Option<Box<dyn Iterator<Item = u64> + '_>> = None;
        std::iter::from_fn(move || loop {
            if let Some(addresses) = &mut current {
                if let Some(ip) = addresses.next() {
                    return Some(Item::Instruction { ip });
                }
                current = None;
            }
            let position = blocks.clone().next().map(|(i, _)| i as u32).unwrap_or(u32::MAX);
            if let Some((at, _)) = extras.peek() {
                if *at <= position {
                    let (_, extra) = extras.next().expect("peeked");
                    return Some(match extra {
                        Extra::Event(event) => Item::Event(*event),
                        Extra::Error { offset, error } => Item::Error { offset: *offset, error: error.clone() },
                    });
                }
            }
            let (_, &id) = blocks.next()?;
            current = Some(Box::new(self.table.addresses(id)));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_interleave_extras_and_instructions() {
        // nop; ret
        let mut history = History::default();
        let id = history.table.add(0x1000, &[1, 1], InsnInfo { len: 1, kind: FlowKind::Return }, ExecMode::Bits64);
        history.push_extra(Extra::Event(Event::SyncPoint(0)));
        history.push_block(id);
        history.push_extra(Extra::Event(Event::HardwareDisabled));
        history.push_block(id);
        let items: Vec<Item> = history.items().collect();
        assert_eq!(
            items,
            [
                Item::Event(Event::SyncPoint(0)),
                Item::Instruction { ip: 0x1000 },
                Item::Instruction { ip: 0x1001 },
                Item::Event(Event::HardwareDisabled),
                Item::Instruction { ip: 0x1000 },
                Item::Instruction { ip: 0x1001 },
            ]
        );
        assert_eq!(history.instructions(), 4);
    }
}
