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
        record::check_text("transaction id", id, false)?;
        validate::check_group(group)?;
        let checked = self.check_message(msg)?;
        if !checked.marks.is_none() {
            return Err(Error::InvalidMessage {
                reason: "a transactional message cannot ask for a delay, a delivery time or a \
                         send-back"
                    .into(),
            });
        }
        let queue_id = routing.pick(msg.topic, self.writable_queues(msg.topic)?)?;
        let mut props = Vec::with_capacity(msg.properties.len() + 96);
        for (k, v) in properties::iter(msg.properties) {
            if !OWNED.contains(&k) {
                properties::push(&mut props, k, v);
            }
        }
        properties::push(&mut props, properties::REAL_TOPIC, msg.topic);
        properties::push(&mut props, properties::REAL_QID, &queue_id.to_string());
        properties::push(&mut props, properties::TRAN_MSG, "true");
        properties::push(&mut props, properties::PGROUP, group);
        properties::push(&mut props, record::TXN_ID, id);
        // RocketMQ stores a half with the transaction type reset to NOT, so that it is
        // dispatched to the half topic's own queue (never to its real topic's).
        let half = MessageRef {
            topic: record::HALF_TOPIC,
            queue_id: 0,
            properties: &props,
            sysflag: msg.sysflag & !sysflag::TRANSACTION_MASK,
            ..*msg
        };
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
            let put = store.put_internal(&half)?;
            Ok(PutResult { queue_id, ..put })
        });
        // A refused half does not take its topic's round-robin turn.
        put.inspect_err(|_| routing.give_back(msg.topic))
    }
}
