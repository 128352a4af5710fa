//! Round-robin queue selection with one turn per topic, as RocketMQ's `TopicPublishInfo`
//! (`sendWhichQueue`) keeps it per producer and topic.
//!
//! Invariant: a send to one topic advances that topic's turn only. A counter shared by every
//! topic would let sends to other topics decide which queue of this one comes next: sends
//! alternating between a 2-queue and a 1-queue topic would then put every message of the first
//! topic in the same queue.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::util::hash::FastBuild;

/// A sender's queue turns, one per topic. Thread-safe; the first send to a topic starts at
/// `seed`, so that senders created in different processes do not all begin with queue 0.
#[derive(Debug)]
pub struct RoundRobin {
    seed: u32,
    turns: Mutex<HashMap<Box<str>, u32, FastBuild>>,
}

impl RoundRobin {
    /// Turns starting at `seed` for every topic.
    pub fn new(seed: u32) -> Self {
        RoundRobin {
            seed,
            turns: Mutex::new(HashMap::default()),
        }
    }

    /// The queue of `topic` to send to next, out of `queues` (at least 1 is assumed), and
    /// advances the topic's turn.
    pub fn next(&self, topic: &str, queues: u32) -> u32 {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        let turn = match turns.get_mut(topic) {
            Some(t) => t,
            None => turns.entry(topic.into()).or_insert(self.seed),
        };
        let queue = *turn % queues.max(1);
        *turn = turn.wrapping_add(1);
        queue
    }

    /// Undoes the last `next` of `topic`: that send did not happen, and its retry takes the
    /// same turn.
    pub fn give_back(&self, topic: &str) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = turns.get_mut(topic) {
            *t = t.wrapping_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RoundRobin;

    #[test]
    fn each_topic_keeps_its_own_turn() {
        let rr = RoundRobin::new(0);
        let mut two = Vec::new();
        for _ in 0..6 {
            two.push(rr.next("Two", 2));
            assert_eq!(rr.next("One", 1), 0);
        }
        assert_eq!(two, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn a_turn_given_back_is_taken_again() {
        let rr = RoundRobin::new(u32::MAX);
        assert_eq!(rr.next("T", 4), u32::MAX % 4);
        rr.give_back("T");
        assert_eq!(rr.next("T", 4), u32::MAX % 4);
        assert_eq!(rr.next("T", 4), 0); // wraps
    }
}
