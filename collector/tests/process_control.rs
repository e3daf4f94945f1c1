//! Programs that exec, fork, daemonize and create threads, recorded through
//! the shared process-control core by every backend that runs here: the
//! hardware backend's loop (with a trace source standing in for the
//! `intel_pt` PMU, which this machine class lacks) and the software
//! recorder. Each must run to its normal end with its normal output and exit
//! status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::unistd::Pid;
use retrace_collector::hardware::{record_threads, ThreadTraceSource};
use retrace_collector::process::{launch, LaunchOptions};
use retrace_collector::ptrace_recorder::{record, RecordOptions, StepMode};
use retrace_collector::recording::{Outcome, Recording};

const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/programs");

fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("process-control").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds `tests/programs/<name>.c`, or `None` (with a note) without gcc.
fn build(name: &str, dir: &Path, flags: &[&str]) -> Option<PathBuf> {
    let exe = dir.join(name);
    let out = match Command::new("gcc").args(["-g", "-O0", "-o"]).arg(&exe).arg(format!("{PROGRAMS}/{name}.c")).args(flags).output() {
        Ok(out) => out,
        Err(_) => {
            eprintln!("skipped: gcc is not installed (tests/run.sh installs it)");
            return None;
        }
    };
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    Some(exe)
}

/// What the loop asked of the trace source, checked against the program.
#[derive(Default)]
struct StandInSource {
    /// Every open, in order: the thread and the instruction it stood at.
    opened: Vec<(Pid, u64)>,
    /// Every read, in order.
    read: Vec<Pid>,
    /// Refuse every n-th open (as a full locked-memory budget would).
    refuse_every: Option<usize>,
    refused: Vec<Pid>,
}

impl ThreadTraceSource for StandInSource {
    type Trace = Pid;

    fn open(&mut self, tid: Pid) -> Result<Pid, String> {
        let at = nix::sys::ptrace::read_user(tid, (16 * 8) as nix::sys::ptrace::AddressType).expect("the thread is stopped") as u64;
        self.opened.push((tid, at));
        if self.refuse_every.is_some_and(|n| self.opened.len() % n == 0) {
            self.refused.push(tid);
            return Err("no room for a trace buffer (stand-in)".into());
        }
        Ok(tid)
    }

    fn read(&mut self, trace: Pid) -> Vec<u8> {
        self.read.push(trace);
        (trace.as_raw() as u32).to_le_bytes().to_vec()
    }
}

fn launch_with_stdout(program: &str, args: &[&str], stdout: &Path) -> retrace_collector::process::Tracee {
    let mut options = LaunchOptions::new(program, args.iter().copied());
    options.stdout = Some(stdout.to_path_buf());
    launch(&options).expect("launch")
}

fn hardware_loop(program: &str, args: &[&str], stdout: &Path, source: &mut StandInSource) -> Recording {
    let tracee = launch_with_stdout(program, args, stdout);
    record_threads(tracee, source, &RecordOptions::default())
}

fn software(program: &str, args: &[&str], stdout: &Path) -> Recording {
    let tracee = launch_with_stdout(program, args, stdout);
    let options = RecordOptions { mode: StepMode::Branch, keep_instruction_log: true, ..RecordOptions::default() };
    record(tracee, &options).expect("record")
}

/// Runs `program args` through the hardware loop (with `source`) and the
/// software recorder; each run must print `expected` and exit with 0 (`why`
/// says what a different output would mean). Returns both recordings.
fn records_normally_in_both(
    program: &str,
    args: &[&str],
    out: &Path,
    source: &mut StandInSource,
    expected: &str,
    why: &str,
) -> (Recording, Recording) {
    let hardware = hardware_loop(program, args, out, source);
    assert_eq!(std::fs::read_to_string(out).unwrap(), expected, "hardware loop: {why}");
    assert_eq!(hardware.outcome, Outcome::Exited(0), "hardware loop");
    let software = software(program, args, out);
    assert_eq!(std::fs::read_to_string(out).unwrap(), expected, "software: {why}");
    assert_eq!(software.outcome, Outcome::Exited(0), "software");
    (hardware, software)
}

fn module_paths(recording: &Recording, image: usize) -> Vec<&str> {
    recording.images[image].modules.iter().map(|m| m.path.as_str()).collect()
}

/// Every thread the program had was opened once, at its start, and read once.
fn assert_each_thread_opened_and_read_once(source: &StandInSource) {
    let mut opens: BTreeMap<Pid, usize> = BTreeMap::new();
    for (tid, _) in &source.opened {
        *opens.entry(*tid).or_default() += 1;
    }
    let mut reads: BTreeMap<Pid, usize> = BTreeMap::new();
    for tid in &source.read {
        *reads.entry(*tid).or_default() += 1;
    }
    for (tid, n) in &reads {
        assert!(opens.contains_key(tid), "thread {tid} read but never opened");
        assert!(*n <= opens[tid], "thread {tid} read {n} times, opened {}", opens[tid]);
    }
}

#[test]
fn exec_env_echo_records_each_program_as_an_image() {
    let dir = work_dir("exec-env-echo");
    let out = dir.join("stdout");

    let mut source = StandInSource::default();
    let recording = hardware_loop("env", &["/bin/echo", "hi"], &out, &mut source);
    assert_eq!(recording.outcome, Outcome::Exited(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hi\n", "killed by SIGTRAP before printing?");
    assert_eq!(recording.images.len(), 2, "env, then echo");
    assert!(module_paths(&recording, 0).contains(&"/usr/bin/env"), "{:?}", module_paths(&recording, 0));
    assert!(!module_paths(&recording, 0).contains(&"/usr/bin/echo"));
    assert!(module_paths(&recording, 1).contains(&"/usr/bin/echo"), "{:?}", module_paths(&recording, 1));
    assert!(!module_paths(&recording, 1).contains(&"/usr/bin/env"));
    // One trace per image, opened where each program starts and read at its end.
    assert_eq!(source.opened.len(), 2);
    assert_eq!(source.read.len(), 2);
    assert_each_thread_opened_and_read_once(&source);
    let pid = Pid::from_raw(recording.pid as i32);
    assert!(source.opened.iter().all(|(tid, _)| *tid == pid));
    // Both programs were opened at their first instruction: the dynamic
    // loader's entry (the same address for both, ASLR off), not somewhere in env.
    assert_eq!(source.opened[0].1, source.opened[1].1);

    let recording = software("env", &["/bin/echo", "hi"], &out);
    assert_eq!(recording.outcome, Outcome::Exited(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hi\n");
    assert_eq!(recording.images.len(), 2);
    assert!(module_paths(&recording, 1).contains(&"/usr/bin/echo"));
    assert!(!module_paths(&recording, 1).contains(&"/usr/bin/env"));
    let first = &recording.images[0].threads[0];
    let second = &recording.images[1].threads[0];
    // The first image ends with the execve `syscall`; the second starts at
    // the instruction the hardware loop saw its thread stand at.
    let first_log = first.instruction_log.as_ref().unwrap();
    let second_log = second.instruction_log.as_ref().unwrap();
    assert_eq!(second_log[0], source.opened[1].1, "the new program starts at the loader's entry");
    assert!(first_log.len() > 1000 && second_log.len() > 1000);
}

#[test]
fn shell_running_a_child_prints_its_status() {
    let dir = work_dir("sh-true");
    let out = dir.join("stdout");
    let mut source = StandInSource::default();
    let (recording, _) =
        records_normally_in_both("sh", &["-c", "/bin/true; echo $?"], &out, &mut source, "0\n", "the child must not die of SIGTRAP (133)");
    assert_eq!(recording.images.len(), 1, "the child's exec is not the shell's");
    assert_eq!(source.opened.len(), 1, "the forked child is not traced");
}

#[test]
fn fork_and_wait_sees_the_childs_status() {
    let dir = work_dir("fork-and-wait");
    let Some(exe) = build("fork_and_wait", &dir, &[]) else { return };
    let exe = exe.to_str().unwrap();
    let out = dir.join("stdout");
    let (_, recording) =
        records_normally_in_both(exe, &[], &out, &mut StandInSource::default(), "child exited 7\n", "the parent saw another status");
    assert!(recording.instructions() > 1000);
}

#[test]
fn system_spawns_a_vforked_shell_and_sees_its_status() {
    let dir = work_dir("system");
    let Some(exe) = build("system_call_child", &dir, &[]) else { return };
    let exe = exe.to_str().unwrap();
    let out = dir.join("stdout");
    // Branch mode: the vforked child shares our memory, so the recorder's
    // int3s must be out before it runs (else it traps and dies).
    let mut source = StandInSource::default();
    records_normally_in_both(exe, &[], &out, &mut source, "system returned 3\n", "the spawned shell died or was not waited for");
    assert_eq!(source.opened.len(), 1, "the spawned shell is not traced");
}

#[test]
fn daemon_outlives_the_recording_and_does_its_work() {
    let dir = work_dir("daemonize");
    let Some(exe) = build("daemonize", &dir, &[]) else { return };
    let exe = exe.to_str().unwrap();
    for backend in ["hardware loop", "software"] {
        let done = dir.join(format!("done-{}", backend.replace(' ', "-")));
        let out = dir.join("stdout");
        let recording = match backend {
            "software" => software(exe, &[done.to_str().unwrap()], &out),
            _ => hardware_loop(exe, &[done.to_str().unwrap()], &out, &mut StandInSource::default()),
        };
        assert_eq!(recording.outcome, Outcome::Exited(0), "{backend}");
        // The daemon was let go (not killed, not left stopped): it finishes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done.exists() {
            assert!(std::time::Instant::now() < deadline, "{backend}: the daemon never wrote {}", done.display());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(std::fs::read_to_string(&done).unwrap(), "daemon done\n", "{backend}");
    }
}

#[test]
fn threads_created_in_a_loop_are_each_traced_from_their_start() {
    let dir = work_dir("thread-loop");
    let Some(exe) = build("thread_loop", &dir, &["-pthread"]) else { return };
    let exe = exe.to_str().unwrap();
    let out = dir.join("stdout");
    let mut source = StandInSource::default();
    let recording = hardware_loop(exe, &[], &out, &mut source);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "12 threads ran\n", "a SIGSTOP reached the program?");
    assert_eq!(recording.outcome, Outcome::Exited(0));
    assert_eq!(source.opened.len(), 13, "main + 4 rounds of 3, each opened once");
    assert_each_thread_opened_and_read_once(&source);
    assert_eq!(source.read.len(), 13, "every trace read");
    assert_eq!(recording.images[0].threads.len(), 13);
    assert!(recording.warnings.is_empty(), "{:?}", recording.warnings);
    // Each new thread stood at the same place when opened: right after clone,
    // before running anything of its own.
    let starts: std::collections::BTreeSet<u64> = source.opened[1..].iter().map(|(_, at)| *at).collect();
    assert_eq!(starts.len(), 1, "new threads opened at {starts:x?}");

    let recording = software(exe, &[], &out);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "12 threads ran\n");
    assert_eq!(recording.outcome, Outcome::Exited(0));
    assert_eq!(recording.images[0].threads.len(), 13);
    for thread in &recording.images[0].threads[1..] {
        let log = thread.instruction_log.as_ref().unwrap();
        assert_eq!(log[0], *starts.iter().next().unwrap(), "thread {} starts where the hardware loop opened it", thread.tid);
    }
}

#[test]
fn a_thread_whose_trace_cannot_open_is_skipped_and_reported() {
    let dir = work_dir("thread-refused");
    let Some(exe) = build("thread_loop", &dir, &["-pthread"]) else { return };
    let out = dir.join("stdout");
    let mut source = StandInSource { refuse_every: Some(3), ..StandInSource::default() };
    let recording = hardware_loop(exe.to_str().unwrap(), &[], &out, &mut source);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "12 threads ran\n");
    assert_eq!(recording.outcome, Outcome::Exited(0));
    assert_eq!(source.refused.len(), 4, "opens 3, 6, 9, 12 refused");
    assert_eq!(recording.images[0].threads.len(), 13 - 4, "the others recorded");
    assert_eq!(recording.warnings.len(), 4, "{:?}", recording.warnings);
    for (tid, warning) in source.refused.iter().zip(&recording.warnings) {
        assert_eq!(warning, &format!("thread {tid} is not traced: no room for a trace buffer (stand-in)"));
    }
}

extern "C" fn wake(_: libc::c_int) {}

#[test]
fn stop_flag_ends_the_hardware_loop_while_the_program_sleeps() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // A handler without SA_RESTART, as `retrace record` installs for Ctrl-C:
    // the signal makes the loop's blocked waitpid return.
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(wake),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler does nothing.
    unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGUSR1, &action) }.unwrap();
    let dir = work_dir("stop-flag");
    let stop = Arc::new(AtomicBool::new(false));
    let options = RecordOptions { stop: stop.clone(), ..RecordOptions::default() };
    let (thread_tx, thread_rx) = std::sync::mpsc::channel();
    let recorder = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        thread_tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
        let tracee = launch_with_stdout("sleep", &["60"], &dir.join("stdout"));
        let pid = tracee.pid;
        let started = std::time::Instant::now();
        let recording = record_threads(tracee, &mut StandInSource::default(), &options);
        (recording, pid, started.elapsed())
    });
    let thread = thread_rx.recv().unwrap() as libc::pthread_t;
    std::thread::sleep(std::time::Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !recorder.is_finished() {
        assert!(std::time::Instant::now() < deadline, "the loop did not end after the stop flag and a signal");
        // SAFETY: the thread is alive until is_finished; the handler does nothing.
        unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (recording, pid, elapsed) = recorder.join().unwrap();
    assert_eq!(recording.outcome, Outcome::Interrupted);
    assert!(elapsed < std::time::Duration::from_secs(10), "{elapsed:?} for a program that sleeps 60 s");
    // The program was killed and reaped.
    assert!(nix::sys::signal::kill(pid, None).is_err(), "sleep {pid} still exists");
}

/// `Wait::Thread` (a debugger stopping threads one by one) reports only
/// that thread's events; the others' stay pending for the next wait.
#[test]
fn waiting_for_one_thread_leaves_the_others_events_pending() {
    use nix::sys::ptrace;
    use retrace_collector::control::{ProcessEvent, Spawn, TracedProcess, Wait};
    let dir = work_dir("wait-thread");
    let Some(exe) = build("threads", &dir, &["-pthread"]) else { return };
    let tracee = launch(&LaunchOptions::new(exe.as_os_str(), Vec::<&str>::new())).expect("launch");
    let pid = tracee.pid;
    let mut process = TracedProcess::new(pid, [pid]);
    ptrace::cont(pid, None).unwrap();
    // Run to the first worker's first instruction; the main thread is held
    // in its clone event.
    let (mut held_parent, mut worker) = (None, None);
    while worker.is_none() || held_parent.is_none() {
        match process.next_event(Wait::Block).unwrap().expect("an event") {
            ProcessEvent::Spawned { parent, kind: Spawn::Thread, .. } => held_parent = Some(parent),
            ProcessEvent::ThreadStarted(tid) => worker = Some(tid),
            other => {
                if let Some(tid) = other.stopped_thread() {
                    ptrace::cont(tid, None).unwrap();
                }
            }
        }
    }
    let (main, worker) = (held_parent.unwrap(), worker.unwrap());
    assert_eq!(main, pid);
    // Both run; the worker is sent a SIGSTOP and the main thread runs on to
    // its next clone event. Waiting for the worker gets the worker's stop.
    ptrace::cont(main, None).unwrap();
    ptrace::cont(worker, None).unwrap();
    // SAFETY: tgkill has no memory-safety preconditions.
    unsafe { libc::syscall(libc::SYS_tgkill, pid.as_raw(), worker.as_raw(), libc::SIGSTOP) };
    let mut seen = Vec::new();
    loop {
        let event = process.next_event(Wait::Thread(worker)).unwrap().expect("the worker's event");
        seen.push(event);
        match event {
            // Stopped, or (its loop is short) it exited first.
            ProcessEvent::Signal(tid, nix::sys::signal::Signal::SIGSTOP) | ProcessEvent::ThreadGone(tid) if tid == worker => break,
            _ if event.stopped_thread() == Some(worker) => ptrace::cont(worker, None).unwrap(),
            _ => panic!("only the worker's events: {seen:?}"),
        }
    }
    // The main thread's event (its next clone, or the next worker's start)
    // was left for the next wait.
    let next = process.next_event(Wait::Block).unwrap().expect("the main thread's event");
    let others = matches!(next, ProcessEvent::Spawned { parent, .. } if parent == main) || matches!(next, ProcessEvent::ThreadStarted(tid) if tid != worker);
    assert!(others, "{next:?} after {seen:?}");
    process.kill();
    assert!(process.is_over());
}
