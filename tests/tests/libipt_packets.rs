//! Differential test: retrace's packet decoder against libipt 2.0.5's
//! (`pt_pkt_next`, `pt_pkt_sync_forward`, `pt_pkt_sync_backward`) on generated
//! streams and on corrupted copies of them.

#[cfg(not(retrace_libipt))]
#[test]
fn libipt_is_available() {
    retrace_tests::tools::require("libipt-dev (Debian package)", false);
}

#[cfg(retrace_libipt)]
mod with_libipt {
    use retrace_decoder::packet::{IpCompression, PacketDecoder};
    use retrace_tests::corrupt::corrupt;
    use retrace_tests::libipt::LibiptPacketDecoder;
    use retrace_tests::lockstep::compare;
    use retrace_tests::rng::Rng;
    use retrace_tests::streams::{generate, Profile, StreamOptions};

    const LIBIPT_2_0_KINDS: [&str; 26] = [
        "pad", "psb", "psbend", "tnt.8", "tnt.64", "tip", "tip.pge", "tip.pgd", "fup", "pip", "mode.exec",
        "mode.tsx", "tsc", "mtc", "tma", "cyc", "cbr", "vmcs", "ovf", "stop", "mnt", "ptw", "exstop", "mwait",
        "pwre", "pwrx",
    ];

    #[test]
    fn a_million_generated_packets_agree() {
        let stream = generate(StreamOptions {
            seed: 0x5eed_0001,
            packets: 1_050_000,
            profile: Profile::Uniform,
            post_libipt_packets: true,
        });
        for kind in ["bbp", "bip", "bep", "cfe", "evd", "trig"] {
            assert!(stream.kinds.get(kind).copied().unwrap_or(0) > 0, "generator produced no {kind}");
        }
        for form in IpCompression::ALL {
            assert!(stream.ip_forms.get(&(form as u8)).copied().unwrap_or(0) > 1000, "few {form:?} IPs");
        }
        let agreed = compare(&stream.bytes).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{agreed:#?}");
        assert!(agreed.packets >= 1_000_000, "only {} packets compared", agreed.packets);
        for kind in LIBIPT_2_0_KINDS {
            assert!(agreed.kinds.get(kind).copied().unwrap_or(0) >= 1000, "too few {kind} packets compared");
        }
        assert!(agreed.newer_packets > 100, "post-2.0 packets were not exercised");
        assert_eq!(agreed.errors, 0, "a clean stream must decode without errors");
    }

    #[test]
    fn corrupted_copies_agree_on_errors_and_resync() {
        let mut total_errors = 0;
        let mut error_kinds = std::collections::BTreeSet::new();
        for seed in 0..24u64 {
            let stream = generate(StreamOptions {
                seed: 0xc0ff_ee00 + seed,
                packets: 40_000,
                profile: if seed % 2 == 0 { Profile::Uniform } else { Profile::Realistic },
                post_libipt_packets: seed % 3 == 0,
            });
            let damaged = corrupt(&stream.bytes, seed, 150 + 50 * seed as usize);
            let agreed = compare(&damaged).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!(agreed.packets > 1_000, "seed {seed}: only {} packets", agreed.packets);
            total_errors += agreed.errors;
            error_kinds.extend(agreed.error_kinds.keys().copied());
        }
        eprintln!("{total_errors} errors agreed: {error_kinds:?}");
        assert!(total_errors > 500, "corruption produced only {total_errors} errors");
        for kind in ["eos", "bad_opc", "bad_packet"] {
            assert!(error_kinds.contains(kind), "no {kind} error was exercised: {error_kinds:?}");
        }
    }

    #[test]
    fn random_bytes_agree() {
        let mut rng = Rng::new(77);
        for _ in 0..200 {
            let len = rng.range(1, 4096) as usize;
            let mut data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Plant a PSB so there is something to synchronise to.
            let at = rng.below(len as u64) as usize;
            let psb = retrace_decoder::packet::PSB_BYTES;
            for (i, b) in psb.iter().enumerate() {
                if at + i < data.len() {
                    data[at + i] = *b;
                }
            }
            compare(&data).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn sync_backward_agrees() {
        let stream = generate(StreamOptions { seed: 9, packets: 50_000, profile: Profile::Uniform, post_libipt_packets: false });
        let data = corrupt(&stream.bytes, 3, 5000);
        let mut rng = Rng::new(11);
        for _ in 0..2000 {
            let at = rng.below(data.len() as u64 + 1);
            let mut ours = PacketDecoder::new(&data);
            let mut theirs = LibiptPacketDecoder::new(&data);
            assert!(ours.sync_set(at as usize));
            theirs.sync_set(at).unwrap();
            assert_eq!(ours.sync_backward().map(|o| o as u64), theirs.sync_backward().ok(), "from {at:#x}");
            let mut ours = PacketDecoder::new(&data);
            let mut theirs = LibiptPacketDecoder::new(&data);
            assert!(ours.sync_set(at as usize));
            theirs.sync_set(at).unwrap();
            assert_eq!(ours.sync_forward().map(|o| o as u64), theirs.sync_forward().ok(), "from {at:#x}");
        }
    }
}
