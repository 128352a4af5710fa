//! The index: RocketMQ's IndexFile hash index of message keys (FORMAT.md §21), for finding
//! messages by `KEYS` piece and by unique id (`UNIQ_KEY`).
//!
//! - `hash`: the index keys of a record and their Java `String.hashCode`;
//! - `name`: file names (creation time);
//! - `file`: one file's layout, puts, chain walk and tail reset;
//! - `service`: the non-critical derived store that writes the files (dispatch, roll, flush,
//!   recovery, retention);
//! - `query`: the lookup, whose every hit the caller re-checks on the record.
//!
//! Invariants and crash behaviour: see `file` (layout, reader safety, tail reset) and
//! `service` (one writer, idempotent dispatch, no whole file deleted after a crash).

pub mod file;
pub mod hash;
pub mod name;
pub mod query;
pub mod service;

#[cfg(test)]
mod tests;

pub use file::Geometry;
pub use query::Found;
pub use service::IndexService;
