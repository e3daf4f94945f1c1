//! Writing a recording as an LLDB trace bundle: `trace.json` (LLDB 22's
//! intel-pt schema, relative paths), `threads/<tid>.intelpt_trace`, and copies
//! of every module under `modules/`, so `lldb-22` loads it with `trace load`.

use std::path::{Path, PathBuf};

use retrace_decoder::bundle::{
    BundleModule, BundleProcess, BundleThread, CpuInfo, LoadAddress, RecordedExit, Recorder, TraceBundle, TscConversion,
};

use crate::recording::{ImageRecording, Recording};

/// Why a bundle could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct BundleWriteError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

fn io<T>(path: &Path, result: std::io::Result<T>) -> Result<T, BundleWriteError> {
    result.map_err(|source| BundleWriteError { path: path.to_path_buf(), source })
}

/// What to say about the recorder in the bundle.
#[derive(Debug, Clone)]
pub struct BundleInfo {
    /// `software` or `intel-pt`.
    pub backend: String,
    /// `step` or `branch` for software recordings.
    pub mode: Option<String>,
    /// The CPU to declare.
    pub cpu_info: CpuInfo,
    /// True when `cpu_info` is not the recording CPU.
    pub cpu_info_is_synthetic: bool,
}

/// Writes `recording` into `dir` (created if needed). Returns the path of
/// `trace.json`. Threads that kept an instruction log also get
/// `threads/<tid>.insns` (hex addresses, one per line).
///
/// Each program image the process ran (one more per `execve`) is a bundle of
/// its own, with the same pid, its own threads and its own modules:
/// `trace.json` holds the program launched, `exec<N>/trace.json` the N-th
/// program exec'd, listed in `trace.json`'s `retrace.execImages`. (LLDB's
/// schema has no notion of exec, and LLDB keys a bundle's threads by tid
/// across all its process entries, so the thread that exec'd cannot appear
/// in two entries of one file: LLDB would show the first entry's trace for
/// both.) All share `threads/` — image N's traces are
/// `threads/<tid>.exec<N>.intelpt_trace` — and `modules/`.
pub fn write_bundle(dir: &Path, recording: &Recording, info: &BundleInfo) -> Result<PathBuf, BundleWriteError> {
    let threads_dir = dir.join("threads");
    let modules_dir = dir.join("modules");
    if dir.join("trace.json").exists() {
        // Replace an earlier bundle in place, leaving no stale thread traces.
        for stale in [&threads_dir, &modules_dir] {
            if stale.exists() {
                io(stale, std::fs::remove_dir_all(stale))?;
            }
        }
        for entry in io(dir, dir.read_dir())?.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().strip_prefix("exec").is_some_and(|n| n.parse::<usize>().is_ok()) {
                io(&entry.path(), std::fs::remove_dir_all(entry.path()))?;
            }
        }
    } else if io(dir, dir.read_dir().map(|mut entries| entries.next().is_some())).unwrap_or(false) {
        return Err(BundleWriteError {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "directory is not empty and holds no trace.json; refusing to write a bundle into it",
            ),
        });
    }
    io(&threads_dir, std::fs::create_dir_all(&threads_dir))?;
    io(&modules_dir, std::fs::create_dir_all(&modules_dir))?;

    let mut exec_images = Vec::new();
    for (number, image) in recording.images.iter().enumerate().skip(1) {
        let relative = format!("exec{number}/trace.json");
        let image_dir = dir.join(format!("exec{number}"));
        io(&image_dir, std::fs::create_dir_all(&image_dir))?;
        let process = write_image(dir, "../", recording.pid, number, image)?;
        let full_state = write_full_state(&image_dir, image)?;
        write_description(&image_dir.join("trace.json"), recording, info, process, Vec::new(), full_state)?;
        exec_images.push(relative);
    }
    let empty = ImageRecording::default();
    let image = recording.images.first().unwrap_or(&empty);
    let first = write_image(dir, "", recording.pid, 0, image)?;
    let full_state = write_full_state(dir, image)?;
    let json_path = dir.join("trace.json");
    write_description(&json_path, recording, info, first, exec_images, full_state)?;
    Ok(json_path)
}

fn write_description(
    path: &Path,
    recording: &Recording,
    info: &BundleInfo,
    process: BundleProcess,
    exec_images: Vec<String>,
    full_state: Option<String>,
) -> Result<(), BundleWriteError> {
    let bundle = TraceBundle {
        kind: "intel-pt".into(),
        cpu_info: info.cpu_info.clone(),
        processes: vec![process],
        tsc_perf_zero_conversion: recording.tsc_conversion.map(|c| TscConversion {
            time_mult: c.time_mult,
            time_shift: c.time_shift,
            time_zero: c.time_zero.to_string(),
        }),
        retrace: Some(Recorder {
            backend: info.backend.clone(),
            mode: info.mode.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            cpu_info_is_synthetic: info.cpu_info_is_synthetic,
            exec_images,
            full_state,
            exit: match recording.outcome {
                crate::recording::Outcome::Exited(code) => Some(RecordedExit::Status(code)),
                crate::recording::Outcome::Signaled { signal, .. } => Some(RecordedExit::Signal(signal as i32)),
                _ => None,
            },
        }),
    };
    io(path, std::fs::write(path, bundle.to_json()))
}

/// The file stem of a thread's files in image `number`.
pub fn thread_file_stem(tid: u32, number: usize) -> String {
    match number {
        0 => format!("threads/{tid}"),
        n => format!("threads/{tid}.exec{n}"),
    }
}

/// Writes an image's thread traces (and logs) and module copies under `dir`
/// and describes them with paths prefixed by `up` (`../` for a bundle in a
/// subdirectory).
fn write_image(dir: &Path, up: &str, pid: u32, number: usize, image: &ImageRecording) -> Result<BundleProcess, BundleWriteError> {
    let mut threads = Vec::new();
    for thread in &image.threads {
        let stem = thread_file_stem(thread.tid, number);
        let name = format!("{stem}.intelpt_trace");
        let path = dir.join(&name);
        write_stream(&path, thread.trace_file.as_ref().map(|(stored, _)| stored.as_path()), &thread.trace)?;
        if let Some(log) = &thread.instruction_log {
            let path = dir.join(format!("{stem}.insns"));
            let mut text = String::with_capacity(log.len() * 17);
            for ip in log {
                text.push_str(&format!("{ip:016x}\n"));
            }
            io(&path, std::fs::write(&path, text))?;
        }
        threads.push(BundleThread { tid: thread.tid as u64, ipt_trace: Some(format!("{up}{name}")) });
    }

    let mut modules = Vec::new();
    for module in &image.modules {
        let relative = match &module.image {
            Some(bytes) => {
                let name = format!("modules/vdso-{:x}.so", module.base);
                let path = dir.join(&name);
                io(&path, std::fs::write(&path, bytes))?;
                name
            }
            None => copy_file(dir, &module.path)?,
        };
        modules.push(BundleModule {
            system_path: module.path.clone(),
            file: Some(format!("{up}{relative}")),
            load_address: LoadAddress(module.base),
            uuid: None,
        });
    }
    // The other files mapped (data files), for the full state's file
    // mappings: up to a size (a byte of a larger one is unavailable).
    if image.full_state.is_some() {
        for path in &image.mapped_files {
            if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= MAPPED_FILE_MAX) {
                copy_file(dir, path)?;
            }
        }
    }
    Ok(BundleProcess { pid: pid as u64, triple: Some("x86_64-pc-linux-gnu".into()), threads, modules, jitdumps: Vec::new() })
}

/// The largest data file a full-state bundle keeps a copy of.
const MAPPED_FILE_MAX: u64 = 64 << 20;

/// Copies the file at `path` to `modules/<path>` under `dir` (once);
/// returns that relative name. Full-state readers find any mapped file
/// there.
fn copy_file(dir: &Path, path: &str) -> Result<String, BundleWriteError> {
    let name = format!("modules/{}", path.trim_start_matches('/'));
    let copy = dir.join(&name);
    if !copy.exists() {
        if let Some(parent) = copy.parent() {
            io(parent, std::fs::create_dir_all(parent))?;
        }
        io(Path::new(path), std::fs::copy(path, &copy))?;
    }
    Ok(name)
}

/// Writes a stream recorded in two parts as the file `path`: the beginning
/// `stored` as it grew (moved when on the same file system), then `rest`.
fn write_stream(path: &Path, stored: Option<&Path>, rest: &[u8]) -> Result<(), BundleWriteError> {
    match stored {
        Some(stored) => {
            if std::fs::rename(stored, path).is_err() {
                io(path, std::fs::copy(stored, path).map(drop))?;
                let _ = std::fs::remove_file(stored);
            }
            let mut file = io(path, std::fs::OpenOptions::new().append(true).open(path))?;
            io(path, std::io::Write::write_all(&mut file, rest))
        }
        None => io(path, std::fs::write(path, rest)),
    }
}

/// Writes `image`'s full-state stream, if it has one, as `state.rtstate`
/// in `dir` (beside its trace.json); returns that name for the description.
fn write_full_state(dir: &Path, image: &ImageRecording) -> Result<Option<String>, BundleWriteError> {
    const NAME: &str = "state.rtstate";
    let Some(stream) = &image.full_state else { return Ok(None) };
    write_stream(&dir.join(NAME), stream.stored.as_ref().map(|(stored, _)| stored.as_path()), &stream.bytes)?;
    Ok(Some(NAME.to_string()))
}
