//! Signal numbers on the wire. The gdb-remote protocol uses GDB's own,
//! target-independent numbering (SIGUSR1 = 30, SIGBUS = 10, …), and both GDB
//! 13 and LLDB 22 read stop replies from this stub that way; ptrace uses
//! Linux's. This module maps between the two.

use gdbstub::common::Signal as Gdb;
use nix::sys::signal::Signal;

/// GDB's number for a Linux signal.
pub fn to_gdb(signal: Signal) -> Gdb {
    match signal {
        Signal::SIGHUP => Gdb::SIGHUP,
        Signal::SIGINT => Gdb::SIGINT,
        Signal::SIGQUIT => Gdb::SIGQUIT,
        Signal::SIGILL => Gdb::SIGILL,
        Signal::SIGTRAP => Gdb::SIGTRAP,
        Signal::SIGABRT => Gdb::SIGABRT,
        Signal::SIGBUS => Gdb::SIGBUS,
        Signal::SIGFPE => Gdb::SIGFPE,
        Signal::SIGKILL => Gdb::SIGKILL,
        Signal::SIGUSR1 => Gdb::SIGUSR1,
        Signal::SIGSEGV => Gdb::SIGSEGV,
        Signal::SIGUSR2 => Gdb::SIGUSR2,
        Signal::SIGPIPE => Gdb::SIGPIPE,
        Signal::SIGALRM => Gdb::SIGALRM,
        Signal::SIGTERM => Gdb::SIGTERM,
        Signal::SIGCHLD => Gdb::SIGCHLD,
        Signal::SIGCONT => Gdb::SIGCONT,
        Signal::SIGSTOP => Gdb::SIGSTOP,
        Signal::SIGTSTP => Gdb::SIGTSTP,
        Signal::SIGTTIN => Gdb::SIGTTIN,
        Signal::SIGTTOU => Gdb::SIGTTOU,
        Signal::SIGURG => Gdb::SIGURG,
        Signal::SIGXCPU => Gdb::SIGXCPU,
        Signal::SIGXFSZ => Gdb::SIGXFSZ,
        Signal::SIGVTALRM => Gdb::SIGVTALRM,
        Signal::SIGPROF => Gdb::SIGPROF,
        Signal::SIGWINCH => Gdb::SIGWINCH,
        Signal::SIGIO => Gdb::SIGIO,
        Signal::SIGPWR => Gdb::SIGPWR,
        Signal::SIGSYS => Gdb::SIGSYS,
        Signal::SIGSTKFLT => Gdb::SIGZERO,
        _ => Gdb::SIGZERO,
    }
}

/// What LLDB shows of a stop by `signal` (`signal SIGSEGV`, as natively).
pub fn stop_words(signal: Gdb) -> String {
    match from_gdb(signal) {
        Some(signal) => format!("signal {}", signal.as_str()),
        None => format!("signal {}", signal.0),
    }
}

/// The Linux signal for GDB's number (`None` for 0 and signals Linux lacks).
pub fn from_gdb(signal: Gdb) -> Option<Signal> {
    [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGABRT,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGKILL,
        Signal::SIGUSR1,
        Signal::SIGSEGV,
        Signal::SIGUSR2,
        Signal::SIGPIPE,
        Signal::SIGALRM,
        Signal::SIGTERM,
        Signal::SIGCHLD,
        Signal::SIGCONT,
        Signal::SIGSTOP,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGURG,
        Signal::SIGXCPU,
        Signal::SIGXFSZ,
        Signal::SIGVTALRM,
        Signal::SIGPROF,
        Signal::SIGWINCH,
        Signal::SIGIO,
        Signal::SIGPWR,
        Signal::SIGSYS,
    ]
    .into_iter()
    .find(|linux| to_gdb(*linux) == signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_numbers_differ_from_linux_and_round_trip() {
        assert_eq!(to_gdb(Signal::SIGUSR1).0, 30);
        assert_eq!(to_gdb(Signal::SIGBUS).0, 10);
        assert_eq!(to_gdb(Signal::SIGTRAP).0, 5);
        for signal in Signal::iterator() {
            if let Some(back) = from_gdb(to_gdb(signal)) {
                assert_eq!(back, signal);
            }
        }
        assert_eq!(from_gdb(Gdb::SIGZERO), None);
    }
}
