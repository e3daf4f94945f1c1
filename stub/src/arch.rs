//! The x86-64 Linux register set as GDB's amd64 Linux target description
//! numbers it: core (0–39), SSE (40–56), `orig_rax` (57), `fs_base`,
//! `gs_base` (58, 59), and AVX's upper halves `ymm0h`–`ymm15h` (60–75),
//! from which GDB and LLDB both make `ymm0`–`ymm15`. Both LLDB 22 and GDB
//! 13 read it from `target.xml`; the vector registers have gdbserver's
//! union types (`$xmm0.v4_int32`, `$ymm0.v8_float`).

use std::num::NonZeroUsize;

use gdbstub::arch::{Arch, RegId, Registers};

/// The architecture marker for gdbstub.
#[derive(Debug)]
pub enum X86_64Linux {}

/// All registers, in GDB's numbering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Regs {
    /// rax rbx rcx rdx rsi rdi rbp rsp r8 … r15 (GDB order).
    pub gpr: [u64; 16],
    /// rip.
    pub rip: u64,
    /// eflags.
    pub eflags: u32,
    /// cs ss ds es fs gs.
    pub segments: [u32; 6],
    /// st0 … st7 (80-bit).
    pub st: [[u8; 10]; 8],
    /// fctrl fstat ftag fiseg fioff foseg fooff fop.
    pub fpu: [u32; 8],
    /// xmm0 … xmm15.
    pub xmm: [u128; 16],
    /// mxcsr.
    pub mxcsr: u32,
    /// orig_rax (the system call number being restarted).
    pub orig_rax: u64,
    /// fs_base.
    pub fs_base: u64,
    /// gs_base.
    pub gs_base: u64,
    /// Bytes 16..32 of ymm0 … ymm15 (AVX).
    pub ymmh: [u128; 16],
    /// Registers whose value is not known (bit `n`: register `n`): sent as
    /// `xx…`, which LLDB and GDB show as unavailable.
    pub unavailable: u128,
}

/// Number of registers.
pub const REGISTER_COUNT: usize = 76;

/// GDB's number of `ymm0h` (`ymm{n}h` is this + n).
pub const FIRST_YMMH: usize = 60;

/// Size in bytes of all registers, as `g` and `G` carry them.
pub fn register_block_size() -> usize {
    (0..REGISTER_COUNT).filter_map(register_size).sum()
}

/// Size in bytes of register `n`.
pub fn register_size(n: usize) -> Option<usize> {
    Some(match n {
        0..=16 => 8,
        17..=23 => 4,
        24..=31 => 10,
        32..=39 => 4,
        40..=55 => 16,
        56 => 4,
        57..=59 => 8,
        60..=75 => 16,
        _ => return None,
    })
}

impl Regs {
    /// Registers of which only the program counter is known (a trace
    /// records control flow only).
    pub fn only_pc(rip: u64) -> Self {
        Regs { rip, unavailable: !(1 << 16), ..Regs::default() }
    }

    /// Whether register `n`'s value is known.
    pub fn is_available(&self, n: usize) -> bool {
        n < REGISTER_COUNT && self.unavailable & (1 << n) == 0
    }

    /// The bytes of register `n`, little-endian.
    pub fn register_bytes(&self, n: usize) -> Option<Vec<u8>> {
        Some(match n {
            0..=15 => self.gpr[n].to_le_bytes().to_vec(),
            16 => self.rip.to_le_bytes().to_vec(),
            17 => self.eflags.to_le_bytes().to_vec(),
            18..=23 => self.segments[n - 18].to_le_bytes().to_vec(),
            24..=31 => self.st[n - 24].to_vec(),
            32..=39 => self.fpu[n - 32].to_le_bytes().to_vec(),
            40..=55 => self.xmm[n - 40].to_le_bytes().to_vec(),
            56 => self.mxcsr.to_le_bytes().to_vec(),
            57 => self.orig_rax.to_le_bytes().to_vec(),
            58 => self.fs_base.to_le_bytes().to_vec(),
            59 => self.gs_base.to_le_bytes().to_vec(),
            60..=75 => self.ymmh[n - FIRST_YMMH].to_le_bytes().to_vec(),
            _ => return None,
        })
    }

    /// Sets register `n` from little-endian bytes of its size.
    pub fn set_register(&mut self, n: usize, bytes: &[u8]) -> Result<(), ()> {
        if register_size(n) != Some(bytes.len()) {
            return Err(());
        }
        let u64_ = || u64::from_le_bytes(bytes.try_into().unwrap());
        let u32_ = || u32::from_le_bytes(bytes.try_into().unwrap());
        match n {
            0..=15 => self.gpr[n] = u64_(),
            16 => self.rip = u64_(),
            17 => self.eflags = u32_(),
            18..=23 => self.segments[n - 18] = u32_(),
            24..=31 => self.st[n - 24].copy_from_slice(bytes),
            32..=39 => self.fpu[n - 32] = u32_(),
            40..=55 => self.xmm[n - 40] = u128::from_le_bytes(bytes.try_into().unwrap()),
            56 => self.mxcsr = u32_(),
            57 => self.orig_rax = u64_(),
            58 => self.fs_base = u64_(),
            59 => self.gs_base = u64_(),
            60..=75 => self.ymmh[n - FIRST_YMMH] = u128::from_le_bytes(bytes.try_into().unwrap()),
            _ => return Err(()),
        }
        Ok(())
    }
}

impl Registers for Regs {
    type ProgramCounter = u64;

    fn pc(&self) -> u64 {
        self.rip
    }

    fn gdb_serialize(&self, mut write_byte: impl FnMut(Option<u8>)) {
        for n in 0..REGISTER_COUNT {
            let known = self.unavailable & (1 << n) == 0;
            for byte in self.register_bytes(n).expect("every register") {
                write_byte(known.then_some(byte));
            }
        }
    }

    fn gdb_deserialize(&mut self, bytes: &[u8]) -> Result<(), ()> {
        let mut at = 0;
        for n in 0..REGISTER_COUNT {
            let size = register_size(n).expect("every register");
            let Some(chunk) = bytes.get(at..at + size) else { break };
            self.set_register(n, chunk)?;
            at += size;
        }
        Ok(())
    }
}

/// A register by GDB number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegNumber(pub usize);

impl RegId for RegNumber {
    fn from_raw_id(id: usize) -> Option<(Self, Option<NonZeroUsize>)> {
        register_size(id).map(|size| (RegNumber(id), NonZeroUsize::new(size)))
    }

    fn to_raw_id(&self) -> Option<usize> {
        Some(self.0)
    }
}

impl Arch for X86_64Linux {
    type Usize = u64;
    type Registers = Regs;
    type BreakpointKind = usize;
    type RegId = RegNumber;

    fn target_description_xml() -> Option<&'static str> {
        Some(TARGET_XML)
    }
}

/// GDB's amd64 Linux description (features core, sse, linux, segments) with
/// every register spelled out, as LLDB needs.
pub const TARGET_XML: &str = r#"<?xml version="1.0"?>
<!DOCTYPE target SYSTEM "gdb-target.dtd">
<target version="1.0">
<architecture>i386:x86-64</architecture>
<osabi>GNU/Linux</osabi>
<feature name="org.gnu.gdb.i386.core">
<flags id="i386_eflags" size="4">
<field name="" start="22" end="31"/>
<field name="CF" start="0" end="0"/>
<field name="" start="1" end="1"/>
<field name="PF" start="2" end="2"/>
<field name="AF" start="4" end="4"/>
<field name="ZF" start="6" end="6"/>
<field name="SF" start="7" end="7"/>
<field name="TF" start="8" end="8"/>
<field name="IF" start="9" end="9"/>
<field name="DF" start="10" end="10"/>
<field name="OF" start="11" end="11"/>
<field name="NT" start="14" end="14"/>
<field name="RF" start="16" end="16"/>
<field name="VM" start="17" end="17"/>
<field name="AC" start="18" end="18"/>
<field name="VIF" start="19" end="19"/>
<field name="VIP" start="20" end="20"/>
<field name="ID" start="21" end="21"/>
</flags>
<reg name="rax" bitsize="64" type="int64" regnum="0"/>
<reg name="rbx" bitsize="64" type="int64"/>
<reg name="rcx" bitsize="64" type="int64"/>
<reg name="rdx" bitsize="64" type="int64"/>
<reg name="rsi" bitsize="64" type="int64"/>
<reg name="rdi" bitsize="64" type="int64"/>
<reg name="rbp" bitsize="64" type="data_ptr"/>
<reg name="rsp" bitsize="64" type="data_ptr"/>
<reg name="r8" bitsize="64" type="int64"/>
<reg name="r9" bitsize="64" type="int64"/>
<reg name="r10" bitsize="64" type="int64"/>
<reg name="r11" bitsize="64" type="int64"/>
<reg name="r12" bitsize="64" type="int64"/>
<reg name="r13" bitsize="64" type="int64"/>
<reg name="r14" bitsize="64" type="int64"/>
<reg name="r15" bitsize="64" type="int64"/>
<reg name="rip" bitsize="64" type="code_ptr"/>
<reg name="eflags" bitsize="32" type="i386_eflags"/>
<reg name="cs" bitsize="32" type="int32"/>
<reg name="ss" bitsize="32" type="int32"/>
<reg name="ds" bitsize="32" type="int32"/>
<reg name="es" bitsize="32" type="int32"/>
<reg name="fs" bitsize="32" type="int32"/>
<reg name="gs" bitsize="32" type="int32"/>
<reg name="st0" bitsize="80" type="i387_ext"/>
<reg name="st1" bitsize="80" type="i387_ext"/>
<reg name="st2" bitsize="80" type="i387_ext"/>
<reg name="st3" bitsize="80" type="i387_ext"/>
<reg name="st4" bitsize="80" type="i387_ext"/>
<reg name="st5" bitsize="80" type="i387_ext"/>
<reg name="st6" bitsize="80" type="i387_ext"/>
<reg name="st7" bitsize="80" type="i387_ext"/>
<reg name="fctrl" bitsize="32" type="int" group="float"/>
<reg name="fstat" bitsize="32" type="int" group="float"/>
<reg name="ftag" bitsize="32" type="int" group="float"/>
<reg name="fiseg" bitsize="32" type="int" group="float"/>
<reg name="fioff" bitsize="32" type="int" group="float"/>
<reg name="foseg" bitsize="32" type="int" group="float"/>
<reg name="fooff" bitsize="32" type="int" group="float"/>
<reg name="fop" bitsize="32" type="int" group="float"/>
</feature>
<feature name="org.gnu.gdb.i386.sse">
<vector id="v8bf16" type="bfloat16" count="8"/>
<vector id="v8h" type="ieee_half" count="8"/>
<vector id="v4f" type="ieee_single" count="4"/>
<vector id="v2d" type="ieee_double" count="2"/>
<vector id="v16i8" type="int8" count="16"/>
<vector id="v8i16" type="int16" count="8"/>
<vector id="v4i32" type="int32" count="4"/>
<vector id="v2i64" type="int64" count="2"/>
<union id="vec128">
<field name="v8_bfloat16" type="v8bf16"/>
<field name="v8_half" type="v8h"/>
<field name="v4_float" type="v4f"/>
<field name="v2_double" type="v2d"/>
<field name="v16_int8" type="v16i8"/>
<field name="v8_int16" type="v8i16"/>
<field name="v4_int32" type="v4i32"/>
<field name="v2_int64" type="v2i64"/>
<field name="uint128" type="uint128"/>
</union>
<reg name="xmm0" bitsize="128" type="vec128" encoding="vector" format="vector-uint8" regnum="40"/>
<reg name="xmm1" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm2" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm3" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm4" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm5" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm6" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm7" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm8" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm9" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm10" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm11" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm12" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm13" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm14" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="xmm15" bitsize="128" type="vec128" encoding="vector" format="vector-uint8"/>
<reg name="mxcsr" bitsize="32" type="int" group="vector"/>
</feature>
<feature name="org.gnu.gdb.i386.linux">
<reg name="orig_rax" bitsize="64" type="int" regnum="57"/>
</feature>
<feature name="org.gnu.gdb.i386.segments">
<reg name="fs_base" bitsize="64" type="int" regnum="58"/>
<reg name="gs_base" bitsize="64" type="int" regnum="59"/>
</feature>
<feature name="org.gnu.gdb.i386.avx">
<reg name="ymm0h" bitsize="128" type="uint128" regnum="60"/>
<reg name="ymm1h" bitsize="128" type="uint128"/>
<reg name="ymm2h" bitsize="128" type="uint128"/>
<reg name="ymm3h" bitsize="128" type="uint128"/>
<reg name="ymm4h" bitsize="128" type="uint128"/>
<reg name="ymm5h" bitsize="128" type="uint128"/>
<reg name="ymm6h" bitsize="128" type="uint128"/>
<reg name="ymm7h" bitsize="128" type="uint128"/>
<reg name="ymm8h" bitsize="128" type="uint128"/>
<reg name="ymm9h" bitsize="128" type="uint128"/>
<reg name="ymm10h" bitsize="128" type="uint128"/>
<reg name="ymm11h" bitsize="128" type="uint128"/>
<reg name="ymm12h" bitsize="128" type="uint128"/>
<reg name="ymm13h" bitsize="128" type="uint128"/>
<reg name="ymm14h" bitsize="128" type="uint128"/>
<reg name="ymm15h" bitsize="128" type="uint128"/>
</feature>
</target>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialisation_round_trips_and_sizes_add_up() {
        let total: usize = (0..REGISTER_COUNT).map(|n| register_size(n).unwrap()).sum();
        assert_eq!(total, 16 * 8 + 8 + 4 + 6 * 4 + 8 * 10 + 8 * 4 + 16 * 16 + 4 + 3 * 8 + 16 * 16);
        let mut regs = Regs::default();
        regs.gpr[7] = 0x7fff_0000;
        regs.rip = 0x401000;
        regs.xmm[3] = 0x1234_5678_9abc_def0_1122_3344_5566_7788;
        regs.fs_base = 0x7fff_f7d8_a740;
        regs.ymmh[15] = 0xfedc_ba98_7654_3210_0f1e_2d3c_4b5a_6978;
        let mut bytes = Vec::new();
        regs.gdb_serialize(|b| bytes.push(b.unwrap()));
        assert_eq!(bytes.len(), total);
        let mut back = Regs::default();
        back.gdb_deserialize(&bytes).unwrap();
        assert_eq!(back, regs);
        assert_eq!(RegNumber::from_raw_id(16).unwrap().1.unwrap().get(), 8);
        assert_eq!(RegNumber::from_raw_id(75).unwrap().1.unwrap().get(), 16);
        assert!(RegNumber::from_raw_id(76).is_none());
    }
}
