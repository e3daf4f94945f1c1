//! Real-world scale: recordings of real programs, decoded and dumped whole.
//! `cargo bench -p retrace-plugin --bench scale`
//!
//! Records (branch mode, once; kept in `RETRACE_SCALE_DIR`, default
//! `target/tmp/bench-scale`) python3's startup, `ls -la` of a large
//! directory and `file /usr/bin/ls`, then per recording:
//! - the decoder core (one core, and all cores) against libipt 2.0.5's block
//!   and instruction decoders set up as its users set them up (file-backed
//!   sections through one image section cache, the CPU's errata), all
//!   counting the same instructions;
//! - whole processes, each run as a child with its output to /dev/null,
//!   wall time and peak RSS from its rusage: `retrace dump instructions -c
//!   10`, `dump info`, `dump function-calls`, `export perfetto` against
//!   `lldb-22 -b` doing the same (`thread trace export ctf` for the
//!   timeline). A run that passes `RETRACE_SCALE_LIMIT_S` seconds (default
//!   300) or `RETRACE_SCALE_LIMIT_GIB` GiB of RSS (default 16) is stopped
//!   and reported as such.
//! Then it checks the scale targets (`docs/benchmarks.md`) on the python3
//! recording.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use retrace_decoder::bundle::load::load;
use retrace_decoder::flow::{decode_parallel, FlowDecoder};
use retrace_tests::bench::best_of_three;

const RETRACE: &str = env!("CARGO_BIN_EXE_retrace");

struct Program {
    name: &'static str,
    dir: &'static str,
    command: &'static [&'static str],
}

const PROGRAMS: [Program; 3] = [
    Program { name: "python3 startup", dir: "python3", command: &["/usr/bin/python3", "-c", "import json; print(json.dumps({'a': [1,2,3]}))"] },
    Program { name: "ls -la /usr/lib/x86_64-linux-gnu", dir: "ls", command: &["/usr/bin/ls", "-la", "/usr/lib/x86_64-linux-gnu"] },
    Program { name: "file /usr/bin/ls", dir: "file", command: &["/usr/bin/file", "/usr/bin/ls"] },
];

/// How a child process ended.
#[derive(Debug, Clone, Copy)]
struct Run {
    seconds: f64,
    max_rss_kib: u64,
    /// Stopped at a limit (time or memory) instead of finishing.
    stopped: Option<&'static str>,
    success: bool,
}

impl Run {
    fn describe(&self) -> (String, String) {
        match self.stopped {
            Some(why) => (format!("> {:.1} ({why})", self.seconds), format!(">= {:.0}", self.max_rss_kib as f64 / 1024.0)),
            None if !self.success => ("failed".into(), "-".into()),
            None => (format!("{:.2}", self.seconds), format!("{:.0}", self.max_rss_kib as f64 / 1024.0)),
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `command` with its output discarded; wall time and peak RSS from
/// wait4's rusage, stopped at the time or memory limit. The command is
/// started by a fresh copy of this benchmark (`--measure-child`): a child's
/// `ru_maxrss` starts from the RSS of the process that spawned it, and this
/// one holds decoded traces.
fn measure(command: &Command) -> Run {
    let mut helper = Command::new(std::env::current_exe().expect("own path"));
    helper.arg("--measure-child").arg(command.get_program()).args(command.get_args());
    let out = helper.stderr(Stdio::inherit()).output().expect("run the measuring helper");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "measuring helper printed {text:?}");
    let stopped = match fields[3] {
        "time" => Some("time limit"),
        "memory" => Some("memory limit"),
        _ => None,
    };
    Run { seconds: fields[0].parse().unwrap(), max_rss_kib: fields[1].parse().unwrap(), stopped, success: fields[2] == "0" }
}

/// [`measure`] three times: the shortest time (these runs take under a
/// second, and the machine's noise is of that order), the highest peak RSS.
fn measure_best_of_three(command: &Command) -> Run {
    let runs = [measure(command), measure(command), measure(command)];
    let mut best = runs.iter().copied().min_by(|a, b| a.seconds.total_cmp(&b.seconds)).expect("three runs");
    best.max_rss_kib = runs.iter().map(|r| r.max_rss_kib).max().expect("three runs");
    best.success = runs.iter().all(|r| r.success);
    best
}

/// The helper's side of [`measure`]: runs `program args…`, prints `seconds
/// max_rss_kib exit_status stopped`.
fn measure_child(program: &str, args: &[String]) {
    let limit = Duration::from_secs(env_or("RETRACE_SCALE_LIMIT_S", 300));
    let memory_limit_kib = env_or("RETRACE_SCALE_LIMIT_GIB", 16u64) * 1024 * 1024;
    let start = Instant::now();
    let child = Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut stopped = "-";
    loop {
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if stopped != "-" { 0 } else { libc::WNOHANG };
        let waited = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if waited == pid {
            let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
            println!("{} {} {code} {stopped}", start.elapsed().as_secs_f64(), usage.ru_maxrss);
            return;
        }
        if stopped == "-" {
            if start.elapsed() > limit {
                stopped = "time";
            } else if current_rss_kib(pid) > memory_limit_kib {
                stopped = "memory";
            }
            if stopped != "-" {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                continue;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn current_rss_kib(pid: libc::pid_t) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

fn record(program: &Program, bundle: &Path) -> PathBuf {
    let trace_json = bundle.join("trace.json");
    if trace_json.exists() {
        return trace_json;
    }
    let _ = std::fs::remove_dir_all(bundle);
    eprintln!("recording {} (branch mode) into {}", program.name, bundle.display());
    let status = Command::new(RETRACE)
        .args(["record", "--backend", "software", "--mode", "branch", "-o"])
        .arg(bundle)
        .arg("--")
        .args(program.command)
        .stdout(Stdio::null())
        .status()
        .expect("run retrace record");
    assert!(status.success(), "retrace record {:?} failed", program.command);
    trace_json
}

fn lldb(trace_json: &Path, command: &str) -> Command {
    let mut lldb = Command::new("lldb-22");
    lldb.args(["-b", "-o", &format!("trace load {}", trace_json.display()), "-o", command]);
    lldb
}

fn retrace(args: &[&str], trace_json: &Path) -> Command {
    let mut retrace = Command::new(RETRACE);
    retrace.args(args).arg(trace_json);
    retrace
}

/// A trace of more than 10^9 instructions: the python3 recording's trace
/// (real code, with its timing packets) repeated 18 times in one thread —
/// each copy starts at a PSB, where decoders synchronise — in a bundle with
/// the same modules. `dump instructions -c 10` and `dump info` must stay
/// within 2 bytes per instruction + 64 MiB.
fn billion(dir: &Path, verdicts: &mut Vec<(String, bool)>) {
    const COPIES: usize = 18;
    let source = dir.join("python3");
    let target = dir.join("billion");
    let trace_json = target.join("trace.json");
    if !trace_json.exists() {
        let _ = std::fs::remove_dir_all(&target);
        std::fs::create_dir_all(target.join("threads")).unwrap();
        let description: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(source.join("trace.json")).unwrap()).unwrap();
        let thread = &description["processes"][0]["threads"][0];
        let trace = std::fs::read(source.join(thread["iptTrace"].as_str().unwrap())).unwrap();
        let repeated: Vec<u8> = trace.iter().copied().cycle().take(trace.len() * COPIES).collect();
        std::fs::write(target.join(thread["iptTrace"].as_str().unwrap()), repeated).unwrap();
        std::os::unix::fs::symlink(source.join("modules"), target.join("modules")).unwrap();
        std::fs::copy(source.join("trace.json"), &trace_json).unwrap();
    }
    let bundle = load(&trace_json).expect("load the repeated bundle");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let instructions = decode_parallel(&bundle.threads[0].trace, bundle.image(), cores).instructions();
    drop(bundle);
    println!();
    println!("python3's trace repeated {COPIES} times: {instructions} instructions in one thread ({})", trace_json.display());
    println!("{:<36} {:>12} {:>12} {:>8}", "whole process", "retrace s", "retrace MiB", "B/insn");
    let bound_kib = (2 * instructions / 1024) + 64 * 1024;
    for (name, args) in [("dump instructions -c 10", &["dump", "instructions", "-c", "10"][..]), ("dump info", &["dump", "info"][..])] {
        let run = measure(&retrace(args, &trace_json));
        assert!(run.success, "retrace {name} on the repeated trace failed");
        println!(
            "{name:<36} {:>12.2} {:>12.0} {:>8.2}",
            run.seconds,
            run.max_rss_kib as f64 / 1024.0,
            run.max_rss_kib as f64 * 1024.0 / instructions as f64
        );
        verdicts.push((
            format!("10^9: peak RSS of {name} <= 2 B/insn + 64 MiB ({:.0} MiB; {:.2} s)", bound_kib as f64 / 1024.0, run.seconds),
            run.max_rss_kib <= bound_kib && instructions >= 1_000_000_000,
        ));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--measure-child") {
        return measure_child(&args[2], &args[3..]);
    }
    let dir: PathBuf = std::env::var_os("RETRACE_SCALE_DIR").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-scale"));
    std::fs::create_dir_all(&dir).unwrap();
    let lldb_present = Command::new("lldb-22").arg("--version").output().is_ok_and(|o| o.status.success());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut verdicts = Vec::new();
    for program in &PROGRAMS {
        let trace_json = record(program, &dir.join(program.dir));
        let bundle = load(&trace_json).expect("load the bundle");
        let trace_bytes: usize = bundle.threads.iter().map(|t| t.trace.len()).sum();

        // The decoder core, thread by thread, summed.
        let cpu = (bundle.description.cpu_info.family, bundle.description.cpu_info.model);
        let each = |f: &dyn Fn(&[u8], &retrace_decoder::image::Image) -> u64| -> u64 {
            bundle.threads.iter().map(|t| f(&t.trace, bundle.image_of(t))).sum()
        };
        let (t_one, n_one) = best_of_three(&|| each(&|trace, image| FlowDecoder::new(trace, image).decode_history().instructions()));
        let (t_par, n_par) = best_of_three(&|| each(&|trace, image| decode_parallel(trace, image, cores).instructions()));
        assert_eq!(n_one, n_par, "{}: parallel and one-core decodes disagree", program.name);
        let libipt = |f: fn(&[u8], &retrace_decoder::image::Image, (u32, u32)) -> Option<(u64, u64)>| {
            best_of_three(&|| each(&|trace, image| f(trace, image, cpu).map_or(0, |(n, _)| n)))
        };
        let (t_blk, n_blk) = libipt(retrace_tests::libipt_flow::block_count);
        let (t_insn, n_insn) = libipt(retrace_tests::libipt_flow::insn_count);
        let instructions = n_one;
        println!();
        println!(
            "{}: {instructions} instructions in {} thread(s), {trace_bytes} bytes of Intel PT ({})",
            program.name,
            bundle.threads.len(),
            trace_json.display()
        );
        println!("{:<40} {:>10} {:>12} {:>10}", "decoder core", "seconds", "M instr/s", "vs libipt");
        let mut rows = vec![("retrace FlowDecoder (1 core)".to_string(), t_one, n_one), (format!("retrace decode_parallel ({cores} cores)"), t_par, n_par)];
        if n_blk > 0 {
            assert_eq!(n_blk, instructions, "{}: libipt's block decoder counts other instructions", program.name);
            assert_eq!(n_insn, instructions, "{}: libipt's instruction decoder counts other instructions", program.name);
            rows.push(("libipt 2.0.5 block decoder (iscache)".into(), t_blk, n_blk));
            rows.push(("libipt 2.0.5 instruction decoder (iscache)".into(), t_insn, n_insn));
        }
        for (name, t, n) in &rows {
            let vs = if n_blk > 0 { format!("{:.2}x", t_blk / t) } else { "-".into() };
            println!("{name:<40} {t:>10.4} {:>12.1} {vs:>10}", *n as f64 / t / 1e6);
        }

        // Whole processes.
        let timeline = dir.join(format!("{}.timeline.json", program.dir));
        let ctf = dir.join(format!("{}.lldb-ctf.json", program.dir));
        let commands: [(&str, Command, Option<Command>); 4] = [
            ("dump instructions -c 10", retrace(&["dump", "instructions", "-c", "10"], &trace_json), Some(lldb(&trace_json, "thread trace dump instructions -c 10"))),
            ("dump info", retrace(&["dump", "info"], &trace_json), Some(lldb(&trace_json, "thread trace dump info"))),
            ("dump function-calls", retrace(&["dump", "function-calls"], &trace_json), Some(lldb(&trace_json, "thread trace dump function-calls"))),
            (
                "export perfetto (LLDB: export ctf)",
                {
                    let mut c = retrace(&["export", "perfetto"], &trace_json);
                    c.arg("-o").arg(&timeline);
                    c
                },
                Some(lldb(&trace_json, &format!("thread trace export ctf -f {}", ctf.display()))),
            ),
        ];
        println!(
            "{:<36} {:>12} {:>12} {:>8} {:>22} {:>12} {:>10}",
            "whole process", "retrace s", "retrace MiB", "B/insn", "lldb-22 s", "lldb-22 MiB", "speed-up"
        );
        let bound_kib = (2 * instructions / 1024) + 64 * 1024;
        let mut times = Vec::new();
        for (name, ours, theirs) in commands {
            let ours = measure_best_of_three(&ours);
            assert!(ours.success, "{}: retrace {name} failed", program.name);
            let theirs = theirs.filter(|_| lldb_present).map(|c| measure(&c));
            let (their_s, their_mib) = theirs.map_or(("-".into(), "-".into()), |r| r.describe());
            let speedup = match theirs {
                Some(r) if r.success || r.stopped.is_some() => format!("{}{:.1}x", if r.stopped.is_some() { ">" } else { "" }, r.seconds / ours.seconds),
                _ => "-".into(),
            };
            let per_insn = ours.max_rss_kib as f64 * 1024.0 / instructions as f64;
            println!(
                "{name:<36} {:>12.2} {:>12.0} {per_insn:>8.2} {their_s:>22} {their_mib:>12} {speedup:>10}",
                ours.seconds,
                ours.max_rss_kib as f64 / 1024.0
            );
            times.push((name, ours, theirs));
            if program.dir == "python3" {
                verdicts.push((
                    format!("python3: peak RSS of {name} <= 2 B/insn + 64 MiB ({:.0} MiB)", bound_kib as f64 / 1024.0),
                    ours.max_rss_kib <= bound_kib,
                ));
            }
        }
        if program.dir == "python3" {
            let (dump, calls) = (times[0].1, times[2].1);
            if let Some(lldb_dump) = times[0].2 {
                verdicts.push((
                    format!("python3: dump instructions -c 10 >= 30x faster than lldb-22 ({:.1}x)", lldb_dump.seconds / dump.seconds),
                    lldb_dump.seconds / dump.seconds >= 30.0,
                ));
            }
            verdicts.push((
                format!("python3: dump function-calls <= 2x the time of dump instructions -c 10 ({:.2}x)", calls.seconds / dump.seconds),
                calls.seconds <= 2.0 * dump.seconds,
            ));
            assert!(instructions >= 50_000_000, "the python3 recording has only {instructions} instructions");
        }
    }
    billion(&dir, &mut verdicts);
    println!();
    for (what, met) in &verdicts {
        println!("{}: {what}", if *met { "met" } else { "NOT MET" });
    }
}
