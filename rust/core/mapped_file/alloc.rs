//! Space reservation for store files: `posix_fallocate`, never a write into an unreserved page
//! through a mapping. Writing a page with no disk block behind it through a mapping kills the
//! process with SIGBUS when the disk is full; fallocate fails with ENOSPC instead, before the
//! page is written. It lives beside the mapping it protects (and the fence's syscall helper it
//! calls), so `util` needs nothing from this layer.
//!
//! Two shapes of file use it (`Reserve`, chosen by the file's queue):
//! - `Reserve::Whole`: the whole file is fallocated at creation (the commit log).
//! - `Reserve::Grow`: the file is given its full length sparsely (`extend_sparse`: a hole reads
//!   as zeros and costs no block), then only a prefix is fallocated, and the reservation grows
//!   ahead of the writer (consume queues: a queue's disk follows its data).
//!
//! Invariant (both shapes): the single writer of a file writes through the mapping only below
//! its reserved end (`MappedFile::reserved`); bytes below it have real blocks.
//!
//! Runtime files shared by processes through a mapping (the wake-up page, `run/writer.shm`)
//! reserve a range (`preallocate_range`) before any process touches its pages: on tmpfs even a
//! read of a hole through a shared mapping allocates a page, so there a read fault on a full
//! disk is a SIGBUS too.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// How a file's disk blocks are reserved (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// The whole file, at creation.
    Whole,
    /// `initial` bytes at creation (the whole file if it is smaller), then more ahead of the
    /// writer, doubling what is reserved each time (`next_reserve`).
    Grow {
        /// Bytes reserved at creation.
        initial: u64,
    },
}

/// The reserved end to grow to so that `[0, end)` is reserved, for a file of `size` bytes with
/// `reserved` bytes reserved: at least `end` plus `initial`, and at least twice what is
/// reserved, so a file costs at most about twice its data and takes a logarithmic number of
/// fallocate calls to fill; rounded up to whole pages, never past `size`.
pub fn next_reserve(end: u64, reserved: u64, initial: u64, size: u64) -> u64 {
    const PAGE: u64 = 4096;
    let want = end.saturating_add(initial).max(reserved.saturating_mul(2));
    want.div_ceil(PAGE).saturating_mul(PAGE).min(size)
}

/// Reserves real disk blocks for the bytes `[0, len)` of `file` (never sparse). Bytes already
/// reserved or written are kept as they are.
pub fn preallocate(file: &File, path: &Path, len: u64) -> Result<()> {
    preallocate_range(file, path, 0, len)
}

/// Reserves real disk blocks for the bytes `[start, start + len)` of `file`, growing it if it
/// is shorter; bytes already reserved or written are kept as they are. A full disk is
/// `Error::StoreFull` and reserves nothing that a caller could rely on.
pub fn preallocate_range(file: &File, path: &Path, start: u64, len: u64) -> Result<()> {
    use std::os::unix::io::AsRawFd;
    let too_large = || Error::io("fallocate", path, std::io::Error::other("range too large"));
    let start_off = libc::off_t::try_from(start).map_err(|_| too_large())?;
    let len_off = libc::off_t::try_from(len).map_err(|_| too_large())?;
    start_off.checked_add(len_off).ok_or_else(too_large)?;
    // posix_fallocate returns the error number instead of setting errno.
    let rc = fallocate_raw(file.as_raw_fd(), start_off, len_off);
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => zero_fill(file, path, start, start + len),
        e => Err(Error::io(
            "fallocate",
            path,
            std::io::Error::from_raw_os_error(e),
        )),
    }
}

/// Gives `file` the length `len` without reserving blocks (the new bytes are a hole that
/// reads as zeros), if it is shorter. Never shrinks it.
pub fn extend_sparse(file: &File, path: &Path, len: u64) -> Result<()> {
    let current = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    if current < len {
        file.set_len(len)
            .map_err(|e| Error::io("ftruncate", path, e))?;
    }
    Ok(())
}

fn fallocate_raw(fd: libc::c_int, start: libc::off_t, len: libc::off_t) -> libc::c_int {
    // posix_fallocate is declared unsafe by the libc crate; the crate keeps its unsafe code in
    // the mmap fence, so it is called through the fence's helper.
    super::mmap::posix_fallocate(fd, start, len)
}

/// Fallback for file systems without fallocate: writes real zeros over every 4 KiB page of
/// `[start, end)` that reads as zeros (a hole, or bytes past the end), so no page stays
/// sparse; pages holding data are left as they are. `start` is a multiple of 4 KiB.
fn zero_fill(file: &File, path: &Path, start: u64, end: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    const PAGE: usize = 4096;
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK];
    let mut pos = start;
    while pos < end {
        let n = usize::try_from((end - pos).min(CHUNK as u64)).unwrap_or(CHUNK);
        let chunk = buf.get_mut(..n).unwrap_or_default();
        // Bytes past the end of the file read as nothing: they count as zeros.
        let mut got = 0;
        while got < n {
            let r = file
                .read_at(chunk.get_mut(got..).unwrap_or_default(), pos + got as u64)
                .map_err(|e| Error::io("read", path, e))?;
            if r == 0 {
                break;
            }
            got += r;
        }
        if let Some(rest) = chunk.get_mut(got..) {
            rest.fill(0);
        }
        // Consecutive all-zero pages are written back with one call.
        let mut at = 0;
        while at < n {
            let page_zero = |p: usize| {
                chunk
                    .get(p..(p + PAGE).min(n))
                    .is_some_and(|b| b.iter().all(|&x| x == 0))
            };
            if !page_zero(at) {
                at += PAGE;
                continue;
            }
            let start = at;
            while at < n && page_zero(at) {
                at += PAGE;
            }
            let end = at.min(n);
            let zeros = chunk.get(start..end).unwrap_or_default();
            file.write_all_at(zeros, pos + start as u64)
                .map_err(|e| Error::io("zero_fill", path, e))?;
        }
        pos += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_reservation_at_least_doubles_in_whole_pages_up_to_the_size() {
        let size = 1_000_000;
        assert_eq!(next_reserve(4116, 4096, 4096, size), 12288);
        assert_eq!(next_reserve(12308, 12288, 4096, size), 24576);
        assert_eq!(
            next_reserve(20, 0, 4096, size),
            8192,
            "reopened: the unit plus a page"
        );
        assert_eq!(next_reserve(999_990, 600_000, 4096, size), size);
    }

    /// The fallback for file systems without fallocate writes zeros over zero pages only: a
    /// page holding data keeps it.
    #[test]
    fn the_zero_fill_fallback_keeps_data_and_fills_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(64 << 10).unwrap();
        file.write_all_at(b"data", 8192).unwrap();
        zero_fill(&file, &path, 0, 128 << 10).unwrap();
        let meta = file.metadata().unwrap();
        assert_eq!(meta.len(), 128 << 10);
        assert!(meta.blocks() * 512 >= 128 << 10, "no hole left");
        let mut got = [0u8; 4];
        file.read_exact_at(&mut got, 8192).unwrap();
        assert_eq!(&got, b"data");
    }
}
