//! onejob's tables on a Citus cluster (docs/scaling.md): which tables are
//! distributed by owner and which are copied to every node, the step of
//! `onejob migrate` that places them, and the claims that Citus plans only
//! owner by owner. A database is on Citus when it has the `citus`
//! extension; `migrate` then places every table it has not placed yet,
//! after the migrations, so that a table a later migration adds is placed
//! by the same command.

use std::sync::LazyLock;
use std::time::Duration;

use sqlx::PgConnection;
use sqlx::postgres::PgRow;

use super::bounded::Pool;
use crate::store::Result;
use crate::store::rows::names::{PENDING, UNKNOWN};
use crate::store::webhooks::ClaimedRow;

/// Where a table lives on a Citus cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Hash-distributed by `owner_id`, co-located with `jobs`: one owner's
    /// rows of every such table live on one shard, so a statement pinned
    /// to one owner is answered by one node.
    ByOwner,
    /// A copy on every node: small tables looked up by something other
    /// than the owner (a token's hash, a provider), read far more often
    /// than written.
    Reference,
}

/// Every table of the schema and where it lives; `jobs` is the first of
/// those distributed by owner (the others are co-located with it). The Citus test
/// (`tests/it/citus.rs`) checks that it names exactly the schema's tables.
pub const SHARDING: &[(&str, Placement)] = &[
    ("api_keys", Placement::Reference),
    ("dashboard_sessions", Placement::Reference),
    ("qualifications", Placement::Reference),
    ("bootstrap", Placement::Reference),
    ("server_secrets", Placement::Reference),
    // One row per provider, shared by every worker (pauses, buckets).
    ("provider_state", Placement::Reference),
    ("provider_breakers", Placement::Reference),
    ("jobs", Placement::ByOwner),
    ("attempts", Placement::ByOwner),
    ("job_events", Placement::ByOwner),
    ("job_output", Placement::ByOwner),
    ("usage_rollup", Placement::ByOwner),
    ("webhook_endpoints", Placement::ByOwner),
    ("webhook_subscriptions", Placement::ByOwner),
    ("webhook_deliveries", Placement::ByOwner),
    ("webhook_tries", Placement::ByOwner),
];

/// Whether the database is on Citus.
pub(super) const IS_CITUS: &str = r#"select exists (select 1 from pg_extension where extname = 'citus')"#;

/// The tables Citus already places. (Only sent when [`IS_CITUS`].)
pub(super) const PLACED_TABLES: &str = r#"select logicalrelid::regclass::text from pg_dist_partition"#;

/// Lets Citus take tables with triggers (the key-change notification, the
/// event log's guard against deletes outside a purge), for the placing
/// transaction: they run on each shard, on the node that holds it.
pub(super) const ALLOW_TRIGGERS: &str = r#"set local citus.enable_unsafe_triggers = on"#;

/// One `migrate` at a time places tables (the transaction's lock).
pub(super) const LOCK_PLACEMENT: &str = r#"select pg_advisory_xact_lock(hashtextextended('onejob.place_tables', 0))"#;

/// Copies a table to every node. Binds: table.
pub(super) const CREATE_REFERENCE_TABLE: &str = r#"select create_reference_table($1::text::regclass)"#;

/// Distributes a table by `owner_id`, co-located with `jobs` (`jobs`
/// itself with `default`). Binds: table, the table to co-locate with.
pub(super) const DISTRIBUTE_BY_OWNER: &str =
    r#"select create_distributed_table($1::text::regclass, 'owner_id', colocate_with => $2)"#;

/// Drops the rows a table had before Citus placed it (copied to its shards,
/// no longer visible, still on disk), in a transaction that says it may
/// (the event log's guard). Binds: table.
pub(super) const TRUNCATE_LOCAL_ROWS: &str =
    r#"select truncate_local_data_after_distributing_table($1::text::regclass)"#;

/// The statements above: they run on Citus's catalogue when `migrate`
/// places the tables, never on an owner's rows, and plain Postgres has no
/// `create_distributed_table` to plan them with.
pub const PLACEMENT_STATEMENTS: &[&str] = &[
    "citus::PLACED_TABLES",
    "citus::ALLOW_TRIGGERS",
    "citus::CREATE_REFERENCE_TABLE",
    "citus::DISTRIBUTE_BY_OWNER",
    "citus::TRUNCATE_LOCAL_ROWS",
];

/// The statements the store sends only on plain Postgres, because Citus
/// cannot plan them (a recursive query, or rows locked across shards),
/// with what it sends on Citus instead.
pub const REPLACED_ON_CITUS: &[(&str, &str)] = &[
    ("claims::PENDING_OWNERS", "citus::PENDING_OWNERS"),
    ("sql::CLAIM_RECONCILIATIONS", "citus::DUE_UNKNOWN_OWNERS, then citus::CLAIM_OWNER_RECONCILIATIONS"),
    ("webhooks::CLAIM_DELIVERIES", "citus::DUE_DELIVERY_OWNERS, then citus::CLAIM_OWNER_DELIVERIES"),
    ("retention::PURGEABLE_JOBS", "retention::PURGEABLE_CANDIDATES, then retention::LOCK_OWNER_PURGEABLE"),
];

/// Whether the database of `connection` has the `citus` extension.
pub(super) async fn is_citus(connection: &mut PgConnection) -> Result<bool> {
    Ok(sqlx::query_scalar(IS_CITUS).fetch_one(connection).await?)
}

/// Places every table of [`SHARDING`] that Citus does not place yet, in
/// one transaction; does nothing on a database without Citus. Run by
/// `migrate` after the migrations. The shard count is the session's
/// `citus.shard_count` (Citus's default: 32).
pub(super) async fn place_tables(pool: &sqlx::PgPool) -> Result<()> {
    let mut tx = pool.begin().await?;
    if !is_citus(&mut tx).await? {
        return Ok(());
    }
    sqlx::query(LOCK_PLACEMENT).execute(&mut *tx).await?;
    let placed: Vec<String> = sqlx::query_scalar(PLACED_TABLES).fetch_all(&mut *tx).await?;
    let unplaced: Vec<_> = SHARDING.iter().filter(|(table, _)| !placed.iter().any(|p| p == table)).collect();
    if unplaced.is_empty() {
        return Ok(());
    }
    sqlx::query(ALLOW_TRIGGERS).execute(&mut *tx).await?;
    for (table, placement) in &unplaced {
        match placement {
            Placement::Reference => {
                sqlx::query(CREATE_REFERENCE_TABLE).bind(table).execute(&mut *tx).await?;
            }
            Placement::ByOwner => {
                let with = if *table == "jobs" { "default" } else { "jobs" };
                sqlx::query(DISTRIBUTE_BY_OWNER).bind(table).bind(with).execute(&mut *tx).await?;
            }
        }
    }
    sqlx::query(super::retention::PURGING_ON).execute(&mut *tx).await?;
    for (table, _) in &unplaced {
        sqlx::query(TRUNCATE_LOCAL_ROWS).bind(table).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// On Citus, up to `$2` owners with pending attempts after `$1`, in owner
/// order, each with the largest `max_in_flight` its live keys set. Citus
/// plans no recursive query over a distributed table unless it is pinned
/// to one owner, so the skip scan of plain Postgres
/// (`claims::PENDING_OWNERS`) is a `distinct` here: each shard reads its
/// pending owners in order, up to `$2` of them. Binds: after, how many.
pub(super) static PENDING_OWNERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select o.owner_id,
                  (select max(k.max_in_flight) from api_keys k
                   where k.owner_id = o.owner_id and k.revoked_at is null) as max_in_flight
           from (select distinct owner_id from attempts
                 where state = '{PENDING}' and not_before is not null and owner_id > $1
                 order by owner_id limit $2) o
           order by o.owner_id"#
    )
});

/// On Citus, up to `$2` owners with unknown attempts of the providers due
/// for a status lookup, the longest due first. Binds: providers, how many.
pub(super) static DUE_UNKNOWN_OWNERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id from attempts
           where state = '{UNKNOWN}' and provider = any($1) and reconcile_after <= now()
           group by owner_id order by min(reconcile_after) limit $2"#
    )
});

/// `sql::CLAIM_RECONCILIATIONS` for one owner: Citus locks rows
/// (`for update`) only in a statement pinned to one shard. Binds:
/// providers, how many, hold (s), owner.
pub(super) static CLAIM_OWNER_RECONCILIATIONS: LazyLock<String> =
    LazyLock::new(|| super::sql::claim_reconciliations(Some("$4")));

/// On Citus, up to `$1` owners with due deliveries to live endpoints, the
/// longest due first, but those to skip. Binds: how many, owners to skip.
pub(super) const DUE_DELIVERY_OWNERS: &str = r#"select d.owner_id from webhook_deliveries d
    join webhook_endpoints e on e.owner_id = d.owner_id and e.id = d.endpoint_id and e.disabled_at is null
    where d.state = 'pending' and d.next_at <= now() and d.owner_id <> all($2)
    group by d.owner_id order by min(d.next_at) limit $1"#;

/// `webhooks::CLAIM_DELIVERIES` for one owner (as above: Citus locks rows
/// only in a statement pinned to one shard). Binds: owner, max, lease (s).
pub(super) const CLAIM_OWNER_DELIVERIES: &str = r#"with due as (
        select d.id from webhook_deliveries d
        join webhook_endpoints e on e.owner_id = $1 and e.id = d.endpoint_id and e.disabled_at is null
        where d.owner_id = $1 and d.state = 'pending' and d.next_at <= now()
        order by d.next_at limit $2
        for update of d skip locked
    ), claimed as (
        update webhook_deliveries d set tries = d.tries + 1, next_at = now() + make_interval(secs => $3)
        from due where d.owner_id = $1 and d.id = due.id
        returning d.id, d.owner_id, d.endpoint_id, d.payload, d.tries, d.created_at
    )
    select c.id, c.owner_id, e.url, c.payload, c.tries, c.created_at, e.secret,
           case when e.previous_until > now() then e.previous_secret end as previous_secret
    from claimed c join webhook_endpoints e on e.owner_id = $1 and e.id = c.endpoint_id"#;

/// On Citus: due unknown attempts, claimed owner by owner until `max`.
pub(super) async fn claim_reconciliations(
    pool: &Pool,
    providers: &[String],
    max: u32,
    hold: Duration,
) -> Result<Vec<PgRow>> {
    let owners: Vec<String> =
        sqlx::query_scalar(DUE_UNKNOWN_OWNERS.as_str()).bind(providers).bind(i64::from(max)).fetch_all(pool).await?;
    let mut rows = Vec::new();
    for owner in owners {
        let left = i64::from(max) - rows.len() as i64;
        if left <= 0 {
            break;
        }
        let claim = sqlx::query(CLAIM_OWNER_RECONCILIATIONS.as_str()).bind(providers).bind(left);
        rows.extend(claim.bind(hold.as_secs_f64()).bind(&owner).fetch_all(pool).await?);
    }
    Ok(rows)
}

/// On Citus: due deliveries, claimed owner by owner until `max`.
pub(super) async fn claim_webhook_deliveries(
    pool: &Pool,
    max: u32,
    lease: Duration,
    skip: &[String],
) -> Result<Vec<ClaimedRow>> {
    let owners: Vec<String> =
        sqlx::query_scalar(DUE_DELIVERY_OWNERS).bind(i64::from(max)).bind(skip).fetch_all(pool).await?;
    let mut rows = Vec::new();
    for owner in owners {
        let left = i64::from(max) - rows.len() as i64;
        if left <= 0 {
            break;
        }
        let claim = sqlx::query_as(CLAIM_OWNER_DELIVERIES).bind(&owner).bind(left).bind(lease.as_secs_f64());
        rows.extend(claim.fetch_all(pool).await?);
    }
    Ok(rows)
}
