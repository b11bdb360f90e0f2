//! Dashboard sessions. Signing in with an API key makes a session: the
//! browser holds only the session's random token, in an `HttpOnly`,
//! `SameSite=Strict` cookie; the database holds the token's SHA-256 (never
//! the token) with the API key it acts as, and that key is checked through
//! the same authenticator as a bearer token on every request, so revoking
//! the key ends its sessions at once.
//!
//! Sessions live in the database (`dashboard_sessions`, see
//! [`crate::store::sessions`]): every server sharing it honours a session,
//! so a round-robin load balancer needs no sticky sessions, and a restart
//! signs no one out. A request costs one look-up by an index; a session is
//! marked used at most once every [`REFRESH`], not on every request. A
//! session ends [`IDLE`] after it was last marked used or [`LIFETIME`]
//! after sign-in, whichever comes first, by the database's clock; an ended
//! row is refused, and deleted when it is presented or at the next sign-in.
//! A session is found by its token's SHA-256, which is no timing oracle for
//! the same reason as a key's (see [`crate::keys::Authenticator`]): an
//! attacker chooses tokens, not their hashes.
//!
//! Every request that changes something must also prove it comes from a
//! page this server rendered for the session: forms carry the session's
//! CSRF token in a hidden field, scripts in the `X-CSRF-Token` header, and
//! any `Origin` or `Sec-Fetch-Site` header must say the same origin.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use chrono::TimeDelta;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::keys::Identity;
use crate::store::{NewSession, Store, StoredSession};

/// The cookie's name.
pub const COOKIE: &str = "onejob_session";
/// The header scripts send the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A session is marked used again only when it was last marked longer ago
/// than this, so that most requests write nothing. (It may therefore end
/// up to this much before [`IDLE`] has passed since its true last use.)
pub const REFRESH: Duration = Duration::from_secs(60);

/// A signed-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who it acts as, checked on this request.
    pub identity: Identity,
    /// The token every change must carry.
    pub csrf: String,
}

/// A live session as the database has it, before its key is checked.
#[derive(Clone, Debug)]
pub struct Found {
    /// The token hash of the key it acts as, to check as a bearer token's.
    pub key_token_hash: [u8; 32],
    /// The key it acts as.
    pub key_id: Uuid,
    /// The token every change must carry.
    pub csrf: String,
}

/// Where a stored session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Live; `mark` when it is due to be marked used.
    Live {
        /// It was last marked used longer than [`REFRESH`] ago.
        mark: bool,
    },
    /// Past its lifetime or its idle time.
    Ended,
}

/// Where `session` stands at the database's clock as read with it.
pub fn standing(session: &StoredSession) -> Standing {
    let since_seen = session.now - session.last_seen_at;
    if session.now >= session.expires_at || since_seen >= delta(IDLE) {
        Standing::Ended
    } else {
        Standing::Live { mark: since_seen >= delta(REFRESH) }
    }
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).expect("the session durations fit")
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's randomness");
    hex::encode(bytes)
}

/// What the database stores of a session's token.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The session's CSRF token, derived from its token rather than stored:
/// every server computes the same one, and the database holds nothing that
/// gives it. It is the SHA-256 of the session's token under a prefix of its
/// own, so it differs from the stored hash, and neither it nor the stored
/// hash yields the token (or each other) without a preimage of SHA-256. A
/// page that shows it (it is in every form) thus gives away neither the
/// cookie nor anything to find the session by.
pub fn csrf_token(token: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"onejob dashboard csrf\0");
    hasher.update(token.as_bytes());
    hex::encode(hasher.finalize())
}

/// The dashboard's sessions, in `store`.
pub struct Sessions<'a> {
    store: &'a dyn Store,
}

impl<'a> Sessions<'a> {
    /// The sessions kept in `store`.
    pub fn new(store: &'a dyn Store) -> Self {
        Self { store }
    }

    /// Starts a session acting as `identity`'s key; returns the session's
    /// token, for the cookie. Sessions that ended are swept first.
    pub async fn start(&self, identity: &Identity) -> crate::store::Result<String> {
        // The table holds operators' sessions only: sweeping it at sign-in
        // (as rare as operators) keeps it small without a timer.
        if let Err(error) = self.store.delete_expired_dashboard_sessions(IDLE).await {
            tracing::warn!(%error, "cannot delete ended dashboard sessions");
        }
        let token = random_hex();
        let session = NewSession {
            token_hash: digest(&token),
            owner: identity.owner.clone(),
            key_id: identity.key,
            lifetime: LIFETIME,
        };
        self.store.insert_dashboard_session(&session).await?;
        Ok(token)
    }

    /// The live session of `token`, marked used when it is due; an ended
    /// one is deleted and is none.
    pub async fn find(&self, token: &str) -> crate::store::Result<Option<Found>> {
        let hash = digest(token);
        let Some(stored) = self.store.find_dashboard_session(&hash).await? else { return Ok(None) };
        match standing(&stored) {
            Standing::Ended => {
                self.store.delete_dashboard_session(&hash).await?;
                return Ok(None);
            }
            Standing::Live { mark: true } => {
                // A session that cannot be marked now is still live: serve
                // the request, and mark it on a later one.
                if let Err(error) = self.store.touch_dashboard_session(&hash).await {
                    tracing::warn!(%error, "cannot mark a dashboard session used");
                }
            }
            Standing::Live { mark: false } => {}
        }
        Ok(Some(Found { key_token_hash: stored.key_token_hash, key_id: stored.key_id, csrf: csrf_token(token) }))
    }

    /// Ends the session of `token` (signing out, or its key is no longer
    /// live), on every server.
    pub async fn end(&self, token: &str) -> crate::store::Result<()> {
        self.store.delete_dashboard_session(&digest(token)).await?;
        Ok(())
    }
}

/// The session id the request's cookie names, if any.
pub fn cookie_session(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == COOKIE && value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value for a new session. `Secure` when the page was
/// reached over HTTPS (as the browser's `Origin` says); onejob itself
/// serves plain HTTP on loopback, usually behind a TLS proxy.
pub fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"))
        .expect("hex is a valid header")
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> HeaderValue {
    HeaderValue::from_str(&format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")).expect("a valid header")
}

/// Whether `presented` is the session's CSRF token (constant time).
pub fn csrf_matches(session: &Session, presented: &str) -> bool {
    presented.len() == session.csrf.len() && bool::from(presented.as_bytes().ct_eq(session.csrf.as_bytes()))
}

/// Whether a request that changes something comes from this server's own
/// pages, as far as the browser says: an `Origin` naming another host, or
/// `Sec-Fetch-Site` other than `same-origin`/`none`, is refused. (Clients
/// that send neither header are not browsers acting for someone else.)
pub fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_ok = match headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(origin) => {
            let authority = origin.split_once("://").map(|(_, rest)| rest);
            host.is_some() && authority == host
        }
    };
    let site_ok = match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        None => true,
        Some(site) => site == "same-origin" || site == "none",
    };
    origin_ok && site_ok
}

/// Whether the browser reached this page over HTTPS.
pub fn over_https(headers: &HeaderMap) -> bool {
    headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()).is_some_and(|o| o.starts_with("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn stored(signed_in_ago: Duration, seen_ago: Duration) -> StoredSession {
        let now = chrono::Utc::now();
        let created_at = now - delta(signed_in_ago);
        StoredSession {
            owner: crate::domain::OwnerId::parse("a").unwrap(),
            key_id: Uuid::nil(),
            key_token_hash: [3; 32],
            created_at,
            last_seen_at: now - delta(seen_ago),
            expires_at: created_at + delta(LIFETIME),
            now,
        }
    }

    #[test]
    fn a_session_ends_at_its_idle_time_or_its_lifetime_and_is_marked_once_a_minute() {
        let second = Duration::from_secs(1);
        assert_eq!(standing(&stored(Duration::ZERO, Duration::ZERO)), Standing::Live { mark: false });
        assert_eq!(standing(&stored(REFRESH - second, REFRESH - second)), Standing::Live { mark: false });
        assert_eq!(standing(&stored(REFRESH, REFRESH)), Standing::Live { mark: true });
        assert_eq!(standing(&stored(IDLE - second, IDLE - second)), Standing::Live { mark: true });
        assert_eq!(standing(&stored(IDLE, IDLE)), Standing::Ended);
        assert_eq!(standing(&stored(LIFETIME - second, Duration::ZERO)), Standing::Live { mark: false });
        assert_eq!(standing(&stored(LIFETIME, Duration::ZERO)), Standing::Ended);
    }

    #[test]
    fn the_csrf_token_is_the_sessions_own_and_not_its_stored_hash() {
        let token = random_hex();
        let csrf = csrf_token(&token);
        assert_eq!(csrf, csrf_token(&token), "every server derives the same one");
        assert_eq!(csrf.len(), 64);
        assert_ne!(csrf, hex::encode(digest(&token)), "not what the database stores");
        assert_ne!(csrf, csrf_token(&random_hex()));
    }

    #[test]
    fn the_cookie_is_read_among_others_and_malformed_ones_are_ignored() {
        let id = "a".repeat(64);
        let cookie = format!("other=1; {COOKIE}={id}; x=y");
        let mut map = HeaderMap::new();
        map.insert(header::COOKIE, HeaderValue::from_str(&cookie).unwrap());
        assert_eq!(cookie_session(&map), Some(id));
        assert_eq!(cookie_session(&headers(&[("cookie", "onejob_session=short")])), None);
        let value = set_cookie("ab", false);
        let text = value.to_str().unwrap();
        assert!(text.contains("HttpOnly") && text.contains("SameSite=Strict") && !text.contains("Secure"));
    }

    #[test]
    fn cross_site_requests_are_told_apart() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:8080"), ("origin", "http://evil.example")])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")])));
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-origin")])));
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8080")])));
    }

    #[test]
    fn csrf_tokens_are_compared_whole() {
        let session = Session {
            identity: Identity {
                key: uuid::Uuid::nil(),
                owner: crate::domain::OwnerId::parse("a").unwrap(),
                role: crate::domain::KeyRole::Client,
            },
            csrf: "abc".into(),
        };
        assert!(csrf_matches(&session, "abc"));
        assert!(!csrf_matches(&session, "abd"));
        assert!(!csrf_matches(&session, "ab"));
        assert!(!csrf_matches(&session, ""));
    }
}
