//! retrace-dap's reading of Debug Adapter Protocol messages
//! (`dap::wire::read_message`) on arbitrary client input: no panic; every
//! message read is exactly the bytes its header announced, taken in order
//! from the input; writing it back frames the same bytes.
#![no_main]

#[path = "../../../tests/fuzz/allocation_limit.rs"]
mod allocation_limit;

use libfuzzer_sys::fuzz_target;
use retrace_plugin::dap::wire::{read_message, write_message, MAX_MESSAGE_BYTES};

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let mut consumed = 0;
    loop {
        let before = input.len();
        match read_message(&mut input) {
            Ok(Some(message)) => {
                assert!(message.bytes.len() <= MAX_MESSAGE_BYTES);
                consumed += before - input.len();
                // The body is the last bytes taken.
                assert_eq!(&data[consumed - message.bytes.len()..consumed], &message.bytes[..]);
                let mut framed = Vec::new();
                write_message(&mut framed, &message).unwrap();
                assert!(framed.ends_with(&message.bytes));
                let _ = (message.kind(), message.command(), message.seq(), message.request_seq(), message.arguments());
            }
            Ok(None) | Err(_) => break,
        }
    }
});
