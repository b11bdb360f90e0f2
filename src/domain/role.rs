//! What an API key may do. Every key belongs to one owner (I7); its role says
//! whether it may also operate the service.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The role of an API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    /// Creates, reads, cancels and retries its owner's jobs, and resolves its
    /// owner's unknown attempts.
    Client,
    /// Everything a client may do for its own owner, and: providers,
    /// qualifications, revoking keys, and resolving any owner's unknown
    /// attempts.
    Admin,
}

impl KeyRole {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Client => "client",
            KeyRole::Admin => "admin",
        }
    }
}

/// Not `client` or `admin`.
#[derive(Debug, thiserror::Error)]
#[error("a key's role is 'client' or 'admin'")]
pub struct InvalidRole;

impl std::str::FromStr for KeyRole {
    type Err = InvalidRole;

    fn from_str(text: &str) -> Result<Self, InvalidRole> {
        match text {
            "client" => Ok(KeyRole::Client),
            "admin" => Ok(KeyRole::Admin),
            _ => Err(InvalidRole),
        }
    }
}

impl fmt::Display for KeyRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_through_their_names_and_nothing_else_parses() {
        for role in [KeyRole::Client, KeyRole::Admin] {
            assert_eq!(role.as_str().parse::<KeyRole>().unwrap(), role);
        }
        assert!("Admin".parse::<KeyRole>().is_err());
        assert!("".parse::<KeyRole>().is_err());
    }
}
