//! # retrace-decoder
//!
//! The format layer of retrace: everything that turns trace bytes into meaning.
//! It is shared by the stub's replay, the LLDB plugin and the `retrace` CLI.
//!
//! Layers, each usable alone (as libipt's packet → query → instruction decoders are):
//!
//! * [`packet`] — the Intel PT packet codec: a zero-copy decoder over `&[u8]`
//!   yielding `(offset, Packet)` items with errors as values, PSB synchronisation,
//!   and a byte-exact encoder used by the software recorder.
//! * [`xray`] — LLVM XRay logs (basic and flight-data-recorder modes, every
//!   version), instrumentation maps and per-thread call timelines.
//! * [`full_state`] — full-state recordings: every register and memory
//!   change beside a recording's Intel PT, encoded and decoded as a stream.
//! * [`jitdump`] — perf jitdump files (what JIT runtimes write for
//!   `perf inject --jit`): records, and the generated functions by address
//!   and time, placed into an [`image::Image`] and a [`symbols::Symbolizer`].
//!
//! ## What this crate must never depend on
//!
//! No operating-system facilities: no ptrace, no `perf_event_open`, no `libc`,
//! no file I/O in the decoding paths (callers hand in byte slices). It must build
//! and run on any host that has `core` + `alloc`-style collections, so that traces
//! recorded on Linux can be decoded anywhere.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod bundle;
pub mod calls;
pub mod flow;
pub mod full_state;
pub mod history;
pub mod image;
pub mod item;
pub mod jitdump;
pub mod leb128;
pub mod packet;
pub mod symbols;
pub mod wallclock;
pub mod x86;
pub mod xray;
