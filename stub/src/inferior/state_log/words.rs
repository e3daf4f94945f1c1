//! The index of the bytes steps wrote or read, by 8-byte word: the first or
//! latest step at or before a position that touched a range is a binary
//! search per word group, not a walk of the steps.

use std::collections::HashMap;
use std::ops::Range;

/// The steps that overwrote bytes of one 8-byte word with a small write,
/// grouped by which of its bytes they wrote (bit `i`: the byte at offset
/// `i`), each group's steps ascending. A variable is written the same way
/// every time, so a word has one or two groups; the first step at or
/// after a position that wrote a byte is then a binary search per group,
/// however often the word's other bytes were written.
pub(super) type WordWrites = Vec<(u8, Vec<u64>)>;

/// The bits of word `word`'s bytes that `from..to` covers.
pub(super) fn byte_mask(word: u64, from: u64, to: u64) -> u8 {
    let lo = from.max(word * 8) - word * 8;
    let hi = to.min(word * 8 + 8) - word * 8;
    (lo..hi).fold(0, |mask, bit| mask | 1 << bit)
}

/// Notes that step `position` touched the bytes `range`, by word.
pub(super) fn index_words(words: &mut HashMap<u64, WordWrites>, range: Range<u64>, position: u64) {
    for word in range.start / 8..=(range.end - 1) / 8 {
        let mask = byte_mask(word, range.start, range.end);
        let groups = words.entry(word).or_default();
        match groups.iter_mut().find(|(m, _)| *m == mask) {
            Some((_, steps)) if steps.last() == Some(&position) => {}
            Some((_, steps)) => steps.push(position),
            None => groups.push((mask, vec![position])),
        }
    }
}

/// The steps that touched a byte of `range`, per indexed word group that
/// covers one: ascending lists.
pub(super) fn word_steps<'a>(words: &'a HashMap<u64, WordWrites>, range: &Range<u64>) -> impl Iterator<Item = &'a [u64]> + 'a {
    let (start, end) = (range.start, range.end);
    (start / 8..=(end.max(start + 1) - 1) / 8).flat_map(move |word| {
        let wanted = byte_mask(word, start, end);
        words.get(&word).map_or(&[][..], |groups| &groups[..]).iter().filter(move |(mask, _)| mask & wanted != 0).map(|(_, steps)| &steps[..])
    })
}

/// The latest step before `before` in `words` that touched a byte of `range`.
pub(super) fn last_in_words(words: &HashMap<u64, WordWrites>, range: &Range<u64>, before: u64) -> Option<u64> {
    word_steps(words, range).filter_map(|steps| steps[..steps.partition_point(|&s| s < before)].last().copied()).max()
}

/// The first step at or after `from` in `words` that touched a byte of `range`.
pub(super) fn first_in_words(words: &HashMap<u64, WordWrites>, range: &Range<u64>, from: u64) -> Option<u64> {
    word_steps(words, range).filter_map(|steps| steps.get(steps.partition_point(|&s| s < from)).copied()).min()
}

/// Whether some address of `addresses` (sorted) lies in `low..=high`.
pub(super) fn any_within(addresses: &[u64], (low, high): (u64, u64)) -> bool {
    addresses[addresses.partition_point(|&a| a < low)..].first().is_some_and(|&a| a <= high)
}
