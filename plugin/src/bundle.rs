//! Bundles as the `retrace` CLI opens them: the decoder's one loader
//! ([`retrace_decoder::bundle::load`]), with what it found damaged logged.

use std::path::Path;

pub use retrace_decoder::bundle::load::{BundleError, LoadedBundle, LoadedProcess, LoadedThread};

/// Loads `trace_json` and everything it refers to; damaged parts that were
/// skipped are logged as warnings.
pub fn load(trace_json: &Path) -> Result<LoadedBundle, BundleError> {
    let loaded = retrace_decoder::bundle::load::load(trace_json)?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    Ok(loaded)
}
