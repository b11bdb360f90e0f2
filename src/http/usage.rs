//! `GET /usage`: an owner's tokens and cost over a time range, grouped by
//! provider, task or day, with the waste (what attempts that did not
//! produce a job's result cost) beside the total. Amounts are exact
//! decimal strings, summed as integers (see [`crate::domain::money`]);
//! only the key's own owner's attempts are read (I7).

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Owner;
use super::error::{ApiError, Problem};
use super::respond::json_response;

use crate::domain::{AttemptState, Money};
use crate::domain::{UsageFilter, UsageRow};

/// The longest range one report covers, in days.
pub(crate) const MAX_RANGE_DAYS: i64 = 366;
/// The range of a report that names no `from`, in days before `to`.
const DEFAULT_RANGE_DAYS: i64 = 30;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(usage_report))
}

/// What the report's groups are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GroupBy {
    /// The attempt's provider.
    #[default]
    Provider,
    /// The job's task.
    Task,
    /// The UTC day the attempt was created.
    Day,
}

/// Tokens and cost of some attempts. Amounts are exact decimal strings by
/// currency; `total = winner + waste`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct UsageTotals {
    /// Attempts counted.
    pub attempts: u64,
    /// Their prompt tokens.
    pub prompt_tokens: i64,
    /// Their completion tokens.
    pub completion_tokens: i64,
    /// Of their prompt tokens, those written to the provider's prompt cache.
    pub cache_write_tokens: i64,
    /// Of their prompt tokens, those read from the provider's prompt cache.
    pub cache_read_tokens: i64,
    /// Their providers' compute time, in milliseconds (GPU providers'
    /// `predict_time`).
    pub predict_ms: i64,
    /// The files of their outputs (images, clips).
    pub outputs: i64,
    /// Attempts whose usage is an estimate (never reported by the provider).
    pub estimated_attempts: u64,
    /// Every counted attempt's cost, by currency.
    #[schema(value_type = BTreeMap<String, String>, example = json!({"USD": "0.000131"}))]
    pub cost: BTreeMap<String, Money>,
    /// The winning attempts' cost, by currency.
    #[schema(value_type = BTreeMap<String, String>)]
    pub winner_cost: BTreeMap<String, Money>,
    /// The cost of attempts that did not produce their job's result
    /// (superseded, failed after the provider answered, unknown), by currency.
    #[schema(value_type = BTreeMap<String, String>)]
    pub waste_cost: BTreeMap<String, Money>,
    /// The tokens of those attempts.
    pub waste_tokens: i64,
    /// Their compute time, in milliseconds.
    pub waste_predict_ms: i64,
    /// The files of their outputs.
    pub waste_outputs: i64,
}

impl UsageTotals {
    fn add(&mut self, row: &UsageRow) {
        let tokens = row.usage.prompt_tokens + row.usage.completion_tokens;
        let winner = row.state == AttemptState::Succeeded;
        self.attempts += u64::try_from(row.attempts).unwrap_or(0);
        self.prompt_tokens += row.usage.prompt_tokens;
        self.completion_tokens += row.usage.completion_tokens;
        self.cache_write_tokens += row.usage.cache_write_tokens;
        self.cache_read_tokens += row.usage.cache_read_tokens;
        self.predict_ms += row.usage.predict_ms;
        self.outputs += row.usage.outputs;
        self.estimated_attempts += u64::try_from(row.estimated_attempts).unwrap_or(0);
        if !winner {
            self.waste_tokens += tokens;
            self.waste_predict_ms += row.usage.predict_ms;
            self.waste_outputs += row.usage.outputs;
        }
        if let Some(cost) = &row.cost {
            *self.cost.entry(cost.currency.clone()).or_default() += cost.amount;
            let part = if winner { &mut self.winner_cost } else { &mut self.waste_cost };
            *part.entry(cost.currency.clone()).or_default() += cost.amount;
        }
    }
}

/// One group of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct UsageGroup {
    /// The provider, task, or day (`YYYY-MM-DD`).
    pub key: String,
    /// Its totals.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// `GET /usage`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct UsageReport {
    /// Attempts created from this time on…
    pub from: DateTime<Utc>,
    /// …and before this one.
    pub to: DateTime<Utc>,
    /// What the groups are.
    pub group_by: GroupBy,
    /// Every counted attempt.
    pub total: UsageTotals,
    /// By `group_by`, in key order.
    pub groups: Vec<UsageGroup>,
}

/// Sums attempts into a report.
pub(crate) fn build_report(filter: &UsageFilter, group_by: GroupBy, rows: &[UsageRow]) -> UsageReport {
    let mut total = UsageTotals::default();
    let mut groups: BTreeMap<String, UsageTotals> = BTreeMap::new();
    for row in rows {
        total.add(row);
        let key = match group_by {
            GroupBy::Provider => row.provider.clone(),
            GroupBy::Task => row.task.clone(),
            GroupBy::Day => row.created_at.date_naive().to_string(),
        };
        groups.entry(key).or_default().add(row);
    }
    UsageReport {
        from: filter.from,
        to: filter.to,
        group_by,
        total,
        groups: groups.into_iter().map(|(key, totals)| UsageGroup { key, totals }).collect(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
}

/// An RFC 3339 time, or a date (its midnight, UTC).
fn parse_time(name: &str, text: &str) -> Result<DateTime<Utc>, Problem> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|time| time.and_utc())
        .ok_or_else(|| Problem::invalid_parameter(name, "must be an RFC 3339 time or a date (YYYY-MM-DD)"))
}

fn parse_usage_query(query: Option<&str>, now: DateTime<Utc>) -> Result<(UsageFilter, GroupBy), Problem> {
    let query: UsageQuery = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|error| Problem::invalid_parameter("", &error.to_string()))?;
    let to = query.to.as_deref().map(|t| parse_time("to", t)).transpose()?.unwrap_or(now);
    let from = match query.from.as_deref() {
        Some(text) => parse_time("from", text)?,
        None => to - chrono::Duration::days(DEFAULT_RANGE_DAYS),
    };
    if from >= to {
        return Err(Problem::invalid_parameter("from", "must be before to"));
    }
    if to - from > chrono::Duration::days(MAX_RANGE_DAYS) {
        return Err(Problem::invalid_parameter("from", "the range may cover 366 days at most"));
    }
    let group_by = match query.group_by.as_deref() {
        None | Some("provider") => GroupBy::Provider,
        Some("task") => GroupBy::Task,
        Some("day") => GroupBy::Day,
        Some(_) => return Err(Problem::invalid_parameter("group_by", "must be provider, task or day")),
    };
    Ok((UsageFilter { from, to }, group_by))
}

#[utoipa::path(get, path = "/usage", tag = "usage",
    params(("from" = Option<String>, Query, description = "attempts created from this time on (RFC 3339, or a date: its midnight UTC); default: 30 days before `to`"),
           ("to" = Option<String>, Query, description = "attempts created before this time (RFC 3339 or a date); default: now. At most 366 days after `from`"),
           ("group_by" = Option<GroupBy>, Query, description = "provider (default), task, or day")),
    responses(
        (status = 200, description = "the owner's tokens and cost, total and waste, by group", body = UsageReport),
        (status = 422, description = "validation-failed: a bad parameter", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn usage_report(
    State(app): State<AppState>,
    Owner(owner): Owner,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (filter, group_by) = parse_usage_query(query.as_deref(), Utc::now())?;
    let rows = app.jobs.list_usage(&owner, &filter).await?;
    Ok(json_response(StatusCode::OK, &build_report(&filter, group_by, &rows), &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Cost, Usage};

    fn row(provider: &str, task: &str, state: AttemptState, day: u32, cost: &str) -> UsageRow {
        UsageRow {
            task: task.into(),
            provider: provider.into(),
            state,
            created_at: NaiveDate::from_ymd_opt(2026, 11, day).unwrap().and_hms_opt(12, 0, 0).unwrap().and_utc(),
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 5,
                estimated: state == AttemptState::Unknown,
                ..Usage::default()
            },
            cost: Some(Cost { amount: cost.parse().unwrap(), currency: "USD".into(), price_version: "v".into() }),
            attempts: 1,
            estimated_attempts: i64::from(state == AttemptState::Unknown),
        }
    }

    #[test]
    fn groups_sum_to_the_total_and_waste_is_every_attempt_but_the_winners() {
        let rows = [
            row("a", "t", AttemptState::Succeeded, 1, "0.000000000000000001"),
            row("b", "t", AttemptState::Superseded, 1, "0.25"),
            row("a", "u", AttemptState::Unknown, 2, "1.000000000000000002"),
            row("b", "u", AttemptState::Failed, 3, "0.5"),
        ];
        let now = Utc::now();
        let filter = UsageFilter { from: now - chrono::Duration::days(1), to: now };
        let report = build_report(&filter, GroupBy::Provider, &rows);
        assert_eq!(report.total.cost["USD"].to_string(), "1.750000000000000003");
        assert_eq!(report.total.winner_cost["USD"].to_string(), "0.000000000000000001");
        assert_eq!(report.total.waste_cost["USD"].to_string(), "1.750000000000000002");
        assert_eq!((report.total.attempts, report.total.estimated_attempts, report.total.waste_tokens), (4, 1, 45));
        let keys: Vec<&str> = report.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(report.groups[0].totals.cost["USD"].to_string(), "1.000000000000000003");
        let by_day = build_report(&filter, GroupBy::Day, &rows);
        let keys: Vec<&str> = by_day.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["2026-11-01", "2026-11-02", "2026-11-03"]);
        let sum: Money = by_day.groups.iter().map(|g| g.totals.cost["USD"]).sum();
        assert_eq!(sum, report.total.cost["USD"]);
    }

    #[test]
    fn usage_queries_are_checked() {
        let now = Utc::now();
        let (filter, group_by) = parse_usage_query(None, now).unwrap();
        assert_eq!((filter.to, group_by), (now, GroupBy::Provider));
        let (filter, group_by) =
            parse_usage_query(Some("from=2026-11-01&to=2026-11-02T06:00:00Z&group_by=day"), now).unwrap();
        assert_eq!(filter.from.to_rfc3339(), "2026-11-01T00:00:00+00:00");
        assert_eq!(group_by, GroupBy::Day);
        for bad in [
            "group_by=owner",
            "from=yesterday",
            "from=2026-11-02&to=2026-11-01",
            "from=2020-01-01&to=2026-01-01",
            "owner=bob",
        ] {
            assert_eq!(parse_usage_query(Some(bad), now).unwrap_err().kind(), "validation-failed", "{bad}");
        }
    }
}
