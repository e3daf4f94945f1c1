//! Builds retrace's Valgrind tool (`valgrind/retrace.c`) against the
//! installed Valgrind, when its headers and static libraries are here
//! (Debian's `valgrind` package). A tool must match the Valgrind that runs
//! it, so it is built on this machine, never shipped. Without Valgrind the
//! collector builds without the tool and `--backend valgrind` says what to
//! install.

use std::path::Path;
use std::process::Command;

const INCLUDE: &str = "/usr/include/valgrind";
const LIBS: &str = "/usr/lib/x86_64-linux-gnu/valgrind";

fn main() {
    println!("cargo:rerun-if-changed=valgrind/retrace.c");
    println!("cargo:rerun-if-changed={INCLUDE}/pub_tool_basics.h");
    println!("cargo:rustc-check-cfg=cfg(valgrind_tool)");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || !Path::new(INCLUDE).join("pub_tool_basics.h").exists() || !Path::new(LIBS).join("libcoregrind-amd64-linux.a").exists() {
        println!("cargo:warning=Valgrind's headers or libraries are not installed (apt-get install valgrind): retrace record --backend valgrind will be unavailable");
        return;
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let object = out.join("retrace.o");
    let tool = out.join("retrace-amd64-linux");
    let compiled = Command::new("gcc")
        .args(["-c", "-O2", "-Wall", "-Werror", "-I", INCLUDE])
        .args(["-DVGA_amd64=1", "-DVGO_linux=1", "-DVGP_amd64_linux=1", "-DVGPV_amd64_linux_vanilla=1"])
        .args(["-fno-stack-protector", "-fno-builtin", "-fno-strict-aliasing", "-fno-pie", "valgrind/retrace.c", "-o"])
        .arg(&object)
        .status();
    if !compiled.is_ok_and(|s| s.success()) {
        panic!("compiling collector/valgrind/retrace.c failed");
    }
    let linked = Command::new("gcc")
        .arg("-o")
        .arg(&tool)
        .arg(&object)
        .args(["-static", "-nodefaultlibs", "-nostartfiles", "-u", "_start", "-Wl,--build-id=none", "-Wl,-Ttext-segment=0x58000000", "-no-pie"])
        .args(["libcoregrind-amd64-linux.a", "libvex-amd64-linux.a", "libgcc-sup-amd64-linux.a"].map(|l| format!("{LIBS}/{l}")))
        .arg("-lgcc")
        .status();
    if !linked.is_ok_and(|s| s.success()) {
        panic!("linking retrace's Valgrind tool failed");
    }
    println!("cargo:rustc-cfg=valgrind_tool");
    println!("cargo:rustc-env=RETRACE_VALGRIND_TOOL={}", tool.display());
}
