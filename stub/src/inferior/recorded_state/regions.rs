//! The program's address space over a full-state recording: what was
//! mapped where, with what protection, at any position (a replay's
//! `qMemoryRegionInfo`, `memory region` in LLDB). Built from the stream's
//! mapping records — a file mapped (`F`), anonymous memory (`Z`), a
//! protection set (`P`), memory unmapped (`U`) or moved (`C`) — each kept
//! with the position it takes effect at.

use std::collections::BTreeMap;
use std::ops::Range;

use retrace_collector::process::Mapping;
use retrace_decoder::full_state::{StateRecord, KIND_GROWS, KIND_HEAP, KIND_STACK, PROT_EXEC, PROT_READ, PROT_WRITE};

/// What a piece of mapped memory is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    /// Anonymous memory.
    Anonymous,
    /// The heap (`brk`).
    Heap,
    /// The main thread's stack.
    Stack,
    /// A file's bytes: its path, and the file offset at address 0
    /// (wrapping: an address plus it is the offset there).
    File { path: String, offset_at_zero: u64 },
}

/// A piece of mapped memory: its end, protection (`PROT_*` bits; `None`
/// until the stream says) and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    end: u64,
    prot: Option<u8>,
    backing: Backing,
}

/// One mapping record, kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Mapped { start: u64, end: u64, backing: Backing },
    Protected { start: u64, end: u64, prot: u8 },
    Unmapped { start: u64, end: u64 },
    Moved { from: u64, to: u64, length: u64 },
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct RecordedRegions {
    /// Each change with the position it takes effect at, in stream order.
    changes: Vec<(u64, Change)>,
}

impl RecordedRegions {
    /// Keeps `record` (taking effect at `effect`) if it maps, protects,
    /// unmaps or moves memory.
    pub fn note(&mut self, effect: u64, record: &StateRecord<'_>) {
        let end = |start: u64, length: u64| start.saturating_add(length);
        let change = match *record {
            StateRecord::FileMapped { start, length, offset, path, .. } => {
                Change::Mapped { start, end: end(start, length), backing: Backing::File { path: String::from_utf8_lossy(path).into_owned(), offset_at_zero: offset.wrapping_sub(start) } }
            }
            StateRecord::Zeroed { start, length, .. } => Change::Mapped { start, end: end(start, length), backing: Backing::Anonymous },
            StateRecord::Protected { start, length, prot, .. } => Change::Protected { start, end: end(start, length), prot },
            StateRecord::Unmapped { start, length, .. } => Change::Unmapped { start, end: end(start, length) },
            StateRecord::Moved { from, to, length, .. } => Change::Moved { from, to, length },
            _ => return,
        };
        self.changes.push((effect, change));
    }

    /// The mappings at `position` (every change taking effect at or
    /// before it applied), sorted, as `/proc/PID/maps` lists them.
    pub fn at(&self, position: u64) -> Vec<Mapping> {
        let mut space = BTreeMap::new();
        for (_, change) in self.changes.iter().filter(|(effect, _)| *effect <= position) {
            apply(&mut space, change);
        }
        let mut mappings: Vec<Mapping> = Vec::new();
        for (start, piece) in space {
            let (offset, path) = match &piece.backing {
                Backing::Anonymous => (0, String::new()),
                Backing::Heap => (0, "[heap]".to_string()),
                Backing::Stack => (0, "[stack]".to_string()),
                Backing::File { path, offset_at_zero } => (start.wrapping_add(*offset_at_zero), path.clone()),
            };
            // (Not known to be readable until the stream says: never
            // claimed.)
            let prot = piece.prot.unwrap_or(0);
            let mapping = Mapping { start, end: piece.end, readable: prot & PROT_READ != 0, writable: prot & PROT_WRITE != 0, executable: prot & PROT_EXEC != 0, offset, path };
            // Neighbours alike are one mapping, as the kernel merges them.
            match mappings.last_mut() {
                Some(last)
                    if last.end == mapping.start
                        && (last.readable, last.writable, last.executable, &last.path) == (mapping.readable, mapping.writable, mapping.executable, &mapping.path)
                        && (mapping.path.is_empty() || mapping.path.starts_with('[') || last.offset.wrapping_add(last.end - last.start) == mapping.offset) =>
                {
                    last.end = mapping.end
                }
                _ => mappings.push(mapping),
            }
        }
        mappings
    }
}

/// Memory mapped only as the program touches it, down from its top
/// ([`KIND_GROWS`]: the main stack's reserve, which Valgrind maps on a
/// fault as the kernel grows a stack): below the lowest byte touched so
/// far nothing is mapped, whatever its records say it would hold.
#[derive(Debug, Clone, Default)]
pub struct Reserves {
    /// Each reserve, and from which position on it was mapped down to
    /// where (a page boundary; positions rising, addresses falling).
    reserves: Vec<(Range<u64>, Vec<(u64, u64)>)>,
}

const PAGE: u64 = 4096;

impl Reserves {
    /// Keeps a reserve `record` (taking effect at `effect`) declares.
    pub fn note(&mut self, effect: u64, record: &StateRecord<'_>) {
        if let StateRecord::Protected { start, length, prot, .. } = *record {
            if prot & KIND_GROWS != 0 && length > 0 {
                let end = start.saturating_add(length);
                self.reserves.push((start..end, vec![(effect, end)]));
            }
        }
    }

    /// An access to `range` taking effect at `effect` maps the reserve
    /// down to its page.
    pub fn touch(&mut self, effect: u64, range: Range<u64>) {
        for (reserve, lows) in &mut self.reserves {
            if range.start < reserve.end && reserve.start < range.end {
                let page = range.start.max(reserve.start) / PAGE * PAGE;
                if lows.last().is_some_and(|&(_, low)| page < low) {
                    lows.push((effect, page));
                }
            }
        }
    }

    /// What of the reserves is not mapped yet at `position`.
    pub fn unmapped_at(&self, position: u64) -> impl Iterator<Item = Range<u64>> + '_ {
        self.reserves.iter().filter_map(move |(reserve, lows)| {
            let index = lows.partition_point(|&(effect, _)| effect <= position);
            let low = if index == 0 { reserve.end } else { lows[index - 1].1 };
            (reserve.start < low).then(|| reserve.start..low)
        })
    }
}

/// `mappings` without what `holes` cover.
pub fn without(mappings: Vec<Mapping>, holes: impl IntoIterator<Item = Range<u64>>) -> Vec<Mapping> {
    let mut kept = mappings;
    for hole in holes {
        kept = kept
            .into_iter()
            .flat_map(|m| {
                let below = (m.start < hole.start).then(|| Mapping { end: m.end.min(hole.start), ..m.clone() });
                let above = (m.end > hole.end).then(|| Mapping { start: m.start.max(hole.end), offset: m.offset.wrapping_add(m.start.max(hole.end) - m.start), ..m.clone() });
                below.into_iter().chain(above)
            })
            .collect();
    }
    kept
}

/// The pieces of `space` overlapping `start..end`, split at both ends
/// (taken out: the caller puts back what stays), and the gaps between.
fn take(space: &mut BTreeMap<u64, Piece>, start: u64, end: u64) -> Vec<(u64, Piece)> {
    // Split a piece straddling `start` or `end`.
    for at in [start, end] {
        if let Some((&from, piece)) = space.range(..at).next_back() {
            if piece.end > at {
                let rest = piece.clone();
                space.get_mut(&from).expect("found").end = at;
                space.insert(at, rest);
            }
        }
    }
    let starts: Vec<u64> = space.range(start..end).map(|(&s, _)| s).collect();
    starts.into_iter().map(|s| (s, space.remove(&s).expect("listed"))).collect()
}

fn apply(space: &mut BTreeMap<u64, Piece>, change: &Change) {
    match change {
        Change::Mapped { start, end, backing } => {
            if start >= end {
                return;
            }
            // (Its protection: the `P` that follows.)
            take(space, *start, *end);
            space.insert(*start, Piece { end: *end, prot: None, backing: backing.clone() });
        }
        Change::Protected { start, end, prot } => {
            if start >= end {
                return;
            }
            let kind = match prot & (KIND_HEAP | KIND_STACK) {
                KIND_HEAP => Some(Backing::Heap),
                KIND_STACK => Some(Backing::Stack),
                _ => None,
            };
            let access = prot & (PROT_READ | PROT_WRITE | PROT_EXEC);
            let pieces = take(space, *start, *end);
            // The gaps it covers are mapped (anonymous) too.
            let mut at = *start;
            let mut filled = Vec::new();
            for (s, piece) in pieces {
                if s > at {
                    filled.push((at, Piece { end: s, prot: None, backing: Backing::Anonymous }));
                }
                at = piece.end;
                filled.push((s, piece));
            }
            if at < *end {
                filled.push((at, Piece { end: *end, prot: None, backing: Backing::Anonymous }));
            }
            for (s, mut piece) in filled {
                piece.prot = Some(access);
                if let Some(kind) = &kind {
                    piece.backing = kind.clone();
                }
                space.insert(s, piece);
            }
        }
        Change::Unmapped { start, end } => {
            take(space, *start, *end);
        }
        Change::Moved { from, to, length } => {
            // (A move past the end of the address space, which no kernel
            // makes, unmaps what it names: a damaged stream never wraps.)
            if from.checked_add(*length).is_none() || to.checked_add(*length).is_none() {
                take(space, *from, from.saturating_add(*length));
                take(space, *to, to.saturating_add(*length));
                return;
            }
            let moved = take(space, *from, from.saturating_add(*length));
            take(space, *to, to.saturating_add(*length));
            for (s, mut piece) in moved {
                let shifted = |a: u64| a.wrapping_sub(*from).wrapping_add(*to);
                if let Backing::File { offset_at_zero, .. } = &mut piece.backing {
                    *offset_at_zero = offset_at_zero.wrapping_add(*from).wrapping_sub(*to);
                }
                piece.end = shifted(piece.end);
                space.insert(shifted(s), piece);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(regions: &RecordedRegions, position: u64) -> Vec<String> {
        regions
            .at(position)
            .iter()
            .map(|m| format!("{:x}-{:x} {}{}{} {:x} {}", m.start, m.end, if m.readable { 'r' } else { '-' }, if m.writable { 'w' } else { '-' }, if m.executable { 'x' } else { '-' }, m.offset, m.path))
            .collect()
    }

    #[test]
    fn mappings_protections_unmaps_and_moves_at_each_position() {
        let mut r = RecordedRegions::default();
        // The program's text and data, the heap and the stack at the start.
        r.note(0, &StateRecord::FileMapped { at: 0, start: 0x1000, length: 0x2000, offset: 0, path: b"/bin/p" });
        r.note(0, &StateRecord::Protected { at: 0, start: 0x1000, length: 0x1000, prot: PROT_READ | PROT_EXEC });
        r.note(0, &StateRecord::Protected { at: 0, start: 0x2000, length: 0x1000, prot: PROT_READ | PROT_WRITE });
        r.note(0, &StateRecord::Zeroed { at: 0, start: 0x7000, length: 0x2000 });
        r.note(0, &StateRecord::Protected { at: 0, start: 0x7000, length: 0x2000, prot: PROT_READ | PROT_WRITE | KIND_STACK });
        // brk grows the heap; an anonymous mapping; a guard page in it.
        r.note(5, &StateRecord::Zeroed { at: 5, start: 0x3000, length: 0x1000 });
        r.note(5, &StateRecord::Protected { at: 5, start: 0x3000, length: 0x1000, prot: PROT_READ | PROT_WRITE | KIND_HEAP });
        r.note(9, &StateRecord::Zeroed { at: 9, start: 0x10000, length: 0x4000 });
        r.note(9, &StateRecord::Protected { at: 9, start: 0x10000, length: 0x4000, prot: PROT_READ | PROT_WRITE });
        r.note(12, &StateRecord::Protected { at: 12, start: 0x10000, length: 0x1000, prot: 0 });
        // It moves; then most of it goes.
        r.note(20, &StateRecord::Moved { at: 20, from: 0x10000, to: 0x20000, length: 0x4000 });
        r.note(30, &StateRecord::Unmapped { at: 30, start: 0x20000, length: 0x3000 });
        let start = ["1000-2000 r-x 0 /bin/p", "2000-3000 rw- 1000 /bin/p", "7000-9000 rw- 0 [stack]"];
        assert_eq!(listed(&r, 0), start);
        assert_eq!(listed(&r, 4), start);
        assert_eq!(listed(&r, 5), ["1000-2000 r-x 0 /bin/p", "2000-3000 rw- 1000 /bin/p", "3000-4000 rw- 0 [heap]", "7000-9000 rw- 0 [stack]"]);
        assert_eq!(listed(&r, 9)[4], "10000-14000 rw- 0 ");
        assert_eq!(listed(&r, 12)[4..], ["10000-11000 --- 0 ".to_string(), "11000-14000 rw- 0 ".to_string()]);
        assert_eq!(listed(&r, 20)[4..], ["20000-21000 --- 0 ".to_string(), "21000-24000 rw- 0 ".to_string()]);
        assert_eq!(listed(&r, 30)[4..], ["23000-24000 rw- 0 ".to_string()]);
    }

    #[test]
    fn a_reserve_is_mapped_down_to_the_lowest_page_touched_so_far() {
        let mut reserves = Reserves::default();
        reserves.note(0, &StateRecord::Protected { at: 0, start: 0x10000, length: 0x8000, prot: PROT_READ | PROT_WRITE | KIND_STACK | KIND_GROWS });
        reserves.touch(3, 0x17ff8..0x18000);
        reserves.touch(5, 0x15010..0x15018);
        // (Higher again: no change.)
        reserves.touch(7, 0x16000..0x16008);
        reserves.touch(9, 0xfff8..0x10008);
        let unmapped = |position| reserves.unmapped_at(position).collect::<Vec<_>>();
        assert_eq!(unmapped(0), [0x10000..0x18000]);
        assert_eq!(unmapped(2), [0x10000..0x18000]);
        assert_eq!(unmapped(3), [0x10000..0x17000]);
        assert_eq!(unmapped(8), [0x10000..0x15000]);
        assert_eq!(unmapped(9), Vec::<Range<u64>>::new());
        let stack = Mapping { start: 0x10000, end: 0x20000, readable: true, writable: true, executable: false, offset: 0, path: "[stack]".into() };
        let cut = without(vec![stack], reserves.unmapped_at(5));
        assert_eq!(cut.iter().map(|m| (m.start, m.end)).collect::<Vec<_>>(), [(0x15000, 0x20000)]);
    }

    #[test]
    fn records_at_the_end_of_the_address_space_never_wrap() {
        let mut r = RecordedRegions::default();
        r.note(0, &StateRecord::FileMapped { at: 0, start: u64::MAX - 0x1000, length: 0x5000, offset: u64::MAX, path: b"/x" });
        r.note(0, &StateRecord::Protected { at: 0, start: u64::MAX - 0x800, length: u64::MAX, prot: 7 | KIND_GROWS });
        r.note(1, &StateRecord::Moved { at: 1, from: u64::MAX - 0x1000, to: u64::MAX - 0x10, length: 0x2000 });
        r.note(1, &StateRecord::Moved { at: 1, from: 0x1000, to: u64::MAX - 0x10, length: 0x20 });
        r.note(2, &StateRecord::Unmapped { at: 2, start: u64::MAX, length: u64::MAX });
        for position in 0..3 {
            for m in r.at(position) {
                assert!(m.start < m.end, "{m:?}");
            }
        }
    }

    #[test]
    fn a_file_mapped_over_part_of_another_splits_it_with_its_offsets() {
        let mut r = RecordedRegions::default();
        r.note(0, &StateRecord::FileMapped { at: 0, start: 0x10000, length: 0x3000, offset: 0x2000, path: b"/lib/a" });
        r.note(0, &StateRecord::Protected { at: 0, start: 0x10000, length: 0x3000, prot: PROT_READ });
        r.note(1, &StateRecord::FileMapped { at: 1, start: 0x11000, length: 0x1000, offset: 0, path: b"/lib/b" });
        r.note(1, &StateRecord::Protected { at: 1, start: 0x11000, length: 0x1000, prot: PROT_READ | PROT_EXEC });
        assert_eq!(listed(&r, 1), ["10000-11000 r-- 2000 /lib/a", "11000-12000 r-x 0 /lib/b", "12000-13000 r-- 4000 /lib/a"]);
    }
}
