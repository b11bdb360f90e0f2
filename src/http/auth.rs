//! Bearer authentication. The owner of every request comes from its API key
//! and from nowhere else (I7). Keys found live are trusted for a short,
//! configured time so that the create path stays one database round trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::AppState;
use super::error::{ApiError, Problem};
use crate::domain::OwnerId;
use crate::keys;
use crate::store::Store;

/// Past this many cached keys the cache starts over, so that it stays small.
const CACHE_CAPACITY: usize = 10_000;

/// Turns bearer tokens into owners.
pub struct Authenticator {
    store: Arc<dyn Store>,
    ttl: Duration,
    cache: Mutex<HashMap<[u8; 32], (OwnerId, Instant)>>,
}

impl Authenticator {
    /// Looks keys up in `store`, trusting a found key for `ttl`.
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> Self {
        Self { store, ttl, cache: Mutex::new(HashMap::new()) }
    }

    /// The owner of `token`, or 401.
    pub async fn authenticate(&self, token: &str) -> Result<OwnerId, ApiError> {
        if !keys::looks_like_token(token) {
            return Err(Problem::unauthorized("the bearer token is not an onejob API key").into());
        }
        let hash = keys::hash_token(token);
        if let Some(owner) = self.cached(&hash) {
            return Ok(owner);
        }
        match self.store.find_api_key_owner(&hash).await? {
            Some(owner) => {
                self.remember(hash, owner.clone());
                Ok(owner)
            }
            None => Err(Problem::unauthorized("the API key is unknown or revoked").into()),
        }
    }

    fn cached(&self, hash: &[u8; 32]) -> Option<OwnerId> {
        let cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.get(hash).filter(|(_, at)| at.elapsed() < self.ttl).map(|(owner, _)| owner.clone())
    }

    fn remember(&self, hash: [u8; 32], owner: OwnerId) {
        if self.ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(hash, (owner, Instant::now()));
    }
}

/// The authenticated owner of a request.
pub struct Owner(pub OwnerId);

impl FromRequestParts<AppState> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
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
        let owner = state.auth.authenticate(token).await?;
        tracing::Span::current().record("owner", owner.as_str());
        // Before any work: a replay costs the same as a create.
        if let Some(limiter) = &state.limiter
            && let Err(not_until) = limiter.check_key(&owner)
        {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
            crate::metrics::rate_limited();
            return Err(Problem::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "rate-limited", "Rate limited")
                .detail("this API key's owner is over its request rate; retry after the time given")
                .retry_after(wait.as_secs_f64().ceil().max(1.0) as u64)
                .into());
        }
        Ok(Owner(owner))
    }
}
