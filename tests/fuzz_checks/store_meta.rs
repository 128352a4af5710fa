//! Checks of the `store_meta_decode` fuzz target: the store's `meta` file (FORMAT.md §11) read
//! from arbitrary bytes, slot by slot (`StoreMeta::decode`) and as a file (`store_meta::read`).
//!
//! Invariants:
//! - neither panics; `read` of an existing file is `Ok(Some)` or `Err(ConfigFile)` naming the
//!   file, never `Ok(None)` (a damaged file is not taken as a missing one);
//! - `decode` of a slot's own encoding gives the slot back (when its created-by fits a slot);
//! - `read` returns slot A when it decodes, else slot B, and only with a format version this
//!   build reads, a geometry `config` accepts, and exactly the bytes a writer puts there: the
//!   slot it read re-encodes to itself (no lenient reading of a created-by string or of
//!   reserved bytes no writer produced).

use mqlite::store_meta::{self, StoreMeta};
use mqlite::Error;

const SLOT: usize = 128;
const SLOT_B: usize = 2048;

/// Checks both meta readers on `data` (see the module docs).
pub fn check_store_meta(data: &[u8]) {
    let a = StoreMeta::decode(data);
    let b = data.get(SLOT_B..).and_then(StoreMeta::decode);
    // (A created-by that decoding made longer than a slot holds, by replacing bad UTF-8, is
    // cut again when encoded.)
    for m in a
        .iter()
        .chain(b.iter())
        .filter(|m| m.created_by.len() <= 63)
    {
        assert_eq!(
            StoreMeta::decode(&m.encode()).as_ref(),
            Some(m),
            "decode(encode(m)) != m"
        );
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
            let at = if a.is_some() { 0 } else { SLOT_B };
            assert_eq!(
                &m.encode()[..],
                &data[at..at + SLOT],
                "read accepted a slot that is not what a writer puts there"
            );
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
