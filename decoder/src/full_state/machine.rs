//! A stream replayed forwards: [`StateMachine`].

use std::collections::HashMap;

use super::record::{piece, StateRecord};

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
            StateRecord::Thread(_) | StateRecord::End | StateRecord::Scheduled { .. } | StateRecord::Read { .. } | StateRecord::SignalDelivered { .. } | StateRecord::Protected { .. } => {}
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
