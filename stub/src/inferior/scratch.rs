//! What a debugger writes into a replay without running code: memory it is
//! given for its own use (LLDB's `_M`: where its expression evaluator puts
//! results) and the bytes it writes into the program's past (`expr x = 7`),
//! seen until the replay moves on. Code it runs in the past (a function
//! call) runs in a stand-in process ([`crate::inferior::diversion`]), which
//! reads these too.

use std::collections::BTreeMap;
use std::ops::Range;

/// Where allocations go, upwards: far above a program's heap and below
/// where Linux places libraries and stacks, and checked against the
/// recording.
const BASE: u64 = 0x6000_0000_0000;
const PAGE: u64 = 4096;

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Scratch {
    /// (first address, bytes) of each allocation.
    allocations: Vec<(u64, Vec<u8>)>,
    /// Bytes written into the program's memory at this position.
    written: BTreeMap<u64, u8>,
    /// The next allocation's address.
    next: u64,
}

impl Scratch {
    /// `size` bytes of zeros at a page-aligned address `free` accepts (no
    /// byte of the program's there): its address.
    pub fn allocate(&mut self, size: u64, free: impl Fn(&Range<u64>) -> bool) -> Option<u64> {
        let size = size.max(1).checked_next_multiple_of(PAGE)?;
        let mut start = self.next.max(BASE);
        for _ in 0..64 {
            let range = start..start.checked_add(size)?;
            if free(&range) {
                self.next = range.end + PAGE;
                self.allocations.push((start, vec![0; usize::try_from(size).ok()?]));
                return Some(start);
            }
            start = range.end.checked_add(1 << 32)?;
        }
        None
    }

    /// Gives back the allocation at `address`.
    pub fn deallocate(&mut self, address: u64) -> bool {
        let before = self.allocations.len();
        self.allocations.retain(|(start, _)| *start != address);
        self.allocations.len() < before
    }

    /// The allocation holding `address`: its range.
    pub fn allocation(&self, address: u64) -> Option<Range<u64>> {
        self.allocations.iter().map(|(start, bytes)| *start..start + bytes.len() as u64).find(|r| r.contains(&address))
    }

    /// Reads from the allocation holding `address`, if one does: how many
    /// bytes.
    pub fn read_allocated(&self, address: u64, buf: &mut [u8]) -> Option<usize> {
        let (start, bytes) = self.allocations.iter().find(|(start, bytes)| (*start..start + bytes.len() as u64).contains(&address))?;
        let from = (address - start) as usize;
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        Some(n)
    }

    /// Writes `data` at `address`: into an allocation, or over the
    /// program's memory at this position.
    pub fn write(&mut self, address: u64, data: &[u8]) {
        if let Some((start, bytes)) = self.allocations.iter_mut().find(|(start, bytes)| (*start..start + bytes.len() as u64).contains(&address)) {
            let from = (address - *start) as usize;
            let n = data.len().min(bytes.len() - from);
            bytes[from..from + n].copy_from_slice(&data[..n]);
            if n == data.len() {
                return;
            }
            return self.write(address + n as u64, &data[n..]);
        }
        for (i, &byte) in data.iter().enumerate() {
            self.written.insert(address.wrapping_add(i as u64), byte);
        }
    }

    /// Lays what was written at this position over `buf`, read from
    /// `address` with its first `known` bytes known: how many are known
    /// now (written bytes right after the known ones extend them).
    pub fn overlay(&self, address: u64, buf: &mut [u8], known: usize) -> usize {
        let mut known = known;
        for (&at, &byte) in self.written.range(address..address.saturating_add(buf.len() as u64)) {
            let i = (at - address) as usize;
            if i <= known {
                buf[i] = byte;
                known = known.max(i + 1);
            }
        }
        known
    }

    /// The replay moved: the writes into the past are gone (the program's
    /// history is as recorded); the allocations stay.
    pub fn moved(&mut self) {
        self.written.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_keep_what_is_written_and_writes_in_the_past_last_until_a_move() {
        let mut scratch = Scratch::default();
        // The first candidate is taken by the program: the next is used.
        let a = scratch.allocate(100, |r| r.start != BASE).unwrap();
        assert!(a > BASE && a % PAGE == 0);
        assert_eq!(scratch.allocation(a + 4095), Some(a..a + PAGE));
        scratch.write(a + 10, &[1, 2, 3]);
        let mut buf = [0u8; 4];
        assert_eq!(scratch.read_allocated(a + 9, &mut buf), Some(4));
        assert_eq!(buf, [0, 1, 2, 3]);
        // The program's memory: laid over what the recording gives.
        scratch.write(0x1000, &[7, 8]);
        let mut program = [0xaa, 0xbb, 0xcc, 0xdd];
        assert_eq!(scratch.overlay(0xfff, &mut program, 1), 3);
        assert_eq!(program, [0xaa, 7, 8, 0xdd]);
        scratch.moved();
        let mut program = [0xaa, 0xbb, 0xcc, 0xdd];
        assert_eq!(scratch.overlay(0xfff, &mut program, 4), 4);
        assert_eq!(program, [0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(scratch.read_allocated(a + 10, &mut buf[..1]), Some(1), "allocations outlive a move");
        assert!(scratch.deallocate(a) && scratch.read_allocated(a, &mut buf).is_none());
    }
}
