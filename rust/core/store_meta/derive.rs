//! The geometry of a store without a `meta` file (written before the file existed, or by Apache
//! RocketMQ), as its files show it.
//!
//! A directory's files are contiguous and equally sized, so with two or more files the step
//! between the first two names is the size: proven when one of those two files has that length
//! (the other may be a short last file, or a gap may follow). Otherwise the first file's length
//! counts when it is a valid size and its start offset is a multiple of it: a lone file may have
//! been cut short, so this is weaker evidence, used only when no directory proves a size.
//! Derivation reads names and lengths only, never contents, and changes nothing.

use std::path::Path;

use crate::config::{check_commit_log_file_size, check_consume_queue_file_units};
use crate::consume_queue::unit::UNIT_SIZE;
use crate::error::{Error, Result};
use crate::util::fs;

/// How a derived size was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The step between two file names, which one of the two files has.
    Names,
    /// The length of a directory's first file.
    FileLength,
}

/// What a store's files show; `None` where a directory holds no usable file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Derived {
    /// The commit-log file size.
    pub commit_log_file_size: Option<u64>,
    /// The consume-queue units per file.
    pub consume_queue_file_units: Option<u64>,
}

/// Derives the geometry from `<root>/commitlog` and `<root>/consumequeue/<topic>/<queue>`. For
/// consume queues the first queue whose names prove a size decides; failing that, the largest
/// first-file length (a file cut short is shorter than the size, never longer).
pub fn derive(root: &Path) -> Result<Derived> {
    let commit_log_file_size = file_size(&root.join("commitlog"), |len| {
        check_commit_log_file_size(len).is_ok()
    })?
    .map(|(size, _)| size);
    let unit_ok = |len: u64| {
        len.is_multiple_of(UNIT_SIZE) && check_consume_queue_file_units(len / UNIT_SIZE).is_ok()
    };
    let mut best_length: Option<u64> = None;
    let mut proven = None;
    'queues: for topic in sorted_dirs(&root.join("consumequeue"))? {
        for queue in sorted_dirs(&topic)? {
            match file_size(&queue, unit_ok)? {
                Some((size, Evidence::Names)) => {
                    proven = Some(size);
                    break 'queues;
                }
                Some((size, Evidence::FileLength)) => {
                    best_length = best_length.max(Some(size));
                }
                None => {}
            }
        }
    }
    Ok(Derived {
        commit_log_file_size,
        consume_queue_file_units: proven.or(best_length).map(|size| size / UNIT_SIZE),
    })
}

/// The size of the 20-digit-named regular files in `dir`, and how it was found; `None` when no
/// file gives a size `valid` accepts.
fn file_size(dir: &Path, valid: impl Fn(u64) -> bool) -> Result<Option<(u64, Evidence)>> {
    let mut names: Vec<(u64, std::path::PathBuf)> = fs::dir_entries(dir)?
        .into_iter()
        .filter_map(|(name, path)| Some((fs::parse_offset_file_name(&name)?, path)))
        .collect();
    names.sort_unstable();
    let mut lengths = Vec::with_capacity(2);
    for (_, path) in names.iter().take(2) {
        let md = std::fs::symlink_metadata(path).map_err(|e| Error::io("stat", path, e))?;
        // A symlink or a directory under a file name is not evidence (load refuses it).
        lengths.push(md.file_type().is_file().then_some(md.len()));
    }
    if let [(first, _), (second, _), ..] = names.as_slice() {
        let step = second - first;
        if valid(step) && lengths.contains(&Some(step)) {
            return Ok(Some((step, Evidence::Names)));
        }
    }
    Ok(match (names.first(), lengths.first()) {
        (Some((start, _)), Some(Some(len))) if valid(*len) && start.is_multiple_of(*len) => {
            Some((*len, Evidence::FileLength))
        }
        _ => None,
    })
}

/// The subdirectories of `dir` (not followed through symlinks), sorted by name; none when
/// `dir` does not exist.
fn sorted_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for (_, path) in fs::dir_entries(dir)? {
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir()) {
            out.push(path);
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs;

    fn file(dir: &Path, start: u64, len: u64) {
        std::fs::create_dir_all(dir).unwrap();
        let f = std::fs::File::create(dir.join(fs::offset_file_name(start))).unwrap();
        f.set_len(len).unwrap();
    }

    #[test]
    fn names_prove_a_size_over_a_lone_file() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        assert_eq!(derive(root).unwrap(), Derived::default());
        // Commit log: two files, the second cut short; the step is the size.
        file(&root.join("commitlog"), 0, 64 << 10);
        file(&root.join("commitlog"), 64 << 10, 100);
        // Queue a/0: a lone file cut short; a/1 a lone file; b/0 two files proving 100 units.
        let cq = root.join("consumequeue");
        file(&cq.join("a/0"), 0, 1000);
        file(&cq.join("a/1"), 0, 4000);
        file(&cq.join("b/0"), 0, 2000);
        file(&cq.join("b/0"), 2000, 2000);
        assert_eq!(
            derive(root).unwrap(),
            Derived {
                commit_log_file_size: Some(64 << 10),
                consume_queue_file_units: Some(100),
            }
        );
        // Without the proving queue, the longest first file counts.
        std::fs::remove_dir_all(cq.join("b")).unwrap();
        assert_eq!(derive(root).unwrap().consume_queue_file_units, Some(200));
    }

    #[test]
    fn a_lone_file_counts_only_when_its_length_is_a_size_its_start_allows() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("commitlog");
        file(&dir, 0, 12345);
        assert_eq!(derive(d.path()).unwrap().commit_log_file_size, None);
        std::fs::remove_dir_all(&dir).unwrap();
        file(&dir, 3 << 20, 2 << 20);
        assert_eq!(derive(d.path()).unwrap().commit_log_file_size, None);
        std::fs::remove_dir_all(&dir).unwrap();
        file(&dir, 4 << 20, 2 << 20);
        assert_eq!(
            derive(d.path()).unwrap().commit_log_file_size,
            Some(2 << 20)
        );
    }
}
