//! A job's output as Server-Sent Events (`GET /jobs/{id}/output`), over a
//! real socket, parsed by the `eventsource-stream` crate. For a task that
//! does not stream: one `result` (or `error`) event once the job ends, the
//! same whether the reader came before or after the end, through the server
//! that ran the job or another one; an `id` that a reader resumes after,
//! getting nothing twice; another owner's job answers 404.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, expect_problem, ok_json};
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
        slow.latency_ms = 60_000;
        slow.timeout_ms = 120_000;
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

on_both_backends!(
    a_reader_gets_one_result_event_when_a_job_that_does_not_stream_succeeds,
    a_reader_resumes_after_the_last_event_id_and_gets_nothing_twice,
    a_job_that_can_change_no_more_without_a_result_ends_its_output_with_error,
    another_owners_job_has_no_output_to_read,
    the_output_of_a_job_run_by_another_server_reaches_a_reader_on_this_one,
);
