//! Fuzzes the stub's packet path end to end: the input is what a client
//! sends over a loopback connection to a session (framer, grammar, thread
//! checks, the packets answered before gdbstub, gdbstub's state machine)
//! debugging an inert program (no process). Must never panic or end the
//! session in error; every reply is a whole packet with a right checksum,
//! no longer than PacketSize, and nothing follows the last one.
//!
//! An input whose first byte is even is sent as it is; otherwise the rest
//! is split at newlines and each line sent as a packet with its right
//! checksum (a line `\x03` or `-` alone is sent bare), so that mutations
//! reach the parsers behind the checksum (`packet_path.dict` holds real
//! packets).
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use libfuzzer_sys::fuzz_target;
use retrace_stub::protocol::session::{serve, PACKET_SIZE};
use retrace_stub::inferior::inert::InertTarget;

/// The packets in what the stub sent (acknowledgements between them).
fn check_replies(bytes: &[u8]) {
    let mut rest = bytes;
    while let Some(start) = rest.iter().position(|&b| b == b'$') {
        assert!(rest[..start].iter().all(|&b| b == b'+' || b == b'-'), "stray bytes before a reply: {:?}", &rest[..start]);
        let packet = &rest[start..];
        let hash = packet.iter().position(|&b| b == b'#').expect("a reply ends with #cc");
        assert!(packet.len() >= hash + 3, "a reply is cut short");
        let body = &packet[1..hash];
        let sum = body.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        let stated = u8::from_str_radix(std::str::from_utf8(&packet[hash + 1..hash + 3]).unwrap(), 16).unwrap();
        assert_eq!(sum, stated, "a reply's checksum");
        assert!(hash + 3 <= PACKET_SIZE, "a reply of {} bytes", hash + 3);
        rest = &packet[hash + 3..];
    }
    assert!(rest.iter().all(|&b| b == b'+' || b == b'-'), "bytes after the last reply: {rest:?}");
}

/// The bytes a client sends for fuzz input `data`.
fn client_bytes(data: &[u8]) -> Vec<u8> {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 => {
            let mut out = Vec::new();
            for line in rest.split(|&b| b == b'\n') {
                match line {
                    b"\x03" | b"-" => out.extend_from_slice(line),
                    _ => {
                        let sum = line.iter().fold(0u8, |s, b| s.wrapping_add(*b));
                        out.push(b'$');
                        out.extend_from_slice(line);
                        out.extend_from_slice(format!("#{sum:02x}").as_bytes());
                    }
                }
            }
            out
        }
        _ => data.to_vec(),
    }
}

fuzz_target!(|data: &[u8]| {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let input = client_bytes(data);
    let client = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).unwrap();
        let _ = stream.write_all(&input);
        let _ = stream.shutdown(Shutdown::Write);
        let mut replies = Vec::new();
        let _ = stream.read_to_end(&mut replies);
        replies
    });
    let target = InertTarget::new(0x4d2, &[0x4d2, 0x4d3], vec![0x90; 8192]);
    let end = serve(&listener, target);
    assert!(end.is_ok(), "the session ended in error: {end:?}");
    let replies = client.join().unwrap();
    // A `-` the stub answered may repeat a packet; replies stay whole.
    check_replies(&replies);
});
