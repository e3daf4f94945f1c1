//! # retrace-collector
//!
//! Capture on Linux: turns a running program into per-thread Intel PT byte
//! streams plus the sideband (modules, load addresses, threads, timing) needed
//! to decode them.
//!
//! Two backends behind one interface (built by the recorder issue):
//! * hardware — `perf_event_open` on the kernel's `intel_pt` PMU, one AUX ring
//!   buffer per thread;
//! * software — ptrace single-step or branch stops, encoded as genuine Intel PT
//!   packets with [`retrace_decoder::packet::PacketEncoder`], so every consumer
//!   decodes one format.
//!
//! This crate owns process control (ptrace, launch/attach); the stub reuses it
//! rather than duplicating it. It must never parse trace formats itself: that
//! is the decoder's job.
