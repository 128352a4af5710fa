//! A value per (topic, queue id), found on every append: the appender's next queue offsets
//! (RocketMQ's topicQueueTable) and, for a shared writer, its cache of the writer mapping's
//! queue slots (shared.rs).
//!
//! Invariant: `names[i]` is the topic of index `i` in `index`, and `values[i]` its queues'
//! values; indexes are never reused, so `last` always names a topic of the table.

use std::collections::HashMap;

use crate::util::hash::FastBuild;

/// A value of type `V` per (topic, queue id), `V::default()` for one never set. The topic maps
/// to an index so that an append finds its value with one hash lookup (a map of vectors would
/// need a second one to insert a new topic without holding the first borrow), and with none
/// when it goes to the topic of the previous one (appends usually go to one topic in a row,
/// and comparing its name costs less than hashing it).
#[derive(Debug)]
pub(crate) struct QueueTable<V> {
    index: HashMap<String, usize, FastBuild>,
    pub(super) names: Vec<String>,
    pub(super) values: Vec<Vec<V>>,
    /// Index of the topic looked up last.
    last: usize,
}

impl<V> Default for QueueTable<V> {
    fn default() -> Self {
        QueueTable {
            index: HashMap::default(),
            names: Vec::new(),
            values: Vec::new(),
            last: 0,
        }
    }
}

impl<V: Copy + Default> QueueTable<V> {
    /// The value of (topic, queue id), the default for one never set.
    pub(crate) fn get(&self, topic: &str, queue_id: u32) -> V {
        self.index
            .get(topic)
            .and_then(|&t| self.values.get(t))
            .and_then(|v| v.get(queue_id as usize))
            .copied()
            .unwrap_or_default()
    }

    /// The value of (topic, queue id), created with the default.
    #[inline]
    pub(crate) fn slot(&mut self, topic: &str, queue_id: u32) -> Option<&mut V> {
        let t = if self.names.get(self.last).is_some_and(|n| n == topic) {
            self.last
        } else {
            let t = match self.index.get(topic) {
                Some(&t) => t,
                None => {
                    let t = self.values.len();
                    self.values.push(Vec::new());
                    self.names.push(topic.to_owned());
                    self.index.insert(topic.to_owned(), t);
                    t
                }
            };
            self.last = t;
            t
        };
        let v = self.values.get_mut(t)?;
        let i = queue_id as usize;
        if v.len() <= i {
            v.resize(i + 1, V::default());
        }
        v.get_mut(i)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn queue_table_keeps_each_topic_and_queue_apart_when_topics_alternate() {
        let mut t = QueueTable::<u64>::default();
        // A, A, AB, A, AB, C, A: the remembered last topic changes back and forth, and a
        // prefix of a name ("A" of "AB") is another topic.
        for (topic, q) in [
            ("A", 0),
            ("A", 0),
            ("AB", 0),
            ("A", 1),
            ("AB", 0),
            ("C", 2),
            ("A", 0),
        ] {
            *t.slot(topic, q).unwrap() += 1;
        }
        assert_eq!(t.get("A", 0), 3);
        assert_eq!(t.get("A", 1), 1);
        assert_eq!(t.get("AB", 0), 2);
        assert_eq!(t.get("C", 2), 1);
        assert_eq!(t.get("C", 0), 0);
        assert_eq!(t.get("B", 0), 0);
        assert_eq!(t.names, ["A", "AB", "C"]);
    }
}
