//! API keys. A token is shown once, when it is made; only its SHA-256 is
//! stored, so a leaked database does not leak working keys. Checking a
//! presented token is [`Authenticator`]'s.

mod authenticator;
mod failures;
pub(crate) mod sessions;

pub use authenticator::{AuthError, Authenticator, Identity};
pub use failures::AuthFailures;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::domain::{KeyRole, OwnerId};
use crate::store::{self, Store};

const PREFIX: &str = "oj_";
const SECRET_BYTES: usize = 32;

/// A new token and the hash stored for it.
pub struct NewToken {
    /// Shown to the user once.
    pub token: String,
    /// Stored.
    pub hash: [u8; 32],
}

/// Makes a token: `oj_` and 64 hex digits of operating-system randomness.
pub fn generate_token() -> NewToken {
    let mut secret = [0u8; SECRET_BYTES];
    getrandom::fill(&mut secret).expect("the operating system's random source");
    let token = format!("{PREFIX}{}", hex::encode(secret));
    let hash = hash_token(&token);
    NewToken { token, hash }
}

/// Whether a string has the shape of a token, before any look-up.
pub fn looks_like_token(token: &str) -> bool {
    token
        .strip_prefix(PREFIX)
        .is_some_and(|hex| hex.len() == SECRET_BYTES * 2 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The stored form of a token.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Creates a `client` key for `owner`; returns its id and the token to hand over.
pub async fn create_key(store: &Store, owner: &OwnerId) -> store::Result<(Uuid, String)> {
    create_key_with_role(store, owner, KeyRole::Client).await
}

/// Creates a key of `role` for `owner`; returns its id and the token to hand over.
pub async fn create_key_with_role(store: &Store, owner: &OwnerId, role: KeyRole) -> store::Result<(Uuid, String)> {
    let id = Uuid::now_v7();
    let NewToken { token, hash } = generate_token();
    store.insert_api_key(id, owner, role, &hash).await?;
    Ok((id, token))
}

/// The owner of the first run's key.
pub const FIRST_RUN_OWNER: &str = "demo";

/// On a database that never had its first run and has no key, makes the
/// first run's key: an admin key of owner [`FIRST_RUN_OWNER`]. Whoever can
/// start the server on an empty database installed it, and needs a key
/// that can also see providers and make keys for others. The database
/// decides, so that of replicas starting together exactly one makes it;
/// `None` for every other call. Returns its id and the token to show once.
pub async fn create_first_run_key(store: &Store) -> store::Result<Option<(Uuid, String)>> {
    let owner = OwnerId::parse(FIRST_RUN_OWNER).expect("a valid owner");
    let id = Uuid::now_v7();
    let NewToken { token, hash } = generate_token();
    let made = store.insert_first_run_key(id, &owner, KeyRole::Operator, &hash).await?;
    Ok(made.then_some((id, token)))
}

/// What became of a revocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// The key is revoked.
    Revoked,
    /// No live key has this id (of the owner asked for).
    NotFound,
    /// The key is of a role above the revoker's: nothing changed.
    Outranked,
}

/// API keys as the API and the first run manage them.
pub struct Keys {
    store: Store,
}

impl Keys {
    /// The keys kept in `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Revokes, for a key of role `by`, a live key of `owner` (of any
    /// owner: `None`) whose role is not above `by`'s: an owner's admin
    /// cannot revoke the operator key its owner holds.
    pub async fn revoke(&self, id: Uuid, owner: Option<&OwnerId>, by: KeyRole) -> store::Result<Revocation> {
        if let Some(owner) = owner {
            let keys = self.store.list_api_keys(Some(owner)).await?;
            let target = keys.iter().find(|key| key.id == id && key.revoked_at.is_none());
            if target.is_some_and(|key| key.role.rank() > by.rank()) {
                return Ok(Revocation::Outranked);
            }
        }
        match self.store.revoke_api_key(id, owner).await? {
            true => Ok(Revocation::Revoked),
            false => Ok(Revocation::NotFound),
        }
    }

    /// See [`create_first_run_key`].
    pub async fn create_first_run_key(&self) -> store::Result<Option<(Uuid, String)>> {
        create_first_run_key(&self.store).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_well_formed_and_hashed() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a.token, b.token);
        assert!(looks_like_token(&a.token));
        assert_eq!(a.hash, hash_token(&a.token));
        assert!(!looks_like_token("oj_short"));
        assert!(!looks_like_token(&a.token.replace("oj_", "xx_")));
    }
}
