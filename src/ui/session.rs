//! Dashboard sessions. Signing in with an API key makes a server-side
//! session: the browser holds only a random session id, in an `HttpOnly`,
//! `SameSite=Strict` cookie; the server holds the key's SHA-256 (never the
//! token) and checks it through the same authenticator as a bearer token on
//! every request, so revoking the key ends its sessions at once.
//!
//! Every request that changes something must also prove it comes from a
//! page this server rendered for the session: forms carry the session's
//! CSRF token in a hidden field, scripts in the `X-CSRF-Token` header, and
//! any `Origin` or `Sec-Fetch-Site` header must say the same origin.
//!
//! Sessions live in this process's memory: a restart signs everyone out, and
//! replicas behind a load balancer need sticky sessions (or a sign-in per
//! replica).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::keys::Identity;

/// The cookie's name.
pub const COOKIE: &str = "onejob_session";
/// The header scripts send the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Past this many sessions the oldest are dropped.
const CAPACITY: usize = 10_000;

/// A signed-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who it acts as, checked on this request.
    pub identity: Identity,
    /// The token every change must carry.
    pub csrf: String,
}

struct Entry {
    token_hash: [u8; 32],
    csrf: String,
    signed_in: Instant,
    last_seen: Instant,
}

/// Every live session of this process, by the SHA-256 of its id (a memory
/// dump shows no usable cookie).
#[derive(Default)]
pub struct Sessions {
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's randomness");
    hex::encode(bytes)
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a session for the key whose token hashes to `token_hash`;
    /// returns the session id for the cookie.
    pub fn start(&self, token_hash: [u8; 32]) -> String {
        let id = random_hex();
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, entry| live(entry, now));
        if entries.len() >= CAPACITY
            && let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.last_seen).map(|(k, _)| *k)
        {
            entries.remove(&oldest);
        }
        entries.insert(digest(&id), Entry { token_hash, csrf: random_hex(), signed_in: now, last_seen: now });
        id
    }

    /// The key hash and CSRF token of a live session, marking it used.
    pub fn touch(&self, id: &str) -> Option<([u8; 32], String)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let key = digest(id);
        let entry = entries.get_mut(&key)?;
        if !live(entry, now) {
            entries.remove(&key);
            return None;
        }
        entry.last_seen = now;
        Some((entry.token_hash, entry.csrf.clone()))
    }

    /// Ends a session (signing out, or its key is no longer live).
    pub fn end(&self, id: &str) {
        self.lock().remove(&digest(id));
    }
}

fn live(entry: &Entry, now: Instant) -> bool {
    now.duration_since(entry.last_seen) < IDLE && now.duration_since(entry.signed_in) < LIFETIME
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
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}")).expect("hex is a valid header")
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

    #[test]
    fn a_session_is_found_by_its_id_until_it_ends() {
        let sessions = Sessions::default();
        let id = sessions.start([3; 32]);
        let (hash, csrf) = sessions.touch(&id).unwrap();
        assert_eq!(hash, [3; 32]);
        assert_eq!(csrf.len(), 64);
        assert!(sessions.touch(&random_hex()).is_none());
        sessions.end(&id);
        assert!(sessions.touch(&id).is_none());
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
            identity: Identity { key: uuid::Uuid::nil(), owner: crate::domain::OwnerId::parse("a").unwrap(), role: crate::domain::KeyRole::Client },
            csrf: "abc".into(),
        };
        assert!(csrf_matches(&session, "abc"));
        assert!(!csrf_matches(&session, "abd"));
        assert!(!csrf_matches(&session, "ab"));
        assert!(!csrf_matches(&session, ""));
    }
}
