//! Why an inferior could not do what it was asked: the error of every
//! inferior, gdbstub's `Target::Error` for them all. Its text is what the
//! client is told (an `E` reply's error string, a monitor command's
//! `error:` line), so each kind keeps the words of its cause.

use nix::errno::Errno;

/// Why an inferior could not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferiorError {
    /// The inferior has no such capability (tracing a stopped program,
    /// restarting a saved trace).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The request names what is not there or asks for what cannot be
    /// (a thread not in the process, a trace size not a power of two).
    #[error("{0}")]
    InvalidRequest(String),
    /// A sound request refused in the present state (a thread already
    /// traced, a limit reached, the past changed in branch mode).
    #[error("{0}")]
    Refused(String),
    /// Controlling the process failed: what was being done, and why.
    #[error("{what}: {errno}")]
    Process {
        /// What was being done (`resuming thread 42`).
        what: String,
        /// The system call's error.
        errno: Errno,
    },
    /// A saved trace could not be opened: the file and what is wrong with
    /// it.
    #[error("{0}")]
    Bundle(String),
    /// No process is there.
    #[error("no process")]
    NoProcess,
}

/// The error's words (what the protocol's replies carry).
impl From<InferiorError> for String {
    fn from(error: InferiorError) -> String {
        error.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_its_cause_in_the_words_a_client_is_shown() {
        assert_eq!(InferiorError::Process { what: "resuming thread 42".into(), errno: Errno::EPERM }.to_string(), "resuming thread 42: EPERM: Operation not permitted");
        assert_eq!(String::from(InferiorError::Refused("Thread 7 already traced".into())), "Thread 7 already traced");
        assert_eq!(InferiorError::NoProcess.to_string(), "no process");
    }
}
