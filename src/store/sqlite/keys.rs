//! API keys across processes on SQLite, which cannot push a change: the
//! keys revoked by any process (`onejob keys revoke` included) are found
//! by reading the keys table every second, so that what a revoked key
//! holds open ends within seconds. Keys are still looked up on every
//! request: a poll could not make a revocation hold from the next one.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::sqlite::SqlitePool;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::super::KeyChange;
use super::now;

/// Revokes a live key, of one owner or (?3 null) of any. Binds: time, id,
/// owner.
pub(super) const REVOKE_API_KEY: &str =
    r#"update api_keys set revoked_at = ?1 where id = ?2 and revoked_at is null and (?3 is null or owner_id = ?3)"#;

/// The keys revoked at or after a time. Binds: the time.
const REVOKED_SINCE: &str = r#"select id, revoked_at from api_keys where revoked_at >= ?1"#;

/// How often the keys table is read.
const POLL: Duration = Duration::from_secs(1);

/// How far before the last read each read looks, in microseconds: a
/// revocation committed a little after the time it is stamped with (or by
/// a process whose clock is a little behind) is still found.
const MARGIN: i64 = 10_000_000;

/// Reports each key revoked from now on, once, until `changes` is closed;
/// first says that changes are not pushed (so that no key is cached).
pub(super) async fn follow_key_changes(pool: SqlitePool, changes: mpsc::Sender<KeyChange>) {
    if changes.send(KeyChange::Lost).await.is_err() {
        return;
    }
    let mut reported: HashMap<Uuid, i64> = HashMap::new();
    let mut since = now();
    let mut ticks = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = changes.closed() => return,
        }
        let from = since.saturating_sub(MARGIN);
        let read_at = now();
        let revoked: Vec<(Uuid, i64)> = match sqlx::query_as(REVOKED_SINCE).bind(from).fetch_all(&pool).await {
            Ok(revoked) => revoked,
            Err(error) => {
                tracing::warn!(%error, "reading revoked keys failed; trying again");
                continue;
            }
        };
        since = read_at;
        reported.retain(|_, at| *at >= from);
        for (id, at) in revoked {
            if reported.insert(id, at).is_none() && changes.send(KeyChange::Changed(id)).await.is_err() {
                return;
            }
        }
    }
}
