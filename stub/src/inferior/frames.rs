//! A thread's history seen from one of its frames: the instructions it
//! executed before a point, newest first, each with its call depth
//! relative to the frame that stands at that point — what reverse
//! `next`, `step` and `finish` need to find where they land, without
//! walking callees instruction by instruction on the client's side.
//!
//! Depth is counted from the instructions' kinds, going backwards: a
//! `ret` was executed one frame deeper than the instruction after it, a
//! `call` one frame shallower, and the instruction a signal interrupted
//! one frame shallower than its handler's first instruction. (A handler
//! returns through `ret` to the signal restorer, which `rt_sigreturn`s to
//! the interrupted code: the restorer counts at the interrupted frame's
//! depth, outside its function.) `longjmp` and exception unwinding are not
//! followed.

use std::collections::HashMap;

/// How an executed instruction moves between frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flow {
    /// `call`: the next instruction runs one frame deeper.
    Call,
    /// `ret`: the next instruction runs one frame shallower.
    Return,
    /// Anything else.
    Other,
    /// Not an instruction: a signal's delivery, a step of a recording
    /// where the thread stood interrupted before its handler ran (the
    /// handler's first instruction, next, is one frame deeper).
    Delivery,
}

impl Flow {
    /// The kind of the instruction encoded at the start of `code`
    /// (undecodable bytes count as [`Flow::Other`]).
    pub fn of(code: &[u8], pc: u64) -> Flow {
        use iced_x86::{Decoder, DecoderOptions, Mnemonic};
        // By mnemonic: iced's flow control counts `syscall` as a call.
        match Decoder::with_ip(64, code, pc, DecoderOptions::NONE).decode().mnemonic() {
            Mnemonic::Call => Flow::Call,
            Mnemonic::Ret | Mnemonic::Retf => Flow::Return,
            _ => Flow::Other,
        }
    }
}

/// [`Flow::of`] by address, each address's code read once by `read`
/// (which fills what it can of the buffer and says how much).
pub fn flows_by_address(mut read: impl FnMut(u64, &mut [u8]) -> usize) -> impl FnMut(u64) -> Flow {
    let mut kinds = HashMap::new();
    move |pc| {
        *kinds.entry(pc).or_insert_with(|| {
            let mut code = [0u8; 15];
            let n = read(pc, &mut code);
            Flow::of(&code[..n], pc)
        })
    }
}

/// One instruction a thread executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Executed {
    /// Its id (the thread's instruction number, as `retrace dump
    /// instructions` counts them).
    pub id: u64,
    /// Its address.
    pub pc: u64,
    /// A signal handler's first instruction came next (the signal arrived
    /// after this instruction).
    pub interrupted: bool,
}

/// An instruction of [`frame_history`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameStep {
    /// Its id.
    pub id: u64,
    /// Its address.
    pub pc: u64,
    /// Its frame relative to the starting one: 0 the same, 1 a callee
    /// (only its `ret` is listed), -1 the caller (the instruction that
    /// entered the frame: its `call`, or the one a signal interrupted).
    pub depth: i32,
    /// For a callee: the latest of its instructions (its own callees'
    /// included) at one of the addresses asked about, (id, pc).
    pub stop: Option<(u64, u64)>,
}

/// The instructions of `executed` (a thread's, newest first, ending just
/// before the starting point) that ran in the starting frame, each
/// callee's `ret`, and the instruction that entered the frame, after which
/// the list ends; at most `max` of them.
///
/// Each callee listed also says the latest of its instructions at one of
/// `stops` (sorted), if any.
pub fn frame_history(executed: impl IntoIterator<Item = Executed>, mut flow: impl FnMut(u64) -> Flow, max: usize, stops: &[u64]) -> Vec<FrameStep> {
    let mut listed: Vec<FrameStep> = Vec::new();
    // The depth of the position after the instruction being looked at.
    let mut depth_after = 0i32;
    for step in executed {
        if listed.len() >= max {
            break;
        }
        let kind = flow(step.pc);
        let mut depth = depth_after - i32::from(step.interrupted);
        match kind {
            Flow::Call => depth -= 1,
            Flow::Return => depth += 1,
            Flow::Other | Flow::Delivery => {}
        }
        if depth <= 0 || (depth == 1 && kind == Flow::Return) {
            listed.push(FrameStep { id: step.id, pc: step.pc, depth, stop: None });
        }
        if depth > 0 && stops.binary_search(&step.pc).is_ok() {
            if let Some(callee) = listed.last_mut().filter(|callee| callee.depth == 1 && callee.stop.is_none()) {
                callee.stop = Some((step.id, step.pc));
            }
        }
        if depth < 0 {
            break;
        }
        depth_after = depth;
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program's instruction kinds by address: 0x10 calls, 0x20 returns.
    fn kinds(pc: u64) -> Flow {
        match pc {
            0x10 | 0x11 => Flow::Call,
            0x20 | 0x21 => Flow::Return,
            _ => Flow::Other,
        }
    }

    fn run(pcs: &[(u64, bool)]) -> Vec<Executed> {
        // Oldest first in `pcs`; handed over newest first.
        pcs.iter().enumerate().rev().map(|(id, &(pc, interrupted))| Executed { id: id as u64, pc, interrupted }).collect()
    }

    fn listed(steps: &[FrameStep]) -> Vec<(u64, i32)> {
        steps.iter().map(|s| (s.id, s.depth)).collect()
    }

    #[test]
    fn callees_are_skipped_but_their_ret_and_the_call_into_the_frame_are_listed() {
        // 0: caller's call (0x10) → frame: 1, 2, call 0x11 → callee 4, 5,
        // ret 0x20 → frame 7; we stand after 7.
        let executed = run(&[(0x10, false), (0x1, false), (0x2, false), (0x11, false), (0x4, false), (0x5, false), (0x20, false), (0x7, false)]);
        let steps = frame_history(executed, kinds, 100, &[]);
        assert_eq!(listed(&steps), vec![(7, 0), (6, 1), (3, 0), (2, 0), (1, 0), (0, -1)]);
    }

    #[test]
    fn a_nested_callee_and_a_signal_handler_are_skipped() {
        // frame 0; call 0x10 → callee 2; call 0x11 → 4, ret 0x21 → 6, ret
        // 0x20 → frame 8; signal after 8 → handler 9, ret 0x20 → restorer
        // 11 (at the frame's depth, outside its function) → frame 12.
        let executed = run(&[
            (0x1, false),
            (0x10, false),
            (0x2, false),
            (0x11, false),
            (0x4, false),
            (0x21, false),
            (0x6, false),
            (0x20, false),
            (0x8, true),
            (0x9, false),
            (0x20, false),
            (0xb, false),
            (0xc, false),
        ]);
        let steps = frame_history(executed, kinds, 100, &[]);
        assert_eq!(listed(&steps), vec![(12, 0), (11, 0), (10, 1), (8, 0), (7, 1), (1, 0), (0, 0)]);
    }

    #[test]
    fn a_callee_says_its_latest_instruction_at_a_stop_address() {
        // frame 1; call 0x10 → callee 3 (0x5), call 0x11 → 5 (0x5), ret
        // 0x21 → 7 (0x6), ret 0x20 → frame 9; and the stop addresses 0x5,
        // 0x6: the callee's latest is 7; a callee without one says none.
        let executed = run(&[
            (0x1, false),
            (0x10, false),
            (0x5, false),
            (0x11, false),
            (0x5, false),
            (0x21, false),
            (0x6, false),
            (0x20, false),
            (0x9, false),
            (0x11, false),
            (0x20, false),
            (0xb, false),
        ]);
        let steps = frame_history(executed, kinds, 100, &[0x5, 0x6]);
        let stops: Vec<(u64, Option<(u64, u64)>)> = steps.iter().map(|s| (s.id, s.stop)).collect();
        assert_eq!(stops, vec![(11, None), (10, None), (9, None), (8, None), (7, Some((6, 0x6))), (1, None), (0, None)]);
        assert_eq!(crate::protocol::monitor::history_text(1, 12, &steps[3..5]), "thread 1 instruction 12\n8 0x9 0\n7 0x20 1 stop 6 0x6\n");
    }

    #[test]
    fn the_list_stops_at_max() {
        let executed = run(&[(0x1, false), (0x2, false), (0x3, false)]);
        assert_eq!(listed(&frame_history(executed, kinds, 2, &[])), vec![(2, 0), (1, 0)]);
        let text = crate::protocol::monitor::history_text(7, 3, &frame_history(run(&[(0x1, false), (0x10, false)]), kinds, 9, &[]));
        assert_eq!(text, "thread 7 instruction 3\n1 0x10 -1\n");
    }

    #[test]
    fn kinds_come_from_the_code() {
        assert_eq!(Flow::of(&[0xe8, 0, 0, 0, 0], 0x1000), Flow::Call);
        assert_eq!(Flow::of(&[0xff, 0xd0], 0x1000), Flow::Call); // call *%rax
        assert_eq!(Flow::of(&[0xc3], 0x1000), Flow::Return);
        assert_eq!(Flow::of(&[0x90], 0x1000), Flow::Other);
        assert_eq!(Flow::of(&[0x0f, 0x05], 0x1000), Flow::Other); // syscall
        assert_eq!(Flow::of(&[], 0x1000), Flow::Other);
    }
}
