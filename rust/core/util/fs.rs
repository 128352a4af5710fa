//! The one place that knows the durability protocol for files and directories.
//!
//! - New files are created with `O_NOFOLLOW | O_CLOEXEC` and the configured mode, so a symlink
//!   planted at a store file name is refused and descriptors do not leak into child processes.
//! - Space is reserved with `posix_fallocate` before anything is written into it through a
//!   mapping (mapped_file/alloc.rs, next to the mapping it protects). A file may be given its
//!   length sparsely (`set_len`) only where its writer reserves ahead of itself before writing
//!   (`Reserve::Grow`: consume queues).
//! - A file's creation is durable only after `fsync(file)` and `fsync(parent dir)`.
//! - Metadata files are replaced atomically: write temp, fsync, rename over, fsync directory
//!   ([`stage`] then [`Staged::replace`]; a kill point can sit between the two).
//! - Every call that changes what survives a power cut (create, mkdir, fsync, fdatasync, msync,
//!   rename, unlink, directory fsync) is made here, through `durable!`: in test builds with the
//!   `fault-injection` feature the power-cut simulator (testing/power_cut.rs) records it;
//!   otherwise the macro is the bare call.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// Runs the I/O call `$op` (a closure), which `power_cut::Event::$kind($args)` describes to the
/// power-cut recorder in `fault-injection` builds. Without the feature: just the call.
macro_rules! durable {
    ($kind:ident ( $($arg:expr),* ), $op:expr) => {{
        #[cfg(feature = "fault-injection")]
        let out = crate::testing::power_cut::around(
            crate::testing::power_cut::Event::$kind($($arg),*),
            $op,
        );
        #[cfg(not(feature = "fault-injection"))]
        let out = ($op)();
        out
    }};
}

/// Opens (creating if needed) a file for read/write without following symlinks.
pub fn open_rw(path: &Path, mode: u32) -> Result<File> {
    durable!(Create(path), || OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path))
    .map_err(|e| Error::io("open", path, e))
}

/// Creates a new file for read/write (failing when the name exists) without following
/// symlinks.
pub fn create_new_rw(path: &Path, mode: u32) -> Result<File> {
    durable!(Create(path), || OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path))
    .map_err(|e| Error::io("create", path, e))
}

/// rename(from, to), replacing `to`; not synced (the directory's fsync is the caller's).
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    durable!(Rename(from, to), || std::fs::rename(from, to)).map_err(|e| Error::io("rename", to, e))
}

/// True when every byte of the file at `path` is zero (a file preallocated and never
/// written). Reads at most up to the first non-zero byte.
pub fn is_all_zero(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f = open_ro(path)?;
    // Small reads: the usual file has data in its first page, and one read answers.
    let mut buf = [0u8; 4096];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io("read", path, e))?;
        let Some(chunk) = buf.get(..n) else {
            return Ok(false);
        };
        if n == 0 {
            return Ok(true);
        }
        if chunk.iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
}

/// Opens an existing file read-only without following symlinks.
pub fn open_ro(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("open", path, e))
}

/// Opens an existing store file again (read/write when `writable`) without creating it or
/// following a symlink: for the calls a mapping cannot make (mapped_file/mod.rs). Nothing
/// about the file changes, so this is no durability call.
pub fn reopen(path: &Path, writable: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("open", path, e))
}

/// The error for a symlink found where the store creates or opens a file or directory of its
/// own: ELOOP, the errno an `O_NOFOLLOW` open of a symlink gives, so callers see an errno.
pub fn symlink_refused(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::Error::from_raw_os_error(libc::ELOOP))
}

/// Creates `path` and its parents with `mode`, durably: each directory it creates has its
/// entry fsynced into its parent before this returns (a file made durable inside a directory
/// whose own entry is not is lost with it). Refuses a symlink at `path`.
pub fn create_dir_all(path: &Path, mode: u32) -> Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() {
            return Err(symlink_refused(
                "create_dir (a symlink is never followed)",
                path,
            ));
        }
        if !meta.is_dir() {
            return Err(Error::io(
                "create_dir",
                path,
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        return Ok(());
    }
    // Deepest first: an entry becomes durable only once everything below it is.
    let created: Vec<&Path> = path.ancestors().take_while(|a| !entry_exists(a)).collect();
    durable!(CreateDir(path), || std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path))
    .map_err(|e| Error::io("create_dir", path, e))?;
    for dir in created {
        match dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => fsync_dir(parent)?,
            _ => fsync_dir(Path::new("."))?,
        }
    }
    Ok(())
}

/// fsync of a directory, making entries created or renamed in it durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let f = File::open(dir).map_err(|e| Error::io("open_dir", dir, e))?;
    durable!(SyncDir(dir), || f.sync_all()).map_err(|e| Error::io("fsync_dir", dir, e))
}

/// fsync of a file: its bytes, size and allocation are durable when this returns.
pub fn sync_file(file: &File, path: &Path) -> Result<()> {
    durable!(Sync(path, None), || file.sync_all()).map_err(|e| Error::io("fsync", path, e))
}

/// fdatasync of a file: its bytes (and the size needed to read them) are durable.
pub fn sync_data(file: &File, path: &Path) -> Result<()> {
    durable!(Sync(path, None), || file.sync_data()).map_err(|e| Error::io("fdatasync", path, e))
}

/// Makes the file's bytes `[from, to)` durable with `msync`, the call `msync` makes (the
/// mapping is mapped_file's); the error is reported as an `msync` failure of `path`.
pub fn sync_range(
    path: &Path,
    from: u64,
    to: u64,
    msync: impl FnOnce() -> std::io::Result<()>,
) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    crate::testing::flush_fault().map_err(|e| Error::io("msync", path, e))?;
    // The range is for the power-cut recorder only.
    #[cfg(not(feature = "fault-injection"))]
    let _ = (from, to);
    durable!(Sync(path, Some((from, to))), msync).map_err(|e| Error::io("msync", path, e))
}

/// Unlinks `path` (durable once its directory is fsynced). A missing file is an `Io` error
/// with `NotFound`.
pub fn remove_file(path: &Path) -> Result<()> {
    durable!(Remove(path), || std::fs::remove_file(path)).map_err(|e| Error::io("unlink", path, e))
}

/// Gives `from`'s file the name `to` as well, never replacing an existing `to`: the
/// `AlreadyExists` error then says another creator published that name first.
pub fn hard_link(from: &Path, to: &Path) -> std::io::Result<()> {
    durable!(Link(from, to), || std::fs::hard_link(from, to))
}

/// A temp file written and synced next to the file it will replace ([`stage`]); nothing is
/// replaced until [`Staged::replace`].
#[derive(Debug)]
#[must_use = "a staged file replaces nothing until `replace` is called"]
pub struct Staged {
    path: std::path::PathBuf,
    tmp: std::path::PathBuf,
}

/// First half of an atomic replace of `path` with `data`: writes and fsyncs the temp file
/// `.<name>.tmp` in the same directory. A crash after it leaves `path` untouched and a stray
/// temp file, which the next write truncates.
pub fn stage(path: &Path, data: &[u8], mode: u32) -> Result<Staged> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = durable!(Create(&tmp), || OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp))
    .map_err(|e| Error::io("open", &tmp, e))?;
    f.write_all(data).map_err(|e| Error::io("write", &tmp, e))?;
    sync_file(&f, &tmp)?;
    Ok(Staged {
        path: path.to_path_buf(),
        tmp,
    })
}

impl Staged {
    /// Second half: renames the temp file over the target and fsyncs the directory. With
    /// `rotate`, the previous version is first kept as `<path>.bak` (RocketMQ's config
    /// rotation); callers pass false when the current file could not be read, so that a `.bak`
    /// it was loaded from is never overwritten with it.
    pub fn replace(self, rotate: bool) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        if rotate && self.path.exists() {
            let bak = backup_path(&self.path);
            durable!(Create(&bak), || std::fs::copy(&self.path, &bak))
                .map_err(|e| Error::io("backup", &bak, e))?;
            // Durable before the rename: a power cut after it must not leave a `.bak` that
            // is empty or short (the reader's fallback when the main file is damaged).
            sync_file(&open_ro(&bak)?, &bak)?;
        }
        durable!(Rename(&self.tmp, &self.path), || std::fs::rename(
            &self.tmp, &self.path
        ))
        .map_err(|e| Error::io("rename", &self.path, e))?;
        fsync_dir(dir)
    }
}

/// `<path>.bak`.
pub fn backup_path(path: &Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".bak");
    std::path::PathBuf::from(s)
}

/// A config file's content as read by [`read_with_backup`].
#[derive(Debug)]
pub struct Loaded<T> {
    /// The decoded content.
    pub value: T,
    /// True when it came from `<path>.bak` because `path` exists but could not be decoded
    /// (a write must then not rotate `path` into the `.bak`).
    pub main_unreadable: bool,
}

/// Reads a config file, falling back to `<path>.bak` when the file is missing, empty or fails
/// `parse` (RocketMQ's reader behaviour). `parse` gets the path it decodes and reports a bad
/// file as an error (`Error::ConfigFile`).
///
/// Returns `None` only when neither file holds anything (both missing or empty). A file that
/// fails `parse` is never taken as empty: without a usable `.bak` its error is returned (the
/// main file's when both are bad, with the `.bak`'s reason appended).
pub fn read_with_backup<T>(
    path: &Path,
    parse: impl Fn(&Path, &[u8]) -> Result<T>,
) -> Result<Option<Loaded<T>>> {
    let bak = backup_path(path);
    let main_error = match read_nonempty(path)? {
        Some(bytes) => match parse(path, &bytes) {
            Ok(value) => {
                return Ok(Some(Loaded {
                    value,
                    main_unreadable: false,
                }))
            }
            Err(e) => Some(e),
        },
        None => None,
    };
    let bak_error = match read_nonempty(&bak)? {
        Some(bytes) => match parse(&bak, &bytes) {
            Ok(value) => {
                return Ok(Some(Loaded {
                    value,
                    main_unreadable: main_error.is_some(),
                }))
            }
            Err(e) => Some(e),
        },
        None => None,
    };
    match (main_error, bak_error) {
        (
            Some(Error::ConfigFile {
                path,
                field,
                reason,
            }),
            bak_error,
        ) => {
            let also = match bak_error {
                Some(e) => format!("; its .bak is unreadable too ({e})"),
                None => "; its .bak is missing or empty".to_owned(),
            };
            Err(Error::ConfigFile {
                path,
                field,
                reason: reason + &also,
            })
        }
        (Some(e), _) | (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}

/// The bytes of `path`; `None` when it is missing. O_NOFOLLOW: a symlink planted at a config
/// name is refused (ELOOP), never followed.
pub fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut f = match open_ro(path) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(Some(bytes))
}

/// `read_if_exists`, with an empty file taken as missing.
fn read_nonempty(path: &Path) -> Result<Option<Vec<u8>>> {
    Ok(read_if_exists(path)?.filter(|b| !b.is_empty()))
}

/// True when something (a file, a directory, a link, even a dangling one) is at `path`.
pub fn entry_exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// True when `path` exists and is a symbolic link.
pub fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
}

/// The 20-digit zero-padded file name RocketMQ gives a file starting at `offset`.
pub fn offset_file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// The name a segment file starting at `offset` is created under before it is published
/// with [`hard_link`]: hidden, unique to this process and call (`seq`), never parsed as a
/// segment by [`parse_offset_file_name`].
pub fn segment_temp_name(offset: u64, seq: u64) -> String {
    format!(".{offset:020}.{}.{seq}.tmp", std::process::id())
}

/// Whether `name` is a segment's temporary name ([`segment_temp_name`]).
pub fn is_segment_temp_name(name: &str) -> bool {
    name.starts_with('.')
        && name.ends_with(".tmp")
        && name
            .get(1..21)
            .is_some_and(|d| parse_offset_file_name(d).is_some())
}

/// The start offset a segment file's name gives: exactly 20 decimal digits, else `None`.
pub fn parse_offset_file_name(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// The entries of `dir` with UTF-8 names, as (name, path), unsorted; none when `dir` does not
/// exist.
pub fn dir_entries(dir: &Path) -> Result<Vec<(String, std::path::PathBuf)>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read_dir", dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("read_dir", dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_where_a_directory_belongs_is_refused_with_eloop() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("loop");
        std::os::unix::fs::symlink(&link, &link).unwrap();
        match create_dir_all(&link, 0o700) {
            Err(Error::Io { source, path, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ELOOP));
                assert_eq!(path, link);
            }
            other => panic!("expected an Io error with ELOOP, got {other:?}"),
        }
    }
}
