//! x86 instruction length and control-flow classification: what a trace
//! encoder or decoder needs to know about one instruction (libipt's `pt_ild`
//! classes: call, return, jump, conditional jump, far transfers, …).
//!
//! Backed by `iced-x86`'s decoder (no OS dependencies). Display (AT&T syntax
//! as LLDB prints it) is a separate concern.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind};

/// Execution mode (from MODE.Exec: CS.L / CS.D).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecMode {
    /// 64-bit code.
    Bits64,
    /// 32-bit code (compatibility or protected mode).
    Bits32,
    /// 16-bit code.
    Bits16,
}

impl ExecMode {
    /// The mode a MODE.Exec packet gives (`None`: the reserved CS.L = CS.D = 1).
    pub fn from_mode_exec(csl: bool, csd: bool) -> Option<ExecMode> {
        match (csl, csd) {
            (true, false) => Some(ExecMode::Bits64),
            (true, true) => None,
            (false, true) => Some(ExecMode::Bits32),
            (false, false) => Some(ExecMode::Bits16),
        }
    }

    fn bitness(self) -> u32 {
        match self {
            ExecMode::Bits64 => 64,
            ExecMode::Bits32 => 32,
            ExecMode::Bits16 => 16,
        }
    }
}

/// How an instruction transfers control, as far as Intel PT cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowKind {
    /// Falls through to the next instruction.
    Other,
    /// Conditional near branch (Jcc, LOOPcc, JrCXZ): one TNT bit.
    CondBranch {
        /// Target when taken.
        target: u64,
    },
    /// Direct near jump: no packet.
    Jump {
        /// Target.
        target: u64,
    },
    /// Direct near call: no packet; pushes the return address.
    Call {
        /// Target.
        target: u64,
    },
    /// Indirect near jump: TIP.
    IndirectJump,
    /// Indirect near call: TIP; pushes the return address.
    IndirectCall,
    /// Near return: compressed (TNT bit) or TIP.
    Return,
    /// SYSCALL / SYSENTER: leaves user mode.
    Syscall,
    /// Other far transfers: far CALL/JMP/RET, INT n, INT3, INTO, IRET, SYSRET, SYSEXIT, …
    FarTransfer,
}

/// One decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InsnInfo {
    /// Length in bytes.
    pub len: u8,
    /// Control-flow kind.
    pub kind: FlowKind,
}

impl InsnInfo {
    /// True for a call whose target is the next instruction (the PIC
    /// `call next; pop reg` idiom): it does not push onto the return-compression
    /// stack (libipt's rule).
    pub fn is_zero_length_call(&self, ip: u64) -> bool {
        matches!(self.kind, FlowKind::Call { target } if target == ip.wrapping_add(self.len as u64))
    }
}

/// Decodes the instruction at `ip` from `bytes` (up to 15 bytes starting at
/// `ip`). `None` when the bytes are not a complete valid instruction.
pub fn classify(bytes: &[u8], ip: u64, mode: ExecMode) -> Option<InsnInfo> {
    let mut decoder = Decoder::with_ip(mode.bitness(), bytes, ip, DecoderOptions::NONE);
    let mut insn = decoder.decode();
    if insn.is_invalid() && mode == ExecMode::Bits64 && bytes.first().is_some_and(|b| LEGACY_ONLY_OPCODES.contains(b)) {
        // libipt's length decoder takes these as their 32-bit selves (LLDB
        // lists `pop %ss` in 64-bit code); so does the flow.
        insn = Decoder::with_ip(32, bytes, ip, DecoderOptions::NONE).decode();
    }
    if insn.is_invalid() {
        // libipt only measures instructions: encodings reserved by the
        // architecture (a LOCK where none may be, FF /7, FE /2…) still have
        // a length, and are not branches.
        insn = Decoder::with_ip(mode.bitness(), bytes, ip, DecoderOptions::NO_INVALID_CHECK).decode();
        if insn.is_invalid() {
            return reserved_group_member(bytes, ip, mode).or_else(|| vex_as_libipt_measures(bytes, ip, mode));
        }
    }
    if insn.is_invalid() {
        return None;
    }
    let far_operand = (0..insn.op_count()).any(|i| matches!(insn.op_kind(i), OpKind::FarBranch16 | OpKind::FarBranch32))
        || matches!(insn.mnemonic(), Mnemonic::Retf | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq)
        || is_far_indirect(insn.code());
    let kind = match insn.flow_control() {
        _ if matches!(insn.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter) => FlowKind::Syscall,
        _ if matches!(insn.mnemonic(), Mnemonic::Sysret | Mnemonic::Sysretq | Mnemonic::Sysexit | Mnemonic::Sysexitq) => {
            FlowKind::FarTransfer
        }
        FlowControl::Next | FlowControl::XbeginXabortXend | FlowControl::Exception => FlowKind::Other,
        _ if far_operand => FlowKind::FarTransfer,
        FlowControl::ConditionalBranch => FlowKind::CondBranch { target: branch_target(&insn) },
        FlowControl::UnconditionalBranch => FlowKind::Jump { target: branch_target(&insn) },
        FlowControl::Call => FlowKind::Call { target: branch_target(&insn) },
        FlowControl::IndirectBranch => FlowKind::IndirectJump,
        FlowControl::IndirectCall => FlowKind::IndirectCall,
        FlowControl::Return => FlowKind::Return,
        FlowControl::Interrupt => FlowKind::FarTransfer,
    };
    Some(InsnInfo { len: insn.len() as u8, kind })
}

/// The length of a reserved member of the INC/DEC groups (FE /2–/7, FF /7),
/// of the MOV group (C6/C7 /1–/6) or of the POP group (8F /1–/7), or a MOV to or from a segment
/// register that does not exist (8C/8E with ModRM.reg 6 or 7), measured as
/// libipt measures it; a plain instruction for the flow.
fn reserved_group_member(bytes: &[u8], ip: u64, mode: ExecMode) -> Option<InsnInfo> {
    let prefixes = bytes.iter().take_while(|b| matches!(b, 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3)).count();
    let rex = usize::from(mode == ExecMode::Bits64 && bytes.get(prefixes).is_some_and(|b| b & 0xf0 == 0x40));
    let opcode = prefixes + rex;
    let modrm = *bytes.get(opcode + 1)?;
    let reg = (modrm >> 3) & 7;
    // FF /3 and FF /5 (far call, far jump) with a register operand do not
    // exist; libipt decodes them as far transfers all the same.
    if bytes[opcode] == 0xff && matches!(reg, 3 | 5) && modrm >> 6 == 3 {
        return Some(InsnInfo { len: (opcode + 2) as u8, kind: FlowKind::FarTransfer });
    }
    // The defined instruction with the same length: (opcode, ModRM).
    let measured_as = match bytes[opcode] {
        0xfe if reg >= 2 => (0xfe, modrm & !0x38),
        0xff if reg == 7 => (0xff, modrm & !0x38),
        0x8c | 0x8e if reg >= 6 => (bytes[opcode], modrm & !0x38),
        // MOV group: C6 /1–/6 keep their imm8 (libipt's table), C7 /1–/6
        // have no immediate (only /0 has one), like MOV r/m, r.
        0xc6 if (1..=6).contains(&reg) => (0xc6, modrm & !0x38),
        0xc7 if (1..=6).contains(&reg) => (0x89, modrm),
        // POP group: 8F /1–/7 (libipt 2.0.5 knows no XOP) as POP r/m.
        0x8f if reg != 0 => (0x8f, modrm & !0x38),
        _ => return None,
    };
    let mut patched = bytes.to_vec();
    (patched[opcode], patched[opcode + 1]) = measured_as;
    let insn = Decoder::with_ip(mode.bitness(), &patched, ip, DecoderOptions::NO_INVALID_CHECK).decode();
    (!insn.is_invalid()).then(|| InsnInfo { len: insn.len() as u8, kind: FlowKind::Other })
}

/// A VEX instruction (`c5`, or `c4` in maps 0–4) whose opcode the
/// architecture leaves undefined but libipt's length decoder measures: the
/// nominal opcode in its map's tables (maps 0 and 1 as the legacy one- and
/// two-byte opcodes, maps 2 and 3 with ModRM, map 3 with an immediate byte,
/// map 4 — its AMD 3DNow! map — with ModRM and a suffix byte). Any VEX
/// instruction is a plain one for the flow.
fn vex_as_libipt_measures(bytes: &[u8], ip: u64, mode: ExecMode) -> Option<InsnInfo> {
    let prefixes = bytes.iter().take_while(|b| matches!(b, 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3)).count();
    let at = prefixes;
    let p1 = *bytes.get(at + 1)?;
    // Outside 64-bit code, c4/c5 are LES/LDS unless ModRM.mod is 11b.
    if mode != ExecMode::Bits64 && p1 & 0xc0 != 0xc0 {
        return None;
    }
    let (vex_len, map) = match bytes.get(at)? {
        0xc5 => (2, 1),
        0xc4 => (3, p1 & 0x1f),
        _ => return None,
    };
    let rest = bytes.get(at + vex_len..)?;
    let legacy = |code: &[u8]| {
        let insn = Decoder::with_ip(mode.bitness(), code, ip, DecoderOptions::NO_INVALID_CHECK).decode();
        (!insn.is_invalid()).then(|| insn.len())
    };
    let body = match map {
        0 => legacy(rest)?,
        1 => {
            let mut code = vec![0x0f];
            code.extend_from_slice(rest);
            legacy(&code)? - 1
        }
        2..=4 => modrm_operand_len(rest.get(1..)?, &bytes[..prefixes], mode)? + 1 + usize::from(map >= 3),
        _ => return None,
    };
    let len = at + vex_len + body;
    (len <= 15 && len <= bytes.len()).then_some(InsnInfo { len: len as u8, kind: FlowKind::Other })
}

/// Bytes of a ModRM operand (ModRM, SIB, displacement) at the start of
/// `operand`, under the address size `prefixes` and `mode` give.
fn modrm_operand_len(operand: &[u8], prefixes: &[u8], mode: ExecMode) -> Option<usize> {
    let modrm = *operand.first()?;
    let (mode_bits, rm) = (modrm >> 6, modrm & 7);
    let address_size_override = prefixes.contains(&0x67);
    let addr16 = match mode {
        ExecMode::Bits16 => !address_size_override,
        ExecMode::Bits32 => address_size_override,
        ExecMode::Bits64 => false,
    };
    let (sib, disp) = if mode_bits == 3 {
        (0, 0)
    } else if addr16 {
        let disp = match mode_bits {
            0 if rm == 6 => 2,
            0 => 0,
            1 => 1,
            _ => 2,
        };
        (0, disp)
    } else {
        let sib = usize::from(rm == 4);
        let base = if sib == 1 { operand.get(1)? & 7 } else { rm };
        let disp = match mode_bits {
            0 if rm == 5 || (sib == 1 && base == 5) => 4,
            0 => 0,
            1 => 1,
            _ => 4,
        };
        (sib, disp)
    };
    Some(1 + sib + disp)
}

/// One-byte opcodes that exist in 32-bit code but not in 64-bit code
/// (push/pop of segment registers, BCD adjustment, PUSHA/POPA, INTO, SALC,
/// far CALL/JMP with an immediate pointer, the 0x82 alias of group 1).
const LEGACY_ONLY_OPCODES: [u8; 20] =
    [0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x82, 0x9a, 0xce, 0xd4, 0xd5, 0xd6, 0xea];

/// How an instruction moves between functions (LLDB's control-flow kinds
/// call/far call and return/far return; everything else is `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEffect {
    /// A call (near, far, `syscall`, `int`).
    Call,
    /// A return (near, far, `iret`, `sysret`).
    Return,
    /// Anything else.
    Other,
}

/// How the instruction at `ip` moves between functions, as LLDB classifies
/// it for call trees: near and far calls, `syscall`/`sysenter` and software
/// interrupts call; near and far returns, `iret`, `sysret`/`sysexit` return.
pub fn call_effect(bytes: &[u8], ip: u64, mode: ExecMode) -> CallEffect {
    let insn = Decoder::with_ip(mode.bitness(), bytes, ip, DecoderOptions::NONE).decode();
    match insn.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => return CallEffect::Call,
        Mnemonic::Sysret | Mnemonic::Sysretq | Mnemonic::Sysexit | Mnemonic::Sysexitq | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => {
            return CallEffect::Return
        }
        _ => {}
    }
    match insn.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall | FlowControl::Interrupt => CallEffect::Call,
        FlowControl::Return => CallEffect::Return,
        _ => CallEffect::Other,
    }
}

/// A direct branch's target as libipt computes it: the next instruction's
/// address plus the displacement, in 64-bit arithmetic whatever the mode
/// (iced wraps it to the operand size).
fn branch_target(insn: &iced_x86::Instruction) -> u64 {
    let next = insn.next_ip();
    let displacement = match insn.op0_kind() {
        OpKind::NearBranch16 => (insn.near_branch16().wrapping_sub(next as u16) as i16) as i64,
        OpKind::NearBranch32 => (insn.near_branch32().wrapping_sub(next as u32) as i32) as i64,
        _ => return insn.near_branch_target(),
    };
    next.wrapping_add(displacement as u64)
}

fn is_far_indirect(code: Code) -> bool {
    matches!(
        code,
        Code::Call_m1616 | Code::Call_m1632 | Code::Call_m1664 | Code::Jmp_m1616 | Code::Jmp_m1632 | Code::Jmp_m1664
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(bytes: &[u8]) -> FlowKind {
        classify(bytes, 0x1000, ExecMode::Bits64).unwrap().kind
    }

    #[test]
    fn classifies_branches() {
        assert_eq!(kind(&[0x74, 0x05]), FlowKind::CondBranch { target: 0x1007 }); // je +5
        assert_eq!(kind(&[0xe2, 0xfe]), FlowKind::CondBranch { target: 0x1000 }); // loop self
        assert_eq!(kind(&[0xe3, 0x00]), FlowKind::CondBranch { target: 0x1002 }); // jrcxz
        assert_eq!(kind(&[0xeb, 0x10]), FlowKind::Jump { target: 0x1012 });
        assert_eq!(kind(&[0xe8, 0, 0, 0, 0]), FlowKind::Call { target: 0x1005 });
        assert!(classify(&[0xe8, 0, 0, 0, 0], 0x1000, ExecMode::Bits64).unwrap().is_zero_length_call(0x1000));
        assert_eq!(kind(&[0xff, 0xe0]), FlowKind::IndirectJump); // jmp *%rax
        assert_eq!(kind(&[0xff, 0xd0]), FlowKind::IndirectCall); // call *%rax
        assert_eq!(kind(&[0xc3]), FlowKind::Return);
        assert_eq!(kind(&[0xc2, 0x08, 0x00]), FlowKind::Return); // ret $8
        assert_eq!(kind(&[0x0f, 0x05]), FlowKind::Syscall);
        assert_eq!(kind(&[0xcc]), FlowKind::FarTransfer); // int3
        assert_eq!(kind(&[0xcd, 0x80]), FlowKind::FarTransfer); // int $0x80
        assert_eq!(kind(&[0xcb]), FlowKind::FarTransfer); // lret
        assert_eq!(kind(&[0x17]), FlowKind::Other); // pop %ss: not in 64-bit code, but libipt decodes it
        assert_eq!(classify(&[0x17], 0x1000, ExecMode::Bits64).unwrap().len, 1);
        assert_eq!(classify(&[0xff, 0xff, 0x48], 0x1000, ExecMode::Bits64).map(|i| (i.len, i.kind)), Some((2, FlowKind::Other))); // FF /7
        assert_eq!(kind(&[0x9a, 1, 2, 3, 4, 5, 6]), FlowKind::FarTransfer); // lcall $0x605,$0x4030201
        // 32-bit code above 4 GiB (a corrupted MODE.Exec): the target is not wrapped.
        let jmp = classify(&[0xeb, 0xdf], 0x7f00_000d_4417, ExecMode::Bits32).unwrap();
        assert_eq!(jmp.kind, FlowKind::Jump { target: 0x7f00_000d_43f8 });
        assert_eq!(kind(&[0x48, 0xcf]), FlowKind::FarTransfer); // iretq
        assert_eq!(kind(&[0xff, 0x18]), FlowKind::FarTransfer); // lcall *(%rax)
        assert_eq!(kind(&[0x90]), FlowKind::Other);
        assert_eq!(classify(&[0x48, 0x8b, 0x05, 1, 2, 3, 4], 0, ExecMode::Bits64).unwrap().len, 7);
        assert_eq!(classify(&[0x48], 0, ExecMode::Bits64), None); // incomplete
    }

    #[test]
    fn vex_in_maps_libipt_measures() {
        let measure = |bytes: &[u8], mode| classify(bytes, 0x1000, mode).map(|i| (i.len, i.kind));
        // c4 map 4 (libipt's 3DNow! map): ModRM 54, SIB 24, disp8 40, suffix
        // byte — 8 bytes, as LLDB 22 steps over it in libc at 0xdb50e.
        assert_eq!(measure(&[0xc4, 0x04, 0x48, 0x8b, 0x54, 0x24, 0x40, 0x4c, 0x39], ExecMode::Bits64), Some((8, FlowKind::Other)));
        // RIP-relative ModRM: disp32, plus the suffix byte.
        assert_eq!(measure(&[0xc4, 0xe4, 0x78, 0x10, 0x05, 1, 2, 3, 4, 5], ExecMode::Bits64), Some((10, FlowKind::Other)));
        // Outside 64-bit code, c4 with ModRM.mod != 11b is LES (ModRM 04, SIB 48).
        assert_eq!(measure(&[0xc4, 0x04, 0x48], ExecMode::Bits32), Some((3, FlowKind::Other)));
        // Cut short: no length.
        assert_eq!(measure(&[0xc4, 0x04, 0x48, 0x8b, 0x54], ExecMode::Bits64), None);
        // c5 (map 1) with opcode 21 (MOV from a debug register, no VEX
        // form): ModRM only, 4 bytes, as LLDB steps over it at 0xd0709.
        assert_eq!(measure(&[0xc5, 0xe8, 0x21, 0xf9, 0xff, 0xff], ExecMode::Bits64), Some((4, FlowKind::Other)));
        // mov %sp, %seg6 (no such segment register), with a CS prefix: 3
        // bytes, as LLDB 22 steps over it in libc at 0xdd1fe.
        assert_eq!(measure(&[0x2e, 0x8e, 0xf4, 0xff, 0x48], ExecMode::Bits64), Some((3, FlowKind::Other)));
        assert_eq!(measure(&[0x8c, 0x3d, 1, 2, 3, 4], ExecMode::Bits64), Some((6, FlowKind::Other)));
        // C7 /1 (undefined; libipt gives it no immediate): 3 bytes, as LLDB
        // steps over it in libc at 0xdd204; C6 /3 keeps its imm8.
        assert_eq!(measure(&[0xc7, 0x48, 0x85, 0xc0, 0x74, 0x0e], ExecMode::Bits64), Some((3, FlowKind::Other)));
        assert_eq!(measure(&[0xc6, 0x18, 0x05, 0x90], ExecMode::Bits64), Some((3, FlowKind::Other)));
        // 8F /6 (POP group, undefined; XOP to AMD, unknown to libipt 2.0.5):
        // measured as POP r/m, 6 bytes, as LLDB steps over it in libc at
        // 0xd6e09.
        assert_eq!(measure(&[0x8f, 0xb2, 0x02, 0x00, 0x00, 0x3c, 0x5b], ExecMode::Bits64), Some((6, FlowKind::Other)));
        // ljmp with a register operand (FF /5, mod 11): a far transfer for
        // libipt, whose query LLDB reports at 0xd3103 in libc.
        assert_eq!(measure(&[0xff, 0xeb, 0xdd, 0x66], ExecMode::Bits64), Some((2, FlowKind::FarTransfer)));
    }
}
