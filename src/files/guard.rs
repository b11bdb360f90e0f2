//! One keep at a time per attempt, in this process, and what an attempt's
//! keep made remembered for a while. The same outcome may be kept twice at
//! once (a provider's webhook and the worker's lookup of the same
//! prediction); both write the same names, so a second keep whose fetch
//! failed would remove the files the first one's recorded output names.
//! An attempt is one provider job, whose output is the same however it is
//! told: a second keep of an attempt takes the first one's result instead,
//! and fetches nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::domain::JobId;
use crate::sync::LockAnyway as _;

/// How long an attempt's kept output is remembered after its last keep.
const REMEMBER: Duration = Duration::from_secs(600);

/// How often slots past [`REMEMBER`] are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// A slot per attempt being kept, or kept lately: the output its keep
/// made, its files named.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Value>>>;

/// The attempts' slots.
pub(super) struct Keeps {
    slots: std::sync::Mutex<Slots>,
}

/// Each attempt's slot with when it was last used, and when slots were
/// last pruned.
struct Slots {
    by_attempt: HashMap<(JobId, i32), (Slot, Instant)>,
    pruned: Instant,
}

impl Default for Keeps {
    fn default() -> Self {
        Self { slots: std::sync::Mutex::new(Slots { by_attempt: HashMap::new(), pruned: Instant::now() }) }
    }
}

impl Keeps {
    /// The slot of attempt `number` of `job`; slots unused for
    /// [`REMEMBER`] that nobody holds are forgotten, looked for at most
    /// once a minute.
    pub(super) fn slot(&self, job: JobId, number: i32) -> Slot {
        let mut slots = self.slots.lock_anyway();
        if slots.pruned.elapsed() >= PRUNE_EVERY {
            slots.by_attempt.retain(|_, (slot, used)| used.elapsed() < REMEMBER || Arc::strong_count(slot) > 1);
            slots.pruned = Instant::now();
        }
        let (slot, used) = slots.by_attempt.entry((job, number)).or_insert_with(|| (Slot::default(), Instant::now()));
        *used = Instant::now();
        slot.clone()
    }
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
