//! Hedged attempts, over HTTP against the running application with the
//! simulator as the providers: a job whose attempt has not answered
//! `after_ms` after its send gets a hedge (origin `hedge`) on the task's
//! hedge providers; the job's compare-and-swap takes one winner and the
//! loser is canceled at its provider. Never while the attempt is pending,
//! never to an unqualified provider, never past the job's budget or the
//! task's `max_share`; a streamed answer's first piece ends the chance of
//! one; a hedge may win while its primary is unknown; a percentile delay
//! waits for twenty answers, then hedges after the provider's own latency.
//!
//! `sim-tail` answers every call from its tail (`tail_rate = 1`), late;
//! `sim-fast` answers in milliseconds. Full-size runs (1,000 hedged jobs,
//! 500 jobs under `max_share`) are `scripts/hedging-full.sh`'s; `HEDGED_JOBS` sets
//! the size here.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, provider};
use onejob::app::Role;
use onejob::config::{HedgeSettings, Settings};
use onejob::domain::{JobId, Money, OwnerId};
use onejob::store::TaskRules;

/// How long sim-tail takes to answer.
const TAIL_MS: u64 = 2_000;
/// How long a hedge waits for an answer.
const AFTER_MS: u64 = 200;

fn hedge(providers: &[&str], max_share: f64) -> HedgeSettings {
    HedgeSettings {
        after: Some(Duration::from_millis(AFTER_MS)),
        after_percentile: None,
        max_hedges: 1,
        providers: Some(providers.iter().map(|p| (*p).to_owned()).collect()),
        max_share,
    }
}

/// sim-tail (every call in the tail), sim-unqualified (sim-fast, never
/// qualified), and `summarize` hedged to sim-fast.
fn settings(s: &mut Settings, tail_ms: u64) {
    let sim = "kind = \"sim\"\nmodel = \"sim-1\"\nprice = { input_per_million = \"0.15\", output_per_million = \"0.60\", currency = \"USD\" }";
    let tail = format!("{sim}\nlatency_ms = 5\ntail_rate = 1.0\ntail_latency_ms = {tail_ms}\ntimeout_ms = 10000");
    s.providers.insert("sim-tail".into(), provider(&tail));
    s.providers.insert("sim-unqualified".into(), provider(&format!("{sim}\nlatency_ms = 5")));
    let summarize = s.tasks.get_mut("summarize").unwrap();
    summarize.hedge = Some(hedge(&["sim-fast"], 1.0));
    summarize.max_in_flight = 3;
    // The load tests' jobs all run at once, each with its hedge, and are
    // polled without a rate limit.
    s.worker.concurrency = 4 * load() + 64;
    s.server.rate_limit_per_second = 0;
}

async fn create(app: &TestApp, key: &str, provider: &str, max_cost: Option<Money>) -> String {
    let mut body = json!({"task": "summarize", "input": {"text": format!("hedged job {key}")}, "provider": provider});
    if let Some(max_cost) = max_cost {
        body["max_cost"] = json!(max_cost.to_string());
    }
    let response = app.post_job(key, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED, "{:?}", response.text().await);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

fn at(attempt: &Value, field: &str) -> DateTime<Utc> {
    attempt[field].as_str().unwrap_or_else(|| panic!("{field} of {attempt:#}")).parse().unwrap()
}

fn millis_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds()
}

/// Waits until job `id` is finished and none of its attempts runs or is
/// unknown any more.
async fn settled(app: &TestApp, id: &str) -> Value {
    app.wait_for(id, "the job and every attempt settled", |job| {
        ["succeeded", "failed", "canceled"].contains(&job["state"].as_str().unwrap_or(""))
            && job["attempts"].as_array().unwrap().iter().all(|a| {
                // Settled, and costed once sent (a hedge canceled before
                // its send has no cost).
                !["pending", "running", "unknown"].contains(&a["state"].as_str().unwrap())
                    && (!a["cost"].is_null() || a["started_at"].is_null())
            })
    })
    .await
}

/// A job won by its hedge: attempt 2, origin `hedge`, on `provider`,
/// started at least `AFTER_MS` after its primary was claimed; the primary
/// canceled at its provider.
async fn won_by_its_hedge(app: &TestApp, job: &Value, provider: &str) {
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(2)), "{job:#}");
    assert_eq!(attempts.len(), 2, "{job:#}");
    let (primary, hedge) = (&attempts[0], &attempts[1]);
    assert_eq!((hedge["origin"].as_str(), hedge["provider"].as_str()), (Some("hedge"), Some(provider)), "{job:#}");
    assert_eq!(primary["state"], "canceled", "{job:#}");
    let waited = millis_between(at(primary, "started_at"), at(hedge, "created_at"));
    assert!(waited >= AFTER_MS as i64, "hedged {waited} ms after its primary was claimed: {job:#}");
    let log = app.simulator_log().await;
    let at_provider = &log[primary["id"].as_str().unwrap()];
    assert!(at_provider["canceled_after_ms"].is_u64(), "the loser was canceled at its provider: {at_provider:#}");
}

async fn a_running_attempt_without_an_answer_after_after_ms_is_hedged_and_one_pending_is_not(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, TAIL_MS);
        // One call at a time: the second job waits pending for the first.
        s.providers.get_mut("sim-tail").unwrap().max_concurrent = Some(1);
    })
    .await;
    let first = create(&app, "first", "sim-tail", None).await;
    let second = create(&app, "second", "sim-tail", None).await;
    let (first, second) = (settled(&app, &first).await, settled(&app, &second).await);
    won_by_its_hedge(&app, &first, "sim-fast").await;
    won_by_its_hedge(&app, &second, "sim-fast").await;
    // The second job's attempt was pending for at least the first's hedge
    // delay, and it was hedged only AFTER_MS after it was sent all the same.
    let primary = &second["attempts"][0];
    let pending = millis_between(at(primary, "created_at"), at(primary, "started_at"));
    assert!(pending >= AFTER_MS as i64, "pending {pending} ms: {second:#}");
    let hedged = millis_between(at(primary, "created_at"), at(&second["attempts"][1], "created_at"));
    assert!(hedged >= pending + AFTER_MS as i64, "hedged {hedged} ms after creation: {second:#}");
    // The event says which attempt it hedges, and after how long.
    let events = app
        .store()
        .list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(second["id"].as_str().unwrap()).unwrap())
        .await
        .unwrap();
    let admitted = events
        .iter()
        .find(|e| e.kind.as_str() == "attempt-admitted" && e.attempt_number == Some(2))
        .expect("the hedge's admission is an event");
    assert_eq!((&admitted.detail["origin"], &admitted.detail["hedge_of"]), (&json!("hedge"), &json!(1)));
    assert_eq!(admitted.detail["after_ms"], json!(AFTER_MS), "{:?}", admitted.detail);
}

async fn a_hedge_never_goes_to_an_unqualified_provider_nor_past_the_jobs_budget(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, TAIL_MS);
        s.tasks.get_mut("summarize").unwrap().hedge = Some(hedge(&["sim-unqualified", "sim-fast"], 1.0));
    })
    .await;
    let hedged = create(&app, "hedged", "sim-tail", None).await;
    won_by_its_hedge(&app, &settled(&app, &hedged).await, "sim-fast").await;

    // A budget that holds the primary's worst case and not a hedge's too.
    let input = json!({"text": "hedged job over-budget"});
    let worst = |provider| app.catalog.worst_case_cost("summarize", provider, &input).unwrap();
    let budget = Money::from_units(worst("sim-tail").units() + worst("sim-fast").units() - 1);
    let over = create(&app, "over-budget", "sim-tail", Some(budget)).await;
    let job = settled(&app, &over).await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no hedge: {job:#}");
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(1)), "{job:#}");
    let primary = &job["attempts"][0];
    let took = millis_between(at(primary, "started_at"), at(primary, "finished_at"));
    assert!(took >= TAIL_MS as i64 - 100, "the primary answered from the tail, unhedged: {job:#}");
}

/// The jobs of the load tests (`HEDGED_JOBS`, 100 by default).
fn load() -> usize {
    std::env::var("HEDGED_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(100)
}

async fn create_many(app: &TestApp, prefix: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(20) {
        let made = futures_util::future::join_all(
            chunk.iter().map(|i| async move { create(app, &format!("{prefix}-{i}"), "sim-tail", None).await }),
        )
        .await;
        ids.extend(made);
    }
    ids
}

async fn hedges_stay_within_max_share_under_a_load_all_in_the_tail(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, 1_000);
        s.tasks.get_mut("summarize").unwrap().hedge = Some(hedge(&["sim-fast"], 0.2));
    })
    .await;
    let count = load();
    let ids = create_many(&app, "share", count).await;
    let mut hedged = 0;
    for id in &ids {
        let job = settled(&app, id).await;
        let attempts = job["attempts"].as_array().unwrap();
        let winners = attempts.iter().filter(|a| a["state"] == "succeeded").count();
        assert_eq!((job["state"].as_str(), winners), (Some("succeeded"), 1), "{job:#}");
        hedged += attempts.iter().filter(|a| a["origin"] == "hedge").count();
    }
    assert!(hedged > 0, "some jobs were hedged");
    assert!(hedged as f64 <= 0.2 * count as f64, "{hedged} hedges of {count} jobs");
}

async fn every_hedged_job_has_exactly_one_winner_and_every_loser_is_canceled(backend: Backend) {
    // The primaries' tail leaves the hedges, late as they may be under a
    // full-size load, time to win and their losers' aborts time to land.
    let app = TestApp::spawn_live(backend, |s| settings(s, TAIL_MS)).await;
    let ids = create_many(&app, "race", load()).await;
    for id in &ids {
        won_by_its_hedge(&app, &settled(&app, id).await, "sim-fast").await;
    }
}

async fn a_streaming_job_is_hedged_until_its_first_piece_and_never_after(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, TAIL_MS);
        let sim = "kind = \"sim\"\nmodel = \"sim-1\"\nprice = { input_per_million = \"0.15\", output_per_million = \"0.60\", currency = \"USD\" }";
        // Its first piece at once, the rest over about two seconds.
        s.providers.insert("sim-trickle".into(), provider(&format!("{sim}\nlatency_ms = 5\ntokens_per_second = 10")));
        s.providers.get_mut("sim-fast").unwrap().tokens_per_second = 500;
        s.tasks.get_mut("summarize").unwrap().stream = true;
    })
    .await;
    let tail = create(&app, "tail", "sim-tail", None).await;
    let tail = settled(&app, &tail).await;
    won_by_its_hedge(&app, &tail, "sim-fast").await;

    let trickle = create(&app, "trickle", "sim-trickle", None).await;
    let job = settled(&app, &trickle).await;
    let primary = &job["attempts"][0];
    let took = millis_between(at(primary, "started_at"), at(primary, "finished_at"));
    assert!(took > 2 * AFTER_MS as i64, "the answer streamed for longer than the hedge delay: {job:#}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "its stream had started: no hedge: {job:#}");
    assert_eq!(job["winning_attempt"], 1, "{job:#}");
}

async fn a_hedge_wins_while_its_primary_is_unknown_and_the_primary_settles_as_a_loser(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, TAIL_MS);
        // The primary's deadline passes 800 ms after its claim (unknown);
        // its hedge, sent 200 ms after the primary's send, answers 1 s
        // later. The 600 ms between the hedge and the deadline leave room
        // for a slow claim-to-send on a loaded database.
        s.providers.get_mut("sim-fast").unwrap().latency = Duration::from_millis(1_000);
        let hang = s.providers.get_mut("sim-hang").unwrap();
        (hang.timeout, hang.hang) = (Duration::from_millis(800), Some(Duration::from_millis(2_500)));
    })
    .await;
    let id = create(&app, "unknown", "sim-hang", None).await;
    let unknown = app.wait_for(&id, "the primary unknown", |job| job["attempts"][0]["state"] == "unknown").await;
    assert_eq!(unknown["attempts"][1]["origin"], "hedge", "hedged while it ran: {unknown:#}");
    let job = settled(&app, &id).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(2)), "{job:#}");
    assert_eq!(attempts.len(), 2, "no hedge while the primary was unknown: {job:#}");
    // The primary, unknown when its hedge won, is settled by the
    // reconciler from what the provider's status lookup says (sim-hang
    // gave up): failed, its output never applied.
    let primary = &attempts[0];
    let error = &primary["error"];
    assert_eq!(
        (primary["state"].as_str(), error["type"].as_str(), error["detail"]["retryable"].as_bool()),
        (Some("failed"), Some("provider-error"), Some(false)),
        "{job:#}"
    );
    assert!(error["message"].as_str().unwrap().contains("status lookup"), "{job:#}");
    assert!(primary["output"].is_null() && primary["unapplied_output"].is_null(), "{job:#}");
}

async fn a_percentile_delay_waits_for_twenty_answers_then_hedges_the_tail_after_the_providers_own_latency(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s, TAIL_MS);
        // One call in ten in the tail (the 10th, the 20th, the 30th, ...).
        s.providers.get_mut("sim-tail").unwrap().tail_rate = 0.1;
        s.tasks.get_mut("summarize").unwrap().hedge = Some(HedgeSettings {
            after: None,
            // Of twenty answers, two in the tail: the 90th percentile is
            // the slowest of the others.
            after_percentile: Some(90.0),
            ..hedge(&["sim-fast"], 1.0)
        });
    })
    .await;
    let took = |job: &Value| millis_between(at(job, "created_at"), at(job, "updated_at"));
    // The first twenty calls: fewer than twenty answers were known when
    // each was sent, so none is hedged, and the two in the tail take it.
    let first = create_many(&app, "learning", 20).await;
    let mut slow = 0;
    for id in &first {
        let job = settled(&app, id).await;
        assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no hedge before twenty answers: {job:#}");
        slow += usize::from(took(&job) >= TAIL_MS as i64 - 100);
    }
    assert_eq!(slow, 2, "the 10th and 20th calls took the tail unhedged");
    // The next ten: the 30th call is in the tail, and is hedged after the
    // provider's own 90th percentile, far below the tail.
    let next = create_many(&app, "learned", 10).await;
    let mut hedged_tail = 0;
    for id in &next {
        let job = settled(&app, id).await;
        assert!(took(&job) < TAIL_MS as i64 / 2, "no job waited out the tail: {job:#}");
        let attempts = job["attempts"].as_array().unwrap();
        if attempts.len() == 2 && attempts[0]["state"] == "canceled" {
            let hedge = &attempts[1];
            assert_eq!((hedge["origin"].as_str(), hedge["state"].as_str()), (Some("hedge"), Some("succeeded")));
            hedged_tail += 1;
        }
    }
    assert!(hedged_tail >= 1, "the call in the tail was hedged and its hedge won");
}

async fn replicas_hedge_each_others_jobs_with_one_winner_each() {
    let backend = Backend::Postgres;
    let url = backend.fresh_database().await;
    // Each first attempt takes 3 s: long enough for its hedge's whole path
    // (claimed by either replica, called, won) and for the sweep that
    // aborts it on the other replica, on Citus too.
    let adjust = |s: &mut Settings| settings(s, 3_000);
    // The first replica, whose API the jobs come through (its worker woken
    // at each), runs at most 20 calls at once: half of the first attempts.
    // The other half, or the hedges the first cannot run meanwhile, are
    // left to the second replica, which polls every 50 ms.
    let first = TestApp::spawn_on(backend, &url, Role::All, |s| {
        adjust(s);
        s.worker.concurrency = 20;
    })
    .await;
    let second = TestApp::spawn_on(backend, &url, Role::All, adjust).await;
    let ids = create_many(&first, "replicas", 40).await;
    // Each job's primary and hedge, by the replica (its worker) that ran it.
    let mut ran = Vec::new();
    for id in &ids {
        let job = settled(&first, id).await;
        let attempts = job["attempts"].as_array().unwrap();
        assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(2)), "{job:#}");
        assert_eq!((attempts.len(), attempts[0]["state"].as_str()), (2, Some("canceled")), "{job:#}");
        let worker = |attempt: &Value| attempt["worker"].as_str().unwrap_or_else(|| panic!("{job:#}")).to_owned();
        ran.push((worker(&attempts[0]), worker(&attempts[1])));
    }
    // Some job's hedge ran on the replica that did not run its primary.
    let across = ran.iter().filter(|(primary, hedge)| primary != hedge).count();
    assert!(across >= 1, "no hedge ran on the other replica than its primary: {ran:?}");
    drop(second);
}

on_both_backends!(
    a_running_attempt_without_an_answer_after_after_ms_is_hedged_and_one_pending_is_not,
    a_hedge_never_goes_to_an_unqualified_provider_nor_past_the_jobs_budget,
    hedges_stay_within_max_share_under_a_load_all_in_the_tail,
    every_hedged_job_has_exactly_one_winner_and_every_loser_is_canceled,
    a_streaming_job_is_hedged_until_its_first_piece_and_never_after,
    a_hedge_wins_while_its_primary_is_unknown_and_the_primary_settles_as_a_loser,
    a_percentile_delay_waits_for_twenty_answers_then_hedges_the_tail_after_the_providers_own_latency,
);

on_postgres!(replicas_hedge_each_others_jobs_with_one_winner_each);
