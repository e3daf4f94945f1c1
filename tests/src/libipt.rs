//! Safe wrapper over the C shim around libipt's packet decoder.

use std::ffi::{c_char, c_int, CStr};

#[repr(C)]
struct ShimPacket {
    name: *const c_char,
    a: u64,
    b: u64,
    c: u64,
    size: c_int,
}

#[repr(C)]
struct RawDecoder {
    _private: [u8; 0],
}

/// A code section backed by a file, as libipt's `pt_image_add_file` takes it.
#[repr(C)]
struct RawFileSection {
    path: *const c_char,
    offset: u64,
    size: u64,
    vaddr: u64,
}

extern "C" {
    fn shim_insn_ips(
        trace: *const u8,
        len: usize,
        sections: *const RawFileSection,
        count: usize,
        family: u32,
        model: u32,
        out: *mut u64,
        cap: usize,
        errors: *mut u64,
    ) -> i64;
    fn shim_flow_last_error_name(offset: *mut u64) -> *const c_char;
    fn shim_blk_count(
        trace: *const u8,
        len: usize,
        sections: *const RawFileSection,
        count: usize,
        family: u32,
        model: u32,
        errors: *mut u64,
    ) -> i64;
    fn shim_insn_items(
        trace: *const u8,
        len: usize,
        sections: *const RawFileSection,
        count: usize,
        family: u32,
        model: u32,
        out: *mut u64,
        cap: usize,
    ) -> i64;
    fn shim_blk_items(
        trace: *const u8,
        len: usize,
        sections: *const RawFileSection,
        count: usize,
        family: u32,
        model: u32,
        out: *mut u64,
        cap: usize,
    ) -> i64;
    fn shim_new(buf: *const u8, len: usize) -> *mut RawDecoder;
    fn shim_free(decoder: *mut RawDecoder);
    fn shim_sync_forward(decoder: *mut RawDecoder) -> c_int;
    fn shim_sync_backward(decoder: *mut RawDecoder) -> c_int;
    fn shim_sync_set(decoder: *mut RawDecoder, offset: u64) -> c_int;
    fn shim_offset(decoder: *mut RawDecoder, offset: *mut u64) -> c_int;
    fn shim_error_name(status: c_int) -> *const c_char;
    fn shim_next(decoder: *mut RawDecoder, out: *mut ShimPacket) -> c_int;
    fn shim_count_packets(buf: *const u8, len: usize, errors: *mut u64) -> u64;
}

/// A packet as libipt decoded it, flattened: name (ptdump's) and up to three
/// payload fields (see `c/libipt_shim.c` for which field is which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatPacket {
    /// ptdump's packet name.
    pub name: &'static str,
    /// Payload fields.
    pub fields: [u64; 3],
    /// Size in bytes.
    pub size: usize,
}

/// libipt's packet decoder over a borrowed buffer.
#[derive(Debug)]
pub struct LibiptPacketDecoder<'a> {
    raw: *mut RawDecoder,
    _data: &'a [u8],
}

fn error_name(status: c_int) -> &'static str {
    // SAFETY: the shim returns static strings.
    unsafe { CStr::from_ptr(shim_error_name(status)) }.to_str().unwrap_or("?")
}

impl<'a> LibiptPacketDecoder<'a> {
    /// A decoder over `data` (not yet synchronised).
    pub fn new(data: &'a [u8]) -> Self {
        // SAFETY: the decoder keeps pointers into `data`, which outlives it.
        let raw = unsafe { shim_new(data.as_ptr(), data.len()) };
        assert!(!raw.is_null(), "pt_pkt_alloc_decoder failed");
        LibiptPacketDecoder { raw, _data: data }
    }

    fn status(status: c_int) -> Result<(), &'static str> {
        if status < 0 {
            Err(error_name(status))
        } else {
            Ok(())
        }
    }

    /// `pt_pkt_sync_forward`; returns the new offset.
    pub fn sync_forward(&mut self) -> Result<u64, &'static str> {
        Self::status(unsafe { shim_sync_forward(self.raw) })?;
        self.offset()
    }

    /// `pt_pkt_sync_backward`; returns the new offset.
    pub fn sync_backward(&mut self) -> Result<u64, &'static str> {
        Self::status(unsafe { shim_sync_backward(self.raw) })?;
        self.offset()
    }

    /// `pt_pkt_sync_set`.
    pub fn sync_set(&mut self, offset: u64) -> Result<(), &'static str> {
        Self::status(unsafe { shim_sync_set(self.raw, offset) })
    }

    /// `pt_pkt_get_offset`.
    pub fn offset(&mut self) -> Result<u64, &'static str> {
        let mut offset = 0;
        Self::status(unsafe { shim_offset(self.raw, &mut offset) })?;
        Ok(offset)
    }

    /// `pt_pkt_next`: the next packet, or libipt's error name
    /// (`eos`, `bad_opc`, `bad_packet`, …).
    pub fn next_packet(&mut self) -> Result<FlatPacket, &'static str> {
        let mut out = ShimPacket { name: std::ptr::null(), a: 0, b: 0, c: 0, size: 0 };
        let status = unsafe { shim_next(self.raw, &mut out) };
        Self::status(status)?;
        // SAFETY: names are static strings in the shim.
        let name = unsafe { CStr::from_ptr(out.name) }.to_str().unwrap_or("?");
        Ok(FlatPacket { name, fields: [out.a, out.b, out.c], size: out.size as usize })
    }
}

impl Drop for LibiptPacketDecoder<'_> {
    fn drop(&mut self) {
        unsafe { shim_free(self.raw) }
    }
}

/// libipt's packet loop over a whole buffer (sync forward, `pt_pkt_next`
/// until the end, resynchronising after errors), all in C. Returns
/// `(packets, errors)`.
pub fn count_packets(data: &[u8]) -> (u64, u64) {
    let mut errors = 0;
    let packets = unsafe { shim_count_packets(data.as_ptr(), data.len(), &mut errors) };
    (packets, errors)
}

/// A file-backed code section for libipt's image.
#[derive(Debug, Clone)]
pub struct FileSection {
    /// The file.
    pub path: std::path::PathBuf,
    /// Offset of the section in the file.
    pub offset: u64,
    /// Its size.
    pub size: u64,
    /// Where it is mapped.
    pub vaddr: u64,
}

fn raw_sections(sections: &[FileSection]) -> (Vec<std::ffi::CString>, Vec<RawFileSection>) {
    use std::os::unix::ffi::OsStrExt;
    let paths: Vec<std::ffi::CString> =
        sections.iter().map(|s| std::ffi::CString::new(s.path.as_os_str().as_bytes()).unwrap()).collect();
    let raw = sections
        .iter()
        .zip(&paths)
        .map(|(s, p)| RawFileSection { path: p.as_ptr(), offset: s.offset, size: s.size, vaddr: s.vaddr })
        .collect();
    (paths, raw)
}

/// Calls a shim function that writes up to `cap` items of `width` u64 each
/// and returns how many there were (negative: setup failed), with a buffer
/// grown until everything fits; the items, flat.
fn collect_items(width: usize, mut cap: usize, mut call: impl FnMut(*mut u64, usize) -> i64) -> Vec<u64> {
    loop {
        let mut out = vec![0u64; cap * width];
        let n = call(out.as_mut_ptr(), cap);
        assert!(n >= 0, "libipt setup failed ({n})");
        if (n as usize) <= cap {
            out.truncate(n as usize * width);
            return out;
        }
        cap = n as usize;
    }
}

/// libipt's instruction decoder (what LLDB runs): every instruction address,
/// and the number of decode errors. `cpu` = (family, model) for errata.
pub fn insn_addresses(trace: &[u8], sections: &[FileSection], cpu: (u32, u32)) -> (Vec<u64>, u64) {
    let (_paths, raw) = raw_sections(sections);
    let mut errors = 0;
    let ips = collect_items(1, trace.len() * 16 + 1024, |out, cap| unsafe {
        shim_insn_ips(trace.as_ptr(), trace.len(), raw.as_ptr(), raw.len(), cpu.0, cpu.1, out, cap, &mut errors)
    });
    (ips, errors)
}

/// What libipt's instruction decoder reported, driven as LLDB 22 drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsnItem {
    /// An instruction.
    Instruction(u64),
    /// An error (libipt error code, positive) at the instruction at `ip`
    /// (`None`: an event failed); decoding resumed at the next PSB.
    Error {
        /// libipt's error code, positive.
        code: i32,
        /// The instruction it was at (`None`: an event failed).
        ip: Option<u64>,
    },
}

/// libipt's instruction decoder over the whole of `trace`, as LLDB drives it
/// (see `shim_insn_items`); it stops where synchronisation fails.
pub fn insn_items(trace: &[u8], sections: &[FileSection], cpu: (u32, u32)) -> Vec<InsnItem> {
    let (_paths, raw) = raw_sections(sections);
    let items = collect_items(2, trace.len() * 16 + 1024, |out, cap| unsafe {
        shim_insn_items(trace.as_ptr(), trace.len(), raw.as_ptr(), raw.len(), cpu.0, cpu.1, out, cap)
    });
    items
        .chunks_exact(2)
        .map(|q| match q[1] as i64 {
            0 => InsnItem::Instruction(q[0]),
            status => InsnItem::Error { code: -status as i32, ip: (q[0] != 0).then_some(q[0]) },
        })
        .collect()
}

/// What libipt's block decoder reported, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockItem {
    /// `ninsn` sequential instructions from `ip` to `end_ip`, decoded in
    /// `bits`-bit mode (0: unknown).
    Block {
        /// First instruction.
        ip: u64,
        /// Last instruction.
        end_ip: u64,
        /// How many instructions.
        ninsn: u64,
        /// Execution mode in bits (0: unknown).
        bits: u32,
    },
    /// A decode error (libipt error code, positive) at a trace offset;
    /// decoding resumed at the next PSB.
    Error {
        /// libipt's error code, positive.
        code: i32,
        /// Where in the trace.
        offset: u64,
    },
    /// An overflow event; `None`: it resolved with tracing disabled.
    Overflow {
        /// Where tracing resumed (`None`: disabled).
        resume_ip: Option<u64>,
    },
}

/// libipt's block decoder over `trace`, item by item.
pub fn block_items(trace: &[u8], sections: &[FileSection], cpu: (u32, u32)) -> Vec<BlockItem> {
    let (_paths, raw) = raw_sections(sections);
    let items = collect_items(4, trace.len() + 1024, |out, cap| unsafe {
        shim_blk_items(trace.as_ptr(), trace.len(), raw.as_ptr(), raw.len(), cpu.0, cpu.1, out, cap)
    });
    items
        .chunks_exact(4)
        .map(|q| match q[0] {
            1 => BlockItem::Block { ip: q[1], end_ip: q[2], ninsn: q[3] & 0xffff_ffff, bits: [0, 16, 32, 64][(q[3] >> 32) as usize & 3] },
            2 => BlockItem::Error { code: q[1] as i32, offset: q[2] },
            3 => BlockItem::Overflow { resume_ip: (q[1] != 0).then_some(q[1]) },
            tag => panic!("shim item tag {tag}"),
        })
        .collect()
}

/// libipt's block decoder: `(instructions, errors)`.
pub fn block_count(trace: &[u8], sections: &[FileSection], cpu: (u32, u32)) -> (u64, u64) {
    let (_paths, raw) = raw_sections(sections);
    let mut errors = 0;
    let n = unsafe { shim_blk_count(trace.as_ptr(), trace.len(), raw.as_ptr(), raw.len(), cpu.0, cpu.1, &mut errors) };
    assert!(n >= 0, "libipt setup failed ({n})");
    (n as u64, errors)
}

/// libipt's instruction decoder over the whole trace, counting only:
/// (instructions, decode errors).
pub fn insn_count(trace: &[u8], sections: &[FileSection], cpu: (u32, u32)) -> (u64, u64) {
    let (_paths, raw) = raw_sections(sections);
    let mut errors = 0;
    let n = unsafe { shim_insn_ips(trace.as_ptr(), trace.len(), raw.as_ptr(), raw.len(), cpu.0, cpu.1, std::ptr::null_mut(), 0, &mut errors) };
    assert!(n >= 0, "libipt setup failed ({n})");
    (n as u64, errors)
}

/// The last error libipt's instruction decoder met in [`insn_addresses`]
/// (libipt's message) and the trace offset it was at.
pub fn last_flow_error() -> (String, u64) {
    let mut offset = 0;
    // SAFETY: returns a static string.
    let name = unsafe { CStr::from_ptr(shim_flow_last_error_name(&mut offset)) };
    (name.to_string_lossy().into_owned(), offset)
}
