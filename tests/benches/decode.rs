//! Flow-decoder speed: retrace vs libipt 2.0.5's block and instruction
//! decoders vs LLDB 22's own decode, on one recorded trace, in one run.
//! `cargo bench -p retrace-tests --bench decode`
//!
//! `RETRACE_BENCH_ITERATIONS` sets the workload size (default 100000
//! iterations of tests/programs/bench_loop.c, ~5.5 M instructions).

#[cfg(retrace_libipt)]
fn main() {
    use std::path::Path;
    use std::process::Command;

    use retrace_collector::ptrace_recorder::StepMode;
    use retrace_decoder::flow::{FlowDecoder, Item};
    use retrace_tests::bench::best_of_three as best;
    use retrace_decoder::bundle::load::load;
    use retrace_tests::bundles::{cpu, file_sections};
    use retrace_tests::libipt;
    use retrace_tests::recordings::{build, record_bundle};

    let iterations = std::env::var("RETRACE_BENCH_ITERATIONS").unwrap_or_else(|_| "100000".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-decode");
    let _ = std::fs::remove_dir_all(&dir);
    let exe = build("bench_loop", &dir, &["-O1", "-static"]);
    let trace_json = record_bundle(&exe, &[&iterations], StepMode::Branch, &dir.join("bundle"));
    let bundle = load(&trace_json).expect("load the bundle");
    let trace = &bundle.threads[0].trace;
    let sections = file_sections(&bundle);

    let (t_ours, n_ours) = best(&|| FlowDecoder::new(trace, bundle.image()).decode_history().instructions());
    let history = FlowDecoder::new(trace, bundle.image()).decode_history();
    assert_eq!(history.items().filter(|i| matches!(i, Item::Instruction { .. })).count() as u64, n_ours);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let (t_par, n_par) = best(&|| retrace_decoder::flow::decode_parallel(trace, bundle.image(), cores).instructions());
    assert_eq!(n_par, n_ours, "parallel and sequential decode disagree");
    let (t_blk, n_blk) = best(&|| libipt::block_count(trace, &sections, cpu(&bundle)).0);
    let (t_insn, n_insn) = best(&|| libipt::insn_addresses(trace, &sections, cpu(&bundle)).0.len() as u64);
    assert_eq!(n_ours, n_blk, "retrace and the libipt block decoder disagree on the instruction count");
    assert_eq!(n_ours, n_insn, "retrace and the libipt instruction decoder disagree on the instruction count");

    // LLDB's own decode time, as it reports it.
    let lldb = Command::new("lldb-22")
        .args(["-b", "-o", &format!("trace load {}", trace_json.display()), "-o", "thread trace dump info"])
        .output()
        .expect("run lldb-22");
    let text = String::from_utf8_lossy(&lldb.stdout);
    let t_lldb: f64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Decoding instructions: ").and_then(|v| v.trim_end_matches('s').parse().ok()))
        .unwrap_or(f64::NAN);

    println!(
        "decoding {} bytes of Intel PT, {n_ours} instructions ({:.1} per trace byte), best of 3",
        trace.len(),
        n_ours as f64 / trace.len() as f64
    );
    println!("{:<34} {:>10} {:>14}", "decoder", "seconds", "M instr/s");
    let rows: [(&str, f64); 5] = [
        ("retrace FlowDecoder (1 core)", t_ours),
        (&*format!("retrace decode_parallel ({cores} cores)"), t_par),
        ("libipt 2.0.5 block decoder", t_blk),
        ("libipt 2.0.5 instruction decoder", t_insn),
        ("LLDB 22 (thread trace dump info)", t_lldb),
    ];
    for (name, t) in rows {
        println!("{name:<34} {t:>10.4} {:>14.1}", n_ours as f64 / t / 1e6);
    }
    println!("retrace vs libipt block decoder: {:.2}x", t_blk / t_ours);
    println!("retrace vs libipt insn decoder:  {:.2}x", t_insn / t_ours);
    println!("retrace vs LLDB 22 decode:       {:.2}x", t_lldb / t_ours);
    println!(
        "history memory: {:.3} bytes per instruction ({} executed blocks, 4 bytes each, + events/errors); block table {} KiB",
        history.memory_bytes() as f64 / n_ours as f64,
        history.executed_blocks(),
        history.table.memory_bytes() / 1024
    );
}

#[cfg(not(retrace_libipt))]
fn main() {
    eprintln!("libipt-dev is not installed: nothing to compare against");
    std::process::exit(1);
}
