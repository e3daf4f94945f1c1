//! A superblock as the tool translated it: its instructions, its ways
//! out, and how a run leaves it.



use crate::pt_writer::StraightRun;
use super::threads::Instruction;

/// A translated superblock.
pub(super) struct Superblock {
    pub(super) instructions: Box<[Instruction]>,
    /// The ways out: `[0]` its end, `[k]` its side exit k − 1.
    pub(super) ways: Box<[Way]>,
}

/// One way out of a superblock.
pub(super) struct Way {
    /// How many of its instructions run when it leaves this way.
    pub(super) end: u16,
    /// Where it goes then, if one address.
    pub(super) to: Option<u64>,
    /// The superblock there, once looked up (and the translation
    /// generation it is good for).
    pub(super) to_id: std::cell::Cell<Option<(u32, u32)>>,
    /// What the instructions before the last write, computed once (when
    /// they are decoded, no REP among them, and need nothing but TNT bits).
    pub(super) straight: Option<StraightRun>,
    /// The same for all of them, the last going to `to`: what the way
    /// writes when the superblock there is entered next.
    pub(super) closed: Option<StraightRun>,
}

impl Superblock {
    pub(super) fn new(instructions: Vec<Instruction>, next: u64, exits: &[(u16, u64)]) -> Superblock {
        let way = |end: usize, to: u64| {
            let end = end.min(instructions.len());
            let body = &instructions[..end];
            let simple = body.iter().all(|i| i.info.is_some() && !i.rep);
            let steps = body.windows(2).map(|pair| (pair[0].ip, pair[0].info.expect("checked"), pair[1].ip));
            let straight = if simple { StraightRun::new(steps.clone()) } else { None };
            let closed = match body.last() {
                Some(last) if simple && to != 0 => StraightRun::new(steps.chain([(last.ip, last.info.expect("checked"), to)])),
                _ => None,
            };
            Way { end: end as u16, to: (to != 0).then_some(to), to_id: Default::default(), straight, closed }
        };
        let mut ways = vec![way(instructions.len(), next)];
        ways.extend(exits.iter().map(|&(index, to)| way(index as usize + 1, to)));
        Superblock { ways: ways.into(), instructions: instructions.into() }
    }
}

/// How the open superblock is closed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Leaving {
    /// By the way out it left by (its end unless the log said otherwise);
    /// where it went is known later.
    AsLeft,
    /// By the way out it left by, into the superblock there (which the
    /// log says was entered next).
    IntoNext,
    /// After its first this many instructions (before a fault).
    After(usize),
}
