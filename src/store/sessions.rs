//! Dashboard sessions and the first run, as the store keeps them (the
//! statements are each backend's `sessions.rs`; what a session may do is
//! [`crate::ui::session`]'s).
//!
//! A session row holds the SHA-256 of the session's token, never the token,
//! and the API key it acts as; it lives in the database, so every server
//! sharing it honours the session, before and after a restart. The store
//! only keeps the times; whether a session is still live is decided above
//! it, from the times and the database's clock read in the same statement.
//!
//! The first run's admin key is made at most once per database: a one-row
//! `bootstrap` table, whose primary key the first `serve` inserts in the
//! same transaction as the key, decides among replicas starting together.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::Store;
use super::rows::Stamp;
use super::{Result, corrupt};
use crate::domain::KeyRole;
use crate::domain::OwnerId;

/// A session to store.
#[derive(Clone, Debug)]
pub struct NewSession {
    /// The SHA-256 of the session's token (the browser holds the token).
    pub token_hash: [u8; 32],
    /// The owner of the key it acts as.
    pub owner: OwnerId,
    /// The key it acts as.
    pub key_id: Uuid,
    /// How long after it is stored it ends, used or not.
    pub lifetime: Duration,
}

/// A stored session, found by its token's hash, live or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// The owner of the key it acts as.
    pub owner: OwnerId,
    /// The key it acts as.
    pub key_id: Uuid,
    /// That key's token hash, to check the key as a bearer token is checked.
    pub key_token_hash: [u8; 32],
    /// When it was stored.
    pub created_at: DateTime<Utc>,
    /// When it was last marked used.
    pub last_seen_at: DateTime<Utc>,
    /// When it ends, used or not.
    pub expires_at: DateTime<Utc>,
    /// The database's clock when it was read (Postgres's `now()`; the
    /// process's clock on SQLite, whose one machine has one clock).
    pub now: DateTime<Utc>,
}

/// A row of `dashboard_sessions` joined with its key, and the database's
/// clock, as both databases select them.
#[derive(FromRow)]
pub(crate) struct SessionRow {
    owner_id: String,
    key_id: Uuid,
    key_token_hash: Vec<u8>,
    created_at: Stamp,
    last_seen_at: Stamp,
    expires_at: Stamp,
    now: Stamp,
}

impl TryFrom<SessionRow> for StoredSession {
    type Error = super::StoreError;
    fn try_from(row: SessionRow) -> Result<Self> {
        let SessionRow { owner_id, key_id, key_token_hash, created_at, last_seen_at, expires_at, now } = row;
        Ok(StoredSession {
            owner: OwnerId::from_trusted(owner_id),
            key_id,
            key_token_hash: key_token_hash.try_into().map_err(|_| corrupt("a stored token hash is not 32 bytes"))?,
            created_at: created_at.0,
            last_seen_at: last_seen_at.0,
            expires_at: expires_at.0,
            now: now.0,
        })
    }
}

impl Store {
    /// Stores a new dashboard session, ending `session.lifetime` from now
    /// by the database's clock.
    pub async fn insert_dashboard_session(&self, session: &NewSession) -> Result<()> {
        self.driver().insert_dashboard_session(session).await
    }

    /// The dashboard session whose token hashes to `token_hash`, live or
    /// not, with its key's token hash and the database's clock: one look-up
    /// by an index.
    pub async fn find_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<Option<StoredSession>> {
        self.driver().find_dashboard_session(token_hash).await
    }

    /// Marks a dashboard session used now.
    pub async fn touch_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<()> {
        self.driver().touch_dashboard_session(token_hash).await
    }

    /// Ends a dashboard session: its row is deleted. `false` when there was
    /// none.
    pub async fn delete_dashboard_session(&self, token_hash: &[u8; 32]) -> Result<bool> {
        self.driver().delete_dashboard_session(token_hash).await
    }

    /// Deletes every dashboard session past its lifetime or unused for
    /// `idle`; how many.
    pub async fn delete_expired_dashboard_sessions(&self, idle: Duration) -> Result<u64> {
        self.driver().delete_expired_dashboard_sessions(idle).await
    }

    /// Stores the first run's key, unless the database had its first run
    /// already or has a key: `bootstrap`'s one row, inserted in the key's
    /// transaction, decides, so that of replicas starting together on an
    /// empty database exactly one makes it. `true` when this call made it.
    pub async fn insert_first_run_key(
        &self,
        id: Uuid,
        owner: &OwnerId,
        role: KeyRole,
        token_hash: &[u8; 32],
    ) -> Result<bool> {
        self.driver().insert_first_run_key(&super::NewKey { id, owner, role, token_hash }).await
    }
}
