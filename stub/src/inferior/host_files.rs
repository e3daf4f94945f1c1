//! Files of the machine the stub runs on, read for the client (`vFile:open`,
//! `pread`, `fstat`, `readlink`, `close`: GDB's Host I/O), as gdbserver
//! serves them: GDB reads `/proc/PID/maps` (`info proc mappings`, and at
//! every connection, where it warned "unable to open /proc file") and the
//! program's files through them. Read-only: an open for writing is refused
//! (`EACCES`). The same for every target: one table of open files per stub
//! (a stub serves one session).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Mutex;

use gdbstub::target::ext::host_io::{HostIoErrno, HostIoError, HostIoOpenFlags, HostIoOpenMode, HostIoStat};

/// The most files a client may hold open at once.
const MAX_OPEN: usize = 64;

/// A file open for the client: one of the machine's, or text the target
/// gives for a path of its own (a replay's `/proc/PID/maps`).
#[derive(Debug)]
enum Open {
    Disk(File),
    Text(Vec<u8>),
}

/// Open files by the descriptor the client was given.
static OPEN: Mutex<Option<(u32, HashMap<u32, Open>)>> = Mutex::new(None);

/// What a target makes of a path the client opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetFile {
    /// The machine's own file.
    Host,
    /// The target's text for it.
    Text(Vec<u8>),
    /// No such file for the target (a replay's process has no `/proc`
    /// entry on this machine: another process's would be wrong).
    Missing,
}

/// `vFile:open` of a path a target answers: its text, or the machine's
/// file, or `ENOENT`.
pub fn open_for<E>(filename: &[u8], flags: HostIoOpenFlags, target: TargetFile) -> Result<u32, HostIoError<E>> {
    match target {
        TargetFile::Host => open(filename, flags),
        TargetFile::Text(text) => keep(Open::Text(text)),
        TargetFile::Missing => Err(errno(HostIoErrno::ENOENT)),
    }
}

fn keep<E>(file: Open) -> Result<u32, HostIoError<E>> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let (next, files) = open.get_or_insert_with(|| (0, HashMap::new()));
    if files.len() >= MAX_OPEN {
        return Err(errno(HostIoErrno::EMFILE));
    }
    let fd = *next;
    *next = next.wrapping_add(1);
    files.insert(fd, file);
    Ok(fd)
}

fn errno<E>(errno: HostIoErrno) -> HostIoError<E> {
    HostIoError::Errno(errno)
}

/// `vFile:open`: read-only opens only.
pub fn open<E>(filename: &[u8], flags: HostIoOpenFlags) -> Result<u32, HostIoError<E>> {
    let writes = HostIoOpenFlags::O_WRONLY | HostIoOpenFlags::O_RDWR | HostIoOpenFlags::O_APPEND | HostIoOpenFlags::O_CREAT | HostIoOpenFlags::O_TRUNC;
    if flags.intersects(writes) {
        return Err(errno(HostIoErrno::EACCES));
    }
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(filename));
    keep(Open::Disk(File::open(path)?))
}

/// `vFile:close`.
pub fn close<E>(fd: u32) -> Result<(), HostIoError<E>> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    match open.as_mut().and_then(|(_, files)| files.remove(&fd)) {
        Some(_) => Ok(()),
        None => Err(errno(HostIoErrno::EBADF)),
    }
}

/// `vFile:pread`.
pub fn pread<E>(fd: u32, count: usize, offset: u64, buf: &mut [u8]) -> Result<usize, HostIoError<E>> {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let file = open.as_ref().and_then(|(_, files)| files.get(&fd)).ok_or(errno(HostIoErrno::EBADF))?;
    let count = count.min(buf.len());
    match file {
        Open::Disk(file) => Ok(file.read_at(&mut buf[..count], offset)?),
        Open::Text(text) => {
            let from = usize::try_from(offset).unwrap_or(usize::MAX).min(text.len());
            let n = count.min(text.len() - from);
            buf[..n].copy_from_slice(&text[from..from + n]);
            Ok(n)
        }
    }
}

/// `vFile:fstat`.
pub fn fstat<E>(fd: u32) -> Result<HostIoStat, HostIoError<E>> {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let file = open.as_ref().and_then(|(_, files)| files.get(&fd)).ok_or(errno(HostIoErrno::EBADF))?;
    let file = match file {
        Open::Disk(file) => file,
        // (As the kernel's /proc files: a regular file, read-only.)
        Open::Text(text) => {
            return Ok(HostIoStat {
                st_dev: 0,
                st_ino: 0,
                st_mode: HostIoOpenMode::S_IFREG | HostIoOpenMode::S_IRUSR | HostIoOpenMode::S_IRGRP | HostIoOpenMode::S_IROTH,
                st_nlink: 1,
                st_uid: 0,
                st_gid: 0,
                st_rdev: 0,
                st_size: text.len() as u64,
                st_blksize: 4096,
                st_blocks: 0,
                st_atime: 0,
                st_mtime: 0,
                st_ctime: 0,
            })
        }
    };
    let m = file.metadata()?;
    // (GDB's struct stat has 32-bit fields: larger values are cut.)
    Ok(HostIoStat {
        st_dev: m.dev() as u32,
        st_ino: m.ino() as u32,
        st_mode: HostIoOpenMode::from_bits_truncate(m.mode()),
        st_nlink: m.nlink() as u32,
        st_uid: m.uid(),
        st_gid: m.gid(),
        st_rdev: m.rdev() as u32,
        st_size: m.size(),
        st_blksize: m.blksize(),
        st_blocks: m.blocks(),
        st_atime: m.atime() as u32,
        st_mtime: m.mtime() as u32,
        st_ctime: m.ctime() as u32,
    })
}

/// `vFile:readlink`.
pub fn readlink<E>(filename: &[u8], buf: &mut [u8]) -> Result<usize, HostIoError<E>> {
    let target = std::fs::read_link(std::ffi::OsStr::from_bytes(filename))?;
    let bytes = target.as_os_str().as_bytes();
    let n = bytes.len().min(buf.len());
    buf[..n].copy_from_slice(&bytes[..n]);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok<T>(r: Result<T, HostIoError<String>>) -> T {
        r.unwrap_or_else(|e| panic!("host I/O failed: {}", match e { HostIoError::Errno(n) => format!("{n:?}"), HostIoError::Fatal(f) => f }))
    }

    #[test]
    fn files_are_read_never_written() {
        let fd = ok(open::<String>(b"/proc/self/maps", HostIoOpenFlags::O_RDONLY));
        let mut buf = [0u8; 64];
        let n = ok(pread::<String>(fd, 64, 0, &mut buf));
        assert!(n > 10 && buf[..n].contains(&b'-'), "{:?}", String::from_utf8_lossy(&buf[..n]));
        assert_eq!(ok(fstat::<String>(fd)).st_mode.bits() & 0o170000, 0o100000, "a regular file");
        ok(close::<String>(fd));
        assert!(matches!(close::<String>(fd), Err(HostIoError::Errno(HostIoErrno::EBADF))));
        assert!(matches!(pread::<String>(fd, 1, 0, &mut buf), Err(HostIoError::Errno(HostIoErrno::EBADF))));
        let path = std::env::temp_dir().join(format!("retrace-host-files-{}", std::process::id()));
        std::fs::write(&path, "keep").unwrap();
        for flags in [HostIoOpenFlags::O_WRONLY, HostIoOpenFlags::O_RDWR | HostIoOpenFlags::O_TRUNC, HostIoOpenFlags::O_CREAT] {
            assert!(matches!(open::<String>(path.as_os_str().as_bytes(), flags), Err(HostIoError::Errno(HostIoErrno::EACCES))));
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep");
        let _ = std::fs::remove_file(&path);
        assert!(matches!(open::<String>(b"/no/such/file", HostIoOpenFlags::O_RDONLY), Err(HostIoError::Errno(HostIoErrno::ENOENT))));
        let mut link = [0u8; 256];
        let n = ok(readlink::<String>(b"/proc/self/exe", &mut link));
        assert!(n > 0 && link[0] == b'/');
    }
}
