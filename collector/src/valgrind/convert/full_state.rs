//! The full-state records of a log (registers, writes, reads, mappings)
//! written into the image's full-state stream, a REP instruction's held
//! until its last iteration.

use super::*;

/// A register, write or read record as a REP's held records keep it (its
/// bytes copied out of the log); `None` for any other.
fn held(record: StateRecord<'_>) -> Option<StateRecord<'static>> {
    Some(match record {
        StateRecord::Registers { at, by_instruction, changes } => StateRecord::Registers { at, by_instruction, changes },
        StateRecord::Wrote { at, by_instruction, address, bytes } => StateRecord::Wrote { at, by_instruction, address, bytes: bytes.into_owned().into() },
        StateRecord::Read { at, address, size } => StateRecord::Read { at, address, size },
        _ => return None,
    })
}

impl LogConverter {
    /// Writes a full-state record of thread `tid` (0: before any ran).
    pub(super) fn state_record(&mut self, tid: u32, record: StateRecord<'_>) {
        let Some(state) = self.state.as_mut() else { return };
        state.push(&StateRecord::Thread(tid));
        state.push(&record);
        let Some((folder, at)) = &self.spill else { return };
        if state.pending_len() >= *at {
            let stored = self.state_stored.store(folder, |n| format!("state.{n}.rtstate"), state.take_bytes(), "the full state");
            self.stored(stored);
        }
    }

    /// A stream could not be stored: the error is kept for the user, and
    /// what is left stays in memory.
    pub(super) fn stored(&mut self, result: Result<(), String>) {
        if let Err(error) = result {
            self.spill_error.get_or_insert(error);
            self.spill = None;
        }
    }

    /// A state record the tool wrote inside a superblock (an instruction's
    /// registers, writes and reads).
    pub(super) fn feed_instruction_state(&mut self, record: &LogRecord<'_>) {
        let index = match record {
            LogRecord::Registers { index, .. } | LogRecord::Wrote { index, .. } | LogRecord::Read { index, .. } => *index,
            _ => return,
        };
        let Some((tid, at)) = self.at_instruction(index) else { return };
        let state = match *record {
            LogRecord::Registers { changes, .. } => StateRecord::Registers { at, by_instruction: true, changes: changes.iter().collect() },
            LogRecord::Wrote { address, bytes, .. } => StateRecord::Wrote { at, by_instruction: true, address, bytes: bytes.into() },
            LogRecord::Read { address, size, .. } => StateRecord::Read { at, address, size: u64::from(size) },
            _ => return,
        };
        let of_rep = self.state.is_some() && self.open_instruction(index).is_some_and(|insn| insn.rep);
        // (Another instruction's, or another run of a REP: the one held
        // completed.)
        if !of_rep || self.rep_records.as_ref().is_some_and(|(held, records)| *held != tid || records.first().is_some_and(|r| r.at() != at)) {
            self.flush_rep(false);
        }
        if of_rep {
            self.rep_records.get_or_insert_with(|| (tid, Vec::new())).1.extend(held(state));
        } else {
            self.state_record(tid, state);
        }
    }

    /// Instruction `index` of the superblock entered last.
    pub(super) fn open_instruction(&self, index: u16) -> Option<Instruction> {
        let (id, _) = self.open?;
        let superblock = self.superblocks.get(id as usize)?.as_ref()?;
        superblock.instructions.get(index as usize).copied()
    }

    /// Writes the held records of a REP: as they are when it completed,
    /// one step earlier when it was `interrupted` (before it, it did not
    /// count).
    pub(super) fn flush_rep(&mut self, interrupted: bool) {
        let Some((tid, records)) = self.rep_records.take() else { return };
        for mut record in records {
            if interrupted {
                match &mut record {
                    StateRecord::Registers { at, .. } | StateRecord::Wrote { at, .. } | StateRecord::Read { at, .. } => *at = at.saturating_sub(1),
                    _ => {}
                }
            }
            self.state_record(tid, record);
        }
    }

    /// A state record the tool wrote between superblocks (what changed
    /// other than by an instruction).
    pub(super) fn feed_other_state(&mut self, record: &LogRecord<'_>) {
        // The running thread and its steps (none at the start: thread 0).
        let (current, steps) = self.current.and_then(|i| self.threads.get(i)).map_or((0, 0), |t| (t.tid, t.steps));
        let (tid, state) = match *record {
            LogRecord::ThreadRegisters { number, changes } => {
                let Some((tid, at)) = self.at_thread(number) else { return };
                (tid, StateRecord::Registers { at, by_instruction: false, changes: changes.iter().collect() })
            }
            LogRecord::KernelWrote { number, address, bytes } => {
                let (tid, at) = if number == 0 { (0, 0) } else { self.at_thread(number).unwrap_or((current, steps)) };
                (tid, StateRecord::Wrote { at, by_instruction: false, address, bytes: bytes.into() })
            }
            LogRecord::Zeroed { start, length } => (current, StateRecord::Zeroed { at: steps, start, length }),
            LogRecord::Unmapped { start, length } => (current, StateRecord::Unmapped { at: steps, start, length }),
            // (Not Valgrind's own text: the program never sees it.)
            LogRecord::Protected { start, length, .. } if self.mappings.iter().any(|m| is_valgrinds_own(&m.4) && m.0 <= start && start.saturating_add(length) <= m.0 + m.1) => return,
            LogRecord::Protected { start, length, prot } => (current, StateRecord::Protected { at: steps, start, length, prot }),
            LogRecord::Moved { from, to, length } => (current, StateRecord::Moved { at: steps, from, to, length }),
            LogRecord::Mapping { path, .. } if is_valgrinds_own(&String::from_utf8_lossy(path)) => return,
            LogRecord::Mapping { start, length, offset, path, .. } => (current, StateRecord::FileMapped { at: steps, start, length, offset, path }),
            _ => return,
        };
        // A thread's registers or memory changed while its REP runs (a
        // signal about to be delivered between iterations): held with the
        // REP's records, placed as they are.
        if let Some((_, records)) = self.rep_records.as_mut().filter(|(held, _)| *held == tid) {
            if matches!(state, StateRecord::Registers { .. } | StateRecord::Wrote { .. }) {
                records.extend(held(state));
                return;
            }
        }
        self.flush_rep(false);
        self.state_record(tid, state);
    }
}
