//! Provider contracts and qualification (I5), over HTTP against the running
//! application and the simulator: a provider that adds a top-level key fails
//! qualification and is never failed over to; its outputs never win; a
//! changed contract voids earlier qualifications; a prompt too long for a
//! provider is never sent; a failover to a provider still being qualified
//! waits for its verdict, for a bounded time.

use crate::common::{Backend, TestApp, expect_problem, provider};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn create(app: &TestApp, key: &str, body: &Value) -> String {
    let response = app.post_job(key, body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

async fn qualify(app: &TestApp, provider: &str) -> (StatusCode, Value) {
    let response = app
        .client
        .post(app.url(&format!("/providers/{provider}/qualifications")))
        .bearer_auth(&app.operator)
        .json(&json!({"task": "summarize"}))
        .send()
        .await
        .unwrap();
    (response.status(), response.json().await.unwrap())
}

async fn providers(app: &TestApp) -> Value {
    let listed = crate::common::ok_json(app.get(&app.operator, "/providers").await).await;
    listed["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p["tasks"]["summarize"].clone()))
        .collect()
}

async fn sim_bad_json_fails_qualification_naming_the_extra_key_and_is_never_failed_over_to(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-bad-json".into(), "sim-fast".into()]
    })
    .await;
    // Qualified at start (qualify_on_start): sim-fast passed, sim-bad-json did not.
    let states = providers(&app).await;
    assert_eq!(states["sim-fast"]["state"], "qualified", "{states:#}");
    assert_eq!(states["sim-bad-json"]["state"], "failed", "{states:#}");
    assert!(
        states["sim-bad-json"]["last_report"]["summary"]
            .as_str()
            .unwrap()
            .contains("/note: additional property not allowed")
    );

    // Run it again on demand: the report names the extra key, per example.
    let (status, record) = qualify(&app, "sim-bad-json").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(record["passed"], false);
    let examples = record["report"]["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 3);
    for example in examples {
        assert_eq!(example["passed"], false);
        assert!(example["reason"].as_str().unwrap().contains("/note: additional property not allowed"), "{example}");
        assert!(example["prompt_tokens"].as_u64().unwrap() > 0);
    }

    // A client's fallback to it is refused, and says why.
    let id =
        create(&app, "k", &json!({"task": "summarize", "input": {"text": "slow one"}, "provider": "sim-slow"})).await;
    app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let refused = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-bad-json"})).await;
    let problem = expect_problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "provider-not-qualified").await;
    assert!(problem["detail"].as_str().unwrap().contains("failed qualification"), "{problem}");

    // The failover policy skips it, records why, and goes on to sim-fast.
    let down = app.post_job("k2", &json!({"task": "summarize", "input": {"text": "x"}, "provider": "sim-hang"})).await;
    let down: Value = down.json().await.unwrap();
    let down = down["id"].as_str().unwrap().to_owned();
    let job = app.wait_for(&down, "failed over", |j| j["state"] == "succeeded").await;
    let providers_used: Vec<&str> =
        job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(providers_used, ["sim-hang", "sim-fast"]);
    let events = app
        .store()
        .list_events(&onejob::domain::OwnerId::parse("alice").unwrap(), onejob::domain::JobId::parse(&down).unwrap())
        .await
        .unwrap();
    let skipped = events.iter().find(|e| e.kind == "failover-skipped").expect("the skip is recorded");
    assert_eq!(skipped.detail["provider"], "sim-bad-json");
    assert!(skipped.detail["reason"].as_str().unwrap().contains("failed qualification"));
}

async fn a_job_on_sim_bad_json_fails_its_first_attempt_and_takes_the_failovers_output(backend: Backend) {
    let app =
        TestApp::spawn_live(backend, |s| s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-fast".into()])
            .await;
    let id = create(
        &app,
        "k",
        &json!({"task": "summarize", "input": {"text": "contract first"}, "provider": "sim-bad-json"}),
    )
    .await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    let first = &job["attempts"][0];
    assert_eq!(
        (first["state"].clone(), first["error"]["type"].clone()),
        (json!("failed"), json!("contract-violation"))
    );
    assert!(first["error"]["message"].as_str().unwrap().contains("/note: additional property not allowed"));
    assert_eq!(first["error"]["detail"]["violations"], json!(["/note: additional property not allowed"]));
    assert_eq!(job["winning_attempt"], 2);
    assert_eq!(job["attempts"][1]["provider"], "sim-fast");
    assert_eq!(job["result"], json!({"summary": "contract first", "word_count": 2}));
}

async fn changing_the_contract_voids_an_earlier_qualification_until_it_is_run_again(backend: Backend) {
    // Two applications on one database, the second with a changed output
    // schema (so a changed contract hash), as after a configuration change.
    let before = TestApp::spawn_live(backend, |_| {}).await;
    let states = providers(&before).await;
    assert_eq!(states["sim-fast"]["state"], "qualified");
    let old_hash = states["sim-fast"]["contract_hash"].clone();

    let database = before.database_url.clone();
    let after = TestApp::spawn_on(backend, &database, onejob::app::Role::Api, |s| {
        let task = s.tasks.get_mut("summarize").unwrap();
        task.output_schema["properties"]["language"] = json!({"type": "string"});
    })
    .await;
    let states = providers(&after).await;
    assert_eq!(states["sim-fast"]["state"], "stale", "{states:#}");
    assert_ne!(states["sim-fast"]["contract_hash"], old_hash);
    assert!(states["sim-fast"]["reason"].as_str().unwrap().contains("changed since"));

    let id = create(&after, "k", &json!({"task": "summarize", "input": {"text": "x"}, "provider": "sim-slow"})).await;
    crate::common::claim_all(&after).await;
    let refused = after.post_attempt(&after.alice, &id, "f1", &json!({"provider": "sim-fast"})).await;
    let problem = expect_problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "provider-not-qualified").await;
    assert!(problem["detail"].as_str().unwrap().contains("changed since"), "{problem}");

    let (status, record) = qualify(&after, "sim-fast").await;
    assert_eq!((status, record["passed"].clone()), (StatusCode::CREATED, json!(true)), "{record:#}");
    let admitted = after.post_attempt(&after.alice, &id, "f2", &json!({"provider": "sim-fast"})).await;
    assert_eq!(admitted.status(), StatusCode::CREATED);
}

async fn a_prompt_longer_than_the_providers_context_fails_before_any_call(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert(
            "sim-tiny".into(),
            provider("kind = \"sim\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 300\nmax_output_tokens = 200"),
        );
        s.tasks.get_mut("summarize").unwrap().failover.clear();
    })
    .await;
    let long_text = "lorem ipsum dolor sit amet ".repeat(40);
    let id =
        create(&app, "k", &json!({"task": "summarize", "input": {"text": long_text}, "provider": "sim-tiny"})).await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    let error = &job["attempts"][0]["error"];
    assert_eq!(error["type"], "prompt-too-long");
    assert_eq!(error["detail"]["context_tokens"], 300);
    assert!(error["detail"]["prompt_tokens"].as_u64().unwrap() + 200 > 300);
    assert!(app.simulator_log().await.is_empty(), "no call, no cost");

    // A short one fits and is sent.
    let short =
        create(&app, "k2", &json!({"task": "summarize", "input": {"text": "short"}, "provider": "sim-tiny"})).await;
    app.wait_for(&short, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(app.simulator_log().await.len(), 1);
}

async fn a_prompt_that_cannot_be_rendered_is_refused_when_the_job_is_created(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        // `max_words` is optional in the input schema, but this template needs it.
        s.tasks.get_mut("summarize").unwrap().prompt.user = "In {{ max_words }} words: {{ text }}".into();
    })
    .await;
    let response = app.post_job("k", &json!({"task": "summarize", "input": {"text": "no limit given"}})).await;
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    assert_eq!(problem["errors"][0]["pointer"], "/input");
    assert!(problem["detail"].as_str().unwrap().contains("cannot be rendered"), "{problem}");
    let fine = app.post_job("k", &json!({"task": "summarize", "input": {"text": "limit", "max_words": 3}})).await;
    assert_eq!(fine.status(), StatusCode::CREATED);
}

async fn an_operators_resolution_must_meet_the_contract_too(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert(
            "sim-blind".into(),
            provider("kind = \"sim\"\ntimeout_ms = 300\nhang_ms = 60000\nstatus_lookup = false"),
        );
    })
    .await;
    let id = create(&app, "k", &json!({"task": "summarize", "input": {"text": "x"}, "provider": "sim-blind"})).await;
    app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    let resolve = |output: Value| {
        app.client
            .post(app.url(&format!("/jobs/{id}/attempts/1/resolve")))
            .bearer_auth(&app.alice)
            .json(&json!({"outcome": "succeeded", "output": output, "reason": "seen in the console"}))
            .send()
    };
    let bad = resolve(json!({"summary": "x", "word_count": 1, "note": "extra"})).await.unwrap();
    let problem = expect_problem(bad, StatusCode::UNPROCESSABLE_ENTITY, "contract-violation").await;
    assert_eq!(problem["violations"], json!(["/note: additional property not allowed"]));
    let good = resolve(json!({"summary": "x", "word_count": 1})).await.unwrap();
    assert_eq!(good.status(), StatusCode::OK);
}

async fn qualification_of_an_unknown_provider_or_task_is_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, |_| {}).await;
    let (status, _) = qualify(&app, "nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let response = app
        .client
        .post(app.url("/providers/sim-fast/qualifications"))
        .bearer_auth(&app.operator)
        .json(&json!({"task": "translate"}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let anonymous = app.client.get(app.url("/providers")).send().await.unwrap();
    expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

/// Right after start, with sim-slow's qualification (1.5 s per example)
/// still running, a job on sim-bad-json breaks the contract at once and its
/// failover has to be decided. Failing over may wait `wait_ms`.
fn failover_to_sim_slow_qualifying_at_start(settings: &mut onejob::config::Settings, wait_ms: u64) {
    settings.providers.get_mut("sim-slow").unwrap().qualify_on_start = true;
    settings.tasks.get_mut("summarize").unwrap().failover = vec!["sim-slow".into()];
    settings.worker.failover_qualification_wait = std::time::Duration::from_millis(wait_ms);
}

async fn job_events(app: &TestApp, id: &str) -> Vec<onejob::domain::JobEvent> {
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    app.store().list_events(&owner, onejob::domain::JobId::parse(id).unwrap()).await.unwrap()
}

async fn a_failover_waits_for_the_verdict_of_a_qualification_still_running(backend: Backend) {
    let app = TestApp::spawn_live_qualifying(backend, |s| failover_to_sim_slow_qualifying_at_start(s, 30_000)).await;
    let id =
        create(&app, "k", &json!({"task": "summarize", "input": {"text": "wait for it"}, "provider": "sim-bad-json"}))
            .await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    let providers_used: Vec<&str> =
        job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(providers_used, ["sim-bad-json", "sim-slow"], "{job:#}");
    assert_eq!(job["attempts"][0]["error"]["type"], "contract-violation");
    let events = job_events(&app, &id).await;
    assert!(!events.iter().any(|e| e.kind == "failover-skipped"), "{events:#?}");
    // The broken output came before sim-slow had passed (the premise); the
    // failure was recorded after it (the wait).
    let states = providers(&app).await;
    let at = |value: &Value| serde_json::from_value::<chrono::DateTime<chrono::Utc>>(value.clone()).unwrap();
    let qualified_at = at(&states["sim-slow"]["qualified_at"]);
    let received_at = at(&job["attempts"][0]["unapplied_output"]["received_at"]);
    let failed_at = at(&job["attempts"][0]["finished_at"]);
    assert!(
        received_at < qualified_at,
        "the broken output came at {received_at}, after sim-slow passed at {qualified_at}"
    );
    assert!(
        qualified_at <= failed_at,
        "the first attempt was failed at {failed_at}, before sim-slow passed at {qualified_at}"
    );
    assert_eq!(states["sim-slow"]["qualifying"], false);
}

async fn a_failover_that_waited_its_limit_skips_saying_the_provider_was_still_being_qualified(backend: Backend) {
    let app = TestApp::spawn_live_qualifying(backend, |s| failover_to_sim_slow_qualifying_at_start(s, 100)).await;
    let id =
        create(&app, "k", &json!({"task": "summarize", "input": {"text": "no patience"}, "provider": "sim-bad-json"}))
            .await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job:#}");
    let events = job_events(&app, &id).await;
    let skipped = events.iter().find(|e| e.kind == "failover-skipped").expect("the skip is recorded");
    assert_eq!(skipped.detail["provider"], "sim-slow");
    let reason = skipped.detail["reason"].as_str().unwrap();
    assert!(reason.contains("still being qualified"), "{reason}");
    // It goes on and passes; only the job that could not wait went without it.
    crate::common::processes::eventually("sim-slow qualified", std::time::Duration::from_secs(20), || async {
        providers(&app).await["sim-slow"]["state"] == "qualified"
    })
    .await;
}

/// `GET /providers` tells a task's default provider, whose jobs run on it
/// whatever its qualification, apart from one no failover may go to.
async fn the_providers_list_tells_a_tasks_default_provider_apart_from_one_not_qualified_for_failover(backend: Backend) {
    // API only: no qualification runs at start.
    let app = TestApp::spawn_with(backend, |_| {}).await;
    let states = providers(&app).await;
    let (default, other) = (&states["sim-fast"], &states["sim-slow"]);
    assert_eq!((&default["state"], &default["default_provider"]), (&json!("never"), &json!(true)), "{default:#}");
    assert!(default["reason"].as_str().unwrap().contains("its jobs run on it all the same"), "{default:#}");
    assert_eq!((&other["state"], &other["default_provider"]), (&json!("never"), &json!(false)), "{other:#}");
    assert!(other["reason"].as_str().unwrap().contains("no failover, fallback or hedge goes to it"), "{other:#}");
}

on_both_backends!(
    the_providers_list_tells_a_tasks_default_provider_apart_from_one_not_qualified_for_failover,
    a_failover_waits_for_the_verdict_of_a_qualification_still_running,
    a_failover_that_waited_its_limit_skips_saying_the_provider_was_still_being_qualified,
    sim_bad_json_fails_qualification_naming_the_extra_key_and_is_never_failed_over_to,
    a_job_on_sim_bad_json_fails_its_first_attempt_and_takes_the_failovers_output,
    changing_the_contract_voids_an_earlier_qualification_until_it_is_run_again,
    a_prompt_longer_than_the_providers_context_fails_before_any_call,
    a_prompt_that_cannot_be_rendered_is_refused_when_the_job_is_created,
    an_operators_resolution_must_meet_the_contract_too,
    qualification_of_an_unknown_provider_or_task_is_refused,
);
