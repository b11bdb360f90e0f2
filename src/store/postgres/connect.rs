//! Reaching a writable server, and leaving one that no longer is.
//!
//! Every request writes, so a connection is only worth keeping to a server
//! that accepts writes. Each new connection (the pool's, the hot path's, the
//! session that LISTENs) runs its session settings and asks, in the same
//! round trip, whether the server is in recovery or read-only: a standby is
//! refused as unavailable (503, retryable) instead of being used until a
//! write fails.
//!
//! A server that stops being writable under connections already open (a
//! failover behind a proxy or a DNS name, an old primary back as a standby,
//! a backend terminated) shows itself by an error: read-only (25006),
//! shutting down or starting (57P01–57P03), a connection exception (08) or a
//! lost connection. The store's error sorting then calls `eviction::evict`:
//! every connection opened before that moment is stale; the pool and the hot
//! set drop stale connections when next asked for one, and the LISTEN
//! session reconnects. Opening connections again costs a round trip or two
//! each; keeping one to a standby would cost every request made on it.
//!
//! A URL may name several hosts (`postgres://h1:5432,h2:5432/db`, with
//! `target_session_attrs=read-write` or without), as libpq's do: every
//! connection set then goes to the host last found writable, and a watcher
//! checks that host every second over a connection of its own and, when it
//! is not writable, tries the others in the URL's order, starting after it
//! (and coming round), and moves every set to the first writable one.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{ConnectOptions, Row};
use tokio::sync::Notify;

use super::super::eviction::evict;
use super::super::{Result, StoreError};
use crate::sync::LockAnyway;

/// Whether the server refuses writes: a standby, or read-only by setting.
pub(super) const READ_ONLY: &str = "select pg_is_in_recovery() or current_setting('transaction_read_only') = 'on'";

/// Whether commits wait for a synchronous standby, as the settings say
/// (`synchronous_commit` waits for one only when `synchronous_standby_names`
/// names one), and how many standbys stream from this server.
pub(super) const REPLICATION: &str = "select current_setting('synchronous_commit'), \
     current_setting('synchronous_standby_names'), (select count(*) from pg_stat_replication)";

/// How long the watcher of several hosts waits for one to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The shortest time between two log lines about refused connections.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// Refused connections not yet logged, and when the last line was written:
/// a pool tries a standby many times a second, and one line per try would
/// bury the log.
struct Refusals {
    unlogged: u64,
    logged_at: Option<std::time::Instant>,
}

static REFUSALS: Mutex<Refusals> = Mutex::new(Refusals { unlogged: 0, logged_at: None });

/// The error a connection to a server that does not accept writes ends
/// with: an I/O error to sqlx (its pool then backs off and tries again, and
/// the store answers unavailable).
fn not_writable() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other("the server is a standby or read-only: onejob needs one that accepts writes"))
}

/// Runs `session` (the session's settings; may be empty) on a new
/// connection and checks, in the same round trip, that the server accepts
/// writes. A server that does not is reported, and the connection refused.
async fn prepare(connection: &mut PgConnection, session: &str) -> std::result::Result<(), sqlx::Error> {
    if !takes_writes(connection, session).await? {
        let error = not_writable();
        evict(&error);
        return Err(error);
    }
    Ok(())
}

/// Runs `session` and answers whether the server takes writes, in one
/// round trip.
async fn takes_writes(connection: &mut PgConnection, session: &str) -> std::result::Result<bool, sqlx::Error> {
    let statements = if session.is_empty() { READ_ONLY.to_owned() } else { format!("{session}; {READ_ONLY}") };
    // Without binds, a statement goes as a simple query: every part in one
    // round trip; the rows are the last statement's.
    let rows = sqlx::Executor::fetch_all(&mut *connection, statements.as_str()).await?;
    let read_only: bool = rows.last().map(|row| row.try_get(0)).transpose()?.unwrap_or(false);
    Ok(!read_only)
}

/// What a Postgres server says of its replication.
pub(super) async fn replication(pool: &super::bounded::Pool) -> Result<crate::store::Replication> {
    let (synchronous_commit, standby_names, standbys): (String, String, i64) =
        sqlx::query_as(REPLICATION).fetch_one(pool).await?;
    let commit_waits_for_standby = matches!(synchronous_commit.as_str(), "on" | "remote_write" | "remote_apply")
        && !standby_names.trim().is_empty();
    Ok(crate::store::Replication { commit_waits_for_standby, synchronous_commit, standby_names, standbys })
}

/// The hosts a URL names and the one connections go to now.
pub(super) struct Hosts {
    each: Vec<PgConnectOptions>,
    current: AtomicUsize,
    // The options of the current host, as every new connection takes them.
    // Woken when a new connection found its server not writable.
    recheck: Notify,
}

// By hand: the options hold the password.
impl std::fmt::Debug for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<String> = self.each.iter().map(|o| format!("{}:{}", o.get_host(), o.get_port())).collect();
        f.debug_struct("Hosts").field("hosts", &hosts).field("current", &self.current).finish()
    }
}

impl Hosts {
    /// The hosts of `url`, each with `adjust` applied to its options.
    pub(super) fn parse(url: &str, adjust: impl Fn(PgConnectOptions) -> PgConnectOptions) -> Result<Self> {
        let each = split_hosts(url)?
            .iter()
            .map(|url| PgConnectOptions::from_str(url).map(&adjust).map_err(StoreError::Database))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::new(each))
    }

    /// One host.
    pub(super) fn one(options: PgConnectOptions) -> Self {
        Self::new(vec![options])
    }

    fn new(each: Vec<PgConnectOptions>) -> Self {
        Self { each, current: AtomicUsize::new(0), recheck: Notify::new() }
    }

    /// Whether the URL named more than one host.
    pub(super) fn several(&self) -> bool {
        self.each.len() > 1
    }

    /// The options new connections take now.
    pub(super) fn options(&self) -> PgConnectOptions {
        self.each[self.current.load(Ordering::Relaxed)].clone()
    }

    /// Opens a connection to the current host, ready for use.
    pub(super) async fn open(&self, session: &str) -> std::result::Result<PgConnection, sqlx::Error> {
        let mut connection = self.options().connect().await?;
        self.prepare(&mut connection, session).await?;
        Ok(connection)
    }

    /// Readies a new connection to the current host (settings, and the check
    /// that it takes writes); one refused asks the watcher to check that host
    /// now.
    pub(super) async fn prepare(
        &self,
        connection: &mut PgConnection,
        session: &str,
    ) -> std::result::Result<(), sqlx::Error> {
        let prepared = prepare(connection, session).await;
        match &prepared {
            Ok(()) => log_refusals(None),
            Err(error) => {
                self.recheck.notify_one();
                log_refusals(Some(error));
            }
        }
        prepared
    }
}

/// Counts a refused connection (`Some`) and logs, at most once per
/// [`REFUSALS_LOGGED_EVERY`], how many were refused since the last line; an
/// accepted one (`None`) logs those still unlogged.
fn log_refusals(refused: Option<&sqlx::Error>) {
    if refused.is_some() {
        crate::store::error::report(crate::store::DatabaseFailure::ConnectionRefused);
    }
    let mut refusals = REFUSALS.lock_anyway();
    let due = refusals.logged_at.is_none_or(|at| at.elapsed() >= REFUSALS_LOGGED_EVERY);
    match refused {
        Some(error) => {
            refusals.unlogged += 1;
            if due {
                let refused = std::mem::take(&mut refusals.unlogged);
                refusals.logged_at = Some(std::time::Instant::now());
                drop(refusals);
                tracing::warn!(%error, refused, "new database connections refused since the last such line");
            }
        }
        None if refusals.unlogged > 0 => {
            let refused = std::mem::take(&mut refusals.unlogged);
            refusals.logged_at = None;
            drop(refusals);
            tracing::info!(refused, "a new database connection was accepted, after more were refused");
        }
        None => {}
    }
}

/// Splits a URL naming several hosts (`scheme://[user@]h1[:p1],h2[:p2]/…`)
/// into one URL per host, in their order, without `target_session_attrs`
/// (onejob always keeps to a writable server, whatever it says). A URL
/// naming one host comes back as it is, less that parameter.
fn split_hosts(url: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| StoreError::Database(sqlx::Error::Configuration(format!("database URL: {why}").into()));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let tail = without_session_attrs(tail).map_err(|why| invalid(&why))?;
    // No host at all: a Unix socket named by `?host=`, or the default.
    if hosts.is_empty() {
        return Ok(vec![format!("{scheme}://{user}{tail}")]);
    }
    if hosts.split(',').any(str::is_empty) {
        return Err(invalid("an empty host in the host list"));
    }
    Ok(hosts.split(',').map(|host| format!("{scheme}://{user}{host}{tail}")).collect())
}

/// The path and query of a URL without its `target_session_attrs`; a value
/// onejob cannot honour (it needs a writable server) is refused.
fn without_session_attrs(tail: &str) -> std::result::Result<String, String> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok(tail.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                if !matches!(value, "read-write" | "primary" | "any") {
                    return Err(format!(
                        "target_session_attrs={value}: onejob writes, so it keeps to a writable server \
                         (read-write, primary or any are accepted and mean that)"
                    ));
                }
            }
            _ => kept.push(pair),
        }
    }
    Ok(if kept.is_empty() { path.to_owned() } else { format!("{path}?{}", kept.join("&")) })
}

/// Keeps every connection set on a writable host while `hosts` names
/// several: checks the current one every second (and when a new connection
/// found it not writable) and, when it is not, moves to the first host
/// that is, trying them in the URL's order from the current one on.
pub(super) async fn watch_hosts(hosts: Arc<Hosts>, pool: PgPool, session: String) {
    let mut probe: Option<PgConnection> = None;
    loop {
        let writable = match probe.as_mut() {
            Some(connection) => {
                let check = sqlx::query_scalar::<_, bool>(READ_ONLY).fetch_one(connection);
                matches!(tokio::time::timeout(PROBE_TIMEOUT, check).await, Ok(Ok(false)))
            }
            None => false,
        };
        if !writable {
            probe = None;
            let current = hosts.current.load(Ordering::Relaxed);
            for step in 0..hosts.each.len() {
                let index = (current + step) % hosts.each.len();
                let options = &hosts.each[index];
                // Looked at without evicting: a standby among the hosts is
                // expected, and says nothing of the connections open now.
                let opened = async {
                    let mut connection = options.connect().await?;
                    takes_writes(&mut connection, &session).await.map(|writable| writable.then_some(connection))
                };
                if let Ok(Ok(Some(connection))) = tokio::time::timeout(PROBE_TIMEOUT, opened).await {
                    if index != current {
                        tracing::warn!(
                            host = options.get_host(),
                            port = options.get_port(),
                            "the database's writable host changed; connections move to it"
                        );
                    }
                    hosts.current.store(index, Ordering::Relaxed);
                    if index != current {
                        pool.set_connect_options(options.clone());
                        evict(&"the writable host changed");
                    }
                    probe = Some(connection);
                    break;
                }
            }
            if probe.is_none() {
                tracing::warn!("none of the database's hosts accepts writes now; trying again in a second");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = hosts.recheck.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_naming_several_hosts_is_split_into_one_url_per_host_without_target_session_attrs() {
        let urls = split_hosts(
            "postgres://u:p%40ss@10.0.0.1:5432,db2:5433/onejob?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            urls,
            [
                "postgres://u:p%40ss@10.0.0.1:5432/onejob?sslmode=disable",
                "postgres://u:p%40ss@db2:5433/onejob?sslmode=disable"
            ]
        );
        assert_eq!(split_hosts("postgres://h/db?target_session_attrs=any").unwrap(), ["postgres://h/db"]);
        assert_eq!(split_hosts("postgres://h:1,h:2").unwrap(), ["postgres://h:1", "postgres://h:2"]);
        // A Unix socket: no host in the authority.
        assert_eq!(
            split_hosts("postgres:///onejob?host=/run/postgresql").unwrap(),
            ["postgres:///onejob?host=/run/postgresql"]
        );
        assert_eq!(split_hosts("postgres://u@/db?host=/tmp").unwrap(), ["postgres://u@/db?host=/tmp"]);
        assert!(split_hosts("postgres://h:1,,h:2/db").is_err());
        let refused = split_hosts("postgres://h1,h2/db?target_session_attrs=read-only").unwrap_err();
        assert!(refused.to_string().contains("target_session_attrs=read-only"), "{refused}");
    }
}
