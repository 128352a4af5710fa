//! mqlite: an embedded, durable message store with Apache RocketMQ's storage design and
//! on-disk format.
//!
//! Layers (a lower layer never imports a higher one):
//!
//! ```text
//! store (facade, services, lifecycle; the write pipeline with its put hooks, topic admin;
//!        registers the derived stores and the hooks)
//!   -> recovery, checkpoint, store_meta, lock, flush, retention, topic_config
//!   -> consume_queue               (implements dispatch::derived::DerivedStore)
//!   -> dispatch (DerivedStore; reput: tails the commit log and feeds the derived stores)
//!   -> commit_log (append + END_OF_FILE padding, batch, read, recovery scan)
//!   -> message (record codec, builder, properties, tags code, ids, compression, validation)
//!   -> mapped_file_queue -> mapped_file (mmap: the only unsafe code)
//!   -> util (fs protocol, crc, clock), service (background-thread trait), config, error
//! ```
//!
//! ```
//! use mqlite::{MessageRef, Store, StoreConfig, TagFilter};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
//! let props = mqlite::message::properties::encode([("TAGS", "TagA")]);
//! let msg = MessageRef::new("TopicTest", 0, b"hello").with_properties(&props);
//! let put = store.put(&msg).unwrap();
//! let got = store.get_messages("TopicTest", 0, 0, 32, &TagFilter::parse("TagA")).unwrap();
//! assert_eq!(got.iter().next().unwrap().body(), b"hello");
//! assert_eq!(put.appended.queue_offset, 0);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod checkpoint;
pub mod commit_log;
pub mod config;
pub mod consume_queue;
pub mod dispatch;
pub mod error;
pub mod flush;
pub mod lock;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod prepare;
pub mod recovery;
pub mod retention;
pub mod service;
pub mod store;
pub mod store_meta;
#[cfg(feature = "fault-injection")]
pub mod testing;
pub mod topic_config;
pub mod util;
pub mod wakeup;

pub use commit_log::append::Appended;
pub use config::{FlushMode, StoreConfig};
pub use error::{Error, MessageKey, Result};
pub use message::{MessageRef, RecordView};
pub use store::{
    GetResult, GetStatus, PutRequest, PutResult, PutStatus, RoundRobin, Routing, Store, TagFilter,
    Wait,
};
pub use store_meta::Geometry;
pub use topic_config::TopicConfig;
