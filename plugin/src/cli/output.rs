//! Bulk text output: gathered in large buffers, indentation by reference,
//! written with `writev` to standard output or a file.

/// Standard output for bulk text (see [`BulkOutput`]).
pub(crate) fn bulk_stdout() -> BulkOutput {
    BulkOutput::new(Sink::Stdout)
}

/// Where a [`BulkOutput`] sends its text.
#[derive(Debug)]
pub enum Sink {
    /// File descriptor 1.
    Stdout,
    /// A file (LLDB's `-F`).
    File(std::fs::File),
    /// Memory, for the caller to take ([`BulkOutput::into_text`]): the
    /// LLDB shim's dumps shown in LLDB's console.
    Memory(Vec<u8>),
}

/// Text that indents: two spaces per level.
pub(crate) trait Indented: std::io::Write {
    /// Writes `levels` levels of indentation.
    fn indent(&mut self, levels: usize) -> std::io::Result<()>;
}

/// Output for bulk text, written straight to a file descriptor (standard
/// output or a file) with `writev`: text is gathered in a 256 KiB buffer,
/// and indentation ([`Indented::indent`]) is a pointer into one static
/// buffer of spaces rather than copied (call trees nest thousands of levels
/// deep: most of their bytes are indentation). Rust's `Stdout` is
/// line-buffered and searches every byte written for a newline; this does
/// not.
#[derive(Debug)]
pub struct BulkOutput {
    gathered: Gathered,
    sink: Sink,
}

/// Text gathered for output, indentation as counts of spaces:
/// what [`BulkOutput`] holds until it writes, or a part of the output
/// made elsewhere (another thread) and appended whole
/// ([`BulkOutput::append`]).
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    text: Vec<u8>,
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, Copy)]
enum Piece {
    /// `n` spaces.
    Spaces(usize),
    /// `text[start..end]`.
    Text(usize, usize),
}

static SPACES: [u8; 65536] = [b' '; 65536];

impl Indented for Gathered {
    fn indent(&mut self, levels: usize) -> std::io::Result<()> {
        if levels > 0 {
            self.pieces.push(Piece::Spaces(2 * levels));
        }
        Ok(())
    }
}

impl std::io::Write for Gathered {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let start = self.text.len();
        self.text.extend_from_slice(buf);
        match self.pieces.last_mut() {
            Some(Piece::Text(_, end)) if *end == start => *end = self.text.len(),
            _ => self.pieces.push(Piece::Text(start, self.text.len())),
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Gathered {
    /// The text, indentation included.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for piece in &self.pieces {
            match *piece {
                Piece::Text(start, end) => bytes.extend_from_slice(&self.text[start..end]),
                Piece::Spaces(n) => bytes.resize(bytes.len() + n, b' '),
            }
        }
        bytes
    }

    /// Writes everything gathered to `sink`, and empties it.
    fn send(&mut self, sink: &mut Sink) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let descriptor = match sink {
            Sink::Stdout => 1,
            Sink::File(file) => file.as_raw_fd(),
            Sink::Memory(text) => {
                for piece in &self.pieces {
                    match *piece {
                        Piece::Text(start, end) => text.extend_from_slice(&self.text[start..end]),
                        Piece::Spaces(n) => text.resize(text.len() + n, b' '),
                    }
                }
                self.pieces.clear();
                self.text.clear();
                return Ok(());
            }
        };
        let mut slices: Vec<&[u8]> = Vec::with_capacity(self.pieces.len() * 2);
        for piece in &self.pieces {
            match *piece {
                Piece::Text(start, end) => slices.push(&self.text[start..end]),
                Piece::Spaces(mut n) => {
                    while n > 0 {
                        let k = n.min(SPACES.len());
                        slices.push(&SPACES[..k]);
                        n -= k;
                    }
                }
            }
        }
        let mut done = 0;
        let mut offset = 0;
        while done < slices.len() {
            let batch: Vec<libc::iovec> = slices[done..slices.len().min(done + 1024)]
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let s = if i == 0 { &s[offset..] } else { s };
                    libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() }
                })
                .collect();
            // SAFETY: every iovec points into `self.text` or `SPACES`, both
            // alive and unchanged during the call.
            let written = unsafe { libc::writev(descriptor, batch.as_ptr(), batch.len() as libc::c_int) };
            if written < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            // Skip what was written (possibly part of a slice).
            let mut left = written as usize;
            while done < slices.len() && left >= slices[done].len() - offset {
                left -= slices[done].len() - offset;
                done += 1;
                offset = 0;
            }
            offset += left;
        }
        self.pieces.clear();
        self.text.clear();
        Ok(())
    }
}

impl BulkOutput {
    const TEXT_LIMIT: usize = 256 * 1024;
    const PIECE_LIMIT: usize = 512;

    /// Output to `sink`.
    pub fn new(sink: Sink) -> BulkOutput {
        BulkOutput { gathered: Gathered { text: Vec::with_capacity(Self::TEXT_LIMIT + 4096), pieces: Vec::new() }, sink }
    }

    /// The text written, for a [`Sink::Memory`] (empty for the others).
    pub fn into_text(mut self) -> std::io::Result<Vec<u8>> {
        self.gathered.send(&mut self.sink)?;
        match std::mem::replace(&mut self.sink, Sink::Memory(Vec::new())) {
            Sink::Memory(text) => Ok(text),
            _ => Ok(Vec::new()),
        }
    }

    /// Writes `part` after what was written so far.
    pub(crate) fn append(&mut self, mut part: Gathered) -> std::io::Result<()> {
        self.gathered.send(&mut self.sink)?;
        part.send(&mut self.sink)
    }

    fn send_when_full(&mut self) -> std::io::Result<()> {
        if self.gathered.text.len() >= Self::TEXT_LIMIT || self.gathered.pieces.len() >= Self::PIECE_LIMIT {
            self.gathered.send(&mut self.sink)?;
        }
        Ok(())
    }
}

impl Indented for BulkOutput {
    fn indent(&mut self, levels: usize) -> std::io::Result<()> {
        self.gathered.indent(levels)?;
        self.send_when_full()
    }
}

impl std::io::Write for BulkOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::Write::write_all(&mut self.gathered, buf)?;
        self.send_when_full()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.gathered.send(&mut self.sink)
    }
}

impl Drop for BulkOutput {
    fn drop(&mut self) {
        let _ = self.gathered.send(&mut self.sink);
    }
}

