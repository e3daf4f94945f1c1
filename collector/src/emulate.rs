//! Emulating one near branch from a thread's registers and memory, so the
//! branch-stop recorder can move a thread past a branch without a #DB trap.
//!
//! Pure: registers come in as a [`Registers`] view and memory through a
//! reader closure; the result says what to change. Anything not clearly safe
//! to emulate (far transfers, system calls, 16/32-bit operand sizes, unusual
//! segments) returns `None` and the caller single-steps instead.

use iced_x86::{Code, ConditionCode, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

/// The general registers emulation reads (a subset of `user_regs_struct`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Registers {
    /// rax … r15 in iced's order: rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8 … r15.
    pub gpr: [u64; 16],
    /// RFLAGS.
    pub rflags: u64,
    /// FS base.
    pub fs_base: u64,
    /// GS base.
    pub gs_base: u64,
}

impl Registers {
    /// From ptrace's register block.
    pub fn from_user(regs: &libc::user_regs_struct) -> Self {
        Registers {
            gpr: [
                regs.rax, regs.rcx, regs.rdx, regs.rbx, regs.rsp, regs.rbp, regs.rsi, regs.rdi, regs.r8, regs.r9,
                regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15,
            ],
            rflags: regs.eflags,
            fs_base: regs.fs_base,
            gs_base: regs.gs_base,
        }
    }

    fn rsp(&self) -> u64 {
        self.gpr[4]
    }

    fn rcx(&self) -> u64 {
        self.gpr[1]
    }

    /// A segment register's base: FS's and GS's; the others are flat.
    fn segment_base(&self, segment: Register) -> Option<u64> {
        match segment {
            Register::FS => Some(self.fs_base),
            Register::GS => Some(self.gs_base),
            Register::DS | Register::SS | Register::CS | Register::ES => Some(0),
            _ => None,
        }
    }

    /// A register's value in an address computation, as iced-x86's
    /// `UsedMemory::virtual_address` asks for it: a segment's base, or a
    /// general register at its size (an `addr32` base is 32 bits).
    pub fn address_part(&self, register: Register) -> Option<u64> {
        if let Some(base) = self.segment_base(register) {
            return Some(base);
        }
        let index = (register.full_register() as usize).checked_sub(Register::RAX as usize).filter(|&i| i < 16)?;
        let value = self.gpr[index];
        Some(match register.size() {
            4 => value as u32 as u64,
            2 => value as u16 as u64,
            1 => value as u8 as u64,
            _ => value,
        })
    }

    fn read(&self, register: Register) -> Option<u64> {
        let full = register.full_register();
        let index = (full as usize).checked_sub(Register::RAX as usize)?;
        if index >= 16 || register.size() != 8 {
            return None;
        }
        Some(self.gpr[index])
    }
}

/// What executing the branch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    /// Where execution continues.
    pub next_ip: u64,
    /// The new RSP, when it changes (calls and returns).
    pub rsp: Option<u64>,
    /// A return address to write at the new RSP (calls).
    pub push: Option<u64>,
    /// The new RCX (LOOP instructions).
    pub rcx: Option<u64>,
}

fn flag(rflags: u64, bit: u32) -> bool {
    rflags >> bit & 1 == 1
}

fn condition(code: ConditionCode, rflags: u64) -> Option<bool> {
    let (cf, pf, zf, sf, of) =
        (flag(rflags, 0), flag(rflags, 2), flag(rflags, 6), flag(rflags, 7), flag(rflags, 11));
    Some(match code {
        ConditionCode::o => of,
        ConditionCode::no => !of,
        ConditionCode::b => cf,
        ConditionCode::ae => !cf,
        ConditionCode::e => zf,
        ConditionCode::ne => !zf,
        ConditionCode::be => cf || zf,
        ConditionCode::a => !cf && !zf,
        ConditionCode::s => sf,
        ConditionCode::ns => !sf,
        ConditionCode::p => pf,
        ConditionCode::np => !pf,
        ConditionCode::l => sf != of,
        ConditionCode::ge => sf == of,
        ConditionCode::le => zf || sf != of,
        ConditionCode::g => !zf && sf == of,
        ConditionCode::None => return None,
    })
}

/// The address of a 64-bit memory operand, or `None` if it is unusual.
fn effective_address(insn: &Instruction, regs: &Registers) -> Option<u64> {
    let base = match insn.memory_base() {
        Register::None => 0,
        Register::RIP => 0, // iced folds RIP-relative addresses into the displacement
        register => regs.read(register)?,
    };
    let index = match insn.memory_index() {
        Register::None => 0,
        register => regs.read(register)?.wrapping_mul(insn.memory_index_scale() as u64),
    };
    let segment = regs.segment_base(insn.memory_segment())?;
    // memory_displacement64 is sign-extended, and absolute for RIP-relative operands.
    Some(segment.wrapping_add(base).wrapping_add(index).wrapping_add(insn.memory_displacement64()))
}

/// The target of an indirect jump or call (register or memory operand).
fn indirect_target(insn: &Instruction, regs: &Registers, read_u64: &mut dyn FnMut(u64) -> Option<u64>) -> Option<u64> {
    match insn.op0_kind() {
        OpKind::Register => regs.read(insn.op0_register()),
        OpKind::Memory if insn.memory_size().size() == 8 => read_u64(effective_address(insn, regs)?),
        _ => None,
    }
}

/// Emulates the near branch at `ip` encoded in `bytes`. `read_u64` reads the
/// tracee's memory. Returns `None` when the instruction is not a near branch
/// this function can emulate exactly.
pub fn emulate_branch(
    bytes: &[u8],
    ip: u64,
    regs: &Registers,
    read_u64: &mut dyn FnMut(u64) -> Option<u64>,
) -> Option<Effect> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let next = insn.next_ip();
    let plain = |next_ip| Effect { next_ip, rsp: None, push: None, rcx: None };
    match insn.mnemonic() {
        Mnemonic::Jmp if insn.op0_kind() == OpKind::NearBranch64 => Some(plain(insn.near_branch_target())),
        Mnemonic::Jmp => Some(plain(indirect_target(&insn, regs, read_u64)?)),
        Mnemonic::Call => {
            let target = if insn.op0_kind() == OpKind::NearBranch64 {
                insn.near_branch_target()
            } else {
                indirect_target(&insn, regs, read_u64)?
            };
            let rsp = regs.rsp().wrapping_sub(8);
            Some(Effect { next_ip: target, rsp: Some(rsp), push: Some(next), rcx: None })
        }
        Mnemonic::Ret => {
            if insn.op_count() > 0 && insn.op0_kind() != OpKind::Immediate16 {
                return None;
            }
            let pop = if insn.op_count() > 0 { insn.immediate16() as u64 } else { 0 };
            let target = read_u64(regs.rsp())?;
            Some(Effect { next_ip: target, rsp: Some(regs.rsp().wrapping_add(8 + pop)), push: None, rcx: None })
        }
        Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne => {
            if !matches!(insn.code(), Code::Loop_rel8_64_RCX | Code::Loope_rel8_64_RCX | Code::Loopne_rel8_64_RCX) {
                return None;
            }
            let rcx = regs.rcx().wrapping_sub(1);
            let zf = flag(regs.rflags, 6);
            let taken = rcx != 0
                && match insn.mnemonic() {
                    Mnemonic::Loope => zf,
                    Mnemonic::Loopne => !zf,
                    _ => true,
                };
            Some(Effect { next_ip: if taken { insn.near_branch_target() } else { next }, rsp: None, push: None, rcx: Some(rcx) })
        }
        Mnemonic::Jrcxz => Some(plain(if regs.rcx() == 0 { insn.near_branch_target() } else { next })),
        Mnemonic::Jecxz => Some(plain(if regs.rcx() as u32 == 0 { insn.near_branch_target() } else { next })),
        _ if insn.op0_kind() == OpKind::NearBranch64 && insn.condition_code() != ConditionCode::None => {
            let taken = condition(insn.condition_code(), regs.rflags)?;
            Some(plain(if taken { insn.near_branch_target() } else { next }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Registers {
        let mut regs = Registers::default();
        regs.gpr[4] = 0x7fff_0000; // rsp
        regs.gpr[0] = 0x4000; // rax
        regs.gpr[3] = 0x100; // rbx
        regs
    }

    fn no_memory(_: u64) -> Option<u64> {
        None
    }

    #[test]
    fn address_parts_are_sized_registers_and_segment_bases() {
        let mut r = regs();
        r.gpr[0] = 0x1_2345_6789;
        r.fs_base = 0x7000;
        assert_eq!(r.address_part(Register::RAX), Some(0x1_2345_6789));
        assert_eq!(r.address_part(Register::EAX), Some(0x2345_6789));
        assert_eq!(r.address_part(Register::RSP), Some(0x7fff_0000));
        assert_eq!(r.address_part(Register::FS), Some(0x7000));
        assert_eq!(r.address_part(Register::SS), Some(0));
        assert_eq!(r.address_part(Register::XMM0), None);
    }

    #[test]
    fn conditional_branches_follow_flags() {
        let mut r = regs();
        // jne +0x10 at 0x1000 (75 10): ZF=0 → taken
        assert_eq!(emulate_branch(&[0x75, 0x10], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1012);
        r.rflags = 1 << 6;
        assert_eq!(emulate_branch(&[0x75, 0x10], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1002);
        // jl (7c): SF != OF
        r.rflags = 1 << 7;
        assert_eq!(emulate_branch(&[0x7c, 0x10], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1012);
        r.rflags = 1 << 7 | 1 << 11;
        assert_eq!(emulate_branch(&[0x7c, 0x10], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1002);
        // jbe near (0f 86 rel32)
        r.rflags = 1;
        assert_eq!(emulate_branch(&[0x0f, 0x86, 0, 1, 0, 0], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1106);
    }

    #[test]
    fn calls_push_and_returns_pop() {
        let r = regs();
        let call = emulate_branch(&[0xe8, 0x10, 0, 0, 0], 0x1000, &r, &mut no_memory).unwrap();
        assert_eq!(call, Effect { next_ip: 0x1015, rsp: Some(0x7ffe_fff8), push: Some(0x1005), rcx: None });
        let mut stack = |a: u64| (a == 0x7fff_0000).then_some(0x4242);
        let ret = emulate_branch(&[0xc3], 0x2000, &r, &mut stack).unwrap();
        assert_eq!(ret, Effect { next_ip: 0x4242, rsp: Some(0x7fff_0008), push: None, rcx: None });
        let ret8 = emulate_branch(&[0xc2, 0x08, 0x00], 0x2000, &r, &mut stack).unwrap();
        assert_eq!(ret8.rsp, Some(0x7fff_0010));
    }

    #[test]
    fn indirect_targets_from_registers_and_memory() {
        let r = regs();
        // call *%rax
        assert_eq!(emulate_branch(&[0xff, 0xd0], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x4000);
        // jmp *0x8(%rbx,%rax,8): reads 0x100 + 0x4000*8 + 8
        let mut table = |a: u64| (a == 0x100 + 0x4000 * 8 + 8).then_some(0x5555);
        assert_eq!(emulate_branch(&[0xff, 0x64, 0xc3, 0x08], 0x1000, &r, &mut table).unwrap().next_ip, 0x5555);
        // jmp *0x10(%rip): absolute 0x1000 + 6 + 0x10
        let mut got = |a: u64| (a == 0x1016).then_some(0x7777);
        assert_eq!(emulate_branch(&[0xff, 0x25, 0x10, 0, 0, 0], 0x1000, &r, &mut got).unwrap().next_ip, 0x7777);
        // unreadable memory: cannot emulate
        assert_eq!(emulate_branch(&[0xff, 0x25, 0x10, 0, 0, 0], 0x1000, &r, &mut no_memory), None);
    }

    #[test]
    fn loops_and_refusals() {
        let mut r = regs();
        r.gpr[1] = 2; // rcx
        let looped = emulate_branch(&[0xe2, 0xfe], 0x1000, &r, &mut no_memory).unwrap();
        assert_eq!((looped.next_ip, looped.rcx), (0x1000, Some(1)));
        r.gpr[1] = 1;
        let done = emulate_branch(&[0xe2, 0xfe], 0x1000, &r, &mut no_memory).unwrap();
        assert_eq!((done.next_ip, done.rcx), (0x1002, Some(0)));
        r.gpr[1] = 0;
        assert_eq!(emulate_branch(&[0xe3, 0x05], 0x1000, &r, &mut no_memory).unwrap().next_ip, 0x1007);
        assert_eq!(emulate_branch(&[0x0f, 0x05], 0x1000, &r, &mut no_memory), None); // syscall
        assert_eq!(emulate_branch(&[0xcb], 0x1000, &r, &mut no_memory), None); // lret
        assert_eq!(emulate_branch(&[0x90], 0x1000, &r, &mut no_memory), None);
    }
}
