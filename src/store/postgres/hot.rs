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
//! closed, and the next request opens a new one.

use std::sync::Mutex;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{Result, StoreError};

/// At most `max` connections, opened when first needed.
#[derive(Debug)]
pub struct HotConnections {
    connect: PgConnectOptions,
    // Run on each new connection: the session's settings.
    session: String,
    idle: Mutex<Vec<PgConnection>>,
    permits: Semaphore,
    acquire_timeout: Duration,
}

/// A connection lent to one request. Dropped without [`Lease::keep`], the
/// connection is closed rather than reused.
pub struct Lease<'a> {
    set: &'a HotConnections,
    connection: Option<PgConnection>,
    _permit: SemaphorePermit<'a>,
    reusable: bool,
}

impl HotConnections {
    /// A set of at most `max` connections made with `connect`, each given
    /// the `session` settings first; a request waits `acquire_timeout` at
    /// most for one.
    pub fn new(connect: PgConnectOptions, session: String, max: u32, acquire_timeout: Duration) -> Self {
        Self {
            connect,
            session,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(max.max(1) as usize),
            acquire_timeout,
        }
    }

    /// An idle connection, or a new one. Both the wait for a free slot and
    /// the connection attempt count against the acquire timeout; past it,
    /// the database is unavailable (503, retryable).
    pub async fn acquire(&self) -> Result<Lease<'_>> {
        let deadline = tokio::time::Instant::now() + self.acquire_timeout;
        let permit = tokio::time::timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))?
            .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolClosed))?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let connection = match idle {
            Some(connection) => connection,
            None => tokio::time::timeout_at(deadline, self.open())
                .await
                .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))??,
        };
        Ok(Lease { set: self, connection: Some(connection), _permit: permit, reusable: false })
    }

    async fn open(&self) -> std::result::Result<PgConnection, sqlx::Error> {
        let mut connection = self.connect.connect().await?;
        if !self.session.is_empty() {
            // A statement without binds goes as a simple query: both settings
            // in one round trip.
            sqlx::Executor::execute(&mut connection, self.session.as_str()).await?;
        }
        Ok(connection)
    }
}

impl Lease<'_> {
    /// The connection.
    pub fn connection(&mut self) -> &mut PgConnection {
        self.connection.as_mut().expect("a lease holds its connection until dropped")
    }

    /// Marks the connection reusable if the exchange that gave `result`
    /// ended cleanly: an answer, or an error the server sent.
    pub fn keep_after<T>(&mut self, result: &std::result::Result<T, sqlx::Error>) {
        self.reusable = matches!(result, Ok(_) | Err(sqlx::Error::Database(_) | sqlx::Error::RowNotFound));
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let (true, Some(connection)) = (self.reusable, self.connection.take()) {
            self.set.idle.lock().unwrap_or_else(|p| p.into_inner()).push(connection);
        }
    }
}
