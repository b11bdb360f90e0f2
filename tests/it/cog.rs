//! A real Cog model server (`kind = "cog"`), running the small CPU
//! predictor of `tests/cog/predict.py`, which logs every run it makes: the
//! runs are counted from that log, whatever onejob says. A double click
//! (50 creates of one intent) is one run, and the job settles by the
//! server's webhook with its PNG kept and served (its bytes, a range,
//! another owner's 404); a PUT whose answer is lost is one run, settled by
//! the webhook; a webhook that never comes leaves the attempt `unknown`
//! with the server's health as evidence, never run again; a server at
//! capacity (409) is sent the attempt again later; a fallback racing a
//! running prediction has it canceled at the server (the predictor saw
//! the cancel); a callback with a token not the attempt's is refused and
//! changes nothing, and a late one changes nothing either; a server killed
//! (SIGKILL) while its prediction runs, then restarted, settles the job by
//! the webhook, with one run. The simulator's predictions (the default
//! configuration's `image` task) hold the same. On both backends.

use std::time::Duration;

use hmac::Mac as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::common::cog::CogServer;
use crate::common::{Backend, TestApp, ok_json};
use onejob::config::{Settings, TaskSettings};
use onejob::domain::{JobId, OwnerId};

/// An image task on `provider` (a Cog server), falling over to `failover`.
fn image_task(provider: &str, failover: &[&str]) -> TaskSettings {
    let mut task: TaskSettings = toml::from_str(
        r#"
        default_provider = "cog"
        max_attempts = 3
        max_in_flight = 2
        retries_per_provider = 0
        input_schema = '''{"type": "object", "required": ["tag"], "properties": {
            "tag": {"type": "string"}, "seconds": {"type": "number"}, "size": {"type": "integer"}}}'''
        output_schema = '''{"type": "string"}'''
        [prompt]
        user = "{{ tag }}"
        [files]
        types = ["image/png"]
        max_bytes = 1000000
        [[examples]]
        input = { tag = "qualification", seconds = 0 }
        "#,
    )
    .unwrap();
    task.default_provider = provider.to_owned();
    task.failover = failover.iter().map(|p| (*p).to_owned()).collect();
    task
}

/// `image` on one Cog server as provider `cog`.
fn on_cog<'a>(server: &'a CogServer, extra: &'static str) -> impl FnOnce(&mut Settings) + 'a {
    move |s| {
        s.providers.insert("cog".into(), server.provider(extra));
        s.tasks.insert("image".into(), image_task("cog", &[]));
    }
}

async fn create(app: &TestApp, key: &str, input: Value) -> String {
    let response = app.post_job(key, &json!({"task": "image", "input": input})).await;
    assert!(response.status().is_success(), "{}", response.status());
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The job once it succeeded, failed or was canceled (not while it is
/// `unknown`: a callback may still settle it).
async fn ended(app: &TestApp, id: &str) -> Value {
    app.wait_for(id, "the job ended", |j| ["succeeded", "failed", "canceled"].contains(&j["state"].as_str().unwrap()))
        .await
}

async fn fifty_creates_of_one_intent_make_one_run_settled_by_the_webhook_with_the_file_kept_and_served(
    backend: Backend,
) {
    let cog = CogServer::start().await;
    let app = TestApp::spawn_live(backend, on_cog(&cog, "")).await;
    let body = json!({"task": "image", "input": {"tag": "double-click", "seconds": 0.3, "size": 16}});
    let creates = (0..50).map(|_| app.post_job("one-intent", &body));
    let answers = futures_util::future::join_all(creates).await;
    let mut ids = std::collections::BTreeSet::new();
    for answer in answers {
        assert!(answer.status().is_success(), "{}", answer.status());
        ids.insert(answer.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1, "one job for one intent");
    let id = ids.pop_first().unwrap();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(cog.started("double-click"), 1, "one run at the server: {:?}", cog.runs());
    let predict_ms = job["attempts"][0]["usage"]["predict_ms"].as_i64().unwrap_or(0);
    assert!(predict_ms >= 300, "the server's predict_time is the attempt's compute time: {job:#}");
    let file = &job["result"];
    assert_eq!(file["file"], "1-0.png");
    assert_eq!(file["content_type"], "image/png");
    let url = file["url"].as_str().unwrap();
    assert_eq!(url, format!("/jobs/{id}/files/1-0.png"));
    let served = app.get(&app.alice, url).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()["content-type"], "image/png");
    let bytes = served.bytes().await.unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "the predictor's PNG");
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), file["sha256"].as_str().unwrap());
    assert_eq!(file["size"].as_u64(), Some(bytes.len() as u64));
    let ranged =
        app.client.get(app.url(url)).bearer_auth(&app.alice).header("range", "bytes=1-3").send().await.unwrap();
    assert_eq!(ranged.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.headers()["content-range"], format!("bytes 1-3/{}", bytes.len()));
    assert_eq!(ranged.bytes().await.unwrap(), bytes[1..4]);
    let past =
        app.client.get(app.url(url)).bearer_auth(&app.alice).header("range", "bytes=9999-").send().await.unwrap();
    assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(app.get(&app.bob, url).await.status(), StatusCode::NOT_FOUND, "another owner's file");
    let other = app.get(&app.alice, &format!("/jobs/{id}/files/1-1.png")).await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND, "no such file");
    // Erased, the job takes its files with it.
    let kept = app.files_dir.join(&id).join("1-0.png");
    assert!(kept.exists(), "{}", kept.display());
    let erased = app.client.delete(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(erased.status(), StatusCode::NO_CONTENT);
    assert!(!app.files_dir.join(&id).exists(), "the job's files went with it");
    assert_eq!(app.get(&app.alice, url).await.status(), StatusCode::NOT_FOUND);
}

async fn a_file_over_the_tasks_cap_fails_the_attempt_and_is_not_kept(backend: Backend) {
    let cog = CogServer::start().await;
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("cog".into(), cog.provider(""));
        let mut task = image_task("cog", &[]);
        task.files.as_mut().unwrap().max_bytes = 100;
        s.tasks.insert("image".into(), task);
    })
    .await;
    let id = create(&app, "too-large", json!({"tag": "large", "seconds": 0, "size": 512})).await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "failed", "{job:#}");
    let error = &job["attempts"][0]["error"];
    assert_eq!(error["type"], "contract-violation", "{error:#}");
    assert!(error["message"].as_str().unwrap().contains("outside the task's 1 to 100 bytes"), "{error:#}");
    assert!(!app.files_dir.join(&id).exists(), "nothing of it is kept");
    assert_eq!(cog.started("large"), 1);
}

/// The configuration docs/providers.md gives for Cog, as written but for
/// its `base_url`.
fn documented_configuration(base_url: &str) -> Settings {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md")).unwrap();
    let section = doc.split("\n## Cog model servers\n").nth(1).expect("the section");
    let block = section.split("```toml\n").nth(1).expect("its TOML").split("```").next().unwrap();
    assert!(block.contains("base_url = \"http://127.0.0.1:5000\""), "{block}");
    Settings::parse(&block.replace("http://127.0.0.1:5000", base_url)).expect("the documented TOML parses")
}

async fn the_documented_configuration_works_as_written_once_its_base_url_is_changed(backend: Backend) {
    let cog = CogServer::start().await;
    let documented = documented_configuration(&cog.url);
    documented.validate().expect("the documented configuration is valid");
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.extend(documented.providers);
        s.tasks.extend(documented.tasks);
    })
    .await;
    let qualify = app.client.post(app.url("/providers/flux/qualifications")).bearer_auth(&app.operator);
    let report = ok_json(qualify.json(&json!({"task": "image"})).send().await.unwrap()).await;
    assert_eq!(report["passed"], true, "the documented example qualifies: {report:#}");
    let response = app.post_job("fox", &json!({"task": "image", "input": {"prompt": "a red fox"}})).await;
    let id = ok_json(response).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!((job["state"].as_str(), job["result"]["content_type"].as_str()), (Some("succeeded"), Some("image/png")));
    assert_eq!(cog.started("a red fox"), 1);
}

async fn a_put_whose_answer_is_lost_is_one_run_and_the_job_succeeds_by_the_webhook(backend: Backend) {
    let cog = CogServer::start().await;
    let proxy = AnswerDropper::start(&cog.url).await;
    let app = TestApp::spawn_live(backend, |s| {
        let mut provider = cog.provider("");
        provider.base_url = Some(proxy.url.clone());
        s.providers.insert("cog".into(), provider);
        s.tasks.insert("image".into(), image_task("cog", &[]));
    })
    .await;
    let id = create(&app, "lost-answer", json!({"tag": "lost", "seconds": 0.5})).await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["result"]["content_type"], "image/png");
    assert_eq!(cog.started("lost"), 1, "never sent again: {:?}", cog.runs());
    assert!(proxy.dropped() >= 1, "the PUT's answer was dropped");
}

async fn a_webhook_that_never_comes_leaves_the_attempt_unknown_and_the_prediction_never_runs_again(backend: Backend) {
    let cog = CogServer::start().await;
    // Callbacks go to a port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let app = TestApp::spawn_live(backend, |s| {
        s.server.public_url = Some(format!("http://{closed}"));
        s.providers.insert("cog".into(), cog.provider("timeout_ms = 1500"));
        s.tasks.insert("image".into(), image_task("cog", &[]));
    })
    .await;
    let id = create(&app, "no-webhook", json!({"tag": "silent", "seconds": 0.2})).await;
    let job = app.wait_for(&id, "the attempt is unknown", |j| j["attempts"][0]["state"] == "unknown").await;
    let error = &job["attempts"][0]["error"];
    assert_eq!(error["type"], "timeout", "{error:#}");
    assert_eq!(error["detail"]["provider_status"], "/health-check says READY", "{error:#}");
    assert!(error["message"].as_str().unwrap().contains("/health-check says READY"), "{error:#}");
    // The reconciler cannot ask a Cog server: the attempt waits for an
    // operator, and nothing sends the PUT again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["attempts"][0]["state"], "unknown");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(cog.started("silent"), 1, "{:?}", cog.runs());
    let retry = app.post_attempt(&app.alice, &id, "retry", &json!({})).await;
    assert_eq!(retry.status(), StatusCode::CONFLICT);
}

async fn a_server_at_capacity_is_sent_the_attempt_again_when_a_slot_frees(backend: Backend) {
    let cog = CogServer::start().await;
    let app = TestApp::spawn_live(backend, on_cog(&cog, "")).await;
    let first = create(&app, "busy-1", json!({"tag": "first", "seconds": 1.0})).await;
    app.wait_for(&first, "the first runs", |j| j["state"] == "running").await;
    let second = create(&app, "busy-2", json!({"tag": "second", "seconds": 0.1})).await;
    for id in [&first, &second] {
        let job = ended(&app, id).await;
        assert_eq!(job["state"], "succeeded", "{job:#}");
        assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "the same attempt, sent again: {job:#}");
    }
    assert_eq!((cog.started("first"), cog.started("second")), (1, 1), "{:?}", cog.runs());
    let (alice, job) = (OwnerId::parse("alice").unwrap(), JobId::parse(&second).unwrap());
    let events = app.store().list_events(&alice, job).await.unwrap();
    let requeued =
        events.iter().find(|e| e.kind == onejob::domain::EventKind::AttemptRequeued).expect("the 409 put it back");
    assert_eq!(requeued.detail["reason"], "provider-at-capacity", "{:?}", requeued.detail);
}

async fn a_fallback_racing_a_running_prediction_has_it_canceled_at_the_server(backend: Backend) {
    let (slow, fast) = (CogServer::start().await, CogServer::start_scaled(0.01).await);
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("cog".into(), slow.provider(""));
        s.providers.insert("cog-fast".into(), fast.provider(""));
        s.tasks.insert("image".into(), image_task("cog", &["cog-fast"]));
    })
    .await;
    let report = ok_json(
        app.client
            .post(app.url("/providers/cog-fast/qualifications"))
            .bearer_auth(&app.operator)
            .json(&json!({"task": "image"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(report["passed"], true, "{report:#}");
    let id = create(&app, "race", json!({"tag": "race", "seconds": 20})).await;
    app.wait_for(&id, "the slow prediction runs", |j| j["attempts"][0]["state"] == "running").await;
    wait_until("the slow server started it", || slow.started("race") == 1).await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "cog-fast"})).await;
    assert!(fallback.status().is_success(), "{}", fallback.status());
    let job = app
        .wait_for(&id, "the loser is canceled", |j| {
            j["state"] == "succeeded" && j["attempts"][0]["state"] == "canceled"
        })
        .await;
    assert_eq!(job["winning_attempt"], 2, "{job:#}");
    assert_eq!(job["attempts"][0]["error"]["detail"]["cancel_call"], "made", "{job:#}");
    wait_until("the slow predictor saw the cancel", || {
        slow.runs().iter().any(|(event, tag)| event == "canceled" && tag == "race")
    })
    .await;
    assert_eq!((slow.started("race"), fast.started("race")), (1, 1));
}

async fn a_callback_with_another_token_is_refused_and_a_late_one_changes_nothing(backend: Backend) {
    let cog = CogServer::start().await;
    let app = TestApp::spawn_live(backend, on_cog(&cog, "")).await;
    let id = create(&app, "tokens", json!({"tag": "tokens", "seconds": 0.1})).await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded");
    // A Cog server's webhook names its prediction: the attempt's id.
    let forged = json!({"id": job["attempts"][0]["id"], "status": "failed", "error": "forged"});
    let bad = app.client.post(app.url(&format!("/callbacks/{id}/1/{}", "ab".repeat(32)))).json(&forged).send();
    let bad = bad.await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    // The attempt's own URL, made as the server makes it from its secret.
    let secret: String = sqlx::query_scalar("select secret from server_secrets where name = 'callbacks'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}/1").as_bytes());
    let token = hex::encode(mac.finalize().into_bytes());
    let late = app.client.post(app.url(&format!("/callbacks/{id}/1/{token}"))).json(&forged).send().await.unwrap();
    assert_eq!(ok_json(late).await["received"], "already-settled");
    let unchanged = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(
        (unchanged["state"].as_str(), unchanged["attempts"][0]["state"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    assert_eq!(unchanged["result"], job["result"]);
}

async fn the_default_image_task_on_the_simulator_makes_one_prediction_per_intent_and_serves_its_png(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let body = json!({"task": "image", "input": {"prompt": "a lighthouse at dusk"}});
    let clicks = futures_util::future::join_all((0..10).map(|_| app.post_job("paint", &body))).await;
    let mut ids = std::collections::BTreeSet::new();
    for click in clicks {
        ids.insert(ok_json(click).await["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1);
    let id = ids.pop_first().unwrap();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let attempt = job["attempts"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(app.simulator_log().await[&attempt]["received"], 1, "one prediction");
    let served = app.get(&app.alice, job["result"]["url"].as_str().unwrap()).await;
    let bytes = served.bytes().await.unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), job["result"]["sha256"].as_str().unwrap());
}

async fn with_every_answer_to_a_put_lost_each_attempt_is_one_prediction_settled_by_its_webhook(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        let image = s.providers.get_mut("sim-image").unwrap();
        image.fault = Some(onejob::config::SimFault::ResetAfterRequest);
    })
    .await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let body = json!({"task": "image", "input": {"prompt": format!("picture {n}")}});
        ids.push(ok_json(app.post_job(&format!("lost-{n}"), &body).await).await["id"].as_str().unwrap().to_owned());
    }
    let log = {
        let mut jobs = Vec::new();
        for id in &ids {
            jobs.push(ended(&app, id).await);
        }
        let log = app.simulator_log().await;
        for job in &jobs {
            assert_eq!(job["state"], "succeeded", "settled by the webhook: {job:#}");
            assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job:#}");
        }
        log
    };
    assert_eq!(log.len(), ids.len(), "one prediction per attempt");
    assert!(log.values().all(|request| request["received"] == 1), "no PUT sent twice: {log:#?}");
}

async fn a_server_killed_while_its_prediction_runs_and_restarted_settles_it_by_the_webhook_with_one_run(
    backend: Backend,
) {
    use crate::common::processes::{database, eventually, job, set};
    let cog = CogServer::start().await;
    // Providers call back through a proxy, which follows the server across
    // its restart, as a load balancer would.
    let public = Forwarder::start().await;
    let mut table: toml::Table = onejob::config::DEFAULT_CONFIG.parse().unwrap();
    set(&mut table, &["server", "public_url"], public.url.clone().into());
    let files = std::env::temp_dir().join(format!("onejob-test-files-{}", uuid::Uuid::now_v7()));
    set(&mut table, &["files", "dir"], files.display().to_string().into());
    set(&mut table, &["providers", "cog", "kind"], "cog".into());
    set(&mut table, &["providers", "cog", "base_url"], cog.url.clone().into());
    set(&mut table, &["providers", "cog", "timeout_ms"], 30_000.into());
    set(&mut table, &["tasks", "image", "default_provider"], "cog".into());
    set(&mut table, &["tasks", "image", "input_schema"], "{\"type\": \"object\"}".into());
    let config = std::env::temp_dir().join(format!("onejob-test-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();
    let (database_url, _pool, token) = database(backend).await;
    let client = reqwest::Client::new();

    let (mut first, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    public.point_at(&address);
    let body = json!({"task": "image", "input": {"tag": "killed", "seconds": 2}});
    let made = client.post(format!("http://{address}/jobs")).bearer_auth(&token).header("idempotency-key", "kill");
    let id = ok_json(made.json(&body).send().await.unwrap()).await["id"].as_str().unwrap().to_owned();
    eventually("the prediction runs", Duration::from_secs(20), || async { cog.started("killed") == 1 }).await;
    first.kill().await.unwrap(); // SIGKILL: the worker waiting for the webhook is gone
    first.wait().await.unwrap();

    let (_second, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    public.point_at(&address);
    eventually("the webhook settles the job", Duration::from_secs(60), || async {
        job(&client, &address, &token, &id).await["state"] == "succeeded"
    })
    .await;
    let settled = job(&client, &address, &token, &id).await;
    assert_eq!(settled["attempts"].as_array().unwrap().len(), 1, "{settled:#}");
    assert_eq!(settled["result"]["content_type"], "image/png");
    assert_eq!(cog.started("killed"), 1, "one run: {:?}", cog.runs());
    let _ = std::fs::remove_file(config);
    let _ = std::fs::remove_dir_all(files);
}

async fn a_purged_job_takes_its_files_with_it(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.retention.allow_short = true;
        s.retention.finished_jobs = "1s".parse().unwrap();
        s.retention.purge_interval = "100ms".parse().unwrap();
    })
    .await;
    let body = json!({"task": "image", "input": {"prompt": "gone soon"}});
    let id = ok_json(app.post_job("purged", &body).await).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let folder = app.files_dir.join(&id);
    assert!(folder.join("1-0.png").exists());
    wait_until("the purged job's files are gone", || !folder.exists()).await;
    assert_eq!(app.get(&app.alice, &format!("/jobs/{id}")).await.status(), StatusCode::NOT_FOUND, "purged");
}

async fn the_files_of_a_job_that_is_gone_are_swept_once_an_hour_old(backend: Backend) {
    // Left by a crash between a job's removal and its files': one folder an
    // hour and a half old, one just written (its job may be committing).
    let (old, young) = (uuid::Uuid::now_v7().to_string(), uuid::Uuid::now_v7().to_string());
    let app = TestApp::spawn_live(backend, |s| {
        let dir = s.files.dir.clone().unwrap();
        for job in [&old, &young] {
            std::fs::create_dir_all(dir.join(job)).unwrap();
            std::fs::write(dir.join(job).join("1-0.png"), b"left behind").unwrap();
        }
        let long_ago = std::time::SystemTime::now() - Duration::from_secs(5400);
        std::fs::File::open(dir.join(&old)).unwrap().set_modified(long_ago).unwrap();
    })
    .await;
    wait_until("the old orphan is swept", || !app.files_dir.join(&old).exists()).await;
    assert!(app.files_dir.join(&young).join("1-0.png").exists(), "a young folder is left alone");
}

async fn a_file_a_prediction_uploads_is_fetched_once_by_its_url_and_kept(backend: Backend) {
    let store = UploadStore::start().await;
    let cog = CogServer::start_with(1.0, Some(&store.url)).await;
    let app = TestApp::spawn_live(backend, |s| {
        s.files.allow_hosts = vec!["127.0.0.1".into()];
        s.providers.insert("cog".into(), cog.provider(""));
        s.tasks.insert("image".into(), image_task("cog", &[]));
    })
    .await;
    let id = create(&app, "uploaded", json!({"tag": "uploaded", "seconds": 0.1, "size": 32})).await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let file = &job["result"];
    assert_eq!(file["source"], format!("{}out.png", store.url), "the URL it came from, kept");
    let served = app.get(&app.alice, file["url"].as_str().unwrap()).await.bytes().await.unwrap();
    assert_eq!(served, store.stored("/upload/out.png"), "the bytes the server made");
    assert_eq!(hex::encode(sha2::Sha256::digest(&served)), file["sha256"].as_str().unwrap());
    assert_eq!(store.reads(), 1, "fetched once");
    assert_eq!(cog.started("uploaded"), 1);
}

async fn a_file_url_on_a_loopback_address_is_refused_unless_allowed(backend: Backend) {
    let store = UploadStore::start().await;
    let cog = CogServer::start_with(1.0, Some(&store.url)).await;
    let app = TestApp::spawn_live(backend, on_cog(&cog, "")).await;
    let id = create(&app, "not-allowed", json!({"tag": "private", "seconds": 0})).await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "failed", "{job:#}");
    let error = &job["attempts"][0]["error"];
    assert_eq!(error["type"], "contract-violation", "{error:#}");
    assert!(error["message"].as_str().unwrap().contains("not in files.allow_hosts"), "{error:#}");
    assert_eq!(store.reads(), 0, "never fetched");
}

/// Waits up to 30 s for `done`.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A proxy that forwards each request to `upstream` and drops the
/// connection as the answer starts to come back: the server acted, the
/// client never hears of it.
struct AnswerDropper {
    url: String,
    dropped: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _task: AbortOnDrop,
}

impl AnswerDropper {
    async fn start(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = dropped.clone();
        let task = tokio::spawn(async move {
            loop {
                let (mut client, _) = listener.accept().await.unwrap();
                let upstream = upstream.clone();
                let counted = counted.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                    let mut server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                    let (mut from_client, _to_client) = client.split();
                    let (mut from_server, mut to_server) = server.split();
                    let forward = async {
                        let mut buf = vec![0; 64 * 1024];
                        while let Ok(n) = from_client.read(&mut buf).await {
                            if n == 0 || to_server.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        std::future::pending::<()>().await;
                    };
                    let mut first = [0; 1];
                    tokio::select! {
                        () = forward => {}
                        _ = from_server.read(&mut first) => {
                            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                    // Dropped here: the client's connection closes unanswered.
                });
            }
        });
        Self { url, dropped, _task: AbortOnDrop(task) }
    }

    fn dropped(&self) -> usize {
        self.dropped.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A proxy that forwards every connection to the address it is pointed at.
struct Forwarder {
    url: String,
    target: std::sync::Arc<std::sync::Mutex<String>>,
    _task: AbortOnDrop,
}

impl Forwarder {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let to = target.clone();
        let task = tokio::spawn(async move {
            loop {
                let (mut client, _) = listener.accept().await.unwrap();
                let address = to.lock().unwrap().clone();
                tokio::spawn(async move {
                    // A server that is down: the connection closes unanswered.
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&address).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { url, target, _task: AbortOnDrop(task) }
    }

    fn point_at(&self, address: &str) {
        *self.target.lock().unwrap() = address.to_owned();
    }
}

/// Files by path, each with its media type.
type Kept = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, (String, Vec<u8>)>>>;

/// Where a Cog server started with `--upload-url` puts its files: every
/// PUT kept by path, served back by GET (with its type), the reads counted.
struct UploadStore {
    url: String,
    files: Kept,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _task: AbortOnDrop,
}

impl UploadStore {
    async fn start() -> Self {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        let files: Kept = Default::default();
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let put = |State((files, _)): State<(Kept, std::sync::Arc<std::sync::atomic::AtomicUsize>)>,
                   Path(name): Path<String>,
                   headers: HeaderMap,
                   body: axum::body::Bytes| async move {
            let kind = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            files.lock().unwrap().insert(format!("/upload/{name}"), (kind, body.to_vec()));
            StatusCode::CREATED
        };
        let get = |State((files, reads)): State<(Kept, std::sync::Arc<std::sync::atomic::AtomicUsize>)>,
                   Path(name): Path<String>| async move {
            reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match files.lock().unwrap().get(&format!("/upload/{name}")) {
                Some((kind, bytes)) => ([("content-type", kind.clone())], bytes.clone()).into_response(),
                None => StatusCode::NOT_FOUND.into_response(),
            }
        };
        use axum::response::IntoResponse as _;
        let router = axum::Router::new()
            .route("/upload/{name}", axum::routing::put(put).get(get))
            .with_state((files.clone(), reads.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/upload/", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, files, reads, _task: AbortOnDrop(task) }
    }

    fn stored(&self, path: &str) -> Vec<u8> {
        self.files.lock().unwrap()[path].1.clone()
    }

    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A task that stops when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

on_both_backends!(
    fifty_creates_of_one_intent_make_one_run_settled_by_the_webhook_with_the_file_kept_and_served,
    a_put_whose_answer_is_lost_is_one_run_and_the_job_succeeds_by_the_webhook,
    a_webhook_that_never_comes_leaves_the_attempt_unknown_and_the_prediction_never_runs_again,
    a_server_at_capacity_is_sent_the_attempt_again_when_a_slot_frees,
    a_fallback_racing_a_running_prediction_has_it_canceled_at_the_server,
    a_callback_with_another_token_is_refused_and_a_late_one_changes_nothing,
    a_file_over_the_tasks_cap_fails_the_attempt_and_is_not_kept,
    the_documented_configuration_works_as_written_once_its_base_url_is_changed,
    the_default_image_task_on_the_simulator_makes_one_prediction_per_intent_and_serves_its_png,
    with_every_answer_to_a_put_lost_each_attempt_is_one_prediction_settled_by_its_webhook,
    a_server_killed_while_its_prediction_runs_and_restarted_settles_it_by_the_webhook_with_one_run,
    the_files_of_a_job_that_is_gone_are_swept_once_an_hour_old,
    a_purged_job_takes_its_files_with_it,
    a_file_a_prediction_uploads_is_fetched_once_by_its_url_and_kept,
    a_file_url_on_a_loopback_address_is_refused_unless_allowed,
);
