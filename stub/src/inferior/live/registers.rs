//! A live thread's whole register set through ptrace: general registers
//! (`PTRACE_GETREGS`), x87/SSE state (`PTRACE_GETFPREGS`) and the segment
//! bases, as gdbstub's [`Regs`].

use nix::sys::ptrace;
use nix::unistd::Pid;

use crate::arch::Regs;

fn getfpregs(tid: Pid) -> nix::Result<libc::user_fpregs_struct> {
    let mut fp = std::mem::MaybeUninit::<libc::user_fpregs_struct>::zeroed();
    // SAFETY: PTRACE_GETFPREGS fills the struct for a stopped tracee.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETFPREGS, tid.as_raw(), 0, fp.as_mut_ptr()) };
    if r < 0 {
        return Err(nix::Error::last());
    }
    // SAFETY: initialised by the kernel (or zeroed).
    Ok(unsafe { fp.assume_init() })
}

fn setfpregs(tid: Pid, fp: &libc::user_fpregs_struct) -> nix::Result<()> {
    // SAFETY: PTRACE_SETFPREGS reads the struct.
    let r = unsafe { libc::ptrace(libc::PTRACE_SETFPREGS, tid.as_raw(), 0, fp as *const _) };
    if r < 0 {
        return Err(nix::Error::last());
    }
    Ok(())
}

/// Reads every register of a stopped thread.
pub fn read_all_registers(tid: Pid) -> nix::Result<Regs> {
    let r = ptrace::getregs(tid)?;
    let fp = getfpregs(tid)?;
    let mut regs = Regs {
        gpr: [r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15],
        rip: r.rip,
        eflags: r.eflags as u32,
        segments: [r.cs as u32, r.ss as u32, r.ds as u32, r.es as u32, r.fs as u32, r.gs as u32],
        orig_rax: r.orig_rax,
        fs_base: r.fs_base,
        gs_base: r.gs_base,
        mxcsr: fp.mxcsr,
        ..Regs::default()
    };
    regs.fpu = [
        fp.cwd as u32,
        fp.swd as u32,
        fp.ftw as u32,
        (fp.rip >> 32) as u32,
        fp.rip as u32,
        (fp.rdp >> 32) as u32,
        fp.rdp as u32,
        fp.fop as u32,
    ];
    for i in 0..8 {
        let words = &fp.st_space[i * 4..i * 4 + 4];
        let mut bytes = [0u8; 16];
        for (j, w) in words.iter().enumerate() {
            bytes[j * 4..j * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        regs.st[i].copy_from_slice(&bytes[..10]);
    }
    for i in 0..16 {
        let mut bytes = [0u8; 16];
        for (j, w) in fp.xmm_space[i * 4..i * 4 + 4].iter().enumerate() {
            bytes[j * 4..j * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        regs.xmm[i] = u128::from_le_bytes(bytes);
    }
    Ok(regs)
}

/// Writes every register of a stopped thread.
pub fn write_all_registers(tid: Pid, regs: &Regs) -> nix::Result<()> {
    let mut r = ptrace::getregs(tid)?;
    let g = &regs.gpr;
    (r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp) = (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
    (r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15) = (g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
    r.rip = regs.rip;
    r.eflags = regs.eflags as u64;
    r.orig_rax = regs.orig_rax;
    r.fs_base = regs.fs_base;
    r.gs_base = regs.gs_base;
    ptrace::setregs(tid, r)?;
    let mut fp = getfpregs(tid)?;
    fp.cwd = regs.fpu[0] as u16;
    fp.swd = regs.fpu[1] as u16;
    fp.ftw = regs.fpu[2] as u16;
    fp.fop = regs.fpu[7] as u16;
    fp.mxcsr = regs.mxcsr;
    for i in 0..8 {
        let mut bytes = [0u8; 16];
        bytes[..10].copy_from_slice(&regs.st[i]);
        for j in 0..4 {
            fp.st_space[i * 4 + j] = u32::from_le_bytes(bytes[j * 4..j * 4 + 4].try_into().unwrap());
        }
    }
    for i in 0..16 {
        let bytes = regs.xmm[i].to_le_bytes();
        for j in 0..4 {
            fp.xmm_space[i * 4 + j] = u32::from_le_bytes(bytes[j * 4..j * 4 + 4].try_into().unwrap());
        }
    }
    setfpregs(tid, &fp)
}
