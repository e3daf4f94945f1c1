//! Thread ids that name no thread of the program, and resumes that could
//! never stop: refused with an error before gdbstub sees them. gdbstub
//! 0.7.10 resumes a thread it is told of without asking whether it exists
//! (then nothing runs and no stop ever comes), takes `c` before any `Hc` as
//! a resume of thread 1, and ends its session on `s` after `Hc-1`, on `T-1`
//! and on `Hg-1`.

use crate::inferior::Inferior;

/// What a thread id in a packet names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// `-1`: every thread.
    All,
    /// `0`: any one thread.
    Any,
    /// This thread.
    One(u64),
}

/// Reads a thread id (`tid`, `-1`, `0`, `p<pid>.<tid>`); `None` when its
/// process is not the program's.
fn named(text: &str, pid: u32) -> Option<Named> {
    let part = |p: &str| match p {
        "-1" => Some(Named::All),
        _ => match u64::from_str_radix(p, 16).ok()? {
            0 => Some(Named::Any),
            n => Some(Named::One(n)),
        },
    };
    let tid = match text.strip_prefix('p') {
        Some(rest) => {
            let (process, tid) = rest.split_once('.')?;
            match part(process)? {
                Named::One(p) if p != pid as u64 => return None,
                _ => tid,
            }
        }
        None => text,
    };
    part(tid)
}

/// The thread selections a session has made that later packets depend on.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    /// What `Hc` selected for `c`, `s`, `C`, `S` (none yet: nothing).
    resume: Option<Named>,
    /// What `Hg` selected (registers, memory, branch tracing).
    general: Option<Named>,
}

impl Selection {
    /// The one thread `Hg` selected (any thread: the target's choice).
    pub(crate) fn general_thread(&self, target: &impl Inferior) -> Option<u64> {
        match self.general {
            Some(Named::One(tid)) => Some(tid),
            Some(Named::Any) => target.any_thread(),
            _ => None,
        }
    }

    /// `Err` with the reason when `text` (a packet that passed
    /// [`super::grammar`]) names a thread or process the program does not
    /// have, or would resume nothing; records what `Hc` selects.
    pub(crate) fn check(&mut self, text: &str, target: &impl Inferior) -> Result<(), &'static str> {
        let pid = target.pid();
        let exists = |named: Option<Named>| match named {
            Some(Named::One(tid)) => target.has_thread(tid),
            Some(Named::All | Named::Any) => true,
            None => false,
        };
        let specific = |named: Option<Named>| matches!(named, Some(Named::One(_)));
        if let Some(thread) = text.strip_prefix("Hc") {
            let thread = named(thread, pid);
            if !exists(thread) {
                return Err("no such thread");
            }
            self.resume = thread;
        } else if let Some(thread) = text.strip_prefix("Hg") {
            let thread = named(thread, pid);
            if !exists(thread) || thread == Some(Named::All) {
                return Err("registers are read from one thread");
            }
            self.general = thread;
        } else if let Some(thread) = text.strip_prefix('T').or_else(|| text.strip_prefix("qThreadExtraInfo,")) {
            if !specific(named(thread, pid)) {
                return Err("not one thread");
            }
            if text.starts_with('q') && !exists(named(thread, pid)) {
                return Err("no such thread");
            }
        } else if let Some(actions) = text.strip_prefix("vCont;") {
            for action in actions.split(';') {
                if let Some((_, thread)) = action.split_once(':') {
                    if !exists(named(thread, pid)) {
                        return Err("no such thread");
                    }
                }
            }
        } else if matches!(text.as_bytes().first(), Some(b'c' | b'C')) {
            if self.resume.is_none() {
                return Err("no thread selected (Hc)");
            }
        } else if matches!(text.as_bytes().first(), Some(b's' | b'S')) {
            if matches!(self.resume, None | Some(Named::All)) {
                return Err("a step needs one thread (Hc)");
            }
        } else if let Some(process) = text.strip_prefix("D;").or_else(|| text.strip_prefix("vKill;")) {
            if u32::from_str_radix(process, 16).ok() != Some(pid) {
                return Err("no such process");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_read_with_their_process() {
        assert_eq!(named("-1", 7), Some(Named::All));
        assert_eq!(named("0", 7), Some(Named::Any));
        assert_eq!(named("1c", 7), Some(Named::One(0x1c)));
        assert_eq!(named("p7.1c", 7), Some(Named::One(0x1c)));
        assert_eq!(named("p7.-1", 7), Some(Named::All));
        assert_eq!(named("p-1.-1", 7), Some(Named::All));
        assert_eq!(named("p8.1c", 7), None);
        assert_eq!(named("p0.0", 7), Some(Named::Any));
    }
}
