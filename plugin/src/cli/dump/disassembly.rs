//! One instruction as LLDB 22 shows it in a dump: its bytes decoded, in
//! LLVM's spelling (from `llvm-mc` where it is there), with LLDB's
//! symbolic comments and control-flow kinds.

use retrace_decoder::symbols::{signed_offset, Symbolizer};

use super::MAX_INSTRUCTION;

/// One instruction as LLDB shows it.
#[derive(Clone)]
pub(super) struct Disassembled {
    /// The mnemonic (`None`: the bytes are not an instruction).
    pub(super) mnemonic: Option<String>,
    /// AT&T syntax, the mnemonic in 7 columns, and a comment naming branch
    /// targets and RIP-relative data.
    pub(super) text: String,
    /// LLDB's control-flow kind (`-k`).
    pub(super) kind: &'static str,
}

/// One instruction as LLDB prints it: AT&T syntax, the mnemonic in 7
/// columns, and a comment naming branch targets and RIP-relative data.
pub(super) fn disassemble(image: &retrace_decoder::image::Image, symbols: &Symbolizer, ip: u64) -> Disassembled {
    disassemble_bytes(image, symbols, ip, MAX_INSTRUCTION as usize)
}

/// [`disassemble`] from at most `limit` bytes at `ip`.
pub(super) fn disassemble_bytes(image: &retrace_decoder::image::Image, symbols: &Symbolizer, ip: u64, limit: usize) -> Disassembled {
    use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter};
    use retrace_decoder::image::Memory;
    let mut bytes = [0u8; 15];
    let n = image.read(ip, &mut bytes[..limit.min(15)]);
    let mut decoder = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if crate::cli::llvm_mc::available() {
        return disassemble_with_llvm(symbols, ip, &bytes[..n], &insn);
    }
    if insn.is_invalid() {
        return Disassembled { mnemonic: None, text: "<unknown>".into(), kind: "unknown" };
    }
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_gas_show_mnemonic_size_suffix(true);
    options.set_space_after_operand_separator(true);
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    options.set_small_hex_numbers_in_decimal(false);
    options.set_rip_relative_addresses(true);
    let mut mnemonic = String::new();
    let mut operands = String::new();
    formatter.format_mnemonic(&insn, &mut mnemonic);
    // Operand by operand: immediates are LLVM's, not iced's (below).
    let mut immediate_comment = None;
    for op in 0..formatter.operand_count(&insn) {
        if op > 0 {
            operands.push_str(", ");
        }
        match formatter.get_instruction_operand(&insn, op).ok().flatten().and_then(|i| llvm_immediate(&insn, i)) {
            Some(value) => {
                operands.push_str(&if value < 0 { format!("$-0x{:x}", value.unsigned_abs()) } else { format!("$0x{value:x}") });
                if !(-256..=255).contains(&value) {
                    // LLVM's own comments end with a space in LLDB's text
                    // (seen: `; imm = 0x401639 `), LLDB's symbol comments not.
                    immediate_comment = Some(if value == value as i16 as i64 {
                        format!("imm = 0x{:X} ", value as u16)
                    } else if value == value as i32 as i64 {
                        format!("imm = 0x{:X} ", value as u32)
                    } else {
                        format!("imm = 0x{:X} ", value as u64)
                    });
                }
            }
            None => {
                let _ = formatter.format_operand(&insn, &mut operands, op);
            }
        }
    }
    llvm_spelling(&insn, &mut mnemonic, &mut operands);
    let comment = symbolic_comment(symbols, ip, &insn).or(immediate_comment);
    Disassembled { text: lldb_layout(&mnemonic, &operands, comment), mnemonic: Some(mnemonic), kind: control_flow_kind(&bytes[..insn.len().min(n)]) }
}

/// LLDB's layout: the mnemonic in 7 columns (at least one space after it),
/// the operands in 25, then the comment.
fn lldb_layout(mnemonic: &str, operands: &str, comment: Option<String>) -> String {
    let width = if mnemonic.len() >= 7 { mnemonic.len() + 1 } else { 7 };
    match comment {
        Some(comment) => format!("{mnemonic:<width$}{operands:<25} ; {comment}"),
        None => format!("{mnemonic:<width$}{operands}"),
    }
}

/// LLDB's own comment: the function a branch goes to, the data a
/// RIP-relative operand names (`name + off`, or the segment's for an
/// address no section holds).
fn symbolic_comment(symbols: &Symbolizer, ip: u64, insn: &iced_x86::Instruction) -> Option<String> {
    use iced_x86::{OpKind, Register};
    if insn.op0_kind() == OpKind::NearBranch64 {
        branch_comment(symbols, ip, insn.near_branch_target())
    } else if insn.is_ip_rel_memory_operand() && insn.memory_base() == Register::RIP {
        let address = insn.ip_rel_memory_address();
        if symbols.lookup(address).function.is_some() {
            return branch_comment(symbols, ip, address);
        }
        // In a segment but in no section: the segment (no symbol).
        symbols.unsectioned(address).or_else(|| symbols.data_symbol(address)).map(|(name, offset)| {
            if offset == 0 {
                name.to_string()
            } else {
                format!("{name} + {offset}")
            }
        })
    } else {
        None
    }
}

/// The instruction as LLVM 22's printer gives it (see [`llvm_mc`]), with
/// LLDB's branch targets as addresses and its symbolic comments.
fn disassemble_with_llvm(symbols: &Symbolizer, ip: u64, bytes: &[u8], insn: &iced_x86::Instruction) -> Disassembled {
    let Some(printed) = crate::cli::llvm_mc::print(bytes, ip) else {
        // LLDB's text for bytes LLVM does not decode; the kind is still
        // read from the bytes.
        return Disassembled { mnemonic: Some(String::new()), text: lldb_layout("<unknown>", "", None), kind: control_flow_kind(bytes) };
    };
    let mut operands = printed.operands;
    if !insn.is_invalid() && insn.op0_kind() == iced_x86::OpKind::NearBranch64 {
        // The C API prints the displacement; LLDB's printer the target.
        let target = insn.near_branch_target();
        let displacement = target.wrapping_sub(ip.wrapping_add(printed.length as u64)) as i64;
        let relative = if displacement < 0 { format!("-0x{:x}", displacement.unsigned_abs()) } else { format!("0x{displacement:x}") };
        if let Some(head) = operands.strip_suffix(&relative) {
            operands = format!("{head}0x{target:x}");
        }
    }
    // LLDB's symbol lookup sees the operands LLVM decoded (none after a
    // lone `lock`).
    let own = if insn.is_invalid() || printed.length != insn.len() { None } else { symbolic_comment(symbols, ip, insn) };
    // Both: LLDB appends the printer's after its own.
    let comment = match (own, printed.comment.is_empty()) {
        (Some(own), false) => Some(format!("{own}, {}", printed.comment)),
        (Some(own), true) => Some(own),
        (None, false) => Some(printed.comment),
        (None, true) => None,
    };
    let kind = control_flow_kind(&bytes[..if insn.is_invalid() { bytes.len() } else { insn.len().min(bytes.len()) }]);
    Disassembled { text: lldb_layout(&printed.mnemonic, &operands, comment), mnemonic: Some(printed.mnemonic), kind }
}

/// LLDB's `InstructionControlFlowKind` of a 64-bit instruction's bytes, as
/// LLDB 22 classifies them: by the primary opcode, its map (one-byte, 0F,
/// 0F38/0F3A) and the ModR/M byte, after the legacy and REX prefixes. A
/// VEX or EVEX prefix gives the map from its map-select bits, and LLDB
/// reads an EVEX map-select of 1 as the one-byte map, so that e.g. the
/// EVEX `vmovdqu64` (opcode 7F) is a `cond jump` there: reproduced.
fn control_flow_kind(bytes: &[u8]) -> &'static str {
    let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut at = 0;
    while matches!(byte(at), 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x40..=0x4f) {
        at += 1;
    }
    if at >= bytes.len() {
        return "unknown";
    }
    let (opcode, map, modrm) = match byte(at) {
        0xc5 => (byte(at + 2), 2, byte(at + 3)),
        0xc4 => (byte(at + 3), byte(at + 1) & 0x1f, byte(at + 4)),
        0x62 => (byte(at + 4), byte(at + 1) & 0x03, byte(at + 5)),
        0x0f => match byte(at + 1) {
            0x38 | 0x3a => (byte(at + 2), 3, byte(at + 3)),
            second if second & 0xf8 == 0x38 => (byte(at + 2), 0, byte(at + 3)),
            0x0f => (0x0f, 3, byte(at + 2)),
            second => (second, 2, byte(at + 2)),
        },
        first => (first, 1, byte(at + 1)),
    };
    match (map, opcode) {
        (3.., _) => "other",
        (1, 0x70..=0x7f | 0xe0..=0xe3) | (2, 0x80..=0x8f) => "cond jump",
        (1, 0xe8) => "call",
        (1, 0xe9 | 0xeb) => "jump",
        (1, 0xc2 | 0xc3) => "return",
        (1, 0xff) => match (modrm >> 3) & 7 {
            2 => "call",
            3 => "far call",
            4 => "jump",
            5 => "far jump",
            _ => "other",
        },
        (1, 0x9a | 0xcc | 0xcd | 0xce | 0xf1) | (2, 0x05 | 0x34) => "far call",
        (2, 0x01) if modrm == 0xc1 => "far call",
        (1, 0xcf | 0xca | 0xcb) | (2, 0x07 | 0x35) => "far return",
        (2, 0x01) if matches!(modrm, 0xc2 | 0xc3) => "far return",
        (1, 0xea) => "far jump",
        _ => "other",
    }
}

/// Instruction operand `i` as LLVM's disassembler holds an immediate (LLDB
/// prints it signed, in hex): an 8-bit immediate sign-extended — except
/// where LLVM types it unsigned (shift and rotate counts, `int`, `bt*`,
/// ports, vector selectors) —, a 16- or 32-bit one as is, one sign-extended
/// to 64 bits or a 64-bit one signed. `None` when the operand is not an
/// immediate.
fn llvm_immediate(insn: &iced_x86::Instruction, i: u32) -> Option<i64> {
    use iced_x86::{Mnemonic as M, OpKind};
    let signed_imm8 = matches!(
        insn.mnemonic(),
        M::Add | M::Or | M::Adc | M::Sbb | M::And | M::Sub | M::Xor | M::Cmp | M::Mov | M::Test | M::Push | M::Imul | M::Enter
    );
    Some(match insn.op_kind(i) {
        OpKind::Immediate8 if signed_imm8 => insn.immediate8() as i8 as i64,
        OpKind::Immediate8 => insn.immediate8() as i64,
        OpKind::Immediate8_2nd => insn.immediate8_2nd() as i8 as i64,
        OpKind::Immediate8to16 | OpKind::Immediate8to32 | OpKind::Immediate8to64 => insn.immediate8() as i8 as i64,
        OpKind::Immediate16 => insn.immediate16() as i64,
        OpKind::Immediate32 => insn.immediate32() as i64,
        OpKind::Immediate32to64 => insn.immediate32() as i32 as i64,
        OpKind::Immediate64 => insn.immediate64() as i64,
        _ => return None,
    })
}

/// Where LLVM's AT&T printer (LLDB's) spells an instruction differently from
/// iced's: SETcc without a size suffix, `leave` and `enter`, three-operand `imul` with
/// its source repeated, and `66 90` as `nop`.
fn llvm_spelling(insn: &iced_x86::Instruction, mnemonic: &mut String, operands: &mut String) {
    use iced_x86::Mnemonic;
    let m = insn.mnemonic();
    if (Mnemonic::Seta as u32..=Mnemonic::Sets as u32).contains(&(m as u32)) {
        if mnemonic.ends_with('b') {
            mnemonic.pop();
        }
    } else if m == Mnemonic::Leave {
        *mnemonic = "leave".into();
    } else if m == Mnemonic::Enter {
        // LLVM: no suffix, and the frame size first.
        *mnemonic = "enter".into();
        if let Some((level, size)) = operands.split_once(", ") {
            *operands = format!("{size}, {level}");
        }
    } else if m == Mnemonic::Imul && insn.op_count() == 3 && operands.matches(", ").count() == 1 {
        // iced drops the source when it is the destination; LLVM keeps all three.
        if let Some((_, register)) = operands.rsplit_once(", ") {
            let register = register.to_string();
            operands.push_str(", ");
            operands.push_str(&register);
        }
    } else if mnemonic == "xchgw" && operands == "%ax, %ax" {
        *mnemonic = "nop".into();
        operands.clear();
    }
}

/// LLDB's comment for an address an instruction refers to (a branch
/// target, a RIP-relative operand), as its disassembler's symbol lookup
/// writes it: `<+off>` inside the same function, else the function (`+
/// off`), then the inlined function there (`[inlined] f + off`) and, when
/// the function has debug info, ` at file:line:col` — the first line of
/// LLDB's description of the address.
fn branch_comment(symbols: &Symbolizer, ip: u64, target: u64) -> Option<String> {
    let here = symbols.lookup(ip);
    let there = symbols.lookup(target);
    let (name, _) = there.function.clone()?;
    let base = there.function_base()?;
    // Inside the instruction's own function (any range of its debug-info
    // function, parts under other symbols included; else its symbol, by the
    // symbol's size): no name, and the offset from the target's function
    // entry, below it too (`<-N>`: gcc's `f.cold`).
    let own_function = match &here.function_ranges {
        Some(ranges) => ranges.iter().any(|&(low, high)| (low..high).contains(&target)),
        None => symbols.function_range(ip).is_some_and(|(low, high)| (low..high).contains(&target)),
    };
    let mut text = if own_function {
        match target.checked_sub(base) {
            Some(offset) => format!("<+{offset}>"),
            None => format!("<-{}>", base - target),
        }
    } else {
        format!("{name}{}", signed_offset(target, base))
    };
    if let (Some(inlined), Some(block_start)) = (&there.inlined, there.inlined_block.and_then(|b| b.range_start)) {
        text.push_str(&format!(" [inlined] {inlined}"));
        if target > block_start {
            text.push_str(&format!(" + {}", target - block_start));
        }
    }
    if let Some(position) = there.position() {
        text.push_str(&position);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Immediates spelled as LLVM's disassembler (LLDB's) spells them, with
    /// its `imm = 0x…` comment; checked against `llvm-mc-22 --print-imm-hex`
    /// where it is installed (`immediates_agree_with_llvm_mc`).
    const IMMEDIATES: &[(&[u8], &str)] = &[
        (&[0x49, 0xc7, 0xc0, 0xb8, 0xff, 0xff, 0xff], "movq   $-0x48, %r8"),
        (&[0xb8, 0xff, 0xff, 0xff, 0xff], "movl   $0xffffffff, %eax         ; imm = 0xFFFFFFFF "),
        (&[0x83, 0xc0, 0xff], "addl   $-0x1, %eax"),
        (&[0x81, 0xc1, 0x00, 0xf0, 0xff, 0xff], "addl   $0xfffff000, %ecx         ; imm = 0xFFFFF000 "),
        (&[0x48, 0xb8, 0xb8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], "movabsq $-0x48, %rax"),
        (&[0x66, 0xb8, 0xff, 0xff], "movw   $0xffff, %ax              ; imm = 0xFFFF "),
        (&[0x6a, 0xff], "pushq  $-0x1"),
        (&[0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff], "cmpq   $-0x1000, %rax            ; imm = 0xF000 "),
        (&[0xb0, 0xff], "movb   $-0x1, %al"),
        (&[0xcd, 0x80], "int    $0x80"),
        (&[0xc1, 0xe0, 0x04], "shll   $0x4, %eax"),
        (&[0xf6, 0xc1, 0x80], "testb  $-0x80, %cl"),
        (&[0x0f, 0xba, 0xe0, 0xff], "btl    $0xff, %eax"),
        (&[0x48, 0x69, 0xc0, 0x00, 0xf0, 0xff, 0xff], "imulq  $-0x1000, %rax, %rax      ; imm = 0xF000 "),
        (&[0xc8, 0x10, 0x00, 0x80], "enter  $0x10, $-0x80"),
        (&[0x48, 0x81, 0xec, 0x18, 0x01, 0x00, 0x00], "subq   $0x118, %rsp              ; imm = 0x118 "),
    ];

    fn ours(bytes: &[u8]) -> String {
        let mut image = retrace_decoder::image::Image::new();
        image.add_raw("code", 0x1000, bytes.to_vec());
        disassemble(&image, &Symbolizer::new(), 0x1000).text
    }

    /// LLDB 22's `-k` kinds, as it printed them for these encodings.
    #[test]
    fn control_flow_kinds_are_lldbs() {
        let cases: &[(&[u8], &str)] = &[
            (&[0x0f, 0x05], "far call"),                                   // syscall
            (&[0xe8, 0, 0, 0, 0], "call"),                                 // call rel32
            (&[0xff, 0xd0], "call"),                                       // call *%rax
            (&[0xff, 0xe0], "jump"),                                       // jmp *%rax
            (&[0xf3, 0x0f, 0x1e, 0xfa], "other"),                          // endbr64
            (&[0xc3], "return"),
            (&[0x0f, 0x84, 0, 0, 0, 0], "cond jump"),                      // je rel32
            (&[0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x07], "cond jump"),          // EVEX vmovdqu64: LLDB's reading
            (&[0xc5, 0xfe, 0x7f, 0x07], "other"),                          // VEX vmovdqu
            (&[0x48, 0x89, 0xe5], "other"),                                // movq %rsp, %rbp
        ];
        for (bytes, kind) in cases {
            assert_eq!(control_flow_kind(bytes), *kind, "{bytes:02x?}");
        }
    }

    #[test]
    fn immediates_are_spelled_as_llvm_spells_them() {
        for (bytes, expected) in IMMEDIATES {
            assert_eq!(&ours(bytes), expected, "{bytes:02x?}");
        }
    }

    /// The table above is LLVM's: `llvm-mc-22` disassembles each encoding
    /// to the same operands (its layout aside).
    #[test]
    fn immediates_agree_with_llvm_mc() {
        let Ok(out) = std::process::Command::new("llvm-mc-22")
            .args(["--disassemble", "-triple=x86_64", "--print-imm-hex"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                let text: Vec<String> = IMMEDIATES.iter().flat_map(|(b, _)| b.iter().map(|x| format!("{x:#04x}"))).collect();
                child.stdin.take().unwrap().write_all(text.join(" ").as_bytes())?;
                child.wait_with_output()
            })
        else {
            eprintln!("skipped: llvm-mc-22 not installed (Debian package llvm-22)");
            return;
        };
        let normal = |s: &str| s.replace('#', ";").split_whitespace().collect::<Vec<_>>().join(" ");
        let llvm: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(normal).filter(|l| !l.is_empty()).collect();
        let table: Vec<String> = IMMEDIATES.iter().map(|(_, text)| normal(text)).collect();
        assert_eq!(llvm, table);
    }
}
