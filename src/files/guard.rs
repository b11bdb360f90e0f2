//! One keep at a time per attempt, in this process, and what an attempt's
//! keep made remembered for a while. The same outcome may be kept twice at
//! once (a provider's webhook and the worker's lookup of the same
//! prediction); both write the same names, so a second keep whose fetch
//! failed would remove the files the first one's recorded output names.
//! A keep of an output already kept for the attempt takes that keep's
//! result instead, and fetches nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::domain::JobId;
use crate::sync::LockAnyway as _;

/// How long an attempt's kept output is remembered after its last keep.
const REMEMBER: Duration = Duration::from_secs(600);

/// What an attempt's keep made: the digest of the output it was given, and
/// that output with its files named.
pub(super) struct Kept {
    source: [u8; 32],
    output: Value,
}

impl Kept {
    /// The keep of the output whose [`digest`] is `source` that made `output`.
    pub(super) fn new(source: [u8; 32], output: &Value) -> Self {
        Self { source, output: output.clone() }
    }

    /// The output this keep made of the output whose digest is `source`,
    /// if it was given that.
    pub(super) fn of(&self, source: [u8; 32]) -> Option<&Value> {
        (self.source == source).then_some(&self.output)
    }
}

/// A slot per attempt being kept, or kept lately.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Kept>>>;

/// The attempts' slots.
#[derive(Default)]
pub(super) struct Keeps {
    slots: std::sync::Mutex<HashMap<(JobId, i32), (Slot, Instant)>>,
}

impl Keeps {
    /// The slot of attempt `number` of `job`; slots unused for
    /// [`REMEMBER`] that nobody holds are forgotten.
    pub(super) fn slot(&self, job: JobId, number: i32) -> Slot {
        let mut slots = self.slots.lock_anyway();
        slots.retain(|_, (slot, used)| used.elapsed() < REMEMBER || Arc::strong_count(slot) > 1);
        let (slot, used) = slots.entry((job, number)).or_insert_with(|| (Slot::default(), Instant::now()));
        *used = Instant::now();
        slot.clone()
    }
}

/// The SHA-256 of `output` as JSON, hashed as it is written (an output
/// may hold tens of megabytes of files inline).
pub(super) fn digest(output: &Value) -> [u8; 32] {
    let mut hasher = Sha256::new();
    serde_json::to_writer(&mut hasher, output).expect("a JSON value is written");
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use axum::response::IntoResponse as _;

    use super::super::Files;
    use super::*;

    #[tokio::test]
    async fn an_output_kept_again_after_its_file_cannot_be_fetched_keeps_the_first_keeps_file() {
        // A store that serves its PNG once, then answers 503.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let counted = served.clone();
        let store = axum::Router::new().route(
            "/a.png",
            axum::routing::get(move || {
                let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    match first {
                        true => ([("content-type", "image/png")], b"\x89PNG first".to_vec()).into_response(),
                        false => axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response(),
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, store).await });
        let dir = std::env::temp_dir().join(format!("onejob-keeps-{}", uuid::Uuid::now_v7()));
        let files = Files::new(dir.clone(), &["127.0.0.1".to_owned()]);
        let rules: crate::config::FileRules = toml::from_str("types = [\"image/png\"]").unwrap();
        let job = JobId(uuid::Uuid::now_v7());
        let output = json!({"image": format!("http://{address}/a.png")});
        let mut first = output.clone();
        files.keep(job, 1, &mut first, &rules).await.unwrap();
        // The same outcome again (its webhook after the lookup's): the
        // first keep's names, nothing fetched, nothing removed.
        let mut again = output.clone();
        files.keep(job, 1, &mut again, &rules).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(served.load(Ordering::SeqCst), 1, "fetched once");
        assert!(files.find(job, "1-0.png").await.is_some(), "the first keep's file stays");
        // Another attempt's output is kept on its own.
        let mut other = output.clone();
        assert!(files.keep(job, 2, &mut other, &rules).await.is_err(), "the store answers 503 now");
        assert_eq!(other, output, "left as it was");
        let _ = std::fs::remove_dir_all(dir);
    }
}
