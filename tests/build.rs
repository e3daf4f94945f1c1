//! Builds the libipt shim used by the differential tests and benchmarks.
//!
//! Needs Debian's `libipt-dev` (2.0.5). Without it the build fails under
//! `CI=true`; elsewhere the libipt tests are compiled out with a notice.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=c/libipt_shim.c");
    println!("cargo:rerun-if-env-changed=CI");
    // Installing libipt-dev later must bring the libipt tests in.
    println!("cargo:rerun-if-changed=/usr/include/intel-pt.h");
    println!("cargo::rustc-check-cfg=cfg(retrace_libipt)");
    let header = Path::new("/usr/include/intel-pt.h");
    if !header.exists() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("libipt-dev is not installed (no /usr/include/intel-pt.h); run `apt-get install -y libipt-dev`");
        }
        println!("cargo:warning=libipt-dev missing: libipt differential tests and benchmarks are compiled out");
        return;
    }
    cc::Build::new().file("c/libipt_shim.c").opt_level(2).warnings(true).compile("libipt_shim");
    println!("cargo:rustc-link-lib=ipt");
    println!("cargo:rustc-cfg=retrace_libipt");
}
