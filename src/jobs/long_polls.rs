//! Open long-polls, counted per owner in this process: each owner may hold
//! `server.max_long_polls_per_owner` of them at once. A long-poll holds a
//! [`LongPoll`] while it waits and gives its place back when that is
//! dropped, however it ends: answered, timed out, or its request dropped
//! because the client went away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::domain::OwnerId;
use crate::process::metrics;

/// How many long-polls each owner holds open now.
type Open = Arc<Mutex<HashMap<OwnerId, usize>>>;

fn lock(open: &Open) -> MutexGuard<'_, HashMap<OwnerId, usize>> {
    // The counts are whole after every statement: a panic elsewhere leaves them usable.
    open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The places for long-polls of every owner.
pub struct LongPolls {
    per_owner: usize,
    open: Open,
}

impl LongPolls {
    /// Places for `per_owner` long-polls of each owner at once.
    pub fn new(per_owner: usize) -> Self {
        Self { per_owner, open: Open::default() }
    }

    /// The most long-polls one owner may hold at once.
    pub fn per_owner(&self) -> usize {
        self.per_owner
    }

    /// A place for one of `owner`'s long-polls, waiting up to `wait`; none
    /// when the owner holds as many as it may.
    pub fn open(&self, owner: &OwnerId, wait: Duration) -> Option<LongPoll> {
        let mut open = lock(&self.open);
        let held = open.get(owner).copied().unwrap_or(0);
        if held >= self.per_owner {
            return None;
        }
        open.insert(owner.clone(), held + 1);
        metrics::long_poll_opened();
        Some(LongPoll { owner: owner.clone(), wait, open: self.open.clone() })
    }
}

/// One open long-poll's place: given back when dropped.
pub struct LongPoll {
    owner: OwnerId,
    wait: Duration,
    open: Open,
}

impl LongPoll {
    /// Whose long-poll it is.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// How long it may wait.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(held) = open.get_mut(&self.owner) {
            *held -= 1;
            if *held == 0 {
                open.remove(&self.owner);
            }
        }
        metrics::long_poll_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_owner_has_its_own_places_and_a_dropped_long_poll_gives_its_place_back() {
        let polls = LongPolls::new(2);
        let (alice, bob) = (OwnerId::parse("alice").unwrap(), OwnerId::parse("bob").unwrap());
        let wait = Duration::from_secs(1);
        let first = polls.open(&alice, wait).expect("a first place");
        let second = polls.open(&alice, wait).expect("a second place");
        assert!(polls.open(&alice, wait).is_none(), "no third place");
        assert!(polls.open(&bob, wait).is_some(), "bob's places are his own");
        drop(first);
        let third = polls.open(&alice, wait).expect("the place given back");
        drop((second, third));
        assert!(lock(&polls.open).is_empty(), "an owner without long-polls is forgotten");
    }
}
