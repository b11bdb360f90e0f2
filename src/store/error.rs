//! The store's errors: what the database said, sorted into "try again
//! later" and everything else. The store reports a database it cannot use
//! to whoever listens ([`report_database_failures_to`]); it counts nothing
//! itself.

use std::sync::OnceLock;

/// A failure of the database itself, as the store reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseFailure {
    /// The database's storage is full.
    StorageFull,
    /// The database cannot be used at all: it went away, refused a
    /// connection, or none could be had in time (not a statement that lost
    /// a race for a lock or ran out of time).
    Unreachable,
    /// A new connection was refused by onejob's first check: the server is a
    /// standby or read-only, or its session settings failed.
    ConnectionRefused,
}

static LISTENER: OnceLock<fn(DatabaseFailure)> = OnceLock::new();

/// Has every [`DatabaseFailure`] of this process reported to `listener`
/// (the first call sets it; later ones change nothing).
pub fn report_database_failures_to(listener: fn(DatabaseFailure)) {
    let _ = LISTENER.set(listener);
}

pub(crate) fn report(failure: DatabaseFailure) {
    if let Some(listener) = LISTENER.get() {
        listener(failure);
    }
}

/// What a store call can fail with. Outcomes of the business (a lost race,
/// a refused admission) are never errors: they are in the return types.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or has no connection to spare; the
    /// request may be retried later.
    #[error("the database is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The database's storage is full (SQLite's `SQLITE_FULL`, Postgres's
    /// `disk_full`): writes fail until space returns; a retry later may pass.
    #[error("the database's storage is full: {0}")]
    StorageFull(#[source] sqlx::Error),
    /// A request queued for a shared write (a group commit, a batch of
    /// settlements) got no answer: the task writing it ended first, and
    /// nothing of it is acknowledged. The request may be retried.
    #[error("{0}")]
    Interrupted(&'static str),
    /// Anything else the database said.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The migrations could not be applied.
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// The database is reached in a way the store cannot work with (a
    /// pooler that moves a connection between server sessions).
    #[error("the database connection cannot be used: {0}")]
    Unsupported(String),
    /// A stored value that the program cannot read back.
    #[error("unreadable stored value: {0}")]
    Corrupt(String),
    /// The database lacks migrations this program embeds (or all of them).
    #[error("the database has migrations up to {applied} of the program's {latest}")]
    NotMigrated {
        /// The latest migration applied (0: none, or no migrations table).
        applied: i64,
        /// The latest migration the program embeds.
        latest: i64,
    },
}

impl StoreError {
    /// Whether a retry later may pass: the database could not be reached
    /// or had no connection to spare, its storage is full, or a shared
    /// write was interrupted.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::StorageFull(_) | StoreError::Interrupted(_))
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A stored value the program cannot read back.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Whether the database has every migration this program embeds, given
/// what reading the latest applied one answered (a database never migrated
/// has no table to read it from).
pub(crate) fn check_migrations(applied: std::result::Result<Option<i64>, sqlx::Error>, latest: i64) -> Result<()> {
    let applied = match applied {
        Ok(applied) => applied.unwrap_or(0),
        // Postgres: undefined_table; SQLite says so in its message.
        Err(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("42P01") || db.message().starts_with("no such table") =>
        {
            0
        }
        Err(error) => return Err(error.into()),
    };
    if applied < latest {
        return Err(StoreError::NotMigrated { applied, latest });
    }
    Ok(())
}

/// A migration's error, sorted as [`classify`] sorts a statement's: one
/// that says the database is unavailable (a standby, a lost connection) is
/// that, and may pass later.
pub(crate) fn migration_error(error: sqlx::migrate::MigrateError) -> StoreError {
    use sqlx::migrate::MigrateError;
    match error {
        MigrateError::Execute(inner) => match classify(inner) {
            StoreError::Database(inner) => StoreError::Migration(MigrateError::Execute(inner)),
            other => other,
        },
        MigrateError::ExecuteMigration(inner, version) => match classify(inner) {
            StoreError::Database(inner) => StoreError::Migration(MigrateError::ExecuteMigration(inner, version)),
            other => other,
        },
        other => StoreError::Migration(other),
    }
}

/// Whether `error` says the server is read-only or going away, or that the
/// connection to it was lost: every connection opened until now may be to
/// a server that no longer takes writes (Postgres only; see
/// `postgres::connect`).
fn server_went_away(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || matches!(&*code, "25006" | "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Sorts a sqlx error into "try again later" and everything else.
fn classify(error: sqlx::Error) -> StoreError {
    // SQLite: SQLITE_FULL; Postgres: disk_full.
    if let sqlx::Error::Database(db) = &error
        && matches!(db.code().as_deref(), Some("13" | "53100"))
    {
        report(DatabaseFailure::StorageFull);
        return StoreError::StorageFull(error);
    }
    let unavailable = match &error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Tls(_) => true,
        // Connection exceptions, too many connections, shutdowns, statement
        // or lock timeouts, and serialization failures: a retry may pass.
        // Postgres: by SQLSTATE. SQLite: busy, locked (plain and extended
        // codes), and a file that cannot be opened.
        // A read-only transaction (25006): the server is a standby.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("57P")
                || matches!(&*code, "53300" | "40001" | "40P01" | "57014" | "55P03" | "25006")
                || matches!(&*code, "5" | "6" | "14" | "261" | "262" | "517")
        }),
        _ => false,
    };
    if !unavailable {
        return StoreError::Database(error);
    }
    let went_away = server_went_away(&error);
    if went_away {
        super::eviction::evict(&error);
    }
    // Counted when the database cannot be used at all, not when one
    // statement lost a race for a lock or ran out of time.
    let unreachable = went_away
        || matches!(&error, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_))
        || matches!(&error, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("53300" | "14")));
    if unreachable {
        report(DatabaseFailure::Unreachable);
    }
    StoreError::Unavailable(error)
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        classify(error)
    }
}
