//! Refusing a connection pooler that does not keep a client on one server
//! session (PgBouncer's `pool_mode = transaction` or `statement`). The
//! store relies on its sessions: sqlx's prepared statements live in one,
//! key changes are heard by a session that LISTENs, and the statement
//! timeout is a session setting. Behind such a pooler those would fail now
//! and then, far from the cause; refused at start, the error names it.
//!
//! The check opens two connections and, twice, has each hold a transaction
//! at the same moment (so each is on a server session of its own), ends
//! both (in one order, then in the other), and begins again. A pooler in
//! session mode, or no pooler, keeps each connection on its session; one in
//! transaction mode hands each new transaction the session the pool gives
//! first, and ending the two in both orders makes at least one connection
//! land on the other's session, whichever order (LIFO or FIFO) its pool
//! keeps. Only the simple query protocol is used (statements without
//! binds), so that the check itself needs nothing that lives in a session.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Executor, Row};

use super::super::{Result, StoreError};

/// How long one step may wait for a server session.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Fails with [`StoreError::Unsupported`] when the connections `connect`
/// makes do not stay on their server sessions.
pub(super) async fn check_session_pooling(connect: &PgConnectOptions) -> Result<()> {
    let mut first = step(connect.connect()).await?;
    let mut second = step(connect.connect()).await?;
    for first_ends_first in [true, false] {
        let before = (begin(&mut first).await?, begin(&mut second).await?);
        if first_ends_first {
            commit(&mut first).await?;
            commit(&mut second).await?;
        } else {
            commit(&mut second).await?;
            commit(&mut first).await?;
        }
        let after = (begin(&mut first).await?, begin(&mut second).await?);
        commit(&mut first).await?;
        commit(&mut second).await?;
        if before != after {
            return Err(StoreError::Unsupported(
                "a connection's transactions ran on different server sessions: the database is reached through a \
                 pooler in transaction (or statement) mode, which onejob does not support; use PgBouncer's \
                 `pool_mode = session` (docs/operations.md, \"Behind PgBouncer\")"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Begins a transaction and returns its server session's process id.
async fn begin(connection: &mut PgConnection) -> Result<i32> {
    let row = step(connection.fetch_one("begin; select pg_backend_pid()")).await?;
    row.try_get(0).map_err(StoreError::Database)
}

async fn commit(connection: &mut PgConnection) -> Result<()> {
    step(connection.execute("commit")).await.map(drop)
}

async fn step<T>(future: impl Future<Output = std::result::Result<T, sqlx::Error>>) -> Result<T> {
    match tokio::time::timeout(STEP_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        // PgBouncer in statement mode refuses transactions outright.
        Ok(Err(sqlx::Error::Database(error))) if error.message().contains("pooling mode") => {
            Err(StoreError::Unsupported(format!(
                "{}: onejob needs PgBouncer's `pool_mode = session` (docs/operations.md)",
                error.message()
            )))
        }
        // Sorted as any statement's error: a server that went away is
        // unavailable (retried at start), a refusal such as a wrong
        // password or a missing database is not.
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(StoreError::Unsupported(format!(
            "two connections could not each hold a server session within {} s: the pooler's pool is too small, \
             or it is in transaction mode, which onejob does not support (use `pool_mode = session`)",
            STEP_TIMEOUT.as_secs()
        ))),
    }
}
