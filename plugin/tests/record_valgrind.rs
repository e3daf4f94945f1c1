//! `retrace record --backend valgrind` against an independent truth: for C
//! programs built here, LLDB 22's own decode of every thread of the bundle
//! (`thread trace dump instructions -a -f --raw`, libipt inside liblldb)
//! must equal the instruction log of the same program run under Valgrind by
//! the tests' own tool (`tests/valgrind/imarks.c`: every instruction
//! Valgrind runs, REP iterations once, Valgrind's own text left out), in
//! the same environment. No decode error is allowed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use retrace_collector::valgrind::{VALGRIND_LIB_VARIABLE, VALGRIND_OPTIONS};
use retrace_tests::lldb::dump_raw_instructions;
use retrace_tests::tools::{require, which};

use common::{PROGRAMS, gcc, build};

fn tools_present() -> bool {
    require("gcc", which("gcc").is_some())
        && require("lldb-22 (Debian package lldb-22)", which("lldb-22").is_some())
        && require("valgrind (Debian package valgrind)", which("valgrind").is_some())
        && require("retrace built with Valgrind's headers", retrace_collector::valgrind::availability().is_ok())
}



/// One `VALGRIND_LIB` folder for retrace's tool and the imarks tool, so
/// both runs show the program the same environment.
fn folder() -> PathBuf {
    static FOLDER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let folder = Path::new(env!("CARGO_TARGET_TMPDIR")).join("valgrind-lib");
            retrace_tests::valgrind::prepare_folder(&folder).expect("Valgrind's headers")
        })
        .clone()
}

const ENV: [(&str, &str); 1] = [("PATH", "/usr/bin:/bin")];

fn record(bundle: &Path, program: &Path, args: &[&str]) -> (serde_json::Value, Output) {
    let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--json", "-o"])
        .arg(bundle)
        .arg("--")
        .arg(program)
        .args(args)
        .env_clear()
        .envs(ENV)
        .env(VALGRIND_LIB_VARIABLE, folder())
        .output()
        .expect("run retrace record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    let summary = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: retrace record said:\n{stderr}"));
    (summary, out)
}

/// The threads' instructions as LLDB decodes them, in the bundle's order
/// (the order the threads first ran, as Valgrind numbers them; not tid
/// order: tids wrap at `pid_max`), with no error item.
fn lldb_threads(bundle: &Path, threads: usize) -> Vec<Vec<u64>> {
    let trace_json = bundle.join("trace.json");
    let mut dumped = dump_raw_instructions(&trace_json, threads).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dumped.len(), threads, "LLDB's threads");
    let listed: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace_json).unwrap()).unwrap();
    let tids: Vec<u64> = listed["processes"][0]["threads"].as_array().unwrap().iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids.len(), threads, "threads in {}", trace_json.display());
    tids.iter()
        .map(|tid| {
            let thread = dumped.remove(tid).unwrap_or_else(|| panic!("LLDB shows no thread {tid}"));
            assert!(thread.errors.is_empty(), "LLDB's decode has errors: {:?}", &thread.errors[..thread.errors.len().min(5)]);
            thread.addresses
        })
        .collect()
}

/// Where two instruction lists first differ, with the addresses around.
fn first_difference(ours: &[u64], truth: &[u64]) -> Option<String> {
    let at = ours.iter().zip(truth).position(|(a, b)| a != b).or((ours.len() != truth.len()).then(|| ours.len().min(truth.len())))?;
    let around = |list: &[u64]| list[at.saturating_sub(3)..(at + 4).min(list.len())].iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(" ");
    Some(format!("at instruction {at} of {} (truth {}): ours {} / truth {}", ours.len(), truth.len(), around(ours), around(truth)))
}

/// Records `program` and checks LLDB's decode of each thread against the
/// imarks log. `deterministic: false` (threads): the first thread is
/// compared up to its first thread creation (the instruction after the
/// `clone` system call, where the new thread starts too: before that,
/// scheduling cannot change its path), every other thread up to where two
/// imarks runs of the program part.
fn check(what: &str, dir: &Path, program: &Path, args: &[&str], threads: usize, deterministic: bool) -> u64 {
    let bundle = dir.join(format!("{}-bundle", program.file_name().unwrap().to_string_lossy()));
    let (summary, recorded) = record(&bundle, program, args);
    let (truth, reference) = retrace_tests::valgrind::instructions(&folder(), &VALGRIND_OPTIONS, &ENV, program, args);
    assert_eq!(recorded.status.code(), reference.status.code(), "{what}: exit status (retrace record passes the program's on)");
    assert_eq!(recorded.stdout, reference.stdout, "{what}: stdout");
    assert_eq!(summary["undecodable_instructions"], 0, "{what}");
    assert_eq!(truth.len(), threads, "{what}: threads in the imarks log");
    let ours = lldb_threads(&bundle, threads);
    // retrace's own count (a REP string instruction once) is LLDB's.
    assert_eq!(summary["instructions"].as_u64(), Some(ours.iter().map(|t| t.len() as u64).sum()), "{what}: instructions recorded");
    let again = if deterministic { None } else { Some(retrace_tests::valgrind::instructions(&folder(), &VALGRIND_OPTIONS, &ENV, program, args).0) };
    let mut total = 0;
    let child_start = truth.values().nth(1).map(|t| t[0]);
    for (index, (ours, truth)) in ours.iter().zip(truth.values()).enumerate() {
        let compared = match &again {
            None => truth.len(),
            Some(_) if index == 0 => {
                let child_start = child_start.expect("a second thread");
                truth.iter().position(|&a| a == child_start).expect("the parent returns from clone where the child starts") + 1
            }
            Some(again) => {
                let other = again.values().nth(index).expect("same threads");
                truth.iter().zip(other).take_while(|(a, b)| a == b).count()
            }
        };
        assert!(compared > 1000 || (index > 0 && compared > 100), "{what}: thread {index}: only {compared} instructions to compare");
        let (ours_part, truth_part) = if deterministic { (&ours[..], &truth[..]) } else { (&ours[..compared.min(ours.len())], &truth[..compared]) };
        if let Some(difference) = first_difference(ours_part, truth_part) {
            panic!("{what}: thread {index}: {difference}");
        }
        total += compared as u64;
    }
    eprintln!("{what}: {total} instructions equal in {threads} thread(s)");
    total
}

fn check_program(name: &str, extra: &[&str], threads: usize, deterministic: bool) {
    if !tools_present() {
        return;
    }
    for (link, opt) in [("static", "-O0"), ("static", "-O2"), ("dynamic", "-O0"), ("dynamic", "-O2")] {
        let dir = common::work_dir("record-valgrind", &format!("{name}-{link}{opt}"));
        let mut flags = vec![opt];
        if link == "static" {
            flags.push("-static");
        }
        flags.extend_from_slice(extra);
        let exe = build(name, &dir, &flags);
        let n = check(&format!("{name} {link} {opt}"), &dir, &exe, &[], threads, deterministic);
        assert!(n > 10_000, "{name}: {n} instructions");
    }
}

#[test]
fn loop_and_function_pointer() {
    check_program("loop_fnptr", &[], 1, true);
}

#[test]
fn recursion_deeper_than_the_return_stack() {
    check_program("recursion", &[], 1, true);
}

#[test]
fn setjmp_longjmp() {
    check_program("setjmp_longjmp", &[], 1, true);
}

#[test]
fn signal_handler() {
    check_program("signal_handler", &[], 1, true);
}

#[test]
fn four_threads() {
    check_program("threads", &["-pthread"], 5, false);
}

#[test]
fn a_shared_library_linked_and_one_loaded_with_dlopen() {
    if !tools_present() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let dir = common::work_dir("record-valgrind", &format!("shlib{opt}"));
        let lib = dir.join("libretracedemo.so");
        gcc(&["-g", opt, "-shared", "-fPIC", "-o", lib.to_str().unwrap(), &format!("{PROGRAMS}/shlib_lib.c")]);
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let linked = build("shlib_main", &dir, &[opt, "-L", dir.to_str().unwrap(), "-lretracedemo", &rpath]);
        check(&format!("shlib_main {opt}"), &dir, &linked, &[], 1, true);
        let loader = build("dlopen_main", &dir, &[opt, "-rdynamic", "-ldl"]);
        let lib_path = lib.to_str().unwrap();
        check(&format!("dlopen_main {opt}"), &dir, &loader, &[lib_path], 1, true);
        // The library and Valgrind's preload library are modules of the bundle.
        let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("dlopen_main-bundle/trace.json")).unwrap()).unwrap();
        let paths: Vec<&str> = trace["processes"][0]["modules"].as_array().unwrap().iter().map(|m| m["systemPath"].as_str().unwrap()).collect();
        assert!(paths.iter().any(|p| p.ends_with("/libretracedemo.so")), "{paths:?}");
        assert!(paths.iter().any(|p| p.contains("vgpreload_core")), "{paths:?}");
        assert!(!paths.iter().any(|p| p.ends_with("-amd64-linux")), "Valgrind's tool is not a module: {paths:?}");
    }
}

#[test]
fn without_valgrind_the_backend_names_the_package() {
    // With no valgrind on PATH the refusal is one line naming the package.
    let dir = common::work_dir("record-valgrind", "no-valgrind");
    let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "-o"])
        .arg(dir.join("bundle"))
        .args(["--", "/bin/true"])
        .env_clear()
        .env("PATH", dir.to_str().unwrap())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("apt-get install valgrind"), "{stderr}");
}

/// `program` run natively and under `retrace record --backend valgrind`:
/// the same stdout and exit status; `images` program images, each a bundle
/// LLDB and retrace decode without an error item; the summary.
fn check_process(what: &str, program: &[&str], images: usize) -> serde_json::Value {
    let dir = common::work_dir("record-valgrind", what);
    let native = Command::new(program[0]).args(&program[1..]).env_clear().envs(ENV).output().unwrap();
    let bundle = dir.join("bundle");
    let (summary, out) = record(&bundle, Path::new(program[0]), &program[1..]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&native.stdout), "{what}: stdout");
    assert_eq!(out.status.code(), native.status.code(), "{what}: exit status");
    assert_eq!(summary["images"], images, "{what}: {summary}");
    let mut image_bundles = vec![bundle.join("trace.json")];
    image_bundles.extend((1..images).map(|n| bundle.join(format!("exec{n}/trace.json"))));
    let threads = summary["threads"].as_array().unwrap();
    let mut decoded = 0;
    for (number, trace_json) in image_bundles.iter().enumerate() {
        let count = threads.iter().filter(|t| t["image"] == number).count();
        let dumped = retrace_tests::lldb::dump_raw_instructions(trace_json, count).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dumped.len(), count, "{what}: image {number}'s threads in LLDB");
        for (tid, thread) in &dumped {
            assert!(thread.errors.is_empty(), "{what}: image {number} thread {tid}: {:?}", thread.errors);
            decoded += thread.addresses.len() as u64;
        }
        let info = common::retrace().args(["dump", "info", "--json"]).arg(trace_json).output().unwrap();
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        for thread in info["threads"].as_array().unwrap() {
            assert_eq!(thread["errors"], 0, "{what}: retrace decode errors in {thread}");
        }
    }
    assert_eq!(Some(decoded), summary["instructions"].as_u64(), "{what}: LLDB decodes every instruction recorded");
    summary
}

#[test]
fn processes_that_exec_fork_spawn_and_churn_threads() {
    if !tools_present() {
        return;
    }
    // env execs echo: two images, one bundle each.
    let summary = check_process("env-echo", &["/usr/bin/env", "/bin/echo", "hi"], 2);
    assert!(summary["threads"].as_array().unwrap().iter().all(|t| t["tid"] == summary["pid"]), "{summary}");
    // A shell forks a child that execs: the child runs on, untraced, as
    // with the other backends; its status reaches the shell.
    check_process("sh-c", &["/bin/sh", "-c", "/bin/true; echo $?; exit 3"], 1);
    let dir = common::work_dir("record-valgrind", "programs");
    let fork = build("fork_and_wait", &dir, &["-O1"]);
    check_process("fork", &[fork.to_str().unwrap()], 1);
    let spawn = build("spawn", &dir, &["-O1"]);
    check_process("posix-spawn", &[spawn.to_str().unwrap()], 1);
    // Twelve threads, created and joined three at a time: Valgrind reuses
    // its thread slots, retrace's threads stay apart.
    let churn = build("thread_loop", &dir, &["-O1", "-pthread"]);
    let summary = check_process("thread-churn", &[churn.to_str().unwrap()], 1);
    let tids: std::collections::BTreeSet<u64> = summary["threads"].as_array().unwrap().iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids.len(), 13, "{summary}");
}

#[test]
fn instruction_limit_and_ctrl_c_end_with_valid_bundles() {
    if !tools_present() {
        return;
    }
    let dir = common::work_dir("record-valgrind", "limits");
    let decode = |bundle: &Path| -> u64 {
        let dumped = retrace_tests::lldb::dump_raw_instructions(&bundle.join("trace.json"), 1).unwrap_or_else(|e| panic!("{e}"));
        let thread = dumped.values().next().expect("a thread");
        assert!(thread.errors.is_empty(), "{:?}", thread.errors);
        thread.addresses.len() as u64
    };
    // --max-insns: about that many (the tool counts whole superblocks), then
    // the program is ended.
    let limited = dir.join("limited");
    let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--max-insns", "20000", "--json", "-o"])
        .arg(&limited)
        .args(["--", "/bin/echo", "never printed"])
        .env_clear()
        .envs(ENV)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(summary["outcome"], "instruction limit reached; program killed");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "echo never got to write");
    let n = decode(&limited);
    assert_eq!(Some(n), summary["instructions"].as_u64());
    assert!((15_000..=20_000).contains(&n), "{n} instructions");

    // Ctrl-C (SIGINT to retrace) while the program sleeps in a system call.
    let interrupted = dir.join("interrupted");
    let child = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["record", "--backend", "valgrind", "--json", "-o"])
        .arg(&interrupted)
        .args(["--", "/bin/sleep", "30"])
        .env_clear()
        .envs(ENV)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(summary["outcome"], "recording interrupted; program killed");
    let n = decode(&interrupted);
    assert_eq!(Some(n), summary["instructions"].as_u64());
    assert!(n > 10_000, "sleep ran its start-up: {n}");
}

#[test]
fn auto_takes_valgrind_where_intel_pt_is_missing_else_ptrace_branch_mode() {
    if !tools_present() {
        return;
    }
    let dir = common::work_dir("record-valgrind", "auto");
    let auto = |bundle: &str, path: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_retrace"))
            .args(["record", "-o"])
            .arg(dir.join(bundle))
            .args(["--", "/bin/echo", "auto"])
            .env_clear()
            .env("PATH", path)
            .env("RETRACE_INTEL_PT_SYSFS", dir.join("no-intel-pt"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "auto\n");
        let description: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(bundle).join("trace.json")).unwrap()).unwrap();
        (String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string(), description["retrace"].clone())
    };
    let (said, retrace) = auto("with-valgrind", "/usr/bin:/bin");
    assert_eq!(said, "retrace: no Intel PT here; recording under Valgrind (--backend valgrind)");
    assert_eq!(retrace["backend"], "valgrind");
    // Without valgrind on PATH: ptrace, at every branch, saying why.
    let (said, retrace) = auto("without-valgrind", dir.to_str().unwrap());
    assert_eq!(said, "retrace: no Intel PT here and valgrind is not installed (apt-get install valgrind); recording with ptrace, stopping at every branch (--backend ptrace --ptrace-stops branch)");
    assert_eq!(retrace["backend"], "software");
    assert_eq!(retrace["mode"], "branch");
}

/// A faulting instruction does not complete: hardware PT ends the flow
/// before it (FUP at it), and so must the Valgrind backend — the reference
/// log names it (its IMark comes before it runs) and nothing after it in
/// its superblock. `faults`: how many instructions of the reference
/// faulted, each left out of ours.
fn check_faults(name: &str, faults: usize, expect_status: Option<i32>) {
    if !tools_present() {
        return;
    }
    for (link, opt) in [("static", "-O0"), ("dynamic", "-O2")] {
        let dir = common::work_dir("record-valgrind", &format!("{name}-{link}{opt}"));
        let mut flags = vec![opt];
        if link == "static" {
            flags.push("-static");
        }
        let exe = build(name, &dir, &flags);
        let what = format!("{name} {link} {opt}");
        let bundle = dir.join("bundle");
        let (summary, recorded) = record(&bundle, &exe, &[]);
        let (truth, reference) = retrace_tests::valgrind::instructions(&folder(), &VALGRIND_OPTIONS, &ENV, &exe, &[]);
        // A program killed by a signal: retrace exits 128 + its number, as a shell reports it.
        use std::os::unix::process::ExitStatusExt;
        let expected = reference.status.code().or(reference.status.signal().map(|s| 128 + s));
        assert_eq!(recorded.status.code(), expected, "{what}");
        assert_eq!(recorded.status.code(), expect_status, "{what}");
        let ours = &lldb_threads(&bundle, 1)[0];
        let truth = truth.values().next().unwrap();
        assert_eq!(summary["instructions"].as_u64(), Some(ours.len() as u64), "{what}");
        // Ours is the reference with `faults` single instructions taken out.
        assert_eq!(ours.len() + faults, truth.len(), "{what}: {:?}", first_difference(ours, truth));
        let (mut i, mut j, mut skipped) = (0, 0, 0);
        while j < truth.len() {
            if i < ours.len() && ours[i] == truth[j] {
                i += 1;
            } else {
                skipped += 1;
                assert!(skipped <= faults, "{what}: {}", first_difference(&ours[i..], &truth[j..]).unwrap_or_default());
            }
            j += 1;
        }
        assert_eq!((i, skipped), (ours.len(), faults), "{what}");
    }
}

#[test]
fn a_crash_ends_before_the_faulting_instruction() {
    // Killed by SIGSEGV: 128 + 11.
    check_faults("crash", 1, Some(139));
}

#[test]
fn a_handled_fault_leaves_out_the_faulting_instruction() {
    check_faults("segv_handler", 3, Some(3));
}

/// A Valgrind bundle replays in retrace-stub as any other: GDB 13 goes
/// back from the end of the history to a breakpoint on `main` at the
/// address the program had under Valgrind (a PIE program at 0x108000).
#[test]
fn a_valgrind_bundle_replays_in_the_stub_for_gdb() {
    if !tools_present() || !require("gdb", which("gdb").is_some()) {
        return;
    }
    let dir = common::work_dir("record-valgrind", "replay");
    let exe = build("loop_fnptr", &dir, &["-O0"]);
    let bundle = dir.join("bundle");
    let (summary, _) = record(&bundle, &exe, &[]);
    let native = Command::new(&exe).status().unwrap().code().unwrap();
    assert_eq!(summary["outcome"], format!("program exited with status {native}"));
    let stub = common::build_stub();
    let mut server = Command::new(stub)
        .args(["--listen", "127.0.0.1:0", "--replay"])
        .arg(bundle.join("trace.json"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    let port = line.rsplit(':').next().unwrap().trim().to_string();
    let out = Command::new("gdb")
        .args(["-q", "-batch", "-nx", "-ex", "set debuginfod enabled off", "-ex", &format!("target remote :{port}")])
        .args(["-ex", "break main", "-ex", "reverse-continue", "-ex", "print $pc", "-ex", "info symbol $pc"])
        .arg(&exe)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    // main's breakpoint address under Valgrind: the link address + 0x108000.
    let nm = Command::new("nm").arg(&exe).output().unwrap();
    let main = String::from_utf8_lossy(&nm.stdout).lines().find(|l| l.ends_with(" T main")).map(|l| u64::from_str_radix(&l[..16], 16).unwrap()).unwrap();
    assert!(text.contains("Breakpoint 1, main ()"), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let pc = text.lines().find_map(|l| l.split("(void (*)()) ").nth(1)).and_then(|v| v.split_whitespace().next()).map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap());
    assert!(pc.is_some_and(|pc| pc > 0x108000 + main && pc < 0x108000 + main + 0x20), "pc {pc:x?}, main at {:#x} + 0x108000\n{text}", main);
}

/// On a terminal, a long recording shows its progress on stderr: the
/// instructions converted so far, growing; the program's own output and the
/// summary are unchanged. (`script`, from util-linux, gives it a terminal.)
#[test]
fn a_long_recording_shows_its_progress_on_a_terminal() {
    if !tools_present() || !require("script (Debian package bsdutils)", which("script").is_some()) {
        return;
    }
    let dir = common::work_dir("record-valgrind", "progress");
    // About a second of gzip under Valgrind.
    let input = dir.join("input");
    let text: Vec<u8> = (0..12_000_000u32).map(|i| b"time travel debugger records the program\n"[(i % 41) as usize] ^ ((i / 4096) as u8 & 1)).collect();
    std::fs::write(&input, text).unwrap();
    let bundle = dir.join("bundle");
    let typescript = dir.join("typescript");
    let command = format!("{} record --backend valgrind -o {} -- /bin/gzip -1 -c {} > /dev/null", env!("CARGO_BIN_EXE_retrace"), bundle.display(), input.display());
    let out = Command::new("script").args(["-qec", &command]).arg(&typescript).env(VALGRIND_LIB_VARIABLE, folder()).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).replace('\r', "\n");
    let counts: Vec<u64> = shown
        .lines()
        .filter_map(|line| line.split("recording: ").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    assert!(counts.iter().any(|&n| n > 0), "no progress shown:\n{shown}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    let recorded: u64 = shown.lines().find_map(|line| line.strip_prefix("recorded ")?.split(' ').next()?.parse().ok()).expect("the summary line");
    assert!(counts.iter().all(|&n| n <= recorded), "{counts:?} against {recorded}");
}
