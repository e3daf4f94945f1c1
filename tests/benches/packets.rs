//! Packet-layer throughput: retrace vs libipt 2.0.5 on the same generated
//! stream, in one run. `cargo bench -p retrace-tests --bench packets`
//!
//! Environment: `RETRACE_BENCH_MIB` (stream size, default 64),
//! `RETRACE_BENCH_RUNS` (best of N, default 5).

#[cfg(retrace_libipt)]
fn main() {
    use std::hint::black_box;
    use std::time::Instant;

    use retrace_decoder::packet::PacketDecoder;
    use retrace_tests::libipt::count_packets;
    use retrace_tests::streams::{generate, Profile, StreamOptions};

    let mib: usize = std::env::var("RETRACE_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    let runs: usize = std::env::var("RETRACE_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let target = mib << 20;

    // ~3.1 bytes per realistic packet; generate until the stream is big enough.
    let mut packets = (target / 3) as u64;
    let stream = loop {
        let stream = generate(StreamOptions { seed: 42, packets, profile: Profile::Realistic, post_libipt_packets: false });
        if stream.bytes.len() >= target {
            break stream;
        }
        packets = packets * 5 / 4;
    };
    let data = &stream.bytes;

    fn ours(data: &[u8]) -> (u64, u64) {
        let mut decoder = PacketDecoder::new(data);
        let (mut packets, mut errors) = (0u64, 0u64);
        if decoder.sync_forward().is_none() {
            return (0, 0);
        }
        loop {
            match decoder.next_packet() {
                Ok(Some(item)) => {
                    black_box(item);
                    packets += 1;
                }
                Ok(None) => break,
                Err(_) => {
                    errors += 1;
                    if decoder.sync_forward().is_none() {
                        break;
                    }
                }
            }
        }
        (packets, errors)
    }

    let best = |f: &dyn Fn() -> (u64, u64)| {
        let mut best = f64::INFINITY;
        let mut result = (0, 0);
        for _ in 0..runs {
            let start = Instant::now();
            result = f();
            best = best.min(start.elapsed().as_secs_f64());
        }
        (best, result)
    };

    let (t_ours, r_ours) = best(&|| ours(black_box(data)));
    let (t_ipt, r_ipt) = best(&|| count_packets(black_box(data)));
    assert_eq!(r_ours, r_ipt, "the decoders disagree on (packets, errors)");

    let mib_len = data.len() as f64 / (1 << 20) as f64;
    println!("packet decoding: {:.1} MiB generated stream, {} packets, best of {runs} runs", mib_len, r_ours.0);
    println!("{:<28} {:>10} {:>14} {:>10}", "decoder", "MiB/s", "Mpackets/s", "seconds");
    for (name, t) in [("retrace PacketDecoder", t_ours), ("libipt 2.0.5 pt_pkt_next", t_ipt)] {
        println!("{:<28} {:>10.1} {:>14.1} {:>10.4}", name, mib_len / t, r_ours.0 as f64 / t / 1e6, t);
    }
    println!("ratio retrace/libipt: {:.2}x", t_ipt / t_ours);
}

#[cfg(not(retrace_libipt))]
fn main() {
    eprintln!("libipt-dev is not installed: nothing to compare against");
    std::process::exit(1);
}
