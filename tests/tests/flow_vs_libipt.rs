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

    use retrace_collector::ptrace_recorder::StepMode;
    use retrace_decoder::flow::{FlowDecoder, Item};
    use retrace_decoder::bundle::load::load;
    use retrace_tests::bundles::{cpu, file_sections};
    use retrace_tests::libipt;
    use retrace_tests::recordings::{build, record_bundle};
    use retrace_tests::tools::{require, which};

    fn compare(trace_json: &Path) -> u64 {
        let bundle = load(trace_json).expect("load the bundle");
        let sections = file_sections(&bundle);
        let mut total = 0;
        for thread in &bundle.threads {
            let (tid, trace) = (thread.tid, &thread.trace);
            let items = FlowDecoder::new(trace, bundle.image_of(thread)).decode_all();
            let ours: Vec<u64> =
                items.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect();
            let errors: Vec<&Item> = items.iter().filter(|i| matches!(i, Item::Error { .. })).collect();
            let (theirs, their_errors) = libipt::insn_addresses(trace, &sections, cpu(&bundle));
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

    /// Tracing stops (FUP + TIP.PGD) right at the target of a direct call
    /// into unmapped code: libipt reports the disable without reading the
    /// code there, so no error; the instruction after the call site is
    /// never reached. Script: the call at 0x1000 targets 0x900000.
    #[test]
    fn async_disable_at_an_unmapped_call_target_is_not_an_error() {
        use retrace_decoder::image::Image;
        use retrace_decoder::packet::script;
        let dir = std::env::temp_dir().join(format!("retrace-unmapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // nop; call 0x900000 (rel32 = 0x900000 - 0x1006); nop
        let mut code = vec![0x90, 0xe8];
        code.extend_from_slice(&(0x900000u32 - 0x1006).to_le_bytes());
        code.push(0x90);
        let path = dir.join("code.bin");
        std::fs::write(&path, &code).unwrap();
        let mut image = Image::new();
        image.add_raw("code", 0x1000, code.clone());
        let trace = script::encode(
            &script::parse("psb\nmode.exec cs.l\npsbend\ntip.pge 1000\nfup 900000\ntip.pgd\ntip.pge 1006\nfup 1007\ntip.pgd\n").unwrap(),
        )
        .unwrap();
        let ours = FlowDecoder::new(&trace, &image).decode_all();
        let ips: Vec<u64> = ours.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect();
        let errors: Vec<&Item> = ours.iter().filter(|i| matches!(i, Item::Error { .. })).collect();
        let sections = [libipt::FileSection { path: path.clone(), offset: 0, size: code.len() as u64, vaddr: 0x1000 }];
        let theirs = libipt::insn_items(&trace, &sections, (6, 0x55));
        assert_eq!(theirs, vec![libipt::InsnItem::Instruction(0x1000), libipt::InsnItem::Instruction(0x1001), libipt::InsnItem::Instruction(0x1006)]);
        assert_eq!(ips, vec![0x1000, 0x1001, 0x1006]);
        assert!(errors.is_empty(), "{errors:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
