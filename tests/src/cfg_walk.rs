//! Generated traces: a random walk over a real binary's control-flow graph
//! (random branch outcomes, random indirect targets among function entries,
//! returns that mostly match their calls), encoded as Intel PT by the
//! recorder's [`ThreadPtWriter`] with a random PSB spacing. The walk knows
//! exactly which instructions "executed", so decoders can be checked against
//! it and against each other on code paths no test program reaches.

use object::{Object, ObjectSymbol, SymbolKind};
use retrace_collector::pt_writer::ThreadPtWriter;
use retrace_decoder::image::{Image, Memory};
use retrace_decoder::x86::{classify, ExecMode, FlowKind, InsnInfo};

use crate::rng::Rng;

/// Function entry points of an ELF file loaded at `load_address` (same
/// placement rule as `Image::add_elf`).
pub fn function_entries(elf: &[u8], load_address: u64) -> Vec<u64> {
    let file = object::File::parse(elf).expect("an ELF file");
    let lowest = object::Object::segments(&file).map(|s| object::ObjectSegment::address(&s)).min().unwrap_or(0);
    let slide = load_address.wrapping_sub(lowest & !0xfff);
    let mut entries: Vec<u64> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .map(|s| s.address().wrapping_add(slide))
        .collect();
    entries.sort_unstable();
    entries.dedup();
    entries
}

/// The library the generated-trace tests walk: Debian's libc.
pub const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
/// Where the walks place it.
pub const LIBC_LOAD: u64 = 0x7f00_0000_0000;

/// [`LIBC`] loaded at [`LIBC_LOAD`] and its function entries; `None` when the
/// file is missing.
pub fn libc_image() -> Option<(Image, Vec<u64>)> {
    let bytes = std::fs::read(LIBC).ok()?;
    let entries = function_entries(&bytes, LIBC_LOAD);
    let mut image = Image::new();
    image.add_elf(LIBC, bytes, LIBC_LOAD).ok()?;
    Some((image, entries))
}

/// Options for [`walk`].
#[derive(Debug, Clone, Copy)]
pub struct WalkOptions {
    /// Random seed.
    pub seed: u64,
    /// Instructions to execute.
    pub instructions: u64,
    /// Bytes between PSBs.
    pub psb_period: usize,
    /// Interleave timing packets (CYC, MTC, TSC, CBR) as hardware does.
    pub timing: bool,
    /// About one in this many branches that write a packet is followed by
    /// an internal buffer overflow (OVF), `0` for none. Half resolve with
    /// tracing on (OVF + FUP: the walk goes on at the branch target or at
    /// a random function, the skipped part lost), half with tracing off
    /// (OVF, then TIP.PGE at a random function).
    pub overflow_one_in: u64,
}

/// A generated trace and the instructions it encodes.
#[derive(Debug)]
pub struct Walk {
    /// The Intel PT stream.
    pub trace: Vec<u8>,
    /// Every executed instruction a decoder can know of, in order.
    pub executed: Vec<u64>,
    /// For each overflow, the number of instructions in `executed` before it.
    pub overflows: Vec<usize>,
}

fn insn_at(image: &Image, ip: u64) -> Option<InsnInfo> {
    let mut bytes = [0u8; 15];
    let n = image.read(ip, &mut bytes);
    classify(&bytes[..n], ip, ExecMode::Bits64)
}

/// Walks the code of `image` from random `entries`.
pub fn walk(image: &Image, entries: &[u64], options: WalkOptions) -> Walk {
    let mut rng = Rng::new(options.seed);
    let mut writer = ThreadPtWriter::new(options.psb_period);
    let mut executed = Vec::with_capacity(options.instructions as usize);
    let mut stack: Vec<u64> = Vec::new();
    let mut overflows = Vec::new();
    let mut tsc = 1_000_000u64;
    // Instructions passed since the last packet-producing one: a decoder binds
    // an asynchronous stop (FUP) to the first time its IP is reached after the
    // last packet, so a loop without packets must be left before it closes.
    let mut since_packet = std::collections::HashSet::new();
    let random_entry = |rng: &mut Rng| entries[rng.below(entries.len() as u64) as usize];
    let mut ip = random_entry(&mut rng);
    while (executed.len() as u64) < options.instructions {
        tsc += 1;
        let Some(insn) = insn_at(image, ip) else {
            // Undecodable or unmapped: the walk leaves through an asynchronous
            // stop and resumes at a random function.
            writer.disable_async(ip);
            since_packet.clear();
            stack.clear();
            ip = random_entry(&mut rng);
            continue;
        };
        let fallthrough = ip + insn.len as u64;
        let next = match insn.kind {
            FlowKind::Other => fallthrough,
            FlowKind::Jump { target } => target,
            FlowKind::Call { target } => {
                stack.push(fallthrough);
                target
            }
            FlowKind::CondBranch { target } => {
                if rng.coin() {
                    target
                } else {
                    fallthrough
                }
            }
            FlowKind::IndirectJump => random_entry(&mut rng),
            FlowKind::IndirectCall => {
                stack.push(fallthrough);
                random_entry(&mut rng)
            }
            FlowKind::Return => match stack.pop() {
                Some(address) if !rng.one_in(10) => address,
                _ => random_entry(&mut rng),
            },
            FlowKind::Syscall => fallthrough,
            FlowKind::FarTransfer => random_entry(&mut rng),
        };
        if stack.len() > 200 {
            stack.remove(0);
        }
        let makes_packets = !matches!(insn.kind, FlowKind::Other | FlowKind::Jump { .. } | FlowKind::Call { .. });
        if makes_packets {
            since_packet.clear();
        } else {
            since_packet.insert(ip);
            if since_packet.contains(&next) {
                // This instruction would close a loop with no packets: stop before it.
                writer.disable_async(ip);
                since_packet.clear();
                stack.clear();
                ip = random_entry(&mut rng);
                continue;
            }
        }
        writer.executed(ip, &insn, Some(next), tsc);
        executed.push(ip);
        if options.timing {
            if rng.one_in(40) {
                writer.timing(retrace_decoder::packet::Packet::Cyc(rng.bits(12)));
            }
            if rng.one_in(300) {
                writer.timing(retrace_decoder::packet::Packet::Mtc(rng.bits(8) as u8));
            }
            if rng.one_in(2000) {
                tsc += 1000;
                writer.timing(retrace_decoder::packet::Packet::Tsc(tsc));
            }
            if rng.one_in(5000) {
                // A core:bus ratio of 0 means nothing; libipt rejects it.
                writer.timing(retrace_decoder::packet::Packet::Cbr(rng.range(1, 255) as u8));
            }
        }
        ip = next;
        if makes_packets && writer.is_enabled() && options.overflow_one_in > 0 && rng.one_in(options.overflow_one_in) {
            overflows.push(executed.len());
            since_packet.clear();
            stack.clear();
            match rng.below(3) {
                0 => writer.overflow(Some(ip)),
                1 => {
                    ip = random_entry(&mut rng);
                    writer.overflow(Some(ip));
                }
                _ => {
                    writer.overflow(None);
                    ip = random_entry(&mut rng);
                }
            }
        }
    }
    writer.disable_async(ip);
    Walk { trace: writer.into_bytes(), executed, overflows }
}
