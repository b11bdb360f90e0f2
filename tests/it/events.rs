//! A job's events as Server-Sent Events (`GET /jobs/{id}/events`), over a
//! real socket, parsed by the `eventsource-stream` crate: the log so far,
//! then live events, ending once the job can change no more (the losers'
//! cancellations included), when it is erased, and when its key is revoked;
//! resumed exactly after `Last-Event-ID`; owner-scoped and counted with
//! long-polls; an event committed through another server reaches a stream
//! within a second.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, expect_problem};
use onejob::app::Role;

/// One event as received, with when it arrived.
#[derive(Clone)]
pub(crate) struct Received {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) data: Value,
    arrived: chrono::DateTime<chrono::Utc>,
}

async fn open(app: &TestApp, token: &str, id: &str, query: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url(&format!("/jobs/{id}/events{query}"))).bearer_auth(token);
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last);
    }
    request.send().await.unwrap()
}

/// The events of an open stream as they come, until it ends.
pub(crate) fn events(response: reqwest::Response) -> impl futures_util::Stream<Item = Received> + Unpin {
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let bytes = futures_util::stream::unfold(response, |mut response| async move {
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, reqwest::Error>(chunk), response)),
            Ok(None) => None,
            Err(error) => Some((Err(error), response)),
        }
    });
    Box::pin(bytes.eventsource().map(|event| {
        let event = event.expect("a well-formed event stream");
        Received {
            data: serde_json::from_str(&event.data).expect("each event's data is JSON"),
            id: event.id,
            kind: event.event,
            arrived: chrono::Utc::now(),
        }
    }))
}

/// Every event of a stream until it ends by itself (within 30 s).
pub(crate) async fn read_to_end(response: reqwest::Response) -> Vec<Received> {
    tokio::time::timeout(Duration::from_secs(30), events(response).collect()).await.expect("the stream ends by itself")
}

pub(crate) fn kinds(events: &[Received]) -> Vec<&str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}

async fn created(app: &TestApp, key: &str, provider: &str) -> Value {
    let response =
        app.post_job(key, &json!({"task": "summarize", "input": {"text": "stream it"}, "provider": provider})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

async fn a_stream_sends_the_log_so_far_then_live_events_and_ends_after_the_terminal_one(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    // Bob's activity first: it shows nowhere in alice's stream, not even as
    // gaps in its ids.
    created_by(&app, &app.bob).await;
    let job = created(&app, "k", "sim-slow").await;
    let id = job["id"].as_str().unwrap();
    let received = read_to_end(open(&app, &app.alice, id, "", None).await).await;
    assert_eq!(kinds(&received), ["job-created", "attempt-claimed", "attempt-succeeded"]);
    // sim-slow answers after 1.5 s: the log so far came at once, and the
    // stream stayed open for the win.
    assert!(received[2].arrived - received[0].arrived >= chrono::Duration::milliseconds(1_000));
    let states: Vec<&str> = received.iter().map(|event| event.data["job_state"].as_str().unwrap()).collect();
    assert_eq!(states, ["queued", "running", "succeeded"]);
    // One row of the log each, numbered by its place in the job's log, with
    // the attempt it concerns.
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let log = app.store().list_events(&owner, onejob::domain::JobId::parse(id).unwrap()).await.unwrap();
    assert_eq!(received.len(), log.len());
    assert!(log[0].id > 1, "the database's own ids count bob's events too");
    let streamed: Vec<&str> = received.iter().map(|event| event.id.as_str()).collect();
    assert_eq!(streamed, ["1", "2", "3"]);
    for (place, (event, row)) in (1..).zip(received.iter().zip(&log)) {
        assert_eq!(event.data["id"], place);
        assert_eq!(event.kind, row.kind.as_str());
        assert_eq!(event.data["kind"], event.kind);
        assert_eq!(event.data["job_id"], id);
        assert_eq!(event.data["detail"], row.detail);
        assert_eq!(event.data["attempt"]["number"], 1);
        assert_eq!(event.data["attempt"]["provider"], "sim-slow");
        assert_eq!(event.data["attempt"]["id"], job["attempts"][0]["id"]);
    }
}

async fn a_stream_resumes_exactly_after_the_last_event_id(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = created(&app, "k", "sim-fast").await["id"].as_str().unwrap().to_owned();
    app.wait_for(&id, "succeeded", |job| job["state"] == "succeeded").await;
    let all = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    assert_eq!(kinds(&all), ["job-created", "attempt-claimed", "attempt-succeeded"]);
    let ids: Vec<&str> = all.iter().map(|event| event.id.as_str()).collect();

    let after_first = read_to_end(open(&app, &app.alice, &id, "", Some(ids[0])).await).await;
    assert_eq!(kinds(&after_first), ["attempt-claimed", "attempt-succeeded"]);
    let after_second = read_to_end(open(&app, &app.alice, &id, &format!("?after={}", ids[1]), None).await).await;
    assert_eq!(kinds(&after_second), ["attempt-succeeded"]);
    // The header a reconnecting EventSource sends wins over the URL's cursor.
    let both = read_to_end(open(&app, &app.alice, &id, "?after=0", Some(ids[1])).await).await;
    assert_eq!(kinds(&both), ["attempt-succeeded"]);
    // After the terminal event there is nothing more to wait for.
    let after_last = read_to_end(open(&app, &app.alice, &id, "", Some(ids[2])).await).await;
    assert!(after_last.is_empty());

    for (query, last) in [("?after=x", None), ("?after=-1", None), ("", Some("two")), ("?since=1", None)] {
        let response = open(&app, &app.alice, &id, query, last).await;
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    }
}

async fn a_stream_is_its_owners_alone_and_counts_among_its_long_polls(backend: Backend) {
    // No worker: the job stays queued, and its stream open.
    let app = TestApp::spawn_with(backend, |s| s.server.max_long_polls_per_owner = 1).await;
    let id = created(&app, "k", "sim-fast").await["id"].as_str().unwrap().to_owned();
    expect_problem(open(&app, &app.bob, &id, "", None).await, StatusCode::NOT_FOUND, "not-found").await;
    let nobody = onejob::domain::JobId::new().to_string();
    expect_problem(open(&app, &app.alice, &nobody, "", None).await, StatusCode::NOT_FOUND, "not-found").await;
    let anonymous = app.client.get(app.url(&format!("/jobs/{id}/events"))).send().await.unwrap();
    expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;

    let mut first = events(open(&app, &app.alice, &id, "", None).await);
    assert_eq!(first.next().await.unwrap().kind, "job-created");
    // Alice's one place is taken, by a stream or a long-poll alike.
    let problem = expect_problem(
        open(&app, &app.alice, &id, "", None).await,
        StatusCode::TOO_MANY_REQUESTS,
        "too-many-long-polls",
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("event streams"), "{problem}");
    let long_poll = app.get(&app.alice, &format!("/jobs/{id}?wait=1")).await;
    expect_problem(long_poll, StatusCode::TOO_MANY_REQUESTS, "too-many-long-polls").await;
    // Bob's places are his own.
    let bobs = created_by(&app, &app.bob).await;
    let mut bobs_stream = events(open(&app, &app.bob, &bobs, "", None).await);
    assert_eq!(bobs_stream.next().await.unwrap().kind, "job-created");

    // Gone, the stream gives its place back.
    drop(first);
    crate::common::processes::eventually("alice's place given back", Duration::from_secs(10), || async {
        open(&app, &app.alice, &id, "", None).await.status() == StatusCode::OK
    })
    .await;
}

async fn created_by(app: &TestApp, token: &str) -> String {
    let body = json!({"task": "summarize", "input": {"text": "mine"}, "provider": "sim-fast"}).to_string();
    let response = app.post_job_raw(token, "own", body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn an_event_committed_through_another_server_reaches_a_stream_within_a_second(backend: Backend) {
    // The stream is held on an API-only server; the job runs on another
    // server's worker, sharing the database: its events reach the stream
    // only by the stream's rereads, at the default interval.
    let default_interval = onejob::config::Settings::builtin().server.event_stream_interval;
    let api = TestApp::spawn_with(backend, |s| s.server.event_stream_interval = default_interval).await;
    let _worker = TestApp::spawn_on(backend, &api.database_url, Role::All, |_| {}).await;
    let id = created(&api, "k", "sim-slow").await["id"].as_str().unwrap().to_owned();
    let received = read_to_end(open(&api, &api.alice, &id, "", None).await).await;
    assert_eq!(kinds(&received), ["job-created", "attempt-claimed", "attempt-succeeded"]);
    for event in &received[1..] {
        let at: chrono::DateTime<chrono::Utc> = serde_json::from_value(event.data["at"].clone()).unwrap();
        let delay = event.arrived - at;
        assert!(delay < chrono::Duration::seconds(1), "{} arrived {delay} after it was written", event.kind);
    }
}

/// The stream of job `id` from its start, and the events it sent until it
/// ended by itself.
async fn streamed(app: &TestApp, id: &str, query: &str) -> Vec<Received> {
    read_to_end(open(app, &app.alice, id, query, None).await).await
}

async fn after_a_race_and_after_a_cancel_a_stream_delivers_the_losers_cancellation_before_it_ends(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.get_mut("sim-slow").unwrap().latency = Duration::from_millis(3_000)
    })
    .await;
    // A race: attempt 1 waits on sim-slow, the fallback on sim-fast wins,
    // and attempt 1's call is aborted after the win.
    let raced = created(&app, "raced", "sim-slow").await;
    let id = raced["id"].as_str().unwrap().to_owned();
    let live = open(&app, &app.alice, &id, "", None).await;
    app.wait_for(&id, "attempt 1 running", |job| job["attempts"][0]["state"] == "running").await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let received = read_to_end(live).await;
    let after_win = ["attempt-succeeded", "attempt-canceled"];
    assert_eq!(kinds(&received)[kinds(&received).len() - 2..], after_win, "{:?}", kinds(&received));
    assert_eq!(received.last().unwrap().data["attempt"]["number"], 1, "the loser's cancellation came last");
    // A stream opened afterwards, from the start and from after the win,
    // has the cancellation too, and ends.
    assert_eq!(kinds(&streamed(&app, &id, "").await), kinds(&received));
    let win = &received[received.len() - 2].id;
    assert_eq!(kinds(&streamed(&app, &id, &format!("?after={win}")).await), ["attempt-canceled"]);

    // A cancel: the job ends at `job-canceled`; its running attempt's
    // cancellation comes after it.
    let canceled = created(&app, "canceled", "sim-slow").await;
    let id = canceled["id"].as_str().unwrap().to_owned();
    let live = open(&app, &app.alice, &id, "", None).await;
    app.wait_for(&id, "attempt 1 running", |job| job["attempts"][0]["state"] == "running").await;
    let cancel = app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(cancel.status(), StatusCode::OK);
    let received = read_to_end(live).await;
    assert_eq!(kinds(&received)[kinds(&received).len() - 2..], ["job-canceled", "attempt-canceled"]);
    assert_eq!(kinds(&streamed(&app, &id, "").await), kinds(&received));
}

async fn a_stream_on_a_failed_job_lasts_while_it_may_take_a_fallback_and_ends_when_it_is_erased(backend: Backend) {
    // No failover: the job stays failed until a client falls back.
    let app = TestApp::spawn_live(backend, |s| s.tasks.get_mut("summarize").unwrap().failover.clear()).await;
    // sim-bad-json's answer breaks the contract: the attempt fails, and
    // the job, with attempts left, may still take a fallback.
    let failed = created(&app, "failed", "sim-bad-json").await;
    let id = failed["id"].as_str().unwrap().to_owned();
    app.wait_for(&id, "failed", |job| job["state"] == "failed").await;
    let mut live = events(open(&app, &app.alice, &id, "", None).await);
    let mut seen = Vec::new();
    while seen.last().map(|event: &Received| event.kind.as_str()) != Some("attempt-failed") {
        seen.push(tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().expect("the log so far"));
    }
    // Then it says what the job waits for, with the id of the event before.
    let waiting = tokio::time::timeout(Duration::from_secs(1), live.next()).await.unwrap().expect("a waiting");
    assert_eq!((waiting.kind.as_str(), &waiting.id), ("waiting", &seen.last().unwrap().id));
    assert_eq!((&waiting.data["state"], &waiting.data["waiting_for"]), (&json!("failed"), &json!("client")));
    let more = tokio::time::timeout(Duration::from_millis(1_500), live.next()).await;
    assert!(more.is_err(), "a failed job that may take a fallback keeps its stream open, and says so once");
    let erased = app.client.delete(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(erased.status(), StatusCode::NO_CONTENT);
    let end = tokio::time::timeout(Duration::from_secs(5), live.next()).await;
    assert!(matches!(end, Ok(None)), "the stream of an erased job ends");
}

/// What a revoked key holds ends on every server within five seconds (on
/// Postgres, a second server hears of the revocation; a SQLite database
/// has one server): its event streams close, its long-polls answer, their
/// places are free again, and the key, reconnecting, gets 401.
async fn a_revoked_keys_streams_and_long_polls_end_on_every_server_and_give_their_places_back(backend: Backend) {
    // No worker: the job stays queued, and its streams open.
    let limit = |s: &mut onejob::config::Settings| s.server.max_long_polls_per_owner = 2;
    let first = TestApp::spawn_with(backend, limit).await;
    let second = match backend {
        Backend::Postgres => Some(TestApp::spawn_on(backend, &first.database_url, Role::Api, limit).await),
        Backend::Sqlite => None,
    };
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let (key, token) = onejob::keys::create_key(first.store(), &owner).await.unwrap();
    let id = created_by(&first, &token).await;
    let mut streams = Vec::new();
    for app in std::iter::once(&first).chain(second.as_ref()) {
        let mut stream = events(open(app, &token, &id, "", None).await);
        assert_eq!(stream.next().await.unwrap().kind, "job-created");
        streams.push(stream);
    }
    let long_poll = tokio::spawn({
        let request = first.client.get(first.url(&format!("/jobs/{id}?wait=30"))).bearer_auth(&token);
        async move { request.send().await.unwrap().status() }
    });
    // Every stream and the long-poll are open (the gauge counts this test
    // process's servers); the key holds both of alice's places on the first.
    let open_now = streams.len() + 1;
    crate::common::processes::eventually("the long-poll open", Duration::from_secs(5), || async {
        let page = first.client.get(first.url("/metrics")).send().await.unwrap().text().await.unwrap();
        page.lines().any(|line| line == format!("onejob_long_polls_open {open_now}"))
    })
    .await;
    let refused = open(&first, &first.alice, &id, "", None).await;
    expect_problem(refused, StatusCode::TOO_MANY_REQUESTS, "too-many-long-polls").await;

    // Another owner's admin cannot revoke it, and its refusal ends nothing.
    let bobs_admin = first.admin_of("bob").await;
    let refused = first.client.post(first.url(&format!("/keys/{key}/revoke"))).bearer_auth(&bobs_admin).send().await;
    expect_problem(refused.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    let still = tokio::time::timeout(Duration::from_millis(300), streams[0].next()).await;
    assert!(still.is_err(), "a refused revocation ended a stream");

    let revoked =
        first.client.post(first.url(&format!("/keys/{key}/revoke"))).bearer_auth(&first.operator).send().await;
    assert_eq!(revoked.unwrap().status(), StatusCode::NO_CONTENT);
    let within = Duration::from_secs(5);
    for (n, stream) in streams.iter_mut().enumerate() {
        let end = tokio::time::timeout(within, stream.next()).await;
        assert!(matches!(end, Ok(None)), "the stream on server {} ended", n + 1);
    }
    let answered = tokio::time::timeout(within, long_poll).await.expect("the long-poll answered at once");
    assert_eq!(answered.unwrap(), StatusCode::OK);
    crate::common::processes::eventually("alice's places given back", within, || async {
        open(&first, &first.alice, &id, "", None).await.status() == StatusCode::OK
    })
    .await;
    expect_problem(open(&first, &token, &id, "", None).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

/// `onejob keys revoke` is another process: a running server ends the
/// revoked key's event stream and long-poll within five seconds all the
/// same (Postgres notifies it; SQLite's server finds the revocation by
/// reading the keys table).
async fn a_key_revoked_with_the_cli_ends_its_streams_and_long_polls_on_a_running_server(backend: Backend) {
    // No worker: the job stays queued, and its stream open.
    let app = TestApp::spawn_with(backend, |_| {}).await;
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let (key, token) = onejob::keys::create_key(app.store(), &owner).await.unwrap();
    let id = created_by(&app, &token).await;
    let mut stream = events(open(&app, &token, &id, "", None).await);
    assert_eq!(stream.next().await.unwrap().kind, "job-created");
    let long_poll = tokio::spawn({
        let request = app.client.get(app.url(&format!("/jobs/{id}?wait=30"))).bearer_auth(&token);
        async move { request.send().await.unwrap().status() }
    });
    let out = tokio::process::Command::new(crate::common::BIN)
        .args(["keys", "revoke", &key.to_string()])
        .env("DATABASE_URL", &app.database_url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let within = Duration::from_secs(5);
    let end = tokio::time::timeout(within, stream.next()).await;
    assert!(matches!(end, Ok(None)), "the stream ended within five seconds");
    let answered = tokio::time::timeout(within, long_poll).await.expect("the long-poll answered within five seconds");
    assert_eq!(answered.unwrap(), StatusCode::OK);
    expect_problem(open(&app, &token, &id, "", None).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

on_both_backends!(
    a_key_revoked_with_the_cli_ends_its_streams_and_long_polls_on_a_running_server,
    a_revoked_keys_streams_and_long_polls_end_on_every_server_and_give_their_places_back,
    after_a_race_and_after_a_cancel_a_stream_delivers_the_losers_cancellation_before_it_ends,
    a_stream_on_a_failed_job_lasts_while_it_may_take_a_fallback_and_ends_when_it_is_erased,
    a_stream_sends_the_log_so_far_then_live_events_and_ends_after_the_terminal_one,
    a_stream_resumes_exactly_after_the_last_event_id,
    a_stream_is_its_owners_alone_and_counts_among_its_long_polls,
    an_event_committed_through_another_server_reaches_a_stream_within_a_second,
);
