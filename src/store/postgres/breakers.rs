//! The Postgres statements of the providers' breakers
//! ([`crate::store::breakers`]): one row per provider that ever changed,
//! every change one guarded statement.

use sqlx::Row;

use crate::domain::breaker::BreakerState;
use crate::store::Result;
use crate::store::breakers::{BreakerChange, StoredBreaker};

/// Every breaker, with its times left by the database's clock.
pub(super) const READ_BREAKERS: &str = r#"select provider, state, since, changed_by, reason,
        extract(epoch from until - now())::float8 as cool_down_left,
        extract(epoch from probe_until - now())::float8 as probe_left
    from provider_breakers"#;

/// Opens a closed (or never opened) breaker. Binds: provider, cool-down
/// (ms), reason.
pub(super) const TRIP_BREAKER: &str = r#"insert into provider_breakers
        (provider, state, since, until, probe_until, changed_by, reason)
    values ($1, 'open', now(), now() + $2 * interval '1 millisecond', null, 'worker', $3)
    on conflict (provider) do update
    set state = 'open', since = excluded.since, until = excluded.until, probe_until = null, changed_by = 'worker',
        reason = excluded.reason
    where provider_breakers.state = 'closed'"#;

/// Opens a probing breaker again. Binds: provider, cool-down (ms), reason.
pub(super) const REOPEN_BREAKER: &str = r#"update provider_breakers
    set state = 'open', since = now(), until = now() + $2 * interval '1 millisecond', probe_until = null,
        reason = $3
    where provider = $1 and state = 'probing' and changed_by = 'worker'"#;

/// Takes the probe. Binds: provider, how long the probe may take (ms).
pub(super) const PROBE_BREAKER: &str = r#"update provider_breakers
    set state = 'probing', probe_until = now() + $2 * interval '1 millisecond'
    where provider = $1 and changed_by = 'worker'
      and ((state = 'open' and until <= now()) or (state = 'probing' and probe_until <= now()))"#;

/// Closes a probing breaker. Binds: provider.
pub(super) const CLOSE_BREAKER: &str = r#"update provider_breakers
    set state = 'closed', since = now(), until = null, probe_until = null, reason = 'its probe answered'
    where provider = $1 and state = 'probing' and changed_by = 'worker'"#;

/// An operator's change, whatever the state. Binds: provider, state, reason.
pub(super) const SET_BREAKER: &str = r#"insert into provider_breakers
        (provider, state, since, until, probe_until, changed_by, reason)
    values ($1, $2, now(), null, null, 'operator', $3)
    on conflict (provider) do update
    set state = excluded.state, since = excluded.since, until = null, probe_until = null, changed_by = 'operator',
        reason = excluded.reason"#;

pub(super) async fn list_breakers(pool: &super::bounded::Pool) -> Result<Vec<StoredBreaker>> {
    let rows = sqlx::query(READ_BREAKERS).fetch_all(pool).await?;
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state")?;
            Ok(StoredBreaker {
                provider: row.try_get("provider")?,
                state: state.parse().map_err(crate::store::corrupt)?,
                since: row.try_get("since")?,
                cool_down_left: row.try_get("cool_down_left")?,
                probe_left: row.try_get("probe_left")?,
                by_operator: row.try_get::<String, _>("changed_by")? == "operator",
                reason: row.try_get("reason")?,
            })
        })
        .collect()
}

pub(super) async fn change_breaker(
    pool: &super::bounded::Pool,
    provider: &str,
    change: BreakerChange<'_>,
) -> Result<bool> {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX) as f64;
    let query = match change {
        BreakerChange::Trip { cool_down, reason } => {
            sqlx::query(TRIP_BREAKER).bind(provider).bind(ms(cool_down)).bind(reason)
        }
        BreakerChange::Reopen { cool_down, reason } => {
            sqlx::query(REOPEN_BREAKER).bind(provider).bind(ms(cool_down)).bind(reason)
        }
        BreakerChange::Probe { probe_for } => sqlx::query(PROBE_BREAKER).bind(provider).bind(ms(probe_for)),
        BreakerChange::Close => sqlx::query(CLOSE_BREAKER).bind(provider),
        BreakerChange::OperatorOpen { reason } => {
            sqlx::query(SET_BREAKER).bind(provider).bind(BreakerState::Open.as_str()).bind(reason)
        }
        BreakerChange::OperatorClose { reason } => {
            sqlx::query(SET_BREAKER).bind(provider).bind(BreakerState::Closed.as_str()).bind(reason)
        }
    };
    Ok(query.execute(pool).await?.rows_affected() == 1)
}
