//! Put hooks: an ordered list, registered when the store opens, that may rewrite each message
//! between validation and append (RocketMQ 5's `PutMessageHook`). Delay levels, timer
//! messages and retry send-back each land as one hook.
//!
//! Invariants
//! - Hooks are the only way a caller's message reaches a system topic
//!   (`topic_config::is_system_topic`), but for a transaction's half message, which
//!   `Store::txn_prepare` stores under the transactions' gate (store/txn/): a caller's message
//!   to one is refused before any hook runs, and a hook's rewrite into one is accepted, the
//!   topic being created (or grown) to hold the queue the hook chose. The store's own records (a timer's cancel and reschedule
//!   records) go there through `Store::put_internal`, which runs no hook.
//! - A hook sees the message as the hooks before it left it, already routed to its queue, and
//!   its rewrite is validated as a caller's message is (sizes, property syntax): a faulty hook
//!   gets a typed error, never a bad record.
//! - A hook changes the record (topic, queue, properties, sysflag), never the tags code alone:
//!   the code follows from the record (`message::tags`), so a rebuilt consume queue agrees.
//! - A hook that refuses a message on its fields alone does so in `check`, which runs with the
//!   caller's validation: a refused message then neither auto-creates its topic nor takes a
//!   round-robin turn.
//! - A hook sees only the messages that carry one of the marks it wants (`wants`,
//!   `message::marks`): the validation pass finds a message's marks, and a message with none
//!   that any hook wants runs no hook code (no `check`, no `rewrite`), which keeps the plain
//!   put as cheap as with no hook registered. The store always registers two hooks after the
//!   caller's: the timer hook (store/timer/), which wants `TIMER` only, then the delay-level
//!   hook (store/schedule/), which wants `DELAY` only.

use crate::error::Result;
use crate::message::marks::Marks;
use crate::message::MessageRef;

/// A step of the write pipeline that may rewrite a message before it is appended.
pub trait PutHook: Send + Sync + std::fmt::Debug {
    /// Short name for errors and logs.
    fn name(&self) -> &'static str;

    /// The marks of the messages this hook looks at (`check` and `rewrite` are called only
    /// for a message that carries one of them). Every message by default.
    fn wants(&self) -> Marks {
        Marks::EVERY
    }

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

/// What every hook of a list wants together.
pub(super) fn wanted(hooks: &[std::sync::Arc<dyn PutHook>]) -> Marks {
    hooks.iter().fold(Marks::NONE, |m, h| m.with(h.wants()))
}

/// Runs each hook's `check` that wants `msg`, whose marks are `marks`.
pub(super) fn check(
    hooks: &[std::sync::Arc<dyn PutHook>],
    msg: &MessageRef<'_>,
    marks: Marks,
) -> Result<()> {
    hooks
        .iter()
        .filter(|h| h.wants().selects(marks))
        .try_for_each(|h| h.check(msg))
}

/// Runs `hooks` in order over `msg`, whose marks are `marks`, each only when it wants the
/// message as the hooks before it left it; `None` when none rewrote it.
pub(super) fn run(
    hooks: &[std::sync::Arc<dyn PutHook>],
    msg: &MessageRef<'_>,
    marks: Marks,
) -> Result<Option<Rewrite>> {
    let mut current: Option<Rewrite> = None;
    let mut marks = marks;
    for hook in hooks {
        if !hook.wants().selects(marks) {
            continue;
        }
        let next = match &current {
            Some(r) => hook.rewrite(&r.apply(msg))?,
            None => hook.rewrite(msg)?,
        };
        if let Some(r) = next {
            marks = Marks::of_properties(&r.properties);
            current = Some(r);
        }
    }
    Ok(current)
}
