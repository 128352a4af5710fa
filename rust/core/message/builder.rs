//! Building outgoing messages: the one place that turns a producer's fields into what the
//! store appends (FORMAT.md §2 properties, §1.6 compression). Every front end (the Python
//! binding, a Rust user, a future Spark sink) builds messages here and only converts its own
//! values into these calls.
//!
//! - Properties are encoded in RocketMQ's order: TAGS, KEYS (space-joined), UNIQ_KEY, then the
//!   user's properties. Each value is validated as it is added (`validate`): a bad field is an
//!   `InvalidMessage` error naming it, and nothing is sent.
//! - Several messages (a batch) share one property buffer; each message knows its range.
//! - The tags code is not built here: it follows from the stored record (`message::tags`).
//! - Compression (`Compression`) replaces the body and sets the SYSFLAG bits only when the
//!   compressed body is shorter.

use super::compression::{self, Codec};
use super::{properties, validate, MessageRef};
use crate::error::{Error, Result};

/// Appends one message's encoded properties to a shared buffer, field by field.
#[derive(Debug)]
pub struct PropertiesBuilder<'b> {
    out: &'b mut Vec<u8>,
    start: usize,
    /// Bytes of `out` before the KEYS value: keys are joined into one property.
    keys_at: Option<usize>,
}

impl<'b> PropertiesBuilder<'b> {
    /// Starts a message's properties at the end of `out`.
    pub fn new(out: &'b mut Vec<u8>) -> Self {
        let start = out.len();
        PropertiesBuilder {
            out,
            start,
            keys_at: None,
        }
    }

    /// Adds the TAGS property (add it first, as RocketMQ's producers do).
    ///
    /// # Errors
    /// `InvalidMessage` for an empty tag or one with `||` or a control byte.
    pub fn tags(&mut self, tag: &str) -> Result<()> {
        validate::check_tag(tag)?;
        self.keys_at = None;
        properties::push(self.out, properties::TAGS, tag);
        Ok(())
    }

    /// Adds one key to the KEYS property (keys are space-separated; add them one after the
    /// other, before any other property).
    ///
    /// # Errors
    /// `InvalidMessage` for an empty key or one with a space or control byte.
    pub fn key(&mut self, key: &str) -> Result<()> {
        validate::check_key(key)?;
        match self.keys_at {
            Some(_) => {
                // Reopen the KEYS value: drop its terminator, add " key" and terminate again.
                self.out.pop();
                self.out.push(b' ');
                self.out.extend_from_slice(key.as_bytes());
                self.out.push(properties::PROPERTY_SEPARATOR);
            }
            None => {
                self.keys_at = Some(self.out.len());
                properties::push(self.out, properties::KEYS, key);
            }
        }
        Ok(())
    }

    /// Adds the client unique id (UNIQ_KEY), as made by `msg_id::UniqueIdGenerator`.
    pub fn unique_key(&mut self, id: &str) {
        self.keys_at = None;
        properties::push(self.out, properties::UNIQ_KEY, id);
    }

    /// Adds a user property.
    ///
    /// # Errors
    /// `InvalidMessage` for an empty or malformed name or value, or a name the store
    /// reserves (`properties::RESERVED`).
    pub fn property(&mut self, name: &str, value: &str) -> Result<()> {
        validate::check_property(name, value, false)?;
        self.keys_at = None;
        properties::push(self.out, name, value);
        Ok(())
    }

    /// Adds the DELAY level (RocketMQ's delay level; 0 adds nothing). Whether the store has
    /// that level is checked when the message is put (the store's level table).
    pub fn delay_level(&mut self, level: u32) {
        if level > 0 {
            self.keys_at = None;
            properties::push(self.out, properties::DELAY, &level.to_string());
        }
    }

    /// Asks for delivery at `epoch_ms` (TIMER_DELIVER_MS, RocketMQ 5's timer message); a time
    /// at or before the put is due at once. The store checks it against its
    /// `timer_max_delay` when the message is put.
    pub fn deliver_at_ms(&mut self, epoch_ms: i64) {
        self.keys_at = None;
        properties::push(self.out, super::timer::DELIVER_MS, &epoch_ms.to_string());
    }

    /// Asks for delivery `delay_ms` after the put (TIMER_DELAY_MS).
    ///
    /// # Errors
    /// `InvalidMessage` for a negative delay.
    pub fn delay_ms(&mut self, delay_ms: i64) -> Result<()> {
        if delay_ms < 0 {
            return Err(crate::error::Error::InvalidMessage {
                reason: format!("a delay must not be negative, got {delay_ms} ms"),
            });
        }
        self.keys_at = None;
        properties::push(self.out, super::timer::DELAY_MS, &delay_ms.to_string());
        Ok(())
    }

    /// The range of the buffer this message's properties fill.
    pub fn finish(self) -> (usize, usize) {
        (self.start, self.out.len())
    }
}

/// A producer's body compression: bodies of `over` bytes or more are compressed with `codec`
/// at `level`, and stored compressed when that made them shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// The codec.
    pub codec: Codec,
    /// Smallest body compressed.
    pub over: usize,
    /// The codec's level.
    pub level: i32,
}

impl Compression {
    /// Checked settings.
    ///
    /// # Errors
    /// `InvalidConfig` for a level the codec does not have.
    pub fn new(codec: Codec, over: usize, level: i32) -> Result<Self> {
        codec.check_level(level)?;
        Ok(Compression { codec, over, level })
    }

    /// The default level of RocketMQ's producers.
    pub const DEFAULT_LEVEL: i32 = compression::DEFAULT_LEVEL;

    /// True when a body of `len` bytes is tried.
    pub fn applies_to(&self, len: usize) -> bool {
        len >= self.over
    }

    /// `body` compressed with its SYSFLAG bits, or `None` when it is under the threshold or
    /// did not shrink (it is then stored as it is).
    ///
    /// # Errors
    /// `Compression` when the codec fails.
    pub fn apply(&self, body: &[u8]) -> Result<Option<(Vec<u8>, i32)>> {
        if !self.applies_to(body.len()) {
            return Ok(None);
        }
        let packed = self.codec.compress(body, self.level)?;
        Ok((packed.len() < body.len()).then(|| (packed, self.codec.sysflag())))
    }
}

/// The producer's side of a message, with its properties' range in a shared buffer.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Destination topic.
    pub topic: &'a str,
    /// The body as stored (compressed when `sysflag` says so).
    pub body: &'a [u8],
    /// The user's flag.
    pub flag: i32,
    /// Range of the properties in the shared buffer (`PropertiesBuilder::finish`).
    pub props: (usize, usize),
    /// SYSFLAG bits of the body (compression).
    pub sysflag: i32,
}

impl<'a> Outgoing<'a> {
    /// The message to put, its properties taken from `buffer`, born at `born_ms`; its queue
    /// is the put's routing (`store::Routing`).
    ///
    /// # Errors
    /// `InvalidMessage` when the range lies outside `buffer`.
    pub fn to_ref(&self, buffer: &'a [u8], born_ms: i64) -> Result<MessageRef<'a>> {
        let properties =
            buffer
                .get(self.props.0..self.props.1)
                .ok_or_else(|| Error::InvalidMessage {
                    reason: "property range outside the buffer".into(),
                })?;
        Ok(MessageRef {
            topic: self.topic,
            queue_id: 0,
            body: self.body,
            flag: self.flag,
            properties,
            sysflag: self.sysflag,
            born_timestamp: born_ms,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_in_rocketmq_order_with_joined_keys() {
        let mut buf = b"prefix".to_vec();
        let mut b = PropertiesBuilder::new(&mut buf);
        b.tags("A").unwrap();
        b.key("k1").unwrap();
        b.key("k2").unwrap();
        b.unique_key("ID");
        b.property("color", "red").unwrap();
        let (start, end) = b.finish();
        assert_eq!(start, 6);
        assert_eq!(
            &buf[start..end],
            b"TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ID\x02color\x01red\x02"
        );
        assert!(properties::check_encoded(&buf[start..end]).is_ok());
    }

    #[test]
    fn bad_fields_are_typed_errors() {
        let mut buf = Vec::new();
        let mut b = PropertiesBuilder::new(&mut buf);
        for e in [
            b.tags("a||b").unwrap_err(),
            b.key("two words").unwrap_err(),
            b.property("KEYS", "x").unwrap_err(),
            b.property("", "x").unwrap_err(),
        ] {
            assert!(matches!(e, Error::InvalidMessage { .. }), "{e:?}");
        }
    }

    #[test]
    fn compression_keeps_only_shorter_bodies() {
        let c = Compression::new(Codec::Zlib, 10, Compression::DEFAULT_LEVEL).unwrap();
        assert_eq!(c.apply(b"short").unwrap(), None);
        let (packed, flags) = c.apply(&[b'a'; 1000]).unwrap().unwrap();
        assert!(packed.len() < 1000);
        assert_eq!(flags, Codec::Zlib.sysflag());
        assert!(Compression::new(Codec::Zlib, 0, 99).is_err());
    }
}
