//! Webhook endpoints and the outbox's deliveries on SQLite. Times are this
//! process's clock (one machine, one clock); the single writer orders
//! claims, so no two processes claim one delivery.

use std::time::Duration;

use serde_json::json;
use sqlx::sqlite::SqlitePool;
use uuid::Uuid;

use super::super::Result;
use super::super::webhooks::{
    ClaimedDelivery, ClaimedRow, DeliveryTry, Endpoint, EndpointRow, NewEndpoint, TryOutcome, check_events,
    state_after, stored_latency, stored_status,
};
use super::{micros, now};
use crate::domain::OwnerId;

/// An owner's endpoints (or one), with their subscriptions joined. Binds:
/// owner, id or null, now.
const LIST_ENDPOINTS: &str = r#"select e.id, e.url, e.description, e.created_at,
        case when e.previous_until > ?3 then e.previous_until end as previous_until,
        e.disabled_at, e.disabled_reason,
        (select group_concat(s.event_type, ',') from webhook_subscriptions s
          where s.owner_id = e.owner_id and s.endpoint_id = e.id) as events
    from webhook_endpoints e
    where e.owner_id = ?1 and (?2 is null or e.id = ?2)
    order by e.created_at, e.id"#;

/// Claims due deliveries of live endpoints, moving each past its lease.
/// Binds: now, max, the lease's end, the owners to skip (a JSON array).
const CLAIM_DELIVERIES: &str = r#"update webhook_deliveries set tries = tries + 1, next_at = ?3
    where id in (
        select d.id from webhook_deliveries d
        join webhook_endpoints e on e.owner_id = d.owner_id and e.id = d.endpoint_id and e.disabled_at is null
        where d.state = 'pending' and d.next_at <= ?1 and d.owner_id not in (select value from json_each(?4))
        order by d.next_at limit ?2)
    returning id"#;

/// Whether any delivery is due. Binds: now.
const ANY_DUE_DELIVERY: &str =
    r#"select exists (select 1 from webhook_deliveries where state = 'pending' and next_at <= ?1)"#;

/// A claimed delivery of an owner given back untried: due at once, the
/// claim's try not counted. Binds: owner, id, now.
const RELEASE_DELIVERY: &str = r#"update webhook_deliveries set tries = tries - 1, next_at = ?3
    where owner_id = ?1 and id = ?2 and state = 'pending' and tries > 0"#;

/// A claimed delivery with its endpoint's address and secrets. Binds: id, now.
const CLAIMED: &str = r#"select d.id, d.owner_id, e.url, d.payload, d.tries, d.created_at, e.secret,
        case when e.previous_until > ?2 then e.previous_secret end as previous_secret
    from webhook_deliveries d join webhook_endpoints e on e.owner_id = d.owner_id and e.id = d.endpoint_id
    where d.id = ?1"#;

/// Deletes an owner's endpoint (its subscriptions and deliveries with it).
/// Binds: owner, id.
pub(super) const DELETE_WEBHOOK_ENDPOINT: &str = r#"delete from webhook_endpoints where owner_id = ?1 and id = ?2"#;

/// Whether an owner has the endpoint. Binds: owner, id.
pub(super) const ENDPOINT_EXISTS: &str =
    r#"select exists (select 1 from webhook_endpoints where owner_id = ?1 and id = ?2)"#;

/// An endpoint's latest deliveries. Binds: owner, endpoint, limit.
pub(super) const LIST_DELIVERIES: &str = r#"select id, job_id, event_type, state, created_at, finished_at from webhook_deliveries
    where owner_id = ?1 and endpoint_id = ?2 order by created_at desc, id desc limit ?3"#;

/// The tries of an endpoint's deliveries. Binds: owner, endpoint.
pub(super) const LIST_TRIES: &str = r#"select t.delivery_id, t.number, t.at, t.status, t.latency_ms, t.error
    from webhook_tries t join webhook_deliveries d on d.id = t.delivery_id
    where d.owner_id = ?1 and d.endpoint_id = ?2 order by t.delivery_id, t.number"#;

pub(super) async fn insert_webhook_endpoint(
    pool: &SqlitePool,
    new: &NewEndpoint,
    max_per_owner: u32,
) -> Result<Option<Endpoint>> {
    check_events(&new.events)?;
    let at = now();
    let mut tx = pool.begin().await?;
    // One statement counts and inserts: SQLite's one writer keeps the count
    // true until it commits.
    let inserted = sqlx::query(
        r#"insert into webhook_endpoints (owner_id, id, url, description, secret, created_at)
           select ?1, ?2, ?3, ?4, ?5, ?6 where (select count(*) from webhook_endpoints where owner_id = ?1) < ?7"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id)
    .bind(&new.url)
    .bind(&new.description)
    .bind(&new.secret)
    .bind(at)
    .bind(i64::from(max_per_owner))
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        return Ok(None);
    }
    let events: Vec<&str> = new.events.iter().map(|e| e.as_str()).collect();
    sqlx::query(
        r#"insert into webhook_subscriptions (owner_id, endpoint_id, event_type)
           select ?1, ?2, value from json_each(?3) where true on conflict do nothing"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id)
    .bind(serde_json::json!(events).to_string())
    .execute(&mut *tx)
    .await?;
    let row: EndpointRow =
        sqlx::query_as(LIST_ENDPOINTS).bind(new.owner.as_str()).bind(new.id).bind(at).fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(Some(row.into()))
}

pub(super) async fn list_webhook_endpoints(pool: &SqlitePool, owner: &OwnerId) -> Result<Vec<Endpoint>> {
    let rows: Vec<EndpointRow> =
        sqlx::query_as(LIST_ENDPOINTS).bind(owner.as_str()).bind(None::<Uuid>).bind(now()).fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn rotate_webhook_secret(
    pool: &SqlitePool,
    owner: &OwnerId,
    id: Uuid,
    secret: &str,
    keep_old: Duration,
) -> Result<Option<Endpoint>> {
    let at = now();
    let rotated = sqlx::query(
        r#"update webhook_endpoints set previous_secret = secret, previous_until = ?4, secret = ?3
           where owner_id = ?1 and id = ?2"#,
    )
    .bind(owner.as_str())
    .bind(id)
    .bind(secret)
    .bind(at.saturating_add(micros(keep_old)))
    .execute(pool)
    .await?;
    if rotated.rows_affected() == 0 {
        return Ok(None);
    }
    let row: EndpointRow =
        sqlx::query_as(LIST_ENDPOINTS).bind(owner.as_str()).bind(id).bind(at).fetch_one(pool).await?;
    Ok(Some(row.into()))
}

pub(super) async fn claim_webhook_deliveries(
    pool: &SqlitePool,
    max: u32,
    lease: Duration,
    skip: &[String],
) -> Result<Vec<ClaimedDelivery>> {
    let at = now();
    let mut tx = pool.begin().await?;
    let ids: Vec<Uuid> = sqlx::query_scalar(CLAIM_DELIVERIES)
        .bind(at)
        .bind(i64::from(max))
        .bind(at.saturating_add(micros(lease)))
        .bind(json!(skip).to_string())
        .fetch_all(&mut *tx)
        .await?;
    let mut claimed = Vec::with_capacity(ids.len());
    for id in ids {
        let row: ClaimedRow = sqlx::query_as(CLAIMED).bind(id).bind(at).fetch_one(&mut *tx).await?;
        claimed.push(row.into());
    }
    tx.commit().await?;
    Ok(claimed)
}

pub(super) async fn has_due_webhook_deliveries(pool: &SqlitePool) -> Result<bool> {
    Ok(sqlx::query_scalar(ANY_DUE_DELIVERY).bind(now()).fetch_one(pool).await?)
}

pub(super) async fn release_webhook_deliveries(pool: &SqlitePool, owner: &OwnerId, ids: &[Uuid]) -> Result<()> {
    let mut tx = pool.begin().await?;
    for id in ids {
        sqlx::query(RELEASE_DELIVERY).bind(owner.as_str()).bind(id).bind(now()).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Records a batch of tries in one transaction.
pub(super) async fn record_webhook_tries(pool: &SqlitePool, tries: &[DeliveryTry]) -> Result<()> {
    if tries.is_empty() {
        return Ok(());
    }
    let at = now();
    let mut tx = pool.begin().await?;
    for done in tries {
        record_try(&mut tx, done, at).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn record_try(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, done: &DeliveryTry, at: i64) -> Result<()> {
    sqlx::query(r#"insert into webhook_tries (delivery_id, number, at, status, latency_ms, error) values (?1, ?2, ?3, ?4, ?5, ?6)
                   on conflict do nothing"#)
        .bind(done.delivery_id)
        .bind(done.number)
        .bind(at)
        .bind(stored_status(done.status))
        .bind(stored_latency(done.latency))
        .bind(&done.error)
        .execute(&mut **tx)
        .await?;
    let next_at = match &done.outcome {
        TryOutcome::Retry(after) => at.saturating_add(micros(*after)),
        _ => at,
    };
    let finished_at = if matches!(done.outcome, TryOutcome::Retry(_)) { None } else { Some(at) };
    let endpoint: Option<Uuid> = sqlx::query_scalar(
        r#"update webhook_deliveries set state = ?3, last_status = ?4, last_error = ?5, next_at = ?6, finished_at = ?7
           where owner_id = ?1 and id = ?2 and state = 'pending'
           returning endpoint_id"#,
    )
    .bind(done.owner.as_str())
    .bind(done.delivery_id)
    .bind(state_after(&done.outcome))
    .bind(stored_status(done.status))
    .bind(&done.error)
    .bind(next_at)
    .bind(finished_at)
    .fetch_optional(&mut **tx)
    .await?;
    if let (TryOutcome::Gone, Some(endpoint)) = (&done.outcome, endpoint) {
        sqlx::query(
            r#"update webhook_endpoints set disabled_at = ?3, disabled_reason = ?4
                       where owner_id = ?1 and id = ?2 and disabled_at is null"#,
        )
        .bind(done.owner.as_str())
        .bind(endpoint)
        .bind(at)
        .bind("the receiver answered 410 Gone")
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
