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
