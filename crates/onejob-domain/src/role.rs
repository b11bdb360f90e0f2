//! What an API key may do. Every key belongs to one owner (I7); its role says
//! whether it may also administer that owner, or operate the whole service.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The role of an API key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    /// Creates, reads, cancels and retries its owner's jobs, reads its
    /// owner's events and usage, and resolves its owner's unknown attempts.
    Client,
    /// An owner's administrator: everything a client may, and its own
    /// owner's webhooks and keys. Nothing of any other owner.
    Admin,
    /// The installation's staff: everything an admin may for its own owner,
    /// and across owners: resolving any owner's unknown attempts, the
    /// dashboard over every owner, revoking any key, providers and their
    /// qualifications.
    Operator,
}

impl KeyRole {
    /// Every role, from the least to the most.
    pub const ALL: [KeyRole; 3] = [KeyRole::Client, KeyRole::Admin, KeyRole::Operator];

    /// What a key of this role reaches, through the API and the dashboard:
    /// the one account of it, shown by the sign-in page and the roles table
    /// of docs/api.md.
    pub fn reaches(self) -> &'static str {
        match self {
            KeyRole::Client => {
                "the jobs of its own owner: creating them, reading them with their events, output and usage, \
                 retries and fallbacks, canceling and erasing them, resolving their unknown attempts; on the \
                 dashboard, the jobs of its owner and the demo"
            }
            KeyRole::Admin => {
                "all a client reaches, and the webhooks and keys of its own owner (registering endpoints, \
                 revoking its client and admin keys); nothing of any other owner"
            }
            KeyRole::Operator => {
                "all an admin reaches for its own owner, and across owners: every owner on the dashboard, \
                 resolving the unknown attempt of any owner, revoking any key, and the providers with their \
                 qualifications and breakers (GET /providers, /ui/providers)"
            }
        }
    }

    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Client => "client",
            KeyRole::Admin => "admin",
            KeyRole::Operator => "operator",
        }
    }

    /// Whether the key administers its own owner (an admin or an operator).
    pub fn administers(self) -> bool {
        matches!(self, KeyRole::Admin | KeyRole::Operator)
    }

    /// Whether the key reaches every owner (an operator).
    pub fn spans_owners(self) -> bool {
        self == KeyRole::Operator
    }

    /// Its place among the roles, from 0 for the least ([`KeyRole::ALL`]).
    pub fn rank(self) -> usize {
        KeyRole::ALL.iter().position(|role| *role == self).expect("every role is in ALL")
    }
}

/// Not `client`, `admin` or `operator`.
#[derive(Debug, thiserror::Error)]
#[error("a key's role is 'client', 'admin' or 'operator'")]
pub struct InvalidRole;

impl std::str::FromStr for KeyRole {
    type Err = InvalidRole;

    fn from_str(text: &str) -> Result<Self, InvalidRole> {
        match text {
            "client" => Ok(KeyRole::Client),
            "admin" => Ok(KeyRole::Admin),
            "operator" => Ok(KeyRole::Operator),
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
        for role in KeyRole::ALL {
            assert_eq!(role.as_str().parse::<KeyRole>().unwrap(), role);
        }
        assert!("Admin".parse::<KeyRole>().is_err());
        assert!("".parse::<KeyRole>().is_err());
    }

    #[test]
    fn each_role_reaches_what_its_documentation_says_and_shows_its_name() {
        for (role, name, administers, spans_owners) in [
            (KeyRole::Client, "client", false, false),
            (KeyRole::Admin, "admin", true, false),
            (KeyRole::Operator, "operator", true, true),
        ] {
            assert_eq!(role.to_string(), name);
            assert_eq!((role.administers(), role.spans_owners()), (administers, spans_owners), "{role}");
        }
    }
}
