//! The log turned into Intel PT: [`LogConverter`] replays each superblock
//! run through the thread's [`ThreadPtWriter`], a way out's straight run
//! written at once; [`convert_log`] and [`convert_stream`] feed it a whole
//! log or one read as it arrives.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use retrace_decoder::full_state::{StateRecord, StateWriter};
use retrace_decoder::history::AddressHasher;
use retrace_decoder::x86::FlowKind;

use super::log::{log_records, parse_record, LogError, LogRecord, Parsed, ENTERED_NEXT, LOG_MAGIC};
use crate::process::LoadedModule;
use crate::pt_writer::{ThreadPtWriter, DEFAULT_PSB_PERIOD};
use crate::recording::{FullStateStream, ImageRecording, ThreadRecording};

mod full_state;
mod superblocks;
mod threads;

use superblocks::{Leaving, Superblock};
use threads::{instruction, Instruction, StoredStream, ThreadState, SYNCHRONOUS_SIGNALS};

/// Turns one log (one program image of one process) into per-thread Intel
/// PT streams and the modules the program mapped.
pub struct LogConverter {
    /// By id (the tool numbers them from 0).
    superblocks: Vec<Option<Superblock>>,
    /// The latest translation at each address.
    by_address: HashMap<u64, u32, std::hash::BuildHasherDefault<AddressHasher>>,
    /// Where the program goes next, when one address (as the tool predicts).
    predicted: Option<u64>,
    threads: Vec<ThreadState>,
    /// Index in `threads` by the tool's thread number.
    numbers: BTreeMap<u32, usize>,
    current: Option<usize>,
    /// The superblock and its way out that `predicted` is where of (the
    /// id there is cached in it).
    predicted_by: Option<(u32, usize)>,
    /// Bumped when an address is translated again (cached successors go).
    generation: u32,
    /// The superblock entered last (its id) and the way it left by (0 its
    /// end, until the log says otherwise), until its instructions are
    /// written.
    open: Option<(u32, usize)>,
    mappings: Vec<(u64, u64, u64, u8, String)>,
    psb_period: usize,
    keep_instruction_log: bool,
    undecodable: u64,
    /// Instructions to convert at most (all threads together), and how many
    /// were.
    limit: Option<u64>,
    converted: u64,
    /// The limit was reached (here or in the tool).
    limited: bool,
    /// Where the program ended, with the running thread there (the log's
    /// last record).
    ended_at: Option<u64>,
    /// Where threads' streams are stored once they pass `spill_bytes`
    /// (memory stays bounded however long the run).
    spill: Option<(PathBuf, usize)>,
    /// A stream that could not be stored.
    spill_error: Option<String>,
    /// Superblocks' straight runs are written at once (else instruction by
    /// instruction, as tests compare).
    pub(super) fast: bool,
    /// Where instructions converted are counted for a progress display
    /// (with how many of this converter's were counted there).
    progress: Option<(Arc<std::sync::atomic::AtomicU64>, u64)>,
    /// Full state: the stream written from the log's state records, and
    /// where it is stored as it grows.
    state: Option<StateWriter>,
    state_stored: StoredStream,
    /// Full state: the records of the REP instruction running (its
    /// thread, and its iterations' records, placed after it), held until
    /// it completes or is interrupted between iterations (then they are
    /// the state the interruption sees, and the REP is not counted).
    rep_records: Option<(u32, Vec<StateRecord<'static>>)>,
}

impl std::fmt::Debug for LogConverter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogConverter").field("superblocks", &self.superblocks.len()).field("threads", &self.threads.len()).finish_non_exhaustive()
    }
}

impl LogConverter {
    /// A converter writing a PSB every `psb_period` bytes; with
    /// `keep_instruction_log`, each thread's instruction addresses are kept.
    pub fn new(psb_period: usize, keep_instruction_log: bool) -> Self {
        LogConverter {
            superblocks: Vec::new(),
            by_address: HashMap::default(),
            predicted: None,
            threads: Vec::new(),
            numbers: BTreeMap::new(),
            current: None,
            predicted_by: None,
            generation: 0,
            open: None,
            mappings: Vec::new(),
            psb_period,
            keep_instruction_log,
            undecodable: 0,
            limit: None,
            converted: 0,
            limited: false,
            ended_at: None,
            spill: None,
            spill_error: None,
            fast: true,
            progress: None,
            state: None,
            state_stored: StoredStream::default(),
            rep_records: None,
        }
    }

    /// Writes a full-state stream from the log's state records (a log the
    /// tool wrote with `--retrace-full=yes`).
    pub fn with_full_state(mut self, full: bool) -> Self {
        self.state = full.then(StateWriter::new);
        self
    }

    /// The thread running and its step count after instruction `index` of
    /// the superblock entered last (counted as the trace counts: a REP
    /// instruction's next iteration is the same instruction, an
    /// undecodable one is none).
    fn at_instruction(&self, index: u16) -> Option<(u32, u64)> {
        let (id, _) = self.open?;
        let superblock = self.superblocks.get(id as usize)?.as_ref()?;
        let thread = self.threads.get(self.current?)?;
        let last = (index as usize).min(superblock.instructions.len().checked_sub(1)?);
        // As `ThreadState::executed` counts: a REP instruction right after
        // itself is its next iteration (VEX unrolls a REP's superblock,
        // which jumps to itself, into up to eight iterations in one), and
        // an undecodable instruction is none and ends what came before.
        let mut previous = thread.pending.map(|p| p.ip);
        let mut steps = thread.steps;
        for insn in &superblock.instructions[..=last] {
            if insn.info.is_none() {
                previous = None;
                continue;
            }
            if !(insn.rep && previous == Some(insn.ip)) {
                steps += 1;
            }
            previous = Some(insn.ip);
        }
        // (The REP pending from the superblock before is this one's first
        // instruction, not counted again.)
        Some((thread.tid, steps))
    }

    /// The thread the tool numbers `number` (the running one when it
    /// does not know it) and its steps completed.
    fn at_thread(&self, number: u32) -> Option<(u32, u64)> {
        let index = self.numbers.get(&number).copied().or(self.current)?;
        let thread = self.threads.get(index)?;
        Some((thread.tid, thread.steps))
    }

    /// Stores each thread's stream in `folder` whenever `bytes` of it are
    /// in memory.
    pub fn with_spill(mut self, folder: Option<PathBuf>, bytes: usize) -> Self {
        self.spill = folder.map(|f| (f, bytes.max(1)));
        self
    }

    fn store(&mut self, index: usize) {
        let Some((folder, _)) = &self.spill else { return };
        let thread = &mut self.threads[index];
        let tid = thread.tid;
        let stored = thread.stored.store(folder, |n| format!("{tid}.{n}.pt"), thread.writer.take_written(), "the trace");
        self.stored(stored);
    }

    /// Counts the instructions converted in `counter` as the log is read
    /// (converters of several images can share one).
    pub fn with_progress(mut self, counter: Option<Arc<std::sync::atomic::AtomicU64>>) -> Self {
        self.progress = counter.map(|c| (c, 0));
        self
    }

    /// Adds the instructions converted since the last call to the progress
    /// counter.
    fn publish_progress(&mut self) {
        if let Some((counter, published)) = self.progress.as_mut() {
            counter.fetch_add(self.converted - *published, Ordering::Relaxed);
            *published = self.converted;
        }
    }

    /// Converts at most `limit` instructions (all threads together); the
    /// rest of the log is left out.
    pub fn with_limit(mut self, limit: Option<u64>) -> Self {
        self.limit = limit;
        self
    }

    /// The instruction limit was reached.
    pub fn limited(&self) -> bool {
        self.limited
    }

    fn into_converted(mut self, mut warnings: Vec<String>) -> ConvertedLog {
        warnings.extend(self.spill_error.take());
        let (limited, ended_at) = (self.limited, self.ended_at);
        let (image, undecodable) = self.finish();
        ConvertedLog { image, undecodable, warnings, limited, ended_at }
    }

    /// Instructions converted so far, all threads.
    pub fn instructions(&self) -> u64 {
        self.threads.iter().map(|t| t.writer.instructions()).sum()
    }

    fn thread(&mut self) -> Option<&mut ThreadState> {
        self.threads.get_mut(self.current?)
    }

    fn enter(&mut self, id: u32) -> Result<(), String> {
        let superblock = self.superblocks.get(id as usize).and_then(Option::as_ref).ok_or_else(|| format!("superblock {id} entered before it was translated"))?;
        self.open = Some((id, 0));
        self.predicted = superblock.ways[0].to;
        self.predicted_by = Some((id, 0));
        Ok(())
    }

    /// The superblock at the predicted address (its id cached in the way
    /// out that predicted it).
    fn predicted_id(&mut self) -> Result<u32, String> {
        let at = self.predicted.ok_or("a superblock entered as predicted where nothing was")?;
        let way = self.predicted_by.and_then(|(by, way)| self.superblocks.get(by as usize)?.as_ref()?.ways.get(way));
        if let Some((id, generation)) = way.and_then(|way| way.to_id.get()) {
            if generation == self.generation {
                return Ok(id);
            }
        }
        let id = *self.by_address.get(&at).ok_or_else(|| format!("no superblock translated at {at:#x}"))?;
        if let Some(way) = way {
            way.to_id.set(Some((id, self.generation)));
        }
        Ok(id)
    }

    /// The open superblock leaves by its way out `way` (as the log says).
    fn leave(&mut self, way: usize) -> Result<(), String> {
        let Some((id, left)) = self.open.as_mut() else {
            // (Nothing to leave: a damaged log; what follows cannot be
            // predicted.)
            self.predicted = None;
            self.predicted_by = None;
            return Ok(());
        };
        let id = *id;
        let ways = self.superblocks[id as usize].as_ref().map_or(0, |sb| sb.ways.len());
        if way >= ways || *left != 0 {
            return Err(format!("superblock {id} left by its way out {way} of {ways}"));
        }
        *left = way;
        self.predicted = self.superblocks[id as usize].as_ref().and_then(|sb| sb.ways[way].to);
        self.predicted_by = Some((id, way));
        Ok(())
    }

    /// The open superblock is closed: its instructions that ran are the
    /// thread's.
    fn close(&mut self, leaving: Leaving) {
        let Some((id, way)) = self.open.take() else { return };
        let Some(superblock) = self.superblocks[id as usize].as_ref() else { return };
        let way = &superblock.ways[way];
        let (mut end, mut run) = match leaving {
            Leaving::AsLeft => (way.end as usize, way.straight.as_ref().map(|run| (run, false))),
            Leaving::IntoNext => (way.end as usize, way.closed.as_ref().map(|run| (run, true)).or(way.straight.as_ref().map(|run| (run, false)))),
            Leaving::After(end) => (end.min(superblock.instructions.len()), None),
        };
        if let Some(limit) = self.limit {
            let room = limit.saturating_sub(self.converted);
            if (end as u64) >= room {
                end = room as usize;
                self.limited = true;
                run = None;
            }
        }
        self.converted += end as u64;
        let mut undecodable = 0;
        if let Some(index) = self.current {
            let thread = &mut self.threads[index];
            let instructions = &superblock.instructions[..end];
            match run {
                Some((run, closed)) if end > 0 && self.fast => thread.run_straight(instructions, run, closed),
                _ => thread.run(instructions, &mut undecodable),
            }
            if self.spill.as_ref().is_some_and(|(_, at)| thread.writer.unwritten_len() >= *at) {
                self.store(index);
            }
        }
        self.undecodable += undecodable;
    }

    /// Takes the one-byte records at the start of `bytes` (the superblock
    /// at the predicted address was entered, and left as the byte says)
    /// while each way out is a straight run into a superblock looked up
    /// before: the loop most of a log is. Returns how many it took (the
    /// rest, and anything else, goes through [`Self::feed`]).
    pub fn entered_next_run(&mut self, bytes: &[u8]) -> usize {
        let (Some((mut id, mut way)), Some(index), None, None, true, false) = (self.open, self.current, self.limit, &self.spill_error, self.fast, self.limited) else {
            return 0;
        };
        if self.predicted_by != Some((id, way)) {
            return 0;
        }
        let thread = &mut self.threads[index];
        let spill_at = self.spill.as_ref().map_or(usize::MAX, |(_, at)| *at);
        let mut taken = 0;
        for &byte in bytes {
            if byte & ENTERED_NEXT == 0 {
                break;
            }
            let Some(superblock) = self.superblocks[id as usize].as_ref() else { break };
            let out = &superblock.ways[way];
            let (Some(run), Some((next, generation))) = (&out.closed, out.to_id.get()) else { break };
            let next_way = (byte & !ENTERED_NEXT) as usize;
            if generation != self.generation || self.superblocks[next as usize].as_ref().is_none_or(|sb| next_way >= sb.ways.len()) {
                break;
            }
            thread.run_straight(&superblock.instructions[..out.end as usize], run, true);
            self.converted += out.end as u64;
            (id, way) = (next, next_way);
            taken += 1;
            if thread.writer.unwritten_len() >= spill_at {
                break;
            }
        }
        if taken > 0 {
            self.open = Some((id, way));
            self.predicted = self.superblocks[id as usize].as_ref().and_then(|sb| sb.ways[way].to);
            self.predicted_by = Some((id, way));
            if self.threads[index].writer.unwritten_len() >= spill_at {
                self.store(index);
            }
        }
        taken
    }

    /// The most frequent record, one byte: the superblock at the predicted
    /// address was entered and left by `way`.
    pub fn entered_next(&mut self, way: u8) -> Result<(), String> {
        if self.limited {
            return Ok(());
        }
        let next = self.predicted_id()?;
        self.close(Leaving::IntoNext);
        self.enter(next)?;
        if way != 0 {
            self.leave(way as usize)?;
        }
        Ok(())
    }

    /// Takes one record.
    pub fn feed(&mut self, record: LogRecord<'_>) -> Result<(), String> {
        if self.limited {
            return Ok(());
        }
        match record {
            LogRecord::LeftAt { exit } => return self.leave(exit as usize + 1),
            LogRecord::EnteredNext { way } => return self.entered_next(way),
            // (Inside the superblock entered last: it stays open.)
            LogRecord::Registers { .. } | LogRecord::Wrote { .. } | LogRecord::Read { .. } => {
                self.feed_instruction_state(&record);
                return Ok(());
            }
            _ => {}
        }
        // Whatever else happens in the program ends a REP's run (a signal,
        // the thread's or the program's end, looks at how).
        if !matches!(record, LogRecord::Superblock { .. } | LogRecord::Entered { .. } | LogRecord::Signal { .. } | LogRecord::ThreadEnd { .. } | LogRecord::Final(_) | LogRecord::Process(_) | LogRecord::ThreadRegisters { .. } | LogRecord::KernelWrote { .. }) {
            self.flush_rep(false);
        }
        // A fault stops a superblock at the faulting instruction: what
        // follows it there never ran (and neither did it).
        let stopped_at = match record {
            LogRecord::Signal { signal, ip } if SYNCHRONOUS_SIGNALS.contains(&signal) => Some(ip),
            LogRecord::Final(ip) => Some(ip),
            LogRecord::ThreadEnd { number, ip } if self.numbers.get(&number).copied() == self.current && self.current.is_some() => Some(ip),
            _ => None,
        };
        if let Some(ip) = stopped_at {
            // (An exit system call does not fault: the end may name it.)
            let faulted = |i: &Instruction| i.ip == ip && !i.info.is_some_and(|info| info.kind == FlowKind::Syscall);
            // (Only in a superblock that has not left yet.)
            let open = self.open.filter(|&(_, way)| way == 0).and_then(|(id, _)| self.superblocks[id as usize].as_ref());
            if let Some(index) = open.and_then(|sb| sb.instructions.iter().position(faulted)) {
                self.close(Leaving::After(index));
            }
        }
        self.close(Leaving::AsLeft);
        match record {
            LogRecord::Superblock { id, entry, next, instructions, exits } => {
                let mut decoded: Vec<Instruction> = instructions.iter().map(|(ip, bytes)| instruction(*ip, bytes)).collect();
                let mut end = decoded.len();
                for (i, insn) in decoded.iter_mut().enumerate().rev() {
                    if !insn.plain {
                        end = i;
                    }
                    insn.run_end = end as u16;
                }
                // The tool numbers superblocks as it translates them.
                let index = id as usize;
                if index > self.superblocks.len() {
                    return Err(format!("superblock {id} translated after only {} others", self.superblocks.len()));
                }
                if index == self.superblocks.len() {
                    self.superblocks.push(None);
                }
                self.superblocks[index] = Some(Superblock::new(decoded, next, &exits));
                if self.by_address.insert(entry, id).is_some() {
                    self.generation += 1;
                }
            }
            LogRecord::Entered { id, way } => {
                self.enter(id)?;
                if way != 0 {
                    self.leave(way as usize)?;
                }
            }
            LogRecord::LeftAt { .. } | LogRecord::EnteredNext { .. } => unreachable!("handled above"),
            LogRecord::Foreign => {
                self.predicted = None;
                self.predicted_by = None;
                self.flush_rep(false);
                if let Some(thread) = self.thread() {
                    thread.interrupted(None);
                }
            }
            LogRecord::Thread { number, tid } => {
                let (psb_period, keep) = (self.psb_period, self.keep_instruction_log);
                let threads = &mut self.threads;
                let index = *self.numbers.entry(number).or_insert_with(|| {
                    threads.push(ThreadState { tid, writer: ThreadPtWriter::new(psb_period).without_timestamps(), stored: StoredStream::default(), pending: None, log: keep.then(Vec::new), steps: 0 });
                    threads.len() - 1
                });
                self.threads[index].tid = tid;
                self.current = Some(index);
                self.predicted = None;
                self.predicted_by = None;
                let at = self.threads[index].steps;
                self.state_record(tid, StateRecord::Scheduled { at });
            }
            LogRecord::Signal { signal, ip } => {
                self.predicted = None;
                self.predicted_by = None;
                let rep_interrupted = self.thread().is_some_and(|thread| thread.interrupted(Some(ip)));
                // A REP's iterations so far are the state the delivery
                // interrupts (and the REP runs on after the handler).
                self.flush_rep(rep_interrupted);
                // What the delivery writes (the frame, the handler's
                // registers) comes after: a replay can stand between.
                if let Some((tid, at)) = self.current.and_then(|i| self.threads.get(i)).map(|t| (t.tid, t.steps)) {
                    self.state_record(tid, StateRecord::SignalDelivered { at, signal, ip });
                }
            }
            LogRecord::ThreadEnd { number, ip } => {
                if let Some(&index) = self.numbers.get(&number) {
                    let thread = &mut self.threads[index];
                    let ends_it = thread.pending.and_then(|p| p.info).is_some_and(|i| matches!(i.kind, FlowKind::Syscall | FlowKind::FarTransfer));
                    let rep_interrupted = if ends_it {
                        thread.ended();
                        false
                    } else {
                        thread.interrupted(Some(ip))
                    };
                    let (tid, at) = (thread.tid, thread.steps);
                    self.flush_rep(rep_interrupted);
                    // The running thread ended other than by its exit: a
                    // fatal signal stopped it at `ip` (a fault there, or a
                    // kill). A replay stands there, at that signal, last;
                    // the log does not name it (the program's end does).
                    if !ends_it && self.current == Some(index) {
                        self.state_record(tid, StateRecord::SignalDelivered { at, signal: 0, ip });
                    }
                }
                self.flush_rep(false);
            }
            LogRecord::Mapping { start, length, offset, prot, path } => {
                self.mappings.push((start, length, offset, prot, String::from_utf8_lossy(path).into_owned()));
                self.feed_other_state(&record);
            }
            LogRecord::ThreadRegisters { .. } | LogRecord::KernelWrote { .. } | LogRecord::Zeroed { .. } | LogRecord::Unmapped { .. } | LogRecord::Protected { .. } | LogRecord::Moved { .. } => {
                self.feed_other_state(&record);
            }
            LogRecord::Registers { .. } | LogRecord::Wrote { .. } | LogRecord::Read { .. } => unreachable!("handled above"),
            LogRecord::Limit => self.limited = true,
            LogRecord::Process(_) => {}
            LogRecord::Final(ip) => {
                self.ended_at = Some(ip);
                // The running thread stopped before `ip` unless its last
                // instruction ended it (an exit system call).
                let mut rep_interrupted = false;
                if let Some(thread) = self.thread() {
                    let ends_it = thread.pending.and_then(|p| p.info).is_some_and(|i| matches!(i.kind, FlowKind::Syscall | FlowKind::FarTransfer));
                    if !ends_it {
                        rep_interrupted = thread.interrupted(Some(ip));
                    }
                }
                self.flush_rep(rep_interrupted);
            }
        }
        Ok(())
    }

    /// The threads' recordings (in the order they were created, as the
    /// tool numbers them: LLDB and GDB number a live process's threads so,
    /// while the order they first ran is up to the scheduler) and the
    /// modules: every file mapped executable, at the address where its
    /// offset 0 is (or would be) mapped.
    pub fn finish(mut self) -> (ImageRecording, u64) {
        self.flush_rep(false);
        self.close(Leaving::AsLeft);
        let mut threads = Vec::new();
        let mut by_index: Vec<Option<ThreadState>> = std::mem::take(&mut self.threads).into_iter().map(Some).collect();
        let order: Vec<usize> = self.numbers.values().copied().chain(0..by_index.len()).collect();
        for mut thread in order.into_iter().filter_map(|index| by_index.get_mut(index).and_then(Option::take)) {
            thread.ended();
            let instructions = thread.writer.instructions();
            let (trace_file, trace) = thread.stored.finish(thread.writer.into_bytes());
            threads.push(ThreadRecording { tid: thread.tid, trace, trace_file, instructions, instruction_log: thread.log });
        }
        let mut modules: Vec<LoadedModule> = Vec::new();
        for (start, _, offset, prot, path) in &self.mappings {
            // (Valgrind reports its tool's own text too.)
            if prot & 4 == 0 || is_valgrinds_own(path) || modules.iter().any(|m| &m.path == path) {
                continue;
            }
            let base = self
                .mappings
                .iter()
                .filter(|m| &m.4 == path && m.2 == 0)
                .map(|m| m.0)
                .min()
                .unwrap_or(start.wrapping_sub(*offset));
            modules.push(LoadedModule { path: path.clone(), base, image: None });
        }
        let full_state = self.state.take().map(|mut state| {
            let (stored, bytes) = std::mem::take(&mut self.state_stored).finish(state.finish());
            FullStateStream { bytes, stored }
        });
        let mut mapped_files: Vec<String> = self.mappings.iter().map(|m| m.4.clone()).filter(|path| !is_valgrinds_own(path) && !modules.iter().any(|m| &m.path == path)).collect();
        mapped_files.sort();
        mapped_files.dedup();
        (ImageRecording { threads, modules, full_state, mapped_files }, self.undecodable)
    }
}

/// What [`convert_log`] made of a log.
#[derive(Debug)]
pub struct ConvertedLog {
    /// The image's threads and modules.
    pub image: ImageRecording,
    /// Instructions recorded as gaps (bytes the decoder does not know).
    pub undecodable: u64,
    /// Damage met (the conversion ends there).
    pub warnings: Vec<String>,
    /// The instruction limit was reached.
    pub limited: bool,
    /// Where the running thread stood when the program ended: after its
    /// exit system call, or at the instruction a fatal signal stopped.
    pub ended_at: Option<u64>,
}

/// Whether a file Valgrind reports mapped is its tool's own text (which
/// it reports too), not the program's.
fn is_valgrinds_own(path: &str) -> bool {
    path.ends_with("-amd64-linux")
}

/// Converts a whole log (at most `limit` instructions); a damaged record
/// ends the conversion there, with a warning naming its offset.
pub fn convert_log(log: &[u8], psb_period: usize, keep_instruction_log: bool, limit: Option<u64>) -> ConvertedLog {
    let mut converter = LogConverter::new(psb_period, keep_instruction_log).with_limit(limit);
    let mut warnings = Vec::new();
    for record in log_records(log) {
        match record {
            Ok(record) => {
                if let Err(what) = converter.feed(record) {
                    warnings.push(what);
                    break;
                }
            }
            Err(error) => {
                warnings.push(error.to_string());
                break;
            }
        }
    }
    converter.into_converted(warnings)
}

/// Converts a log read from `input` as it arrives (a program image's TCP
/// connection from the tool), in bounded memory: the records a read
/// completes are converted, a record cut by the read waits for the next.
/// Returns the process id the log names and the conversion; a log whose
/// process `wanted` refuses is read to its end and not converted.
pub fn convert_stream(input: &mut impl std::io::Read, mut converter: LogConverter, wanted: impl Fn(u32) -> bool) -> std::io::Result<(Option<u32>, ConvertedLog)> {
    let mut warnings = Vec::new();
    let mut buffer = vec![0u8; 1 << 20];
    let (mut filled, mut offset) = (0usize, 0usize);
    let mut pid = None;
    let mut started = false;
    let mut broken = false;
    loop {
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let n = input.read(&mut buffer[filled..])?;
        filled += n;
        let mut at = 0;
        if !started && filled >= LOG_MAGIC.len() {
            started = true;
            if &buffer[..LOG_MAGIC.len()] != LOG_MAGIC {
                warnings.push(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() }.to_string());
                broken = true;
            }
            at = LOG_MAGIC.len();
        }
        while started && !broken {
            // The most frequent record, one byte, most often many in a row.
            at += converter.entered_next_run(&buffer[at..filled]);
            if at < filled && buffer[at] & ENTERED_NEXT != 0 {
                if let Err(what) = converter.entered_next(buffer[at] & !ENTERED_NEXT) {
                    warnings.push(what);
                    broken = true;
                }
                at += 1;
                continue;
            }
            match parse_record(&buffer[at..filled]) {
                Parsed::Record(record, length) => {
                    if let LogRecord::Process(number) = record {
                        pid = Some(number);
                        if !wanted(number) {
                            std::io::copy(input, &mut std::io::sink())?;
                            return Ok((pid, LogConverter::new(DEFAULT_PSB_PERIOD, false).into_converted(Vec::new())));
                        }
                    }
                    if let Err(what) = converter.feed(record) {
                        warnings.push(what);
                        broken = true;
                    }
                    at += length;
                }
                Parsed::Incomplete => break,
                Parsed::Bad(what) => {
                    warnings.push(LogError { offset: offset + at, what }.to_string());
                    broken = true;
                }
            }
        }
        if broken {
            // Drain the rest: the program must not block on a full socket.
            std::io::copy(input, &mut std::io::sink())?;
            break;
        }
        converter.publish_progress();
        buffer.copy_within(at..filled, 0);
        filled -= at;
        offset += at;
        if n == 0 {
            if filled > 0 {
                let tag = buffer[0];
                warnings.push(LogError { offset, what: format!("record '{}' cut short", tag as char) }.to_string());
            }
            break;
        }
    }
    Ok((pid, converter.into_converted(warnings)))
}

