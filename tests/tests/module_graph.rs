//! The modules of the decoder, the collector, the stub and the plugin import
//! each other without circles, file by file and top-level module by
//! top-level module (what docs/ARCHITECTURE.md draws). The graph is read
//! from the sources: every `crate::a::b` and `super::b` path in code
//! (comments are skipped). A folder's `mod.rs` declaring or re-exporting
//! its own children (`pub use walk::FlowDecoder`) is the module tree, not
//! an import, and is not counted. An inline `#[cfg(test)] mod tests { … }`
//! is left out: its `super::` is the file itself, and what only tests use
//! is not a dependency of the code.
//!
//! No module of the stub's inferiors (`inferior/`: what is debugged)
//! reaches a protocol module.
//!
//! `cargo test -p retrace-tests --test module_graph -- --nocapture` prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules (file paths relative to `src`, without `.rs`; `mod.rs`
/// and `lib.rs` name their folder) and the modules each one refers to.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_name(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// The source without comments (line comments and doc comments; block
/// comments are not used in this project).
fn code_of(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// `code` without its inline test modules (`#[cfg(test)] mod name { … }`,
/// braces matched outside string and character literals).
fn without_inline_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let is_inline_mod = item.strip_prefix("mod ").and_then(|m| m.find(|c: char| c == '{' || c == ';').map(|i| m.as_bytes()[i] == b'{')) == Some(true);
        if !is_inline_mod {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let bytes = after.as_bytes();
        let (mut depth, mut i) = (0usize, open);
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        rest = &after[(i + 1).min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// Paths after `prefix` (`crate::` or `super::`), as module segments,
/// including those in `use crate::{a, b::c}` groups.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for member in group[..end].split(',') {
                paths.push(segments(member.trim()));
            }
        } else {
            paths.push(segments(rest));
        }
    }
    paths
}

fn segments(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(next) if !next.starts_with('{') => rest = next,
            Some(next) => {
                // A group below this path: its first member is enough to name the module.
                let inner = next.trim_start_matches('{');
                out.extend(segments(inner));
                break;
            }
            None => break,
        }
    }
    out
}

/// The longest known module that `path` (module segments, then perhaps an
/// item) names.
fn resolve(modules: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m))
}

fn graph(crate_src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(crate_src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_name(crate_src, f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let module = module_name(crate_src, file);
        let code = without_inline_tests(&code_of(&std::fs::read_to_string(file).unwrap()));
        // `super::` is the module's parent (for `a/mod.rs`, module `a`, too).
        let segments: Vec<String> = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
        let parent = segments[..segments.len().saturating_sub(1)].to_vec();
        let mut edges = BTreeSet::new();
        for path in paths_after(&code, "crate::") {
            edges.extend(resolve(&modules, &path));
        }
        for path in paths_after(&code, "super::") {
            let full: Vec<String> = parent.iter().cloned().chain(path).collect();
            edges.extend(resolve(&modules, &full));
        }
        edges.remove(&module);
        edges.remove("");
        graph.insert(module, edges);
    }
    graph
}

/// The same graph between top-level modules.
fn top_level(graph: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let mut out = Graph::new();
    for (module, edges) in graph {
        let entry = out.entry(top(module)).or_default();
        entry.extend(edges.iter().map(|e| top(e)).filter(|e| *e != top(module)));
    }
    out
}

/// A circle of imports, if there is one.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(graph: &Graph, node: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

fn print(name: &str, graph: &Graph) {
    println!("{name}:");
    for (module, edges) in graph {
        let edges: Vec<&str> = edges.iter().map(String::as_str).collect();
        println!("  {:<28} -> {}", if module.is_empty() { "(crate root)" } else { module }, edges.join(", "));
    }
}

fn check(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(crate_dir).join("src");
    let files = graph(&src);
    let modules = top_level(&files);
    print(&format!("{crate_dir}: files"), &files);
    print(&format!("{crate_dir}: top-level modules"), &modules);
    assert_eq!(circle(&files), None, "{crate_dir}: an import circle between files");
    assert_eq!(circle(&modules), None, "{crate_dir}: an import circle between top-level modules");
}

/// Every module `from` reaches through its imports, itself left out.
fn reached(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_string()];
    while let Some(module) = next.pop() {
        for edge in graph.get(&module).into_iter().flatten() {
            if seen.insert(edge.clone()) {
                next.push(edge.clone());
            }
        }
    }
    seen.remove(from);
    seen
}

/// `(inferior module, protocol module)` pairs where a module under `targets`
/// reaches one under `protocol`: the protocol (packets, reply text) sits
/// above the targets, which return typed values.
fn protocol_reached_from_targets(graph: &Graph, targets: &str, protocol: &str) -> Vec<(String, String)> {
    let under = |module: &str, top: &str| module == top || module.starts_with(&format!("{top}::"));
    graph
        .keys()
        .filter(|m| under(m, targets))
        .flat_map(|m| reached(graph, m).into_iter().filter(|r| under(r, protocol)).map(move |r| (m.clone(), r)))
        .collect()
}

#[test]
fn no_stub_inferior_module_reaches_the_protocol() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stub/src");
    let files = graph(&src);
    assert!(files.keys().any(|m| m.starts_with("inferior::")) && files.keys().any(|m| m.starts_with("protocol::")), "{:?}", files.keys());
    assert_eq!(protocol_reached_from_targets(&files, "inferior", "protocol"), Vec::<(String, String)>::new());
}

#[test]
fn a_protocol_module_reached_through_another_is_found() {
    let graph: Graph = [
        ("inferior::live", vec!["arch"]),
        ("arch", vec!["hex"]),
        ("hex", vec!["protocol::framing"]),
        ("protocol::framing", vec![]),
        ("protocol", vec!["inferior"]),
        ("inferior", vec![]),
    ]
    .into_iter()
    .map(|(m, edges)| (m.to_string(), edges.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(protocol_reached_from_targets(&graph, "inferior", "protocol"), vec![("inferior::live".to_string(), "protocol::framing".to_string())]);
}

#[test]
fn the_decoders_modules_import_each_other_without_circles() {
    check("decoder");
}

#[test]
fn the_stubs_modules_import_each_other_without_circles() {
    check("stub");
}

#[test]
fn the_collectors_modules_import_each_other_without_circles() {
    check("collector");
}

#[test]
fn the_plugins_modules_import_each_other_without_circles() {
    check("plugin");
}

#[test]
fn a_circle_is_found() {
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(circle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    graph.get_mut("c").unwrap().clear();
    assert_eq!(circle(&graph), None);
}

#[test]
fn paths_in_use_groups_and_code_are_read() {
    let code = code_of("use crate::{item::Item, flow::walk::FlowDecoder};\n// crate::comment\nlet x = crate::packet::sync::psb_offsets(d);");
    let paths = paths_after(&code, "crate::");
    assert_eq!(paths, vec![vec!["item".to_string(), "Item".into()], vec!["flow".into(), "walk".into(), "FlowDecoder".into()], vec!["packet".into(), "sync".into(), "psb_offsets".into()]]);
}

#[test]
fn inline_test_modules_are_left_out() {
    let code = "use crate::a::B;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f() { let c = '{'; let s = \"}{\"; crate::b::g(); }\n}\nfn h() { crate::c::i(); }\n#[cfg(test)]\nmod other;\n";
    let kept = without_inline_tests(code);
    assert_eq!(kept, "use crate::a::B;\n\nfn h() { crate::c::i(); }\n#[cfg(test)]\nmod other;\n");
    let paths = paths_after(&kept, "crate::");
    assert_eq!(paths, vec![vec!["a".to_string(), "B".into()], vec!["c".into(), "i".into()]]);
    assert!(paths_after(&kept, "super::").is_empty());
}
