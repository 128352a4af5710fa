//! Put hooks: an ordered list, registered when the store opens, that may rewrite each message
//! between validation and append (RocketMQ 5's `PutMessageHook`). Delay levels, timer
//! messages, transactions and retry send-back each land as one hook.
//!
//! Invariants
//! - Hooks are the only way into a system topic (`topic_config::is_system_topic`): a caller's
//!   message to one is refused before any hook runs, and a hook's rewrite into one is
//!   accepted, the topic being created (or grown) to hold the queue the hook chose.
//! - A hook sees the message as the hooks before it left it, already routed to its queue, and
//!   its rewrite is validated as a caller's message is (sizes, property syntax): a faulty hook
//!   gets a typed error, never a bad record.
//! - A hook changes the record (topic, queue, properties, sysflag), never the tags code alone:
//!   the code follows from the record (`message::tags`), so a rebuilt consume queue agrees.
//! - A hook that refuses a message on its fields alone does so in `check`, which runs with the
//!   caller's validation: a refused message then neither auto-creates its topic nor takes a
//!   round-robin turn.
//! - With no hook registered the write path runs no hook code beyond one length check. The
//!   store always registers one, the delay-level hook (store/schedule/), last.

use crate::error::Result;
use crate::message::MessageRef;

/// A step of the write pipeline that may rewrite a message before it is appended.
pub trait PutHook: Send + Sync + std::fmt::Debug {
    /// Short name for errors and logs.
    fn name(&self) -> &'static str;

    /// Refuses a message on its own fields, before its topic is looked up or created (a
    /// refusal here writes nothing at all). Accepts by default.
    ///
    /// # Errors
    /// The message's typed error.
    fn check(&self, msg: &MessageRef<'_>) -> Result<()> {
        let _ = msg;
        Ok(())
    }

    /// Looks at `msg` (validated, routed to `msg.queue_id`) and returns how to store it
    /// instead, or `None` to leave it as it is.
    ///
    /// # Errors
    /// Refuses the message (nothing of it is written); a batch is refused whole.
    fn rewrite(&self, msg: &MessageRef<'_>) -> Result<Option<Rewrite>>;
}

/// The new destination and metadata of a rewritten message; the body, flag, born time and
/// reconsume count stay the caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// Destination topic (may be a system topic).
    pub topic: String,
    /// Destination queue id.
    pub queue_id: u32,
    /// The whole encoded property string of the stored record.
    pub properties: Vec<u8>,
    /// SYSFLAG of the stored record.
    pub sysflag: i32,
}

impl Rewrite {
    /// The message as this rewrite stores it.
    pub fn apply<'a>(&'a self, msg: &MessageRef<'a>) -> MessageRef<'a> {
        MessageRef {
            topic: &self.topic,
            queue_id: self.queue_id,
            properties: &self.properties,
            sysflag: self.sysflag,
            ..*msg
        }
    }
}

/// Runs `hooks` in order over `msg`; `None` when none rewrote it.
pub(super) fn run(
    hooks: &[std::sync::Arc<dyn PutHook>],
    msg: &MessageRef<'_>,
) -> Result<Option<Rewrite>> {
    let mut current: Option<Rewrite> = None;
    for hook in hooks {
        let next = match &current {
            Some(r) => hook.rewrite(&r.apply(msg))?,
            None => hook.rewrite(msg)?,
        };
        if next.is_some() {
            current = next;
        }
    }
    Ok(current)
}
