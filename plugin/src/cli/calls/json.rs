//! The function-call trees as LLDB's JSON (`--json`, `--pretty-json`),
//! streamed from the call log.

use std::io::Write;

use retrace_decoder::calls::CallEvent;
use serde_json::ser::Formatter;

use super::CallLog;

/// LLDB's JSON for one thread's trees, written as segments close: each
/// tree an object with `untracedPrefixSegment` (its `nestedCall` the tree
/// the root returned above) when the trace starts inside it, then
/// `tracedSegments` with ids as strings and `nestedCall`s. `formatter` is
/// serde_json's compact or pretty layout.
pub(super) fn write_json<F: Formatter>(out: &mut impl Write, formatter: F, log: &CallLog, chains: &[Vec<u32>]) -> std::io::Result<()> {
    let mut writer = JsonTrees { f: formatter, chains, tree: None, open: Vec::new() };
    writer.f.begin_array(out)?;
    log.replay(&mut |event| writer.event(out, event))?;
    writer.close_tree(out)?;
    writer.f.end_array(out)
}

struct JsonTrees<'a, F> {
    f: F,
    chains: &'a [Vec<u32>],
    tree: Option<usize>,
    /// Per open call, from the root: no segment written in it yet.
    open: Vec<bool>,
}

impl<F: Formatter> JsonTrees<'_, F> {
    fn event(&mut self, out: &mut impl Write, event: CallEvent) -> std::io::Result<()> {
        match event {
            CallEvent::Tree { .. } => {
                self.close_tree(out)?;
                let tree = self.tree.map_or(0, |t| t + 1);
                self.f.begin_array_value(out, tree == 0)?;
                self.tree = Some(tree);
                // The roots that will wrap this one, outermost first.
                for _ in 0..self.chains[tree].len() {
                    self.f.begin_object(out)?;
                    self.key(out, "untracedPrefixSegment", true)?;
                    self.f.begin_object(out)?;
                    self.key(out, "nestedCall", true)?;
                }
                self.open_call(out, true)?;
            }
            CallEvent::Reroot => {
                self.close_to(out, 1)?;
                self.close_call(out)?;
                // The untraced-prefix object ends; the new root's segments follow.
                self.f.end_object_value(out)?;
                self.f.end_object(out)?;
                self.f.end_object_value(out)?;
                self.open_call(out, false)?;
            }
            CallEvent::Segment { depth, segment, nests } => {
                self.close_to(out, depth as usize + 1)?;
                let first = std::mem::replace(self.open.last_mut().expect("an open call"), false);
                self.f.begin_array_value(out, first)?;
                self.f.begin_object(out)?;
                self.key(out, "firstInstructionId", true)?;
                self.string(out, &segment.first.to_string())?;
                self.key(out, "lastInstructionId", false)?;
                self.string(out, &segment.last.to_string())?;
                if nests {
                    self.key(out, "nestedCall", false)?;
                    self.open_call(out, true)?;
                } else {
                    self.f.end_object(out)?;
                    self.f.end_array_value(out)?;
                }
            }
        }
        Ok(())
    }

    /// `"tracedSegments": [` of a call whose object is open.
    fn open_call(&mut self, out: &mut impl Write, first_key: bool) -> std::io::Result<()> {
        if first_key {
            self.f.begin_object(out)?;
        }
        self.key(out, "tracedSegments", first_key)?;
        self.f.begin_array(out)?;
        self.open.push(true);
        Ok(())
    }

    /// `]}` of the innermost call.
    fn close_call(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.open.pop();
        self.f.end_array(out)?;
        self.f.end_object_value(out)?;
        self.f.end_object(out)
    }

    /// Closes nested calls until `depth` calls are open (each closes its
    /// parent's segment object too).
    fn close_to(&mut self, out: &mut impl Write, depth: usize) -> std::io::Result<()> {
        while self.open.len() > depth {
            self.close_call(out)?;
            self.f.end_object_value(out)?;
            self.f.end_object(out)?;
            self.f.end_array_value(out)?;
        }
        Ok(())
    }

    fn close_tree(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.open.is_empty() {
            return Ok(());
        }
        self.close_to(out, 1)?;
        self.close_call(out)?;
        self.f.end_array_value(out)
    }

    fn key(&mut self, out: &mut impl Write, name: &str, first: bool) -> std::io::Result<()> {
        self.f.begin_object_key(out, first)?;
        self.string_only(out, name)?;
        self.f.end_object_key(out)?;
        self.f.begin_object_value(out)
    }

    fn string(&mut self, out: &mut impl Write, value: &str) -> std::io::Result<()> {
        self.string_only(out, value)?;
        self.f.end_object_value(out)
    }

    fn string_only(&mut self, out: &mut impl Write, value: &str) -> std::io::Result<()> {
        self.f.begin_string(out)?;
        self.f.write_string_fragment(out, value)?;
        self.f.end_string(out)
    }
}

