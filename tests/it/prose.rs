//! Text tasks and a stream a chat UI can render, over a real socket and
//! the simulator: the default configuration's `chat` task streams prose
//! whose deltas put together are its result (a JSON string), with no
//! `partial`s; a text answer longer than its schema allows fails as a
//! contract violation and the failover answers; a job left to its user's
//! fallback says so at once on both streams, and the fallback's text
//! follows on the same output stream; the default tasks qualify on
//! Anthropic's and OpenAI's kinds pointed at the simulator.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json, provider};
use crate::events::{Received, events, kinds, read_to_end};
use crate::output::put_together;

async fn open(app: &TestApp, id: &str, stream: &str) -> reqwest::Response {
    app.client.get(app.url(&format!("/jobs/{id}/{stream}"))).bearer_auth(&app.alice).send().await.unwrap()
}

async fn chat(app: &TestApp, key: &str, message: &str) -> String {
    let response = app.post_job(key, &json!({"task": "chat", "input": {"message": message}})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn the_default_chat_task_streams_prose_in_ten_or_more_deltas_that_put_together_are_the_result(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = chat(&app, "hello", "What does an idempotency key do?").await;
    let received = read_to_end(open(&app, &id, "output").await).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let deltas = received.iter().filter(|e| e.kind == "delta").count();
    assert!(deltas >= 10, "{deltas} deltas: {:?}", kinds(&received));
    assert_eq!(kinds(&received[deltas..]), ["result"], "prose has no partials and no restart");
    let text = job["result"].as_str().expect("a text task's result is a JSON string");
    assert_eq!(put_together(&received), text);
    assert!(text.contains("idempotency key") && !text.starts_with('{'), "{text}");
    assert_eq!(received[deltas].data["result"], job["result"]);
}

/// `chat` starts on `sim-long`, whose prose goes on four times too long
/// for a `maxLength` of 600, and falls over to `sim-fast`.
fn too_long_first(s: &mut onejob::config::Settings) {
    let sim = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 1024\nlatency_ms = 5\ntokens_per_second = 500";
    s.providers.insert("sim-long".into(), provider(&format!("{sim}\noutput = \"long\"")));
    let chat = s.tasks.get_mut("chat").unwrap();
    chat.default_provider = "sim-long".into();
    chat.output_schema = json!({"type": "string", "minLength": 1, "maxLength": 600});
}

async fn a_text_answer_over_max_length_fails_as_a_contract_violation_and_the_failover_answers(backend: Backend) {
    let app = TestApp::spawn_live(backend, too_long_first).await;
    let id = chat(&app, "long", "Tell me about retries").await;
    let job = app.wait_for(&id, "the failover answered", |j| j["state"] == "succeeded").await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job:#}");
    assert_eq!((&attempts[0]["provider"], &attempts[0]["state"]), (&json!("sim-long"), &json!("failed")));
    assert_eq!(attempts[0]["error"]["type"], "contract-violation", "{job:#}");
    assert!(attempts[0]["error"]["message"].as_str().unwrap().contains("longer than 600"), "{job:#}");
    assert_eq!((&attempts[1]["provider"], &job["winning_attempt"]), (&json!("sim-fast"), &json!(2)));
    let text = job["result"].as_str().unwrap();
    assert!(text.chars().count() <= 600 && text.starts_with("You said:"), "{text}");
    // The output stream showed the first attempt's text, then starts over.
    let received = read_to_end(open(&app, &id, "output").await).await;
    let restart = received.iter().position(|e| e.kind == "restart").expect("a restart");
    assert_eq!(put_together(&received[restart..]), text, "{:?}", kinds(&received));
}

/// The next item of `stream`, within `limit`.
async fn next_within(stream: &mut (impl futures_util::Stream<Item = Received> + Unpin), limit: Duration) -> Received {
    tokio::time::timeout(limit, stream.next()).await.expect("an item in time").expect("the stream goes on")
}

async fn a_job_left_to_its_users_fallback_says_so_on_both_streams_and_the_fallback_text_follows(backend: Backend) {
    // No failover: once sim-long's answer fails, only the user can go on.
    let app = TestApp::spawn_live(backend, |s| {
        too_long_first(s);
        s.tasks.get_mut("chat").unwrap().failover.clear();
    })
    .await;
    let id = chat(&app, "stuck", "Tell me about fallbacks").await;
    let mut output = events(open(&app, &id, "output").await);
    let mut log = events(open(&app, &id, "events").await);
    app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    let failed_at = std::time::Instant::now();
    let mut shown = Vec::new();
    loop {
        let item = next_within(&mut output, Duration::from_secs(10)).await;
        let kind = item.kind.clone();
        shown.push(item);
        if kind == "waiting" {
            break;
        }
    }
    while next_within(&mut log, Duration::from_secs(10)).await.kind != "waiting" {}
    assert!(failed_at.elapsed() < Duration::from_secs(1), "both streams said so within a second of the failure");
    let waiting = &shown.last().unwrap().data;
    assert_eq!(
        (&waiting["state"], &waiting["waiting_for"], &waiting["attempt"]),
        (&json!("failed"), &json!("client"), &json!(1)),
        "{waiting:#}"
    );
    assert_eq!(shown.last().unwrap().id, shown[shown.len() - 2].id, "a waiting has the id of the item before it");
    assert!(put_together(&shown).chars().count() > 600, "the first attempt's text was shown");
    // The user falls back: its text follows on the same stream, after a restart.
    let fallback = app
        .client
        .post(app.url(&format!("/jobs/{id}/attempts")))
        .bearer_auth(&app.alice)
        .header("idempotency-key", "fallback-1")
        .json(&json!({"provider": "sim-fast"}))
        .send()
        .await
        .unwrap();
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let rest: Vec<Received> = tokio::time::timeout(Duration::from_secs(30), output.collect()).await.unwrap();
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(kinds(&rest)[0], "restart", "{:?}", kinds(&rest));
    assert_eq!(kinds(&rest).last(), Some(&"result"));
    assert_eq!(put_together(&rest), job["result"].as_str().unwrap(), "the fallback's text follows whole");
}

/// Runs every example of `task` on `provider`, built from `settings`.
async fn qualifies(settings: &onejob::config::Settings, simulator: &str, provider: &str, task: &str) -> Value {
    let providers = onejob::provider::build(settings, Some(simulator)).unwrap();
    let catalog = Arc::new(onejob::task::catalog::Catalog::new(settings).unwrap());
    let (passed, report) = onejob::task::qualify::run(providers[provider].clone(), catalog, task).await.unwrap();
    assert!(passed, "{provider} for {task}: {report:#}");
    report
}

#[tokio::test]
async fn the_default_tasks_qualify_on_anthropic_and_openai_kinds_pointed_at_the_simulator() {
    let mut settings = onejob::config::Settings::builtin();
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let base = format!("{}/providers/sim-fast", simulator.url());
    let real =
        "model = \"sim-1\"\napi_key_env = \"ONEJOB_TEST_UNSET_KEY\"\ncontext_tokens = 8192\nmax_output_tokens = 512";
    settings
        .providers
        .insert("claude".into(), provider(&format!("kind = \"anthropic\"\nbase_url = \"{base}\"\n{real}")));
    let chat_completions = format!("kind = \"openai\"\nbase_url = \"{base}/v1\"\n{real}");
    settings.providers.insert("gpt".into(), provider(&chat_completions));
    let structured = format!("{chat_completions}\nresponse_format = true");
    settings.providers.insert("gpt-structured".into(), provider(&structured));
    settings.validate().unwrap();
    for name in ["claude", "gpt", "gpt-structured"] {
        for task in ["summarize", "chat"] {
            let report = qualifies(&settings, &simulator.url(), name, task).await;
            let first = &report["examples"][0]["output"];
            match task {
                "chat" => assert!(first.as_str().is_some_and(|text| text.contains("idempotency key")), "{report:#}"),
                _ => assert_eq!(first["word_count"], 4, "{report:#}"),
            }
        }
    }
}

on_both_backends!(
    the_default_chat_task_streams_prose_in_ten_or_more_deltas_that_put_together_are_the_result,
    a_text_answer_over_max_length_fails_as_a_contract_violation_and_the_failover_answers,
    a_job_left_to_its_users_fallback_says_so_on_both_streams_and_the_fallback_text_follows,
);
