//! GDB's branch-trace packets, answered before gdbstub (which has none):
//! `Qbtrace:pt`, `Qbtrace:off`, `Qbtrace-conf:pt:size=`,
//! `qXfer:btrace-conf:read` and `qXfer:btrace:read` (`all`, `new`,
//! `delta`), for the thread `Hg` selected. GDB decodes the trace with its
//! own libipt and replays it itself (`record btrace pt`, then
//! `reverse-step`, `record instruction-history`…).
//!
//! As gdbserver for the pt format: `new` is the whole trace if it changed
//! since the thread's last read, else an empty document (GDB keeps what it
//! has); `delta` is refused (GDB cannot stitch pt traces and then reads
//! `new`).
//!
//! GDB reads `qXfer:btrace-conf:read` on connecting and takes a `<pt/>`
//! element in it to mean the thread is being recorded already (it turns
//! recording on by itself): a thread not traced gets an empty
//! configuration.

use super::threads::Selection;
use crate::inferior::{tracing_of, CpuInfo, Inferior, TraceStart};

/// The features added to gdbstub's `qSupported` reply.
pub(crate) const FEATURES: &str = ";Qbtrace:off+;Qbtrace:pt+;Qbtrace-conf:pt:size+;qXfer:btrace:read+;qXfer:btrace-conf:read+";

/// GDB's default (`set record btrace pt buffer-size`): 16 KiB.
const DEFAULT_SIZE: u64 = 16 << 10;

/// What the client configured for the next `Qbtrace:pt`, and the trace
/// documents being read.
#[derive(Debug)]
pub(crate) struct BtraceConfig {
    size: u64,
    /// The document a read at offset 0 made, for the reads of its later
    /// windows: the thread, the annex, the text.
    reading: Option<(u64, String, String)>,
    /// A digest of each thread's trace as last read.
    last_read: std::collections::HashMap<u64, u64>,
}

impl Default for BtraceConfig {
    fn default() -> Self {
        BtraceConfig { size: DEFAULT_SIZE, reading: None, last_read: std::collections::HashMap::new() }
    }
}

/// The trace document of a thread with nothing new to say.
const EMPTY_DOCUMENT: &str = r#"<btrace version="1.0"/>"#;

fn digest(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut hasher);
    hasher.finish()
}

/// An error reply GDB prints (`E.<text>`).
fn error(text: &str) -> Vec<u8> {
    format!("E.{text}").into_bytes()
}

/// The trace ring for a requested size: a power of two of at least 4 KiB.
fn ring_size(requested: u64) -> u64 {
    requested.max(4096).checked_next_power_of_two().unwrap_or(u64::MAX)
}

/// `data[offset..offset + length]` as a qXfer reply: `l` when it is the
/// end, `m` when more follows.
fn window(data: &[u8], offset: usize, length: usize) -> Vec<u8> {
    let start = offset.min(data.len());
    let end = start.saturating_add(length).min(data.len());
    let mut reply = vec![if end == data.len() { b'l' } else { b'm' }];
    reply.extend_from_slice(&data[start..end]);
    reply
}

/// `offset,length` of a qXfer request.
fn offset_length(text: &str) -> Option<(usize, usize)> {
    let (offset, length) = text.split_once(',')?;
    Some((usize::from_str_radix(offset, 16).ok()?, usize::from_str_radix(length, 16).ok()?))
}

/// The reply to a branch-trace packet (`body` as sent), or `None` when it
/// is none of them.
pub(crate) fn answer(body: &[u8], target: &mut impl Inferior, selection: &Selection, config: &mut BtraceConfig) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    if let Some(size) = text.strip_prefix("Qbtrace-conf:pt:size=") {
        // GDB writes it `0x4000`.
        let digits = size.strip_prefix("0x").unwrap_or(size);
        return Some(match u64::from_str_radix(digits, 16) {
            Ok(size) if size > 0 => {
                config.size = size;
                b"OK".to_vec()
            }
            _ => error(&format!("Bad buffer size: {size}")),
        });
    }
    if text.starts_with("Qbtrace-conf:") {
        return Some(error("Only the pt format's size is configurable."));
    }
    let thread = selection.general_thread(&*target);
    if let Some(format) = text.strip_prefix("Qbtrace:") {
        config.reading = None;
        let Some(tid) = thread else { return Some(error("Must select a single thread.")) };
        return Some(match format {
            "pt" => {
                let request = TraceStart { threads: Some(vec![tid]), ring_size: ring_size(config.size), process_limit: None, psb_period: None, tsc: true };
                match tracing_of(target).and_then(|tracing| tracing.trace_start(&request)) {
                    Ok(()) => b"OK".to_vec(),
                    Err(message) => error(&message.to_string()),
                }
            }
            "off" => match tracing_of(target).and_then(|tracing| tracing.trace_stop(Some(&[tid]))) {
                Ok(()) => b"OK".to_vec(),
                Err(message) => error(&message.to_string()),
            },
            "bts" => error("Branch Trace Store is not supported: use the pt format (record btrace pt)."),
            other => error(&format!("Unknown branch trace format: {other}")),
        });
    }
    if let Some(window_text) = text.strip_prefix("qXfer:btrace-conf:read::") {
        let (offset, length) = offset_length(window_text)?;
        let traced = thread.and_then(|tid| Some((tid, tracing_of(target).ok()?.trace_state().ok()?)));
        let size = traced.and_then(|(tid, state)| state.threads.iter().find(|(t, _)| *t == tid).map(|(_, size)| *size));
        let document = match size {
            Some(size) => format!(r#"<btrace-conf version="1.0"><pt size="{size}"/></btrace-conf>"#),
            None => r#"<btrace-conf version="1.0"/>"#.to_string(),
        };
        return Some(window(document.as_bytes(), offset, length));
    }
    if let Some(rest) = text.strip_prefix("qXfer:btrace:read:") {
        let (annex, window_text) = rest.split_once(':')?;
        let (offset, length) = offset_length(window_text)?;
        let Some(tid) = thread else { return Some(error("Must select a single thread.")) };
        // (The grammar lets only `all`, `new` and `delta` through.)
        if annex == "delta" {
            // GDB then reads `new`.
            return Some(error("Reading a delta is not supported."));
        }
        let same_read = config.reading.as_ref().is_some_and(|(t, a, _)| *t == tid && a == annex);
        if offset == 0 || !same_read {
            let data = match tracing_of(target).and_then(|tracing| Ok((tracing.trace_data(tid)?, tracing.trace_cpu()))) {
                Ok(data) => data,
                Err(message) => {
                    config.reading = None;
                    return Some(error(&message.to_string()));
                }
            };
            let (data, cpu) = data;
            let digest = digest(&data);
            let unchanged = config.last_read.insert(tid, digest) == Some(digest);
            let text = if annex == "new" && unchanged { EMPTY_DOCUMENT.to_string() } else { document(&data, &cpu) };
            config.reading = Some((tid, annex.to_string(), text));
        }
        let text = config.reading.as_ref().map_or("", |(.., text)| text.as_str());
        let reply = window(text.as_bytes(), offset, length);
        if reply.first() == Some(&b'l') {
            // Read to the end: the next read, whatever its offset, reads
            // the trace afresh.
            config.reading = None;
        }
        return Some(reply);
    }
    None
}

/// The `pt` trace document: the CPU whose errata apply, and the stream as
/// hex, from its first sync point (a ring's leading padding is left out).
fn document(data: &[u8], cpu: &CpuInfo) -> String {
    let cpu = format!(r#"<cpu vendor="{}" family="{}" model="{}" stepping="{}"/>"#, cpu.vendor, cpu.family, cpu.model, cpu.stepping);
    let start = data.iter().position(|&b| b != 0).unwrap_or(data.len());
    let mut raw = String::with_capacity(2 * (data.len() - start));
    for byte in &data[start..] {
        raw.push_str(&format!("{byte:02x}"));
    }
    format!(r#"<btrace version="1.0"><pt><pt-config>{cpu}</pt-config><raw>{raw}</raw></pt></btrace>"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_sizes() {
        assert_eq!(window(b"abcdef", 0, 4), b"mabcd");
        assert_eq!(window(b"abcdef", 4, 4), b"lef");
        assert_eq!(window(b"abcdef", 9, 4), b"l");
        assert_eq!(ring_size(16384), 16384);
        assert_eq!(ring_size(1), 4096);
        assert_eq!(ring_size(5000), 8192);
    }

    #[test]
    fn the_document_names_the_cpu_and_skips_padding() {
        let cpu = CpuInfo { vendor: "GenuineIntel".into(), family: 6, model: 134, stepping: 7 };
        let doc = document(&[0, 0, 0x02, 0x82, 0x01], &cpu);
        assert_eq!(
            doc,
            r#"<btrace version="1.0"><pt><pt-config><cpu vendor="GenuineIntel" family="6" model="134" stepping="7"/></pt-config><raw>028201</raw></pt></btrace>"#
        );
    }
}
