//! Builds retrace's Valgrind tool (`valgrind/retrace.c`) against the
//! installed Valgrind, when its headers and static libraries are here
//! (Debian's `valgrind` package). A tool must match the Valgrind that runs
//! it, so it is built on this machine, never shipped. Without Valgrind the
//! collector builds without the tool and `--backend valgrind` says what to
//! install.

include!("valgrind/build_tool.rs");

fn main() {
    println!("cargo:rerun-if-changed=valgrind/retrace.c");
    println!("cargo:rerun-if-changed=valgrind/build_tool.rs");
    println!("cargo:rerun-if-changed={VALGRIND_INCLUDE}/pub_tool_basics.h");
    println!("cargo:rustc-check-cfg=cfg(valgrind_tool)");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" || !valgrind_tool_sdk_present() {
        println!("cargo:warning=Valgrind's headers or libraries are not installed (apt-get install valgrind): retrace record --backend valgrind will be unavailable");
        return;
    }
    let tool = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("retrace-amd64-linux");
    if let Err(error) = build_valgrind_tool(std::path::Path::new("valgrind/retrace.c"), &tool, &["-Wall", "-Werror"]) {
        panic!("building retrace's Valgrind tool (collector/valgrind/retrace.c) failed: {error}");
    }
    println!("cargo:rustc-cfg=valgrind_tool");
    println!("cargo:rustc-env=RETRACE_VALGRIND_TOOL={}", tool.display());
}
