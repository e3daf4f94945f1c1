//! The function-call trees as LLDB's text, printed on several threads a
//! chunk of the call log at a time.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::io::Write;

use retrace_decoder::calls::{CallEvent, Segment};
use retrace_decoder::history::AddressHasher;
use retrace_decoder::symbols::{Placements, SymbolContext};

use super::{CallLog, ContextTable, TreePosition};

/// Prints a log's text on `workers` threads, a chunk of events each at a
/// time, and gives the chunks' text to `out` in order. At most a few
/// chunks wait to be written.
pub(super) fn print_text(
    out: &mut impl FnMut(crate::cli::output::Gathered) -> std::io::Result<()>,
    log: &CallLog,
    chains: &[Vec<u32>],
    placements: &Placements,
    contexts: &ContextTable,
    workers: usize,
) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};
    const AHEAD: usize = 6;
    let chunks = log.chunks.len();
    let next = AtomicUsize::new(0);
    // The number of chunks written, and whether to stop (an error).
    let written = Mutex::new(0usize);
    let moved = Condvar::new();
    let stop = AtomicBool::new(false);
    let (done, results) = std::sync::mpsc::channel::<(usize, std::io::Result<crate::cli::output::Gathered>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            let done = done.clone();
            let mut printer = TextPrinter::new(chains, placements);
            let (next, written, moved, stop) = (&next, &written, &moved, &stop);
            scope.spawn(move || {
                // A worker that panics stops the others, which would
                // otherwise wait for its chunk to be written.
                let _stops_on_panic = StopOnPanic(written, moved, stop);
                loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= chunks {
                    return;
                }
                {
                    let mut count = written.lock().expect("not poisoned");
                    while k >= *count + AHEAD && !stop.load(Ordering::Relaxed) {
                        count = moved.wait(count).expect("not poisoned");
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let result = log.chunk(k).and_then(|(bytes, state)| {
                    let mut part = crate::cli::output::Gathered::default();
                    printer.at = state.at;
                    CallLog::decode(&bytes, state, &mut |event| printer.event(&mut part, contexts, event))?;
                    Ok(part)
                });
                if done.send((k, result)).is_err() {
                    return;
                }
                }
            });
        }
        drop(done);
        let mut waiting = std::collections::BTreeMap::new();
        let mut want = 0;
        let outcome = (|| {
            for (k, part) in results.iter() {
                waiting.insert(k, part);
                while let Some(part) = waiting.remove(&want) {
                    out(part?)?;
                    want += 1;
                    *written.lock().expect("not poisoned") = want;
                    moved.notify_all();
                }
            }
            Ok(())
        })();
        stop_workers(&written, &moved, &stop);
        drop(results);
        outcome
    })
}

/// Tells [`print_text`]'s workers to stop: set under the lock the waiting
/// workers check it under, so none misses the wake-up.
fn stop_workers(written: &std::sync::Mutex<usize>, moved: &std::sync::Condvar, stop: &std::sync::atomic::AtomicBool) {
    let held = written.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(held);
    moved.notify_all();
}

/// Calls [`stop_workers`] when dropped while its thread panics.
struct StopOnPanic<'a>(&'a std::sync::Mutex<usize>, &'a std::sync::Condvar, &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            stop_workers(self.0, self.1, self.2);
        }
    }
}

/// LLDB's text, printed as segments close: a tree's header and the
/// untraced-prefix lines of all its roots first (from [`ChainsSink`]),
/// then each segment indented by its depth plus the roots still to wrap it.
pub(super) struct TextPrinter<'a> {
    chains: &'a [Vec<u32>],
    placements: &'a Placements,
    at: TreePosition,
    /// Segments' texts by their ends' tags and addresses, and their size.
    texts: HashMap<(u32, u32, u64, u64), Box<[u8]>, BuildHasherDefault<AddressHasher>>,
    text_bytes: usize,
}

impl<'a> TextPrinter<'a> {
    pub(super) fn new(chains: &'a [Vec<u32>], placements: &'a Placements) -> Self {
        TextPrinter { chains, placements, at: TreePosition::default(), texts: HashMap::default(), text_bytes: 0 }
    }

    pub(super) fn event(&mut self, out: &mut impl crate::cli::output::Indented, contexts: &ContextTable, event: CallEvent) -> std::io::Result<()> {
        self.at.follow(&event);
        match event {
            CallEvent::Tree { .. } => {
                let tree = self.at.tree.expect("a tree");
                write!(out, "\n[call tree #{tree}]\n")?;
                let chain = &self.chains[tree];
                for (depth, &tag) in chain.iter().rev().enumerate() {
                    out.indent(depth)?;
                    writeln!(out, "{}", call_name(contexts.get(tag)))?;
                }
            }
            CallEvent::Reroot => {}
            CallEvent::Segment { depth, segment, .. } => {
                let wrapping = self.at.tree.map_or(0, |t| self.chains[t].len()) - self.at.root;
                out.indent(wrapping + depth as usize)?;
                if self.at.error_tree {
                    write!(out, "<tracing errors>")?;
                } else {
                    self.cached_segment(out, contexts, &segment)?;
                }
                // `  [first, last]`, without the formatting machinery.
                out.write_all(b"  [")?;
                out.write_all(itoa::Buffer::new().format(segment.first).as_bytes())?;
                out.write_all(b", ")?;
                out.write_all(itoa::Buffer::new().format(segment.last).as_bytes())?;
                out.write_all(b"]\n")?;
            }
        }
        Ok(())
    }

    /// [`Self::segment`], remembered for segments with the same ends
    /// (a loop's body, a function called again) up to a budget of bytes.
    fn cached_segment(&mut self, out: &mut impl Write, contexts: &ContextTable, segment: &Segment) -> std::io::Result<()> {
        const BUDGET: usize = 4 << 20;
        let key = (segment.tags.0, segment.tags.1, segment.first_ip, segment.last_ip);
        if let Some(text) = self.texts.get(&key) {
            return out.write_all(text);
        }
        let mut text = Vec::new();
        self.segment(&mut text, contexts, segment)?;
        out.write_all(&text)?;
        if self.text_bytes < BUDGET {
            self.text_bytes += text.len() + 48;
            self.texts.insert(key, text.into());
        }
        Ok(())
    }

    /// `<where it starts> to <where it ends>`, as LLDB words it: the end is
    /// `line:column` when both ends have a source line, else the offset in
    /// the function (`<+N>`) or the module address.
    fn segment(&self, out: &mut impl Write, contexts: &ContextTable, segment: &Segment) -> std::io::Result<()> {
        let (first, last) = (contexts.get(segment.tags.0), contexts.get(segment.tags.1));
        self.stop_context(out, first, segment.first_ip)?;
        match (&first.line, &last.line) {
            (Some(_), Some((_, line, column))) => write!(out, " to {line}:{column}"),
            _ => match last.function_base() {
                Some(base) if segment.last_ip < base => write!(out, " to <-{}>{}", base - segment.last_ip, last.position().unwrap_or_default()),
                Some(base) => write!(out, " to <+{}>{}", segment.last_ip - base, last.position().unwrap_or_default()),
                None => write!(out, " to {}", self.module_address(segment.last_ip)),
            },
        }
    }

    /// LLDB's stop context with module: ``module`function + off [inlined] f
    /// at file:line:col``, or ``module`module[0x…]`` without a function.
    fn stop_context(&self, out: &mut impl Write, context: &SymbolContext, ip: u64) -> std::io::Result<()> {
        match (&context.module, &context.function) {
            (Some(_), Some(_)) => write!(out, "{}", context.describe(ip)),
            (Some(module), None) => write!(out, "{module}`{}", self.module_address(ip)),
            (None, _) => write!(out, "{ip:#018x}"),
        }
    }

    fn module_address(&self, ip: u64) -> String {
        match self.placements.file_address(ip) {
            Some((module, address)) => format!("{module}[{address:#018x}]"),
            None => format!("{ip:#018x}"),
        }
    }
}

/// A call's name as LLDB gives it: ``module`function`` (the inlined
/// function's name inside one, as LLDB's `SymbolContext::GetFunctionName`
/// gives it) — the line for a call seen only by returning to it, and a
/// timeline slice's name.
pub(in crate::cli) fn call_name(context: &SymbolContext) -> String {
    match (&context.module, &context.function) {
        (None, _) => "(none)".into(),
        (Some(module), None) => format!("{module}`(none)"),
        (Some(module), Some((name, _))) => format!("{module}`{}", context.inlined.as_ref().unwrap_or(name)),
    }
}

