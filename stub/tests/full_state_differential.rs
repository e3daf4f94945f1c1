//! The guard of full-state replays: on real code (glibc's string functions
//! at every size, every string instruction, AVX2 vectors, lz4 from its
//! PyPI sources compressing a buffer, python3), the
//! state `retrace-stub --replay` serves must be what Valgrind's own
//! gdbserver reads on the same run at the same instruction.
//!
//! 1. A selection run (retrace's tool, logging) counts how often each
//!    instruction runs and picks breakpoint addresses: the instruction
//!    after every REP and after every system call, each signal handler's
//!    first, and others at random, until about 2,400 stops are due.
//! 2. The recording: `retrace record --mode full` with Valgrind's gdbserver
//!    on (`VALGRIND_OPTS`); GDB, attached through vgdb, continues from
//!    breakpoint to breakpoint and prints at each stop every general
//!    register, rflags, xmm and ymm, 64 bytes at rsp, and the bytes of the
//!    program's last write (the tool's `monitor retrace last-write`).
//! 3. The replay: GDB on `retrace-stub --replay` of that bundle, from the
//!    start, with the same breakpoints, prints the same at each stop (the
//!    last write read where Valgrind said it was).
//!
//! Both lists of stops must be equal, stop for stop, field for field; a
//! failure names the first stop that differs, its address, function and
//! instruction.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use retrace_collector::pt_writer::DEFAULT_PSB_PERIOD;
use retrace_collector::valgrind::{log_records, tool_folder, LogConverter, LogRecord, VALGRIND_OPTIONS};
use retrace_tests::recordings::build;
use retrace_tests::rng::Rng;
use retrace_tests::tools::{require, which};

fn tools_present() -> bool {
    require("gcc", which("gcc").is_some())
        && require("gdb (Debian package gdb)", which("gdb").is_some())
        && require("valgrind (Debian package valgrind)", which("valgrind").is_some() && which("vgdb").is_some())
        && require("retrace built with Valgrind's headers", retrace_collector::valgrind::availability().is_ok())
}

/// How many stops each program is compared at (at least).
const STOPS: u64 = 2_000;

/// GDB's Python for both sides: `stops` continues from breakpoint to
/// breakpoint until the program ends or a stop is at none of them,
/// printing a `STOP` line at each.
const GDB_SCRIPT: &str = r#"
import gdb
GENERAL = ['rip','rax','rbx','rcx','rdx','rsi','rdi','rbp','rsp','r8','r9','r10','r11','r12','r13','r14','r15','eflags']
MASK = (1 << 64) - 1

def vector(frame, name):
    try:
        v = frame.read_register(name)
    except Exception:
        return '-'
    n = v.type.sizeof
    a = v.cast(gdb.lookup_type('unsigned char').array(n - 1))
    return bytes(int(a[i]) for i in range(n))[::-1].hex()

def memory(address, size):
    if size == 0:
        return '.'
    try:
        return gdb.selected_inferior().read_memory(address, size).tobytes().hex()
    except Exception:
        return 'unreadable'

def stops(arg):
    limit = int(arg.split()[0])
    writes = WRITES if 'WRITES' in globals() else None
    points = set(int(b.location.lstrip('*'), 16) for b in gdb.breakpoints())
    for n in range(limit):
        gdb.execute('continue', to_string=True)
        if gdb.selected_inferior().pid == 0 or not gdb.selected_thread():
            print('END exited')
            return
        frame = gdb.selected_frame()
        pc = int(frame.pc())
        if pc not in points:
            print('END at %x' % pc)
            return
        general = ['%x' % (int(frame.read_register(r)) & MASK) for r in GENERAL]
        xmm = [vector(frame, 'xmm%d' % k) for k in range(16)]
        ymm = [vector(frame, 'ymm%d' % k) for k in range(16)]
        rsp = int(frame.read_register('rsp')) & MASK
        if writes is None:
            said = gdb.execute('monitor retrace last-write', to_string=True).split()
            address, size = int(said[1], 16), min(int(said[2], 16), 256)
        else:
            address, size = writes[n] if n < len(writes) else (0, 0)
        print('STOP %d %s | %s | %s | %s | %x %x %s | %s' % (n, ' '.join(general), ' '.join(xmm), ' '.join(ymm), memory(rsp, 64), address, size, memory(address, size), frame.name()))

class Stops(gdb.Command):
    def __init__(self):
        super().__init__('stops', gdb.COMMAND_USER)
    def invoke(self, arg, tty):
        stops(arg)
Stops()
"#;

/// GDB's types of the vector registers, printed before the stops: the
/// replay's must be gdbserver's unions (`$xmm0.v4_int32`, `$ymm0.v8_float`).
const VECTOR_TYPES: [&str; 2] = ["ptype $xmm0", "ptype $ymm15"];

/// What `ptype` printed of the vector registers.
fn vector_types(out: &str) -> String {
    let start = out.find("type = union vec128").unwrap_or(out.len());
    out[start..].lines().take_while(|l| !l.starts_with("STOP") && !l.starts_with("END") && !l.starts_with("Breakpoint") && !l.starts_with("Program")).collect::<Vec<_>>().join("\n")
}

/// One stop as GDB printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stop {
    /// rip, the general registers, eflags.
    general: Vec<String>,
    xmm: Vec<String>,
    ymm: Vec<String>,
    stack: String,
    /// Address, size and bytes of the program's last write.
    last_write: String,
    /// GDB's name of the function (not compared: symbols differ).
    function: String,
}

impl Stop {
    fn pc(&self) -> u64 {
        u64::from_str_radix(&self.general[0], 16).unwrap()
    }

    fn last_write_range(&self) -> (u64, u64) {
        let mut fields = self.last_write.split(' ');
        let address = u64::from_str_radix(fields.next().unwrap(), 16).unwrap();
        let size = u64::from_str_radix(fields.next().unwrap(), 16).unwrap();
        (address, size)
    }

    /// The first field that differs: its name, ours and the truth's.
    fn difference(&self, truth: &Stop) -> Option<(String, String, String)> {
        const GENERAL: [&str; 18] = ["rip", "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "eflags"];
        let named = GENERAL
            .iter()
            .map(|n| n.to_string())
            .zip(self.general.iter().zip(&truth.general))
            .chain((0..16).map(|k| format!("xmm{k}")).zip(self.xmm.iter().zip(&truth.xmm)))
            .chain((0..16).map(|k| format!("ymm{k}")).zip(self.ymm.iter().zip(&truth.ymm)))
            .chain([("64 bytes at rsp".to_string(), (&self.stack, &truth.stack)), ("the last write".to_string(), (&self.last_write, &truth.last_write))]);
        let differs = |name: &str, a: &str, b: &str| if name == "eflags" { flags(a) != flags(b) } else { a != b };
        named.into_iter().find(|(name, (a, b))| differs(name, a, b)).map(|(name, (a, b))| (name, a.clone(), b.clone()))
    }
}

/// eflags without the bits a processor always shows set in user mode (the
/// reserved bit 1 and IF): Valgrind's gdbserver leaves them out, the
/// replay shows them as the program would natively.
fn flags(hex: &str) -> u64 {
    u64::from_str_radix(hex, 16).unwrap_or(u64::MAX) & !0x202
}

fn parse_stops(out: &str) -> Vec<Stop> {
    out.lines()
        .filter_map(|line| line.strip_prefix("STOP "))
        .map(|line| {
            let parts: Vec<&str> = line.split(" | ").collect();
            assert_eq!(parts.len(), 6, "a STOP line: {line}");
            let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
            let general = words(parts[0]).split_off(1);
            Stop { general, xmm: words(parts[1]), ymm: words(parts[2]), stack: parts[3].to_string(), last_write: parts[4].to_string(), function: parts[5].to_string() }
        })
        .collect()
}

/// An empty directory for test `name`.
fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("full-state-differential").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the selection run found: each instruction's bytes, how often it
/// ran, and the signal handlers entered.
struct Selection {
    bytes: HashMap<u64, Vec<u8>>,
    counts: HashMap<u64, u64>,
    handlers: BTreeSet<u64>,
}

/// Runs `program args` under retrace's tool (logging to a file) and
/// counts what ran.
fn selection_run(dir: &Path, program: &Path, args: &[&str]) -> Selection {
    let folder = tool_folder().expect("the tool");
    let log = dir.join("selection");
    let out = Command::new("valgrind")
        .env("VALGRIND_LIB", &folder)
        .args(VALGRIND_OPTIONS)
        .args(["--tool=retrace", &format!("--retrace-out={}", log.display())])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run valgrind");
    assert!(out.status.success(), "the selection run: {}", String::from_utf8_lossy(&out.stderr));
    let logs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("selection.")).collect();
    assert_eq!(logs.len(), 1, "one log: {logs:?}");
    let log = std::fs::read(&logs[0]).unwrap();
    let mut converter = LogConverter::new(DEFAULT_PSB_PERIOD, true);
    let mut bytes = HashMap::new();
    let mut entries = HashMap::new();
    let mut handlers = BTreeSet::new();
    let mut delivered = false;
    for record in log_records(&log) {
        let record = record.expect("an intact log");
        match &record {
            LogRecord::Superblock { id, entry, instructions, .. } => {
                entries.insert(*id, *entry);
                for (ip, b) in instructions.iter() {
                    bytes.insert(*ip, b.to_vec());
                }
            }
            LogRecord::Signal { .. } => delivered = true,
            // (After a delivery the tool names the superblock entered.)
            LogRecord::Entered { id, .. } if delivered => {
                handlers.insert(entries[id]);
                delivered = false;
            }
            _ => {}
        }
        converter.feed(record).expect("a log that converts");
    }
    let (image, _) = converter.finish();
    let mut counts = HashMap::new();
    for thread in &image.threads {
        for ip in thread.instruction_log.as_deref().unwrap_or_default() {
            *counts.entry(*ip).or_insert(0) += 1;
        }
    }
    Selection { bytes, counts, handlers }
}

/// The breakpoint addresses: after every REP and system call, each
/// handler, then others at random (never a REP itself: Valgrind stops at
/// each of its iterations), until about `STOPS` + 10 % stops are due (a run under
/// Valgrind's gdbserver differs a little).
///
/// Never two a byte apart: Valgrind's gdbserver does not say `swbreak`, so
/// GDB takes a stop at `X + 1` with a breakpoint at `X` for an `int3` at `X`
/// and moves the program's pc back to `X` (a jump to the instruction after a
/// one-byte `ret` ran the `ret`: lz4's run returned from ld.so's memcpy
/// before it copied, and the truth was wrong from there).
fn breakpoints(selection: &Selection) -> Vec<u64> {
    let decode = |ip: u64| {
        let bytes = selection.bytes.get(&ip)?;
        Some(iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).decode())
    };
    let is_rep = |ip: u64| decode(ip).is_some_and(|i| (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction());
    let ran = |ip: u64| selection.counts.get(&ip).copied().unwrap_or(0);
    let mut chosen = BTreeSet::new();
    let mut due = 0;
    // The stops `ip` adds (when it ran at most `most` times).
    let take = |ip: u64, most: u64, chosen: &mut BTreeSet<u64>| {
        let n = ran(ip);
        let beside = chosen.contains(&ip.wrapping_sub(1)) || chosen.contains(&ip.wrapping_add(1));
        if n > 0 && n <= most && !is_rep(ip) && !beside && chosen.insert(ip) {
            n
        } else {
            0
        }
    };
    let mut addresses: Vec<u64> = selection.counts.keys().copied().collect();
    addresses.sort_unstable();
    for &ip in &addresses {
        let Some(insn) = decode(ip) else { continue };
        let next = insn.next_ip();
        if is_rep(ip) || insn.mnemonic() == iced_x86::Mnemonic::Syscall {
            due += take(next, 200, &mut chosen);
        }
    }
    for &handler in &selection.handlers {
        due += take(handler, 200, &mut chosen);
    }
    let special = chosen.len();
    let mut rng = Rng::new(0x5eed_0f_d1ff);
    let mut tries = 0;
    while due < STOPS * 11 / 10 && tries < 1_000_000 {
        tries += 1;
        let ip = addresses[rng.below(addresses.len() as u64) as usize];
        due += take(ip, 40, &mut chosen);
    }
    assert!(special > 0, "no REP, system call or handler among the instructions run");
    chosen.into_iter().collect()
}

/// GDB's commands for the breakpoints, the signals let through, and the
/// stops.
fn commands(script: &Path, points: &[u64]) -> Vec<String> {
    let mut commands = vec![format!("source {}", script.display()), "set pagination off".into(), "set breakpoint pending on".into(),
        // (Else GDB takes every breakpoint out and puts it back at each stop.)
        "set breakpoint always-inserted on".into(), "handle SIGSEGV SIGALRM SIGUSR1 SIGCHLD nostop noprint pass".into()];
    commands.extend(points.iter().map(|p| format!("break *{p:#x}")));
    commands
}

fn run_gdb(program: &Path, commands: &[String]) -> String {
    let mut gdb = Command::new("timeout");
    gdb.args(["600", "gdb", "-nx", "-batch"]);
    for command in commands {
        gdb.arg("-ex").arg(command);
    }
    let out = gdb.arg(program).stdin(Stdio::null()).output().expect("run gdb");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Records `program args` with full state while GDB, through Valgrind's
/// gdbserver, prints the stops; the stops and the bundle's trace.json.
fn recorded_with_truth(dir: &Path, program: &Path, args: &[&str], points: &[u64], script: &Path) -> (Vec<Stop>, PathBuf, String) {
    let prefix = dir.join("vgdb");
    let bundle = dir.join("bundle");
    let mut retrace = common::retrace();
    retrace
        .env("VALGRIND_OPTS", format!("--vgdb=yes --vgdb-error=0 --vgdb-prefix={}", prefix.display()))
        .args(["record", "--backend", "valgrind", "--mode", "full", "-o"])
        .arg(&bundle)
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let recording = retrace.spawn().expect("run retrace record");
    // vgdb finds the process by its FIFOs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_dir(dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().starts_with("vgdb-from-vgdb-to-")) {
        assert!(std::time::Instant::now() < deadline, "Valgrind's gdbserver did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut all = vec![format!("target remote | vgdb --vgdb-prefix={}", prefix.display())];
    all.extend(commands(script, points));
    all.extend(VECTOR_TYPES.iter().map(|c| c.to_string()));
    all.push(format!("stops {}", STOPS * 3));
    all.push("continue".into());
    let out = run_gdb(program, &all);
    let recorded = recording.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&recorded.stderr).into_owned();
    assert!(recorded.status.success(), "retrace record: {said}\nGDB:\n{out}");
    (parse_stops(&out), bundle.join("trace.json"), out)
}

/// The stops GDB prints on the replay of `trace_json`, reading each last
/// write where the truth said it was.
fn replayed(dir: &Path, program: &Path, trace_json: &Path, points: &[u64], script: &Path, truth: &[Stop]) -> (Vec<Stop>, String) {
    let writes = dir.join("writes.py");
    let list: Vec<String> = truth.iter().map(|s| s.last_write_range()).map(|(a, n)| format!("({a:#x}, {n:#x})")).collect();
    std::fs::write(&writes, format!("WRITES = [{}]\n", list.join(", "))).unwrap();
    let (stub, line) = common::start_stub_command(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--replay".as_ref(), trace_json.as_os_str()]);
    let port = common::port_of(&line);
    let mut all = vec![format!("target remote 127.0.0.1:{port}"), format!("source {}", writes.display()), "monitor goto begin".into(), "continue".into()];
    // GDB took the libraries of the end for loaded: from the start it
    // learns them as they load, as it does through Valgrind's gdbserver
    // (else it takes the breakpoints in them for gone at the first
    // library event, and stops differently).
    all.push("nosharedlibrary".into());
    all.extend(commands(script, points));
    all.extend(VECTOR_TYPES.iter().map(|c| c.to_string()));
    all.push(format!("stops {}", STOPS * 3));
    let out = run_gdb(program, &all);
    common::end_stub(stub);
    (parse_stops(&out), out)
}

/// The whole comparison for `program args`.
fn differential(name: &str, program: &Path, args: &[&str]) {
    let dir = work_dir(name);
    let script = dir.join("stops.py");
    std::fs::write(&script, GDB_SCRIPT).unwrap();
    let started = std::time::Instant::now();
    let selection = selection_run(&dir, program, args);
    let points = breakpoints(&selection);
    eprintln!("{name}: selection run and {} breakpoints in {:.1?}", points.len(), started.elapsed());
    // (For a person reproducing a failure by hand.)
    std::fs::write(dir.join("breakpoints.gdb"), commands(&script, &points).join("\n") + "\n").unwrap();
    let started = std::time::Instant::now();
    let (truth, trace_json, truth_out) = recorded_with_truth(&dir, program, args, &points, &script);
    eprintln!("{name}: recording with Valgrind's gdbserver stopping {} times in {:.1?}", truth.len(), started.elapsed());
    let tail = |text: &str| text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(truth.len() as u64 >= STOPS, "{name}: Valgrind's gdbserver stopped {} times at {} breakpoints (at least {STOPS} wanted):\n{}", truth.len(), points.len(), tail(&truth_out));
    let started = std::time::Instant::now();
    let (ours, ours_out) = replayed(&dir, program, &trace_json, &points, &script, &truth);
    eprintln!("{name}: replay stopping {} times in {:.1?}", ours.len(), started.elapsed());
    // (What each GDB printed, for a person comparing by hand.)
    std::fs::write(dir.join("valgrind-gdbserver.txt"), &truth_out).unwrap();
    std::fs::write(dir.join("replay.txt"), &ours_out).unwrap();
    let instruction = |pc: u64| selection.bytes.get(&pc).map(|b| iced_x86::Decoder::with_ip(64, b, pc, iced_x86::DecoderOptions::NONE).decode()).map(|i| format!("{:?}, bytes {}", i.mnemonic(), selection.bytes[&pc].iter().map(|b| format!("{b:02x}")).collect::<String>())).unwrap_or_default();
    for (i, (mine, theirs)) in ours.iter().zip(&truth).enumerate() {
        if let Some((field, a, b)) = mine.difference(theirs) {
            panic!(
                "{name}: stop {i} of {}, at {:#x} in {} (`{}`): {field} is\n  {a}\non the replay, and\n  {b}\nthrough Valgrind's gdbserver",
                truth.len(),
                theirs.pc(),
                theirs.function,
                instruction(theirs.pc())
            );
        }
    }
    let types = vector_types(&truth_out);
    assert!(types.contains("v4_int32") && types.contains("v8_float"), "{name}: Valgrind's vector types:\n{types}");
    // (Valgrind's gdbserver predates GDB 13's bfloat16 and half fields.)
    let our_types = vector_types(&ours_out);
    for field in types.lines() {
        assert!(our_types.lines().any(|l| l == field), "{name}: the replay's vector register types lack `{field}`:\n{our_types}");
    }
    assert_eq!(ours.len(), truth.len(), "{name}: the replay stopped {} times, Valgrind {} times; the replay's end:\n{}", ours.len(), truth.len(), tail(&ours_out));
    eprintln!("{name}: {} stops at {} breakpoints equal", truth.len(), points.len());
}

#[test]
fn string_instructions_and_glibcs_string_functions_replay_as_valgrind_ran_them() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("string_ops-build");
    let program = build("string_ops", &dir, &["-O0"]);
    differential("string_ops", &program, &[]);
}

#[test]
fn avx2_vectors_replay_as_valgrind_ran_them() {
    if !tools_present() {
        return;
    }
    let dir = work_dir("avx2_vectors-build");
    let program = build("avx2_vectors", &dir, &["-O2", "-mavx2", "-mfma"]);
    differential("avx2_vectors", &program, &[]);
}

#[test]
fn lz4_from_its_pypi_sources_compressing_a_buffer_replays_as_valgrind_ran_it() {
    // lz4 4.4.5's sdist, as tests/run.sh downloads it.
    let sdist = std::env::var_os("RETRACE_LZ4_SDIST").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/lz4-4.4.5.tar.gz"));
    if !tools_present() || !require("lz4 4.4.5's sources (RETRACE_LZ4_SDIST; tests/run.sh downloads them)", sdist.exists()) {
        return;
    }
    let dir = work_dir("lz4-build");
    assert!(Command::new("tar").arg("xzf").arg(&sdist).arg("-C").arg(&dir).status().unwrap().success());
    let library = dir.join("lz4-4.4.5").join("lz4libs");
    let (include, fast, high) = (format!("-I{}", library.display()), library.join("lz4.c"), library.join("lz4hc.c"));
    let program = build("lz4_compress", &dir, &["-O2", &include, fast.to_str().unwrap(), high.to_str().unwrap()]);
    differential("lz4", &program, &[]);
}

#[test]
fn python3_running_a_script_replays_as_valgrind_ran_it() {
    // Debian's python3 itself (a python3 earlier on PATH may be a shell
    // script choosing one).
    let debian_python = Path::new("/usr/bin/python3");
    if !tools_present() || !require("python3 (Debian package python3)", debian_python.exists()) {
        return;
    }
    let python = std::fs::canonicalize(debian_python).unwrap();
    let script = "import json, re\nwords = re.findall(r'[a-z]+', 'the quick brown fox jumps over the lazy dog ' * 40)\ncounts = {}\nfor w in words:\n    counts[w] = counts.get(w, 0) + 1\nprint(json.dumps(sorted(counts.items())))\n";
    differential("python3", &python, &["-S", "-c", script]);
}
