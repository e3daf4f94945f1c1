//! `retrace ptdump`: list the packets of a raw Intel PT stream.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use retrace_decoder::packet::listing::{error_line, write_packet_line, ErrorRecord, PacketRecord};
use retrace_decoder::packet::PacketDecoder;

use crate::cli::error::CliError;

pub fn run(path: &Path, json: bool, no_sync: bool) -> Result<ExitCode, CliError> {
    let data = std::fs::read(path).map_err(CliError::file(path))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut decoder = PacketDecoder::new(&data);
    if !no_sync {
        match decoder.sync_forward() {
            Some(0) => {}
            Some(first) => note(&mut out, json, 0, &format!("skipped {first} bytes before the first PSB"))?,
            None => {
                note(&mut out, json, 0, &format!("no PSB in {} bytes; use --no-sync to decode from offset 0", data.len()))?;
                out.flush()?;
                return Ok(ExitCode::from(2));
            }
        }
    }
    let (mut packets, mut errors) = (0u64, 0u64);
    let mut line = String::with_capacity(128);
    loop {
        match decoder.next_packet() {
            Ok(None) => break,
            Ok(Some((offset, packet))) => {
                packets += 1;
                if json {
                    serde_json::to_writer(&mut out, &PacketRecord { offset, packet: &packet }).map_err(std::io::Error::from)?;
                    out.write_all(b"\n")?;
                } else {
                    line.clear();
                    write_packet_line(&mut line, offset, &packet).expect("writing to a String");
                    line.push('\n');
                    out.write_all(line.as_bytes())?;
                }
            }
            Err(error) => {
                errors += 1;
                let resumed_at = decoder.sync_forward();
                if json {
                    serde_json::to_writer(&mut out, &ErrorRecord::new(&error, resumed_at)).map_err(std::io::Error::from)?;
                    out.write_all(b"\n")?;
                } else {
                    writeln!(out, "{}", error_line(&error, resumed_at))?;
                }
                if resumed_at.is_none() {
                    break;
                }
            }
        }
    }
    out.flush()?;
    tracing::info!(packets, errors, bytes = data.len(), "ptdump done");
    if errors > 0 {
        eprintln!("{}: {packets} packets, {errors} decode error(s)", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn note(out: &mut impl Write, json: bool, offset: usize, message: &str) -> Result<(), CliError> {
    if json {
        let record = serde_json::json!({ "offset": offset, "note": message });
        writeln!(out, "{record}")?;
    } else {
        writeln!(out, "[{offset:016x}: {message}]")?;
    }
    Ok(())
}
