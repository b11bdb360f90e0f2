//! fal's webhook signature: ED25519 over the lines `X-Fal-Webhook-Request-Id`,
//! `X-Fal-Webhook-User-Id`, `X-Fal-Webhook-Timestamp` and the hex SHA-256
//! of the body, the signature in hex in `X-Fal-Webhook-Signature`, by one
//! of the keys fal publishes as a JSON Web Key Set. The keys are fetched
//! at the first callback and again when no key verifies a signature (they
//! were rotated), at most once a minute; a timestamp more than five
//! minutes away is refused (a replay).

use base64::Engine as _;
use sha2::Digest as _;

use super::CallbackRefusal;

/// How long after fetching the keys a signature none of them verifies has
/// them fetched again.
const REFETCH_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The largest distance, in seconds, between a callback's timestamp and now.
const TOLERANCE_SECS: i64 = 300;

/// The largest key set read.
const MAX_JWKS_BYTES: usize = 64 * 1024;

/// A provider's published keys, fetched when needed.
pub(super) struct Keys {
    url: String,
    client: reqwest::Client,
    kept: tokio::sync::Mutex<Option<(Vec<Vec<u8>>, std::time::Instant)>>,
}

impl Keys {
    /// The keys published at `url`.
    pub(super) fn new(url: &str, client: reqwest::Client) -> Self {
        Self { url: url.to_owned(), client, kept: tokio::sync::Mutex::new(None) }
    }

    /// Whether a callback with `headers` and `body` is signed by one of the keys.
    pub(super) async fn verify(
        &self,
        headers: &reqwest::header::HeaderMap,
        body: &[u8],
    ) -> Result<(), CallbackRefusal> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let request_id = header("x-fal-webhook-request-id");
        let user_id = header("x-fal-webhook-user-id");
        let timestamp = header("x-fal-webhook-timestamp");
        let signature = hex::decode(header("x-fal-webhook-signature"))
            .map_err(|_| CallbackRefusal::NotSigned("no hex signature in X-Fal-Webhook-Signature".into()))?;
        let at: i64 = timestamp.parse().map_err(|_| CallbackRefusal::NotSigned("no timestamp".into()))?;
        if at.abs_diff(chrono::Utc::now().timestamp()) > TOLERANCE_SECS as u64 {
            return Err(CallbackRefusal::NotSigned("its timestamp is more than five minutes away".into()));
        }
        let message = format!("{request_id}\n{user_id}\n{timestamp}\n{}", hex::encode(sha2::Sha256::digest(body)));
        let mut again = false;
        loop {
            let keys = self.keys(again).await.map_err(CallbackRefusal::CannotVerify)?;
            let verifies = keys.iter().any(|key| {
                ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
                    .verify(message.as_bytes(), &signature)
                    .is_ok()
            });
            match (verifies, again) {
                (true, _) => return Ok(()),
                (false, true) => return Err(CallbackRefusal::NotSigned("no published key verifies it".into())),
                // The keys may have been rotated since they were fetched.
                (false, false) => again = true,
            }
        }
    }

    /// The keys: those fetched before, unless `again` and that was over a
    /// minute ago.
    async fn keys(&self, again: bool) -> Result<Vec<Vec<u8>>, String> {
        let mut kept = self.kept.lock().await;
        if let Some((keys, fetched)) = kept.as_ref()
            && (!again || fetched.elapsed() < REFETCH_AFTER)
        {
            return Ok(keys.clone());
        }
        let asked = self.client.get(&self.url).timeout(std::time::Duration::from_secs(10));
        let answer = asked.send().await.map_err(|e| format!("the signing keys could not be fetched: {e}"))?;
        let status = answer.status().as_u16();
        let (said, _) = super::openai::read_bounded(answer, MAX_JWKS_BYTES).await.map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("the signing keys were answered {status}"));
        }
        let keys = ed25519_keys(&said);
        if keys.is_empty() {
            return Err("the key set has no ED25519 key".into());
        }
        *kept = Some((keys.clone(), std::time::Instant::now()));
        Ok(keys)
    }
}

/// The ED25519 public keys of a JSON Web Key Set (`kty` OKP, `crv`
/// Ed25519, `x` in unpadded base64url).
fn ed25519_keys(jwks: &[u8]) -> Vec<Vec<u8>> {
    let Ok(set) = serde_json::from_slice::<serde_json::Value>(jwks) else { return Vec::new() };
    let keys = set.get("keys").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    keys.iter()
        .filter(|key| key.get("kty").and_then(|v| v.as_str()) == Some("OKP"))
        .filter(|key| key.get("crv").and_then(|v| v.as_str()) == Some("Ed25519"))
        .filter_map(|key| key.get("x")?.as_str())
        .filter_map(|x| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(x.trim_end_matches('=')).ok())
        .filter(|key| key.len() == 32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ed25519_keys_of_the_set_are_taken() {
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 32]);
        let set = serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": x},
            {"kty": "OKP", "crv": "X25519", "x": x},
            {"kty": "EC", "crv": "P-256", "x": x},
            {"kty": "OKP", "crv": "Ed25519", "x": "short"},
        ]});
        assert_eq!(ed25519_keys(set.to_string().as_bytes()), vec![vec![7u8; 32]]);
        assert!(ed25519_keys(b"not json").is_empty());
    }
}
