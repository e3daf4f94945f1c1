//! Finding PSB packets, the synchronisation points of an Intel PT stream.
//!
//! A PSB is the 16-byte pattern `02 82` × 8. Payload bytes of other packets can
//! look like `02 82` too, so a run of the pattern longer than 16 bytes is
//! resolved to its **last** 16 bytes, and only in the phase in which the run
//! is read (this is what libipt's `pt_sync_forward` / `pt_sync_backward` do,
//! so both decoders synchronise to the same offsets).
//!
//! The search scans 8-byte words aligned to the buffer start for the two
//! phases of the pattern, then resolves the run around a hit.

use super::{PSB_BYTES, PSB_LEN};

const WORD: usize = 8;
const PATTERN_EVEN: u64 = 0x8202_8202_8202_8202; // bytes 02 82 02 82 …
const PATTERN_ODD: u64 = 0x0282_0282_0282_0282; // bytes 82 02 82 02 …

#[inline(always)]
fn word(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + WORD].try_into().expect("8 bytes"))
}

/// Given `end`, the offset just past an 8-byte window full of PSB pattern,
/// returns the start of the PSB that ends the pattern run containing it.
fn resolve_run(data: &[u8], end: usize) -> Option<usize> {
    let mut pos = end;
    if data.get(pos) != Some(&0x02) {
        pos += 1;
    }
    while pos + 1 < data.len() && data[pos] == 0x02 && data[pos + 1] == 0x82 {
        pos += 2;
    }
    let start = pos.checked_sub(PSB_LEN)?;
    (data.get(start..start + PSB_LEN)? == PSB_BYTES).then_some(start)
}

/// The first PSB that starts at or after `from`, or `None`.
pub fn find_psb_forward(data: &[u8], from: usize) -> Option<usize> {
    if from > data.len() {
        return None;
    }
    let mut pos = from.div_ceil(WORD) * WORD;
    loop {
        let window = pos;
        pos += WORD;
        if pos > data.len() {
            return None;
        }
        let value = word(data, window);
        if value != PATTERN_EVEN && value != PATTERN_ODD {
            continue;
        }
        match resolve_run(data, pos) {
            Some(start) if start >= from => return Some(start),
            _ => continue,
        }
    }
}

/// The last PSB that starts before `before` (found scanning backwards), or `None`.
pub fn find_psb_backward(data: &[u8], before: usize) -> Option<usize> {
    let mut pos = before.min(data.len()) / WORD * WORD;
    loop {
        let next = pos;
        pos = pos.checked_sub(WORD)?;
        let value = word(data, pos);
        if value != PATTERN_EVEN && value != PATTERN_ODD {
            continue;
        }
        // Unlike libipt, never return a PSB at or after `before`: inside a
        // pattern run longer than 16 bytes, libipt can hand back the PSB it
        // started from, and a caller walking backwards would never progress.
        if let Some(start) = resolve_run(data, next).filter(|&start| start < before) {
            return Some(start);
        }
    }
}

/// Offsets of every PSB in `data`, in order.
pub fn psb_offsets(data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut from = 0;
    std::iter::from_fn(move || {
        let found = find_psb_forward(data, from)?;
        from = found + PSB_LEN;
        Some(found)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(prefix: usize, suffix: &[u8]) -> Vec<u8> {
        let mut data = vec![0u8; prefix];
        data.extend_from_slice(&PSB_BYTES);
        data.extend_from_slice(suffix);
        data
    }

    #[test]
    fn finds_psb_at_every_alignment() {
        for prefix in 0..24 {
            let data = stream(prefix, &[0x02, 0x23, 0, 0, 0, 0, 0, 0, 0]);
            assert_eq!(find_psb_forward(&data, 0), Some(prefix), "prefix {prefix}");
            assert_eq!(find_psb_backward(&data, data.len()), Some(prefix), "prefix {prefix}");
        }
    }

    #[test]
    fn psb_at_buffer_end() {
        let data = stream(3, &[]);
        assert_eq!(find_psb_forward(&data, 0), Some(3));
        assert_eq!(find_psb_forward(&data, 4), None);
    }

    #[test]
    fn long_run_resolves_to_its_tail() {
        // 02 82 x 9: the PSB is the last 16 bytes.
        let mut data = vec![0x00];
        for _ in 0..9 {
            data.extend_from_slice(&[0x02, 0x82]);
        }
        data.extend_from_slice(&[0x02, 0x23]);
        assert_eq!(find_psb_forward(&data, 0), Some(3));
    }

    #[test]
    fn backward_always_makes_progress() {
        // 02 82 x 14: the run resolves to the PSB at 12; scanning backwards
        // from 12 must not return 12 again.
        let mut data = Vec::new();
        for _ in 0..14 {
            data.extend_from_slice(&[0x02, 0x82]);
        }
        data.extend_from_slice(&[0x02, 0x23]);
        assert_eq!(find_psb_backward(&data, data.len()), Some(12));
        assert_eq!(find_psb_backward(&data, 12), None);
    }

    #[test]
    fn no_psb() {
        assert_eq!(find_psb_forward(&[0u8; 100], 0), None);
        assert_eq!(find_psb_backward(&[0u8; 100], 100), None);
        assert_eq!(find_psb_forward(&[], 0), None);
        assert_eq!(find_psb_forward(&[1, 2, 3], 7), None);
    }

    #[test]
    fn offsets_lists_all() {
        let mut data = stream(5, &[0; 40]);
        data.extend_from_slice(&PSB_BYTES);
        assert_eq!(psb_offsets(&data).collect::<Vec<_>>(), vec![5, 61]);
    }
}
