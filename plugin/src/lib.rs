//! The LLDB side of retrace as a library: the `retrace` command line's
//! commands ([`cli`]) and bundles as they open them ([`bundle`]). The
//! `retrace` binary and the Python bridge the LLDB shim imports
//! (`plugin/python`) both call it, so the shim's dumps are the CLI's.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod bundle;
pub mod cli;
pub mod companions;
pub mod dap;
