//! The tool's log: its records (the table in [`super`]) read from bytes,
//! whole or as they arrive, each error with its offset.


/// The magic at the start of every log.
pub const LOG_MAGIC: &[u8; 8] = b"RTVGLOG2";

/// One record of the tool's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord<'a> {
    /// A translated superblock: `(address, bytes)` of each instruction, and
    /// its side exits: `(index of the instruction, to)` (`to` 0: not one
    /// address).
    Superblock {
        /// Its number (the tool numbers superblocks as it translates them).
        id: u32,
        /// Its first instruction's address.
        entry: u64,
        /// Where it goes when it runs to its end, if one address (else 0).
        next: u64,
        /// Its instructions: address and bytes.
        instructions: Vec<(u64, &'a [u8])>,
        /// Its side exits: the instruction's index and where the exit goes.
        exits: Vec<(u16, u64)>,
    },
    /// The current thread entered superblock `id` and left it by `way`
    /// (0: its end, unless a [`LogRecord::LeftAt`] follows; k: side exit
    /// k − 1).
    Entered {
        /// The superblock.
        id: u32,
        /// How it was left.
        way: u8,
    },
    /// It entered the superblock at the address the last one went to, and
    /// left it by `way` (as in [`LogRecord::Entered`]).
    EnteredNext {
        /// How it was left.
        way: u8,
    },
    /// The superblock just entered left by its side exit `exit`.
    LeftAt {
        /// The side exit's number in the superblock.
        exit: u16,
    },
    /// Code that is not the program's ran.
    Foreign,
    /// Thread `number` (its OS id `tid`) runs from now on.
    Thread {
        /// The tool's number for the thread.
        number: u32,
        /// Its Linux thread id.
        tid: u32,
    },
    /// `signal` is delivered before the instruction at `ip`.
    Signal {
        /// The signal number.
        signal: u32,
        /// Where the thread stands (the instruction not yet run).
        ip: u64,
    },
    /// Thread `number` ended at `ip`.
    ThreadEnd {
        /// The tool's number for the thread.
        number: u32,
        /// Where it stood last.
        ip: u64,
    },
    /// A file mapped into the program.
    Mapping {
        /// First address.
        start: u64,
        /// Length in bytes.
        length: u64,
        /// Offset in the file.
        offset: u64,
        /// Protection bits (4: executable).
        prot: u8,
        /// The file's path.
        path: &'a [u8],
    },
    /// The instruction limit was reached: the tool ended the program.
    Limit,
    /// The log is process `pid`'s (right after the magic).
    Process(u32),
    /// The program ends with the running thread at `ip`.
    Final(u64),
    /// Full state: instruction `index` of the superblock entered last
    /// changed registers.
    Registers {
        /// The instruction's index in the superblock.
        index: u16,
        /// What changed.
        changes: RegisterChanges<'a>,
    },
    /// Full state: thread `number`'s registers changed other than by an
    /// instruction.
    ThreadRegisters {
        /// The tool's number for the thread.
        number: u32,
        /// What changed.
        changes: RegisterChanges<'a>,
    },
    /// Full state: instruction `index` wrote `bytes` at `address` (the
    /// bytes after it).
    Wrote {
        /// The instruction's index in the superblock.
        index: u16,
        /// First address.
        address: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// Full state: instruction `index` read `size` bytes at `address`.
    Read {
        /// The instruction's index in the superblock.
        index: u16,
        /// First address.
        address: u64,
        /// How many bytes.
        size: u16,
    },
    /// Full state: memory written other than by an instruction, in thread
    /// `number`'s system call or signal delivery (0: before any ran).
    KernelWrote {
        /// The tool's number for the thread (0: none).
        number: u32,
        /// First address.
        address: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// Full state: memory mapped zero-filled.
    Zeroed {
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Full state: memory mapped, or its protection changed.
    Protected {
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
        /// Readable 1, writable 2, executable 4; the heap 8, the main
        /// stack 16 (neither: what it was).
        prot: u8,
    },
    /// Full state: memory unmapped.
    Unmapped {
        /// First address.
        start: u64,
        /// Bytes.
        length: u64,
    },
    /// Full state: memory moved (`mremap`).
    Moved {
        /// Where it was.
        from: u64,
        /// Where it is.
        to: u64,
        /// Bytes.
        length: u64,
    },
}

/// Register changes as the tool logs them: (piece, value) pairs, 9 bytes
/// each, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterChanges<'a>(&'a [u8]);

impl<'a> RegisterChanges<'a> {
    /// Each piece changed (numbered as [`retrace_decoder::full_state::piece`]
    /// says) and its value.
    pub fn iter(&self) -> impl Iterator<Item = (u8, u64)> + 'a {
        self.0.chunks_exact(9).map(|pair| (pair[0], u64::from_le_bytes(pair[1..9].try_into().expect("9-byte chunks"))))
    }
}

/// A log that cannot be read on from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Valgrind log at byte {offset}: {what}")]
pub struct LogError {
    /// Where in the log.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

const KNOWN_TAGS: &[u8] = b"BEXGTSQMLPFRrWDKZUCA";

/// The byte of a [`LogRecord::EnteredNext`]: this bit and the way.
pub(super) const ENTERED_NEXT: u8 = 0x80;

fn is_tag(byte: u8) -> bool {
    byte & ENTERED_NEXT != 0 || KNOWN_TAGS.contains(&byte)
}

/// One record at the start of `bytes`.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// The record and its length.
    Record(LogRecord<'a>, usize),
    /// `bytes` ends inside a record (or is empty): more is needed.
    Incomplete,
    /// Not a record: an unknown tag.
    Bad(String),
}

/// Reads the record at the start of `bytes` (a log after its magic).
pub fn parse_record(bytes: &[u8]) -> Parsed<'_> {
    let Some(&tag) = bytes.first() else { return Parsed::Incomplete };
    if !is_tag(tag) {
        return Parsed::Bad(format!("unknown record tag {tag:#04x}"));
    }
    let mut reader = LogReader { log: bytes, at: 0, failed: false };
    match reader.record() {
        Some(record) => Parsed::Record(record, reader.at),
        None => Parsed::Incomplete,
    }
}

/// The records of a log, in order; a damaged or cut record ends the
/// iteration with an error naming its offset (the format has no sync
/// points: what follows cannot be placed).
pub fn log_records(log: &[u8]) -> impl Iterator<Item = Result<LogRecord<'_>, LogError>> {
    let mut reader = LogReader { log, at: 0, failed: false };
    if !log.starts_with(LOG_MAGIC) {
        reader.failed = true;
        return LogRecords { reader, first: Some(LogError { offset: 0, what: "not a retrace Valgrind log (no RTVGLOG2)".into() }) };
    }
    reader.at = LOG_MAGIC.len();
    LogRecords { reader, first: None }
}

struct LogRecords<'a> {
    reader: LogReader<'a>,
    first: Option<LogError>,
}

impl<'a> Iterator for LogRecords<'a> {
    type Item = Result<LogRecord<'a>, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.first.take() {
            return Some(Err(error));
        }
        if self.reader.failed || self.reader.at >= self.reader.log.len() {
            return None;
        }
        let start = self.reader.at;
        let record = self.reader.record();
        if record.is_none() {
            self.reader.failed = true;
            let tag = self.reader.log[start];
            let what = if is_tag(tag) { format!("record '{}' cut short", tag as char) } else { format!("unknown record tag {tag:#04x}") };
            return Some(Err(LogError { offset: start, what }));
        }
        record.map(Ok)
    }
}

struct LogReader<'a> {
    log: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> LogReader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.log.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn record(&mut self) -> Option<LogRecord<'a>> {
        Some(match self.u8()? {
            b'B' => {
                let id = self.u32()?;
                let entry = self.u64()?;
                let next = self.u64()?;
                let n = self.u16()?;
                let mut instructions = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let address = self.u64()?;
                    let length = self.u8()?;
                    instructions.push((address, self.bytes(length as usize)?));
                }
                let m = self.u16()?;
                let mut exits = Vec::with_capacity(m as usize);
                for _ in 0..m {
                    exits.push((self.u16()?, self.u64()?));
                }
                LogRecord::Superblock { id, entry, next, instructions, exits }
            }
            b'E' => LogRecord::Entered { id: self.u32()?, way: self.u8()? },
            b'X' => LogRecord::LeftAt { exit: self.u16()? },
            byte if byte & ENTERED_NEXT != 0 => LogRecord::EnteredNext { way: byte & !ENTERED_NEXT },
            b'G' => LogRecord::Foreign,
            b'T' => LogRecord::Thread { number: self.u32()?, tid: self.u32()? },
            b'S' => LogRecord::Signal { signal: self.u32()?, ip: self.u64()? },
            b'Q' => LogRecord::ThreadEnd { number: self.u32()?, ip: self.u64()? },
            b'M' => {
                let (start, length, offset, prot) = (self.u64()?, self.u64()?, self.u64()?, self.u8()?);
                let n = self.u16()?;
                LogRecord::Mapping { start, length, offset, prot, path: self.bytes(n as usize)? }
            }
            b'L' => LogRecord::Limit,
            b'P' => LogRecord::Process(self.u32()?),
            b'F' => LogRecord::Final(self.u64()?),
            b'R' => {
                let index = self.u16()?;
                let n = self.u8()?;
                LogRecord::Registers { index, changes: RegisterChanges(self.bytes(9 * n as usize)?) }
            }
            b'r' => {
                let number = self.u32()?;
                let n = self.u8()?;
                LogRecord::ThreadRegisters { number, changes: RegisterChanges(self.bytes(9 * n as usize)?) }
            }
            b'W' => {
                let (index, address, size) = (self.u16()?, self.u64()?, self.u16()?);
                LogRecord::Wrote { index, address, bytes: self.bytes(size as usize)? }
            }
            b'D' => LogRecord::Read { index: self.u16()?, address: self.u64()?, size: self.u16()? },
            b'K' => {
                let (number, address, size) = (self.u32()?, self.u64()?, self.u64()?);
                LogRecord::KernelWrote { number, address, bytes: self.bytes(usize::try_from(size).ok()?)? }
            }
            b'Z' => LogRecord::Zeroed { start: self.u64()?, length: self.u64()? },
            b'U' => LogRecord::Unmapped { start: self.u64()?, length: self.u64()? },
            b'C' => LogRecord::Moved { from: self.u64()?, to: self.u64()?, length: self.u64()? },
            b'A' => LogRecord::Protected { start: self.u64()?, length: self.u64()?, prot: self.u8()? },
            _ => return None,
        })
    }
}
