//! The callback URL of each attempt whose provider calls back:
//! `{public_url}/callbacks/{job}/{number}/{token}`, the token an
//! HMAC-SHA256 of the job and the attempt's number under the server's
//! callback secret, which the migrations made, the same for every replica
//! (see [`crate::callbacks`], which receives them).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::JobId;
use crate::store::{Store, StoreError};

/// Where providers call back, and the tokens that make a callback URL.
pub(crate) struct CallbackUrls {
    store: Store,
    /// The server's public URL, without a trailing slash.
    base: Option<String>,
    secret: tokio::sync::OnceCell<Vec<u8>>,
}

impl CallbackUrls {
    /// Callbacks to `base` (the server's public URL; `None` in a process
    /// that runs no API and was given none).
    pub(crate) fn new(store: Store, base: Option<String>) -> Self {
        let base = base.map(|base| base.trim_end_matches('/').to_owned());
        Self { store, base, secret: tokio::sync::OnceCell::new() }
    }

    /// Whether this process knows a URL at which providers can call it back.
    pub(crate) fn can_be_called_back(&self) -> bool {
        self.base.is_some()
    }

    /// What names this database (a hash of its callback secret, which its
    /// migrations made): how a blob store tells its own database apart.
    pub(crate) async fn database_identity(&self) -> Result<String, StoreError> {
        let mut mac = self.mac_of(b"the database's identity").await?;
        mac.update(b"files");
        Ok(hex::encode(&mac.finalize().into_bytes()[..16]))
    }

    /// The callback URL of an attempt; `None` where this process knows no
    /// public URL for the API.
    pub(crate) async fn url_for(&self, job: JobId, number: i32) -> Result<Option<String>, StoreError> {
        let Some(base) = &self.base else { return Ok(None) };
        let token = hex::encode(self.mac(job, number).await?.finalize().into_bytes());
        Ok(Some(format!("{base}/callbacks/{job}/{number}/{token}")))
    }

    /// Whether `token` is the token of the attempt's callback URL,
    /// compared in constant time.
    pub(crate) async fn verify(&self, job: JobId, number: i32, token: &str) -> Result<bool, StoreError> {
        let Ok(given) = hex::decode(token) else { return Ok(false) };
        Ok(self.mac(job, number).await?.verify_slice(&given).is_ok())
    }

    async fn mac(&self, job: JobId, number: i32) -> Result<Hmac<Sha256>, StoreError> {
        self.mac_of(format!("{job}/{number}").as_bytes()).await
    }

    /// An HMAC under the callback secret, begun with `message`.
    async fn mac_of(&self, message: &[u8]) -> Result<Hmac<Sha256>, StoreError> {
        let secret = self
            .secret
            .get_or_try_init(|| async {
                match self.store.callback_secret().await? {
                    Some(secret) => Ok(secret.into_bytes()),
                    None => Err(StoreError::Corrupt("the database has no callback secret (server_secrets)".into())),
                }
            })
            .await?;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(message);
        Ok(mac)
    }
}
