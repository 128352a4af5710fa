//! Followers (read-only opens in another process): keeping a queue's list of files in line with
//! the directory the writer changes (mod.rs's invariant on replaced files).

use std::sync::Arc;

use super::slot::Slot;
use super::{list_offsets, same_slots, Backing, MappedFileQueue};
use crate::error::Result;
use crate::util::fs;

impl MappedFileQueue {
    /// Followers (read-only opens): brings the list in line with the directory.
    ///
    /// - Head files the writer deleted (expiry) are forgotten.
    /// - The first other listed file whose name is gone, or, with `verify`, whose name now
    ///   names another file than the one mapped (compared by device and inode), is forgotten
    ///   with every file after it: the writer deleted and re-created it (the all-zero file
    ///   prepared ahead of a roll is deleted by the next writer's recovery and by `close`, and
    ///   recovery cuts files past a torn tail), so what is mapped is stale. Those names are
    ///   listed again below, and mapped anew when used.
    /// - Files past the last one kept are listed, in order, up to the first that is not full
    ///   size yet (being created), and the list is cut to its contiguous run at the end.
    ///
    /// A forgotten file is unmapped once no reader still holds it, so its disk space is freed.
    /// `verify` costs a `stat` per mapped file; without it only the directory is read.
    pub fn refresh(&self, verify: bool) -> Result<()> {
        let Backing::Dir { dir, .. } = &self.backing else {
            return Ok(());
        };
        // One refresh at a time: each builds the new list from a snapshot and installs it.
        let _one = self.refreshing.lock().unwrap_or_else(|p| p.into_inner());
        let mut names = list_offsets(dir)?;
        names.sort_unstable();
        let listed = |s: &Arc<Slot>| names.binary_search(&s.start).is_ok();
        let before = self.read_files().clone();
        let mut files = before.clone();
        let expired = files.iter().take_while(|s| !listed(s)).count();
        files.drain(..expired);
        let replaced = files.iter().position(|s| {
            !listed(s)
                || (verify
                    && s.live().is_some_and(|f| {
                        !std::fs::symlink_metadata(f.path()).is_ok_and(|m| f.is_file_at(&m))
                    }))
        });
        if let Some(k) = replaced {
            files.truncate(k);
        }
        let last = files.last().map(|s| s.start);
        for start in names {
            if last.is_some_and(|l| start <= l) {
                continue;
            }
            let path = dir.join(fs::offset_file_name(start));
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_file() && m.len() == self.file_size => {}
                _ => break, // being created by the writer; try again later
            }
            files.push(Slot::unmapped(start));
        }
        // The directory's files are contiguous (mod.rs): keep only the contiguous run at the
        // list's end, so that no gap in the list stands for files that are there.
        let size = self.file_size;
        let keep_from = (1..files.len())
            .rev()
            .find(|&i| match (files.get(i - 1), files.get(i)) {
                (Some(a), Some(b)) => a.start + size != b.start,
                _ => false,
            })
            .unwrap_or(0);
        files.drain(..keep_from);
        if same_slots(&files, &before) {
            return Ok(());
        }
        let mut current = self.write_files();
        // Only `refresh` (serialised above) and `clear` change a follower's list: a list that
        // changed meanwhile was cleared by `close`, or (a shared writer) a roll listed its
        // file; it stays so, and a caller that misses an offset again looks again later.
        if same_slots(&current, &before) {
            let kept: std::collections::HashSet<*const Slot> =
                files.iter().map(Arc::as_ptr).collect();
            *current = files;
            drop(current);
            let gone: Vec<Arc<Slot>> = before
                .into_iter()
                .filter(|s| !kept.contains(&Arc::as_ptr(s)))
                .collect();
            self.release(&gone);
        }
        Ok(())
    }
}
