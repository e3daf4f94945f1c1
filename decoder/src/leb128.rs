//! LEB128, the variable-length integers of DWARF, read and written by
//! gimli's codec: the one codec of retrace's compact in-memory formats (the
//! stub's state log, the call-tree spill of `retrace dump function-calls`).
//! Signed values are zigzag-mapped first, so that small magnitudes of
//! either sign take one byte.

use gimli::{EndianSlice, LittleEndian};

/// Appends `value`.
pub fn put(out: &mut Vec<u8>, value: u64) {
    gimli::leb128::write::unsigned(out, value).expect("a vector takes every byte");
}

/// Appends `value`, zigzag-mapped.
pub fn put_signed(out: &mut Vec<u8>, value: i64) {
    put(out, zigzag(value));
}

/// Reads the value at `*at`, moving `at` past it; `None` where `bytes`
/// ends inside it or it does not fit 64 bits.
pub fn get(bytes: &[u8], at: &mut usize) -> Option<u64> {
    // Most numbers of a stream are one byte.
    if let Some(&byte) = bytes.get(*at).filter(|&&b| b < 0x80) {
        *at += 1;
        return Some(u64::from(byte));
    }
    let mut reader = EndianSlice::new(bytes.get(*at..)?, LittleEndian);
    let value = gimli::leb128::read::unsigned(&mut reader).ok()?;
    *at = bytes.len() - reader.len();
    Some(value)
}

/// Reads a zigzag-mapped value at `*at`, as [`get`].
pub fn get_signed(bytes: &[u8], at: &mut usize) -> Option<i64> {
    get(bytes, at).map(unzigzag)
}

/// Maps 0, -1, 1, -2… to 0, 1, 2, 3….
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_small_ones_take_one_byte() {
        let values = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let mut bytes = Vec::new();
        for &v in &values {
            put(&mut bytes, v);
        }
        put_signed(&mut bytes, -1);
        put_signed(&mut bytes, i64::MIN);
        let mut at = 0;
        for &v in &values {
            assert_eq!(get(&bytes, &mut at), Some(v));
        }
        assert_eq!(get_signed(&bytes, &mut at), Some(-1));
        assert_eq!(get_signed(&bytes, &mut at), Some(i64::MIN));
        assert_eq!(at, bytes.len());
        assert_eq!(get(&bytes, &mut at), None);
        // 0..=127 in one byte each, -1 too (zigzag 1), u64::MAX in ten.
        assert_eq!(bytes[..3], [0, 1, 127]);
        let mut one = Vec::new();
        put_signed(&mut one, -64);
        assert_eq!(one, [127]);
        let mut max = Vec::new();
        put(&mut max, u64::MAX);
        assert_eq!(max.len(), 10);
    }

    #[test]
    fn a_cut_value_is_none_and_leaves_the_position() {
        let mut bytes = Vec::new();
        put(&mut bytes, 1 << 40);
        let mut at = 0;
        assert_eq!(get(&bytes[..3], &mut at), None);
        assert_eq!(at, 0);
        assert_eq!(get(&[0xff; 11], &mut at), None, "more than 64 bits");
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    /// `cargo test --release -p retrace-decoder --lib leb128::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn gimli_against_a_plain_loop() {
        let mut bytes = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            put(&mut bytes, state >> (state % 64));
        }
        fn plain(bytes: &[u8], at: &mut usize) -> u64 {
            let mut value = 0u64;
            let mut shift = 0;
            loop {
                let byte = bytes[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift.min(63);
                shift += 7;
                if byte < 0x80 {
                    return value;
                }
            }
        }
        for round in 0..3 {
            let start = std::time::Instant::now();
            let (mut at, mut sum) = (0, 0u64);
            while at < bytes.len() {
                sum = sum.wrapping_add(get(&bytes, &mut at).unwrap());
            }
            let gimli = start.elapsed();
            let start = std::time::Instant::now();
            let (mut at, mut sum2) = (0, 0u64);
            while at < bytes.len() {
                sum2 = sum2.wrapping_add(plain(&bytes, &mut at));
            }
            let loop_time = start.elapsed();
            assert_eq!(sum, sum2);
            println!("round {round}: gimli {gimli:?}, plain loop {loop_time:?}");
        }
    }
}
