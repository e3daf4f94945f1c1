//! `retrace encode`: packet script → raw trace.

use std::path::Path;
use std::process::ExitCode;

use retrace_decoder::packet::script;

use crate::cli::error::CliError;

pub fn run(script_path: &Path, output: &Path) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(script_path).map_err(CliError::file(script_path))?;
    let items = script::parse(&text).map_err(|e| CliError::Message(format!("{}: {e}", script_path.display())))?;
    let bytes = script::encode(&items).map_err(|e| CliError::Message(format!("{}: {e}", script_path.display())))?;
    std::fs::write(output, &bytes).map_err(CliError::file(output))?;
    tracing::info!(items = items.len(), bytes = bytes.len(), "encoded {}", script_path.display());
    eprintln!("wrote {} bytes ({} items) to {}", bytes.len(), items.len(), output.display());
    Ok(ExitCode::SUCCESS)
}
