//! Round-robin queue selection with one turn per topic, as RocketMQ's `TopicPublishInfo`
//! (`sendWhichQueue`) keeps it per producer and topic.
//!
//! Invariant: a send to one topic advances that topic's turn only. A counter shared by every
//! topic would let sends to other topics decide which queue of this one comes next: sends
//! alternating between a 2-queue and a 1-queue topic would then put every message of the first
//! topic in the same queue.
//!
//! Every send takes a turn, so the lookup is lock-free for a sender's first `SLOTS` topics: an
//! open-addressed table whose slots are claimed once (`OnceLock`) and never change topic, plus
//! the slot used last, checked first (a sender usually sends to one topic in a row). Topics
//! beyond `SLOTS` share a locked map.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::util::hash::FastBuild;

/// Lock-free slots per sender (a power of two: the probe wraps with a mask).
const SLOTS: usize = 64;

/// A sender's queue turns, one per topic. Thread-safe; the first send to a topic starts at
/// `seed`, so that senders created in different processes do not all begin with queue 0.
#[derive(Debug)]
pub struct RoundRobin {
    seed: u32,
    slots: Box<[Slot]>,
    /// The slot the last lookup found (a hint: any value is safe).
    last: AtomicUsize,
    /// Turns of the topics that found every slot taken.
    overflow: Mutex<HashMap<Box<str>, u32, FastBuild>>,
}

#[derive(Debug)]
struct Slot {
    /// Set once, by the first topic that probes here while it is free.
    topic: OnceLock<Box<str>>,
    turn: AtomicU32,
}

impl RoundRobin {
    /// Turns starting at `seed` for every topic.
    pub fn new(seed: u32) -> Self {
        RoundRobin {
            seed,
            slots: (0..SLOTS)
                .map(|_| Slot {
                    topic: OnceLock::new(),
                    turn: AtomicU32::new(seed),
                })
                .collect(),
            last: AtomicUsize::new(0),
            overflow: Mutex::new(HashMap::default()),
        }
    }

    /// The queue of `topic` to send to next, out of `queues` (at least 1 is assumed), and
    /// advances the topic's turn.
    #[inline]
    pub fn next(&self, topic: &str, queues: u32) -> u32 {
        let turn = match self.slot(topic) {
            Some(slot) => slot.turn.fetch_add(1, Ordering::Relaxed),
            None => {
                let mut map = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
                let t = match map.get_mut(topic) {
                    Some(t) => t,
                    None => map.entry(topic.into()).or_insert(self.seed),
                };
                let turn = *t;
                *t = t.wrapping_add(1);
                turn
            }
        };
        turn % queues.max(1)
    }

    /// Undoes the last `next` of `topic`: that send did not happen, and its retry takes the
    /// same turn.
    pub fn give_back(&self, topic: &str) {
        match self.slot(topic) {
            Some(slot) => {
                slot.turn.fetch_sub(1, Ordering::Relaxed);
            }
            None => {
                let mut map = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(t) = map.get_mut(topic) {
                    *t = t.wrapping_sub(1);
                }
            }
        }
    }

    /// The slot of `topic`, claiming a free one on its first use; `None` when every slot on
    /// its probe belongs to another topic.
    #[inline]
    fn slot(&self, topic: &str) -> Option<&Slot> {
        let last = self.slots.get(self.last.load(Ordering::Relaxed) % SLOTS)?;
        if last.topic.get().is_some_and(|t| **t == *topic) {
            return Some(last);
        }
        let start = FastBuild::default().hash_one(topic) as usize;
        for i in 0..SLOTS {
            let at = (start.wrapping_add(i)) % SLOTS;
            let slot = self.slots.get(at)?;
            let owner = match slot.topic.get() {
                Some(t) => t,
                None => slot.topic.get_or_init(|| topic.into()),
            };
            if **owner == *topic {
                self.last.store(at, Ordering::Relaxed);
                return Some(slot);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{RoundRobin, SLOTS};

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

    #[test]
    fn topics_beyond_the_slots_keep_their_own_turns_too() {
        let rr = RoundRobin::new(7);
        let topics: Vec<String> = (0..SLOTS * 2 + 3).map(|i| format!("topic-{i}")).collect();
        for round in 0..3u32 {
            for t in &topics {
                assert_eq!(rr.next(t, 1000), 7 + round, "{t}");
            }
        }
        let last = topics.last().map(String::as_str).unwrap_or("");
        rr.give_back(last);
        assert_eq!(rr.next(last, 1000), 9);
    }
}
