//! Bundles as the `retrace` CLI opens them: the decoder's one loader
//! ([`retrace_decoder::bundle::load`]), with what it found damaged logged.

use std::path::Path;

pub use retrace_decoder::bundle::load::{BundleError, LoadedBundle, LoadedModule, LoadedProcess, LoadedThread};
pub use retrace_decoder::bundle::paths::Reach;

/// How a bundle is opened: how its traces are decoded, and how far the
/// files it names may be ([`Reach`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// The decoder's options.
    pub flow: retrace_decoder::flow::FlowOptions,
    /// Where the files the bundle names may be.
    pub reach: Reach,
}

/// Loads `trace_json` and everything it refers to, as far as `reach`;
/// damaged parts that were skipped are logged as warnings.
pub fn load(trace_json: &Path, reach: Reach) -> Result<LoadedBundle, BundleError> {
    let loaded = retrace_decoder::bundle::load::load_with(trace_json, reach)?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    Ok(loaded)
}

/// How many threads decode a trace (the machine's cores).
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A loaded bundle and its threads' decoded histories: decoded when first
/// asked for, then kept (the LLDB shim dumps one bundle many times) or
/// not (the CLI dumps each thread once, and frees it).
#[derive(Debug)]
pub struct DecodedBundle {
    /// The bundle.
    pub loaded: LoadedBundle,
    options: retrace_decoder::flow::FlowOptions,
    kept: Option<Vec<std::sync::OnceLock<retrace_decoder::history::History>>>,
}

impl DecodedBundle {
    /// Loads `trace_json`; `keep` says whether decoded histories are kept.
    pub fn open(trace_json: &Path, open: OpenOptions, keep: bool) -> Result<DecodedBundle, BundleError> {
        let (options, loaded) = (open.flow, load(trace_json, open.reach)?);
        let kept = keep.then(|| loaded.threads.iter().map(|_| std::sync::OnceLock::new()).collect());
        Ok(DecodedBundle { loaded, options, kept })
    }

    /// The history of thread `thread` (its position in `loaded.threads`).
    pub fn history(&self, thread: usize) -> std::borrow::Cow<'_, retrace_decoder::history::History> {
        let decode = || {
            let thread = &self.loaded.threads[thread];
            retrace_decoder::flow::decode_parallel_with(&thread.trace, self.loaded.image_of(thread), cores(), self.options)
        };
        match &self.kept {
            Some(kept) => std::borrow::Cow::Borrowed(kept[thread].get_or_init(decode)),
            None => std::borrow::Cow::Owned(decode()),
        }
    }
}
