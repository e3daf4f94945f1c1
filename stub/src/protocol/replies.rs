//! Reply text for what the inferiors answer in typed values: memory
//! regions (`qMemoryRegionInfo`) and the fields a stop note adds to a stop
//! reply.

use crate::inferior::{MemoryRegion, StopNote};

/// LLDB's `qMemoryRegionInfo` reply: the mapping holding the address, or
/// the unmapped gap around it (no permissions), or an error.
pub fn memory_region_reply(region: &MemoryRegion) -> Vec<u8> {
    match region {
        MemoryRegion::Mapped { start, end, readable, writable, executable, name } => {
            let mut reply = format!("start:{start:x};size:{:x};permissions:", end - start);
            for (flag, letter) in [(readable, 'r'), (writable, 'w'), (executable, 'x')] {
                if *flag {
                    reply.push(letter);
                }
            }
            reply.push_str(";flags:;");
            if !name.is_empty() {
                reply.push_str(&format!("name:{};", crate::hex::hex(name)));
            }
            reply.into_bytes()
        }
        MemoryRegion::Unmapped { start, end } => format!("start:{start:x};size:{:x};", end - start).into_bytes(),
        MemoryRegion::Unknown => b"E01".to_vec(),
    }
}

/// The stop-reply fields a stop note adds (`key:value;`…): lldb-server's
/// `reason:trace;` (what a single step ends with) and `reason:processor
/// trace;description:…;`, its `reason:exec;`, gdbserver's `exec:…;`.
pub fn stop_note_text(note: &StopNote) -> String {
    match note {
        StopNote::ArrivedWhereArmed => "reason:trace;".to_string(),
        StopNote::Trace(why) => format!("reason:processor trace;description:{};", crate::hex::hex(why)),
        StopNote::Undeliverable(what) => format!("reason:exception;description:{};", crate::hex::hex(what)),
        StopNote::ExecForLldb => "reason:exec;".to_string(),
        StopNote::ExecForGdb(path) => format!("exec:{};", crate::hex::hex(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(maps: &[retrace_collector::process::Mapping], address: u64) -> String {
        String::from_utf8(memory_region_reply(&MemoryRegion::of(maps, address))).unwrap()
    }

    #[test]
    fn region_info_names_mappings_and_gaps() {
        let maps = retrace_collector::process::parse_maps(
            "555555554000-555555555000 r--p 00000000 08:01 123 /tmp/prog\n\
             555555555000-555555556000 r-xp 00001000 08:01 123 /tmp/prog\n\
             7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n",
        );
        assert_eq!(
            reply(&maps, 0x5555_5555_5010),
            format!("start:555555555000;size:1000;permissions:rx;flags:;name:{};", crate::hex::hex("/tmp/prog"))
        );
        assert_eq!(reply(&maps, 0x1000), "start:0;size:555555554000;");
        assert_eq!(reply(&maps, 0x5555_5555_6000), "start:555555556000;size:2aaaaaa88000;");
        assert_eq!(reply(&maps, 0xffff_ffff_ff60_0000), "start:7ffffffff000;size:ffff800000000fff;");
    }

    #[test]
    fn stop_notes_are_lldb_servers_and_gdbservers_words() {
        assert_eq!(stop_note_text(&StopNote::ArrivedWhereArmed), "reason:trace;");
        assert_eq!(stop_note_text(&StopNote::Trace("why".into())), format!("reason:processor trace;description:{};", crate::hex::hex("why")));
        assert_eq!(stop_note_text(&StopNote::ExecForLldb), "reason:exec;");
        assert_eq!(stop_note_text(&StopNote::ExecForGdb("/bin/true".into())), format!("exec:{};", crate::hex::hex("/bin/true")));
        assert_eq!(memory_region_reply(&MemoryRegion::Unknown), b"E01");
    }
}
