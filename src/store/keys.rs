//! API keys as the store keeps them: listed (never their tokens), live
//! (what authentication needs), and the changes other processes hear of.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Result, Store};

use crate::domain::{KeyRole, OwnerId};

/// An API key as stored: never the token, only its hash.
#[derive(Clone, Debug)]
pub struct ApiKey {
    /// The key's id, for revocation.
    pub id: Uuid,
    /// The owner it authenticates as.
    pub owner: OwnerId,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
    /// What it may do.
    pub role: KeyRole,
    /// Its own limit of its owner's attempts running at once, if it sets one.
    pub max_in_flight: Option<u32>,
}

/// An API key to store: never the token, only its hash.
#[derive(Clone, Copy, Debug)]
pub struct NewKey<'a> {
    /// The key's id.
    pub id: Uuid,
    /// The owner it authenticates as.
    pub owner: &'a OwnerId,
    /// What it may do.
    pub role: KeyRole,
    /// The token's hash.
    pub token_hash: &'a [u8; 32],
}

/// A live key found by its token's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveKey {
    /// The key's id: revocations name keys by it.
    pub id: Uuid,
    /// The owner it authenticates as.
    pub owner: OwnerId,
    /// What it may do.
    pub role: KeyRole,
    /// The stored hash, compared with the presented token's in constant time.
    pub token_hash: [u8; 32],
}

/// What a store's follower of API-key changes reports (see
/// [`Store::follow_key_changes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// Every change from now on will be reported; changes made before may
    /// have been missed.
    Following,
    /// The follower lost its connection, or (SQLite) hears of changes only
    /// by polling: changes may go unreported, or late, until it reports
    /// `Following`.
    Lost,
    /// This key was revoked, changed or deleted.
    Changed(Uuid),
}

impl Store {
    /// Stores a new API key's hash.
    pub async fn insert_api_key(&self, id: Uuid, owner: &OwnerId, role: KeyRole, token_hash: &[u8; 32]) -> Result<()> {
        self.driver().insert_api_key(&NewKey { id, owner, role, token_hash }).await
    }

    /// Sets a live key's own limit of its owner's attempts running at once
    /// (`None`: the default): whether a live key has that id.
    pub async fn set_key_max_in_flight(&self, id: Uuid, max_in_flight: Option<u32>) -> Result<bool> {
        self.driver().set_key_max_in_flight(id, max_in_flight).await
    }

    /// The live (unrevoked) key with this hash.
    pub async fn find_api_key(&self, token_hash: &[u8; 32]) -> Result<Option<LiveKey>> {
        self.driver().find_api_key(token_hash).await
    }

    /// The owner of a live (unrevoked) key with this hash.
    pub async fn find_api_key_owner(&self, token_hash: &[u8; 32]) -> Result<Option<OwnerId>> {
        Ok(self.find_api_key(token_hash).await?.map(|key| key.owner))
    }

    /// Revokes a key of `owner` (of any owner: `None`); `false` when there
    /// is no such live key. Every process
    /// following key changes hears of it when it commits; on Postgres this
    /// returns once each of them has confirmed it forgot the key (or after
    /// two seconds, with a warning naming how many did not).
    pub async fn revoke_api_key(&self, id: Uuid, owner: Option<&OwnerId>) -> Result<bool> {
        self.driver().revoke_api_key(id, owner).await
    }

    /// Tells a revoker that this process forgot key `id` (see
    /// [`Self::revoke_api_key`]).
    pub async fn confirm_key_forgotten(&self, id: Uuid) -> Result<()> {
        self.driver().confirm_key_forgotten(id).await
    }

    /// Reports every change to any API key made by any process, for caches
    /// of checked keys and for ending what a revoked key holds; the follower
    /// stops when the receiver is dropped. SQLite, which cannot push a
    /// change, reports `Lost` (keys are looked up every time), then each
    /// revocation it finds by reading the keys table every second.
    pub fn follow_key_changes(&self) -> Option<tokio::sync::mpsc::Receiver<KeyChange>> {
        self.driver().follow_key_changes()
    }

    /// Every key, or one owner's.
    pub async fn list_api_keys(&self, owner: Option<&OwnerId>) -> Result<Vec<ApiKey>> {
        self.driver().list_api_keys(owner).await
    }

    /// Whether any API key exists at all.
    pub async fn has_api_keys(&self) -> Result<bool> {
        self.driver().has_api_keys().await
    }
}
