//! The instrumentation map of an XRay-instrumented object: the
//! `xray_instr_map` section's sleds, and the function ids the runtime gives
//! them (1 + the function's index in sled order).

use object::{Object, ObjectSection};

use super::FunctionId;

/// What a sled instruments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SledKind {
    /// Function entry.
    Entry,
    /// Function exit.
    Exit,
    /// Tail call.
    Tail,
    /// Entry that logs its first argument.
    LogArgsEntry,
    /// `__xray_customevent` call site.
    CustomEvent,
    /// `__xray_typedevent` call site.
    TypedEvent,
    /// A kind this reader does not know.
    Unknown(u8),
}

impl SledKind {
    fn from_byte(byte: u8) -> SledKind {
        match byte {
            0 => SledKind::Entry,
            1 => SledKind::Exit,
            2 => SledKind::Tail,
            3 => SledKind::LogArgsEntry,
            4 => SledKind::CustomEvent,
            5 => SledKind::TypedEvent,
            other => SledKind::Unknown(other),
        }
    }
}

/// One sled (patchable instruction site).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sled {
    /// Address of the sled (file address: as linked).
    pub address: u64,
    /// Entry address of its function.
    pub function: u64,
    /// What it instruments.
    pub kind: SledKind,
    /// Instrumented even below the instruction threshold.
    pub always_instrument: bool,
    /// Entry format version (≥ 2: addresses relative to the entry).
    pub version: u8,
}

/// Why a map could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstrMapError {
    /// Not an object file.
    #[error("not a readable object file: {0}")]
    BadObject(String),
    /// No `xray_instr_map` section.
    #[error("no xray_instr_map section (was it built with -fxray-instrument?)")]
    NoSection,
    /// The section's size is not a whole number of entries.
    #[error("xray_instr_map is {size} bytes, not a multiple of {entry}-byte entries")]
    BadSize {
        /// Section size.
        size: usize,
        /// Entry size.
        entry: usize,
    },
}

/// The sleds of one object and its function ids.
#[derive(Debug, Clone, Default)]
pub struct InstrMap {
    /// Sleds in section order.
    pub sleds: Vec<Sled>,
    /// Function entry addresses by local function id − 1.
    functions: Vec<u64>,
}

impl InstrMap {
    /// Reads the map of an ELF object (executable or shared library).
    pub fn parse(elf: &[u8]) -> Result<InstrMap, InstrMapError> {
        let file = object::File::parse(elf).map_err(|e| InstrMapError::BadObject(e.to_string()))?;
        let section = file.section_by_name("xray_instr_map").ok_or(InstrMapError::NoSection)?;
        let data = section.data().map_err(|e| InstrMapError::BadObject(e.to_string()))?;
        let base = section.address();
        let little = file.is_little_endian();
        let wide = file.is_64();
        let entry = if wide { 32 } else { 16 };
        if data.len() % entry != 0 {
            return Err(InstrMapError::BadSize { size: data.len(), entry });
        }
        // Version 0/1 entries hold absolute addresses; in position-independent
        // files those are R_X86_64_RELATIVE relocations (addend = address).
        let relative: std::collections::HashMap<u64, u64> = file
            .dynamic_relocations()
            .into_iter()
            .flatten()
            .filter(|(_, relocation)| matches!(relocation.flags(), object::RelocationFlags::Elf { r_type: 8 }))
            .map(|(offset, relocation)| (offset, relocation.addend() as u64))
            .collect();
        let read = |bytes: &[u8]| -> u64 {
            let mut word = [0u8; 8];
            let n = bytes.len().min(8);
            if little {
                word[..n].copy_from_slice(&bytes[..n]);
                u64::from_le_bytes(word)
            } else {
                word[8 - n..].copy_from_slice(&bytes[..n]);
                u64::from_be_bytes(word)
            }
        };
        let word = if wide { 8 } else { 4 };
        let mut map = InstrMap::default();
        for (index, raw) in data.chunks_exact(entry).enumerate() {
            let entry_address = base.wrapping_add((index * entry) as u64);
            let flags = &raw[2 * word..];
            let version = flags[2];
            let (mut address, mut function) = (read(&raw[..word]), read(&raw[word..2 * word]));
            if !wide && version >= 2 {
                // Sign-extend 32-bit offsets.
                address = address as u32 as i32 as i64 as u64;
                function = function as u32 as i32 as i64 as u64;
            }
            if version >= 2 {
                address = entry_address.wrapping_add(address);
                function = entry_address.wrapping_add(word as u64).wrapping_add(function);
            } else {
                address = relative.get(&entry_address).copied().filter(|_| address == 0).unwrap_or(address);
                function = relative.get(&entry_address.wrapping_add(word as u64)).copied().filter(|_| function == 0).unwrap_or(function);
            }
            if map.functions.last() != Some(&function) {
                map.functions.push(function);
            }
            map.sleds.push(Sled {
                address,
                function,
                kind: SledKind::from_byte(flags[0]),
                always_instrument: flags[1] != 0,
                version,
            });
        }
        Ok(map)
    }

    /// Entry address of the function with this id (its local part; the
    /// object id is the caller's business).
    pub fn function_address(&self, id: FunctionId) -> Option<u64> {
        let index = (id.local() as usize).checked_sub(1)?;
        self.functions.get(index).copied()
    }

    /// Entry addresses by id: `(id, address)`.
    pub fn functions(&self) -> impl Iterator<Item = (FunctionId, u64)> + '_ {
        self.functions.iter().enumerate().map(|(index, &address)| (FunctionId(index as u32 + 1), address))
    }
}
