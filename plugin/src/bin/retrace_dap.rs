//! `retrace-dap`: a Debug Adapter Protocol server on standard input and
//! output — lldb-dap with Step Back and Reverse Continue over retrace-stub.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use retrace_plugin::companions::{self, beside_this_program, env_path, on_path};
use retrace_plugin::dap::{serve, AdapterConfig};

/// lldb-dap with time travel: a Debug Adapter Protocol server on standard
/// input and output for VS Code (the retrace extension starts it) or any
/// other DAP client.
///
/// It runs lldb-dap behind it and passes every message through, adding:
///
///   stepBack           reverse-next (granularity "instruction": reverse-stepi)
///   reverseContinue    back to the previous breakpoint hit, or the history's start
///   supportsStepBack   in the initialize response, so the client shows the buttons
///
/// Launch configurations (request "launch"): lldb-dap's own keys (program,
/// args, cwd, env, stopOnEntry, initCommands, …) plus
///
///   "record": "auto"              the default: the best recorder here, named in the
///                                 Debug Console: Intel PT (the whole run, then its
///                                 replay: the path taken), else "valgrind", else "full"
///   "record": "valgrind"          record the program first under Valgrind with full
///                                 state (retrace record --full-state), then debug the
///                                 recording: every register and byte at every stop
///   "record": "full" | "branch"   retrace-stub records it live, single-stepping
///                                 (every value; slow) or at branches (the path only)
///   "replay": "path/trace.json"    post-mortem: a saved trace instead of a live program
///
/// The adapter starts retrace-stub for the session and ends it (and the
/// program) with the session. Request "attach" with lldb-dap's
/// "gdb-remote-port" (and "gdb-remote-hostname") connects to a stub you
/// started yourself. Logging: RUST_LOG=debug (to standard error).
#[derive(Debug, Parser)]
#[command(name = "retrace-dap", version, about, long_about, verbatim_doc_comment)]
struct Args {
    /// The lldb-dap to run [default: $RETRACE_LLDB_DAP, else lldb-dap-22 or lldb-dap on PATH].
    #[arg(long, value_name = "PATH")]
    lldb_dap: Option<PathBuf>,
    /// The retrace-stub to start [default: $RETRACE_STUB, else the one next to this program].
    #[arg(long, value_name = "PATH")]
    stub: Option<PathBuf>,
    /// The LLDB shim, retrace.py [default: $RETRACE_SHIM, else lldb-scripts/retrace.py of the checkout this program was built in].
    #[arg(long, value_name = "PATH")]
    shim: Option<PathBuf>,
    /// The `retrace` command, which records a whole run (Valgrind, Intel PT) [default: $RETRACE_CLI, else the one next to this program].
    #[arg(long, value_name = "PATH")]
    retrace: Option<PathBuf>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let lldb_dap = args.lldb_dap.or_else(|| env_path("RETRACE_LLDB_DAP")).or_else(|| on_path(&["lldb-dap-22", "lldb-dap"]));
    let Some(lldb_dap) = lldb_dap else {
        eprintln!("retrace-dap: no lldb-dap found (install lldb-22, or give --lldb-dap PATH)");
        return ExitCode::from(1);
    };
    let stub = args.stub.or_else(|| env_path("RETRACE_STUB")).unwrap_or_else(|| beside_this_program("retrace-stub"));
    let shim = args.shim.unwrap_or_else(companions::shim);
    if !shim.exists() {
        eprintln!("retrace-dap: the LLDB shim {} is missing (give --shim PATH)", shim.display());
        return ExitCode::from(1);
    }
    let recorder = args.retrace.or_else(|| env_path("RETRACE_CLI")).unwrap_or_else(|| beside_this_program("retrace"));
    let config = AdapterConfig { lldb_dap, stub, shim, recorder };
    let input = Box::new(std::io::BufReader::new(std::io::stdin()));
    let output = Box::new(std::io::stdout());
    match serve(config, input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retrace-dap: {e}");
            ExitCode::from(1)
        }
    }
}
