//! Replicate's predictions (`kind = "replicate"`, and the simulator's copy,
//! `api = "replicate"`): every create is a new billed prediction, so each
//! attempt is one create, never sent again. With every create's answer
//! lost, each attempt is still one prediction, settled by its signed
//! webhook (which brings the prediction's id); a webhook that never comes
//! is made up for by asking for the prediction; a callback that is not
//! signed by the provider answers 401 and changes nothing; the official
//! `replicate` SDK reads the simulator's predictions and takes its webhook
//! signatures. On both backends.

use hmac::Mac as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json};

/// The `image` task on a simulated Replicate provider with `extra` settings
/// (its latency among them).
fn on_replicate(extra: &'static str) -> impl FnOnce(&mut onejob::config::Settings) {
    move |s| {
        let provider = crate::common::provider(&format!(
            "kind = \"sim\"\napi = \"replicate\"\nmodel = \"acme/painter\"\npoll_interval_ms = 200\n{extra}"
        ));
        s.providers.insert("sim-replicate".into(), provider);
        let image = s.tasks.get_mut("image").unwrap();
        image.default_provider = "sim-replicate".into();
        // A list of files, as Replicate's image models answer.
        image.output_schema = json!({"type": "array", "items": {"type": "string"}, "minItems": 1});
    }
}

/// The job once it succeeded, failed or was canceled.
async fn ended(app: &TestApp, id: &str) -> Value {
    app.wait_for(id, "the job ended", |j| ["succeeded", "failed", "canceled"].contains(&j["state"].as_str().unwrap()))
        .await
}

/// The simulator's predictions (its log: one entry a create).
async fn predictions(app: &TestApp) -> Vec<Value> {
    app.simulator_log().await.into_values().filter(|r| r["provider"] == "sim-replicate").collect()
}

async fn with_every_create_answer_lost_each_attempt_is_one_prediction_settled_by_its_signed_webhook(backend: Backend) {
    let app = TestApp::spawn_live(backend, on_replicate("latency_ms = 300\nfault = \"reset_after_request\"")).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let body = json!({"task": "image", "input": {"prompt": format!("picture {n}")}});
        ids.push(ok_json(app.post_job(&format!("lost-{n}"), &body).await).await["id"].as_str().unwrap().to_owned());
    }
    let mut seen = std::collections::BTreeSet::new();
    for id in &ids {
        let job = ended(&app, id).await;
        assert_eq!(job["state"], "succeeded", "settled by the webhook: {job:#}");
        assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job:#}");
        let prediction = job["attempts"][0]["provider_request_id"].as_str().expect("the webhook brought its id");
        seen.insert(prediction.to_owned());
        let served = app.get(&app.alice, job["result"][0]["url"].as_str().unwrap()).await;
        assert!(served.bytes().await.unwrap().starts_with(b"\x89PNG\r\n\x1a\n"), "its PNG kept");
    }
    let made = predictions(&app).await;
    assert_eq!(made.len(), ids.len(), "one prediction per attempt, none sent again: {made:#?}");
    assert!(made.iter().all(|p| seen.contains(p["id"].as_str().unwrap())), "each settled its own attempt");
}

async fn a_prediction_whose_webhook_never_comes_is_settled_by_asking_for_it(backend: Backend) {
    let app = TestApp::spawn_live(backend, on_replicate("latency_ms = 300\ndrop_webhooks = true")).await;
    let body = json!({"task": "image", "input": {"prompt": "no webhook"}});
    let id = ok_json(app.post_job("polled", &body).await).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let made = predictions(&app).await;
    assert_eq!(made.len(), 1, "{made:#?}");
    assert_eq!(job["attempts"][0]["provider_request_id"], made[0]["id"]);
}

async fn a_callback_not_signed_by_the_provider_answers_401_and_changes_nothing(backend: Backend) {
    // The prediction takes a while and sends no webhook of its own, so the
    // attempt runs while the test calls back.
    let app = TestApp::spawn_live(backend, on_replicate("drop_webhooks = true\nlatency_ms = 5000")).await;
    let body = json!({"task": "image", "input": {"prompt": "forged"}});
    let id = ok_json(app.post_job("forged", &body).await).await["id"].as_str().unwrap().to_owned();
    let job = app.wait_for(&id, "the prediction runs", |j| j["attempts"][0]["provider_request_id"].is_string()).await;
    let prediction = job["attempts"][0]["provider_request_id"].as_str().unwrap().to_owned();
    // The attempt's own URL, made as the server makes it from its secret.
    let secret: String = sqlx::query_scalar("select secret from server_secrets where name = 'callbacks'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}/1").as_bytes());
    let url = app.url(&format!("/callbacks/{id}/1/{}", hex::encode(mac.finalize().into_bytes())));
    let forged = json!({"id": prediction, "status": "failed", "error": "forged"}).to_string();
    let now = chrono::Utc::now().timestamp();
    let send_body = |body: String, headers: Vec<(&'static str, String)>| {
        let mut post = app.client.post(&url).header("content-type", "application/json").body(body);
        for (name, value) in headers {
            post = post.header(name, value);
        }
        post.send()
    };
    let send = |headers: Vec<(&'static str, String)>| {
        let mut post = app.client.post(&url).header("content-type", "application/json").body(forged.clone());
        for (name, value) in headers {
            post = post.header(name, value);
        }
        post.send()
    };
    let unsigned = send(vec![]).await.unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED, "{}", unsigned.text().await.unwrap());
    let other_key = onejob::domain::webhook::new_secret();
    let signed = onejob::domain::webhook::signature(&[&other_key], "msg_forged", now, forged.as_bytes());
    let headers = vec![
        ("webhook-id", "msg_forged".to_owned()),
        ("webhook-timestamp", now.to_string()),
        ("webhook-signature", signed),
    ];
    let wrong_key = send(headers).await.unwrap();
    assert_eq!(wrong_key.status(), StatusCode::UNAUTHORIZED);
    // Signed with the provider's own secret, but long ago: a replay.
    let key: Value = ok_json(
        app.client
            .get(format!(
                "{}/providers/sim-replicate/v1/webhooks/default/secret",
                app.simulator.as_ref().unwrap().url()
            ))
            .bearer_auth("r8_test")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let key = key["key"].as_str().unwrap();
    let old = now - 3600;
    let replayed = onejob::domain::webhook::signature(&[key], "msg_forged", old, forged.as_bytes());
    let headers = vec![
        ("webhook-id", "msg_forged".to_owned()),
        ("webhook-timestamp", old.to_string()),
        ("webhook-signature", replayed),
    ];
    assert_eq!(send(headers).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // Signed with it now, but of another prediction of the account.
    let other = json!({"id": "another", "status": "succeeded", "output": ["data:image/png;base64,AA=="]}).to_string();
    let signed = onejob::domain::webhook::signature(&[key], "msg_other", now, other.as_bytes());
    let headers = vec![
        ("webhook-id", "msg_other".to_owned()),
        ("webhook-timestamp", now.to_string()),
        ("webhook-signature", signed),
    ];
    assert_eq!(send_body(other, headers).await.unwrap().status(), StatusCode::NOT_FOUND);
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["attempts"][0]["state"], "running", "nothing changed: {job:#}");
    // Of its own prediction, signed with it now: taken.
    let signed = onejob::domain::webhook::signature(&[key], "msg_forged", now, forged.as_bytes());
    let headers = vec![
        ("webhook-id", "msg_forged".to_owned()),
        ("webhook-timestamp", now.to_string()),
        ("webhook-signature", signed),
    ];
    assert_eq!(ok_json(send(headers).await.unwrap()).await["received"], "settled");
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["attempts"][0]["state"], "failed", "{job:#}");
}

async fn a_prediction_costs_its_compute_time_at_the_price_per_second_and_the_report_counts_it(backend: Backend) {
    let app = TestApp::spawn_live(
        backend,
        on_replicate("latency_ms = 400\nprice = { per_second = \"0.0014\", currency = \"USD\" }"),
    )
    .await;
    let body = json!({"task": "image", "input": {"prompt": "billed by the second"}});
    let id = ok_json(app.post_job("billed", &body).await).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let attempt = &job["attempts"][0];
    // The simulator reports the time from the create to the end.
    let predict_ms = attempt["usage"]["predict_ms"].as_i64().expect("its compute time");
    assert!((400..2_000).contains(&predict_ms), "{attempt:#}");
    let rate: onejob::domain::Money = "0.0014".parse().unwrap();
    let expected = onejob::domain::Money::from_units(rate.units() / 1_000 * i128::from(predict_ms));
    assert_eq!(attempt["cost"]["amount"], expected.to_string(), "{attempt:#}");
    assert_eq!(job["cost"]["winner"], expected.to_string(), "{job:#}");
    let report = ok_json(app.get(&app.alice, "/usage?group_by=provider").await).await;
    assert_eq!(report["total"]["predict_ms"], predict_ms, "{report:#}");
    assert_eq!(report["total"]["cost"]["USD"], expected.to_string(), "{report:#}");
}

async fn a_winning_fallback_has_the_running_prediction_canceled_and_charged_what_replicate_reports(backend: Backend) {
    let price = "price = { per_second = \"0.0014\", currency = \"USD\" }";
    let app = TestApp::spawn_live(backend, |s| {
        on_replicate("latency_ms = 20000\nprice = { per_second = \"0.0014\", currency = \"USD\" }")(s);
        let fast = format!("kind = \"sim\"\napi = \"replicate\"\nlatency_ms = 200\npoll_interval_ms = 200\n{price}");
        s.providers.insert("sim-replicate-fast".into(), crate::common::provider(&fast));
        s.tasks.get_mut("image").unwrap().failover = vec!["sim-replicate-fast".into()];
    })
    .await;
    let qualify = app.client.post(app.url("/providers/sim-replicate-fast/qualifications")).bearer_auth(&app.operator);
    let report = ok_json(qualify.json(&json!({"task": "image"})).send().await.unwrap()).await;
    assert_eq!(report["passed"], true, "{report:#}");
    let body = json!({"task": "image", "input": {"prompt": "a race"}});
    let id = ok_json(app.post_job("race", &body).await).await["id"].as_str().unwrap().to_owned();
    app.wait_for(&id, "the slow prediction runs", |j| j["attempts"][0]["provider_request_id"].is_string()).await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-replicate-fast"})).await;
    assert!(fallback.status().is_success(), "{}", fallback.status());
    let job = app
        .wait_for(&id, "the loser is canceled", |j| {
            j["state"] == "succeeded" && j["attempts"][0]["state"] == "canceled"
        })
        .await;
    assert_eq!(job["winning_attempt"], 2, "{job:#}");
    let loser = &job["attempts"][0];
    assert_eq!(loser["error"]["detail"]["cancel_call"], "made", "{job:#}");
    let slow = app.simulator_log().await.remove(loser["provider_request_id"].as_str().unwrap()).unwrap();
    assert!(slow["canceled_after_ms"].is_u64(), "canceled at the simulator: {slow:#}");
    let charged = loser["usage"]["predict_ms"].as_i64().expect("the compute time Replicate reports");
    assert!(charged > 0 && loser["cost"]["amount"] != "0", "{loser:#}");
}

async fn a_prediction_settled_before_its_webhook_came_is_charged_what_the_webhook_reports(backend: Backend) {
    // The create's answer is lost: the attempt is unknown, without an id
    // to cancel by, and its owner resolves it before the webhook comes.
    let app = TestApp::spawn_live(
        backend,
        on_replicate("latency_ms = 1500\nfault = \"reset_after_request\"\nprice = { per_second = \"0.0014\", currency = \"USD\" }"),
    )
    .await;
    let body = json!({"task": "image", "input": {"prompt": "resolved first"}});
    let id = ok_json(app.post_job("resolved", &body).await).await["id"].as_str().unwrap().to_owned();
    app.wait_for(&id, "the attempt is unknown", |j| j["attempts"][0]["state"] == "unknown").await;
    let resolve = app.client.post(app.url(&format!("/jobs/{id}/attempts/1/resolve"))).bearer_auth(&app.alice);
    let resolved = resolve.json(&json!({"outcome": "failed", "reason": "given up"})).send().await.unwrap();
    let job = ok_json(resolved).await;
    assert_eq!((job["attempts"][0]["state"].as_str(), &job["attempts"][0]["usage"]), (Some("failed"), &Value::Null));
    let job = app
        .wait_for(&id, "the webhook's compute time is kept", |j| j["attempts"][0]["usage"]["predict_ms"].is_i64())
        .await;
    let loser = &job["attempts"][0];
    assert_eq!(loser["state"], "failed", "the late webhook changed nothing else: {job:#}");
    assert!(loser["usage"]["predict_ms"].as_i64() >= Some(1_500) && loser["cost"]["amount"] != "0", "{loser:#}");
}

/// docs/providers.md's Replicate configuration, pointed at the
/// simulator's copy of Replicate's API (served for `sim-replicate`), its
/// token from a variable every test process has.
async fn the_documented_configuration_works_as_written_once_its_base_url_is_changed(backend: Backend) {
    let mut simulated = onejob::config::Settings::builtin();
    let copy = crate::common::provider("kind = \"sim\"\napi = \"replicate\"\nlatency_ms = 200");
    simulated.providers.insert("sim-replicate".into(), copy);
    let simulator = onejob::provider::sim::spawn(&simulated, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md")).unwrap();
    let section = doc.split("\n## Replicate\n").nth(1).expect("the section");
    let block = section.split("```toml\n").nth(1).expect("its TOML").split("```").next().unwrap();
    let (documented_url, documented_token) =
        ("base_url = \"https://api.replicate.com/v1\"", "api_key_env = \"REPLICATE_API_TOKEN\"");
    assert!(block.contains(documented_url) && block.contains(documented_token), "{block}");
    let block = block
        .replace(documented_url, &format!("base_url = \"{}/providers/sim-replicate/v1\"", simulator.url()))
        .replace(documented_token, "api_key_env = \"CARGO_PKG_NAME\"");
    let documented = onejob::config::Settings::parse(&block).expect("the documented TOML parses");
    documented.validate().expect("the documented configuration is valid");
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.extend(documented.providers);
        s.tasks.extend(documented.tasks);
    })
    .await;
    let qualify = app.client.post(app.url("/providers/sdxl/qualifications")).bearer_auth(&app.operator);
    let report = ok_json(qualify.json(&json!({"task": "image"})).send().await.unwrap()).await;
    assert_eq!(report["passed"], true, "the documented example qualifies: {report:#}");
    let example = &report["report"]["examples"][0];
    assert!(example["usage"]["predict_ms"].as_i64() > Some(0), "{report:#}");
    assert_eq!(report["report"]["cost"], json!({"amount": example["cost"]["amount"], "currency": "USD"}));
    assert_ne!(example["cost"]["amount"], "0", "a paid prediction, its cost shown: {report:#}");
    let response = app.post_job("fox", &json!({"task": "image", "input": {"prompt": "a red fox"}})).await;
    let id = ok_json(response).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["result"][0]["content_type"], "image/png", "{job:#}");
}

/// The official `replicate` Python package creates (by model, version and
/// deployment, with and without `Prefer: wait`), reads, lists and cancels
/// the simulator's predictions, and validates the signature of its webhook
/// (`tests/replicate/sdk_check.py`).
#[tokio::test]
#[ignore = "needs the replicate Python package: installed by .ci/run"]
async fn the_official_replicate_sdk_reads_the_simulators_predictions_and_takes_its_webhooks() {
    let mut settings = onejob::config::Settings::builtin();
    let sim = |extra: &str| crate::common::provider(&format!("kind = \"sim\"\napi = \"replicate\"\n{extra}"));
    settings.providers.insert("sdk-replicate".into(), sim("latency_ms = 200"));
    settings.providers.insert("sdk-slow".into(), sim("latency_ms = 60000"));
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    crate::common::sdk_check("replicate/sdk_check.py", "replicate", &simulator.url()).await;
    let log: Value = reqwest::get(format!("{}/v1/requests", simulator.url())).await.unwrap().json().await.unwrap();
    let slow: Vec<&Value> =
        log["requests"].as_array().unwrap().iter().filter(|r| r["provider"] == "sdk-slow").collect();
    assert_eq!(slow.len(), 1, "{log:#}");
    assert!(slow[0]["canceled_after_ms"].is_u64(), "canceled at the simulator: {:#}", slow[0]);
}

on_both_backends!(
    with_every_create_answer_lost_each_attempt_is_one_prediction_settled_by_its_signed_webhook,
    a_prediction_whose_webhook_never_comes_is_settled_by_asking_for_it,
    a_callback_not_signed_by_the_provider_answers_401_and_changes_nothing,
    the_documented_configuration_works_as_written_once_its_base_url_is_changed,
    a_prediction_costs_its_compute_time_at_the_price_per_second_and_the_report_counts_it,
    a_winning_fallback_has_the_running_prediction_canceled_and_charged_what_replicate_reports,
    a_prediction_settled_before_its_webhook_came_is_charged_what_the_webhook_reports,
);
