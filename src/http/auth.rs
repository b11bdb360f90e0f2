//! Bearer authentication. The owner of every request comes from its API key
//! and from nowhere else (I7); so does its role (`client` or `admin`). Keys
//! found live are cached so that the create path stays one database round
//! trip, and the cache forgets a key as soon as the store reports it changed:
//! a revocation takes effect on every server when it commits.
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

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use crate::domain::{KeyRole, OwnerId};
use crate::keys;
use crate::store::{KeyChange, Store};

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
    store: Arc<dyn Store>,
    ttl: Duration,
    cache: Mutex<Cache>,
}

impl Authenticator {
    /// Looks keys up in `store`, trusting a found key for at most `ttl`, and
    /// only once [`Self::follow`] has heard that key changes are followed.
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> Self {
        let cache = Cache { entries: HashMap::new(), following: false, generation: 0 };
        Self { store, ttl, cache: Mutex::new(cache) }
    }

    /// The identity `token` authenticates as, or 401.
    pub async fn authenticate(&self, token: &str) -> Result<Identity, ApiError> {
        if !keys::looks_like_token(token) {
            return Err(Problem::unauthorized("the bearer token is not an onejob API key").into());
        }
        self.authenticate_hash(&keys::hash_token(token)).await
    }

    /// The identity the token with this SHA-256 authenticates as, or 401:
    /// how a dashboard session, which keeps the hash and never the token, is
    /// checked on every request, so that revoking the key ends it.
    pub async fn authenticate_hash(&self, token_hash: &[u8; 32]) -> Result<Identity, ApiError> {
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
            _ => Err(Problem::unauthorized("the API key is unknown or revoked").into()),
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

    /// Applies the follower's reports until it stops, confirming each key it
    /// forgot to whoever revoked it.
    pub async fn follow(self: Arc<Self>, mut changes: mpsc::Receiver<KeyChange>) {
        while let Some(change) = changes.recv().await {
            let changed = if let KeyChange::Changed(id) = change { Some(id) } else { None };
            self.apply(change);
            if let Some(id) = changed
                && let Err(error) = self.store.confirm_key_forgotten(id).await
            {
                tracing::warn!(%error, key = %id, "cannot confirm that a changed key was forgotten");
            }
        }
        self.apply(KeyChange::Lost);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// Authenticates a request and applies the owner's rate limit.
async fn authenticate_request(parts: &Parts, state: &AppState) -> Result<Identity, ApiError> {
    let header = parts
        .headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| Problem::unauthorized("send 'Authorization: Bearer <API key>'"))?;
    let token = header
        .to_str()
        .ok()
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| Problem::unauthorized("the Authorization header must be 'Bearer <API key>'"))?;
    let identity = state.auth.authenticate(token).await?;
    check_rate(state, &identity)?;
    Ok(identity)
}

/// Records the caller's owner in the request's span and applies the owner's
/// rate limit, before any work: a replay costs the same as a create.
pub(crate) fn check_rate(state: &AppState, identity: &Identity) -> Result<(), ApiError> {
    tracing::Span::current().record("owner", identity.owner.as_str());
    if let Some(limiter) = &state.limiter
        && let Err(not_until) = limiter.check_key(&identity.owner)
    {
        let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        crate::metrics::rate_limited();
        return Err(Problem::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "rate-limited", "Rate limited")
            .detail("this API key's owner is over its request rate; retry after the time given")
            .retry_after(wait.as_secs_f64().ceil().max(1.0) as u64)
            .into());
    }
    Ok(())
}

/// The authenticated owner of a request, for routes any key may call: they
/// reach that owner's resources only.
pub struct Owner(pub OwnerId);

impl FromRequestParts<AppState> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Owner(authenticate_request(parts, state).await?.owner))
    }
}

/// The caller of a route any key may call but whose reach depends on the
/// role (an admin resolves any owner's unknown attempt).
pub struct Caller(pub Identity);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Caller(authenticate_request(parts, state).await?))
    }
}

/// The caller of an admin route; a client key gets 403 `forbidden`.
pub struct Admin(pub Identity);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let identity = authenticate_request(parts, state).await?;
        if identity.role != KeyRole::Admin {
            return Err(Problem::forbidden("this route needs an admin key; this key's role is client").into());
        }
        Ok(Admin(identity))
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
