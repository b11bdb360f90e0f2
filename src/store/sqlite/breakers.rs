//! The SQLite statements of the providers' breakers
//! ([`crate::store::breakers`]); times in microseconds since the epoch,
//! `now` bound by the caller.

use sqlx::Row;
use sqlx::SqlitePool;

use super::SqliteTx;
use crate::domain::breaker::BreakerState;
use crate::store::Result;
use crate::store::breakers::{BreakerChange, StoredBreaker};

/// Every breaker, with its times left. Binds: now.
const READ_BREAKERS: &str = r#"select provider, state, since, changed_by, reason,
        (until - ?1) / 1e6 as cool_down_left, (probe_until - ?1) / 1e6 as probe_left
    from provider_breakers"#;

/// Binds: provider, cool-down (µs), reason, now.
const TRIP_BREAKER: &str = r#"insert into provider_breakers
        (provider, state, since, until, probe_until, changed_by, reason)
    values (?1, 'open', ?4, ?4 + ?2, null, 'worker', ?3)
    on conflict (provider) do update
    set state = 'open', since = ?4, until = excluded.until, probe_until = null, changed_by = 'worker',
        reason = excluded.reason
    where provider_breakers.state = 'closed'"#;

/// Binds: provider, cool-down (µs), reason, now.
const REOPEN_BREAKER: &str = r#"update provider_breakers
    set state = 'open', since = ?4, until = ?4 + ?2, probe_until = null, reason = ?3
    where provider = ?1 and state = 'probing' and changed_by = 'worker'"#;

/// Binds: provider, how long the probe may take (µs), now.
const PROBE_BREAKER: &str = r#"update provider_breakers
    set state = 'probing', probe_until = ?3 + ?2
    where provider = ?1 and changed_by = 'worker'
      and ((state = 'open' and until <= ?3) or (state = 'probing' and probe_until <= ?3))"#;

/// Binds: provider, now.
const CLOSE_BREAKER: &str = r#"update provider_breakers
    set state = 'closed', since = ?2, until = null, probe_until = null, reason = 'its probe answered'
    where provider = ?1 and state = 'probing' and changed_by = 'worker'"#;

/// Binds: provider, state, reason, now.
const SET_BREAKER: &str = r#"insert into provider_breakers
        (provider, state, since, until, probe_until, changed_by, reason)
    values (?1, ?2, ?4, null, null, 'operator', ?3)
    on conflict (provider) do update
    set state = excluded.state, since = ?4, until = null, probe_until = null, changed_by = 'operator',
        reason = excluded.reason"#;

pub(super) async fn list_breakers(pool: &SqlitePool, now: i64) -> Result<Vec<StoredBreaker>> {
    let rows = sqlx::query(READ_BREAKERS).bind(now).fetch_all(pool).await?;
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state")?;
            let since: i64 = row.try_get("since")?;
            Ok(StoredBreaker {
                provider: row.try_get("provider")?,
                state: state.parse().map_err(crate::store::corrupt)?,
                since: chrono::DateTime::from_timestamp_micros(since).ok_or_else(|| crate::store::corrupt(since))?,
                cool_down_left: row.try_get("cool_down_left")?,
                probe_left: row.try_get("probe_left")?,
                by_operator: row.try_get::<String, _>("changed_by")? == "operator",
                reason: row.try_get("reason")?,
            })
        })
        .collect()
}

pub(super) async fn change_breaker(write: &mut SqliteTx, provider: &str, change: BreakerChange<'_>) -> Result<bool> {
    let micros = |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    let now = write.at;
    let query = match change {
        BreakerChange::Trip { cool_down, reason } => {
            sqlx::query(TRIP_BREAKER).bind(provider).bind(micros(cool_down)).bind(reason).bind(now)
        }
        BreakerChange::Reopen { cool_down, reason } => {
            sqlx::query(REOPEN_BREAKER).bind(provider).bind(micros(cool_down)).bind(reason).bind(now)
        }
        BreakerChange::Probe { probe_for } => {
            sqlx::query(PROBE_BREAKER).bind(provider).bind(micros(probe_for)).bind(now)
        }
        BreakerChange::Close => sqlx::query(CLOSE_BREAKER).bind(provider).bind(now),
        BreakerChange::OperatorOpen { reason } => {
            sqlx::query(SET_BREAKER).bind(provider).bind(BreakerState::Open.as_str()).bind(reason).bind(now)
        }
        BreakerChange::OperatorClose { reason } => {
            sqlx::query(SET_BREAKER).bind(provider).bind(BreakerState::Closed.as_str()).bind(reason).bind(now)
        }
    };
    Ok(query.execute(&mut *write.tx).await?.rows_affected() == 1)
}
