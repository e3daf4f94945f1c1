//! The traced address space: code bytes by address, from ELF modules placed at
//! their load addresses and from raw memory sections. The decoder reads
//! instructions through [`Memory`].

use std::sync::Arc;

use object::{Object, ObjectSegment};

/// Read access to the traced program's code.
pub trait Memory {
    /// Copies up to `buf.len()` bytes at `address` into `buf`; returns how many
    /// were available (0 when nothing is mapped there).
    fn read(&self, address: u64, buf: &mut [u8]) -> usize;
}

/// One contiguous range of known bytes.
#[derive(Debug, Clone)]
pub struct Section {
    /// First address.
    pub start: u64,
    /// The bytes (shared: several sections may slice one file).
    pub bytes: Arc<[u8]>,
    /// Offset of `start` within `bytes`.
    pub offset: usize,
    /// Length of the section.
    pub len: usize,
    /// The module (or other source) it came from.
    pub name: Arc<str>,
}

impl Section {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.len as u64)
    }
}

/// Why an image could not be added.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file is not an ELF object we can read.
    #[error("{name}: not a readable ELF file: {reason}")]
    BadElf {
        /// The module.
        name: String,
        /// What the parser said.
        reason: String,
    },
}

/// A set of sections, searchable by address.
#[derive(Debug, Clone, Default)]
pub struct Image {
    sections: Vec<Section>,
}

impl Image {
    /// An empty image.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds raw bytes at `start`.
    pub fn add_raw(&mut self, name: &str, start: u64, bytes: Vec<u8>) {
        let len = bytes.len();
        self.insert(Section { start, bytes: bytes.into(), offset: 0, len, name: name.into() });
    }

    /// Adds the loadable segments of an ELF file whose lowest segment is
    /// loaded at `load_address` (LLDB's `loadAddress` semantics).
    pub fn add_elf(&mut self, name: &str, file: Vec<u8>, load_address: u64) -> Result<(), ImageError> {
        self.add_shared_elf(name, file.into(), load_address)
    }

    /// [`Image::add_elf`] of bytes held elsewhere too (one file's bytes
    /// shared by every image that maps it).
    pub fn add_shared_elf(&mut self, name: &str, bytes: Arc<[u8]>, load_address: u64) -> Result<(), ImageError> {
        let bad = |reason: String| ImageError::BadElf { name: name.to_string(), reason };
        let object = object::File::parse(&*bytes).map_err(|e| bad(e.to_string()))?;
        let segments: Vec<_> = object.segments().collect();
        let lowest = segments.iter().map(|s| s.address()).min().ok_or_else(|| bad("no loadable segments".into()))?;
        let slide = load_address.wrapping_sub(lowest & !0xfff);
        let mut new = Vec::new();
        for segment in &segments {
            let (offset, size) = segment.file_range();
            if size == 0 || offset.checked_add(size).is_none_or(|end| end > bytes.len() as u64) {
                continue;
            }
            new.push(Section {
                start: segment.address().wrapping_add(slide),
                bytes: bytes.clone(),
                offset: offset as usize,
                len: size as usize,
                name: name.into(),
            });
        }
        for section in new {
            self.insert(section);
        }
        Ok(())
    }

    fn insert(&mut self, section: Section) {
        let at = self.sections.partition_point(|s| s.start < section.start);
        self.sections.insert(at, section);
    }

    /// The section holding `address`.
    pub fn section_at(&self, address: u64) -> Option<&Section> {
        let index = self.sections.partition_point(|s| s.start <= address).checked_sub(1)?;
        let section = &self.sections[index];
        (address < section.end()).then_some(section)
    }

    /// All sections, by address.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }
}

impl Memory for Image {
    fn read(&self, address: u64, buf: &mut [u8]) -> usize {
        let Some(section) = self.section_at(address) else { return 0 };
        let within = (address - section.start) as usize;
        let n = buf.len().min(section.len - within);
        buf[..n].copy_from_slice(&section.bytes[section.offset + within..section.offset + within + n]);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_sections_are_found_by_address() {
        let mut image = Image::new();
        image.add_raw("b", 0x2000, vec![4, 5, 6]);
        image.add_raw("a", 0x1000, vec![1, 2, 3]);
        let mut buf = [0u8; 8];
        assert_eq!(image.read(0x1001, &mut buf), 2);
        assert_eq!(&buf[..2], &[2, 3]);
        assert_eq!(image.read(0x2000, &mut buf), 3);
        assert_eq!(image.read(0x1003, &mut buf), 0);
        assert_eq!(image.read(0xfff, &mut buf), 0);
        assert_eq!(&*image.section_at(0x2002).unwrap().name, "b");
    }

    #[test]
    fn garbage_is_not_an_elf() {
        let error = Image::new().add_elf("junk", vec![1, 2, 3, 4], 0x1000).unwrap_err();
        assert!(error.to_string().starts_with("junk: not a readable ELF file"));
    }
}
