//! Dashboard sessions as they are kept: made by signing in with an API key,
//! found by the SHA-256 of their random token (never the token), ended
//! [`IDLE`] after their last use or [`LIFETIME`] after sign-in, whichever
//! comes first, by the database's clock (see `crate::ui::session` for the
//! cookie and the CSRF checks).

use std::time::Duration;

use chrono::TimeDelta;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{AuthError, Identity};
use crate::store::{NewSession, Store, StoredSession};

/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(8 * 3600);
/// A session ends this long after sign-in, used or not.
pub const LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A session is marked used again only when it was last marked longer ago
/// than this, so that most requests write nothing. (It may therefore end
/// up to this much before [`IDLE`] has passed since its true last use.)
pub const REFRESH: Duration = Duration::from_secs(60);

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
pub(crate) enum Standing {
    /// Live; `mark` when it is due to be marked used.
    Live {
        /// It was last marked used longer than [`REFRESH`] ago.
        mark: bool,
    },
    /// Past its lifetime or its idle time.
    Ended,
}

/// Where `session` stands at the database's clock as read with it.
pub(crate) fn standing(session: &StoredSession) -> Standing {
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
pub struct Sessions {
    store: Store,
}

impl Sessions {
    /// The sessions kept in `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Starts a session acting as `identity`'s key; returns the session's
    /// token, for the cookie. Sessions that ended are swept first.
    pub async fn start(&self, identity: &Identity) -> Result<String, AuthError> {
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
    pub async fn find(&self, token: &str) -> Result<Option<Found>, AuthError> {
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
    pub async fn end(&self, token: &str) -> Result<(), AuthError> {
        self.store.delete_dashboard_session(&digest(token)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
