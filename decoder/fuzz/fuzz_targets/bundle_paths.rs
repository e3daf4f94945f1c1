//! Fuzzes where a bundle's names lead (`bundle::paths::BundleDir`): the
//! input is a name a hostile trace.json could hold, read by a bundle in a
//! folder beside a canary, with an exec'd image's folder, a link inside
//! and links out. A name is either refused, or a path inside the bundle:
//! lexically (no `..` above it, not absolute) and once links are
//! resolved. Must never panic.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::bundle::paths::{BundleDir, Reach};

/// The bundle: `root/bundle` with `modules/lib/libc.so.6`, `exec1/`, a
/// link inside (`modules/libc` → `lib/libc.so.6`), links out (`out` →
/// `root`, `canary` → `root/canary`, `dangling` → `root/nothing`).
fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("retrace-fuzz-paths-{}", std::process::id()));
        let bundle = root.join("bundle");
        std::fs::create_dir_all(bundle.join("modules/lib")).unwrap();
        std::fs::create_dir_all(bundle.join("exec1")).unwrap();
        std::fs::write(bundle.join("modules/lib/libc.so.6"), b"elf").unwrap();
        std::fs::write(root.join("canary"), b"canary").unwrap();
        std::fs::write(bundle.join("trace.json"), br#"{"retrace":{"execImages":["exec1/trace.json"]}}"#).unwrap();
        let _ = std::os::unix::fs::symlink("lib/libc.so.6", bundle.join("modules/libc"));
        let _ = std::os::unix::fs::symlink(&root, bundle.join("out"));
        let _ = std::os::unix::fs::symlink(root.join("canary"), bundle.join("canary"));
        let _ = std::os::unix::fs::symlink(root.join("nothing"), bundle.join("dangling"));
        root.canonicalize().unwrap()
    })
}

/// `path` with `.` and `..` taken away (`None`: it climbs above its start).
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

fn check(dir: &BundleDir, bundle: &Path, named: &str) {
    for found in [dir.file(named), dir.module(Some(named), "/lib/libc.so.6")].into_iter().flatten() {
        let normal = lexical(&found).expect("a path inside never climbs above /");
        assert!(normal.starts_with(bundle), "{named:?} led to {}", found.display());
        if let Ok(real) = found.canonicalize() {
            assert!(real.starts_with(bundle), "{named:?} led through a link to {}", real.display());
        }
    }
    if let Some(copy) = dir.copy_of_mapped(named) {
        assert!(lexical(&copy).unwrap().starts_with(bundle.join("modules")), "{named:?}'s copy is {}", copy.display());
    }
    assert!(dir.module(None, named).is_err(), "a module without a copy is read only when allowed");
}

fuzz_target!(|data: &[u8]| {
    let Ok(named) = std::str::from_utf8(data) else { return };
    let bundle = root().join("bundle");
    check(&BundleDir::new(&bundle, Reach::Inside), &bundle, named);
    check(&BundleDir::of_trace_json(&bundle.join("exec1/trace.json"), Reach::Inside), &bundle, named);
});
