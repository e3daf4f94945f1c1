//! Which memory the records of each interval of a full-state recording
//! touched, by 8-byte word: what lets a query go straight to the few
//! intervals that can hold the last write of a byte (or the watched write
//! or read), and replay only those.

use std::collections::HashMap;
use std::ops::Range;

const PAGE: u64 = 4096;
const WORDS_PER_PAGE: usize = (PAGE / 8) as usize;

/// Touches of more than this many bytes at once (a large mapping, a big
/// read into a buffer) are kept whole, not word by word.
const WIDE: u64 = 64 * PAGE;

/// See the module documentation. Intervals are numbered from 0 and
/// touched in ascending order.
#[derive(Debug, Default)]
pub struct Touches {
    /// Page → (interval, slot in `words`) for each interval that touched
    /// it, ascending.
    pages: HashMap<u64, Vec<(u32, u32)>>,
    /// Which of a page's 512 words an interval touched.
    words: Vec<[u64; WORDS_PER_PAGE / 64]>,
    /// (interval, range) of the wide touches, ascending.
    wide: Vec<(u32, Range<u64>)>,
}

/// The bits of a page's word map for the words of `range` (within page
/// `page`).
fn word_bits(page: u64, range: &Range<u64>) -> impl Iterator<Item = usize> {
    let base = page * PAGE;
    let first = ((range.start.max(base) - base) / 8) as usize;
    // (The last page's end is 2^64: past u64.)
    let last = ((range.end.min(base.saturating_add(PAGE)) - 1 - base) / 8) as usize;
    first..=last
}

impl Touches {
    /// The records of `interval` touched `range`.
    pub fn touch(&mut self, interval: u32, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        if range.end - range.start > WIDE {
            match self.wide.last_mut() {
                Some((at, last)) if *at == interval && last.start <= range.end && range.start <= last.end => {
                    *last = last.start.min(range.start)..last.end.max(range.end);
                }
                _ => self.wide.push((interval, range)),
            }
            return;
        }
        for page in range.start / PAGE..=(range.end - 1) / PAGE {
            let list = self.pages.entry(page).or_default();
            let slot = match list.last() {
                Some(&(at, slot)) if at == interval => slot as usize,
                _ => {
                    list.push((interval, self.words.len() as u32));
                    self.words.push([0; WORDS_PER_PAGE / 64]);
                    self.words.len() - 1
                }
            };
            let map = &mut self.words[slot];
            for bit in word_bits(page, &range) {
                map[bit / 64] |= 1 << (bit % 64);
            }
        }
    }

    fn touched(&self, slot: u32, page: u64, range: &Range<u64>) -> bool {
        let map = &self.words[slot as usize];
        word_bits(page, range).any(|bit| map[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// The latest interval at or before `cap` whose records touched a word
    /// of `range`.
    pub fn latest(&self, range: &Range<u64>, cap: u32) -> Option<u32> {
        if range.is_empty() {
            return None;
        }
        let mut best = self.wide.iter().rev().find(|(at, r)| *at <= cap && r.start < range.end && range.start < r.end).map(|(at, _)| *at);
        for page in range.start / PAGE..=(range.end - 1) / PAGE {
            let Some(list) = self.pages.get(&page) else { continue };
            let below = list.partition_point(|&(at, _)| at <= cap);
            for &(at, slot) in list[..below].iter().rev() {
                if best.is_some_and(|b| b >= at) {
                    break;
                }
                if self.touched(slot, page, range) {
                    best = Some(at);
                    break;
                }
            }
        }
        best
    }

    /// The earliest interval at or after `from` whose records touched a
    /// word of `range`.
    pub fn earliest(&self, range: &Range<u64>, from: u32) -> Option<u32> {
        if range.is_empty() {
            return None;
        }
        let mut best = self.wide.iter().find(|(at, r)| *at >= from && r.start < range.end && range.start < r.end).map(|(at, _)| *at);
        for page in range.start / PAGE..=(range.end - 1) / PAGE {
            let Some(list) = self.pages.get(&page) else { continue };
            let start = list.partition_point(|&(at, _)| at < from);
            for &(at, slot) in &list[start..] {
                if best.is_some_and(|b| b <= at) {
                    break;
                }
                if self.touched(slot, page, range) {
                    best = Some(at);
                    break;
                }
            }
        }
        best
    }

    /// Whether the records of `interval` touched a word of `range`.
    pub fn touches(&self, range: &Range<u64>, interval: u32) -> bool {
        self.earliest(range, interval) == Some(interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_find_the_intervals_that_touched_a_word_and_pass_over_the_rest() {
        let mut touches = Touches::default();
        touches.touch(0, 0x1000..0x1008); // word 0 of page 1
        touches.touch(2, 0x1010..0x1011); // word 2
        touches.touch(2, 0x1ff8..0x2004); // the page's last word and page 2's first
        touches.touch(5, 0x1000..0x1001);
        touches.touch(7, 0x10_0000..0x20_0000); // wide
        let word0 = 0x1000..0x1008;
        assert_eq!(touches.latest(&word0, 9), Some(5));
        assert_eq!(touches.latest(&word0, 4), Some(0));
        assert_eq!(touches.earliest(&word0, 1), Some(5));
        // Word 1 was never touched, though its page was.
        assert_eq!(touches.latest(&(0x1008..0x1010), 9), None);
        assert_eq!(touches.earliest(&(0x1008..0x1010), 0), None);
        assert_eq!(touches.latest(&(0x2000..0x2001), 9), Some(2));
        assert!(touches.touches(&(0x1014..0x1015), 2) && !touches.touches(&(0x1014..0x1015), 5));
        assert_eq!(touches.latest(&(0x18_0000..0x18_0008), 9), Some(7));
        assert_eq!(touches.latest(&(0x18_0000..0x18_0008), 6), None);
        assert_eq!(touches.earliest(&(0x18_0000..0x18_0008), 0), Some(7));
        // A range over two words: the later of their intervals.
        assert_eq!(touches.latest(&(0x1008..0x1018), 9), Some(2));
    }

    /// A write at the top of the address space (a hostile full-state
    /// stream's; hostile_bundles.rs found the overflow): its page ends at
    /// 2^64.
    #[test]
    fn the_last_page_of_the_address_space() {
        let mut touches = Touches::default();
        touches.touch(3, u64::MAX - 3..u64::MAX);
        assert_eq!(touches.latest(&(u64::MAX - 1..u64::MAX), 9), Some(3));
        assert_eq!(touches.earliest(&(u64::MAX - 8..u64::MAX), 0), Some(3));
        assert_eq!(touches.latest(&(u64::MAX - 4096..u64::MAX - 8), 9), None);
    }
}
