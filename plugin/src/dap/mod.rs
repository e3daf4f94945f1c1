//! `retrace-dap`: lldb-dap with Step Back and Reverse Continue, for VS Code
//! and any other Debug Adapter Protocol client.
//!
//! lldb-dap 22 has no `stepBack` or `reverseContinue` (it answers "unknown
//! request") and does not advertise `supportsStepBack`, so a client shows
//! no buttons for them. This adapter runs lldb-dap behind it and passes
//! every message through, adding those requests on top of the LLDB shim's
//! reverse commands ([`proxy`]), and starting `retrace-stub` for a launch
//! ([`stub`]). [`wire`] is the protocol's framing.

pub mod proxy;
pub mod stub;
pub mod wire;

pub use proxy::{serve, AdapterConfig, DapError};
