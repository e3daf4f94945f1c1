//! Converts a log written by retrace's Valgrind tool with
//! `--retrace-out=PATH` into Intel PT and says how long that took: the
//! converter measured alone, without the program running beside it.
//!
//! VALGRIND_LIB=<retrace's tool folder> valgrind --tool=retrace --retrace-out=/tmp/log PROGRAM...
//! cargo run --release -p retrace-collector --example convert_valgrind_log -- /tmp/log.<pid>.0

use retrace_collector::pt_writer::DEFAULT_PSB_PERIOD;
use retrace_collector::valgrind::{convert_stream, LogConverter};

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: convert_valgrind_log LOG");
        std::process::exit(2);
    };
    let mut file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = std::time::Instant::now();
    let (_, converted) = convert_stream(&mut file, LogConverter::new(DEFAULT_PSB_PERIOD, false), |_| true).expect("reading the log");
    let seconds = start.elapsed().as_secs_f64();
    let instructions: u64 = converted.image.threads.iter().map(|t| t.instructions).sum();
    let pt: usize = converted.image.threads.iter().map(|t| t.trace.len()).sum();
    println!(
        "{bytes} log bytes, {instructions} instructions, {pt} PT bytes in {seconds:.2} s: {:.0} M instructions/s, {:.2} log bytes/instruction; warnings {:?}",
        instructions as f64 / seconds / 1e6,
        bytes as f64 / instructions.max(1) as f64,
        converted.warnings
    );
}
