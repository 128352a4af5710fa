//! MapCache: the store-wide budget of idle mappings.
//!
//! A `MappedFileQueue` maps a file when it is first used and keeps only a weak reference to
//! the mapping itself; what keeps a mapping alive is a strong reference: a reader's, a
//! writer's, the queue's pin (files with state a new mapping would not have: mod.rs), or this
//! cache's. The cache holds the most recently used files, at most `budget` of them; when a
//! file leaves it and no one else holds it, it is unmapped. A reader therefore never loses a
//! mapping under it: it holds an `Arc<MappedFile>`, and the mapping goes when the last holder
//! drops it.
//!
//! Invariants
//! - A file is in the queue of entries at most once (`MappedFile::cached` says whether it
//!   is), so the entries count distinct files and never exceed `budget`.
//! - Recency is approximate (second chance): a use stores the cache's current epoch in the
//!   file (`used_at`, no lock); a file leaving the front of the queue is kept, moved to the
//!   back, when it was used after it was last queued.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::mapped_file::MappedFile;

/// The default budget: idle files kept mapped per store. Far below the kernel's default
/// `vm.max_map_count` (65,530) and costing no descriptor (mapped_file/mod.rs).
pub const DEFAULT_MAPPED_FILES: usize = 256;

/// The most recently used mapped files of a store (see the module doc).
#[derive(Debug)]
pub struct MapCache {
    budget: usize,
    // Advanced each time a file is queued.
    epoch: AtomicU64,
    // (epoch when queued, file), oldest first.
    entries: Mutex<VecDeque<(u64, Arc<MappedFile>)>>,
}

impl Default for MapCache {
    fn default() -> Self {
        MapCache::new(DEFAULT_MAPPED_FILES)
    }
}

impl MapCache {
    /// A cache keeping at most `budget` files mapped (0: none beyond those in use).
    pub fn new(budget: usize) -> Self {
        MapCache {
            budget,
            epoch: AtomicU64::new(1),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Files held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when the cache holds no file.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<MappedFile>)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a use of `file`: it joins the cache if it is not in it (the least recently
    /// used files leave it beyond the budget), else only its recency is updated (no lock).
    pub fn touch(&self, file: &Arc<MappedFile>) {
        file.used_at
            .store(self.epoch.load(Ordering::Relaxed), Ordering::Relaxed);
        if self.budget == 0 || file.cached.load(Ordering::Relaxed) {
            return;
        }
        let mut gone = Vec::new();
        {
            let mut entries = self.lock();
            if file.cached.swap(true, Ordering::AcqRel) {
                return;
            }
            let at = self.epoch.fetch_add(1, Ordering::Relaxed);
            file.used_at.store(at, Ordering::Relaxed);
            entries.push_back((at, Arc::clone(file)));
            // Each file gets at most one second chance per eviction.
            let mut chances = entries.len();
            while entries.len() > self.budget {
                let Some((queued, f)) = entries.pop_front() else {
                    break;
                };
                let used = f.used_at.load(Ordering::Relaxed);
                if used > queued && chances > 0 {
                    chances -= 1;
                    entries.push_back((self.epoch.fetch_add(1, Ordering::Relaxed), f));
                    continue;
                }
                f.cached.store(false, Ordering::Release);
                gone.push(f);
            }
        }
        // Unmapped (when no one else holds them) outside the lock: munmap takes the
        // process's mmap lock.
        drop(gone);
    }

    /// Lets go of `file` (deleted, or its queue forgets it).
    pub fn forget(&self, file: &Arc<MappedFile>) {
        if !file.cached.load(Ordering::Acquire) {
            return;
        }
        let gone = {
            let mut entries = self.lock();
            let at = entries.iter().position(|(_, f)| Arc::ptr_eq(f, file));
            let gone = at.and_then(|i| entries.remove(i));
            if gone.is_some() {
                file.cached.store(false, Ordering::Release);
            }
            gone
        };
        drop(gone);
    }

    /// Lets go of every file.
    pub fn clear(&self) {
        let gone: Vec<_> = self.lock().drain(..).collect();
        for (_, f) in &gone {
            f.cached.store(false, Ordering::Release);
        }
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;

    use super::MapCache;
    use crate::mapped_file::MappedFile;

    fn file(i: u64) -> Arc<MappedFile> {
        Arc::new(MappedFile::anonymous(i * 4096, 4096).unwrap())
    }

    /// Beyond the budget the least recently used file leaves (and is dropped when no one
    /// else holds it); a file used since it was queued gets a second chance.
    #[test]
    fn keeps_the_most_recently_used_files_within_the_budget() {
        let cache = MapCache::new(2);
        let (a, b, c) = (file(0), file(1), file(2));
        cache.touch(&a);
        cache.touch(&b);
        cache.touch(&a); // a used after b was queued
        cache.touch(&c); // over budget: a gets a second chance, b goes
        assert_eq!(cache.len(), 2);
        assert_eq!(Arc::strong_count(&a), 2);
        assert_eq!(Arc::strong_count(&b), 1, "b left the cache");
        assert_eq!(Arc::strong_count(&c), 2);
        cache.touch(&c);
        assert_eq!(cache.len(), 2, "a file is queued once");
        cache.forget(&a);
        assert_eq!(Arc::strong_count(&a), 1);
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(Arc::strong_count(&c), 1);
        let none = MapCache::new(0);
        none.touch(&a);
        assert_eq!(Arc::strong_count(&a), 1, "a budget of 0 keeps nothing");
    }
}
