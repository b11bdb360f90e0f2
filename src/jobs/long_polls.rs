//! Open long-polls and event streams, counted per owner in this process:
//! each owner may hold `server.max_long_polls_per_owner` of them at once. A
//! long-poll holds a [`LongPoll`] while it waits and gives its place back
//! when that is dropped, however it ends: answered, timed out, its request
//! dropped because the client went away, or told to end by
//! [`LongPoll::ended`]: when the server stops ([`LongPolls::stop`]) and when
//! the key that opened it changes ([`LongPolls::end_key`]: revoked, or its
//! limit changed; a live key's client resumes where it was).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

use crate::domain::OwnerId;
use crate::process::metrics;
use crate::sync::LockAnyway;

/// How many long-polls each owner, and each key, holds open now: an owner
/// or a key without one is not in them.
#[derive(Debug, Default)]
struct Held {
    owners: HashMap<OwnerId, usize>,
    keys: HashMap<Uuid, usize>,
}

type Open = Arc<Mutex<Held>>;

fn lock(open: &Open) -> MutexGuard<'_, Held> {
    // The counts are whole after every statement: a panic elsewhere leaves them usable.
    open.lock_anyway()
}

/// What ends open long-polls: the server stopping, and the changes of
/// each key that holds long-polls open (how many since its first one
/// opened).
#[derive(Clone, Debug, Default)]
struct Ends {
    stopping: bool,
    key_changes: HashMap<Uuid, u64>,
}

impl Ends {
    fn changes_of(&self, key: Option<Uuid>) -> u64 {
        key.and_then(|key| self.key_changes.get(&key)).copied().unwrap_or(0)
    }
}

/// The places for long-polls of every owner.
pub(crate) struct LongPolls {
    per_owner: usize,
    open: Open,
    ends: Arc<watch::Sender<Ends>>,
}

impl LongPolls {
    /// Places for `per_owner` long-polls of each owner at once.
    pub(crate) fn new(per_owner: usize) -> Self {
        Self { per_owner, open: Open::default(), ends: Arc::new(watch::Sender::new(Ends::default())) }
    }

    /// Ends every long-poll open now or opened from now on: the server is
    /// stopping, and must not wait for clients that would hold it open.
    pub(crate) fn stop(&self) {
        self.ends.send_modify(|ends| ends.stopping = true);
    }

    /// Ends the long-polls `key` opened before now: it was revoked or
    /// changed.
    pub(crate) fn end_key(&self, key: Uuid) {
        // A key holding nothing open has nothing to end: it is not recorded.
        let held = lock(&self.open);
        if held.keys.contains_key(&key) {
            self.ends.send_modify(|ends| *ends.key_changes.entry(key).or_default() += 1);
        }
    }

    /// What this holds now: owners and keys with long-polls open, and keys
    /// whose changes are recorded for them.
    pub(crate) fn held(&self) -> [(&'static str, usize); 3] {
        let open = lock(&self.open);
        let changed = self.ends.borrow().key_changes.len();
        [
            ("long_poll_owners", open.owners.len()),
            ("long_poll_keys", open.keys.len()),
            ("long_poll_key_changes", changed),
        ]
    }

    /// The most long-polls one owner may hold at once.
    pub(crate) fn per_owner(&self) -> usize {
        self.per_owner
    }

    /// A place for one of `owner`'s long-polls opened with `key` (none for
    /// a caller without one), waiting up to `wait`; none when the owner
    /// holds as many as it may.
    pub(crate) fn open(&self, owner: &OwnerId, key: Option<Uuid>, wait: Duration) -> Option<LongPoll> {
        let mut open = lock(&self.open);
        let held = open.owners.get(owner).copied().unwrap_or(0);
        if held >= self.per_owner {
            return None;
        }
        open.owners.insert(owner.clone(), held + 1);
        if let Some(key) = key {
            *open.keys.entry(key).or_default() += 1;
        }
        metrics::long_poll_opened();
        let ends = self.ends.subscribe();
        let seen = ends.borrow().changes_of(key);
        let (open, sender) = (self.open.clone(), self.ends.clone());
        Some(LongPoll { owner: owner.clone(), key, wait, open, ends, sender, seen })
    }
}

/// One open long-poll's place: given back when dropped.
pub struct LongPoll {
    owner: OwnerId,
    key: Option<Uuid>,
    wait: Duration,
    open: Open,
    ends: watch::Receiver<Ends>,
    sender: Arc<watch::Sender<Ends>>,
    /// Its key's changes when it opened.
    seen: u64,
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

    /// Completes when the long-poll must end: the server is stopping, or
    /// the key that opened it changed since.
    pub async fn ended(&self) {
        let mut ends = self.ends.clone();
        let (key, seen) = (self.key, self.seen);
        // An error: the places are gone with the server; nothing ends them.
        if ends.wait_for(|ends| ends.stopping || ends.changes_of(key) > seen).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(held) = open.owners.get_mut(&self.owner) {
            *held -= 1;
            if *held == 0 {
                open.owners.remove(&self.owner);
            }
        }
        if let Some(key) = self.key
            && let Some(held) = open.keys.get_mut(&key)
        {
            *held -= 1;
            if *held == 0 {
                // The key's last long-poll: its changes are forgotten
                // (silently: no long-poll waits on them).
                open.keys.remove(&key);
                self.sender.send_if_modified(|ends| {
                    ends.key_changes.remove(&key);
                    false
                });
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
        let first = polls.open(&alice, None, wait).expect("a first place");
        let second = polls.open(&alice, None, wait).expect("a second place");
        assert!(polls.open(&alice, None, wait).is_none(), "no third place");
        assert!(polls.open(&bob, None, wait).is_some(), "bob's places are his own");
        drop(first);
        let third = polls.open(&alice, None, wait).expect("the place given back");
        drop((second, third));
        assert!(lock(&polls.open).owners.is_empty(), "an owner without long-polls is forgotten");
    }

    #[tokio::test]
    async fn a_change_of_its_key_or_the_server_stopping_ends_a_long_poll() {
        use futures_util::FutureExt;
        let polls = LongPolls::new(10);
        let alice = OwnerId::parse("alice").unwrap();
        let (key, other) = (Uuid::now_v7(), Uuid::now_v7());
        let wait = Duration::from_secs(1);
        let held = polls.open(&alice, Some(key), wait).unwrap();
        let by_other = polls.open(&alice, Some(other), wait).unwrap();
        assert!(held.ended().now_or_never().is_none(), "a long-poll lasts until something ends it");
        polls.end_key(key);
        assert!(held.ended().now_or_never().is_some(), "its key changed");
        assert!(by_other.ended().now_or_never().is_none(), "another key's long-poll lasts");
        let after = polls.open(&alice, Some(key), wait).unwrap();
        assert!(after.ended().now_or_never().is_none(), "a long-poll opened after the change lasts");
        polls.stop();
        assert!(by_other.ended().now_or_never().is_some() && after.ended().now_or_never().is_some());
        let late = polls.open(&alice, None, wait).unwrap();
        assert!(late.ended().now_or_never().is_some(), "one opened while stopping ends at once");
    }

    #[test]
    fn a_key_is_remembered_only_while_it_holds_long_polls_open() {
        use futures_util::FutureExt;
        let polls = LongPolls::new(10);
        let alice = OwnerId::parse("alice").unwrap();
        let wait = Duration::from_secs(1);
        for _ in 0..1_000 {
            polls.end_key(Uuid::now_v7());
        }
        assert!(polls.ends.borrow().key_changes.is_empty(), "a key holding nothing is not recorded");
        let key = Uuid::now_v7();
        let (first, second) =
            (polls.open(&alice, Some(key), wait).unwrap(), polls.open(&alice, Some(key), wait).unwrap());
        polls.end_key(key);
        assert_eq!(polls.ends.borrow().changes_of(Some(key)), 1);
        drop(first);
        assert_eq!(polls.ends.borrow().changes_of(Some(key)), 1, "kept while a long-poll of the key is open");
        drop(second);
        assert!(polls.ends.borrow().key_changes.is_empty() && lock(&polls.open).keys.is_empty());
        let again = polls.open(&alice, Some(key), wait).unwrap();
        assert!(again.ended().now_or_never().is_none(), "a long-poll opened after its key's last one lasts");
        polls.end_key(key);
        assert!(again.ended().now_or_never().is_some());
    }
}
