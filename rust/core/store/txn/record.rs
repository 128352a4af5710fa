//! The transaction records of the commit log (FORMAT.md §17): the names of their properties,
//! how an op record (a decision: commit, rollback, check, discard) is encoded, and which
//! transaction ids and progress keys are accepted.
//!
//! Invariants
//! - One op record is one decision about every id it lists, and sets the progress it carries:
//!   a crash leaves the whole record or none of it (the log cuts a torn tail whole).
//! - An id or a progress key never holds `,`, a control byte or the property separators, so
//!   a list of ids is the ids joined by `,`.

use crate::error::{Error, Result};
use crate::message::properties;

/// The topic of half messages (RocketMQ's), queue 0.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// The topic of op records (RocketMQ's), queue 0.
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Where the halves of a transaction checked too often are copied (RocketMQ's), queue 0.
pub const MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// The transaction id property of a half (RocketMQ's).
pub const TXN_ID: &str = "__transactionId__";
/// The check count RocketMQ's check service writes on its re-appended copy of a half.
pub const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// The op record's decision (mqlite's own): one of [`Op::name`].
pub const OP: &str = "MQLITE_TXN_OP";
/// The ids an op record decides, joined by `,` (mqlite's own).
pub const IDS: &str = "MQLITE_TXN_IDS";
/// The progress key an op record sets (mqlite's own).
pub const PROGRESS_KEY: &str = "MQLITE_TXN_PROGRESS_KEY";
/// The progress value an op record sets (mqlite's own).
pub const PROGRESS: &str = "MQLITE_TXN_PROGRESS";
/// The tag of an op record that resolves halves (RocketMQ's REMOVE_TAG): a commit, a rollback
/// or a discard that lists at least one half.
pub const OP_TAG: &str = "d";
/// The tag of any other op record (a check, or a progress alone): RocketMQ's check service
/// reads only [`OP_TAG`] records, so it never takes a check for a resolution.
pub const NOTE_TAG: &str = "mqlite";
/// Longest transaction id, progress key or progress value, in bytes.
pub const MAX_TEXT: usize = 256;

/// A decision an op record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The halves go to their real topic.
    Commit,
    /// The halves are dropped.
    Rollback,
    /// The group's checker was asked once more.
    Check,
    /// Checked `max` times without an answer: the halves go to [`MAX_TIME_TOPIC`].
    Discard,
}

impl Op {
    /// The property value.
    pub fn name(self) -> &'static str {
        match self {
            Op::Commit => "commit",
            Op::Rollback => "rollback",
            Op::Check => "check",
            Op::Discard => "discard",
        }
    }

    /// The decision named `s`.
    pub fn parse(s: &str) -> Option<Op> {
        match s {
            "commit" => Some(Op::Commit),
            "rollback" => Some(Op::Rollback),
            "check" => Some(Op::Check),
            "discard" => Some(Op::Discard),
            _ => None,
        }
    }
}

/// A decoded op record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord<'a> {
    /// The decision.
    pub op: Op,
    /// The ids decided.
    pub ids: Vec<&'a str>,
    /// The progress set, `(key, value)`.
    pub progress: Option<(&'a str, &'a str)>,
}

impl<'a> OpRecord<'a> {
    /// Decodes the properties of a record of [`OP_TOPIC`]; `None` for a record that is not
    /// mqlite's (RocketMQ's own op records carry no [`OP`]).
    pub fn decode(props: &'a [u8]) -> Option<Self> {
        let op = Op::parse(properties::get(props, OP)?)?;
        let ids = properties::get(props, IDS)
            .map(|s| s.split(',').filter(|i| !i.is_empty()).collect())
            .unwrap_or_default();
        let progress = properties::get(props, PROGRESS_KEY)
            .map(|k| (k, properties::get(props, PROGRESS).unwrap_or("")));
        Some(OpRecord { op, ids, progress })
    }

    /// The encoded properties of the record; `resolves`: it lists halves it resolves (see
    /// [`OP_TAG`]).
    pub fn encode(&self, resolves: bool) -> Vec<u8> {
        let mut props =
            Vec::with_capacity(64 + self.ids.iter().map(|i| i.len() + 1).sum::<usize>());
        let tag = if resolves { OP_TAG } else { NOTE_TAG };
        properties::push(&mut props, properties::TAGS, tag);
        properties::push(&mut props, OP, self.op.name());
        if !self.ids.is_empty() {
            properties::push(&mut props, IDS, &self.ids.join(","));
        }
        if let Some((k, v)) = self.progress {
            properties::push(&mut props, PROGRESS_KEY, k);
            properties::push(&mut props, PROGRESS, v);
        }
        props
    }
}

/// Checks a transaction id, progress key or progress value (`field` names it in the error).
///
/// # Errors
/// `InvalidArgument` for an empty or too long text, or one with `,` or a control byte (an
/// empty progress value is accepted).
pub fn check_text(field: &'static str, text: &str, may_be_empty: bool) -> Result<()> {
    let reason = if text.is_empty() && !may_be_empty {
        Some("is empty".to_owned())
    } else if text.len() > MAX_TEXT {
        Some(format!("is {} bytes, more than {MAX_TEXT}", text.len()))
    } else if text.chars().any(|c| c == ',' || c.is_control()) {
        Some("holds ',' or a control character".to_owned())
    } else {
        None
    };
    match reason {
        Some(r) => Err(Error::InvalidArgument {
            field,
            reason: format!("{text:?} {r}"),
        }),
        None => Ok(()),
    }
}

/// The body of an op record of decision `op`: the half queue offsets it resolves, each
/// followed by `,` (RocketMQ 5's op body, so that a RocketMQ broker opening the store sees them
/// resolved); a record that resolves none (a check, a progress alone) holds the decision's
/// name instead, a record's body never being empty.
pub fn op_body(op: Op, half_queue_offsets: impl Iterator<Item = u64>) -> Vec<u8> {
    let mut body = Vec::new();
    if op != Op::Check {
        for o in half_queue_offsets {
            body.extend_from_slice(o.to_string().as_bytes());
            body.push(b',');
        }
    }
    if body.is_empty() {
        body.extend_from_slice(op.name().as_bytes());
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_record_round_trips() {
        let r = OpRecord {
            op: Op::Commit,
            ids: vec!["a", "b:1"],
            progress: Some(("sink", "7")),
        };
        let props = r.encode(true);
        assert_eq!(OpRecord::decode(&props), Some(r.clone()));
        assert_eq!(properties::get(&props, properties::TAGS), Some(OP_TAG));
        let props = r.encode(false);
        assert_eq!(properties::get(&props, properties::TAGS), Some(NOTE_TAG));
    }

    #[test]
    fn texts_with_separators_are_refused() {
        assert!(check_text("id", "a,b", false).is_err());
        assert!(check_text("id", "", false).is_err());
        assert!(check_text("id", "a\u{1}", false).is_err());
        assert!(check_text("progress", "", true).is_ok());
        assert!(check_text("id", &"x".repeat(MAX_TEXT + 1), false).is_err());
    }

    #[test]
    fn op_body_is_rocketmq_5s() {
        assert_eq!(
            op_body(Op::Commit, [17u64, 18].into_iter()),
            b"17,18,".to_vec()
        );
        // A check resolves nothing: RocketMQ must not read its halves as done.
        assert_eq!(op_body(Op::Check, [17u64].into_iter()), b"check".to_vec());
        assert_eq!(op_body(Op::Commit, std::iter::empty()), b"commit".to_vec());
    }
}
