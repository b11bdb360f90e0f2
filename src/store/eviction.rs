//! Which database connections are stale: every one opened before the last
//! time the server said it went away or became read-only, or a connection
//! to it was lost (see `postgres::connect`). A leaf module, so that the
//! sorting of errors (`error.rs`) and the connection sets can both reach it.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The first moment connections were counted from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Connections opened before this moment (nanoseconds after [`EPOCH`]; 0:
/// none) are stale.
static STALE_BEFORE: AtomicU64 = AtomicU64::new(0);

/// Bumped at each eviction, for the sessions that hold a connection of their
/// own (the LISTEN session) and reconnect when it changes.
static EVICTIONS: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::Sender::new(0));

/// Marks every connection opened until now stale: the server said it is
/// read-only or going away, or a connection to it was lost.
pub(crate) fn evict(why: &dyn std::fmt::Display) {
    // At least 1: a connection opened before the epoch was first read
    // counts as opened at 0, and is stale too.
    let now = nanos_since_epoch(Instant::now()).max(1);
    let before = STALE_BEFORE.fetch_max(now, Ordering::Relaxed);
    if before < now {
        // Said once a second at most: a standby refuses every connection.
        if now - before > 1_000_000_000 {
            tracing::info!(%why, "dropping the database connections opened until now");
        }
        EVICTIONS.send_modify(|count| *count += 1);
    }
}

/// Whether a connection opened `age` ago is stale.
pub(crate) fn is_stale_by_age(age: Duration) -> bool {
    is_stale(Instant::now().checked_sub(age).unwrap_or(*EPOCH))
}

/// Whether a connection opened at `opened` is stale.
pub(crate) fn is_stale(opened: Instant) -> bool {
    nanos_since_epoch(opened) < STALE_BEFORE.load(Ordering::Relaxed)
}

/// A receiver that changes at each eviction from now on.
pub(crate) fn evictions() -> watch::Receiver<u64> {
    EVICTIONS.subscribe()
}

fn nanos_since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_opened_before_an_eviction_is_stale_and_one_opened_after_is_not() {
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        evict(&"a test");
        std::thread::sleep(Duration::from_millis(2));
        assert!(is_stale(before));
        assert!(!is_stale(Instant::now()));
        assert!(is_stale_by_age(before.elapsed()));
    }
}
