//! The error that ends a command, and the exit status it maps to.

use std::path::PathBuf;

/// An error that ends the command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing to standard output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// Anything else, already phrased for the user.
    #[error("{0}")]
    Message(String),
}

impl CliError {
    /// True when the reader of our output went away (e.g. `| head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    pub(crate) fn file(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
        move |source| CliError::File { path: path.to_path_buf(), source }
    }
}

