//! What the plugin's test files share (`mod common;` in each).

use std::path::{Path, PathBuf};
use std::process::Command;

/// An empty directory `<target tmp>/<group>/<name>` for one test.
pub fn work_dir(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The `retrace` command with an environment of `PATH` only, so that two
/// recordings of one program run the same way.
#[allow(dead_code)] // not every test file runs retrace this way
pub fn retrace() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retrace"));
    command.env_clear().env("PATH", "/usr/bin:/bin");
    command
}
