//! A full-state recording's past (`retrace record --backend valgrind
//! --mode full`): the saved trace's [`Timeline`] says which instruction ran
//! at each position, the bundle's full-state stream
//! ([`retrace_decoder::full_state`]) every register and byte the program
//! changed. The stream stays on disk ([`StreamBytes`]); one pass at load
//! ([`RecordedState::load`]) keeps, as rr keeps checkpoints to replay
//! from:
//!
//! * every [`INTERVAL`] positions, a **checkpoint**: where the stream's
//!   reading stands there and every thread's registers;
//! * per interval, which words of memory its records wrote and which its
//!   instructions read ([`touches::Touches`]).
//!
//! A query replays forwards from one checkpoint: a thread's registers at a
//! position, from the checkpoint before it; a byte, from the latest
//! interval that wrote its word; a watched write or read, from the
//! intervals that touched the range — never the whole recording. When a
//! record takes effect on the timeline is the [`Clock`]'s rule. The
//! saved trace's history, over the timeline and the state, is the replay
//! engine's. A register or byte the recording does not know
//! is unavailable.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::{ControlFlow, Range};

use retrace_decoder::full_state::{piece, set_pieces, StateRecord, StateRecords, StreamPosition};

use crate::arch::Regs;
use crate::inferior::timeline::Timeline;

pub use stream::{Clock, Releasing, StreamBytes};
use regions::{RecordedRegions, Reserves};
use touches::Touches;

mod regions;
mod stream;
mod touches;

/// Positions between checkpoints: a query replays at most this many
/// instructions' records (a fraction of a millisecond).
pub const INTERVAL: u64 = 1 << 13;

/// `cs` and `ss` of a 64-bit Linux process (the others are 0).
const USER_CS: u32 = 0x33;
const USER_SS: u32 = 0x2b;

/// Bits of `rflags` the processor always shows set in user mode (the
/// reserved bit 1, IF) that Valgrind's computed flags leave out.
const RFLAGS_ALWAYS: u64 = 0x202;

/// The registers GDB numbers `n` (bit `n` of [`Regs::unavailable`]).
mod number {
    pub const FIRST_ST: usize = 24;
    pub const FCTRL: usize = 32;
    pub const FSTAT: usize = 33;
    pub const FTAG: usize = 34;
    pub const FIRST_XMM: usize = 40;
    pub const MXCSR: usize = 56;
    pub const ORIG_RAX: usize = 57;
    pub const FS_BASE: usize = 58;
    pub const GS_BASE: usize = 59;
}

/// A double as the x87's 80-bit extended format (exact: every double is
/// one).
fn extended(value: f64) -> [u8; 10] {
    let bits = value.to_bits();
    let sign = (bits >> 63) as u16;
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (exponent, mantissa) = match exponent {
        0 if fraction == 0 => (0u16, 0u64),
        0 => {
            // Subnormal: normalise.
            let shift = fraction.leading_zeros() - 11;
            ((1 - 1023 + 16383 - shift as i32) as u16, (fraction << (shift + 11)))
        }
        0x7ff => (0x7fff, (1 << 63) | (fraction << 11)),
        e => ((e - 1023 + 16383) as u16, (1 << 63) | (fraction << 11)),
    };
    let mut out = [0u8; 10];
    out[..8].copy_from_slice(&mantissa.to_le_bytes());
    out[8..].copy_from_slice(&((sign << 15) | exponent).to_le_bytes());
    out
}

/// Registers from the pieces a thread's records gave, at `rip`; a piece
/// never given makes its register unavailable.
pub fn registers_of(pieces: &[Option<u64>; piece::COUNT], rip: u64) -> Regs {
    let mut regs = Regs { rip, ..Regs::default() };
    let mut unavailable = 0u128;
    let mut get = |p: u8, n: usize| match pieces[p as usize] {
        Some(value) => value,
        None => {
            unavailable |= 1 << n;
            0
        }
    };
    for (n, p) in piece::GENERAL.enumerate() {
        regs.gpr[n] = get(p, n);
    }
    regs.eflags = (get(piece::RFLAGS, 17) | RFLAGS_ALWAYS) as u32;
    regs.segments = [USER_CS, USER_SS, 0, 0, 0, 0];
    regs.fs_base = get(piece::FS_BASE, number::FS_BASE);
    regs.gs_base = get(piece::GS_BASE, number::GS_BASE);
    for n in 0..16u8 {
        let low = get(piece::xmm(n), number::FIRST_XMM + n as usize);
        let high = get(piece::xmm(n) + 1, number::FIRST_XMM + n as usize);
        regs.xmm[n as usize] = u128::from(low) | u128::from(high) << 64;
        let low = get(piece::ymm_upper(n), crate::arch::FIRST_YMMH + n as usize);
        let high = get(piece::ymm_upper(n) + 1, crate::arch::FIRST_YMMH + n as usize);
        regs.ymmh[n as usize] = u128::from(low) | u128::from(high) << 64;
    }
    regs.mxcsr = 0x1f80 | ((get(piece::SSE_ROUNDING, number::MXCSR) as u32 & 3) << 13);
    // x87: st(i) is physical register (top + i) % 8.
    let top = get(piece::X87_TOP, number::FSTAT) as u32 & 7;
    let tags = get(piece::X87_TAGS, number::FTAG).to_le_bytes();
    for i in 0..8u8 {
        let physical = (top as u8 + i) % 8;
        let value = get(piece::x87(physical), number::FIRST_ST + i as usize);
        regs.st[i as usize] = extended(f64::from_bits(value));
    }
    let rounding = get(piece::X87_ROUNDING, number::FCTRL) as u32 & 3;
    regs.fpu[0] = 0x037f | rounding << 10;
    regs.fpu[1] = (top << 11) | (get(piece::X87_CONDITION, number::FSTAT) as u32 & 0x4700);
    // The full tag word: 11 empty, else 00 (valid; Valgrind keeps no
    // zero/special distinction).
    regs.fpu[2] = (0..8).fold(0u32, |word, k| word | if tags[k] == 0 { 3 << (2 * k) } else { 0 });
    // The x87 last instruction and operand pointers and opcode (fiseg,
    // fioff, foseg, fooff, fop) stay 0: Valgrind's processor keeps none
    // (its fxsave and fnstenv store zeros), so 0 is what the program saw.
    // orig_rax depends on how the kernel stopped the thread: not kept.
    unavailable |= 1 << number::ORIG_RAX;
    regs.unavailable = unavailable;
    regs
}

/// A thread's register pieces as known (by piece number).
type Pieces = Box<[Option<u64>; piece::COUNT]>;

/// Every thread's pieces (a few threads: searched in order).
type ThreadPieces = Vec<(u32, Pieces)>;

/// Thread `tid`'s pieces in `threads` (none known yet if new).
fn pieces_of(threads: &mut ThreadPieces, tid: u32) -> &mut Pieces {
    let index = threads.iter().position(|(t, _)| *t == tid).unwrap_or_else(|| {
        threads.push((tid, Box::new([None; piece::COUNT])));
        threads.len() - 1
    });
    &mut threads[index].1
}

/// A record kept apart from the stream (its one slice, the bytes written
/// or the path mapped, as a range of the stream).
#[derive(Debug, Clone)]
struct Kept {
    tid: u32,
    record: StateRecord<'static>,
    slice: Range<usize>,
}

/// `record` with its slice (if it has one) replaced by `slice`.
fn with_slice<'b>(record: &StateRecord<'_>, slice: &'b [u8]) -> StateRecord<'b> {
    match *record {
        StateRecord::Thread(tid) => StateRecord::Thread(tid),
        StateRecord::End => StateRecord::End,
        StateRecord::Scheduled { at } => StateRecord::Scheduled { at },
        StateRecord::Registers { at, by_instruction, ref changes } => StateRecord::Registers { at, by_instruction, changes: changes.clone() },
        // (Bytes not in the stream, a register's value stored, are kept.)
        StateRecord::Wrote { at, by_instruction, address, ref bytes } => {
            let bytes = match bytes {
                Cow::Owned(value) => Cow::Owned(value.clone()),
                Cow::Borrowed(_) => Cow::Borrowed(slice),
            };
            StateRecord::Wrote { at, by_instruction, address, bytes }
        }
        StateRecord::Read { at, address, size } => StateRecord::Read { at, address, size },
        StateRecord::Zeroed { at, start, length } => StateRecord::Zeroed { at, start, length },
        StateRecord::Unmapped { at, start, length } => StateRecord::Unmapped { at, start, length },
        StateRecord::Protected { at, start, length, prot } => StateRecord::Protected { at, start, length, prot },
        StateRecord::Moved { at, from, to, length } => StateRecord::Moved { at, from, to, length },
        StateRecord::FileMapped { at, start, length, offset, .. } => StateRecord::FileMapped { at, start, length, offset, path: slice },
        StateRecord::SignalDelivered { at, signal, ip } => StateRecord::SignalDelivered { at, signal, ip },
    }
}

impl Kept {
    fn of(stream: &[u8], tid: u32, record: &StateRecord<'_>) -> Self {
        let slice = match record {
            StateRecord::Wrote { bytes: Cow::Borrowed(bytes), .. } => bytes,
            StateRecord::FileMapped { path, .. } => path,
            _ => &[][..],
        };
        let start = (slice.as_ptr() as usize).wrapping_sub(stream.as_ptr() as usize).min(stream.len());
        Kept { tid, record: with_slice(record, &[]), slice: start..(start + slice.len()).min(stream.len()) }
    }

    fn record<'s>(&self, stream: &'s [u8]) -> StateRecord<'s> {
        with_slice(&self.record, stream.get(self.slice.clone()).unwrap_or(&[]))
    }
}

/// The state at a position `k * interval`: every record taking effect at
/// or before it applied.
#[derive(Debug, Clone)]
struct Checkpoint {
    /// The first record taking effect after it (read already: the reading
    /// stands after it), if any.
    first: Option<Kept>,
    /// The reading after `first`.
    rest: StreamPosition,
    /// Every thread's registers.
    registers: ThreadPieces,
}

/// The interval whose records take effect at `effect`: interval `k` holds
/// those taking effect in `k * interval + 1 ..= (k + 1) * interval` (the
/// first also those at 0, the state at the start).
fn interval_of(effect: u64, interval: u64) -> u32 {
    (effect.saturating_sub(1) / interval) as u32
}

/// The memory a record changes (writes, maps, unmaps or moves).
fn memory_effects(record: &StateRecord<'_>) -> Vec<Range<u64>> {
    let range = |start: u64, length: u64| start..start.saturating_add(length);
    match *record {
        StateRecord::Wrote { address, ref bytes, .. } => vec![range(address, bytes.len() as u64)],
        StateRecord::Zeroed { start, length, .. } | StateRecord::Unmapped { start, length, .. } | StateRecord::FileMapped { start, length, .. } => vec![range(start, length)],
        StateRecord::Moved { from, to, length, .. } => vec![range(from, length), range(to, length)],
        _ => Vec::new(),
    }
}

/// What a byte was at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Byte {
    Value(u8),
    Unknown,
    /// What `address` held at `position` (moved there by `mremap`).
    From { position: u64, address: u64 },
}

/// The files mapped, by the path recorded: their bytes as the bundle keeps
/// them (`modules/<path>`), or `None` where it keeps no copy.
type MappedFiles = HashMap<Vec<u8>, Option<Vec<u8>>>;

/// The history of a full-state recording: the stream and what one pass
/// over it kept (see the module documentation).
#[derive(Debug)]
pub struct RecordedState {
    stream: StreamBytes,
    files: MappedFiles,
    interval: u64,
    /// Thread id → index into the timeline's threads.
    threads: HashMap<u32, usize>,
    /// One per `interval` positions, from 0 through the end.
    checkpoints: Vec<Checkpoint>,
    /// What the records of each interval wrote (or mapped, unmapped).
    writes: Touches,
    /// What the instructions of each interval read.
    reads: Touches,
    /// What was mapped where, when.
    regions: RecordedRegions,
    /// How far down the main stack was mapped, when.
    reserves: Reserves,
    /// Positions before this one have all their records (the stream was
    /// cut or damaged after; past it nothing is known).
    complete_before: u64,
    /// The registers asked for last: (thread, position, registers). A
    /// debugger reads a stop's registers one by one (LLDB's `p`), each
    /// of which would replay an interval again.
    recent_registers: std::sync::Mutex<Vec<(u64, u64, Option<Regs>)>>,
}

/// Registers kept in [`RecordedState::recent_registers`].
const RECENT_REGISTERS: usize = 16;

impl RecordedState {
    /// Reads `stream` once over `timeline`, keeping checkpoints and what
    /// each interval touched; `file(path)` reads a mapped file's bytes (the
    /// bundle's copy). The error (a stream that is not one) is a sentence
    /// for the user; a stream damaged part way is served up to the damage.
    pub fn load(timeline: &Timeline, stream: StreamBytes, file: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>) -> Result<Self, String> {
        Self::load_with_interval(timeline, stream, file, INTERVAL)
    }

    fn load_with_interval(timeline: &Timeline, stream: StreamBytes, file: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>, interval: u64) -> Result<Self, String> {
        let mut files = MappedFiles::new();
        let threads: HashMap<u32, usize> = timeline.threads().iter().enumerate().filter_map(|(i, t)| Some((u32::try_from(t.tid).ok()?, i))).collect();
        let bytes = stream.bytes();
        let mut reading = Releasing::new(&stream);
        let mut clock = Clock::new(timeline, &threads, 0);
        let mut registers = ThreadPieces::new();
        let mut checkpoints = vec![Checkpoint { first: None, rest: reading.records.position(), registers: ThreadPieces::new() }];
        let (mut writes, mut reads) = (Touches::default(), Touches::default());
        let mut regions = RecordedRegions::default();
        let mut reserves = Reserves::default();
        let mut complete_before = u64::MAX;
        while let Some(item) = reading.next() {
            let (tid, record) = match item {
                Ok(item) => item,
                Err(e) if e.offset == 0 => return Err(e.to_string()),
                Err(e) => {
                    tracing::warn!("the full-state stream is damaged at byte {}: {}; the state after position {} is not known", e.offset, e.what, clock.now());
                    complete_before = clock.now();
                    break;
                }
            };
            let effect = clock.effect(tid, &record);
            while (checkpoints.len() as u64) * interval < effect {
                checkpoints.push(Checkpoint { first: Some(Kept::of(bytes, tid, &record)), rest: reading.records.position(), registers: registers.clone() });
            }
            let at = interval_of(effect, interval);
            match &record {
                StateRecord::Registers { changes, .. } => set_pieces(pieces_of(&mut registers, tid), changes),
                StateRecord::Read { address, size, .. } => {
                    reads.touch(at, *address..address.saturating_add(*size));
                    reserves.touch(effect, *address..address.saturating_add(*size));
                }
                _ => {
                    if let StateRecord::Wrote { address, bytes, .. } = &record {
                        reserves.touch(effect, *address..address.saturating_add(bytes.len() as u64));
                    }
                    if let StateRecord::FileMapped { path, .. } = &record {
                        files.entry(path.to_vec()).or_insert_with(|| file(path));
                    }
                    for range in memory_effects(&record) {
                        writes.touch(at, range);
                    }
                    regions.note(effect, &record);
                    reserves.note(effect, &record);
                }
            }
        }
        while (checkpoints.len() as u64) * interval <= timeline.len() {
            checkpoints.push(Checkpoint { first: None, rest: reading.records.position(), registers: registers.clone() });
        }
        drop(reading);
        Ok(RecordedState { stream, files, interval, threads, checkpoints, writes, reads, regions, reserves, complete_before, recent_registers: Default::default() })
    }

    /// Replays the records from checkpoint `k` on, each with the position
    /// it takes effect at, up to the last taking effect at or before
    /// `until`, while `visit` continues.
    fn scan(&self, timeline: &Timeline, k: u32, until: u64, visit: &mut dyn FnMut(u64, u32, &StateRecord<'_>) -> ControlFlow<()>) {
        let Some(checkpoint) = self.checkpoints.get(k as usize) else { return };
        let bytes = self.stream.bytes();
        let mut clock = Clock::new(timeline, &self.threads, k as u64 * self.interval);
        let first = checkpoint.first.as_ref().map(|kept| Ok((kept.tid, kept.record(bytes))));
        let mut reading = StateRecords::resume(bytes, &checkpoint.rest);
        for item in first.into_iter().chain(&mut reading) {
            let Ok((tid, record)) = item else { break };
            let effect = clock.effect(tid, &record);
            if effect > until || visit(effect, tid, &record).is_break() {
                break;
            }
        }
        // Read through: the memory goes back until the next query.
        self.stream.release(checkpoint.rest.offset()..reading.offset());
    }

    /// The program's mappings at `position`, as `/proc/PID/maps` would
    /// have listed them then.
    pub fn mappings_at(&self, position: u64) -> Vec<retrace_collector::process::Mapping> {
        regions::without(self.regions.at(position), self.reserves.unmapped_at(position))
    }

    /// Whether any record wrote, mapped or unmapped a byte of `range`.
    pub fn touched(&self, range: &Range<u64>) -> bool {
        self.writes.earliest(range, 0).is_some()
    }

    /// Thread `tid`'s registers at `position`; `None` past the end.
    pub fn registers_at(&self, timeline: &Timeline, tid: u64, position: u64) -> Option<Regs> {
        let mut recent = self.recent_registers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, _, regs)) = recent.iter().find(|(t, p, _)| (*t, *p) == (tid, position)) {
            return regs.clone();
        }
        let regs = self.replay_registers(timeline, tid, position);
        if recent.len() == RECENT_REGISTERS {
            recent.remove(0);
        }
        recent.push((tid, position, regs.clone()));
        regs
    }

    /// [`Self::registers_at`], replayed from the checkpoint before it.
    fn replay_registers(&self, timeline: &Timeline, tid: u64, position: u64) -> Option<Regs> {
        if position >= timeline.len() || position >= self.complete_before {
            return None;
        }
        let thread = timeline.thread_of(tid)?;
        let tid = u32::try_from(tid).ok()?;
        let k = (position / self.interval) as u32;
        let mut pieces = self.checkpoints.get(k as usize)?.registers.iter().find(|(t, _)| *t == tid).map(|(_, p)| p.clone());
        self.scan(timeline, k, position, &mut |_, of, record| {
            if let (true, StateRecord::Registers { changes, .. }) = (of == tid, record) {
                set_pieces(pieces.get_or_insert_with(|| Box::new([None; piece::COUNT])), changes);
            }
            ControlFlow::Continue(())
        });
        // Where it stands: its next instruction, or (it runs no more)
        // its last.
        let rip = timeline.next_pc_of_thread(position, thread).or_else(|| timeline.at(timeline.previous_of_thread(position, thread)?).map(|i| i.ip))?;
        Some(pieces.map_or_else(|| Regs::only_pc(rip), |p| registers_of(&p, rip)))
    }

    /// What `record` (taking effect at `effect`) made of the bytes of
    /// `address..` in `found`.
    fn effect_on(&self, record: &StateRecord<'_>, effect: u64, address: u64, found: &mut [Option<Byte>]) {
        let end = address + found.len() as u64;
        let mut set = |start: u64, length: u64, byte: &mut dyn FnMut(u64) -> Byte| {
            let (from, to) = (start.max(address), start.saturating_add(length).min(end));
            for at in from..to.max(from) {
                found[(at - address) as usize] = Some(byte(at));
            }
        };
        match *record {
            StateRecord::Wrote { address: start, ref bytes, .. } => set(start, bytes.len() as u64, &mut |at| Byte::Value(bytes[(at - start) as usize])),
            StateRecord::Zeroed { start, length, .. } => set(start, length, &mut |_| Byte::Value(0)),
            StateRecord::Unmapped { start, length, .. } => set(start, length, &mut |_| Byte::Unknown),
            StateRecord::Moved { from, to, length, .. } => {
                set(from, length, &mut |_| Byte::Unknown);
                // The bytes as they were before (the state a position
                // earlier: the system call's own step wrote nothing else).
                match effect.checked_sub(1) {
                    Some(position) => set(to, length, &mut |at| Byte::From { position, address: from + (at - to) }),
                    None => set(to, length, &mut |_| Byte::Unknown),
                }
            }
            StateRecord::FileMapped { start, length, offset, path, .. } => {
                // The file's bytes; past its end, zeros to the end of that
                // page, then nothing (as the kernel maps it).
                let copy = self.files.get(path).and_then(Option::as_ref);
                let file = copy.map_or(&[][..], |f| f.as_slice());
                let file_end = start.saturating_add(u64::try_from(file.len()).unwrap_or(u64::MAX).saturating_sub(offset));
                let zeros_end = file_end.div_ceil(4096).saturating_mul(4096);
                let known = copy.is_some();
                set(start, length, &mut |at| match (known, at < file_end, at < zeros_end) {
                    (true, true, _) => Byte::Value(file[(offset + (at - start)) as usize]),
                    (true, false, true) => Byte::Value(0),
                    _ => Byte::Unknown,
                });
            }
            _ => {}
        }
    }

    /// Memory at `position`: how many bytes of `buf` from `address` are
    /// known.
    pub fn memory_at(&self, timeline: &Timeline, position: u64, address: u64, buf: &mut [u8]) -> usize {
        if position >= self.complete_before || buf.is_empty() {
            return 0;
        }
        // (Not mapped yet: the stack's reserve below what was touched.)
        let mut buf = buf;
        for hole in self.reserves.unmapped_at(position) {
            if hole.contains(&address) {
                return 0;
            }
            if address < hole.start && hole.start - address < buf.len() as u64 {
                buf = &mut buf[..(hole.start - address) as usize];
            }
        }
        let end = address.saturating_add(buf.len() as u64);
        let n = (end - address) as usize;
        let mut bytes: Vec<Option<Byte>> = vec![None; n];
        let top = interval_of(position, self.interval);
        let mut cap = Some(top);
        // The latest interval that wrote any word not known yet, replayed;
        // its last writes are what those bytes were; then the next.
        while let Some(c) = cap {
            let mut latest = None;
            // (Word by word; the last word of the address space ends the
            // walk rather than overflow.)
            let mut word = Some(address & !7);
            while let Some(at) = word.filter(|&at| at < end) {
                let range = at.max(address)..at.saturating_add(8).min(end);
                if bytes[(range.start - address) as usize..(range.end - address) as usize].iter().any(Option::is_none) {
                    latest = latest.max(self.writes.latest(&range, c));
                }
                word = at.checked_add(8);
            }
            let Some(k) = latest else { break };
            let until = if k == top { position } else { (k as u64 + 1) * self.interval };
            let mut found: Vec<Option<Byte>> = vec![None; n];
            self.scan(timeline, k, until, &mut |effect, _, record| {
                self.effect_on(record, effect, address, &mut found);
                ControlFlow::Continue(())
            });
            for (byte, found) in bytes.iter_mut().zip(found) {
                if byte.is_none() {
                    *byte = found;
                }
            }
            cap = k.checked_sub(1);
        }
        // The known prefix; moved bytes read where they came from.
        let mut i = 0;
        while i < n {
            match bytes[i] {
                Some(Byte::Value(v)) => buf[i] = v,
                Some(Byte::From { position, address: source }) => {
                    let mut j = i + 1;
                    while j < n && bytes[j] == Some(Byte::From { position, address: source + (j - i) as u64 }) {
                        j += 1;
                    }
                    let got = self.memory_at(timeline, position, source, &mut buf[i..j]);
                    if got < j - i {
                        return i + got;
                    }
                    i = j;
                    continue;
                }
                _ => return i,
            }
            i += 1;
        }
        n
    }

    /// The latest step before `before` with a record `matches` accepts,
    /// among the intervals `touches` lists for `range`.
    fn last_before(&self, timeline: &Timeline, touches: &Touches, range: &Range<u64>, before: u64, matches: &dyn Fn(&StateRecord<'_>) -> bool) -> Option<u64> {
        let before = before.min(self.complete_before);
        if before == 0 {
            return None;
        }
        let top = interval_of(before, self.interval);
        let mut cap = Some(top);
        while let Some(c) = cap {
            let k = touches.latest(range, c)?;
            let until = if k == top { before } else { (k as u64 + 1) * self.interval };
            let mut hit = None;
            self.scan(timeline, k, until, &mut |effect, _, record| {
                if effect > 0 && matches(record) {
                    hit = Some(effect - 1);
                }
                ControlFlow::Continue(())
            });
            if hit.is_some() {
                return hit;
            }
            cap = k.checked_sub(1);
        }
        None
    }

    /// The first step at or after `from` with a record `matches` accepts.
    fn first_from(&self, timeline: &Timeline, touches: &Touches, range: &Range<u64>, from: u64, matches: &dyn Fn(&StateRecord<'_>) -> bool) -> Option<u64> {
        let mut k = interval_of(from + 1, self.interval);
        loop {
            k = touches.earliest(range, k)?;
            let mut hit = None;
            self.scan(timeline, k, (k as u64 + 1) * self.interval, &mut |effect, _, record| {
                if effect > from && effect <= self.complete_before && matches(record) {
                    hit = Some(effect - 1);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if hit.is_some() {
                return hit;
            }
            k += 1;
        }
    }
}

/// Whether `record` wrote (an instruction, or the kernel) a byte of `range`.
fn writes_to(record: &StateRecord<'_>, range: &Range<u64>) -> bool {
    matches!(*record, StateRecord::Wrote { address, ref bytes, .. } if address < range.end && range.start < address.saturating_add(bytes.len() as u64))
}

/// Whether `record` is an instruction's read of a byte of `range`.
fn reads_from(record: &StateRecord<'_>, range: &Range<u64>) -> bool {
    matches!(*record, StateRecord::Read { address, size, .. } if address < range.end && range.start < address.saturating_add(size))
}

/// The searches for watched accesses a replay makes over a full-state
/// recording (positions of `timeline`).
impl RecordedState {
    /// The latest step before `before` that wrote a byte of `range`.
    pub fn last_write_before(&self, timeline: &Timeline, range: Range<u64>, before: u64) -> Option<u64> {
        self.last_before(timeline, &self.writes, &range, before, &|r| writes_to(r, &range))
    }

    /// The first step at or after `from` that wrote a byte of `range`.
    pub fn first_write_from(&self, timeline: &Timeline, range: Range<u64>, from: u64) -> Option<u64> {
        self.first_from(timeline, &self.writes, &range, from, &|r| writes_to(r, &range))
    }

    /// The latest step before `before` whose instruction read a byte of
    /// `range`.
    pub fn last_read_before(&self, timeline: &Timeline, range: Range<u64>, before: u64) -> Option<u64> {
        self.last_before(timeline, &self.reads, &range, before, &|r| reads_from(r, &range))
    }

    /// The first step at or after `from` whose instruction read a byte of
    /// `range`.
    pub fn first_read_from(&self, timeline: &Timeline, range: Range<u64>, from: u64) -> Option<u64> {
        self.first_from(timeline, &self.reads, &range, from, &|r| reads_from(r, &range))
    }

    /// Whether step `position` wrote a byte of `range`.
    pub fn wrote(&self, timeline: &Timeline, position: u64, range: &Range<u64>) -> bool {
        let k = interval_of(position + 1, self.interval);
        if !self.writes.touches(range, k) {
            return false;
        }
        let mut wrote = false;
        self.scan(timeline, k, position + 1, &mut |effect, _, record| {
            wrote |= effect == position + 1 && writes_to(record, range);
            if wrote {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        wrote
    }
}

#[cfg(test)]
mod tests;
