//! Dashboard sessions. Signing in with an API key makes a session: the
//! browser holds only the session's random token, in an `HttpOnly`,
//! `SameSite=Strict` cookie; the database holds the token's SHA-256 (never
//! the token) with the API key it acts as, and that key is checked through
//! the same authenticator as a bearer token on every request, so revoking
//! the key ends its sessions at once.
//!
//! Sessions live in the database (`dashboard_sessions`, see
//! `crate::store::sessions`): every server sharing it honours a session,
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

use axum::http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq;

use crate::keys::Identity;
pub use crate::keys::sessions::{Found, IDLE, LIFETIME, REFRESH, Sessions, csrf_token};

/// The cookie's name.
pub const COOKIE: &str = "onejob_session";
/// The header scripts send the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A signed-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who it acts as, checked on this request.
    pub identity: Identity,
    /// The token every change must carry.
    pub csrf: String,
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
