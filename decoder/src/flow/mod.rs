//! Instruction-flow reconstruction: Intel PT packets + the traced code →
//! the sequence of executed instructions, with events and error items, as
//! LLDB's intel-pt plugin presents them (items numbered from 0: instructions,
//! events and errors alike).
//!
//! Rules (SDM "Intel PT"; libipt's insn/block decoders): conditional branches
//! take TNT bits in order; indirect branches and uncompressed returns take TIP
//! targets; a return meeting a TNT bit is compressed and pops the 64-entry
//! return stack (pushed by every call except zero-length calls); FUP + TIP.PGD
//! is an asynchronous disable bound to the FUP's IP; TIP.PGD after a far
//! transfer (SYSCALL) disables tracing; TIP.PGE resumes it; PSB+ restates the
//! state (FUP = current IP when tracing is on) and is a synchronisation point.
//! Every problem becomes an [`Item::Error`] with the byte offset of the packet
//! involved, and decoding resumes at the next PSB.
//!
//! The layers, as libipt has them (each file one idea):
//!
//! * [`packet_view`] — the packets as libipt 2.0.5 sees them (which it
//!   knows by opcode alone, which it does not know, what a PSB+ may hold);
//! * [`query`] — what the packets say, in the order the walk asks for it
//!   (TNT bits, TIPs, events, PSB+ state, time, read-ahead, LLDB's slices);
//! * [`blocks`] — basic blocks read from the image, cached with their
//!   successors;
//! * [`walk`] — [`FlowDecoder`]: the instruction walk that consumes the
//!   query layer and writes a [`History`];
//! * [`parallel`] — one trace cut at PSBs and decoded on several threads.
//!
//! The items the flow yields ([`Item`], [`Event`], [`FlowError`]) live in
//! [`crate::item`], below the flow, the history and their consumers.

pub use crate::item::{Event, FlowError, Item};
pub use parallel::{decode_parallel, decode_parallel_with};
pub use walk::FlowDecoder;

#[cfg(doc)]
use crate::history::History;

mod blocks;
mod packet_view;
mod parallel;
mod query;
mod walk;

#[cfg(test)]
mod tests;

/// How a [`FlowDecoder`] presents what it finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowOptions {
    /// Reproduce LLDB 22's PSB-slice artifact: an error item
    /// ([`FlowError::SliceEnd`]) before a PSB+ whose IP holds a branch, so
    /// that item ids are LLDB's. Off, the flow has no such items.
    pub lldb_psb_slices: bool,
}

/// Where the decoder stands after handling something.
enum Next {
    /// Keep executing at this IP.
    At(u64),
    /// Tracing is disabled; wait for TIP.PGE or a PSB.
    Disabled,
    /// Stop (end of trace).
    End,
    /// The last instruction completed, but the event after it could not be
    /// decoded (reading ahead past its packet failed).
    Failed(usize, FlowError),
}

/// A result whose error is an error item: the trace offset and the error.
type Flow<T> = Result<T, (usize, FlowError)>;
