//! Linux perf **jitdump** files: the code a JIT compiler generated, with its
//! addresses, names and load times, as V8 (`node --perf-prof`), CPython 3.13
//! (`-X perf_jit`), wasmtime and the JVM agent write them for `perf inject --jit`.
//!
//! The format is perf's `tools/perf/Documentation/jitdump-specification.txt`
//! ("JITDUMP specification version 2") as perf's reader (`util/jitdump.c`)
//! interprets it; where the two disagree this module follows perf:
//!
//! * a 40-byte file header (readers use its `total_size`), then records of a
//!   16-byte header (`id`, `total_size`, `timestamp`) and a payload, one after
//!   the other with **no alignment**, all in the producer's byte order (the
//!   magic tells which);
//! * `JIT_CODE_LOAD`'s code is the **last** `code_size` bytes of the record;
//! * `JIT_CODE_DEBUG_INFO` and `JIT_CODE_UNWINDING_INFO` describe the **next**
//!   `JIT_CODE_LOAD`; unwinding data is `.eh_frame` first, `.eh_frame_hdr` last;
//! * a DEBUG_INFO entry named `"\xff"` is "the same file as the previous entry".
//!
//! Layers, as elsewhere in the decoder:
//!
//! * [`Jitdump::parse`] reads the file header; [`Jitdump::records`] is a
//!   zero-copy iterator of `Result<`[`Record`]`, `[`JitdumpError`]`>`, each
//!   with its byte offset. A record whose fields do not fit inside it is an
//!   error item and the walk goes on at the next record (sizes are trusted);
//!   a record size below 16 or past the end of the file is a last error item,
//!   since jitdump has no marker to resynchronise at.
//! * [`CodeRegions`] — the functions those records describe: one
//!   [`CodeRegion`] per LOAD, moved by MOVE records over time, queried by
//!   address and time ([`CodeRegions::region_at`]), and placed into an
//!   [`Image`] (for the flow decoder) and a [`Symbolizer`] (for names).
//!
//! Real producers' quirks this reader copes with: unaligned records (V8,
//! CPython, wasmtime), version 1 headers (perf accepts only 1; the spec text
//! says 2; both are read), `elf_mach` 0 and garbage `pad1` (CPython), DEBUG_INFO
//! records padded to 8 bytes whose entry names hold heap garbage with embedded
//! NULs (V8 11.3: entries after such a name are meaningless, but the record
//! walk stays in step), the same address loaded under two `code_index`es.
//!
//! Files: [`file`] (the format), [`regions`] (the function index),
//! `image_and_symbols` (the joining).

pub mod file;
mod image_and_symbols;
pub mod regions;

pub use file::*;
pub use regions::{CodeRegion, CodeRegions, Placement};

#[cfg(test)]
mod tests;
