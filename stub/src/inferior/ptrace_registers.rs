//! A live thread's whole register set through ptrace: general registers
//! (`PTRACE_GETREGS`), x87/SSE state (`PTRACE_GETFPREGS`), AVX's upper
//! halves of the ymm registers (`PTRACE_GETREGSET` of the XSAVE area) and
//! the segment bases, as gdbstub's [`Regs`].

use nix::sys::ptrace;
use nix::unistd::Pid;

use crate::arch::{Regs, FIRST_YMMH};

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

/// `NT_X86_XSTATE`: the thread's XSAVE area (in the standard format).
const NT_X86_XSTATE: libc::c_int = 0x202;
/// Where the XSAVE area keeps the header's component bitmap, and the AVX
/// component (ymm0–15, bytes 16..32 each) in the standard format.
const XSTATE_BV: usize = 512;
const AVX_OFFSET: usize = 576;
/// The AVX component's bit in the bitmap (clear: its registers are 0).
const AVX_BIT: u64 = 1 << 2;
/// Room enough for the XSAVE areas of today's processors.
const XSAVE_ROOM: usize = 16 << 10;

/// The thread's XSAVE area (as long as the kernel gave).
fn get_xstate(tid: Pid) -> nix::Result<Vec<u8>> {
    let mut area = vec![0u8; XSAVE_ROOM];
    let mut iov = libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() };
    // SAFETY: the kernel writes at most iov_len bytes into `area`.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETREGSET, tid.as_raw(), NT_X86_XSTATE, &mut iov as *mut libc::iovec) };
    if r < 0 {
        return Err(nix::Error::last());
    }
    area.truncate(iov.iov_len);
    Ok(area)
}

/// The ymm registers' upper halves, if the processor has AVX.
fn ymm_upper(area: &[u8]) -> Option<[u128; 16]> {
    let bitmap = u64::from_le_bytes(area.get(XSTATE_BV..XSTATE_BV + 8)?.try_into().ok()?);
    let component = area.get(AVX_OFFSET..AVX_OFFSET + 256)?;
    let mut upper = [0u128; 16];
    if bitmap & AVX_BIT != 0 {
        for (k, chunk) in component.chunks_exact(16).enumerate() {
            upper[k] = u128::from_le_bytes(chunk.try_into().expect("16 bytes"));
        }
    }
    Some(upper)
}

/// Sets the ymm registers' upper halves (a processor without AVX has
/// none to set).
fn set_ymm_upper(tid: Pid, upper: &[u128; 16]) -> nix::Result<()> {
    let mut area = get_xstate(tid)?;
    if area.len() < AVX_OFFSET + 256 {
        return Ok(());
    }
    for (k, value) in upper.iter().enumerate() {
        area[AVX_OFFSET + 16 * k..AVX_OFFSET + 16 * (k + 1)].copy_from_slice(&value.to_le_bytes());
    }
    let bitmap = u64::from_le_bytes(area[XSTATE_BV..XSTATE_BV + 8].try_into().expect("8 bytes")) | AVX_BIT;
    area[XSTATE_BV..XSTATE_BV + 8].copy_from_slice(&bitmap.to_le_bytes());
    let mut iov = libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() };
    // SAFETY: the kernel reads iov_len bytes from `area`.
    let r = unsafe { libc::ptrace(libc::PTRACE_SETREGSET, tid.as_raw(), NT_X86_XSTATE, &mut iov as *mut libc::iovec) };
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
    match get_xstate(tid).ok().as_deref().and_then(ymm_upper) {
        Some(upper) => regs.ymmh = upper,
        None => regs.unavailable |= ((1u128 << 16) - 1) << FIRST_YMMH,
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
    setfpregs(tid, &fp)?;
    if (FIRST_YMMH..FIRST_YMMH + 16).all(|n| regs.is_available(n)) {
        set_ymm_upper(tid, &regs.ymmh)?;
    }
    Ok(())
}
