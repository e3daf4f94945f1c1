//! The tests' independent instruction log of a program run under Valgrind:
//! `tests/valgrind/imarks.c`, a tool that logs every instruction Valgrind
//! runs (its IMark) with the OS thread that ran it — nothing shared with
//! retrace's tool but Valgrind itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

include!("../../collector/valgrind/build_tool.rs");

/// Builds the imarks tool into `folder` (a `VALGRIND_LIB` folder retrace
/// also uses, see `RETRACE_VALGRIND_LIB`), with links to the installed
/// Valgrind's own files. `None` when Valgrind's headers are not here.
pub fn prepare_folder(folder: &Path) -> Option<PathBuf> {
    if !valgrind_tool_sdk_present() {
        return None;
    }
    std::fs::create_dir_all(folder).unwrap();
    let source = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/valgrind/imarks.c"));
    build_valgrind_tool(source, &folder.join("imarks-amd64-linux"), &[]).unwrap_or_else(|e| panic!("{e}"));
    for entry in std::fs::read_dir("/usr/libexec/valgrind").ok()?.flatten() {
        let link = folder.join(entry.file_name());
        if !link.exists() {
            std::os::unix::fs::symlink(entry.path(), &link).unwrap();
        }
    }
    Some(folder.to_path_buf())
}

/// Each thread's instructions (by OS thread id, in order) as the imarks
/// tool saw them run `program args` with `options` before the tool, in
/// `env` (cleared otherwise) plus `VALGRIND_LIB=folder`; consecutive runs
/// of one address (a REP string instruction's iterations, which Valgrind
/// runs one by one) count once, and Valgrind's own text (the vsyscall
/// page's replacement, from 0x58000000) is left out. Also the program's
/// output.
pub fn instructions(folder: &Path, options: &[&str], env: &[(&str, &str)], program: &Path, args: &[&str]) -> (BTreeMap<u32, Vec<u64>>, Output) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log = folder.join(format!("imarks-log-{}-{run}", std::process::id()));
    let output = Command::new("valgrind")
        .env_clear()
        .envs(env.iter().copied())
        .env("VALGRIND_LIB", folder)
        .args(options)
        .arg("--tool=imarks")
        .arg(format!("--imarks-out={}", log.display()))
        .arg(program)
        .args(args)
        .output()
        .expect("run valgrind");
    let mut threads: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut current = 0u32;
    let path = std::fs::read_dir(folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{}.", log.file_name().unwrap().to_string_lossy())))
        .expect("imarks wrote no log");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'T' => {
                current = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap());
                at += 5;
            }
            b'I' => {
                let address = u64::from_le_bytes(bytes[at + 1..at + 9].try_into().unwrap());
                at += 9;
                let thread = threads.entry(current).or_default();
                if (0x5800_0000..0x6000_0000).contains(&address) || thread.last() == Some(&address) {
                    continue;
                }
                thread.push(address);
            }
            other => panic!("imarks log: tag {other:#x} at {at}"),
        }
    }
    (threads, output)
}
