//! StoreMeta: the `meta` file, which makes a store self-describing (FORMAT.md §11).
//!
//! On disk: `<store>/meta`, 4096 bytes holding two identical 128-byte slots at bytes 0 and 2048:
//! magic, the store's format version, the commit-log file size, the consume-queue units per file
//! and the version of mqlite that created the store, then a CRC32 of the slot.
//!
//! Invariants
//! - The file is written once, when a writer finds it missing (a new store, or a store written
//!   before the file existed), and never rewritten: the geometry it records is the geometry of
//!   every file in the store. A read-only open never writes it.
//! - It is replaced atomically (temp file, fsync, rename, fsync of the directory), so a reader in
//!   another process sees either no file or a whole one.
//! - Both slots hold the same bytes; the second copy survives damage to the first (a bad sector),
//!   as the checkpoint's does.
//!
//! Crash behaviour: a crash before the rename leaves no `meta` (and perhaps a stale temp file,
//! replaced by the next write); the next writer open writes it again from the same geometry. A
//! `meta` with no valid slot is damage, never a crash artefact, and is an error naming the file
//! (`ConfigFile`): the geometry is not guessed over it.

mod derive;

use std::path::{Path, PathBuf};

pub use derive::{derive, Derived};

use crate::error::{Error, Result};
use crate::util::bytes::{be_u32, be_u64};
use crate::util::kill_point::kill_point;
use crate::util::two_copies::{self, FILE_LEN};
use crate::util::{crc, fs};

/// The store format version this build writes and reads (FORMAT.md, "Format version").
pub const FORMAT_VERSION: u32 = 1;
/// Slot magic ("MQLM").
pub const MAGIC: u32 = 0x4D51_4C4D;
/// The file's name under the store root.
pub const FILE_NAME: &str = "meta";

const SLOT_LEN: usize = 128;
const CREATED_BY_AT: usize = 25;
/// Longest created-by string a slot holds.
const CREATED_BY_MAX: usize = 63;
const CRC_AT: usize = SLOT_LEN - 4;

/// The sizes every file of a store is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Size of each commit-log file in bytes.
    pub commit_log_file_size: u64,
    /// Units (20 bytes each) per consume-queue file.
    pub consume_queue_file_units: u64,
}

impl Geometry {
    /// Consume-queue file size in bytes.
    pub fn consume_queue_file_size(&self) -> u64 {
        self.consume_queue_file_units * crate::consume_queue::unit::UNIT_SIZE
    }
}

/// The content of the `meta` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreMeta {
    /// The store's format version.
    pub format_version: u32,
    /// The file sizes.
    pub geometry: Geometry,
    /// What created the store (`"mqlite <version>"`), at most 63 bytes of UTF-8.
    pub created_by: String,
}

impl StoreMeta {
    /// The meta of a store this build creates.
    pub fn new(geometry: Geometry) -> Self {
        StoreMeta {
            format_version: FORMAT_VERSION,
            geometry,
            created_by: concat!("mqlite ", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }

    /// Encodes one slot. A created-by string longer than the slot holds is cut at a character
    /// boundary.
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        let mut b = [0u8; SLOT_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.format_version.to_be_bytes());
        b[8..16].copy_from_slice(&self.geometry.commit_log_file_size.to_be_bytes());
        b[16..24].copy_from_slice(&self.geometry.consume_queue_file_units.to_be_bytes());
        let mut n = self.created_by.len().min(CREATED_BY_MAX);
        while !self.created_by.is_char_boundary(n) {
            n -= 1;
        }
        // n <= 63, so it fits the length byte and the field.
        b[24] = n as u8;
        b[CREATED_BY_AT..CREATED_BY_AT + n].copy_from_slice(&self.created_by.as_bytes()[..n]);
        let c = crc::crc32(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&c.to_be_bytes());
        b
    }

    /// Decodes one slot; `None` if it is short or its magic or CRC is wrong. The values are not
    /// range-checked here (`read` does that, naming the field).
    pub fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; SLOT_LEN] = b.get(..SLOT_LEN)?.try_into().ok()?;
        if be_u32(b, 0)? != MAGIC || be_u32(b, CRC_AT)? != crc::crc32(b.get(..CRC_AT)?) {
            return None;
        }
        let n = usize::from(*b.get(24)?);
        let created_by = b.get(CREATED_BY_AT..CREATED_BY_AT + n.min(CREATED_BY_MAX))?;
        Some(StoreMeta {
            format_version: be_u32(b, 4)?,
            geometry: Geometry {
                commit_log_file_size: be_u64(b, 8)?,
                consume_queue_file_units: be_u64(b, 16)?,
            },
            created_by: String::from_utf8_lossy(created_by).into_owned(),
        })
    }

    /// The whole file: the slot at 0 and again at 2048, zeros elsewhere.
    fn file_image(&self) -> Vec<u8> {
        two_copies::image(&self.encode())
    }
}

/// `<root>/meta`.
pub fn path(root: &Path) -> PathBuf {
    root.join(FILE_NAME)
}

/// Reads `<root>/meta`: `None` when there is no such file (a new store, or one written before
/// the file existed). A file with no valid slot, a newer format version, a size out of range, or
/// a slot that verifies but holds what no writer puts there (a created-by string longer than
/// 63 bytes or not UTF-8, reserved bytes that are not zero) is `ConfigFile`, naming the file
/// and the field.
pub fn read(root: &Path) -> Result<Option<StoreMeta>> {
    let path = path(root);
    let bytes = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("stat", &path, e)),
        Ok(_) => {
            use std::io::Read;
            let mut f = fs::open_ro(&path)?;
            let mut bytes = Vec::with_capacity(FILE_LEN);
            f.read_to_end(&mut bytes)
                .map_err(|e| Error::io("read", &path, e))?;
            bytes
        }
    };
    let bad = |field: &str, reason: String| Error::ConfigFile {
        path: path.clone(),
        field: field.to_owned(),
        reason,
    };
    let (at, meta) = two_copies::read_at(&bytes, StoreMeta::decode).ok_or_else(|| {
        bad(
            "",
            "no copy with a valid magic and checksum (delete the file and open the store as \
                 a writer to record the geometry its files show)"
                .into(),
        )
    })?;
    if meta.format_version == 0 || meta.format_version > FORMAT_VERSION {
        return Err(bad(
            "format_version",
            format!(
                "format version {} is not one this mqlite reads (1 to {FORMAT_VERSION}); it was \
                 written by {}",
                meta.format_version, meta.created_by
            ),
        ));
    }
    // A slot that verifies holds exactly what a writer of this format puts there; anything
    // else was written by something other than mqlite, and is not read in some lenient way.
    let slot = bytes.get(at..).unwrap_or(&[]);
    let n = usize::from(slot.get(24).copied().unwrap_or(0));
    let created_by = slot
        .get(CREATED_BY_AT..CREATED_BY_AT + n)
        .filter(|_| n <= CREATED_BY_MAX);
    if created_by.is_none_or(|c| std::str::from_utf8(c).is_err()) {
        return Err(bad(
            "created_by",
            format!(
                "the created-by string ({n} bytes) is not UTF-8 of at most {CREATED_BY_MAX} bytes"
            ),
        ));
    }
    if slot
        .get(CREATED_BY_AT + n..CRC_AT)
        .is_some_and(|r| r.iter().any(|&b| b != 0))
    {
        return Err(bad(
            "reserved",
            "the reserved bytes after the created-by string are not zero".into(),
        ));
    }
    let g = meta.geometry;
    crate::config::check_commit_log_file_size(g.commit_log_file_size)
        .map_err(|r| bad("commit_log_file_size", r))?;
    crate::config::check_consume_queue_file_units(g.consume_queue_file_units)
        .map_err(|r| bad("consume_queue_file_units", r))?;
    Ok(Some(meta))
}

/// Writes `<root>/meta` atomically (temp file, fsync, rename, fsync of `root`).
pub fn write(root: &Path, meta: &StoreMeta, mode: u32) -> Result<()> {
    let staged = fs::stage(&path(root), &meta.file_image(), mode)?;
    kill_point!("store_meta.before_rename");
    staged.replace(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> StoreMeta {
        StoreMeta::new(Geometry {
            commit_log_file_size: 1 << 20,
            consume_queue_file_units: 100,
        })
    }

    #[test]
    fn round_trips_and_a_damaged_first_copy_falls_back_to_the_second() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), &meta(), 0o600).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(meta()));
        let p = path(dir.path());
        let mut b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 4096);
        b[10] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(meta()));
        b[two_copies::SLOT_B_AT + 10] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(Error::ConfigFile { field, .. }) if field.is_empty()
        ));
    }

    #[test]
    fn a_newer_format_or_a_size_out_of_range_names_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = meta();
        m.format_version = FORMAT_VERSION + 1;
        write(dir.path(), &m, 0o600).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(Error::ConfigFile { field, .. }) if field == "format_version"
        ));
        let mut m = meta();
        m.geometry.commit_log_file_size = 1000;
        write(dir.path(), &m, 0o600).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(Error::ConfigFile { field, .. }) if field == "commit_log_file_size"
        ));
    }

    /// Writes `slot` (CRC recomputed) as both copies of `dir`'s meta file.
    fn write_slot(dir: &Path, mut slot: [u8; SLOT_LEN]) {
        let c = crc::crc32(&slot[..CRC_AT]);
        slot[CRC_AT..].copy_from_slice(&c.to_be_bytes());
        let mut image = vec![0u8; FILE_LEN];
        image[..SLOT_LEN].copy_from_slice(&slot);
        image[two_copies::SLOT_B_AT..two_copies::SLOT_B_AT + SLOT_LEN].copy_from_slice(&slot);
        std::fs::write(path(dir), image).unwrap();
    }

    #[test]
    fn a_slot_mqlite_did_not_write_is_an_error_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let n = meta().created_by.len();
        let mut reserved = meta().encode();
        reserved[CREATED_BY_AT + n + 10] = 0x26;
        let mut long = meta().encode();
        long[24] = 200;
        let mut not_utf8 = meta().encode();
        not_utf8[CREATED_BY_AT] = 0xFF;
        for (slot, field) in [
            (reserved, "reserved"),
            (long, "created_by"),
            (not_utf8, "created_by"),
        ] {
            write_slot(dir.path(), slot);
            match read(dir.path()) {
                Err(Error::ConfigFile { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: read gave {other:?}"),
            }
        }
        write_slot(dir.path(), meta().encode());
        assert_eq!(read(dir.path()).unwrap(), Some(meta()));
    }

    #[test]
    fn a_long_created_by_is_cut_at_a_character_boundary() {
        let mut m = meta();
        m.created_by = "é".repeat(40);
        let got = StoreMeta::decode(&m.encode()).unwrap();
        assert_eq!(got.created_by, "é".repeat(31));
    }
}
