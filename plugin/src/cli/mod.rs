//! Command-line parsing and dispatch.

pub mod calls;
pub mod error;
pub mod output;
pub mod dump;
mod encode;
mod export;
mod jitdump;
mod llvm_mc;
mod ptdump;
pub mod record;
mod replay;
mod xray;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::CliError;

/// Record, dump and explore program execution traces (Intel PT).
///
/// Logging: set RUST_LOG (e.g. RUST_LOG=debug) to see what retrace does.
#[derive(Debug, Parser)]
#[command(name = "retrace", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the Intel PT packets of a raw trace file, one per line.
    ///
    /// Columns: byte offset, packet, payload, and for IP packets the
    /// reconstructed IP (like libipt's `ptdump --lastip`). A corrupt or
    /// truncated packet is reported with its offset, and listing resumes at
    /// the next PSB.
    ///
    /// Example: retrace ptdump thread-1234.ipt | less
    Ptdump {
        /// The raw Intel PT stream (e.g. a bundle's per-thread `iptTrace` file).
        file: PathBuf,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Decode from offset 0 instead of synchronising at the first PSB.
        #[arg(long)]
        no_sync: bool,
    },
    /// List the functions a JIT compiler wrote to a perf jitdump file, one per line.
    ///
    /// JIT runtimes write jitdumps (jit-<pid>.dump) for `perf inject --jit`:
    /// Node.js/V8 with `node --perf-prof` (in its working directory), CPython
    /// 3.13 with `-X perf_jit` (in /tmp), wasmtime with its jitdump profiler.
    ///
    /// A header line, then one line per LOAD record in file order: the
    /// record's byte offset, `load`, the function's code_index, its address
    /// range and size (hex), the load time (the record's timestamp:
    /// CLOCK_MONOTONIC ns in these producers) and its name (V8: `JS:*f` is
    /// optimized, `JS:^f` baseline, `JS:~f` interpreted). A MOVE record shows
    /// the function's old and new address. A damaged record is reported as
    /// `[offset: error: ...]`; listing goes on with the next record unless
    /// the damaged one's size is unusable (jitdump has no resync marker).
    ///
    /// Example: node --perf-prof app.js && retrace jitdump jit-12345.dump | grep 'JS:\*'
    Jitdump {
        /// The jitdump file (jit-<pid>.dump).
        file: PathBuf,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Record a program's execution and write a trace bundle.
    ///
    /// Two choices, made apart:
    ///
    /// What is recorded: the control flow (every instruction each thread
    /// ran, as Intel PT packets: LLDB's `trace load`, `retrace dump`, and a
    /// replay that serves the program counter), or with --full-state every
    /// register and memory change too (and what the kernel wrote): a replay
    /// (`retrace replay DIR`) then shows every value at every point, as rr's
    /// does, with breakpoints, watchpoints and reverse execution.
    ///
    /// How (--backend): `intel-pt` needs the CPU's intel_pt PMU (control
    /// flow only, at near native speed); `valgrind` runs the program on
    /// Valgrind with retrace's tool on any x86-64, AMD and VMs included
    /// (7-10x native on long runs, 20-120x on short ones where Valgrind's
    /// start-up dominates; a PIE program loads at 0x108000), control flow
    /// or full state; `ptrace` stops the program at every instruction
    /// (--ptrace-stops step, ~20-40 µs each) or every branch (branch),
    /// control flow only. `auto` (the default) takes the best one here:
    /// Intel PT when an event opens, else Valgrind when installed, else
    /// ptrace at every branch, and says which in one line. All write the
    /// same Intel PT packets. ASLR is disabled, as LLDB and GDB do.
    ///
    /// The program runs until it exits (or Ctrl-C, or --max-insns), and
    /// `retrace record` exits with its status, as rr does (128+N when
    /// signal N killed it, 130 when the recording stopped it). retrace's own
    /// messages (outcome, counts, bundle path, the command to run next;
    /// --json's summary as the last line) go to stderr, as perf's and rr's
    /// do: the program's stdout reaches stdout untouched, so
    /// `retrace record -- prog | sort` works.
    ///
    /// Threads are followed; forked children run on unrecorded. A program
    /// that execs gives one bundle per program: DIR/trace.json (the program
    /// launched), DIR/exec1/trace.json (the first it exec'd), … — `trace load`
    /// the one you want; `retrace dump DIR/trace.json` shows them all.
    ///
    /// Examples: retrace record --full-state -o run -- ./prog && retrace replay run
    ///           retrace record -o ls-trace -- /bin/ls && retrace dump instructions ls-trace
    Record {
        /// What to record: with it, every register and memory change beside
        /// the control flow (`state.rtstate` in the bundle; Valgrind records
        /// it). Without it, the control flow.
        #[arg(long)]
        full_state: bool,
        /// How to record: auto, intel-pt, valgrind or ptrace.
        #[arg(long, value_enum, default_value_t = record::Backend::Auto)]
        backend: record::Backend,
        /// How the ptrace recorder stops the program: step (at every
        /// instruction, its default) or branch (at every branch, ~17x
        /// faster). Given with `--backend auto`, it asks for ptrace where
        /// Intel PT is missing.
        #[arg(long, value_enum, value_name = "STOPS")]
        ptrace_stops: Option<record::PtraceStops>,
        /// Earlier spelling of the two choices: `--mode full` is
        /// --full-state, `--mode step|branch` is --ptrace-stops.
        #[arg(long, value_enum, hide = true, conflicts_with_all = ["full_state", "ptrace_stops"])]
        mode: Option<record::Mode>,
        /// Bundle directory to write.
        #[arg(short, long, default_value = "retrace-trace")]
        output: PathBuf,
        /// Stop (and kill the program) after this many instructions.
        #[arg(long, value_name = "N")]
        max_insns: Option<u64>,
        /// Keep address-space randomisation on.
        #[arg(long)]
        aslr: bool,
        /// Also write each thread's executed instruction addresses
        /// (threads/<tid>.insns, hex, one per line): the ground truth of a
        /// single-step recording.
        #[arg(long)]
        insn_log: bool,
        /// Print the summary as one line of JSON (on stderr, last line).
        #[arg(long)]
        json: bool,
        /// Replace the bundle already at the output directory (without it,
        /// an existing bundle is never overwritten).
        #[arg(short, long)]
        force: bool,
        /// The program and its arguments (after `--`, or after the options:
        /// everything from the program on is its own, as for perf and rr).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM ARGS")]
        command: Vec<std::ffi::OsString>,
    },
    /// Debug a recording: start retrace-stub replaying the bundle and LLDB
    /// (with the shim: `retrace reverse-step`, `reverse-next`, …) or GDB
    /// connected to it, as `rr replay` does. The stub ends with the debugger.
    ///
    /// A bundle recorded with `--full-state` serves every register and byte
    /// at every position (locals, watchpoints, reverse-continue to them);
    /// other bundles serve the program counter.
    ///
    /// Example: retrace record --full-state -o run -- ./prog && retrace replay run
    ///          retrace replay --gdb run -- -batch -ex "reverse-continue"
    Replay {
        /// The bundle directory (or its trace.json).
        bundle: std::path::PathBuf,
        /// Connect GDB instead of LLDB.
        #[arg(long)]
        gdb: bool,
        /// The debugger to run [default: lldb-22 (else lldb), or gdb with --gdb].
        #[arg(long, value_name = "PATH")]
        debugger: Option<std::path::PathBuf>,
        /// The retrace-stub to start [default: $RETRACE_STUB, else the one next to retrace].
        #[arg(long, value_name = "PATH")]
        stub: Option<std::path::PathBuf>,
        /// Passed to the debugger after the commands that connect it (after `--`).
        #[arg(last = true, value_name = "DEBUGGER ARGS")]
        debugger_args: Vec<std::ffi::OsString>,
        /// Read the files the bundle names wherever they are (absolute
        /// paths, `..`, links out, modules it holds no copy of at their
        /// paths here). By default a bundle is untrusted input: nothing
        /// outside its directory is read.
        #[arg(long)]
        allow_outside_bundle: bool,
    },
    /// Decode a trace bundle and show what it recorded.
    #[command(subcommand)]
    Dump(DumpCommand),
    /// Write a trace's function calls as a timeline for Perfetto UI or
    /// chrome://tracing (Chrome trace-event JSON: per thread, nested
    /// complete slices named after the functions, instants for events).
    ///
    /// Input: an LLDB trace bundle (Intel PT; slices are the function-call
    /// trees of `dump function-calls`, in µs from the trace's earliest clock
    /// tick when the trace has timing packets and tscPerfZeroConversion,
    /// otherwise one µs per instruction item) or an XRay log with --binary
    /// (slices from TSC and the log's cycle frequency). `perfetto` and
    /// `chrome` write the same JSON, which both open.
    ///
    /// Example: retrace export perfetto xray-log.prog.Ab12Cd --binary ./prog -o calls.json
    Export {
        /// chrome or perfetto.
        #[arg(value_enum)]
        format: export::Format,
        /// A bundle's trace.json or an XRay log.
        input: PathBuf,
        /// The JSON file to write.
        #[arg(short, long)]
        output: PathBuf,
        /// XRay: the instrumented binary (repeat for shared libraries).
        #[arg(long = "binary", value_name = "BIN")]
        binaries: Vec<PathBuf>,
        #[command(flatten)]
        decode: DecodeFlags,
    },
    /// Encode a packet script (text, one packet per line) into a raw trace.
    ///
    /// The script uses the syntax of ptdump's packet and payload columns, e.g.
    /// `psb`, `tsc 3b9aca00`, `mode.exec cs.l`, `psbend`, `tip.pge 401000`,
    /// `tnt.8 !!.`, `raw 02 04` (literal bytes). Numbers are hex; `#` starts a
    /// comment. See docs/packet-scripts.md.
    ///
    /// Example: retrace encode examples/hello.pts -o hello.pt
    Encode {
        /// The packet script.
        script: PathBuf,
        /// Where to write the trace.
        #[arg(short, long)]
        output: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum DumpCommand {
    /// Per thread: trace size, items, instructions, events, errors, decode time.
    Info {
        /// The bundle's trace.json.
        trace_json: PathBuf,
        /// JSON output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        decode: DecodeFlags,
    },
    /// The executed instructions of each thread, as LLDB's
    /// `thread trace dump instructions` prints them (same item ids: events
    /// and errors are numbered too).
    ///
    /// Example: retrace dump instructions -f -c 50 DIR/trace.json
    Instructions {
        /// The bundle's trace.json.
        trace_json: PathBuf,
        /// Only this thread.
        #[arg(long)]
        tid: Option<u64>,
        /// Oldest first (default: newest first).
        #[arg(short, long)]
        forwards: bool,
        /// Every instruction (no count limit).
        #[arg(short, long)]
        all: bool,
        /// How many instructions per thread.
        #[arg(short, long, default_value_t = 20)]
        count: usize,
        /// Addresses only.
        #[arg(short, long)]
        raw: bool,
        /// Include events (clock ticks, sync points, tracing disabled).
        #[arg(short, long)]
        events: bool,
        /// Only events (and errors), with no count limit (LLDB's `-E`).
        #[arg(short = 'E', long)]
        only_events: bool,
        /// Each instruction's control-flow kind, in 12 columns after the
        /// address (LLDB's `-k`): other, jump, cond jump, call, return, far
        /// call (syscall, int), far jump, far return.
        #[arg(short = 'k', long)]
        kinds: bool,
        /// Start at this item id (decimal, or hex with 0x) instead of the
        /// newest item (oldest with -f): ids as the dump shows them.
        #[arg(short, long, value_parser = parse_id)]
        id: Option<u64>,
        /// Skip this many items (instructions, events and errors alike) in
        /// the dump's direction before the first one shown.
        #[arg(short, long, default_value_t = 0)]
        skip: u64,
        /// JSON, one array per thread on one line (LLDB's `-j`): `id`,
        /// `loadAddress`, `module`, `symbol`, `mnemonic`, `source`/`line`/
        /// `column`; events as `event` (+ `hwClock`, `syncPointMetadata`);
        /// errors as `error`. With --raw only `id` and `loadAddress`.
        #[arg(short, long)]
        json: bool,
        /// JSON, indented (LLDB's `-J`).
        #[arg(short = 'J', long, conflicts_with = "json")]
        pretty_json: bool,
        /// Each item's time (LLDB's `-t`): nanoseconds since the trace's
        /// earliest clock tick (`[12.500 ns]`), interpolated between ticks
        /// as LLDB does, from the bundle's `tscPerfZeroConversion`;
        /// `[unavailable]` before a thread's first tick or without it.
        #[arg(short = 't', long)]
        time: bool,
        #[command(flatten)]
        decode: DecodeFlags,
    },
    /// Each thread's function-call trees, as LLDB's
    /// `thread trace dump function-calls` prints them: per tree, the
    /// segments of each call (`<start> to <end>  [first id, last id]`),
    /// calls made from a segment indented below it, a trace starting inside
    /// a call shown under the callers it returned to, runs of errors as
    /// `<tracing errors>` trees.
    ///
    /// For an LLVM XRay log (basic or FDR mode, any version), give the
    /// instrumented binary with --binary: the trees use LLDB's layout with
    /// one line per call, `` module`function (args)  [entry record, exit
    /// record]  duration ``, record ids counted per thread in time order;
    /// custom and typed events appear inside the call that emitted them. A
    /// call whose exit is missing ends at its caller's exit ("its exit is not
    /// in the trace"); a function that returns without a traced entry (it
    /// was entered before tracing began) is shown as the caller of what ran
    /// before: `[?, exit]  entered before the trace`. `--json` prints one
    /// object: header, threads with their `calls` flat in depth-first order
    /// (index, parent, depth, functionId, function, module, enterId, exitId,
    /// end, startTsc, endTsc, durationNs, args, events), and errors with byte
    /// offsets.
    ///
    /// Examples: retrace dump function-calls DIR/trace.json --json
    ///           retrace dump function-calls xray-log.prog.Ab12Cd --binary ./prog
    FunctionCalls {
        /// The bundle's trace.json, or an XRay log (with --binary).
        trace_json: PathBuf,
        /// XRay: the instrumented executable (function ids and names from its
        /// xray_instr_map and symbols); repeat for shared libraries built
        /// with -fxray-shared, in the order they registered (object ids 1, 2…).
        #[arg(long = "binary", value_name = "BIN")]
        binaries: Vec<PathBuf>,
        /// Only this thread.
        #[arg(long)]
        tid: Option<u64>,
        /// JSON, one line per thread (LLDB's `-j`): an array of trees of
        /// `tracedSegments` with string ids, `nestedCall`s and
        /// `untracedPrefixSegment`.
        #[arg(short, long)]
        json: bool,
        /// JSON, indented (LLDB's `-J`).
        #[arg(short = 'J', long, conflicts_with = "json")]
        pretty_json: bool,
        #[command(flatten)]
        decode: DecodeFlags,
    },
}

/// An item id as LLDB reads it: decimal, or hex after `0x`.
fn parse_id(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("invalid item id: {text}"))
}

/// How traces are decoded for the dump commands.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct DecodeFlags {
    /// Leave out LLDB 22's artifacts. By default the items are LLDB's, ids
    /// included: LLDB decodes each PSB-to-PSB slice of a trace on its own,
    /// so it reports "reached end of trace stream" at a slice boundary whose
    /// first instruction is a branch, and where a query or an event needs
    /// packets past the boundary, though nothing is missing there.
    #[arg(long)]
    pub no_lldb_quirks: bool,
    /// Read the files the bundle names wherever they are: absolute paths,
    /// `..`, links out of its directory, and modules it holds no copy of
    /// at their paths on this machine (as LLDB's `trace load` does). By
    /// default a bundle is untrusted input: nothing outside its directory
    /// is read.
    #[arg(long)]
    pub allow_outside_bundle: bool,
}

impl DecodeFlags {
    /// How these flags ask for a bundle to be opened.
    pub fn options(self) -> crate::bundle::OpenOptions {
        let reach = crate::bundle::Reach::allowing_outside(self.allow_outside_bundle);
        crate::bundle::OpenOptions { flow: retrace_decoder::flow::FlowOptions { lldb_psb_slices: !self.no_lldb_quirks }, reach }
    }
}

/// Runs one command.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Ptdump { file, json, no_sync } => ptdump::run(&file, json, no_sync),
        Command::Encode { script, output } => encode::run(&script, &output),
        Command::Jitdump { file, json } => jitdump::run(&file, json),
        Command::Dump(DumpCommand::Info { trace_json, json, decode }) => dump::info(&trace_json, json, decode.options()),
        Command::Dump(DumpCommand::Instructions { trace_json, tid, forwards, all, count, raw, events, only_events, kinds, id, skip, json, pretty_json, time, decode }) => {
            let options = decode.options();
            let json = match (json, pretty_json) {
                (true, _) => Some(dump::JsonStyle::Compact),
                (_, true) => Some(dump::JsonStyle::Pretty),
                _ => None,
            };
            let args = dump::InstructionsArgs {
                forwards,
                all,
                count,
                raw,
                events,
                only_events,
                kinds,
                start_id: id,
                skip,
                threads: None,
                json,
                time,
            };
            dump::instructions(&trace_json, tid, options, args)
        }
        Command::Dump(DumpCommand::FunctionCalls { trace_json, binaries, tid, json, pretty_json, decode }) => {
            let format = match (json, pretty_json) {
                (true, _) => calls::Format::Json,
                (_, true) => calls::Format::PrettyJson,
                _ => calls::Format::Text,
            };
            if xray::is_xray_log(&trace_json) {
                return xray::function_calls(&trace_json, &binaries, tid, format);
            }
            if !binaries.is_empty() {
                return Err(CliError::Message(format!("{}: not an XRay log (--binary is for XRay logs)", trace_json.display())));
            }
            calls::run(&trace_json, tid, format, decode.options())
        }
        Command::Export { format, input, output, binaries, decode } => export::run(format, &input, &output, &binaries, decode.options()),
        Command::Replay { bundle, gdb, debugger, stub, debugger_args, allow_outside_bundle } => {
            replay::run(replay::Args { bundle, gdb, debugger, stub, debugger_args, reach: crate::bundle::Reach::allowing_outside(allow_outside_bundle) })
        }
        Command::Record { full_state, backend, ptrace_stops, mode, output, max_insns, aslr, insn_log, json, force, command } => {
            let (full_state, ptrace_stops) = match mode {
                Some(record::Mode::Full) => (true, None),
                Some(record::Mode::Step) => (full_state, Some(record::PtraceStops::Step)),
                Some(record::Mode::Branch) => (full_state, Some(record::PtraceStops::Branch)),
                None => (full_state, ptrace_stops),
            };
            record::run(record::Args { full_state, backend, ptrace_stops, output, max_insns, aslr, insn_log, json, force, command })
        }
    }
}
