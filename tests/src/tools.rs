//! Finding the external tools end-to-end tests need.
//!
//! Under `CI=true` a missing tool is a failure, never a skip: the README's
//! test command installs everything, so a missing tool in CI is a bug.

/// True when running under CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Returns `true` if the test may run; `false` (after printing why) if it
/// must be skipped outside CI. Panics under CI when `available` is false.
pub fn require(what: &str, available: bool) -> bool {
    if available {
        return true;
    }
    if in_ci() {
        panic!("{what} is missing under CI=true; the test command must install it");
    }
    eprintln!("SKIPPED: {what} is missing (install it, or run the README's test command)");
    false
}

/// The full path of `program` if it is on `PATH`.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
}
