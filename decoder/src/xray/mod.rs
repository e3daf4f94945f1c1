//! LLVM XRay logs: basic ("naive") mode v1–v3 and flight-data-recorder (FDR)
//! mode v1–v5, as LLVM's reader accepts them, plus the function-id map of an
//! instrumented binary ([`instr_map`]) and per-thread call timelines
//! ([`timeline`]).
//!
//! Layers, each usable alone:
//!
//! * [`FileHeader::parse`] — the 32-byte header (either byte order);
//! * [`fdr::RawRecords`] — FDR's records as written (metadata and function
//!   records with TSC deltas), with buffer extents enforced, as
//!   `llvm-xray fdr-dump` lists them;
//! * [`Log::records`] — the expanded records every consumer wants (thread,
//!   function id, kind, absolute TSC, CPU, arguments, event payloads), the
//!   records `llvm-xray convert` prints, for both modes. Where LLVM reads
//!   meaningless bytes this reader does not: v1–v3 custom events take the
//!   thread's current CPU (LLVM reads the unused bytes after the TSC), and
//!   logs without process ids give `None` (LLVM: 0, or the thread id in
//!   FDR v2).
//!
//! Damage never stops reading: a record that is cut short, an unknown
//! metadata kind or a broken buffer becomes an [`XrayError`] item with its
//! byte offset, every intact record is kept, and reading resumes at the next
//! buffer. The runtime's known quirks (typed events that make a buffer's
//! extents 16 bytes short, uninitialised filler bytes, the fake TSC of
//! machines without a TSC frequency) are tolerated.

pub mod basic;
pub mod fdr;
pub mod instr_map;
pub mod timeline;

/// Size of the file header.
pub const HEADER_SIZE: usize = 32;

/// Byte order of a log (the producer's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (x86-64).
    Little,
    /// Big-endian.
    Big,
}

impl Endian {
    pub(crate) fn u16(self, bytes: [u8; 2]) -> u16 {
        match self {
            Endian::Little => u16::from_le_bytes(bytes),
            Endian::Big => u16::from_be_bytes(bytes),
        }
    }

    pub(crate) fn u32(self, bytes: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(bytes),
            Endian::Big => u32::from_be_bytes(bytes),
        }
    }

    pub(crate) fn u64(self, bytes: [u8; 8]) -> u64 {
        match self {
            Endian::Little => u64::from_le_bytes(bytes),
            Endian::Big => u64::from_be_bytes(bytes),
        }
    }
}

/// Reads fixed-size fields; `None` past the end.
pub(crate) fn array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Which writer produced the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Basic ("naive") mode: fixed 32-byte records.
    Basic,
    /// Flight-data-recorder mode: per-thread buffers of 8- and 16-byte records.
    Fdr,
}

/// The 32-byte file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version (basic 1–3, FDR 1–5).
    pub version: u16,
    /// Basic or FDR.
    pub mode: Mode,
    /// The producer's byte order.
    pub endian: Endian,
    /// The TSC is constant-rate (the runtime claims it even when emulating).
    pub constant_tsc: bool,
    /// The TSC does not stop in deep sleep states.
    pub nonstop_tsc: bool,
    /// TSC ticks per second (1e9 when the runtime emulated the TSC with
    /// CLOCK_REALTIME).
    pub cycle_frequency: u64,
    /// FDR: the size of each thread buffer (needed to skip a v1 buffer's
    /// filler after its EndOfBuffer). Basic logs leave these bytes
    /// uninitialised: `None`.
    pub thread_buffer_size: Option<u64>,
}

impl FileHeader {
    /// Reads the header, little-endian first, then big-endian (as LLVM does):
    /// the byte order whose version and type make sense wins.
    pub fn parse(bytes: &[u8]) -> Result<FileHeader, XrayError> {
        let Some(head) = bytes.get(..HEADER_SIZE) else {
            return Err(XrayError::at(0, XrayErrorKind::ShortHeader { len: bytes.len() }));
        };
        let mut first_problem = None;
        for endian in [Endian::Little, Endian::Big] {
            let version = endian.u16([head[0], head[1]]);
            let kind = endian.u16([head[2], head[3]]);
            let mode = match (kind, version) {
                (0, 1..=3) => Mode::Basic,
                (1, 1..=5) => Mode::Fdr,
                _ => {
                    first_problem.get_or_insert(XrayErrorKind::UnsupportedHeader { version, kind });
                    continue;
                }
            };
            // Only bits 0 and 1 are defined; basic logs leave the rest uninitialised.
            let bits = endian.u32([head[4], head[5], head[6], head[7]]);
            let cycle_frequency = endian.u64(array(head, 8).unwrap_or_default());
            let thread_buffer_size = (mode == Mode::Fdr).then(|| endian.u64(array(head, 16).unwrap_or_default()));
            return Ok(FileHeader {
                version,
                mode,
                endian,
                constant_tsc: bits & 1 != 0,
                nonstop_tsc: bits & 2 != 0,
                cycle_frequency,
                thread_buffer_size,
            });
        }
        Err(XrayError::at(0, first_problem.unwrap_or(XrayErrorKind::ShortHeader { len: bytes.len() })))
    }
}

/// A function id as the log carries it: in logs of programs with
/// instrumented shared libraries (`-fxray-shared`), the object id is in the
/// top bits (`object << 24 | function`; FDR keeps 28 bits of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FunctionId(pub u32);

impl FunctionId {
    /// The instrumented object: 0 for the main executable, 1, 2… for shared
    /// libraries in the order they registered.
    pub fn object(self) -> u32 {
        self.0 >> 24
    }

    /// The function's id within its object (1-based, sled order).
    pub fn local(self) -> u32 {
        self.0 & 0x00ff_ffff
    }
}

impl std::fmt::Display for FunctionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0 as i32)
    }
}

/// What an expanded record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// Function entry.
    Enter,
    /// Function entry with arguments ([`Record::args`]).
    EnterArg,
    /// Function exit.
    Exit,
    /// Exit by a tail call (the callee's records follow).
    TailExit,
    /// `__xray_customevent` payload ([`Record::data`]).
    CustomEvent,
    /// `__xray_typedevent` payload with its [`Record::event_type`].
    TypedEvent,
}

impl RecordKind {
    /// LLVM's name for the kind (`llvm-xray convert`'s `kind:`).
    pub fn llvm_name(self) -> &'static str {
        match self {
            RecordKind::Enter => "function-enter",
            RecordKind::EnterArg => "function-enter-arg",
            RecordKind::Exit => "function-exit",
            RecordKind::TailExit => "function-tail-exit",
            RecordKind::CustomEvent => "custom-event",
            RecordKind::TypedEvent => "typed-event",
        }
    }

    /// An entry (with or without arguments).
    pub fn is_entry(self) -> bool {
        matches!(self, RecordKind::Enter | RecordKind::EnterArg)
    }

    /// An exit (normal or tail).
    pub fn is_exit(self) -> bool {
        matches!(self, RecordKind::Exit | RecordKind::TailExit)
    }
}

/// One expanded record: what happened, on which thread, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Byte offset of the record in the log.
    pub offset: usize,
    /// What happened.
    pub kind: RecordKind,
    /// The function (0 for events, which have none).
    pub function: FunctionId,
    /// Absolute TSC (or nanoseconds when the runtime emulated the TSC).
    pub tsc: u64,
    /// The CPU the thread ran on.
    pub cpu: u16,
    /// Thread id.
    pub tid: u32,
    /// Process id; `None` in logs that do not carry it (basic v1–v2 write
    /// zero, FDR v1–v2 have no Pid record).
    pub pid: Option<u32>,
    /// Call arguments of an [`RecordKind::EnterArg`].
    pub args: Vec<u64>,
    /// Payload of a custom or typed event.
    pub data: &'a [u8],
    /// A typed event's type.
    pub event_type: Option<u16>,
}

/// What went wrong, where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset:#x}: {kind}")]
pub struct XrayError {
    /// Byte offset in the log.
    pub offset: usize,
    /// The problem.
    pub kind: XrayErrorKind,
}

impl XrayError {
    pub(crate) fn at(offset: usize, kind: XrayErrorKind) -> Self {
        XrayError { offset, kind }
    }
}

/// The problems a log can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XrayErrorKind {
    /// Fewer than 32 bytes.
    #[error("{len} bytes is too short for an XRay file header (32 bytes)")]
    ShortHeader {
        /// File size.
        len: usize,
    },
    /// Neither byte order gives a known (type, version).
    #[error("not an XRay log: type {kind}, version {version} (basic logs are type 0 v1-3, FDR type 1 v1-5)")]
    UnsupportedHeader {
        /// Version field (little-endian reading).
        version: u16,
        /// Type field (little-endian reading).
        kind: u16,
    },
    /// A record does not fit in the rest of the file.
    #[error("{kind} record cut short: {needed} bytes needed, {available} left in the file")]
    Truncated {
        /// The record's kind.
        kind: &'static str,
        /// Its size.
        needed: usize,
        /// What was left.
        available: usize,
    },
    /// A record does not fit in its buffer's extents (the typed-event
    /// extents bug of compiler-rt cuts 16 bytes per typed event).
    #[error("{kind} record crosses the end of its buffer ({needed} bytes needed, {available} left): {lost} bytes of the buffer lost")]
    BufferOverrun {
        /// The record's kind.
        kind: &'static str,
        /// Its size.
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
        /// Bytes skipped to the buffer's end.
        lost: usize,
    },
    /// FDR metadata kind outside 0–9.
    #[error("unknown metadata record kind {0}")]
    UnknownMetadata(u8),
    /// A metadata record the log's version does not allow (EndOfBuffer in v2+).
    #[error("{kind} record is not valid in version {version} logs")]
    WrongVersion {
        /// The record.
        kind: &'static str,
        /// The log's version.
        version: u16,
    },
    /// A buffer does not start with BufferExtents (v2+); bytes were skipped
    /// to the next buffer.
    #[error("expected a BufferExtents record; skipped {skipped} bytes to the next buffer")]
    LostSync {
        /// Bytes skipped.
        skipped: usize,
    },
    /// A custom or typed event with a non-positive size.
    #[error("event with invalid payload size {0}")]
    BadEventSize(i32),
    /// A function record before the buffer said which CPU and TSC it starts at.
    #[error("function record before the buffer's NewCPUId (its TSC is unknown)")]
    NoBaseTsc,
    /// A CallArgument with no function record before it in its buffer
    /// (after a function record of any kind it is attached, and the record
    /// becomes an entry with arguments, as LLVM does).
    #[error("call argument without a function record before it")]
    StrayCallArgument,
    /// Basic mode: the file is not the header plus whole 32-byte records.
    #[error("{0} bytes after the last whole 32-byte record")]
    PartialRecord(usize),
    /// Basic mode: record type other than 0 (normal) or 1 (argument payload).
    #[error("unknown record type {0}")]
    UnknownRecordType(u16),
    /// Function record kind outside enter/exit/tail-exit/enter-arg.
    #[error("unknown function record type {0}")]
    UnknownFunctionKind(u8),
    /// Basic mode: an argument payload that does not match the entry before it.
    #[error("argument payload for function {function} thread {tid} does not follow an entry of that function and thread")]
    UnmatchedArgPayload {
        /// Its function id.
        function: FunctionId,
        /// Its thread.
        tid: u32,
    },
}

/// An XRay log in memory.
#[derive(Debug, Clone, Copy)]
pub struct Log<'a> {
    /// Its header.
    pub header: FileHeader,
    bytes: &'a [u8],
}

impl<'a> Log<'a> {
    /// Reads the header; records are read lazily by [`Log::records`].
    pub fn parse(bytes: &'a [u8]) -> Result<Log<'a>, XrayError> {
        Ok(Log { header: FileHeader::parse(bytes)?, bytes })
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The expanded records in file order (threads interleave: basic logs
    /// in chunks, FDR logs buffer by buffer), with errors as items.
    pub fn records(&self) -> Records<'a> {
        match self.header.mode {
            Mode::Basic => Records::Basic(basic::BasicRecords::new(self.header, self.bytes)),
            Mode::Fdr => Records::Fdr(fdr::ExpandedRecords::new(self.header, self.bytes)),
        }
    }
}

/// Iterator over a log's expanded records.
#[derive(Debug)]
pub enum Records<'a> {
    /// Of a basic-mode log.
    Basic(basic::BasicRecords<'a>),
    /// Of an FDR log.
    Fdr(fdr::ExpandedRecords<'a>),
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, XrayError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Records::Basic(records) => records.next(),
            Records::Fdr(records) => records.next(),
        }
    }
}

#[cfg(test)]
mod tests;
