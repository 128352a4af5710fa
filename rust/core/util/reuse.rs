//! Vectors that the batch paths keep from one call to the next.
//!
//! Why: a batch of 1,000 messages needs a few hundred KiB of temporary vectors. Allocated and
//! freed on every call, they sit at the top of glibc's heap, which then grows and shrinks with
//! `brk` two or three times per batch. `brk` takes the process's mmap lock for writing, so it
//! waits for any `MADV_POPULATE_WRITE` in progress (the preparer's warm-ahead holds the lock
//! for reading throughout each call): 128 B batches stalled for 1 to 8 ms a few hundred times
//! per 2 million messages. Each thread keeps its emptied vectors instead.

use std::cell::Cell;
use std::thread::LocalKey;

/// Largest vector (bytes of capacity) kept between calls: a thread that sent one huge batch
/// does not hold on to its memory.
const KEEP_MAX_BYTES: usize = 4 << 20;

/// An empty vector of `U` in the allocation of `v`, where `U` is `v`'s element type with other
/// lifetimes. Collecting `into_iter()` in place reuses the source allocation when the two
/// element layouts are equal, as they are here (were std ever to stop doing so, this would
/// allocate, nothing worse).
pub fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// The vector kept in `slot` by this thread (empty, its capacity reused), with room for at
/// least `n` elements.
pub fn take<T: 'static, U>(slot: &'static LocalKey<Cell<Vec<T>>>, n: usize) -> Vec<U> {
    let mut v: Vec<U> = recycle(slot.take());
    v.reserve(n);
    v
}

/// Empties `v` and keeps its allocation in `slot` for this thread's next [`take`], unless it
/// is larger than `KEEP_MAX_BYTES`.
pub fn keep<T: 'static, U>(slot: &'static LocalKey<Cell<Vec<T>>>, v: Vec<U>) {
    if v.capacity().saturating_mul(size_of::<U>()) <= KEEP_MAX_BYTES {
        slot.set(recycle(v));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    thread_local! {
        static SLOT: Cell<Vec<&'static [u8]>> = const { Cell::new(Vec::new()) };
    }

    #[test]
    fn a_kept_vector_comes_back_empty_in_the_same_allocation() {
        let data = [7u8; 4];
        let mut v: Vec<&[u8]> = take(&SLOT, 1000);
        v.extend(std::iter::repeat_n(&data[..], 1000));
        let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
        keep(&SLOT, v);
        let again: Vec<&[u8]> = take(&SLOT, 10);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), cap);
        assert_eq!(again.as_ptr() as usize, ptr, "the allocation is reused");
        // Too large to keep: the slot stays empty.
        let mut big: Vec<&[u8]> = again;
        big.reserve(KEEP_MAX_BYTES / size_of::<&[u8]>() + 1);
        keep(&SLOT, big);
        let fresh: Vec<&[u8]> = take(&SLOT, 0);
        assert_eq!(fresh.capacity(), 0);
    }
}
