//! Fuzzes the trace-bundle description (LLDB's trace.json schema): the
//! parser (`bundle::TraceBundle`), and the loader (`bundle::load::load`)
//! on the input as the `trace.json` of a bundle folder holding a module
//! copy, a trace and an exec'd image's folder, beside a file outside it.
//! Must never panic; a load that succeeds read only files inside the
//! bundle (every module and thread it gives back comes from there).
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::bundle::load::load;
use retrace_decoder::bundle::TraceBundle;

/// `root/bundle`: `modules/bin/true` (this program's own file),
/// `threads/1.intelpt_trace`, `exec1/`; `root/outside` beside it.
fn bundle() -> &'static PathBuf {
    static BUNDLE: OnceLock<PathBuf> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("retrace-fuzz-bundle-{}", std::process::id()));
        let bundle = root.join("bundle");
        std::fs::create_dir_all(bundle.join("modules/bin")).unwrap();
        std::fs::create_dir_all(bundle.join("threads")).unwrap();
        std::fs::create_dir_all(bundle.join("exec1")).unwrap();
        std::fs::copy("/proc/self/exe", bundle.join("modules/bin/true")).unwrap();
        std::fs::write(bundle.join("threads/1.intelpt_trace"), [2u8, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x82, 2, 0x23]).unwrap();
        std::fs::write(root.join("outside"), b"outside").unwrap();
        bundle.canonicalize().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<TraceBundle>(data);
    let bundle = bundle();
    let trace_json = bundle.join("trace.json");
    std::fs::write(&trace_json, data).unwrap();
    if let Ok(loaded) = load(&trace_json) {
        for module in loaded.processes.iter().flat_map(|p| &p.modules) {
            let real = module.path.canonicalize().unwrap_or_else(|_| module.path.clone());
            assert!(real.starts_with(bundle), "a module read from {}", module.path.display());
        }
    }
});
