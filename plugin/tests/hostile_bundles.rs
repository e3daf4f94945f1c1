//! A bundle from someone else is untrusted input. Hostile bundles, made
//! from a real full-state recording, each run by `retrace dump info`,
//! `retrace-stub --replay` (GDB connected, a reverse-continue) and
//! `retrace replay --gdb`:
//! - a module copy named by an absolute path, by `..`, by a link out of the
//!   bundle; a trace and the modules folder that are links out; a module
//!   with no copy named by its system path; an exec'd image outside; the
//!   full-state stream named outside, or whose mapped files climb out;
//! - a stream and a trace shorter than they say, counts and lengths of
//!   2^40, duplicate thread ids, the full-state stream of another program.
//!
//! Each is refused with a clear error (what it names and why, and how to
//! allow it) or served within 256 MiB (peak RSS, by `wait4`); and no file
//! outside the bundle is read or created: `strace -f` of each whole run
//! shows no file of the folder beside the bundle (a canary, and a
//! `trace.json`) opened, and nothing opened for writing, created, renamed
//! or removed outside the bundle.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use retrace_decoder::full_state::{state_records, StateRecord, StateWriter};

/// Peak memory allowed to a run on a hostile bundle.
const MEMORY_LIMIT_KIB: i64 = 256 * 1024;

/// One hostile bundle and what must happen to it.
struct Hostile {
    name: &'static str,
    bundle: PathBuf,
    /// The words a refusal must hold; `None`: refused with any message,
    /// or served.
    refused_with: Option<&'static str>,
    /// Whether `retrace dump` reads the hostile part (it reads no
    /// full-state stream).
    dump_reads_it: bool,
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn description(bundle: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(bundle.join("trace.json")).unwrap()).unwrap()
}

fn write_description(bundle: &Path, value: &serde_json::Value) {
    std::fs::write(bundle.join("trace.json"), serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

/// The good bundle's full-state stream with records claiming 2^40 bytes
/// (zeroed, protected, moved, mapped from a file, unmapped) and a write at
/// the top of the address space, after the first thread's first records;
/// one mapped file's path climbs out of `modules/`.
fn huge_stream(good: &[u8]) -> Vec<u8> {
    let mut writer = StateWriter::new();
    let mut inserted = false;
    let mut seen = 0;
    for item in state_records(good) {
        let Ok((tid, record)) = item else { break };
        if record == StateRecord::End {
            continue;
        }
        writer.push(&StateRecord::Thread(tid));
        writer.push(&record);
        seen += 1;
        if !inserted && seen > 20 && tid != 0 && matches!(record, StateRecord::Registers { .. }) {
            let at = record.at();
            let huge = 1u64 << 40;
            for hostile in [
                StateRecord::Zeroed { at, start: 0x1000_0000, length: huge },
                StateRecord::Protected { at, start: 0x1000_0000, length: huge, prot: 3 },
                StateRecord::Moved { at, from: 0x1000_0000, to: 0x2000_0000_0000, length: huge },
                StateRecord::FileMapped { at, start: 0x3000_0000_0000, length: huge, offset: 0, path: b"/../../outside/canary" },
                StateRecord::FileMapped { at, start: 0x3100_0000_0000, length: huge, offset: huge, path: b"/usr/lib/x86_64-linux-gnu/libc.so.6" },
                StateRecord::Wrote { at, by_instruction: false, address: u64::MAX - 3, bytes: vec![1; 8].into() },
                StateRecord::Unmapped { at, start: 0x2000_0000_0000, length: huge },
            ] {
                writer.push(&StateRecord::Thread(tid));
                writer.push(&hostile);
            }
            inserted = true;
        }
    }
    assert!(inserted);
    writer.finish()
}

/// Every hostile bundle, made in `dir` from the recording `good` (and
/// `other`, another program's); the canary folder is `outside`.
fn hostile_bundles(dir: &Path, good: &Path, other: &Path, outside: &Path) -> Vec<Hostile> {
    let canary = outside.join("canary");
    let canary_text = canary.to_str().unwrap().to_string();
    let mut made = Vec::new();
    let mut make = |name: &'static str, refused_with: Option<&'static str>, dump_reads_it: bool, change: &dyn Fn(&Path, &mut serde_json::Value)| {
        let bundle = dir.join(name);
        copy_tree(good, &bundle);
        let mut value = description(&bundle);
        change(&bundle, &mut value);
        write_description(&bundle, &value);
        made.push(Hostile { name, bundle, refused_with, dump_reads_it });
    };
    let program_copy = |bundle: &Path, value: &serde_json::Value| bundle.join(value["processes"][0]["modules"][0]["file"].as_str().unwrap());
    let trace_file = |bundle: &Path, value: &serde_json::Value| bundle.join(value["processes"][0]["threads"][0]["iptTrace"].as_str().unwrap());
    let link_to_canary = |path: &Path| {
        std::fs::remove_file(path).unwrap();
        std::os::unix::fs::symlink(&canary, path).unwrap();
    };

    make("absolute-module", Some("is an absolute path"), true, &|_, v| v["processes"][0]["modules"][0]["file"] = canary_text.clone().into());
    make("dotdot-module", Some("climbs out of the bundle"), true, &|_, v| v["processes"][0]["modules"][0]["file"] = "../outside/canary".into());
    make("module-link-out", Some("is a symbolic link out of the bundle"), true, &|b, v| link_to_canary(&program_copy(b, v)));
    make("trace-link-out", Some("is a symbolic link out of the bundle"), true, &|b, v| link_to_canary(&trace_file(b, v)));
    make("modules-folder-link-out", Some("is a symbolic link out of the bundle"), true, &|b, _| {
        std::fs::rename(b.join("modules"), b.join("modules-real")).unwrap();
        std::os::unix::fs::symlink(canary.parent().unwrap(), b.join("modules")).unwrap();
    });
    make("module-without-copy", Some("has no copy in the bundle"), true, &|_, v| {
        let module = &mut v["processes"][0]["modules"][0];
        module.as_object_mut().unwrap().remove("file");
        module["systemPath"] = canary_text.clone().into();
    });
    make("modules-folder-a-link-out-unused", None, true, &|b, v| {
        // The copies moved to mods/, modules/ a link out that no name of
        // the bundle goes through (GDB must not be pointed at it).
        std::fs::rename(b.join("modules"), b.join("mods")).unwrap();
        std::os::unix::fs::symlink(canary.parent().unwrap(), b.join("modules")).unwrap();
        for module in v["processes"][0]["modules"].as_array_mut().unwrap() {
            let file = module["file"].as_str().unwrap().replacen("modules/", "mods/", 1);
            module["file"] = file.into();
        }
    });
    make("exec-image-outside", Some("climbs out of the bundle"), true, &|_, v| v["retrace"]["execImages"] = serde_json::json!(["../outside/trace.json"]));
    make("stream-absolute", Some("is an absolute path"), false, &|_, v| v["retrace"]["fullState"] = canary_text.clone().into());
    make("stream-and-trace-cut-short", None, true, &|b, v| {
        let (stream, trace) = (b.join("state.rtstate"), trace_file(b, v));
        for (path, keep) in [(stream, 2), (trace, 3)] {
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() * keep / 5]).unwrap();
        }
    });
    make("counts-of-2-to-the-40", None, true, &|b, _| {
        let stream = b.join("state.rtstate");
        std::fs::write(&stream, huge_stream(&std::fs::read(&stream).unwrap())).unwrap();
    });
    make("ids-and-addresses-out-of-range", None, true, &|_, v| {
        v["processes"][0]["pid"] = (1u64 << 40).into();
        v["processes"][0]["threads"][0]["tid"] = (1u64 << 40).into();
        v["processes"][0]["modules"][1]["loadAddress"] = "0xfffffffffffff000".into();
    });
    make("duplicate-thread-ids", Some("is listed twice"), true, &|_, v| {
        let thread = v["processes"][0]["threads"][0].clone();
        v["processes"][0]["threads"].as_array_mut().unwrap().extend([thread.clone(), thread]);
    });
    make("one-trace-for-10000-threads", Some("is listed twice"), true, &|_, v| {
        let thread = v["processes"][0]["threads"][0].clone();
        let threads = (1..=10_000u64).map(|tid| serde_json::json!({"tid": tid, "iptTrace": thread["iptTrace"]})).collect();
        v["processes"][0]["threads"] = serde_json::Value::Array(threads);
    });
    make("one-module-10000-times", Some("retrace reads at most 4096"), true, &|_, v| {
        let module = v["processes"][0]["modules"][1].clone();
        v["processes"][0]["modules"].as_array_mut().unwrap().extend(std::iter::repeat_n(module, 10_000));
    });
    make("one-module-twice-at-one-address", Some("is listed twice"), true, &|_, v| {
        let module = v["processes"][0]["modules"][1].clone();
        v["processes"][0]["modules"].as_array_mut().unwrap().push(module);
    });
    make("10000-processes", Some("retrace reads at most 64"), true, &|_, v| {
        let process = v["processes"][0].clone();
        v["processes"] = serde_json::Value::Array(std::iter::repeat_n(process, 10_000).collect());
    });
    make("stream-of-another-program", Some("is another recording's"), false, &|b, _| {
        std::fs::copy(other.join("state.rtstate"), b.join("state.rtstate")).unwrap();
    });
    made
}

/// Whether a refusal for `words` is of a name outside the bundle (it then
/// also says how to allow it).
fn names_outside(words: &str) -> bool {
    ["absolute path", "climbs out", "symbolic link out", "has no copy"].iter().any(|reason| words.contains(reason))
}

/// Records `program` with every register and byte into `bundle`.
fn record(program: &Path, bundle: &Path) {
    let out = common::retrace().args(["record", "--mode", "full", "-o"]).arg(bundle).arg("--").arg(program).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// What a command did: whether it succeeded, what it said, its peak RSS.
struct Ran {
    ok: bool,
    said: String,
    peak_kib: i64,
}

/// A Python parent that runs its arguments after the first, and writes
/// their peak resident memory (KiB) to the file the first names. (A child
/// spawned by this test would count the test's own memory at the spawn,
/// which Linux carries into the child's peak across `exec`.)
const MEASURE: &str = "import resource, subprocess, sys\n\
    ran = subprocess.run(sys.argv[2:])\n\
    open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n\
    sys.exit(ran.returncode)\n";

/// `command` under [`MEASURE`], writing its peak to `peak`.
fn measured(command: &Command, peak: &Path) -> Command {
    let mut measured = Command::new("python3");
    measured.arg("-c").arg(MEASURE).arg(peak).arg(command.get_program()).args(command.get_args());
    measured.envs(command.get_envs().filter_map(|(k, v)| Some((k, v?)))).env_remove("PYTHONPATH");
    measured
}

fn peak_in(peak: &Path) -> i64 {
    std::fs::read_to_string(peak).ok().and_then(|text| text.trim().parse().ok()).expect("the peak was written")
}

/// Runs `command` to its end (stdin closed, output to the file `out`): its
/// outcome, what it said, its peak memory.
fn run_measured(command: Command, out: &Path) -> Ran {
    let peak = out.with_extension("peak");
    let file = std::fs::File::create(out).unwrap();
    let status = measured(&command, &peak).stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file).status().unwrap();
    Ran { ok: status.success(), said: std::fs::read_to_string(out).unwrap_or_default(), peak_kib: peak_in(&peak) }
}

/// `strace -f` of `command`: what it did and the system calls it made on
/// files.
fn traced(command: &Command, log: &Path, out: &Path) -> (Ran, String) {
    let mut strace = Command::new("strace");
    strace
        // (-y: each descriptor a call returns with the path it resolved
        // to, links and `..` followed.)
        .args(["-f", "-qq", "-y", "-s", "512", "-e", "trace=%file", "-o"])
        .arg(log)
        .arg(command.get_program())
        .args(command.get_args())
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))));
    let ran = run_measured(strace, out);
    (ran, std::fs::read_to_string(log).unwrap())
}

/// `path` (absolute, or relative to `cwd`) with `.` and `..` taken away.
fn lexical(cwd: &Path, path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for component in cwd.join(path).components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The file system calls in `log` that reach outside `bundle`: any that
/// opens or runs a file of `outside`, by the path it names or the one the
/// kernel resolved it to (strace -y; resolving a link to see where it
/// leads names its target, by readlink and stat, never an open), and any
/// that writes, creates, renames or removes a file elsewhere than in
/// `bundle` (or `/dev`, `/proc`), `..` taken away.
fn reaching_out(log: &str, bundle: &Path, outside: &Path) -> Vec<String> {
    const OPENS: [&str; 6] = ["open", "openat", "openat2", "execve", "execveat", "creat"];
    const CHANGES: [&str; 22] = [
        "creat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "symlink", "symlinkat", "link", "linkat", "truncate",
        "chmod", "fchmodat", "chown", "fchownat", "lchown", "utimensat", "mknod", "mknodat",
    ];
    let cwd = std::env::current_dir().unwrap();
    let bundle = bundle.canonicalize().unwrap();
    let outside = outside.canonicalize().unwrap();
    let mut found = Vec::new();
    for line in log.lines() {
        // "PID name(args) = result", with -y "= 3</resolved/path>"
        let call = line.split_once(' ').map_or(line, |(_, rest)| rest.trim_start());
        let name = call.split('(').next().unwrap_or("");
        let named = lexical(&cwd, line.split('"').nth(1).unwrap_or(""));
        let resolved = line.rsplit_once(" = ").and_then(|(_, result)| Some(PathBuf::from(result.split_once('<')?.1.strip_suffix('>')?)));
        let paths: Vec<&Path> = [Some(named.as_path()), resolved.as_deref()].into_iter().flatten().collect();
        if OPENS.contains(&name) && paths.iter().any(|p| p.starts_with(&outside)) {
            found.push(line.to_string());
            continue;
        }
        let writes = CHANGES.contains(&name) || (OPENS.contains(&name) && ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"].iter().any(|flag| line.contains(flag)));
        if writes && !line.contains(" = -1 ") {
            let elsewhere = |path: &&Path| !path.starts_with(&bundle) && !path.starts_with("/dev") && !path.starts_with("/proc");
            if paths.iter().any(|p| elsewhere(p)) {
                found.push(line.to_string());
            }
        }
    }
    found
}

/// Serves `bundle` with the stub alone, GDB connected (where the program
/// stands, a reverse-continue to its start, where it is then): its
/// outcome and the stub's peak RSS.
fn stub_with_gdb(stub: &Path, bundle: &Path, out: &Path) -> Ran {
    let log = std::fs::File::create(out).unwrap();
    let peak = out.with_extension("peak");
    let mut command = Command::new(stub);
    command.args(["--listen", "127.0.0.1:0", "--replay"]).arg(bundle.join("trace.json"));
    let mut server = measured(&command, &peak).process_group(0).stdin(Stdio::null()).stdout(log).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = server.stderr.take().unwrap();
    let mut said = Vec::new();
    let mut byte = [0u8];
    // Its first line: listening, or why not.
    while stderr.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        said.push(byte[0]);
    }
    let first = String::from_utf8_lossy(&said).into_owned();
    let Some((_, address)) = first.rsplit_once("listening on ") else {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        let _ = server.wait();
        return Ran { ok: false, said: first + "\n" + &rest, peak_kib: peak_in(&peak) };
    };
    let gdb = Command::new("timeout")
        .args(["120", "gdb", "-nx", "-batch", "-ex", &format!("target remote {}", address.trim()), "-ex", "info registers rip", "-ex", "reverse-continue", "-ex", "info registers rip", "-ex", "kill"])
        .output()
        .unwrap();
    // The stub ends with the session GDB's kill ends; if not, it is ended.
    let started = std::time::Instant::now();
    while server.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            // SAFETY: signals the process group this test made.
            unsafe { libc::kill(-(server.id() as i32), libc::SIGTERM) };
            let _ = server.wait();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    // (Ended by the signal, it wrote no peak: that is a failure, not 0.)
    let peak_kib = std::fs::read_to_string(&peak).ok().and_then(|text| text.trim().parse().ok()).unwrap_or(i64::MAX);
    Ran { ok: true, said: format!("{first}\n{rest}\n{}{}", String::from_utf8_lossy(&gdb.stdout), String::from_utf8_lossy(&gdb.stderr)), peak_kib }
}

#[test]
fn hostile_bundles_are_refused_or_served_in_bounds_and_nothing_outside_is_touched() {
    if !common::debuggers_and_valgrind_present() || !retrace_tests::tools::require("strace", retrace_tests::tools::which("strace").is_some()) {
        return;
    }
    let dir = common::work_dir("hostile-bundles", "suite");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("canary"), b"\x7fELF canary: a file outside every bundle\n").unwrap();
    let good = dir.join("good");
    let other = dir.join("other");
    record(&common::build("full_state", &dir, &["-O0"]), &good);
    record(&common::build("four_hits", &dir, &["-O0"]), &other);
    std::fs::copy(good.join("trace.json"), outside.join("trace.json")).unwrap();
    let stub = common::build_stub();
    let mut failures = Vec::new();
    let bundles = hostile_bundles(&dir, &good, &other, &outside);
    for hostile in &bundles {
        let name = hostile.name;
        let logs = dir.join(format!("{name}.logs"));
        std::fs::create_dir_all(&logs).unwrap();
        let mut dump = common::retrace();
        dump.args(["dump", "info"]).arg(&hostile.bundle);
        let mut replay = common::retrace();
        replay.arg("replay").arg("--stub").arg(&stub).arg("--gdb").arg(&hostile.bundle).args(["--", "-nx", "-batch", "-ex", "info registers rip", "-ex", "reverse-continue", "-ex", "kill"]);
        let (dump_traced, dump_calls) = traced(&dump, &logs.join("dump.strace"), &logs.join("dump.out"));
        let (replay_traced, replay_calls) = traced(&replay, &logs.join("replay.strace"), &logs.join("replay.out"));
        let dump_bare = run_measured(dump, &logs.join("dump-bare.out"));
        let served = stub_with_gdb(&stub, &hostile.bundle, &logs.join("stub.out"));
        for (tool, calls) in [("retrace dump", &dump_calls), ("retrace replay", &replay_calls)] {
            let out = reaching_out(calls, &hostile.bundle, &outside);
            if !out.is_empty() {
                failures.push(format!("{name}: {tool} reached outside the bundle:\n  {}", out.join("\n  ")));
            }
        }
        for (tool, ran) in [("retrace dump", &dump_bare), ("retrace-stub --replay", &served)] {
            if ran.peak_kib > MEMORY_LIMIT_KIB {
                failures.push(format!("{name}: {tool} peaked at {} MiB", ran.peak_kib / 1024));
            }
        }
        if dump_traced.ok != dump_bare.ok {
            failures.push(format!("{name}: retrace dump under strace and alone differ"));
        }
        // The refusals: the stub and `retrace replay` always refuse what
        // must be refused; `retrace dump` when it reads that part.
        if let Some(words) = hostile.refused_with {
            let mut must_refuse = vec![("retrace-stub --replay", &served), ("retrace replay", &replay_traced)];
            if hostile.dump_reads_it {
                must_refuse.push(("retrace dump", &dump_traced));
            }
            for (tool, ran) in must_refuse {
                if ran.ok {
                    failures.push(format!("{name}: {tool} did not refuse it:\n{}", ran.said));
                } else if !ran.said.contains(words) || (names_outside(words) && !ran.said.contains("--allow-outside-bundle")) {
                    failures.push(format!("{name}: {tool}'s refusal does not say {words:?} and how to allow it:\n{}", ran.said));
                }
            }
        }
        // Whatever is refused says why (no panic, no bare failure).
        for (tool, ran) in [("retrace dump", &dump_traced), ("retrace-stub --replay", &served), ("retrace replay", &replay_traced)] {
            if ran.said.contains("panicked") || (!ran.ok && ran.said.trim().is_empty()) {
                failures.push(format!("{name}: {tool} failed without a reason:\n{}", ran.said));
            }
        }
        eprintln!(
            "{name}: dump {} ({} MiB), stub {} ({} MiB), replay {}",
            if dump_traced.ok { "served" } else { "refused" },
            dump_bare.peak_kib / 1024,
            if served.ok { "served" } else { "refused" },
            served.peak_kib / 1024,
            if replay_traced.ok { "ran" } else { "refused" },
        );
    }
    // The checks can fail: told to trust a bundle, retrace dump reads the
    // canary (strace sees it), and the good bundle is served by all.
    // (By an absolute path, by `..`, and through a link: what strace shows
    // of each is told apart.)
    for name in ["absolute-module", "dotdot-module", "module-link-out"] {
        let trusting = dir.join(format!("{name}.logs"));
        let mut dump = common::retrace();
        dump.args(["dump", "info", "--allow-outside-bundle"]).arg(dir.join(name));
        let (_, calls) = traced(&dump, &trusting.join("trusting.strace"), &trusting.join("trusting.out"));
        let seen = reaching_out(&calls, &dir.join(name), &outside);
        assert!(seen.iter().any(|call| call.contains("openat(") && call.contains("canary")), "{name}: strace shows no read of the canary:\n{calls}");
    }
    let mut dump = common::retrace();
    dump.args(["dump", "info"]).arg(&good);
    assert!(run_measured(dump, &dir.join("good-dump.out")).ok);
    let served = stub_with_gdb(&stub, &good, &dir.join("good-stub.out"));
    assert!(served.ok && served.said.contains("rip"), "{}", served.said);
    assert!(failures.is_empty(), "{} of {} hostile bundles:\n{}", failures.len(), bundles.len(), failures.join("\n"));
}
