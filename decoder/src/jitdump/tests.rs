//! Tests of the jitdump reader, the region index and the joining, on files
//! written from the specification's layout.

use super::*;
use crate::image::{Image, Memory};
use crate::symbols::Symbolizer;

/// Writes jitdump files field by field from the specification's layout,
/// computing each record's `total_size` from what it wrote.
struct DumpWriter {
    order: ByteOrder,
    bytes: Vec<u8>,
}

impl DumpWriter {
    fn new(order: ByteOrder, version: u32) -> Self {
        let mut writer = DumpWriter { order, bytes: Vec::new() };
        writer.u32(MAGIC);
        writer.u32(version);
        writer.u32(FILE_HEADER_SIZE as u32);
        writer.u32(62); // EM_X86_64
        writer.u32(0xdead_beef); // pad1, as V8 writes it
        writer.u32(4242); // pid
        writer.u64(1_795_329_053_911_788); // µs since the epoch, as V8
        writer.u64(0); // flags
        writer
    }

    fn u32(&mut self, value: u32) {
        let bytes = match self.order {
            ByteOrder::Little => value.to_le_bytes(),
            ByteOrder::Big => value.to_be_bytes(),
        };
        self.bytes.extend_from_slice(&bytes);
    }

    fn u64(&mut self, value: u64) {
        let bytes = match self.order {
            ByteOrder::Little => value.to_le_bytes(),
            ByteOrder::Big => value.to_be_bytes(),
        };
        self.bytes.extend_from_slice(&bytes);
    }

    /// Writes a record: header, then what `payload` writes; returns its offset.
    fn record(&mut self, id: u32, timestamp: u64, payload: impl FnOnce(&mut Self)) -> usize {
        let start = self.bytes.len();
        self.u32(id);
        self.u32(0); // total_size, patched below
        self.u64(timestamp);
        payload(self);
        let size = (self.bytes.len() - start) as u32;
        let size = match self.order {
            ByteOrder::Little => size.to_le_bytes(),
            ByteOrder::Big => size.to_be_bytes(),
        };
        self.bytes[start + 4..start + 8].copy_from_slice(&size);
        start
    }

    fn load(&mut self, timestamp: u64, code_addr: u64, code_index: u64, name: &str, code: &[u8]) -> usize {
        self.record(record_id::CODE_LOAD, timestamp, |w| {
            w.u32(4242);
            w.u32(4243);
            w.u64(code_addr);
            w.u64(code_addr);
            w.u64(code.len() as u64);
            w.u64(code_index);
            w.bytes.extend_from_slice(name.as_bytes());
            w.bytes.push(0);
            w.bytes.extend_from_slice(code);
        })
    }

    fn code_move(&mut self, timestamp: u64, old: u64, new: u64, size: u64, code_index: u64) -> usize {
        self.record(record_id::CODE_MOVE, timestamp, |w| {
            w.u32(4242);
            w.u32(4243);
            w.u64(new);
            w.u64(old);
            w.u64(new);
            w.u64(size);
            w.u64(code_index);
        })
    }

    /// A DEBUG_INFO with raw entry names (NUL added), padded to 8 bytes as V8 pads it.
    fn debug_info(&mut self, timestamp: u64, code_addr: u64, entries: &[(u64, u32, u32, &[u8])]) -> usize {
        let start = self.bytes.len();
        self.record(record_id::CODE_DEBUG_INFO, timestamp, |w| {
            w.u64(code_addr);
            w.u64(entries.len() as u64);
            for &(addr, line, discrim, name) in entries {
                w.u64(addr);
                w.u32(line);
                w.u32(discrim);
                w.bytes.extend_from_slice(name);
                w.bytes.push(0);
            }
            while !(w.bytes.len() - start).is_multiple_of(8) {
                w.bytes.push(0);
            }
        })
    }

    /// An UNWINDING_INFO with `eh_frame` then `eh_frame_hdr`, plus 4 padding bytes (as V8).
    fn unwinding_info(&mut self, timestamp: u64, eh_frame: &[u8], eh_frame_hdr: &[u8], mapped_size: u64) -> usize {
        self.record(record_id::CODE_UNWINDING_INFO, timestamp, |w| {
            w.u64((eh_frame.len() + eh_frame_hdr.len()) as u64);
            w.u64(eh_frame_hdr.len() as u64);
            w.u64(mapped_size);
            w.bytes.extend_from_slice(eh_frame);
            w.bytes.extend_from_slice(eh_frame_hdr);
            w.bytes.extend_from_slice(&[0; 4]);
        })
    }

    fn close(&mut self, timestamp: u64) -> usize {
        self.record(record_id::CODE_CLOSE, timestamp, |_| {})
    }

    fn unknown(&mut self, id: u32, timestamp: u64, body: &[u8]) -> usize {
        self.record(id, timestamp, |w| w.bytes.extend_from_slice(body))
    }
}

const EH_FRAME: &[u8] = b"CIE+FDE bytes, 23 long";
const EH_FRAME_HDR: [u8; 20] = [1, 0x1b, 3, 0x3b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const HOT_CODE: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0x90]; // push rbp; mov rbp,rsp; pop rbp; ret; nop

/// Offsets of the records [`sample`] writes.
struct SampleOffsets {
    debug_info: usize,
    unwinding_info: usize,
    hot: usize,
    unknown: usize,
    cold: usize,
    code_move: usize,
    twin: usize,
    close: usize,
}

/// All five record types, an unknown id, odd sizes; `hot` moves at t=300.
fn sample(order: ByteOrder) -> (Vec<u8>, SampleOffsets) {
    let mut w = DumpWriter::new(order, 1);
    let debug_info = w.debug_info(
        100,
        0x7f00_0000_1000,
        &[(0x7f00_0000_1000, 3, 13, b"/tmp/script.js"), (0x7f00_0000_1004, 4, 1, b"\xff")],
    );
    let unwinding_info = w.unwinding_info(101, EH_FRAME, &EH_FRAME_HDR, 0);
    let hot = w.load(102, 0x7f00_0000_1000, 7, "JS:*hot /tmp/script.js:3", HOT_CODE);
    let unknown = w.unknown(99, 150, b"future");
    let cold = w.load(200, 0x7f00_0000_2000, 8, "Builtin:Cold", &[0xcc; 3]);
    let code_move = w.code_move(300, 0x7f00_0000_1000, 0x7f00_0000_3000, HOT_CODE.len() as u64, 7);
    // New code where `hot` was, under another index (V8 reuses addresses).
    let twin = w.load(400, 0x7f00_0000_1000, 9, "Stub:twin", &[0x90, 0xc3]);
    let close = w.close(500);
    (w.bytes, SampleOffsets { debug_info, unwinding_info, hot, unknown, cold, code_move, twin, close })
}

fn all_records(bytes: &[u8]) -> Vec<Result<Record<'_>, JitdumpError>> {
    Jitdump::parse(bytes).unwrap().records().collect()
}

#[test]
fn sample_has_unaligned_records() {
    let (_, at) = sample(ByteOrder::Little);
    let unaligned = [at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close].iter().filter(|&&o| o % 8 != 0).count();
    assert!(unaligned >= 3, "test data should exercise unaligned records ({unaligned})");
}

#[test]
fn both_byte_orders_read_back_exactly() {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let (bytes, at) = sample(order);
        let dump = Jitdump::parse(&bytes).unwrap();
        assert_eq!(
            *dump.header(),
            Header {
                byte_order: order,
                version: 1,
                size: 40,
                elf_mach: 62,
                pad1: 0xdead_beef,
                pid: 4242,
                timestamp: 1_795_329_053_911_788,
                flags: 0
            }
        );
        let records: Vec<Record> = dump.records().map(Result::unwrap).collect();
        let offsets: Vec<usize> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [at.debug_info, at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close]);
        let times: Vec<u64> = records.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [100, 101, 102, 150, 200, 300, 400, 500]);
        assert_eq!(
            records[0].body,
            RecordBody::DebugInfo(DebugInfo {
                code_addr: 0x7f00_0000_1000,
                declared_entries: 2,
                entries: vec![
                    DebugEntry { addr: 0x7f00_0000_1000, line: 3, discrim: 13, name: b"/tmp/script.js" },
                    DebugEntry { addr: 0x7f00_0000_1004, line: 4, discrim: 1, name: b"/tmp/script.js" },
                ],
            })
        );
        assert_eq!(
            records[1].body,
            RecordBody::UnwindingInfo(UnwindingInfo {
                unwinding_size: 42,
                eh_frame_hdr_size: 20,
                mapped_size: 0,
                eh_frame: EH_FRAME,
                eh_frame_hdr: &EH_FRAME_HDR,
            })
        );
        assert_eq!(
            records[2].body,
            RecordBody::CodeLoad(CodeLoad {
                pid: 4242,
                tid: 4243,
                vma: 0x7f00_0000_1000,
                code_addr: 0x7f00_0000_1000,
                code_size: 7,
                code_index: 7,
                name: b"JS:*hot /tmp/script.js:3",
                code: HOT_CODE,
            })
        );
        assert_eq!(records[2].size as usize, 16 + 40 + 25 + 7);
        assert_eq!(records[3].body, RecordBody::Unknown { id: 99, body: b"future" });
        assert_eq!(records[3].body.kind_name(), "unknown");
        assert_eq!(
            records[5].body,
            RecordBody::CodeMove(CodeMove {
                pid: 4242,
                tid: 4243,
                vma: 0x7f00_0000_3000,
                old_code_addr: 0x7f00_0000_1000,
                new_code_addr: 0x7f00_0000_3000,
                code_size: 7,
                code_index: 7,
            })
        );
        assert_eq!(records[7].body, RecordBody::Close);
        assert_eq!(records[7].size, 16);
    }
}

/// The reference's synthetic file (DEBUG_INFO, UNWINDING_INFO, LOAD of 89
/// bytes, MOVE, CLOSE; 361 bytes), typed in from its annotated hex dump.
#[test]
fn annotated_synthetic_file_from_the_reference() {
    let hex = |s: &str| -> Vec<u8> {
        let digits: String = s.split_whitespace().collect();
        (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap()).collect()
    };
    let ts = "1122334455667788";
    let mut file = hex("4454 694a 0100 0000 2800 0000 3e00 0000 0000 0000 087e 0000 d93d 85cd 8500 0000 0000 0000 0000 0000");
    file.extend(hex(&format!("0200 0000 5800 0000 {ts} 0010 0000 0000 0000 0200 0000 0000 0000")));
    file.extend(hex("0010 0000 0000 0000 0a00 0000 0000 0000"));
    file.extend(b"synthetic.c\0");
    file.extend(hex("0410 0000 0000 0000 0b00 0000 0000 0000"));
    file.extend(b"synthetic.c\0");
    assert_eq!(file.len(), 0x80);
    file.extend(hex(&format!("0400 0000 4000 0000 {ts} 1400 0000 0000 0000 1400 0000 0000 0000 0000 0000 0000 0000")));
    file.extend(hex("011b 033b 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000"));
    assert_eq!(file.len(), 0xc0);
    file.extend(hex(&format!("0000 0000 5900 0000 {ts} 087e 0000 087e 0000 0010 0000 0000 0000 0010 0000 0000 0000")));
    file.extend(hex("1200 0000 0000 0000 0000 0000 0000 0000"));
    file.extend(b"synthetic_burn\0");
    file.extend([0x90; 18]);
    assert_eq!(file.len(), 0x119);
    file.extend(hex(&format!("0100 0000 4000 0000 {ts} 087e 0000 087e 0000 0020 0000 0000 0000")));
    file.extend(hex("0010 0000 0000 0000 0020 0000 0000 0000 1200 0000 0000 0000 0000 0000 0000 0000"));
    assert_eq!(file.len(), 0x159);
    file.extend(hex(&format!("0300 0000 1000 0000 {ts}")));
    assert_eq!(file.len(), 361);

    let dump = Jitdump::parse(&file).unwrap();
    assert_eq!(dump.header().pid, 0x7e08);
    let kinds: Vec<(usize, &str)> =
        dump.records().map(|r| r.unwrap()).map(|r| (r.offset, r.body.kind_name())).collect();
    assert_eq!(kinds, [(0x28, "debug_info"), (0x80, "unwinding_info"), (0xc0, "load"), (0x119, "move"), (0x159, "close")]);
    let regions = CodeRegions::from_dump(&dump);
    let [burn] = regions.regions() else { panic!("one region: {regions:?}") };
    assert_eq!(burn.name, b"synthetic_burn");
    assert_eq!(burn.code, [0x90; 18]);
    assert_eq!(burn.debug_info.as_ref().unwrap().entries[1].line, 11);
    let unwinding = burn.unwinding_info.unwrap();
    assert_eq!((unwinding.eh_frame, unwinding.eh_frame_hdr.len()), (&[][..], 20));
    assert_eq!(burn.address_at(None), Some(0x2000));
    assert!(regions.errors().is_empty());
}

#[test]
fn regions_collect_pending_info_and_moves() {
    let (bytes, at) = sample(ByteOrder::Big);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
    assert!(regions.errors().is_empty());
    let [hot, cold, twin] = regions.regions() else { panic!("three regions: {regions:?}") };
    assert_eq!((hot.code_index, hot.name_lossy().as_ref(), hot.load_time, hot.load_offset), (7, "JS:*hot /tmp/script.js:3", 102, at.hot));
    assert_eq!(hot.debug_info.as_ref().map(|d| d.entries.len()), Some(2));
    assert_eq!(hot.unwinding_info.map(|u| u.eh_frame), Some(EH_FRAME));
    assert_eq!(
        hot.placements,
        [
            Placement { address: 0x7f00_0000_1000, since: 102, until: Some(300), record_offset: at.hot },
            Placement { address: 0x7f00_0000_3000, since: 300, until: None, record_offset: at.code_move },
        ]
    );
    // Pending info goes to the next LOAD only.
    assert_eq!((cold.debug_info.as_ref(), cold.unwinding_info), (None, None));
    assert_eq!(twin.placements.len(), 1);
    assert_eq!(regions.by_code_index(8).map(|r| r.name), Some(&b"Builtin:Cold"[..]));
}

#[test]
fn region_at_follows_moves_and_reuse_over_time() {
    let (bytes, _) = sample(ByteOrder::Little);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
    let name_at = |address: u64, time: Option<u64>| regions.region_at(address, time).map(|r| r.name_lossy().into_owned());
    let hot = Some("JS:*hot /tmp/script.js:3".to_string());
    // Before the LOAD nothing is there; from it until the MOVE, at the old address.
    assert_eq!(name_at(0x7f00_0000_1000, Some(101)), None);
    assert_eq!(name_at(0x7f00_0000_1000, Some(102)), hot);
    assert_eq!(name_at(0x7f00_0000_1006, Some(299)), hot);
    assert_eq!(name_at(0x7f00_0000_1007, Some(299)), None, "one past the end");
    assert_eq!(name_at(0x7f00_0000_3000, Some(299)), None);
    // From the MOVE on, at the new address; the old one is free until `twin`.
    assert_eq!(name_at(0x7f00_0000_3000, Some(300)), hot);
    assert_eq!(name_at(0x7f00_0000_1000, Some(300)), None);
    assert_eq!(name_at(0x7f00_0000_1000, Some(400)), Some("Stub:twin".into()));
    assert_eq!(name_at(0x7f00_0000_1002, Some(400)), None, "twin is 2 bytes");
    // Latest overall.
    assert_eq!(name_at(0x7f00_0000_3006, None), hot);
    assert_eq!(name_at(0x7f00_0000_1001, None), Some("Stub:twin".into()));
    assert_eq!(name_at(0x7f00_0000_2002, None), Some("Builtin:Cold".into()));
    assert_eq!(name_at(0x7f00_0000_2003, None), None);
    assert_eq!(name_at(0, None), None);
    assert_eq!(name_at(u64::MAX, Some(u64::MAX)), None);
}

#[test]
fn same_address_loaded_twice_resolves_to_the_latest_load() {
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    w.load(10, 0x5000, 2207, "Stub:js-to-wasm:ii:i", &[0x90; 16]);
    w.load(20, 0x5000, 2208, "Stub:js-to-wasm:ii:i (again)", &[0xc3; 16]);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
    assert_eq!(regions.region_at(0x5008, Some(15)).map(|r| r.code_index), Some(2207));
    assert_eq!(regions.region_at(0x5008, Some(20)).map(|r| r.code_index), Some(2208));
    assert_eq!(regions.region_at(0x5008, None).map(|r| r.code_index), Some(2208));
    let mut image = Image::new();
    assert_eq!(regions.add_to_image(&mut image, None), 1);
    let mut buf = [0u8; 1];
    assert_eq!(image.read(0x500f, &mut buf), 1);
    assert_eq!(buf, [0xc3]);
}

#[test]
fn image_and_symbolizer_see_the_code_at_a_time() {
    let (bytes, _) = sample(ByteOrder::Little);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&bytes).unwrap());
    let mut before_move = Image::new();
    assert_eq!(regions.add_to_image(&mut before_move, Some(250)), 2);
    let mut buf = [0u8; 16];
    assert_eq!(before_move.read(0x7f00_0000_1000, &mut buf), HOT_CODE.len());
    assert_eq!(&buf[..HOT_CODE.len()], HOT_CODE);
    assert_eq!(&*before_move.section_at(0x7f00_0000_1000).unwrap().name, "JS:*hot /tmp/script.js:3");
    let mut latest = Image::new();
    assert_eq!(regions.add_to_image(&mut latest, None), 3);
    assert_eq!(latest.read(0x7f00_0000_3001, &mut buf), HOT_CODE.len() - 1);
    assert_eq!(&*latest.section_at(0x7f00_0000_1000).unwrap().name, "Stub:twin");

    let mut symbolizer = Symbolizer::new();
    assert_eq!(regions.add_to_symbolizer(&mut symbolizer, "jit-4242.dump", None), 3);
    let context = symbolizer.lookup(0x7f00_0000_3004);
    assert_eq!(context.function, Some(("JS:*hot /tmp/script.js:3".into(), 0x7f00_0000_3000)));
    assert_eq!(context.describe(0x7f00_0000_3004), "jit-4242.dump`JS:*hot /tmp/script.js:3 + 4");
    assert_eq!(symbolizer.lookup(0x7f00_0000_3007), Default::default());
}

/// The flow decoder follows Intel PT through JIT code placed by a jitdump.
#[test]
fn flow_decoder_reads_jit_code_from_the_image() {
    // 1000: xor eax,eax; 1002: inc eax; 1004: cmp eax,3; 1007: jne 1002; 1009: ret
    let code = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x03, 0x75, 0xf9, 0xc3];
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    w.load(1, 0x7f00_0000_1000, 0, "JS:*count /tmp/count.js:1:1", &code);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
    let mut image = Image::new();
    regions.add_to_image(&mut image, None);
    let script = "psb\nmode.exec cs.l\npsbend\ntip.pge 7f0000001000\ntnt.8 !!.\ntip.pgd 7f0000002000\n";
    let trace = crate::packet::script::encode(&crate::packet::script::parse(script).unwrap()).unwrap();
    let executed: Vec<u64> = crate::flow::FlowDecoder::new(&trace, &image)
        .decode_all()
        .into_iter()
        .filter_map(|item| match item {
            crate::flow::Item::Instruction { ip } => Some(ip - 0x7f00_0000_0000),
            crate::flow::Item::Error { offset, error } => panic!("error at {offset}: {error:?}"),
            crate::flow::Item::Event(_) => None,
        })
        .collect();
    assert_eq!(executed, [0x1000, 0x1002, 0x1004, 0x1007, 0x1002, 0x1004, 0x1007, 0x1002, 0x1004, 0x1007, 0x1009]);
}

#[test]
fn header_errors() {
    let (good, _) = sample(ByteOrder::Little);
    let kind = |bytes: &[u8]| Jitdump::parse(bytes).unwrap_err().kind;
    assert_eq!(kind(&good[..3]), JitdumpErrorKind::TruncatedFileHeader { available: 3 });
    assert_eq!(kind(&good[..39]), JitdumpErrorKind::TruncatedFileHeader { available: 39 });
    assert_eq!(kind(b"ELF\x7f and more bytes than a header has....."), JitdumpErrorKind::BadMagic(0x7f46_4c45));
    let mut version_3 = good.clone();
    version_3[4] = 3;
    assert_eq!(kind(&version_3), JitdumpErrorKind::UnsupportedVersion(3));
    let mut version_2 = good.clone();
    version_2[4] = 2;
    assert_eq!(Jitdump::parse(&version_2).unwrap().header().version, 2);
    let mut small = good.clone();
    small[8] = 39;
    assert_eq!(kind(&small), JitdumpErrorKind::BadFileHeaderSize { size: 39, file_size: good.len() });
    // A larger header is skipped by its size; the spare bytes are not records.
    let mut large = DumpWriter::new(ByteOrder::Big, 1);
    large.bytes[8..12].copy_from_slice(&48u32.to_be_bytes());
    large.bytes.extend_from_slice(&[0xee; 8]);
    let close = large.close(5);
    let records: Vec<usize> = all_records(&large.bytes).into_iter().map(|r| r.unwrap().offset).collect();
    assert_eq!((close, records), (48, vec![48]));
    // Flags are kept, unknown bits included.
    let mut flagged = DumpWriter::new(ByteOrder::Little, 1);
    flagged.bytes[32..40].copy_from_slice(&0x8000_0000_0000_0001u64.to_le_bytes());
    let header = *Jitdump::parse(&flagged.bytes).unwrap().header();
    assert!(header.has_arch_timestamps());
    assert_eq!(header.flags, 0x8000_0000_0000_0001);
}

#[test]
fn truncation_anywhere_keeps_every_intact_record() {
    let (bytes, at) = sample(ByteOrder::Little);
    let starts = [at.debug_info, at.unwinding_info, at.hot, at.unknown, at.cold, at.code_move, at.twin, at.close, bytes.len()];
    for cut in FILE_HEADER_SIZE..=bytes.len() {
        let records = all_records(&bytes[..cut]);
        let intact = starts.windows(2).filter(|w| w[1] <= cut).count();
        let (ok, errors): (Vec<_>, Vec<_>) = records.iter().partition(|r| r.is_ok());
        assert_eq!(ok.len(), intact, "cut at {cut}");
        let broken = starts[intact];
        if cut == broken {
            assert!(errors.is_empty(), "cut at {cut}: {errors:?}");
            continue;
        }
        let available = cut - broken;
        let expected = if available < RECORD_HEADER_SIZE {
            JitdumpErrorKind::TruncatedRecordHeader { available }
        } else {
            JitdumpErrorKind::RecordOverrun { size: (starts[intact + 1] - broken) as u32, available }
        };
        assert_eq!(records.last(), Some(&Err(JitdumpError { offset: broken, kind: expected })), "cut at {cut}");
        assert_eq!(errors.len(), 1);
    }
}

#[test]
fn record_smaller_than_its_header_ends_reading() {
    let (mut bytes, at) = sample(ByteOrder::Little);
    bytes[at.cold + 4..at.cold + 8].copy_from_slice(&8u32.to_le_bytes());
    let records = all_records(&bytes);
    assert_eq!(records.len(), 5);
    assert_eq!(records[4], Err(JitdumpError { offset: at.cold, kind: JitdumpErrorKind::RecordTooSmall { size: 8 } }));
    assert!(records[..4].iter().all(Result::is_ok));
    assert!(records[4].as_ref().unwrap_err().kind.ends_records());
}

#[test]
fn fields_that_do_not_fit_are_an_error_for_that_record_only() {
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    let short_load = w.record(record_id::CODE_LOAD, 1, |w| w.u64(0x1000));
    let huge_code = w.record(record_id::CODE_LOAD, 2, |w| {
        w.u32(1);
        w.u32(1);
        w.u64(0x1000);
        w.u64(0x1000);
        w.u64(u64::MAX); // code_size
        w.u64(0);
        w.bytes.extend_from_slice(b"f\0");
    });
    let no_name_room = w.record(record_id::CODE_LOAD, 3, |w| {
        w.u32(1);
        w.u32(1);
        w.u64(0x1000);
        w.u64(0x1000);
        w.u64(2);
        w.u64(0);
        w.bytes.extend_from_slice(&[0x90, 0xc3]);
    });
    let unterminated = w.record(record_id::CODE_LOAD, 4, |w| {
        w.u32(1);
        w.u32(1);
        w.u64(0x1000);
        w.u64(0x1000);
        w.u64(1);
        w.u64(0);
        w.bytes.extend_from_slice(b"name\xc3");
    });
    let short_move = w.record(record_id::CODE_MOVE, 5, |w| w.u64(1));
    let short_debug = w.record(record_id::CODE_DEBUG_INFO, 6, |w| w.u64(1));
    let big_unwinding = w.record(record_id::CODE_UNWINDING_INFO, 7, |w| {
        w.u64(u64::MAX - 1);
        w.u64(0);
        w.u64(0);
    });
    let bad_hdr = w.record(record_id::CODE_UNWINDING_INFO, 8, |w| {
        w.u64(4);
        w.u64(5);
        w.u64(0);
        w.bytes.extend_from_slice(&[0; 4]);
    });
    let stray_move = w.code_move(9, 0x1000, 0x2000, 1, 77);
    let good = w.load(10, 0x1000, 1, "good", &[0xc3]);
    let records = all_records(&w.bytes);
    let fields = |record, needed, size| JitdumpErrorKind::FieldsOverrun { record, needed, size };
    let expected_errors = [
        (short_load, fields("load", 56, 24)),
        (huge_code, fields("load", u64::MAX, 58)),
        (no_name_room, fields("load", 59, 58)),
        (unterminated, JitdumpErrorKind::UnterminatedName),
        (short_move, fields("move", 64, 24)),
        (short_debug, fields("debug_info", 32, 24)),
        (big_unwinding, fields("unwinding_info", u64::MAX, 40)),
        (bad_hdr, JitdumpErrorKind::EhFrameHeaderTooLarge { unwinding_size: 4, eh_frame_hdr_size: 5 }),
    ];
    let errors: Vec<(usize, JitdumpErrorKind)> =
        records.iter().filter_map(|r| r.as_ref().err()).map(|e| (e.offset, e.kind)).collect();
    assert_eq!(errors, expected_errors);
    assert!(matches!(records.last(), Some(Ok(Record { offset, .. })) if *offset == good));
    let regions = CodeRegions::from_records(records);
    assert_eq!(regions.regions().len(), 1);
    let last_error = regions.errors().last().unwrap();
    assert_eq!(*last_error, JitdumpError { offset: stray_move, kind: JitdumpErrorKind::MoveOfUnknownCode { code_index: 77 } });
    assert_eq!(last_error.to_string(), format!("offset {stray_move:#x}: move of code_index 77, which no earlier load defined"));
}

/// V8 11.3 writes some DEBUG_INFO names as 28 bytes whose first 16 are
/// freed-heap garbage with NULs in them. The entries after such a name
/// are misread (as in perf), but the record ends at its size, so the next
/// records are read exactly.
#[test]
fn v8_garbage_debug_info_names_do_not_desynchronise_the_records() {
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    let garbage: &[u8] = b"\x84\xaf\x02\x00\x00\x00\x00\x00\xdd\x7e\x47\x3e\xd7\x68\x15\x23/e/script.js";
    let debug_info = w.debug_info(
        1,
        0x7f00_0000_0000,
        &[(0x7f00_0000_0040, 3, 13, garbage), (0x7f00_0000_0048, 4, 2, garbage), (0x7f00_0000_0050, 5, 2, b"node:fs")],
    );
    let unwinding = w.unwinding_info(2, &[], &EH_FRAME_HDR, 0);
    let load = w.load(3, 0x7f00_0000_0000, 12, "JS:*hot /e/script.js:3:13", &[0xc3; 0x60]);
    let records = all_records(&w.bytes);
    let offsets: Vec<usize> = records.iter().map(|r| r.as_ref().unwrap().offset).collect();
    assert_eq!(offsets, [debug_info, unwinding, load]);
    let Ok(Record { body: RecordBody::DebugInfo(info), .. }) = &records[0] else { panic!("{records:?}") };
    assert_eq!(info.declared_entries, 3);
    assert!(info.entries.len() <= 3);
    assert_eq!(info.entries[0].name, b"\x84\xaf\x02");
    let regions = CodeRegions::from_records(records.clone());
    assert_eq!(regions.regions()[0].debug_info.as_ref(), Some(info));
    assert_eq!(regions.region_at(0x7f00_0000_005f, None).map(|r| r.code_index), Some(12));
}

#[test]
fn debug_info_stops_at_nr_entry_and_at_the_record_end() {
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    // nr_entry says 1000 but the record holds two entries and padding.
    let at = w.debug_info(1, 0x1000, &[(0x1000, 1, 0, b"a.js"), (0x1001, 2, 0, b"\xff")]);
    w.bytes[at + 24..at + 32].copy_from_slice(&1000u64.to_le_bytes());
    // nr_entry 1 with room for more: only one is read.
    let one = w.debug_info(2, 0x2000, &[(0x2000, 7, 0, b"b.js"), (0x2001, 8, 0, b"c.js")]);
    w.bytes[one + 24..one + 32].copy_from_slice(&1u64.to_le_bytes());
    // "\xff" first: nothing to refer to, kept as written.
    w.debug_info(3, 0x3000, &[(0x3000, 9, 0, b"\xff")]);
    let infos: Vec<DebugInfo> = all_records(&w.bytes)
        .into_iter()
        .map(|r| match r.unwrap().body {
            RecordBody::DebugInfo(info) => info,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(infos[0].entries.iter().map(|e| (e.line, e.name)).collect::<Vec<_>>(), [(1, &b"a.js"[..]), (2, b"a.js")]);
    assert!(!infos[0].is_complete());
    assert_eq!(infos[1].entries.len(), 1);
    assert!(infos[1].is_complete());
    assert_eq!(infos[2].entries[0].name, b"\xff");
    assert_eq!(infos[2].entries[0].name_lossy(), "\u{fffd}");
}

#[test]
fn empty_functions_are_regions_but_cover_nothing() {
    let mut w = DumpWriter::new(ByteOrder::Little, 1);
    w.load(1, 0x1000, 0, "empty", &[]);
    let regions = CodeRegions::from_dump(&Jitdump::parse(&w.bytes).unwrap());
    assert_eq!(regions.regions()[0].size(), 0);
    assert_eq!(regions.region_at(0x1000, None), None);
    assert_eq!(regions.add_to_image(&mut Image::new(), None), 0);
}

#[test]
fn arbitrary_bytes_never_panic() {
    let (sample_bytes, _) = sample(ByteOrder::Little);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..2000 {
        let mut bytes = sample_bytes.clone();
        for _ in 0..(round % 7 + 1) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = FILE_HEADER_SIZE + (state as usize) % (bytes.len() - FILE_HEADER_SIZE);
            bytes[at] = (state >> 32) as u8;
        }
        bytes.truncate(FILE_HEADER_SIZE + (state as usize >> 8) % (bytes.len() - FILE_HEADER_SIZE + 1));
        let Ok(dump) = Jitdump::parse(&bytes) else { continue };
        let regions = CodeRegions::from_dump(&dump);
        for region in regions.regions() {
            for placement in &region.placements {
                let _ = regions.region_at(placement.address, Some(placement.since));
            }
        }
        regions.add_to_image(&mut Image::new(), None);
    }
}

/// A file the fuzz target found: two placements of one
/// region valid at the same time (MOVE timestamps out of order) made
/// `region_at` return a region whose placement at that time does not cover
/// the address. Every region found must cover the address at that time.
#[test]
fn a_found_region_covers_the_address_at_that_time() {
    let file = include_bytes!("../../tests/data/jitdump-region-at-09a38594.bin");
    let mut checked = 0;
    for data in [file.to_vec(), [header_bytes(false), file.to_vec()].concat(), [header_bytes(true), file.to_vec()].concat()] {
        let Ok(dump) = Jitdump::parse(&data) else { continue };
        let regions = CodeRegions::from_dump(&dump);
        for region in regions.regions() {
            for placement in &region.placements {
                for (address, time) in [
                    (placement.address, Some(placement.since)),
                    (placement.address.wrapping_add(region.size() / 2), None),
                    (placement.address.wrapping_sub(1), Some(placement.since.wrapping_add(1))),
                ] {
                    if let Some(found) = regions.region_at(address, time) {
                        let at = found.placement_at(time).expect("a found region exists at that time");
                        assert!(address.wrapping_sub(at.address) < found.size(), "region at {address:#x}, time {time:?}: placed at {:#x}", at.address);
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 0, "the file has regions to look up");
}

/// The fuzz target's file header (version 1, x86-64) in either byte order.
fn header_bytes(big_endian: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for field in [MAGIC, 1, 40, 62, 0, 1234] {
        bytes.extend(if big_endian { field.to_be_bytes() } else { field.to_le_bytes() });
    }
    bytes.extend([0; 16]);
    bytes
}
