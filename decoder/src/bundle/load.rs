//! Loading an LLDB trace bundle (`trace.json`) from disk: the description,
//! each thread's raw trace, an [`Image`] of every module's code (and of the
//! JIT code of the jitdumps a process lists) and a [`Symbolizer`] of their
//! names. The decoder's only file I/O, at its edge: the decoding layers
//! below take the bytes this hands them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::paths::{BundleDir, OutsideBundle, Reach};
use super::TraceBundle;
use crate::image::Image;
use crate::jitdump::{CodeRegions, Jitdump};
use crate::symbols::Symbolizer;

/// Why a bundle cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `trace.json` does not follow LLDB's intel-pt schema.
    #[error("{path}: not an intel-pt trace bundle description: {reason}")]
    Schema {
        /// The description file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A per-cpu bundle (context-switch traces), which retrace cannot decode yet.
    #[error("{path}: per-cpu traces (\"cpus\") are not supported yet; record or save per-thread traces")]
    PerCpu {
        /// The description file.
        path: PathBuf,
    },
    /// A module file is not ELF.
    #[error("{0}")]
    Image(#[from] crate::image::ImageError),
    /// The bundle names a file outside its directory (see [`super::paths`]).
    #[error("{path}: {source}: {hint}", hint = super::paths::ALLOW_HINT)]
    Outside {
        /// The description file.
        path: PathBuf,
        /// What it names, and why that is refused.
        source: OutsideBundle,
    },
    /// A listed jitdump file is not one.
    #[error("{path}: not a readable jitdump: {reason}")]
    Jitdump {
        /// The file.
        path: PathBuf,
        /// What the reader said.
        reason: String,
    },
}

/// One thread of a loaded bundle.
#[derive(Debug, Clone)]
pub struct LoadedThread {
    /// Thread id.
    pub tid: u64,
    /// Its raw Intel PT (shared with any other reading of the same file).
    pub trace: Arc<[u8]>,
    /// Index of its process entry in [`LoadedBundle::processes`].
    pub process: usize,
}

/// One process entry of a bundle: its code and symbols. A process that
/// exec'd is one entry per program image (same pid), each with its own.
#[derive(Debug)]
pub struct LoadedProcess {
    /// Process id.
    pub pid: u64,
    /// The code of its modules; each section is named after the file its
    /// bytes were read from.
    pub image: Image,
    /// Function names and source lines of its modules.
    pub symbols: Symbolizer,
    /// Its modules: where their bytes were read from and where they were
    /// loaded (for a debugger to create the process's target).
    pub modules: Vec<LoadedModule>,
}

/// A module of a loaded process.
#[derive(Debug, Clone)]
pub struct LoadedModule {
    /// The file its bytes were read from (the bundle's copy, or the path on
    /// the traced system).
    pub path: PathBuf,
    /// Its path on the traced system.
    pub system_path: String,
    /// Where it was loaded.
    pub load_address: u64,
    /// LLDB's UUID string, when the bundle has one.
    pub uuid: Option<String>,
}

/// A loaded bundle.
#[derive(Debug)]
pub struct LoadedBundle {
    /// The description.
    pub description: TraceBundle,
    /// Threads of every process entry, in bundle order.
    pub threads: Vec<LoadedThread>,
    /// The process entries, in bundle order.
    pub processes: Vec<LoadedProcess>,
    /// What was read but is damaged (e.g. jitdump records), for the caller
    /// to report.
    pub warnings: Vec<String>,
}

impl LoadedBundle {
    /// The code `thread` ran.
    pub fn image_of(&self, thread: &LoadedThread) -> &Image {
        &self.processes[thread.process].image
    }

    /// The symbols of the code `thread` ran.
    pub fn symbols_of(&self, thread: &LoadedThread) -> &Symbolizer {
        &self.processes[thread.process].symbols
    }

    /// The first process entry's code (a bundle of one process, as most are).
    pub fn image(&self) -> &Image {
        &self.processes[0].image
    }

    /// LLDB's thread index of `thread` within its process entry (1, 2, …),
    /// as `thread trace dump` prints it in that entry's target.
    pub fn thread_index(&self, thread: &LoadedThread) -> usize {
        self.threads.iter().filter(|t| t.process == thread.process).position(|t| std::ptr::eq(t, thread)).map_or(0, |i| i + 1)
    }
}

/// The separate debug file of an ELF image, found by its GNU build id under
/// `/usr/lib/debug/.build-id/` (as LLDB and GDB look for it: the one place
/// outside a bundle its content leads to, a fixed folder and a name of hex
/// digits).
fn separate_debug_file(image: &[u8]) -> Option<Vec<u8>> {
    use object::Object;
    let file = object::File::parse(image).ok()?;
    let id = file.build_id().ok()??;
    if id.len() < 2 {
        return None; // (A hostile module's empty or one-byte id.)
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    std::fs::read(path).ok()
}

fn read(path: &Path) -> Result<Vec<u8>, BundleError> {
    std::fs::read(path).map_err(|source| BundleError::Read { path: path.to_path_buf(), source })
}

/// The most program images (process entries, exec'd images included) one
/// load reads: each parses its modules' symbols, so a bundle that lists
/// one module in a million processes would make that much of it.
pub const MAX_PROCESSES: usize = 64;

/// The most modules one process entry lists (each is parsed for symbols).
pub const MAX_MODULES: usize = 4096;

/// `path` with its links resolved (itself when it is not there): one file
/// however a bundle names it.
fn real_path(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The files one load has read, each once: a file a bundle names many
/// times (a module every exec'd image maps, or a hostile list) is held
/// once however often it is named.
#[derive(Default)]
struct Reads {
    files: HashMap<PathBuf, Arc<[u8]>>,
}

impl Reads {
    fn read(&mut self, path: &Path) -> Result<Arc<[u8]>, BundleError> {
        let key = real_path(path);
        if let Some(bytes) = self.files.get(&key) {
            return Ok(bytes.clone());
        }
        let bytes: Arc<[u8]> = read(path)?.into();
        self.files.insert(key, bytes.clone());
        Ok(bytes)
    }
}

/// The bundle's `trace.json` for a path given as the bundle: the file
/// itself, or a directory holding it.
pub fn trace_json_of(path: &Path) -> std::path::PathBuf {
    if path.is_dir() {
        path.join("trace.json")
    } else {
        path.to_path_buf()
    }
}

/// Loads `trace_json` and everything it refers to (relative paths are
/// relative to its directory, as in LLDB), then the bundles of the programs
/// the process exec'd (`retrace.execImages`), as further processes.
///
/// A directory stands for the `trace.json` in it (the bundle directory
/// `retrace record -o` and LLDB's `trace save` write). Every file it names
/// is inside its directory ([`Reach::Inside`]; [`load_with`] for more).
pub fn load(trace_json: &Path) -> Result<LoadedBundle, BundleError> {
    load_with(trace_json, Reach::Inside)
}

/// [`load`], with the files the bundle names read as far as `reach`.
pub fn load_with(trace_json: &Path, reach: Reach) -> Result<LoadedBundle, BundleError> {
    let trace_json = &trace_json_of(trace_json);
    let dir = BundleDir::of_trace_json(trace_json, reach);
    let mut reads = Reads::default();
    let mut bundle = load_one(trace_json, &dir, &mut reads)?;
    let images = bundle.description.retrace.as_ref().map(|r| r.exec_images.clone()).unwrap_or_default();
    let mut seen = HashSet::from([real_path(trace_json)]);
    for relative in images {
        let (path, nested) = dir.nested(&relative).map_err(|source| BundleError::Outside { path: trace_json.clone(), source })?;
        if !seen.insert(real_path(&path)) {
            return Err(BundleError::Schema { path: trace_json.clone(), reason: format!("the exec'd image {relative:?} is listed twice (or is this bundle)") });
        }
        let next = load_one(&path, &nested, &mut reads)?;
        if bundle.processes.len() + next.processes.len() > MAX_PROCESSES {
            return Err(BundleError::Schema { path: trace_json.clone(), reason: format!("more than {MAX_PROCESSES} program images (exec'd images included); retrace reads at most {MAX_PROCESSES}") });
        }
        let offset = bundle.processes.len();
        bundle.threads.extend(next.threads.into_iter().map(|t| LoadedThread { process: t.process + offset, ..t }));
        bundle.processes.extend(next.processes);
        bundle.warnings.extend(next.warnings);
    }
    Ok(bundle)
}

fn load_one(trace_json: &Path, dir: &BundleDir, reads: &mut Reads) -> Result<LoadedBundle, BundleError> {
    let text = read(trace_json)?;
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| BundleError::Schema { path: trace_json.to_path_buf(), reason: e.to_string() })?;
    if value.get("cpus").is_some_and(|cpus| !cpus.is_null()) {
        return Err(BundleError::PerCpu { path: trace_json.to_path_buf() });
    }
    let description: TraceBundle = serde_json::from_value(value)
        .map_err(|e| BundleError::Schema { path: trace_json.to_path_buf(), reason: e.to_string() })?;
    if description.kind != "intel-pt" {
        return Err(BundleError::Schema {
            path: trace_json.to_path_buf(),
            reason: format!("type is {:?}, expected \"intel-pt\"", description.kind),
        });
    }
    let outside = |source| BundleError::Outside { path: trace_json.to_path_buf(), source };
    let resolve = |relative: &str| dir.file(relative).map_err(outside);
    let twice = |what: String| BundleError::Schema { path: trace_json.to_path_buf(), reason: format!("{what} is listed twice") };
    if description.processes.len() > MAX_PROCESSES {
        return Err(BundleError::Schema { path: trace_json.to_path_buf(), reason: format!("{} processes; retrace reads at most {MAX_PROCESSES}", description.processes.len()) });
    }
    if let Some(process) = description.processes.iter().find(|p| p.modules.len() > MAX_MODULES) {
        return Err(BundleError::Schema {
            path: trace_json.to_path_buf(),
            reason: format!("process {} lists {} modules; retrace reads at most {MAX_MODULES}", process.pid, process.modules.len()),
        });
    }
    let mut threads = Vec::new();
    let mut processes = Vec::new();
    let mut warnings = Vec::new();
    for process in &description.processes {
        let mut image = Image::new();
        let mut symbols = Symbolizer::new();
        let mut modules = Vec::new();
        let mut listed = HashSet::new();
        for module in &process.modules {
            let path = dir.module(module.file.as_deref(), &module.system_path).map_err(outside)?;
            // (One file at two addresses is a library unloaded and loaded
            // again; at one address twice, a list made to be read twice.)
            if !listed.insert((real_path(&path), module.load_address.0)) {
                return Err(twice(format!("in process {}, the module file {} at {:#x}", process.pid, path.display(), module.load_address.0)));
            }
            modules.push(LoadedModule {
                path: path.clone(),
                system_path: module.system_path.clone(),
                load_address: module.load_address.0,
                uuid: module.uuid.clone(),
            });
            let bytes = reads.read(&path)?;
            let debug = separate_debug_file(&bytes);
            symbols.add_module(&path.to_string_lossy(), &bytes, module.load_address.0, debug.as_deref());
            image.add_shared_elf(&path.to_string_lossy(), bytes, module.load_address.0)?;
        }
        // Generated code: each function at its latest address (a MOVE wins
        // over its LOAD), named in the module `jit-<pid>.dump`.
        let mut dumps = HashSet::new();
        for listed in &process.jitdumps {
            let path = resolve(listed)?;
            if !dumps.insert(real_path(&path)) {
                return Err(twice(format!("in process {}, the jitdump {listed:?}", process.pid)));
            }
            let bytes = reads.read(&path)?;
            let dump = Jitdump::parse(&bytes).map_err(|e| BundleError::Jitdump { path: path.clone(), reason: e.to_string() })?;
            let regions = CodeRegions::from_dump(&dump);
            warnings.extend(regions.errors().iter().map(|error| format!("{}: damaged jitdump record: {error}", path.display())));
            let module = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| listed.clone());
            regions.add_to_image(&mut image, None);
            regions.add_to_symbolizer(&mut symbols, &module, None);
        }
        let (mut tids, mut traces) = (HashSet::new(), HashSet::new());
        for thread in &process.threads {
            if !tids.insert(thread.tid) {
                return Err(twice(format!("in process {}, thread {}", process.pid, thread.tid)));
            }
            let trace = match &thread.ipt_trace {
                Some(file) => {
                    // (Each thread its own trace: a thread's history is
                    // decoded and kept, so a million threads naming one
                    // file would make a million.)
                    let path = resolve(file)?;
                    if !traces.insert(real_path(&path)) {
                        return Err(twice(format!("in process {}, the trace file {file:?}", process.pid)));
                    }
                    reads.read(&path)?
                }
                None => Arc::from(Vec::new()),
            };
            threads.push(LoadedThread { tid: thread.tid, trace, process: processes.len() });
        }
        processes.push(LoadedProcess { pid: process.pid, image, symbols, modules });
    }
    if processes.is_empty() {
        processes.push(LoadedProcess { pid: 0, image: Image::new(), symbols: Symbolizer::new(), modules: Vec::new() });
    }
    Ok(LoadedBundle { description, threads, processes, warnings })
}

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSection};

    /// This test program's own file with its build-id note's id cut to
    /// `length` bytes (the note then claims that length).
    fn with_build_id_of(length: u32) -> Vec<u8> {
        let mut bytes = std::fs::read("/proc/self/exe").unwrap();
        let offset = {
            let file = object::File::parse(&*bytes).unwrap();
            let note = file.section_by_name(".note.gnu.build-id").expect("the test program has a build id");
            note.file_range().unwrap().0 as usize
        };
        // namesz, descsz, type, "GNU\0", the id.
        bytes[offset + 4..offset + 8].copy_from_slice(&length.to_le_bytes());
        bytes
    }

    /// A hostile module whose build id is empty or one byte long is read
    /// without a separate debug file (it made the lookup slice past the
    /// id's end), and a whole id is looked up.
    #[test]
    fn a_build_id_too_short_for_a_debug_file_name_has_none() {
        for length in [0, 1] {
            let bytes = with_build_id_of(length);
            let parsed = object::File::parse(&*bytes).unwrap().build_id().unwrap().map(<[u8]>::len);
            assert_eq!(parsed, Some(length as usize));
            assert!(super::separate_debug_file(&bytes).is_none());
        }
    }

    /// A library unloaded and loaded again is listed twice at two
    /// addresses (the recorder writes it so) and loads; twice at one
    /// address is refused, as is a process with more modules than
    /// [`super::MAX_MODULES`].
    #[test]
    fn a_module_twice_loads_at_two_addresses_only() {
        let dir = std::env::temp_dir().join(format!("retrace-load-twice-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("modules")).unwrap();
        std::fs::copy("/proc/self/exe", dir.join("modules/lib.so")).unwrap();
        let bundle = |addresses: &[u64]| {
            let modules: Vec<String> = addresses.iter().map(|a| format!(r#"{{"systemPath":"/lib.so","file":"modules/lib.so","loadAddress":"{a:#x}"}}"#)).collect();
            let text = format!(
                r#"{{"type":"intel-pt","cpuInfo":{{"vendor":"GenuineIntel","family":6,"model":85,"stepping":4}},"processes":[{{"pid":7,"threads":[],"modules":[{}]}}]}}"#,
                modules.join(",")
            );
            std::fs::write(dir.join("trace.json"), text).unwrap();
            super::load(&dir.join("trace.json"))
        };
        let loaded = bundle(&[0x10_0000_0000, 0x20_0000_0000]).unwrap();
        assert_eq!(loaded.processes[0].modules.len(), 2);
        let error = bundle(&[0x10_0000_0000, 0x10_0000_0000]).unwrap_err().to_string();
        assert!(error.contains("is listed twice"), "{error}");
        let many: Vec<u64> = (0..=super::MAX_MODULES as u64).map(|i| 0x10_0000_0000 + i * 0x100_0000).collect();
        let error = bundle(&many).unwrap_err().to_string();
        assert!(error.contains("retrace reads at most 4096"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
