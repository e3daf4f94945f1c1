//! Basic ("naive") mode logs: the header, then fixed 32-byte records — a
//! function record (type 0) or an argument payload (type 1) for the entry
//! before it. Threads' records come in chunks (each thread's buffer is
//! appended whole), not in time order.

use super::{array, FileHeader, FunctionId, Record, RecordKind, XrayError, XrayErrorKind, HEADER_SIZE};

/// Size of every basic-mode record.
pub const RECORD_SIZE: usize = 32;

/// The expanded records of a basic-mode log (see [`super::Log::records`]).
#[derive(Debug)]
pub struct BasicRecords<'a> {
    header: FileHeader,
    bytes: &'a [u8],
    offset: usize,
    /// The last function record, held back until no argument payload
    /// follows it.
    pending: Option<Record<'a>>,
    /// An error found while a record was pending (reported after it).
    queued_error: Option<XrayError>,
}

impl<'a> BasicRecords<'a> {
    /// Records of `bytes` (the whole file, header included).
    pub fn new(header: FileHeader, bytes: &'a [u8]) -> Self {
        BasicRecords { header, bytes, offset: HEADER_SIZE, pending: None, queued_error: None }
    }

    /// Reads the next 32-byte record: `Some(Ok(record))` for a function
    /// record, `Some(Err)` for a problem, `None` for an argument payload
    /// that was attached to the pending record or at the end.
    fn read(&mut self) -> Option<Result<Record<'a>, XrayError>> {
        let offset = self.offset;
        let endian = self.header.endian;
        let Some(raw) = array::<RECORD_SIZE>(self.bytes, offset) else {
            let left = self.bytes.len().saturating_sub(offset);
            self.offset = self.bytes.len();
            return (left > 0).then(|| Err(XrayError::at(offset, XrayErrorKind::PartialRecord(left))));
        };
        self.offset += RECORD_SIZE;
        let u32_at = |at: usize| endian.u32([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let function = FunctionId(u32_at(4));
        match endian.u16([raw[0], raw[1]]) {
            0 => {
                let kind = match raw[3] {
                    0 => RecordKind::Enter,
                    1 => RecordKind::Exit,
                    2 => RecordKind::TailExit,
                    3 => RecordKind::EnterArg,
                    other => return Some(Err(XrayError::at(offset, XrayErrorKind::UnknownFunctionKind(other)))),
                };
                Some(Ok(Record {
                    offset,
                    kind,
                    function,
                    tsc: endian.u64(array(&raw, 8).unwrap_or_default()),
                    cpu: u16::from(raw[2]),
                    tid: u32_at(16),
                    pid: (self.header.version >= 3).then(|| u32_at(20)),
                    args: Vec::new(),
                    data: &[],
                    event_type: None,
                }))
            }
            1 => {
                let (tid, pid) = (u32_at(8), u32_at(12));
                let matches = self.pending.as_ref().is_some_and(|entry| {
                    entry.function == function && entry.tid == tid && (self.header.version < 3 || entry.pid == Some(pid))
                });
                match &mut self.pending {
                    Some(entry) if matches => {
                        entry.args.push(endian.u64(array(&raw, 16).unwrap_or_default()));
                        None
                    }
                    _ => Some(Err(XrayError::at(offset, XrayErrorKind::UnmatchedArgPayload { function, tid }))),
                }
            }
            other => Some(Err(XrayError::at(offset, XrayErrorKind::UnknownRecordType(other)))),
        }
    }
}

impl<'a> Iterator for BasicRecords<'a> {
    type Item = Result<Record<'a>, XrayError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.queued_error.take() {
            return Some(Err(error));
        }
        loop {
            if self.offset >= self.bytes.len() {
                return self.pending.take().map(Ok);
            }
            match self.read() {
                None => continue,
                Some(Ok(record)) => match self.pending.replace(record) {
                    Some(previous) => return Some(Ok(previous)),
                    None => continue,
                },
                Some(Err(error)) => match self.pending.take() {
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
