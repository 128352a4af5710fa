//! Checks of the `store_meta_decode` fuzz target: the store's `meta` file (FORMAT.md §11) read
//! from arbitrary bytes, slot by slot (`StoreMeta::decode`) and as a file (`store_meta::read`).
//!
//! Invariants:
//! - neither panics; `read` of an existing file is `Ok(Some)` or `Err(ConfigFile)` naming the
//!   file, never `Ok(None)` (a damaged file is not taken as a missing one);
//! - a decoded slot re-encodes to exactly its 128 bytes when its created-by field is UTF-8
//!   and no longer than the slot holds (the CRC covers every byte, so nothing else can vary);
//! - `read` returns slot A when it decodes, else slot B, and only with a format version this
//!   build reads and a geometry `config` accepts.

use mqlite::store_meta::{self, StoreMeta};
use mqlite::Error;

const SLOT: usize = 128;
const SLOT_B: usize = 2048;

/// Checks both meta readers on `data` (see the module docs).
pub fn check_store_meta(data: &[u8]) {
    let a = StoreMeta::decode(data);
    let b = data.get(SLOT_B..).and_then(StoreMeta::decode);
    for (slot, at) in [(&a, 0), (&b, SLOT_B)] {
        if let Some(m) = slot {
            let raw = &data[at..at + SLOT];
            let n = usize::from(raw[24]);
            if n <= 63 && std::str::from_utf8(&raw[25..25 + n]).is_ok() {
                assert_eq!(
                    &m.encode()[..],
                    raw,
                    "slot at {at} does not re-encode to its bytes"
                );
            }
        }
    }

    let dir = super::fresh_dir("meta");
    std::fs::write(store_meta::path(&dir), data).unwrap();
    match store_meta::read(&dir) {
        Ok(Some(m)) => {
            let want = a
                .clone()
                .or(b.clone())
                .expect("read found a slot decode rejects");
            assert_eq!(m, want, "read did not pick slot A first, then slot B");
            assert!(m.format_version >= 1 && m.format_version <= store_meta::FORMAT_VERSION);
            let g = m.geometry;
            assert!(mqlite::config::check_commit_log_file_size(g.commit_log_file_size).is_ok());
            assert!(
                mqlite::config::check_consume_queue_file_units(g.consume_queue_file_units).is_ok()
            );
        }
        Ok(None) => panic!("an existing meta file was read as missing"),
        Err(Error::ConfigFile { path, .. }) => assert_eq!(path, store_meta::path(&dir)),
        Err(e) => panic!("meta read failed with {e:?}, not ConfigFile"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
