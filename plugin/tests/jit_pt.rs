//! Intel PT through JIT code: a trace generated over the code a real
//! Node.js run wrote to its jitdump (random walks of that code's control
//! flow, encoded as PT), in a bundle that lists the jitdump. retrace must
//! decode exactly the walked instructions and name each after the V8
//! function containing it, as V8's own perf map names it.

use std::process::Command;

use retrace_decoder::image::Image;
use retrace_decoder::jitdump::{CodeRegions, Jitdump};
use retrace_tests::cfg_walk::{walk, WalkOptions};
use retrace_tests::node::{optimized_fib_names, NodePerfRun, FIB_SCRIPT};
use retrace_tests::tools::{require, which};

#[test]
fn pt_through_jit_code_decodes_with_v8_names() {
    let Some(node) = which("node") else {
        require("node (apt-get install nodejs)", false);
        return;
    };
    let run = NodePerfRun::run(&node, "jit-pt", FIB_SCRIPT);
    let dump = Jitdump::parse(&run.dump).expect("jitdump");
    let regions = CodeRegions::from_dump(&dump);
    let mut image = Image::new();
    regions.add_to_image(&mut image, None);
    // Walk from the script's functions (V8-generated JS code) only, so the
    // trace stays in code the jitdump describes.
    let fib_names = optimized_fib_names(&run.script);
    let entries: Vec<u64> = regions
        .visible_at(None)
        .into_iter()
        .filter(|(_, region)| region.size() > 0 && region.name_lossy().contains(&*run.script.to_string_lossy()))
        .map(|(address, _)| address)
        .collect();
    assert!(!entries.is_empty(), "no JS function of the script in the jitdump");
    let walked = walk(&image, &entries, WalkOptions { seed: 3, instructions: 3000, psb_period: 512, timing: false, overflow_one_in: 0 });
    assert!(walked.executed.len() >= 3000);

    let dir = run.dir.join("bundle");
    let trace_json = retrace_tests::bundles::write_generated_bundle(&dir, &walked.trace, &[]);
    // List the jitdump in the process (retrace's extra key), copied into
    // the bundle (a bundle names no file outside itself).
    let dump_name = run.dump_path.file_name().unwrap().to_str().unwrap();
    std::fs::copy(&run.dump_path, dir.join(dump_name)).unwrap();
    let mut description: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace_json).unwrap()).unwrap();
    description["processes"][0]["jitdumps"] = serde_json::json!([dump_name]);
    std::fs::write(&trace_json, serde_json::to_vec_pretty(&description).unwrap()).unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_retrace"))
        .args(["dump", "instructions", "-a", "-f", "--json", "--no-lldb-quirks"])
        .arg(&trace_json)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let items: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).expect("one JSON array");
    let instructions: Vec<&serde_json::Value> = items.iter().filter(|i| i.get("loadAddress").is_some()).collect();
    let addresses: Vec<u64> =
        instructions.iter().map(|i| u64::from_str_radix(i["loadAddress"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()).collect();
    assert_eq!(addresses, walked.executed, "decoded instructions differ from the walk");

    // Names: V8's perf map is the independent truth (every LOAD is in it with
    // its address, size and name; for an address listed twice, the later line).
    let module = run.dump_path.file_name().unwrap().to_str().unwrap().to_string();
    let mut named_fib = 0;
    for (item, &address) in instructions.iter().zip(&addresses) {
        let expected = run.perf_map.iter().rev().find(|e| e.start <= address && address < e.start + e.size).map(|e| e.name.as_str());
        assert_eq!(item["symbol"].as_str(), expected, "{address:#x}");
        assert_eq!(item["module"].as_str(), Some(module.as_str()), "{address:#x}");
        named_fib += usize::from(expected.is_some_and(|name| fib_names.iter().any(|f| f == name)));
    }
    assert!(named_fib > 0, "no instruction in the optimized fib");
}
