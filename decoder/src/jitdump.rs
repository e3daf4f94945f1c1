//! Linux perf **jitdump** files: the code a JIT compiler generated, with its
//! addresses, names and load times, as V8 (`node --perf-prof`), CPython 3.13
//! (`-X perf_jit`), wasmtime and the JVM agent write them for `perf inject --jit`.
//!
//! The format is perf's `tools/perf/Documentation/jitdump-specification.txt`
//! ("JITDUMP specification version 2") as perf's reader (`util/jitdump.c`)
//! interprets it; where the two disagree this module follows perf:
//!
//! * a 40-byte file header (readers use its `total_size`), then records of a
//!   16-byte header (`id`, `total_size`, `timestamp`) and a payload, one after
//!   the other with **no alignment**, all in the producer's byte order (the
//!   magic tells which);
//! * `JIT_CODE_LOAD`'s code is the **last** `code_size` bytes of the record;
//! * `JIT_CODE_DEBUG_INFO` and `JIT_CODE_UNWINDING_INFO` describe the **next**
//!   `JIT_CODE_LOAD`; unwinding data is `.eh_frame` first, `.eh_frame_hdr` last;
//! * a DEBUG_INFO entry named `"\xff"` is "the same file as the previous entry".
//!
//! Layers, as elsewhere in the decoder:
//!
//! * [`Jitdump::parse`] reads the file header; [`Jitdump::records`] is a
//!   zero-copy iterator of `Result<`[`Record`]`, `[`JitdumpError`]`>`, each
//!   with its byte offset. A record whose fields do not fit inside it is an
//!   error item and the walk goes on at the next record (sizes are trusted);
//!   a record size below 16 or past the end of the file is a last error item,
//!   since jitdump has no marker to resynchronise at.
//! * [`CodeRegions`] — the functions those records describe: one
//!   [`CodeRegion`] per LOAD, moved by MOVE records over time, queried by
//!   address and time ([`CodeRegions::region_at`]), and placed into an
//!   [`Image`] (for the flow decoder) and a [`Symbolizer`] (for names).
//!
//! Real producers' quirks this reader copes with: unaligned records (V8,
//! CPython, wasmtime), version 1 headers (perf accepts only 1; the spec text
//! says 2; both are read), `elf_mach` 0 and garbage `pad1` (CPython), DEBUG_INFO
//! records padded to 8 bytes whose entry names hold heap garbage with embedded
//! NULs (V8 11.3: entries after such a name are meaningless, but the record
//! walk stays in step), the same address loaded under two `code_index`es.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::image::Image;
use crate::symbols::Symbolizer;

/// The header's magic, `"JiTD"` read as a number in the producer's byte order.
pub const MAGIC: u32 = 0x4A69_5444;
/// Size of the file header the specification defines (readers skip any more
/// bytes the header's `total_size` announces).
pub const FILE_HEADER_SIZE: usize = 40;
/// Size of a record header: `u32 id`, `u32 total_size`, `u64 timestamp`.
pub const RECORD_HEADER_SIZE: usize = 16;
/// Header flag bit 0: record timestamps are architecture timestamps (TSC),
/// not CLOCK_MONOTONIC.
pub const FLAG_ARCH_TIMESTAMP: u64 = 1;

/// Record ids (`enum jit_record_type` in the specification).
pub mod record_id {
    /// `JIT_CODE_LOAD`: a function's code was generated.
    pub const CODE_LOAD: u32 = 0;
    /// `JIT_CODE_MOVE`: a function's code was moved.
    pub const CODE_MOVE: u32 = 1;
    /// `JIT_CODE_DEBUG_INFO`: source lines of the next LOAD.
    pub const CODE_DEBUG_INFO: u32 = 2;
    /// `JIT_CODE_CLOSE`: end of the dump.
    pub const CODE_CLOSE: u32 = 3;
    /// `JIT_CODE_UNWINDING_INFO`: `.eh_frame` data of the next LOAD.
    pub const CODE_UNWINDING_INFO: u32 = 4;
}

/// Fixed payload sizes (after the record header).
const CODE_LOAD_FIELDS: usize = 4 + 4 + 8 * 4;
const CODE_MOVE_FIELDS: usize = 4 + 4 + 8 * 5;
const DEBUG_INFO_FIELDS: usize = 8 + 8;
const DEBUG_ENTRY_FIXED: usize = 8 + 4 + 4;
const UNWINDING_INFO_FIELDS: usize = 8 * 3;

/// The byte order a producer wrote its fields in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Least significant byte first (x86-64, AArch64 Linux).
    Little,
    /// Most significant byte first.
    Big,
}

/// What went wrong at [`JitdumpError::offset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum JitdumpErrorKind {
    /// The file is shorter than the 40-byte file header.
    #[error("truncated file header ({available} of {FILE_HEADER_SIZE} bytes)")]
    TruncatedFileHeader {
        /// Bytes in the file.
        available: usize,
    },
    /// The first four bytes are not `"JiTD"` in either byte order.
    #[error("not a jitdump file (magic {0:#010x})")]
    BadMagic(u32),
    /// A header version other than 1 (what producers and perf use) or 2
    /// (what the specification's text says).
    #[error("unsupported jitdump version {0} (1 and 2 are known)")]
    UnsupportedVersion(u32),
    /// The header's `total_size` is below 40 or past the end of the file.
    #[error("file header size {size} is not between {FILE_HEADER_SIZE} and the file size {file_size}")]
    BadFileHeaderSize {
        /// The header's `total_size`.
        size: u32,
        /// Bytes in the file.
        file_size: usize,
    },
    /// Fewer than 16 bytes are left: a record header cut off by the end of
    /// the file. Reading ends.
    #[error("truncated record header ({available} of {RECORD_HEADER_SIZE} bytes)")]
    TruncatedRecordHeader {
        /// Bytes left in the file.
        available: usize,
    },
    /// A record `total_size` below the 16-byte record header: the next
    /// record cannot be found. Reading ends (as in perf).
    #[error("record size {size} is below the {RECORD_HEADER_SIZE}-byte record header")]
    RecordTooSmall {
        /// The record's `total_size`.
        size: u32,
    },
    /// A record `total_size` past the end of the file. Reading ends.
    #[error("record size {size} overruns the file ({available} bytes left)")]
    RecordOverrun {
        /// The record's `total_size`.
        size: u32,
        /// Bytes left in the file from the record's start.
        available: usize,
    },
    /// The record's fields need more bytes than its `total_size` gives.
    /// Reading goes on with the next record.
    #[error("{record} record needs {needed} bytes but its size is {size}")]
    FieldsOverrun {
        /// The record type's name (`load`, `move`, …).
        record: &'static str,
        /// Bytes its fields need, header included (saturated at `u64::MAX`).
        needed: u64,
        /// The record's `total_size`.
        size: u32,
    },
    /// A LOAD's name has no terminating NUL before its code.
    #[error("load record name is not NUL-terminated before the code")]
    UnterminatedName,
    /// An UNWINDING_INFO whose `.eh_frame_hdr` is larger than all its
    /// unwinding data.
    #[error("unwinding info: eh_frame_hdr_size {eh_frame_hdr_size} exceeds unwinding_size {unwinding_size}")]
    EhFrameHeaderTooLarge {
        /// The record's `unwinding_size`.
        unwinding_size: u64,
        /// The record's `eh_frame_hdr_size`.
        eh_frame_hdr_size: u64,
    },
    /// A MOVE of a `code_index` no earlier LOAD defined ([`CodeRegions`]).
    #[error("move of code_index {code_index}, which no earlier load defined")]
    MoveOfUnknownCode {
        /// The MOVE's `code_index`.
        code_index: u64,
    },
}

impl JitdumpErrorKind {
    /// True when no record after this error can be found.
    pub fn ends_records(&self) -> bool {
        matches!(
            self,
            Self::TruncatedRecordHeader { .. } | Self::RecordTooSmall { .. } | Self::RecordOverrun { .. }
        )
    }
}

/// A problem in a jitdump file, with the byte offset of the header or
/// record it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("offset {offset:#x}: {kind}")]
pub struct JitdumpError {
    /// Offset of the file header (0) or of the record's first byte.
    pub offset: usize,
    /// What is wrong.
    pub kind: JitdumpErrorKind,
}

/// The file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// The producer's byte order, from the magic.
    pub byte_order: ByteOrder,
    /// The format version (1 in every real file).
    pub version: u32,
    /// The header's `total_size`: where the first record starts.
    pub size: u32,
    /// ELF `e_machine` of the code (62 = x86-64); not validated (CPython
    /// 3.13.0 writes 0).
    pub elf_mach: u32,
    /// Reserved (`pad1`); not validated (V8 writes `0xdeadbeef`).
    pub pad1: u32,
    /// The producing process.
    pub pid: u32,
    /// When the file was created. Units vary by producer: µs since the epoch
    /// (V8, CPython) or CLOCK_MONOTONIC ns (wasmtime, the specification).
    pub timestamp: u64,
    /// Flags; bit 0 is [`FLAG_ARCH_TIMESTAMP`]. Other bits are kept, not rejected.
    pub flags: u64,
}

impl Header {
    /// True when record timestamps are architecture timestamps (TSC).
    pub fn has_arch_timestamps(&self) -> bool {
        self.flags & FLAG_ARCH_TIMESTAMP != 0
    }
}

/// A bounds-checked reader of fields in the producer's byte order.
#[derive(Debug, Clone, Copy)]
struct FieldReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    order: ByteOrder,
}

impl<'a> FieldReader<'a> {
    fn new(bytes: &'a [u8], order: ByteOrder) -> Self {
        FieldReader { bytes, pos: 0, order }
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(len)?;
        let taken = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        let bytes = self.array::<4>()?;
        Some(match self.order {
            ByteOrder::Little => u32::from_le_bytes(bytes),
            ByteOrder::Big => u32::from_be_bytes(bytes),
        })
    }

    fn u64(&mut self) -> Option<u64> {
        let bytes = self.array::<8>()?;
        Some(match self.order {
            ByteOrder::Little => u64::from_le_bytes(bytes),
            ByteOrder::Big => u64::from_be_bytes(bytes),
        })
    }

    /// The bytes up to the next NUL (excluded); the NUL is consumed.
    fn c_string(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.pos..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        let text = rest.get(..len)?;
        self.pos = self.pos.checked_add(len)?.checked_add(1)?;
        Some(text)
    }

    fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }
}

/// A parsed jitdump file: its header and a view of its records.
#[derive(Debug, Clone, Copy)]
pub struct Jitdump<'a> {
    header: Header,
    data: &'a [u8],
}

impl<'a> Jitdump<'a> {
    /// Reads the file header of `data` (a whole jitdump file).
    pub fn parse(data: &'a [u8]) -> Result<Self, JitdumpError> {
        let error = |kind| JitdumpError { offset: 0, kind };
        let Some(magic_bytes) = data.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()) else {
            return Err(error(JitdumpErrorKind::TruncatedFileHeader { available: data.len() }));
        };
        let byte_order = if u32::from_le_bytes(magic_bytes) == MAGIC {
            ByteOrder::Little
        } else if u32::from_be_bytes(magic_bytes) == MAGIC {
            ByteOrder::Big
        } else {
            return Err(error(JitdumpErrorKind::BadMagic(u32::from_le_bytes(magic_bytes))));
        };
        let mut fields = FieldReader::new(data, byte_order);
        fields.take(magic_bytes.len());
        let truncated = || error(JitdumpErrorKind::TruncatedFileHeader { available: data.len() });
        let version = fields.u32().ok_or_else(truncated)?;
        if version != 1 && version != 2 {
            return Err(error(JitdumpErrorKind::UnsupportedVersion(version)));
        }
        let size = fields.u32().ok_or_else(truncated)?;
        let elf_mach = fields.u32().ok_or_else(truncated)?;
        let pad1 = fields.u32().ok_or_else(truncated)?;
        let pid = fields.u32().ok_or_else(truncated)?;
        let timestamp = fields.u64().ok_or_else(truncated)?;
        let flags = fields.u64().ok_or_else(truncated)?;
        if (size as usize) < FILE_HEADER_SIZE || size as usize > data.len() {
            return Err(error(JitdumpErrorKind::BadFileHeaderSize { size, file_size: data.len() }));
        }
        let header = Header { byte_order, version, size, elf_mach, pad1, pid, timestamp, flags };
        Ok(Jitdump { header, data })
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The whole file.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The records, in file order.
    pub fn records(&self) -> Records<'a> {
        Records { data: self.data, pos: self.header.size as usize, order: self.header.byte_order, finished: false }
    }
}

/// One record: where it is, when it was written, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the record header in the file.
    pub offset: usize,
    /// The record's `total_size` (header included).
    pub size: u32,
    /// The record's timestamp (CLOCK_MONOTONIC ns in every known producer,
    /// or TSC with [`FLAG_ARCH_TIMESTAMP`]).
    pub timestamp: u64,
    /// The record's payload.
    pub body: RecordBody<'a>,
}

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordBody<'a> {
    /// `JIT_CODE_LOAD`.
    CodeLoad(CodeLoad<'a>),
    /// `JIT_CODE_MOVE`.
    CodeMove(CodeMove),
    /// `JIT_CODE_DEBUG_INFO`.
    DebugInfo(DebugInfo<'a>),
    /// `JIT_CODE_CLOSE`.
    Close,
    /// `JIT_CODE_UNWINDING_INFO`.
    UnwindingInfo(UnwindingInfo<'a>),
    /// A record type this reader does not know (skipped by its size, as perf does).
    Unknown {
        /// The record id.
        id: u32,
        /// The payload after the record header.
        body: &'a [u8],
    },
}

impl RecordBody<'_> {
    /// The record id.
    pub fn id(&self) -> u32 {
        match self {
            Self::CodeLoad(_) => record_id::CODE_LOAD,
            Self::CodeMove(_) => record_id::CODE_MOVE,
            Self::DebugInfo(_) => record_id::CODE_DEBUG_INFO,
            Self::Close => record_id::CODE_CLOSE,
            Self::UnwindingInfo(_) => record_id::CODE_UNWINDING_INFO,
            Self::Unknown { id, .. } => *id,
        }
    }

    /// A short name of the record type: `load`, `move`, `debug_info`,
    /// `close`, `unwinding_info`, `unknown`.
    pub fn kind_name(&self) -> &'static str {
        record_name(self.id())
    }
}

fn record_name(id: u32) -> &'static str {
    match id {
        record_id::CODE_LOAD => "load",
        record_id::CODE_MOVE => "move",
        record_id::CODE_DEBUG_INFO => "debug_info",
        record_id::CODE_CLOSE => "close",
        record_id::CODE_UNWINDING_INFO => "unwinding_info",
        _ => "unknown",
    }
}

/// `JIT_CODE_LOAD`: a function's code, placed at `code_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLoad<'a> {
    /// The process.
    pub pid: u32,
    /// The thread that generated the code.
    pub tid: u32,
    /// Virtual address of the code (equal to `code_addr` in every producer).
    pub vma: u64,
    /// Address of the code's first byte.
    pub code_addr: u64,
    /// Bytes of code (`code.len()`).
    pub code_size: u64,
    /// The function's identity, for MOVE records (unique per function; the
    /// same address can be loaded again under another index).
    pub code_index: u64,
    /// The function's name, without its NUL; any bytes (display with
    /// [`CodeLoad::name_lossy`]).
    pub name: &'a [u8],
    /// The code: the last `code_size` bytes of the record, as perf reads it.
    pub code: &'a [u8],
}

impl CodeLoad<'_> {
    /// The name, invalid UTF-8 replaced by `U+FFFD`.
    pub fn name_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.name)
    }
}

/// `JIT_CODE_MOVE`: the function `code_index` now lives at `new_code_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodeMove {
    /// The process.
    pub pid: u32,
    /// The thread that moved the code.
    pub tid: u32,
    /// Virtual address of the code at its new place.
    pub vma: u64,
    /// Where the code was.
    pub old_code_addr: u64,
    /// Where the code is now.
    pub new_code_addr: u64,
    /// Bytes of code (cannot change by a move).
    pub code_size: u64,
    /// The LOAD's `code_index`.
    pub code_index: u64,
}

/// `JIT_CODE_DEBUG_INFO`: source positions of the next LOAD's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugInfo<'a> {
    /// Address of the code described (the next LOAD's `code_addr`).
    pub code_addr: u64,
    /// The record's `nr_entry`; [`DebugInfo::entries`] holds fewer when the
    /// record ends before them.
    pub declared_entries: u64,
    /// The entries that fit in the record, at most `declared_entries`.
    pub entries: Vec<DebugEntry<'a>>,
}

impl DebugInfo<'_> {
    /// True when every declared entry was inside the record.
    pub fn is_complete(&self) -> bool {
        self.entries.len() as u64 == self.declared_entries
    }
}

/// One source position of a [`DebugInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugEntry<'a> {
    /// The code address it describes.
    pub addr: u64,
    /// The source line (perf reads it as `int`).
    pub line: u32,
    /// The discriminator (V8 puts the column here).
    pub discrim: u32,
    /// The source file name as written; the `"\xff"` convention ("same file
    /// as the previous entry") is resolved to the previous entry's name.
    /// V8 11.3 sometimes writes heap garbage here.
    pub name: &'a [u8],
}

impl DebugEntry<'_> {
    /// The file name, invalid UTF-8 replaced by `U+FFFD`.
    pub fn name_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.name)
    }
}

/// `JIT_CODE_UNWINDING_INFO`: `.eh_frame` and `.eh_frame_hdr` of the next LOAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindingInfo<'a> {
    /// Bytes of unwinding data (`eh_frame` and `eh_frame_hdr` together).
    pub unwinding_size: u64,
    /// Bytes of `.eh_frame_hdr` at the end of the unwinding data.
    pub eh_frame_hdr_size: u64,
    /// Bytes of unwinding data the process mapped after the code (0 or
    /// `unwinding_size`, usually).
    pub mapped_size: u64,
    /// The `.eh_frame` part: the first `unwinding_size - eh_frame_hdr_size` bytes.
    pub eh_frame: &'a [u8],
    /// The `.eh_frame_hdr` part: the last `eh_frame_hdr_size` bytes.
    pub eh_frame_hdr: &'a [u8],
}

/// The records of a jitdump, in file order (from [`Jitdump::records`]).
///
/// Yields each record with its offset, or an error with its offset. After
/// an error whose [`JitdumpErrorKind::ends_records`] holds, iteration ends.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    data: &'a [u8],
    pos: usize,
    order: ByteOrder,
    finished: bool,
}

impl<'a> Records<'a> {
    /// Offset of the next record.
    pub fn offset(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, JitdumpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let offset = self.pos;
        let remaining = self.data.get(offset..).unwrap_or_default();
        if remaining.is_empty() {
            self.finished = true;
            return None;
        }
        let mut header = FieldReader::new(remaining, self.order);
        let (Some(id), Some(size), Some(timestamp)) = (header.u32(), header.u32(), header.u64()) else {
            self.finished = true;
            let kind = JitdumpErrorKind::TruncatedRecordHeader { available: remaining.len() };
            return Some(Err(JitdumpError { offset, kind }));
        };
        let end_error = if (size as usize) < RECORD_HEADER_SIZE {
            Some(JitdumpErrorKind::RecordTooSmall { size })
        } else if size as usize > remaining.len() {
            Some(JitdumpErrorKind::RecordOverrun { size, available: remaining.len() })
        } else {
            None
        };
        if let Some(kind) = end_error {
            self.finished = true;
            return Some(Err(JitdumpError { offset, kind }));
        }
        let record = remaining.get(..size as usize).unwrap_or_default();
        self.pos = offset.saturating_add(size as usize);
        let payload = record.get(RECORD_HEADER_SIZE..).unwrap_or_default();
        Some(
            parse_body(id, size, payload, self.order)
                .map(|body| Record { offset, size, timestamp, body })
                .map_err(|kind| JitdumpError { offset, kind }),
        )
    }
}

/// The payload of a record of type `id` and `total_size` `size`.
fn parse_body(id: u32, size: u32, payload: &[u8], order: ByteOrder) -> Result<RecordBody<'_>, JitdumpErrorKind> {
    let overrun = |needed: u64| JitdumpErrorKind::FieldsOverrun { record: record_name(id), needed, size };
    let fixed = |fields: usize| overrun((RECORD_HEADER_SIZE + fields) as u64);
    let mut fields = FieldReader::new(payload, order);
    match id {
        record_id::CODE_LOAD => {
            let (Some(pid), Some(tid), Some(vma), Some(code_addr), Some(code_size), Some(code_index)) =
                (fields.u32(), fields.u32(), fields.u64(), fields.u64(), fields.u64(), fields.u64())
            else {
                return Err(fixed(CODE_LOAD_FIELDS));
            };
            let after_fields = fields.rest();
            let needed = || ((RECORD_HEADER_SIZE + CODE_LOAD_FIELDS) as u64).saturating_add(code_size).saturating_add(1);
            let name_len = usize::try_from(code_size)
                .ok()
                .and_then(|code_size| after_fields.len().checked_sub(code_size))
                .ok_or_else(|| overrun(needed()))?;
            let (name_area, code) = after_fields.split_at(name_len);
            if name_area.is_empty() {
                return Err(overrun(needed()));
            }
            let name = FieldReader::new(name_area, order).c_string().ok_or(JitdumpErrorKind::UnterminatedName)?;
            Ok(RecordBody::CodeLoad(CodeLoad { pid, tid, vma, code_addr, code_size, code_index, name, code }))
        }
        record_id::CODE_MOVE => {
            let (Some(pid), Some(tid), Some(vma), Some(old_code_addr), Some(new_code_addr), Some(code_size), Some(code_index)) =
                (fields.u32(), fields.u32(), fields.u64(), fields.u64(), fields.u64(), fields.u64(), fields.u64())
            else {
                return Err(fixed(CODE_MOVE_FIELDS));
            };
            Ok(RecordBody::CodeMove(CodeMove { pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index }))
        }
        record_id::CODE_DEBUG_INFO => {
            let (Some(code_addr), Some(declared_entries)) = (fields.u64(), fields.u64()) else {
                return Err(fixed(DEBUG_INFO_FIELDS));
            };
            // Entries are walked only inside the record and never past
            // `nr_entry` (padding cannot be told from entries); a garbage
            // name shifts the entries after it, not the records after it.
            let most_that_fit = fields.rest().len() / (DEBUG_ENTRY_FIXED + 1);
            let mut entries: Vec<DebugEntry> =
                Vec::with_capacity(usize::try_from(declared_entries).unwrap_or(usize::MAX).min(most_that_fit));
            while (entries.len() as u64) < declared_entries {
                let (Some(addr), Some(line), Some(discrim), Some(mut name)) =
                    (fields.u64(), fields.u32(), fields.u32(), fields.c_string())
                else {
                    break;
                };
                if name == [0xff] {
                    if let Some(previous) = entries.last() {
                        name = previous.name;
                    }
                }
                entries.push(DebugEntry { addr, line, discrim, name });
            }
            Ok(RecordBody::DebugInfo(DebugInfo { code_addr, declared_entries, entries }))
        }
        record_id::CODE_CLOSE => Ok(RecordBody::Close),
        record_id::CODE_UNWINDING_INFO => {
            let (Some(unwinding_size), Some(eh_frame_hdr_size), Some(mapped_size)) = (fields.u64(), fields.u64(), fields.u64())
            else {
                return Err(fixed(UNWINDING_INFO_FIELDS));
            };
            let needed = ((RECORD_HEADER_SIZE + UNWINDING_INFO_FIELDS) as u64).saturating_add(unwinding_size);
            let data = usize::try_from(unwinding_size).ok().and_then(|len| fields.take(len)).ok_or_else(|| overrun(needed))?;
            let eh_frame_len = usize::try_from(eh_frame_hdr_size)
                .ok()
                .and_then(|hdr_len| data.len().checked_sub(hdr_len))
                .ok_or(JitdumpErrorKind::EhFrameHeaderTooLarge { unwinding_size, eh_frame_hdr_size })?;
            let (eh_frame, eh_frame_hdr) = data.split_at(eh_frame_len);
            Ok(RecordBody::UnwindingInfo(UnwindingInfo { unwinding_size, eh_frame_hdr_size, mapped_size, eh_frame, eh_frame_hdr }))
        }
        _ => Ok(RecordBody::Unknown { id, body: payload }),
    }
}

/// Where a [`CodeRegion`] is from a time on: its LOAD, then each MOVE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// Address of the code's first byte.
    pub address: u64,
    /// Timestamp of the LOAD or MOVE that put it there.
    pub since: u64,
    /// Timestamp of the next MOVE of the region, if any: the placement is
    /// valid at `since <= t < until`.
    pub until: Option<u64>,
    /// File offset of the LOAD or MOVE record.
    pub record_offset: usize,
}

impl Placement {
    fn valid_at(&self, time: Option<u64>) -> bool {
        match time {
            Some(time) => self.since <= time && self.until.is_none_or(|until| time < until),
            None => self.until.is_none(),
        }
    }

    fn covers(&self, address: u64, size: u64) -> bool {
        address.checked_sub(self.address).is_some_and(|within| within < size)
    }
}

/// One generated function: a LOAD, what preceded it, and where it lived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeRegion<'a> {
    /// The function's name (display with [`CodeRegion::name_lossy`]).
    pub name: &'a [u8],
    /// The LOAD's `code_index`.
    pub code_index: u64,
    /// The code.
    pub code: &'a [u8],
    /// The process, from the LOAD.
    pub pid: u32,
    /// The thread, from the LOAD.
    pub tid: u32,
    /// File offset of the LOAD record.
    pub load_offset: usize,
    /// Timestamp of the LOAD record.
    pub load_time: u64,
    /// The DEBUG_INFO record that preceded the LOAD, if any.
    pub debug_info: Option<DebugInfo<'a>>,
    /// The UNWINDING_INFO record that preceded the LOAD, if any.
    pub unwinding_info: Option<UnwindingInfo<'a>>,
    /// Where the code was: the LOAD's address, then one entry per MOVE, in
    /// file order.
    pub placements: Vec<Placement>,
}

impl CodeRegion<'_> {
    /// The name, invalid UTF-8 replaced by `U+FFFD`.
    pub fn name_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.name)
    }

    /// Bytes of code.
    pub fn size(&self) -> u64 {
        self.code.len() as u64
    }

    /// Where the code was at `time` (`None`: where it is last), if it existed then.
    pub fn placement_at(&self, time: Option<u64>) -> Option<&Placement> {
        self.placements.iter().find(|p| p.valid_at(time))
    }

    /// The code's address at `time` (`None`: the latest), if it existed then.
    pub fn address_at(&self, time: Option<u64>) -> Option<u64> {
        self.placement_at(time).map(|p| p.address)
    }
}

/// One placement in the address index of [`CodeRegions`].
#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    start: u64,
    region: usize,
    placement: usize,
}

/// The generated functions of a jitdump, searchable by address and time.
///
/// Built from the records in file order: DEBUG_INFO and UNWINDING_INFO wait
/// for the next LOAD (the last one of each kind wins, as in perf); a LOAD
/// makes a [`CodeRegion`]; a MOVE gives the latest region with its
/// `code_index` a new address from the MOVE's timestamp on (its size and
/// name stay the LOAD's: the specification says a move cannot change them).
/// Errors from the records, and MOVEs of unknown functions, are kept in
/// [`CodeRegions::errors`].
#[derive(Debug, Clone, Default)]
pub struct CodeRegions<'a> {
    regions: Vec<CodeRegion<'a>>,
    errors: Vec<JitdumpError>,
    /// Every placement, by start address (file order among equal starts).
    index: Vec<IndexEntry>,
    /// The largest region size: how far below an address a covering
    /// placement can start.
    largest: u64,
}

impl<'a> CodeRegions<'a> {
    /// The regions of a whole jitdump.
    pub fn from_dump(dump: &Jitdump<'a>) -> Self {
        Self::from_records(dump.records())
    }

    /// The regions described by `records` (in file order).
    pub fn from_records(records: impl IntoIterator<Item = Result<Record<'a>, JitdumpError>>) -> Self {
        let mut regions: Vec<CodeRegion<'a>> = Vec::new();
        let mut errors = Vec::new();
        let mut by_code_index: HashMap<u64, usize> = HashMap::new();
        let mut pending_debug_info = None;
        let mut pending_unwinding_info = None;
        for record in records {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    errors.push(error);
                    continue;
                }
            };
            match record.body {
                RecordBody::CodeLoad(load) => {
                    by_code_index.insert(load.code_index, regions.len());
                    regions.push(CodeRegion {
                        name: load.name,
                        code_index: load.code_index,
                        code: load.code,
                        pid: load.pid,
                        tid: load.tid,
                        load_offset: record.offset,
                        load_time: record.timestamp,
                        debug_info: pending_debug_info.take(),
                        unwinding_info: pending_unwinding_info.take(),
                        placements: vec![Placement {
                            address: load.code_addr,
                            since: record.timestamp,
                            until: None,
                            record_offset: record.offset,
                        }],
                    });
                }
                RecordBody::CodeMove(code_move) => {
                    let Some(region) = by_code_index.get(&code_move.code_index).and_then(|&i| regions.get_mut(i)) else {
                        let kind = JitdumpErrorKind::MoveOfUnknownCode { code_index: code_move.code_index };
                        errors.push(JitdumpError { offset: record.offset, kind });
                        continue;
                    };
                    if let Some(last) = region.placements.last_mut() {
                        last.until = Some(record.timestamp);
                    }
                    region.placements.push(Placement {
                        address: code_move.new_code_addr,
                        since: record.timestamp,
                        until: None,
                        record_offset: record.offset,
                    });
                }
                RecordBody::DebugInfo(debug_info) => pending_debug_info = Some(debug_info),
                RecordBody::UnwindingInfo(unwinding_info) => pending_unwinding_info = Some(unwinding_info),
                RecordBody::Close | RecordBody::Unknown { .. } => {}
            }
        }
        let mut index: Vec<IndexEntry> = regions
            .iter()
            .enumerate()
            .flat_map(|(region, r)| {
                r.placements.iter().enumerate().map(move |(placement, p)| IndexEntry { start: p.address, region, placement })
            })
            .collect();
        index.sort_by_key(|entry| entry.start);
        let largest = regions.iter().map(CodeRegion::size).max().unwrap_or(0);
        CodeRegions { regions, errors, index, largest }
    }

    /// Every region, in LOAD order.
    pub fn regions(&self) -> &[CodeRegion<'a>] {
        &self.regions
    }

    /// Record errors and MOVEs of unknown functions, in file order.
    pub fn errors(&self) -> &[JitdumpError] {
        &self.errors
    }

    /// The latest region loaded with `code_index`.
    pub fn by_code_index(&self, code_index: u64) -> Option<&CodeRegion<'a>> {
        self.regions.iter().rev().find(|r| r.code_index == code_index)
    }

    /// The region whose code covers `address` at `time`: among the regions
    /// placed there then, the one of the latest LOAD or MOVE at or before
    /// `time` (the latest in the file on equal timestamps). With `None`, every
    /// region at its last place and the latest of them.
    pub fn region_at(&self, address: u64, time: Option<u64>) -> Option<&CodeRegion<'a>> {
        let above = self.index.partition_point(|entry| entry.start <= address);
        let candidates = self.index.get(..above).unwrap_or_default();
        candidates
            .iter()
            .rev()
            .take_while(|entry| address - entry.start < self.largest)
            .filter_map(|entry| {
                let region = self.regions.get(entry.region)?;
                let placement = region.placements.get(entry.placement)?;
                (placement.covers(address, region.size()) && placement.valid_at(time))
                    .then_some((placement.since, placement.record_offset, region))
            })
            .max_by_key(|&(since, record_offset, _)| (since, record_offset))
            .map(|(_, _, region)| region)
    }

    /// Each region that exists at `time` (`None`: at the end) with its
    /// address then; where several start at one address, only the latest
    /// LOAD or MOVE there (the code that replaced the others).
    pub fn visible_at(&self, time: Option<u64>) -> Vec<(u64, &CodeRegion<'a>)> {
        let mut by_start: HashMap<u64, (&Placement, &CodeRegion<'a>)> = HashMap::new();
        for region in &self.regions {
            let Some(placement) = region.placement_at(time) else { continue };
            let newer = |old: &(&Placement, &CodeRegion)| {
                (placement.since, placement.record_offset) > (old.0.since, old.0.record_offset)
            };
            match by_start.get(&placement.address) {
                Some(old) if !newer(old) => {}
                _ => {
                    by_start.insert(placement.address, (placement, region));
                }
            }
        }
        let mut visible: Vec<_> = by_start.into_values().map(|(p, region)| (p.address, region)).collect();
        visible.sort_by_key(|&(address, region)| (address, region.load_offset));
        visible
    }

    /// Adds the code of every region visible at `time` (see
    /// [`CodeRegions::visible_at`]) to `image` as a raw section named after
    /// the function, so that the flow decoder can follow PT through JIT code.
    /// Empty functions are left out. Returns the number of sections added.
    pub fn add_to_image(&self, image: &mut Image, time: Option<u64>) -> usize {
        let mut added = 0;
        for (address, region) in self.visible_at(time) {
            if !region.code.is_empty() {
                image.add_raw(&region.name_lossy(), address, region.code.to_vec());
                added += 1;
            }
        }
        added
    }

    /// Names the code of every region visible at `time` in `symbolizer`
    /// ([`Symbolizer::add_jit_function`]): `module` is what its context line
    /// shows as the module (e.g. the dump's file name), the JIT name is the
    /// function. Returns the number of functions added.
    pub fn add_to_symbolizer(&self, symbolizer: &mut Symbolizer, module: &str, time: Option<u64>) -> usize {
        let mut added = 0;
        for (address, region) in self.visible_at(time) {
            if !region.code.is_empty() {
                symbolizer.add_jit_function(module, &region.name_lossy(), address, region.size());
                added += 1;
            }
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Memory;

    /// Writes jitdump files field by field from the specification's layout,
    /// computing each record's `total_size` from what it wrote.
    struct DumpWriter {
        order: ByteOrder,
        bytes: Vec<u8>,
    }

    impl DumpWriter {
        fn new(order: ByteOrder, version: u32) -> Self {
            let mut writer = DumpWriter { order, bytes: Vec::new() };
            writer.u32(MAGIC);
            writer.u32(version);
            writer.u32(FILE_HEADER_SIZE as u32);
            writer.u32(62); // EM_X86_64
            writer.u32(0xdead_beef); // pad1, as V8 writes it
            writer.u32(4242); // pid
            writer.u64(1_795_329_053_911_788); // µs since the epoch, as V8
            writer.u64(0); // flags
            writer
        }

        fn u32(&mut self, value: u32) {
            let bytes = match self.order {
                ByteOrder::Little => value.to_le_bytes(),
                ByteOrder::Big => value.to_be_bytes(),
            };
            self.bytes.extend_from_slice(&bytes);
        }

        fn u64(&mut self, value: u64) {
            let bytes = match self.order {
                ByteOrder::Little => value.to_le_bytes(),
                ByteOrder::Big => value.to_be_bytes(),
            };
            self.bytes.extend_from_slice(&bytes);
        }

        /// Writes a record: header, then what `payload` writes; returns its offset.
        fn record(&mut self, id: u32, timestamp: u64, payload: impl FnOnce(&mut Self)) -> usize {
            let start = self.bytes.len();
            self.u32(id);
            self.u32(0); // total_size, patched below
            self.u64(timestamp);
            payload(self);
            let size = (self.bytes.len() - start) as u32;
            let size = match self.order {
                ByteOrder::Little => size.to_le_bytes(),
                ByteOrder::Big => size.to_be_bytes(),
            };
            self.bytes[start + 4..start + 8].copy_from_slice(&size);
            start
        }

        fn load(&mut self, timestamp: u64, code_addr: u64, code_index: u64, name: &str, code: &[u8]) -> usize {
            self.record(record_id::CODE_LOAD, timestamp, |w| {
                w.u32(4242);
                w.u32(4243);
                w.u64(code_addr);
                w.u64(code_addr);
                w.u64(code.len() as u64);
                w.u64(code_index);
                w.bytes.extend_from_slice(name.as_bytes());
                w.bytes.push(0);
                w.bytes.extend_from_slice(code);
            })
        }

        fn code_move(&mut self, timestamp: u64, old: u64, new: u64, size: u64, code_index: u64) -> usize {
            self.record(record_id::CODE_MOVE, timestamp, |w| {
                w.u32(4242);
                w.u32(4243);
                w.u64(new);
                w.u64(old);
                w.u64(new);
                w.u64(size);
                w.u64(code_index);
            })
        }

        /// A DEBUG_INFO with raw entry names (NUL added), padded to 8 bytes as V8 pads it.
        fn debug_info(&mut self, timestamp: u64, code_addr: u64, entries: &[(u64, u32, u32, &[u8])]) -> usize {
            let start = self.bytes.len();
            self.record(record_id::CODE_DEBUG_INFO, timestamp, |w| {
                w.u64(code_addr);
                w.u64(entries.len() as u64);
                for &(addr, line, discrim, name) in entries {
                    w.u64(addr);
                    w.u32(line);
                    w.u32(discrim);
                    w.bytes.extend_from_slice(name);
                    w.bytes.push(0);
                }
                while !(w.bytes.len() - start).is_multiple_of(8) {
                    w.bytes.push(0);
                }
            })
        }

        /// An UNWINDING_INFO with `eh_frame` then `eh_frame_hdr`, plus 4 padding bytes (as V8).
        fn unwinding_info(&mut self, timestamp: u64, eh_frame: &[u8], eh_frame_hdr: &[u8], mapped_size: u64) -> usize {
            self.record(record_id::CODE_UNWINDING_INFO, timestamp, |w| {
                w.u64((eh_frame.len() + eh_frame_hdr.len()) as u64);
                w.u64(eh_frame_hdr.len() as u64);
                w.u64(mapped_size);
                w.bytes.extend_from_slice(eh_frame);
                w.bytes.extend_from_slice(eh_frame_hdr);
                w.bytes.extend_from_slice(&[0; 4]);
            })
        }

        fn close(&mut self, timestamp: u64) -> usize {
            self.record(record_id::CODE_CLOSE, timestamp, |_| {})
        }

        fn unknown(&mut self, id: u32, timestamp: u64, body: &[u8]) -> usize {
            self.record(id, timestamp, |w| w.bytes.extend_from_slice(body))
        }
    }

    const EH_FRAME: &[u8] = b"CIE+FDE bytes, 23 long";
    const EH_FRAME_HDR: [u8; 20] = [1, 0x1b, 3, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const HOT_CODE: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0x90]; // push rbp; mov rbp,rsp; pop rbp; ret; nop

    /// Offsets of the records [`sample`] writes.
    struct SampleOffsets {
        debug_info: usize,
        unwinding_info: usize,
        hot: usize,
        unknown: usize,
        cold: usize,
        code_move: usize,
        twin: usize,
        close: usize,
    }

    /// All five record types, an unknown id, odd sizes; `hot` moves at t=300.
    fn sample(order: ByteOrder) -> (Vec<u8>, SampleOffsets) {
        let mut w = DumpWriter::new(order, 1);
        let debug_info = w.debug_info(
            100,
            0x7f00_0000_1000,
            &[(0x7f00_0000_1000, 3, 13, b"/tmp/script.js"), (0x7f00_0000_1004, 4, 1, b"\xff")],
        );
        let unwinding_info = w.unwinding_info(101, EH_FRAME, &EH_FRAME_HDR, 0);
        let hot = w.load(102, 0x7f00_0000_1000, 7, "JS:*hot /tmp/script.js:3", HOT_CODE);
        let unknown = w.unknown(99, 150, b"future");
        let cold = w.load(200, 0x7f00_0000_2000, 8, "Builtin:Cold", &[0xcc; 3]);
        let code_move = w.code_move(300, 0x7f00_0000_1000, 0x7f00_0000_3000, HOT_CODE.len() as u64, 7);
        // New code where `hot` was, under another index (V8 reuses addresses).
        let twin = w.load(400, 0x7f00_0000_1000, 9, "Stub:twin", &[0x90, 0xc3]);
        let close = w.close(500);
        (w.bytes, SampleOffsets { debug_info, unwinding_info, hot, unknown, cold, code_move, twin, close })
    }

    fn all_records(bytes: &[u8]) -> Vec<Result<Record<'_>, JitdumpError>> {
        Jitdump::parse(bytes).unwrap().records().collect()
    }

    #[test]
    fn sample_has_unaligned_records() {
        let (_, at) = sample(ByteOrder::Little);
        let unaligned = [at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close].iter().filter(|&&o| o % 8 != 0).count();
        assert!(unaligned >= 3, "test data should exercise unaligned records ({unaligned})");
    }

    #[test]
    fn both_byte_orders_read_back_exactly() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let (bytes, at) = sample(order);
            let dump = Jitdump::parse(&bytes).unwrap();
            assert_eq!(
                *dump.header(),
                Header {
                    byte_order: order,
                    version: 1,
                    size: 40,
                    elf_mach: 62,
                    pad1: 0xdead_beef,
                    pid: 4242,
                    timestamp: 1_795_329_053_911_788,
                    flags: 0
                }
            );
            let records: Vec<Record> = dump.records().map(Result::unwrap).collect();
            let offsets: Vec<usize> = records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, [at.debug_info, at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close]);
            let times: Vec<u64> = records.iter().map(|r| r.timestamp).collect();
            assert_eq!(times, [100, 101, 102, 150, 200, 300, 400, 500]);
            assert_eq!(
                records[0].body,
                RecordBody::DebugInfo(DebugInfo {
                    code_addr: 0x7f00_0000_1000,
                    declared_entries: 2,
                    entries: vec![
                        DebugEntry { addr: 0x7f00_0000_1000, line: 3, discrim: 13, name: b"/tmp/script.js" },
                        DebugEntry { addr: 0x7f00_0000_1004, line: 4, discrim: 1, name: b"/tmp/script.js" },
                    ],
                })
            );
            assert_eq!(
                records[1].body,
                RecordBody::UnwindingInfo(UnwindingInfo {
                    unwinding_size: 42,
                    eh_frame_hdr_size: 20,
                    mapped_size: 0,
                    eh_frame: EH_FRAME,
                    eh_frame_hdr: &EH_FRAME_HDR,
                })
            );
            assert_eq!(
                records[2].body,
                RecordBody::CodeLoad(CodeLoad {
                    pid: 4242,
                    tid: 4243,
                    vma: 0x7f00_0000_1000,
                    code_addr: 0x7f00_0000_1000,
                    code_size: 7,
                    code_index: 7,
                    name: b"JS:*hot /tmp/script.js:3",
                    code: HOT_CODE,
                })
            );
            assert_eq!(records[2].size as usize, 16 + 40 + 25 + 7);
            assert_eq!(records[3].body, RecordBody::Unknown { id: 99, body: b"future" });
            assert_eq!(records[3].body.kind_name(), "unknown");
            assert_eq!(
                records[5].body,
                RecordBody::CodeMove(CodeMove {
                    pid: 4242,
                    tid: 4243,
                    vma: 0x7f00_0000_3000,
                    old_code_addr: 0x7f00_0000_1000,
                    new_code_addr: 0x7f00_0000_3000,
                    code_size: 7,
                    code_index: 7,
                })
            );
            assert_eq!(records[7].body, RecordBody::Close);
            assert_eq!(records[7].size, 16);
        }
    }

    /// The reference's synthetic file (DEBUG_INFO, UNWINDING_INFO, LOAD of 89
    /// bytes, MOVE, CLOSE; 361 bytes), typed in from its annotated hex dump.
    #[test]
    fn annotated_synthetic_file_from_the_reference() {
        let hex = |s: &str| -> Vec<u8> {
            let digits: String = s.split_whitespace().collect();
            (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap()).collect()
        };
        let ts = "1122334455667788";
        let mut file = hex("4454 694a 0100 0000 2800 0000 3e00 0000 0000 0000 087e 0000 d93d 85cd 8500 0000 0000 0000 0000 0000");
        file.extend(hex(&format!("0200 0000 5800 0000 {ts} 0010 0000 0000 0000 0200 0000 0000 0000")));
        file.extend(hex("0010 0000 0000 0000 0a00 0000 0000 0000"));
        file.extend(b"synthetic.c\0");
        file.extend(hex("0410 0000 0000 0000 0b00 0000 0000 0000"));
        file.extend(b"synthetic.c\0");
        assert_eq!(file.len(), 0x80);
        file.extend(hex(&format!("0400 0000 4000 0000 {ts} 1400 0000 0000 0000 1400 0000 0000 0000 0000 0000 0000 0000")));
        file.extend(hex("011b 033b 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000"));
        assert_eq!(file.len(), 0xc0);
        file.extend(hex(&format!("0000 0000 5900 0000 {ts} 087e 0000 087e 0000 0010 0000 0000 0000 0010 0000 0000 0000")));
        file.extend(hex("1200 0000 0000 0000 0000 0000 0000 0000"));
        file.extend(b"synthetic_burn\0");
        file.extend([0x90; 18]);
        assert_eq!(file.len(), 0x119);
        file.extend(hex(&format!("0100 0000 4000 0000 {ts} 087e 0000 087e 0000 0020 0000 0000 0000")));
        file.extend(hex("0010 0000 0000 0000 0020 0000 0000 0000 1200 0000 0000 0000 0000 0000 0000 0000"));
        assert_eq!(file.len(), 0x159);
        file.extend(hex(&format!("0300 0000 1000 0000 {ts}")));
        assert_eq!(file.len(), 361);

        let dump = Jitdump::parse(&file).unwrap();
        assert_eq!(dump.header().pid, 0x7e08);
        let kinds: Vec<(usize, &str)> =
            dump.records().map(|r| r.unwrap()).map(|r| (r.offset, r.body.kind_name())).collect();
        assert_eq!(kinds, [(0x28, "debug_info"), (0x80, "unwinding_info"), (0xc0, "load"), (0x119, "move"), (0x159, "close")]);
        let regions = CodeRegions::from_dump(&dump);
        let [burn] = regions.regions() else { panic!("one region: {regions:?}") };
        assert_eq!(burn.name, b"synthetic_burn");
        assert_eq!(burn.code, [0x90; 18]);
        assert_eq!(burn.debug_info.as_ref().unwrap().entries[1].line, 11);
        let unwinding = burn.unwinding_info.unwrap();
        assert_eq!((unwinding.eh_frame, unwinding.eh_frame_hdr.len()), (&[][..], 20));
        assert_eq!(burn.address_at(None), Some(0x2000));
        assert!(regions.errors().is_empty());
    }

    #[test]
    fn regions_collect_pending_info_and_moves() {
        let (bytes, at) = sample(ByteOrder::Big);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
        assert!(regions.errors().is_empty());
        let [hot, cold, twin] = regions.regions() else { panic!("three regions: {regions:?}") };
        assert_eq!((hot.code_index, hot.name_lossy().as_ref(), hot.load_time, hot.load_offset), (7, "JS:*hot /tmp/script.js:3", 102, at.hot));
        assert_eq!(hot.debug_info.as_ref().map(|d| d.entries.len()), Some(2));
        assert_eq!(hot.unwinding_info.map(|u| u.eh_frame), Some(EH_FRAME));
        assert_eq!(
            hot.placements,
            [
                Placement { address: 0x7f00_0000_1000, since: 102, until: Some(300), record_offset: at.hot },
                Placement { address: 0x7f00_0000_3000, since: 300, until: None, record_offset: at.code_move },
            ]
        );
        // Pending info goes to the next LOAD only.
        assert_eq!((cold.debug_info.as_ref(), cold.unwinding_info), (None, None));
        assert_eq!(twin.placements.len(), 1);
        assert_eq!(regions.by_code_index(8).map(|r| r.name), Some(&b"Builtin:Cold"[..]));
    }

    #[test]
    fn region_at_follows_moves_and_reuse_over_time() {
        let (bytes, _) = sample(ByteOrder::Little);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
        let name_at = |address: u64, time: Option<u64>| regions.region_at(address, time).map(|r| r.name_lossy().into_owned());
        let hot = Some("JS:*hot /tmp/script.js:3".to_string());
        // Before the LOAD nothing is there; from it until the MOVE, at the old address.
        assert_eq!(name_at(0x7f00_0000_1000, Some(101)), None);
        assert_eq!(name_at(0x7f00_0000_1000, Some(102)), hot);
        assert_eq!(name_at(0x7f00_0000_1006, Some(299)), hot);
        assert_eq!(name_at(0x7f00_0000_1007, Some(299)), None, "one past the end");
        assert_eq!(name_at(0x7f00_0000_3000, Some(299)), None);
        // From the MOVE on, at the new address; the old one is free until `twin`.
        assert_eq!(name_at(0x7f00_0000_3000, Some(300)), hot);
        assert_eq!(name_at(0x7f00_0000_1000, Some(300)), None);
        assert_eq!(name_at(0x7f00_0000_1000, Some(400)), Some("Stub:twin".into()));
        assert_eq!(name_at(0x7f00_0000_1002, Some(400)), None, "twin is 2 bytes");
        // Latest overall.
        assert_eq!(name_at(0x7f00_0000_3006, None), hot);
        assert_eq!(name_at(0x7f00_0000_1001, None), Some("Stub:twin".into()));
        assert_eq!(name_at(0x7f00_0000_2002, None), Some("Builtin:Cold".into()));
        assert_eq!(name_at(0x7f00_0000_2003, None), None);
        assert_eq!(name_at(0, None), None);
        assert_eq!(name_at(u64::MAX, Some(u64::MAX)), None);
    }

    #[test]
    fn same_address_loaded_twice_resolves_to_the_latest_load() {
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        w.load(10, 0x5000, 2207, "Stub:js-to-wasm:ii:i", &[0x90; 16]);
        w.load(20, 0x5000, 2208, "Stub:js-to-wasm:ii:i (again)", &[0xc3; 16]);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
        assert_eq!(regions.region_at(0x5008, Some(15)).map(|r| r.code_index), Some(2207));
        assert_eq!(regions.region_at(0x5008, Some(20)).map(|r| r.code_index), Some(2208));
        assert_eq!(regions.region_at(0x5008, None).map(|r| r.code_index), Some(2208));
        let mut image = Image::new();
        assert_eq!(regions.add_to_image(&mut image, None), 1);
        let mut buf = [0u8; 1];
        assert_eq!(image.read(0x500f, &mut buf), 1);
        assert_eq!(buf, [0xc3]);
    }

    #[test]
    fn image_and_symbolizer_see_the_code_at_a_time() {
        let (bytes, _) = sample(ByteOrder::Little);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
        let mut before_move = Image::new();
        assert_eq!(regions.add_to_image(&mut before_move, Some(250)), 2);
        let mut buf = [0u8; 16];
        assert_eq!(before_move.read(0x7f00_0000_1000, &mut buf), HOT_CODE.len());
        assert_eq!(&buf[..HOT_CODE.len()], HOT_CODE);
        assert_eq!(&*before_move.section_at(0x7f00_0000_1000).unwrap().name, "JS:*hot /tmp/script.js:3");
        let mut latest = Image::new();
        assert_eq!(regions.add_to_image(&mut latest, None), 3);
        assert_eq!(latest.read(0x7f00_0000_3001, &mut buf), HOT_CODE.len() - 1);
        assert_eq!(&*latest.section_at(0x7f00_0000_1000).unwrap().name, "Stub:twin");

        let mut symbolizer = Symbolizer::new();
        assert_eq!(regions.add_to_symbolizer(&mut symbolizer, "jit-4242.dump", None), 3);
        let context = symbolizer.lookup(0x7f00_0000_3004);
        assert_eq!(context.function, Some(("JS:*hot /tmp/script.js:3".into(), 0x7f00_0000_3000)));
        assert_eq!(context.describe(0x7f00_0000_3004), "jit-4242.dump`JS:*hot /tmp/script.js:3 + 4");
        assert_eq!(symbolizer.lookup(0x7f00_0000_3007), Default::default());
    }

    /// The flow decoder follows Intel PT through JIT code placed by a jitdump.
    #[test]
    fn flow_decoder_reads_jit_code_from_the_image() {
        // 1000: xor eax,eax; 1002: inc eax; 1004: cmp eax,3; 1007: jne 1002; 1009: ret
        let code = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x03, 0x75, 0xf9, 0xc3];
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        w.load(1, 0x7f00_0000_1000, 0, "JS:*count /tmp/count.js:1:1", &code);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
        let mut image = Image::new();
        regions.add_to_image(&mut image, None);
        let script = "psb\nmode.exec cs.l\npsbend\ntip.pge 7f0000001000\ntnt.8 !!.\ntip.pgd 7f0000002000\n";
        let trace = crate::packet::script::encode(&crate::packet::script::parse(script).unwrap()).unwrap();
        let executed: Vec<u64> = crate::flow::FlowDecoder::new(&trace, &image)
            .decode_all()
            .into_iter()
            .filter_map(|item| match item {
                crate::flow::Item::Instruction { ip } => Some(ip - 0x7f00_0000_0000),
                crate::flow::Item::Error { offset, error } => panic!("error at {offset}: {error:?}"),
                crate::flow::Item::Event(_) => None,
            })
            .collect();
        assert_eq!(executed, [0x1000, 0x1002, 0x1004, 0x1007, 0x1002, 0x1004, 0x1007, 0x1002, 0x1004, 0x1007, 0x1009]);
    }

    #[test]
    fn header_errors() {
        let (good, _) = sample(ByteOrder::Little);
        let kind = |bytes: &[u8]| Jitdump::parse(bytes).unwrap_err().kind;
        assert_eq!(kind(&good[..3]), JitdumpErrorKind::TruncatedFileHeader { available: 3 });
        assert_eq!(kind(&good[..39]), JitdumpErrorKind::TruncatedFileHeader { available: 39 });
        assert_eq!(kind(b"ELF\x7f and more bytes than a header has....."), JitdumpErrorKind::BadMagic(0x7f46_4c45));
        let mut version_3 = good.clone();
        version_3[4] = 3;
        assert_eq!(kind(&version_3), JitdumpErrorKind::UnsupportedVersion(3));
        let mut version_2 = good.clone();
        version_2[4] = 2;
        assert_eq!(Jitdump::parse(&version_2).unwrap().header().version, 2);
        let mut small = good.clone();
        small[8] = 39;
        assert_eq!(kind(&small), JitdumpErrorKind::BadFileHeaderSize { size: 39, file_size: good.len() });
        // A larger header is skipped by its size; the spare bytes are not records.
        let mut large = DumpWriter::new(ByteOrder::Big, 1);
        large.bytes[8..12].copy_from_slice(&48u32.to_be_bytes());
        large.bytes.extend_from_slice(&[0xee; 8]);
        let close = large.close(5);
        let records: Vec<usize> = all_records(&large.bytes).into_iter().map(|r| r.unwrap().offset).collect();
        assert_eq!((close, records), (48, vec![48]));
        // Flags are kept, unknown bits included.
        let mut flagged = DumpWriter::new(ByteOrder::Little, 1);
        flagged.bytes[32..40].copy_from_slice(&0x8000_0000_0000_0001u64.to_le_bytes());
        let header = *Jitdump::parse(&flagged.bytes).unwrap().header();
        assert!(header.has_arch_timestamps());
        assert_eq!(header.flags, 0x8000_0000_0000_0001);
    }

    #[test]
    fn truncation_anywhere_keeps_every_intact_record() {
        let (bytes, at) = sample(ByteOrder::Little);
        let starts = [at.debug_info, at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close, bytes.len()];
        for cut in FILE_HEADER_SIZE..=bytes.len() {
            let records = all_records(&bytes[..cut]);
            let intact = starts.windows(2).filter(|w| w[1] <= cut).count();
            let (ok, errors): (Vec<_>, Vec<_>) = records.iter().partition(|r| r.is_ok());
            assert_eq!(ok.len(), intact, "cut at {cut}");
            let broken = starts[intact];
            if cut == broken {
                assert!(errors.is_empty(), "cut at {cut}: {errors:?}");
                continue;
            }
            let available = cut - broken;
            let expected = if available < RECORD_HEADER_SIZE {
                JitdumpErrorKind::TruncatedRecordHeader { available }
            } else {
                JitdumpErrorKind::RecordOverrun { size: (starts[intact + 1] - broken) as u32, available }
            };
            assert_eq!(records.last(), Some(&Err(JitdumpError { offset: broken, kind: expected })), "cut at {cut}");
            assert_eq!(errors.len(), 1);
        }
    }

    #[test]
    fn record_smaller_than_its_header_ends_reading() {
        let (mut bytes, at) = sample(ByteOrder::Little);
        bytes[at.cold + 4..at.cold + 8].copy_from_slice(&8u32.to_le_bytes());
        let records = all_records(&bytes);
        assert_eq!(records.len(), 5);
        assert_eq!(records[4], Err(JitdumpError { offset: at.cold, kind: JitdumpErrorKind::RecordTooSmall { size: 8 } }));
        assert!(records[..4].iter().all(Result::is_ok));
        assert!(records[4].as_ref().unwrap_err().kind.ends_records());
    }

    #[test]
    fn fields_that_do_not_fit_are_an_error_for_that_record_only() {
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        let short_load = w.record(record_id::CODE_LOAD, 1, |w| w.u64(0x1000));
        let huge_code = w.record(record_id::CODE_LOAD, 2, |w| {
            w.u32(1);
            w.u32(1);
            w.u64(0x1000);
            w.u64(0x1000);
            w.u64(u64::MAX); // code_size
            w.u64(0);
            w.bytes.extend_from_slice(b"f\0");
        });
        let no_name_room = w.record(record_id::CODE_LOAD, 3, |w| {
            w.u32(1);
            w.u32(1);
            w.u64(0x1000);
            w.u64(0x1000);
            w.u64(2);
            w.u64(0);
            w.bytes.extend_from_slice(&[0x90, 0xc3]);
        });
        let unterminated = w.record(record_id::CODE_LOAD, 4, |w| {
            w.u32(1);
            w.u32(1);
            w.u64(0x1000);
            w.u64(0x1000);
            w.u64(1);
            w.u64(0);
            w.bytes.extend_from_slice(b"name\xc3");
        });
        let short_move = w.record(record_id::CODE_MOVE, 5, |w| w.u64(1));
        let short_debug = w.record(record_id::CODE_DEBUG_INFO, 6, |w| w.u64(1));
        let big_unwinding = w.record(record_id::CODE_UNWINDING_INFO, 7, |w| {
            w.u64(u64::MAX - 1);
            w.u64(0);
            w.u64(0);
        });
        let bad_hdr = w.record(record_id::CODE_UNWINDING_INFO, 8, |w| {
            w.u64(4);
            w.u64(5);
            w.u64(0);
            w.bytes.extend_from_slice(&[0; 4]);
        });
        let stray_move = w.code_move(9, 0x1000, 0x2000, 1, 77);
        let good = w.load(10, 0x1000, 1, "good", &[0xc3]);
        let records = all_records(&w.bytes);
        let fields = |record, needed, size| JitdumpErrorKind::FieldsOverrun { record, needed, size };
        let expected_errors = [
            (short_load, fields("load", 56, 24)),
            (huge_code, fields("load", u64::MAX, 58)),
            (no_name_room, fields("load", 59, 58)),
            (unterminated, JitdumpErrorKind::UnterminatedName),
            (short_move, fields("move", 64, 24)),
            (short_debug, fields("debug_info", 32, 24)),
            (big_unwinding, fields("unwinding_info", u64::MAX, 40)),
            (bad_hdr, JitdumpErrorKind::EhFrameHeaderTooLarge { unwinding_size: 4, eh_frame_hdr_size: 5 }),
        ];
        let errors: Vec<(usize, JitdumpErrorKind)> =
            records.iter().filter_map(|r| r.as_ref().err()).map(|e| (e.offset, e.kind)).collect();
        assert_eq!(errors, expected_errors);
        assert!(matches!(records.last(), Some(Ok(Record { offset, .. })) if *offset == good));
        let regions = CodeRegions::from_records(records);
        assert_eq!(regions.regions().len(), 1);
        let last_error = regions.errors().last().unwrap();
        assert_eq!(*last_error, JitdumpError { offset: stray_move, kind: JitdumpErrorKind::MoveOfUnknownCode { code_index: 77 } });
        assert_eq!(last_error.to_string(), format!("offset {stray_move:#x}: move of code_index 77, which no earlier load defined"));
    }

    /// V8 11.3 writes some DEBUG_INFO names as 28 bytes whose first 16 are
    /// freed-heap garbage with NULs in them. The entries after such a name
    /// are misread (as in perf), but the record ends at its size, so the next
    /// records are read exactly.
    #[test]
    fn v8_garbage_debug_info_names_do_not_desynchronise_the_records() {
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        let garbage: &[u8] = b"\x84\xaf\x02\x00\x00\x00\x00\x00\xdd\x7e\x47\x3e\xd7\x68\x15\x23/e/script.js";
        let debug_info = w.debug_info(
            1,
            0x7f00_0000_0000,
            &[(0x7f00_0000_0040, 3, 13, garbage), (0x7f00_0000_0048, 4, 2, garbage), (0x7f00_0000_0050, 5, 2, b"node:fs")],
        );
        let unwinding = w.unwinding_info(2, &[], &EH_FRAME_HDR, 0);
        let load = w.load(3, 0x7f00_0000_0000, 12, "JS:*hot /e/script.js:3:13", &[0xc3; 0x60]);
        let records = all_records(&w.bytes);
        let offsets: Vec<usize> = records.iter().map(|r| r.as_ref().unwrap().offset).collect();
        assert_eq!(offsets, [debug_info, unwinding, load]);
        let Ok(Record { body: RecordBody::DebugInfo(info), .. }) = &records[0] else { panic!("{records:?}") };
        assert_eq!(info.declared_entries, 3);
        assert!(info.entries.len() <= 3);
        assert_eq!(info.entries[0].name, b"\x84\xaf\x02");
        let regions = CodeRegions::from_records(records.clone());
        assert_eq!(regions.regions()[0].debug_info.as_ref(), Some(info));
        assert_eq!(regions.region_at(0x7f00_0000_005f, None).map(|r| r.code_index), Some(12));
    }

    #[test]
    fn debug_info_stops_at_nr_entry_and_at_the_record_end() {
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        // nr_entry says 1000 but the record holds two entries and padding.
        let at = w.debug_info(1, 0x1000, &[(0x1000, 1, 0, b"a.js"), (0x1001, 2, 0, b"\xff")]);
        w.bytes[at + 24..at + 32].copy_from_slice(&1000u64.to_le_bytes());
        // nr_entry 1 with room for more: only one is read.
        let one = w.debug_info(2, 0x2000, &[(0x2000, 7, 0, b"b.js"), (0x2001, 8, 0, b"c.js")]);
        w.bytes[one + 24..one + 32].copy_from_slice(&1u64.to_le_bytes());
        // "\xff" first: nothing to refer to, kept as written.
        w.debug_info(3, 0x3000, &[(0x3000, 9, 0, b"\xff")]);
        let infos: Vec<DebugInfo> = all_records(&w.bytes)
            .into_iter()
            .map(|r| match r.unwrap().body {
                RecordBody::DebugInfo(info) => info,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(infos[0].entries.iter().map(|e| (e.line, e.name)).collect::<Vec<_>>(), [(1, &b"a.js"[..]), (2, b"a.js")]);
        assert!(!infos[0].is_complete());
        assert_eq!(infos[1].entries.len(), 1);
        assert!(infos[1].is_complete());
        assert_eq!(infos[2].entries[0].name, b"\xff");
        assert_eq!(infos[2].entries[0].name_lossy(), "\u{fffd}");
    }

    #[test]
    fn empty_functions_are_regions_but_cover_nothing() {
        let mut w = DumpWriter::new(ByteOrder::Little, 1);
        w.load(1, 0x1000, 0, "empty", &[]);
        let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
        assert_eq!(regions.regions()[0].size(), 0);
        assert_eq!(regions.region_at(0x1000, None), None);
        assert_eq!(regions.add_to_image(&mut Image::new(), None), 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let (sample_bytes, _) = sample(ByteOrder::Little);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..2000 {
            let mut bytes = sample_bytes.clone();
            for _ in 0..(round % 7 + 1) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = FILE_HEADER_SIZE + (state as usize) % (bytes.len() - FILE_HEADER_SIZE);
                bytes[at] = (state >> 32) as u8;
            }
            bytes.truncate(FILE_HEADER_SIZE + (state as usize >> 8) % (bytes.len() - FILE_HEADER_SIZE + 1));
            let Ok(dump) = Jitdump::parse(&bytes) else { continue };
            let regions = CodeRegions::from_dump(&dump);
            for region in regions.regions() {
                for placement in &region.placements {
                    let _ = regions.region_at(placement.address, Some(placement.since));
                }
            }
            regions.add_to_image(&mut Image::new(), None);
        }
    }
}
