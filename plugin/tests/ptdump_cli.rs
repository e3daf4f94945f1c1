//! `retrace ptdump` and `retrace encode` as a user runs them.

use std::path::PathBuf;
use std::process::Command;

const PSB: [u8; 16] = [0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82];

fn retrace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retrace")).args(args).output().expect("run retrace")
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("retrace-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A stream written byte by byte from the SDM encodings, with a bad packet
/// in the middle and a truncated packet at the end.
fn corrupted_stream() -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&PSB); // 0x00 psb
    bytes.extend_from_slice(&[0x02, 0x23]); // 0x10 psbend
    bytes.extend_from_slice(&[0x51, 0x36, 0x11, 0x40, 0x00]); // 0x12 tip.pge, IPBytes 2: 0x00401136
    bytes.push(0x1a); // 0x17 tnt.8: stop bit 3, bits 101 = taken, not taken, taken
    bytes.extend_from_slice(&[0x02, 0x04, 0x00, 0xff]); // 0x18 no such extended opcode
    bytes.extend_from_slice(&PSB); // 0x1c psb
    bytes.extend_from_slice(&[0x02, 0x23]); // 0x2c psbend
    bytes.extend_from_slice(&[0x7d, 0x90, 0x60, 0xdd, 0xf7, 0xff, 0x7f]); // 0x2e fup, IPBytes 3
    bytes.extend_from_slice(&[0x19, 0x01, 0x02]); // 0x35 tsc, 5 of its 8 bytes missing
    bytes
}

#[test]
fn ptdump_reports_errors_with_offsets_and_resumes_at_next_psb() {
    let path = temp_file("corrupt.pt", &corrupted_stream());
    let out = retrace(&["ptdump", path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected = [
        "0000000000000000  psb",
        "0000000000000010  psbend",
        "0000000000000012  tip.pge   2: ????????00401136      ip   0000000000401136",
        "0000000000000017  tnt.8     !.!",
        "[0000000000000018: error: unknown extended opcode 02 04; resuming at PSB 000000000000001c]",
        "000000000000001c  psb",
        "000000000000002c  psbend",
        "000000000000002e  fup       3: 00007ffff7dd6090      ip   00007ffff7dd6090",
        "[0000000000000035: error: truncated packet (8 bytes needed, 3 left); no PSB follows]",
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("7 packets, 2 decode error(s)"), "{stderr}");
}

#[test]
fn ptdump_json_has_offsets_payloads_and_errors() {
    let path = temp_file("corrupt-json.pt", &corrupted_stream());
    let out = retrace(&["ptdump", "--json", path.to_str().unwrap()]);
    assert!(out.status.success());
    let records: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 9);
    assert_eq!(records[2]["packet"], "tip.pge");
    assert_eq!(records[2]["offset"], 0x12);
    assert_eq!(records[2]["payload"]["ip"], 0x401136);
    assert_eq!(records[2]["payload"]["compression"], "update32");
    assert_eq!(records[3]["payload"]["bits"], 0b101);
    assert_eq!(records[4]["offset"], 0x18);
    assert_eq!(records[4]["libipt_error"], "bad_opc");
    assert_eq!(records[4]["resumed_at"], 0x1c);
    assert_eq!(records[8]["libipt_error"], "eos");
    assert_eq!(records[8]["resumed_at"], serde_json::Value::Null);
}

#[test]
fn ptdump_skips_to_first_psb_unless_told_not_to() {
    let mut bytes = vec![0x00, 0x00, 0x99];
    bytes.extend_from_slice(&PSB);
    let path = temp_file("prefix.pt", &bytes);
    let synced = String::from_utf8(retrace(&["ptdump", path.to_str().unwrap()]).stdout).unwrap();
    assert_eq!(synced.lines().collect::<Vec<_>>(), ["[0000000000000000: skipped 3 bytes before the first PSB]", "0000000000000003  psb"]);
    let raw = String::from_utf8(retrace(&["ptdump", "--no-sync", path.to_str().unwrap()]).stdout).unwrap();
    let lines: Vec<_> = raw.lines().collect();
    assert_eq!(lines[0], "0000000000000000  pad");
    assert_eq!(lines[1], "0000000000000001  pad");
    // 99 02 is MODE with leaf 0 and bit 1 set: cs.d; then the PSB is broken.
    assert_eq!(lines[2], "0000000000000002  mode.exec cs.d");
}

#[test]
fn missing_file_is_an_error_with_the_path() {
    let out = retrace(&["ptdump", "/nonexistent/trace.pt"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("/nonexistent/trace.pt") && stderr.contains("No such file"), "{stderr}");
}

#[test]
fn encode_example_script_round_trips_through_ptdump() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/hello.pts");
    let dir = std::env::temp_dir().join(format!("retrace-cli-enc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("hello.pt");
    let out = retrace(&["encode", script, "-o", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&trace).unwrap();
    assert_eq!(&bytes[..16], &PSB);
    let listing = String::from_utf8(retrace(&["ptdump", trace.to_str().unwrap()]).stdout).unwrap();
    // The script's tip.pge 401136 after a PSB (last IP 0) takes a 32-bit update;
    // the next tip 401200 only differs in the low 16 bits.
    assert!(listing.contains("tip.pge   2: ????????00401136      ip   0000000000401136"), "{listing}");
    assert!(listing.contains("tip       1: ????????????1200      ip   0000000000401200"), "{listing}");
    assert_eq!(listing.lines().filter(|l| l.contains(": error: ")).count(), 1);

    let bad = temp_file("bad.pts", b"psb\nfrobnicate 12\n");
    let out = retrace(&["encode", bad.to_str().unwrap(), "-o", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("line 2: unknown packet \"frobnicate\""));
}
