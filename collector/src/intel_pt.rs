//! The hardware backend: Intel PT through `perf_event_open` on the kernel's
//! `intel_pt` PMU, one event and one AUX ring buffer per thread, configured
//! and read the way lldb-server does (`docs/ARCHITECTURE.md`).
//!
//! The PMU description comes from sysfs (`type`, `format/*`); the AUX buffer
//! is mapped read-only, which puts the kernel in overwrite (snapshot) mode:
//! it always holds the newest data, and a read returns
//! `aux[head..] ++ aux[..head]`, oldest first.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use perf_event_open_sys as sys;

/// Where the kernel describes the Intel PT PMU.
pub const SYSFS_DIR: &str = "/sys/bus/event_source/devices/intel_pt";

/// Where every recorder looks for the `intel_pt` PMU: `RETRACE_INTEL_PT_SYSFS`
/// if set (tests point it at a fake description or at nothing), else
/// [`SYSFS_DIR`].
pub fn sysfs_dir() -> std::path::PathBuf {
    std::env::var_os("RETRACE_INTEL_PT_SYSFS").map_or_else(|| SYSFS_DIR.into(), Into::into)
}

/// Why the Intel PT backend cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IntelPtError {
    /// The PMU is absent (AMD, most VMs, old CPUs).
    #[error("no Intel PT on this machine: {path} does not exist; record with --backend valgrind or --backend ptrace (or leave out --backend: auto takes the best one here)")]
    Absent {
        /// The sysfs file that is missing.
        path: PathBuf,
    },
    /// A sysfs file does not say what the kernel ABI says it should.
    #[error("{path}: unexpected contents {contents:?}")]
    BadSysfs {
        /// The file.
        path: PathBuf,
        /// What it held.
        contents: String,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was attempted.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The locked-memory budget has no room for even the smallest buffer.
    #[error("{0}")]
    Budget(String),
    /// The AUX buffer size must be a power of two of at least one page.
    #[error("trace buffer size {0} must be a power of two of at least 4096 bytes")]
    BadBufferSize(usize),
}

/// A bit field of `perf_event_attr.config`, from a `format/<name>` file
/// (`config:10`, `config:24-27`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigField {
    /// Lowest bit.
    pub low: u32,
    /// Highest bit (inclusive).
    pub high: u32,
}

impl ConfigField {
    /// Parses a sysfs format string; only `config` fields are accepted.
    pub fn parse(text: &str) -> Option<Self> {
        let bits = text.trim().strip_prefix("config:")?;
        let (low, high) = match bits.split_once('-') {
            Some((low, high)) => (low.parse().ok()?, high.parse().ok()?),
            None => {
                let bit = bits.parse().ok()?;
                (bit, bit)
            }
        };
        (low <= high && high < 64).then_some(ConfigField { low, high })
    }

    /// `config` with `value` placed in this field (bits beyond it dropped).
    pub fn apply(&self, config: u64, value: u64) -> u64 {
        let width = self.high - self.low + 1;
        let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        (config & !(mask << self.low)) | (value & mask) << self.low
    }
}

/// The Intel PT PMU as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntelPtPmu {
    /// `perf_event_attr.type`.
    pub perf_type: u32,
    /// `format/tsc`.
    pub tsc: Option<ConfigField>,
    /// `format/psb_period`.
    pub psb_period: Option<ConfigField>,
}

fn read_sysfs(path: &Path) -> Result<String, IntelPtError> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => IntelPtError::Absent { path: path.to_path_buf() },
        _ => IntelPtError::Sys { what: "reading sysfs", source },
    })
}

impl IntelPtPmu {
    /// Reads the PMU description below `dir` (normally [`SYSFS_DIR`]).
    pub fn detect(dir: &Path) -> Result<Self, IntelPtError> {
        let type_path = dir.join("type");
        let text = read_sysfs(&type_path)?;
        let perf_type = text
            .trim()
            .parse()
            .map_err(|_| IntelPtError::BadSysfs { path: type_path.clone(), contents: text.clone() })?;
        let field = |name: &str| -> Result<Option<ConfigField>, IntelPtError> {
            let path = dir.join("format").join(name);
            match read_sysfs(&path) {
                Ok(text) => ConfigField::parse(&text)
                    .map(Some)
                    .ok_or(IntelPtError::BadSysfs { path, contents: text }),
                Err(IntelPtError::Absent { .. }) => Ok(None),
                Err(other) => Err(other),
            }
        };
        Ok(IntelPtPmu { perf_type, tsc: field("tsc")?, psb_period: field("psb_period")? })
    }
}

/// The locked memory perf lets this user pin for AUX buffers, and what is
/// left of it. The kernel charges each mapping (AUX pages plus the metadata
/// page) first to the per-user `perf_event_mlock_kb` × online CPUs, then to
/// the process's `RLIMIT_MEMLOCK`; past both, `mmap` fails with `EPERM`
/// unless the user has `CAP_IPC_LOCK` or `perf_event_paranoid` is -1
/// (`kernel/events/core.c`, `perf_mmap`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlockBudget {
    /// Bytes left; `None` when unlimited.
    remaining: Option<u64>,
    total: Option<u64>,
}

const PAGE: u64 = 4096;

impl MlockBudget {
    /// The smallest AUX buffer worth opening (a few PSB periods).
    pub const MIN_BUFFER: usize = 64 << 10;

    /// What to raise when the budget runs out.
    pub const LIMITS_HINT: &'static str =
        "raise /proc/sys/kernel/perf_event_mlock_kb (per user and CPU) or the locked-memory limit (ulimit -l), or pass a smaller trace buffer";

    /// A budget from the limits: `mlock_kb` (`perf_event_mlock_kb`) per CPU
    /// for `cpus` CPUs, plus `rlimit_memlock` bytes; `unlimited` when the
    /// kernel does not enforce them.
    pub fn from_limits(mlock_kb: u64, cpus: u64, rlimit_memlock: u64, unlimited: bool) -> Self {
        if unlimited {
            return MlockBudget { remaining: None, total: None };
        }
        let total = (mlock_kb * 1024).saturating_mul(cpus).saturating_add(rlimit_memlock);
        MlockBudget { remaining: Some(total), total: Some(total) }
    }

    /// The budget of this process's user, from `/proc/sys/kernel`,
    /// `getrlimit` and its privileges (root stands for `CAP_IPC_LOCK`).
    pub fn for_this_process() -> Self {
        let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok().and_then(|t| t.trim().parse::<i64>().ok());
        let mlock_kb = read("perf_event_mlock_kb").unwrap_or(516).max(0) as u64;
        let paranoid = read("perf_event_paranoid").unwrap_or(2);
        let cpus = std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1);
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct we pass.
        let memlock = if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0 { limit.rlim_cur } else { 0 };
        let unlimited = paranoid == -1 || nix::unistd::geteuid().is_root() || memlock == libc::RLIM_INFINITY;
        MlockBudget::from_limits(mlock_kb, cpus, memlock, unlimited)
    }

    /// Reserves the largest power-of-two buffer of at most `wanted` bytes
    /// (and at least [`Self::MIN_BUFFER`], or `wanted` if smaller) that fits,
    /// with its metadata page. `None` when none fits.
    pub fn reserve(&mut self, wanted: usize) -> Option<usize> {
        let Some(remaining) = self.remaining else { return Some(wanted) };
        let floor = wanted.min(Self::MIN_BUFFER);
        let mut size = wanted;
        while size as u64 + PAGE > remaining {
            if size / 2 < floor {
                return None;
            }
            size /= 2;
        }
        self.remaining = Some(remaining - size as u64 - PAGE);
        Some(size)
    }

    /// Gives back what [`Self::reserve`] took for a `size`-byte buffer.
    pub fn release(&mut self, size: usize) {
        if let (Some(remaining), Some(total)) = (self.remaining, self.total) {
            self.remaining = Some((remaining + size as u64 + PAGE).min(total));
        }
    }

    /// Why a thread got no buffer.
    pub fn exhausted_message(&self) -> String {
        format!(
            "no room for a trace buffer in the locked-memory budget ({} KiB left of {} KiB); {}",
            self.remaining.unwrap_or(0) / 1024,
            self.total.unwrap_or(0) / 1024,
            Self::LIMITS_HINT
        )
    }
}

/// How to configure each thread's trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtEventConfig {
    /// Emit TSC packets.
    pub tsc: bool,
    /// PSB period exponent (`psb_period` format field), if set.
    pub psb_period: Option<u64>,
    /// AUX buffer bytes per thread (a power of two ≥ 4096).
    pub buffer_size: usize,
}

impl Default for PtEventConfig {
    fn default() -> Self {
        PtEventConfig { tsc: true, psb_period: None, buffer_size: 4 << 20 }
    }
}

/// The `perf_event_attr` for one thread's user-space Intel PT trace:
/// branch tracing with return compression (no `pt`/`branch`/`noretcomp`
/// bits, as lldb-server), kernel and hypervisor excluded, enabled at once.
pub fn perf_attr(pmu: &IntelPtPmu, config: &PtEventConfig) -> sys::bindings::perf_event_attr {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: pmu.perf_type,
        ..Default::default()
    };
    let mut bits = 0u64;
    if let (true, Some(field)) = (config.tsc, pmu.tsc) {
        bits = field.apply(bits, 1);
    }
    if let (Some(period), Some(field)) = (config.psb_period, pmu.psb_period) {
        bits = field.apply(bits, period);
    }
    attr.config = bits;
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr.set_exclude_idle(1);
    attr.set_disabled(0);
    attr
}

/// How the kernel runs an AUX ring, which decides what `aux_head` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxMode {
    /// The AUX area is mapped read-only (snapshot mode, what retrace and
    /// lldb-server use): the kernel overwrites the oldest data and publishes
    /// `aux_head` as its write offset *inside* the buffer (always < size);
    /// pages never written are still zero.
    Overwrite,
    /// The AUX area is mapped read-write: `aux_head` and `aux_tail` are
    /// running byte counters and the kernel stops writing (and reports loss)
    /// when the reader falls a buffer behind.
    Stream {
        /// The reader's `aux_tail`: everything before it was consumed.
        tail: u64,
    },
}

/// The bytes of an AUX ring, oldest first.
///
/// * [`AuxMode::Overwrite`]: `aux[head..] ++ aux[..head]`, as lldb-server
///   reads it. Before the first wrap `aux[head..]` was never written and is
///   zero; those leading zero bytes are dropped (a decoder would read them as
///   PAD packets and skip them anyway). After a wrap the oldest bytes start
///   mid-packet; decoders synchronise at the first PSB.
/// * [`AuxMode::Stream`]: the unread bytes `tail..head` (at most one buffer).
pub fn aux_snapshot(aux: &[u8], aux_head: u64, mode: AuxMode) -> Vec<u8> {
    if aux.is_empty() {
        return Vec::new();
    }
    let size = aux.len() as u64;
    match mode {
        AuxMode::Overwrite => {
            let head = (aux_head % size) as usize;
            let mut out = Vec::with_capacity(aux.len());
            let older = &aux[head..];
            let written = older.iter().position(|&b| b != 0).unwrap_or(older.len());
            out.extend_from_slice(&older[written..]);
            out.extend_from_slice(&aux[..head]);
            out
        }
        AuxMode::Stream { tail } => {
            let available = aux_head.saturating_sub(tail).min(size);
            let start = aux_head - available;
            (start..aux_head).map(|position| aux[(position % size) as usize]).collect()
        }
    }
}

/// One thread's Intel PT event with its mapped metadata page and AUX buffer.
pub struct ThreadPtEvent {
    fd: OwnedFd,
    meta: *mut sys::bindings::perf_event_mmap_page,
    meta_len: usize,
    aux: *const u8,
    aux_len: usize,
}

impl std::fmt::Debug for ThreadPtEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPtEvent").field("fd", &self.fd).field("aux_len", &self.aux_len).finish_non_exhaustive()
    }
}

// SAFETY: the mappings are owned by this value and only read through it.
unsafe impl Send for ThreadPtEvent {}

fn last_os_error(what: &'static str) -> IntelPtError {
    IntelPtError::Sys { what, source: std::io::Error::last_os_error() }
}

impl ThreadPtEvent {
    /// Opens and maps an Intel PT event for thread `tid` (`pid = tid, cpu = -1`).
    pub fn open(pmu: &IntelPtPmu, config: &PtEventConfig, tid: i32) -> Result<Self, IntelPtError> {
        let page = 4096usize;
        if !config.buffer_size.is_power_of_two() || config.buffer_size < page {
            return Err(IntelPtError::BadBufferSize(config.buffer_size));
        }
        let mut attr = perf_attr(pmu, config);
        // SAFETY: attr is a valid, fully initialised perf_event_attr.
        let raw = unsafe { sys::perf_event_open(&mut attr, tid, -1, -1, 0) };
        if raw < 0 {
            return Err(last_os_error("perf_event_open(intel_pt)"));
        }
        // SAFETY: perf_event_open returned a new descriptor we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: mapping the metadata page of a perf event fd, as documented in perf_event_open(2).
        let meta = unsafe {
            libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if meta == libc::MAP_FAILED {
            return Err(last_os_error("mmap(perf metadata page)"));
        }
        let meta = meta.cast::<sys::bindings::perf_event_mmap_page>();
        // SAFETY: meta is a valid mapping of the metadata page; aux_offset/size are written before mapping AUX.
        let aux = unsafe {
            (*meta).aux_offset = page as u64;
            (*meta).aux_size = config.buffer_size as u64;
            libc::mmap(std::ptr::null_mut(), config.buffer_size, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), page as i64)
        };
        if aux == libc::MAP_FAILED {
            let error = last_os_error("mmap(perf AUX area)");
            // SAFETY: unmapping what we mapped above.
            unsafe { libc::munmap(meta.cast(), page) };
            return Err(error);
        }
        Ok(ThreadPtEvent { fd, meta, meta_len: page, aux: aux.cast(), aux_len: config.buffer_size })
    }

    /// The trace so far, oldest first: disables the event (flushing the CPU's
    /// buffers), copies the AUX buffer, and enables it again.
    pub fn snapshot(&self) -> Vec<u8> {
        // SAFETY: ioctls on our own perf fd; reads of our own mappings.
        unsafe {
            sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0);
            let head = std::ptr::read_volatile(std::ptr::addr_of!((*self.meta).aux_head));
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let aux = std::slice::from_raw_parts(self.aux, self.aux_len);
            let bytes = aux_snapshot(aux, head, AuxMode::Overwrite);
            sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0);
            bytes
        }
    }
}

impl Drop for ThreadPtEvent {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mappings.
        unsafe {
            libc::munmap(self.aux as *mut libc::c_void, self.aux_len);
            libc::munmap(self.meta.cast(), self.meta_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_fields_parse_and_apply() {
        assert_eq!(ConfigField::parse("config:10\n"), Some(ConfigField { low: 10, high: 10 }));
        let psb = ConfigField::parse("config:24-27").unwrap();
        assert_eq!(psb, ConfigField { low: 24, high: 27 });
        assert_eq!(psb.apply(0, 3), 3 << 24);
        assert_eq!(psb.apply(u64::MAX, 0), u64::MAX & !(0xf << 24));
        assert_eq!(psb.apply(0, 0x1f), 0xf << 24); // value truncated to the field
        assert_eq!(ConfigField::parse("config1:0"), None);
        assert_eq!(ConfigField::parse("config:9-3"), None);
        assert_eq!(ConfigField::parse("config:64"), None);
    }

    fn fake_sysfs(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("retrace-sysfs-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, contents) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        dir
    }

    #[test]
    fn attr_from_sysfs_description() {
        let dir = fake_sysfs(&[("type", "8\n"), ("format/tsc", "config:10\n"), ("format/psb_period", "config:24-27\n")]);
        let pmu = IntelPtPmu::detect(&dir).unwrap();
        assert_eq!(pmu.perf_type, 8);
        let attr = perf_attr(&pmu, &PtEventConfig { tsc: true, psb_period: Some(2), buffer_size: 4096 });
        assert_eq!(attr.type_, 8);
        assert_eq!(attr.config, 1 << 10 | 2 << 24);
        assert_eq!(attr.size as usize, std::mem::size_of::<sys::bindings::perf_event_attr>());
        assert_eq!((attr.exclude_kernel(), attr.exclude_hv(), attr.exclude_idle(), attr.disabled()), (1, 1, 1, 0));
        let plain = perf_attr(&pmu, &PtEventConfig { tsc: false, psb_period: None, buffer_size: 4096 });
        assert_eq!(plain.config, 0);
    }

    #[test]
    fn absent_pmu_names_the_missing_file() {
        let error = IntelPtPmu::detect(Path::new("/nonexistent/intel_pt")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no Intel PT on this machine: /nonexistent/intel_pt/type does not exist; record with --backend valgrind or --backend ptrace (or leave out --backend: auto takes the best one here)"
        );
        let bad = fake_sysfs(&[("type", "eight"), ("format/tsc", "config:10")]);
        assert!(matches!(IntelPtPmu::detect(&bad), Err(IntelPtError::BadSysfs { .. })));
    }

    #[test]
    fn this_machine_without_intel_pt_is_reported() {
        if Path::new(SYSFS_DIR).join("type").exists() {
            return; // a machine with Intel PT: nothing to observe here
        }
        assert!(matches!(IntelPtPmu::detect(Path::new(SYSFS_DIR)), Err(IntelPtError::Absent { .. })));
    }

    /// The kernel's side of an overwrite-mode AUX ring, as
    /// `arch/x86/events/intel/pt.c` runs it in snapshot mode: pages start
    /// zero-filled, bytes go in at the write offset, which wraps to 0 at the
    /// end, and the offset published as `aux_head` stays inside the buffer.
    struct KernelOverwriteRing {
        aux: Vec<u8>,
        offset: usize,
    }

    impl KernelOverwriteRing {
        fn new(size: usize) -> Self {
            KernelOverwriteRing { aux: vec![0; size], offset: 0 }
        }
        fn write(&mut self, bytes: &[u8]) {
            for &byte in bytes {
                self.aux[self.offset] = byte;
                self.offset = (self.offset + 1) % self.aux.len();
            }
        }
        fn aux_head(&self) -> u64 {
            self.offset as u64
        }
    }

    /// A trace stream with no zero bytes (a real one has them only in PADs).
    fn stream(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8 + 1).collect()
    }

    #[test]
    fn overwrite_ring_before_the_first_wrap_holds_what_was_written() {
        let mut ring = KernelOverwriteRing::new(64);
        assert!(aux_snapshot(&ring.aux, ring.aux_head(), AuxMode::Overwrite).is_empty());
        let data = stream(40);
        ring.write(&data);
        assert_eq!(ring.aux_head(), 40);
        // The never-written zero tail aux[40..] is not returned.
        assert_eq!(aux_snapshot(&ring.aux, ring.aux_head(), AuxMode::Overwrite), data);
    }

    #[test]
    fn overwrite_ring_exactly_full_or_just_past_the_wrap_keeps_every_byte() {
        let data = stream(64 + 3);
        let mut ring = KernelOverwriteRing::new(64);
        ring.write(&data[..64]);
        assert_eq!(ring.aux_head(), 0, "the kernel's offset wrapped to the start");
        assert_eq!(aux_snapshot(&ring.aux, ring.aux_head(), AuxMode::Overwrite), &data[..64]);
        ring.write(&data[64..]);
        assert_eq!(ring.aux_head(), 3);
        // The newest 64 bytes, oldest first: not an empty or 3-byte trace.
        assert_eq!(aux_snapshot(&ring.aux, ring.aux_head(), AuxMode::Overwrite), &data[3..]);
    }

    #[test]
    fn overwrite_ring_that_wrapped_several_times_holds_the_newest_buffer() {
        for total in [3 * 64 + 17, 5 * 64, 7 * 64 + 63, 1000 * 64 + 1] {
            let data = stream(total);
            let mut ring = KernelOverwriteRing::new(64);
            // Written in uneven chunks, as AUX transactions end where they end.
            for chunk in data.chunks(23) {
                ring.write(chunk);
            }
            assert!(ring.aux_head() < 64);
            assert_eq!(aux_snapshot(&ring.aux, ring.aux_head(), AuxMode::Overwrite), &data[total - 64..], "{total} bytes");
        }
    }

    #[test]
    fn stream_ring_reads_from_tail_to_head() {
        let data = stream(200);
        let mut aux = vec![0u8; 64];
        for (position, byte) in data.iter().enumerate() {
            aux[position % 64] = *byte;
        }
        assert_eq!(aux_snapshot(&aux, 200, AuxMode::Stream { tail: 150 }), &data[150..200]);
        assert_eq!(aux_snapshot(&aux, 200, AuxMode::Stream { tail: 200 }), Vec::<u8>::new());
        // A reader more than a buffer behind gets the newest buffer.
        assert_eq!(aux_snapshot(&aux, 200, AuxMode::Stream { tail: 0 }), &data[136..200]);
        assert!(aux_snapshot(&[], 7, AuxMode::Overwrite).is_empty());
    }

    #[test]
    fn mlock_budget_shrinks_buffers_then_refuses() {
        // 516 KiB per CPU on 2 CPUs + 64 KiB of RLIMIT_MEMLOCK = 1096 KiB.
        let mut budget = MlockBudget::from_limits(516, 2, 64 << 10, false);
        assert_eq!(budget.reserve(4 << 20), Some(1 << 20), "4 MiB does not fit: halved until it does");
        // 1096 - (1024 + 4) = 68 KiB left: exactly the floor of 64 KiB with its metadata page.
        assert_eq!(budget.reserve(4 << 20), Some(64 << 10));
        assert_eq!(budget.reserve(4 << 20), None, "nothing left");
        assert!(budget.exhausted_message().contains("perf_event_mlock_kb"), "{}", budget.exhausted_message());
        budget.release(1 << 20);
        assert_eq!(budget.reserve(4 << 20), Some(1 << 20), "a closed buffer's share is back");
        // A small request is granted as asked, even below the usual floor.
        let mut small = MlockBudget::from_limits(0, 1, 20 << 10, false);
        assert_eq!(small.reserve(8192), Some(8192));
        assert_eq!(small.reserve(8192), None);
        // Unlimited (root, paranoid -1): always the size asked for.
        let mut unlimited = MlockBudget::from_limits(0, 1, 0, true);
        assert_eq!(unlimited.reserve(4 << 20), Some(4 << 20));
    }

    #[test]
    fn buffer_size_is_checked_before_any_system_call() {
        let pmu = IntelPtPmu { perf_type: 8, tsc: None, psb_period: None };
        for size in [0, 1000, 4097, 12288] {
            let config = PtEventConfig { buffer_size: size, ..PtEventConfig::default() };
            assert!(matches!(ThreadPtEvent::open(&pmu, &config, 0), Err(IntelPtError::BadBufferSize(_))));
        }
    }
}
