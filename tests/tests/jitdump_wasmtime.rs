//! A real jitdump from wasmtime (PyPI's `wasmtime` package, its jitdump
//! profiler): every region retrace lists has the name, size, relative
//! placement and code bytes of the function in wasmtime's own compiled
//! artifact (`Module.serialize()`, an ELF file with one symbol per
//! function in `.text`).

use std::path::PathBuf;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use retrace_decoder::jitdump::{CodeRegions, Jitdump};

const SCRIPT: &str = r#"
import os, wasmtime
config = wasmtime.Config()
config.profiler = "jitdump"
engine = wasmtime.Engine(config)
store = wasmtime.Store(engine)
module = wasmtime.Module(engine, """
(module
  (func $fib (export "fib") (param i32) (result i32)
    (if (result i32) (i32.lt_u (local.get 0) (i32.const 2))
      (then (local.get 0))
      (else (i32.add (call $fib (i32.sub (local.get 0) (i32.const 1)))
                     (call $fib (i32.sub (local.get 0) (i32.const 2)))))))
  (func $sum (export "sum") (param i32 i32) (result i32)
    (i32.add (local.get 0) (local.get 1))))
""")
instance = wasmtime.Instance(store, module, [])
exports = instance.exports(store)
print(exports["fib"](store, 20), exports["sum"](store, 2, 3), os.getpid())
open("module.cwasm", "wb").write(module.serialize())
"#;

/// The Python with `wasmtime` that tests/run.sh prepares
/// (`RETRACE_WASMTIME_PYTHON`), or one found in `target/wasmtime-venv`.
fn wasmtime_python() -> Option<PathBuf> {
    let candidate = std::env::var_os("RETRACE_WASMTIME_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasmtime-venv/bin/python"));
    let works = Command::new(&candidate).args(["-c", "import wasmtime"]).output().is_ok_and(|o| o.status.success());
    works.then_some(candidate)
}

#[test]
fn wasmtime_jitdump_regions_equal_its_compiled_module() {
    let Some(python) = wasmtime_python() else {
        retrace_tests::tools::require("Python with the wasmtime package (tests/run.sh makes target/wasmtime-venv)", false);
        return;
    };
    let dir = std::env::temp_dir().join(format!("retrace-wasmtime-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gen.py"), SCRIPT).unwrap();
    let output = Command::new(&python).arg("gen.py").current_dir(&dir).output().expect("run python");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(&fields[..2], &["6765", "5"], "fib(20), sum(2, 3)");
    let pid = fields[2];

    let dump_bytes = std::fs::read(dir.join(format!("jit-{pid}.dump"))).expect("wasmtime wrote jit-<pid>.dump in its working directory");
    let dump = Jitdump::parse(&dump_bytes).expect("jitdump header");
    assert_eq!(dump.header().pid.to_string(), pid);
    let regions = CodeRegions::from_dump(&dump);
    assert_eq!(regions.errors(), &[]);

    let artifact = std::fs::read(dir.join("module.cwasm")).unwrap();
    let elf = object::File::parse(&*artifact).expect("the compiled module is ELF");
    let text = elf.section_by_name(".text").expect(".text");
    let code = text.data().unwrap();
    let mut functions: Vec<(u64, u64, String)> = elf
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address() - text.address(), s.size(), s.name().unwrap().to_string()))
        .collect();
    functions.sort();
    assert!(functions.len() >= 4, "{functions:?}");
    let listed = regions.regions();
    assert_eq!(listed.len(), functions.len(), "one LOAD per compiled function");
    let base = listed[0].address_at(None).unwrap();
    for (region, (offset, size, symbol)) in listed.iter().zip(&functions) {
        // Functions are named by their wasm name in the jitdump, by
        // `wasm[0]::function[N]::name` in the artifact.
        let expected = match symbol.strip_prefix("wasm[0]::function[") {
            Some(rest) => rest.split_once("]::").map(|(_, name)| name.to_string()).unwrap_or(symbol.clone()),
            None => symbol.clone(),
        };
        assert_eq!(region.name_lossy(), expected);
        assert_eq!(region.size(), *size, "{expected}");
        assert_eq!(region.address_at(None).unwrap() - base, *offset, "{expected}: placement");
        assert_eq!(region.code, &code[*offset as usize..(*offset + *size) as usize], "{expected}: code bytes");
    }
    assert!(listed.iter().any(|r| r.name_lossy() == "fib") && listed.iter().any(|r| r.name_lossy() == "sum"));
    let _ = std::fs::remove_dir_all(&dir);
}
