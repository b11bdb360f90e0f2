//! Dashboard sessions and the first run on Postgres. Every time is the
//! database's `now()`, so servers whose clocks differ agree on when a
//! session ends.

use std::time::Duration;

use uuid::Uuid;

use super::super::sessions::{NewSession, SessionRow, StoredSession};
use super::super::{NewKey, Result};
use super::PostgresStore;

/// A new session. Binds: owner, key id, token hash, lifetime in seconds.
pub(super) const INSERT_SESSION: &str = r#"insert into dashboard_sessions (owner_id, key_id, token_hash, created_at, last_seen_at, expires_at)
    values ($1, $2, $3, now(), now(), now() + make_interval(secs => $4))"#;

/// A session by its token's hash, with its key's token hash and the clock.
/// Binds: hash.
pub(super) const FIND_SESSION: &str = r#"select s.owner_id, s.key_id, k.token_hash as key_token_hash,
        s.created_at, s.last_seen_at, s.expires_at, now() as now
    from dashboard_sessions s
    join api_keys k on k.owner_id = s.owner_id and k.id = s.key_id
    where s.token_hash = $1"#;

/// Marks a session used. Binds: hash.
pub(super) const TOUCH_SESSION: &str = r#"update dashboard_sessions set last_seen_at = now() where token_hash = $1"#;

/// Ends a session. Binds: hash.
pub(super) const DELETE_SESSION: &str = r#"delete from dashboard_sessions where token_hash = $1"#;

/// Ends every session past its lifetime or idle time. Binds: idle seconds.
pub(super) const DELETE_EXPIRED_SESSIONS: &str = r#"delete from dashboard_sessions
    where expires_at <= now() or last_seen_at <= now() - make_interval(secs => $1)"#;

/// Claims the first run: inserts `bootstrap`'s one row, naming the key
/// about to be made, or none when keys exist already; returns the name, or
/// no row when the database had its first run. A racing claim waits for
/// this one's transaction and then inserts nothing. Binds: key id.
pub(super) const CLAIM_FIRST_RUN: &str = r#"insert into bootstrap (id, first_key_id)
    select 1, case when exists (select 1 from api_keys) then null else $1::uuid end
    on conflict (id) do nothing
    returning first_key_id"#;

pub(super) async fn insert_dashboard_session(pool: &super::bounded::Pool, session: &NewSession) -> Result<()> {
    sqlx::query(INSERT_SESSION)
        .bind(session.owner.as_str())
        .bind(session.key_id)
        .bind(&session.token_hash[..])
        .bind(session.lifetime.as_secs_f64())
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn find_dashboard_session(
    pool: &super::bounded::Pool,
    token_hash: &[u8; 32],
) -> Result<Option<StoredSession>> {
    let row: Option<SessionRow> = sqlx::query_as(FIND_SESSION).bind(&token_hash[..]).fetch_optional(pool).await?;
    row.map(StoredSession::try_from).transpose()
}

pub(super) async fn touch_dashboard_session(pool: &super::bounded::Pool, token_hash: &[u8; 32]) -> Result<()> {
    sqlx::query(TOUCH_SESSION).bind(&token_hash[..]).execute(pool).await?;
    Ok(())
}

pub(super) async fn delete_dashboard_session(pool: &super::bounded::Pool, token_hash: &[u8; 32]) -> Result<bool> {
    Ok(sqlx::query(DELETE_SESSION).bind(&token_hash[..]).execute(pool).await?.rows_affected() > 0)
}

pub(super) async fn delete_expired_dashboard_sessions(pool: &super::bounded::Pool, idle: Duration) -> Result<u64> {
    Ok(sqlx::query(DELETE_EXPIRED_SESSIONS).bind(idle.as_secs_f64()).execute(pool).await?.rows_affected())
}

pub(super) async fn insert_first_run_key(store: &PostgresStore, key: &NewKey<'_>) -> Result<bool> {
    let mut tx = store.pool.begin().await?;
    let claimed: Option<Option<Uuid>> =
        sqlx::query_scalar(CLAIM_FIRST_RUN).bind(key.id).fetch_optional(&mut tx).await?;
    if claimed != Some(Some(key.id)) {
        // Keys existed (the row says so, and is kept), or another process
        // had the first run.
        tx.commit().await?;
        return Ok(false);
    }
    super::keys::insert_api_key(key).execute(&mut tx).await?;
    tx.commit().await?;
    Ok(true)
}
