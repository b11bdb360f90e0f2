//! API keys as the store keeps them: listed (never their tokens), live
//! (what authentication needs), and the changes other processes hear of.

use chrono::{DateTime, Utc};
use uuid::Uuid;

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
    /// The follower lost its connection: changes may go unreported until it
    /// reports `Following` again.
    Lost,
    /// This key was revoked, changed or deleted.
    Changed(Uuid),
}
