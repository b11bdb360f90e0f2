//! Webhooks: endpoints an owner registers (`POST /webhooks`, admin keys)
//! hear of that owner's jobs, signed as the Standard Webhooks
//! specification says ([`crate::domain::webhook`]). The transitions write
//! each message to the outbox in their own transaction
//! ([`crate::store::webhooks`]); the worker's deliverer, here, claims due
//! deliveries, posts them and records the tries in batches: a 2xx ends a delivery, 410
//! Gone disables its endpoint, anything else is tried again with
//! exponential backoff and jitter until `webhooks.retry_for_ms` has passed,
//! then the delivery is marked failed. Delivery is at least once: a
//! receiver drops duplicates by `webhook-id`.

pub(crate) mod address;
mod endpoints;

pub(crate) use endpoints::Endpoints;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use uuid::Uuid;

use crate::config::{WebhookSettings, duration};
use crate::domain::OwnerId;
use crate::domain::webhook::signature;
use crate::store::webhooks::{claim_lease, message_id};
use crate::store::{ClaimedDelivery, DeliveryTry, Store, TryOutcome};
use crate::sync::LockAnyway;
use address::{AllowedHosts, PublicResolver};

/// How long the secret before a rotation keeps signing.
pub(crate) const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// The most tries recorded in one transaction.
const RECORD_BATCH: usize = 256;

/// Sends the outbox's deliveries.
pub(crate) struct Deliverer {
    store: Store,
    settings: WebhookSettings,
    allowed: AllowedHosts,
    client: reqwest::Client,
}

impl Deliverer {
    /// A deliverer for `store`'s outbox.
    pub(crate) fn new(store: Store, settings: WebhookSettings) -> Self {
        let allowed = AllowedHosts::new(&settings.allow_hosts);
        // No proxy, whatever the environment says: through a proxy only the
        // proxy's address would be resolved, and the receiver's never checked.
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .dns_resolver(Arc::new(PublicResolver::new(allowed.clone())))
            .user_agent(concat!("onejob-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the webhook client builds");
        Self { store, settings, allowed, client }
    }

    /// Claims and sends due deliveries until `shutdown` turns true: up to
    /// `webhooks.concurrency` at once, and `max_in_flight_per_owner` of any
    /// one owner, claimed `batch_size` at a time as places free up, so that
    /// a slow receiver holds up only its own, and no owner takes every place. The
    /// tries in flight then finish (each is bounded by the timeout), and
    /// the last ones are recorded.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let poll = self.settings.poll_interval;
        let lease = claim_lease(self.settings.timeout);
        let places = Arc::new(Semaphore::new(self.settings.concurrency));
        let owners = OwnersInFlight::new(self.settings.max_in_flight_per_owner);
        let mut idle = false;
        let mut sends = JoinSet::new();
        let (records, finished) = mpsc::channel(self.settings.concurrency.max(1));
        let recorder = tokio::spawn(record(self.store.clone(), finished));
        while !*shutdown.borrow() {
            while sends.try_join_next().is_some() {}
            let free = places.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = sends.join_next() => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            // After a claim that found nothing, a read says whether one
            // would: an idle deliverer takes no write lock.
            if idle && !self.store.has_due_webhook_deliveries().await.unwrap_or(true) {
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let want = u32::try_from(free).unwrap_or(u32::MAX).min(self.settings.batch_size);
            let claimed = match self.store.claim_webhook_deliveries(want, lease, &owners.full()).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::warn!(%error, "claiming webhook deliveries failed; retrying");
                    Vec::new()
                }
            };
            let more = claimed.len() as u32 >= want;
            idle = claimed.is_empty();
            let mut over: HashMap<OwnerId, Vec<Uuid>> = HashMap::new();
            for delivery in claimed {
                let Some(owners_place) = owners.take(&delivery.owner) else {
                    over.entry(delivery.owner.clone()).or_default().push(delivery.id);
                    continue;
                };
                let place = places.clone().try_acquire_owned().expect("claimed no more than the free places");
                let (deliverer, records) = (self.clone(), records.clone());
                sends.spawn(async move {
                    let done = deliverer.deliver(delivery).await;
                    // The places are given back once the try is in line to be recorded.
                    let _ = records.send(done).await;
                    drop((place, owners_place));
                });
            }
            // Claimed in one batch past their owner's limit: due again at
            // once, for when the owner has a free place.
            for (owner, ids) in over {
                if let Err(error) = self.store.release_webhook_deliveries(&owner, &ids).await {
                    tracing::warn!(%error, deliveries = ids.len(), "giving back webhook deliveries failed; they are due again after their lease");
                }
            }
            if !more {
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        sends.join_all().await;
        drop(records);
        let _ = recorder.await;
    }

    /// Sends one delivery: the try to record.
    async fn deliver(&self, delivery: ClaimedDelivery) -> DeliveryTry {
        if let Some(park) = crate::failpoints::parked_at("webhook-before-send") {
            tokio::time::sleep(park).await;
        }
        let started = Instant::now();
        let (status, error) = self.send(&delivery).await;
        let latency = started.elapsed();
        let outcome = match status {
            Some(code) if (200..300).contains(&code) => TryOutcome::Delivered,
            Some(410) => TryOutcome::Gone,
            _ => self.retry_or_give_up(&delivery),
        };
        let endpoint = shown_url(&delivery.url);
        match &outcome {
            TryOutcome::Delivered => {
                tracing::info!(delivery = %message_id(delivery.id), endpoint, try_number = delivery.number, ?status, "webhook delivered")
            }
            other => {
                tracing::warn!(delivery = %message_id(delivery.id), endpoint, try_number = delivery.number, ?status,
                                    error = error.as_deref().unwrap_or(""), outcome = ?other, "webhook not delivered")
            }
        }
        DeliveryTry {
            delivery_id: delivery.id,
            owner: delivery.owner.clone(),
            number: delivery.number,
            status,
            latency,
            error,
            outcome,
        }
    }

    /// Posts the delivery: the answer's status, or why there was none (a
    /// non-2xx answer is recorded by its status alone).
    async fn send(&self, delivery: &ClaimedDelivery) -> (Option<u16>, Option<String>) {
        if let Err(refusal) = address::check_form(&delivery.url, &self.allowed) {
            return (None, Some(refusal));
        }
        let id = message_id(delivery.id);
        let timestamp = chrono::Utc::now().timestamp();
        let secrets: Vec<&str> = delivery.secrets.iter().map(String::as_str).collect();
        let signed = signature(&secrets, &id, timestamp, delivery.payload.as_bytes());
        let request = self
            .client
            .post(&delivery.url)
            .header("content-type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signed)
            .body(delivery.payload.clone());
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(error) => return (None, Some(describe(&error))),
        };
        let status = response.status().as_u16();
        // At most a small part of the answer is read (and dropped), so that
        // the connection may serve the next delivery.
        let mut read = 0;
        while read < self.settings.max_response_bytes {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        if response.status().is_success() {
            return (Some(status), None);
        }
        // Its status alone is recorded: its body is the receiver's, and
        // would let an endpoint's owner read any page an endpoint may name.
        (Some(status), Some(format!("answered {status}")))
    }

    /// Tried again after a backoff, unless that would pass the retry period.
    fn retry_or_give_up(&self, delivery: &ClaimedDelivery) -> TryOutcome {
        let wait = backoff(&self.settings, delivery.number);
        let age = (chrono::Utc::now() - delivery.created_at).to_std().unwrap_or_default();
        if age + wait > self.settings.retry_for { TryOutcome::GiveUp } else { TryOutcome::Retry(wait) }
    }
}

/// How many deliveries of each owner are being sent, each counted by a
/// place that gives itself back when dropped.
struct OwnersInFlight {
    most: usize,
    sending: Arc<Mutex<HashMap<OwnerId, usize>>>,
}

/// A place among an owner's deliveries in flight.
struct OwnersPlace {
    owner: OwnerId,
    sending: Arc<Mutex<HashMap<OwnerId, usize>>>,
}

impl OwnersInFlight {
    fn new(most: usize) -> Self {
        Self { most: most.max(1), sending: Arc::default() }
    }

    /// The owners with no free place.
    fn full(&self) -> Vec<OwnerId> {
        let sending = self.sending.lock_anyway();
        sending.iter().filter(|(_, n)| **n >= self.most).map(|(owner, _)| owner.clone()).collect()
    }

    /// A place for one more delivery of `owner`, if it has one free.
    fn take(&self, owner: &OwnerId) -> Option<OwnersPlace> {
        let mut sending = self.sending.lock_anyway();
        let taken = sending.entry(owner.clone()).or_default();
        if *taken >= self.most {
            return None;
        }
        *taken += 1;
        Some(OwnersPlace { owner: owner.clone(), sending: self.sending.clone() })
    }
}

impl Drop for OwnersPlace {
    fn drop(&mut self) {
        let mut sending = self.sending.lock_anyway();
        if let Some(taken) = sending.get_mut(&self.owner) {
            *taken -= 1;
            if *taken == 0 {
                sending.remove(&self.owner);
            }
        }
    }
}

/// Records the tries as they come, each batch of those waiting (up to
/// [`RECORD_BATCH`]) in one transaction, until every sender is gone.
async fn record(store: Store, mut finished: mpsc::Receiver<DeliveryTry>) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while finished.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        if let Err(error) = store.record_webhook_tries(&batch).await {
            // The claims' lease runs out, and the deliveries are tried again.
            tracing::warn!(%error, tries = batch.len(), "recording webhook tries failed; the deliveries will be tried again");
        }
        batch.clear();
    }
}

/// The wait after the `number`th try: `retry_base_ms` doubled each try, at
/// most `retry_max_ms`, and a random part of its second half (jitter), so
/// that deliveries failed together do not all come back together.
pub(crate) fn backoff(settings: &WebhookSettings, number: i32) -> Duration {
    let doublings = u32::try_from(number.saturating_sub(1)).unwrap_or(0).min(30);
    let full = duration::saturating_millis(settings.retry_base.saturating_mul(1 << doublings).min(settings.retry_max));
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).expect("the operating system's random source");
    let half = full / 2;
    Duration::from_millis(half + u64::from_le_bytes(random) % (full - half + 1))
}

/// A URL as logs show it: scheme, host and path, never its query (which
/// may carry a token).
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => format!("{}://{}{}", url.scheme(), url.host_str().unwrap_or(""), url.path()),
        Err(_) => "(not a URL)".into(),
    }
}

/// What kind of failure a request without an answer met, in onejob's own
/// words: never a library's or the operating system's message, nor the
/// URL, which would let an endpoint's owner probe the hosts and ports it
/// may name.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out".into();
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        if let Some(unresolved) = inner.downcast_ref::<address::Unresolved>() {
            return unresolved.to_string();
        }
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            let class = match io.kind() {
                ConnectionRefused => "connection refused",
                TimedOut => "timed out",
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => "connection closed",
                // What a TLS handshake that failed turns into.
                InvalidData => "TLS handshake failed",
                _ => continue_with(error),
            };
            return class.into();
        }
        source = inner.source();
    }
    continue_with(error).into()
}

/// The class of a failure no cause says more of.
fn continue_with(error: &reqwest::Error) -> &'static str {
    if error.is_connect() { "could not connect" } else { "no answer" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owners_places_are_bounded_and_given_back_an_owner_with_none_is_forgotten() {
        let owners = OwnersInFlight::new(2);
        let (alice, bob) = (OwnerId::parse("alice").unwrap(), OwnerId::parse("bob").unwrap());
        let places: Vec<OwnersPlace> = (0..3).filter_map(|_| owners.take(&alice)).collect();
        assert_eq!(places.len(), 2, "two places an owner");
        let bobs = owners.take(&bob).expect("another owner has places of its own");
        assert_eq!(owners.full(), vec![alice.clone()]);
        drop(places);
        drop(bobs);
        assert!(owners.sending.lock().unwrap().is_empty(), "every place given back: no owner left");
    }

    #[test]
    fn the_backoff_doubles_within_its_bounds_with_jitter_in_the_second_half() {
        let settings = WebhookSettings {
            retry_base: Duration::from_millis(1_000),
            retry_max: Duration::from_millis(10_000),
            ..WebhookSettings::default()
        };
        for _ in 0..100 {
            let first = backoff(&settings, 1).as_millis();
            assert!((500..=1_000).contains(&first), "{first}");
            let third = backoff(&settings, 3).as_millis();
            assert!((2_000..=4_000).contains(&third), "{third}");
            let late = backoff(&settings, 40).as_millis();
            assert!((5_000..=10_000).contains(&late), "{late}");
        }
    }

    #[test]
    fn logs_show_no_query_of_an_endpoint() {
        assert_eq!(shown_url("https://hooks.example.com/in?token=secret"), "https://hooks.example.com/in");
    }
}
