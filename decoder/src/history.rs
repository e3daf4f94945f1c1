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
#[derive(Debug, Default, Clone, Copy)]
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
    /// Each block's [`Block::count`] again, packed: what walks over the
    /// executed blocks read for every block (a few hundred KiB stays in
    /// cache where the blocks do not).
    counts: Vec<u32>,
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

    /// The number of instructions in block `id`.
    pub fn count(&self, id: u32) -> u32 {
        self.counts[id as usize]
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
        self.blocks.capacity() * std::mem::size_of::<Block>() + self.counts.capacity() * 4
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
        self.counts.push(lens.len() as u32);
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
        self.counts.push(count);
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

/// One step of [`History::steps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'h> {
    /// An executed block (an id in the history's [`BlockTable`]) whose first
    /// instruction has item id `id`.
    Block {
        /// Item id of its first instruction.
        id: u64,
        /// Block id.
        block: u32,
    },
    /// An event or error, with its item id.
    Extra {
        /// Its item id.
        id: u64,
        /// What it is.
        extra: &'h Extra,
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
        let count = self.history.table.count(self.history.executed[self.block]);
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
            self.within = self.history.table.count(self.history.executed[self.block]) - 1;
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
        self.instructions += self.table.count(id) as u64;
        self.executed.push(id);
    }

    /// Takes back the last instruction pushed (its branch could not be
    /// decoded from the trace, so LLDB does not list it either).
    pub(crate) fn drop_last_instruction(&mut self) {
        if let Some(id) = self.executed.pop() {
            let count = self.table.count(id);
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
            self.table.counts.push(block.count);
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
            count += chunk.iter().map(|&id| self.table.count(id) as u64).sum::<u64>();
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
            let count = self.table.count(self.executed[block]) as u64;
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

    /// Events and errors with their item ids, in order, found by summing
    /// block sizes (no instruction is expanded).
    pub fn extras_with_ids(&self) -> impl Iterator<Item = (u64, &Extra)> + '_ {
        self.steps().filter_map(|step| match step {
            Step::Extra { id, extra } => Some((id, extra)),
            Step::Block { .. } => None,
        })
    }

    /// Items in all: instructions, events and errors.
    pub fn items_len(&self) -> u64 {
        self.instructions + self.extras.len() as u64
    }

    /// Executed blocks in order, each with the item id of its first
    /// instruction; events and errors between them come as [`Extra`]s with
    /// their ids. What walks the history a block at a time (call trees,
    /// timelines) reads this instead of [`History::items`].
    pub fn steps(&self) -> impl Iterator<Item = Step<'_>> + '_ {
        self.steps_of_blocks(0, self.executed.len())
    }

    /// [`History::steps`] of executed blocks `lo..hi`: the events and errors
    /// just before block `lo`, the blocks and what lies between them, and,
    /// when `hi` is the end, what follows the last block.
    fn steps_of_blocks(&self, lo: usize, hi: usize) -> impl Iterator<Item = Step<'_>> + '_ {
        let first_extra = self.extras.partition_point(|(at, _)| (*at as usize) < lo);
        let last_chunk = hi == self.executed.len();
        let mut extras = self.extras[first_extra..].iter().take_while(move |(at, _)| (*at as usize) < hi || last_chunk).peekable();
        let mut block = lo;
        let mut id = self.instructions_before_block(lo) + first_extra as u64;
        std::iter::from_fn(move || {
            if let Some((at, extra)) = extras.peek() {
                if *at as usize <= block {
                    extras.next();
                    id += 1;
                    return Some(Step::Extra { id: id - 1, extra });
                }
            }
            if block == hi {
                return None;
            }
            let executed = self.executed[block];
            block += 1;
            let first = id;
            id += self.table.count(executed) as u64;
            Some(Step::Block { id: first, block: executed })
        })
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
        self.items_of_blocks(0, self.executed.len()).map(|(_, item)| item)
    }

    /// Every item in order with its item id.
    pub fn items_with_ids(&self) -> impl Iterator<Item = (u64, Item)> + '_ {
        self.items_of_blocks(0, self.executed.len())
    }

    /// Every item from the last to the first, with its item id. The
    /// history is read a few thousand blocks at a time, so going back over
    /// a few items costs a few items, and over all of them no more memory
    /// than a chunk.
    pub fn items_rev(&self) -> impl Iterator<Item = (u64, Item)> + '_ {
        const CHUNK: usize = 64 * CHECKPOINT_EVERY;
        let chunks = self.executed.len().div_ceil(CHUNK).max(1);
        (0..chunks).rev().flat_map(move |chunk| {
            let (lo, hi) = (chunk * CHUNK, ((chunk + 1) * CHUNK).min(self.executed.len()));
            let items: Vec<(u64, Item)> = self.items_of_blocks(lo, hi).collect();
            items.into_iter().rev()
        })
    }

    /// The items of executed blocks `lo..hi` with their ids (see
    /// [`History::steps_of_blocks`]), instructions expanded from blocks.
    fn items_of_blocks(&self, lo: usize, hi: usize) -> impl Iterator<Item = (u64, Item)> + '_ {
        self.steps_of_blocks(lo, hi).flat_map(move |step| -> Box<dyn Iterator<Item = (u64, Item)> + '_> {
            match step {
                Step::Block { id, block } => {
                    Box::new(self.table.addresses(block).zip(id..).map(|(ip, id)| (id, Item::Instruction { ip })))
                }
                Step::Extra { id, extra } => {
                    let item = match extra {
                        Extra::Event(event) => Item::Event(*event),
                        Extra::Error { offset, error } => Item::Error { offset: *offset, error: error.clone() },
                    };
                    Box::new(std::iter::once((id, item)))
                }
            }
        })
    }

    /// Instructions in the executed blocks before block `block`.
    fn instructions_before_block(&self, block: usize) -> u64 {
        if block >= self.executed.len() {
            return self.instructions;
        }
        let checkpoint = block / CHECKPOINT_EVERY;
        let base = match self.checkpoints.get(checkpoint) {
            Some(&count) => (count, checkpoint * CHECKPOINT_EVERY),
            None => (0, 0), // not indexed yet: count from the start
        };
        base.0 + self.executed[base.1..block].iter().map(|&id| self.table.count(id) as u64).sum::<u64>()
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
        let ids: Vec<u64> = history.extras_with_ids().map(|(id, _)| id).collect();
        assert_eq!(ids, [0, 3]);
        assert_eq!(history.items_len(), 6);
        let steps: Vec<(u64, bool)> = history.steps().map(|s| match s {
            Step::Block { id, .. } => (id, true),
            Step::Extra { id, .. } => (id, false),
        }).collect();
        assert_eq!(steps, [(0, false), (1, true), (3, false), (4, true)]);
        let backwards: Vec<(u64, Item)> = history.items_rev().collect();
        let forwards: Vec<(u64, Item)> = history.items_with_ids().collect();
        assert_eq!(backwards.into_iter().rev().collect::<Vec<_>>(), forwards);
        assert_eq!(forwards.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn items_backwards_are_items_forwards_reversed_across_chunks() {
        // 10,000 blocks of 1 to 3 instructions (several read-back chunks),
        // extras before, between and after them.
        let mut history = History::default();
        let blocks: Vec<u32> = (1..=3u64)
            .map(|n| history.table.add(0x1000 * n, &vec![1; n as usize], InsnInfo { len: 1, kind: FlowKind::Return }, ExecMode::Bits64))
            .collect();
        history.push_extra(Extra::Event(Event::SyncPoint(0)));
        for i in 0..10_000u32 {
            if i % 97 == 0 {
                history.push_extra(Extra::Event(Event::ClockTick(i as u64)));
            }
            history.push_block(blocks[(i % 3) as usize]);
        }
        history.push_extra(Extra::Event(Event::HardwareDisabled));
        history.shrink_to_fit();
        let forwards: Vec<(u64, Item)> = history.items_with_ids().collect();
        assert_eq!(forwards.len() as u64, history.items_len());
        assert!(forwards.iter().enumerate().all(|(k, (id, _))| *id == k as u64));
        let mut backwards: Vec<(u64, Item)> = history.items_rev().collect();
        backwards.reverse();
        assert_eq!(backwards, forwards);
        let ticks: Vec<u64> = history.extras_with_ids().map(|(id, _)| id).collect();
        let expected: Vec<u64> = forwards.iter().filter(|(_, item)| !matches!(item, Item::Instruction { .. })).map(|(id, _)| *id).collect();
        assert_eq!(ticks, expected);
    }
}
