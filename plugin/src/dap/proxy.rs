//! The adapter between a DAP client (VS Code) and `lldb-dap`: every
//! message is passed on byte for byte, except the few this adapter adds
//! to or answers itself.
//!
//! - `initialize`'s response gains `supportsStepBack`.
//! - `stepBack` and `reverseContinue` become an `evaluate` of the shim's
//!   `retrace reverse-next|reverse-stepi|reverse-continue` in LLDB's
//!   console. The shim resumes the process in LLDB's asynchronous mode, so
//!   lldb-dap itself sends the `continued` and `stopped` events (reason
//!   `step`, `breakpoint`, `history boundary`) and refreshes what it shows,
//!   as after a forward step.
//! - `launch` starts `retrace-stub --record` (or `--replay` of a saved
//!   trace) and becomes lldb-dap's `attach` to it; `attach` connects to a
//!   running stub. Both load the shim first (`initCommands`).
//! - `disconnect` from a stub this adapter started ends its program unless
//!   the client asks otherwise.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};

use retrace_decoder::bundle::paths::{BundleDir, Reach};
use serde_json::{json, Map, Value};

use super::stub::{dies_with_parent, StubEnvironment, StubError, StubProcess, StubRun};
use super::wire::{read_message, write_message, Message, WireError};

/// What the adapter runs.
#[derive(Debug, Clone)]
pub struct AdapterConfig {
    /// lldb-dap (22).
    pub lldb_dap: PathBuf,
    /// retrace-stub.
    pub stub: PathBuf,
    /// lldb-scripts/retrace.py.
    pub shim: PathBuf,
    /// The `retrace` command (`"record": "valgrind"` records with it).
    pub recorder: PathBuf,
}

/// Why the adapter stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DapError {
    /// lldb-dap could not be started.
    #[error("cannot run {}: {source}", path.display())]
    LldbDap {
        /// The lldb-dap run.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// lldb-dap sent what is not a message.
    #[error("reading lldb-dap's messages: {0}")]
    FromLldbDap(WireError),
}

/// What a response from lldb-dap to a request of this adapter answers.
#[derive(Debug)]
enum Pending {
    /// The client's request `request_seq`.
    Answer { request_seq: i64, command: String },
    /// Nothing the client asked: only a failure is shown (in its console).
    Quiet { what: String },
}

/// The session's state, shared by the two directions.
struct Session {
    config: AdapterConfig,
    client: Arc<Mutex<Box<dyn Write + Send>>>,
    lldb_dap: Mutex<Option<std::process::ChildStdin>>,
    state: Mutex<State>,
    spawner: Spawner,
}

/// Runs jobs (starting the stub) on one thread that lives as long as the
/// adapter: a child's `PR_SET_PDEATHSIG` fires when the thread that forked
/// it ends, and the client's thread ends before the session does.
struct Spawner {
    jobs: Mutex<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
}

impl Spawner {
    fn new() -> Spawner {
        let (jobs, queue) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        std::thread::spawn(move || queue.into_iter().for_each(|job| job()));
        Spawner { jobs: Mutex::new(jobs) }
    }

    /// `job`'s result, run on the spawner's thread.
    fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> T {
        let (result, answer) = mpsc::channel();
        self.jobs
            .lock()
            .unwrap()
            .send(Box::new(move || {
                let _ = result.send(job());
            }))
            .expect("the spawner thread lives as long as the session");
        answer.recv().expect("the spawner thread answers every job")
    }
}

#[derive(Default)]
struct State {
    /// This adapter's requests to lldb-dap, by their `seq`.
    pending: HashMap<i64, Pending>,
    next_seq: i64,
    /// Client requests answered under another name (`launch` answered by
    /// lldb-dap's `attach`).
    renamed: HashMap<i64, String>,
    /// lldb-dap's prefix for LLDB commands in `evaluate` (its
    /// `commandEscapePrefix`).
    escape: String,
    /// The stub this adapter started.
    stub: Option<StubProcess>,
    /// LLDB's base direction is reverse (after a reverse continue): its
    /// next continue, and the continues inside its steps, would run
    /// backwards.
    reversed: bool,
    /// Where a launch (lldb-dap's attach to the stub started here) stands
    /// in its configuration.
    configuring: Configuring,
    /// The client's `disconnect` (its `seq`) while a stub started here
    /// runs, and whether it ends the program (`terminateDebuggee`): its
    /// answer waits until the stub, and the program then, are gone.
    disconnecting: Option<(i64, bool)>,
}

/// A launch's configuration, as lldb-dap's events show it. lldb-dap
/// attaches to the stub for a launch, and an attach shows the stop the
/// stub holds the program in (`stopped`, reason `exception`, "signal
/// SIGTRAP", before the client's `configurationDone`) and the resume that
/// `configurationDone` makes (`continued`); plain lldb-dap's launch shows
/// neither: its first stop is the first breakpoint's, or the entry's with
/// `stopOnEntry`. Those two are not passed on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Configuring {
    /// Not a launch of this adapter, or its configuration is done.
    #[default]
    Done,
    /// Launched; the client has not sent `configurationDone`.
    Launched,
    /// `configurationDone` (this `seq`) is on its way; no answer yet.
    Finishing(i64),
}

/// `seq` of this adapter's own requests to lldb-dap: far above any client's.
const FIRST_OWN_SEQ: i64 = 1 << 40;

/// Serves one client on `input`/`output` until it or lldb-dap leaves.
pub fn serve(config: AdapterConfig, input: Box<dyn BufRead + Send>, output: Box<dyn Write + Send>) -> Result<(), DapError> {
    let mut command = Command::new(&config.lldb_dap);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // (Started from the thread that serves to the end.)
    dies_with_parent(&mut command, libc::SIGTERM);
    let mut lldb_dap = command.spawn().map_err(|source| DapError::LldbDap { path: config.lldb_dap.clone(), source })?;
    let from_lldb_dap = BufReader::new(lldb_dap.stdout.take().expect("stdout is piped"));
    let session = Arc::new(Session {
        config,
        client: Arc::new(Mutex::new(output)),
        lldb_dap: Mutex::new(lldb_dap.stdin.take()),
        state: Mutex::new(State { next_seq: FIRST_OWN_SEQ, escape: "`".to_string(), ..State::default() }),
        spawner: Spawner::new(),
    });
    {
        let session = Arc::clone(&session);
        std::thread::spawn(move || session.from_client(input));
    }
    let ended = session.from_lldb_dap(from_lldb_dap);
    if ended.is_err() {
        // lldb-dap's output is unreadable: end it (its input may still be open).
        session.lldb_dap.lock().unwrap().take();
        let _ = lldb_dap.kill();
    }
    let _ = lldb_dap.wait();
    let stub = session.state.lock().unwrap().stub.take();
    if let Some(mut stub) = stub {
        // After lldb-dap's `k` the stub ends by itself; otherwise end it.
        stub.end(std::time::Duration::from_secs(2), true);
    }
    ended
}

impl Session {
    /// Client → lldb-dap, until the client leaves (then lldb-dap's input
    /// closes and it ends).
    fn from_client(&self, mut input: Box<dyn BufRead + Send>) {
        loop {
            match read_message(&mut input) {
                Ok(Some(message)) => {
                    if let Some(to_lldb_dap) = self.from_client_message(message) {
                        self.to_lldb_dap(&to_lldb_dap);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("reading the client's messages: {e}");
                    self.to_client(&output_event("console", &format!("retrace-dap: a message from the client could not be read ({e}); the session ends\n")));
                    break;
                }
            }
        }
        self.lldb_dap.lock().unwrap().take();
    }

    /// What to pass to lldb-dap for a client message (`None`: answered here).
    fn from_client_message(&self, message: Message) -> Option<Message> {
        if message.kind() != Some("request") {
            return Some(message);
        }
        let seq = message.seq().unwrap_or(0);
        let arguments = message.arguments().cloned().unwrap_or(Value::Null);
        match message.command() {
            Some("launch") => match self.launch(seq, &arguments) {
                Ok(attach) => Some(attach),
                Err(reason) => {
                    self.to_client(&error_response(seq, "launch", &reason));
                    None
                }
            },
            Some("attach") => {
                let mut arguments = object(arguments);
                self.remember_escape(&arguments);
                self.load_shim(&mut arguments);
                Some(request(seq, "attach", Value::Object(arguments)))
            }
            Some("stepBack") => {
                let verb = if arguments.get("granularity").and_then(Value::as_str) == Some("instruction") { "reverse-stepi" } else { "reverse-next" };
                Some(self.shim_command(seq, "stepBack", verb, &arguments))
            }
            Some("reverseContinue") => {
                self.state.lock().unwrap().reversed = true;
                Some(self.shim_command(seq, "reverseContinue", "reverse-continue", &arguments))
            }
            Some("continue" | "next" | "stepIn" | "stepOut") => {
                if std::mem::take(&mut self.state.lock().unwrap().reversed) {
                    // Forwards again first, then the request (lldb-dap
                    // handles requests in order).
                    let line = format!("{}retrace forward-direction", self.state.lock().unwrap().escape);
                    self.to_lldb_dap(&self.own_request("evaluate", json!({"expression": line, "context": "repl"}), |_| Pending::Quiet { what: line.clone() }));
                }
                Some(message)
            }
            Some("evaluate") => {
                // A reverse continue typed in the console.
                let typed = arguments.get("expression").and_then(Value::as_str).unwrap_or("");
                let words: Vec<&str> = typed.split_whitespace().collect();
                if words.iter().any(|w| *w == "-R" || *w == "--reverse" || *w == "reverse-continue") {
                    self.state.lock().unwrap().reversed = true;
                } else if words.iter().any(|w| *w == "-F" || *w == "--forward" || *w == "forward-direction") {
                    self.state.lock().unwrap().reversed = false;
                }
                Some(message)
            }
            Some("configurationDone") => {
                let mut state = self.state.lock().unwrap();
                if state.configuring == Configuring::Launched {
                    state.configuring = Configuring::Finishing(seq);
                }
                Some(message)
            }
            Some("disconnect") => {
                let mut arguments = object(arguments);
                let mut state = self.state.lock().unwrap();
                if state.stub.is_none() {
                    return Some(message);
                }
                // Started here: ending the session ends the program, unless
                // the client says otherwise.
                let terminate = *arguments.entry("terminateDebuggee").or_insert(Value::Bool(true)) != Value::Bool(false);
                state.disconnecting = Some((seq, terminate));
                Some(request(seq, "disconnect", Value::Object(arguments)))
            }
            _ => Some(message),
        }
    }

    /// `launch`: starts the stub, and answers with lldb-dap's `attach` to it.
    fn launch(&self, seq: i64, arguments: &Value) -> Result<Message, String> {
        let mut arguments = object(arguments.clone());
        let given = arguments.clone();
        let text = |key: &str| given.get(key).and_then(Value::as_str).map(str::to_string);
        let cwd = text("cwd").map(PathBuf::from);
        let run = match text("replay") {
            Some(trace_json) => {
                let trace_json = relative_to(cwd.as_deref(), Path::new(&trace_json));
                // A saved trace is untrusted input, read inside its folder
                // unless the configuration says `"allowOutsideBundle": true`.
                let reach = Reach::allowing_outside(given.get("allowOutsideBundle").and_then(Value::as_bool) == Some(true));
                let program = match text("program") {
                    Some(program) => relative_to(cwd.as_deref(), Path::new(&program)),
                    None => bundle_program(&trace_json, reach)?,
                };
                arguments.insert("program".into(), Value::String(program.to_string_lossy().into_owned()));
                StubRun::Replay { trace_json, reach }
            }
            None => {
                let program = text("program").ok_or("launch needs `program` (or `replay`: a saved trace's trace.json)")?;
                let program = relative_to(cwd.as_deref(), Path::new(&program));
                // lldb-dap reads it for the symbols: the same file.
                arguments.insert("program".into(), Value::String(program.to_string_lossy().into_owned()));
                let recorder = match text("record").as_deref().unwrap_or("auto") {
                    "auto" => {
                        let intel_pt = crate::cli::record::intel_pt_here().map(|_| ()).map_err(|e| e.to_string());
                        let (recorder, why) = best_recorder(intel_pt, retrace_collector::valgrind::availability());
                        self.to_client(&output_event("console", &format!("retrace-dap: recording with {} ({why}; \"record\" in the launch configuration picks another)\n", recorder.name())));
                        recorder
                    }
                    "valgrind" => Recorder::Valgrind,
                    "full" => Recorder::Ptrace("full"),
                    "branch" => Recorder::Ptrace("branch"),
                    other => return Err(format!("`record` is \"auto\" (the default), \"valgrind\", \"full\" or \"branch\", not {other:?}")),
                };
                let args = match arguments.get("args") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(args)) => args.iter().map(|a| a.as_str().map(OsString::from).ok_or("`args` must be strings")).collect::<Result<_, _>>()?,
                    Some(_) => return Err("`args` must be an array of strings".to_string()),
                };
                match recorder {
                    Recorder::Ptrace(mode) => StubRun::Record { mode: mode.to_string(), program, args },
                    whole_run => {
                        let env = environment(arguments.get("env"))?;
                        StubRun::Replay { trace_json: self.record_whole_run(whole_run, &program, &args, cwd.as_deref(), &env)?, reach: Reach::Inside }
                    }
                }
            }
        };
        let environment = StubEnvironment { cwd, env: environment(arguments.get("env"))? };
        let client = self.client_writer();
        let stub_path = self.config.stub.clone();
        let stub = self
            .spawner
            .run(move || {
                StubProcess::start(&stub_path, &run, &environment, move |category, text| {
                    if let Ok(mut out) = client.lock() {
                        let _ = write_message(&mut *out, &output_event(category, &text));
                    }
                })
            })
            .map_err(|e| match e {
                StubError::Refused(said) if said.is_empty() => "retrace-stub ended without saying why".to_string(),
                StubError::Refused(said) => said,
                e => e.to_string(),
            })?;
        for key in ["args", "env", "record", "replay", "allowOutsideBundle", "launchCommands", "runInTerminal", "console", "disableASLR", "shellExpandArguments", "detachOnError"] {
            arguments.remove(key);
        }
        arguments.insert("gdb-remote-port".into(), json!(stub.port));
        arguments.insert("gdb-remote-hostname".into(), json!("127.0.0.1"));
        self.remember_escape(&arguments);
        self.load_shim(&mut arguments);
        let mut state = self.state.lock().unwrap();
        state.stub = Some(stub);
        state.configuring = Configuring::Launched;
        state.renamed.insert(seq, "launch".to_string());
        Ok(request(seq, "attach", Value::Object(arguments)))
    }

    /// A recorder that runs the program to its end (Valgrind with full
    /// state: `retrace record --full-state`; Intel PT: `retrace record
    /// --backend intel-pt`) into a bundle of its own in the temporary
    /// directory, its output shown as the program's; returns the bundle's
    /// trace.json, which the session then replays.
    fn record_whole_run(&self, recorder: Recorder, program: &Path, args: &[OsString], cwd: Option<&Path>, env: &[(OsString, OsString)]) -> Result<PathBuf, String> {
        static RECORDINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let bundle = std::env::temp_dir().join(format!("retrace-dap-{}-{}", std::process::id(), RECORDINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        // (Not an earlier session's bundle, should a pid come again.)
        let _ = std::fs::remove_dir_all(&bundle);
        let how: &[&str] = if recorder == Recorder::IntelPt { &["--backend", "intel-pt"] } else { &["--full-state"] };
        let mut command = std::process::Command::new(&self.config.recorder);
        command.arg("record").args(how).args(["--force", "-o"]).arg(&bundle).arg("--").arg(program).args(args).envs(env.iter().map(|(k, v)| (k, v))).stdin(std::process::Stdio::null());
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let out = command.output().map_err(|e| format!("running {}: {e}", self.config.recorder.display()))?;
        let trace_json = bundle.join("trace.json");
        let client = self.client_writer();
        if let Ok(mut client) = client.lock() {
            let _ = write_message(&mut *client, &output_event("stdout", &String::from_utf8_lossy(&out.stdout)));
            let said = String::from_utf8_lossy(&out.stderr);
            let _ = write_message(&mut *client, &output_event("console", &format!("{said}retrace-dap: recorded with {} into {} (retrace replay {} debugs it again)\n", recorder.name(), bundle.display(), bundle.display())));
        }
        if !trace_json.is_file() {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = if said.trim().is_empty() { format!("retrace record ended ({}) without a bundle or a word", out.status) } else { said.trim().to_string() };
            return Err(format!("recording with {} failed: {said}", recorder.name()));
        }
        Ok(trace_json)
    }

    /// Puts `command script import SHIM` first in `initCommands`.
    fn load_shim(&self, arguments: &mut Map<String, Value>) {
        let import = Value::String(format!("command script import {}", quoted(&self.config.shim)));
        match arguments.get_mut("initCommands") {
            Some(Value::Array(commands)) => commands.insert(0, import),
            _ => {
                arguments.insert("initCommands".into(), Value::Array(vec![import]));
            }
        }
    }

    fn remember_escape(&self, arguments: &Map<String, Value>) {
        if let Some(escape) = arguments.get("commandEscapePrefix").and_then(Value::as_str) {
            self.state.lock().unwrap().escape = escape.to_string();
        }
    }

    /// An `evaluate` of `retrace VERB --tid THREAD` standing for the
    /// client's request `seq`.
    fn shim_command(&self, seq: i64, command: &str, verb: &str, arguments: &Value) -> Message {
        let state = self.state.lock().unwrap();
        let mut line = format!("{}retrace {verb}", state.escape);
        if let Some(thread) = arguments.get("threadId").and_then(Value::as_i64) {
            line += &format!(" --tid {thread}");
        }
        drop(state);
        tracing::debug!("{command} (request {seq}) as `{line}`");
        self.own_request("evaluate", json!({"expression": line, "context": "repl"}), |_| Pending::Answer { request_seq: seq, command: command.to_string() })
    }

    /// A request of this adapter's own to lldb-dap, with what its response answers.
    fn own_request(&self, command: &str, arguments: Value, pending: impl FnOnce(i64) -> Pending) -> Message {
        let mut state = self.state.lock().unwrap();
        let own = state.next_seq;
        state.next_seq += 1;
        state.pending.insert(own, pending(own));
        request(own, command, arguments)
    }

    /// lldb-dap → client, until lldb-dap ends.
    fn from_lldb_dap(&self, mut input: BufReader<std::process::ChildStdout>) -> Result<(), DapError> {
        loop {
            let message = match read_message(&mut input) {
                Ok(Some(message)) => message,
                Ok(None) => return Ok(()),
                Err(e) => return Err(DapError::FromLldbDap(e)),
            };
            if let Some(message) = self.from_lldb_dap_message(message) {
                self.to_client(&message);
            }
        }
    }

    /// What to pass to the client for a message of lldb-dap's (`None`: nothing).
    fn from_lldb_dap_message(&self, message: Message) -> Option<Message> {
        if message.kind() == Some("event") {
            return self.launch_event(message);
        }
        if message.kind() != Some("response") {
            return Some(message);
        }
        let request_seq = message.request_seq().unwrap_or(-1);
        let mut state = self.state.lock().unwrap();
        if state.configuring == Configuring::Finishing(request_seq) {
            state.configuring = Configuring::Done;
        }
        match state.pending.remove(&request_seq) {
            Some(Pending::Answer { request_seq, command }) => {
                let answered = answer(request_seq, &command, &message);
                if command == "stepBack" && success(&answered) == Some(true) {
                    // It lands by a forward resume: the direction is forward after it.
                    state.reversed = false;
                }
                return Some(answered);
            }
            Some(Pending::Quiet { what }) => {
                let succeeded = success(&message) == Some(true);
                return (!succeeded).then(|| output_event("console", &format!("retrace-dap: `{what}` failed: {}\n", failure(&message))));
            }
            None => {}
        }
        let renamed = state.renamed.remove(&request_seq);
        if let Some((_, terminate)) = state.disconnecting.take_if(|(seq, _)| *seq == request_seq) {
            // Answered once what the session started is gone: the stub
            // ends by itself after lldb-dap's kill or detach.
            if let Some(mut stub) = state.stub.take() {
                drop(state);
                stub.end(std::time::Duration::from_secs(2), terminate);
            }
            return Some(message);
        }
        if success(&message) == Some(false) {
            // lldb-dap says why in `body.error.format` alone (its
            // `message` is empty): a client showing `message` would show
            // nothing. A launch's failure also says how the stub is.
            let command = renamed.clone().or_else(|| message.command().map(str::to_string)).unwrap_or_default();
            let mut reason = failure(&message);
            if renamed.is_some() {
                if let Some(stub) = state.stub.as_mut() {
                    reason = format!("{reason} ({})", stub.condition());
                }
            }
            return Some(error_response(request_seq, &command, &reason));
        }
        drop(state);
        let Some(mut json) = message.json.clone() else { return Some(message) };
        if let Some(command) = renamed {
            json["command"] = Value::String(command);
        } else if message.command() == Some("initialize") && json.get("success") == Some(&Value::Bool(true)) {
            if !json.get("body").is_some_and(Value::is_object) {
                json["body"] = json!({});
            }
            json["body"]["supportsStepBack"] = Value::Bool(true);
            // lldb-dap cannot restart an attach (every session is one to
            // it); the client then restarts by disconnect and a new launch.
            json["body"]["supportsRestartRequest"] = Value::Bool(false);
        } else {
            return Some(message);
        }
        Some(Message::new(json))
    }

    /// An event of lldb-dap's, unless it is one of the attach's that a
    /// launch does not show (see [`Configuring`]).
    fn launch_event(&self, message: Message) -> Option<Message> {
        if message.json.as_ref().is_some_and(stop_of_no_thread) {
            tracing::debug!("a stop of no thread (the attach's, reported late): not shown");
            return None;
        }
        let configuring = self.state.lock().unwrap().configuring;
        let hidden = match (configuring, message.event()) {
            (Configuring::Launched | Configuring::Finishing(_), Some("stopped")) => {
                message.json.as_ref().and_then(|j| j.pointer("/body/reason")).and_then(Value::as_str) == Some("exception")
            }
            (Configuring::Finishing(_), Some("continued")) => true,
            _ => false,
        };
        if hidden {
            tracing::debug!(event = ?message.event(), "the attach's own event: not shown for a launch");
            return None;
        }
        if configuring != Configuring::Done && message.event() == Some("process") {
            // (VS Code offers Stop for a launch, Disconnect for an attach.)
            if let Some(mut json) = message.json.clone() {
                json["body"]["startMethod"] = Value::String("launch".into());
                return Some(Message::new(json));
            }
        }
        Some(message)
    }

    fn to_client(&self, message: &Message) {
        let mut out = self.client.lock().unwrap();
        if let Err(e) = write_message(&mut *out, message) {
            tracing::debug!("writing to the client: {e}");
        }
    }

    fn to_lldb_dap(&self, message: &Message) {
        if let Some(input) = self.lldb_dap.lock().unwrap().as_mut() {
            if let Err(e) = write_message(input, message) {
                tracing::debug!("writing to lldb-dap: {e}");
            }
        }
    }

    /// The client's output, for another thread (the stub's log).
    fn client_writer(&self) -> Arc<Mutex<Box<dyn Write + Send>>> {
        Arc::clone(&self.client)
    }
}

/// The client's answer to its request, from lldb-dap's answer to the
/// `evaluate` standing for it.
fn answer(request_seq: i64, command: &str, evaluated: &Message) -> Message {
    if success(evaluated) == Some(true) {
        return Message::new(json!({"seq": 0, "type": "response", "request_seq": request_seq, "command": command, "success": true}));
    }
    error_response(request_seq, command, &failure(evaluated))
}

/// A response's `success` (`None`: not said).
fn success(response: &Message) -> Option<bool> {
    response.json.as_ref()?.get("success")?.as_bool()
}

/// Why a request of lldb-dap's failed, as it said (`body.error.format`,
/// else `message`), never empty.
fn failure(response: &Message) -> String {
    let said = |pointer: &str| response.json.as_ref().and_then(|j| j.pointer(pointer)).and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty());
    match said("/body/error/format").or_else(|| said("/message")) {
        Some(reason) => reason.to_string(),
        None => format!("lldb-dap's `{}` failed without saying why", response.command().unwrap_or("request")),
    }
}

/// What records a launched program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorder {
    /// The whole run with Intel PT (control flow), then its replay.
    IntelPt,
    /// The whole run under Valgrind with full state, then its replay.
    Valgrind,
    /// retrace-stub records it live under ptrace (`full` or `branch`).
    Ptrace(&'static str),
}

impl Recorder {
    /// As the Debug Console names it.
    fn name(self) -> &'static str {
        match self {
            Recorder::IntelPt => "Intel PT (control flow: the past shows where the program was, not its values)",
            Recorder::Valgrind => "Valgrind, full state",
            Recorder::Ptrace("branch") => "ptrace, control flow",
            Recorder::Ptrace(_) => "ptrace, full state (a stop per instruction: slow)",
        }
    }
}

/// `"record": "auto"`: the best recorder here, and why — Intel PT where
/// it records (`intel_pt`), else Valgrind with full state where it is
/// installed (`valgrind`), else the stub's ptrace recording of full state.
fn best_recorder(intel_pt: Result<(), String>, valgrind: Result<(), String>) -> (Recorder, String) {
    match (intel_pt, valgrind) {
        (Ok(()), _) => (Recorder::IntelPt, "the CPU's Intel PT records here".into()),
        (Err(no_pt), Ok(())) => (Recorder::Valgrind, format!("no Intel PT: {no_pt}")),
        (Err(no_pt), Err(no_valgrind)) => (Recorder::Ptrace("full"), format!("no Intel PT: {no_pt}; {no_valgrind}")),
    }
}

fn request(seq: i64, command: &str, arguments: Value) -> Message {
    Message::new(json!({"seq": seq, "type": "request", "command": command, "arguments": arguments}))
}

/// A failed response to the client's request: `reason` as its `message`
/// and its `body.error` (what clients show), never empty.
fn error_response(request_seq: i64, command: &str, reason: &str) -> Message {
    let reason = match reason.trim() {
        "" => format!("`{command}` failed without a reason (retrace-dap; RUST_LOG=debug shows more)"),
        reason => reason.to_string(),
    };
    Message::new(json!({
        "seq": 0, "type": "response", "request_seq": request_seq, "command": command, "success": false, "message": reason,
        "body": {"error": {"id": 1, "format": reason, "showUser": true}}
    }))
}

fn output_event(category: &str, text: &str) -> Message {
    Message::new(json!({"seq": 0, "type": "event", "event": "output", "body": {"category": category, "output": text}}))
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// `path` as LLDB's command line reads it: in double quotes.
fn quoted(path: &Path) -> String {
    let text = path.to_string_lossy();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn relative_to(cwd: Option<&Path>, path: &Path) -> PathBuf {
    match cwd {
        Some(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    }
}

/// `env` as lldb-dap takes it: `{"K": "V"}` or `["K=V"]`.
fn environment(env: Option<&Value>) -> Result<Vec<(OsString, OsString)>, String> {
    let pair = |text: &str| match text.split_once('=') {
        Some((k, v)) => Ok((OsString::from(k), OsString::from(v))),
        None => Err(format!("`env` entry {text:?} is not NAME=VALUE")),
    };
    match env {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (OsString::from(k), OsString::from(v))).ok_or_else(|| format!("`env` value of {k} must be a string")))
            .collect(),
        Some(Value::Array(list)) => list.iter().map(|v| v.as_str().ok_or_else(|| "`env` entries must be strings".to_string()).and_then(pair)).collect(),
        Some(_) => Err("`env` must be an object or an array of NAME=VALUE strings".to_string()),
    }
}

/// The traced program of a saved trace: the first module of its first
/// process (the bundle's copy; with [`Reach::Anywhere`], else the path it
/// was traced at).
fn bundle_program(trace_json: &Path, reach: Reach) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(trace_json).map_err(|e| format!("cannot read {}: {e}", trace_json.display()))?;
    let bundle: Value = serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", trace_json.display()))?;
    let module = bundle
        .pointer("/processes/0/modules/0")
        .ok_or_else(|| format!("{} lists no module to debug: give `program`", trace_json.display()))?;
    let system_path = module.get("systemPath").and_then(Value::as_str).unwrap_or_default();
    let bundle = BundleDir::of_trace_json(trace_json, reach);
    let copy = bundle.module(module.get("file").and_then(Value::as_str), system_path).map_err(|e| {
        format!("{}: {e}: retrace reads no file outside a bundle's directory unless told; if you trust this bundle, add \"allowOutsideBundle\": true to the launch configuration", trace_json.display())
    })?;
    if copy.exists() || reach == Reach::Inside {
        return Ok(copy);
    }
    if system_path.is_empty() {
        return Err(format!("{}'s first module has no path: give `program`", trace_json.display()));
    }
    Ok(PathBuf::from(system_path))
}

/// A `stopped` event naming no thread and no reason: lldb-dap 22 reports
/// the attach's stop so when its event thread gets to it only after
/// `configurationDone` resumed the program (LLDB then lists no thread:
/// `threadId` 0). A client would show a pause at nowhere, and take it for
/// the launch's first stop (the breakpoint's follows).
fn stop_of_no_thread(json: &Value) -> bool {
    json.get("event").and_then(Value::as_str) == Some("stopped")
        && json.pointer("/body/reason").is_none()
        && json.pointer("/body/threadId").and_then(Value::as_u64).is_none_or(|tid| tid == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stop_without_thread_or_reason_is_one_of_no_thread() {
        let stray = json!({"type": "event", "event": "stopped", "body": {"allThreadsStopped": true, "preserveFocusHint": false, "threadCausedFocus": true, "threadId": 0}});
        assert!(stop_of_no_thread(&stray));
        let breakpoint = json!({"type": "event", "event": "stopped", "body": {"reason": "breakpoint", "threadId": 0}});
        assert!(!stop_of_no_thread(&breakpoint));
        let pause = json!({"type": "event", "event": "stopped", "body": {"threadId": 4242}});
        assert!(!stop_of_no_thread(&pause));
        let continued = json!({"type": "event", "event": "continued", "body": {"threadId": 0}});
        assert!(!stop_of_no_thread(&continued));
    }

    #[test]
    fn the_best_recorder_is_intel_pt_then_valgrind_then_ptrace_and_says_why() {
        let no = |why: &str| Err(why.to_string());
        assert_eq!(best_recorder(Ok(()), Ok(())).0, Recorder::IntelPt);
        assert_eq!(best_recorder(Ok(()), no("valgrind is not installed")).0, Recorder::IntelPt);
        assert_eq!(best_recorder(no("no PMU"), Ok(())), (Recorder::Valgrind, "no Intel PT: no PMU".to_string()));
        assert_eq!(best_recorder(no("no PMU"), no("valgrind is not installed")), (Recorder::Ptrace("full"), "no Intel PT: no PMU; valgrind is not installed".to_string()));
    }

    #[test]
    fn a_failure_never_reaches_the_client_without_a_reason() {
        // lldb-dap 22's failed attach: the reason in body.error.format only.
        let lldb_dap = Message::new(json!({"type": "response", "command": "attach", "request_seq": 3, "success": false, "body": {"error": {"format": "failed to connect"}}}));
        assert_eq!(failure(&lldb_dap), "failed to connect");
        let silent = Message::new(json!({"type": "response", "command": "attach", "request_seq": 3, "success": false, "message": " "}));
        assert_eq!(failure(&silent), "lldb-dap's `attach` failed without saying why");
        let response = error_response(3, "launch", "");
        let json = response.json.unwrap();
        assert!(!json["message"].as_str().unwrap().is_empty());
        assert_eq!(json["message"], json["body"]["error"]["format"]);
    }
}
