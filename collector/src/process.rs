//! Process control: launching a program under ptrace, reading its memory and
//! its memory map. The one place in retrace that owns ptrace.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// `execvp` failed in the child (program missing, not executable, …).
    #[error("cannot execute {program:?}: {source}")]
    Exec {
        /// The program as given.
        program: OsString,
        /// The errno from `execvp`.
        source: nix::Error,
    },
    /// An argument contains a NUL byte.
    #[error("argument contains a NUL byte: {0:?}")]
    NulByte(OsString),
    /// A system call in the tracer failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The errno.
        source: nix::Error,
    },
    /// The child did not stop at its first instruction.
    #[error("the program did not stop after exec: {0:?}")]
    UnexpectedStatus(WaitStatus),
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> LaunchError {
    move |source| LaunchError::Sys { what, source }
}

/// How to launch a program.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The program (looked up in `PATH` like a shell does when it has no `/`).
    pub program: OsString,
    /// Its arguments (without `argv[0]`).
    pub args: Vec<OsString>,
    /// Disable address-space randomisation (as LLDB and GDB do by default).
    pub disable_aslr: bool,
    /// Pin the tracer, and so the tracee, to this CPU.
    pub pin_cpu: Option<usize>,
    /// Send the program's stdout to this file (created or truncated)
    /// instead of the tracer's.
    pub stdout: Option<PathBuf>,
}

impl LaunchOptions {
    /// Options for `program args…` with ASLR disabled and no pinning.
    pub fn new(program: impl Into<OsString>, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        LaunchOptions {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            disable_aslr: true,
            pin_cpu: None,
            stdout: None,
        }
    }
}

/// A traced process stopped at its first instruction after `execve`.
#[derive(Debug)]
pub struct Tracee {
    /// Its process id (= the main thread's id).
    pub pid: Pid,
    /// The tracer thread's CPU affinity before `pin_cpu` changed it; restore
    /// it with [`Tracee::unpin_tracer`] when tracing is over.
    pub tracer_affinity: Option<CpuSet>,
}

impl Tracee {
    /// Gives the calling (tracer) thread back the CPU affinity it had before
    /// [`launch`] pinned it.
    pub fn unpin_tracer(&self) {
        if let Some(set) = &self.tracer_affinity {
            let _ = sched_setaffinity(Pid::from_raw(0), set);
        }
    }
}

fn cstring(s: &OsStr) -> Result<CString, LaunchError> {
    CString::new(s.as_bytes()).map_err(|_| LaunchError::NulByte(s.to_os_string()))
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> usize {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as usize
}

/// Starts `options.program` under ptrace, stopped at its first instruction
/// (with `pin_cpu`, the calling thread and the program share that CPU until
/// [`Tracee::unpin_tracer`]),
/// in its own process group (so a terminal's Ctrl-C reaches the tracer only).
/// Threads it creates are traced too (`PTRACE_O_TRACECLONE`), forked children
/// stop at their start (to be released by [`crate::control`]), later `execve`s
/// are ptrace events (`PTRACE_O_TRACEEXEC`), not `SIGTRAP`s; it is killed if
/// the tracer dies (`PTRACE_O_EXITKILL`).
pub fn launch(options: &LaunchOptions) -> Result<Tracee, LaunchError> {
    let program = cstring(&options.program)?;
    let mut argv = vec![program.clone()];
    for arg in &options.args {
        argv.push(cstring(arg)?);
    }
    let stdout = options.stdout.as_ref().map(|path| cstring(path.as_os_str())).transpose()?;
    let mut tracer_affinity = None;
    if let Some(cpu) = options.pin_cpu {
        tracer_affinity = nix::sched::sched_getaffinity(Pid::from_raw(0)).ok();
        let mut set = CpuSet::new();
        set.set(cpu).map_err(sys("cpu set"))?;
        sched_setaffinity(Pid::from_raw(0), &set).map_err(sys("sched_setaffinity"))?;
    }
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
    // SAFETY: the child only calls async-signal-safe functions before exec.
    match unsafe { fork() }.map_err(sys("fork"))? {
        ForkResult::Child => {
            drop(read_end);
            // SAFETY: plain system calls; on any failure the child reports and exits.
            unsafe {
                libc::setpgid(0, 0);
                if let Some(path) = &stdout {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644);
                    if fd < 0 || libc::dup2(fd, 1) < 0 {
                        libc::_exit(126);
                    }
                    libc::close(fd);
                }
                if options.disable_aslr {
                    let persona = libc::personality(0xffff_ffff);
                    if persona != -1 {
                        libc::personality((persona | libc::ADDR_NO_RANDOMIZE) as libc::c_ulong);
                    }
                }
                if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                    libc::_exit(126);
                }
                let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
                ptrs.push(std::ptr::null());
                libc::execvp(program.as_ptr(), ptrs.as_ptr());
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                use std::os::fd::AsRawFd;
                libc::write(write_end.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127);
            }
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            let status = waitpid(child, None).map_err(sys("waitpid"))?;
            let mut errno = [0u8; 4];
            let n = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&read_end), &mut errno).unwrap_or(0);
            if n == 4 {
                let _ = waitpid(child, None);
                return Err(LaunchError::Exec {
                    program: options.program.clone(),
                    source: nix::Error::from_raw(i32::from_ne_bytes(errno)),
                });
            }
            match status {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {}
                other => return Err(LaunchError::UnexpectedStatus(other)),
            }
            // Forked children are attached only so the recorder can remove its
            // breakpoints from their copy of memory and detach them.
            let options = ptrace::Options::PTRACE_O_TRACECLONE
                | ptrace::Options::PTRACE_O_TRACEEXEC
                | ptrace::Options::PTRACE_O_TRACEFORK
                | ptrace::Options::PTRACE_O_TRACEVFORK
                | ptrace::Options::PTRACE_O_TRACEEXIT
                | ptrace::Options::PTRACE_O_EXITKILL;
            ptrace::setoptions(child, options).map_err(sys("PTRACE_SETOPTIONS"))?;
            Ok(Tracee { pid: child, tracer_affinity })
        }
    }
}

/// Attaches to every thread of a running process (threads appearing while
/// attaching are attached too), leaving all of them stopped; new threads are
/// followed (`PTRACE_O_TRACECLONE`). Returns the process and its threads.
pub fn attach(pid: Pid) -> Result<(Tracee, Vec<Pid>), LaunchError> {
    let mut attached: Vec<Pid> = Vec::new();
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| LaunchError::Sys {
            what: "listing the process's threads",
            source: nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::ESRCH)),
        })?;
        let mut new = 0;
        for entry in tasks.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse::<i32>().ok()).map(Pid::from_raw) else {
                continue;
            };
            if attached.contains(&tid) {
                continue;
            }
            ptrace::attach(tid).map_err(sys("PTRACE_ATTACH"))?;
            loop {
                match waitpid(tid, Some(nix::sys::wait::WaitPidFlag::__WALL)).map_err(sys("waitpid"))? {
                    WaitStatus::Stopped(_, Signal::SIGSTOP) => break,
                    WaitStatus::Stopped(_, other) => {
                        // Another signal arrived first: keep it pending for the program.
                        let _ = nix::sys::signal::kill(tid, other);
                        ptrace::cont(tid, None).map_err(sys("PTRACE_CONT"))?;
                    }
                    status => return Err(LaunchError::UnexpectedStatus(status)),
                }
            }
            attached.push(tid);
            new += 1;
        }
        if new == 0 {
            break;
        }
    }
    for tid in &attached {
        ptrace::setoptions(*tid, ptrace::Options::PTRACE_O_TRACECLONE | ptrace::Options::PTRACE_O_TRACEEXIT)
            .map_err(sys("PTRACE_SETOPTIONS"))?;
    }
    Ok((Tracee { pid, tracer_affinity: None }, attached))
}

/// Kills a traced process and reaps it (letting it through any ptrace stops
/// on its way out).
pub fn kill_and_reap(pid: Pid) {
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
    loop {
        match waitpid(pid, Some(nix::sys::wait::WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => return,
            Ok(_) => {
                let _ = ptrace::cont(pid, None);
            }
        }
    }
}

/// Reads up to `buf.len()` bytes of the tracee's memory at `address`;
/// returns how many could be read (a read stops at an unmapped page).
pub fn read_memory(pid: Pid, address: u64, buf: &mut [u8]) -> usize {
    let local = [std::io::IoSliceMut::new(buf)];
    let len = local[0].len();
    let remote = [RemoteIoVec { base: address as usize, len }];
    let mut local = local;
    match process_vm_readv(pid, &mut local, &remote) {
        Ok(n) => n,
        Err(_) => {
            // Retry up to the page boundary (the rest may be unmapped).
            let to_page_end = (4096 - (address as usize & 4095)).min(len);
            if to_page_end == len {
                return 0;
            }
            read_memory(pid, address, &mut buf[..to_page_end])
        }
    }
}

/// Writes `bytes` into the tracee's (writable) memory at `address`; returns
/// how many bytes were written.
pub fn write_memory(pid: Pid, address: u64, bytes: &[u8]) -> usize {
    let local = [std::io::IoSlice::new(bytes)];
    let remote = [RemoteIoVec { base: address as usize, len: bytes.len() }];
    nix::sys::uio::process_vm_writev(pid, &local, &remote).unwrap_or(0)
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// `r`, `w`, `x` permissions.
    pub readable: bool,
    /// Writable.
    pub writable: bool,
    /// Executable.
    pub executable: bool,
    /// Offset into the file.
    pub offset: u64,
    /// The path or pseudo-name (`[vdso]`, `[stack]`), empty for anonymous memory.
    pub path: String,
}

/// Parses the text of `/proc/PID/maps`.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?.as_bytes();
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _device = fields.next()?;
            let _inode = fields.next()?;
            let path = fields.next().unwrap_or("").trim_start().to_string();
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                readable: perms.first() == Some(&b'r'),
                writable: perms.get(1) == Some(&b'w'),
                executable: perms.get(2) == Some(&b'x'),
                offset,
                path,
            })
        })
        .collect()
}

/// The memory map of a process.
pub fn read_maps(pid: Pid) -> std::io::Result<Vec<Mapping>> {
    Ok(parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// A module (a file-backed executable image) mapped in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    /// Path on this system, or `[vdso]`.
    pub path: String,
    /// Address of the mapping at file offset 0.
    pub base: u64,
    /// For `[vdso]`: the image read from memory.
    pub image: Option<Vec<u8>>,
}

/// The modules in a memory map: every file with an executable mapping, at the
/// address of its offset-0 mapping; `[vdso]` with its memory image.
pub fn modules_in(pid: Pid, maps: &[Mapping]) -> Vec<LoadedModule> {
    let mut modules: Vec<LoadedModule> = Vec::new();
    for map in maps.iter().filter(|m| m.executable) {
        if map.path == "[vdso]" {
            let mut image = vec![0u8; (map.end - map.start) as usize];
            let n = read_memory(pid, map.start, &mut image);
            image.truncate(n);
            modules.push(LoadedModule { path: map.path.clone(), base: map.start, image: Some(image) });
            continue;
        }
        if !map.path.starts_with('/') || map.path.ends_with(" (deleted)") {
            continue;
        }
        if modules.iter().any(|m| m.path == map.path) {
            continue;
        }
        let base = maps
            .iter()
            .filter(|m| m.path == map.path && m.offset == 0)
            .map(|m| m.start)
            .min()
            .unwrap_or(map.start - map.offset);
        modules.push(LoadedModule { path: map.path.clone(), base, image: None });
    }
    modules
}

/// Adds to `known` every module of `maps` it does not hold yet (same path
/// and base): the modules seen mapped over a recording, in order of first
/// sight.
pub fn add_new_modules(known: &mut Vec<LoadedModule>, pid: Pid, maps: &[Mapping]) {
    for module in modules_in(pid, maps) {
        if !known.iter().any(|m| m.path == module.path && m.base == module.base) {
            tracing::debug!(path = module.path, base = format_args!("{:#x}", module.base), "module");
            known.push(module);
        }
    }
}

/// `/proc/PID/exe`.
pub fn executable_path(pid: Pid) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The process (thread group) a thread belongs to.
pub fn thread_group(tid: Pid) -> Option<Pid> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let tgid = status.lines().find_map(|line| line.strip_prefix("Tgid:"))?.trim().parse().ok()?;
    Some(Pid::from_raw(tgid))
}

/// True when the process has a handler installed for `signal` (`SigCgt`).
pub fn has_handler(pid: Pid, tid: Pid, signal: Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask >> (signal as i32 - 1) & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let text = "00400000-00401000 r--p 00000000 fe:01 123 /usr/bin/prog\n\
                    00401000-00402000 r-xp 00001000 fe:01 123 /usr/bin/prog\n\
                    7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0                          [vdso]\n\
                    7ffff7fc3000-7ffff7fc5000 rw-p 00000000 00:00 0 \n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[1].start, 0x401000);
        assert!(maps[1].executable && !maps[1].writable);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[3].path, "");
    }

    #[test]
    fn missing_program_is_reported() {
        let error = launch(&LaunchOptions::new("/nonexistent/program", Vec::<String>::new())).unwrap_err();
        assert!(matches!(error, LaunchError::Exec { source: nix::Error::ENOENT, .. }), "{error}");
    }
}
