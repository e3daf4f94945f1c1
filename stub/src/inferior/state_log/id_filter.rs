//! Which instructions ran in a span of steps, as a Bloom filter: a search
//! for a breakpoint's address passes over every span whose filter says its
//! instruction surely did not run there, without reading the span's steps.

/// Steps per filter.
pub(super) const SPAN: usize = 4096;

/// A set of instruction ids in 256 bits, two bits an id: an id it does not
/// hold surely was not inserted; one it holds may not have been.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct IdFilter([u64; 4]);

impl IdFilter {
    /// The two bits of `id` (from a multiplicative hash, so that ids next
    /// to each other, as a loop's are, fall apart).
    fn bits(id: u32) -> [u32; 2] {
        let hash = id.wrapping_mul(0x9e37_79b9);
        [hash >> 24, (hash >> 16) & 0xff]
    }

    /// Adds `id`.
    pub(super) fn insert(&mut self, id: u32) {
        for bit in Self::bits(id) {
            self.0[bit as usize / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether `id` may have been added.
    pub(super) fn may_hold(&self, id: u32) -> bool {
        Self::bits(id).iter().all(|&bit| self.0[bit as usize / 64] & (1 << (bit % 64)) != 0)
    }

    /// Whether one of `ids` may have been added.
    pub(super) fn may_hold_any(&self, ids: &[u32]) -> bool {
        ids.iter().any(|&id| self.may_hold(id))
    }
}

#[cfg(test)]
mod tests {
    use super::IdFilter;

    #[test]
    fn an_inserted_id_is_held_and_most_others_are_not() {
        let mut filter = IdFilter::default();
        let loop_ids: Vec<u32> = (100..130).collect();
        for &id in &loop_ids {
            filter.insert(id);
        }
        assert!(loop_ids.iter().all(|&id| filter.may_hold(id)));
        assert!(filter.may_hold_any(&[7, 115]));
        assert!(!filter.may_hold_any(&[]));
        // Thirty ids set at most 60 of 256 bits: about 5% of other ids
        // pass (both of their bits set), never most of them.
        let passing = (0..10_000).filter(|&id| !loop_ids.contains(&id) && filter.may_hold(id)).count();
        assert!(passing < 1_000, "{passing} of 10000 ids not inserted pass");
        assert!(!IdFilter::default().may_hold(0));
    }
}
