//! What a server holds in memory returns to its size at rest once traffic
//! ends: each structure traffic fills is counted on `/metrics`
//! (`onejob_held_entries`), and histogram samples are folded into their
//! buckets whether or not anyone scrapes.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::processes::{eventually, in_a_process_of_its_own};
use crate::common::{Backend, TestApp};

on_both_backends!(what_traffic_holds_in_memory_is_let_go_when_it_ends);

/// `onejob_held_entries` by structure, as `/metrics` shows it now.
async fn held_now(app: &TestApp) -> HashMap<String, f64> {
    let page = crate::common::prometheus::scrape(&app.client, &app.addr.to_string()).await;
    page.into_iter()
        .filter(|sample| sample.name == "onejob_held_entries")
        .map(|sample| (sample.labels["structure"].clone(), sample.value))
        .collect()
}

/// What requests, long-polls, event streams and attempts in flight hold:
/// nothing once they end.
const IN_FLIGHT: [&str; 8] = [
    "key_flights",
    "shared_reads",
    "long_poll_owners",
    "long_poll_keys",
    "long_poll_key_changes",
    "watched_jobs",
    "jobs_with_calls",
    "rate_limit_owners",
];

async fn what_traffic_holds_in_memory_is_let_go_when_it_ends(backend: Backend) {
    // The gauges are the process's recorder's: another server's scrape
    // would set them to its own counts.
    if !in_a_process_of_its_own(&backend.test_name("memory", "what_traffic_holds_in_memory_is_let_go_when_it_ends"))
        .await
    {
        return;
    }
    let app = TestApp::spawn_live(backend, |settings| {
        settings.server.rate_limit_per_second = 10_000;
        settings.server.rate_limit_burst = 10_000;
        let mut hold = settings.providers["sim-slow"].clone();
        (hold.latency, hold.timeout) = (Duration::from_secs(60), Duration::from_secs(120));
        settings.providers.insert("sim-hold".into(), hold);
    })
    .await;
    // Keys of jobs made outside the load below, which the cache of taken
    // keys holds too.
    let mut more_keys = 0.0;
    if backend == Backend::Postgres {
        held_while_the_database_holds_them(&app).await;
        more_keys = 5.0;
    }

    // While a slow job runs, its call, its long-poll and its event stream
    // are held.
    let body = json!({"task": "summarize", "input": {"text": "slow"}, "provider": "sim-slow"});
    let slow: Value = app.post_job("slow", &body).await.json().await.unwrap();
    let slow = slow["id"].as_str().unwrap().to_owned();
    app.wait_for(&slow, "running", |job| job["state"] == "running").await;
    let long_poll =
        tokio::spawn(app.client.get(app.url(&format!("/jobs/{slow}?wait=10"))).bearer_auth(&app.alice).send());
    let stream = app.client.get(app.url(&format!("/jobs/{slow}/events"))).bearer_auth(&app.alice).send().await;
    eventually("the long-polls and the call are held", Duration::from_secs(10), || async {
        let held = held_now(&app).await;
        held["long_poll_owners"] == 1.0 && held["long_poll_keys"] == 1.0 && held["jobs_with_calls"] == 1.0
    })
    .await;
    assert!(held_now(&app).await["watched_jobs"] >= 1.0);
    assert_eq!(long_poll.await.unwrap().unwrap().status(), StatusCode::OK);
    drop(stream);

    // Many jobs of two owners, each created twice at once (one trip to the
    // database), read by several readers at once, long-polled to its end,
    // and every third one streamed and dropped after its first event; and
    // some requests with a key nobody issued.
    let jobs = futures_util::stream::iter(0..150).map(|n| {
        let app = &app;
        async move {
            let token = if n % 2 == 0 { &app.alice } else { &app.bob };
            let key = format!("job-{n}");
            let body = json!({"task": "summarize", "input": {"text": key}}).to_string();
            let (first, second) = tokio::join!(
                app.post_job_raw(token, &key, body.clone()).send(),
                app.post_job_raw(token, &key, body).send()
            );
            let job: Value = first.unwrap().json().await.unwrap();
            assert!(second.unwrap().status().is_success());
            let id = job["id"].as_str().unwrap().to_owned();
            let path = format!("/jobs/{id}");
            let (a, b) = tokio::join!(app.get(token, &path), app.get(token, &path));
            assert_eq!((a.status(), b.status()), (StatusCode::OK, StatusCode::OK));
            if n % 3 == 0 {
                let mut stream = app.client.get(app.url(&format!("{path}/events"))).bearer_auth(token).send().await;
                let first = stream.as_mut().unwrap().chunk().await.unwrap();
                assert!(first.is_some(), "a stream begins with the job's first event");
            }
            // Long-polled to its end: each answer is a change (its claim
            // may come before its settlement).
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let now = crate::common::ok_json(app.get(token, &format!("{path}?wait=10")).await).await;
                if now["state"] == "succeeded" {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "the job never succeeded: {now}");
            }
            if n % 5 == 0 {
                let unknown = app.get("oj_unknown_key", "/jobs").await;
                assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);
            }
        }
    });
    jobs.buffer_unordered(16).collect::<Vec<()>>().await;
    app.wait_for(&slow, "the slow job's end", |job| job["state"] == "succeeded").await;

    // The rate limiter forgets owners each minute: until then it holds the
    // two that sent requests.
    let at_rest = |held: &HashMap<String, f64>| {
        IN_FLIGHT.iter().all(|structure| held[*structure] == if *structure == "rate_limit_owners" { 2.0 } else { 0.0 })
    };
    let started = std::time::Instant::now();
    let last = loop {
        let now = held_now(&app).await;
        if at_rest(&now) {
            break now;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "what traffic held is not let go: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The bounded caches hold what they were given.
    assert_eq!(last["taken_keys"], 151.0 + more_keys, "{last:?}");
    // Keys are cached only where the store tells of key changes.
    let cached = if backend == Backend::Postgres { 2.0 } else { 0.0 };
    assert_eq!(last["cached_keys"], cached, "{last:?}");
    assert_eq!(last["auth_failure_addresses"], 1.0, "{last:?}");
}

/// What requests in flight hold, seen while they wait at the database (a
/// lock on the jobs table holds them there): a long-poll of a new key
/// rereading its job, a read of another job twice at once (one shared
/// read), three creates each sent twice at once (three flights), and the
/// long-poll's key revoked (its change recorded while the long-poll still
/// holds its place). Each count differs from the others, so that a gauge
/// showing another's structure is caught. Once the lock is let go they end.
async fn held_while_the_database_holds_them(app: &TestApp) {
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let (key, token) = onejob::keys::create_key(app.store(), &owner).await.unwrap();
    let body = json!({"task": "summarize", "input": {"text": "held"}, "provider": "sim-hold"});
    let held: Value = crate::common::ok_json(app.post_job("held", &body).await).await;
    let held = held["id"].as_str().unwrap().to_owned();
    app.wait_for(&held, "running", |job| job["state"] == "running").await;
    let other = app.create_job("other", Some("sim-fast")).await["id"].as_str().unwrap().to_owned();
    app.wait_for(&other, "its end", |job| job["state"] == "succeeded").await;
    let get = |path: String, token: &str| app.client.get(app.url(&path)).bearer_auth(token).send();
    let long_poll = tokio::spawn(get(format!("/jobs/{held}?wait=30"), &token));
    eventually("the key's long-poll open", Duration::from_secs(10), || async {
        held_now(app).await["long_poll_keys"] == 1.0
    })
    .await;

    let mut lock = app.db.begin().await.unwrap();
    sqlx::query("lock table jobs in access exclusive mode").execute(&mut *lock).await.unwrap();
    let reads = [
        tokio::spawn(get(format!("/jobs/{other}"), &app.alice)),
        tokio::spawn(get(format!("/jobs/{other}"), &app.alice)),
    ];
    let creates: Vec<_> = ["a", "b", "c", "a", "b", "c"]
        .into_iter()
        .map(|n| {
            let body = json!({"task": "summarize", "input": {"text": n}}).to_string();
            tokio::spawn(app.post_job_raw(&app.alice, &format!("held-{n}"), body).send())
        })
        .collect();
    // The long-poll's next reread (every 200 ms) waits at the database too.
    eventually("the reads and creates held", Duration::from_secs(10), || async {
        let now = held_now(app).await;
        (now["shared_reads"], now["key_flights"]) == (2.0, 3.0)
    })
    .await;
    // Revoked in the database: the server hears of it (LISTEN), and sends
    // no request that the rate limiter or the key cache would remember.
    assert!(app.store().revoke_api_key(key, None).await.unwrap());
    eventually("the key's change recorded", Duration::from_secs(10), || async {
        held_now(app).await["long_poll_key_changes"] != 0.0
    })
    .await;
    let now = held_now(app).await;
    let seen = [now["key_flights"], now["shared_reads"], now["long_poll_key_changes"]];
    assert_eq!(seen, [3.0, 2.0, 1.0], "flights, shared reads, key changes while held: {now:?}");
    lock.rollback().await.unwrap();

    for read in reads {
        assert_eq!(read.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    for create in creates {
        assert!(create.await.unwrap().unwrap().status().is_success());
    }
    assert_eq!(long_poll.await.unwrap().unwrap().status(), StatusCode::OK, "answered once its key changed");
    let canceled = app.client.post(app.url(&format!("/jobs/{held}/cancel"))).bearer_auth(&app.alice).send().await;
    assert_eq!(canceled.unwrap().status(), StatusCode::OK);
    eventually("what they held let go", Duration::from_secs(10), || async {
        let now = held_now(app).await;
        ["key_flights", "shared_reads", "long_poll_key_changes", "long_poll_keys"].iter().all(|s| now[*s] == 0.0)
    })
    .await;
}

/// Bytes the allocator has handed out and not taken back, in every arena.
fn allocated() -> usize {
    // SAFETY: mallinfo2 reads the allocator's statistics; it has no
    // preconditions.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

/// The recorder keeps each histogram sample until it is folded into its
/// buckets: a server nobody scrapes folds them itself, or its memory grows
/// with every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histogram_samples_are_folded_while_nobody_scrapes() {
    // The allocator's statistics are the process's.
    if !in_a_process_of_its_own("memory::histogram_samples_are_folded_while_nobody_scrapes").await {
        return;
    }
    let _app = TestApp::spawn(Backend::Sqlite).await;
    let before = allocated();
    // A sample waits with its time, 24 bytes: 2,000,000 are tens of MB.
    for _ in 0..2_000_000 {
        onejob::process::metrics::claim_batch(1);
    }
    let recorded = allocated();
    assert!(recorded > before + 20_000_000, "the samples wait in memory: {before} → {recorded} bytes");
    // Their memory is freed once no thread can still be reading it, which
    // later recordings check: requests keep coming.
    eventually("the samples are folded into their buckets", Duration::from_secs(15), || async {
        for _ in 0..1_000 {
            onejob::process::metrics::claim_batch(1);
        }
        allocated() < before + 8_000_000
    })
    .await;
}
