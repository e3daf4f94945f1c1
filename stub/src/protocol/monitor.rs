//! The `monitor` commands (`qRcmd`: GDB's `monitor …`, LLDB's `process
//! plugin packet monitor …`), read and answered in words: `trace …` (a
//! thread's trace as hex, the CPU, the recorder's status), and the history
//! commands `record status`, `goto` and `history` over the inferior's typed
//! history capability ([`HistoryOps`]).

use std::fmt::Write as _;

use crate::inferior::frames::FrameStep;
use crate::inferior::{tracing_of, GotoStop, GotoTarget, HistoryOps, HistoryRequest, HistorySource, HistoryStatus, Inferior, TraceStatus};

/// A `monitor` command of a target with a history (`--record`, `--replay`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryCommand {
    /// `record status [--json]`.
    Status {
        /// As JSON, for scripts.
        json: bool,
    },
    /// `goto begin|end|ID [TID] [--hold]` (also `record goto …`).
    Goto {
        /// Where.
        target: GotoTarget,
        /// The arming holds through single steps, and the next continue
        /// uses it up ([`crate::inferior::Armed::hold`]).
        hold: bool,
    },
    /// `history [TID] [--before ID] [--max N]`: thread TID's instructions
    /// before its instruction ID (default: the thread and instruction the
    /// debugger stands at) in that frame, newest first
    /// ([`crate::inferior::frames::frame_history`]).
    History {
        /// The thread (default: the one standing at the position).
        tid: Option<u64>,
        /// The instruction id to look back from (default: the position).
        before: Option<u64>,
        /// At most this many lines.
        max: usize,
        /// `--within START-END[,START-END…]` (hex): the run of the frame's
        /// instructions inside these ranges just before the point is listed
        /// as its earliest instruction only
        /// ([`crate::inferior::state_log::StateLog::frame_history`]).
        within: Vec<std::ops::Range<u64>>,
        /// `--stops ADDR[,ADDR…]` (hex): each callee listed says the latest
        /// of its instructions (its own callees' included) at one of these
        /// addresses, if any — where a debugger passing over the callee
        /// backwards would stop at a breakpoint.
        stops: Vec<u64>,
    },
}

/// `monitor history`'s line limit when none is given.
pub const HISTORY_LINES: usize = 4096;

impl HistoryCommand {
    /// Reads a `monitor` command; the error says what is understood.
    pub fn parse(command: &str) -> Result<Self, String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["record", "status"] => Ok(HistoryCommand::Status { json: false }),
            ["record", "status", "--json"] => Ok(HistoryCommand::Status { json: true }),
            ["goto", rest @ ..] | ["record", "goto", rest @ ..] => {
                let hold = rest.last() == Some(&"--hold");
                let rest = if hold { &rest[..rest.len() - 1] } else { rest };
                parse_goto(rest).map(|target| HistoryCommand::Goto { target, hold })
            }
            ["history", rest @ ..] => Self::parse_history(rest),
            _ => Err(format!(
                "unknown monitor command `{command}`; try `record status [--json]`, `goto begin|end|ID [TID] [--hold]`, `history [TID] [--before ID] [--max N] [--within RANGES]`, `trace data TID` or `trace cpuinfo`"
            )),
        }
    }
}

impl HistoryCommand {
    fn parse_history(args: &[&str]) -> Result<Self, String> {
        const USAGE: &str = "usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]";
        let (mut tid, mut before, mut max, mut within, mut stops) = (None, None, HISTORY_LINES, Vec::new(), Vec::new());
        let mut args = args.iter();
        while let Some(&arg) = args.next() {
            let mut number = |what: &str| -> Result<u64, String> {
                let value = args.next().ok_or_else(|| format!("{arg} needs {what}; {USAGE}"))?;
                value.parse::<u64>().map_err(|_| format!("`{value}` is not {what}"))
            };
            match arg {
                "--before" => before = Some(number("an instruction id")?),
                "--max" => max = usize::try_from(number("a line count")?).unwrap_or(usize::MAX),
                "--within" => within = parse_ranges(args.next().ok_or_else(|| format!("--within needs address ranges; {USAGE}"))?)?,
                "--stops" => stops = parse_addresses(args.next().ok_or_else(|| format!("--stops needs addresses; {USAGE}"))?)?,
                _ if tid.is_none() && !arg.starts_with('-') => tid = Some(arg.parse::<u64>().map_err(|_| format!("`{arg}` is not a thread id; {USAGE}"))?),
                _ => return Err(USAGE.into()),
            }
        }
        stops.sort_unstable();
        stops.dedup();
        Ok(HistoryCommand::History { tid, before, max, within, stops })
    }
}

/// `ADDR[,ADDR…]` in hex (`0x` optional).
fn parse_addresses(text: &str) -> Result<Vec<u64>, String> {
    text.split(',').map(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("`{t}` is not a hex address"))).collect()
}

/// `START-END[,START-END…]` in hex (`0x` optional): address ranges, END excluded.
fn parse_ranges(text: &str) -> Result<Vec<std::ops::Range<u64>>, String> {
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("`{t}` is not a hex address"));
    text.split(',')
        .map(|range| {
            let (start, end) = range.split_once('-').ok_or_else(|| format!("`{range}` is not START-END"))?;
            let (start, end) = (hex(start)?, hex(end)?);
            if start >= end {
                return Err(format!("`{range}` is empty"));
            }
            Ok(start..end)
        })
        .collect()
}

/// `goto`'s arguments.
fn parse_goto(args: &[&str]) -> Result<GotoTarget, String> {
    {
        match args {
            ["begin"] => Ok(GotoTarget::Begin),
            ["end"] => Ok(GotoTarget::End),
            [id] | [id, _] => {
                let id = id.parse::<u64>().map_err(|_| format!("`{id}` is not an instruction id (a number, `begin` or `end`)"))?;
                let tid = match args.get(1) {
                    Some(tid) => Some(tid.parse::<u64>().map_err(|_| format!("`{tid}` is not a thread id"))?),
                    None => None,
                };
                Ok(GotoTarget::Instruction { id, tid })
            }
            _ => Err("usage: goto begin|end|ID [TID] [--hold]".into()),
        }
    }
}

/// The replies to a `qRcmd` (`monitor …`) packet that is a `trace …`
/// command (see [`trace_command`]), answered here as the trace packets are: the
/// text in `O` packets of up to 2 KiB, then `OK`. `None`: another packet.
pub(crate) fn trace_packet(body: &[u8], target: &mut impl Inferior) -> Option<Vec<Vec<u8>>> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let command = body.strip_prefix(b"qRcmd,")?;
    let command: Vec<u8> = command.chunks(2).map(|pair| std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok())).collect::<Option<_>>()?;
    let text = match trace_command(std::str::from_utf8(&command).ok()?, target)? {
        Ok(text) => text,
        Err(reason) => format!("error: {reason}\n"),
    };
    let mut replies: Vec<Vec<u8>> = text
        .as_bytes()
        .chunks(2048)
        .map(|chunk| std::iter::once(b'O').chain(chunk.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])).collect())
        .collect();
    replies.push(b"OK".to_vec());
    Some(replies)
}

/// The `monitor trace …` commands: what `jLLDBTraceGetBinaryData` returns,
/// as text a `qRcmd` reply can carry (LLDB's `process plugin packet send`
/// prints a reply as a C string, so a client script cannot fetch binary
/// data through it): `trace data TID` is the thread's `iptTrace` bytes in
/// hex, `trace cpuinfo` the `procfsCpuInfo` text. `None`: not such a
/// command.
fn trace_command(command: &str, target: &mut impl Inferior) -> Option<Result<String, String>> {
    const USAGE: &str = "usage: trace data TID | trace cpuinfo | trace status [--json] | trace recorder auto|branch|step|intel-pt";
    let words: Vec<&str> = command.split_whitespace().collect();
    let (kind, tid) = match words.as_slice() {
        ["trace", "data", tid] => match tid.parse::<u64>() {
            Ok(tid) => ("iptTrace", Some(tid)),
            Err(_) => return Some(Err(format!("`{tid}` is not a thread id; {USAGE}"))),
        },
        ["trace", "cpuinfo"] => ("procfsCpuInfo", None),
        ["trace", "status"] => return Some(tracing_of(target).and_then(|tracing| tracing.trace_status()).map(|status| status_text(&status)).map_err(String::from)),
        ["trace", "status", "--json"] => {
            return Some(tracing_of(target).and_then(|tracing| tracing.trace_status()).map(|status| serde_json::to_string(&status).expect("plain data") + "\n").map_err(String::from))
        }
        ["trace", "recorder", name] => {
            return Some(tracing_of(target).and_then(|tracing| tracing.trace_recorder(name).and_then(|()| tracing.trace_status())).map(|status| status_text(&status)).map_err(String::from))
        }
        ["trace", ..] => return Some(Err(USAGE.into())),
        _ => return None,
    };
    let request = serde_json::json!({"type": super::lldb_trace::TRACE_TYPE, "kind": kind, "tid": tid, "cpuId": null}).to_string();
    Some(super::lldb_trace::binary_data(request.as_bytes(), target).map(|bytes| match tid {
        Some(_) => {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut text: Vec<u8> = bytes.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]).collect();
            text.push(b'\n');
            String::from_utf8(text).expect("hex digits")
        }
        None => String::from_utf8_lossy(&bytes).into_owned(),
    }))
}

/// `monitor trace status` as text.
fn status_text(status: &TraceStatus) -> String {
    let mut text = format!("recorder: {}\n", status.recorder);
    text.push_str(&format!("since tracing started: {} single steps, {} block runs\n", status.single_steps, status.block_runs));
    for thread in &status.threads {
        let instructions = thread.instructions.map_or_else(|| "instructions not counted (the CPU's trace)".to_string(), |n| format!("{n} instructions recorded"));
        text.push_str(&format!("thread {}: {}-byte trace, {instructions}\n", thread.tid, thread.size));
    }
    if status.threads.is_empty() {
        text.push_str("no thread is traced\n");
    }
    text
}

/// Answers a `monitor` command: the text to show, or why not.
pub fn answer(target: &mut impl Inferior, command: &str) -> Result<String, String> {
    if let Some(answer) = trace_command(command, target) {
        return answer;
    }
    let records_when_asked = target.records_history_when_asked();
    let Some(mut history) = target.support_history() else {
        return Err(match records_when_asked {
            true => format!("unknown monitor command `{command}` (the history commands need retrace-stub --record)"),
            false => format!("unknown monitor command `{command}`: this target has none"),
        });
    };
    history_command(&mut *history, command)
}

/// A history command over a history.
fn history_command(history: &mut dyn HistoryOps, command: &str) -> Result<String, String> {
    Ok(match HistoryCommand::parse(command)? {
        HistoryCommand::Status { json: true } => status_json(&history.history_status()),
        HistoryCommand::Status { json: false } => history_status_text(&history.history_status()),
        HistoryCommand::Goto { target, hold } => goto_text(history.goto(target, hold)?),
        HistoryCommand::History { tid, before, max, within, stops } => {
            let listing = history.history(&HistoryRequest { tid, before, max, within, stops })?;
            history_text(listing.tid, listing.id, &listing.steps)
        }
    })
}

/// `monitor record status --json`.
fn status_json(status: &HistoryStatus) -> String {
    let threads: Vec<serde_json::Value> = status.threads.iter().map(|(tid, n)| serde_json::json!({"tid": tid, "instructions": n})).collect();
    let here = &status.position;
    let value = match &status.source {
        HistorySource::SavedTrace { bundle, trace_bytes, full_state } => serde_json::json!({
            "mode": "replay",
            "fullState": full_state,
            "trace": bundle.display().to_string(),
            "instructions": status.instructions,
            "traceBytes": trace_bytes,
            "threads": threads,
            "position": {"tid": here.tid, "id": here.id, "pc": here.pc.unwrap_or(0), "index": here.index},
        }),
        HistorySource::Recording { mode, bytes, watchpoints_refused } => serde_json::json!({
            "mode": mode,
            "instructions": status.instructions,
            "bytes": bytes,
            "threads": threads,
            "position": {"tid": here.tid, "id": here.id, "index": here.index, "present": here.present},
            "watchpoints": match watchpoints_refused {
                None => serde_json::json!({"refused": false}),
                Some(why) => serde_json::json!({"refused": true, "why": why}),
            },
        }),
    };
    format!("{value}\n")
}

/// `monitor record status`.
fn history_status_text(status: &HistoryStatus) -> String {
    let mut text = String::new();
    let (len, threads) = (status.instructions, status.threads.len());
    match &status.source {
        HistorySource::SavedTrace { bundle, trace_bytes, full_state: false } => {
            let _ = writeln!(text, "Replaying {} (control flow only: registers other than the PC and writable memory are unavailable).", bundle.display());
            let _ = writeln!(text, "Recorded: {len} instructions in {threads} thread(s), {trace_bytes} bytes of trace.");
        }
        HistorySource::SavedTrace { bundle, trace_bytes, full_state: true } => {
            let _ = writeln!(text, "Replaying {} (full state: every register and byte the recording holds is served at every position; what it does not hold reads as unavailable).", bundle.display());
            let _ = writeln!(text, "Recorded: {len} instructions in {threads} thread(s), {trace_bytes} bytes of trace.");
        }
        HistorySource::Recording { mode, bytes, watchpoints_refused } => {
            let _ = writeln!(text, "Recording ({mode}): {len} instructions in {threads} thread(s), {bytes} bytes of history.");
            if let Some(why) = watchpoints_refused {
                let _ = writeln!(text, "Watchpoints: {why}.");
            }
        }
    }
    let here = &status.position;
    if here.present {
        let _ = writeln!(text, "Position: the present (the live process).");
    } else {
        let _ = writeln!(
            text,
            "Position: instruction {} of thread {} (pc {:#x}); {} of {len} in the history.",
            here.id,
            here.tid,
            here.pc.unwrap_or(0),
            here.index + 1
        );
    }
    text
}

/// `monitor goto`'s answer.
fn goto_text(stop: GotoStop) -> String {
    match stop.pc {
        Some(pc) => format!("The next resume stops at instruction {} of thread {} (pc {pc:#x}).\n", stop.id, stop.tid),
        None => "The next resume stops at the present (the end of the history).\n".to_string(),
    }
}

/// [`frame_history`](crate::inferior::frames::frame_history)'s answer as `monitor history` prints it: a line
/// `thread TID instruction ID` for the starting point, then one line per
/// instruction, `ID PC DEPTH` (PC in hex), followed for a callee that ran
/// one of the addresses asked about by `stop ID PC`.
pub fn history_text(tid: u64, id: u64, steps: &[FrameStep]) -> String {
    let mut text = format!("thread {tid} instruction {id}\n");
    for step in steps {
        let _ = write!(text, "{} {:#x} {}", step.id, step.pc, step.depth);
        if let Some((id, pc)) = step.stop {
            let _ = write!(text, " stop {id} {pc:#x}");
        }
        text.push('\n');
    }
    text
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_commands_parse_and_say_what_is_understood() {
        assert_eq!(HistoryCommand::parse("record status"), Ok(HistoryCommand::Status { json: false }));
        assert_eq!(HistoryCommand::parse(" record  status --json"), Ok(HistoryCommand::Status { json: true }));
        assert_eq!(HistoryCommand::parse("goto begin"), Ok(HistoryCommand::Goto { target: GotoTarget::Begin, hold: false }));
        assert_eq!(HistoryCommand::parse("record goto end"), Ok(HistoryCommand::Goto { target: GotoTarget::End, hold: false }));
        assert_eq!(HistoryCommand::parse("goto 120"), Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 120, tid: None }, hold: false }));
        assert_eq!(HistoryCommand::parse("goto 7 4242"), Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 7, tid: Some(4242) }, hold: false }));
        assert_eq!(HistoryCommand::parse("goto x"), Err("`x` is not an instruction id (a number, `begin` or `end`)".into()));
        assert_eq!(HistoryCommand::parse("goto 1 t"), Err("`t` is not a thread id".into()));
        assert_eq!(HistoryCommand::parse("goto"), Err("usage: goto begin|end|ID [TID] [--hold]".into()));
        assert_eq!(
            HistoryCommand::parse("goto 7 4242 --hold"),
            Ok(HistoryCommand::Goto { target: GotoTarget::Instruction { id: 7, tid: Some(4242) }, hold: true })
        );
        assert_eq!(HistoryCommand::parse("history"), Ok(HistoryCommand::History { tid: None, before: None, max: HISTORY_LINES, within: vec![], stops: vec![] }));
        assert_eq!(HistoryCommand::parse("history 4242 --before 17 --max 3"), Ok(HistoryCommand::History { tid: Some(4242), before: Some(17), max: 3, within: vec![], stops: vec![] }));
        assert_eq!(
            HistoryCommand::parse("history --within 0x10-0x20,30-38"),
            Ok(HistoryCommand::History { tid: None, before: None, max: HISTORY_LINES, within: vec![0x10..0x20, 0x30..0x38], stops: vec![] })
        );
        assert_eq!(HistoryCommand::parse("history --within 20-10"), Err("`20-10` is empty".into()));
        assert_eq!(HistoryCommand::parse("history --within x-1"), Err("`x` is not a hex address".into()));
        assert_eq!(
            HistoryCommand::parse("history 7 --stops 0x20,10,20"),
            Ok(HistoryCommand::History { tid: Some(7), before: None, max: HISTORY_LINES, within: vec![], stops: vec![0x10, 0x20] })
        );
        assert_eq!(HistoryCommand::parse("history --stops 1,y"), Err("`y` is not a hex address".into()));
        assert_eq!(
            HistoryCommand::parse("history --max"),
            Err("--max needs a line count; usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]".into())
        );
        assert_eq!(HistoryCommand::parse("history --before x"), Err("`x` is not an instruction id".into()));
        assert_eq!(
            HistoryCommand::parse("history 1 2"),
            Err("usage: history [TID] [--before ID] [--max N] [--within START-END[,START-END...]] [--stops ADDR[,ADDR...]]".into())
        );
        assert!(HistoryCommand::parse("reverse").unwrap_err().starts_with("unknown monitor command `reverse`"));
    }

    /// A history that answers what it was given, and keeps the arming.
    struct Answers {
        status: HistoryStatus,
        armed: Option<(GotoTarget, bool)>,
    }

    impl HistoryOps for Answers {
        fn history_status(&self) -> HistoryStatus {
            self.status.clone()
        }
        fn goto(&mut self, target: GotoTarget, hold: bool) -> Result<GotoStop, crate::inferior::InferiorError> {
            self.armed = Some((target, hold));
            match target {
                GotoTarget::End => Ok(GotoStop { tid: 7, id: 40, pc: None }),
                _ => Ok(GotoStop { tid: 7, id: 3, pc: Some(0x401000) }),
            }
        }
        fn history(&self, request: &HistoryRequest) -> Result<crate::inferior::HistoryListing, crate::inferior::InferiorError> {
            let steps = vec![FrameStep { id: 2, pc: 0x401002, depth: 0, stop: None }, FrameStep { id: 1, pc: 0x401010, depth: 1, stop: Some((0, 0x401020)) }];
            Ok(crate::inferior::HistoryListing { tid: request.tid.unwrap_or(7), id: 3, steps: steps.into_iter().take(request.max).collect() })
        }
    }

    fn recording(present: bool) -> Answers {
        Answers {
            status: HistoryStatus {
                source: HistorySource::Recording { mode: "branch", bytes: 512, watchpoints_refused: Some("they need --record=full") },
                instructions: 40,
                threads: vec![(7, 30), (8, 10)],
                position: crate::inferior::HistoryPosition { tid: 7, id: 3, index: 5, pc: (!present).then_some(0x401000), present },
            },
            armed: None,
        }
    }

    #[test]
    fn history_answers_are_worded_for_each_kind_of_history() {
        let mut live = recording(true);
        assert_eq!(
            history_command(&mut live, "record status").unwrap(),
            "Recording (branch): 40 instructions in 2 thread(s), 512 bytes of history.\nWatchpoints: they need --record=full.\nPosition: the present (the live process).\n"
        );
        let json: serde_json::Value = serde_json::from_str(&history_command(&mut live, "record status --json").unwrap()).unwrap();
        assert_eq!(json["mode"], "branch");
        assert_eq!(json["position"]["present"], true);
        assert_eq!(json["watchpoints"]["why"], "they need --record=full");
        assert_eq!(json["threads"][1]["instructions"], 10);
        let mut past = recording(false);
        assert!(history_command(&mut past, "record status").unwrap().ends_with("Position: instruction 3 of thread 7 (pc 0x401000); 6 of 40 in the history.\n"));
        let mut replay = recording(false);
        replay.status.source = HistorySource::SavedTrace { bundle: "/b/trace.json".into(), trace_bytes: 99, full_state: false };
        assert_eq!(
            history_command(&mut replay, "record status").unwrap(),
            "Replaying /b/trace.json (control flow only: registers other than the PC and writable memory are unavailable).\nRecorded: 40 instructions in 2 thread(s), 99 bytes of trace.\nPosition: instruction 3 of thread 7 (pc 0x401000); 6 of 40 in the history.\n"
        );
        let json: serde_json::Value = serde_json::from_str(&history_command(&mut replay, "record status --json").unwrap()).unwrap();
        assert_eq!((json["mode"].as_str(), json["traceBytes"].as_u64(), json["position"]["pc"].as_u64()), (Some("replay"), Some(99), Some(0x401000)));
        assert_eq!(history_command(&mut replay, "goto 3 --hold").unwrap(), "The next resume stops at instruction 3 of thread 7 (pc 0x401000).\n");
        assert_eq!(replay.armed, Some((GotoTarget::Instruction { id: 3, tid: None }, true)));
        assert_eq!(history_command(&mut replay, "goto end").unwrap(), "The next resume stops at the present (the end of the history).\n");
        assert_eq!(history_command(&mut replay, "history 8 --max 1").unwrap(), "thread 8 instruction 3\n2 0x401002 0\n");
        assert!(history_command(&mut replay, "rewind").unwrap_err().starts_with("unknown monitor command `rewind`"));
        replay.status.source = HistorySource::SavedTrace { bundle: "/b/trace.json".into(), trace_bytes: 99, full_state: true };
        let text = history_command(&mut replay, "record status").unwrap();
        assert!(text.starts_with("Replaying /b/trace.json (full state: every register and byte the recording holds is served"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&history_command(&mut replay, "record status --json").unwrap()).unwrap();
        assert_eq!(json["fullState"], true);
    }

    #[test]
    fn a_target_without_history_says_so_and_how_to_get_one() {
        let mut inert = crate::inferior::inert::InertTarget::new(100, &[100], vec![0; 64]);
        assert_eq!(answer(&mut inert, "record status"), Err("unknown monitor command `record status`: this target has none".into()));
    }
}
