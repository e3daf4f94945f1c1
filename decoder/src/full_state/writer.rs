//! Records into a stream: [`StateWriter`].

use super::deltas::DeltaState;
use super::forms::{compact_form, put_pieces, short_tag, stack_form, Compact};
use super::record::{piece, StateRecord, STATE_MAGIC};
use crate::leb128;

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
            StateRecord::Protected { .. } => b'P',
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
        if let Some((tag, address)) = stack_form(record, step, thread.pieces[piece::RSP as usize], deltas.address) {
            out.push(tag);
            leb128::put_signed(out, address.wrapping_sub(thread.pieces[piece::RSP as usize]) as i64);
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
            StateRecord::Protected { start, length, prot, .. } => {
                leb128::put(out, *start);
                leb128::put(out, *length);
                out.push(*prot);
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
