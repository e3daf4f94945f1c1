//! Node.js as a real jitdump producer: runs a script under V8's perf
//! options and collects both of V8's outputs, the jitdump and the perf map.
//!
//! `node --perf-prof` writes `jit-<pid>.dump` into the working directory;
//! `--perf-basic-prof` writes `/tmp/perf-<pid>.map`, one `hexaddr hexsize name`
//! line per code object. V8 writes the two from the same code events with
//! separate writers, so the map is an independent account of the dump's
//! LOAD records (see `tests/tests/jitdump_node.rs` for how the two differ).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of a perf map.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PerfMapEntry {
    /// Start address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// The code object's name (may contain spaces).
    pub name: String,
}

/// Parses a perf map (`/tmp/perf-<pid>.map`): `hexaddr hexsize name` per line.
/// Panics on a line that is not in that form.
pub fn parse_perf_map(text: &str) -> Vec<PerfMapEntry> {
    text.lines()
        .map(|line| {
            let mut fields = line.splitn(3, ' ');
            let mut hex = || u64::from_str_radix(fields.next().unwrap_or_default(), 16).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            let (start, size) = (hex(), hex());
            let name = fields.next().unwrap_or_else(|| panic!("{line:?}: no name")).to_string();
            PerfMapEntry { start, size, name }
        })
        .collect()
}

/// A finished `node --perf-prof --perf-basic-prof --interpreted-frames-native-stack`
/// run. Its directory is removed when it is dropped; the perf map is removed
/// from /tmp as soon as it is read.
#[derive(Debug)]
pub struct NodePerfRun {
    /// The working directory (holds the script and the jitdump).
    pub dir: PathBuf,
    /// The script's canonical path (V8 names its functions after it).
    pub script: PathBuf,
    /// The node process's pid.
    pub pid: u32,
    /// The jitdump's path (`<dir>/jit-<pid>.dump`).
    pub dump_path: PathBuf,
    /// The jitdump's bytes.
    pub dump: Vec<u8>,
    /// The perf map's lines.
    pub perf_map: Vec<PerfMapEntry>,
    /// What the script printed.
    pub stdout: String,
}

impl NodePerfRun {
    /// Runs `node` (the binary at `node`) on `script` (JavaScript source) in
    /// a fresh directory named after `tag` under the system temp directory.
    pub fn run(node: &Path, tag: &str, script: &str) -> NodePerfRun {
        let dir = std::env::temp_dir().join(format!("retrace-jitdump-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        let script_path = dir.join("script.js");
        std::fs::write(&script_path, script).expect("write the script");
        let child = Command::new(node)
            .args(["--perf-prof", "--perf-basic-prof", "--interpreted-frames-native-stack", "script.js"])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start node");
        let pid = child.id();
        let output = child.wait_with_output().expect("wait for node");
        let map_path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let map_text = std::fs::read_to_string(&map_path);
        let _ = std::fs::remove_file(&map_path);
        let mut run = NodePerfRun {
            dump_path: dir.join(format!("jit-{pid}.dump")),
            dir,
            script: std::fs::canonicalize(&script_path).unwrap_or(script_path),
            pid,
            dump: Vec::new(),
            perf_map: Vec::new(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        };
        assert!(output.status.success(), "node failed: {output:?}");
        let map_text = map_text.unwrap_or_else(|e| panic!("{}: {e}", map_path.display()));
        run.perf_map = parse_perf_map(&map_text);
        run.dump = std::fs::read(&run.dump_path).unwrap_or_else(|e| panic!("{}: {e}", run.dump_path.display()));
        run
    }
}

impl Drop for NodePerfRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A script whose hot function `fib` (line 1, column 13 in V8's counting)
/// V8 compiles with every tier: interpreter (`~`), Sparkplug (`^`) and
/// TurboFan (`*`). It prints [`FIB_SCRIPT_OUTPUT`].
pub const FIB_SCRIPT: &str = "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
let total = 0;
for (let i = 0; i < 30; i++) total += fib(22);
console.log(total);
";

/// What [`FIB_SCRIPT`] prints: 30 × fib(22).
pub const FIB_SCRIPT_OUTPUT: &str = "531330\n";

/// The names V8 gives the TurboFan-optimized `fib` of [`FIB_SCRIPT`] at
/// `script` (its canonical path): `JS:*fib <path>:1:13` (V8 11, Node 20) or
/// `LazyCompile:*fib <path>:1` (V8 10.2, Debian 12's Node 18).
pub fn optimized_fib_names(script: &Path) -> [String; 2] {
    let path = script.display();
    [format!("JS:*fib {path}:1:13"), format!("LazyCompile:*fib {path}:1")]
}
