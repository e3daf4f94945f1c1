//! Opening a bundle: its threads decoded into one timeline (in the order
//! a full-state recording's schedule gives), its modules' layout and
//! read-only pages, the auxiliary vector and library list made from them,
//! and its full state indexed.

use std::path::Path;
use std::sync::Arc;

use libc::{AT_BASE, AT_ENTRY, AT_NULL, AT_PAGESZ, AT_PHDR, AT_PHENT, AT_PHNUM};
use object::elf::{PF_R, PF_W, PF_X};
use object::{Object, ObjectSegment};
use retrace_collector::process::Mapping;
use retrace_decoder::bundle::load::LoadedBundle;
use retrace_decoder::bundle::paths::{BundleDir, Reach, ALLOW_HINT};
use retrace_decoder::flow::{decode_parallel_with, FlowOptions};

use super::{Module, ReadOnlyPages, SavedTrace, RENDEZVOUS_PAGE};
use crate::inferior::libraries::{library_list_xml, LinkMapEntry};
use crate::inferior::recorded_state::{RecordedState, Releasing, StreamBytes};
use crate::inferior::replay::ReplaySession;
use crate::inferior::scratch::Scratch;
use crate::inferior::timeline::{Delivery, RecordedThread, Timeline};
use crate::inferior::{InferiorError, StopReason};

/// The page the replay answers `qShlibInfoAddr` with ([`RENDEZVOUS_PAGE`]):
/// a pointer to a copy of the dynamic linker's rendezvous (`struct
/// r_debug`) right after it, as it stands while the bundle's libraries
/// are loaded (`RT_CONSISTENT`, the list's first link map, the linker's
/// `_dl_debug_state` and base), zeros after. LLDB finds a Linux program's
/// libraries by reading the rendezvous before it asks for the library list
/// (`qXfer:libraries-svr4:read`), which it then takes whole; without it it
/// lists the program and the dynamic linker only. (The process's own
/// rendezvous, in the linker's writable data, is not recorded; LLDB reads
/// memory in 512-byte lines, so it is served on a page of its own.)
fn rendezvous_page(linker: &Module, first_link_map: u64) -> Vec<u8> {
    let brk = linker.rendezvous.map_or(0, |(_, brk)| brk);
    let mut page = Vec::with_capacity(4096);
    page.extend_from_slice(&(RENDEZVOUS_PAGE + 8).to_le_bytes());
    page.extend_from_slice(&1u32.to_le_bytes()); // r_version
    page.extend_from_slice(&[0; 4]);
    page.extend_from_slice(&first_link_map.to_le_bytes()); // r_map
    page.extend_from_slice(&brk.to_le_bytes()); // r_brk
    page.extend_from_slice(&0u32.to_le_bytes()); // r_state: RT_CONSISTENT
    page.extend_from_slice(&[0; 4]);
    page.extend_from_slice(&linker.bias.to_le_bytes()); // r_ldbase
    page.resize(4096, 0);
    page
}

/// Reads the layout of one module file: the module and its read-only pages.
fn module(bundle_dir: &BundleDir, entry: &retrace_decoder::bundle::BundleModule) -> Result<(Module, Vec<ReadOnlyPages>), InferiorError> {
    let path = bundle_dir.module(entry.file.as_deref(), &entry.system_path).map_err(|e| InferiorError::Bundle(format!("{e}: {ALLOW_HINT}")))?;
    let bytes = std::fs::read(&path).map_err(|e| InferiorError::Bundle(format!("{}: {e}", path.display())))?;
    let file = object::File::parse(&*bytes).map_err(|e| InferiorError::Bundle(format!("{}: not a readable ELF file: {e}", path.display())))?;
    let lowest = file.segments().map(|s| s.address()).min().ok_or_else(|| InferiorError::Bundle(format!("{}: no loadable segments", path.display())))?;
    // The bundle's load address is where the lowest segment's page starts
    // (LLDB's `loadAddress`), as the decoder's image reads it.
    let bias = entry.load_address.0.wrapping_sub(lowest & !0xfff);
    let mut dynamic = None;
    let mut program_headers = None;
    let mut interpreter = None;
    let mut unchanging = Vec::new();
    let path_text = path.to_string_lossy().into_owned();
    if let object::File::Elf64(elf) = &file {
        use object::read::elf::ProgramHeader as _;
        let endian = elf.endian();
        let header = elf.elf_header();
        let phoff = header.e_phoff.get(endian);
        let phnum = header.e_phnum.get(endian) as u64;
        for ph in elf.elf_program_headers() {
            let (kind, vaddr, memsz, flags) = (ph.p_type(endian), ph.p_vaddr(endian), ph.p_memsz(endian), ph.p_flags(endian));
            match kind {
                object::elf::PT_DYNAMIC => dynamic = Some(vaddr.wrapping_add(bias)),
                object::elf::PT_PHDR => program_headers = Some((vaddr.wrapping_add(bias), phnum)),
                object::elf::PT_INTERP => {
                    interpreter = ph.data(endian, &*bytes).ok().map(|d| String::from_utf8_lossy(d.split(|&b| b == 0).next().unwrap_or(&[])).into_owned())
                }
                object::elf::PT_LOAD => {
                    if program_headers.is_none() && ph.p_offset(endian) <= phoff && phoff < ph.p_offset(endian).saturating_add(ph.p_filesz(endian)) {
                        program_headers = Some((vaddr.wrapping_add(phoff - ph.p_offset(endian)).wrapping_add(bias), phnum));
                    }
                    if flags & PF_W == 0 {
                        // Mapped in whole pages, as the kernel maps it: the
                        // file's bytes around the segment come along.
                        let start = vaddr.wrapping_add(bias);
                        let page = start & !0xfff;
                        unchanging.push(Mapping {
                            start: page,
                            end: start.wrapping_add(memsz).wrapping_add(0xfff) & !0xfff,
                            readable: flags & PF_R != 0,
                            writable: false,
                            executable: flags & PF_X != 0,
                            offset: ph.p_offset(endian).saturating_sub(start.wrapping_sub(page)),
                            path: entry.system_path.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
    } else {
        return Err(InferiorError::Bundle(format!("{}: not a 64-bit ELF file", path.display())));
    }
    let symbol = |name: &str| {
        use object::ObjectSymbol as _;
        file.symbols().chain(file.dynamic_symbols()).find(|symbol| symbol.name() == Ok(name)).map(|symbol| symbol.address().wrapping_add(bias))
    };
    let rendezvous = symbol("_r_debug").map(|r_debug| (r_debug, symbol("_dl_debug_state").unwrap_or(0)));
    let module = Module {
        path: path_text,
        rendezvous,
        bias,
        dynamic,
        entry: file.entry().wrapping_add(bias),
        program_headers,
        interpreter,
        system_path: entry.system_path.clone(),
    };
    drop(file);
    let bytes: Arc<[u8]> = bytes.into();
    let pages = unchanging.into_iter().map(|mapping| ReadOnlyPages { mapping, file: bytes.clone() }).collect();
    Ok((module, pages))
}

fn push_auxv(auxv: &mut Vec<u8>, key: u64, value: u64) {
    auxv.extend_from_slice(&key.to_le_bytes());
    auxv.extend_from_slice(&value.to_le_bytes());
}

/// The stop reporting a recorded end: an exit status, or the signal that
/// killed the program (`None` for a signal number Linux does not have).
fn exit_stop(exit: retrace_decoder::bundle::RecordedExit) -> Option<StopReason> {
    match exit {
        retrace_decoder::bundle::RecordedExit::Status(code) => Some(StopReason::Exited(code as u8)),
        retrace_decoder::bundle::RecordedExit::Signal(number) => {
            let signal = nix::sys::signal::Signal::try_from(number).ok()?;
            Some(StopReason::Terminated(crate::signals::to_gdb(signal)))
        }
    }
}

/// Refuses a full-state stream none of whose scheduled threads is one of
/// the trace's: another recording's (another program's, or another run's:
/// thread ids differ between runs), whose values would be wrong at every
/// position.
fn refuse_a_stranger_stream(trace_json: &Path, threads: &[RecordedThread], runs: &[(u32, u64, Option<u64>)]) -> Result<(), InferiorError> {
    let ours = |tid: u32| threads.iter().any(|t| t.tid == u64::from(tid));
    if runs.is_empty() || runs.iter().any(|&(tid, _, _)| ours(tid)) {
        return Ok(());
    }
    let mut theirs: Vec<u32> = runs.iter().map(|&(tid, _, _)| tid).collect();
    theirs.sort_unstable();
    theirs.dedup();
    let list = |ids: Vec<String>| ids.join(", ");
    Err(InferiorError::Bundle(format!(
        "{}: the full-state stream is another recording's: its threads ({}) are none of the trace's ({}); open the bundle it was recorded with, or record again",
        trace_json.display(),
        list(theirs.iter().take(8).map(u32::to_string).collect()),
        list(threads.iter().take(8).map(|t| t.tid.to_string()).collect()),
    )))
}

/// The threads' runs in the order a full-state stream's schedule gives
/// (tid, first step, count or to the end), as timeline slices; a run that
/// does not follow its thread's last is left out, and what the schedule
/// does not place of a thread follows at the end (every instruction is in
/// the timeline once).
fn scheduled_slices(threads: &[RecordedThread], runs: &[(u32, u64, Option<u64>)]) -> Vec<(usize, u64, u64)> {
    let mut next = vec![0u64; threads.len()];
    let mut slices = Vec::new();
    for &(tid, first, count) in runs {
        let Some(thread) = threads.iter().position(|t| t.tid == u64::from(tid)) else { continue };
        let total = threads[thread].history.instructions();
        if first != next[thread] || first >= total {
            continue;
        }
        let count = count.unwrap_or(total - first).min(total - first);
        if count > 0 {
            slices.push((thread, first, count));
            next[thread] += count;
        }
    }
    for (thread, t) in threads.iter().enumerate() {
        let total = t.history.instructions();
        if next[thread] < total {
            tracing::warn!(tid = t.tid, placed = next[thread], total, "the full-state schedule does not place all of the thread's instructions: the rest follows at the end");
            slices.push((thread, next[thread], total - next[thread]));
        }
    }
    slices
}

/// Loads a bundle's full-state `stream` (in `dir`) over `timeline`:
/// mapped files are read from the bundle's copies (`modules/<path>`).
fn load_full_state(dir: &BundleDir, stream: StreamBytes, timeline: &Timeline) -> Result<RecordedState, String> {
    let mut file = |path: &[u8]| std::fs::read(dir.copy_of_mapped(&String::from_utf8_lossy(path))?).ok();
    let (started, bytes) = (std::time::Instant::now(), stream.bytes().len());
    let state = RecordedState::load(timeline, stream, &mut file)?;
    tracing::info!(bytes, seconds = started.elapsed().as_secs_f64(), "full state indexed");
    Ok(state)
}

impl SavedTrace {
    /// Loads and decodes the bundle described by `trace_json`, reading the
    /// files it names as far as `reach` ([`Reach::Inside`]: nothing outside
    /// its directory). The error is a sentence for the user.
    pub fn open(trace_json: &Path, reach: Reach) -> Result<Self, InferiorError> {
        let trace_json = &retrace_decoder::bundle::load::trace_json_of(trace_json);
        let loaded: LoadedBundle = retrace_decoder::bundle::load::load_with(trace_json, reach).map_err(|e| InferiorError::Bundle(e.to_string()))?;
        for warning in &loaded.warnings {
            tracing::warn!("{warning}");
        }
        if loaded.processes.len() != 1 {
            return Err(InferiorError::Bundle(format!(
                "{}: the trace holds {} program images (the process exec'd); replay serves one program: open the bundle of one image",
                trace_json.display(),
                loaded.processes.len()
            )));
        }
        let process = &loaded.description.processes[0];
        let pid = u32::try_from(process.pid).map_err(|_| InferiorError::Bundle(format!("{}: pid {} is not a Linux pid", trace_json.display(), process.pid)))?;
        let image = &loaded.processes[0].image;
        // Item ids as `retrace dump instructions` and LLDB give them.
        let options = FlowOptions { lldb_psb_slices: true };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let started = std::time::Instant::now();
        let threads: Vec<RecordedThread> = loaded
            .threads
            .iter()
            .map(|t| RecordedThread { tid: t.tid, history: decode_parallel_with(&t.trace, image, cores, options) })
            .collect();
        tracing::info!(seconds = started.elapsed().as_secs_f64(), "traces decoded");
        if threads.iter().all(|t| t.history.instructions() == 0) {
            return Err(InferiorError::Bundle(format!("{}: the trace holds no instructions", trace_json.display())));
        }
        let dir = BundleDir::of_trace_json(trace_json, reach);
        let full_state = match loaded.description.retrace.as_ref().and_then(|r| r.full_state.as_ref()) {
            Some(name) => {
                let path = dir.file(name).map_err(|e| InferiorError::Bundle(format!("{}: the full-state stream: {e}: {ALLOW_HINT}", trace_json.display())))?;
                Some(StreamBytes::open(&path).map_err(|e| InferiorError::Bundle(format!("{}: the full-state stream {}: {e}", trace_json.display(), path.display())))?)
            }
            None => None,
        };
        // A full-state recording says the one order the threads ran in.
        // Without it (no clock common to the threads) their interleaving is
        // not known: one thread after another, in bundle order.
        let timeline = match &full_state {
            Some(stream) => {
                // Up to any damage (the state's load says where it is);
                // a file that is no stream at all is refused.
                let started = std::time::Instant::now();
                let reading = Releasing::new(stream);
                let schedule = retrace_decoder::full_state::schedule_of(reading.take_while(|item| item.as_ref().map_or_else(|e| e.offset == 0, |_| true)))
                    .map_err(|e| InferiorError::Bundle(format!("{}: {e}", trace_json.display())))?;
                tracing::info!(seconds = started.elapsed().as_secs_f64(), runs = schedule.runs.len(), deliveries = schedule.deliveries.len(), "full-state schedule read");
                refuse_a_stranger_stream(trace_json, &threads, &schedule.runs)?;
                let slices = scheduled_slices(&threads, &schedule.runs);
                let deliveries = schedule
                    .deliveries
                    .iter()
                    .filter_map(|d| Some(Delivery { thread: threads.iter().position(|t| t.tid == u64::from(d.tid))?, index: d.at, ip: d.ip }))
                    .collect();
                Timeline::scheduled(threads, slices, deliveries)
            }
            None => Timeline::sequential(threads),
        };
        let mut modules = Vec::new();
        let mut unchanging = Vec::new();
        for entry in &process.modules {
            if entry.system_path.starts_with('[') && entry.file.is_none() {
                continue; // [vdso] without a copy
            }
            match module(&dir, entry) {
                Ok((module, pages)) => {
                    modules.push(module);
                    unchanging.extend(pages);
                }
                Err(e) => tracing::warn!("module {} left out: {e}", entry.system_path),
            }
        }
        let Some(program) = modules.first().cloned() else {
            return Err(InferiorError::Bundle(format!("{}: the trace lists no readable module (the program's file is needed)", trace_json.display())));
        };
        let mut auxv = Vec::new();
        if let Some((phdr, phnum)) = program.program_headers {
            push_auxv(&mut auxv, AT_PHDR, phdr);
            push_auxv(&mut auxv, AT_PHENT, 56);
            push_auxv(&mut auxv, AT_PHNUM, phnum);
        }
        push_auxv(&mut auxv, AT_PAGESZ, 4096);
        let interpreter = program.interpreter.as_ref().and_then(|i| {
            let name = Path::new(i).file_name()?;
            modules.iter().skip(1).find(|m| Path::new(&m.system_path).file_name() == Some(name))
        });
        push_auxv(&mut auxv, AT_BASE, interpreter.map_or(0, |m| m.bias));
        push_auxv(&mut auxv, AT_ENTRY, program.entry);
        push_auxv(&mut auxv, AT_NULL, 0);
        let entries: Vec<LinkMapEntry> = modules
            .iter()
            .skip(1)
            .filter_map(|m| {
                // `lm` only names the entry (there is no link map to read):
                // the dynamic section's address is unique per module.
                let dynamic = m.dynamic?;
                Some(LinkMapEntry { link_map: dynamic, base: m.bias, dynamic, name: m.path.clone().into_bytes() })
            })
            .collect();
        let libraries = library_list_xml(&entries);
        let rendezvous = match (interpreter, entries.first()) {
            (Some(linker), Some(first)) if linker.rendezvous.is_some() => Some(rendezvous_page(linker, first.link_map)),
            _ => None,
        };
        let state = match full_state {
            Some(stream) => Some(load_full_state(&dir, stream, &timeline).map_err(|e| InferiorError::Bundle(format!("{}: {e}", trace_json.display())))?),
            None => None,
        };
        let tsc_conversion = loaded.description.tsc_perf_zero_conversion.as_ref().and_then(|c| {
            Some(crate::inferior::TscConversion { time_mult: c.time_mult, time_shift: c.time_shift, time_zero: c.time_zero.parse().ok()? })
        });
        Ok(SavedTrace {
            pid,
            bundle: trace_json.to_path_buf(),
            timeline,
            traces: loaded.threads.iter().map(|t| (t.tid, t.trace.clone())).collect(),
            trace_served: false,
            cpu: loaded.description.cpu_info.clone(),
            tsc_conversion,
            unchanging,
            modules,
            auxv,
            libraries,
            rendezvous,
            session: ReplaySession::new(),
            step: None,
            killed: false,
            exit: state.as_ref().and(loaded.description.retrace.as_ref().and_then(|r| r.exit)).and_then(exit_stop),
            fatal_signal_reported: true,
            state,
            scratch: Scratch::default(),
            diversion: None,
            libraries_at: Default::default(),
        })
    }
}
