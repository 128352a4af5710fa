//! mqlite: an embedded, durable message store with Apache RocketMQ's storage design and
//! on-disk format.
//!
//! Layers, top first: a module imports only modules on lines below its own (modules on one
//! line are peers and import none of each other). tests/layering.rs reads this diagram and
//! every `crate::` path of the crate, and fails on an import against it.
//!
//! ```text
//! repair                        (operator repair: cut or skip damaged records, rebuild derived files)
//! verify                        (read-only full scan naming every damage and the messages it affects)
//! store                         (facade, services, write pipeline and put hooks, topic admin, delay levels)
//! recovery, flush, retention, leader (startup scan; flush and checkpoint; expiry; shared writers' leader)
//! store_meta                    (the meta file: format version and geometry)
//! consume_queue, index          (implement dispatch's DerivedStore; consume queues: QueueIndex; index: key lookups)
//! dispatch                      (DerivedStore, QueueIndex; reput: feeds the derived stores)
//! commit_log                    (append + END_OF_FILE padding, batch, read, recovery scan)
//! config                        (StoreConfig and its limits)
//! topic_config                  (topics.json, topics.journal)
//! message                       (record codec, builder, properties, tags code, ids, validation)
//! checkpoint, lock, shared      (small files shared with other processes; the writer mapping)
//! wakeup                        (the wake-up word; its protocol also serves the writer mapping)
//! mapped_file_queue             (a run of mapped files; warm-ahead, fill fence, pace)
//! mapped_file                   (mmap, the robust mutex, syscalls: the only unsafe code)
//! prepare                       (preparer thread; knows its writers only as Preparable)
//! service                       (background-thread trait)
//! util                          (fs protocol and every durability call, crc, clock, hashing)
//! testing                       (fault injection, power-cut recorder; test builds only)
//! error
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
pub mod index;
pub mod leader;
pub mod lock;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod prepare;
pub mod recovery;
pub mod repair;
pub mod retention;
pub mod service;
pub mod shared;
pub mod store;
pub mod store_meta;
#[cfg(feature = "fault-injection")]
pub mod testing;
pub mod topic_config;
pub mod util;
pub mod verify;
pub mod wakeup;

pub use commit_log::append::Appended;
pub use config::{FlushMode, StoreConfig};
pub use error::{Error, MessageKey, Result};
pub use message::{MessageRef, RecordView};
pub use store::{
    BatchPut, GetResult, GetStatus, PutRequest, PutResult, PutStatus, ReadLimit, RoundRobin,
    Routing, Store, TagFilter, TopicUpdate, Wait,
};
pub use store_meta::Geometry;
pub use topic_config::TopicConfig;
