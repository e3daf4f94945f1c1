//! A `retrace-stub` started for one debug session: recording a program, or
//! replaying a saved trace. It listens on a port the system picks; it dies
//! with the adapter (and its program with it: the stub traces it with
//! `PTRACE_O_EXITKILL`).

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What the stub serves.
#[derive(Debug, Clone, PartialEq)]
pub enum StubRun {
    /// `retrace-stub --record=MODE -- PROGRAM ARGS`.
    Record {
        /// `full` or `branch`.
        mode: String,
        /// The program.
        program: PathBuf,
        /// Its arguments.
        args: Vec<OsString>,
    },
    /// `retrace-stub --replay TRACE_JSON --replay-from start`: the program
    /// runs from its first instruction, as a launch runs it.
    Replay {
        /// The bundle's `trace.json`.
        trace_json: PathBuf,
        /// Where the files it names may be (`--allow-outside-bundle`).
        reach: retrace_decoder::bundle::paths::Reach,
    },
}

/// Where the program runs: its working directory and environment
/// (added to the adapter's own).
#[derive(Debug, Clone, Default)]
pub struct StubEnvironment {
    /// The working directory (else the adapter's).
    pub cwd: Option<PathBuf>,
    /// Variables added to the adapter's environment.
    pub env: Vec<(OsString, OsString)>,
}

/// Why a stub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    /// The stub could not be started.
    #[error("cannot run {}: {source}", path.display())]
    Spawn {
        /// The `retrace-stub` run.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// It started and said why it cannot serve.
    #[error("retrace-stub did not start: {0}")]
    Refused(String),
}

/// A running stub.
#[derive(Debug)]
pub struct StubProcess {
    child: Child,
    /// The port it listens on (loopback).
    pub port: u16,
    /// The program it started (none for a replay).
    program: Option<libc::pid_t>,
    /// The stub's own last lines (`retrace-stub: …`), for a failure's reason.
    last_said: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// How many of the stub's own lines a failure quotes.
const LINES_KEPT: usize = 4;

impl StubProcess {
    /// Starts the stub and waits until it listens. What it and its program
    /// write after that goes to `output`, as (category, text): `console`
    /// for the stub's own lines, `stdout` and `stderr` for the program's.
    ///
    /// The stub gets SIGKILL when the thread calling this ends (a child's
    /// `PR_SET_PDEATHSIG` follows the thread that forked it): call it from
    /// a thread that lives as long as the session.
    pub fn start(
        stub: &Path,
        run: &StubRun,
        environment: &StubEnvironment,
        output: impl Fn(&'static str, String) + Send + Sync + 'static,
    ) -> Result<StubProcess, StubError> {
        let mut command = Command::new(stub);
        command.arg("--listen").arg("127.0.0.1:0");
        match run {
            StubRun::Record { mode, program, args } => {
                command.arg(format!("--record={mode}")).arg("--").arg(program).args(args);
            }
            StubRun::Replay { trace_json, reach } => {
                command.arg("--replay").arg(trace_json).arg("--replay-from").arg("start").args(reach.option());
            }
        }
        if let Some(cwd) = &environment.cwd {
            command.current_dir(cwd);
        }
        command.envs(environment.env.iter().map(|(k, v)| (k, v)));
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        dies_with_parent(&mut command, libc::SIGKILL);
        let mut child = command.spawn().map_err(|source| StubError::Spawn { path: stub.to_path_buf(), source })?;
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
        let mut said = String::new();
        let mut line = String::new();
        let port = loop {
            line.clear();
            match stderr.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(StubError::Refused(said.trim().to_string()));
                }
                Ok(_) => {}
            }
            said.push_str(&line);
            if let Some(port) = listening_port(&line) {
                break port;
            }
        };
        let program = program_pid(&said);
        let last_said = std::sync::Arc::new(std::sync::Mutex::new(said.lines().map(str::to_string).collect::<std::collections::VecDeque<_>>()));
        let output = std::sync::Arc::new(output);
        output("console", said);
        let stderr_output = std::sync::Arc::clone(&output);
        let kept = std::sync::Arc::clone(&last_said);
        std::thread::spawn(move || {
            let mut line = String::new();
            while matches!(stderr.read_line(&mut line), Ok(n) if n > 0) {
                let own = line.starts_with("retrace-stub:");
                if own {
                    if let Ok(mut kept) = kept.lock() {
                        kept.push_back(line.trim_end().to_string());
                        while kept.len() > LINES_KEPT {
                            kept.pop_front();
                        }
                    }
                }
                stderr_output(if own { "console" } else { "stderr" }, std::mem::take(&mut line));
            }
        });
        let mut stdout = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut chunk) {
                output("stdout", String::from_utf8_lossy(&chunk[..n]).into_owned());
            }
        });
        Ok(StubProcess { child, port, program, last_said })
    }

    /// What a failure to debug through it can say of it: whether it still
    /// runs (else its exit status) and its last lines.
    pub fn condition(&mut self) -> String {
        let state = match self.child.try_wait() {
            Ok(None) => format!("retrace-stub (pid {}, port {}) is still running", self.child.id(), self.port),
            Ok(Some(status)) => format!("retrace-stub (port {}) ended: {status}", self.port),
            Err(e) => format!("retrace-stub (port {}): {e}", self.port),
        };
        let said: Vec<String> = self.last_said.lock().map(|l| l.iter().cloned().collect()).unwrap_or_default();
        if said.is_empty() {
            state
        } else {
            format!("{state}; it last said: {}", said.join(" / "))
        }
    }

    /// Ends the session's processes and returns once they are gone: the
    /// stub (waited for `patience` to end by itself, as it does after a
    /// client's kill or detach, then killed), and its program unless
    /// `program_too` is false (a detach: it runs on).
    pub fn end(&mut self, patience: std::time::Duration, program_too: bool) {
        if !program_too {
            self.program = None;
        }
        if !self.wait_for_end(patience) {
            tracing::debug!("the stub did not end by itself: killing it");
        }
        self.kill();
    }

    /// Whether it has ended, waiting at most `patience` for it.
    pub fn wait_for_end(&mut self, patience: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + patience;
        loop {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Ends it and its program now, and returns once both are gone (the
    /// program dies with its tracer, `PTRACE_O_EXITKILL`, which the kernel
    /// carries out after the stub's end: waited for here, at most a second,
    /// and killed directly if it is still there).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let Some(program) = self.program.take() else { return };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut killed = false;
        while is_running(program) {
            if !killed && std::time::Instant::now() >= deadline {
                tracing::warn!(pid = program, "the program outlived its stub: killing it");
                // SAFETY: a signal to a process; nothing else is touched.
                unsafe { libc::kill(program, libc::SIGKILL) };
                killed = true;
            }
            if killed && std::time::Instant::now() >= deadline + std::time::Duration::from_secs(5) {
                tracing::warn!(pid = program, "the program is still there 5 s after SIGKILL");
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for StubProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Makes the child `command` starts get `signal` when the thread that
/// starts it ends (`PR_SET_PDEATHSIG`).
pub fn dies_with_parent(command: &mut Command, signal: libc::c_int) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The program's pid in the stub's `retrace-stub: process PID stopped at
/// entry; …` line.
fn program_pid(said: &str) -> Option<libc::pid_t> {
    said.lines().find_map(|line| line.strip_prefix("retrace-stub: process ")?.split_whitespace().next()?.parse().ok())
}

/// Whether process `pid` exists and has not ended (a zombie has).
fn is_running(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()), Some("Z" | "X")),
        Err(_) => false,
    }
}

/// The port in the stub's `… listening on 127.0.0.1:PORT` line.
fn listening_port(line: &str) -> Option<u16> {
    let (_, address) = line.split_once("listening on ")?;
    address.trim().rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_read_from_the_stubs_line() {
        assert_eq!(listening_port("retrace-stub: process 4341 stopped at entry; listening on 127.0.0.1:35009\n"), Some(35009));
        assert_eq!(listening_port("retrace-stub: replaying t/trace.json (12 instructions, at the end of history); listening on 127.0.0.1:7"), Some(7));
        assert_eq!(listening_port("retrace-stub: recording (Full) for reverse execution"), None);
    }

    #[test]
    fn the_programs_pid_is_read_from_the_stubs_lines() {
        let said = "retrace-stub: recording (full) for reverse execution\nretrace-stub: process 4341 stopped at entry; listening on 127.0.0.1:35009\n";
        assert_eq!(program_pid(said), Some(4341));
        assert_eq!(program_pid("retrace-stub: replaying t/trace.json (12 instructions, at the start of history); listening on 127.0.0.1:7"), None);
        assert!(is_running(std::process::id() as libc::pid_t));
        assert!(!is_running(i32::MAX));
    }
}
