//! Webhook endpoints and the outbox's deliveries on Postgres. Every time is
//! the database's `now()`; claims skip rows another process holds.

use std::time::Duration;

use uuid::Uuid;

use super::super::Result;
use super::super::webhooks::{
    ClaimedDelivery, ClaimedRow, DeliveryTry, Endpoint, EndpointRow, NewEndpoint, TryOutcome, check_events,
    state_after, stored_latency, stored_status,
};
use crate::domain::OwnerId;

/// An owner's endpoints (or one), with their subscriptions joined. Binds:
/// owner, id or null.
pub(super) const LIST_ENDPOINTS: &str = r#"select e.id, e.url, e.description, e.created_at,
        case when e.previous_until > now() then e.previous_until end as previous_until,
        e.disabled_at, e.disabled_reason,
        (select string_agg(s.event_type, ',') from webhook_subscriptions s
          where s.owner_id = $1 and s.endpoint_id = e.id) as events
    from webhook_endpoints e
    where e.owner_id = $1 and ($2::uuid is null or e.id = $2)
    order by e.created_at, e.id"#;

/// Claims due deliveries of live endpoints, moving each past its lease.
/// Binds: max, lease seconds, owners to skip.
pub(super) const CLAIM_DELIVERIES: &str = r#"with due as (
        select d.id from webhook_deliveries d
        join webhook_endpoints e on e.owner_id = d.owner_id and e.id = d.endpoint_id and e.disabled_at is null
        where d.state = 'pending' and d.next_at <= now() and d.owner_id <> all($3)
        order by d.next_at limit $1
        for update of d skip locked
    ), claimed as (
        update webhook_deliveries d set tries = d.tries + 1, next_at = now() + make_interval(secs => $2)
        from due where d.id = due.id
        returning d.id, d.owner_id, d.endpoint_id, d.payload, d.tries, d.created_at
    )
    select c.id, c.owner_id, e.url, c.payload, c.tries, c.created_at, e.secret,
           case when e.previous_until > now() then e.previous_secret end as previous_secret
    from claimed c join webhook_endpoints e on e.owner_id = c.owner_id and e.id = c.endpoint_id"#;

/// Whether any delivery is due, of any owner.
pub(super) const ANY_DUE_DELIVERY: &str =
    r#"select exists (select 1 from webhook_deliveries where state = 'pending' and next_at <= now())"#;

/// Claimed deliveries of an owner given back untried: due at once, the
/// claim's try not counted. Binds: owner, ids.
pub(super) const RELEASE_DELIVERIES: &str = r#"update webhook_deliveries set tries = tries - 1, next_at = now()
    where owner_id = $1 and id = any($2) and state = 'pending' and tries > 0"#;

/// Deletes an owner's endpoint (its subscriptions and deliveries with it).
/// Binds: owner, id.
pub(super) const DELETE_WEBHOOK_ENDPOINT: &str = r#"delete from webhook_endpoints where owner_id = $1 and id = $2"#;

/// Whether an owner has the endpoint. Binds: owner, id.
pub(super) const ENDPOINT_EXISTS: &str =
    r#"select exists (select 1 from webhook_endpoints where owner_id = $1 and id = $2)"#;

/// An endpoint's latest deliveries. Binds: owner, endpoint, limit.
pub(super) const LIST_DELIVERIES: &str = r#"select id, job_id, event_type, state, created_at, finished_at from webhook_deliveries
    where owner_id = $1 and endpoint_id = $2 order by created_at desc, id desc limit $3"#;

/// The tries of an endpoint's deliveries. Binds: owner, endpoint.
pub(super) const LIST_TRIES: &str = r#"select t.delivery_id, t.number, t.at, t.status, t.latency_ms, t.error
    from webhook_tries t join webhook_deliveries d on d.owner_id = t.owner_id and d.id = t.delivery_id
    where d.owner_id = $1 and d.endpoint_id = $2 order by t.delivery_id, t.number"#;

/// A new endpoint. Binds: owner, id, url, description, secret.
pub(super) const INSERT_ENDPOINT: &str =
    r#"insert into webhook_endpoints (owner_id, id, url, description, secret) values ($1, $2, $3, $4, $5)"#;

/// How many endpoints an owner has. Binds: owner.
pub(super) const COUNT_ENDPOINTS: &str = r#"select count(*) from webhook_endpoints where owner_id = $1"#;

/// The owner's registrations take turns until commit, so that its limit
/// of endpoints holds. Binds: owner.
pub(super) const LOCK_OWNER_ENDPOINTS: &str =
    r#"select pg_advisory_xact_lock(hashtextextended('onejob.webhooks:' || $1, 0))"#;

/// An endpoint's subscription to an event type. Binds: owner, endpoint, type.
pub(super) const INSERT_SUBSCRIPTION: &str = r#"insert into webhook_subscriptions (owner_id, endpoint_id, event_type) values ($1, $2, $3) on conflict do nothing"#;

/// A new signing secret, the old one kept for a while. Binds: owner, id,
/// secret, how long the old one stays valid (s).
pub(super) const ROTATE_SECRET: &str = r#"update webhook_endpoints
    set previous_secret = secret, previous_until = now() + make_interval(secs => $4), secret = $3
    where owner_id = $1 and id = $2"#;

/// A batch of tries, of any owners' deliveries. Binds: owners, deliveries,
/// numbers, statuses, latencies, errors.
pub(super) const INSERT_TRIES: &str = r#"insert into webhook_tries (owner_id, delivery_id, number, status, latency_ms, error)
    select * from unnest($1::text[], $2::uuid[], $3::int[], $4::int[], $5::int[], $6::text[])
    on conflict do nothing"#;

/// A batch of deliveries' next states; returns which endpoints answered
/// 410. Binds: owners, ids, states, statuses, errors, retry delays (s), gone.
/// (`to_timestamp`, not `now() + interval`: see `claims::START_ATTEMPTS`.)
pub(super) const SETTLE_DELIVERIES: &str = r#"with done as (
        select * from unnest($1::text[], $2::uuid[], $3::text[], $4::int[], $5::text[], $6::float8[], $7::bool[])
            as t(owner_id, id, state, status, error, retry_in, gone)
    )
    update webhook_deliveries d
    set state = done.state, last_status = done.status, last_error = done.error,
        next_at = to_timestamp(extract(epoch from now()) + done.retry_in),
        finished_at = to_timestamp(extract(epoch from now()) + case when done.state = 'pending' then null else 0 end)
    from done
    where d.owner_id = done.owner_id and d.id = done.id and d.state = 'pending'
    returning d.owner_id, d.endpoint_id, done.gone"#;

/// An endpoint disabled, with why. Binds: owner, id, reason.
pub(super) const DISABLE_ENDPOINT: &str = r#"update webhook_endpoints set disabled_at = now(), disabled_reason = $3
    where owner_id = $1 and id = $2 and disabled_at is null"#;

pub(super) async fn insert_webhook_endpoint(
    pool: &super::bounded::Pool,
    new: &NewEndpoint,
    max_per_owner: u32,
) -> Result<Option<Endpoint>> {
    check_events(&new.events)?;
    let mut tx = pool.begin().await?;
    // Under the owner's lock, the count holds until commit.
    sqlx::query(LOCK_OWNER_ENDPOINTS).bind(new.owner.as_str()).execute(&mut tx).await?;
    let held: i64 = sqlx::query_scalar(COUNT_ENDPOINTS).bind(new.owner.as_str()).fetch_one(&mut tx).await?;
    if held >= i64::from(max_per_owner) {
        return Ok(None);
    }
    sqlx::query(INSERT_ENDPOINT)
        .bind(new.owner.as_str())
        .bind(new.id)
        .bind(&new.url)
        .bind(&new.description)
        .bind(&new.secret)
        .execute(&mut tx)
        .await?;
    for event in &new.events {
        sqlx::query(INSERT_SUBSCRIPTION)
            .bind(new.owner.as_str())
            .bind(new.id)
            .bind(event.as_str())
            .execute(&mut tx)
            .await?;
    }
    let row: EndpointRow =
        sqlx::query_as(LIST_ENDPOINTS).bind(new.owner.as_str()).bind(new.id).fetch_one(&mut tx).await?;
    tx.commit().await?;
    Ok(Some(row.into()))
}

pub(super) async fn list_webhook_endpoints(pool: &super::bounded::Pool, owner: &OwnerId) -> Result<Vec<Endpoint>> {
    let rows: Vec<EndpointRow> =
        sqlx::query_as(LIST_ENDPOINTS).bind(owner.as_str()).bind(None::<Uuid>).fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn rotate_webhook_secret(
    pool: &super::bounded::Pool,
    owner: &OwnerId,
    id: Uuid,
    secret: &str,
    keep_old: Duration,
) -> Result<Option<Endpoint>> {
    let rotated = sqlx::query(ROTATE_SECRET)
        .bind(owner.as_str())
        .bind(id)
        .bind(secret)
        .bind(keep_old.as_secs_f64())
        .execute(pool)
        .await?;
    if rotated.rows_affected() == 0 {
        return Ok(None);
    }
    let row: EndpointRow = sqlx::query_as(LIST_ENDPOINTS).bind(owner.as_str()).bind(id).fetch_one(pool).await?;
    Ok(Some(row.into()))
}

pub(super) async fn claim_webhook_deliveries(
    pool: &super::bounded::Pool,
    max: u32,
    lease: Duration,
    skip: &[String],
) -> Result<Vec<ClaimedDelivery>> {
    let claim = sqlx::query_as(CLAIM_DELIVERIES).bind(i64::from(max)).bind(lease.as_secs_f64()).bind(skip);
    let rows: Vec<ClaimedRow> = claim.fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(super) async fn has_due_webhook_deliveries(pool: &super::bounded::Pool) -> Result<bool> {
    Ok(sqlx::query_scalar(ANY_DUE_DELIVERY).fetch_one(pool).await?)
}

pub(super) async fn release_webhook_deliveries(
    pool: &super::bounded::Pool,
    owner: &OwnerId,
    ids: &[Uuid],
) -> Result<()> {
    sqlx::query(RELEASE_DELIVERIES).bind(owner.as_str()).bind(ids).execute(pool).await?;
    Ok(())
}

/// Records a batch of tries: every try in one statement, every delivery's
/// next state in another, and the endpoints that answered 410 disabled,
/// in one transaction.
pub(super) async fn record_webhook_tries(pool: &super::bounded::Pool, done: &[DeliveryTry]) -> Result<()> {
    if done.is_empty() {
        return Ok(());
    }
    let column = |f: &dyn Fn(&DeliveryTry) -> Option<i32>| done.iter().map(f).collect::<Vec<_>>();
    let ids: Vec<Uuid> = done.iter().map(|d| d.delivery_id).collect();
    let owners: Vec<&str> = done.iter().map(|d| d.owner.as_str()).collect();
    let numbers = column(&|d| Some(d.number));
    let statuses = column(&|d| stored_status(d.status));
    let latencies = column(&|d| Some(stored_latency(d.latency)));
    let errors: Vec<Option<&str>> = done.iter().map(|d| d.error.as_deref()).collect();
    let states: Vec<&str> = done.iter().map(|d| state_after(&d.outcome)).collect();
    let retry_in: Vec<f64> = done
        .iter()
        .map(|d| match &d.outcome {
            TryOutcome::Retry(after) => after.as_secs_f64(),
            _ => 0.0,
        })
        .collect();
    let gone: Vec<bool> = done.iter().map(|d| matches!(d.outcome, TryOutcome::Gone)).collect();
    let mut tx = pool.begin().await?;
    sqlx::query(INSERT_TRIES)
        .bind(&owners)
        .bind(&ids)
        .bind(&numbers)
        .bind(&statuses)
        .bind(&latencies)
        .bind(&errors)
        .execute(&mut tx)
        .await?;
    let disable: Vec<(String, Uuid)> = sqlx::query_as(SETTLE_DELIVERIES)
        .bind(&owners)
        .bind(&ids)
        .bind(&states)
        .bind(&statuses)
        .bind(&errors)
        .bind(&retry_in)
        .bind(&gone)
        .fetch_all(&mut tx)
        .await?
        .into_iter()
        .filter_map(|(owner, endpoint, gone): (String, Uuid, bool)| gone.then_some((owner, endpoint)))
        .collect();
    for (owner, endpoint) in disable {
        sqlx::query(DISABLE_ENDPOINT)
            .bind(owner)
            .bind(endpoint)
            .bind("the receiver answered 410 Gone")
            .execute(&mut tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
