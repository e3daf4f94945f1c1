//! # retrace-tests
//!
//! Test support for checking retrace against independent truths: libipt's
//! packet decoder (Debian `libipt-dev` 2.0.5, through a small C shim), and —
//! as the project grows — LLDB 22, GDB 13 and ground-truth recordings.
//!
//! Nothing in the product depends on this crate. It must never be the source
//! of expected values: expectations come from the other tool or from the
//! specification, never from retrace's own output.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod bench;
pub mod bundles;
pub mod cfg_walk;
pub mod corrupt;
#[cfg(retrace_libipt)]
pub mod libipt;
pub mod libipt_flow;
pub mod lldb;
pub mod node;
#[cfg(retrace_libipt)]
pub mod lockstep;
pub mod recordings;
pub mod rng;
pub mod streams;
pub mod tools;
pub mod valgrind;
pub mod xray;
