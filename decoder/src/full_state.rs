//! Full-state recordings: beside a recording's Intel PT streams (which say
//! what ran), every change the program's registers and memory went through,
//! so that any register or byte at any past position can be served. Written
//! by `retrace record --backend valgrind --full` as `state/<pid>.rtstate` in
//! the bundle; `docs/full-state-format.md` describes the format and
//! [`StateWriter`] / [`state_records`] encode and decode it.
//!
//! Every record is a thread's and says *when* it took effect as `at`: how
//! many of the thread's instructions had completed (an instruction's own
//! effects have `at` = its step number + 1; what the kernel did in its
//! system call is placed the same way, after the system call's step). The
//! process-wide records before any thread ran (the memory at the start)
//! are thread 0's with `at` 0.
//!
//! Encoding (after the magic `RTSTATE2`, up to the end mark `E`; streams
//! from before the end mark start with `RTSTATE1`; numbers are LEB128, "signed" ones
//! zigzag-mapped): each record is a tag byte, then `at` as the difference
//! from the previous record of the same thread, then its fields:
//!
//! | tag | fields | meaning |
//! |---|---|---|
//! | `T` | tid (no `at`) | the records that follow are thread `tid`'s |
//! | `E` | (no `at`) | the end mark: the stream is whole ([`StateWriter::finish`]) |
//! | `S` | — | the thread runs from its step `at` on, until another is scheduled: the one order the threads ran in |
//! | `R` | n, n × (piece u8, signed difference from the thread's last value of the piece) | an instruction changed registers: their values after it |
//! | `r` | as `R` | registers changed other than by an instruction (a system call's result, a signal delivered, a thread's first registers) |
//! | `W` | signed address difference from the previous `W`, `K` or `D`'s, size, bytes | an instruction wrote memory: the bytes after it |
//! | `K` | as `W` | memory written other than by an instruction (by the kernel, the memory at the start) |
//! | `D` | signed address difference, size | an instruction read memory |
//! | `Z` | start, length | memory mapped zero-filled |
//! | `U` | start, length | memory unmapped |
//! | `C` | from, to, length | memory moved (`mremap`) |
//! | `F` | start, length, file offset, path length, path | a file mapped: its bytes (a module copied into the bundle, by its path) |
//! | `I` | signal, ip | a signal is delivered to the thread, interrupted before `ip`: the thread's records after it with the same `at` (the signal frame, the handler's registers) are the delivery's |
//!
//! An instruction's own records also take short forms (the step and the
//! count or size in the tag, 0x10–0x2f) and, the most frequent, compact
//! ones: one piece (`0x80 | step << 5 | piece`), a general register and
//! the flags (`0x30 | register`), an 8-byte store of a general register's
//! value (`0x60 | register`, no bytes: the reader knows the value), and
//! 8-byte stores and loads near the stack pointer, from `rsp` (`0x78 |
//! load << 1 | step`); `docs/full-state-format.md` has the tables.
//!
//! Register pieces are 8 bytes each, numbered as [`piece`] says.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::leb128;

/// The magic at the start of a full-state stream: one that ends with an
/// end mark ([`StateRecord::End`]), so that a stream cut between two
/// records is told from a whole one.
pub const STATE_MAGIC: &[u8; 8] = b"RTSTATE2";

/// The magic of the streams written before the end mark (read as they
/// are: their end is where the bytes end).
pub const STATE_MAGIC_UNMARKED: &[u8; 8] = b"RTSTATE1";

/// The register pieces (8 bytes each) records name.
pub mod piece {
    /// How many numbers there are (not all are used).
    pub const COUNT: usize = 112;
    /// `rax rbx rcx rdx rsi rdi rbp rsp r8 … r15` are 0..16, GDB's order.
    pub const GENERAL: std::ops::Range<u8> = 0..16;
    /// `rflags`.
    pub const RFLAGS: u8 = 16;
    /// `fs_base`.
    pub const FS_BASE: u8 = 17;
    /// `gs_base`.
    pub const GS_BASE: u8 = 18;
    /// The SSE rounding mode, as Valgrind keeps it (0..4).
    pub const SSE_ROUNDING: u8 = 96;
    /// x87's top-of-stack index.
    pub const X87_TOP: u8 = 108;
    /// The eight x87 tag bytes (1: full).
    pub const X87_TAGS: u8 = 109;
    /// The x87 rounding mode.
    pub const X87_ROUNDING: u8 = 110;
    /// The x87 condition bits C3..C0, where the status word keeps them.
    pub const X87_CONDITION: u8 = 111;

    /// Bytes 0..8 of `xmm{n}` (bytes 8..16 are the next piece).
    pub const fn xmm(n: u8) -> u8 {
        32 + 2 * n
    }

    /// Bytes 16..24 of `ymm{n}` (24..32 are the next piece).
    pub const fn ymm_upper(n: u8) -> u8 {
        64 + 2 * n
    }

    /// x87 physical register `k`, as a double.
    pub const fn x87(k: u8) -> u8 {
        100 + k
    }
}

/// One record (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord<'a> {
    /// The records that follow are thread `tid`'s (0: the process's, at
    /// its start).
    Thread(u32),
    /// The thread runs from its step `at` on, until another thread is
    /// scheduled: the threads' steps in the one order they ran.
    Scheduled {
        /// Its steps completed when it was scheduled.
        at: u64,
    },
    /// Registers changed: `(piece, value after)`.
    Registers {
        /// The thread's steps completed when they changed.
        at: u64,
        /// By an instruction (its step is `at - 1`), or not.
        by_instruction: bool,
        /// Each piece changed and its value then.
        changes: Vec<(u8, u64)>,
    },
    /// Memory written: the bytes as they were after.
    Wrote {
        /// The thread's steps completed when it was written.
        at: u64,
        /// By an instruction (its step is `at - 1`), or not.
        by_instruction: bool,
        /// First address.
        address: u64,
        /// The bytes (read in place from a stream, or a register's value
        /// that a store wrote).
        bytes: Cow<'a, [u8]>,
    },
    /// An instruction read memory.
    Read {
        /// Its step + 1.
        at: u64,
        /// First address.
        address: u64,
        /// How many bytes.
        size: u64,
    },
    /// Memory mapped zero-filled.
    Zeroed {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Memory unmapped.
    Unmapped {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Memory moved.
    Moved {
        /// When.
        at: u64,
        /// Where it was.
        from: u64,
        /// Where it is.
        to: u64,
        /// Bytes.
        length: u64,
    },
    /// A file's bytes mapped.
    FileMapped {
        /// When.
        at: u64,
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
        /// Offset in the file.
        offset: u64,
        /// The file's path when recorded.
        path: &'a [u8],
    },
    /// The stream is whole: nothing follows (the last record of a stream
    /// [`StateWriter::finish`] ended).
    End,
    /// A signal is delivered to the thread: what its records say after
    /// this one, until its next step, is the delivery's (the signal frame
    /// written, the handler's registers); before it, the thread stood
    /// interrupted at `ip`.
    SignalDelivered {
        /// The thread's steps completed when it was delivered.
        at: u64,
        /// The signal's number.
        signal: u32,
        /// Where the thread was interrupted: the instruction it runs when
        /// the handler returns (a faulting one, again).
        ip: u64,
    },
}

/// What both ends keep to code differences: per thread, the last `at` and
/// register values; the last address.
#[derive(Debug, Default, Clone)]
struct DeltaState {
    tid: u32,
    /// Every thread's, in the order first met (a few: looked up only when
    /// the stream changes threads).
    threads: Vec<(u32, ThreadDeltas)>,
    /// The index of `tid`'s in `threads`, once it has one.
    current: usize,
    address: u64,
}

#[derive(Debug, Clone)]
struct ThreadDeltas {
    at: u64,
    pieces: Box<[u64; piece::COUNT]>,
}

impl Default for ThreadDeltas {
    fn default() -> Self {
        ThreadDeltas { at: 0, pieces: Box::new([0; piece::COUNT]) }
    }
}

impl DeltaState {
    /// The index of `tid`'s differences (made if new).
    fn index(&mut self) -> usize {
        if self.threads.get(self.current).is_none_or(|(tid, _)| *tid != self.tid) {
            let tid = self.tid;
            self.current = self.threads.iter().position(|(t, _)| *t == tid).unwrap_or_else(|| {
                self.threads.push((tid, ThreadDeltas::default()));
                self.threads.len() - 1
            });
        }
        self.current
    }

    fn thread(&mut self) -> &mut ThreadDeltas {
        let index = self.index();
        &mut self.threads[index].1
    }
}

/// Encodes records into a growing buffer, which the owner takes as it
/// grows ([`StateWriter::take_bytes`]) so that memory stays bounded.
#[derive(Debug, Clone)]
pub struct StateWriter {
    out: Vec<u8>,
    deltas: DeltaState,
    written: u64,
}

impl Default for StateWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl StateWriter {
    /// A stream holding only the magic (thread 0's records first).
    pub fn new() -> Self {
        StateWriter { out: STATE_MAGIC.to_vec(), deltas: DeltaState::default(), written: 0 }
    }

    /// Bytes not taken yet.
    pub fn pending_len(&self) -> usize {
        self.out.len()
    }

    /// Bytes written in all (taken or not).
    pub fn len(&self) -> u64 {
        self.written + self.out.len() as u64
    }

    /// Only the magic so far.
    pub fn is_empty(&self) -> bool {
        self.len() == STATE_MAGIC.len() as u64
    }

    /// The bytes written since the last call.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        self.written += self.out.len() as u64;
        std::mem::take(&mut self.out)
    }

    /// Ends the stream with its end mark: the bytes not taken yet.
    pub fn finish(&mut self) -> Vec<u8> {
        self.push(&StateRecord::End);
        self.take_bytes()
    }

    /// Appends `record`. `at` must not go back within a thread (a record
    /// that does is written at the thread's last `at`).
    pub fn push(&mut self, record: &StateRecord<'_>) {
        let deltas = &mut self.deltas;
        let out = &mut self.out;
        let tag = match record {
            StateRecord::Thread(tid) => {
                if *tid != deltas.tid {
                    out.push(b'T');
                    leb128::put(out, u64::from(*tid));
                    deltas.tid = *tid;
                }
                return;
            }
            StateRecord::End => {
                out.push(b'E');
                return;
            }
            StateRecord::Scheduled { .. } => b'S',
            StateRecord::Registers { by_instruction: true, .. } => b'R',
            StateRecord::Registers { .. } => b'r',
            StateRecord::Wrote { by_instruction: true, .. } => b'W',
            StateRecord::Wrote { .. } => b'K',
            StateRecord::Read { .. } => b'D',
            StateRecord::Zeroed { .. } => b'Z',
            StateRecord::Unmapped { .. } => b'U',
            StateRecord::Moved { .. } => b'C',
            StateRecord::FileMapped { .. } => b'F',
            StateRecord::SignalDelivered { .. } => b'I',
        };
        let index = deltas.index();
        let thread = &mut deltas.threads[index].1;
        let at = record.at().max(thread.at);
        let step = at - thread.at;
        thread.at = at;
        // The most frequent of an instruction's own records take a
        // compact tag: one register, a register and the flags, a store of
        // a register's value.
        if let Some(compact) = compact_form(record, step, &thread.pieces) {
            match (compact, record) {
                (Compact::Pieces(tag), StateRecord::Registers { changes, .. }) => {
                    out.push(tag);
                    for &(p, value) in changes {
                        let slot = &mut thread.pieces[p as usize];
                        leb128::put_signed(out, value.wrapping_sub(*slot) as i64);
                        *slot = value;
                    }
                }
                (Compact::RegisterStored(tag), StateRecord::Wrote { address, .. }) => {
                    out.push(tag);
                    leb128::put_signed(out, address.wrapping_sub(deltas.address) as i64);
                    deltas.address = *address;
                }
                _ => unreachable!("a compact form is of its record's kind"),
            }
            return;
        }
        if let Some((tag, address)) = stack_form(record, step, thread.pieces[7], deltas.address) {
            out.push(tag);
            leb128::put_signed(out, address.wrapping_sub(thread.pieces[7]) as i64);
            if let StateRecord::Wrote { bytes, .. } = record {
                out.extend_from_slice(&bytes[..]);
            }
            return;
        }
        // An instruction's own record, a step on or none, takes a short
        // tag: the step and the count or size are in it, not after it.
        let short = short_tag(record, step);
        out.push(short.unwrap_or(tag));
        let long = short.is_none();
        if long {
            leb128::put(out, step);
        }
        let mut put_address = |out: &mut Vec<u8>, address: u64| {
            leb128::put_signed(out, address.wrapping_sub(deltas.address) as i64);
            deltas.address = address;
        };
        match record {
            StateRecord::Thread(_) | StateRecord::End => unreachable!("written above"),
            StateRecord::Scheduled { .. } => {}
            StateRecord::Registers { changes, .. } => {
                if long {
                    let count = changes.iter().filter(|(p, _)| (*p as usize) < piece::COUNT).count();
                    leb128::put(out, count as u64);
                }
                put_pieces(out, &mut thread.pieces, changes);
            }
            StateRecord::Wrote { address, bytes, .. } => {
                put_address(out, *address);
                if long {
                    leb128::put(out, bytes.len() as u64);
                }
                out.extend_from_slice(&bytes[..]);
            }
            StateRecord::Read { address, size, .. } => {
                put_address(out, *address);
                if long {
                    leb128::put(out, *size);
                }
            }
            StateRecord::Zeroed { start, length, .. } | StateRecord::Unmapped { start, length, .. } => {
                leb128::put(out, *start);
                leb128::put(out, *length);
            }
            StateRecord::Moved { from, to, length, .. } => {
                leb128::put(out, *from);
                leb128::put(out, *to);
                leb128::put(out, *length);
            }
            StateRecord::FileMapped { start, length, offset, path, .. } => {
                leb128::put(out, *start);
                leb128::put(out, *length);
                leb128::put(out, *offset);
                leb128::put(out, path.len() as u64);
                out.extend_from_slice(path);
            }
            StateRecord::SignalDelivered { signal, ip, .. } => {
                leb128::put(out, u64::from(*signal));
                leb128::put(out, *ip);
            }
        }
    }
}

/// The compact tags (see the format's documentation): an instruction's
/// one register piece (`0x80 | step << 5 | piece`, step 0–3, piece 0–31),
/// one general register and the flags, a step on (`0x30 | register`),
/// and an 8-byte store of a general register's value, a step on (`0x60 |
/// register`).
const COMPACT_ONE_PIECE: u8 = 0x80;
const COMPACT_WITH_FLAGS: u8 = 0x30;
const COMPACT_REGISTER_STORED: u8 = 0x60;

/// The stack forms (`0x78 | load << 1 | step`, step 0 or 1): an 8-byte
/// store (its bytes follow) or load at the signed difference from the
/// thread's `rsp` as its records last gave it, not from the last address
/// (which stays, for the next access elsewhere).
const STACK_ACCESS: u8 = 0x78;

/// Bytes of `value` as a signed LEB128 number.
fn signed_len(value: i64) -> u32 {
    (64 - leb128::zigzag(value).leading_zeros()).max(1).div_ceil(7)
}

/// `record`'s stack form, `step` after the thread's last `at`: an 8-byte
/// access whose address is shorter to write from `rsp` than from `last`.
fn stack_form(record: &StateRecord<'_>, step: u64, rsp: u64, last: u64) -> Option<(u8, u64)> {
    let (address, load) = match record {
        StateRecord::Wrote { by_instruction: true, address, bytes, .. } if bytes.len() == 8 => (*address, 0),
        StateRecord::Read { address, size: 8, .. } => (*address, 1),
        _ => return None,
    };
    let shorter = signed_len(address.wrapping_sub(rsp) as i64) < signed_len(address.wrapping_sub(last) as i64);
    (step <= 1 && shorter).then_some((STACK_ACCESS | load << 1 | step as u8, address))
}

/// An instruction's record in a compact form.
enum Compact {
    /// The tag, then each piece's difference (the pieces are the tag's,
    /// all of the record's).
    Pieces(u8),
    /// The tag, then the address difference (the bytes are the
    /// register's value).
    RegisterStored(u8),
}

/// `record`'s compact form, `step` after the thread's last `at`, with
/// the thread's pieces as last written (`last`), if it has one.
fn compact_form(record: &StateRecord<'_>, step: u64, last: &[u64; piece::COUNT]) -> Option<Compact> {
    match record {
        StateRecord::Registers { by_instruction: true, changes, .. } => match changes[..] {
            [(p, _)] if p < 32 && step <= 3 => Some(Compact::Pieces(COMPACT_ONE_PIECE | (step as u8) << 5 | p)),
            [(p, _), (piece::RFLAGS, _)] if p < 16 && step == 1 => Some(Compact::Pieces(COMPACT_WITH_FLAGS | p)),
            _ => None,
        },
        StateRecord::Wrote { by_instruction: true, bytes, .. } if step == 1 && bytes.len() == 8 => {
            let value = u64::from_le_bytes(bytes[..].try_into().ok()?);
            let p = piece::GENERAL.clone().find(|&p| last[p as usize] == value)?;
            Some(Compact::RegisterStored(COMPACT_REGISTER_STORED | p))
        }
        _ => None,
    }
}

/// The short tags (see the format's documentation): an instruction's
/// registers (`0x10 | step << 3 | count`, 1–7 pieces), store (`0x20 | size
/// code << 1 | step`) or load (`0x28 | size code << 1 | step`), where `step`
/// (0 or 1) is `at`'s difference and the size code 0–3 stands for 1, 2, 4
/// or 8 bytes.
const SHORT_REGISTERS: u8 = 0x10;
const SHORT_WROTE: u8 = 0x20;
const SHORT_READ: u8 = 0x28;

fn size_code(size: u64) -> Option<u8> {
    match size {
        1 => Some(0),
        2 => Some(1),
        4 => Some(2),
        8 => Some(3),
        _ => None,
    }
}

/// `record`'s short tag, `step` after the thread's last `at`, if it has one.
fn short_tag(record: &StateRecord<'_>, step: u64) -> Option<u8> {
    let step = u8::try_from(step).ok().filter(|&s| s <= 1)?;
    match record {
        StateRecord::Registers { by_instruction: true, changes, .. } => {
            let count = changes.iter().filter(|(p, _)| (*p as usize) < piece::COUNT).count();
            (1..=7).contains(&count).then(|| SHORT_REGISTERS | step << 3 | count as u8)
        }
        StateRecord::Wrote { by_instruction: true, bytes, .. } => Some(SHORT_WROTE | size_code(bytes.len() as u64)? << 1 | step),
        StateRecord::Read { size, .. } => Some(SHORT_READ | size_code(*size)? << 1 | step),
        _ => None,
    }
}

/// Each piece of `changes` (those that exist) as its number and the
/// signed difference from its last value, which it becomes.
fn put_pieces(out: &mut Vec<u8>, last: &mut [u64; piece::COUNT], changes: &[(u8, u64)]) {
    for &(p, value) in changes.iter().filter(|(p, _)| (*p as usize) < piece::COUNT) {
        out.push(p);
        let slot = &mut last[p as usize];
        leb128::put_signed(out, value.wrapping_sub(*slot) as i64);
        *slot = value;
    }
}

impl StateRecord<'_> {
    /// When it took effect (0 for [`StateRecord::Thread`]).
    pub fn at(&self) -> u64 {
        match self {
            StateRecord::Thread(_) | StateRecord::End => 0,
            StateRecord::Scheduled { at }
            | StateRecord::Registers { at, .. }
            | StateRecord::Wrote { at, .. }
            | StateRecord::Read { at, .. }
            | StateRecord::Zeroed { at, .. }
            | StateRecord::Unmapped { at, .. }
            | StateRecord::Moved { at, .. }
            | StateRecord::FileMapped { at, .. }
            | StateRecord::SignalDelivered { at, .. } => *at,
        }
    }
}

/// A stream that cannot be read on from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("full-state stream at byte {offset}: {what}")]
pub struct StateError {
    /// Where in the stream.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

/// The records of a stream with the thread each is of, in order. A damaged
/// or cut record ends the iteration with an error naming its offset (the
/// differences cannot be followed past it).
///
/// A stream that promises its end mark ([`STATE_MAGIC`]) and ends
/// without it ends the iteration with an error at its last byte: it was
/// cut between two records.
pub fn state_records(stream: &[u8]) -> StateRecords<'_> {
    let marked = stream.starts_with(STATE_MAGIC);
    if !marked && !stream.starts_with(STATE_MAGIC_UNMARKED) {
        let error = StateError { offset: 0, what: "not a retrace full-state stream (no RTSTATE2 or RTSTATE1)".into() };
        return StateRecords { stream, at: stream.len(), deltas: DeltaState::default(), error: Some(error), marked: false, ended: true };
    }
    StateRecords { stream, at: STATE_MAGIC.len(), deltas: DeltaState::default(), error: None, marked, ended: false }
}

/// See [`state_records`].
#[derive(Debug, Clone)]
pub struct StateRecords<'a> {
    stream: &'a [u8],
    at: usize,
    deltas: DeltaState,
    error: Option<StateError>,
    /// The stream promises an end mark.
    marked: bool,
    /// The end mark was read (or its absence reported).
    ended: bool,
}

/// Where a reading of a stream stands ([`StateRecords::position`]): its
/// offset and the differences decoded so far, so that reading can go on
/// from there later ([`StateRecords::resume`]) without holding the stream
/// or reading it again from the start.
#[derive(Debug, Clone)]
pub struct StreamPosition {
    at: usize,
    deltas: DeltaState,
    marked: bool,
    ended: bool,
}

impl StreamPosition {
    /// The byte offset of the next record.
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl<'a> StateRecords<'a> {
    /// The byte offset of the next record.
    pub fn offset(&self) -> usize {
        self.at
    }

    /// Where this reading stands (nothing once it met an error).
    pub fn position(&self) -> StreamPosition {
        let at = if self.error.is_some() { self.stream.len() } else { self.at };
        StreamPosition { at, deltas: self.deltas.clone(), marked: self.marked, ended: self.ended }
    }

    /// Reads `stream` on from `position`, which a reading of the same
    /// stream gave.
    pub fn resume(stream: &'a [u8], position: &StreamPosition) -> Self {
        StateRecords { stream, at: position.at.min(stream.len()), deltas: position.deltas.clone(), error: None, marked: position.marked, ended: position.ended }
    }

    fn number(&mut self) -> Option<u64> {
        leb128::get(self.stream, &mut self.at)
    }

    fn signed(&mut self) -> Option<i64> {
        leb128::get_signed(self.stream, &mut self.at)
    }

    fn bytes(&mut self, n: u64) -> Option<&'a [u8]> {
        let end = self.at.checked_add(usize::try_from(n).ok()?)?;
        let bytes = self.stream.get(self.at..end)?;
        self.at = end;
        Some(bytes)
    }

    /// `n` pieces: each its number and the difference from its last value.
    fn pieces(&mut self, n: u64) -> Result<Vec<(u8, u64)>, &'static str> {
        if n > piece::COUNT as u64 {
            return Err("more register pieces than there are");
        }
        let mut changes = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let p = *self.stream.get(self.at).ok_or("cut short")?;
            self.at += 1;
            changes.push((p, self.piece_difference(p)?));
        }
        Ok(changes)
    }

    /// Piece `p`'s difference from its last value: its value now.
    fn piece_difference(&mut self, p: u8) -> Result<u64, &'static str> {
        let difference = self.signed().ok_or("cut short")?;
        let slot = self.deltas.thread().pieces.get_mut(p as usize).ok_or("register piece out of range")?;
        *slot = slot.wrapping_add(difference as u64);
        Ok(*slot)
    }

    /// A record in a compact form (tag 0x30–0x3f, 0x60–0x6f, 0x80–0xff).
    fn compact(&mut self, tag: u8) -> Result<StateRecord<'a>, &'static str> {
        let (step, pieces): (u64, &[u8]) = match tag {
            COMPACT_ONE_PIECE.. => (u64::from(tag >> 5 & 3), &[tag & 31]),
            COMPACT_WITH_FLAGS..=0x3f => (1, &[tag & 15, piece::RFLAGS]),
            _ => (1, &[]),
        };
        let thread = self.deltas.thread();
        let at = thread.at.checked_add(step).ok_or("position out of range")?;
        thread.at = at;
        if pieces.is_empty() {
            let value = thread.pieces[(tag & 15) as usize];
            let address = self.deltas.address.wrapping_add(self.signed().ok_or("cut short")? as u64);
            self.deltas.address = address;
            return Ok(StateRecord::Wrote { at, by_instruction: true, address, bytes: Cow::Owned(value.to_le_bytes().to_vec()) });
        }
        let mut changes = Vec::with_capacity(pieces.len());
        for &p in pieces {
            changes.push((p, self.piece_difference(p)?));
        }
        Ok(StateRecord::Registers { at, by_instruction: true, changes })
    }

    fn record(&mut self) -> Result<(u32, StateRecord<'a>), &'static str> {
        let tag = *self.stream.get(self.at).ok_or("cut short")?;
        self.at += 1;
        if self.ended {
            return Err("a record after the end mark");
        }
        if tag == b'T' {
            let tid = self.number().and_then(|t| u32::try_from(t).ok()).ok_or("thread record cut short or out of range")?;
            self.deltas.tid = tid;
            return Ok((tid, StateRecord::Thread(tid)));
        }
        if tag == b'E' {
            self.ended = true;
            return Ok((self.deltas.tid, StateRecord::End));
        }
        if matches!(tag, COMPACT_WITH_FLAGS..=0x3f | COMPACT_REGISTER_STORED..=0x6f | COMPACT_ONE_PIECE..) {
            let tid = self.deltas.tid;
            return Ok((tid, self.compact(tag)?));
        }
        if (STACK_ACCESS..=STACK_ACCESS + 3).contains(&tag) {
            let tid = self.deltas.tid;
            let thread = self.deltas.thread();
            let at = thread.at.checked_add(u64::from(tag & 1)).ok_or("position out of range")?;
            thread.at = at;
            let rsp = thread.pieces[7];
            let address = rsp.wrapping_add(self.signed().ok_or("cut short")? as u64);
            let record = if tag & 2 != 0 {
                StateRecord::Read { at, address, size: 8 }
            } else {
                StateRecord::Wrote { at, by_instruction: true, address, bytes: Cow::Borrowed(self.bytes(8).ok_or("cut short")?) }
            };
            return Ok((tid, record));
        }
        // A short tag stands for `R`, `W` or `D` with the step and the
        // count or size in it.
        let (kind, short) = match tag {
            SHORT_REGISTERS..SHORT_WROTE => (b'R', true),
            SHORT_WROTE..SHORT_READ => (b'W', true),
            SHORT_READ..=0x2f => (b'D', true),
            other => (other, false),
        };
        if !b"SRrWKDZUCFI".contains(&kind) {
            return Err("unknown record tag");
        }
        let cut = "cut short";
        let step = match (short, kind) {
            (true, b'R') => u64::from(tag >> 3 & 1),
            (true, _) => u64::from(tag & 1),
            (false, _) => self.number().ok_or(cut)?,
        };
        let tid = self.deltas.tid;
        let thread = self.deltas.thread();
        let at = thread.at.checked_add(step).ok_or("position out of range")?;
        thread.at = at;
        let record = match kind {
            b'S' => StateRecord::Scheduled { at },
            b'R' | b'r' => {
                let n = if short { u64::from(tag & 7) } else { self.number().ok_or(cut)? };
                StateRecord::Registers { at, by_instruction: kind == b'R', changes: self.pieces(n)? }
            }
            b'W' | b'K' | b'D' => {
                let address = self.deltas.address.wrapping_add(self.signed().ok_or(cut)? as u64);
                self.deltas.address = address;
                let size = if short { 1u64 << (tag >> 1 & 3) } else { self.number().ok_or(cut)? };
                if kind == b'D' {
                    StateRecord::Read { at, address, size }
                } else {
                    StateRecord::Wrote { at, by_instruction: kind == b'W', address, bytes: Cow::Borrowed(self.bytes(size).ok_or(cut)?) }
                }
            }
            b'Z' | b'U' => {
                let (start, length) = (self.number().ok_or(cut)?, self.number().ok_or(cut)?);
                if tag == b'Z' {
                    StateRecord::Zeroed { at, start, length }
                } else {
                    StateRecord::Unmapped { at, start, length }
                }
            }
            b'C' => StateRecord::Moved { at, from: self.number().ok_or(cut)?, to: self.number().ok_or(cut)?, length: self.number().ok_or(cut)? },
            b'I' => {
                let signal = self.number().and_then(|n| u32::try_from(n).ok()).ok_or("signal cut short or out of range")?;
                StateRecord::SignalDelivered { at, signal, ip: self.number().ok_or(cut)? }
            }
            _ => {
                let (start, length, offset) = (self.number().ok_or(cut)?, self.number().ok_or(cut)?, self.number().ok_or(cut)?);
                let n = self.number().ok_or(cut)?;
                StateRecord::FileMapped { at, start, length, offset, path: self.bytes(n).ok_or(cut)? }
            }
        };
        Ok((tid, record))
    }
}

impl<'a> Iterator for StateRecords<'a> {
    type Item = Result<(u32, StateRecord<'a>), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.error.take() {
            self.at = self.stream.len();
            return Some(Err(error));
        }
        if self.at >= self.stream.len() {
            if self.marked && !self.ended {
                self.ended = true;
                return Some(Err(StateError { offset: self.stream.len(), what: "the stream ends without its end mark: cut short".into() }));
            }
            return None;
        }
        let start = self.at;
        match self.record() {
            Ok(item) => Some(Ok(item)),
            Err(what) => {
                let tag = self.stream[start];
                self.at = self.stream.len();
                // (The error ends the reading: no end mark is looked for.)
                self.ended = true;
                Some(Err(StateError { offset: start, what: format!("record {:?}: {what}", tag as char) }))
            }
        }
    }
}

/// A signal's delivery, from a stream's [`StateRecord::SignalDelivered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The thread it was delivered to.
    pub tid: u32,
    /// Its steps completed then: the delivery comes before its step `at`
    /// (the handler's first instruction).
    pub at: u64,
    /// The signal's number.
    pub signal: u32,
    /// Where the thread was interrupted.
    pub ip: u64,
}

/// What a stream says of the order things happened in, besides state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The one order the threads ran in: each run of one thread as (tid,
    /// its first step, how many steps; `None`: to its end).
    pub runs: Vec<(u32, u64, Option<u64>)>,
    /// The signals delivered, in the order they were.
    pub deliveries: Vec<Delivery>,
}

/// The one order the threads ran in, from a stream's
/// [`StateRecord::Scheduled`] records, and where signals were delivered.
pub fn schedule(stream: &[u8]) -> Result<Schedule, StateError> {
    schedule_of(state_records(stream))
}

/// [`schedule`] of records read as the caller reads them (for one that
/// watches the reading's offset).
pub fn schedule_of<'a>(records: impl Iterator<Item = Result<(u32, StateRecord<'a>), StateError>>) -> Result<Schedule, StateError> {
    let mut schedule = Schedule::default();
    let runs = &mut schedule.runs;
    // Per thread, its latest run (its count is known once it runs again).
    let mut latest: HashMap<u32, usize> = HashMap::new();
    for item in records {
        match item? {
            (tid, StateRecord::Scheduled { at }) => {
                if let Some(&index) = latest.get(&tid) {
                    let run = &mut runs[index];
                    run.2 = Some(at.saturating_sub(run.1));
                }
                latest.insert(tid, runs.len());
                runs.push((tid, at, None));
            }
            (tid, StateRecord::SignalDelivered { at, signal, ip }) => schedule.deliveries.push(Delivery { tid, at, signal, ip }),
            _ => {}
        }
    }
    Ok(schedule)
}

/// Bytes per page of [`StateMachine`]'s memory.
const PAGE: u64 = 4096;

/// One page: its bytes and which of them are known.
#[derive(Debug, Clone)]
struct Page {
    bytes: Box<[u8; PAGE as usize]>,
    known: [u64; PAGE as usize / 64],
}

impl Default for Page {
    fn default() -> Self {
        Page { bytes: Box::new([0; PAGE as usize]), known: [0; PAGE as usize / 64] }
    }
}

/// A thread's register pieces as known, `changes` (piece, value) set in
/// them (a piece number past the last is no piece).
pub fn set_pieces(pieces: &mut [Option<u64>; piece::COUNT], changes: &[(u8, u64)]) {
    for &(p, value) in changes {
        if let Some(slot) = pieces.get_mut(p as usize) {
            *slot = Some(value);
        }
    }
}

/// The registers and memory a stream's records build, applied in the
/// order they took effect: what a reader replays forwards. A register or
/// byte no record gave is unknown (`None`), never a guess.
#[derive(Debug, Default, Clone)]
pub struct StateMachine {
    threads: HashMap<u32, Box<[Option<u64>; piece::COUNT]>>,
    memory: std::collections::BTreeMap<u64, Page>,
}

impl StateMachine {
    /// An empty machine: nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies thread `tid`'s `record`. A file mapping's bytes come from
    /// `file(path, offset, buf)`, which fills `buf` from the file at
    /// `offset` and returns how many bytes it could (the rest, up to the
    /// page end, reads as zeros as the kernel maps them; past it, unknown).
    pub fn apply(&mut self, tid: u32, record: &StateRecord<'_>, file: &mut dyn FnMut(&[u8], u64, &mut [u8]) -> usize) {
        match record {
            StateRecord::Thread(_) | StateRecord::End | StateRecord::Scheduled { .. } | StateRecord::Read { .. } | StateRecord::SignalDelivered { .. } => {}
            StateRecord::Registers { changes, .. } => set_pieces(self.threads.entry(tid).or_insert_with(|| Box::new([None; piece::COUNT])), changes),
            StateRecord::Wrote { address, bytes, .. } => self.write(*address, bytes),
            StateRecord::Zeroed { start, length, .. } => self.fill(*start, *length, Some(0)),
            StateRecord::Unmapped { start, length, .. } => self.fill(*start, *length, None),
            StateRecord::Moved { from, to, length, .. } => {
                let mut bytes = Vec::new();
                let mut at = 0;
                while at < *length {
                    let n = (*length - at).min(PAGE);
                    let mut chunk = vec![0; n as usize];
                    let known = self.read(from + at, &mut chunk);
                    chunk.truncate(known);
                    bytes.push((at, chunk));
                    at += n;
                }
                self.fill(*from, *length, None);
                self.fill(*to, *length, None);
                for (at, chunk) in bytes {
                    self.write(to + at, &chunk);
                }
            }
            StateRecord::FileMapped { start, length, offset, path, .. } => {
                self.fill(*start, *length, None);
                let mut at = 0;
                while at < *length {
                    let n = (*length - at).min(1 << 20);
                    let mut chunk = vec![0; n as usize];
                    let read = file(path, offset + at, &mut chunk).min(chunk.len());
                    // What the file lacks reads as zeros to the end of its page.
                    let end = if read < chunk.len() { (((start + at + read as u64) + PAGE - 1) / PAGE * PAGE - (start + at)).min(n) as usize } else { read };
                    self.write(start + at, &chunk[..end]);
                    if read < chunk.len() {
                        break;
                    }
                    at += n;
                }
            }
        }
    }

    /// Thread `tid`'s register `piece`, if known.
    pub fn register(&self, tid: u32, piece: u8) -> Option<u64> {
        *self.threads.get(&tid)?.get(piece as usize)?
    }

    /// Thread `tid`'s register pieces as known (by piece number).
    pub fn registers(&self, tid: u32) -> Option<&[Option<u64>; piece::COUNT]> {
        self.threads.get(&tid).map(|r| &**r)
    }

    /// The known bytes of `start..start + length`, as runs `(address,
    /// bytes)` in address order; visits only the pages that hold some.
    pub fn known_runs(&self, start: u64, length: u64) -> Vec<(u64, Vec<u8>)> {
        let end = start.saturating_add(length);
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        if length == 0 {
            return runs;
        }
        for (&number, page) in self.memory.range(start / PAGE..=(end - 1) / PAGE) {
            let base = number * PAGE;
            for offset in 0..PAGE as usize {
                let at = base + offset as u64;
                if at < start || at >= end || page.known[offset / 64] & (1 << (offset % 64)) == 0 {
                    continue;
                }
                match runs.last_mut() {
                    Some((run, bytes)) if *run + bytes.len() as u64 == at => bytes.push(page.bytes[offset]),
                    _ => runs.push((at, vec![page.bytes[offset]])),
                }
            }
        }
        runs
    }

    /// Reads memory at `address` into `buf`; returns how many bytes from
    /// the start are known.
    pub fn read(&self, address: u64, buf: &mut [u8]) -> usize {
        for (i, byte) in buf.iter_mut().enumerate() {
            let at = address.wrapping_add(i as u64);
            let Some(page) = self.memory.get(&(at / PAGE)) else { return i };
            let offset = (at % PAGE) as usize;
            if page.known[offset / 64] & (1 << (offset % 64)) == 0 {
                return i;
            }
            *byte = page.bytes[offset];
        }
        buf.len()
    }

    fn write(&mut self, address: u64, bytes: &[u8]) {
        for (i, &byte) in bytes.iter().enumerate() {
            let at = address.wrapping_add(i as u64);
            let page = self.memory.entry(at / PAGE).or_default();
            let offset = (at % PAGE) as usize;
            page.bytes[offset] = byte;
            page.known[offset / 64] |= 1 << (offset % 64);
        }
    }

    /// Makes `length` bytes at `start` all `value` (`None`: unknown).
    fn fill(&mut self, start: u64, length: u64, value: Option<u8>) {
        let end = start.saturating_add(length);
        let mut at = start;
        while at < end {
            let page_end = (at / PAGE + 1).saturating_mul(PAGE).min(end);
            let whole = at % PAGE == 0 && page_end - at == PAGE;
            match (value, whole) {
                (None, true) => {
                    self.memory.remove(&(at / PAGE));
                }
                (Some(byte), true) => {
                    let page = self.memory.entry(at / PAGE).or_default();
                    page.bytes.fill(byte);
                    page.known = [u64::MAX; PAGE as usize / 64];
                }
                _ => {
                    let page = self.memory.entry(at / PAGE).or_default();
                    for offset in (at % PAGE) as usize..(at % PAGE) as usize + (page_end - at) as usize {
                        match value {
                            Some(byte) => {
                                page.bytes[offset] = byte;
                                page.known[offset / 64] |= 1 << (offset % 64);
                            }
                            None => page.known[offset / 64] &= !(1 << (offset % 64)),
                        }
                    }
                }
            }
            at = page_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<StateRecord<'static>> {
        vec![
            StateRecord::Thread(0),
            StateRecord::Zeroed { at: 0, start: 0x7000, length: 0x1000 },
            StateRecord::Wrote { at: 0, by_instruction: false, address: 0x7ff0, bytes: Cow::Borrowed(b"stack") },
            StateRecord::FileMapped { at: 0, start: 0x400000, length: 0x2000, offset: 0, path: b"/bin/true" },
            StateRecord::Thread(42),
            StateRecord::Scheduled { at: 0 },
            StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, 5), (piece::RFLAGS, 0x202), (7, 0x7fff_0000)] },
            StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] },
            StateRecord::Wrote { at: 2, by_instruction: true, address: 0x7fef, bytes: Cow::Borrowed(&[1, 2, 3, 4, 5, 6, 7, 8]) },
            StateRecord::Read { at: 2, address: 0x600010, size: 4 },
            StateRecord::Thread(43),
            StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, u64::MAX)] },
            StateRecord::Thread(42),
            StateRecord::Scheduled { at: 3 },
            StateRecord::Registers { at: 9, by_instruction: true, changes: vec![(0, 0), (piece::xmm(3), 0x8000_0000_0000_0000)] },
            StateRecord::Moved { at: 9, from: 0x7000, to: 0x9000, length: 0x1000 },
            StateRecord::Unmapped { at: 9, start: 0x9000, length: 0x1000 },
            StateRecord::SignalDelivered { at: 9, signal: 10, ip: 0x417adb },
            StateRecord::Wrote { at: 9, by_instruction: false, address: 0x7fff_0000 - 0x240, bytes: Cow::Borrowed(&[0xaa; 16]) },
        ]
    }

    #[test]
    fn records_round_trip_with_their_threads_and_small_steps_take_few_bytes() {
        let records = sample();
        let mut writer = StateWriter::new();
        for record in &records {
            writer.push(record);
        }
        let bytes = writer.finish();
        let mut thread = 0;
        let expected: Vec<(u32, StateRecord)> = records
            .iter()
            .filter(|r| {
                // A thread record naming the thread already current is not written.
                if let StateRecord::Thread(tid) = r {
                    let changed = *tid != thread;
                    thread = *tid;
                    return changed;
                }
                true
            })
            .scan(0, |tid, r| {
                if let StateRecord::Thread(t) = r {
                    *tid = *t;
                }
                Some((*tid, r.clone()))
            })
            .collect();
        let mut read: Vec<(u32, StateRecord)> = state_records(&bytes).map(|r| r.unwrap()).collect();
        assert_eq!(read.pop(), Some((42, StateRecord::End)), "the end mark last");
        assert_eq!(read, expected);
        // An instruction's one register, one step on: a compact tag (the
        // step and the piece in it), one-byte difference; its 8-byte
        // store: tag, address difference, the bytes; its load: tag and
        // address difference.
        let mut small = StateWriter::new();
        small.push(&StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] });
        assert_eq!(small.take_bytes().len(), STATE_MAGIC.len() + 2);
        small.push(&StateRecord::Wrote { at: 1, by_instruction: true, address: 8, bytes: Cow::Borrowed(&[1; 8]) });
        small.push(&StateRecord::Read { at: 2, address: 16, size: 8 });
        assert_eq!(small.take_bytes().len(), 1 + 1 + 8 + 1 + 1);
        // A register and the flags, a step on: the tag and the two
        // differences; a store of rbx's value, a step on: the tag and the
        // address difference; the same store two steps on, or of a value
        // no register holds: the bytes.
        small.push(&StateRecord::Registers { at: 3, by_instruction: true, changes: vec![(1, 0x1234), (piece::RFLAGS, 0x44)] });
        assert_eq!(small.take_bytes().len(), 1 + 2 + 2);
        let rbx = 0x1234u64.to_le_bytes();
        small.push(&StateRecord::Wrote { at: 4, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) });
        assert_eq!(small.take_bytes().len(), 1 + 1);
        small.push(&StateRecord::Wrote { at: 6, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) });
        small.push(&StateRecord::Wrote { at: 7, by_instruction: true, address: 24, bytes: Cow::Borrowed(&[7; 8]) });
        assert_eq!(small.take_bytes().len(), (1 + 1 + 1 + 1 + 8) + (1 + 1 + 8));
        // One piece two and three steps on, or of a piece past 31: as
        // compact as the step allows.
        small.push(&StateRecord::Registers { at: 10, by_instruction: true, changes: vec![(7, 1)] });
        assert_eq!(small.take_bytes().len(), 1 + 1);
        small.push(&StateRecord::Registers { at: 11, by_instruction: true, changes: vec![(piece::xmm(1), 1)] });
        assert_eq!(small.take_bytes().len(), 1 + 1 + 1);
        // On the stack: an 8-byte store and load near rsp take the
        // difference from rsp (tag, one byte, the bytes), and leave the
        // last address where it was: the next load there is one byte on.
        small.push(&StateRecord::Registers { at: 12, by_instruction: true, changes: vec![(7, 0x7fff_0000)] });
        small.take_bytes();
        small.push(&StateRecord::Wrote { at: 12, by_instruction: true, address: 0x7fff_0000 - 8, bytes: Cow::Borrowed(&[5; 8]) });
        small.push(&StateRecord::Read { at: 13, address: 0x7fff_0000 - 8, size: 8 });
        assert_eq!(small.take_bytes().len(), (1 + 1 + 8) + (1 + 1));
        small.push(&StateRecord::Read { at: 13, address: 24, size: 8 });
        assert_eq!(small.take_bytes().len(), 1 + 1);
        // And every form reads back as written.
        let records = [
            StateRecord::Registers { at: 0, by_instruction: true, changes: vec![(7, 0x7fff_0000)] },
            StateRecord::Wrote { at: 0, by_instruction: true, address: 0x7fff_0000 - 8, bytes: Cow::Borrowed(&[5; 8]) },
            StateRecord::Read { at: 1, address: 0x7fff_0000 + 16, size: 8 },
            StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 3)] },
            StateRecord::Registers { at: 2, by_instruction: true, changes: vec![(1, 0x1234), (piece::RFLAGS, 0x44)] },
            StateRecord::Wrote { at: 3, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) },
            StateRecord::Wrote { at: 5, by_instruction: true, address: 24, bytes: Cow::Borrowed(&rbx) },
            StateRecord::Registers { at: 8, by_instruction: true, changes: vec![(31, u64::MAX)] },
            StateRecord::Registers { at: 9, by_instruction: true, changes: vec![(16, 2), (1, 5)] },
            StateRecord::Wrote { at: 10, by_instruction: true, address: 0, bytes: Cow::Borrowed(&[0; 8]) },
        ];
        let mut writer = StateWriter::new();
        for record in &records {
            writer.push(record);
        }
        let bytes = writer.finish();
        let read: Vec<StateRecord> = state_records(&bytes).map(|r| r.unwrap().1).filter(|r| *r != StateRecord::End).collect();
        assert_eq!(read, records);
        assert!(bytes[STATE_MAGIC.len()..].iter().any(|&tag| tag >= 0x80) && bytes.contains(&0x31) && bytes.contains(&0x61), "the compact forms were taken");
        assert!(bytes.contains(&STACK_ACCESS) && bytes.contains(&(STACK_ACCESS | 3)), "the stack forms were taken");
        // Eight pieces, or a step of more than one: the long form.
        let eight: Vec<(u8, u64)> = (0..8).map(|p| (p, 1)).collect();
        let records = [
            StateRecord::Registers { at: 3, by_instruction: true, changes: eight },
            StateRecord::Wrote { at: 5, by_instruction: true, address: 8, bytes: Cow::Borrowed(&[2; 3]) },
            StateRecord::Read { at: 5, address: 9, size: 16 },
        ];
        let mut long = StateWriter::new();
        for record in &records {
            long.push(record);
        }
        let bytes = long.finish();
        assert_eq!(bytes[STATE_MAGIC.len()], b'R');
        let read: Vec<StateRecord> = state_records(&bytes).map(|r| r.unwrap().1).filter(|r| *r != StateRecord::End).collect();
        assert_eq!(read, records);
        // A stream of before the end mark reads to where its bytes end.
        let mut unmarked = bytes[..bytes.len() - 1].to_vec();
        unmarked[..STATE_MAGIC.len()].copy_from_slice(STATE_MAGIC_UNMARKED);
        let read: Vec<StateRecord> = state_records(&unmarked).map(|r| r.unwrap().1).collect();
        assert_eq!(read, records);
    }

    #[test]
    fn reading_resumed_from_any_position_reads_what_follows_it() {
        let mut writer = StateWriter::new();
        for record in &sample() {
            writer.push(record);
        }
        let bytes = writer.finish();
        let all: Vec<(u32, StateRecord)> = state_records(&bytes).map(|r| r.unwrap()).collect();
        let mut records = state_records(&bytes);
        for k in 0..=all.len() {
            let position = records.position();
            let rest: Vec<(u32, StateRecord)> = StateRecords::resume(&bytes, &position).map(|r| r.unwrap()).collect();
            assert_eq!(rest, all[k..], "resumed after {k} records");
            records.next();
        }
    }

    #[test]
    fn the_machine_knows_what_records_gave_and_nothing_else() {
        let mut machine = StateMachine::new();
        let mut no_file = |_: &[u8], _: u64, _: &mut [u8]| 0;
        for (tid, record) in [
            (0, StateRecord::Zeroed { at: 0, start: 0x1000, length: 0x2000 }),
            (0, StateRecord::Wrote { at: 0, by_instruction: false, address: 0x1ffe, bytes: Cow::Borrowed(&[1, 2, 3, 4]) }),
            (7, StateRecord::Registers { at: 0, by_instruction: false, changes: vec![(0, 10), (piece::RFLAGS, 2)] }),
            (7, StateRecord::Registers { at: 1, by_instruction: true, changes: vec![(0, 11)] }),
        ] {
            machine.apply(tid, &record, &mut no_file);
        }
        assert_eq!((machine.register(7, 0), machine.register(7, piece::RFLAGS), machine.register(7, 1), machine.register(8, 0)), (Some(11), Some(2), None, None));
        let mut buf = [9u8; 8];
        assert_eq!(machine.read(0x1ffc, &mut buf), 8);
        assert_eq!(buf, [0, 0, 1, 2, 3, 4, 0, 0]);
        // Unmapped: unknown; moved: known where it went.
        machine.apply(0, &StateRecord::Moved { at: 1, from: 0x1000, to: 0x5000, length: 0x1000 }, &mut no_file);
        assert_eq!(machine.read(0x1000, &mut buf), 0);
        assert_eq!(machine.read(0x5ffc, &mut buf), 4);
        assert_eq!(&buf[..4], &[0, 0, 1, 2]);
        machine.apply(0, &StateRecord::Unmapped { at: 1, start: 0x2000, length: 1 }, &mut no_file);
        assert_eq!(machine.read(0x1fff, &mut buf[..2]), 0);
        // A file shorter than its mapping: zeros to its page's end, then unknown.
        let mut file = |path: &[u8], offset: u64, buf: &mut [u8]| {
            assert_eq!((path, offset), (&b"/data"[..], 0x10));
            buf[..3].copy_from_slice(b"abc");
            3
        };
        machine.apply(0, &StateRecord::FileMapped { at: 1, start: 0x9000, length: 0x2000, offset: 0x10, path: b"/data" }, &mut file);
        assert_eq!(machine.read(0x9000, &mut buf), 8);
        assert_eq!(&buf, b"abc\0\0\0\0\0");
        assert_eq!(machine.read(0x9ffe, &mut buf), 2);
        assert_eq!(machine.known_runs(0x9ffe, 0x10), vec![(0x9ffe, vec![0, 0])]);
        assert_eq!(machine.known_runs(0x5ffa, 8), vec![(0x5ffa, vec![0, 0, 0, 0, 1, 2])]);
    }

    #[test]
    fn the_schedule_is_each_threads_runs_in_order() {
        let mut writer = StateWriter::new();
        for (tid, at) in [(5, 0), (6, 0), (5, 10), (6, 4), (5, 12)] {
            writer.push(&StateRecord::Thread(tid));
            writer.push(&StateRecord::Scheduled { at });
            if tid == 6 {
                writer.push(&StateRecord::SignalDelivered { at: at + 1, signal: 10 + at as u32, ip: 0x1000 + at });
            }
        }
        let schedule = schedule(&writer.finish()).unwrap();
        assert_eq!(schedule.runs, vec![(5, 0, Some(10)), (6, 0, Some(4)), (5, 10, Some(2)), (6, 4, None), (5, 12, None)]);
        assert_eq!(schedule.deliveries, vec![Delivery { tid: 6, at: 1, signal: 10, ip: 0x1000 }, Delivery { tid: 6, at: 5, signal: 14, ip: 0x1004 }]);
    }

    #[test]
    fn damage_is_reported_at_its_offset_and_ends_the_records() {
        let mut writer = StateWriter::new();
        for record in &sample() {
            writer.push(record);
        }
        let bytes = writer.finish();
        // A cut anywhere, between two records too, is one error, the last
        // item, at or before the cut.
        for cut in STATE_MAGIC.len()..bytes.len() {
            let items: Vec<_> = state_records(&bytes[..cut]).collect();
            let errors: Vec<_> = items.iter().filter_map(|r| r.as_ref().err()).collect();
            assert!(errors.len() == 1 && items.last().is_some_and(|r| r.is_err()), "cut at {cut}");
            assert!(errors[0].offset <= cut, "cut at {cut}: {}", errors[0]);
        }
        assert!(state_records(&bytes).all(|r| r.is_ok()));
        // Anything after the end mark is an error there.
        let mut longer = bytes.clone();
        longer.extend([b'S', 0]);
        let errors: Vec<_> = state_records(&longer).filter_map(Result::err).collect();
        assert_eq!(errors.iter().map(|e| e.offset).collect::<Vec<_>>(), [bytes.len()]);
        let mut bad = bytes.clone();
        bad[STATE_MAGIC.len()] = 0x01;
        let error = state_records(&bad).next().unwrap().unwrap_err();
        assert_eq!(error.offset, STATE_MAGIC.len());
        assert!(state_records(b"RTVGLOG2").next().unwrap().is_err());
    }
}
