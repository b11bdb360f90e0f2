//! Postgres connections for the one-statement requests of the hot path
//! (creating a job, reading one, recording an attempt's usage), kept by
//! onejob itself.
//!
//! sqlx's pool sends a round trip (a `Sync`, answered by the server) every
//! time a connection is given back, to learn whether it is still usable.
//! For a request that is one statement, that doubles the round trips and the
//! server's wake-ups, and keeps the connection busy twice as long. Here a
//! connection goes back to the idle list only when its exchange ended
//! cleanly (an answer, or an error the server sent, after which the
//! connection waits for the next statement as usual); a connection whose
//! exchange was cut off (an I/O error, a request abandoned mid-statement) is
//! closed, and the next request opens a new one. A connection opened before
//! an eviction (the server said it is read-only or going away: `connect`) is
//! closed too, idle or not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnection;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::super::eviction;
use super::connect::Hosts;
use super::{Result, StoreError};
use crate::sync::LockAnyway;

/// At most `max` connections, opened when first needed.
#[derive(Debug)]
pub(super) struct DirectConnections {
    hosts: Arc<Hosts>,
    // Run on each new connection: the session's settings.
    session: String,
    // Each with the moment it was opened.
    idle: Mutex<Vec<(Instant, PgConnection)>>,
    permits: Semaphore,
    acquire_timeout: Duration,
    // The longest a statement's answer is waited for (`bounded::answered`).
    patience: Duration,
}

/// A connection lent to one request. Dropped unless [`Lent::keep_after`]
/// marked it reusable, the connection is closed rather than reused.
pub(super) struct Lent<'a> {
    set: &'a DirectConnections,
    connection: Option<PgConnection>,
    opened: Instant,
    _permit: SemaphorePermit<'a>,
    reusable: bool,
}

impl DirectConnections {
    /// A set of at most `max` connections to the writable one of `hosts`,
    /// each given the `session` settings first; a request waits
    /// `acquire_timeout` at most for one, and `patience` at most for the
    /// answer to its statement.
    pub(super) fn new(
        hosts: Arc<Hosts>,
        session: String,
        max: u32,
        acquire_timeout: Duration,
        patience: Duration,
    ) -> Self {
        Self {
            hosts,
            session,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(max.max(1) as usize),
            acquire_timeout,
            patience,
        }
    }

    /// How long a statement's answer is waited for.
    pub(super) fn patience(&self) -> Duration {
        self.patience
    }

    /// How long a request waits for a connection before it is refused.
    pub(super) fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// An idle connection, or a new one. Both the wait for a free slot and
    /// the connection attempt count against the acquire timeout; past it,
    /// the database is unavailable (503, retryable).
    pub(super) async fn acquire(&self) -> Result<Lent<'_>> {
        let deadline = tokio::time::Instant::now() + self.acquire_timeout;
        let permit = tokio::time::timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| StoreError::from(sqlx::Error::PoolTimedOut))?
            .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolClosed))?;
        let idle = self.take_idle();
        let (opened, connection) = match idle {
            Some(idle) => idle,
            None => {
                let opened = Instant::now();
                let connection = tokio::time::timeout_at(deadline, self.hosts.open(&self.session))
                    .await
                    .map_err(|_| StoreError::from(sqlx::Error::PoolTimedOut))??;
                (opened, connection)
            }
        };
        Ok(Lent { set: self, connection: Some(connection), opened, _permit: permit, reusable: false })
    }

    /// The most recently used idle connection that is not stale; stale ones
    /// are closed on the way.
    fn take_idle(&self) -> Option<(Instant, PgConnection)> {
        let mut idle = self.idle.lock_anyway();
        while let Some((opened, connection)) = idle.pop() {
            if !eviction::is_stale(opened) {
                return Some((opened, connection));
            }
            drop(connection);
        }
        None
    }
}

impl Lent<'_> {
    /// The connection.
    pub(super) fn connection(&mut self) -> &mut PgConnection {
        self.connection.as_mut().expect("a lease holds its connection until dropped")
    }

    /// Marks the connection reusable if the exchange that gave `result`
    /// ended cleanly: an answer, or an error the server sent.
    pub(super) fn keep_after<T>(&mut self, result: &std::result::Result<T, sqlx::Error>) {
        self.reusable = matches!(result, Ok(_) | Err(sqlx::Error::Database(_) | sqlx::Error::RowNotFound));
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let (true, Some(connection)) = (self.reusable, self.connection.take())
            && !eviction::is_stale(self.opened)
        {
            self.set.idle.lock_anyway().push((self.opened, connection));
        }
    }
}
