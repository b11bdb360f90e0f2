//! Prometheus metrics, recorded through the `metrics` facade and rendered
//! at `GET /metrics`. Every name onejob records is here, so that the list
//! an operator alerts on is in one place. Each process counts its own: the
//! series of N replicas add up. The counters whose labels the configuration
//! names (its tasks and providers) are exported at zero from start
//! ([`start_at_zero`]), so that rates and alerts work before the first event.

use std::sync::OnceLock;
use std::time::Duration;

use crate::sync::LockAnyway;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub use crate::domain::limits::Deferral;

pub use super::labels::{Lookup, SettledAs};

/// HTTP requests, by route template, method and status.
pub const HTTP_REQUESTS: &str = "onejob_http_requests_total";
/// HTTP request latency, by route template and method.
pub const HTTP_DURATION: &str = "onejob_http_request_duration_seconds";
/// Jobs created, by task.
pub const JOBS_CREATED: &str = "onejob_jobs_created_total";
/// Creations answered as replays, by task.
pub const JOBS_REPLAYED: &str = "onejob_jobs_replayed_total";
/// Creations refused because the key was used for another intent, by task.
pub const JOBS_CONFLICTED: &str = "onejob_jobs_conflicted_total";
/// Attempts that reached an outcome, by provider and outcome ([`SettledAs`],
/// and canceled).
pub const ATTEMPTS: &str = "onejob_attempts_total";
/// Races lost: outputs that arrived after another attempt had won, by provider.
pub const RACES_LOST: &str = "onejob_races_lost_total";
/// Hedges started, by the hedge's provider.
pub const HEDGES_STARTED: &str = "onejob_hedges_started_total";
/// Hedges whose output won their job, by the hedge's provider.
pub const HEDGES_WON: &str = "onejob_hedges_won_total";
/// Hedges due but not started, by why (`domain::hedge::HedgeSkip`).
pub const HEDGES_SKIPPED: &str = "onejob_hedges_skipped_total";
/// Each provider's breaker as this process sees it: 1 for its state, 0 for
/// the others (`domain::breaker::BreakerState`).
pub const BREAKER_STATE: &str = "onejob_provider_breaker_state";
/// Attempts whose outcome is unknown now.
pub const UNKNOWN_OPEN: &str = "onejob_unknown_attempts_open";
/// How long the oldest unknown attempt has been unknown.
pub const UNKNOWN_OLDEST_AGE: &str = "onejob_unknown_attempt_oldest_age_seconds";
/// Status lookups of unknown attempts, by provider and result ([`Lookup`]).
pub const RECONCILIATIONS: &str = "onejob_reconciliations_total";
/// Provider call latency, by provider and outcome.
pub const PROVIDER_DURATION: &str = "onejob_provider_request_duration_seconds";
/// Qualification runs, by provider, task and result (passed, failed).
pub const QUALIFICATIONS: &str = "onejob_qualifications_total";
/// Attempts claimed per claim statement.
pub const CLAIM_BATCH: &str = "onejob_claim_batch_size";
/// A worker's outputs settled per transaction.
pub const SETTLE_BATCH: &str = "onejob_settle_batch_size";
/// Pending attempts due for a worker now.
pub const QUEUE_DEPTH: &str = "onejob_queue_depth";
/// Requests refused by the per-owner rate limit of this process (each
/// replica has its own).
pub const RATE_LIMITED: &str = "onejob_rate_limited_total";
/// Long-polls waiting in this process now.
pub const LONG_POLLS_OPEN: &str = "onejob_long_polls_open";
/// Long-polls refused because their owner held as many open in this
/// process as `server.max_long_polls_per_owner` allows.
pub const LONG_POLLS_REFUSED: &str = "onejob_long_polls_refused_total";
/// Tokens of settled attempts, by provider, outcome and kind (prompt,
/// completion); estimates included.
pub const TOKENS: &str = "onejob_tokens_total";
/// Cost of settled attempts in billionths of the currency (rounded down per
/// attempt; `GET /usage` has the exact amounts), by provider, outcome and
/// currency.
pub const COST: &str = "onejob_cost_nanos_total";
/// Finished jobs purged past their retention.
pub const PURGED_JOBS: &str = "onejob_purged_jobs_total";
/// Database errors that said its storage is full.
pub const STORAGE_FULL: &str = "onejob_storage_full_total";
/// Database errors that said it is unavailable (unreachable, a standby,
/// going away, no connection to spare).
pub const DATABASE_UNAVAILABLE: &str = "onejob_database_unavailable_total";
/// New database connections refused by onejob's first check: the server
/// was a standby or read-only, or its session settings failed.
pub const CONNECTIONS_REFUSED: &str = "onejob_database_connections_refused_total";
/// 1 when the database's commits wait for a synchronous standby, 0 when not
/// (Postgres only: absent on SQLite, so not in [`ALL`]).
pub const COMMIT_WAITS_FOR_STANDBY: &str = "onejob_database_commit_waits_for_standby";
/// Jobs `unknown` for longer than the shortest retention: kept, to be settled.
pub const UNKNOWN_PAST_RETENTION: &str = "onejob_unknown_jobs_past_retention";
/// Attempts a claim left pending because of a limit, by `limit`
/// ([`Deferral`]): counted once per owner or
/// provider held back, per claim (per attempt, for tokens per minute).
pub const CLAIMS_DEFERRED: &str = "onejob_claims_deferred_total";
/// Time from an attempt's admission to its claim, by provider.
pub const ATTEMPT_WAIT: &str = "onejob_attempt_wait_seconds";
/// Pending attempts now, by owner (the 100 owners with the most), each
/// named by [`owner_label`]: `/metrics` names no tenant. Written by
/// [`render`] from the latest report, not recorded: an owner gone from the
/// report leaves no series behind.
pub const PENDING_BY_OWNER: &str = "onejob_pending_attempts_by_owner";
/// Pending attempts now, by provider.
pub const PENDING_BY_PROVIDER: &str = "onejob_pending_attempts_by_provider";

/// Entries held in this process's memory now, by `structure`: each cache,
/// map and registry that traffic fills (`AppState::held_entries`).
pub const HELD_ENTRIES: &str = "onejob_held_entries";

/// How many owners [`PENDING_BY_OWNER`] reports at most.
const PENDING_OWNERS_REPORTED: usize = 100;

/// Every metric name, for the test that checks `/metrics` and the README.
pub const ALL: &[&str] = &[
    HTTP_REQUESTS,
    HTTP_DURATION,
    JOBS_CREATED,
    JOBS_REPLAYED,
    JOBS_CONFLICTED,
    ATTEMPTS,
    RACES_LOST,
    HEDGES_STARTED,
    HEDGES_WON,
    HEDGES_SKIPPED,
    BREAKER_STATE,
    UNKNOWN_OPEN,
    UNKNOWN_OLDEST_AGE,
    RECONCILIATIONS,
    PROVIDER_DURATION,
    QUALIFICATIONS,
    CLAIM_BATCH,
    SETTLE_BATCH,
    QUEUE_DEPTH,
    RATE_LIMITED,
    LONG_POLLS_OPEN,
    LONG_POLLS_REFUSED,
    TOKENS,
    COST,
    PURGED_JOBS,
    STORAGE_FULL,
    DATABASE_UNAVAILABLE,
    CONNECTIONS_REFUSED,
    UNKNOWN_PAST_RETENTION,
    CLAIMS_DEFERRED,
    ATTEMPT_WAIT,
    PENDING_BY_OWNER,
    PENDING_BY_PROVIDER,
    HELD_ENTRIES,
];

/// The `provider` of the attempts counted without theirs: those canceled
/// with their job or by a sibling's win, and those whose lease expired.
const UNATTRIBUTED: &str = "";

/// The `kind` of [`TOKENS`].
const TOKEN_KINDS: [&str; 2] = ["prompt", "completion"];

/// The `result` of [`QUALIFICATIONS`]: passed, then failed.
const QUALIFICATION_RESULTS: [&str; 2] = ["passed", "failed"];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder (once) and returns its renderer.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let latency = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
            let batch = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
            let wait = [0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &latency)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(CLAIM_BATCH.into()), &batch))
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(SETTLE_BATCH.into()), &batch))
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(ATTEMPT_WAIT.into()), &wait))
                .expect("valid buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a host program's):
            // then onejob renders an empty page rather than fail.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests by route, method and status");
    metrics::describe_histogram!(HTTP_DURATION, metrics::Unit::Seconds, "HTTP request latency");
    metrics::describe_counter!(JOBS_CREATED, "jobs created");
    metrics::describe_counter!(JOBS_REPLAYED, "job creations answered as replays");
    metrics::describe_counter!(JOBS_CONFLICTED, "job creations refused: key reused for another intent");
    metrics::describe_counter!(ATTEMPTS, "attempts by provider and outcome");
    metrics::describe_counter!(RACES_LOST, "outputs that lost the compare-and-swap");
    metrics::describe_counter!(HEDGES_STARTED, "hedged attempts started, by the hedge's provider");
    metrics::describe_counter!(HEDGES_WON, "hedged attempts whose output won the job, by the hedge's provider");
    metrics::describe_counter!(HEDGES_SKIPPED, "hedges due but not started, by why");
    metrics::describe_gauge!(BREAKER_STATE, "each provider breaker's state: 1 for the one it is in");
    metrics::describe_gauge!(UNKNOWN_OPEN, "attempts whose outcome is unknown");
    metrics::describe_gauge!(UNKNOWN_OLDEST_AGE, metrics::Unit::Seconds, "age of the oldest unknown attempt");
    metrics::describe_counter!(RECONCILIATIONS, "status lookups of unknown attempts by result");
    metrics::describe_histogram!(PROVIDER_DURATION, metrics::Unit::Seconds, "provider call latency");
    metrics::describe_counter!(QUALIFICATIONS, "qualification runs by result");
    metrics::describe_histogram!(CLAIM_BATCH, "attempts claimed per claim");
    metrics::describe_histogram!(SETTLE_BATCH, "a worker's outputs settled per transaction");
    metrics::describe_gauge!(QUEUE_DEPTH, "pending attempts due now");
    metrics::describe_counter!(
        RATE_LIMITED,
        "requests refused by this process's per-owner rate limit (each replica has its own)"
    );
    metrics::describe_gauge!(LONG_POLLS_OPEN, "long-polls waiting in this process");
    metrics::describe_counter!(
        LONG_POLLS_REFUSED,
        "long-polls refused: their owner held max_long_polls_per_owner open in this process"
    );
    metrics::describe_counter!(TOKENS, "tokens of settled attempts by provider, outcome and kind");
    metrics::describe_counter!(COST, "cost of settled attempts in billionths of the currency");
    metrics::describe_counter!(PURGED_JOBS, "finished jobs purged past their retention");
    metrics::describe_counter!(STORAGE_FULL, "database errors that said its storage is full");
    metrics::describe_counter!(DATABASE_UNAVAILABLE, "database errors that said it is unavailable");
    metrics::describe_counter!(CONNECTIONS_REFUSED, "new database connections refused: a standby, or read-only");
    metrics::describe_gauge!(COMMIT_WAITS_FOR_STANDBY, "1 when the database's commits wait for a synchronous standby");
    metrics::describe_gauge!(UNKNOWN_PAST_RETENTION, "jobs unknown for longer than the shortest retention (kept)");
    metrics::describe_counter!(CLAIMS_DEFERRED, "owners or providers a claim held back because of a limit, by limit");
    metrics::describe_histogram!(ATTEMPT_WAIT, metrics::Unit::Seconds, "time from an attempt's admission to its claim");
    metrics::describe_gauge!(PENDING_BY_PROVIDER, "pending attempts by provider");
    metrics::describe_gauge!(HELD_ENTRIES, "entries held in memory now, by structure");
}

/// Folds the histograms' samples recorded since the last time into their
/// buckets every few seconds: the recorder keeps each sample until then,
/// and a process nobody scrapes would keep them all.
pub async fn keep_up(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// The `/metrics` page: what the recorder holds, then the latest
/// [`PENDING_BY_OWNER`] report.
pub fn render(handle: &PrometheusHandle) -> String {
    use std::fmt::Write as _;
    let mut page = handle.render();
    let report = PENDING_OWNERS.lock_anyway();
    let _ = write!(
        page,
        "# HELP {PENDING_BY_OWNER} pending attempts by owner, named by the first 12 hex digits of its id's SHA-256 \
         (the {PENDING_OWNERS_REPORTED} owners with the most)\n# TYPE {PENDING_BY_OWNER} gauge\n"
    );
    for (owner, count) in report.iter() {
        let _ = writeln!(page, "{PENDING_BY_OWNER}{{owner=\"{owner}\"}} {count}");
    }
    page
}

/// Sets [`BREAKER_STATE`] for each provider with a breaker.
pub fn breakers(states: &[(String, crate::domain::breaker::BreakerState)]) {
    for (provider, now) in states {
        for state in crate::domain::breaker::BreakerState::ALL {
            let value = if state == *now { 1.0 } else { 0.0 };
            gauge!(BREAKER_STATE, "provider" => provider.clone(), "state" => state.as_str()).set(value);
        }
    }
}

/// Sets [`HELD_ENTRIES`].
pub fn held(entries: &[(&'static str, usize)]) {
    for (structure, count) in entries {
        gauge!(HELD_ENTRIES, "structure" => *structure).set(*count as f64);
    }
}

/// Exports at zero every counter whose labels the configuration names,
/// with the label sets the code counts under: jobs per task; attempts,
/// races, tokens and cost per provider and outcome (cost for priced
/// providers, in their currency); status lookups per provider that has
/// one; qualifications per provider and task; and the counters without
/// labels. Counting nothing, it leaves counts already made as they are.
pub fn start_at_zero(settings: &crate::config::Settings) {
    for task in settings.tasks.keys() {
        for metric in [JOBS_CREATED, JOBS_REPLAYED, JOBS_CONFLICTED] {
            job_requests(metric, task).increment(0);
        }
    }
    for (provider, provider_settings) in &settings.providers {
        races_lost(provider).increment(0);
        counter!(HEDGES_STARTED, "provider" => provider.clone()).increment(0);
        counter!(HEDGES_WON, "provider" => provider.clone()).increment(0);
        gauge!(PENDING_BY_PROVIDER, "provider" => provider.clone()).set(0.0);
        for outcome in SettledAs::ALL {
            attempts(provider, outcome.as_str()).increment(0);
            for kind in TOKEN_KINDS {
                tokens(provider, outcome, kind).increment(0);
            }
            if let Some(price) = &provider_settings.price {
                cost_nanos(provider, outcome, &price.currency).increment(0);
            }
        }
        if provider_settings.has_status_lookup() {
            for result in Lookup::ALL {
                reconciliations(provider, result).increment(0);
            }
        }
        for task in settings.tasks.keys() {
            for result in QUALIFICATION_RESULTS {
                qualifications(provider, task, result).increment(0);
            }
        }
    }
    attempts(UNATTRIBUTED, "canceled").increment(0);
    attempts(UNATTRIBUTED, SettledAs::Unknown.as_str()).increment(0);
    counter!(RATE_LIMITED).increment(0);
    counter!(PURGED_JOBS).increment(0);
    counter!(STORAGE_FULL).increment(0);
    counter!(DATABASE_UNAVAILABLE).increment(0);
    counter!(CONNECTIONS_REFUSED).increment(0);
    for why in Deferral::ALL {
        counter!(CLAIMS_DEFERRED, "limit" => why.as_str()).increment(0);
    }
    counter!(LONG_POLLS_REFUSED).increment(0);
    gauge!(LONG_POLLS_OPEN).increment(0.0);
    for skip in crate::domain::hedge::HedgeSkip::ALL {
        counter!(HEDGES_SKIPPED, "why" => skip.as_str()).increment(0);
    }
}

/// Counts a hedge started on `provider`.
pub fn hedge_started(provider: &str) {
    counter!(HEDGES_STARTED, "provider" => provider.to_owned()).increment(1);
}

/// Counts a hedge on `provider` that won its job.
pub fn hedge_won(provider: &str) {
    counter!(HEDGES_WON, "provider" => provider.to_owned()).increment(1);
}

/// Counts a hedge due but not started.
pub fn hedge_skipped(why: crate::domain::hedge::HedgeSkip) {
    counter!(HEDGES_SKIPPED, "why" => why.as_str()).increment(1);
}

fn attempts(provider: &str, outcome: &'static str) -> metrics::Counter {
    counter!(ATTEMPTS, "provider" => provider.to_owned(), "outcome" => outcome)
}

fn races_lost(provider: &str) -> metrics::Counter {
    counter!(RACES_LOST, "provider" => provider.to_owned())
}

fn tokens(provider: &str, outcome: SettledAs, kind: &'static str) -> metrics::Counter {
    counter!(TOKENS, "provider" => provider.to_owned(), "outcome" => outcome.as_str(), "kind" => kind)
}

fn cost_nanos(provider: &str, outcome: SettledAs, currency: &str) -> metrics::Counter {
    counter!(COST, "provider" => provider.to_owned(), "outcome" => outcome.as_str(), "currency" => currency.to_owned())
}

fn reconciliations(provider: &str, result: Lookup) -> metrics::Counter {
    counter!(RECONCILIATIONS, "provider" => provider.to_owned(), "result" => result.as_str())
}

fn qualifications(provider: &str, task: &str, result: &'static str) -> metrics::Counter {
    counter!(QUALIFICATIONS, "provider" => provider.to_owned(), "task" => task.to_owned(), "result" => result)
}

fn job_requests(metric: &'static str, task: &str) -> metrics::Counter {
    counter!(metric, "task" => task.to_owned())
}

/// Counts the tokens and cost of an attempt that reached `outcome`.
pub fn usage(provider: &str, outcome: SettledAs, usage: &crate::domain::Usage, cost: Option<&crate::domain::Cost>) {
    for (kind, count) in TOKEN_KINDS.into_iter().zip([usage.prompt_tokens, usage.completion_tokens]) {
        tokens(provider, outcome, kind).increment(u64::try_from(count).unwrap_or(0));
    }
    if let Some(cost) = cost {
        let nanos = cost.amount.units() / 1_000_000_000;
        cost_nanos(provider, outcome, &cost.currency).increment(u64::try_from(nanos).unwrap_or(0));
    }
}

/// Counts an attempt that reached `outcome`.
pub fn attempt(provider: &str, outcome: SettledAs) {
    attempts(provider, outcome.as_str()).increment(1);
}

/// Counts attempts canceled with their job or by a sibling's win.
pub fn attempts_canceled(count: usize) {
    if count > 0 {
        attempts(UNATTRIBUTED, "canceled").increment(count as u64);
    }
}

/// Counts a database error that said its storage is full.
pub fn storage_full() {
    counter!(STORAGE_FULL).increment(1);
}

/// Counts a database error that said it is unavailable.
pub fn database_unavailable() {
    counter!(DATABASE_UNAVAILABLE).increment(1);
}

/// Counts a new database connection refused.
pub fn connection_refused() {
    counter!(CONNECTIONS_REFUSED).increment(1);
}

/// Whether the database's commits wait for a synchronous standby.
pub fn commit_waits_for_standby(waits: bool) {
    metrics::gauge!(COMMIT_WAITS_FOR_STANDBY).set(f64::from(u8::from(waits)));
}

/// Counts the jobs of a purge batch.
pub fn purged(jobs: u64) {
    counter!(PURGED_JOBS).increment(jobs);
}

/// The jobs unknown past their retention, as last counted.
pub fn unknown_past_retention(count: u64) {
    gauge!(UNKNOWN_PAST_RETENTION).set(count as f64);
}

/// Counts an attempt whose lease expired: its outcome is unknown.
pub fn lease_expired() {
    attempts(UNATTRIBUTED, SettledAs::Unknown.as_str()).increment(1);
}

/// Counts a lost race.
pub fn race_lost(provider: &str) {
    races_lost(provider).increment(1);
}

/// Records one provider call.
pub fn provider_call(provider: &str, outcome: &'static str, took: Duration) {
    histogram!(PROVIDER_DURATION, "provider" => provider.to_owned(), "outcome" => outcome).record(took.as_secs_f64());
}

/// Counts one status lookup.
pub fn reconciliation(provider: &str, result: Lookup) {
    reconciliations(provider, result).increment(1);
}

/// Counts a job creation by what it turned out to be.
pub fn job_request(metric: &'static str, task: &str) {
    job_requests(metric, task).increment(1);
}

/// Counts a qualification run.
pub fn qualification(provider: &str, task: &str, passed: bool) {
    let [pass, fail] = QUALIFICATION_RESULTS;
    qualifications(provider, task, if passed { pass } else { fail }).increment(1);
}

/// Records a claim's size.
pub fn claim_batch(size: usize) {
    histogram!(CLAIM_BATCH).record(size as f64);
}

/// Records how many outputs one transaction settled.
pub fn settle_batch(size: usize) {
    histogram!(SETTLE_BATCH).record(size as f64);
}

/// Sets the sampled queue and unknown gauges.
pub fn sampled(pending_due: i64, unknown_open: i64, oldest_unknown: Duration) {
    gauge!(QUEUE_DEPTH).set(pending_due as f64);
    gauge!(UNKNOWN_OPEN).set(unknown_open as f64);
    gauge!(UNKNOWN_OLDEST_AGE).set(oldest_unknown.as_secs_f64());
}

/// Counts owners or providers a claim held back because of `why`.
pub fn claims_deferred(why: Deferral, count: u64) {
    counter!(CLAIMS_DEFERRED, "limit" => why.as_str()).increment(count);
}

/// Records how long an attempt waited from its admission to its claim.
pub fn attempt_waited(provider: &str, waited: Duration) {
    histogram!(ATTEMPT_WAIT, "provider" => provider.to_owned()).record(waited.as_secs_f64());
}

/// The key [`owner_label`] names owners with: set at start, once a
/// process; a random one where none is configured.
static OWNER_KEY: OnceLock<Vec<u8>> = OnceLock::new();

/// Sets the key owners are named with on `/metrics` (the first call of a
/// process wins); `None`: a random key, this process's alone.
pub fn key_owner_labels(key: Option<Vec<u8>>) {
    let _ = OWNER_KEY.set(key.unwrap_or_else(random_key));
}

fn random_key() -> Vec<u8> {
    let mut key = vec![0; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).expect("the system's random bytes");
    key
}

/// How [`PENDING_BY_OWNER`] names an owner: the first 12 hex digits of the
/// HMAC-SHA256 of its id under the key of `server.metrics_owner_key_env`
/// (`printf %s OWNER | openssl dgst -sha256 -hmac "$KEY" | awk '{print
/// substr($NF, 1, 12)}'`), so that the page, which needs no key, names no
/// tenant, and no one without the key can tell which owner a label is.
pub fn owner_label(owner: &str) -> String {
    use hmac::Mac;
    let key = OWNER_KEY.get_or_init(random_key);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(owner.as_bytes());
    hex::encode(&mac.finalize().into_bytes()[..6])
}

/// The next [`PENDING_BY_OWNER`] report after `last`: the owners with the
/// most pending attempts now (at most [`PENDING_OWNERS_REPORTED`]), by
/// label, and at 0 those `last` had with some that are no longer among them.
fn owners_report(last: &[(String, i64)], by_owner: &[(String, i64)]) -> Vec<(String, i64)> {
    let mut owners: Vec<(String, i64)> = by_owner.iter().map(|(owner, count)| (owner_label(owner), *count)).collect();
    owners.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    owners.truncate(PENDING_OWNERS_REPORTED);
    let gone: Vec<(String, i64)> = last
        .iter()
        .filter(|(owner, count)| *count > 0 && !owners.iter().any(|(now, _)| now == owner))
        .map(|(owner, _)| (owner.clone(), 0))
        .collect();
    owners.extend(gone);
    owners
}

/// The latest [`PENDING_BY_OWNER`] report, as [`render`] writes it.
static PENDING_OWNERS: std::sync::Mutex<Vec<(String, i64)>> = std::sync::Mutex::new(Vec::new());

/// Reports the pending attempts by owner (the most loaded first, up to
/// 100) and by provider. An owner that had some in the last report and has
/// none now reads 0 in this one, and is left out of the next; a provider
/// that had some reads 0 (providers are few: the configuration names them).
pub fn pending(by_owner: &[(String, i64)], by_provider: &[(String, i64)]) {
    static PROVIDERS_SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    {
        let mut report = PENDING_OWNERS.lock_anyway();
        *report = owners_report(&report, by_owner);
    }
    let mut seen = PROVIDERS_SEEN.lock_anyway();
    for gone in seen.iter().filter(|name| !by_provider.iter().any(|(provider, _)| provider == *name)) {
        gauge!(PENDING_BY_PROVIDER, "provider" => gone.clone()).set(0.0);
    }
    for (provider, count) in by_provider {
        gauge!(PENDING_BY_PROVIDER, "provider" => provider.clone()).set(*count as f64);
    }
    *seen = by_provider.iter().map(|(provider, _)| provider.clone()).collect();
}

/// Records one HTTP request.
pub fn http_request(route: &str, method: &str, status: u16, took: Duration) {
    counter!(HTTP_REQUESTS, "route" => route.to_owned(), "method" => method.to_owned(), "status" => status.to_string())
        .increment(1);
    histogram!(HTTP_DURATION, "route" => route.to_owned(), "method" => method.to_owned()).record(took.as_secs_f64());
}

/// Counts a rate-limited request.
pub fn rate_limited() {
    counter!(RATE_LIMITED).increment(1);
}

/// Counts a long-poll that began waiting.
pub fn long_poll_opened() {
    gauge!(LONG_POLLS_OPEN).increment(1.0);
}

/// Counts a long-poll that ended, however it did.
pub fn long_poll_closed() {
    gauge!(LONG_POLLS_OPEN).decrement(1.0);
}

/// Counts a long-poll refused by its owner's cap.
pub fn long_poll_refused() {
    counter!(LONG_POLLS_REFUSED).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_gone_from_the_pending_report_reads_0_once_then_leaves_no_series() {
        let owners =
            |prefix: &str| -> Vec<(String, i64)> { (0..150).map(|n| (format!("{prefix}{n}"), n + 1)).collect() };
        let first = owners_report(&[], &owners("a"));
        assert_eq!(first.len(), 100, "the 100 owners with the most");
        assert_eq!(first[0], (owner_label("a149"), 150));
        let second = owners_report(&first, &owners("b"));
        assert_eq!(second.len(), 200, "the new 100, and the old 100 at 0");
        assert_eq!(second.iter().filter(|(_, count)| *count == 0).count(), 100);
        let third = owners_report(&second, &owners("b"));
        assert_eq!(third.len(), 100, "an owner at 0 is not reported again");
        assert!(third.iter().all(|(owner, _)| second[..100].iter().any(|(kept, _)| kept == owner)));
    }
}
