//! LLDB's tree of a function's blocks (`Block`): the function, its lexical
//! blocks and inlined calls, with their DWARF ranges and names, and the
//! rules LLDB 22 follows to find the block containing an address.

use std::sync::Arc;

use super::{InlinedBlock, Reader};

/// One block of a function as LLDB builds it (`Block`): the function
/// itself or a lexical block or inlined call inside it.
struct BlockNode {
    /// `.debug_info` offset of its entry.
    id: u64,
    parent: Option<usize>,
    children: Vec<usize>,
    /// The entry's own ranges in debug-info order (what LLDB's deepest-block
    /// search looks at).
    dwarf_ranges: Vec<(u64, u64)>,
    /// LLDB's `Block` ranges: its own, sorted and joined, then whatever its
    /// children had outside them, appended unsorted.
    ranges: Vec<(u64, u64)>,
    /// The inlined function's name (`None`: a lexical block or the function).
    inlined: Option<Arc<str>>,
}

/// A function's blocks, node 0 the function (file addresses).
pub(super) struct FunctionBlocks {
    nodes: Vec<BlockNode>,
}

/// `std::lower_bound` by range base, as LLDB's `RangeVector` searches, also
/// when appended ranges left the vector unsorted.
fn lower_bound(ranges: &[(u64, u64)], base: u64) -> usize {
    let (mut first, mut count) = (0, ranges.len());
    while count > 0 {
        let step = count / 2;
        if ranges[first + step].0 < base {
            first += step + 1;
            count -= step + 1;
        } else {
            count = step;
        }
    }
    first
}

/// LLDB's `RangeVector::FindEntryIndexThatContains(address)`.
fn lldb_range_containing(ranges: &[(u64, u64)], address: u64) -> Option<usize> {
    let at = lower_bound(ranges, address);
    let contains = |i: usize| ranges.get(i).is_some_and(|r| r.0 <= address && address < r.1);
    if contains(at) {
        Some(at)
    } else {
        at.checked_sub(1).filter(|&i| contains(i))
    }
}

/// LLDB's `RangeVector::FindEntryThatContains(range)` (the end may touch).
fn lldb_contains_range(ranges: &[(u64, u64)], range: (u64, u64)) -> bool {
    let contains = |r: &(u64, u64)| r.0 <= range.0 && range.0 < r.1 && r.0 <= range.1 && range.1 <= r.1;
    let at = lower_bound(ranges, range.0);
    ranges.get(at).is_some_and(contains) || at.checked_sub(1).is_some_and(|i| contains(&ranges[i]))
}

impl FunctionBlocks {
    /// `Block::AddRange`: a range the parent does not contain is added to
    /// the parent (and so on up) before it is appended.
    fn add_range(&mut self, node: usize, range: (u64, u64)) {
        if let Some(parent) = self.nodes[node].parent {
            if !lldb_contains_range(&self.nodes[parent].ranges, range) {
                self.add_range(parent, range);
            }
        }
        self.nodes[node].ranges.push(range);
    }

    /// `Block::FinalizeRanges`: sorted, touching or overlapping ranges joined.
    fn finalize(&mut self, node: usize) {
        let ranges = &mut self.nodes[node].ranges;
        ranges.sort_unstable();
        let mut joined: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for &(begin, end) in ranges.iter() {
            match joined.last_mut() {
                Some(last) if last.0 <= end && last.1 >= begin => last.1 = last.1.max(end),
                _ => joined.push((begin, end)),
            }
        }
        *ranges = joined;
    }

    /// `SymbolFileDWARF::ParseBlocksRecursive` over a subprogram's entry.
    pub(super) fn build(unit: gimli::UnitRef<Reader>, function: gimli::UnitOffset<usize>) -> Option<Self> {
        let mut tree = unit.entries_tree(Some(function)).ok()?;
        let root = tree.root().ok()?;
        let own_ranges = dwarf_ranges(unit, root.entry());
        let low = own_ranges.iter().map(|r| r.0).min()?;
        let mut blocks = FunctionBlocks {
            nodes: vec![BlockNode { id: debug_info_offset(unit, function), parent: None, children: Vec::new(), dwarf_ranges: own_ranges.clone(), ranges: own_ranges, inlined: None }],
        };
        blocks.finalize(0);
        blocks.add_children(unit, root, 0, low);
        Some(blocks)
    }

    fn add_children(
        &mut self,
        unit: gimli::UnitRef<Reader>,
        node: gimli::EntriesTreeNode<Reader>,
        parent: usize,
        low: u64,
    ) {
        let mut children = node.children();
        while let Ok(Some(child)) = children.next() {
            let tag = child.entry().tag();
            if tag != gimli::DW_TAG_inlined_subroutine && tag != gimli::DW_TAG_lexical_block {
                continue;
            }
            let dwarf = dwarf_ranges(unit, child.entry());
            let inlined = (tag == gimli::DW_TAG_inlined_subroutine).then(|| entry_name(unit, child.entry(), 8)).flatten();
            let index = self.nodes.len();
            self.nodes.push(BlockNode { id: debug_info_offset(unit, child.entry().offset()), parent: Some(parent), children: Vec::new(), dwarf_ranges: dwarf.clone(), ranges: Vec::new(), inlined });
            self.nodes[parent].children.push(index);
            for range in dwarf.into_iter().filter(|r| r.0 >= low) {
                self.add_range(index, range);
            }
            self.finalize(index);
            self.add_children(unit, child, index, low);
        }
    }

    /// `DWARFDIE::LookupDeepestBlock`: the first block (depth first, in
    /// debug-info order) whose own ranges hold the address, deepest first.
    fn deepest(&self, node: usize, address: u64) -> Option<usize> {
        let holds = |n: usize| self.nodes[n].dwarf_ranges.iter().any(|r| r.0 <= address && address < r.1);
        if !holds(node) {
            return None;
        }
        self.nodes[node].children.iter().find_map(|&child| self.deepest(child, address)).or(Some(node))
    }

    /// The inlined function holding the deepest block at `address` (file
    /// addresses), with the start of its LLDB range that holds the address.
    /// The function's non-empty ranges in debug-info order (the first
    /// starts at its entry).
    pub(super) fn function_ranges(&self) -> Option<Vec<(u64, u64)>> {
        Some(self.nodes.first()?.dwarf_ranges.iter().copied().filter(|r| r.0 < r.1).collect())
    }

    pub(super) fn inlined_at(&self, address: u64) -> Option<(Arc<str>, InlinedBlock)> {
        let mut node = self.deepest(0, address)?;
        while self.nodes[node].inlined.is_none() {
            node = self.nodes[node].parent?;
        }
        let block = &self.nodes[node];
        let range_start = lldb_range_containing(&block.ranges, address).map(|i| block.ranges[i].0);
        Some((block.inlined.clone()?, InlinedBlock { id: block.id, entry: block.ranges.first()?.0, range_start }))
    }
}

/// An entry's offset in `.debug_info` (what identifies a block).
pub(super) fn debug_info_offset(unit: gimli::UnitRef<Reader>, offset: gimli::UnitOffset<usize>) -> u64 {
    unit.header.offset().as_debug_info_offset().map_or(0, |o| o.0 as u64) + offset.0 as u64
}

/// An entry's address ranges in debug-info order, empty ones included (LLDB
/// keeps them; gimli's cooked iterator drops them).
fn dwarf_ranges(unit: gimli::UnitRef<Reader>, entry: &gimli::DebuggingInformationEntry<Reader>) -> Vec<(u64, u64)> {
    use gimli::RawRngListEntry as Raw;
    let mut ranges = Vec::new();
    let Ok(Some(value)) = entry.attr_value(gimli::DW_AT_ranges) else {
        if let Ok(mut iter) = unit.die_ranges(entry) {
            while let Ok(Some(range)) = iter.next() {
                ranges.push((range.begin, range.end));
            }
        }
        return ranges;
    };
    let Ok(Some(offset)) = unit.attr_ranges_offset(value) else { return ranges };
    let Ok(mut raw) = unit.raw_ranges(offset) else { return ranges };
    let mut base = unit.low_pc;
    let address = |index| unit.address(index).ok();
    while let Ok(Some(item)) = raw.next() {
        let range = match item {
            Raw::BaseAddress { addr } => {
                base = addr;
                None
            }
            Raw::BaseAddressx { addr } => {
                base = address(addr).unwrap_or(base);
                None
            }
            Raw::AddressOrOffsetPair { begin, end } | Raw::OffsetPair { begin, end } => Some((base.wrapping_add(begin), base.wrapping_add(end))),
            Raw::StartEnd { begin, end } => Some((begin, end)),
            Raw::StartLength { begin, length } => Some((begin, begin.wrapping_add(length))),
            Raw::StartxEndx { begin, end } => address(begin).zip(address(end)),
            Raw::StartxLength { begin, length } => address(begin).map(|b| (b, b.wrapping_add(length))),
        };
        ranges.extend(range.filter(|r| r.0 <= r.1));
    }
    ranges
}

/// An entry's name as addr2line gives it (linkage name, else name),
/// following `DW_AT_abstract_origin` / `DW_AT_specification` in its unit.
fn entry_name(unit: gimli::UnitRef<Reader>, entry: &gimli::DebuggingInformationEntry<Reader>, depth: u8) -> Option<Arc<str>> {
    for attr in [gimli::DW_AT_linkage_name, gimli::DW_AT_MIPS_linkage_name, gimli::DW_AT_name] {
        if let Ok(Some(value)) = entry.attr_value(attr) {
            if let Ok(name) = unit.attr_string(value) {
                return Some(Arc::from(&*gimli::Reader::to_string_lossy(&name).ok()?));
            }
        }
    }
    for attr in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
        match entry.attr_value(attr) {
            Ok(Some(gimli::AttributeValue::UnitRef(offset))) => {
                let origin = unit.entry(offset).ok()?;
                return entry_name(unit, &origin, depth.checked_sub(1)?);
            }
            // An origin in another unit (LTO, dwz-style debug files).
            Ok(Some(gimli::AttributeValue::DebugInfoRef(offset))) => {
                if let Some(local) = offset.to_unit_offset(&unit.header) {
                    let origin = unit.entry(local).ok()?;
                    return entry_name(unit, &origin, depth.checked_sub(1)?);
                }
                let mut headers = unit.dwarf.debug_info.units();
                while let Ok(Some(header)) = headers.next() {
                    if let Some(local) = offset.to_unit_offset(&header) {
                        let other = unit.dwarf.unit(header).ok()?;
                        let other = gimli::UnitRef::new(unit.dwarf, &other);
                        let origin = other.entry(local).ok()?;
                        return entry_name(other, &origin, depth.checked_sub(1)?);
                    }
                }
                return None;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian 12's ld.so (libc6-dbg): `dl_main_state_init` inlined into
    /// `dl_main` with `audit_list_init` inlined into it, ranges as
    /// `llvm-dwarfdump` lists them. LLDB 22's `image lookup -v` shows the
    /// outer block's ranges as
    /// `[1bfc1-1bfc5)[1bfc8-1bfc8)[1bff6-1c021)[1bfc8-1bfc8)[1c00e-1c015)`
    /// and finds no inlined function at 0x1c001 (`dl_main + 65`), 0x1c015
    /// or 0x1c020, but `audit_list_init` at 0x1bff6 and 0x1c010.
    #[test]
    fn blocks_are_built_and_searched_as_lldb_does() {
        let node = |id, parent: Option<usize>, dwarf: Vec<(u64, u64)>, inlined: Option<&str>| BlockNode {
            id,
            parent,
            children: Vec::new(),
            dwarf_ranges: dwarf,
            ranges: Vec::new(),
            inlined: inlined.map(Arc::from),
        };
        let mut blocks = FunctionBlocks { nodes: vec![node(0, None, vec![(0x1bfc0, 0x1fc3a)], None)] };
        blocks.nodes[0].ranges = vec![(0x1bfc0, 0x1fc3a)];
        let state = vec![(0x1bfc1, 0x1bfc5), (0x1bfc8, 0x1bfc8), (0x1bff6, 0x1c021)];
        let audit = vec![(0x1bfc1, 0x1bfc5), (0x1bfc8, 0x1bfc8), (0x1bff6, 0x1c001), (0x1c00e, 0x1c015)];
        for (parent, dwarf, name) in [(0, state, "dl_main_state_init"), (1, audit, "audit_list_init")] {
            let index = blocks.nodes.len();
            blocks.nodes.push(node(index as u64, Some(parent), dwarf.clone(), Some(name)));
            blocks.nodes[parent].children.push(index);
            for range in dwarf {
                blocks.add_range(index, range);
            }
            blocks.finalize(index);
        }
        assert_eq!(blocks.nodes[1].ranges, [(0x1bfc1, 0x1bfc5), (0x1bfc8, 0x1bfc8), (0x1bff6, 0x1c021), (0x1bfc8, 0x1bfc8), (0x1c00e, 0x1c015)]);
        assert_eq!(blocks.nodes[2].ranges, [(0x1bfc1, 0x1bfc5), (0x1bfc8, 0x1bfc8), (0x1bff6, 0x1c001), (0x1c00e, 0x1c015)]);
        let shown = |address| blocks.inlined_at(address).filter(|(_, b)| b.range_start.is_some()).map(|(name, b)| (name.to_string(), b.range_start));
        assert_eq!(shown(0x1c001), None);
        assert_eq!(shown(0x1c015), None);
        assert_eq!(shown(0x1c020), None);
        assert_eq!(shown(0x1bff6), Some(("audit_list_init".to_string(), Some(0x1bff6))));
        assert_eq!(shown(0x1c010), Some(("audit_list_init".to_string(), Some(0x1c00e))));
        // The deepest block at 0x1c001 is still dl_main_state_init's: its
        // instructions are a scope of their own, without `[inlined]`.
        assert_eq!(blocks.inlined_at(0x1c001).map(|(name, b)| (name.to_string(), b.id)), Some(("dl_main_state_init".to_string(), 1)));
    }
}
