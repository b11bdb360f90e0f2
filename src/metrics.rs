//! Prometheus metrics, recorded through the `metrics` facade and rendered
//! at `GET /metrics`. Every name onejob records is here, so that the list
//! an operator alerts on is in one place.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

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
/// Attempts that reached an outcome, by provider and outcome (succeeded,
/// failed, unknown, superseded, canceled).
pub const ATTEMPTS: &str = "onejob_attempts_total";
/// Races lost: outputs that arrived after another attempt had won, by provider.
pub const RACES_LOST: &str = "onejob_races_lost_total";
/// Attempts whose outcome is unknown now.
pub const UNKNOWN_OPEN: &str = "onejob_unknown_attempts_open";
/// How long the oldest unknown attempt has been unknown.
pub const UNKNOWN_OLDEST_AGE: &str = "onejob_unknown_attempt_oldest_age_seconds";
/// Status lookups of unknown attempts, by provider and result.
pub const RECONCILIATIONS: &str = "onejob_reconciliations_total";
/// Provider call latency, by provider and outcome.
pub const PROVIDER_DURATION: &str = "onejob_provider_request_duration_seconds";
/// Qualification runs, by provider, task and result (passed, failed).
pub const QUALIFICATIONS: &str = "onejob_qualifications_total";
/// Attempts claimed per claim statement.
pub const CLAIM_BATCH: &str = "onejob_claim_batch_size";
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

/// Every metric name, for the test that checks `/metrics` and the README.
pub const ALL: &[&str] = &[
    HTTP_REQUESTS,
    HTTP_DURATION,
    JOBS_CREATED,
    JOBS_REPLAYED,
    JOBS_CONFLICTED,
    ATTEMPTS,
    RACES_LOST,
    UNKNOWN_OPEN,
    UNKNOWN_OLDEST_AGE,
    RECONCILIATIONS,
    PROVIDER_DURATION,
    QUALIFICATIONS,
    CLAIM_BATCH,
    QUEUE_DEPTH,
    RATE_LIMITED,
    LONG_POLLS_OPEN,
    LONG_POLLS_REFUSED,
    TOKENS,
    COST,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide recorder (once) and returns its renderer.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let latency = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
            let batch = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &latency)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(CLAIM_BATCH.into()), &batch))
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
    metrics::describe_gauge!(UNKNOWN_OPEN, "attempts whose outcome is unknown");
    metrics::describe_gauge!(UNKNOWN_OLDEST_AGE, metrics::Unit::Seconds, "age of the oldest unknown attempt");
    metrics::describe_counter!(RECONCILIATIONS, "status lookups of unknown attempts by result");
    metrics::describe_histogram!(PROVIDER_DURATION, metrics::Unit::Seconds, "provider call latency");
    metrics::describe_counter!(QUALIFICATIONS, "qualification runs by result");
    metrics::describe_histogram!(CLAIM_BATCH, "attempts claimed per claim");
    metrics::describe_gauge!(QUEUE_DEPTH, "pending attempts due now");
    metrics::describe_counter!(RATE_LIMITED, "requests refused by this process's per-owner rate limit (each replica has its own)");
    metrics::describe_gauge!(LONG_POLLS_OPEN, "long-polls waiting in this process");
    metrics::describe_counter!(LONG_POLLS_REFUSED, "long-polls refused: their owner held max_long_polls_per_owner open in this process");
    metrics::describe_counter!(TOKENS, "tokens of settled attempts by provider, outcome and kind");
    metrics::describe_counter!(COST, "cost of settled attempts in billionths of the currency");
}

/// Counts the tokens and cost of an attempt that reached `outcome`.
pub fn usage(provider: &str, outcome: &'static str, usage: &crate::domain::Usage, cost: Option<&crate::domain::Cost>) {
    for (kind, tokens) in [("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens)] {
        counter!(TOKENS, "provider" => provider.to_owned(), "outcome" => outcome, "kind" => kind)
            .increment(u64::try_from(tokens).unwrap_or(0));
    }
    if let Some(cost) = cost {
        let nanos = cost.amount.units() / 1_000_000_000;
        counter!(COST, "provider" => provider.to_owned(), "outcome" => outcome, "currency" => cost.currency.clone())
            .increment(u64::try_from(nanos).unwrap_or(0));
    }
}

/// Counts an attempt that reached `outcome`.
pub fn attempt(provider: &str, outcome: &'static str) {
    counter!(ATTEMPTS, "provider" => provider.to_owned(), "outcome" => outcome).increment(1);
}

/// Counts attempts canceled with their job or by a sibling's win.
pub fn attempts_canceled(count: usize) {
    if count > 0 {
        counter!(ATTEMPTS, "provider" => "", "outcome" => "canceled").increment(count as u64);
    }
}

/// Counts a lost race.
pub fn race_lost(provider: &str) {
    counter!(RACES_LOST, "provider" => provider.to_owned()).increment(1);
}

/// Records one provider call.
pub fn provider_call(provider: &str, outcome: &'static str, took: Duration) {
    histogram!(PROVIDER_DURATION, "provider" => provider.to_owned(), "outcome" => outcome).record(took.as_secs_f64());
}

/// Counts one status lookup.
pub fn reconciliation(provider: &str, result: &'static str) {
    counter!(RECONCILIATIONS, "provider" => provider.to_owned(), "result" => result).increment(1);
}

/// Counts a job creation by what it turned out to be.
pub fn job_request(metric: &'static str, task: &str) {
    counter!(metric, "task" => task.to_owned()).increment(1);
}

/// Counts a qualification run.
pub fn qualification(provider: &str, task: &str, passed: bool) {
    let result = if passed { "passed" } else { "failed" };
    counter!(QUALIFICATIONS, "provider" => provider.to_owned(), "task" => task.to_owned(), "result" => result).increment(1);
}

/// Records a claim's size.
pub fn claim_batch(size: usize) {
    histogram!(CLAIM_BATCH).record(size as f64);
}

/// Sets the sampled queue and unknown gauges.
pub fn sampled(pending_due: i64, unknown_open: i64, oldest_unknown: Duration) {
    gauge!(QUEUE_DEPTH).set(pending_due as f64);
    gauge!(UNKNOWN_OPEN).set(unknown_open as f64);
    gauge!(UNKNOWN_OLDEST_AGE).set(oldest_unknown.as_secs_f64());
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
