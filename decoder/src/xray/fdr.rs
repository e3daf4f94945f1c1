//! Flight-data-recorder logs: after the header, thread buffers of 16-byte
//! metadata records (first byte `kind << 1 | 1`) and 8-byte function records
//! (first bit 0: type in bits 1–3, 28-bit function id, 32-bit TSC delta),
//! unaligned.
//!
//! Buffers by version: v1 `NewBuffer WallClock NewCPUId … EndOfBuffer`
//! padded to the header's thread buffer size; v2 prefixes `BufferExtents`
//! (from v2 on only the extents' bytes are written; LLVM enforces them from
//! v3 on, and so does this reader); v3 adds `Pid`; v4 custom events carry
//! the CPU; v5 custom and typed events carry TSC deltas.

use super::{array, Endian, FileHeader, FunctionId, Record, RecordKind, XrayError, XrayErrorKind, HEADER_SIZE};

/// Size of a metadata record (without an event's payload).
pub const METADATA_SIZE: usize = 16;
/// Size of a function record.
pub const FUNCTION_SIZE: usize = 8;

/// An event's time as the record carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTsc {
    /// v1–v4 custom events: an absolute TSC.
    Absolute(u64),
    /// v5 custom and typed events: added to the running TSC.
    Delta(i32),
}

/// One FDR record as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawRecord<'a> {
    /// Function entry/exit with a TSC delta against the running TSC.
    Function {
        /// Enter, Exit, TailExit or EnterArg.
        kind: RecordKind,
        /// The function (28 bits).
        function: FunctionId,
        /// Added to the running TSC.
        tsc_delta: u32,
    },
    /// Metadata 0: a thread's buffer starts.
    NewBuffer {
        /// Thread id.
        tid: u32,
    },
    /// Metadata 1 (v1 only): the rest of the buffer is filler.
    EndOfBuffer,
    /// Metadata 2: the thread runs on `cpu` from `tsc` on.
    NewCpuId {
        /// CPU number.
        cpu: u16,
        /// Absolute TSC: the new running TSC.
        tsc: u64,
    },
    /// Metadata 3: the running TSC is reset (a delta would not fit).
    TscWrap {
        /// Absolute TSC.
        tsc: u64,
    },
    /// Metadata 4: the buffer's wall-clock time (the runtime writes
    /// CLOCK_MONOTONIC seconds and microseconds).
    WallClock {
        /// Seconds.
        seconds: u64,
        /// Microseconds (the field LLVM calls nanos).
        micros: u32,
    },
    /// Metadata 5: `__xray_customevent` payload.
    CustomEvent {
        /// Its time.
        tsc: EventTsc,
        /// v4 only: the CPU.
        cpu: Option<u16>,
        /// The payload.
        data: &'a [u8],
    },
    /// Metadata 6: one argument of the entry before it.
    CallArgument {
        /// The argument.
        value: u64,
    },
    /// Metadata 7 (v2+): how many bytes of this buffer follow.
    BufferExtents {
        /// Byte count after this record.
        size: u64,
    },
    /// Metadata 8: `__xray_typedevent` payload.
    TypedEvent {
        /// Added to the running TSC.
        tsc_delta: i32,
        /// The event's type.
        event_type: u16,
        /// The payload.
        data: &'a [u8],
    },
    /// Metadata 9 (v3+): the process id.
    Pid {
        /// Process id.
        pid: u32,
    },
}

/// Names of the metadata record kinds, by kind (as in error messages).
const METADATA_NAMES: [&str; 10] = [
    "NewBuffer",
    "EndOfBuffer",
    "NewCPUId",
    "TSCWrap",
    "WallClockTime",
    "CustomEventMarker",
    "CallArgument",
    "BufferExtents",
    "TypedEventMarker",
    "Pid",
];
const NEW_BUFFER: u8 = 0;
const WALL_CLOCK: u8 = 4;
const BUFFER_EXTENTS: u8 = 7;

/// The records of an FDR log as written, with their byte offsets; buffer
/// extents (v3+) and v1 buffer sizes are followed, and reading resumes at
/// the next buffer after damage.
#[derive(Debug, Clone)]
pub struct RawRecords<'a> {
    header: FileHeader,
    bytes: &'a [u8],
    offset: usize,
    /// v3+: where the current buffer ends (`None`: a BufferExtents record
    /// must come next).
    buffer_end: Option<usize>,
    /// v1: where the current buffer started (its NewBuffer).
    buffer_start: Option<usize>,
}

impl<'a> RawRecords<'a> {
    /// Records of `bytes` (the whole file, header included).
    pub fn new(header: FileHeader, bytes: &'a [u8]) -> Self {
        RawRecords { header, bytes, offset: HEADER_SIZE.min(bytes.len()), buffer_end: None, buffer_start: None }
    }

    fn enforces_extents(&self) -> bool {
        self.header.version >= 3
    }

    /// A buffer plausibly starts at `at`: v2+ a BufferExtents record
    /// followed by a NewBuffer (or an empty one whose size fits in the file:
    /// the last buffer of a cut file still counts); v1 a NewBuffer followed
    /// by a WallClockTime.
    fn buffer_starts_at(&self, at: usize) -> bool {
        if self.header.version < 2 {
            return self.bytes.get(at) == Some(&(NEW_BUFFER << 1 | 1)) && self.bytes.get(at + METADATA_SIZE) == Some(&(WALL_CLOCK << 1 | 1));
        }
        if self.bytes.get(at) != Some(&(BUFFER_EXTENTS << 1 | 1)) {
            return false;
        }
        let Some(size) = array::<8>(self.bytes, at + 1).map(|b| self.header.endian.u64(b)) else { return false };
        let after = at + METADATA_SIZE;
        match size {
            0 => after <= self.bytes.len(),
            _ => self.bytes.get(after) == Some(&(NEW_BUFFER << 1 | 1)),
        }
    }

    fn read_at(&self, offset: usize, limit: usize) -> Result<(RawRecord<'a>, usize), XrayErrorKind> {
        let endian: Endian = self.header.endian;
        let first = self.bytes[offset];
        let available = limit - offset;
        let need = |kind: &'static str, needed: usize| -> Result<(), XrayErrorKind> {
            // Past the buffer's declared end (inside the file) the extents
            // were short; past the file's end the file was cut.
            let buffer_ends_first = self.enforces_extents() && self.buffer_end.is_some_and(|end| end <= self.bytes.len());
            if needed <= available {
                Ok(())
            } else if buffer_ends_first {
                Err(XrayErrorKind::BufferOverrun { kind, needed, available, lost: available })
            } else {
                Err(XrayErrorKind::Truncated { kind, needed, available })
            }
        };
        if first & 1 == 0 {
            need("function", FUNCTION_SIZE)?;
            let word = endian.u32(array(self.bytes, offset).unwrap_or_default());
            let kind = match (word >> 1) & 7 {
                0 => RecordKind::Enter,
                1 => RecordKind::Exit,
                2 => RecordKind::TailExit,
                3 => RecordKind::EnterArg,
                other => return Err(XrayErrorKind::UnknownFunctionKind(other as u8)),
            };
            let tsc_delta = endian.u32(array(self.bytes, offset + 4).unwrap_or_default());
            return Ok((RawRecord::Function { kind, function: FunctionId(word >> 4), tsc_delta }, FUNCTION_SIZE));
        }
        let kind = first >> 1;
        let Some(name) = METADATA_NAMES.get(kind as usize).copied() else {
            return Err(XrayErrorKind::UnknownMetadata(kind));
        };
        need(name, METADATA_SIZE)?;
        let body = offset + 1;
        let u16_at = |at: usize| endian.u16(array(self.bytes, body + at).unwrap_or_default());
        let u32_at = |at: usize| endian.u32(array(self.bytes, body + at).unwrap_or_default());
        let u64_at = |at: usize| endian.u64(array(self.bytes, body + at).unwrap_or_default());
        let payload = |size: i32| -> Result<(&'a [u8], usize), XrayErrorKind> {
            if size <= 0 {
                return Err(XrayErrorKind::BadEventSize(size));
            }
            let total = METADATA_SIZE + size as usize;
            need(name, total)?;
            Ok((&self.bytes[offset + METADATA_SIZE..offset + total], total))
        };
        let version = self.header.version;
        let record = match kind {
            0 => RawRecord::NewBuffer { tid: u32_at(0) },
            1 if version >= 2 => return Err(XrayErrorKind::WrongVersion { kind: name, version }),
            1 => RawRecord::EndOfBuffer,
            2 => RawRecord::NewCpuId { cpu: u16_at(0), tsc: u64_at(2) },
            3 => RawRecord::TscWrap { tsc: u64_at(0) },
            4 => RawRecord::WallClock { seconds: u64_at(0), micros: u32_at(8) },
            5 => {
                let (tsc, cpu) = if version >= 5 {
                    (EventTsc::Delta(u32_at(4) as i32), None)
                } else {
                    (EventTsc::Absolute(u64_at(4)), (version == 4).then(|| u16_at(12)))
                };
                let (data, size) = payload(u32_at(0) as i32)?;
                return Ok((RawRecord::CustomEvent { tsc, cpu, data }, size));
            }
            6 => RawRecord::CallArgument { value: u64_at(0) },
            7 => RawRecord::BufferExtents { size: u64_at(0) },
            8 => {
                let (data, size) = payload(u32_at(0) as i32)?;
                return Ok((RawRecord::TypedEvent { tsc_delta: u32_at(4) as i32, event_type: u16_at(8), data }, size));
            }
            _ => RawRecord::Pid { pid: u32_at(0) },
        };
        Ok((record, METADATA_SIZE))
    }

    /// Skips to the next plausible buffer start after damage at `from`.
    fn resync(&mut self, from: usize) -> usize {
        let next = (from + 1..self.bytes.len()).find(|&at| self.buffer_starts_at(at)).unwrap_or(self.bytes.len());
        self.offset = next;
        self.buffer_end = None;
        next - from
    }
}

impl<'a> Iterator for RawRecords<'a> {
    type Item = Result<(usize, RawRecord<'a>), XrayError>;

    fn next(&mut self) -> Option<Self::Item> {
        let offset = self.offset;
        if offset >= self.bytes.len() {
            return None;
        }
        if self.enforces_extents() {
            match self.buffer_end {
                Some(end) if offset < end => {}
                _ => {
                    // A buffer must start here.
                    self.buffer_end = None;
                    if !self.buffer_starts_at(offset) {
                        let skipped = self.resync(offset);
                        return Some(Err(XrayError::at(offset, XrayErrorKind::LostSync { skipped })));
                    }
                }
            }
        }
        let limit = match self.buffer_end {
            Some(end) if self.enforces_extents() => end.min(self.bytes.len()),
            _ => self.bytes.len(),
        };
        match self.read_at(offset, limit) {
            Ok((record, size)) => {
                self.offset = offset + size;
                match record {
                    RawRecord::BufferExtents { size } => {
                        let end = usize::try_from(size).ok().and_then(|size| self.offset.checked_add(size));
                        self.buffer_end = Some(end.unwrap_or(usize::MAX));
                    }
                    RawRecord::NewBuffer { .. } => self.buffer_start = Some(offset),
                    RawRecord::EndOfBuffer => {
                        // v1: the rest of the fixed-size buffer is filler.
                        let size = self.header.thread_buffer_size.and_then(|size| usize::try_from(size).ok());
                        // Only to where a buffer starts (or the end): a wrong
                        // size in the header must not hide buffers; the
                        // filler is ignored anyway until the next NewBuffer.
                        if let Some(end) = self.buffer_start.zip(size).and_then(|(start, size)| start.checked_add(size)) {
                            if end > self.offset && (end == self.bytes.len() || self.buffer_starts_at(end)) {
                                self.offset = end;
                            }
                        }
                        self.buffer_start = None;
                    }
                    _ => {}
                }
                Some(Ok((offset, record)))
            }
            Err(kind) => {
                match kind {
                    XrayErrorKind::BufferOverrun { .. } => self.offset = limit,
                    XrayErrorKind::Truncated { .. } => self.offset = self.bytes.len(),
                    // Unknown contents: the rest of this buffer is lost (when
                    // the buffer's end is in the file; else find the next).
                    _ if self.enforces_extents() && self.buffer_end.is_some_and(|end| end <= self.bytes.len()) => self.offset = limit,
                    _ => {
                        self.resync(offset);
                    }
                }
                Some(Err(XrayError::at(offset, kind)))
            }
        }
    }
}

/// The expanded records of an FDR log (see [`super::Log::records`]): TSCs
/// made absolute, threads, processes and CPUs filled in, call arguments
/// attached to their entries, as LLVM's trace expander does.
#[derive(Debug)]
pub struct ExpandedRecords<'a> {
    raw: RawRecords<'a>,
    tid: u32,
    pid: Option<u32>,
    cpu: u16,
    /// The running TSC; `None` until the buffer's NewCPUId.
    base_tsc: Option<u64>,
    /// v1: after EndOfBuffer, records are filler until the next NewBuffer.
    ignoring: bool,
    /// The last record, held back for call arguments that may follow.
    pending: Option<Record<'a>>,
    queued_error: Option<XrayError>,
}

impl<'a> ExpandedRecords<'a> {
    /// Records of `bytes` (the whole file, header included).
    pub fn new(header: FileHeader, bytes: &'a [u8]) -> Self {
        ExpandedRecords {
            raw: RawRecords::new(header, bytes),
            tid: 0,
            pid: None,
            cpu: 0,
            base_tsc: None,
            ignoring: false,
            pending: None,
            queued_error: None,
        }
    }

    fn event(&self, offset: usize, kind: RecordKind, tsc: u64, cpu: u16, data: &'a [u8], event_type: Option<u16>) -> Record<'a> {
        Record { offset, kind, function: FunctionId(0), tsc, cpu, tid: self.tid, pid: self.pid, args: Vec::new(), data, event_type }
    }

    /// Applies one raw record; returns a new expanded record or a problem.
    fn apply(&mut self, offset: usize, record: RawRecord<'a>) -> Option<Result<Record<'a>, XrayError>> {
        match record {
            RawRecord::BufferExtents { .. } => {
                self.base_tsc = None;
                None
            }
            RawRecord::NewBuffer { tid } => {
                self.ignoring = false;
                self.tid = tid;
                self.pid = None;
                self.base_tsc = None;
                None
            }
            RawRecord::EndOfBuffer => {
                self.ignoring = true;
                None
            }
            RawRecord::WallClock { .. } => None,
            RawRecord::Pid { pid } => {
                self.pid = Some(pid);
                None
            }
            RawRecord::NewCpuId { cpu, tsc } => {
                self.cpu = cpu;
                self.base_tsc = Some(tsc);
                None
            }
            RawRecord::TscWrap { tsc } => {
                self.base_tsc = Some(tsc);
                None
            }
            _ if self.ignoring => None,
            RawRecord::Function { kind, function, tsc_delta } => {
                let Some(base) = self.base_tsc else { return Some(Err(XrayError::at(offset, XrayErrorKind::NoBaseTsc))) };
                let tsc = base.wrapping_add(u64::from(tsc_delta));
                self.base_tsc = Some(tsc);
                Some(Ok(Record {
                    offset,
                    kind,
                    function,
                    tsc,
                    cpu: self.cpu,
                    tid: self.tid,
                    pid: self.pid,
                    args: Vec::new(),
                    data: &[],
                    event_type: None,
                }))
            }
            RawRecord::CallArgument { value } => match &mut self.pending {
                Some(entry) if matches!(entry.kind, RecordKind::Enter | RecordKind::EnterArg | RecordKind::Exit | RecordKind::TailExit) => {
                    entry.args.push(value);
                    entry.kind = RecordKind::EnterArg;
                    None
                }
                _ => Some(Err(XrayError::at(offset, XrayErrorKind::StrayCallArgument))),
            },
            RawRecord::CustomEvent { tsc, cpu, data } => {
                let tsc = match tsc {
                    EventTsc::Absolute(tsc) => tsc,
                    EventTsc::Delta(delta) => {
                        let Some(base) = self.base_tsc else { return Some(Err(XrayError::at(offset, XrayErrorKind::NoBaseTsc))) };
                        let tsc = base.wrapping_add(delta as i64 as u64);
                        self.base_tsc = Some(tsc);
                        tsc
                    }
                };
                Some(Ok(self.event(offset, RecordKind::CustomEvent, tsc, cpu.unwrap_or(self.cpu), data, None)))
            }
            RawRecord::TypedEvent { tsc_delta, event_type, data } => {
                let Some(base) = self.base_tsc else { return Some(Err(XrayError::at(offset, XrayErrorKind::NoBaseTsc))) };
                let tsc = base.wrapping_add(tsc_delta as i64 as u64);
                self.base_tsc = Some(tsc);
                Some(Ok(self.event(offset, RecordKind::TypedEvent, tsc, self.cpu, data, Some(event_type))))
            }
        }
    }

}

impl<'a> Iterator for ExpandedRecords<'a> {
    type Item = Result<Record<'a>, XrayError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.queued_error.take() {
            return Some(Err(error));
        }
        loop {
            let outcome = match self.raw.next() {
                None => return self.pending.take().map(Ok),
                Some(Err(error)) => Err(error),
                Some(Ok((offset, record))) => {
                    // A new buffer ends what was pending (call arguments
                    // never cross buffers).
                    if matches!(record, RawRecord::BufferExtents { .. } | RawRecord::NewBuffer { .. } | RawRecord::EndOfBuffer) {
                        if let Some(previous) = self.pending.take() {
                            self.apply(offset, record);
                            return Some(Ok(previous));
                        }
                    }
                    match self.apply(offset, record) {
                        None => continue,
                        Some(outcome) => outcome,
                    }
                }
            };
            match outcome {
                Ok(record) => match self.pending.replace(record) {
                    Some(previous) => return Some(Ok(previous)),
                    None => continue,
                },
                Err(error) => match self.pending.take() {
                    Some(previous) => {
                        self.queued_error = Some(error);
                        return Some(Ok(previous));
                    }
                    None => return Some(Err(error)),
                },
            }
        }
    }
}
