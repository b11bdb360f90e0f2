//! Requests with unknown keys, counted per client address, so that an
//! address guessing keys is refused before each guess costs a look-up.

use crate::sync::LockAnyway;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MINUTE: Duration = Duration::from_secs(60);

/// Requests with an unknown or revoked key, counted per client address in
/// this process over the current minute: past the limit, a request that
/// would look a key up is refused before the look-up (a key this process
/// checked lately still passes).
pub struct AuthFailures {
    per_minute: u32,
    counts: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

/// How many addresses are remembered at most: past it, the stale ones are
/// dropped, and while none is stale a new address is not counted.
const REMEMBERED_ADDRESSES: usize = 10_000;

impl AuthFailures {
    /// At most `per_minute` failures per address (0: no limit).
    pub fn new(per_minute: u32) -> Self {
        Self { per_minute, counts: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (u32, Instant)>> {
        self.counts.lock_anyway()
    }

    /// How many addresses are remembered now.
    pub fn remembered(&self) -> usize {
        self.lock().len()
    }

    /// How long `address` must wait before a look-up, when it is over its limit.
    pub fn wait(&self, address: IpAddr) -> Option<Duration> {
        let counts = self.lock();
        let (failed, since) = counts.get(&address)?;
        let left = MINUTE.checked_sub(since.elapsed())?;
        (self.per_minute > 0 && *failed >= self.per_minute).then_some(left)
    }

    /// Counts a failure of `address`.
    pub fn record(&self, address: IpAddr) {
        let mut counts = self.lock();
        if counts.len() >= REMEMBERED_ADDRESSES && !counts.contains_key(&address) {
            counts.retain(|_, (_, since)| since.elapsed() < MINUTE);
            if counts.len() >= REMEMBERED_ADDRESSES {
                // More addresses failed within a minute than are remembered:
                // this one goes uncounted rather than grow the map.
                return;
            }
        }
        let entry = counts.entry(address).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= MINUTE {
            *entry = (0, Instant::now());
        }
        entry.0 = entry.0.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn past_its_bound_within_a_minute_a_new_address_goes_uncounted() {
        let failures = AuthFailures::new(1);
        let address = |n: usize| IpAddr::from(Ipv4Addr::from(u32::try_from(n).unwrap()));
        for n in 0..REMEMBERED_ADDRESSES + 5 {
            failures.record(address(n));
        }
        assert_eq!(failures.remembered(), REMEMBERED_ADDRESSES);
        assert!(failures.wait(address(0)).is_some(), "an address remembered is still held to its limit");
        assert!(failures.wait(address(REMEMBERED_ADDRESSES)).is_none(), "one past the bound is not remembered");
        failures.record(address(0));
        assert_eq!(failures.remembered(), REMEMBERED_ADDRESSES, "a remembered address is counted again");
    }
}
