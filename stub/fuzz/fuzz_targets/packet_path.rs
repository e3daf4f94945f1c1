//! Fuzzes the stub's packet path end to end: the input is what a client
//! sends over a loopback connection to a session (framer, grammar, thread
//! checks, the packets answered before gdbstub, gdbstub's state machine)
//! debugging an inert program (no process). Must never panic or end the
//! session in error; every reply is a whole packet with a right checksum,
//! no longer than PacketSize.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use libfuzzer_sys::fuzz_target;
use retrace_stub::protocol::session::{serve, PACKET_SIZE};
use retrace_stub::target::inert::InertTarget;

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
}

fuzz_target!(|data: &[u8]| {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let input = data.to_vec();
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
