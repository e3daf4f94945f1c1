//! `docs/ARCHITECTURE.md`'s module map names every module of every crate
//! (and every file and module of the LLDB shim), each in its crate's
//! section: a module added without a line there fails here.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The modules of the crate whose sources are in `src`: file paths without
/// `.rs` (`mod.rs` names its folder), `::`-joined; the crate root, binaries
/// and test-only files (`tests.rs`) left out.
fn modules(src: &Path) -> Vec<String> {
    fn walk(dir: &Path, src: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name() != Some("bin".as_ref()) {
                    walk(&path, src, out);
                }
                continue;
            }
            if path.extension() != Some("rs".as_ref()) {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            if parts.is_empty() || parts.last().is_some_and(|p| p == "tests") {
                continue;
            }
            out.push(parts.join("::"));
        }
    }
    let mut out = Vec::new();
    walk(src, src, &mut out);
    out.sort();
    out
}

/// The text of section `### name` of the module map (up to the next
/// heading of its level or above).
fn section<'a>(doc: &'a str, name: &str) -> &'a str {
    let map = &doc[doc.find("## Module map").expect("a module map")..];
    let heading = format!("\n### {name}\n");
    let start = map.find(&heading).unwrap_or_else(|| panic!("no section `### {name}` in the module map")) + heading.len();
    let rest = &map[start..];
    let end = [rest.find("\n### "), rest.find("\n## ")].into_iter().flatten().min().unwrap_or(rest.len());
    &rest[..end]
}

/// The names in `names` that `text` does not show in backquotes.
fn unnamed(text: &str, names: &[String]) -> Vec<String> {
    names.iter().filter(|n| !text.contains(&format!("`{n}`"))).cloned().collect()
}

#[test]
fn every_module_of_every_crate_is_in_the_module_map() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for krate in ["decoder", "collector", "stub", "plugin", "tests"] {
        let names = modules(&root().join(krate).join("src"));
        assert!(names.len() >= 5, "{krate}: {names:?}");
        missing.extend(unnamed(section(&doc, krate), &names).into_iter().map(|m| format!("{krate}: {m}")));
    }
    let mut shim: Vec<String> = std::fs::read_dir(root().join("lldb-scripts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".py"))
        .collect();
    // The package beside it: `retrace_shim.NAME`.
    shim.extend(
        std::fs::read_dir(root().join("lldb-scripts/retrace_shim"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter_map(|name| Some(format!("retrace_shim.{}", name.strip_suffix(".py")?)))
            .filter(|name| name != "retrace_shim.__init__"),
    );
    shim.sort();
    assert!(shim.len() > 3, "{shim:?}");
    missing.extend(unnamed(section(&doc, "lldb-scripts"), &shim).into_iter().map(|f| format!("lldb-scripts: {f}")));
    assert!(section(&doc, "plugin/python").contains("`retrace_native`"));
    assert!(missing.is_empty(), "modules docs/ARCHITECTURE.md's module map does not name:\n{}", missing.join("\n"));
}

#[test]
fn a_module_named_only_in_another_crates_section_is_missing() {
    let doc = "# A\n## Module map\n### one\n| `a::b` | x |\n### two\n| `c` | y |\n## Next\n`d`\n";
    assert_eq!(unnamed(section(doc, "one"), &["a::b".into(), "c".into()]), vec!["c".to_string()]);
    assert_eq!(unnamed(section(doc, "two"), &["c".into(), "d".into()]), vec!["d".to_string()]);
}
