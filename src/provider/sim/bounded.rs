//! The simulator's memory of requests: a map that keeps its newest keys
//! only, so that a simulator serving for weeks holds a bounded number of
//! requests (a real provider forgets old requests too); and a compact set
//! of every request id seen, so that an id that comes again is counted
//! even after the map forgot it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};

/// How many requests a simulator remembers: their status lookups,
/// cancellations and reports. Past it, the oldest is forgotten first.
pub(super) const MOST_REQUESTS: usize = 20_000;

/// A map of at most `most` keys: adding one more forgets the one added
/// first.
pub(super) struct Bounded<V> {
    values: HashMap<String, V>,
    order: VecDeque<String>,
    most: usize,
}

impl<V> Bounded<V> {
    pub(super) fn new(most: usize) -> Self {
        Self { values: HashMap::new(), order: VecDeque::new(), most: most.max(1) }
    }

    pub(super) fn get(&self, key: &str) -> Option<&V> {
        self.values.get(key)
    }

    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.values.get_mut(key)
    }

    /// The value of `key`, made by `make` (and the oldest key forgotten,
    /// when full) if it has none.
    pub(super) fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.values.contains_key(key) {
            if self.order.len() >= self.most
                && let Some(oldest) = self.order.pop_front()
            {
                self.values.remove(&oldest);
            }
            self.order.push_back(key.to_owned());
        }
        self.values.entry(key.to_owned()).or_insert_with(make)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.values.iter()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.values.len()
    }
}

/// How many distinct request ids a simulator remembers having seen, so
/// that a second arrival of any of them is counted however long ago the
/// first was (its log, [`MOST_REQUESTS`], forgets them): a 64-bit hash
/// each, at most about 36 MiB. A run with more distinct ids than this
/// (hours at hundreds a second) is told so (`ids_unremembered`), and cannot
/// count repeats of the ids past it.
pub(super) const MOST_IDS_SEEN: usize = 3_500_000;

/// How many repeated ids [`Seen`] names (the latest).
const REPEATS_NAMED: usize = 100;

/// Every request id seen, as a hash, up to a cap: how many arrivals
/// repeated an id seen before, whichever it was.
pub(super) struct Seen {
    hashes: HashSet<u64>,
    most: usize,
    repeats: u64,
    unremembered: u64,
    /// The latest ids that came again, as many as [`REPEATS_NAMED`].
    repeated: VecDeque<String>,
}

impl Seen {
    pub(super) fn new(most: usize) -> Self {
        Self { hashes: HashSet::new(), most, repeats: 0, unremembered: 0, repeated: VecDeque::new() }
    }

    /// Notes an arrival of `id`: whether it was seen before. An id past the
    /// cap is not remembered, and counted as such.
    pub(super) fn arrived(&mut self, id: &str) -> bool {
        let mut hasher = std::hash::DefaultHasher::new();
        id.hash(&mut hasher);
        let hash = hasher.finish();
        if self.hashes.contains(&hash) {
            self.repeats += 1;
            if self.repeated.len() >= REPEATS_NAMED {
                self.repeated.pop_front();
            }
            self.repeated.push_back(id.to_owned());
            return true;
        }
        if self.hashes.len() < self.most {
            self.hashes.insert(hash);
        } else {
            self.unremembered += 1;
        }
        false
    }

    /// What it counted: `ids_seen` (remembered), `repeats` (arrivals of an
    /// id seen before), `repeated_ids` (the latest of those),
    /// `ids_unremembered` (arrivals past the cap, whose repeats it cannot
    /// see) and the cap, `most_ids_seen`.
    pub(super) fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "ids_seen": self.hashes.len(), "repeats": self.repeats, "repeated_ids": self.repeated,
            "ids_unremembered": self.unremembered, "most_ids_seen": self.most,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_map_forgets_its_oldest_keys_past_its_size_and_keeps_a_repeated_ones_first_value() {
        let mut map = Bounded::new(3);
        for n in 0..10 {
            *map.get_or_insert_with(&format!("k{n}"), || n) += 0;
        }
        assert_eq!(map.len(), 3);
        assert_eq!((map.get("k6"), map.get("k7"), map.get("k9")), (None, Some(&7), Some(&9)));
        assert_eq!(*map.get_or_insert_with("k8", || 100), 8, "a key it holds keeps its value");
        assert_eq!(map.len(), 3);
        *map.get_mut("k9").unwrap() = 90;
        map.get_or_insert_with("k10", || 10);
        assert_eq!((map.get("k7"), map.get("k9"), map.len()), (None, Some(&90), 3));
    }

    #[test]
    fn a_repeat_is_counted_after_the_bounded_map_forgot_the_id_and_ids_past_the_cap_are_counted_apart() {
        let (mut map, mut seen) = (Bounded::new(2), Seen::new(4));
        for n in 0..4 {
            let id = format!("a{n}");
            map.get_or_insert_with(&id, || 1);
            assert!(!seen.arrived(&id), "{id} is new");
        }
        assert_eq!(map.get("a0"), None, "the map forgot it");
        assert!(seen.arrived("a0"), "a0 came again");
        assert!(!seen.arrived("a4"), "past the cap: not remembered");
        assert!(!seen.arrived("a4"), "so its repeat is not seen");
        let report = seen.report();
        assert_eq!((report["ids_seen"].as_u64(), report["repeats"].as_u64()), (Some(4), Some(1)));
        assert_eq!((report["ids_unremembered"].as_u64(), report["repeated_ids"][0].as_str()), (Some(2), Some("a0")));
    }
}
