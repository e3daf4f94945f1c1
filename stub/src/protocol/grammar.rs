//! The grammar of the packets gdbstub 0.7.10 parses strictly: one that
//! breaks it ends gdbstub's session (`MalformedCommand`, a number that does
//! not fit, a step as vCont's default action, an escape cut short…), so
//! the session answers it with an error instead of handing it on. Numbers
//! are checked to fit in 64 bits; thread ids only for their form (whether
//! the thread exists is [`super::threads`]' question).

use super::framing::unescape;

/// One to sixteen hex digits: a number that fits in 64 bits.
fn is_hex64(text: &str) -> bool {
    (1..=16).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A process or thread number gdbstub takes as one: hex, not zero (zero is
/// written `0` and means "any"; gdbstub refuses `00`).
fn is_nonzero_hex64(text: &str) -> bool {
    is_hex64(text) && text.bytes().any(|b| b != b'0')
}

/// Hex digits in pairs: encoded bytes (possibly none).
fn is_hex_bytes(text: &str) -> bool {
    text.len() % 2 == 0 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A thread id: `-1`, a hex number, or `p<pid>.<tid>` with either part
/// `-1` or hex (a bare `p<pid>` gdbstub does not take).
pub(crate) fn is_thread_id(text: &str) -> bool {
    let part = |p: &str| matches!(p, "-1" | "0") || is_nonzero_hex64(p);
    match text.strip_prefix('p') {
        Some(rest) => rest.split_once('.').is_some_and(|(pid, tid)| part(pid) && part(tid)),
        None => part(text),
    }
}

fn is_address_length(text: &str) -> bool {
    text.split_once(',').is_some_and(|(a, l)| is_hex64(a) && is_hex64(l))
}

/// `X addr,length:data`: the data unescaped must be `length` bytes.
fn is_binary_write(body: &[u8]) -> bool {
    let Some(colon) = body.iter().position(|&b| b == b':') else { return false };
    let Ok(head) = std::str::from_utf8(&body[1..colon]) else { return false };
    let Some((address, length)) = head.split_once(',') else { return false };
    if !is_hex64(address) || !is_hex64(length) {
        return false;
    }
    let Ok(length) = u64::from_str_radix(length, 16) else { return false };
    unescape(&body[colon + 1..]).is_some_and(|data| data.len() as u64 == length)
}

/// `qXfer:object:read:annex:offset,length` for the objects gdbstub serves
/// here: the annex each takes, and numbers that fit.
fn is_xfer_read(text: &str) -> bool {
    let mut fields = text.splitn(5, ':');
    let (Some(_), Some(object), Some(operation), Some(annex), Some(window)) =
        (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let annex_ok = match object {
        "features" => annex == "target.xml",
        "exec-file" => annex.is_empty() || is_nonzero_hex64(annex),
        "auxv" | "libraries-svr4" | "btrace-conf" => annex.is_empty(),
        "btrace" => matches!(annex, "all" | "new" | "delta"),
        _ => true, // not offered: gdbstub answers it as unknown
    };
    operation == "read" && annex_ok && is_address_length(window)
}

/// `vCont;action[:thread];…`: continue or step, with or without a signal;
/// a step needs a thread (as the default action gdbstub refuses it), and a
/// step of all threads is not one gdbstub takes either.
fn is_vcont(actions: &str) -> bool {
    actions.split(';').all(|action| {
        let (kind, thread) = match action.split_once(':') {
            Some((kind, thread)) => (kind, Some(thread)),
            None => (action, None),
        };
        let step = matches!(kind, "s") || (kind.len() == 3 && kind.starts_with('S'));
        let kind_ok = matches!(kind, "c" | "s") || (kind.len() == 3 && kind.is_ascii() && matches!(&kind[..1], "C" | "S") && is_hex64(&kind[1..]));
        let thread_ok = match thread {
            None => !step,
            Some(thread) => is_thread_id(thread) && !(step && thread.ends_with("-1")) && !is_any_thread(thread),
        };
        kind_ok && thread_ok
    })
}

/// Host I/O (`vFile:`) as served here: read-only opens, reads, fstat,
/// readlink, setfs, close; numbers gdbstub reads into 32 bits (descriptors,
/// flags, modes) or 64 (counts, offsets, pids). Anything else (`pwrite`,
/// `unlink`, other operations) is refused with an error.
fn is_host_io(operation: &str) -> bool {
    let hex32 = |t: &str| is_hex64(t) && t.len() <= 8;
    let Some((name, args)) = operation.split_once(':') else { return false };
    let fields: Vec<&str> = args.split(',').collect();
    match (name, fields.as_slice()) {
        ("open", [file, flags, mode]) => !file.is_empty() && is_hex_bytes(file) && hex32(flags) && hex32(mode),
        ("close" | "fstat", [fd]) => hex32(fd),
        ("pread", [fd, count, offset]) => hex32(fd) && is_hex64(count) && is_hex64(offset),
        ("readlink", [file]) => !file.is_empty() && is_hex_bytes(file),
        ("setfs", [pid]) => is_hex64(pid),
        _ => false,
    }
}

/// A thread id that names no thread in particular (`0`, `p0.0`, `p<pid>.0`).
fn is_any_thread(thread: &str) -> bool {
    thread == "0" || thread.strip_prefix('p').is_some_and(|rest| rest.split('.').any(|part| part == "0"))
}

/// True for a packet of a command gdbstub parses strictly that does not
/// follow that command's grammar: gdbstub 0.7.10 treats those as fatal and
/// drops the connection, so they are answered with an error here instead.
pub(crate) fn malformed(body: &[u8]) -> bool {
    if body.first() == Some(&b'X') {
        return !is_binary_write(body);
    }
    // Other bytes than text make any command below malformed (they are not
    // hex digits); a packet gdbstub does not know (`qSearch:memory` carries
    // a binary pattern) it answers empty.
    let text = String::from_utf8_lossy(body);
    let text = &*text;
    let Some(first) = text.chars().next() else { return true };
    let rest = &text[first.len_utf8()..];
    // Commands gdbstub knows that take nothing after their name (it
    // matches commands by prefix, so `qfThreadInfoX` would be a fatal
    // `qfThreadInfo`).
    const EXACT: [&str; 11] =
        ["?", "k", "!", "g", "qC", "qfThreadInfo", "qsThreadInfo", "QStartNoAckMode", "QEnvironmentReset", "vCont?", "qAttached"];
    if let Some(name) = EXACT.iter().find(|name| text.starts_with(**name)) {
        let attached_pid = *name == "qAttached" && text.strip_prefix("qAttached:").is_some_and(is_nonzero_hex64);
        return text != *name && !attached_pid;
    }
    match first {
        'm' => !is_address_length(rest),
        'M' => !rest.split_once(':').is_some_and(|(head, data)| is_address_length(head) && is_hex_bytes(data)),
        'Z' | 'z' => {
            // (Breakpoint conditions and commands, `;…`, are not offered.)
            let fields: Vec<&str> = rest.split(',').collect();
            !(fields.len() == 3 && matches!(fields[0], "0" | "1" | "2" | "3" | "4") && is_hex64(fields[1]) && is_hex64(fields[2]))
        }
        'p' => !(rest.len() <= 8 && is_hex64(rest)),
        'P' => !rest.split_once('=').is_some_and(|(n, v)| n.len() <= 8 && is_hex64(n) && !v.is_empty() && is_hex_bytes(v)),
        'g' => text != "g",
        // Every register, as `g` reads them (a partial `G` would zero the rest).
        'G' => !(rest.len() == 2 * crate::arch::register_block_size() && is_hex_bytes(rest)),
        'H' => !(matches!(rest.as_bytes().first(), Some(b'g' | b'c')) && is_thread_id(&rest[1..])),
        'T' => !is_thread_id(rest),
        'c' | 's' => !(rest.is_empty() || is_hex64(rest)),
        'C' | 'S' => !rest.split(';').next().is_some_and(is_hex64) || rest.split(';').nth(1).is_some_and(|a| !is_hex64(a)),
        'D' => !(rest.is_empty() || rest.strip_prefix(';').is_some_and(is_hex64)),
        // Restarting is not offered (the stub serves the one process it started).
        'R' => true,
        'v' if text.starts_with("vCont;") => !is_vcont(&text["vCont;".len()..]),
        // A bare `vCont` would resume nothing, and nothing would stop.
        'v' if text.starts_with("vCont") => text != "vCont?",
        'v' if text.starts_with("vKill") => !text.strip_prefix("vKill;").is_some_and(is_hex64),
        'v' if text.starts_with("vAttach") => !text.strip_prefix("vAttach;").is_some_and(is_nonzero_hex64),
        'v' if text.starts_with("vRun") => !text.strip_prefix("vRun;").is_some_and(|args| args.split(';').all(is_hex_bytes)),
        'q' if text.starts_with("qXfer:") => !is_xfer_read(text),
        'v' if text.starts_with("vFile:") => !is_host_io(&text["vFile:".len()..]),
        // gdbstub wants a real process in `p<pid>.<tid>` here.
        'q' if text.starts_with("qThreadExtraInfo") => !text
            .strip_prefix("qThreadExtraInfo,")
            .is_some_and(|t| is_thread_id(t) && t.strip_prefix('p').is_none_or(|r| r.split_once('.').is_some_and(|(pid, _)| is_nonzero_hex64(pid)))),
        'q' if text.starts_with("qC") => text != "qC",
        'Q' if text.starts_with("QStartNoAckMode") => text != "QStartNoAckMode",
        'Q' if text.starts_with("QSetWorkingDir") => !text.strip_prefix("QSetWorkingDir:").is_some_and(is_hex_bytes),
        'Q' if text.starts_with("QDisableRandomization") => !matches!(text, "QDisableRandomization:0" | "QDisableRandomization:1"),
        'Q' if text.starts_with("QStartupWithShell") => !matches!(text, "QStartupWithShell:0" | "QStartupWithShell:1"),
        // `NAME=VALUE`, hex-encoded.
        'Q' if text.starts_with("QEnvironmentHexEncoded") => !text
            .strip_prefix("QEnvironmentHexEncoded:")
            .is_some_and(|hex| is_hex_bytes(hex) && hex.as_bytes().chunks(2).any(|pair| pair.eq_ignore_ascii_case(b"3d"))),
        'Q' if text.starts_with("QEnvironmentUnset") => !text.strip_prefix("QEnvironmentUnset:").is_some_and(is_hex_bytes),
        // `monitor …`: the command in hex.
        'q' if text.starts_with("qRcmd") => !text.strip_prefix("qRcmd,").is_some_and(is_hex_bytes),
        'q' if text.starts_with("qRegisterInfo") => !text.strip_prefix("qRegisterInfo").is_some_and(|n| n.len() <= 8 && is_hex64(n)),
        // `qSupported:feature;feature…` (none empty); a bare one is rewritten
        // before it gets here (see the session).
        'q' if text.starts_with("qSupported") => {
            !(matches!(text, "qSupported" | "qSupported:") || text.strip_prefix("qSupported:").is_some_and(|f| f.split(';').all(|f| !f.is_empty())))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::malformed;

    #[test]
    fn client_packets_pass_and_malformed_ones_are_caught() {
        for ok in [
            "m7ffff7fe4b70,40", "M1000,2:abcd", "X1000,0:", "Z0,555555555151,1", "z2,7fff0000,4", "p10", "P10=0011223344556677",
            "g", "Hgp1c96.1c96", "Hc-1", "Hcp0.0", "Tp1c96.1c96", "vCont;c:p1c96.-1", "vCont;s:p1c96.1c96", "vCont;C1e:1c96;c",
            "vCont?", "qXfer:features:read:target.xml:0,fff", "qSupported:multiprocess+", "QStartNoAckMode", "?", "k", "x0,0",
            "jThreadsInfo", "vKill;1c96", "D;1c96", "D", "qC", "qXfer:exec-file:read:1c96:0,ffb", "qXfer:auxv:read::0,131071",
            "qThreadExtraInfo,p1c96.1c96", "vAttach;1c96", "QSetWorkingDir:2f746d70", "X1000,2:}]}]", "!", "qAttached", "qAttached:1c96",
            "qSupported", "qSupported:", "qSupported:xmlRegisters=i386;multiprocess+", "QDisableRandomization:1", "qRegisterInfo1a",
            "QEnvironmentHexEncoded:413d31", "qfThreadInfo", "qSearch:memory:1000;4;\u{de}\u{ad}",
            "Hgp4d2.0", "vCont;c:04d2", "qRcmd,7472616365207374617475732d2d6a736f6e", "qRcmd,",
            "vFile:open:2f70726f632f31322f6d617073,0,1c0", "vFile:pread:3,3fff,0", "vFile:close:3", "vFile:fstat:3", "vFile:setfs:0",
            "vFile:readlink:2f70726f632f73656c662f657865",
        ] {
            assert!(!malformed(ok.as_bytes()), "{ok} rejected");
        }
        for bad in [
            "mzz,4", "m12345", "Z0,zz,1", "Z9,1000,1", "p9999z", "vCont;x", "Hgzz", "qXfer:features:read:target.xml:zz", "G123",
            "garbage", "?x", "D;0x", "vKill", "qThreadExtraInfo", "qC1", "QStartNoAckMode:x", "qXfer:features:read:foo.xml:0,10",
            "qXfer:exec-file:read:zz:0,10", "vRun;zz", "vAttach;zz", "QSetWorkingDir:zz", "Hgp1", "T-1x", "vCont;s", "vCont;S05",
            "vCont;s:p-1.-1", "vCont;c:p0.0", "vCont", "vContx", "R00", "X555555558020,1:}", "X1000,2:\u{1}}", "X1000,2:}}}", "m112233445566778899,1",
            "m0,10000000000000000", "p10000000000000000", "P10000000000000000=00", "qSupportedmultiprocess+",
            "qSupported:a;;b", "qSupported:a;", "qfThreadInfoX", "kill", "qAttachedX", "QDisableRandomization:2", "qRegisterInfozz",
            "Z0,1000,1;X2,abcd", "vCont;c\u{fffd}", "vCont;\u{e9}x", "qAttached:0",
            "vAttach;0", "qXfer:exec-file:read:0:0,1", "QEnvironmentHexEncoded:", "QEnvironmentHexEncoded:41",
            "qThreadExtraInfo,p-1.4d2", "qThreadExtraInfo,p0.4d2", "Hg00", "Hc00", "Hgp4d2.00", "Tp00.4d2", "vCont;c:00", "vCont;c:p4d2.00",
            // Found by the packet-path fuzzer: gdbstub ended its session.
            "qRcmd-", "qRcmd", "qRcmd,7", "qRcmd,zz",
            "vFile:open:zz,0,0", "vFile:open:,0,0", "vFile:open:2f,100000000,0", "vFile:pread:0,ffffffffffffffffff,0", "vFile:close:x",
            "vFile:pwrite:0,0,abc", "vFile:unlink:2f746d70", "vFile:nosuch:1", "vFile:", "vFile:open:2f,0",
        ] {
            assert!(malformed(bad.as_bytes()), "{bad} accepted");
        }
        // `G` carries every register, as `g` reads them.
        let all = "00".repeat(crate::arch::register_block_size());
        assert!(!malformed(format!("G{all}").as_bytes()));
        assert!(malformed(format!("G{}", &all[2..]).as_bytes()));
    }
}
