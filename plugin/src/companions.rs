//! Where retrace's programs find the programs they start: a path named in
//! the environment, the first of some names on `PATH`, a program beside
//! the running one, and the LLDB shim. `retrace replay` and `retrace-dap`
//! look them up the same way.

use std::path::PathBuf;

/// The path in environment variable `name`, when set and not empty.
pub fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The first of `names` found on `PATH`.
pub fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| candidate.is_file()))
}

/// The folder of the running program (`target/debug` in a checkout).
fn here() -> PathBuf {
    std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from)).unwrap_or_default()
}

/// The program `name` beside the running one (whether there or not).
pub fn beside_this_program(name: &str) -> PathBuf {
    here().join(name)
}

/// The LLDB shim: $RETRACE_SHIM, else `lldb-scripts/retrace.py` of the
/// checkout the running program was built in (whether there or not).
pub fn shim() -> PathBuf {
    env_path("RETRACE_SHIM").unwrap_or_else(|| {
        // target/{debug,release}/PROGRAM → lldb-scripts/retrace.py
        let here = here();
        let checkout = here.ancestors().nth(2).unwrap_or(&here);
        checkout.join("lldb-scripts").join("retrace.py")
    })
}
