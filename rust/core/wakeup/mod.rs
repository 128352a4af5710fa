//! The wake-up word: how a read-only follower in another process sleeps until the writer has
//! published something, instead of polling the consume queues.
//!
//! On disk: `<store>/wakeup`, one page (FORMAT.md §6). Its first four bytes are a big-endian
//! word: bit 0 says a follower may be asleep on the word, bits 1 to 31 count the writer's
//! wake-ups. The file holds no data: any content is valid, and a missing or unwritable file only
//! means the followers that cannot use it poll as before.
//!
//! The page's disk block is reserved (`posix_fallocate`) by every process before it maps the
//! file, the writer and each follower alike, since a file made by `set_len` or an older
//! mqlite may be a hole: on a full disk a fault into a hole of a shared mapping is a SIGBUS
//! (on tmpfs even a read's). A reservation that fails (a full disk) leaves that process
//! without the word, which nothing needs: a writer then wakes nobody through it (followers
//! with the word mapped find new data at their next nap), a read-only follower polls, and a
//! shared writer's waiters learn of other processes' records from its dispatch thread, which
//! looks for them every `REPUT_IDLE`. Nothing is lost; wake-ups are only slower.
//!
//! Invariants
//! - A follower sets bit 0, then looks for data, then sleeps only while the word still holds
//!   what it set (the kernel compares and sleeps atomically).
//! - After publishing consume-queue units the writer reads the word. If bit 0 is set it changes
//!   the word (the count goes up, bit 0 is cleared) and wakes every sleeper. Both sides put a
//!   sequentially consistent fence between their write and their read, so either the writer
//!   sees the bit or the follower sees the data: no wake-up is lost.
//! - While no follower sleeps the writer only reads the word: no store, no system call.
//!
//! The two sides' steps on the word are `protocol.rs`, model-checked with loom there; this
//! module adds the file, the mapping and the deadlines. The same steps serve the shared writer
//! mapping's words (group commit across processes, shared/mod.rs) through [`WordAt`],
//! [`wait_on`] and [`announce`].
//!
//! Crash behaviour: nothing to recover. A follower that dies asleep leaves bit 0 set, which costs
//! the writer one needless wake-up call. A writer that dies leaves a word as valid as any other.

mod protocol;

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use self::protocol::{Look, Word};
use crate::error::{Error, Result};
use crate::mapped_file::alloc;
use crate::mapped_file::mmap::MmapRegion;
use crate::util::fs;

/// Length of the file (one page).
pub const FILE_LEN: u64 = 4096;
/// Longest single sleep of a follower: a safety net for a writer that never wakes anyone (one
/// predating this file), not the way followers normally learn of new data.
pub const FOLLOWER_NAP: Duration = Duration::from_millis(250);

/// One store's handle on its wake-up file: the writer's or a follower's.
#[derive(Debug)]
pub struct WakeWord {
    /// `None` once released (store close): every operation is then a no-op.
    map: RwLock<Option<MmapRegion>>,
}

impl WakeWord {
    /// The writer's handle: creates the file (mode `mode`) or reuses it as it is. Reusing
    /// matters: followers already open keep sleeping on the same file. `StoreFull` when the
    /// page's block cannot be reserved (module doc): the caller goes on without the word.
    pub fn create(root: &Path, mode: u32) -> Result<Self> {
        let path = root.join("wakeup");
        let file = fs::open_rw(&path, mode)?;
        // Grows a short file too (the page past its end is reserved with the rest).
        alloc::preallocate(&file, &path, FILE_LEN)?;
        let map = map(&file, &path)?;
        Ok(WakeWord::new(map))
    }

    /// A follower's handle, or `None` when the file is missing (a writer that predates it),
    /// not writable by this process, too short, or its page cannot be reserved (a full disk):
    /// the follower then polls.
    pub fn follow(root: &Path) -> Option<Self> {
        let path = root.join("wakeup");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        if file.metadata().ok()?.len() < FILE_LEN {
            return None;
        }
        // The page may be a hole (module doc): its block is reserved before it is mapped.
        alloc::preallocate(&file, &path, FILE_LEN).ok()?;
        let map = map(&file, &path).ok()?;
        Some(WakeWord::new(map))
    }

    fn new(map: MmapRegion) -> Self {
        WakeWord {
            map: RwLock::new(Some(map)),
        }
    }

    /// Unmaps the file (store close). This handle's sleepers are woken first (and, finding
    /// their store closed, let go of the mapping); so are other processes' (which sleep again).
    pub fn release(&self) {
        self.wake();
        *self.map.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Writer, after publishing (and after a sequentially consistent fence): returns whether a
    /// follower may be asleep, having changed the word so that none goes back to sleep on the
    /// old value. The caller then calls `wake` (a system call, best made without holding locks
    /// others wait for).
    pub fn publish(&self) -> bool {
        let guard = self.map.read().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .is_some_and(|map| protocol::publish(&WordAt::new(map, 0)))
    }

    /// Wakes every thread, of any process, asleep on the word. A failure leaves them to their
    /// naps.
    pub fn wake(&self) {
        if let Some(map) = self.map.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            WordAt::new(map, 0).wake();
        }
    }

    /// Follower: blocks until `ready()` is true or `deadline` passes (`None`: never), sleeping
    /// on the word between looks, `nap` at most at a time. Returns `ready()`.
    pub fn wait(
        &self,
        deadline: Option<Instant>,
        nap: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> bool {
        loop {
            if ready() {
                return true;
            }
            let guard = self.map.read().unwrap_or_else(|p| p.into_inner());
            let Some(map) = guard.as_ref() else {
                return ready();
            };
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => nap,
            };
            // The read guard is held while asleep: `release` (store close) wakes the sleepers
            // before it waits for the guard.
            match protocol::look(&WordAt::new(map, 0), left.min(nap), &mut ready) {
                Look::Done(r) => return r,
                Look::Again => {}
            }
        }
    }
}

/// A wake word: the big-endian u32 at the aligned byte `pos` of a shared file mapping (the
/// wake-up file's word is at 0).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WordAt<'a> {
    region: &'a MmapRegion,
    pos: usize,
}

impl<'a> WordAt<'a> {
    pub(crate) fn new(region: &'a MmapRegion, pos: usize) -> Self {
        WordAt { region, pos }
    }
}

impl Word for WordAt<'_> {
    fn load(&self) -> Option<u32> {
        self.region.load_u32_be_acquire(self.pos)
    }

    fn compare_exchange(&self, current: u32, new: u32) -> Option<std::result::Result<u32, u32>> {
        self.region.compare_exchange_u32_be(self.pos, current, new)
    }

    fn sleep(&self, expected: u32, timeout: Duration) -> io::Result<()> {
        self.region.futex_wait_be(self.pos, expected, timeout)
    }

    fn wake(&self) {
        let _ = self.region.futex_wake(self.pos);
    }
}

/// The waiting side on `word`: blocks until `ready()` is true or `deadline` passes (`None`:
/// never), sleeping on the word between looks, `nap` at most at a time. Returns `ready()`.
pub(crate) fn wait_on(
    word: &WordAt<'_>,
    deadline: Option<Instant>,
    nap: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    loop {
        if ready() {
            return true;
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left,
                _ => return false,
            },
            None => nap,
        };
        if let Look::Done(r) = protocol::look(word, left.min(nap), &mut ready) {
            return r;
        }
    }
}

/// The publishing side on `word`, after the data a waiter's `ready()` looks for was stored:
/// a SeqCst fence, then a wake-up of every sleeper when one said it sleeps.
pub(crate) fn announce(word: &WordAt<'_>) {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    if protocol::publish(word) {
        word.wake();
    }
}

fn map(file: &File, path: &Path) -> Result<MmapRegion> {
    let len = usize::try_from(FILE_LEN).unwrap_or(4096);
    MmapRegion::map_file(file, len, true, false).map_err(|e| Error::io("mmap", path, e))
}

#[cfg(test)]
#[cfg(not(loom))]
mod tests {
    use super::protocol::SLEEPER;
    use super::*;
    use std::sync::atomic::{fence, AtomicBool, Ordering};
    use std::sync::Arc;

    fn word(root: &Path) -> u32 {
        let b = std::fs::read(root.join("wakeup")).unwrap();
        u32::from_be_bytes(b[..4].try_into().unwrap())
    }

    #[test]
    fn the_writer_only_reads_the_word_while_nobody_sleeps() {
        let dir = tempfile::tempdir().unwrap();
        let w = WakeWord::create(dir.path(), 0o600).unwrap();
        for _ in 0..3 {
            assert!(!w.publish(), "no sleeper, no wake-up");
        }
        assert_eq!(word(dir.path()), 0, "no store either");
    }

    #[test]
    fn a_sleeping_follower_is_woken_by_the_writer_not_by_its_nap() {
        let dir = tempfile::tempdir().unwrap();
        let w = WakeWord::create(dir.path(), 0o600).unwrap();
        let f = WakeWord::follow(dir.path()).unwrap();
        let flag = Arc::new(AtomicBool::new(false));
        let flag2 = Arc::clone(&flag);
        let t = Instant::now();
        // A nap far longer than the test's bound: only a wake-up can end the sleep in time.
        let waiter = std::thread::spawn(move || {
            f.wait(
                Some(Instant::now() + Duration::from_secs(60)),
                Duration::from_secs(60),
                || flag2.load(Ordering::Acquire),
            )
        });
        // Wait until the follower announced itself asleep.
        while word(dir.path()) & SLEEPER == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        flag.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
        assert!(w.publish(), "the follower's bit asks for a wake-up");
        assert_eq!(word(dir.path()), 2, "count 1, bit cleared");
        w.wake();
        assert!(waiter.join().unwrap(), "woken with the condition true");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "woken by the writer, not by the 60 s nap: {:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_publication_before_the_sleep_is_not_missed() {
        // The writer publishes between the follower's last look and its sleep, and makes no
        // wake-up call: the changed word makes the kernel return at once.
        let dir = tempfile::tempdir().unwrap();
        let w = WakeWord::create(dir.path(), 0o600).unwrap();
        let f = WakeWord::follow(dir.path()).unwrap();
        let mut looks = 0;
        let t = Instant::now();
        let ok = f.wait(
            Some(Instant::now() + Duration::from_secs(60)),
            Duration::from_secs(60),
            || {
                looks += 1;
                match looks {
                    1 => false,
                    // The second look comes after the bit was set: publish now, wake nobody.
                    2 => {
                        assert!(w.publish());
                        false
                    }
                    _ => true,
                }
            },
        );
        assert!(ok);
        assert_eq!(looks, 3);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    }

    #[test]
    fn the_writer_reuses_the_file_and_clears_a_dead_followers_bit() {
        let dir = tempfile::tempdir().unwrap();
        let f = {
            let _writer = WakeWord::create(dir.path(), 0o600).unwrap();
            WakeWord::follow(dir.path()).unwrap()
        };
        // A follower that gave up (or died) asleep leaves its bit.
        assert!(!f.wait(
            Some(Instant::now() + Duration::from_millis(5)),
            Duration::from_millis(1),
            || false
        ));
        drop(f);
        let w2 = WakeWord::create(dir.path(), 0o600).unwrap();
        assert_eq!(word(dir.path()), SLEEPER);
        assert!(w2.publish(), "one needless wake-up");
        assert!(!w2.publish(), "then none");
        assert_eq!(
            std::fs::metadata(dir.path().join("wakeup")).unwrap().len(),
            FILE_LEN
        );
    }

    /// A hole behind the page is reserved by the writer and by a follower before either maps
    /// it: a fault into it on a full disk would be a SIGBUS.
    #[test]
    fn the_page_is_reserved_before_it_is_mapped_even_in_a_sparse_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wakeup");
        let disk = || std::fs::metadata(&path).unwrap().blocks() * 512;
        let sparse = || {
            let _ = std::fs::remove_file(&path);
            std::fs::File::create(&path)
                .unwrap()
                .set_len(FILE_LEN)
                .unwrap();
            assert_eq!(disk(), 0, "a hole");
        };
        sparse();
        let f = WakeWord::follow(dir.path()).unwrap();
        assert!(disk() >= FILE_LEN, "the follower reserved it: {}", disk());
        drop(f);
        sparse();
        let w = WakeWord::create(dir.path(), 0o600).unwrap();
        assert!(disk() >= FILE_LEN, "the writer reserved it: {}", disk());
        assert_eq!(word(dir.path()), 0);
        drop(w);
        // A new file, too; a short one grows to the page.
        std::fs::remove_file(&path).unwrap();
        drop(WakeWord::create(dir.path(), 0o600).unwrap());
        assert!(disk() >= FILE_LEN);
        std::fs::write(&path, b"ab").unwrap();
        drop(WakeWord::create(dir.path(), 0o600).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_LEN);
        assert!(disk() >= FILE_LEN);
    }

    #[test]
    fn no_usable_file_means_no_follower_handle() {
        let dir = tempfile::tempdir().unwrap();
        assert!(WakeWord::follow(dir.path()).is_none());
        std::fs::write(dir.path().join("wakeup"), b"short").unwrap();
        assert!(
            WakeWord::follow(dir.path()).is_none(),
            "too short to hold the page"
        );
    }
}
