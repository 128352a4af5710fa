//! Space reservation for store files: `posix_fallocate`, never a sparse `set_len`. Writing a
//! sparse page of a mapped file on a full disk kills the process with SIGBUS; fallocate fails
//! with ENOSPC instead, before anything is mapped. It lives beside the mapping it protects
//! (and the fence's syscall helper it calls), so `util` needs nothing from this layer.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// Reserves `len` bytes of real disk blocks for `file` (never sparse).
pub fn preallocate(file: &File, path: &Path, len: u64) -> Result<()> {
    use std::os::unix::io::AsRawFd;
    let len_off = libc::off_t::try_from(len)
        .map_err(|_| Error::io("fallocate", path, std::io::Error::other("length too large")))?;
    // posix_fallocate returns the error number instead of setting errno.
    let rc = fallocate_raw(file.as_raw_fd(), len_off);
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => zero_fill(file, path, len),
        e => Err(Error::io(
            "fallocate",
            path,
            std::io::Error::from_raw_os_error(e),
        )),
    }
}

fn fallocate_raw(fd: libc::c_int, len: libc::off_t) -> libc::c_int {
    // posix_fallocate is declared unsafe by the libc crate; the crate keeps its unsafe code in
    // the mmap fence, so it is called through the fence's helper.
    super::mmap::posix_fallocate(fd, len)
}

/// Fallback for file systems without fallocate: write real zeros so no page is sparse.
fn zero_fill(file: &File, path: &Path, len: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let current = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    let zeros = vec![0u8; 1 << 20];
    let mut pos = current;
    while pos < len {
        let n = usize::try_from((len - pos).min(zeros.len() as u64)).unwrap_or(zeros.len());
        let chunk = zeros.get(..n).unwrap_or(&zeros);
        file.write_all_at(chunk, pos)
            .map_err(|e| Error::io("zero_fill", path, e))?;
        pos += n as u64;
    }
    Ok(())
}
