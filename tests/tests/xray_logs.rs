//! XRay logs: retrace's reader against LLVM's (`llvm-xray-22`), on logs a
//! real instrumented program writes (FDR v5, basic v3) and on synthetic logs
//! of every version, written from the format description.

use std::collections::BTreeMap;
use std::path::Path;

use retrace_decoder::xray::timeline::Timeline;
use retrace_decoder::xray::{Log, Record, RecordKind, XrayError};
use retrace_tests::rng::Rng;
use retrace_tests::xray::{self as support, Buffer, Expected, LlvmRecord};

fn read(bytes: &[u8]) -> (Vec<Record<'_>>, Vec<XrayError>) {
    let log = Log::parse(bytes).expect("header");
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    for item in log.records() {
        match item {
            Ok(record) => records.push(record),
            Err(error) => errors.push(error),
        }
    }
    (records, errors)
}

fn as_expected(record: &Record) -> Expected {
    (
        record.tid,
        record.pid,
        record.kind.llvm_name(),
        record.function.0,
        record.tsc,
        record.cpu,
        record.args.clone(),
        record.data.to_vec(),
        record.event_type,
    )
}

/// Our record as LLVM prints it: LLVM fills the process id of v2 FDR logs
/// with the thread id and leaves it 0 where the log has none; events carry
/// the previous record's function id (not compared: `function` -1).
fn as_llvm(record: &Record, fdr_version: Option<u16>) -> LlvmRecord {
    let event = matches!(record.kind, RecordKind::CustomEvent | RecordKind::TypedEvent);
    let process = match (record.pid, fdr_version) {
        (Some(pid), _) => pid,
        (None, Some(2)) => record.tid,
        (None, _) => 0,
    };
    LlvmRecord {
        thread: record.tid,
        process,
        kind: record.kind.llvm_name().to_string(),
        function: if event { -1 } else { i64::from(record.function.0 as i32) },
        tsc: record.tsc,
        cpu: record.cpu,
        args: record.args.clone(),
        data: String::from_utf8_lossy(record.data).into_owned(),
        record_type: record.event_type.unwrap_or(0),
    }
}

/// LLVM's records per thread, in its order; event function ids and the
/// sticky typed-event `type:` blanked as [`as_llvm`] does.
fn llvm_by_thread(records: Vec<LlvmRecord>) -> BTreeMap<u32, Vec<LlvmRecord>> {
    llvm_by_thread_blanking(records, false)
}

/// [`llvm_by_thread`], and with `blank_event_cpu` the CPU of custom events
/// set to 0 (LLVM reads FDR v1–v3 custom events' unused bytes as a CPU).
fn llvm_by_thread_blanking(records: Vec<LlvmRecord>, blank_event_cpu: bool) -> BTreeMap<u32, Vec<LlvmRecord>> {
    let mut threads: BTreeMap<u32, Vec<LlvmRecord>> = BTreeMap::new();
    for mut record in records {
        if blank_event_cpu && record.kind == "custom-event" {
            record.cpu = 0;
        }
        if record.kind.ends_with("event") {
            record.function = -1;
        }
        if record.kind != "typed-event" {
            record.record_type = 0;
        }
        threads.entry(record.thread).or_default().push(record);
    }
    threads
}

fn ours_by_thread(records: &[Record], fdr_version: Option<u16>) -> BTreeMap<u32, Vec<LlvmRecord>> {
    let mut threads: BTreeMap<u32, Vec<LlvmRecord>> = BTreeMap::new();
    for record in records {
        threads.entry(record.tid).or_default().push(as_llvm(record, fdr_version));
    }
    threads
}

fn assert_same_threads(ours: BTreeMap<u32, Vec<LlvmRecord>>, llvm: BTreeMap<u32, Vec<LlvmRecord>>, what: &str) {
    assert_eq!(ours.keys().collect::<Vec<_>>(), llvm.keys().collect::<Vec<_>>(), "{what}: threads");
    for (tid, records) in &ours {
        let theirs = &llvm[tid];
        let first = records.iter().zip(theirs).position(|(a, b)| a != b);
        assert!(
            first.is_none() && records.len() == theirs.len(),
            "{what}: thread {tid}: {} records here, {} by llvm-xray; first difference at {first:?}: {:?} vs {:?}",
            records.len(),
            theirs.len(),
            first.map(|i| &records[i]),
            first.map(|i| &theirs[i])
        );
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("retrace-xray-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn synthetic_fdr_logs_of_every_version_read_back_exactly() {
    let llvm = retrace_tests::tools::require("llvm-xray-22 (apt-get install llvm-22)", support::tools_available());
    let dir = temp_dir("synthetic");
    for version in 1..=5u16 {
        for seed in 0..4 {
            let mut rng = Rng::new(1000 * u64::from(version) + seed);
            let buffers = support::random_buffers(&mut rng, version, 6);
            let log = support::write_fdr(version, 4096, &buffers);
            let (records, errors) = read(&log);
            assert_eq!(errors, vec![], "v{version} seed {seed}");
            let expected = support::expected_records(&buffers, version);
            assert_eq!(records.iter().map(as_expected).collect::<Vec<_>>(), expected, "v{version} seed {seed}");
            if llvm {
                // The writer agrees with LLVM's reader too.
                let path = dir.join(format!("fdr-v{version}-{seed}.xray"));
                std::fs::write(&path, &log).unwrap();
                let theirs = support::llvm_records(&path).unwrap_or_else(|e| panic!("v{version} seed {seed}: llvm-xray: {e}"));
                let mut ours = ours_by_thread(&records, Some(version));
                let blank = version <= 3;
                if blank {
                    ours.values_mut().flatten().filter(|r| r.kind == "custom-event").for_each(|r| r.cpu = 0);
                }
                assert_same_threads(ours, llvm_by_thread_blanking(theirs, blank), &format!("FDR v{version} seed {seed}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn synthetic_basic_logs_of_every_version_read_back_exactly() {
    let llvm = retrace_tests::tools::require("llvm-xray-22 (apt-get install llvm-22)", support::tools_available());
    let dir = temp_dir("basic");
    for version in 1..=3u16 {
        let mut rng = Rng::new(77 + u64::from(version));
        let mut records = Vec::new();
        let mut expected = Vec::new();
        let mut tsc = 5_000u64;
        for _ in 0..200 {
            tsc += rng.below(100);
            let tid = 10 + rng.below(3) as u32;
            let cpu = rng.below(8) as u8;
            let kind = rng.below(if version >= 2 { 4 } else { 2 }) as u8;
            let kind = if kind == 2 && version < 2 { 1 } else { kind };
            let id = 1 + rng.below(30) as i32;
            let args: Vec<u64> = if kind == 3 { vec![rng.next_u64()] } else { Vec::new() };
            let names = ["function-enter", "function-exit", "function-tail-exit", "function-enter-arg"];
            let pid = (version >= 3).then_some(4242);
            expected.push((tid, pid, names[kind as usize], id as u32, tsc, u16::from(cpu), args.clone(), Vec::new(), None));
            records.push((tid, 4242, cpu, kind, id, tsc, args));
        }
        let log = support::write_basic(version, &records);
        let (ours, errors) = read(&log);
        assert_eq!(errors, vec![], "basic v{version}");
        assert_eq!(ours.iter().map(as_expected).collect::<Vec<_>>(), expected, "basic v{version}");
        if llvm {
            let path = dir.join(format!("basic-v{version}.xray"));
            std::fs::write(&path, &log).unwrap();
            let theirs = support::llvm_records(&path).expect("llvm-xray reads the basic log");
            assert_same_threads(ours_by_thread(&ours, None), llvm_by_thread(theirs), &format!("basic v{version}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Builds the program and runs it in both modes once for all real-log tests.
fn real_logs() -> Option<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    if !retrace_tests::tools::require("clang++-22 and llvm-xray-22 (apt-get install clang-22 llvm-22 libclang-rt-22-dev)", support::tools_available()) {
        return None;
    }
    let dir = temp_dir("real");
    let binary = support::build_program(&dir);
    let fdr = support::run_program(&binary, &dir, "fdr");
    let basic = support::run_program(&binary, &dir, "basic");
    Some((binary, fdr, basic))
}

fn compare_with_llvm(binary: &Path, log_path: &Path) {
    let bytes = std::fs::read(log_path).unwrap();
    let log = Log::parse(&bytes).unwrap();
    let fdr_version = (log.header.mode == retrace_decoder::xray::Mode::Fdr).then_some(log.header.version);
    let (records, errors) = read(&bytes);
    assert_eq!(errors, vec![], "{}", log_path.display());
    let llvm = support::llvm_records(log_path).expect("llvm-xray reads the real log");
    assert!(llvm.len() > 500, "{} records", llvm.len());
    // The program's shape: 4 workers × (fib calls, 3 logged arguments, 3
    // tail calls, one custom event each) — the log must have all kinds.
    // (Basic mode does not log custom events.)
    for kind in ["function-enter", "function-exit", "function-enter-arg", "function-tail-exit"] {
        assert!(records.iter().any(|r| r.kind.llvm_name() == kind), "no {kind} in {}", log_path.display());
    }
    let custom_events = if fdr_version.is_some() { 4 } else { 0 };
    assert_eq!(records.iter().filter(|r| r.kind == RecordKind::CustomEvent).count(), custom_events);
    assert_same_threads(ours_by_thread(&records, fdr_version), llvm_by_thread(llvm), &log_path.display().to_string());

    // Per thread, calls matched into timelines count as LLVM's accountant
    // counts them (it handles one thread at a time: see single_thread_log).
    let timeline = Timeline::build(&log);
    assert_eq!(timeline.errors, vec![]);
    assert_eq!(timeline.threads.len(), 5, "main + 4 workers");
    let dir = log_path.parent().unwrap();
    for thread in &timeline.threads {
        let single = dir.join(format!("thread-{}.xray", thread.tid));
        std::fs::write(&single, support::single_thread_log(&bytes, thread.tid)).unwrap();
        let theirs = support::llvm_account_counts(&single, binary);
        let ours: BTreeMap<i64, u64> =
            thread.complete_calls_by_function().into_iter().map(|(id, (count, _))| (i64::from(id.0 as i32), count)).collect();
        assert_eq!(ours, theirs, "thread {}: calls per function id", thread.tid);
    }
}

#[test]
fn real_logs_equal_llvm_xray_records_and_call_counts() {
    let Some((binary, fdr, basic)) = real_logs() else { return };
    compare_with_llvm(&binary, &fdr);
    compare_with_llvm(&binary, &basic);
    let _ = std::fs::remove_dir_all(binary.parent().unwrap());
}

#[test]
fn damaged_synthetic_logs_keep_every_intact_record() {
    let mut rng = Rng::new(5);
    let buffers: Vec<Buffer> = support::random_buffers(&mut rng, 5, 8);
    let log = support::write_fdr(5, 4096, &buffers);
    let (clean, clean_errors) = read(&log);
    assert_eq!(clean_errors, vec![]);
    assert_eq!(clean.iter().map(as_expected).collect::<Vec<_>>(), support::expected_records(&buffers, 5));
    // Overwrite one byte of the third buffer's BufferExtents: that buffer is
    // skipped with one error at that offset; all other buffers read as before.
    let mut at = 32;
    let mut starts = Vec::new();
    while at < log.len() {
        starts.push(at);
        at += 16 + u64::from_le_bytes(log[at + 1..at + 9].try_into().unwrap()) as usize;
    }
    let mut damaged = log.clone();
    damaged[starts[2]] = 0x42;
    let (records, errors) = read(&damaged);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].offset, starts[2]);
    let kept: Vec<_> = clean.iter().filter(|r| r.offset < starts[2] || r.offset >= starts[3]).map(as_expected).collect();
    assert_eq!(records.iter().map(as_expected).collect::<Vec<_>>(), kept);
    // Every truncation keeps a prefix of the records, with every record that
    // (with its arguments or payload, < 128 bytes here) ends before the cut.
    for cut in (33..log.len()).step_by(7) {
        let (records, errors) = read(&log[..cut]);
        let surely_whole = clean.iter().filter(|r| r.offset + 128 <= cut).count();
        assert!(records.len() >= surely_whole, "cut {cut}: {} records, {surely_whole} expected at least", records.len());
        // The last one may have lost arguments that followed it.
        let without_args = |record: &Record| (record.offset, record.kind, record.function, record.tsc, record.data.to_vec());
        let (Some(last), Some(clean_last)) = (records.last(), records.len().checked_sub(1).map(|i| &clean[i])) else { continue };
        assert_eq!(without_args(last), without_args(clean_last), "cut {cut}");
        let prefix: Vec<_> = clean[..records.len() - 1].iter().map(as_expected).collect();
        assert_eq!(records[..records.len() - 1].iter().map(as_expected).collect::<Vec<_>>(), prefix, "cut {cut}");
        assert!(errors.len() <= 1, "cut {cut}: {errors:?}");
        // A cut file is truncation, never a buffer's extents running short.
        assert!(!errors.iter().any(|e| matches!(e.kind, retrace_decoder::xray::XrayErrorKind::BufferOverrun { .. })), "cut {cut}: {errors:?}");
    }
}

#[test]
fn real_typed_event_log_equals_llvm_xray() {
    if !retrace_tests::tools::require("clang++-22 and llvm-xray-22", support::tools_available()) {
        return;
    }
    let dir = temp_dir("typed");
    let binary = support::build(&dir, "typed", support::TYPED_PROGRAM);
    let log_path = support::run_program(&binary, &dir, "fdr");
    let bytes = std::fs::read(&log_path).unwrap();
    let (records, errors) = read(&bytes);
    assert_eq!(errors, vec![]);
    let typed: Vec<_> = records.iter().filter(|r| r.kind == RecordKind::TypedEvent).map(|r| (r.event_type, r.data)).collect();
    assert_eq!(typed, vec![(Some(42), &b"typed-A"[..]); 3]);
    let llvm = support::llvm_records(&log_path).expect("llvm-xray reads the log");
    assert_same_threads(ours_by_thread(&records, Some(5)), llvm_by_thread(llvm), "typed events");
    let _ = std::fs::remove_dir_all(&dir);
}
