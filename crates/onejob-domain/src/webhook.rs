//! Webhooks as the Standard Webhooks specification has them
//! (<https://www.standardwebhooks.com/>, "Signature scheme"): the event
//! types an endpoint may subscribe to, its secret, and the signature of a
//! message. A secret is `whsec_` and the base64 of its key's bytes; a
//! message is signed as HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`
//! with that key, sent as `v1,` and the base64 of the digest; several
//! signatures (during a rotation) are separated by spaces.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

use crate::OwnerId;

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

macro_rules! event_types {
    ($($(#[$doc:meta])* $variant:ident = $text:literal),+ $(,)?) => {
        /// What an endpoint can be told about.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum WebhookEventType {
            $($(#[$doc])* $variant),+
        }

        impl WebhookEventType {
            /// Every type, in declaration order.
            pub const ALL: &'static [WebhookEventType] = &[$(WebhookEventType::$variant),+];

            /// The type's name, in subscriptions and in the message's `type`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(WebhookEventType::$variant => $text),+
                }
            }
        }

        impl FromStr for WebhookEventType {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                match text {
                    $($text => Ok(WebhookEventType::$variant),)+
                    _ => Err(format!("unknown event type '{text}'")),
                }
            }
        }
    };
}

event_types!(
    /// An attempt won: the job succeeded, with its result.
    JobSucceeded = "job.succeeded",
    /// The job's last attempt failed and the retry policy added none.
    JobFailed = "job.failed",
    /// The job's outcome is unknown until its unknown attempts are settled.
    JobUnknown = "job.unknown",
    /// The job was canceled.
    JobCanceled = "job.canceled",
    /// An attempt's outcome became unknown.
    AttemptUnknown = "attempt.unknown",
    /// An attempt's output came after another had won.
    AttemptSuperseded = "attempt.superseded",
);

impl fmt::Display for WebhookEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A new signing secret: 24 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 24];
    getrandom::fill(&mut key).expect("the operating system's random source");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The `webhook-signature` value of a message signed with each of
/// `secrets` (the current one first): `v1,<base64>` each, separated by
/// spaces. A secret that is not `whsec_` and base64 signs nothing.
pub fn signature(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut signed = Vec::with_capacity(secrets.len());
    for secret in secrets {
        let Some(key) = secret.strip_prefix(SECRET_PREFIX).and_then(|key| STANDARD.decode(key).ok()) else { continue };
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        signed.push(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())));
    }
    signed.join(" ")
}

/// How far a signed message's `webhook-timestamp` may be from now, in
/// seconds, for its signature to be taken: an older one may be a replay.
pub const SIGNATURE_TOLERANCE_SECS: i64 = 5 * 60;

/// Whether `signatures` (a `webhook-signature` value) holds a signature of
/// the message `id`, `timestamp`, `body` under `secret` (`whsec_` and the
/// base64 of the key; Replicate's signing secret is one), compared in
/// constant time, with `timestamp` within [`SIGNATURE_TOLERANCE_SECS`] of
/// `now`. Why not, otherwise.
pub fn verify(secret: &str, id: &str, timestamp: &str, signatures: &str, body: &[u8], now: i64) -> Result<(), String> {
    use subtle::ConstantTimeEq;
    let Ok(sent_at) = timestamp.parse::<i64>() else { return Err("webhook-timestamp is not a number".into()) };
    let off = now.abs_diff(sent_at);
    if off > SIGNATURE_TOLERANCE_SECS.unsigned_abs() {
        return Err(format!("webhook-timestamp is {off} s from now"));
    }
    let expected = signature(&[secret], id, sent_at, body);
    let Some(expected) = expected.strip_prefix("v1,") else {
        return Err("the signing secret is not whsec_ and base64".into());
    };
    let matches = signatures
        .split(' ')
        .filter_map(|signed| signed.strip_prefix("v1,"))
        .any(|signed| bool::from(signed.as_bytes().ct_eq(expected.as_bytes())));
    if matches { Ok(()) } else { Err("no signature in webhook-signature is the message's".into()) }
}

/// An endpoint to store.
#[derive(Clone)]
pub struct NewEndpoint {
    /// Its owner: it hears of this owner's jobs only.
    pub owner: OwnerId,
    /// Its id.
    pub id: Uuid,
    /// Where deliveries are posted (checked before it gets here).
    pub url: String,
    /// For people.
    pub description: Option<String>,
    /// The signing secret.
    pub secret: String,
    /// What it hears of (at least one).
    pub events: Vec<WebhookEventType>,
}

impl std::fmt::Debug for NewEndpoint {
    /// Without its secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewEndpoint")
            .field("owner", &self.owner)
            .field("id", &self.id)
            .field("events", &self.events)
            .finish()
    }
}

/// A stored endpoint, without its secrets.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Endpoint {
    /// Its id.
    pub id: Uuid,
    /// Where deliveries are posted.
    pub url: String,
    /// For people.
    pub description: Option<String>,
    /// What it hears of, by name, sorted.
    pub events: Vec<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// Until when the secret before the last rotation still signs.
    pub previous_secret_until: Option<DateTime<Utc>>,
    /// When it stopped hearing (its receiver answered 410 Gone).
    pub disabled_at: Option<DateTime<Utc>>,
    /// Why.
    pub disabled_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_signed_as_the_specifications_example_is() {
        // The example of the Standard Webhooks reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let signed = signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let both =
            signature(&[&new_secret(), secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert!(both.ends_with(" v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="), "{both}");
        assert_eq!(signature(&["not-a-secret"], "id", 1, b""), "");
    }

    #[test]
    fn a_signature_is_verified_only_for_its_message_its_secret_and_a_recent_time() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let (id, at, body) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", br#"{"test": 2432232314}"#.as_slice());
        let signed = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(verify(secret, id, at, signed, body, 1614265330), Ok(()));
        assert_eq!(
            verify(secret, id, at, &format!("v1,AAAA {signed}"), body, 1614265330 + 299),
            Ok(()),
            "any of several"
        );
        assert!(verify(secret, id, at, signed, b"{\"test\": 1}", 1614265330).is_err(), "another body");
        assert!(verify(secret, "msg_other", at, signed, body, 1614265330).is_err(), "another id");
        assert!(verify(&new_secret(), id, at, signed, body, 1614265330).is_err(), "another secret");
        assert!(verify(secret, id, at, signed, body, 1614265330 + 301).unwrap_err().contains("from now"), "too old");
        assert!(verify(secret, id, at, "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", body, 1614265330).is_err());
        assert!(verify(secret, id, "soon", signed, body, 1614265330).is_err());
    }

    #[test]
    fn event_types_round_trip_through_their_names() {
        for kind in WebhookEventType::ALL {
            assert_eq!(kind.as_str().parse::<WebhookEventType>().unwrap(), *kind);
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(WebhookEventType::JobSucceeded.to_string(), "job.succeeded");
        assert!("job.done".parse::<WebhookEventType>().is_err());
    }
}
