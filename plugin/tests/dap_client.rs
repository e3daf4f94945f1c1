//! `retrace-dap` and the VS Code extension (`plugin/vscode`).
//!
//! The DAP test proper is `plugin/vscode/test/dap.test.js`: the npm
//! `@vscode/debugadapter-testsupport` DebugClient drives retrace-dap as VS
//! Code does (launch under recording; replay of a saved trace), and checks
//! each stop against plain lldb-dap-22 running the same program forwards.
//! This driver builds what it needs (the program, a bundle of it,
//! retrace-stub, the extension's npm packages), runs it with node's test
//! runner, and fails with its report. A second test builds the `.vsix` with
//! the README's command and checks that vsce refuses a broken manifest.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use retrace_collector::ptrace_recorder::StepMode;
use retrace_tests::recordings::{build, programs_dir, record_bundle};
use retrace_tests::tools::{require, which};

/// Held by each test that runs the DAP client, from its build to its
/// end: one at a time, as each counts the processes its sessions leave and
/// times its stops (a recording beside it would slow them).
static NODE_RUNS: Mutex<()> = Mutex::new(());

fn extension_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vscode")
}

fn tools_present() -> bool {
    ["gcc", "lldb-dap-22", "node", "npm"].iter().all(|tool| require(tool, which(tool).is_some()))
}

/// `npm ci` in the extension's directory, once (the tests share it).
fn npm_packages() {
    static INSTALLED: Mutex<bool> = Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *installed {
        return;
    }
    let out = Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(extension_dir()).output().expect("run npm");
    assert!(out.status.success(), "npm ci: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    *installed = true;
}

/// Runs the DAP client's cases (`plugin/vscode/test/dap.test.js`) on
/// `program` (built from step_back.c), the replay case on `trace_json`
/// (`full_state`: a full-state recording, whose stops show the locals, and
/// the launch that records under Valgrind runs too); all must pass.
fn run_dap_client(program: &Path, trace_json: &Path, full_state: bool) {
    let stub = common::build_stub();
    npm_packages();
    let out = Command::new("node")
        .args(["--test", "--test-reporter=tap", "test/dap.test.js"])
        .current_dir(extension_dir())
        .env("RETRACE_DAP", env!("CARGO_BIN_EXE_retrace-dap"))
        .env("RETRACE_STUB", stub)
        .env("RETRACE_LLDB_DAP", which("lldb-dap-22").unwrap())
        .env("RETRACE_DAP_PROGRAM", program)
        .env("RETRACE_DAP_SOURCE", programs_dir().join("step_back.c"))
        .env("RETRACE_DAP_TRACE_JSON", trace_json)
        .env("RETRACE_DAP_FULL_STATE", if full_state { "1" } else { "0" })
        .output()
        .expect("run node");
    let report = String::from_utf8_lossy(&out.stdout);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the DAP client test failed (report above)");
    // All cases ran: the five, and with a full-state replay the launch
    // recorded under Valgrind (skipped otherwise).
    let (passing, skipped) = if full_state { ("# pass 7", "# skipped 0") } else { ("# pass 6", "# skipped 1") };
    assert!(report.contains(passing) && report.contains(skipped), "expected {passing}, {skipped}: {report}");
}

#[test]
fn step_back_through_retrace_dap_as_vs_code_drives_it() {
    if !tools_present() {
        return;
    }
    let _one_at_a_time = NODE_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dap_client");
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("step_back", &dir, &["-O0"]);
    let trace_json = record_bundle(&program, &[], StepMode::Step, &dir.join("bundle"));
    run_dap_client(&program, &trace_json, false);
}

/// The same cases on a static `-no-pie` build (the same addresses natively
/// and under Valgrind), the replay being of a full-state recording
/// (`retrace record --mode full`): every replayed stop shows the locals the
/// forward run showed, and continuing past the end reports the recorded
/// exit; and a launch with `"record": "valgrind"` records the program, then
/// debugs the recording with its locals.
#[test]
fn step_back_through_retrace_dap_on_a_full_state_recording_shows_the_locals() {
    if !tools_present() || !retrace_tests::tools::require("valgrind", which("valgrind").is_some() && retrace_collector::valgrind::availability().is_ok()) {
        return;
    }
    let _one_at_a_time = NODE_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dap_client_full");
    let _ = std::fs::remove_dir_all(&dir);
    let program = build("step_back", &dir, &["-O0", "-static", "-no-pie"]);
    let bundle = dir.join("bundle");
    let recorded = Command::new(env!("CARGO_BIN_EXE_retrace")).args(["record", "--mode", "full", "-o"]).arg(&bundle).arg("--").arg(&program).output().unwrap();
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    run_dap_client(&program, &bundle.join("trace.json"), true);
}

#[test]
fn the_vsix_builds_with_the_readme_command_and_vsce_checks_the_manifest() {
    if !tools_present() {
        return;
    }
    npm_packages();
    let vsix = extension_dir().join("retrace.vsix");
    let _ = std::fs::remove_file(&vsix);
    // README: cd plugin/vscode && npm ci && npm run package
    let out = Command::new("npm").args(["run", "package"]).current_dir(extension_dir()).output().expect("run npm");
    assert!(out.status.success(), "npm run package: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let listing = Command::new("python3").args(["-m", "zipfile", "-l"]).arg(&vsix).output().expect("run python3");
    let listing = String::from_utf8_lossy(&listing.stdout);
    for file in ["extension/package.json", "extension/extension.js", "extension.vsixmanifest"] {
        assert!(listing.contains(file), "{file} missing from the vsix: {listing}");
    }
    assert!(!listing.contains("node_modules") && !listing.contains("test/"), "the vsix carries test or npm files: {listing}");

    // A manifest without `engines` (VS Code could not tell whether the
    // extension runs) is refused.
    let broken = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vsix_broken");
    let _ = std::fs::remove_dir_all(&broken);
    std::fs::create_dir_all(&broken).unwrap();
    for file in ["extension.js", "README.md", "LICENSE", ".vscodeignore"] {
        std::fs::copy(extension_dir().join(file), broken.join(file)).unwrap();
    }
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(extension_dir().join("package.json")).unwrap()).unwrap();
    manifest.as_object_mut().unwrap().remove("engines");
    std::fs::write(broken.join("package.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let vsce = extension_dir().join("node_modules/@vscode/vsce/vsce");
    let out = Command::new("node").arg(vsce).args(["package", "--no-dependencies", "--out", "broken.vsix"]).current_dir(&broken).output().expect("run vsce");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "vsce packaged a manifest without engines");
    assert!(said.contains("engines"), "vsce's refusal names the field: {said}");
    assert!(!broken.join("broken.vsix").exists());
}
