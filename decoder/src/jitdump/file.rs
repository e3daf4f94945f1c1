//! The jitdump file format: the file header and the records, read as perf's
//! `util/jitdump.c` reads them (see the module documentation of
//! [`super`]), zero-copy, each record or error with its byte offset.

use std::borrow::Cow;

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
