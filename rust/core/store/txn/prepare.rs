//! The first step of a transaction: a half message (see the module doc of `store::txn`).

use super::record;
use super::state::Status;
use crate::error::{Error, Result};
use crate::message::{properties, sysflag, validate, MessageRef};
use crate::store::{PutResult, Routing, Store};

/// Properties a half's stored record owns: a caller's are dropped.
const OWNED: [&str; 5] = [
    properties::REAL_TOPIC,
    properties::REAL_QID,
    properties::TRAN_MSG,
    properties::PGROUP,
    record::TXN_ID,
];

impl Store {
    /// Stores `msg` as a half of transaction `id` of producer `group`, routed to a queue of its
    /// topic by `routing`; returns the half's put (its queue id is the real queue's).
    ///
    /// # Errors
    /// As a put; `InvalidArgument` for a bad id, `InvalidGroup`, `InvalidMessage` for a
    /// message that asks for a delay or a delivery time, `TxnConflict` when `id` is already
    /// decided or belongs to another group. Nothing is written then.
    pub fn txn_prepare(
        &self,
        msg: &MessageRef<'_>,
        routing: Routing<'_>,
        group: &str,
        id: &str,
    ) -> Result<PutResult> {
        let mut out = Vec::with_capacity(1);
        self.txn_prepare_batch(&[(*msg, routing)], group, id, &mut out)?;
        out.pop().ok_or(Error::InvalidBatch {
            reason: "a half was not stored".into(),
        })
    }

    /// `txn_prepare` of several messages of one transaction, each with its own topic and
    /// routing: every message is checked and routed first (an invalid one rejects them all,
    /// nothing written), then the halves are appended in batches of up to 4 MiB under one
    /// hold of the gate, each batch one append. Pushes one put per message to `out`, in order.
    ///
    /// A failure after a batch was appended (a full disk) leaves the halves appended before
    /// it in the transaction, which stays open: the caller rolls it back (or the checks do).
    ///
    /// # Errors
    /// As `txn_prepare`, for any of the messages.
    pub fn txn_prepare_batch(
        &self,
        msgs: &[(MessageRef<'_>, Routing<'_>)],
        group: &str,
        id: &str,
        out: &mut Vec<PutResult>,
    ) -> Result<()> {
        record::check_text("transaction id", id, false)?;
        validate::check_group(group)?;
        for (msg, _) in msgs {
            let checked = self.check_message(msg)?;
            if !checked.marks.is_none() {
                return Err(Error::InvalidMessage {
                    reason: "a transactional message cannot ask for a delay, a delivery time \
                             or a send-back"
                        .into(),
                });
            }
        }
        let mut routed = 0;
        let give_back = |routed: usize| {
            for (msg, routing) in msgs.iter().take(routed) {
                routing.give_back(msg.topic);
            }
        };
        let mut queues = Vec::with_capacity(msgs.len());
        for (msg, routing) in msgs {
            match self
                .writable_queues(msg.topic)
                .and_then(|n| routing.pick(msg.topic, n))
            {
                Ok(q) => queues.push(q),
                Err(e) => {
                    give_back(routed);
                    return Err(e);
                }
            }
            routed += 1;
        }
        let mut props = Vec::with_capacity(msgs.len() * 160);
        let mut ranges = Vec::with_capacity(msgs.len());
        for ((msg, _), queue_id) in msgs.iter().zip(&queues) {
            let start = props.len();
            half_properties(&mut props, msg, *queue_id, group, id);
            ranges.push(start..props.len());
        }
        let halves: Vec<MessageRef<'_>> = msgs
            .iter()
            .zip(&ranges)
            .map(|((msg, _), r)| half_of(msg, props.get(r.clone()).unwrap_or(&[])))
            .collect();
        // The halves' own properties count too: each is checked before any is appended.
        for h in &halves {
            if let Err(e) = validate::check_sizes(
                h.body.len(),
                h.properties.len(),
                self.inner.max_message_size,
            ) {
                give_back(routed);
                return Err(e);
            }
        }
        let first = out.len();
        let put = self.with_table(|store, table| {
            if let Some(t) = table.txns.get(id) {
                if t.status != Status::Open {
                    return Err(Error::TxnConflict {
                        id: id.to_owned(),
                        state: t.status.name(),
                        asked: "add a message to",
                    });
                }
                if t.group != group {
                    return Err(Error::InvalidArgument {
                        field: "transaction id",
                        reason: format!("{id:?} belongs to producer group {:?}", t.group),
                    });
                }
            }
            let mut appended = Vec::with_capacity(halves.len());
            for piece in super::pieces(&halves, store.commit_log_file_size()) {
                let queues = queues.get(piece.clone()).unwrap_or(&[]);
                let halves = halves.get(piece).unwrap_or(&[]);
                let status = store.append_internal_batch(halves, true, &mut appended)?;
                for (a, q) in appended.drain(..).zip(queues) {
                    out.push(PutResult {
                        status,
                        appended: a,
                        queue_id: *q,
                        scheduled: false,
                    });
                }
            }
            Ok(())
        });
        // Refused halves do not take their topics' round-robin turns.
        if put.is_err() && out.len() == first {
            give_back(routed);
        }
        put
    }
}

/// A half's properties: the caller's (but those a half owns), then the real topic and queue,
/// the transaction flag, the producer group and the transaction id.
fn half_properties(
    props: &mut Vec<u8>,
    msg: &MessageRef<'_>,
    queue_id: u32,
    group: &str,
    id: &str,
) {
    for (k, v) in properties::iter(msg.properties) {
        if !OWNED.contains(&k) {
            properties::push(props, k, v);
        }
    }
    properties::push(props, properties::REAL_TOPIC, msg.topic);
    properties::push(props, properties::REAL_QID, &queue_id.to_string());
    properties::push(props, properties::TRAN_MSG, "true");
    properties::push(props, properties::PGROUP, group);
    properties::push(props, record::TXN_ID, id);
}

/// The half record of `msg` with properties `props`. RocketMQ stores a half with the
/// transaction type reset to NOT, so that it is dispatched to the half topic's own queue
/// (never to its real topic's).
fn half_of<'m>(msg: &MessageRef<'m>, props: &'m [u8]) -> MessageRef<'m> {
    MessageRef {
        topic: record::HALF_TOPIC,
        queue_id: 0,
        properties: props,
        sysflag: msg.sysflag & !sysflag::TRANSACTION_MASK,
        ..*msg
    }
}
