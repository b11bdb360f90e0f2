//! The pool and the transactions every statement outside the hot path runs
//! on, each statement's answer waited for at most a deadline.
//!
//! A network that loses what a connection sent (a middlebox that drops it,
//! a server's machine gone without a reset) gives no error: the answer just
//! never comes. The server ends any statement by `statement_timeout`, so an
//! answer later than that and a margin was lost on the way
//! ([`answer_patience`]). Past it, the statement fails with an I/O
//! error: its request answers 503, a background task logs it and tries
//! again, and the connection is closed instead of reused (a connection given
//! back is checked by [`check_released`], within the same patience).
//! The hot path's connections (`direct`) wait the same.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt};
use sqlx::postgres::{PgConnection, PgPool, PgQueryResult, PgRow, PgStatement, PgTypeInfo, Postgres};
use sqlx::{Describe, Either, Execute, Executor};

/// How much longer than the server's statement timeout an answer may take
/// to cross the network before the connection is given up.
const NETWORK_MARGIN: Duration = Duration::from_secs(1);

/// The longest onejob waits for an answer on a connection: the server has
/// ended any statement by `statement_timeout`, so an answer later than that
/// and [`NETWORK_MARGIN`] was lost on the way.
pub(super) fn answer_patience(statement_timeout: Duration) -> Duration {
    statement_timeout + NETWORK_MARGIN
}

/// Waits at most `patience` for `exchange`, a round trip on one connection.
/// Past it, the answer is taken for lost: an I/O error, so that the
/// connection is closed rather than reused, and the request answers 503.
pub(super) async fn answered<T>(
    patience: Duration,
    exchange: impl std::future::Future<Output = sqlx::Result<T>>,
) -> sqlx::Result<T> {
    tokio::time::timeout(patience, exchange).await.unwrap_or_else(|_| Err(lost(patience)))
}

/// The error of an answer not come within `patience`.
fn lost(patience: Duration) -> sqlx::Error {
    let lost = format!("no answer from the database in {} ms", patience.as_millis());
    sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, lost))
}

/// Checks a connection given back to the pool: one round trip that waits
/// for whatever it was left doing (a statement abandoned by its request)
/// and answers, within `patience`. A connection that does not answer in
/// time is closed (the error tells the pool so) rather than kept: on a
/// network that lost what it sent, its answer never comes, and a check that
/// waited for it would hold the pool's place for good.
pub(super) async fn check_released(connection: &mut PgConnection, patience: Duration) -> sqlx::Result<bool> {
    answered(patience, sqlx::Connection::ping(connection)).await.map(|()| true)
}

/// The pool, each statement run on it answered within the pool's wait for
/// a connection and the patience.
#[derive(Clone, Debug)]
pub(super) struct Pool {
    pool: PgPool,
    // The wait for a statement's answer, once it has a connection.
    patience: Duration,
}

/// A transaction on a connection of [`Pool`], each statement of it (its
/// commit too) answered within the patience.
#[derive(Debug)]
pub(super) struct Transaction {
    tx: sqlx::Transaction<'static, Postgres>,
    patience: Duration,
}

impl Pool {
    /// `pool`, its statements' answers waited for `patience` after a
    /// connection, itself waited for as long as the pool allows.
    pub(super) fn new(pool: PgPool, patience: Duration) -> Self {
        Self { pool, patience }
    }

    /// The wait for a connection, then for the answer.
    fn most(&self) -> Duration {
        self.pool.options().get_acquire_timeout() + self.patience
    }

    /// The pool itself, for what is not a statement (migrations, a LISTEN
    /// session, closing).
    pub(super) fn sqlx(&self) -> &PgPool {
        &self.pool
    }

    /// How long a statement's answer is waited for, once it has a
    /// connection.
    pub(super) fn patience(&self) -> Duration {
        self.patience
    }

    /// Begins a transaction.
    pub(super) async fn begin(&self) -> sqlx::Result<Transaction> {
        let tx = answered(self.most(), self.pool.begin()).await?;
        Ok(Transaction { tx, patience: self.patience })
    }
}

impl Transaction {
    /// The transaction's connection.
    fn connection(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Commits.
    pub(super) async fn commit(self) -> sqlx::Result<()> {
        answered(self.patience, self.tx.commit()).await
    }
}

/// A stream of answers that fails with the lost answer's error once
/// `patience` has passed since it began.
fn within<'e, T: Send + 'e>(
    patience: Duration,
    answers: BoxStream<'e, sqlx::Result<T>>,
) -> BoxStream<'e, sqlx::Result<T>> {
    let deadline = tokio::time::Instant::now() + patience;
    futures_util::stream::unfold(Some(answers), move |answers| async move {
        let mut answers = answers?;
        let next = tokio::time::timeout_at(deadline, answers.next()).await;
        match next {
            Ok(Some(answer)) => Some((answer, Some(answers))),
            Ok(None) => None,
            Err(_) => Some((Err(lost(patience)), None)),
        }
    })
    .boxed()
}

impl<'p> Executor<'p> for &'p Pool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, sqlx::Result<Either<PgQueryResult, PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        within(self.most(), self.pool.fetch_many(query))
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(answered(self.most(), self.pool.fetch_optional(query)))
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, sqlx::Result<PgStatement<'q>>>
    where
        'p: 'e,
    {
        Box::pin(answered(self.most(), self.pool.prepare_with(sql, parameters)))
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, sqlx::Result<Describe<Postgres>>>
    where
        'p: 'e,
    {
        Box::pin(answered(self.most(), self.pool.describe(sql)))
    }
}

impl<'c> Executor<'c> for &'c mut Transaction {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, sqlx::Result<Either<PgQueryResult, PgRow>>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        within(self.patience, self.connection().fetch_many(query))
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, sqlx::Result<Option<PgRow>>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let patience = self.patience;
        Box::pin(answered(patience, self.connection().fetch_optional(query)))
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, sqlx::Result<PgStatement<'q>>>
    where
        'c: 'e,
    {
        let patience = self.patience;
        Box::pin(answered(patience, self.connection().prepare_with(sql, parameters)))
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, sqlx::Result<Describe<Postgres>>>
    where
        'c: 'e,
    {
        let patience = self.patience;
        Box::pin(answered(patience, self.connection().describe(sql)))
    }
}
