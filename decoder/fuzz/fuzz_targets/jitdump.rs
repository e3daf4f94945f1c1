//! Fuzzes the jitdump reader: the header, the record walk and the code
//! regions built from it (address/time queries, image and symbolizer
//! placement). The input is read as a whole file, and also as the records
//! after a valid header in each byte order, so that mutations reach the
//! record parsers. Must never panic; record offsets must increase inside the
//! file, nothing may follow an error that ends the records, and a region
//! found by `region_at` must cover the address at that time.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_decoder::image::Image;
use retrace_decoder::jitdump::{CodeRegions, Jitdump, MAGIC};
use retrace_decoder::symbols::Symbolizer;

fn header(big_endian: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for field in [MAGIC, 1, 40, 62, 0, 1234] {
        bytes.extend(if big_endian { field.to_be_bytes() } else { field.to_le_bytes() });
    }
    bytes.extend([0; 16]);
    bytes
}

fn check(file: &[u8]) {
    let Ok(dump) = Jitdump::parse(file) else { return };
    let mut next_offset = dump.header().size as usize;
    let mut ended = false;
    let mut records = dump.records();
    while let Some(record) = records.next() {
        assert!(!ended, "a record after an error that ends the records");
        match record {
            Ok(record) => {
                assert_eq!(record.offset, next_offset);
                next_offset = record.offset + record.size as usize;
                assert!(next_offset <= file.len() && record.size >= 16);
            }
            Err(error) => {
                assert_eq!(error.offset, next_offset);
                if error.kind.ends_records() {
                    ended = true;
                } else {
                    // A damaged record is skipped by its size.
                    assert!(records.offset() >= error.offset + 16 && records.offset() <= file.len());
                    next_offset = records.offset();
                }
            }
        }
    }
    let regions = CodeRegions::from_dump(&dump);
    for region in regions.regions().iter().take(64) {
        for placement in region.placements.iter().take(8) {
            for (address, time) in [
                (placement.address, Some(placement.since)),
                (placement.address.wrapping_add(region.size() / 2), None),
                (placement.address.wrapping_sub(1), Some(placement.since.wrapping_add(1))),
            ] {
                if let Some(found) = regions.region_at(address, time) {
                    let at = found.placement_at(time).expect("a found region exists at that time");
                    assert!(address.wrapping_sub(at.address) < found.size(), "found region does not cover the address");
                }
            }
        }
    }
    let mut image = Image::new();
    regions.add_to_image(&mut image, None);
    let mut symbolizer = Symbolizer::new();
    regions.add_to_symbolizer(&mut symbolizer, "fuzz.dump", Some(0));
    if let Some(first) = regions.regions().first() {
        let _ = symbolizer.lookup(first.placements[0].address);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    for big_endian in [false, true] {
        let mut file = header(big_endian);
        file.extend_from_slice(data);
        check(&file);
    }
});
