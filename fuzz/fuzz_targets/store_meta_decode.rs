//! cargo-fuzz target `store_meta_decode`: a wrapper around `check_store_meta` in tests/fuzz_corpus_replay.rs,
//! which holds the invariants (shared with the corpus replay that runs in `cargo test`).
#![no_main]

#[path = "../../tests/fuzz_corpus_replay.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_store_meta(data));
