//! `retrace-stub`: debug a program with LLDB or GDB over gdb-remote.

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;

use clap::Parser;
use retrace_collector::process::{attach, launch, LaunchOptions};
use retrace_stub::protocol::session::{serve, SessionEnd};
use retrace_stub::inferior::live::{ProcessTarget, RecordMode, TraceRecorder};
use retrace_decoder::bundle::paths::Reach;
use retrace_stub::inferior::saved_trace::SavedTrace;

/// A gdb-remote server for LLDB and GDB.
///
/// Starts PROGRAM stopped at its first instruction and waits for one
/// debugger on the listen address (loopback only by default):
///
///   retrace-stub --listen :1234 ./prog arg
///   lldb ./prog -o "gdb-remote 1234"
///   gdb ./prog -ex "target remote :1234"
///
/// Recording while you debug: the CPU's Intel PT where it has one, else
/// Intel PT written in software (stops at branches: about 350,000
/// instructions a second here; `--trace-with step` single-steps). Each
/// thread's trace is a ring of the newest data (4 KiB to 1 GiB). In LLDB:
///
///   (lldb) b main
///   (lldb) c
///   (lldb) process trace start          # -s 1MiB: a larger ring (default 4 KiB)
///   (lldb) b done
///   (lldb) c
///   (lldb) thread trace dump instructions
///   (lldb) thread trace dump function-calls
///   (lldb) process trace stop
///   (lldb) process plugin packet monitor trace status    # the recorder, instructions per thread
///
/// In GDB:
///
///   (gdb) break main
///   (gdb) continue
///   (gdb) record btrace pt
///   (gdb) break done
///   (gdb) continue
///   (gdb) record instruction-history
///   (gdb) reverse-step                  # reverse-next, reverse-finish, reverse-continue
///   (gdb) record stop
///
/// Reverse execution: record from the first instruction (one instruction
/// at a time: keep the program short or the stretch you run recorded), then
/// go back:
///
///   retrace-stub --record -- ./prog
///   (gdb) break work
///   (gdb) continue
///   (gdb) reverse-stepi                 # reverse-next, reverse-finish, reverse-continue
///   (gdb) watch counter
///   (gdb) reverse-continue              # the last change of counter
///   (gdb) monitor record status
///   (lldb) process continue -R
///
/// Replaying a saved trace (from `retrace record`, from this stub, or
/// LLDB's `trace save`): the program stands at the end of its history and
/// runs backwards and forwards through it. Only the PC is known; code is
/// read from the bundle's copies of the modules.
///
///   retrace-stub --replay bundle/trace.json --listen 127.0.0.1:1234    # --replay-from start: at its first instruction
///   gdb ./prog -ex "target remote :1234"
///   (gdb) break work
///   (gdb) reverse-continue              # the last call of work
///   (gdb) reverse-stepi                 # reverse-step, reverse-finish, next, continue
///   (gdb) monitor record status         # where in the history (--json for scripts)
///   (gdb) monitor goto 120              # the next resume stops at instruction 120
///   (gdb) stepi
///   lldb ./prog -o "gdb-remote 1234"
///   (lldb) b work
///   (lldb) process continue -R
///
/// Logging: RUST_LOG=debug shows every packet.
#[derive(Debug, Parser)]
#[command(name = "retrace-stub", version, about, long_about, verbatim_doc_comment)]
struct Args {
    /// Address to listen on. Anyone who can connect can run code as this
    /// user (gdb-remote has no authentication): keep it on loopback, or say
    /// why not (a warning is printed for any other address).
    /// Written as gdbserver takes it, too: `:1234` and `1234` are port 1234
    /// on loopback, `localhost:1234` a name resolved.
    #[arg(long, default_value = "127.0.0.1:1234", value_parser = listen_address)]
    listen: SocketAddr,
    /// Keep address-space randomisation on (it is off by default, as in LLDB and GDB).
    #[arg(long)]
    aslr: bool,
    /// Debug a running process instead of starting one.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    attach: Option<i32>,
    /// Record the program from its first instruction so that the debugger
    /// can run it backwards (`reverse-stepi`, `reverse-continue`,
    /// `process continue -R`): `full` keeps every register and byte of
    /// memory at every instruction, `branch` the order of instructions only.
    #[arg(long, value_name = "MODE", num_args = 0..=1, require_equals = true, default_missing_value = "full", conflicts_with = "replay")]
    record: Option<RecordMode>,
    /// What makes the traces of `process trace start`, `thread trace
    /// start` and `record btrace pt`: `auto` (the CPU's Intel PT where the
    /// intel_pt PMU exists, else `branch`), `branch` (software: the program
    /// runs freely to each branch; one thread at a time, several threads are
    /// stepped), `step` (software: one single step per instruction, about
    /// ten times slower), `intel-pt` (the CPU's, refused where absent).
    /// `monitor trace recorder NAME` changes it between traces, and
    /// `monitor trace status` says which is in use.
    #[arg(long, value_name = "RECORDER", default_value = "auto")]
    trace_with: TraceRecorder,
    /// Serve a saved trace (its trace.json) instead of a live process.
    #[arg(long, value_name = "TRACE_JSON", conflicts_with_all = ["command", "attach"])]
    replay: Option<std::path::PathBuf>,
    /// Where a replay starts: `end` (the program stands where its history
    /// ends, to run backwards from) or `start` (its first instruction, to
    /// run forwards as it ran: VS Code's replay launch).
    #[arg(long, value_name = "WHERE", value_enum, default_value = "end", requires = "replay")]
    replay_from: ReplayFrom,
    /// With --replay: read the files the bundle names wherever they are
    /// (absolute paths, `..`, links out of its directory, modules it holds
    /// no copy of at their paths here), as LLDB's `trace load` does. By
    /// default a bundle is untrusted input: nothing outside its directory
    /// is read.
    #[arg(long, requires = "replay")]
    allow_outside_bundle: bool,
    /// The program and its arguments (after `--`, or after the options:
    /// everything from the program on is its own).
    #[arg(required_unless_present_any = ["attach", "replay"], trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM ARGS")]
    command: Vec<std::ffi::OsString>,
}

/// Where `--replay` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReplayFrom {
    Start,
    End,
}

/// `--listen`'s address: `HOST:PORT` (a name is resolved, an IPv4 address
/// preferred), `:PORT` or `PORT` alone on loopback (where gdbserver would
/// take every interface: any other address must be named).
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::{Ipv4Addr, ToSocketAddrs};
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    let addresses: Vec<SocketAddr> = text.to_socket_addrs().map_err(|e| format!("`{text}` is not HOST:PORT, :PORT or PORT ({e})"))?.collect();
    addresses.iter().find(|a| a.is_ipv4()).or(addresses.first()).copied().ok_or_else(|| format!("`{text}` names no address"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let listener = match TcpListener::bind(args.listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("retrace-stub: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(1);
        }
    };
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "retrace-stub: warning: listening on {}, not a loopback address: anyone who can reach it can run code as this user (the protocol has no authentication)",
            args.listen
        );
    }
    if let Some(trace_json) = &args.replay {
        let reach = Reach::allowing_outside(args.allow_outside_bundle);
        return replay(&listener, trace_json, args.replay_from, reach);
    }
    let (tracee, threads) = if let Some(pid) = args.attach {
        match attach(nix::unistd::Pid::from_raw(pid)) {
            Ok(attached) => attached,
            Err(e) => {
                eprintln!("retrace-stub: cannot attach to process {pid}: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        let mut command = args.command.into_iter();
        let mut options = LaunchOptions::new(command.next().expect("clap requires a program"), command);
        options.disable_aslr = !args.aslr;
        match launch(&options) {
            Ok(tracee) => {
                let pid = tracee.pid;
                (tracee, vec![pid])
            }
            Err(e) => {
                eprintln!("retrace-stub: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let how = if args.attach.is_some() { "attached and stopped" } else { "stopped at entry" };
    // The address bound (with port 0 the system chose the port).
    let bound = listener.local_addr().map_or_else(|_| args.listen.to_string(), |a| a.to_string());
    eprintln!("retrace-stub: process {} {how}; listening on {bound}", tracee.pid);
    let mut target = ProcessTarget::with_threads(tracee.pid, &threads).trace_with(args.trace_with);
    if let Some(mode) = args.record {
        target = target.record(mode);
        eprintln!("retrace-stub: recording ({mode:?}) for reverse execution");
    }
    match serve(&listener, target) {
        Ok(end) => {
            let text = match end {
                SessionEnd::ProgramEnded => "the program ended",
                SessionEnd::Detached => "the debugger detached; the program runs on",
                SessionEnd::Killed => "the debugger killed the program",
                SessionEnd::ClientGone => "the debugger went away; the program was killed",
            };
            eprintln!("retrace-stub: {text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            retrace_collector::process::kill_and_reap(tracee.pid);
            eprintln!("retrace-stub: {e}");
            ExitCode::from(1)
        }
    }
}

/// Serves a saved trace until the debugger leaves.
fn replay(listener: &TcpListener, trace_json: &std::path::Path, from: ReplayFrom, reach: Reach) -> ExitCode {
    let mut saved = match SavedTrace::open(trace_json, reach) {
        Ok(saved) => saved,
        Err(e) => {
            eprintln!("retrace-stub: cannot replay {}: {e}", trace_json.display());
            return ExitCode::from(1);
        }
    };
    let bound = listener.local_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
    let at = match from {
        ReplayFrom::Start => {
            saved.go_to_start();
            "start"
        }
        ReplayFrom::End => "end",
    };
    eprintln!(
        "retrace-stub: replaying {} ({} instructions, at the {at} of history); listening on {bound}",
        trace_json.display(),
        saved.timeline().instructions()
    );
    match serve(listener, saved) {
        Ok(_) => {
            eprintln!("retrace-stub: the debugger left");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("retrace-stub: {e}");
            ExitCode::from(1)
        }
    }
}
