//! Random walks over libc's control-flow graph, encoded as Intel PT: retrace's
//! flow decoder must reproduce the walk exactly, and so must libipt 2.0.5's
//! instruction decoder (the one inside LLDB 22).

use retrace_decoder::flow::{FlowDecoder, Item};
use retrace_decoder::image::Image;
use retrace_tests::cfg_walk::{function_entries, walk, WalkOptions};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
const LOAD: u64 = 0x7f00_0000_0000;

fn libc_image() -> Option<(Image, Vec<u64>)> {
    let bytes = std::fs::read(LIBC).ok()?;
    let entries = function_entries(&bytes, LOAD);
    let mut image = Image::new();
    image.add_elf(LIBC, bytes, LOAD).unwrap();
    Some((image, entries))
}

fn ours(trace: &[u8], image: &Image) -> (Vec<u64>, usize) {
    let items = FlowDecoder::new(trace, image).decode_all();
    let errors = items.iter().filter(|i| matches!(i, Item::Error { .. })).count();
    (items.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect(), errors)
}

fn first_difference(a: &[u64], b: &[u64]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[test]
fn retrace_reproduces_random_walks_over_libc() {
    let Some((image, entries)) = libc_image() else {
        retrace_tests::tools::require("libc.so.6 at /lib/x86_64-linux-gnu", false);
        return;
    };
    assert!(entries.len() > 1000, "{} function entries", entries.len());
    let mut total = 0;
    for seed in 0..20 {
        let psb_period = [256, 1024, 4096, 16384][seed as usize % 4];
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 50_000, psb_period, timing: seed % 2 == 1 });
        let (decoded, errors) = ours(&walked.trace, &image);
        assert_eq!(errors, 0, "seed {seed}: decode errors");
        if let Some(i) = first_difference(&decoded, &walked.executed) {
            panic!("seed {seed}: instruction {i}: decoded {:x?}, walked {:x?}", decoded.get(i), walked.executed.get(i));
        }
        total += decoded.len();
    }
    assert!(total >= 1_000_000);
}

#[cfg(retrace_libipt)]
#[test]
fn libipt_decodes_the_same_random_walks() {
    let Some((image, entries)) = libc_image() else {
        retrace_tests::tools::require("libc.so.6 at /lib/x86_64-linux-gnu", false);
        return;
    };
    let sections: Vec<retrace_tests::libipt::FileSection> = image
        .sections()
        .iter()
        .map(|s| retrace_tests::libipt::FileSection {
            path: LIBC.into(),
            offset: s.offset as u64,
            size: s.len as u64,
            vaddr: s.start,
        })
        .collect();
    for seed in 100..110 {
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 50_000, psb_period: 2048, timing: seed % 2 == 0 });
        let (theirs, errors) = retrace_tests::libipt::insn_addresses(&walked.trace, &sections, (6, 0x86));
        assert_eq!(errors, 0, "seed {seed}: libipt errors: {:?}", retrace_tests::libipt::last_flow_error());
        if let Some(i) = first_difference(&theirs, &walked.executed) {
            panic!("seed {seed}: instruction {i}: libipt {:x?}, walked {:x?}", theirs.get(i), walked.executed.get(i));
        }
    }
}

#[test]
fn parallel_decode_equals_sequential_decode() {
    let Some((image, entries)) = libc_image() else {
        retrace_tests::tools::require("libc.so.6 at /lib/x86_64-linux-gnu", false);
        return;
    };
    for seed in 300..306 {
        let psb_period = [128, 512, 4096][seed as usize % 3];
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 60_000, psb_period, timing: true });
        let sequential: Vec<Item> = FlowDecoder::new(&walked.trace, &image).decode_history().items().collect();
        for threads in [2, 3, 7] {
            let parallel = retrace_decoder::flow::decode_parallel(&walked.trace, &image, threads);
            let parallel: Vec<Item> = parallel.items().collect();
            if let Some(i) = sequential.iter().zip(&parallel).position(|(a, b)| a != b) {
                panic!("seed {seed}, {threads} threads: item {i}: sequential {:?}, parallel {:?}", sequential[i], parallel[i]);
            }
            assert_eq!(sequential.len(), parallel.len(), "seed {seed}, {threads} threads");
        }
    }
    // And with corruption (errors, resyncs) in the middle of segments.
    for seed in 400..406 {
        let walked = walk(&image, &entries, WalkOptions { seed, instructions: 40_000, psb_period: 1024, timing: true });
        let damaged = retrace_tests::corrupt::corrupt(&walked.trace, seed, 2000);
        let sequential: Vec<Item> = FlowDecoder::new(&damaged, &image).decode_history().items().collect();
        let parallel: Vec<Item> = retrace_decoder::flow::decode_parallel(&damaged, &image, 4).items().collect();
        if let Some(i) = sequential.iter().zip(&parallel).position(|(a, b)| a != b) {
            panic!("damaged seed {seed}: item {i}: sequential {:?}, parallel {:?}", sequential[i], parallel[i]);
        }
        assert_eq!(sequential.len(), parallel.len(), "damaged seed {seed}");
    }
}

#[test]
fn history_cursors_walk_and_seek_the_executed_instructions() {
    let Some((image, entries)) = libc_image() else {
        retrace_tests::tools::require("libc.so.6 at /lib/x86_64-linux-gnu", false);
        return;
    };
    let walked = walk(&image, &entries, WalkOptions { seed: 7, instructions: 30_000, psb_period: 1024, timing: true });
    let history = retrace_decoder::flow::decode_parallel(&walked.trace, &image, 3);
    let n = walked.executed.len() as u64;
    assert_eq!(history.instructions(), n);
    // Forwards from the first instruction.
    let mut cursor = history.first().unwrap();
    for (i, ip) in walked.executed.iter().enumerate() {
        assert_eq!((cursor.index(), cursor.ip()), (i as u64, *ip));
        assert_eq!(cursor.next(), i + 1 < walked.executed.len());
    }
    // Backwards from the last.
    let mut cursor = history.last().unwrap();
    for i in (0..walked.executed.len()).rev() {
        assert_eq!(cursor.ip(), walked.executed[i]);
        assert_eq!(cursor.prev(), i > 0);
    }
    // Random access, and LLDB item ids consistent with the item stream.
    let items: Vec<Item> = history.items().collect();
    let mut rng = retrace_tests::rng::Rng::new(1);
    for _ in 0..2000 {
        let index = rng.below(n);
        let cursor = history.cursor_at(index).unwrap();
        assert_eq!(cursor.ip(), walked.executed[index as usize]);
        assert_eq!(items[cursor.item_id() as usize], Item::Instruction { ip: cursor.ip() });
    }
    assert!(history.cursor_at(n).is_none());
}
