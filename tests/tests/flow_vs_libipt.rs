//! Differential test of retrace's flow decoder against libipt 2.0.5's
//! instruction decoder (the decoder inside LLDB 22) on recorded bundles:
//! the same instruction addresses, thread by thread, and no errors.

#[cfg(not(retrace_libipt))]
#[test]
fn libipt_is_available() {
    retrace_tests::tools::require("libipt-dev (Debian package)", false);
}

#[cfg(retrace_libipt)]
mod with_libipt {
    use std::path::Path;

    use retrace_collector::software::StepMode;
    use retrace_decoder::flow::{FlowDecoder, Item};
    use retrace_tests::bundles::TestBundle;
    use retrace_tests::libipt;
    use retrace_tests::recordings::{build, record_bundle};
    use retrace_tests::tools::{require, which};

    fn compare(trace_json: &Path) -> u64 {
        let bundle = TestBundle::load(trace_json);
        let sections = bundle.file_sections();
        let mut total = 0;
        for (tid, trace) in &bundle.threads {
            let items = FlowDecoder::new(trace, &bundle.image).decode_all();
            let ours: Vec<u64> =
                items.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect();
            let errors: Vec<&Item> = items.iter().filter(|i| matches!(i, Item::Error { .. })).collect();
            let (theirs, their_errors) = libipt::insn_addresses(trace, &sections, bundle.cpu());
            assert!(errors.is_empty(), "{tid}: retrace errors {errors:?}");
            assert_eq!(their_errors, 0, "{tid}: libipt errors");
            if let Some(i) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
                panic!("thread {tid}: instruction {i}: retrace {:#x}, libipt {:#x}", ours[i], theirs[i]);
            }
            assert_eq!(ours.len(), theirs.len(), "thread {tid}: instruction counts");
            total += ours.len() as u64;
        }
        total
    }

    #[test]
    fn recorded_programs_decode_identically() {
        if !require("gcc", which("gcc").is_some()) {
            return;
        }
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flow-vs-libipt");
        let mut total = 0;
        for (name, flags) in [
            ("loop_fnptr", &["-O2"][..]),
            ("recursion", &["-O0", "-static"][..]),
            ("switch_table", &["-O2"][..]),
            ("setjmp_longjmp", &["-O2", "-static"][..]),
            ("signal_handler", &["-O0"][..]),
            ("threads", &["-O2", "-pthread"][..]),
            ("syscalls", &["-O2"][..]),
        ] {
            let dir = root.join(name);
            let _ = std::fs::remove_dir_all(&dir);
            let exe = build(name, &dir, flags);
            let trace_json = record_bundle(&exe, &[], StepMode::Branch, &dir.join("bundle"));
            let n = compare(&trace_json);
            eprintln!("{name}: {n} instructions identical");
            total += n;
        }
        assert!(total > 500_000, "{total}");
    }
}
