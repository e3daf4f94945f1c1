//! Damaging a trace the way real trace buffers get damaged: flipped bytes,
//! overwritten runs, lost and inserted bytes, and a truncated end.

use crate::rng::Rng;

/// Returns a corrupted copy of `data` with about one damage site per
/// `every` bytes, and a truncated end.
pub fn corrupt(data: &[u8], seed: u64, every: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(data.len() + data.len() / every + 16);
    let mut pos = 0;
    while pos < data.len() {
        let gap = rng.range(1, (2 * every) as u64) as usize;
        let end = (pos + gap).min(data.len());
        out.extend_from_slice(&data[pos..end]);
        pos = end;
        if pos >= data.len() {
            break;
        }
        match rng.below(5) {
            0 => {
                // flip one byte
                out.push(data[pos] ^ (rng.range(1, 255) as u8));
                pos += 1;
            }
            1 => {
                // overwrite a run with random bytes
                let n = rng.range(1, 12) as usize;
                for _ in 0..n.min(data.len() - pos) {
                    out.push(rng.next_u64() as u8);
                }
                pos += n;
            }
            2 => pos += rng.range(1, 9) as usize, // lose bytes
            3 => {
                // insert random bytes
                for _ in 0..rng.range(1, 6) {
                    out.push(rng.next_u64() as u8);
                }
            }
            _ => {
                // insert one byte that is a valid opcode start
                out.push([0x02, 0x99, 0x19, 0xd9, 0x03, 0x07, 0x1d, 0x0d][rng.below(8) as usize]);
            }
        }
    }
    let cut = rng.range(1, 7) as usize;
    out.truncate(out.len().saturating_sub(cut));
    out
}
