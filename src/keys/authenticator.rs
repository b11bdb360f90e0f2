//! Checking API keys. Keys found live are cached so that the create path
//! stays one database round trip, and the cache forgets a key as soon as the
//! store reports it changed: a revocation takes effect on every server when
//! it commits.
//!
//! Tokens are never compared as text: a token's SHA-256 is looked up, and the
//! hashes are compared in constant time. Looking a hash up (in the cache's
//! map or the database's index) is not a timing oracle either: the attacker
//! picks the token, not its hash, so learning how many leading bytes of a
//! stored hash a guess matched would take a SHA-256 preimage search per byte,
//! and a stored hash would not give the token back anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::domain::{KeyRole, OwnerId};
use crate::store::{KeyChange, Store, StoreError};
use crate::sync::LockAnyway;

/// Why a token authenticates no one.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// It does not have the shape of an onejob API key.
    #[error("the bearer token is not an onejob API key")]
    NotAKey,
    /// No live key has it.
    #[error("the API key is unknown or revoked")]
    UnknownOrRevoked,
    /// The store could not say.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Past this many cached keys the cache starts over, so that it stays small.
const CACHE_CAPACITY: usize = 10_000;

/// Who is calling: the key, its owner and its role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The key's id.
    pub key: Uuid,
    /// The owner everything the request touches belongs to.
    pub owner: OwnerId,
    /// What the key may do.
    pub role: KeyRole,
}

/// A token's SHA-256, compared in constant time wherever it is compared,
/// the cache's map included.
#[derive(Clone, Copy)]
struct TokenHash([u8; 32]);

impl PartialEq for TokenHash {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for TokenHash {}

impl std::hash::Hash for TokenHash {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

struct Cache {
    entries: HashMap<TokenHash, (Identity, Instant)>,
    /// Entries are trusted only while the store's key changes are followed:
    /// never for a store that cannot push them, nor while the follower is
    /// reconnecting (a change in that gap would go unheard).
    following: bool,
    /// Counts forgettings, so that a look-up that raced one is not cached.
    generation: u64,
}

impl Cache {
    fn forget_all(&mut self) {
        self.entries.clear();
        self.generation += 1;
    }
}

/// Turns bearer tokens into identities.
pub struct Authenticator {
    store: Store,
    ttl: Duration,
    cache: Mutex<Cache>,
}

impl Authenticator {
    /// How many keys are cached now.
    pub fn cached_keys(&self) -> usize {
        self.lock().entries.len()
    }

    /// Looks keys up in `store`, trusting a found key for at most `ttl`, and
    /// only once [`Self::follow`] has heard that key changes are followed.
    pub fn new(store: Store, ttl: Duration) -> Self {
        let cache = Cache { entries: HashMap::new(), following: false, generation: 0 };
        Self { store, ttl, cache: Mutex::new(cache) }
    }

    /// The identity `token` authenticates as.
    pub async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        if !super::looks_like_token(token) {
            return Err(AuthError::NotAKey);
        }
        self.authenticate_hash(&super::hash_token(token)).await
    }

    /// The identity the token with this SHA-256 authenticates as, when this
    /// process checked it lately (no look-up).
    pub fn cached_identity(&self, token_hash: &[u8; 32]) -> Option<Identity> {
        self.cached(&TokenHash(*token_hash)).ok()
    }

    /// The identity the token with this SHA-256 authenticates as:
    /// how a dashboard session, which keeps the hash and never the token, is
    /// checked on every request, so that revoking the key ends it.
    pub async fn authenticate_hash(&self, token_hash: &[u8; 32]) -> Result<Identity, AuthError> {
        let hash = TokenHash(*token_hash);
        let generation = match self.cached(&hash) {
            Ok(identity) => return Ok(identity),
            Err(generation) => generation,
        };
        match self.store.find_api_key(&hash.0).await? {
            Some(key) if TokenHash(key.token_hash) == hash => {
                let identity = Identity { key: key.id, owner: key.owner, role: key.role };
                self.remember(hash, identity.clone(), generation);
                Ok(identity)
            }
            _ => Err(AuthError::UnknownOrRevoked),
        }
    }

    /// Forgets key `id` at once (this process revoked it; the store tells
    /// the other processes).
    pub fn forget_key(&self, id: Uuid) {
        let mut cache = self.lock();
        cache.entries.retain(|_, (identity, _)| identity.key != id);
        cache.generation += 1;
    }

    /// Applies one report of the store's key-change follower.
    pub fn apply(&self, change: KeyChange) {
        match change {
            KeyChange::Changed(id) => self.forget_key(id),
            KeyChange::Following => {
                let mut cache = self.lock();
                // Whatever changed while nobody listened is forgotten with the rest.
                cache.forget_all();
                cache.following = true;
            }
            KeyChange::Lost => {
                let mut cache = self.lock();
                cache.forget_all();
                cache.following = false;
            }
        }
    }

    /// Applies the follower's reports until it stops, telling `changed` of
    /// each changed key (what the key holds open ends) and confirming each
    /// key it forgot to whoever revoked it.
    pub async fn follow(self: Arc<Self>, mut changes: mpsc::Receiver<KeyChange>, changed: impl Fn(Uuid) + Send) {
        while let Some(change) = changes.recv().await {
            let key = if let KeyChange::Changed(id) = change { Some(id) } else { None };
            self.apply(change);
            if let Some(id) = key {
                changed(id);
                if let Err(error) = self.store.confirm_key_forgotten(id).await {
                    tracing::warn!(%error, key = %id, "cannot confirm that a changed key was forgotten");
                }
            }
        }
        self.apply(KeyChange::Lost);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock_anyway()
    }

    /// The cached identity, or the generation to remember a look-up under.
    fn cached(&self, hash: &TokenHash) -> Result<Identity, u64> {
        let cache = self.lock();
        if !cache.following {
            return Err(cache.generation);
        }
        match cache.entries.get(hash) {
            Some((identity, at)) if at.elapsed() < self.ttl => Ok(identity.clone()),
            _ => Err(cache.generation),
        }
    }

    fn remember(&self, hash: TokenHash, identity: Identity, generation: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.lock();
        // A key forgotten while it was being looked up may have been revoked
        // after the look-up read it: do not bring it back.
        if !cache.following || cache.generation != generation {
            return;
        }
        if cache.entries.len() >= CACHE_CAPACITY {
            cache.entries.clear();
        }
        cache.entries.insert(hash, (identity, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hashes_are_equal_exactly_when_every_byte_is() {
        let a = TokenHash([7; 32]);
        let mut other = [7; 32];
        assert!(a == TokenHash(other));
        other[31] = 8;
        assert!(a != TokenHash(other));
        other[31] = 7;
        other[0] = 0;
        assert!(a != TokenHash(other));
    }
}
