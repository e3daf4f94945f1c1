//! What a decoded flow is made of: executed instructions, events and errors
//! ([`Item`]), numbered together as LLDB's trace items are. Below every
//! other part of the flow: the decoder yields these, the history stores
//! them, and call trees, the wall clock and the dump commands read them.

use crate::packet::PacketErrorKind;

/// An event in the instruction flow (LLDB's `TraceEvent` kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new TSC value (`HW clock tick [tsc]`).
    ClockTick(u64),
    /// Decoding (re)synchronised at the PSB at this offset.
    SyncPoint(usize),
    /// Tracing stopped at a branch (TIP.PGD; LLDB: `hardware disabled tracing`).
    HardwareDisabled,
    /// Tracing stopped asynchronously (FUP + TIP.PGD; LLDB: `software disabled tracing`).
    SoftwareDisabled,
}

impl Event {
    /// LLDB's name of the event's kind (`TraceEvent`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::ClockTick(_) => "HW clock tick",
            Event::SyncPoint(_) => "trace synchronization point",
            Event::HardwareDisabled => "hardware disabled tracing",
            Event::SoftwareDisabled => "software disabled tracing",
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::ClockTick(tsc) => write!(f, "{} [{tsc}]", self.name()),
            Event::SyncPoint(offset) => write!(f, "{} [offset = 0x0x{offset:x}]", self.name()),
            Event::HardwareDisabled | Event::SoftwareDisabled => f.write_str(self.name()),
        }
    }
}

/// What went wrong in the flow. `Display` gives LLDB's error-item text:
/// libipt's `pt_errstr` wording, then `: 0x%016x` with the address of the
/// instruction that could not be decoded when there is one (`Debug` keeps
/// the packet error and what the code expected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowError {
    /// A packet could not be decoded; with the address of the instruction
    /// whose branch needed the trace up to it, when there is one.
    Packet(PacketErrorKind, Option<u64>),
    /// No code is known at this address.
    NoMemory(u64),
    /// The bytes at this address are not a valid instruction.
    BadInstruction(u64),
    /// The next packet does not answer what the code needs (e.g. a TIP where
    /// a conditional branch needs a TNT bit) at the instruction at `ip`.
    Mismatch {
        /// What the code needed.
        expected: &'static str,
        /// The instruction that needed it, when there is one.
        ip: Option<u64>,
    },
    /// A return at this address met a taken TNT bit with no call to return to.
    ReturnWithoutCall(u64),
    /// A return at this address met a not-taken TNT bit.
    BadReturnCompression(u64),
    /// Internal buffer overflow in the tracing hardware: packets were lost.
    Overflow,
    /// A flow packet (TNT, TIP) while tracing is disabled.
    NotEnabled,
    /// A packet that cannot occur here (e.g. TIP.PGE while tracing is on).
    BadContext(Option<u64>),
    /// An event packet needs an IP but its IP is suppressed.
    IpSuppressed(Option<u64>),
    /// LLDB's anomaly check: after 10000 instructions (or twice, four
    /// times… as many) without a packet, the last ones repeat a loop of this
    /// many instructions (a loop of direct jumps).
    InfiniteLoop(u64),
    /// LLDB's anomaly check: half a million instructions without consuming a
    /// packet, and no loop found.
    NoProgress,
    /// A TIP without an IP answered the branch at this address.
    NoIp(Option<u64>),
    /// Not a defect of the trace: LLDB 22 decodes each PSB-to-PSB slice on
    /// its own and, when the instruction at the next slice's start is a
    /// branch, reports the end of its slice there ("reached end of trace
    /// stream"). Only with [`crate::flow::FlowOptions::lldb_psb_slices`].
    SliceEnd(u64),
}

impl FlowError {
    /// The address LLDB appends to the message, if any.
    pub fn ip(&self) -> Option<u64> {
        match *self {
            FlowError::NoMemory(ip)
            | FlowError::BadInstruction(ip)
            | FlowError::ReturnWithoutCall(ip)
            | FlowError::BadReturnCompression(ip)
            | FlowError::SliceEnd(ip) => Some(ip),
            FlowError::Mismatch { ip, .. }
            | FlowError::Packet(_, ip)
            | FlowError::BadContext(ip)
            | FlowError::IpSuppressed(ip)
            | FlowError::NoIp(ip) => ip,
            FlowError::Overflow | FlowError::NotEnabled | FlowError::InfiniteLoop(_) | FlowError::NoProgress => None,
        }
    }

    /// Whether libipt reports it (LLDB counts those by kind); LLDB's own
    /// anomaly checks report the others.
    pub fn from_libipt(&self) -> bool {
        !matches!(self, FlowError::InfiniteLoop(_) | FlowError::NoProgress)
    }

    /// libipt's `pt_errstr` text for the closest error code.
    pub fn libipt_message(&self) -> &'static str {
        use PacketErrorKind as K;
        match self {
            FlowError::Packet(K::Truncated { .. }, _) | FlowError::SliceEnd(_) => "reached end of trace stream",
            FlowError::Packet(K::UnknownOpcode(_) | K::UnknownExtendedOpcode(_), _) => "unknown opcode",
            FlowError::Packet(K::Malformed { .. }, _) => "unknown packet",
            FlowError::NoMemory(_) => "no memory mapped at this address",
            FlowError::BadInstruction(_) => "unknown instruction",
            FlowError::Mismatch { .. } => "trace stream does not match query",
            FlowError::ReturnWithoutCall(_) => "compressed return without call",
            FlowError::BadReturnCompression(_) => "bad compressed return",
            FlowError::Overflow => "overflow",
            FlowError::NotEnabled => "expected tracing enabled event",
            FlowError::BadContext(_) => "unexpected packet context",
            FlowError::IpSuppressed(_) => "ip has been suppressed",
            FlowError::NoIp(_) => "no ip",
            FlowError::InfiniteLoop(_) => "anomalous trace: possible infinite loop detected",
            FlowError::NoProgress => "anomalous trace: possible infinite trace detected",
        }
    }

}

impl std::fmt::Display for FlowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.libipt_message())?;
        if let FlowError::InfiniteLoop(size) = self {
            return write!(f, " of size {size}");
        }
        match self.ip() {
            Some(ip) if ip != 0 => write!(f, ": {ip:#018x}"),
            _ => Ok(()),
        }
    }
}

/// One item of the decoded flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An executed instruction.
    Instruction {
        /// Its address.
        ip: u64,
    },
    /// An event.
    Event(Event),
    /// A decode error at a trace offset; decoding resumed at the next PSB.
    Error {
        /// Byte offset in the trace of the packet involved.
        offset: usize,
        /// What went wrong.
        error: FlowError,
    },
}
