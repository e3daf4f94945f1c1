//! Bundles for comparisons: the code of a loaded bundle as libipt file
//! sections, and generated one-thread bundles.

use std::path::Path;

use retrace_decoder::bundle::TraceBundle;
use retrace_decoder::bundle::load::LoadedBundle;

/// The code of a bundle loaded by the decoder's loader
/// ([`retrace_decoder::bundle::load`]) as files for libipt: each image
/// section of a module is named after the file its bytes came from.
#[cfg(retrace_libipt)]
pub fn file_sections(bundle: &LoadedBundle) -> Vec<crate::libipt::FileSection> {
    image_file_sections(bundle.image())
}

/// The code of one process image as files for libipt (see [`file_sections`]).
#[cfg(retrace_libipt)]
pub fn image_file_sections(image: &retrace_decoder::image::Image) -> Vec<crate::libipt::FileSection> {
    image
        .sections()
        .iter()
        // JIT code (from listed jitdumps) is in no file libipt could read.
        .filter(|s| Path::new(&*s.name).is_file())
        .map(|s| crate::libipt::FileSection {
            path: std::path::PathBuf::from(&*s.name),
            offset: s.offset as u64,
            size: s.len as u64,
            vaddr: s.start,
        })
        .collect()
}

/// The bundle's declared CPU (family, model).
pub fn cpu(bundle: &LoadedBundle) -> (u32, u32) {
    (bundle.description.cpu_info.family, bundle.description.cpu_info.model)
}

/// Writes a one-thread bundle (tid 1, pid 1) around `trace` into `dir`:
/// `threads/1.intelpt_trace`, a copy of each of `modules` (system path,
/// load address) under `modules/` as LLDB's `trace save` lays them out
/// (a bundle names no file outside itself), and a trace.json, with the
/// software-recording CPU. Returns the trace.json path.
pub fn write_generated_bundle(dir: &Path, trace: &[u8], modules: &[(&str, u64)]) -> std::path::PathBuf {
    use retrace_decoder::bundle::{BundleModule, BundleProcess, BundleThread, CpuInfo, LoadAddress};
    std::fs::create_dir_all(dir.join("threads")).unwrap();
    std::fs::write(dir.join("threads/1.intelpt_trace"), trace).unwrap();
    let bundle = TraceBundle {
        kind: "intel-pt".into(),
        cpu_info: CpuInfo::software_recording(),
        processes: vec![BundleProcess {
            pid: 1,
            triple: Some("x86_64-pc-linux-gnu".into()),
            threads: vec![BundleThread { tid: 1, ipt_trace: Some("threads/1.intelpt_trace".into()) }],
            modules: modules
                .iter()
                .map(|(path, load)| {
                    let copy = format!("modules/{}", path.trim_start_matches('/'));
                    std::fs::create_dir_all(dir.join(&copy).parent().unwrap()).unwrap();
                    std::fs::copy(path, dir.join(&copy)).unwrap();
                    BundleModule { system_path: path.to_string(), file: Some(copy), load_address: LoadAddress(*load), uuid: None }
                })
                .collect(),
            jitdumps: Vec::new(),
        }],
        tsc_perf_zero_conversion: None,
        retrace: None,
    };
    let path = dir.join("trace.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&bundle).unwrap()).unwrap();
    path
}
