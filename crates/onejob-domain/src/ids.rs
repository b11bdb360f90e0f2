//! Identity newtypes. Job, attempt and event ids are UUIDv7 (time-ordered, so
//! "newest first" is "largest id first"); the owner is a name taken from an
//! API key, never from a request body (I7).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new time-ordered (v7) identifier.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Parses the hyphenated text form; `None` for anything else.
            pub fn parse(text: &str) -> Option<Self> {
                Uuid::try_parse(text).ok().map(Self)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

uuid_id!(
    /// Identifies a job (one intent).
    JobId
);
uuid_id!(
    /// Identifies an attempt; sent to the provider as its request id (I6).
    AttemptId
);

/// The tenant. Comes from authentication only.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerId(String);

/// Why a string is not an owner name.
#[derive(Debug, thiserror::Error)]
#[error("an owner name is 1 to 64 characters of letters, digits, '.', '_' or '-'")]
pub struct InvalidOwner;

impl OwnerId {
    /// Validates an owner name: 1–64 of `[A-Za-z0-9._-]`.
    pub fn parse(name: &str) -> Result<Self, InvalidOwner> {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid { Ok(Self(name.to_owned())) } else { Err(InvalidOwner) }
    }

    /// Wraps a name already validated (read back from the database).
    pub fn from_trusted(name: String) -> Self {
        Self(name)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_names_are_restricted_to_a_safe_alphabet() {
        assert!(OwnerId::parse("demo").is_ok());
        assert!(OwnerId::parse("team-a.prod_1").is_ok());
        assert!(OwnerId::parse("").is_err());
        assert!(OwnerId::parse("a b").is_err());
        assert!(OwnerId::parse("ö").is_err());
        assert!(OwnerId::parse(&"x".repeat(65)).is_err());
    }

    #[test]
    fn an_owner_is_named_and_shown_as_parsed() {
        for name in ["demo", "team-a.prod_1", &"x".repeat(64)] {
            let owner = OwnerId::parse(name).unwrap();
            assert_eq!((owner.as_str(), owner.to_string().as_str()), (name, name));
            assert_eq!(OwnerId::from_trusted(name.to_owned()), owner);
        }
    }

    #[test]
    fn job_ids_are_time_ordered() {
        let first = JobId::new();
        let second = JobId::new();
        assert!(second > first);
        assert_eq!(JobId::parse(&first.to_string()), Some(first));
        assert_eq!(JobId::parse("not-a-uuid"), None);
    }
}
