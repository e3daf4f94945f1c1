//! Function-call trees from a decoded flow, built by LLDB 22's rules
//! (`thread trace dump function-calls`): each tree is a call made of traced
//! segments (runs of instructions in one function, between its calls), each
//! segment possibly ending in a nested call; a return to a function never
//! seen makes it the root, with the calls so far as its untraced prefix; a
//! run of errors is a tree of its own.
//!
//! The builder knows nothing of symbols: the caller describes each
//! instruction with a [`Site`] (which function it is in, whether it starts
//! one, how it transfers control).

use crate::item::Item;

pub use crate::x86::CallEffect;

/// What the builder needs to know about one instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl CallForest {
    /// Builds the forest of `items` (item ids are their positions), asking
    /// `site` about each instruction address.
    pub fn build<S: PartialEq + Clone>(items: impl IntoIterator<Item = Item>, mut site: impl FnMut(u64) -> Site<S>) -> Self {
        let mut builder = Builder { forest: CallForest::default(), sites: Vec::new(), last: None, previous: None };
        for (id, item) in items.into_iter().enumerate() {
            match item {
                Item::Instruction { ip } => {
                    let here = site(ip);
                    builder.instruction(id as u64, ip, here.clone());
                    builder.previous = Some(here);
                }
                Item::Error { .. } => {
                    builder.error(id as u64);
                    builder.previous = None;
                }
                Item::Event(_) => {}
            }
        }
        builder.forest
    }
}

struct Builder<S> {
    forest: CallForest,
    /// The site of each call's last instruction, by call index.
    sites: Vec<Option<Site<S>>>,
    /// The call the last item went to.
    last: Option<usize>,
    /// The site of the previous instruction (none after an error).
    previous: Option<Site<S>>,
}

impl<S: PartialEq + Clone> Builder<S> {
    fn new_call(&mut self, is_error: bool, id: u64, ip: u64, site: Option<Site<S>>, parent: Option<usize>) -> usize {
        let tag = site.as_ref().map_or(0, |s| s.tag);
        self.forest.calls.push(Call {
            is_error,
            untraced_prefix: None,
            segments: vec![Segment { first: id, last: id, first_ip: ip, last_ip: ip, tags: (tag, tag), nested: None }],
            parent,
        });
        self.sites.push(site);
        self.forest.calls.len() - 1
    }

    fn new_root(&mut self, is_error: bool, id: u64, ip: u64, site: Option<Site<S>>) -> usize {
        let call = self.new_call(is_error, id, ip, site, None);
        self.forest.roots.push(call);
        call
    }

    fn extend(&mut self, call: usize, id: u64, ip: u64, site: Option<Site<S>>) {
        let segment = self.forest.calls[call].segments.last_mut().expect("a call has a segment");
        segment.last = id;
        segment.last_ip = ip;
        segment.tags.1 = site.as_ref().map_or(0, |s| s.tag);
        self.sites[call] = site;
    }

    fn nested(&mut self, call: usize, id: u64, ip: u64, site: Site<S>) -> usize {
        let nested = self.new_call(false, id, ip, Some(site), Some(call));
        self.forest.calls[call].segments.last_mut().expect("a call has a segment").nested = Some(nested);
        nested
    }

    fn error(&mut self, id: u64) {
        match self.last {
            Some(call) if self.forest.calls[call].is_error => self.extend(call, id, 0, None),
            _ => self.last = Some(self.new_root(true, id, 0, None)),
        }
    }

    fn instruction(&mut self, id: u64, ip: u64, site: Site<S>) {
        let Some(last) = self.last.filter(|&call| !self.forest.calls[call].is_error) else {
            self.last = Some(self.new_root(false, id, ip, Some(site)));
            return;
        };
        if site.entry {
            self.last = Some(self.nested(last, id, ip, site));
            return;
        }
        let previous = self.previous.clone();
        if previous.as_ref().is_some_and(|p| p.scope == site.scope) {
            self.extend(last, id, ip, Some(site));
            return;
        }
        let effect = self.sites[last].as_ref().map_or(CallEffect::Other, |s| s.effect);
        let returned = match effect {
            CallEffect::Call => false,
            CallEffect::Return => true,
            // Leaving an inlined function is a return; anything else a call.
            CallEffect::Other => previous.is_some_and(|p| p.inlined),
        };
        self.last = Some(if returned { self.returned(last, id, ip, site) } else { self.nested(last, id, ip, site) });
    }

    /// Control came back to `site` from `last`: to the nearest caller in
    /// that function, or else to a new root whose untraced prefix is the
    /// tree so far.
    fn returned(&mut self, last: usize, id: u64, ip: u64, site: Site<S>) -> usize {
        let mut ancestor = self.forest.calls[last].parent;
        while let Some(call) = ancestor {
            if self.sites[call].as_ref().is_some_and(|s| s.scope == site.scope) {
                let tags = (site.tag, site.tag);
                self.forest.calls[call].segments.push(Segment { first: id, last: id, first_ip: ip, last_ip: ip, tags, nested: None });
                self.sites[call] = Some(site);
                return call;
            }
            ancestor = self.forest.calls[call].parent;
        }
        let prefix = self.forest.roots.pop();
        let root = self.new_root(false, id, ip, Some(site));
        self.forest.calls[root].untraced_prefix = prefix;
        root
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
