//! LLDB's trace packets (`jLLDBTraceSupported`, `jLLDBTraceStart`,
//! `jLLDBTraceStop`, `jLLDBTraceGetState`, `jLLDBTraceGetBinaryData`),
//! answered before gdbstub, which cannot express them. JSON in, JSON or raw
//! bytes out; the recording itself is the target's ([`Inferior`]'s
//! `trace_*` methods). The schemas are LLDB 22's
//! (`TraceGDBRemotePackets.cpp`, `TraceIntelPTGDBRemotePackets.cpp`): a
//! field LLDB marks required is required here, and an optional one may be
//! absent or `null`.

use serde::Deserialize;
use serde_json::json;

use super::framing::unescape;
use crate::hex::hex;
use crate::inferior::{Inferior, TraceStart, TraceStatus};

/// The only trace type served.
const TRACE_TYPE: &str = "intel-pt";

/// `jLLDBTraceStart`'s body (generic and Intel PT fields).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartRequest {
    r#type: String,
    tids: Option<Vec<u64>>,
    ipt_trace_size: u64,
    enable_tsc: bool,
    psb_period: Option<u64>,
    process_buffer_size_limit: Option<u64>,
    per_cpu_tracing: Option<bool>,
    #[allow(dead_code)]
    disable_cgroup_tracing: Option<bool>,
}

/// `jLLDBTraceStop`'s body.
#[derive(Debug, Deserialize)]
struct StopRequest {
    r#type: String,
    tids: Option<Vec<u64>>,
}

/// `jLLDBTraceGetState`'s body.
#[derive(Debug, Deserialize)]
struct StateRequest {
    r#type: String,
}

/// `jLLDBTraceGetBinaryData`'s body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DataRequest {
    r#type: String,
    kind: String,
    tid: Option<u64>,
    cpu_id: Option<u64>,
}

/// An error reply LLDB shows as text (after `QEnableErrorStrings`).
pub(crate) fn error_reply(message: &str) -> Vec<u8> {
    format!("E01;{}", hex(message)).into_bytes()
}

fn parse<'a, T: Deserialize<'a>>(packet: &str, json: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(json).map_err(|e| format!("malformed {packet} request: {e}"))
}

fn check_type(kind: &str) -> Result<(), String> {
    if kind == TRACE_TYPE {
        Ok(())
    } else {
        Err(format!("Unsupported tracing type '{kind}'"))
    }
}

/// The reply to a trace packet (`body` as sent, escaped), or `None` when
/// it is no trace packet.
pub(crate) fn answer(body: &[u8], target: &mut impl Inferior) -> Option<Vec<u8>> {
    if body == b"jLLDBTraceSupported" {
        // Probed by lldb-server through the PMU; here the target says.
        return Some(match target.trace_state() {
            Ok(_) => json!({"description": "Intel PT, recorded in software by retrace-stub", "name": TRACE_TYPE}).to_string().into_bytes(),
            Err(_) => Vec::new(),
        });
    }
    let packets: [(&str, fn(&[u8], &mut _) -> Result<Vec<u8>, String>); 4] = [
        ("jLLDBTraceStart:", start),
        ("jLLDBTraceStop:", stop),
        ("jLLDBTraceGetState:", state),
        ("jLLDBTraceGetBinaryData:", binary_data),
    ];
    let (name, handler) = packets.iter().find(|(name, _)| body.starts_with(name.as_bytes()))?;
    let reply = match unescape(&body[name.len()..]) {
        Some(json) => handler(&json, target),
        None => Err(format!("malformed {} request: an escape is cut short", name.trim_end_matches(':'))),
    };
    Some(reply.unwrap_or_else(|message| {
        tracing::warn!(packet = name.trim_end_matches(':'), message, "trace request refused");
        error_reply(&message)
    }))
}

/// The replies to a `qRcmd` (`monitor …`) packet that is a `trace …`
/// command (see [`monitor`]), answered here as the trace packets are: the
/// text in `O` packets of up to 2 KiB, then `OK`. `None`: another packet.
pub(crate) fn monitor_packet(body: &[u8], target: &mut impl Inferior) -> Option<Vec<Vec<u8>>> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let command = body.strip_prefix(b"qRcmd,")?;
    let command: Vec<u8> = command.chunks(2).map(|pair| std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok())).collect::<Option<_>>()?;
    let text = match monitor(std::str::from_utf8(&command).ok()?, target)? {
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
fn monitor(command: &str, target: &mut impl Inferior) -> Option<Result<String, String>> {
    const USAGE: &str = "usage: trace data TID | trace cpuinfo | trace status [--json] | trace recorder auto|branch|step|intel-pt";
    let words: Vec<&str> = command.split_whitespace().collect();
    let (kind, tid) = match words.as_slice() {
        ["trace", "data", tid] => match tid.parse::<u64>() {
            Ok(tid) => ("iptTrace", Some(tid)),
            Err(_) => return Some(Err(format!("`{tid}` is not a thread id; {USAGE}"))),
        },
        ["trace", "cpuinfo"] => ("procfsCpuInfo", None),
        ["trace", "status"] => return Some(target.trace_status().map(|status| status_text(&status))),
        ["trace", "status", "--json"] => {
            return Some(target.trace_status().map(|status| serde_json::to_string(&status).expect("plain data") + "\n"))
        }
        ["trace", "recorder", name] => {
            return Some(target.trace_recorder(name).and_then(|()| target.trace_status()).map(|status| status_text(&status)))
        }
        ["trace", ..] => return Some(Err(USAGE.into())),
        _ => return None,
    };
    let request = json!({"type": TRACE_TYPE, "kind": kind, "tid": tid, "cpuId": null}).to_string();
    Some(binary_data(request.as_bytes(), target).map(|bytes| match tid {
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

fn start(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: StartRequest = parse("jLLDBTraceStart", json)?;
    check_type(&request.r#type)?;
    if request.tids.is_none() && request.per_cpu_tracing == Some(true) {
        return Err("Per-cpu tracing is not supported: retrace-stub records each thread in software. Trace the process per thread instead (process trace start without --per-cpu-tracing).".into());
    }
    target.trace_start(&TraceStart {
        threads: request.tids,
        ring_size: request.ipt_trace_size,
        process_limit: request.process_buffer_size_limit,
        psb_period: request.psb_period,
        tsc: request.enable_tsc,
    })?;
    Ok(b"OK".to_vec())
}

fn stop(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: StopRequest = parse("jLLDBTraceStop", json)?;
    check_type(&request.r#type)?;
    target.trace_stop(request.tids.as_deref())?;
    Ok(b"OK".to_vec())
}

fn state(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: StateRequest = parse("jLLDBTraceGetState", json)?;
    check_type(&request.r#type)?;
    let state = target.trace_state()?;
    let threads: Vec<_> = state
        .threads
        .iter()
        .map(|&(tid, size)| json!({"tid": tid, "binaryData": [{"kind": "iptTrace", "size": size}]}))
        .collect();
    let conversion = state.tsc_conversion.map(|c| {
        json!({"timeMult": c.time_mult, "timeShift": c.time_shift, "timeZero": c.time_zero.to_string()})
    });
    Ok(json!({
        "tracedThreads": threads,
        "processBinaryData": [{"kind": "procfsCpuInfo", "size": crate::inferior::procfs_cpu_info(&target.trace_cpu()).len()}],
        "cpus": null,
        "warnings": null,
        "tscPerfZeroConversion": conversion,
        "usingCgroupFiltering": false,
    })
    .to_string()
    .into_bytes())
}

fn binary_data(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: DataRequest = parse("jLLDBTraceGetBinaryData", json)?;
    check_type(&request.r#type)?;
    if let Some(cpu) = request.cpu_id {
        return Err(format!("No trace is kept per cpu (cpu {cpu}): retrace-stub traces each thread."));
    }
    match request.kind.as_str() {
        "iptTrace" => match request.tid {
            Some(tid) => target.trace_data(tid),
            None => Err("Trace data of kind iptTrace belongs to a thread: the request names none.".into()),
        },
        "procfsCpuInfo" => Ok(crate::inferior::procfs_cpu_info(&target.trace_cpu()).into_bytes()),
        other => Err(format!("Unsupported trace binary data kind: {other}")),
    }
}
