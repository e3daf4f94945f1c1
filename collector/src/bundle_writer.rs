//! Writing a recording as an LLDB trace bundle: `trace.json` (LLDB 22's
//! intel-pt schema, relative paths), `threads/<tid>.intelpt_trace`, and copies
//! of every module under `modules/`, so `lldb-22` loads it with `trace load`.

use std::path::{Path, PathBuf};

use retrace_decoder::bundle::{
    BundleModule, BundleProcess, BundleThread, CpuInfo, LoadAddress, Recorder, TraceBundle, TscConversion,
};

use crate::software::{ImageRecording, Recording};

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
/// Each program image the process ran (one more per `execve`) is a process
/// entry of its own in `trace.json`, with the same pid, its own threads and
/// its own modules: LLDB's schema has no notion of exec, and loads each entry
/// as a target of its own (`target list` shows one per image, `target select
/// N` switches). The first image's files are `threads/<tid>.intelpt_trace`;
/// image N (N ≥ 1) writes `threads/<tid>.exec<N>.intelpt_trace`.
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

    let mut processes = Vec::new();
    for (number, image) in recording.images.iter().enumerate() {
        processes.push(write_image(dir, recording.pid, number, image)?);
    }

    let bundle = TraceBundle {
        kind: "intel-pt".into(),
        cpu_info: info.cpu_info.clone(),
        processes,
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
        }),
    };
    let json_path = dir.join("trace.json");
    let text = serde_json::to_string_pretty(&bundle).expect("bundle serialises");
    io(&json_path, std::fs::write(&json_path, text + "\n"))?;
    Ok(json_path)
}

/// The file stem of a thread's files in image `number`.
pub fn thread_file_stem(tid: u32, number: usize) -> String {
    match number {
        0 => format!("threads/{tid}"),
        n => format!("threads/{tid}.exec{n}"),
    }
}

fn write_image(dir: &Path, pid: u32, number: usize, image: &ImageRecording) -> Result<BundleProcess, BundleWriteError> {
    let mut threads = Vec::new();
    for thread in &image.threads {
        let stem = thread_file_stem(thread.tid, number);
        let name = format!("{stem}.intelpt_trace");
        let path = dir.join(&name);
        io(&path, std::fs::write(&path, &thread.trace))?;
        if let Some(log) = &thread.instruction_log {
            let path = dir.join(format!("{stem}.insns"));
            let mut text = String::with_capacity(log.len() * 17);
            for ip in log {
                text.push_str(&format!("{ip:016x}\n"));
            }
            io(&path, std::fs::write(&path, text))?;
        }
        threads.push(BundleThread { tid: thread.tid as u64, ipt_trace: Some(name) });
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
            None => {
                let name = format!("modules/{}", module.path.trim_start_matches('/'));
                let path = dir.join(&name);
                if !path.exists() {
                    if let Some(parent) = path.parent() {
                        io(parent, std::fs::create_dir_all(parent))?;
                    }
                    io(Path::new(&module.path), std::fs::copy(&module.path, &path))?;
                }
                name
            }
        };
        modules.push(BundleModule {
            system_path: module.path.clone(),
            file: Some(relative),
            load_address: LoadAddress(module.base),
            uuid: None,
        });
    }
    Ok(BundleProcess { pid: pid as u64, triple: Some("x86_64-pc-linux-gnu".into()), threads, modules, jitdumps: Vec::new() })
}
