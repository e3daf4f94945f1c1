//! The state log against walks and copies of the memory taken at each step.

use super::*;

fn regs(rip: u64, rax: u64) -> Regs {
    let mut regs = Regs { rip, ..Regs::default() };
    regs.gpr[0] = rax;
    regs
}

/// Memory of 2 pages at 0x1000, as a vector the test mutates as the
/// "process" runs.
fn reader(memory: &[u8]) -> impl FnMut(u64, &mut [u8]) -> usize + '_ {
    move |address, buf| {
        let Some(offset) = address.checked_sub(0x1000).map(|o| o as usize).filter(|&o| o < memory.len()) else { return 0 };
        let n = buf.len().min(memory.len() - offset);
        buf[..n].copy_from_slice(&memory[offset..offset + n]);
        n
    }
}

#[test]
fn bytes_a_step_wrote_unkept_are_unknown_before_it_unless_kept_earlier() {
    // Memory 0x1000..0x1100 holds 9s now. Step 1 wrote 0x1010..0x1018
    // (kept: it held 1s); step 3, a system call, may have written all
    // of 0x1000..0x1100 unkept.
    let now = vec![9u8; 0x100];
    let mut log = StateLog::new(vec![0x1000..0x1100]);
    log.push(1, &regs(0x10, 0), &regs(0x11, 0), vec![], None, Flow::Other);
    log.push(1, &regs(0x11, 0), &regs(0x12, 0), vec![Overwritten { address: 0x1010, old: vec![1; 8] }], None, Flow::Other);
    log.push(1, &regs(0x12, 0), &regs(0x13, 0), vec![], None, Flow::Other);
    log.push(1, &regs(0x13, 0), &regs(0x14, 0), vec![], None, Flow::Other);
    log.lost_writes_of_last_step(vec![0x1000..0x1100]);
    log.push(1, &regs(0x14, 0), &regs(0x15, 0), vec![], None, Flow::Other);
    let read = |position: u64, address: u64, len: usize| {
        let mut buf = vec![0u8; len];
        let n = log.read_at(position, address, &mut buf, &mut reader(&now));
        buf.truncate(n);
        buf
    };
    assert_eq!(read(4, 0x1000, 0x20), vec![9; 0x20], "after the call: the present");
    assert_eq!(read(5, 0x1000, 0x20), vec![9; 0x20]);
    assert_eq!(read(3, 0x1000, 0x20), Vec::<u8>::new(), "before it: unknown, not the present");
    assert_eq!(read(2, 0x1020, 8), Vec::<u8>::new());
    assert_eq!(read(0, 0x1010, 8), vec![1; 8], "kept by step 1, before the call");
    assert_eq!(read(0, 0x1010, 0x10), vec![1; 8], "known as far as step 1 kept");
    assert_eq!(read(2, 0x1010, 8), Vec::<u8>::new(), "after step 1, before the call: unknown");
}

#[test]
fn registers_replay_from_checkpoints_and_forced_ones() {
    let mut log = StateLog::new(vec![0x1000..0x3000]);
    // Thread 7 counts rax up, 200 steps; the debugger sets rax = 1000 before step 150.
    let mut rax = 0;
    for i in 0..200u64 {
        if i == 150 {
            rax = 1000;
        }
        log.push(7, &regs(0x100 + i, rax), &regs(0x101 + i, rax + 1), vec![], None, Flow::Other);
        rax += 1;
    }
    assert_eq!(log.registers_at(7, 0), Some(regs(0x100, 0)));
    assert_eq!(log.registers_at(7, 100), Some(regs(0x164, 100)));
    assert_eq!(log.registers_at(7, 149), Some(regs(0x100 + 149, 149)));
    assert_eq!(log.registers_at(7, 150), Some(regs(0x100 + 150, 1000)));
    assert_eq!(log.registers_at(7, 199), Some(regs(0x100 + 199, 1049)));
    assert_eq!(log.registers_at(7, 200), None, "the present is the live thread's");
    assert_eq!(log.registers_at(8, 10), None, "no such thread");
}

#[test]
fn a_threads_registers_between_and_before_its_steps() {
    let mut log = StateLog::new(vec![]);
    log.push(1, &regs(0x10, 0), &regs(0x11, 0), vec![], None, Flow::Other);
    log.push(2, &regs(0x20, 5), &regs(0x21, 6), vec![], None, Flow::Other);
    log.push(1, &regs(0x11, 0), &regs(0x12, 0), vec![], None, Flow::Other);
    assert_eq!(log.registers_at(2, 0), Some(regs(0x20, 5)), "before its first step: where that step starts");
    assert_eq!(log.registers_at(2, 1), Some(regs(0x20, 5)));
    assert_eq!(log.registers_at(2, 2), Some(regs(0x21, 6)), "between its steps: after its last");
    assert_eq!(log.previous_of_thread(1, 2), Some(0));
    assert_eq!(log.next_of_thread(1, 1), Some(2));
    assert_eq!(log.steps_of_thread_before(1, 3), 2);
    assert_eq!(log.position_of_thread_step(1, 1), Some(2));
}

#[test]
fn memory_reads_put_back_what_later_steps_overwrote() {
    let mut memory = vec![0u8; 0x2000];
    let mut log = StateLog::new(vec![0x1000..0x3000]);
    let r = regs(0, 0);
    // Step 0 writes 1..=4 at 0x1ffe (across the page boundary).
    log.push(1, &r, &r, vec![Overwritten { address: 0x1ffe, old: memory[0xffe..0x1002].to_vec() }], None, Flow::Other);
    memory[0xffe..0x1002].copy_from_slice(&[1, 2, 3, 4]);
    // The debugger writes 9 at 0x1fff, then step 1 writes 7 at 0x1fff.
    log.overwritten_outside(Overwritten { address: 0x1fff, old: vec![memory[0xfff]] });
    memory[0xfff] = 9;
    log.push(1, &r, &r, vec![Overwritten { address: 0x1fff, old: vec![memory[0xfff]] }], None, Flow::Other);
    memory[0xfff] = 7;
    let read = |position: u64| {
        let mut buf = [0xee; 4];
        let n = log.read_at(position, 0x1ffe, &mut buf, &mut reader(&memory));
        (n, buf)
    };
    assert_eq!(read(0), (4, [0, 0, 0, 0]));
    assert_eq!(read(1), (4, [1, 2, 3, 4]), "before step 1 and before the debugger's write");
    assert_eq!(read(2), (4, [1, 7, 3, 4]), "the present");
}

/// Random small, wide and bulk writes (and the debugger's) over two
/// pages, mostly near their boundary: every read at every position
/// equals a copy of the memory taken before that step.
#[test]
fn reads_at_every_position_equal_copies_of_the_memory_taken_then() {
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut random = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut memory: Vec<u8> = (0..0x2000u32).map(|i| (i * 7) as u8).collect();
    let mut log = StateLog::new(vec![0x1000..0x3000]);
    let mut copies = Vec::new();
    let r = regs(0, 0);
    for step in 0..600u64 {
        copies.push(memory.clone());
        let write = |memory: &mut Vec<u8>, random: &mut dyn FnMut(u64) -> u64| {
            let len = match random(10) {
                0 => 17 + random(300),
                1 => 9 + random(8),
                _ => [1, 2, 4, 8][random(4) as usize],
            };
            let near = random(3) != 0;
            let offset = if near { 0xfc0 + random(0x80) } else { random(0x2000 - len) };
            let offset = offset.min(0x2000 - len) as usize;
            let old = Overwritten { address: 0x1000 + offset as u64, old: memory[offset..offset + len as usize].to_vec() };
            for byte in &mut memory[offset..offset + len as usize] {
                *byte = byte.wrapping_add(1).wrapping_add(step as u8);
            }
            old
        };
        if random(8) == 0 {
            let old = write(&mut memory, &mut random);
            log.overwritten_outside(old);
        }
        let writes = (0..random(3)).map(|_| write(&mut memory, &mut random)).collect();
        log.push(1, &r, &r, writes, None, Flow::Other);
    }
    copies.push(memory.clone());
    for (position, copy) in copies.iter().enumerate() {
        for _ in 0..20 {
            let offset = if random(2) == 0 { 0xf00 + random(0x200) } else { random(0x2000) } as usize;
            let len = (1 + random(600) as usize).min(0x2000 - offset);
            let mut buf = vec![0u8; len];
            assert_eq!(log.read_at(position as u64, 0x1000 + offset as u64, &mut buf, &mut reader(&memory)), len);
            assert_eq!(buf, copy[offset..offset + len], "position {position}, 0x{:x}+{len}", 0x1000 + offset);
        }
    }
}

fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

/// Three threads interleaved in runs, every kind of register changing
/// at random by small and large amounts, the debugger setting some
/// between steps: the registers of every thread at every position
/// equal those it had then.
#[test]
fn registers_at_every_position_equal_what_each_thread_had_then() {
    let mut random = xorshift(0x2545f4914f6cdd1d);
    let mut log = StateLog::new(vec![]);
    let tids = [11u64, 12, 13];
    let mut current: HashMap<u64, Regs> = HashMap::new();
    for &tid in &tids {
        let mut regs = Regs { rip: 0x400000 + tid * 0x1000, eflags: 0x246, ..Regs::default() };
        regs.gpr[7] = 0x7fff_ffff_e000 - tid * 0x10000;
        current.insert(tid, regs);
    }
    // (tid, registers before) of every step, in order; registers after each thread's last.
    let mut steps: Vec<(u64, Regs)> = Vec::new();
    let mut tid = tids[0];
    for _ in 0..5000 {
        if random(10) == 0 {
            tid = tids[random(3) as usize];
        }
        let mut before = current[&tid].clone();
        if random(60) == 0 {
            // The debugger writes a register between steps.
            before.gpr[random(16) as usize] = random(u64::MAX);
        }
        let mut after = before.clone();
        after.rip = if random(8) == 0 { 0x400000 + random(0x100000) } else { before.rip + 1 + random(14) };
        for _ in 0..random(4) {
            let n = random(16) as usize;
            after.gpr[n] = match random(3) {
                0 => after.gpr[n].wrapping_add(random(16)),
                1 => after.gpr[n].wrapping_sub(random(1 << 20)),
                _ => random(u64::MAX),
            };
        }
        if random(3) == 0 {
            after.eflags ^= 1 << random(12);
        }
        match random(40) {
            0 => after.xmm[random(16) as usize] = u128::from(random(u64::MAX)) << 64 | u128::from(random(u64::MAX)),
            1 => after.st[random(8) as usize][random(10) as usize] = random(256) as u8,
            2 => after.fpu[random(8) as usize] ^= random(u64::from(u32::MAX)) as u32,
            3 => after.mxcsr ^= 1 << random(16),
            4 => after.orig_rax = random(400),
            5 => after.fs_base = random(u64::MAX),
            6 => after.segments[random(6) as usize] = random(64) as u32,
            _ => {}
        }
        log.push(tid, &before, &after, vec![], None, Flow::Other);
        steps.push((tid, before));
        current.insert(tid, after);
    }
    for position in 0..=steps.len() {
        for &t in tids.iter().chain([&99]) {
            let next = steps[position..].iter().find(|(s, _)| *s == t).map(|(_, regs)| regs.clone());
            let ran = steps.iter().any(|(s, _)| *s == t);
            let expected = match next {
                Some(regs) => Some(regs),
                None if ran && position < steps.len() => Some(current[&t].clone()),
                None => None,
            };
            assert_eq!(log.registers_at(t, position as u64), expected, "thread {t} at {position}");
        }
    }
}

/// The searches the reverse `bc` and forward replay make through the
/// indexes (by address, by written byte) find what a walk over every
/// step finds.
#[test]
fn searches_by_address_and_by_write_find_what_a_walk_finds() {
    let mut random = xorshift(0x5851f42d4c957f2d);
    let mut log = StateLog::new(vec![0x1000..0x3000]);
    let mut tid = 1;
    for step in 0..12_000u64 {
        // Stretches of steps far from the addresses searched for, and
        // whole spans of steps without them (steps 0..5000 and
        // 6000..11000 run only 0x1000..0x1040).
        let rare = (5000..6000).contains(&step) || step >= 11_000;
        let pc = if rare && random(30) < 3 { 0x10 + random(4) } else { 0x1000 + random(64) };
        let writes = (0..random(3))
            .map(|_| {
                let len = if random(12) == 0 { 17 + random(5000) } else { [1, 2, 4, 8, 16][random(5) as usize] };
                let address = 0x1000 + random(0x2000 - len);
                Overwritten { address, old: vec![0; len as usize] }
            })
            .collect();
        if random(50) == 0 {
            tid = 1 + random(3);
        }
        let r = regs(pc, 0);
        log.push(tid, &r, &r, writes, None, Flow::Other);
    }
    let len = log.len();
    for _ in 0..400 {
        let addresses: Vec<u64> = {
            let mut a: Vec<u64> = (0..1 + random(3)).map(|_| if random(2) == 0 { 0x10 + random(6) } else { 0x1000 + random(64) }).collect();
            a.sort_unstable();
            a.dedup();
            a
        };
        let position = random(len + 2);
        let hit = |p: u64| addresses.contains(&log.at(p).unwrap().1);
        assert_eq!(log.last_pc_before(&addresses, position), (0..position.min(len)).rev().find(|&p| hit(p)), "{addresses:x?} before {position}");
        assert_eq!(log.first_pc_from(&addresses, position), (position..len).find(|&p| hit(p)), "{addresses:x?} from {position}");
        let start = 0x1000 + random(0x2000);
        let range = start..(start + 1 + random(12)).min(0x3000);
        let wrote = |p: u64| log.overwritten_by(p).any(|(at, old)| at < range.end && range.start < at + old.len() as u64);
        assert_eq!(log.last_write_before(range.clone(), position), (0..position.min(len)).rev().find(|&p| wrote(p)), "{range:x?} before {position}");
        assert_eq!(log.first_write_from(range.clone(), position), (position..len).find(|&p| wrote(p)), "{range:x?} from {position}");
    }
}

#[test]
fn a_page_mapped_later_cannot_be_read_before_and_an_unmapped_one_reads_its_old_bytes() {
    let mut memory = vec![5u8; 0x1000];
    let mut log = StateLog::new(vec![0x1000..0x2000]);
    let r = regs(0, 0);
    // Step 0 maps 0x2000..0x3000 (the "process" grows).
    log.push(1, &r, &r, vec![], Some(vec![0x1000..0x3000]), Flow::Other);
    memory.extend(vec![6u8; 0x1000]);
    let mut buf = [0u8; 2];
    assert_eq!(log.read_at(0, 0x2000, &mut buf, &mut reader(&memory)), 0, "not mapped before step 0");
    assert_eq!(log.read_at(1, 0x2000, &mut buf, &mut reader(&memory)), 2);
    assert_eq!(buf, [6, 6]);
    // Step 1 unmaps the first page: its bytes are saved.
    log.push(1, &r, &r, vec![Overwritten { address: 0x1000, old: memory[..0x1000].to_vec() }], Some(vec![0x2000..0x3000]), Flow::Other);
    let present = &memory[0x1000..];
    let mut now = |address: u64, buf: &mut [u8]| {
        let Some(offset) = address.checked_sub(0x2000).map(|o| o as usize).filter(|&o| o < present.len()) else { return 0 };
        let n = buf.len().min(present.len() - offset);
        buf[..n].copy_from_slice(&present[offset..offset + n]);
        n
    };
    assert_eq!(log.read_at(1, 0x1ffe, &mut buf, &mut now), 2, "mapped at 1, unmapped now: the saved bytes");
    assert_eq!(buf, [5, 5]);
    assert_eq!(log.read_at(2, 0x1ffe, &mut buf, &mut now), 0, "unmapped at 2");
}

/// A made-up thread: a loop in one frame's code (0x1000..0x1010) with
/// long stretches of it, calls (at 0x10) into callees (0x5000..) that
/// call deeper and return (at 0x20), and signal handlers (0x9000..)
/// returning to a restorer at the frame's depth.
fn made_up_thread(seed: u64, steps: usize) -> StateLog {
    let mut log = StateLog::new(vec![]);
    let mut state = seed;
    let mut random = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut depth = 0;
    let mut handlers = 0u64;
    for _ in 0..steps {
        let pc = match random(100) {
            0..=2 => 0x10,
            3..=5 if depth > 0 => 0x20,
            6 if depth > 0 => {
                // Half the handlers come after a delivery step (the
                // thread interrupted at 0x5000..), half without.
                handlers += 1;
                if handlers % 2 == 0 {
                    log.push_delivery(1, &regs(0x5000 + handlers % 256, 0), &regs(0x9000, 0));
                } else {
                    log.entering_handler(1);
                }
                0x9000
            }
            _ if depth == 0 && random(2) == 0 => 0x1000 + random(16),
            _ if depth == 0 => 0x3000 + random(16),
            _ => 0x5000 + random(256),
        };
        let flow = match pc {
            0x10 => Flow::Call,
            0x20 => Flow::Return,
            _ => Flow::Other,
        };
        let r = regs(pc, 0);
        log.push(1, &r, &r, vec![], None, flow);
        depth = (depth + i32::from(flow == Flow::Call) - i32::from(flow == Flow::Return)).max(0);
        if random(5000) == 0 {
            // A long stretch of the loop's code.
            for k in 0..9000 {
                let r = regs(0x1000 + k % 16, 0);
                log.push(1, &r, &r, vec![], None, Flow::Other);
            }
        }
    }
    log
}

/// The indexed frame history lists what the step-by-step walk lists,
/// and `within` collapses the run it names to its earliest step.
#[test]
fn the_indexed_frame_history_lists_what_the_walk_lists() {
    use crate::inferior::frames::frame_history;
    for seed in [0x9e3779b97f4a7c15u64, 0x2545f4914f6cdd1d, 0x5851f42d4c957f2d] {
        let log = made_up_thread(seed, 30_000);
        let kind = |pc: u64| match pc {
            0x10 => Flow::Call,
            0x20 => Flow::Return,
            _ => Flow::Other,
        };
        let count = log.steps_of_thread_before(1, log.len());
        let within = [0x1000..0x1010];
        // Addresses the made-up thread runs in callees and in the frame.
        let stops = [0x1003, 0x5007, 0x5080];
        let mut stopped_callees = 0;
        for before in (0..=count).step_by(997).chain([count]) {
            for max in [usize::MAX, 3] {
                let walked = frame_history(log.executed_before(1, before), kind, max, &stops);
                assert_eq!(log.frame_history(1, before, max, &[], &stops), walked, "seed {seed} before {before} max {max}");
                stopped_callees += walked.iter().filter(|step| step.stop.is_some()).count();
                // The run within 0x1000..0x1010 (callees passed over) as its earliest step.
                let mut collapsed = Vec::new();
                let mut in_run = true;
                let mut run_start = None;
                for step in frame_history(log.executed_before(1, before), kind, usize::MAX, &[]) {
                    if in_run && step.depth == 1 {
                        continue;
                    }
                    if in_run && step.depth == 0 && within[0].contains(&step.pc) {
                        run_start = Some(step);
                        continue;
                    }
                    in_run = false;
                    collapsed.extend(run_start.take());
                    collapsed.push(step);
                }
                collapsed.extend(run_start);
                collapsed.truncate(max);
                assert_eq!(log.frame_history(1, before, max, &within, &[]), collapsed, "within: seed {seed} before {before} max {max}");
            }
        }
        assert!(stopped_callees > 10, "callees ran the stop addresses: {stopped_callees}");
        assert!(log.deliveries() > 10, "deliveries among the steps: {}", log.deliveries());
    }
}

#[test]
fn a_signal_delivery_is_a_step_of_its_own_that_instruction_numbers_and_breakpoints_pass_over() {
    // Thread 1: 0x10 (a syscall: rax 234 -> 0), then a signal delivered
    // (interrupted at 0x12, the frame written over 0x1100..0x1180), the
    // handler's 0x9000 and 0x9001, then 0x12.
    let mut memory = vec![0u8; 0x200];
    let mut log = StateLog::new(vec![0x1000..0x1200]);
    log.push(1, &regs(0x10, 234), &regs(0x12, 0), vec![], None, Flow::Other);
    log.overwritten_outside(Overwritten { address: 0x1100, old: memory[0x100..0x180].to_vec() });
    memory[0x100..0x180].fill(0xee);
    let mut entry = regs(0x9000, 10);
    entry.gpr[7] = 0x1100;
    log.push_delivery(1, &regs(0x12, 0), &entry);
    log.push(1, &entry, &regs(0x9001, 10), vec![], None, Flow::Other);
    log.push(1, &regs(0x9001, 10), &regs(0x12, 0), vec![], None, Flow::Return);
    log.push(1, &regs(0x12, 0), &regs(0x14, 0), vec![], None, Flow::Other);
    assert_eq!((log.len(), log.deliveries(), log.instructions()), (5, 1, 4));
    // Standing at the delivery: after the system call, interrupted at
    // 0x12, the frame not written yet.
    assert_eq!(log.registers_at(1, 1), Some(regs(0x12, 0)));
    assert_eq!(log.registers_at(1, 2), Some(entry.clone()));
    let mut buf = [0u8; 8];
    assert_eq!(log.read_at(1, 0x1100, &mut buf, &mut reader(&memory)), 8);
    assert_eq!(buf, [0; 8]);
    assert_eq!(log.read_at(2, 0x1100, &mut buf, &mut reader(&memory)), 8);
    assert_eq!(buf, [0xee; 8]);
    assert_eq!(log.last_write_before(0x1108..0x1110, 5), Some(1), "the delivery wrote the frame");
    // A breakpoint at 0x12 stops where the instruction runs, not at the delivery.
    assert_eq!(log.first_pc_from(&[0x12], 0), Some(4));
    assert_eq!(log.last_pc_before(&[0x12], 4), None);
    // Instruction numbers: the delivery is none.
    assert_eq!((0..=5).map(|p| log.steps_of_thread_before(1, p)).collect::<Vec<_>>(), [0, 1, 1, 2, 3, 4]);
    assert_eq!((0..4).map(|id| log.position_of_thread_step(1, id)).collect::<Vec<_>>(), [Some(0), Some(2), Some(3), Some(4)]);
    assert_eq!(log.previous_of_thread(1, 2), Some(1), "bs from the handler's entry stands at the delivery");
    // From the handler's second instruction its frame lists its entry,
    // then the instruction the signal interrupted (the system call).
    let listed: Vec<(u64, u64, i32)> = log.frame_history(1, 2, 10, &[], &[]).iter().map(|s| (s.id, s.pc, s.depth)).collect();
    assert_eq!(listed, [(1, 0x9000, 0), (0, 0x10, -1)]);
    // Standing at the delivery: the interrupted frame, whose previous
    // instruction is the system call; at the handler's entry, nothing
    // of its frame yet, then the system call that entered it.
    let at = |position: u64| -> Vec<(u64, u64, i32)> { log.frame_history_at(1, position, 10, &[], &[]).iter().map(|s| (s.id, s.pc, s.depth)).collect() };
    assert_eq!(at(1), [(0, 0x10, 0)]);
    assert_eq!(at(2), [(0, 0x10, -1)]);
    // An instruction number past every one is no step.
    assert_eq!(log.position_of_thread_step(1, u64::MAX), None);
    assert!(log.frame_history(1, u64::MAX, 10, &[], &[]).len() == 3, "from the present");
}
