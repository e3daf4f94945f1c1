//! What the dynamic linker has loaded, as debuggers ask for it:
//! `qXfer:libraries-svr4:read` (the `r_debug` link map, GDB's and LLDB's
//! preferred source) and LLDB's `qMemoryRegionInfo` (one `/proc/PID/maps`
//! region, or the unmapped gap around an address).
//!
//! The link map is found the way the dynamic linker publishes it: auxv
//! `AT_PHDR`/`AT_PHNUM` give the executable's program headers, `PT_PHDR`
//! gives the load bias, `PT_DYNAMIC` the dynamic section, whose `DT_DEBUG`
//! entry the dynamic linker fills with the address of `struct r_debug`.
//! Before the dynamic linker has run (at the first instruction) `DT_DEBUG` is
//! still 0 and there is no list yet — reported as an error, as lldb-server
//! does, so the client falls back to its rendezvous breakpoint.

use std::fmt::Write as _;


use libc::{AT_PHDR, AT_PHNUM};
use object::elf::{PT_DYNAMIC, PT_PHDR};

const DT_NULL: u64 = object::elf::DT_NULL as u64;
const DT_DEBUG: u64 = object::elf::DT_DEBUG as u64;
/// Link-map entries walked before giving up (a corrupt or cyclic list).
const MAX_LINK_MAP_ENTRIES: usize = 4096;
const MAX_NAME: usize = 4096;

/// Why there is no library list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibraryListError {
    /// The auxiliary vector does not say where the program headers are.
    #[error("auxv has no AT_PHDR/AT_PHNUM")]
    NoProgramHeaders,
    /// A statically linked program: no dynamic linker, no list.
    #[error("the executable has no PT_DYNAMIC (statically linked)")]
    NotDynamic,
    /// Memory the walk needed could not be read (at this address).
    #[error("cannot read process memory at {0:#x}")]
    Unreadable(u64),
    /// The dynamic linker's rendezvous is not there (yet).
    #[error("Invalid r_debug address")]
    NoRendezvous,
}

/// Reads the inferior's memory: fills `buf` from `address`, `false` if not
/// all of it could be read.
pub trait ReadMemory {
    /// Fills `buf` from `address`; `false` if not all of it could be read.
    fn read(&self, address: u64, buf: &mut [u8]) -> bool;

    /// The little-endian `u64` at `address`.
    fn read_u64(&self, address: u64) -> Result<u64, LibraryListError> {
        let mut bytes = [0u8; 8];
        if self.read(address, &mut bytes) {
            Ok(u64::from_le_bytes(bytes))
        } else {
            Err(LibraryListError::Unreadable(address))
        }
    }

    /// The little-endian `u32` at `address`.
    fn read_u32(&self, address: u64) -> Result<u32, LibraryListError> {
        let mut bytes = [0u8; 4];
        if self.read(address, &mut bytes) {
            Ok(u32::from_le_bytes(bytes))
        } else {
            Err(LibraryListError::Unreadable(address))
        }
    }

    /// A NUL-terminated string of at most [`MAX_NAME`] bytes.
    fn read_c_string(&self, address: u64) -> Result<Vec<u8>, LibraryListError> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 64];
        while out.len() < MAX_NAME {
            let at = address + out.len() as u64;
            // A chunk may cross into an unmapped page: fall back to bytes.
            if self.read(at, &mut chunk) {
                match chunk.iter().position(|&b| b == 0) {
                    Some(end) => {
                        out.extend_from_slice(&chunk[..end]);
                        return Ok(out);
                    }
                    None => out.extend_from_slice(&chunk),
                }
            } else {
                let mut byte = [0u8];
                if !self.read(at, &mut byte) {
                    return Err(LibraryListError::Unreadable(at));
                }
                if byte[0] == 0 {
                    return Ok(out);
                }
                out.push(byte[0]);
            }
        }
        Ok(out)
    }
}

/// A live process's memory.
#[derive(Debug)]
pub struct ProcessMemory(pub nix::unistd::Pid);

impl ReadMemory for ProcessMemory {
    fn read(&self, address: u64, buf: &mut [u8]) -> bool {
        retrace_collector::process::read_memory(self.0, address, buf) == buf.len()
    }
}

fn auxv_value(auxv: &[u8], key: u64) -> Option<u64> {
    auxv.chunks_exact(16).map(|pair| {
        let k = u64::from_le_bytes(pair[..8].try_into().unwrap());
        let v = u64::from_le_bytes(pair[8..].try_into().unwrap());
        (k, v)
    }).find(|&(k, _)| k == key).map(|(_, v)| v)
}

/// The address of `struct r_debug`, from auxv and the executable's dynamic
/// section in memory.
pub fn rendezvous_address(auxv: &[u8], memory: &impl ReadMemory) -> Result<u64, LibraryListError> {
    let phdr = auxv_value(auxv, AT_PHDR).ok_or(LibraryListError::NoProgramHeaders)?;
    let phnum = auxv_value(auxv, AT_PHNUM).ok_or(LibraryListError::NoProgramHeaders)?;
    let mut bias = None;
    let mut dynamic_vaddr = None;
    for i in 0..phnum.min(256) {
        let header = phdr + i * 56; // sizeof(Elf64_Phdr)
        let p_type = memory.read_u32(header)?;
        let p_vaddr = memory.read_u64(header + 16)?;
        match p_type {
            PT_PHDR => bias = Some(phdr.wrapping_sub(p_vaddr)),
            PT_DYNAMIC => dynamic_vaddr = Some(p_vaddr),
            _ => {}
        }
    }
    let dynamic_vaddr = dynamic_vaddr.ok_or(LibraryListError::NotDynamic)?;
    // Without PT_PHDR the headers follow the ELF header at the image start.
    let bias = bias.unwrap_or_else(|| phdr.wrapping_sub(64) & !0xfff);
    let mut entry = bias.wrapping_add(dynamic_vaddr);
    for _ in 0..4096 {
        let tag = memory.read_u64(entry)?;
        match tag {
            DT_NULL => break,
            DT_DEBUG => {
                return match memory.read_u64(entry + 8)? {
                    0 => Err(LibraryListError::NoRendezvous),
                    address => Ok(address),
                };
            }
            _ => entry += 16,
        }
    }
    Err(LibraryListError::NoRendezvous)
}

/// One `struct link_map` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMapEntry {
    /// Address of the entry itself (`lm`).
    pub link_map: u64,
    /// Load bias (`l_addr`).
    pub base: u64,
    /// The dynamic section (`l_ld`).
    pub dynamic: u64,
    /// The path (`l_name`); empty for the main program.
    pub name: Vec<u8>,
}

/// The link map published at `r_debug`, in list order.
pub fn link_map(r_debug: u64, memory: &impl ReadMemory) -> Result<Vec<LinkMapEntry>, LibraryListError> {
    // struct r_debug { int r_version; struct link_map *r_map; ElfW(Addr) r_brk; ... }
    let mut next = memory.read_u64(r_debug + 8)?;
    let mut entries = Vec::new();
    while next != 0 && entries.len() < MAX_LINK_MAP_ENTRIES {
        // struct link_map { l_addr; char *l_name; l_ld; l_next; l_prev; }
        let base = memory.read_u64(next)?;
        let name_address = memory.read_u64(next + 8)?;
        let dynamic = memory.read_u64(next + 16)?;
        let following = memory.read_u64(next + 24)?;
        let name = if name_address == 0 { Vec::new() } else { memory.read_c_string(name_address)? };
        entries.push(LinkMapEntry { link_map: next, base, dynamic, name });
        next = following;
        if entries.iter().any(|e| e.link_map == next) {
            break; // a cycle
        }
    }
    Ok(entries)
}

fn escape_xml(text: &[u8], out: &mut String) {
    for c in String::from_utf8_lossy(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

/// GDB's `library-list-svr4` document: every entry but the main program,
/// all in the default namespace (`lmid`, which GDB 13 requires).
///
/// No `main-lm` attribute (lldb-server sends none either): LLDB 22 takes
/// `main-lm` for the address of a pointer to `r_debug`, reads the main
/// program's `l_addr` there, and then never sees a library load.
pub fn library_list_xml(entries: &[LinkMapEntry]) -> String {
    let mut xml = String::from("<library-list-svr4 version=\"1.0\">");
    // The main program is the first entry, with an empty name.
    for entry in entries.iter().filter(|e| !e.name.is_empty()) {
        xml.push_str("<library name=\"");
        escape_xml(&entry.name, &mut xml);
        let _ = write!(xml, "\" lm=\"{:#x}\" l_addr=\"{:#x}\" l_ld=\"{:#x}\" lmid=\"0x0\"/>", entry.link_map, entry.base, entry.dynamic);
    }
    xml.push_str("</library-list-svr4>");
    xml
}

/// The `library-list-svr4` document of a process, given its auxv.
pub fn library_list(auxv: &[u8], memory: &impl ReadMemory) -> Result<String, LibraryListError> {
    let r_debug = rendezvous_address(auxv, memory)?;
    Ok(library_list_xml(&link_map(r_debug, memory)?))
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Sparse little-endian memory.
    #[derive(Default)]
    struct FakeMemory(BTreeMap<u64, u8>);

    impl FakeMemory {
        fn put(&mut self, address: u64, bytes: &[u8]) {
            for (i, &b) in bytes.iter().enumerate() {
                self.0.insert(address + i as u64, b);
            }
        }
        fn put_u64(&mut self, address: u64, value: u64) {
            self.put(address, &value.to_le_bytes());
        }
    }

    impl ReadMemory for FakeMemory {
        fn read(&self, address: u64, buf: &mut [u8]) -> bool {
            for (i, b) in buf.iter_mut().enumerate() {
                match self.0.get(&(address + i as u64)) {
                    Some(v) => *b = *v,
                    None => return false,
                }
            }
            true
        }
    }

    fn auxv(pairs: &[(u64, u64)]) -> Vec<u8> {
        pairs.iter().flat_map(|(k, v)| k.to_le_bytes().into_iter().chain(v.to_le_bytes())).collect()
    }

    /// A PIE loaded at 0x5555_5555_4000: PT_PHDR at vaddr 0x40, PT_DYNAMIC at
    /// 0x2de0 whose second entry is DT_DEBUG.
    fn process(debug: u64) -> (Vec<u8>, FakeMemory) {
        let base = 0x5555_5555_4000u64;
        let mut mem = FakeMemory::default();
        let phdr = base + 0x40;
        let header = |mem: &mut FakeMemory, i: u64, p_type: u32, vaddr: u64| {
            let at = phdr + i * 56;
            mem.put(at, &[0; 56]);
            mem.put(at, &p_type.to_le_bytes());
            mem.put_u64(at + 16, vaddr);
        };
        header(&mut mem, 0, PT_PHDR, 0x40);
        header(&mut mem, 1, 1, 0); // PT_LOAD
        header(&mut mem, 2, PT_DYNAMIC, 0x2de0);
        let dynamic = base + 0x2de0;
        mem.put_u64(dynamic, 1); // DT_NEEDED
        mem.put_u64(dynamic + 8, 0x10);
        mem.put_u64(dynamic + 16, DT_DEBUG);
        mem.put_u64(dynamic + 24, debug);
        mem.put_u64(dynamic + 32, DT_NULL);
        mem.put_u64(dynamic + 40, 0);
        (auxv(&[(AT_PHDR, phdr), (AT_PHNUM, 3), (0, 0)]), mem)
    }

    #[test]
    fn before_the_dynamic_linker_ran_there_is_no_list() {
        let (auxv, mem) = process(0);
        assert_eq!(library_list(&auxv, &mem), Err(LibraryListError::NoRendezvous));
    }

    #[test]
    fn the_link_map_becomes_gdbs_document_without_the_main_program() {
        let r_debug = 0x7fff_f7ffe118u64;
        let (auxv, mut mem) = process(r_debug);
        let entries = [(0x7fff_f7ffe2e0u64, 0x5555_5555_4000u64, 0x5555_5555_6de0u64, &b""[..]),
            (0x7fff_f7fc04b0, 0x7fff_f7fbb000, 0x7fff_f7fbee70, b"/tmp/lib\"x\".so"),
            (0x7fff_f7ffdad0, 0x7fff_f7fca000, 0x7fff_f7ffce40, b"/lib64/ld-linux-x86-64.so.2")];
        mem.put_u64(r_debug, 1);
        mem.put_u64(r_debug + 8, entries[0].0);
        for (i, &(lm, base, ld, name)) in entries.iter().enumerate() {
            let name_at = 0x6000_0000 + i as u64 * 0x100;
            mem.put(name_at, name);
            mem.put(name_at + name.len() as u64, &[0]);
            mem.put_u64(lm, base);
            mem.put_u64(lm + 8, name_at);
            mem.put_u64(lm + 16, ld);
            mem.put_u64(lm + 24, entries.get(i + 1).map_or(0, |e| e.0));
            mem.put_u64(lm + 32, 0);
        }
        assert_eq!(
            library_list(&auxv, &mem).unwrap(),
            "<library-list-svr4 version=\"1.0\">\
             <library name=\"/tmp/lib&quot;x&quot;.so\" lm=\"0x7ffff7fc04b0\" l_addr=\"0x7ffff7fbb000\" l_ld=\"0x7ffff7fbee70\" lmid=\"0x0\"/>\
             <library name=\"/lib64/ld-linux-x86-64.so.2\" lm=\"0x7ffff7ffdad0\" l_addr=\"0x7ffff7fca000\" l_ld=\"0x7ffff7ffce40\" lmid=\"0x0\"/>\
             </library-list-svr4>"
        );
    }

    #[test]
    fn a_cyclic_link_map_ends() {
        let r_debug = 0x1000u64;
        let (auxv, mut mem) = process(r_debug);
        mem.put_u64(r_debug + 8, 0x2000);
        mem.put_u64(0x2000, 0);
        mem.put_u64(0x2008, 0);
        mem.put_u64(0x2010, 0);
        mem.put_u64(0x2018, 0x2000); // l_next points at itself
        assert_eq!(link_map(r_debug, &mem).unwrap().len(), 1);
        let _ = auxv;
    }

    #[test]
    fn an_unreadable_link_map_is_an_error_with_its_address() {
        let (auxv, mut mem) = process(0x1000);
        mem.put_u64(0x1008, 0xdead_0000);
        assert_eq!(library_list(&auxv, &mem), Err(LibraryListError::Unreadable(0xdead_0000)));
    }
}
