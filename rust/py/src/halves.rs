//! `Producer._send_halves`: many half messages of one transaction in one call, one hold of
//! the transactions' gate and one append per 4 MiB (`Store::txn_prepare_batch`). The Spark
//! sink's tasks write their rows through it.

use mqlite::message::builder::Outgoing;
use mqlite::message::MessageRef;
use mqlite::store::Routing;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::args::{self, Int};
use crate::message::{read_message, Held};
use crate::producer::PyProducer;

/// Stores every `Message` of `msgs` as a half of transaction `txn_id`; `queues` (as long as
/// `msgs`, or None) gives each its queue, None for the producer's round robin. Returns how
/// many halves were stored (all of them, or an error).
pub(crate) fn send_halves(
    p: &PyProducer,
    py: Python<'_>,
    msgs: &Bound<'_, PyList>,
    txn_id: &str,
    queues: Option<&Bound<'_, PyList>>,
) -> PyResult<usize> {
    let n = msgs.len();
    let queue_ids: Vec<Option<u32>> = match queues {
        None => vec![None; n],
        Some(qs) if qs.len() == n => {
            let mut out = Vec::with_capacity(n);
            for q in qs.iter() {
                let q: Option<Int> = q.extract()?;
                out.push(args::opt_queue_id(q.as_ref())?);
            }
            out
        }
        Some(qs) => {
            return Err(crate::errors::IllegalArgumentError::new_err(format!(
                "queues has {} items for {n} messages",
                qs.len()
            )))
        }
    };
    let now = p.store.config().clock.now_ms();
    let mut uniq = String::with_capacity(n * 32);
    p.ids.next_batch_into(now, n, &mut uniq);
    let mut props: Vec<u8> = Vec::with_capacity(n * 44);
    let mut held: Vec<Held<'_>> = Vec::with_capacity(n);
    for (i, item) in msgs.iter().enumerate() {
        let id = uniq.get(i * 32..i * 32 + 32).unwrap_or("");
        held.push(read_message(&item, &mut props, id)?);
    }
    let mut outs: Vec<Outgoing<'_>> = Vec::with_capacity(n);
    for h in &held {
        outs.push(h.outgoing()?);
    }
    let put = py.detach(|| -> mqlite::Result<usize> {
        let mut items: Vec<(MessageRef<'_>, Routing<'_>)> = Vec::with_capacity(n);
        for (o, q) in outs.iter().zip(&queue_ids) {
            items.push((o.to_ref(&props, now)?, p.routing(*q)));
        }
        let mut puts = Vec::with_capacity(n);
        p.store
            .txn_prepare_batch(&items, &p.group, txn_id, &mut puts)?;
        Ok(puts.len())
    });
    put.map_err(|e| p.send_error(py, e))
}
