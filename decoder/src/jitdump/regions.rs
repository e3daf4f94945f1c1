//! The generated functions a jitdump describes: one [`CodeRegion`] per
//! LOAD, moved by MOVE records over time, indexed by address and time.

use std::borrow::Cow;
use std::collections::HashMap;

use super::file::{DebugInfo, Jitdump, JitdumpError, JitdumpErrorKind, Record, RecordBody, UnwindingInfo};

/// Where a [`CodeRegion`] is from a time on: its LOAD, then each MOVE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// Address of the code's first byte.
    pub address: u64,
    /// Timestamp of the LOAD or MOVE that put it there.
    pub since: u64,
    /// Timestamp of the next MOVE of the region, if any: the placement is
    /// valid at `since <= t < until`.
    pub until: Option<u64>,
    /// File offset of the LOAD or MOVE record.
    pub record_offset: usize,
}

impl Placement {
    fn valid_at(&self, time: Option<u64>) -> bool {
        match time {
            Some(time) => self.since <= time && self.until.is_none_or(|until| time < until),
            None => self.until.is_none(),
        }
    }

    fn covers(&self, address: u64, size: u64) -> bool {
        address.checked_sub(self.address).is_some_and(|within| within < size)
    }
}

/// One generated function: a LOAD, what preceded it, and where it lived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeRegion<'a> {
    /// The function's name (display with [`CodeRegion::name_lossy`]).
    pub name: &'a [u8],
    /// The LOAD's `code_index`.
    pub code_index: u64,
    /// The code.
    pub code: &'a [u8],
    /// The process, from the LOAD.
    pub pid: u32,
    /// The thread, from the LOAD.
    pub tid: u32,
    /// File offset of the LOAD record.
    pub load_offset: usize,
    /// Timestamp of the LOAD record.
    pub load_time: u64,
    /// The DEBUG_INFO record that preceded the LOAD, if any.
    pub debug_info: Option<DebugInfo<'a>>,
    /// The UNWINDING_INFO record that preceded the LOAD, if any.
    pub unwinding_info: Option<UnwindingInfo<'a>>,
    /// Where the code was: the LOAD's address, then one entry per MOVE, in
    /// file order.
    pub placements: Vec<Placement>,
}

impl CodeRegion<'_> {
    /// The name, invalid UTF-8 replaced by `U+FFFD`.
    pub fn name_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.name)
    }

    /// Bytes of code.
    pub fn size(&self) -> u64 {
        self.code.len() as u64
    }

    /// Where the code was at `time` (`None`: where it is last), if it existed then.
    pub fn placement_at(&self, time: Option<u64>) -> Option<&Placement> {
        // Timestamps need not grow from record to record (a damaged or odd
        // file): where validity spans overlap, the latest LOAD or MOVE wins,
        // later in the file on a tie — the rule `CodeRegions::region_at` uses.
        self.placements.iter().filter(|p| p.valid_at(time)).max_by_key(|p| (p.since, p.record_offset))
    }

    /// The code's address at `time` (`None`: the latest), if it existed then.
    pub fn address_at(&self, time: Option<u64>) -> Option<u64> {
        self.placement_at(time).map(|p| p.address)
    }
}

/// One placement in the address index of [`CodeRegions`].
#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    start: u64,
    region: usize,
    placement: usize,
}

/// The generated functions of a jitdump, searchable by address and time.
///
/// Built from the records in file order: DEBUG_INFO and UNWINDING_INFO wait
/// for the next LOAD (the last one of each kind wins, as in perf); a LOAD
/// makes a [`CodeRegion`]; a MOVE gives the latest region with its
/// `code_index` a new address from the MOVE's timestamp on (its size and
/// name stay the LOAD's: the specification says a move cannot change them).
/// Errors from the records, and MOVEs of unknown functions, are kept in
/// [`CodeRegions::errors`].
#[derive(Debug, Clone, Default)]
pub struct CodeRegions<'a> {
    regions: Vec<CodeRegion<'a>>,
    errors: Vec<JitdumpError>,
    /// Every placement, by start address (file order among equal starts).
    index: Vec<IndexEntry>,
    /// The largest region size: how far below an address a covering
    /// placement can start.
    largest: u64,
}

impl<'a> CodeRegions<'a> {
    /// The regions of a whole jitdump.
    pub fn from_dump(dump: &Jitdump<'a>) -> Self {
        Self::from_records(dump.records())
    }

    /// The regions described by `records` (in file order).
    pub fn from_records(records: impl IntoIterator<Item = Result<Record<'a>, JitdumpError>>) -> Self {
        let mut regions: Vec<CodeRegion<'a>> = Vec::new();
        let mut errors = Vec::new();
        let mut by_code_index: HashMap<u64, usize> = HashMap::new();
        let mut pending_debug_info = None;
        let mut pending_unwinding_info = None;
        for record in records {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    errors.push(error);
                    continue;
                }
            };
            match record.body {
                RecordBody::CodeLoad(load) => {
                    by_code_index.insert(load.code_index, regions.len());
                    regions.push(CodeRegion {
                        name: load.name,
                        code_index: load.code_index,
                        code: load.code,
                        pid: load.pid,
                        tid: load.tid,
                        load_offset: record.offset,
                        load_time: record.timestamp,
                        debug_info: pending_debug_info.take(),
                        unwinding_info: pending_unwinding_info.take(),
                        placements: vec![Placement {
                            address: load.code_addr,
                            since: record.timestamp,
                            until: None,
                            record_offset: record.offset,
                        }],
                    });
                }
                RecordBody::CodeMove(code_move) => {
                    let Some(region) = by_code_index.get(&code_move.code_index).and_then(|&i| regions.get_mut(i)) else {
                        let kind = JitdumpErrorKind::MoveOfUnknownCode { code_index: code_move.code_index };
                        errors.push(JitdumpError { offset: record.offset, kind });
                        continue;
                    };
                    if let Some(last) = region.placements.last_mut() {
                        last.until = Some(record.timestamp);
                    }
                    region.placements.push(Placement {
                        address: code_move.new_code_addr,
                        since: record.timestamp,
                        until: None,
                        record_offset: record.offset,
                    });
                }
                RecordBody::DebugInfo(debug_info) => pending_debug_info = Some(debug_info),
                RecordBody::UnwindingInfo(unwinding_info) => pending_unwinding_info = Some(unwinding_info),
                RecordBody::Close | RecordBody::Unknown { .. } => {}
            }
        }
        let mut index: Vec<IndexEntry> = regions
            .iter()
            .enumerate()
            .flat_map(|(region, r)| {
                r.placements.iter().enumerate().map(move |(placement, p)| IndexEntry { start: p.address, region, placement })
            })
            .collect();
        index.sort_by_key(|entry| entry.start);
        let largest = regions.iter().map(CodeRegion::size).max().unwrap_or(0);
        CodeRegions { regions, errors, index, largest }
    }

    /// Every region, in LOAD order.
    pub fn regions(&self) -> &[CodeRegion<'a>] {
        &self.regions
    }

    /// Record errors and MOVEs of unknown functions, in file order.
    pub fn errors(&self) -> &[JitdumpError] {
        &self.errors
    }

    /// The latest region loaded with `code_index`.
    pub fn by_code_index(&self, code_index: u64) -> Option<&CodeRegion<'a>> {
        self.regions.iter().rev().find(|r| r.code_index == code_index)
    }

    /// The region whose code covers `address` at `time`: among the regions
    /// placed there then, the one of the latest LOAD or MOVE at or before
    /// `time` (the latest in the file on equal timestamps). With `None`, every
    /// region at its last place and the latest of them.
    pub fn region_at(&self, address: u64, time: Option<u64>) -> Option<&CodeRegion<'a>> {
        let above = self.index.partition_point(|entry| entry.start <= address);
        let candidates = self.index.get(..above).unwrap_or_default();
        candidates
            .iter()
            .rev()
            .take_while(|entry| address - entry.start < self.largest)
            .filter_map(|entry| {
                let region = self.regions.get(entry.region)?;
                // Only the region's placement at that time counts: another
                // one valid then too (timestamps out of order) is not where
                // the code is.
                let placement = region.placement_at(time)?;
                (std::ptr::eq(placement, region.placements.get(entry.placement)?) && placement.covers(address, region.size()))
                    .then_some((placement.since, placement.record_offset, region))
            })
            .max_by_key(|&(since, record_offset, _)| (since, record_offset))
            .map(|(_, _, region)| region)
    }

    /// Each region that exists at `time` (`None`: at the end) with its
    /// address then; where several start at one address, only the latest
    /// LOAD or MOVE there (the code that replaced the others).
    pub fn visible_at(&self, time: Option<u64>) -> Vec<(u64, &CodeRegion<'a>)> {
        let mut by_start: HashMap<u64, (&Placement, &CodeRegion<'a>)> = HashMap::new();
        for region in &self.regions {
            let Some(placement) = region.placement_at(time) else { continue };
            let newer = |old: &(&Placement, &CodeRegion)| {
                (placement.since, placement.record_offset) > (old.0.since, old.0.record_offset)
            };
            match by_start.get(&placement.address) {
                Some(old) if !newer(old) => {}
                _ => {
                    by_start.insert(placement.address, (placement, region));
                }
            }
        }
        let mut visible: Vec<_> = by_start.into_values().map(|(p, region)| (p.address, region)).collect();
        visible.sort_by_key(|&(address, region)| (address, region.load_offset));
        visible
    }
}
