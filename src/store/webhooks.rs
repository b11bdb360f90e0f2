//! Webhooks as the store keeps them (the statements are each backend's
//! `webhooks.rs`, with the same function names and arguments on both; who
//! may register what, and how a delivery is sent, are
//! [`crate::webhooks`]'s).
//!
//! An endpoint belongs to one owner and hears only of that owner's jobs.
//! **The outbox:** a delivery row is inserted by
//! [`super::driver::DriverTx::enqueue_webhook`] in the transaction of the
//! transition that causes it, one per subscribed endpoint, with its body as
//! it will be signed and sent; a rolled-back transition leaves none, and a
//! committed one is sent after any crash. Deliveries are claimed under a
//! lease (`next_at` moved past it), so a process that dies mid-send leaves
//! its claim to another after the lease; each try is recorded.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::FromRow;
use uuid::Uuid;

use super::Store;
use super::rows::Stamp;
use super::{Result, corrupt};
use crate::domain::webhook::WebhookEventType;
use crate::domain::{JobId, OwnerId};

pub use crate::domain::webhook::{Endpoint, NewEndpoint};

/// An endpoint row, its subscriptions joined by commas, as both databases
/// select it.
#[derive(FromRow)]
pub(crate) struct EndpointRow {
    id: Uuid,
    url: String,
    description: Option<String>,
    events: Option<String>,
    created_at: Stamp,
    previous_until: Option<Stamp>,
    disabled_at: Option<Stamp>,
    disabled_reason: Option<String>,
}

impl From<EndpointRow> for Endpoint {
    fn from(row: EndpointRow) -> Self {
        let mut events: Vec<String> =
            row.events.unwrap_or_default().split(',').filter(|e| !e.is_empty()).map(str::to_owned).collect();
        events.sort();
        Endpoint {
            id: row.id,
            url: row.url,
            description: row.description,
            events,
            created_at: row.created_at.0,
            previous_secret_until: row.previous_until.map(|s| s.0),
            disabled_at: row.disabled_at.map(|s| s.0),
            disabled_reason: row.disabled_reason,
        }
    }
}

/// A message for an owner's endpoints subscribed to its type, written by a
/// transition in its own transaction.
#[derive(Clone, Debug)]
pub struct Outgoing<'a> {
    /// Whose job.
    pub owner: &'a OwnerId,
    /// Which job.
    pub job_id: JobId,
    /// Its type.
    pub event: WebhookEventType,
    /// Its body, as it will be signed and sent.
    pub payload: String,
}

/// A delivery claimed for sending, with its endpoint's address and secrets.
#[derive(Clone)]
pub struct ClaimedDelivery {
    /// The message's id (`webhook-id` is `msg_` and this).
    pub id: Uuid,
    /// Its owner.
    pub owner: OwnerId,
    /// Where it goes.
    pub url: String,
    /// Its body.
    pub payload: String,
    /// This try's number (1 for the first).
    pub number: i32,
    /// When it was written: past the retry period, it is given up.
    pub created_at: DateTime<Utc>,
    /// The secrets that sign it: the current one, and the one before the
    /// last rotation while it still signs.
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for ClaimedDelivery {
    /// Without its secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedDelivery")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("number", &self.number)
            .finish()
    }
}

/// A claimed delivery's row, as both databases return it.
#[derive(FromRow)]
pub(crate) struct ClaimedRow {
    id: Uuid,
    owner_id: String,
    url: String,
    payload: String,
    tries: i32,
    created_at: Stamp,
    secret: String,
    previous_secret: Option<String>,
}

impl From<ClaimedRow> for ClaimedDelivery {
    fn from(row: ClaimedRow) -> Self {
        let mut secrets = vec![row.secret];
        secrets.extend(row.previous_secret);
        ClaimedDelivery {
            id: row.id,
            owner: OwnerId::from_trusted(row.owner_id),
            url: row.url,
            payload: row.payload,
            number: row.tries,
            created_at: row.created_at.0,
            secrets,
        }
    }
}

/// What became of one try of a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TryOutcome {
    /// A 2xx: delivered.
    Delivered,
    /// Not delivered; tried again after this long.
    Retry(Duration),
    /// Not delivered, and not tried again: the retry period is over.
    GiveUp,
    /// 410 Gone: not delivered, and the endpoint is disabled.
    Gone,
}

/// One try of a delivery, to record.
#[derive(Clone, Debug)]
pub struct DeliveryTry {
    /// The delivery.
    pub delivery_id: Uuid,
    /// Whose.
    pub owner: OwnerId,
    /// Which try.
    pub number: i32,
    /// The answer's status, if one came.
    pub status: Option<u16>,
    /// How long it took.
    pub latency: Duration,
    /// What went wrong, for people (never a secret).
    pub error: Option<String>,
    /// What follows.
    pub outcome: TryOutcome,
}

/// A delivery as `GET /webhooks/{id}/deliveries` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Delivery {
    /// The message's id, as sent in `webhook-id`.
    pub id: String,
    /// The job it tells of.
    pub job_id: JobId,
    /// Its type.
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// When it was delivered or given up.
    pub finished_at: Option<DateTime<Utc>>,
    /// Each try, the first first.
    pub tries: Vec<TryRecord>,
}

/// One recorded try.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TryRecord {
    /// Which try.
    pub number: i32,
    /// When.
    pub at: DateTime<Utc>,
    /// The answer's status, if one came.
    pub status: Option<i32>,
    /// How long it took.
    pub latency_ms: i32,
    /// What went wrong.
    pub error: Option<String>,
}

/// A delivery row, as both databases select it.
#[derive(FromRow)]
pub(crate) struct DeliveryRow {
    pub(crate) id: Uuid,
    job_id: Uuid,
    event_type: String,
    state: String,
    created_at: Stamp,
    finished_at: Option<Stamp>,
}

impl DeliveryRow {
    /// The delivery, with its tries.
    pub(crate) fn with_tries(self, tries: Vec<TryRecord>) -> Delivery {
        Delivery {
            id: message_id(self.id),
            job_id: JobId(self.job_id),
            event_type: self.event_type,
            state: self.state,
            created_at: self.created_at.0,
            finished_at: self.finished_at.map(|s| s.0),
            tries,
        }
    }
}

/// A try row, with the delivery it belongs to.
#[derive(FromRow)]
pub(crate) struct TryRow {
    delivery_id: Uuid,
    number: i32,
    at: Stamp,
    status: Option<i32>,
    latency_ms: i32,
    error: Option<String>,
}

/// The `webhook-id` of a delivery.
pub(crate) fn message_id(id: Uuid) -> String {
    format!("msg_{}", id.simple())
}

/// How long a claimed delivery stays claimed: its request's timeout, and
/// as long again.
pub(crate) fn claim_lease(timeout: Duration) -> Duration {
    timeout * 2
}

/// Splits tries by delivery, keeping their order.
pub(crate) fn attach_tries(rows: Vec<DeliveryRow>, tries: Vec<TryRow>) -> Vec<Delivery> {
    let mut by_delivery: std::collections::HashMap<Uuid, Vec<TryRecord>> = std::collections::HashMap::new();
    for row in tries {
        let record = TryRecord {
            number: row.number,
            at: row.at.0,
            status: row.status,
            latency_ms: row.latency_ms,
            error: row.error,
        };
        by_delivery.entry(row.delivery_id).or_default().push(record);
    }
    rows.into_iter()
        .map(|row| {
            let tries = by_delivery.remove(&row.id).unwrap_or_default();
            row.with_tries(tries)
        })
        .collect()
}

/// A status as stored.
pub(crate) fn stored_status(status: Option<u16>) -> Option<i32> {
    status.map(i32::from)
}

/// A latency as stored (milliseconds, saturating).
pub(crate) fn stored_latency(latency: Duration) -> i32 {
    i32::try_from(latency.as_millis()).unwrap_or(i32::MAX)
}

/// The delivery's state after a try.
pub(crate) fn state_after(outcome: &TryOutcome) -> &'static str {
    match outcome {
        TryOutcome::Delivered => "delivered",
        TryOutcome::Retry(_) => "pending",
        TryOutcome::GiveUp | TryOutcome::Gone => "failed",
    }
}

/// A new endpoint must hear of at least one event type.
pub(crate) fn check_events(events: &[WebhookEventType]) -> Result<()> {
    if events.is_empty() {
        return Err(corrupt("an endpoint must hear of at least one event type"));
    }
    Ok(())
}

impl Store {
    /// Stores an endpoint and its subscriptions, unless its owner has
    /// `max_per_owner` endpoints already (`None`): registrations of one
    /// owner take turns, so the limit holds across processes.
    pub async fn insert_webhook_endpoint(&self, new: &NewEndpoint, max_per_owner: u32) -> Result<Option<Endpoint>> {
        self.driver().insert_webhook_endpoint(new, max_per_owner).await
    }

    /// An owner's endpoints, the oldest first.
    pub async fn list_webhook_endpoints(&self, owner: &OwnerId) -> Result<Vec<Endpoint>> {
        self.driver().list_webhook_endpoints(owner).await
    }

    /// Deletes an owner's endpoint with its deliveries; `false` when it had none such.
    pub async fn delete_webhook_endpoint(&self, owner: &OwnerId, id: Uuid) -> Result<bool> {
        self.driver().delete_webhook_endpoint(owner, id).await
    }

    /// Gives an owner's endpoint a new secret; the old one still signs for
    /// `keep_old`. `None` when it has no such endpoint.
    pub async fn rotate_webhook_secret(
        &self,
        owner: &OwnerId,
        id: Uuid,
        secret: &str,
        keep_old: Duration,
    ) -> Result<Option<Endpoint>> {
        self.driver().rotate_webhook_secret(owner, id, secret, keep_old).await
    }

    /// The latest `limit` deliveries to an owner's endpoint, each with its
    /// tries; `None` when it has no such endpoint.
    pub async fn list_webhook_deliveries(
        &self,
        owner: &OwnerId,
        endpoint: Uuid,
        limit: u32,
    ) -> Result<Option<Vec<Delivery>>> {
        self.driver().list_webhook_deliveries(owner, endpoint, limit).await
    }

    /// Whether any delivery is due: a read, for a deliverer that found
    /// nothing to claim (a claim writes, and on SQLite waits for the writer).
    pub async fn has_due_webhook_deliveries(&self) -> Result<bool> {
        self.driver().has_due_webhook_deliveries().await
    }

    /// Claims up to `max` due deliveries of live endpoints for `lease`,
    /// none of the owners in `skip` (those at their limit in flight).
    pub async fn claim_webhook_deliveries(
        &self,
        max: u32,
        lease: Duration,
        skip: &[OwnerId],
    ) -> Result<Vec<ClaimedDelivery>> {
        let skip: Vec<String> = skip.iter().map(|owner| owner.as_str().to_owned()).collect();
        self.driver().claim_webhook_deliveries(max, lease, &skip).await
    }

    /// Gives claimed deliveries of `owner` back untried: due again at once,
    /// their try not counted.
    pub async fn release_webhook_deliveries(&self, owner: &OwnerId, ids: &[Uuid]) -> Result<()> {
        self.driver().release_webhook_deliveries(owner, ids).await
    }

    /// Records tries of claimed deliveries, and what follows from each, in
    /// one transaction.
    pub async fn record_webhook_tries(&self, done: &[DeliveryTry]) -> Result<()> {
        self.driver().record_webhook_tries(done).await
    }
}
