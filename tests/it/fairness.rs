//! Fair claims and limits, over the running application on both backends:
//! one owner's backlog never holds up another owner's jobs, an owner's
//! `max_in_flight` and a provider's `max_concurrent` hold across two
//! replicas, a provider's requests per minute keep a burst `pending`, and a
//! 429 with `Retry-After` pauses the provider and puts the same attempt
//! back. The simulators' request logs are the providers' own word on what
//! was in flight at once.

use std::time::Duration;

use crate::common::processes::eventually;
use crate::common::{Backend, TestApp, new_job, open_store};
use chrono::{DateTime, Utc};
use onejob::app::Role;
use onejob::config::Settings;
use onejob::domain::{JobId, OwnerId};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The providers' latency in the overlap tests: long enough for a claim
/// over a limit to show, short enough for dozens of jobs.
const LATENCY_MS: u64 = 150;

/// Creates `count` jobs of `owner` in the store, 32 at a time.
async fn backlog(store: &onejob::store::Store, owner: &str, count: usize) {
    let keys: Vec<String> = (0..count).map(|i| format!("{owner}-{i}")).collect();
    for chunk in keys.chunks(32) {
        let mut creates: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
        for key in chunk {
            let (store, new) = (store.clone(), new_job(owner, key, json!({ "text": format!("{owner} {key}") })));
            creates.spawn(async move {
                store.create_job(&new).await.unwrap();
            });
        }
        creates.join_all().await;
    }
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&app.db).await.unwrap()
}

/// Creates a `summarize` job with `token`; its id.
async fn create(app: &TestApp, token: &str, key: &str) -> String {
    let response = app
        .client
        .post(app.url("/jobs"))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .json(&json!({"task": "summarize", "input": {"text": format!("job {key}")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "{}", response.text().await.unwrap());
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn get(app: &TestApp, token: &str, id: &str) -> Value {
    crate::common::ok_json(app.get(token, &format!("/jobs/{id}")).await).await
}

/// Every request the simulators of `apps` received, attempts only.
async fn requests(apps: &[&TestApp]) -> Vec<Value> {
    let mut all = Vec::new();
    for app in apps {
        all.extend(app.simulator_log().await.into_values());
    }
    all
}

/// The most requests of `log` the provider worked on at once: each from
/// when it was received to when it was answered.
fn peak_overlap(log: &[Value]) -> usize {
    let at = |r: &Value, field: &str| -> DateTime<Utc> {
        r[field].as_str().unwrap_or_else(|| panic!("{field} of {r}")).parse().unwrap()
    };
    // Ends sort before starts at the same instant: back to back is not at once.
    let mut moments: Vec<(DateTime<Utc>, i32)> =
        log.iter().flat_map(|r| [(at(r, "received_at"), 1), (at(r, "finished_at"), -1)]).collect();
    moments.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, step) in moments {
        now += step;
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap()
}

fn with_latency(s: &mut Settings) {
    let fast = s.providers.get_mut("sim-fast").unwrap();
    fast.latency = Duration::from_millis(LATENCY_MS);
    fast.jitter = Duration::ZERO;
}

async fn a_second_owners_jobs_all_start_before_half_of_the_first_owners_backlog_is_done(backend: Backend) {
    let url = backend.fresh_database().await;
    let store = open_store(&url);
    store.migrate().await.unwrap();
    backlog(&store, "alice", 5_000).await;
    backlog(&store, "bob", 20).await;
    // The worker starts with both owners' jobs waiting, alice's the oldest.
    let app = TestApp::spawn_on(backend, &url, Role::All, |_| {}).await;
    eventually("bob's 20 jobs succeeded", Duration::from_secs(120), || async {
        count(&app, "select count(*) from jobs where owner_id = 'bob' and state = 'succeeded'").await == 20
    })
    .await;
    let alice_claimed_before_bobs_last = count(
        &app,
        "select count(*) from job_events where kind = 'attempt-claimed' and owner_id = 'alice'
         and id < (select max(id) from job_events where kind = 'attempt-claimed' and owner_id = 'bob')",
    )
    .await;
    assert!(
        alice_claimed_before_bobs_last < 2_500,
        "{alice_claimed_before_bobs_last} of alice's 5,000 jobs were claimed before bob's last one"
    );
}

/// Two live replicas on one fresh database, with `adjust` and sim-fast at
/// [`LATENCY_MS`].
async fn two_replicas(backend: Backend, adjust: fn(&mut Settings)) -> (TestApp, TestApp) {
    let url = backend.fresh_database().await;
    let settings = move |s: &mut Settings| {
        with_latency(s);
        adjust(s);
    };
    let first = TestApp::spawn_on(backend, &url, Role::All, settings).await;
    let second = TestApp::spawn_on(backend, &url, Role::All, settings).await;
    (first, second)
}

async fn an_owners_max_in_flight_of_5_holds_across_two_replicas_and_a_job_over_it_says_why_it_waits(backend: Backend) {
    // Each replica runs at most 3 attempts at once: only the two together
    // reach carol's 5, and neither can take every slot for itself.
    let (first, second) = two_replicas(backend, |s| s.worker.concurrency = 3).await;
    let carol = OwnerId::parse("carol").unwrap();
    let (key, token) = onejob::keys::create_key(first.store(), &carol).await.unwrap();
    assert!(first.store().set_key_max_in_flight(key, Some(5)).await.unwrap());
    // Created all at once, so that a backlog forms however slow each
    // create is, through both replicas in turn.
    let creates = (0..40).map(|i| {
        let (through, token) = (if i % 2 == 0 { &first } else { &second }, &token);
        async move { create(through, token, &format!("carol-{i}")).await }
    });
    let ids = futures_util::future::join_all(creates).await;
    // While five run, the others wait and say so: some job is seen queued
    // for the owner's limit before every job has started.
    let started = std::time::Instant::now();
    let waited = 'seen: loop {
        let mut queued = 0;
        for id in &ids {
            let job = get(&second, &token, id).await;
            if job["state"] == "queued" {
                queued += 1;
                if job["waiting"]["reason"] == "owner-max-in-flight" {
                    break 'seen job;
                }
            }
        }
        assert!(queued > 0, "no job was seen waiting for the owner's limit before all of them ran");
        assert!(started.elapsed() < Duration::from_secs(30), "queued jobs never said they wait for the owner's limit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(waited["waiting"]["limit"], 5);
    eventually("carol's 40 jobs succeeded", Duration::from_secs(60), || async {
        count(&first, "select count(*) from jobs where owner_id = 'carol' and state = 'succeeded'").await == 40
    })
    .await;
    let log = requests(&[&first, &second]).await;
    assert_eq!(log.len(), 40, "one request per job");
    assert!(
        !first.simulator_log().await.is_empty() && !second.simulator_log().await.is_empty(),
        "both replicas ran attempts"
    );
    let peak = peak_overlap(&log);
    assert!(peak <= 5, "carol had {peak} attempts at the provider at once, over her max_in_flight of 5");
    assert!(peak >= 3, "the limit, not the load, kept carol at {peak} at once");
}

async fn a_provider_with_max_concurrent_3_never_sees_more_than_3_requests_at_once_across_two_replicas(
    backend: Backend,
) {
    let (first, second) =
        two_replicas(backend, |s| s.providers.get_mut("sim-fast").unwrap().max_concurrent = Some(3)).await;
    for i in 0..15 {
        create(&first, &first.alice, &format!("alice-{i}")).await;
        create(&second, &second.bob, &format!("bob-{i}")).await;
    }
    eventually("the 30 jobs succeeded", Duration::from_secs(60), || async {
        count(&first, "select count(*) from jobs where state = 'succeeded'").await == 30
    })
    .await;
    let log = requests(&[&first, &second]).await;
    assert_eq!(log.len(), 30);
    let peak = peak_overlap(&log);
    assert!(peak <= 3, "the provider had {peak} requests at once, over its max_concurrent of 3");
    assert_eq!(peak, 3, "the provider had as many requests at once as its limit, no fewer");
}

async fn a_providers_requests_per_minute_keep_the_rest_of_a_burst_pending(backend: Backend) {
    // The deferrals counted on /metrics must be this test's: the recorder is the process's.
    let name = backend.test_name("fairness", "a_providers_requests_per_minute_keep_the_rest_of_a_burst_pending");
    if !crate::common::processes::in_a_process_of_its_own(&name).await {
        return;
    }
    let app =
        TestApp::spawn_live(backend, |s| s.providers.get_mut("sim-fast").unwrap().requests_per_minute = Some(5)).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(app.create_job(&format!("burst-{i}"), None).await["id"].as_str().unwrap().to_owned());
    }
    eventually("5 jobs succeeded", Duration::from_secs(30), || async {
        count(&app, "select count(*) from jobs where state = 'succeeded'").await >= 5
    })
    .await;
    // The bucket refills one request every 12 s: the other five wait.
    let mut queued = 0;
    for id in &ids {
        let job = get(&app, &app.alice, id).await;
        if job["state"] == "queued" {
            queued += 1;
            assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "waiting spends no attempt: {job}");
            assert_eq!(job["waiting"]["reason"], "provider-requests-per-minute", "{job}");
            assert_eq!(job["waiting"]["limit"], 5, "{job}");
        }
    }
    assert_eq!(queued, 5, "the rest of the burst waits pending");
    assert_eq!(app.simulator_log().await.len(), 5, "the provider saw only what its requests per minute allow");
    let page = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let held: f64 = crate::common::prometheus::parse(&page)
        .iter()
        .filter(|s| s.name == "onejob_claims_deferred_total" && s.labels["limit"] == "provider-requests-per-minute")
        .map(|s| s.value)
        .sum();
    assert!(held >= 1.0, "the deferrals are counted: {held}");
}

async fn a_429_with_retry_after_2_pauses_the_provider_for_2_s_and_the_same_attempt_then_succeeds(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        let fast = s.providers.get_mut("sim-fast").unwrap();
        fast.refuse_first = 1;
        fast.retry_after = Some(Duration::from_secs(2));
    })
    .await;
    let first = app.create_job("refused", None).await;
    let id = first["id"].as_str().unwrap().to_owned();
    let attempt_id = first["attempts"][0]["id"].as_str().unwrap().to_owned();
    // Refused: pending again, the same attempt, due in 2 s.
    let started = std::time::Instant::now();
    let (alice, job_id) = (OwnerId::parse("alice").unwrap(), JobId(id.parse().unwrap()));
    let requeued_at = loop {
        let events = app.store().list_events(&alice, job_id).await.unwrap();
        if let Some(event) = events.iter().find(|e| e.kind == onejob::domain::EventKind::AttemptRequeued) {
            assert_eq!(event.detail["due_in_ms"], 2_000, "{event:?}");
            assert_eq!(event.detail["reason"], "provider-rate-limited", "{event:?}");
            break event.at;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the refused attempt was never put back: {events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Another job of the paused provider waits for the pause, and says so.
    let second = app.create_job("during-the-pause", None).await;
    let second_id = second["id"].as_str().unwrap().to_owned();
    // Read until it says so, while the pause lasts.
    let pause_end = requeued_at + chrono::Duration::seconds(2);
    let waiting = loop {
        let job = get(&app, &app.alice, &second_id).await;
        if job["waiting"]["reason"] == "provider-paused" {
            break job;
        }
        assert!(chrono::Utc::now() < pause_end, "the job never said it waits for the pause: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(waiting["waiting"]["for_ms"].as_u64().is_some_and(|ms| ms > 0 && ms <= 2_000), "{waiting}");
    let done = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    app.wait_for(&second_id, "succeeded", |j| j["state"] == "succeeded").await;
    let attempts = done["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "no new attempt: {done}");
    assert_eq!(attempts[0]["id"], attempt_id.as_str());
    assert_eq!(attempts[0]["state"], "succeeded");
    let log = app.simulator_log().await;
    for (name, attempt) in [
        ("the refused attempt", &attempt_id),
        ("the other job", &second["attempts"][0]["id"].as_str().unwrap().to_owned()),
    ] {
        let request = &log[attempt];
        let received: DateTime<Utc> = request["received_at"].as_str().unwrap().parse().unwrap();
        assert!(
            received >= pause_end - chrono::Duration::milliseconds(50),
            "{name} reached the provider at {received}, before the pause ended at {pause_end}"
        );
    }
    assert_eq!(log[&attempt_id]["received"], 1, "the refused request was not taken; the one taken ran once");
}

async fn the_tokens_per_minute_bucket_is_shared_and_says_how_long_until_it_holds_a_request(backend: Backend) {
    let url = backend.fresh_database().await;
    // Two servers' stores on one database, asking at once: one bucket of
    // 1,000 tokens holds six requests of 150, whichever server asks.
    let (one, two) = (open_store(&url), open_store(&url));
    one.migrate().await.unwrap();
    let mut asking = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        asking.spawn(async move { store.reserve_tokens("p", 150, 1_000).await.unwrap() });
    }
    let answers = asking.join_all().await;
    let taken = answers.iter().filter(|answer| answer.is_none()).count();
    assert_eq!(taken, 6, "six of ten requests of 150 from two servers fit 1,000 tokens: {answers:?}");
    // About 100 left (and a little refilled): 600 waits for 500 more tokens
    // at 1,000 a minute, 30 s.
    let wait = two.reserve_tokens("p", 600, 1_000).await.unwrap().expect("about 100 left do not hold 600");
    assert!(wait > Duration::from_secs(27) && wait <= Duration::from_secs(30), "{wait:?}");
    assert_eq!(
        one.reserve_tokens("q", 5_000, 1_000).await.unwrap(),
        None,
        "a request larger than the bucket takes a full one"
    );
    assert!(two.reserve_tokens("q", 1, 1_000).await.unwrap().is_some(), "which is then in debt, for both servers");
}

on_both_backends!(
    a_second_owners_jobs_all_start_before_half_of_the_first_owners_backlog_is_done,
    an_owners_max_in_flight_of_5_holds_across_two_replicas_and_a_job_over_it_says_why_it_waits,
    a_provider_with_max_concurrent_3_never_sees_more_than_3_requests_at_once_across_two_replicas,
    a_providers_requests_per_minute_keep_the_rest_of_a_burst_pending,
    a_429_with_retry_after_2_pauses_the_provider_for_2_s_and_the_same_attempt_then_succeeds,
    the_tokens_per_minute_bucket_is_shared_and_says_how_long_until_it_holds_a_request,
);
