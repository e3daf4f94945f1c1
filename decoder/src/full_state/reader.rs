//! A stream's records: [`state_records`], resumable from a
//! [`StreamPosition`].

use std::borrow::Cow;

use super::deltas::DeltaState;
use super::forms::*;
use super::record::{piece, StateRecord, STATE_MAGIC, STATE_MAGIC_UNMARKED};
use crate::leb128;

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

    /// The current thread's `at`, `step` on from its last record's.
    fn step_on(&mut self, step: u64) -> Result<u64, &'static str> {
        let thread = self.deltas.thread();
        thread.at = thread.at.checked_add(step).ok_or("position out of range")?;
        Ok(thread.at)
    }

    /// A record in a compact form (tag 0x30–0x3f, 0x60–0x6f, 0x80–0xff).
    fn compact(&mut self, tag: u8) -> Result<StateRecord<'a>, &'static str> {
        let (step, pieces): (u64, &[u8]) = match tag {
            COMPACT_ONE_PIECE.. => (u64::from(tag >> 5 & 3), &[tag & 31]),
            COMPACT_WITH_FLAGS..=0x3f => (1, &[tag & 15, piece::RFLAGS]),
            _ => (1, &[]),
        };
        let at = self.step_on(step)?;
        if pieces.is_empty() {
            let value = self.deltas.thread().pieces[(tag & 15) as usize];
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
            let at = self.step_on(u64::from(tag & 1))?;
            let rsp = self.deltas.thread().pieces[piece::RSP as usize];
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
        if !b"SRrWKDZUPCFI".contains(&kind) {
            return Err("unknown record tag");
        }
        let cut = "cut short";
        let step = match (short, kind) {
            (true, b'R') => u64::from(tag >> 3 & 1),
            (true, _) => u64::from(tag & 1),
            (false, _) => self.number().ok_or(cut)?,
        };
        let tid = self.deltas.tid;
        let at = self.step_on(step)?;
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
            b'P' => {
                let (start, length) = (self.number().ok_or(cut)?, self.number().ok_or(cut)?);
                StateRecord::Protected { at, start, length, prot: *self.bytes(1).ok_or(cut)?.first().ok_or(cut)? }
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
