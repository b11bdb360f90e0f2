//! The simulator's memory of requests: a map that keeps its newest keys
//! only, so that a simulator serving for weeks holds a bounded number of
//! requests (a real provider forgets old requests too).

use std::collections::{HashMap, VecDeque};

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
}
