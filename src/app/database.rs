//! The database as the application sees it: waiting at start for one that
//! takes writes, and what it promises of its commits.
//!
//! A server started while its database is unreachable or a standby (a
//! failover in progress, a URL that names a node directly) does not exit:
//! it answers `/healthz`, answers everything else 503 with `Retry-After`
//! (its log says why), and tries again until the database takes writes;
//! then it applies the migrations (unless started with `--no-migrate`,
//! which checks that they are applied) and serves. A Postgres server only: a
//! SQLite file that cannot be opened is a mistake to stop at, not a wait.
//!
//! Whether a commit waits for a synchronous standby decides what a failover
//! can lose: with asynchronous replication, a job acknowledged by the old
//! primary may be missing on the new one, and a retry with the same key
//! then makes a second job. It is read at start and every minute, shown by
//! the gauge `onejob_database_commit_waits_for_standby` and by `/readyz`,
//! and a warning says so when standbys stream asynchronously.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

use crate::http::error::Problem;
use crate::state::ReplicationSlot;
use crate::store::{Store, StoreError};
use crate::sync::LockAnyway;

/// How often the replication settings are read again.
const REPLICATION_INTERVAL: Duration = Duration::from_secs(60);

/// The longest wait between two tries of a database not ready at start.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Runs `prepare` (the start's checks and migrations) until it passes or
/// fails for a reason other than an unavailable database. Meanwhile, when
/// there is a `listener`, it serves `/healthz` and a 503 that says why for
/// everything else.
pub(super) async fn wait_until_prepared<F, Fut>(
    listener: Option<&mut TcpListener>,
    head_timeout: Duration,
    mut prepare: F,
) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StoreError>>,
{
    let first = match prepare().await {
        Err(error) if error.is_unavailable() => error,
        done => return done,
    };
    tracing::warn!(error = %first, "the database does not take writes yet; waiting for it (everything but /healthz answers 503 meanwhile)");
    let (ready, mut readied) = tokio::sync::watch::channel(false);
    let retrying = {
        async move {
            let mut retry = Duration::from_millis(200);
            loop {
                tokio::time::sleep(retry).await;
                match prepare().await {
                    Err(error) if error.is_unavailable() => {
                        tracing::warn!(%error, "still waiting for a database that takes writes");
                    }
                    done => {
                        let _ = ready.send(true);
                        return done;
                    }
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    };
    let Some(listener) = listener else {
        return retrying.await;
    };
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(address = %addr, "listening on http://{addr} while waiting for the database");
    }
    let router = waiting_router();
    let serving = crate::http::serve::serve_for_now(listener, router, head_timeout, async move {
        let _ = readied.wait_for(|ready| *ready).await;
    });
    let (done, ()) = tokio::join!(retrying, serving);
    if done.is_ok() {
        tracing::info!("the database takes writes; starting");
    }
    done
}

/// `/healthz` answers; everything else is 503.
fn waiting_router() -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(crate::http::healthz))
        .fallback(|| async { waiting_answer() })
}

/// The 503 of a waiting server. Why it waits is in its log, not in an
/// answer anyone may ask for: a database's error can name its hosts.
fn waiting_answer() -> Response {
    Problem::unavailable()
        .detail("the server is waiting for a database that takes writes (its log says why)")
        .into_response()
}

/// Reads the replication settings now and every minute after, into `slot`
/// and the gauge; warns when they change to commits that do not wait for
/// standbys that stream. Returns at once on a database without replication.
pub(super) async fn follow_replication(store: Store, slot: ReplicationSlot) {
    let mut interval = tokio::time::interval(REPLICATION_INTERVAL);
    let mut warned = false;
    loop {
        interval.tick().await;
        match store.replication().await {
            Ok(None) => return,
            Ok(Some(replication)) => {
                crate::process::metrics::commit_waits_for_standby(replication.commit_waits_for_standby);
                let asynchronous = !replication.commit_waits_for_standby && replication.standbys > 0;
                if asynchronous && !warned {
                    tracing::warn!(
                        synchronous_commit = %replication.synchronous_commit,
                        synchronous_standby_names = %replication.standby_names,
                        standbys = replication.standbys,
                        "commits do not wait for a standby: a failover may lose acknowledged jobs, and a client's \
                         retry with the same Idempotency-Key would then make a second job"
                    );
                }
                warned = asynchronous;
                *slot.lock_anyway() = Some(replication);
            }
            Err(error) => tracing::warn!(%error, "cannot read the database's replication settings"),
        }
    }
}
