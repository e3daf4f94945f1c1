//! Function-call trees from a decoded flow, built by LLDB 22's rules
//! (`thread trace dump function-calls`): each tree is a call made of traced
//! segments (runs of instructions in one function, between its calls), each
//! segment possibly ending in a nested call; a return to a function never
//! seen makes it the root, with the calls so far as its untraced prefix; a
//! run of errors is a tree of its own.
//!
//! Two layers. [`CallTracker`] follows the calls as instructions come and
//! reports each segment as it closes, in trace order (which is the order a
//! depth-first dump prints them in), keeping only the calls still open: its
//! memory is the call depth, not the trace. [`CallForest`] collects those
//! reports into trees for whoever wants them whole.
//!
//! Neither knows symbols: the caller describes each instruction with a
//! [`Site`] (which function it is in, whether it starts one, how it
//! transfers control), and may describe a straight run of instructions of
//! one function at once ([`CallTracker::run`]).

use crate::item::Item;

pub use crate::x86::CallEffect;

/// What the builder needs to know about one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site<S> {
    /// The function it belongs to (LLDB: same module, symbol, function and
    /// containing inlined block); compared for equality only.
    pub scope: S,
    /// It is the first instruction of its function, symbol or inlined block.
    pub entry: bool,
    /// It is inside an inlined function.
    pub inlined: bool,
    /// How it transfers control.
    pub effect: CallEffect,
    /// The caller's handle for this description (e.g. an index into its
    /// table of symbol contexts), kept at each segment's ends.
    pub tag: u32,
}

/// A run of consecutive instructions of one call (item ids, inclusive; events
/// may lie between), and the call it ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Item id of the first instruction (or error).
    pub first: u64,
    /// Item id of the last instruction (or error).
    pub last: u64,
    /// Address of the first instruction (0 for errors).
    pub first_ip: u64,
    /// Address of the last instruction (0 for errors).
    pub last_ip: u64,
    /// The [`Site::tag`]s of the first and last instructions (0 for errors).
    pub tags: (u32, u32),
    /// The call made at the end of the segment, as an index into
    /// [`CallForest::calls`].
    pub nested: Option<usize>,
}

/// One function call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// A run of trace errors rather than a call.
    pub is_error: bool,
    /// When the trace starts inside this call: the calls made before it was
    /// seen (index into [`CallForest::calls`]).
    pub untraced_prefix: Option<usize>,
    /// Its traced segments, in order (at least one).
    pub segments: Vec<Segment>,
    /// The calling call, when it was seen.
    pub parent: Option<usize>,
}

/// All calls of one thread; `roots` are the trees in trace order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallForest {
    /// Every call; trees refer to each other by index.
    pub calls: Vec<Call>,
    /// The roots of the trees.
    pub roots: Vec<usize>,
}

/// What [`CallTracker`] reports, in trace order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEvent {
    /// A new tree starts: a root call with nothing before it (the first
    /// instruction, or the first after errors), or a run of errors.
    Tree {
        /// A run of trace errors rather than a call.
        is_error: bool,
    },
    /// Control returned above the current tree's root, to a function not
    /// seen: a new root call (depth 0) starts, and the tree so far becomes
    /// its untraced prefix.
    Reroot,
    /// A segment closed (the next one started, or the trace ended).
    Segment {
        /// The depth of its call below the current root (0: the root).
        depth: u32,
        /// The segment ([`Segment::nested`] is left empty).
        segment: Segment,
        /// It ends in a call: the next segment reported is that call's
        /// first, one level deeper.
        nests: bool,
    },
}

/// An open call on the tracker's stack.
#[derive(Debug, Clone)]
struct Frame<S> {
    is_error: bool,
    /// The site of its last instruction so far.
    site: Option<Site<S>>,
}

/// Follows calls instruction by instruction (or run by run) and hands each
/// closed segment to a sink, as [`CallEvent`]s.
#[derive(Debug, Clone)]
pub struct CallTracker<S> {
    /// The calls open from the current root down to the current call.
    stack: Vec<Frame<S>>,
    /// The current call's open segment.
    open: Option<Segment>,
    /// The site of the previous instruction (none after an error).
    previous: Option<Site<S>>,
}

impl<S: PartialEq + Clone> Default for CallTracker<S> {
    fn default() -> Self {
        CallTracker { stack: Vec::new(), open: None, previous: None }
    }
}

impl<S: PartialEq + Clone> CallTracker<S> {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// The [`Site::tag`] of the last instruction given (none at the start
    /// and after an error): LLDB keeps that instruction's symbol context for
    /// the next one while its address stays in the context's range, so a
    /// caller describing sites needs it.
    pub fn previous_tag(&self) -> Option<u32> {
        self.previous.as_ref().map(|s| s.tag)
    }

    /// Item `id`, an instruction at `ip` described by `site`.
    pub fn instruction(&mut self, id: u64, ip: u64, site: Site<S>, sink: &mut impl FnMut(CallEvent)) {
        let last_is_error = self.stack.last().is_none_or(|f| f.is_error);
        if last_is_error {
            self.new_tree(false, id, ip, Some(site.clone()), sink);
        } else if site.entry {
            self.nested(id, ip, site.clone(), sink);
        } else if self.previous.as_ref().is_some_and(|p| p.scope == site.scope) {
            self.extend(id, ip, Some(site.clone()));
        } else {
            let effect = self.stack.last().and_then(|f| f.site.as_ref()).map_or(CallEffect::Other, |s| s.effect);
            let returned = match effect {
                CallEffect::Call => false,
                CallEffect::Return => true,
                // Leaving an inlined function is a return; anything else a call.
                CallEffect::Other => self.previous.as_ref().is_some_and(|p| p.inlined),
            };
            if returned {
                self.returned(id, ip, site.clone(), sink);
            } else {
                self.nested(id, ip, site.clone(), sink);
            }
        }
        self.previous = Some(site);
    }

    /// Items `first_id..=last_id`, instructions from `first_ip` to
    /// `last_ip` in one straight run of one function: the first described
    /// by `first`, the last by `last`, none in between entering a function
    /// ([`Site::entry`]) or in another scope. The same as giving each
    /// instruction in turn.
    #[allow(clippy::too_many_arguments)]
    pub fn run(&mut self, first_id: u64, first_ip: u64, first: Site<S>, last_id: u64, last_ip: u64, last: Site<S>, sink: &mut impl FnMut(CallEvent)) {
        self.instruction(first_id, first_ip, first, sink);
        if last_id != first_id {
            self.extend(last_id, last_ip, Some(last.clone()));
            self.previous = Some(last);
        }
    }

    /// Item `id`, a trace error.
    pub fn error(&mut self, id: u64, sink: &mut impl FnMut(CallEvent)) {
        match self.stack.last() {
            Some(frame) if frame.is_error => self.extend(id, 0, None),
            _ => self.new_tree(true, id, 0, None, sink),
        }
        self.previous = None;
    }

    /// The trace ended: the open segment closes.
    pub fn finish(&mut self, sink: &mut impl FnMut(CallEvent)) {
        self.close(false, sink);
        self.stack.clear();
        self.previous = None;
    }

    fn close(&mut self, nests: bool, sink: &mut impl FnMut(CallEvent)) {
        if let Some(segment) = self.open.take() {
            sink(CallEvent::Segment { depth: self.stack.len().saturating_sub(1) as u32, segment, nests });
        }
    }

    fn open(&mut self, id: u64, ip: u64, site: &Option<Site<S>>) {
        let tag = site.as_ref().map_or(0, |s| s.tag);
        self.open = Some(Segment { first: id, last: id, first_ip: ip, last_ip: ip, tags: (tag, tag), nested: None });
    }

    fn new_tree(&mut self, is_error: bool, id: u64, ip: u64, site: Option<Site<S>>, sink: &mut impl FnMut(CallEvent)) {
        self.close(false, sink);
        sink(CallEvent::Tree { is_error });
        self.stack.clear();
        self.open(id, ip, &site);
        self.stack.push(Frame { is_error, site });
    }

    fn extend(&mut self, id: u64, ip: u64, site: Option<Site<S>>) {
        let segment = self.open.as_mut().expect("a call has an open segment");
        segment.last = id;
        segment.last_ip = ip;
        segment.tags.1 = site.as_ref().map_or(0, |s| s.tag);
        self.stack.last_mut().expect("a call is open").site = site;
    }

    fn nested(&mut self, id: u64, ip: u64, site: Site<S>, sink: &mut impl FnMut(CallEvent)) {
        self.close(true, sink);
        let site = Some(site);
        self.open(id, ip, &site);
        self.stack.push(Frame { is_error: false, site });
    }

    /// Control came back to `site`: to the nearest caller in that function,
    /// or else to a new root whose untraced prefix is the tree so far.
    fn returned(&mut self, id: u64, ip: u64, site: Site<S>, sink: &mut impl FnMut(CallEvent)) {
        self.close(false, sink);
        let callers = self.stack.len().saturating_sub(1);
        let caller = self.stack[..callers].iter().rposition(|f| f.site.as_ref().is_some_and(|s| s.scope == site.scope));
        match caller {
            Some(depth) => self.stack.truncate(depth + 1),
            None => {
                sink(CallEvent::Reroot);
                self.stack.clear();
                self.stack.push(Frame { is_error: false, site: None });
            }
        }
        let site = Some(site);
        self.open(id, ip, &site);
        self.stack.last_mut().expect("a call is open").site = site;
    }
}

impl CallForest {
    /// Builds the forest of `items` (item ids are their positions), asking
    /// `site` about each instruction address.
    pub fn build<S: PartialEq + Clone>(items: impl IntoIterator<Item = Item>, mut site: impl FnMut(u64) -> Site<S>) -> Self {
        let mut tracker = CallTracker::new();
        let mut forest = ForestSink::default();
        let mut sink = |event| forest.event(event);
        for (id, item) in items.into_iter().enumerate() {
            match item {
                Item::Instruction { ip } => tracker.instruction(id as u64, ip, site(ip), &mut sink),
                Item::Error { .. } => tracker.error(id as u64, &mut sink),
                Item::Event(_) => {}
            }
        }
        tracker.finish(&mut sink);
        forest.forest
    }
}

/// Collects [`CallEvent`]s into a [`CallForest`].
#[derive(Default)]
struct ForestSink {
    forest: CallForest,
    /// The calls open at each depth below the current root (the root first).
    open: Vec<usize>,
    /// The last segment closed asked for a nested call.
    nesting: bool,
}

impl ForestSink {
    fn event(&mut self, event: CallEvent) {
        let forest = &mut self.forest;
        match event {
            CallEvent::Tree { is_error } => {
                forest.calls.push(Call { is_error, untraced_prefix: None, segments: Vec::new(), parent: None });
                forest.roots.push(forest.calls.len() - 1);
                self.open = vec![forest.calls.len() - 1];
                self.nesting = false;
            }
            CallEvent::Reroot => {
                let prefix = forest.roots.pop();
                forest.calls.push(Call { is_error: false, untraced_prefix: prefix, segments: Vec::new(), parent: None });
                forest.roots.push(forest.calls.len() - 1);
                self.open = vec![forest.calls.len() - 1];
                self.nesting = false;
            }
            CallEvent::Segment { depth, segment, nests } => {
                let depth = depth as usize;
                if self.nesting {
                    // The segment before opened this call.
                    let parent = self.open[depth - 1];
                    forest.calls.push(Call { is_error: false, untraced_prefix: None, segments: Vec::new(), parent: Some(parent) });
                    let call = forest.calls.len() - 1;
                    self.open.truncate(depth);
                    self.open.push(call);
                    let last = forest.calls[parent].segments.last_mut().expect("the nesting segment");
                    last.nested = Some(call);
                } else {
                    self.open.truncate(depth + 1);
                }
                self.nesting = nests;
                forest.calls[self.open[depth]].segments.push(segment);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{Event, FlowError};

    /// Sites for a toy program: the function is the address's 0x100 page;
    /// 0x?00 starts a function; addresses ending in 0xc call, 0xe return.
    fn site(ip: u64) -> Site<u64> {
        let effect = match ip & 0xf {
            0xc => CallEffect::Call,
            0xe => CallEffect::Return,
            _ => CallEffect::Other,
        };
        Site { scope: ip >> 8, entry: ip & 0xff == 0, inlined: false, effect, tag: 0 }
    }

    fn insns(ips: &[u64]) -> Vec<Item> {
        ips.iter().map(|&ip| Item::Instruction { ip }).collect()
    }

    fn shape(forest: &CallForest, call: usize, out: &mut Vec<String>, depth: usize) {
        let c = &forest.calls[call];
        if let Some(prefix) = c.untraced_prefix {
            out.push(format!("{}prefix", "  ".repeat(depth)));
            shape(forest, prefix, out, depth + 1);
        }
        for s in &c.segments {
            out.push(format!("{}{}[{}, {}]", "  ".repeat(depth), if c.is_error { "error " } else { "" }, s.first, s.last));
            if let Some(n) = s.nested {
                shape(forest, n, out, depth + 1);
            }
        }
    }

    fn render(forest: &CallForest) -> Vec<String> {
        let mut out = Vec::new();
        for &root in &forest.roots {
            out.push("tree".into());
            shape(forest, root, &mut out, 0);
        }
        out
    }

    #[test]
    fn calls_nest_and_returns_resume_the_caller() {
        // main (0x1xx) calls f (0x2xx) at 0x10c, f returns at 0x20e.
        let forest = CallForest::build(insns(&[0x104, 0x10c, 0x200, 0x204, 0x20e, 0x110, 0x114]), site);
        assert_eq!(render(&forest), ["tree", "[0, 1]", "  [2, 4]", "[5, 6]"]);
    }

    #[test]
    fn a_return_to_an_unseen_caller_becomes_the_root_with_an_untraced_prefix() {
        // Starts inside f, returns to main, which returns to an unseen caller.
        let forest = CallForest::build(insns(&[0x204, 0x20e, 0x110, 0x11e, 0x304]), site);
        assert_eq!(render(&forest), ["tree", "prefix", "  prefix", "    [0, 1]", "  [2, 3]", "[4, 4]"]);
    }

    #[test]
    fn errors_are_trees_of_their_own_and_events_are_skipped() {
        let error = Item::Error { offset: 0, error: FlowError::Overflow };
        let mut items = insns(&[0x104, 0x108]);
        items.push(Item::Event(Event::HardwareDisabled));
        items.push(error.clone());
        items.push(error);
        items.extend(insns(&[0x108, 0x10c, 0x200]));
        let forest = CallForest::build(items, site);
        assert_eq!(render(&forest), ["tree", "[0, 1]", "tree", "error [3, 4]", "tree", "[5, 6]", "  [7, 7]"]);
    }

    #[test]
    fn entering_a_function_by_a_jump_is_a_call() {
        // A jump (not a call) to f's first instruction, and a jump from the
        // middle of f to g's middle (no call, no return: assumed a call).
        let forest = CallForest::build(insns(&[0x104, 0x200, 0x204, 0x308]), site);
        assert_eq!(render(&forest), ["tree", "[0, 0]", "  [1, 2]", "    [3, 3]"]);
    }
}
