//! Bearer authentication as extractors. The owner of every request comes
//! from its API key and from nowhere else (I7): the bearer token's, or, on
//! the dashboard's script routes, the key its checked session acts as
//! ([`SessionOwner`]); so does its role (`client`, `admin` or `operator`).
//! The keys are checked by [`crate::keys::Authenticator`]; an address that
//! sends too many unknown keys is refused before it costs a look-up
//! ([`crate::keys::AuthFailures`]).

use std::net::IpAddr;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::error::{ApiError, Problem, ProblemType};
use super::serve::Peer;
use crate::domain::OwnerId;
use crate::keys::AuthError;
pub(crate) use crate::keys::Identity;
use crate::state::AppState;

/// The client's address: the connection's, or for a connection from a
/// trusted proxy the last address of its `X-Forwarded-For`.
fn client_address(parts: &Parts, state: &AppState) -> Option<IpAddr> {
    address_of(parts.extensions.get::<Peer>(), &parts.headers, state)
}

/// [`client_address`] of a connection's `peer` and a request's `headers`.
pub(crate) fn address_of(peer: Option<&Peer>, headers: &header::HeaderMap, state: &AppState) -> Option<IpAddr> {
    let peer = peer?.0.ip();
    if !state.settings.trusted_proxies.contains(&peer) {
        return Some(peer);
    }
    let forwarded = headers.get_all("x-forwarded-for").iter().filter_map(|value| value.to_str().ok());
    let last = forwarded.flat_map(|value| value.split(',')).filter_map(|entry| entry.trim().parse().ok()).next_back();
    Some(last.unwrap_or(peer))
}

/// Refuses an `address` that sent too many unknown keys lately (API
/// requests and dashboard sign-ins alike), before a look-up.
pub(crate) fn refuse_failing(address: Option<IpAddr>, state: &AppState) -> Result<(), ApiError> {
    let Some(wait) = address.and_then(|address| state.auth_failures.wait(address)) else { return Ok(()) };
    crate::process::metrics::rate_limited();
    Err(Problem::new(ProblemType::RateLimited)
        .detail("too many requests with an unknown API key from this address; retry after the time given")
        .retry_after(wait.as_secs_f64().ceil().max(1.0) as u64)
        .into())
}

/// Authenticates a request and applies the owner's rate limit of this
/// process (each replica has its own).
async fn authenticate_request(parts: &Parts, state: &AppState) -> Result<Identity, ApiError> {
    let mut given = parts.headers.get_all(header::AUTHORIZATION).iter();
    let header = given.next().ok_or_else(|| Problem::unauthorized("send 'Authorization: Bearer <API key>'"))?;
    if given.next().is_some() {
        let detail = "send one Authorization header: with two, which one authenticates would be a guess";
        return Err(Problem::new(ProblemType::HeaderRepeated).detail(detail).into());
    }
    let token = header
        .to_str()
        .ok()
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .ok_or_else(|| Problem::unauthorized("the Authorization header must be 'Bearer <API key>'"))?;
    // Hashed once, for the cache and for the look-up.
    let hash = crate::keys::looks_like_token(token).then(|| crate::keys::hash_token(token));
    let identity = match hash.as_ref().and_then(|hash| state.auth.cached_identity(hash)) {
        Some(identity) => identity,
        None => {
            let address = client_address(parts, state);
            refuse_failing(address, state)?;
            let found = match &hash {
                Some(hash) => state.auth.authenticate_hash(hash).await,
                None => Err(AuthError::NotAKey),
            };
            match found {
                Ok(identity) => identity,
                Err(error) => {
                    if !matches!(error, AuthError::Store(_))
                        && let Some(address) = address
                    {
                        state.auth_failures.record(address);
                    }
                    return Err(error.into());
                }
            }
        }
    };
    check_rate(state, &identity)?;
    Ok(identity)
}

/// Records the caller's owner in the request's span and applies the owner's
/// rate limit of this process, before any work: a replay costs the same as
/// a create.
pub(crate) fn check_rate(state: &AppState, identity: &Identity) -> Result<(), ApiError> {
    tracing::Span::current().record("owner", identity.owner.as_str());
    if let Some(limiter) = &state.limiter
        && let Err(not_until) = limiter.check_key(&identity.owner)
    {
        let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        crate::process::metrics::rate_limited();
        return Err(Problem::new(ProblemType::RateLimited)
            .detail("this API key's owner is over its request rate on this server; retry after the time given")
            .retry_after(wait.as_secs_f64().ceil().max(1.0) as u64)
            .into());
    }
    Ok(())
}

/// The authenticated owner of a request, for routes any key may call: they
/// reach that owner's resources only.
pub(crate) struct Owner(pub OwnerId);

impl FromRequestParts<AppState> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(SessionOwner(identity)) = parts.extensions.get::<SessionOwner>() {
            return Ok(Owner(identity.owner.clone()));
        }
        Ok(Owner(authenticate_request(parts, state).await?.owner))
    }
}

/// The identity a dashboard session acts as. The dashboard's script
/// routes mount this API's own handlers; a layer of theirs checks the
/// session (and, for a change, its CSRF token) and puts this in the
/// request's extensions, which only the server writes, so that [`Owner`]
/// and [`Caller`] are the session's there and the bearer key's everywhere
/// else.
#[derive(Clone, Debug)]
pub(crate) struct SessionOwner(pub(crate) Identity);

/// The caller of a route any key may call, with its key: whose reach
/// depends on the role (an operator resolves any owner's unknown attempt), or
/// that holds something open for the key (a long-poll, an event stream).
pub(crate) struct Caller(pub Identity);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(SessionOwner(identity)) = parts.extensions.get::<SessionOwner>() {
            return Ok(Caller(identity.clone()));
        }
        Ok(Caller(authenticate_request(parts, state).await?))
    }
}

/// The caller of an admin route, an admin or an operator key, acting for
/// its own owner (an operator, for any where the route says so); a client
/// key gets 403 `forbidden`.
pub(crate) struct Admin(pub Identity);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let identity = authenticate_request(parts, state).await?;
        if !identity.role.administers() {
            return Err(Problem::forbidden("this route needs an admin key; this key's role is client").into());
        }
        Ok(Admin(identity))
    }
}

/// The caller of an operator route (the installation's: providers and
/// their qualifications); any other key gets 403 `forbidden`.
pub(crate) struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let identity = authenticate_request(parts, state).await?;
        if !identity.role.spans_owners() {
            let detail = format!("this route needs an operator key; this key's role is {}", identity.role);
            return Err(Problem::forbidden(&detail).into());
        }
        Ok(Operator)
    }
}
