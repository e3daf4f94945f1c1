//! Text as the remote protocol carries it inside replies (names in
//! `qProcessInfo`, `qMemoryRegionInfo`…): two lowercase hex digits a byte.

/// `text` hex-encoded.
pub fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
