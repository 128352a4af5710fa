//! Slot: one listed file of a `MappedFileQueue`: where it starts, a weak reference to its
//! mapping while any holder keeps one, the pin that keeps it mapped while it holds state a new
//! mapping would not have, and the end of data its owner let go of (see mod.rs, "Mappings").

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::mapped_file::MappedFile;

/// One file of a queue: where it starts, and its mapping while something holds one.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) start: u64,
    pub(super) mapped: RwLock<Weak<MappedFile>>,
    // Set while the file must stay mapped (see the module doc).
    pinned: Mutex<Option<Arc<MappedFile>>>,
    // Where the data of a last file let go of by `park_last` ends (`NO_END`: the file's end).
    pub(super) end: AtomicU64,
}

/// `Slot::end` when no end is remembered.
pub(super) const NO_END: u64 = u64::MAX;

impl Slot {
    pub(super) fn unmapped(start: u64) -> Arc<Slot> {
        Arc::new(Slot {
            start,
            mapped: RwLock::new(Weak::new()),
            pinned: Mutex::new(None),
            end: AtomicU64::new(NO_END),
        })
    }

    /// A slot for a file just created here: pinned.
    pub(super) fn pinned(file: &Arc<MappedFile>) -> Arc<Slot> {
        Arc::new(Slot {
            start: file.from_offset(),
            mapped: RwLock::new(Arc::downgrade(file)),
            pinned: Mutex::new(Some(Arc::clone(file))),
            end: AtomicU64::new(NO_END),
        })
    }

    /// The live mapping, if any holder keeps one.
    pub(super) fn live(&self) -> Option<Arc<MappedFile>> {
        self.mapped
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade()
    }

    pub(super) fn lock_pin(&self) -> std::sync::MutexGuard<'_, Option<Arc<MappedFile>>> {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner())
    }
}
