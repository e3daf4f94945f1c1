//! Running LLDB 22 on trace bundles and reading what it prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// One thread's items as `thread trace dump instructions -a -f --raw` prints them.
#[derive(Debug, Default, Clone)]
pub struct DumpedThread {
    /// Instruction addresses, in order.
    pub addresses: Vec<u64>,
    /// `(error) …` lines.
    pub errors: Vec<String>,
}

/// Loads `trace_json` in `lldb-22` and dumps every thread's instructions
/// (`thread trace dump instructions -a -f --raw <index>`), keyed by tid.
pub fn dump_raw_instructions(trace_json: &Path, threads: usize) -> Result<BTreeMap<u64, DumpedThread>, String> {
    dump_raw_instructions_of(trace_json, None, threads)
}

/// [`dump_raw_instructions`] in LLDB's target `target` (a bundle with several
/// process entries loads as one target per entry, numbered in bundle order).
pub fn dump_raw_instructions_of(trace_json: &Path, target: Option<usize>, threads: usize) -> Result<BTreeMap<u64, DumpedThread>, String> {
    let mut command = Command::new("lldb-22");
    command.arg("-b").arg("-o").arg(format!("trace load {}", trace_json.display()));
    if let Some(target) = target {
        command.arg("-o").arg(format!("target select {target}"));
    }
    for index in 1..=threads {
        command.arg("-o").arg(format!("thread trace dump instructions -a -f --raw {index}"));
    }
    let output = command.output().map_err(|e| format!("running lldb-22: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || stderr.contains("error:") {
        return Err(format!("lldb-22 failed: {stderr}\n{text}"));
    }
    let mut threads = BTreeMap::new();
    let mut current: Option<u64> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("thread #") {
            let tid = rest.split("tid = ").nth(1).and_then(|t| t.trim().parse().ok());
            current = tid;
            if let Some(tid) = tid {
                threads.entry(tid).or_insert_with(DumpedThread::default);
            }
            continue;
        }
        let Some(tid) = current else { continue };
        let entry = threads.get_mut(&tid).expect("thread entry");
        let trimmed = line.trim();
        if let Some((_, rest)) = trimmed.split_once(": ") {
            if let Some(hex) = rest.strip_prefix("0x") {
                if let Ok(address) = u64::from_str_radix(hex.trim(), 16) {
                    entry.addresses.push(address);
                    continue;
                }
            }
            if rest.starts_with("(error)") {
                entry.errors.push(trimmed.to_string());
            }
        }
    }
    Ok(threads)
}

/// What LLDB prints, without its echo of the commands, for `commands`
/// run after `trace load <trace_json>`.
pub fn trace_commands(trace_json: &Path, commands: impl IntoIterator<Item = String>) -> Result<String, String> {
    let mut command = Command::new("lldb-22");
    command.arg("-b").arg("-o").arg(format!("trace load {}", trace_json.display()));
    for each in commands {
        command.arg("-o").arg(each);
    }
    let output = command.output().map_err(|e| format!("running lldb-22: {e}"))?;
    if !output.status.success() {
        return Err(format!("lldb-22 failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text.lines().filter(|line| !line.starts_with("(lldb) ")).map(|line| format!("{line}\n")).collect())
}

/// The text LLDB prints for `thread trace dump instructions <options> <index>`
/// for every thread index `1..=threads`, without LLDB's echo of the commands.
pub fn dump_text(trace_json: &Path, threads: usize, options: &str) -> Result<String, String> {
    trace_commands(trace_json, (1..=threads).map(|index| format!("thread trace dump instructions {options} {index}")))
}

/// [`dump_text`] of thread 1 for each bundle of `trace_jsons`, in one LLDB
/// session (`trace load`, the dump, `target delete`, for each in turn):
/// what separate sessions print, without starting LLDB each time.
pub fn dump_text_each(trace_jsons: &[impl AsRef<Path>], options: &str) -> Result<Vec<String>, String> {
    let dump = format!("thread trace dump instructions {options} 1");
    let mut command = Command::new("lldb-22");
    command.arg("-b");
    for trace_json in trace_jsons {
        command.args(["-o", &format!("trace load {}", trace_json.as_ref().display()), "-o", &dump, "-o", "target delete"]);
    }
    let output = command.output().map_err(|e| format!("running lldb-22: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || stderr.contains("error:") {
        return Err(format!("lldb-22 failed: {stderr}"));
    }
    // What each dump printed: the lines between its echo and the next echo.
    let mut dumps = Vec::new();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(command) = line.strip_prefix("(lldb) ") {
            dumps.extend(current.take());
            current = (command == dump).then(String::new);
        } else if let Some(text) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    dumps.extend(current);
    if dumps.len() != trace_jsons.len() {
        return Err(format!("lldb-22 printed {} dumps for {} bundles", dumps.len(), trace_jsons.len()));
    }
    Ok(dumps)
}

/// The JSON array LLDB prints for one `-j` command (e.g. `thread trace dump
/// instructions -j 1`).
pub fn json(trace_json: &Path, command: &str) -> Result<Vec<serde_json::Value>, String> {
    let text = trace_commands(trace_json, [command.to_string()])?;
    let line = text.lines().find(|l| l.starts_with('[')).ok_or_else(|| format!("no JSON from LLDB:\n{text}"))?;
    serde_json::from_str(line).map_err(|e| e.to_string())
}
