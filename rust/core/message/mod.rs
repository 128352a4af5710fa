//! Messages: what a producer hands the store, and the record layout they are stored in.

pub mod builder;
pub mod codec;
pub mod compression;
pub mod delay_levels;
pub mod marks;
pub mod msg_id;
pub mod properties;
pub mod tags;
pub mod timer;
pub mod timer_id;
pub mod validate;
pub mod view;

pub use codec::{RecordCheck, RecordView};
pub use view::StoredBody;

/// Transaction type bits of SYSFLAG (`sysflag & 0xC`), FORMAT.md §1.2.
pub mod sysflag {
    /// Body compressed by the producer.
    pub const COMPRESSED: i32 = 0x1;
    /// Legacy multi-tags flag.
    pub const MULTI_TAGS: i32 = 0x2;
    /// Mask of the transaction type bits.
    pub const TRANSACTION_MASK: i32 = 0xC;
    /// Not a transaction message.
    pub const TRANSACTION_NOT: i32 = 0x0;
    /// Half (prepared) message: not dispatched to a consume queue.
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    /// Committed transaction message.
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    /// Rolled-back transaction message: not dispatched to a consume queue.
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    /// BORNHOST is an IPv6 address (20 bytes).
    pub const BORNHOST_V6: i32 = 0x10;
    /// STOREHOST is an IPv6 address (20 bytes).
    pub const STOREHOST_V6: i32 = 0x20;

    /// True for transaction types that go to a consume queue (NOT and COMMIT).
    pub fn is_dispatched(sysflag: i32) -> bool {
        matches!(
            sysflag & TRANSACTION_MASK,
            TRANSACTION_NOT | TRANSACTION_COMMIT
        )
    }
}

/// A message to append, borrowed from the caller. Properties are already encoded
/// (`name\x01value\x02` pairs, see [`properties`]) and validated by the caller or by
/// [`validate::check_message`].
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    /// Destination topic.
    pub topic: &'a str,
    /// Destination queue id.
    pub queue_id: u32,
    /// Body bytes (non-empty).
    pub body: &'a [u8],
    /// Opaque user flag.
    pub flag: i32,
    /// Encoded properties.
    pub properties: &'a [u8],
    /// SYSFLAG bits chosen by the producer (transaction type, compression).
    pub sysflag: i32,
    /// Producer wall clock in ms.
    pub born_timestamp: i64,
    /// Retry count.
    pub reconsume_times: i32,
    /// Half message offset for committed transaction messages, else 0.
    pub prepared_transaction_offset: i64,
}

impl<'a> MessageRef<'a> {
    /// A plain message with no properties, born now.
    pub fn new(topic: &'a str, queue_id: u32, body: &'a [u8]) -> Self {
        MessageRef {
            topic,
            queue_id,
            body,
            flag: 0,
            properties: &[],
            sysflag: 0,
            born_timestamp: crate::util::clock::now_ms(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }

    /// Sets encoded properties.
    pub fn with_properties(mut self, properties: &'a [u8]) -> Self {
        self.properties = properties;
        self
    }
}
