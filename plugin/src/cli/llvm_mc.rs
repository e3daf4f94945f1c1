//! LLVM's own x86 disassembler (its MC layer, through the C API of
//! `libLLVM.so.22`, loaded at run time): the text LLDB 22 prints in its
//! trace dumps is LLVM 22's instruction printer's, operand spelling and MC
//! comments (`; imm = 0x…`, `; xmm2 = zero,…`) included, so retrace asks
//! the same printer. LLDB links the same library (Debian's `libllvm22`,
//! which `lldb-22` depends on). Without it the dump falls back to its own
//! printer (`iced-x86` with LLVM's spellings where they are known to
//! differ). `RETRACE_LIBLLVM` names another file.
//!
//! The C API has no "print branch targets as addresses" switch (LLDB sets
//! it in the printer directly): the caller puts the target address in.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

type CreateDisasm = unsafe extern "C" fn(*const c_char, *mut c_void, c_int, *mut c_void, *mut c_void) -> *mut c_void;
type SetDisasmOptions = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
type DisasmInstruction = unsafe extern "C" fn(*mut c_void, *mut u8, u64, u64, *mut c_char, usize) -> usize;
type DisasmDispose = unsafe extern "C" fn(*mut c_void);
type Initialize = unsafe extern "C" fn();

/// `LLVMDisassembler_Option_PrintImmHex`.
const PRINT_IMM_HEX: u64 = 2;
/// `LLVMDisassembler_Option_SetInstrComments`.
const SET_INSTR_COMMENTS: u64 = 8;

/// The library's entry points (the handle stays open for the process).
struct Library {
    create: CreateDisasm,
    set_options: SetDisasmOptions,
    disassemble: DisasmInstruction,
    dispose: DisasmDispose,
}

/// The files tried, newest name first.
const CANDIDATES: [&str; 3] = ["libLLVM.so.22.1", "libLLVM-22.so", "/usr/lib/llvm-22/lib/libLLVM.so.22.1"];

fn library() -> Option<&'static Library> {
    static LIBRARY: OnceLock<Option<Library>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let names: Vec<String> = match std::env::var("RETRACE_LIBLLVM") {
                Ok(path) if !path.is_empty() => vec![path],
                _ => CANDIDATES.iter().map(|s| s.to_string()).collect(),
            };
            let loaded = names.iter().find_map(|name| open(name));
            if loaded.is_none() {
                tracing::info!(tried = ?names, "libLLVM 22 not found: disassembly by retrace's own printer");
            }
            loaded
        })
        .as_ref()
}

fn open(name: &str) -> Option<Library> {
    let path = CString::new(name).ok()?;
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols are the
    // LLVM C API's, whose signatures the types above spell.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            return None;
        }
        let symbol = |name: &CStr| {
            let found = libc::dlsym(handle, name.as_ptr());
            (!found.is_null()).then_some(found)
        };
        let library = Library {
            create: std::mem::transmute::<*mut c_void, CreateDisasm>(symbol(c"LLVMCreateDisasm")?),
            set_options: std::mem::transmute::<*mut c_void, SetDisasmOptions>(symbol(c"LLVMSetDisasmOptions")?),
            disassemble: std::mem::transmute::<*mut c_void, DisasmInstruction>(symbol(c"LLVMDisasmInstruction")?),
            dispose: std::mem::transmute::<*mut c_void, DisasmDispose>(symbol(c"LLVMDisasmDispose")?),
        };
        for init in [c"LLVMInitializeX86TargetInfo", c"LLVMInitializeX86TargetMC", c"LLVMInitializeX86Disassembler"] {
            std::mem::transmute::<*mut c_void, Initialize>(symbol(init)?)();
        }
        tracing::debug!(library = name, "disassembly by LLVM's MC printer");
        Some(library)
    }
}

/// One instruction as LLVM prints it, cut as LLDB cuts it: the first word,
/// the rest (a tab after a prefix's instruction stays), and the printer's comments (each line ended
/// by a space, as LLDB joins them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    /// What LLDB calls the opcode name: `movq`, or a prefix such as `rep`.
    pub mnemonic: String,
    /// The operands (after a prefix: the instruction and its operands).
    pub operands: String,
    /// `imm = 0x186A0 `, `xmm2 = zero,… `, or empty.
    pub comment: String,
    /// The bytes LLVM decoded (a lone `lock` prefix decodes as one byte).
    pub length: usize,
}

/// A disassembler context of this thread (LLVM's are not shareable).
struct Context {
    library: &'static Library,
    context: *mut c_void,
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: made by LLVMCreateDisasm, disposed once.
        unsafe { (self.library.dispose)(self.context) }
    }
}

thread_local! {
    static CONTEXT: Option<Context> = library().and_then(|library| {
        // SAFETY: a NUL-terminated triple, no symbolizer callbacks.
        let context = unsafe { (library.create)(c"x86_64-pc-linux-gnu".as_ptr(), std::ptr::null_mut(), 0, std::ptr::null_mut(), std::ptr::null_mut()) };
        if context.is_null() {
            return None;
        }
        // SAFETY: a live context.
        unsafe { (library.set_options)(context, PRINT_IMM_HEX | SET_INSTR_COMMENTS) };
        Some(Context { library, context })
    });
}

/// Whether LLVM's printer is at hand.
pub fn available() -> bool {
    CONTEXT.with(|context| context.is_some())
}

/// The instruction at `pc` whose bytes start `bytes`, as LLVM 22 prints it;
/// `None` without the library or when LLVM decodes no instruction there.
pub fn print(bytes: &[u8], pc: u64) -> Option<Printed> {
    CONTEXT.with(|context| {
        let context = context.as_ref()?;
        let mut copy = [0u8; 16];
        let n = bytes.len().min(copy.len());
        copy[..n].copy_from_slice(&bytes[..n]);
        let mut text = [0 as c_char; 512];
        // SAFETY: the buffers outlive the call and their sizes are given.
        let length = unsafe { (context.library.disassemble)(context.context, copy.as_mut_ptr(), n as u64, pc, text.as_mut_ptr(), text.len()) };
        if length == 0 {
            return None;
        }
        // SAFETY: LLVM NUL-terminates within the buffer.
        let text = unsafe { CStr::from_ptr(text.as_ptr()) }.to_string_lossy();
        Some(split(&text, length))
    })
}

/// Cuts the C API's text (`\tmnemonic\toperands    # comment`, comment
/// lines after the first on lines of their own) as LLDB cuts the
/// printer's output: `[ \t]*([^ \t]+)[ \t]*(.*)`.
fn split(text: &str, length: usize) -> Printed {
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("");
    // AT&T text has no `#`: the first one starts the comments.
    let (instruction, first_comment) = match first.find('#') {
        Some(at) => (&first[..at], Some(&first[at + 1..])),
        None => (first, None),
    };
    let mut comment = String::new();
    for line in first_comment.into_iter().chain(lines.filter_map(|line| line.trim_start().strip_prefix('#'))) {
        comment.push_str(line.strip_prefix(' ').unwrap_or(line).trim_end());
        comment.push(' ');
    }
    let instruction = instruction.trim_start_matches([' ', '\t']).trim_end();
    let (mnemonic, rest) = instruction.split_once([' ', '\t']).unwrap_or((instruction, ""));
    let operands = rest.trim_start_matches([' ', '\t']).to_string();
    Printed { mnemonic: mnemonic.to_string(), operands, comment, length }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_api_text_is_cut_as_lldb_cuts_the_printer_output() {
        let printed = split("\tpslldq\t$0x6, %xmm2                     # xmm2 = zero,zero,xmm2[0,1]", 5);
        assert_eq!(printed.mnemonic, "pslldq");
        assert_eq!(printed.operands, "$0x6, %xmm2");
        assert_eq!(printed.comment, "xmm2 = zero,zero,xmm2[0,1] ");
        let printed = split("\trep\t\tstosq\t%rax, %es:(%rdi)", 3);
        assert_eq!((printed.mnemonic.as_str(), printed.operands.as_str(), printed.comment.as_str()), ("rep", "stosq\t%rax, %es:(%rdi)", ""));
        let printed = split("\tlock", 1);
        assert_eq!((printed.mnemonic.as_str(), printed.operands.as_str(), printed.length), ("lock", "", 1));
    }

    /// Against the library itself, where it is installed (lldb-22 brings it).
    #[test]
    fn llvm_prints_what_lldb_22_shows() {
        if !available() {
            eprintln!("libLLVM 22 not installed: skipped");
            return;
        }
        let cases: [(&str, &str, &str, &str); 6] = [
            ("d1f8", "sarl", "%eax", ""),
            ("662e0f1f840000000000", "nopw", "%cs:(%rax,%rax)", ""),
            ("4887f7", "xchgq", "%rdi, %rsi", ""),
            ("48c7c0a0860100", "movq", "$0x186a0, %rax", "imm = 0x186A0 "),
            ("660f73fa06", "pslldq", "$0x6, %xmm2", "xmm2 = zero,zero,zero,zero,zero,zero,xmm2[0,1,2,3,4,5,6,7,8,9] "),
            ("f00fb115561e1500", "lock", "", ""),
        ];
        for (hex, mnemonic, operands, comment) in cases {
            let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            let printed = print(&bytes, 0x1000).unwrap_or_else(|| panic!("{hex}"));
            assert_eq!((printed.mnemonic.as_str(), printed.operands.as_str(), printed.comment.as_str()), (mnemonic, operands, comment), "{hex}");
        }
    }
}
