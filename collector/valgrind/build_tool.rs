// Building a Valgrind tool outside Valgrind's tree, against the installed
// Valgrind (Debian's `valgrind` package ships the headers and the static
// libraries a tool links with). Included (`include!`) by `collector/build.rs`
// for retrace's tool and by `tests/src/valgrind.rs` for the tests' own, so
// that both are built the one way.

/// Valgrind's tool headers.
const VALGRIND_INCLUDE: &str = "/usr/include/valgrind";
/// Valgrind's core, VEX and support libraries a tool links with.
const VALGRIND_LIBS: &str = "/usr/lib/x86_64-linux-gnu/valgrind";

/// Whether the installed Valgrind's headers and libraries are here.
fn valgrind_tool_sdk_present() -> bool {
    std::path::Path::new(VALGRIND_INCLUDE).join("pub_tool_basics.h").exists()
        && std::path::Path::new(VALGRIND_LIBS).join("libcoregrind-amd64-linux.a").exists()
}

/// Compiles the tool `source` (with `extra` gcc options) and links it as
/// the static executable `tool` Valgrind loads at 0x58000000 (the object
/// file beside it); gcc's complaint when either step fails.
fn build_valgrind_tool(source: &std::path::Path, tool: &std::path::Path, extra: &[&str]) -> Result<(), String> {
    let object = tool.with_extension("o");
    let run = |command: &mut std::process::Command| -> Result<(), String> {
        let out = command.output().map_err(|e| format!("running gcc: {e}"))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(format!("{command:?}: {}", String::from_utf8_lossy(&out.stderr))),
        }
    };
    run(std::process::Command::new("gcc")
        .args(["-c", "-O2"])
        .args(extra)
        .args(["-I", VALGRIND_INCLUDE, "-DVGA_amd64=1", "-DVGO_linux=1", "-DVGP_amd64_linux=1", "-DVGPV_amd64_linux_vanilla=1"])
        .args(["-fno-stack-protector", "-fno-builtin", "-fno-strict-aliasing", "-fno-pie"])
        .arg(source)
        .arg("-o")
        .arg(&object))?;
    run(std::process::Command::new("gcc")
        .arg("-o")
        .arg(tool)
        .arg(&object)
        .args(["-static", "-nodefaultlibs", "-nostartfiles", "-u", "_start", "-Wl,--build-id=none", "-Wl,-Ttext-segment=0x58000000", "-no-pie"])
        .args(["libcoregrind-amd64-linux.a", "libvex-amd64-linux.a", "libgcc-sup-amd64-linux.a"].map(|l| format!("{VALGRIND_LIBS}/{l}")))
        .arg("-lgcc"))
}
