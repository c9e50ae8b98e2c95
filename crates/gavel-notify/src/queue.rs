//! The approvals waiting for their post, one queue per requester, served
//! round-robin: one approval of each requester with approvals waiting, in
//! turn. A requester's backlog therefore delays another requester's next
//! approval by at most one post, whatever its length; within one
//! requester, approvals go in the order they were queued (the order they
//! were created). Every approval costs the same (one post per webhook), so
//! plain round-robin is already fair in posts; no deficit is counted.
//!
//! A plain value, no IO: [`FairQueues`].

use std::collections::{HashMap, VecDeque};

/// Per-requester queues served in turn.
#[derive(Debug)]
pub struct FairQueues<T> {
    queues: HashMap<String, VecDeque<T>>,
    /// The requesters with something queued, in the order of their turns.
    turns: VecDeque<String>,
    len: usize,
}

impl<T> Default for FairQueues<T> {
    fn default() -> Self {
        FairQueues { queues: HashMap::new(), turns: VecDeque::new(), len: 0 }
    }
}

impl<T> FairQueues<T> {
    /// Queues `item` last among `requester`'s; a requester with nothing
    /// queued before takes the last turn.
    pub fn push(&mut self, requester: &str, item: T) {
        match self.queues.get_mut(requester) {
            Some(queue) => queue.push_back(item),
            None => {
                self.queues.insert(requester.to_string(), VecDeque::from([item]));
                self.turns.push_back(requester.to_string());
            }
        }
        self.len += 1;
    }

    /// The first item of the requester whose turn it is; that requester's
    /// next turn comes after every other requester with items queued.
    pub fn pop(&mut self) -> Option<T> {
        let requester = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&requester).expect("a requester in turn has a queue");
        let item = queue.pop_front().expect("a requester in turn has an item");
        if queue.is_empty() {
            self.queues.remove(&requester);
        } else {
            self.turns.push_back(requester);
        }
        self.len -= 1;
        Some(item)
    }

    /// Items queued, every requester's.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Requesters with something queued.
    pub fn requesters(&self) -> usize {
        self.turns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_requesters_backlog_delays_anothers_first_item_by_one_turn() {
        let mut queues = FairQueues::default();
        for number in 0..1_000 {
            queues.push("user:alice", format!("a{number}"));
        }
        assert_eq!(queues.pop().as_deref(), Some("a0"));
        queues.push("user:bob", "b0".to_string());
        assert_eq!(queues.pop().as_deref(), Some("a1"), "alice's turn had come before bob queued");
        assert_eq!(queues.pop().as_deref(), Some("b0"));
        assert_eq!(queues.pop().as_deref(), Some("a2"));
        assert_eq!((queues.len(), queues.requesters()), (997, 1));
    }

    #[test]
    fn requesters_take_turns_and_each_keeps_its_own_order() {
        let mut queues = FairQueues::default();
        for (requester, count) in [("a", 3), ("b", 1), ("c", 2)] {
            for number in 0..count {
                queues.push(requester, format!("{requester}{number}"));
            }
        }
        let order: Vec<String> = std::iter::from_fn(|| queues.pop()).collect();
        assert_eq!(order, ["a0", "b0", "c0", "a1", "c1", "a2"]);
        assert!(queues.is_empty());
        assert_eq!(queues.requesters(), 0);
    }

    #[test]
    fn a_requester_that_ran_dry_and_comes_back_waits_behind_the_others() {
        let mut queues = FairQueues::default();
        queues.push("a", 1);
        queues.push("b", 2);
        assert_eq!(queues.pop(), Some(1));
        queues.push("a", 3);
        queues.push("b", 4);
        assert_eq!([queues.pop(), queues.pop(), queues.pop(), queues.pop()], [Some(2), Some(3), Some(4), None]);
    }

    #[test]
    fn with_many_requesters_flooding_a_newcomer_waits_at_most_one_item_of_each() {
        let mut queues = FairQueues::default();
        for requester in 0..20 {
            for number in 0..50 {
                queues.push(&format!("flood-{requester}"), (requester, number));
            }
        }
        for _ in 0..7 {
            queues.pop();
        }
        queues.push("newcomer", (99, 0));
        let ahead = std::iter::from_fn(|| queues.pop()).position(|item| item == (99, 0)).expect("served");
        assert!(ahead <= 20, "{ahead} items went before the newcomer's first");
    }
}
