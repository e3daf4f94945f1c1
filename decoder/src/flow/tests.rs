//! Unit tests of the flow decoder on hand-made traces.

use super::walk::{LOOP_CHECK_AFTER, MAX_STRAIGHT_LINE};
use super::*;
use crate::packet::Packet;
use crate::image::Image;
use crate::packet::{IpPacketKind, PacketEncoder, Tnt};

/// 0x1000: 75 02        jne 0x1004
/// 0x1002: 90           nop
/// 0x1003: 90           nop
/// 0x1004: e8 07 00 00 00  call 0x1010
/// 0x1009: ff e0        jmp *%rax
/// 0x1010: c3           ret
fn image() -> Image {
    let mut code = vec![0x90u8; 0x20];
    code[0x00..0x02].copy_from_slice(&[0x75, 0x02]);
    code[0x04..0x09].copy_from_slice(&[0xe8, 0x07, 0, 0, 0]);
    code[0x09..0x0b].copy_from_slice(&[0xff, 0xe0]);
    code[0x10] = 0xc3;
    let mut image = Image::new();
    image.add_raw("test", 0x1000, code);
    image
}

fn ips(items: &[Item]) -> Vec<u64> {
    items.iter().filter_map(|i| if let Item::Instruction { ip } = i { Some(*ip) } else { None }).collect()
}

#[test]
fn branches_calls_compressed_returns_and_indirect_jumps() {
    let mut enc = PacketEncoder::new();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode(&Packet::Tsc(100)).unwrap();
    enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
    enc.encode(&Packet::TntShort(Tnt::from_outcomes([false, true]))).unwrap(); // jne not taken, ret compressed
    enc.encode_ip(IpPacketKind::Tip, Some(0x1002)); // jmp *%rax → 0x1002
    enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
    enc.encode_ip(IpPacketKind::TipPgd, None);
    let image = image();
    let items = FlowDecoder::new(enc.bytes(), &image).decode_all();
    assert_eq!(ips(&items), [0x1000, 0x1002, 0x1003, 0x1004, 0x1010, 0x1009, 0x1002]);
    assert_eq!(items[0], Item::Event(Event::ClockTick(100)));
    assert_eq!(items[1], Item::Event(Event::SyncPoint(0)));
    assert_eq!(items.last(), Some(&Item::Event(Event::SoftwareDisabled)));
}

/// A PSB+, tracing enabled at 0x1000, one taken TNT bit.
fn enabled_at_0x1000() -> Vec<u8> {
    let mut enc = PacketEncoder::new();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
    enc.encode(&Packet::TntShort(Tnt::from_outcomes([true]))).unwrap();
    enc.bytes().to_vec()
}

#[test]
fn a_loop_of_direct_jumps_ends_in_an_error_not_a_hang() {
    let mut image = Image::new();
    image.add_raw("loop", 0x1000, vec![0xeb, 0xfe]); // jmp .
    let items = FlowDecoder::new(&enabled_at_0x1000(), &image).decode_all();
    // As LLDB: 10000 instructions without a packet, then the loop found.
    assert!(matches!(items.last(), Some(Item::Error { error: FlowError::InfiniteLoop(1), .. })), "{:?}", items.last());
    assert_eq!(ips(&items).len() as u64, LOOP_CHECK_AFTER);
    assert_eq!(FlowError::InfiniteLoop(2).to_string(), "anomalous trace: possible infinite loop detected of size 2");
}

#[test]
fn straight_line_code_without_a_loop_ends_after_half_a_million_instructions() {
    let mut image = Image::new();
    image.add_raw("nops", 0x1000, vec![0x90; 600_000]);
    let items = FlowDecoder::new(&enabled_at_0x1000(), &image).decode_all();
    assert!(matches!(items.last(), Some(Item::Error { error: FlowError::NoProgress, .. })), "{:?}", items.last());
    assert_eq!(ips(&items).len() as u64, MAX_STRAIGHT_LINE);
    assert_eq!(ips(&items).last(), Some(&(0x1000 + MAX_STRAIGHT_LINE - 1)));
}

#[test]
fn time_read_before_a_psb_carries_into_the_next_segment() {
    // PSB+ (TSC 100), tracing on and off; TSC 200 with no event after
    // it; a PSB+ without TSC: one decoder reports 200 at that sync
    // point, and so must the joined decode of the two PSB ranges.
    let mode = Packet::ModeExec { csl: true, csd: false, iflag: false };
    let mut enc = PacketEncoder::new();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode(&Packet::Tsc(100)).unwrap();
    enc.encode(&mode).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode(&mode).unwrap();
    enc.encode_ip(IpPacketKind::TipPge, Some(0x1002));
    enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
    enc.encode_ip(IpPacketKind::TipPgd, None);
    enc.encode(&Packet::Tsc(200)).unwrap();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode(&mode).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode(&Packet::Tsc(300)).unwrap();
    enc.encode(&mode).unwrap();
    enc.encode_ip(IpPacketKind::TipPge, Some(0x1002));
    enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
    enc.encode_ip(IpPacketKind::TipPgd, None);
    let image = image();
    let sequential = FlowDecoder::new(enc.bytes(), &image).decode_all();
    let ticks: Vec<&Item> = sequential.iter().filter(|i| matches!(i, Item::Event(Event::ClockTick(_)))).collect();
    assert_eq!(ticks, [&Item::Event(Event::ClockTick(100)), &Item::Event(Event::ClockTick(200)), &Item::Event(Event::ClockTick(300))]);
    let parallel: Vec<Item> = decode_parallel(enc.bytes(), &image, 2).items().collect();
    assert_eq!(parallel, sequential);
}

#[test]
fn missing_memory_is_an_error_item_and_decoding_resumes_at_next_psb() {
    let mut enc = PacketEncoder::new();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode_ip(IpPacketKind::TipPge, Some(0x9000)); // nothing mapped there
    let second_psb = enc.len();
    enc.encode(&Packet::Psb).unwrap();
    enc.encode_ip(IpPacketKind::Fup, Some(0x1002));
    enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
    enc.encode(&Packet::Psbend).unwrap();
    enc.encode_ip(IpPacketKind::Fup, Some(0x1003));
    enc.encode_ip(IpPacketKind::TipPgd, None);
    let image = image();
    let items = FlowDecoder::new(enc.bytes(), &image).decode_all();
    assert!(matches!(items[1], Item::Error { error: FlowError::NoMemory(0x9000), .. }), "{items:?}");
    assert_eq!(items[2], Item::Event(Event::SyncPoint(second_psb)));
    assert_eq!(ips(&items), [0x1002]);
}

/// With LLDB's slices, a disable right before a PSB+ that says tracing
/// is off ends that slice; the next one decodes in full.
#[test]
fn a_slice_ending_with_tracing_off_does_not_cut_the_next_one() {
    let mut image = Image::new();
    image.add_raw("code", 0x1000, vec![0x74, 0x00, 0x0f, 0x05]); // je .+2; syscall
    let mut enc = PacketEncoder::new();
    let mut psbs = Vec::new();
    for _ in 0..2 {
        psbs.push(enc.len());
        enc.encode(&Packet::Psb).unwrap();
        enc.encode(&Packet::ModeExec { csl: true, csd: false, iflag: false }).unwrap();
        enc.encode(&Packet::Psbend).unwrap();
        enc.encode_ip(IpPacketKind::TipPge, Some(0x1000));
        enc.encode(&Packet::TntShort(Tnt::from_outcomes([false]))).unwrap();
        enc.encode_ip(IpPacketKind::TipPgd, None);
    }
    let options = FlowOptions { lldb_psb_slices: true };
    let items = FlowDecoder::new(enc.bytes(), &image).with_options(options).decode_all();
    assert_eq!(ips(&items), [0x1000, 0x1002, 0x1000, 0x1002], "{items:?}");
    let syncs: Vec<&Item> = items.iter().filter(|i| matches!(i, Item::Event(Event::SyncPoint(_)))).collect();
    assert_eq!(syncs, [&Item::Event(Event::SyncPoint(psbs[0])), &Item::Event(Event::SyncPoint(psbs[1]))]);
    assert!(!items.iter().any(|i| matches!(i, Item::Error { .. })), "{items:?}");
}
