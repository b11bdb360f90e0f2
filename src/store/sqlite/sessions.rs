//! Dashboard sessions and the first run on SQLite. Times are this
//! process's clock (one machine, one clock), as everywhere in this store.
//! The first run is one write transaction: SQLite's single writer orders
//! the processes that race for it.

use std::time::Duration;

use sqlx::sqlite::SqlitePool;
use uuid::Uuid;

use super::super::sessions::{NewSession, SessionRow, StoredSession};
use super::super::{NewKey, Result};
use super::{SqliteStore, micros, now};

/// A new session. Binds: owner, key id, token hash, now, expiry.
const INSERT_SESSION: &str = r#"insert into dashboard_sessions (owner_id, key_id, token_hash, created_at, last_seen_at, expires_at)
    values (?1, ?2, ?3, ?4, ?4, ?5)"#;

/// A session by its token's hash, with its key's token hash and the clock.
/// Binds: hash, now.
const FIND_SESSION: &str = r#"select s.owner_id, s.key_id, k.token_hash as key_token_hash,
        s.created_at, s.last_seen_at, s.expires_at, ?2 as now
    from dashboard_sessions s
    join api_keys k on k.owner_id = s.owner_id and k.id = s.key_id
    where s.token_hash = ?1"#;

/// Marks a session used. Binds: hash, now.
const TOUCH_SESSION: &str = r#"update dashboard_sessions set last_seen_at = ?2 where token_hash = ?1"#;

/// Ends a session. Binds: hash.
const DELETE_SESSION: &str = r#"delete from dashboard_sessions where token_hash = ?1"#;

/// Ends every session past its lifetime or idle time. Binds: now, the
/// last use that is too old.
const DELETE_EXPIRED_SESSIONS: &str = r#"delete from dashboard_sessions where expires_at <= ?1 or last_seen_at <= ?2"#;

/// Claims the first run: inserts `bootstrap`'s one row, naming the key
/// about to be made, or none when keys exist already; returns the name, or
/// no row when the database had its first run. (`where true` tells
/// SQLite's parser that `on conflict` belongs to the insert.) Binds: key
/// id, now.
const CLAIM_FIRST_RUN: &str = r#"insert into bootstrap (id, first_key_id, created_at)
    select 1, case when exists (select 1 from api_keys) then null else ?1 end, ?2 where true
    on conflict (id) do nothing
    returning first_key_id"#;

pub(super) async fn insert_dashboard_session(pool: &SqlitePool, session: &NewSession) -> Result<()> {
    let at = now();
    sqlx::query(INSERT_SESSION)
        .bind(session.owner.as_str())
        .bind(session.key_id)
        .bind(&session.token_hash[..])
        .bind(at)
        .bind(at.saturating_add(micros(session.lifetime)))
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn find_dashboard_session(pool: &SqlitePool, token_hash: &[u8; 32]) -> Result<Option<StoredSession>> {
    let row: Option<SessionRow> =
        sqlx::query_as(FIND_SESSION).bind(&token_hash[..]).bind(now()).fetch_optional(pool).await?;
    row.map(StoredSession::try_from).transpose()
}

pub(super) async fn touch_dashboard_session(pool: &SqlitePool, token_hash: &[u8; 32]) -> Result<()> {
    sqlx::query(TOUCH_SESSION).bind(&token_hash[..]).bind(now()).execute(pool).await?;
    Ok(())
}

pub(super) async fn delete_dashboard_session(pool: &SqlitePool, token_hash: &[u8; 32]) -> Result<bool> {
    Ok(sqlx::query(DELETE_SESSION).bind(&token_hash[..]).execute(pool).await?.rows_affected() > 0)
}

pub(super) async fn delete_expired_dashboard_sessions(pool: &SqlitePool, idle: Duration) -> Result<u64> {
    let at = now();
    let query = sqlx::query(DELETE_EXPIRED_SESSIONS).bind(at).bind(at.saturating_sub(micros(idle)));
    Ok(query.execute(pool).await?.rows_affected())
}

pub(super) async fn insert_first_run_key(store: &SqliteStore, key: &NewKey<'_>) -> Result<bool> {
    let mut write = store.write().await?;
    let at = write.at;
    let claimed: Option<Option<Uuid>> =
        sqlx::query_scalar(CLAIM_FIRST_RUN).bind(key.id).bind(at).fetch_optional(&mut *write.tx).await?;
    if claimed != Some(Some(key.id)) {
        // Keys existed (the row says so, and is kept), or another process
        // had the first run.
        write.tx.commit().await?;
        return Ok(false);
    }
    super::insert_api_key(key, at).execute(&mut *write.tx).await?;
    write.tx.commit().await?;
    Ok(true)
}
