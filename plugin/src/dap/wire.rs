//! The Debug Adapter Protocol's framing: `Content-Length: N\r\n\r\n` and N
//! bytes of JSON. A message keeps its bytes, so what is passed on untouched
//! is passed on byte for byte.

use std::io::{self, BufRead, Write};

use serde_json::Value;

/// The longest message accepted (a longer length is an error, not an
/// allocation).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A header that is not `Content-Length: N`.
    #[error("a message header without a valid Content-Length: {0:?}")]
    BadHeader(String),
    /// A message longer than the adapter reads.
    #[error("a message of {0} bytes (at most {MAX_MESSAGE_BYTES} are read)")]
    TooLong(usize),
}

/// One message: its bytes, and their JSON when they are JSON.
#[derive(Debug, Clone)]
pub struct Message {
    /// The bytes as they came (passed on unchanged).
    pub bytes: Vec<u8>,
    /// Their JSON, when they are JSON.
    pub json: Option<Value>,
}

impl Message {
    /// A message made here.
    pub fn new(json: Value) -> Message {
        Message { bytes: serde_json::to_vec(&json).expect("a JSON value serializes"), json: Some(json) }
    }

    /// `type`: request, response or event.
    pub fn kind(&self) -> Option<&str> {
        self.json.as_ref()?.get("type")?.as_str()
    }

    /// A request's or a response's `command`.
    pub fn command(&self) -> Option<&str> {
        self.json.as_ref()?.get("command")?.as_str()
    }

    /// An event's `event`.
    pub fn event(&self) -> Option<&str> {
        self.json.as_ref()?.get("event")?.as_str()
    }

    /// `seq`: the message's number.
    pub fn seq(&self) -> Option<i64> {
        self.json.as_ref()?.get("seq")?.as_i64()
    }

    /// A response's `request_seq`.
    pub fn request_seq(&self) -> Option<i64> {
        self.json.as_ref()?.get("request_seq")?.as_i64()
    }

    /// A request's `arguments`.
    pub fn arguments(&self) -> Option<&Value> {
        self.json.as_ref()?.get("arguments")
    }
}

/// Reads the next message; `None` at the end of the input between messages.
pub fn read_message(input: &mut impl BufRead) -> Result<Option<Message>, WireError> {
    let mut length = None;
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            if length.is_none() {
                return Ok(None);
            }
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the input ended inside a message header").into());
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            if length.is_some() {
                break;
            }
            continue;
        }
        match header.split_once(':') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                length = Some(value.trim().parse::<usize>().map_err(|_| WireError::BadHeader(header.to_string()))?);
            }
            Some(_) => {} // another header (the protocol defines none): ignored
            None => return Err(WireError::BadHeader(header.to_string())),
        }
    }
    let length = length.expect("the loop leaves with a length");
    if length > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLong(length));
    }
    let mut bytes = vec![0; length];
    input.read_exact(&mut bytes)?;
    let json = serde_json::from_slice(&bytes).ok();
    Ok(Some(Message { bytes, json }))
}

/// Writes one message with its header, and flushes.
pub fn write_message(output: &mut impl Write, message: &Message) -> io::Result<()> {
    let mut framed = format!("Content-Length: {}\r\n\r\n", message.bytes.len()).into_bytes();
    framed.extend_from_slice(&message.bytes);
    output.write_all(&framed)?;
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_byte_for_byte() {
        let body = br#"{"seq":1, "type":"request","command":"initialize"}"#;
        let mut input = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        input.extend_from_slice(body);
        input.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
        let mut reader = &input[..];
        let first = read_message(&mut reader).unwrap().unwrap();
        assert_eq!(first.bytes, body);
        assert_eq!(first.command(), Some("initialize"));
        assert_eq!(first.seq(), Some(1));
        let mut written = Vec::new();
        write_message(&mut written, &first).unwrap();
        assert_eq!(written, input[..written.len()]);
        assert_eq!(read_message(&mut reader).unwrap().unwrap().bytes, b"{}");
        assert!(read_message(&mut reader).unwrap().is_none());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(read_message(&mut &b"Content-Length: x\r\n\r\n"[..]), Err(WireError::BadHeader(_))));
        assert!(matches!(read_message(&mut &b"garbage\r\n\r\n"[..]), Err(WireError::BadHeader(_))));
        assert!(matches!(read_message(&mut &b"Content-Length: 99999999999\r\n\r\n"[..]), Err(WireError::TooLong(_))));
        assert!(matches!(read_message(&mut &b"Content-Length: 10\r\n\r\n{}"[..]), Err(WireError::Io(_))));
        assert!(matches!(read_message(&mut &b"Content-Length: 2\r\n"[..]), Err(WireError::Io(_))));
        // Not JSON: kept as bytes, to be passed on.
        let message = read_message(&mut &b"Content-Length: 3\r\n\r\n{x}"[..]).unwrap().unwrap();
        assert!(message.json.is_none());
        assert_eq!(message.bytes, b"{x}");
    }
}
