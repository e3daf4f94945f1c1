//! LLDB's intel-pt trace bundle description (`trace.json`), as LLDB 22 reads
//! and writes it (`trace load`, `trace save`; schema: `trace schema intel-pt`).
//!
//! The description lives here (no file I/O): the recorder writes bundles
//! with it. [`load`] is the decoder's one file-reading edge: it reads a
//! bundle from disk for every consumer (the `retrace` CLI, the stub's
//! replay, the LLDB shim's native bridge, the tests). Every writer (the
//! recorder, the shim's `retrace save`) writes [`TraceBundle::to_json`].

use serde::{Deserialize, Serialize};

pub mod load;
pub mod paths;

/// The CPU the trace claims to come from; LLDB hands it to libipt, which
/// enables errata workarounds for it and refuses CPUs it does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// `GenuineIntel` (or `Unknown`, which LLDB's libipt refuses).
    pub vendor: String,
    /// CPUID family.
    pub family: u32,
    /// CPUID model.
    pub model: u32,
    /// CPUID stepping.
    pub stepping: u32,
}

impl CpuInfo {
    /// The CPU declared by software recordings: Intel family 6 model 0x86
    /// (Snow Ridge). libipt 2.0.5 (LLDB 22's) knows it, and its only erratum
    /// (APL11) concerns OVF packets, which software recordings never contain.
    pub fn software_recording() -> Self {
        CpuInfo { vendor: "GenuineIntel".into(), family: 6, model: 0x86, stepping: 7 }
    }
}

/// One traced thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleThread {
    /// Thread id.
    pub tid: u64,
    /// Raw Intel PT of this thread, relative to the bundle directory.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ipt_trace: Option<String>,
}

/// A module loaded in the traced process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleModule {
    /// Path of the module on the traced system.
    pub system_path: String,
    /// A copy inside the bundle, relative to the bundle directory.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub file: Option<String>,
    /// Load address: LLDB accepts a number or a decimal/`0x` string; written as `0x…`.
    pub load_address: LoadAddress,
    /// LLDB's module UUID string (from the GNU build id).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uuid: Option<String>,
}

/// A 64-bit address that LLDB accepts as a JSON number or string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadAddress(pub u64);

impl Serialize for LoadAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("0x{:x}", self.0))
    }
}

impl<'de> Deserialize<'de> for LoadAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        let value = match Raw::deserialize(d)? {
            Raw::Number(n) => n,
            Raw::Text(t) => match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).map_err(serde::de::Error::custom)?,
                None => t.parse().map_err(serde::de::Error::custom)?,
            },
        };
        Ok(LoadAddress(value))
    }
}

/// One traced process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleProcess {
    /// Process id.
    pub pid: u64,
    /// Target triple, e.g. `x86_64-pc-linux-gnu`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub triple: Option<String>,
    /// Traced threads.
    pub threads: Vec<BundleThread>,
    /// Loaded modules.
    pub modules: Vec<BundleModule>,
    /// perf jitdump files describing code the process generated at run time
    /// (retrace's extra key, ignored by LLDB): their functions join the
    /// address space and are named after them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub jitdumps: Vec<String>,
}

/// perf's TSC → nanoseconds conversion (`time_mult`, `time_shift`, `time_zero`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TscConversion {
    /// `time_mult`.
    pub time_mult: u32,
    /// `time_shift`.
    pub time_shift: u16,
    /// `time_zero` (written as a decimal string, as LLDB does).
    pub time_zero: String,
}

impl TscConversion {
    /// The TSC value in nanoseconds (perf's `mul_u64_u32_shr` conversion,
    /// in wrapping 64-bit arithmetic as LLDB computes it).
    pub fn to_nanos(&self, tsc: u64) -> u64 {
        let shift = u32::from(self.time_shift).min(63);
        let mult = u64::from(self.time_mult);
        let quot = tsc >> shift;
        let rem = tsc & ((1u64 << shift) - 1);
        self.zero().unwrap_or(0).wrapping_add(quot.wrapping_mul(mult)).wrapping_add(rem.wrapping_mul(mult) >> shift)
    }

    /// `time_zero` as a number (decimal, or hexadecimal with `0x`).
    pub fn zero(&self) -> Option<u64> {
        let text = self.time_zero.trim();
        match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        }
    }
}

/// What recorded the trace (an extra key; LLDB ignores it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorder {
    /// `intel-pt` (hardware) or `software`.
    pub backend: String,
    /// For software recordings: `step` or `branch`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mode: Option<String>,
    /// retrace version.
    pub version: String,
    /// True when `cpuInfo` is declared, not the recording machine's CPU.
    pub cpu_info_is_synthetic: bool,
    /// The programs the process went on to run after `execve`, each a
    /// bundle of its own (`exec1/trace.json`, …, relative to this file).
    /// LLDB keys a bundle's threads by tid across all its processes, so one
    /// `trace.json` cannot hold the same thread in two program images;
    /// `trace load` one of these to see that program. `bundle::load`
    /// follows them: its processes are this bundle's, then theirs.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub exec_images: Vec<String>,
    /// The full-state stream (every register and memory change, see
    /// [`crate::full_state`]), relative to this file, when recorded.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub full_state: Option<String>,
    /// How the program ended, when it ended on its own (not at an
    /// instruction limit or an interruption).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exit: Option<RecordedExit>,
}

/// How a recorded program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RecordedExit {
    /// It exited with this status.
    Status(i32),
    /// A signal (by its Linux number) killed it.
    Signal(i32),
}

/// The whole `trace.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceBundle {
    /// Always `intel-pt`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The CPU.
    pub cpu_info: CpuInfo,
    /// Traced processes (per-thread mode).
    pub processes: Vec<BundleProcess>,
    /// TSC conversion, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tsc_perf_zero_conversion: Option<TscConversion>,
    /// Provenance (retrace's extra key).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub retrace: Option<Recorder>,
}

impl TraceBundle {
    /// The description as `trace.json` holds it: pretty JSON, one final
    /// newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a bundle description serialises") + "\n"
    }

    /// A description read from JSON text; the error says what does not fit
    /// the schema.
    pub fn from_json(text: &str) -> Result<TraceBundle, String> {
        serde_json::from_str(text).map_err(|e| format!("not an intel-pt trace description: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_reads_back_as_written_and_a_bad_one_says_why() {
        let text = r#"{"type":"intel-pt","cpuInfo":{"vendor":"GenuineIntel","family":6,"model":134,"stepping":7},
            "processes":[{"pid":7,"triple":"x86_64-unknown-linux-gnu","threads":[{"tid":7,"iptTrace":"threads/7.intelpt_trace"}],
            "modules":[{"systemPath":"/bin/true","file":"/bin/true","loadAddress":"0x555555554000"}]}],
            "tscPerfZeroConversion":{"timeMult":1,"timeShift":2,"timeZero":"3"}}"#;
        let bundle = TraceBundle::from_json(text).unwrap();
        assert_eq!(bundle.processes[0].modules[0].load_address, LoadAddress(0x5555_5555_4000));
        let written = bundle.to_json();
        assert!(written.ends_with("}\n") && written.contains("\"loadAddress\": \"0x555555554000\""), "{written}");
        assert_eq!(TraceBundle::from_json(&written).unwrap(), bundle);
        let error = TraceBundle::from_json(r#"{"type":"intel-pt","processes":[]}"#).unwrap_err();
        assert!(error.contains("cpuInfo"), "{error}");
    }
}
