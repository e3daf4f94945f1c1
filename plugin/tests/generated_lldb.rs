//! Generated traces (random walks over libc's control-flow graph with random
//! PSB spacing, timing packets and overflows) in LLDB 22 and in retrace:
//! `retrace dump instructions -a -f --raw` must print what
//! `lldb-22 … thread trace dump instructions -a -f --raw` prints, line for
//! line, overflow error items included at the same ids.

use std::path::Path;
use std::process::Command;

use retrace_tests::cfg_walk::{libc_image, walk, WalkOptions, LIBC, LIBC_LOAD};
use retrace_tests::tools::{require, which};

fn retrace_dump(trace_json: &Path, options: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_retrace")).args(["dump", "instructions"]).args(options).arg(trace_json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Where retrace's text first differs from LLDB's, with the lines around
/// it; `None` when they are equal.
fn difference(ours: &str, lldb: &str) -> Option<String> {
    let (a, b): (Vec<_>, Vec<_>) = (ours.lines().collect(), lldb.lines().collect());
    let i = a.iter().zip(&b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))?;
    let from = i.saturating_sub(4);
    Some(format!(
        "retrace differs from LLDB at line {i} ({} vs {} lines)\nretrace:\n{}\nLLDB:\n{}",
        a.len(),
        b.len(),
        a[from..(i + 4).min(a.len())].join("\n"),
        b[from..(i + 4).min(b.len())].join("\n")
    ))
}

fn assert_same_text(what: &str, ours: &str, lldb: &str) {
    if let Some(difference) = difference(ours, lldb) {
        panic!("{what}: {difference}");
    }
}

/// libc's image and function entries when LLDB 22 and libc are here (a test
/// is skipped, or fails under CI=true, otherwise).
fn lldb_and_libc() -> Option<(retrace_decoder::image::Image, Vec<u64>)> {
    if !require("lldb-22", which("lldb-22").is_some()) {
        return None;
    }
    let found = libc_image();
    if found.is_none() {
        require("libc.so.6 at /lib/x86_64-linux-gnu", false);
    }
    found
}

#[test]
fn generated_walks_with_overflows_dump_as_in_lldb() {
    let Some((image, entries)) = lldb_and_libc() else { return };
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("generated_lldb");
    let mut overflows = 0;
    for seed in 700..712u64 {
        let psb_period = [256, 512, 1024, 2048, 8192][seed as usize % 5];
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 20_000, psb_period, timing: true, overflow_one_in: 500 });
        overflows += walked.overflows.len();
        let dir = root.join(format!("seed{seed}"));
        let trace_json = retrace_tests::bundles::write_generated_bundle(&dir, &walked.trace, &[(LIBC, LIBC_LOAD)]);
        let lldb = retrace_tests::lldb::dump_text(&trace_json, 1, "-a -f --raw").unwrap_or_else(|e| panic!("{e}"));
        let ours = retrace_dump(&trace_json, &["-a", "-f", "--raw"]);
        assert_same_text(&format!("seed {seed}"), &ours, &lldb);
        // Events too: clock ticks, sync points, tracing disabled.
        let lldb = retrace_tests::lldb::dump_text(&trace_json, 1, "-a -f -e --raw").unwrap_or_else(|e| panic!("{e}"));
        assert_same_text(&format!("seed {seed} with events"), &retrace_dump(&trace_json, &["-a", "-f", "-e", "--raw"]), &lldb);
        assert_eq!(ours.matches("(error) overflow").count(), walked.overflows.len(), "seed {seed}");
    }
    assert!(overflows >= 30, "{overflows} overflows");
}

/// Corrupted copies (flipped, overwritten, lost and inserted bytes, a cut
/// end) of walks: retrace must print exactly what LLDB prints, errors at the
/// same ids, with one deliberate exception. When a PSB+ header is damaged,
/// LLDB 22 stops decoding the thread (its PSB splitter gives up at the first
/// PSB it cannot synchronise to) and prints `no more data` after the error
/// that met it; retrace reports the damaged PSB as an error item of its own
/// and decodes on from the next PSB. There LLDB's text must be retrace's up
/// to that point, and retrace's next line that error item.
///
/// Seeds 800–871 drove the parity work; later ranges were taken as fresh
/// samples and the differences they showed fixed in turn (agreeing at first:
/// 872–967 78 of 96, 1000–1095 91 of 96, 968–999 30 of 32, 1096–1199 100 of
/// 104 after two fixes, 1200–1299 94 of 100, 1300–1399 100 of 100,
/// 1400–1499 95 of 100, 1500–1599 99 of 100): all 800 agree. When the
/// writer's periodic PSBs moved (placed where LLDB's slice ends cleanly),
/// the new walks showed one more (1206: an OVF inside a PSB+ header, then a
/// TIP.PGD after the overflow), fixed in the query layer. The suite runs
/// every other seed of each range, 1206 among them (all 800: 110 s);
/// `RETRACE_ALL_SEEDS=1` runs them all.
#[test]
fn corrupted_walks_dump_as_in_lldb() {
    let Some((image, entries)) = lldb_and_libc() else { return };
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corrupted_lldb");
    let every = if std::env::var_os("RETRACE_ALL_SEEDS").is_some_and(|all| all == "1") { 1 } else { 2 };
    let seeds: Vec<u64> = (800..1600u64).step_by(every).collect();
    let (mut differing, mut stopped_by_lldb, mut unnoticed) = (Vec::new(), 0, 0);
    // A hundred seeds at a time: their bundles, then LLDB's dumps of all of
    // them in one session while retrace dumps each.
    for chunk in seeds.chunks(100) {
        let trace_jsons: Vec<_> = chunk
            .iter()
            .map(|&seed| {
                let walked = walk(&image, &entries, WalkOptions { seed, instructions: 20_000, psb_period: 1024, timing: true, overflow_one_in: 0 });
                let damaged = retrace_tests::corrupt::corrupt(&walked.trace, seed, 6000);
                retrace_tests::bundles::write_generated_bundle(&root.join(format!("seed{seed}")), &damaged, &[(LIBC, LIBC_LOAD)])
            })
            .collect();
        let (lldb, ours) = std::thread::scope(|scope| {
            let lldb = scope.spawn(|| retrace_tests::lldb::dump_text_each(&trace_jsons, "-a -f -e --raw"));
            let ours: Vec<String> = trace_jsons.iter().map(|trace_json| retrace_dump(trace_json, &["-a", "-f", "-e", "--raw"])).collect();
            (lldb.join().unwrap().unwrap_or_else(|e| panic!("{e}")), ours)
        });
        // One session prints what a session per bundle prints.
        let alone = retrace_tests::lldb::dump_text(&trace_jsons[0], 1, "-a -f -e --raw").unwrap_or_else(|e| panic!("{e}"));
        assert_same_text(&format!("seed {} alone and in one session", chunk[0]), &lldb[0], &alone);
        for ((seed, lldb), ours) in chunk.iter().zip(&lldb).zip(&ours) {
            // A corrupted TSC value or padding byte can be harmless: then both
            // decode without errors (counted, and rare).
            unnoticed += usize::from(!ours.contains("(error)"));
            match lldb_stopped_at_damaged_psb(ours, lldb) {
                Some(true) => stopped_by_lldb += 1,
                Some(false) => {}
                None => {
                    eprintln!("seed {seed}: {}", difference(ours, lldb).unwrap());
                    differing.push(*seed);
                }
            }
        }
    }
    assert_eq!(differing, Vec::<u64>::new(), "seeds differing from LLDB");
    assert!(unnoticed * 20 < seeds.len(), "{unnoticed} seeds where the damage went unnoticed");
    // Both outcomes occur in these seeds: full agreement and LLDB giving up.
    assert!(stopped_by_lldb >= 1 && stopped_by_lldb < seeds.len(), "{stopped_by_lldb} seeds where LLDB stopped early");
}

/// `Some(false)`: the texts are equal; `Some(true)`: LLDB's text is
/// retrace's up to an error after which LLDB stopped (`no more data`) and
/// retrace's next line is an error without an address (the damaged PSB);
/// `None`: anything else.
fn lldb_stopped_at_damaged_psb(ours: &str, lldb: &str) -> Option<bool> {
    if ours == lldb {
        return Some(false);
    }
    let (a, b): (Vec<_>, Vec<_>) = (ours.lines().collect(), lldb.lines().collect());
    let (&last, kept) = b.split_last()?;
    let prefix = kept.len();
    let psb_error = a.get(prefix..)?.iter().find(|line| !line.ends_with("...missing instructions"))?;
    // LLDB's last item is the error that met the damaged PSB, or there is
    // none (the first PSB is damaged).
    let stopped = last == "    no more data"
        && (kept.last()?.contains(": (error) ") || prefix == 1)
        && a.len() > prefix + 1
        && a[..prefix] == *kept
        && psb_error.contains(": (error) ")
        && !psb_error.contains(": 0x");
    stopped.then_some(true)
}

/// The counted, backwards dumps (LLDB's default direction) stream from the
/// history: the last `-c` instructions with the events and errors among
/// them, ids as LLDB gives them, and `no more data` only when the trace's
/// start was reached — checked against LLDB on corrupted walks (errors and
/// sync points near every cut) and an overflow walk.
#[test]
fn counted_dumps_backwards_and_forwards_as_in_lldb() {
    let Some((image, entries)) = lldb_and_libc() else { return };
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("counted_lldb");
    for seed in [801u64, 815, 1206, 1301, 1450] {
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 3_000, psb_period: 512, timing: true, overflow_one_in: 200 });
        let damaged = retrace_tests::corrupt::corrupt(&walked.trace, seed, 1500);
        let dir = root.join(format!("seed{seed}"));
        let trace_json = retrace_tests::bundles::write_generated_bundle(&dir, &damaged, &[(LIBC, LIBC_LOAD)]);
        let total = retrace_dump(&trace_json, &["-a", "--raw"]).lines().filter(|l| l.contains(": 0x")).count();
        for options in [
            vec!["--raw"],
            vec!["--raw", "-e"],
            vec!["--raw", "-c", "137"],
            vec!["--raw", "-e", "-c", "1"],
            vec!["--raw", "-e", "-c", &*Box::leak(total.to_string().into_boxed_str())],
            vec!["--raw", "-e", "-c", &*Box::leak((total + 1).to_string().into_boxed_str())],
            vec!["--raw", "-f", "-e", "-c", "300"],
        ] {
            let lldb = retrace_tests::lldb::dump_text(&trace_json, 1, &options.join(" ")).unwrap_or_else(|e| panic!("{e}"));
            let ours = retrace_dump(&trace_json, &options);
            if lldb_stopped_at_damaged_psb(&ours, &lldb).is_none() {
                assert_same_text(&format!("seed {seed} {options:?}"), &ours, &lldb);
            }
        }
    }
}
