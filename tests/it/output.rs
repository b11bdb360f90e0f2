//! A job's output as Server-Sent Events (`GET /jobs/{id}/output`), over a
//! real socket, parsed by the `eventsource-stream` crate. For a task that
//! does not stream: one `result` (or `error`) event once the job ends, the
//! same whether the reader came before or after the end, through the server
//! that ran the job or another one; an `id` that a reader resumes after,
//! getting nothing twice; another owner's job answers 404. For a task that
//! streams (the simulator streaming chat completions): the pieces as they
//! come, which put together are the result; resumed on another server
//! mid-stream, every piece once; a stream broken after ten pieces, a
//! `restart` and the next attempt's whole answer.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, expect_problem, ok_json, provider};
use crate::events::{Received, kinds, read_to_end};
use onejob::app::Role;

async fn open(app: &TestApp, token: &str, id: &str, query: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url(&format!("/jobs/{id}/output{query}"))).bearer_auth(token);
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last);
    }
    request.send().await.unwrap()
}

async fn create(app: &TestApp, key: &str, provider: &str) -> String {
    let body = json!({"task": "summarize", "input": {"text": "the whole answer"}, "provider": provider});
    let response = app.post_job(key, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The one `result` event of a succeeded job, checked against the job.
fn is_the_result(received: &[Received], job: &Value) {
    assert_eq!(kinds(received), ["result"], "one result event, then the end");
    assert_eq!(received[0].id, "1");
    assert_eq!(received[0].data, json!({"attempt": job["winning_attempt"], "result": job["result"]}), "{job:#}");
}

async fn a_reader_gets_one_result_event_when_a_job_that_does_not_stream_succeeds(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(&app, "k", "sim-slow").await;
    // Opened while the attempt runs (sim-slow takes 1.5 s here): the event
    // comes when the job ends.
    let early = open(&app, &app.alice, &id, "", None).await;
    let received = read_to_end(early).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    is_the_result(&received, &job);
    // Opened after the end: the same event at once.
    is_the_result(&read_to_end(open(&app, &app.alice, &id, "", None).await).await, &job);
}

async fn a_reader_resumes_after_the_last_event_id_and_gets_nothing_twice(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(&app, "k", "sim-fast").await;
    let first = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    is_the_result(&first, &job);
    let resumed = read_to_end(open(&app, &app.alice, &id, "", Some(&first[0].id)).await).await;
    assert!(resumed.is_empty(), "nothing follows the last event: {:?}", kinds(&resumed));
    let by_query = read_to_end(open(&app, &app.alice, &id, "?after=1", None).await).await;
    assert!(by_query.is_empty(), "{:?}", kinds(&by_query));
    is_the_result(&read_to_end(open(&app, &app.alice, &id, "?after=0", None).await).await, &job);
    // The header wins over the query, as a reconnecting EventSource sends it.
    let both = read_to_end(open(&app, &app.alice, &id, "?after=0", Some("1")).await).await;
    assert!(both.is_empty(), "{:?}", kinds(&both));
    for bad in ["?after=-1", "?after=x"] {
        expect_problem(
            open(&app, &app.alice, &id, bad, None).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
        )
        .await;
    }
}

async fn a_job_that_can_change_no_more_without_a_result_ends_its_output_with_error(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        let slow = s.providers.get_mut("sim-slow").unwrap();
        slow.latency = std::time::Duration::from_millis(60_000);
        slow.timeout = std::time::Duration::from_millis(120_000);
    })
    .await;
    let id = create(&app, "k", "sim-slow").await;
    app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let reader = open(&app, &app.alice, &id, "", None).await;
    let canceled = app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send().await;
    assert_eq!(canceled.unwrap().status(), StatusCode::OK);
    let received = read_to_end(reader).await;
    let job = app.wait_for(&id, "its attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    assert_eq!(kinds(&received), ["error"]);
    assert_eq!(received[0].id, "1");
    let data = &received[0].data;
    assert_eq!((&data["state"], &data["attempt"]), (&json!("canceled"), &json!(1)), "{data:#}");
    assert_eq!(data["error"], job["attempts"][0]["error"], "the last attempt's error: {data:#} {job:#}");
}

async fn another_owners_job_has_no_output_to_read(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(&app, "k", "sim-fast").await;
    expect_problem(open(&app, &app.bob, &id, "", None).await, StatusCode::NOT_FOUND, "not-found").await;
}

/// The reader is on an API-only server; the job runs on another server's
/// worker, sharing the database: the end reaches the reader by its rereads.
async fn the_output_of_a_job_run_by_another_server_reaches_a_reader_on_this_one(backend: Backend) {
    let api = TestApp::spawn_with(backend, |_| {}).await;
    let _worker = TestApp::spawn_on(backend, &api.database_url, Role::All, |_| {}).await;
    let id = create(&api, "k", "sim-slow").await;
    let received = read_to_end(open(&api, &api.alice, &id, "", None).await).await;
    let job = ok_json(api.get(&api.alice, &format!("/jobs/{id}")).await).await;
    is_the_result(&received, &job);
}

/// Summarize streams; `sim-stream` streams its answer in about 20 pieces
/// at `per_second`; `sim-breaks` breaks its stream after ten pieces, and
/// so does `sim-responses-breaks`, a background response's stream.
fn streaming(per_second: u32) -> impl FnOnce(&mut onejob::config::Settings) {
    move |s| {
        let sim = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 512\nlatency_ms = 5";
        s.providers.insert("sim-stream".into(), provider(&format!("{sim}\ntokens_per_second = {per_second}")));
        s.providers
            .insert("sim-breaks".into(), provider(&format!("{sim}\ntokens_per_second = 200\nstream_break_after = 10")));
        let responses = format!("{sim}\napi = \"responses\"\ntokens_per_second = 200\nstream_break_after = 10");
        s.providers.insert("sim-responses-breaks".into(), provider(&responses));
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.stream = true;
        summarize.failover = vec!["sim-stream".into()];
        summarize.retries_per_provider = 0;
    }
}

/// The texts of the `delta` events, put together.
pub(crate) fn put_together(events: &[Received]) -> String {
    events.iter().filter(|e| e.kind == "delta").map(|e| e.data["text"].as_str().unwrap()).collect()
}

/// The events but the `partial`s, each of which repeats the id of the
/// `delta` before it.
fn without_partials(events: &[Received]) -> Vec<Received> {
    events.iter().filter(|e| e.kind != "partial").cloned().collect()
}

/// Every event's id (but a `partial`'s) is the one after the one before
/// it, from `first`.
fn numbered_from(events: &[Received], first: i64) {
    let ids: Vec<i64> = without_partials(events).iter().map(|e| e.id.parse().unwrap()).collect();
    let expected: Vec<i64> = (first..first + ids.len() as i64).collect();
    assert_eq!(ids, expected, "{:?}", kinds(events));
}

async fn a_streamed_answer_reaches_a_reader_in_pieces_that_put_together_are_the_result(backend: Backend) {
    let app = TestApp::spawn_live(backend, streaming(100)).await;
    app.qualify("sim-stream").await;
    let id = create(&app, "k", "sim-stream").await;
    let received = without_partials(&read_to_end(open(&app, &app.alice, &id, "", None).await).await);
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let pieces = received.iter().filter(|e| e.kind == "delta").count();
    assert!(pieces >= 3, "written in several batches: {:?}", kinds(&received));
    assert_eq!(kinds(&received[pieces..]), ["result"]);
    assert!(received[..pieces].iter().all(|e| e.data["attempt"] == 1), "{:?}", kinds(&received));
    numbered_from(&received, 1);
    let whole: Value = serde_json::from_str(&put_together(&received)).unwrap();
    assert_eq!(whole, job["result"], "the pieces put together are the result");
    assert_eq!(received[pieces].data["result"], job["result"]);
}

/// A JSON answer's `partial` events: one after a `delta` that changed the
/// answer so far, with that delta's id; each an object that holds all the
/// one before it held (strings as long, or longer); the last one the result.
async fn a_streamed_json_answer_sends_partial_objects_that_grow_and_end_as_the_result(backend: Backend) {
    let app = TestApp::spawn_live(backend, streaming(100)).await;
    app.qualify("sim-stream").await;
    let id = create(&app, "k", "sim-stream").await;
    let received = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    let partials: Vec<&Received> = received.iter().filter(|e| e.kind == "partial").collect();
    assert!(partials.len() >= 3, "{:?}", kinds(&received));
    for (before, partial) in received.iter().zip(&received[1..]).filter(|(_, e)| e.kind == "partial") {
        assert_eq!((before.kind.as_str(), &before.id), ("delta", &partial.id), "a partial follows its delta");
        assert_eq!(partial.data["attempt"], 1);
    }
    let mut last = json!({});
    for partial in &partials {
        let value = &partial.data["value"];
        assert!(value.is_object() && holds(value, &last), "{last} then {value}");
        last = value.clone();
    }
    assert_eq!(last, job["result"], "the last partial is the result");
    // Resumed after a delta, the next partial is the answer so far, not
    // only what follows.
    let first = received.iter().find(|e| e.kind == "delta").expect("a delta");
    let resumed = read_to_end(open(&app, &app.alice, &id, "", Some(&first.id)).await).await;
    let next = resumed.iter().find(|e| e.kind == "partial").expect("a partial after the resumption");
    let shown_then = partials.iter().find(|e| e.id == next.id).expect("the same partial, the first time");
    assert_eq!(next.data, shown_then.data);
}

/// Whether `now` holds everything `before` held: each member, each string
/// at least as long and starting the same.
fn holds(now: &Value, before: &Value) -> bool {
    match (before, now) {
        (Value::String(a), Value::String(b)) => b.starts_with(a.as_str()),
        (Value::Object(a), Value::Object(b)) => a.iter().all(|(k, v)| b.get(k).is_some_and(|now| holds(now, v))),
        (a, b) => a == b,
    }
}

/// Reads a stream resumed at `resumed_at` to its end, checking that the
/// resumption came mid-answer: its first piece came while the job was still
/// running, and the provider produced its last pieces (the simulator's
/// pacing says when) after the resumption, so they reached the reader live.
async fn resumed_mid_answer(
    app: &TestApp,
    id: &str,
    response: reqwest::Response,
    resumed_at: chrono::DateTime<chrono::Utc>,
) -> Vec<Received> {
    use futures_util::StreamExt;
    let mut stream = crate::events::events(response);
    let mut received = Vec::new();
    while received.iter().all(|e: &Received| e.kind != "delta") {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), stream.next()).await;
        received.push(next.expect("an event within 30 s").expect("a piece after the resumption"));
    }
    let then = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(then["state"], "running", "the first piece after the resumption came mid-answer: {then:#}");
    let rest: Vec<Received> = tokio::time::timeout(std::time::Duration::from_secs(30), stream.collect()).await.unwrap();
    received.extend(rest);
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    let call = &app.simulator_log().await[job["attempts"][0]["id"].as_str().unwrap()];
    let at = |field: &str| call[field].as_str().unwrap().parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let every = chrono::Duration::microseconds(call["stream_piece_interval_us"].as_i64().unwrap());
    assert!(
        at("finished_at") > resumed_at + every,
        "the provider's last two pieces came after the resumption at {resumed_at}: {call:#}"
    );
    received
}

/// The reader leaves after two pieces and comes back on another server
/// (the job's worker runs on neither), after the last id it read.
async fn a_reader_that_resumes_mid_stream_on_another_server_gets_every_piece_once(backend: Backend) {
    use futures_util::StreamExt;
    let worker = TestApp::spawn_live(backend, streaming(10)).await;
    worker.qualify("sim-stream").await;
    let first = TestApp::spawn_on(backend, &worker.database_url, Role::Api, streaming(10)).await;
    let second = TestApp::spawn_on(backend, &worker.database_url, Role::Api, streaming(10)).await;
    let id = create(&first, "k", "sim-stream").await;
    let mut early = Vec::new();
    let mut stream = crate::events::events(open(&first, &first.alice, &id, "", None).await);
    while early.len() < 2 {
        let event = stream.next().await.expect("two pieces before the end");
        if event.kind != "partial" {
            assert_eq!(event.kind, "delta");
            early.push(event);
        }
    }
    drop(stream);
    let last = early.last().unwrap().id.clone();
    let resumed_at = chrono::Utc::now();
    let resumed = open(&second, &second.alice, &id, "", Some(&last)).await;
    let rest = resumed_mid_answer(&worker, &id, resumed, resumed_at).await;
    let job = ok_json(second.get(&second.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(kinds(&rest).last(), Some(&"result"));
    let all: Vec<Received> = early.into_iter().chain(rest).collect();
    numbered_from(&all, 1);
    let whole: Value = serde_json::from_str(&put_together(&all)).unwrap();
    assert_eq!(whole, job["result"], "every piece once, in order");
}

/// The server a reader reads from (not the one whose worker streams) is
/// killed mid-stream and started again: the reader resumes there after the
/// last id it read and gets every piece once.
async fn a_reader_whose_server_is_killed_and_restarted_mid_stream_resumes_there_and_gets_every_piece_once() {
    use crate::common::processes::{set, simulator_and_config_with};
    use futures_util::StreamExt;
    let worker = TestApp::spawn_live(Backend::Postgres, streaming(5)).await;
    let (_simulator, config) = simulator_and_config_with(1_500, |table| {
        set(table, &["tasks", "summarize", "stream"], true.into());
    })
    .await;
    let serve = || crate::common::spawn_server_with(&worker.database_url, Some(&config), &["--no-worker"]);
    let (mut reading, address) = serve().await;
    let id = create(&worker, "k", "sim-stream").await;
    let output =
        |address: &str| worker.client.get(format!("http://{address}/jobs/{id}/output")).bearer_auth(&worker.alice);
    let mut stream = crate::events::events(output(&address).send().await.unwrap());
    let mut early = Vec::new();
    while early.len() < 2 {
        let event = stream.next().await.expect("two pieces before the kill");
        if event.kind != "partial" {
            assert_eq!(event.kind, "delta");
            early.push(event);
        }
    }
    reading.kill().await.unwrap(); // SIGKILL: the reader's connection drops with it
    reading.wait().await.unwrap();
    drop(stream);
    let (_restarted, address) = serve().await;
    let last = early.last().unwrap().id.clone();
    let resumed_at = chrono::Utc::now();
    let resumed = output(&address).header("last-event-id", &last).send().await.unwrap();
    let rest = resumed_mid_answer(&worker, &id, resumed, resumed_at).await;
    let job = ok_json(worker.get(&worker.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(kinds(&rest).last(), Some(&"result"));
    let all: Vec<Received> = early.into_iter().chain(rest).collect();
    numbered_from(&all, 1);
    let whole: Value = serde_json::from_str(&put_together(&all)).unwrap();
    assert_eq!(whole, job["result"], "every piece once, in order, across the restart");
}

async fn a_stream_broken_after_ten_pieces_restarts_and_the_next_attempt_answers_whole(backend: Backend) {
    let app = TestApp::spawn_live(backend, streaming(200)).await;
    app.qualify("sim-stream").await;
    let id = create(&app, "k", "sim-breaks").await;
    let received = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!((&job["state"], &job["winning_attempt"]), (&json!("succeeded"), &json!(2)), "{job:#}");
    assert_eq!(job["attempts"][0]["error"]["type"], "stream-broken", "{job:#}");
    numbered_from(&received, 1);
    let restart = received.iter().position(|e| e.kind == "restart").expect("a restart");
    assert_eq!(received[restart].data, json!({"attempt": 2}));
    let broken = put_together(&received[..restart]);
    assert_eq!(broken.chars().count(), 40, "ten pieces of four characters came first: {broken}");
    // The broken attempt keeps what it received, and what that used, counted.
    let first = &job["attempts"][0];
    assert_eq!(first["unapplied_output"]["why"], "stream-broken", "{first:#}");
    assert_eq!(first["unapplied_output"]["output"], json!(broken), "{first:#}");
    let counted = onejob::provider::tokens::count(onejob::config::Tokenizer::O200kBase, &broken);
    assert_eq!((&first["usage"]["estimated"], &first["usage"]["completion_tokens"]), (&json!(true), &json!(counted)));
    assert!(received[..restart].iter().all(|e| e.data["attempt"] == 1));
    let after: Vec<Received> = received.into_iter().skip(restart + 1).collect();
    assert_eq!(kinds(&after).last(), Some(&"result"));
    let whole: Value = serde_json::from_str(&put_together(&after)).unwrap();
    assert_eq!(whole, job["result"], "after the restart, the next attempt's whole answer");
}

/// A background response's stream broken after ten pieces is resumed from
/// the provider after the last event read: one attempt, no `restart`, and
/// the pieces put together, none twice, are the result.
async fn a_responses_stream_broken_after_ten_pieces_resumes_with_no_restart_and_no_piece_twice(backend: Backend) {
    let app = TestApp::spawn_live(backend, streaming(200)).await;
    let id = create(&app, "k", "sim-responses-breaks").await;
    let received = without_partials(&read_to_end(open(&app, &app.alice, &id, "", None).await).await);
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!((&job["state"], &job["winning_attempt"]), (&json!("succeeded"), &json!(1)), "{job:#}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job:#}");
    let n = received.len();
    assert!(n > 2 && received[..n - 1].iter().all(|e| e.kind == "delta"), "{:?}", kinds(&received));
    assert_eq!(received[n - 1].kind, "result");
    numbered_from(&received, 1);
    let whole: Value = serde_json::from_str(&put_together(&received)).unwrap();
    assert_eq!(whole, job["result"], "the pieces before and after the break, none twice");
    let at_provider = &app.simulator_log().await[job["attempts"][0]["id"].as_str().unwrap()];
    assert_eq!(at_provider["stream_resumed"], 1, "the stream broke and was resumed: {at_provider:#}");
}

/// A provider that streams more than its `max_output_tokens` (8 here, and
/// the margin: 16; the answer has about 80, at 20 pieces a second) is
/// stopped there: no more of its answer is stored, its call is stopped and
/// canceled at the provider, and the attempt fails as `response-too-large`,
/// charged what it streamed (counted) or what the provider says.
async fn a_streamed_answer_past_max_output_tokens_is_stopped_and_fails_response_too_large(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        streaming(50)(s);
        let sim = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192";
        let long = format!("{sim}\nmax_output_tokens = 8\nlatency_ms = 5\ntokens_per_second = 20\ntimeout_ms = 30000");
        s.providers.insert("sim-long".into(), provider(&long));
        // One attempt only: its failure ends the job's output.
        s.tasks.get_mut("summarize").unwrap().max_attempts = 1;
    })
    .await;
    // A summary of about 90 pieces, four seconds at 20 a second: stopped
    // long before its end, however slow the machine.
    let text =
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen ".repeat(4);
    let response =
        app.post_job("k", &json!({"task": "summarize", "input": {"text": text}, "provider": "sim-long"})).await;
    let id = response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let received = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    let attempt = &job["attempts"][0];
    assert_eq!((&job["state"], &attempt["error"]["type"]), (&json!("failed"), &json!("response-too-large")), "{job:#}");
    assert_eq!(attempt["error"]["detail"]["cancel_call"], "made", "{attempt:#}");
    let at_provider = &app.simulator_log().await[attempt["id"].as_str().unwrap()];
    assert!(at_provider["canceled_after_ms"].is_u64(), "stopped at the provider mid-answer: {at_provider:#}");
    assert_eq!(kinds(&received).last(), Some(&"error"));
    // What was stored: the answer up to its bound, past max_output_tokens
    // (8) and within its margin (16), never more.
    let shown = put_together(&received);
    let tokens = onejob::provider::tokens::count(onejob::config::Tokenizer::O200kBase, &shown);
    assert!((8..=16).contains(&tokens), "stored up to the bound only: {tokens} tokens in {shown:?}");
    assert!(attempt["usage"]["completion_tokens"].as_i64() > Some(0), "charged what it streamed: {attempt:#}");
}

/// A fallback posted while a running attempt's answer streams to the job's
/// output could only lose to it: refused, 409 `output-streaming`, with
/// `Retry-After`.
async fn a_fallback_posted_while_an_answer_streams_is_refused_409_output_streaming(backend: Backend) {
    use futures_util::StreamExt;
    let app = TestApp::spawn_live(backend, streaming(10)).await;
    let id = create(&app, "k", "sim-stream").await;
    let mut stream = crate::events::events(open(&app, &app.alice, &id, "", None).await);
    let first = stream.next().await.expect("a first piece");
    assert_eq!((first.kind.as_str(), &first.data["attempt"]), ("delta", &json!(1)));
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-stream"})).await;
    assert_eq!(fallback.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    expect_problem(fallback, StatusCode::CONFLICT, "output-streaming").await;
    let rest: Vec<Received> = tokio::time::timeout(std::time::Duration::from_secs(30), stream.collect()).await.unwrap();
    assert_eq!(kinds(&rest).last(), Some(&"result"));
}

/// Two attempts race before either has a token: attempt 1's first comes
/// after a second, the fallback's after two. Attempt 1's first piece takes
/// the output; the fallback's finds it held by a running attempt: it lost,
/// its call is aborted and canceled at the provider (while its stream
/// still runs: 40 tokens a second, for the refusal of its first piece to
/// reach it through a loaded database). Only attempt 1's pieces ever reach
/// a reader.
async fn racing_streams_show_one_attempts_pieces_and_the_other_is_canceled_at_the_provider(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        streaming(10)(s);
        let sim = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 512\ntimeout_ms = 10000";
        s.providers.insert("sim-stream-first".into(), provider(&format!("{sim}\nfirst_token_ms = 1000\ntokens_per_second = 10")));
        s.providers.insert("sim-stream-second".into(), provider(&format!("{sim}\nfirst_token_ms = 2000\ntokens_per_second = 40")));
    })
    .await;
    app.qualify("sim-stream-second").await;
    let id = create(&app, "k", "sim-stream-first").await;
    app.wait_for(&id, "running", |j| j["attempts"][0]["state"] == "running").await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-stream-second"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED, "no token yet: nothing holds the output");
    let received = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let job = app.wait_for(&id, "the fallback canceled", |j| j["attempts"][1]["state"] == "canceled").await;
    assert_eq!((&job["state"], &job["winning_attempt"]), (&json!("succeeded"), &json!(1)), "{job:#}");
    assert_eq!(kinds(&received).last(), Some(&"result"));
    assert!(received.iter().all(|e| e.data["attempt"] == 1), "only attempt 1's pieces: {:?}", kinds(&received));
    numbered_from(&received, 1);
    let whole: Value = serde_json::from_str(&put_together(&received)).unwrap();
    assert_eq!(whole, job["result"]);
    let loser = &job["attempts"][1];
    assert_eq!(loser["error"]["detail"]["cancel_call"], "made", "{loser:#}");
    let at_provider = &app.simulator_log().await[loser["id"].as_str().unwrap()];
    assert!(at_provider["canceled_after_ms"].is_u64(), "canceled at the provider: {at_provider:#}");
}

/// A stream that stalls after five pieces reaches its deadline: the
/// attempt is unknown, and the reconciler settles it from the provider's
/// record. Its pieces do not put the result together: a `restart`, then
/// the result.
async fn a_stalled_stream_reconciled_from_the_provider_ends_with_a_restart_and_the_result(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        streaming(10)(s);
        let sim = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 512";
        s.providers.insert(
            "sim-stalls".into(),
            provider(&format!("{sim}\nlatency_ms = 5\ntokens_per_second = 50\nstream_stall_after = 5\ntimeout_ms = 1000\nabsence_grace_ms = 100")),
        );
    })
    .await;
    let id = create(&app, "k", "sim-stalls").await;
    let received = without_partials(&read_to_end(open(&app, &app.alice, &id, "", None).await).await);
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!((&job["state"], &job["winning_attempt"]), (&json!("succeeded"), &json!(1)), "{job:#}");
    // While unknown, the job waits for the reconciler, and said so if a
    // reader looked before the reconciler settled it.
    let (waits, received): (Vec<Received>, Vec<Received>) = received.into_iter().partition(|e| e.kind == "waiting");
    assert!(waits.len() <= 1 && waits.iter().all(|e| e.data["waiting_for"] == "reconciliation"), "{:?}", kinds(&waits));
    let n = received.len();
    assert!(n >= 3 && kinds(&received[n - 2..]) == ["restart", "result"], "{:?}", kinds(&received));
    assert!(received[..n - 2].iter().all(|e| e.kind == "delta"), "{:?}", kinds(&received));
    assert_eq!(put_together(&received[..n - 2]).chars().count(), 20, "five pieces of four characters came");
    numbered_from(&received, 1);
    assert_eq!(received[n - 2].data, json!({"attempt": 1}));
    assert_eq!(received[n - 1].data["result"], job["result"]);
}

/// A double-clicked Generate: 50 creates of one intent at once make one
/// job and one streamed call; every reader of it gets the same pieces.
async fn fifty_concurrent_creates_of_one_intent_make_one_provider_stream(backend: Backend) {
    let app = TestApp::spawn_live(backend, streaming(50)).await;
    let body = json!({"task": "summarize", "input": {"text": "the whole answer"}, "provider": "sim-stream"});
    let creates = (0..50).map(|_| app.post_job("generate", &body));
    let answers = futures_util::future::join_all(creates).await;
    let mut ids = std::collections::BTreeSet::new();
    for answer in answers {
        assert!(answer.status().is_success(), "{}", answer.status());
        ids.insert(answer.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1, "one job for the intent");
    let id = ids.into_iter().next().unwrap();
    let readers = (0..3).map(|_| async { read_to_end(open(&app, &app.alice, &id, "", None).await).await });
    let seen = futures_util::future::join_all(readers).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    for received in &seen {
        let whole: Value = serde_json::from_str(&put_together(received)).unwrap();
        assert_eq!(whole, job["result"], "every reader gets the whole answer");
        numbered_from(received, 1);
    }
    assert_eq!(app.simulator_log().await.len(), 1, "one call to the provider");
}

/// A reader of a streamed answer is woken by each write of its pieces in
/// this process and shown them with the notice: it reads the pieces, and
/// the job, when the job changed (claimed, settled), not at each write.
/// Counted by pg_stat_statements; the reread interval is set past the
/// answer.
async fn a_reader_is_shown_the_pieces_written_here_and_reads_the_job_when_it_changed() {
    let app = TestApp::spawn_live(Backend::Postgres, |s| {
        streaming(20)(s);
        s.server.event_stream_interval = std::time::Duration::from_secs(30);
    })
    .await;
    app.qualify("sim-stream").await;
    let pool = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    crate::common::postgres::reset_statement_counts(&pool).await;
    let id = create(&app, "k", "sim-stream").await;
    let received = read_to_end(open(&app, &app.alice, &id, "", None).await).await;
    let counts = crate::common::postgres::statement_counts(&pool).await;
    let writes = received.iter().filter(|e| e.kind == "delta").count();
    assert!(writes >= 10, "a piece a write, at 20 tokens a second: {:?}", kinds(&received));
    assert_eq!(kinds(&received).last(), Some(&"result"));
    numbered_from(&without_partials(&received), 1);
    let calls = |start: &str| counts.iter().filter(|(query, _)| query.starts_with(start)).map(|(_, n)| n).sum::<i64>();
    // The job: to follow its output, at the start of the follower's loop,
    // at the claim (if it came after), at the settlement. The pieces: at
    // the start, at those changes, and all of them at the end.
    let (job_reads, piece_reads) = (calls("select j.owner_id, j.id,"), calls("select seq, attempt_number"));
    assert!(job_reads <= 4, "{job_reads} reads of the job for {writes} writes: {counts:#?}");
    assert!(piece_reads <= 5, "{piece_reads} reads of the pieces for {writes} writes: {counts:#?}");
}

on_both_backends!(
    a_streamed_answer_past_max_output_tokens_is_stopped_and_fails_response_too_large,
    a_responses_stream_broken_after_ten_pieces_resumes_with_no_restart_and_no_piece_twice,
    fifty_concurrent_creates_of_one_intent_make_one_provider_stream,
    a_stalled_stream_reconciled_from_the_provider_ends_with_a_restart_and_the_result,
    a_fallback_posted_while_an_answer_streams_is_refused_409_output_streaming,
    racing_streams_show_one_attempts_pieces_and_the_other_is_canceled_at_the_provider,
    a_streamed_answer_reaches_a_reader_in_pieces_that_put_together_are_the_result,
    a_streamed_json_answer_sends_partial_objects_that_grow_and_end_as_the_result,
    a_reader_that_resumes_mid_stream_on_another_server_gets_every_piece_once,
    a_stream_broken_after_ten_pieces_restarts_and_the_next_attempt_answers_whole,
    a_reader_gets_one_result_event_when_a_job_that_does_not_stream_succeeds,
    a_reader_resumes_after_the_last_event_id_and_gets_nothing_twice,
    a_job_that_can_change_no_more_without_a_result_ends_its_output_with_error,
    another_owners_job_has_no_output_to_read,
    the_output_of_a_job_run_by_another_server_reaches_a_reader_on_this_one,
);

on_postgres!(
    a_reader_whose_server_is_killed_and_restarted_mid_stream_resumes_there_and_gets_every_piece_once,
    a_reader_is_shown_the_pieces_written_here_and_reads_the_job_when_it_changed
);
