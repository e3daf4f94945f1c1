//! The grammar of the packets gdbstub 0.7.10 parses strictly: one that
//! breaks it ends gdbstub's session, so the session answers it with an
//! error instead of handing it on.

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_thread_id(text: &str) -> bool {
    let part = |p: &str| p == "-1" || is_hex(p);
    match text.strip_prefix('p') {
        Some(rest) => rest.split('.').count() <= 2 && rest.split('.').all(part),
        None => part(text),
    }
}

fn is_address_length(text: &str) -> bool {
    text.split_once(',').is_some_and(|(a, l)| is_hex(a) && is_hex(l))
}

/// True for a packet of a command gdbstub parses strictly that does not
/// follow that command's grammar: gdbstub 0.7.10 treats those as fatal and
/// drops the connection, so they are answered with an error here instead.
pub(crate) fn malformed(body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else { return !matches!(body.first(), Some(b'X')) };
    let rest = &text[text.len().min(1)..];
    match text.as_bytes().first() {
        Some(b'm') => !is_address_length(rest),
        Some(b'M') => !rest.split_once(':').is_some_and(|(head, data)| is_address_length(head) && data.len() % 2 == 0 && (data.is_empty() || is_hex(data))),
        Some(b'X') => !rest.split_once(':').is_some_and(|(head, _)| is_address_length(head)),
        Some(b'Z' | b'z') => {
            let head = rest.split(';').next().unwrap_or("");
            let fields: Vec<&str> = head.split(',').collect();
            !(fields.len() == 3 && matches!(fields[0], "0" | "1" | "2" | "3" | "4") && is_hex(fields[1]) && is_hex(fields[2]))
        }
        Some(b'p') => !is_hex(rest),
        Some(b'P') => !rest.split_once('=').is_some_and(|(n, v)| is_hex(n) && is_hex(v)),
        Some(b'g') => text != "g",
        Some(b'G') => !(is_hex(rest) && rest.len() % 2 == 0),
        Some(b'H') => !(rest.len() >= 2 && matches!(rest.as_bytes()[0], b'g' | b'c') && is_thread_id(&rest[1..])),
        Some(b'T') => !is_thread_id(rest),
        Some(b'c' | b's') => !(rest.is_empty() || is_hex(rest)),
        Some(b'?') => text != "?",
        Some(b'k') => text != "k",
        Some(b'v') if text.starts_with("vCont;") => !text["vCont;".len()..].split(';').all(|action| {
            let (kind, thread) = match action.split_once(':') {
                Some((kind, thread)) => (kind, Some(thread)),
                None => (action, None),
            };
            let kind_ok = matches!(kind, "c" | "s") || (kind.len() == 3 && matches!(&kind[..1], "C" | "S") && is_hex(&kind[1..]));
            kind_ok && thread.is_none_or(is_thread_id)
        }),
        Some(b'q') if text.starts_with("qXfer:") => !text.rsplit(':').next().is_some_and(is_address_length),
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
            "jThreadsInfo", "vKill;1c96", "D;1c96",
        ] {
            assert!(!malformed(ok.as_bytes()), "{ok} rejected");
        }
        for bad in ["mzz,4", "m12345", "Z0,zz,1", "Z9,1000,1", "p9999z", "vCont;x", "Hgzz", "qXfer:features:read:target.xml:zz", "G123", "garbage", "?x"] {
            assert!(malformed(bad.as_bytes()), "{bad} accepted");
        }
    }
}
