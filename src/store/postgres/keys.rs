//! API keys across processes: a trigger NOTIFYs every change, each serving
//! process LISTENs and forgets changed keys from its cache, and a
//! revocation waits until every listener confirmed it forgot the key.

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgListener};
use sqlx::query::Query;
use sqlx::{Executor, Postgres};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::super::{KeyChange, NewKey, Result};
use super::bounded::answered;
use super::sql::INSERT_API_KEY;
use crate::domain::OwnerId;

/// The channel the `api_keys_changed` trigger notifies with a key's id.
const KEY_CHANNEL: &str = "onejob_api_keys";
/// The channel on which servers confirm they forgot a changed key.
const KEY_ACK_CHANNEL: &str = "onejob_api_keys_forgotten";
/// How long a revocation waits for those confirmations.
const KEY_ACK_TIMEOUT: Duration = Duration::from_secs(2);

/// The connections that LISTEN in this database with the statement given.
pub(super) const COUNT_LISTENERS: &str =
    r#"select count(*) from pg_stat_activity where datname = current_database() and query = $1"#;

/// A live key, revoked. Binds: id.
pub(super) const REVOKE_API_KEY: &str = r#"update api_keys set revoked_at = now() where id = $1 and revoked_at is null and ($2::text is null or owner_id = $2)"#;

/// A notification. Binds: channel, payload.
pub(super) const NOTIFY: &str = r#"select pg_notify($1, $2)"#;

/// The statement that stores `key`.
pub(super) fn insert_api_key<'a>(key: &NewKey<'a>) -> Query<'a, Postgres, PgArguments> {
    sqlx::query(INSERT_API_KEY).bind(key.owner.as_str()).bind(key.id).bind(key.role).bind(&key.token_hash[..])
}

/// How long the listening connection may stay quiet before it is asked for
/// an answer: a network that lost it gives no error, and a notification it
/// lost would leave a revoked key cached.
const LISTENER_CHECKED_EVERY: Duration = Duration::from_secs(5);

/// LISTENs on [`KEY_CHANNEL`] over a connection of its own and reports what
/// it hears, reconnecting (and saying so) whenever the connection is lost,
/// does not answer a check within the pool's patience after
/// [`LISTENER_CHECKED_EVERY`] of quiet, or the store's connections were
/// evicted (the server may have become a standby, `connect`), until
/// `changes` is closed.
pub(super) async fn follow_key_changes(pool: super::bounded::Pool, changes: mpsc::Sender<KeyChange>) {
    const FIRST_RETRY: Duration = Duration::from_millis(100);
    let mut retry = FIRST_RETRY;
    loop {
        // Subscribed before connecting: an eviction while connecting is seen.
        let mut evictions = super::super::eviction::evictions();
        let listening = async {
            let mut listener = PgListener::connect_with(pool.sqlx()).await?;
            // A lost connection is reported, not mended behind our back: the
            // cache must hear that notifications may have been missed.
            listener.eager_reconnect(false);
            listener.listen(KEY_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        }
        .await;
        match listening {
            Ok(mut listener) => {
                retry = FIRST_RETRY;
                if changes.send(KeyChange::Following).await.is_err() {
                    return;
                }
                loop {
                    let next = tokio::select! {
                        () = changes.closed() => return,
                        next = listener.try_recv() => next,
                        () = tokio::time::sleep(LISTENER_CHECKED_EVERY) => {
                            match answered(pool.patience(), listener.execute("select 1")).await {
                                Ok(_) => continue,
                                Err(error) => {
                                    tracing::warn!(%error, "the connection that listens for key changes does not answer; reconnecting");
                                    break;
                                }
                            }
                        }
                        _ = evictions.changed() => {
                            tracing::info!("the connection that listens for key changes was evicted; reconnecting");
                            break;
                        }
                    };
                    let change = match next {
                        Ok(Some(notification)) => match Uuid::try_parse(notification.payload()) {
                            Ok(id) => KeyChange::Changed(id),
                            Err(_) => {
                                tracing::warn!(
                                    payload = notification.payload(),
                                    "ignored a key notification that names no key"
                                );
                                continue;
                            }
                        },
                        Ok(None) => {
                            tracing::warn!("lost the connection that listens for key changes; reconnecting");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(%error, "the connection that listens for key changes failed; reconnecting");
                            break;
                        }
                    };
                    if changes.send(change).await.is_err() {
                        return;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for key changes; checked keys are not cached until then")
            }
        }
        if changes.send(KeyChange::Lost).await.is_err() {
            return;
        }
        tokio::select! {
            () = changes.closed() => return,
            () = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

/// Revokes key `id` and waits until every listening server confirmed it
/// forgot the key (or [`KEY_ACK_TIMEOUT`] passed); `false` when there is no
/// such live key.
pub(super) async fn revoke_api_key(pool: &super::bounded::Pool, id: Uuid, owner: Option<&OwnerId>) -> Result<bool> {
    // Every serving process caches checked keys and LISTENs for changes;
    // each forgets the key when the trigger's notification reaches it and
    // confirms on KEY_ACK_CHANNEL. Waiting for those confirmations makes
    // "revoked" mean that no listening server accepts the key any more.
    let mut confirmations = PgListener::connect_with(pool.sqlx()).await?;
    confirmations.listen(KEY_ACK_CHANNEL).await?;
    let listening: i64 =
        sqlx::query_scalar(COUNT_LISTENERS).bind(format!(r#"LISTEN "{KEY_CHANNEL}""#)).fetch_one(pool).await?;
    let changed =
        sqlx::query(REVOKE_API_KEY).bind(id).bind(owner.map(OwnerId::as_str)).execute(pool).await?.rows_affected();
    if changed == 0 {
        return Ok(false);
    }
    let key = id.to_string();
    let deadline = tokio::time::Instant::now() + KEY_ACK_TIMEOUT;
    let mut confirmed = 0;
    while confirmed < listening {
        match tokio::time::timeout_at(deadline, confirmations.try_recv()).await {
            Ok(Ok(Some(notification))) if notification.payload() == key => confirmed += 1,
            Ok(Ok(Some(_))) => {}
            _ => break,
        }
    }
    if confirmed < listening {
        tracing::warn!(key = %id, listening, confirmed,
            "not every listening server confirmed in time that it forgot the revoked key");
    }
    Ok(true)
}

/// Tells a revoker that this process forgot key `id`.
pub(super) async fn confirm_key_forgotten(pool: &super::bounded::Pool, id: Uuid) -> Result<()> {
    sqlx::query(NOTIFY).bind(KEY_ACK_CHANNEL).bind(id.to_string()).execute(pool).await?;
    Ok(())
}
