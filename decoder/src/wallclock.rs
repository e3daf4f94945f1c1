//! Wall-clock times of trace items as LLDB 22 estimates them (`thread trace
//! dump instructions -t`): each clock tick that changes the nanosecond value
//! opens a range of items, and an item's time is interpolated from its place
//! in its range and the next range's time (LLDB's `NanosecondsRange`,
//! reproduced with its arithmetic, including its items-per-nanosecond step).

use crate::bundle::TscConversion;
use crate::history::{Extra, History};
use crate::item::Event;

/// One range: the items from a clock tick to the next tick with another
/// nanosecond value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    /// Index of the tick item that opens it.
    first: usize,
    /// Its time.
    nanos: u64,
    /// The TSC of that tick.
    tsc: u64,
    /// Items in it, the tick included.
    count: u64,
}

/// The clock of one thread's items.
#[derive(Debug, Clone)]
pub struct WallClock {
    ranges: Vec<Range>,
    conversion: TscConversion,
}

impl WallClock {
    /// The ranges of a thread's `total` items whose clock ticks are
    /// `ticks` (item id, TSC), in order — e.g. from
    /// [`crate::history::History::extras_with_ids`], without expanding the
    /// instructions.
    pub fn from_ticks(ticks: impl IntoIterator<Item = (u64, u64)>, total: u64, conversion: &TscConversion) -> Self {
        let mut ranges: Vec<Range> = Vec::new();
        for (index, tsc) in ticks {
            let nanos = conversion.to_nanos(tsc);
            if ranges.last().is_none_or(|last| last.nanos != nanos) {
                if let Some(last) = ranges.last_mut() {
                    last.count = index - last.first as u64;
                }
                ranges.push(Range { first: index as usize, nanos, tsc, count: 0 });
            }
        }
        if let Some(last) = ranges.last_mut() {
            last.count = total.saturating_sub(last.first as u64);
        }
        WallClock { ranges, conversion: conversion.clone() }
    }

    /// The clock of a decoded history.
    pub fn of_history(history: &History, conversion: &TscConversion) -> Self {
        let ticks = history.extras_with_ids().filter_map(|(id, extra)| match extra {
            Extra::Event(Event::ClockTick(tsc)) => Some((id, *tsc)),
            _ => None,
        });
        Self::from_ticks(ticks, history.items_len(), conversion)
    }

    /// The first TSC value of a decoded history (LLDB takes the earliest of
    /// all threads' first values as the trace's beginning of time).
    pub fn first_tsc_of(history: &History) -> Option<u64> {
        history.extras().find_map(|extra| match extra {
            Extra::Event(Event::ClockTick(tsc)) => Some(*tsc),
            _ => None,
        })
    }

    /// Nanoseconds from `begin` (a nanosecond value) to item `index`; `None`
    /// before the first clock tick.
    pub fn time(&self, index: usize, begin: u64) -> Option<f64> {
        let at = self.ranges.partition_point(|r| r.first <= index).checked_sub(1)?;
        let range = self.ranges[at];
        let k = (index - range.first) as f64;
        let interpolate = |mut next_nanos: u64| {
            if next_nanos == range.nanos {
                next_nanos += 1;
            }
            // LLDB's quantity: items per nanosecond, used as a duration.
            let item_duration = range.count as f64 / next_nanos.wrapping_sub(range.nanos) as f64;
            range.nanos.wrapping_sub(begin) as f64 + k * item_duration
        };
        let end_by_count = self.conversion.to_nanos(range.tsc.wrapping_add(range.count));
        Some(match self.ranges.get(at + 1) {
            None => interpolate(end_by_count),
            Some(next) if range.count < next.tsc.wrapping_sub(range.tsc) => interpolate(end_by_count.min(next.nanos)),
            Some(next) => interpolate(next.nanos),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::{ExecMode, FlowKind, InsnInfo};

    #[test]
    fn items_take_their_range_time_plus_lldbs_interpolation() {
        // 1 ns per TSC tick from zero.
        let conversion = TscConversion { time_mult: 1, time_shift: 0, time_zero: "0".into() };
        // Items: insn, tick 100, insn, insn, insn, tick 110, insn.
        let mut history = History::default();
        let one = history.table.add(0x1000, &[1], InsnInfo { len: 1, kind: FlowKind::Return }, ExecMode::Bits64);
        let three = history.table.add(0x2000, &[1, 1, 1], InsnInfo { len: 1, kind: FlowKind::Return }, ExecMode::Bits64);
        history.push_block(one);
        history.push_extra(Extra::Event(Event::ClockTick(100)));
        history.push_block(three);
        history.push_extra(Extra::Event(Event::ClockTick(110)));
        history.push_block(one);
        history.shrink_to_fit();
        let clock = WallClock::of_history(&history, &conversion);
        assert_eq!(clock.time(0, 100), None); // before any tick
        // Range at 100 holds 4 items, the next one starts at 110 (4 < 10
        // ticks: the end is min(ns(100 + 4), 110) = 104): 4 items / 4 ns.
        assert_eq!(clock.time(1, 100), Some(0.0));
        assert_eq!(clock.time(3, 100), Some(2.0));
        // Last range (2 items, no next): end ns(110 + 2) = 112, 2 / 2.
        assert_eq!(clock.time(6, 100), Some(11.0));
        assert_eq!(WallClock::first_tsc_of(&history), Some(100));
    }

    #[test]
    fn nanoseconds_follow_perfs_conversion() {
        let conversion = TscConversion { time_mult: 3, time_shift: 1, time_zero: "0x10".into() };
        // 16 + (5 >> 1) * 3 + ((5 & 1) * 3 >> 1) = 16 + 6 + 1
        assert_eq!(conversion.to_nanos(5), 23);
    }
}
