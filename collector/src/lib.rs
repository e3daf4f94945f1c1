//! # retrace-collector
//!
//! Capture on Linux: turns a running program into per-thread Intel PT byte
//! streams plus the sideband (modules, load addresses, threads, timing) needed
//! to decode them, and writes them as LLDB trace bundles.
//!
//! * [`process`] — launching under ptrace, memory and memory-map reading;
//! * [`control`] — the process-control core every backend shares: the one
//!   owner of `waitpid` (threads, clone/fork/vfork, exec, signals, exit);
//! * [`blocks`] — branch stops: threads run block by block to an `int3`
//!   the program never sees, the branch emulated there;
//! * [`recording`] — what a recording is, whatever recorded it: program
//!   images, their threads' Intel PT, modules, full state, how it ended;
//! * [`ptrace_recorder`] — the ptrace recorder: single-steps (or runs block
//!   by block) every thread and encodes the flow as genuine Intel PT
//!   ([`pt_writer`]), so every consumer (retrace, libipt, LLDB's intel-pt
//!   plugin) decodes one format;
//! * [`trace_ring`] — one thread's trace as a fixed-size ring of the newest
//!   data, as a debugger asks for it (`iptTraceSize`);
//! * [`bundle_writer`] — `trace.json` + per-thread traces + module copies;
//! * [`intel_pt`] — the hardware backend's building blocks (`intel_pt` PMU
//!   discovery from sysfs, `perf_event_attr`, per-thread AUX rings);
//! * [`hardware`] — recording with the hardware backend;
//! * [`valgrind`] — recording under Valgrind with retrace's tool
//!   (`valgrind/retrace.c`): its log of superblocks and exits becomes the
//!   same Intel PT;
//! * [`perf_clock`] — the kernel's TSC → nanoseconds conversion.
//!
//! It must never parse trace formats itself: that is the decoder's job.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod blocks;
pub mod bundle_writer;
pub mod code_cache;
pub mod control;
pub mod emulate;
pub mod hardware;
pub mod intel_pt;
pub mod perf_clock;
pub mod process;
pub mod pt_writer;
pub mod ptrace_recorder;
pub mod recording;
pub mod trace_ring;
pub mod valgrind;
