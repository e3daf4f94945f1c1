//! Recording with the hardware backend: the program runs at full speed under
//! ptrace (only clone and exit events stop it) while the CPU's Intel PT writes
//! each thread's trace into its AUX ring ([`intel_pt::ThreadPtEvent`]).
//!
//! This machine class has no Intel PT, so this loop is exercised only up to
//! the PMU check here; its parts (sysfs parsing, `perf_event_attr`, the AUX
//! ring read) are unit-tested on their own.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use retrace_decoder::bundle::CpuInfo;

use crate::intel_pt::{IntelPtError, IntelPtPmu, PtEventConfig, ThreadPtEvent};
use crate::process::{self, Tracee};
use crate::software::{Outcome, RecordOptions, Recording, ThreadRecording};

/// The CPU from `/proc/cpuinfo` (vendor, family, model, stepping of the first CPU).
pub fn host_cpu_info() -> Option<CpuInfo> {
    parse_cpuinfo(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

/// Parses the first processor block of `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> Option<CpuInfo> {
    let field = |name: &str| {
        text.lines()
            .find(|line| line.split(':').next().is_some_and(|key| key.trim() == name))
            .and_then(|line| line.split_once(':'))
            .map(|(_, value)| value.trim().to_string())
    };
    Some(CpuInfo {
        vendor: field("vendor_id")?,
        family: field("cpu family")?.parse().ok()?,
        model: field("model")?.parse().ok()?,
        stepping: field("stepping")?.parse().ok()?,
    })
}

/// Records `tracee` with Intel PT until it exits (or the limit/stop flag).
/// `max_instructions` cannot be enforced by hardware tracing and is ignored.
pub fn record_hardware(
    tracee: Tracee,
    sysfs: &Path,
    config: &PtEventConfig,
    options: &RecordOptions,
) -> Result<Recording, IntelPtError> {
    let start = Instant::now();
    let pmu = match IntelPtPmu::detect(sysfs) {
        Ok(pmu) => pmu,
        Err(error) => {
            process::kill_and_reap(tracee.pid);
            return Err(error);
        }
    };
    let mut events: HashMap<Pid, ThreadPtEvent> = HashMap::new();
    let mut order: Vec<Pid> = Vec::new();
    let mut traces: HashMap<Pid, Vec<u8>> = HashMap::new();
    let mut modules = Vec::new();
    let pid = tracee.pid;

    let open = |tid: Pid, events: &mut HashMap<Pid, ThreadPtEvent>, order: &mut Vec<Pid>| -> Result<(), IntelPtError> {
        let event = ThreadPtEvent::open(&pmu, config, tid.as_raw())?;
        events.insert(tid, event);
        order.push(tid);
        Ok(())
    };
    if let Err(error) = open(pid, &mut events, &mut order) {
        process::kill_and_reap(pid);
        return Err(error);
    }
    let _ = ptrace::cont(pid, None);
    let mut outcome = Outcome::Exited(0);
    loop {
        if options.stop.load(Ordering::Relaxed) {
            outcome = Outcome::Interrupted;
            for (tid, event) in &events {
                traces.insert(*tid, event.snapshot());
            }
            let _ = kill(pid, Signal::SIGKILL);
        }
        let status = match waitpid(None, Some(WaitPidFlag::__WALL)) {
            Ok(status) => status,
            Err(Errno::ECHILD) => break,
            Err(Errno::EINTR) => continue,
            Err(source) => {
                return Err(IntelPtError::Sys { what: "waitpid", source: std::io::Error::from_raw_os_error(source as i32) })
            }
        };
        match status {
            WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_CLONE => {
                if let Ok(new) = ptrace::getevent(tid) {
                    let new = Pid::from_raw(new as i32);
                    if !events.contains_key(&new) {
                        open(new, &mut events, &mut order)?;
                    }
                }
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::PtraceEvent(tid, _, event) if event == libc::PTRACE_EVENT_EXIT => {
                if tid == pid {
                    if let Ok(maps) = process::read_maps(pid) {
                        modules = process::modules_in(pid, &maps);
                    }
                }
                if let Some(event) = events.remove(&tid) {
                    traces.insert(tid, event.snapshot());
                }
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::PtraceEvent(tid, ..) => {
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::Stopped(tid, Signal::SIGSTOP) if !events.contains_key(&tid) || traces.contains_key(&tid) => {
                let _ = ptrace::cont(tid, None);
            }
            WaitStatus::Stopped(tid, signal) => {
                let _ = ptrace::cont(tid, Some(signal));
            }
            WaitStatus::Exited(tid, code) if tid == pid && outcome != Outcome::Interrupted => {
                outcome = Outcome::Exited(code)
            }
            WaitStatus::Signaled(tid, signal, _) if tid == pid && outcome != Outcome::Interrupted => {
                outcome = Outcome::Signaled { signal, at: None }
            }
            _ => {}
        }
    }
    tracee.unpin_tracer();
    for (tid, event) in events.drain() {
        traces.entry(tid).or_insert_with(|| event.snapshot());
    }
    let threads = order
        .into_iter()
        .map(|tid| ThreadRecording {
            tid: tid.as_raw() as u32,
            trace: traces.remove(&tid).unwrap_or_default(),
            instructions: 0,
            instruction_log: None,
        })
        .collect();
    Ok(Recording {
        pid: pid.as_raw() as u32,
        threads,
        modules,
        outcome,
        elapsed: start.elapsed(),
        undecodable: 0,
        tsc_conversion: crate::perf_clock::tsc_conversion(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_of_the_first_processor() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R)\nstepping\t: 4\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n";
        assert_eq!(
            parse_cpuinfo(text),
            Some(CpuInfo { vendor: "GenuineIntel".into(), family: 6, model: 85, stepping: 4 })
        );
        assert_eq!(parse_cpuinfo("processor : 0\n"), None);
    }

    #[test]
    fn absent_pmu_fails_before_running_the_program() {
        if Path::new(crate::intel_pt::SYSFS_DIR).join("type").exists() {
            return;
        }
        let tracee = process::launch(&process::LaunchOptions::new("/bin/true", Vec::<String>::new())).unwrap();
        let pid = tracee.pid;
        let error = record_hardware(tracee, Path::new(crate::intel_pt::SYSFS_DIR), &PtEventConfig::default(), &RecordOptions::default())
            .err()
            .expect("no PMU here");
        assert!(matches!(error, IntelPtError::Absent { .. }), "{error}");
        // The program was not left behind.
        assert!(waitpid(pid, Some(WaitPidFlag::WNOHANG)).is_err());
    }
}
