//! Small synchronisation helpers used across the layers: a mutex locked
//! whatever a panicking holder left in it, and a task aborted when its
//! handle is dropped.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a `std::sync::Mutex` even when a holder panicked. Every such
/// mutex here guards plain data that each holder leaves whole between two
/// statements (a map, a queue, a counter), so the value is still good to
/// use; refusing it would turn one panic into one per later caller.
pub(crate) trait LockAnyway<T> {
    /// The guard, poisoned or not.
    fn lock_anyway(&self) -> MutexGuard<'_, T>;
}

impl<T> LockAnyway<T> for Mutex<T> {
    fn lock_anyway(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A spawned task that is aborted when this is dropped: a background loop
/// that lives as long as what holds it.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
