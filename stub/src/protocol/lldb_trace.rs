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
use crate::inferior::{tracing_of, CpuInfo, Inferior, TraceStart};

/// The only trace type served.
pub(super) const TRACE_TYPE: &str = "intel-pt";

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
        return Some(match tracing_of(target).and_then(|tracing| tracing.trace_state()) {
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

fn start(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: StartRequest = parse("jLLDBTraceStart", json)?;
    check_type(&request.r#type)?;
    if request.tids.is_none() && request.per_cpu_tracing == Some(true) {
        return Err("Per-cpu tracing is not supported: retrace-stub records each thread in software. Trace the process per thread instead (process trace start without --per-cpu-tracing).".into());
    }
    tracing_of(target)?.trace_start(&TraceStart {
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
    tracing_of(target)?.trace_stop(request.tids.as_deref())?;
    Ok(b"OK".to_vec())
}

fn state(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: StateRequest = parse("jLLDBTraceGetState", json)?;
    check_type(&request.r#type)?;
    let tracing = tracing_of(target)?;
    let state = tracing.trace_state()?;
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
        "processBinaryData": [{"kind": "procfsCpuInfo", "size": procfs_cpu_info(&tracing.trace_cpu()).len()}],
        "cpus": null,
        "warnings": null,
        "tscPerfZeroConversion": conversion,
        "usingCgroupFiltering": false,
    })
    .to_string()
    .into_bytes())
}

pub(super) fn binary_data(json: &[u8], target: &mut impl Inferior) -> Result<Vec<u8>, String> {
    let request: DataRequest = parse("jLLDBTraceGetBinaryData", json)?;
    check_type(&request.r#type)?;
    if let Some(cpu) = request.cpu_id {
        return Err(format!("No trace is kept per cpu (cpu {cpu}): retrace-stub traces each thread."));
    }
    match request.kind.as_str() {
        "iptTrace" => match request.tid {
            Some(tid) => Ok(tracing_of(target)?.trace_data(tid)?),
            None => Err("Trace data of kind iptTrace belongs to a thread: the request names none.".into()),
        },
        "procfsCpuInfo" => Ok(procfs_cpu_info(&tracing_of(target)?.trace_cpu()).into_bytes()),
        other => Err(format!("Unsupported trace binary data kind: {other}")),
    }
}

/// The `/proc/cpuinfo` text a decoder of a trace recorded on `cpu` must
/// see (LLDB reads the vendor, family, model and stepping; its parser needs
/// a line after the last of them).
pub fn procfs_cpu_info(cpu: &CpuInfo) -> String {
    format!(
        "processor\t: 0\nvendor_id\t: {}\ncpu family\t: {}\nmodel\t\t: {}\nmodel name\t: retrace trace (Intel PT format)\nstepping\t: {}\nmicrocode\t: 0x0\nflags\t\t: fpu tsc intel_pt\n\n",
        cpu.vendor, cpu.family, cpu.model, cpu.stepping
    )
}
