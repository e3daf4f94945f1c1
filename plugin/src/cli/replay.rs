//! `retrace replay`: the one command after `retrace record`. Starts
//! `retrace-stub --replay` on a bundle and a debugger connected to it —
//! LLDB 22 with the shim loaded (`retrace reverse-step`, …), or GDB 13 —
//! and ends the stub when the debugger ends.

use std::ffi::OsString;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use retrace_decoder::bundle::paths::{BundleDir, Reach, ALLOW_HINT};
use retrace_decoder::bundle::TraceBundle;

use crate::cli::error::CliError;
use crate::companions::{self, beside_this_program, env_path, on_path};

/// What `retrace replay` was asked.
pub struct Args {
    /// The bundle (its directory or its trace.json).
    pub bundle: PathBuf,
    /// GDB instead of LLDB.
    pub gdb: bool,
    /// The debugger to run (default: lldb-22, else lldb; gdb).
    pub debugger: Option<PathBuf>,
    /// The stub (default: $RETRACE_STUB, else the one beside this program).
    pub stub: Option<PathBuf>,
    /// Passed on to the debugger, after the commands that connect it.
    pub debugger_args: Vec<OsString>,
    /// Where the files the bundle names may be (passed on to the stub).
    pub reach: Reach,
}

/// The bundle described by `trace_json`.
fn read_bundle(trace_json: &Path) -> Result<TraceBundle, CliError> {
    let text = std::fs::read_to_string(trace_json).map_err(|e| CliError::Message(format!("{}: {e}", trace_json.display())))?;
    TraceBundle::from_json(&text).map_err(|e| CliError::Message(format!("{}: {e}", trace_json.display())))
}

/// The program the bundle recorded, for the debugger to read: the
/// bundle's copy (with [`Reach::Anywhere`], its own file first if it is
/// still there, as before bundles were untrusted).
fn program_of(trace_json: &Path, bundle: &TraceBundle, reach: Reach) -> Result<PathBuf, CliError> {
    let module = bundle.processes.first().and_then(|p| p.modules.first()).ok_or_else(|| CliError::Message(format!("{}: the bundle names no program", trace_json.display())))?;
    let own = PathBuf::from(&module.system_path);
    if reach == Reach::Anywhere && own.is_file() {
        return Ok(own);
    }
    let copy = BundleDir::of_trace_json(trace_json, reach)
        .module(module.file.as_deref(), &module.system_path)
        .map_err(|e| CliError::Message(format!("{}: {e}: {ALLOW_HINT}", trace_json.display())))?;
    if !copy.is_file() {
        return Err(CliError::Message(format!("{}: the bundle's copy of the program {} is not there ({})", trace_json.display(), module.system_path, copy.display())));
    }
    Ok(copy)
}

/// GDB's settings that make it read the modules from the bundle's copies
/// (`modules/` mirrors the paths they had) rather than over the
/// connection, file by file, with a warning each run: the copies as the
/// sysroot, and their folders to search by name (the program asks for its
/// interpreter by a path, `/lib64/ld-linux-x86-64.so.2`, that is a link to
/// the file copied). None when the bundle holds no copies.
fn gdb_local_files(trace_json: &Path, bundle: &TraceBundle) -> Vec<String> {
    // (Inside the bundle whatever the reach: GDB is pointed at no folder
    // out of it.)
    let bundle_dir = BundleDir::of_trace_json(trace_json, Reach::Inside);
    let Some(modules) = bundle_dir.file("modules").ok().and_then(|m| m.canonicalize().ok()) else { return Vec::new() };
    let mut folders: Vec<PathBuf> = Vec::new();
    for module in bundle.processes.iter().flat_map(|p| &p.modules) {
        let Some(folder) = module.file.as_ref().and_then(|f| bundle_dir.file(f).ok()?.parent()?.canonicalize().ok()) else { continue };
        if folder.starts_with(&modules) && !folders.contains(&folder) {
            folders.push(folder);
        }
    }
    let folders: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
    vec![format!("set sysroot {}", modules.display()), format!("set solib-search-path {}", folders.join(":"))]
}

/// Runs the replay session; the debugger's exit status is the command's.
pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let trace_json = retrace_decoder::bundle::load::trace_json_of(&args.bundle);
    if !trace_json.is_file() {
        return Err(CliError::Message(format!("{}: no trace.json there (give the directory `retrace record -o` wrote, or its trace.json)", args.bundle.display())));
    }
    let bundle = read_bundle(&trace_json)?;
    let program = program_of(&trace_json, &bundle, args.reach)?;
    let stub = args.stub.clone().or_else(|| env_path("RETRACE_STUB")).unwrap_or_else(|| beside_this_program("retrace-stub"));
    if !stub.is_file() {
        return Err(CliError::Message(format!("{}: no retrace-stub there: build it (cargo build -p retrace-stub) or give --stub PATH", stub.display())));
    }
    let debugger = match (&args.debugger, args.gdb) {
        (Some(path), _) => path.clone(),
        (None, true) => on_path(&["gdb"]).ok_or_else(|| CliError::Message("gdb is not installed (apt-get install gdb)".into()))?,
        (None, false) => on_path(&["lldb-22", "lldb"]).ok_or_else(|| CliError::Message("lldb is not installed (apt-get install lldb-22)".into()))?,
    };
    tracing::info!(stub = %stub.display(), bundle = %trace_json.display(), "starting the replay server");
    let mut server = std::process::Command::new(&stub)
        .args(["--listen", "127.0.0.1:0", "--replay"])
        .arg(&trace_json)
        .args(args.reach.option())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::Message(format!("starting {}: {e}", stub.display())))?;
    let mut stderr = std::io::BufReader::new(server.stderr.take().expect("piped"));
    let mut line = String::new();
    let address = loop {
        line.clear();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = server.wait();
            return Err(CliError::Message(format!("retrace-stub ended before it listened: {}", line.trim())));
        }
        if let Some((_, address)) = line.trim().rsplit_once("listening on ") {
            eprintln!("{}", line.trim());
            break address.to_string();
        }
        eprint!("{line}");
    };
    // The stub's later words go to our stderr.
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("{line}");
        }
    });
    let mut command = std::process::Command::new(&debugger);
    if args.gdb {
        command.arg(&program);
        for setting in gdb_local_files(&trace_json, &bundle) {
            command.arg("-ex").arg(setting);
        }
        command.args(["-ex", &format!("target remote {address}")]);
    } else {
        command.arg(&program).args(["-o", &format!("gdb-remote {address}")]);
        let shim = companions::shim();
        if shim.exists() {
            command.arg("-o").arg(format!("command script import {}", shim.display()));
        } else {
            eprintln!("retrace: the LLDB shim {} is not there: set RETRACE_SHIM to load `retrace reverse-step` and the others", shim.display());
        }
    }
    command.args(&args.debugger_args);
    let status = command.status().map_err(|e| CliError::Message(format!("running {}: {e}", debugger.display())));
    let _ = server.kill();
    let _ = server.wait();
    let status = status?;
    Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8))
}
