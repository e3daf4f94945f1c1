//! Reading a trace bundle for comparisons: retrace's image of it and the
//! same code as libipt file sections.

use std::path::Path;

use retrace_decoder::bundle::TraceBundle;
use retrace_decoder::image::Image;

/// A bundle ready for decoding by retrace and by libipt.
pub struct TestBundle {
    /// The description.
    pub description: TraceBundle,
    /// (tid, trace bytes) in bundle order.
    pub threads: Vec<(u64, Vec<u8>)>,
    /// retrace's image; section names are the files the bytes came from.
    pub image: Image,
}

impl TestBundle {
    /// Loads `trace_json`.
    pub fn load(trace_json: &Path) -> TestBundle {
        let base = trace_json.parent().unwrap();
        let description: TraceBundle = serde_json::from_slice(&std::fs::read(trace_json).unwrap()).unwrap();
        let mut image = Image::new();
        let mut threads = Vec::new();
        for process in &description.processes {
            for module in &process.modules {
                let path = base.join(module.file.as_deref().unwrap_or(&module.system_path));
                image.add_elf(path.to_str().unwrap(), std::fs::read(&path).unwrap(), module.load_address.0).unwrap();
            }
            for thread in &process.threads {
                threads.push((thread.tid, std::fs::read(base.join(thread.ipt_trace.as_ref().unwrap())).unwrap()));
            }
        }
        TestBundle { description, threads, image }
    }

    /// The image's sections as files for libipt.
    #[cfg(retrace_libipt)]
    pub fn file_sections(&self) -> Vec<crate::libipt::FileSection> {
        self.image
            .sections()
            .iter()
            .map(|s| crate::libipt::FileSection {
                path: std::path::PathBuf::from(&*s.name),
                offset: s.offset as u64,
                size: s.len as u64,
                vaddr: s.start,
            })
            .collect()
    }

    /// The declared CPU (family, model).
    pub fn cpu(&self) -> (u32, u32) {
        (self.description.cpu_info.family, self.description.cpu_info.model)
    }
}

/// Writes a one-thread bundle (tid 1, pid 1) around `trace` into `dir`:
/// `threads/1.intelpt_trace` and a trace.json naming `modules` (system path,
/// load address) in place, with the software-recording CPU. Returns the
/// trace.json path.
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
                .map(|(path, load)| BundleModule { system_path: path.to_string(), file: None, load_address: LoadAddress(*load), uuid: None })
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
