//! Job APIs described by configuration (`kind = "http-job"`): the
//! configurations docs/providers.md gives for fal's queue and RunPod
//! serverless, run against the simulator's copies of both (`kind = "sim"`,
//! `api = "fal"` or `"runpod"`, with the same `job` table). Every submit is
//! a new billed job, so each attempt is one submit, never sent again: with
//! every submit's answer lost, each attempt is still one job, settled by
//! its callback (which brings the job's id); a callback that never comes
//! is made up for by the status call; a fal callback not signed by fal's
//! published keys answers 401 and changes nothing; a winning fallback has
//! the running job canceled at its provider. On both backends.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json};

/// A job API docs/providers.md configures.
#[derive(Clone, Copy, Debug)]
enum Surface {
    Fal,
    Runpod,
}

impl Surface {
    const BOTH: [Surface; 2] = [Surface::Fal, Surface::Runpod];

    /// The documented TOML: the provider and its `picture` task.
    fn documented(self) -> String {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md")).unwrap();
        let section = doc.split("\n## fal, RunPod and other job APIs\n").nth(1).expect("the section");
        let nth = match self {
            Surface::Fal => 1,
            Surface::Runpod => 2,
        };
        section.split("```toml\n").nth(nth).expect("its TOML").split("```").next().unwrap().to_owned()
    }

    /// The provider's name in the documented configuration.
    fn name(self) -> &'static str {
        match self {
            Surface::Fal => "flux",
            Surface::Runpod => "painter",
        }
    }

    fn api(self) -> &'static str {
        match self {
            Surface::Fal => "fal",
            Surface::Runpod => "runpod",
        }
    }

    /// The documented configuration as the simulator's copy of its API,
    /// named `name`, answering after `latency_ms` with `extra` settings.
    fn simulated(self, name: &str, latency_ms: u64, extra: &str) -> onejob::config::Settings {
        let kept = |line: &&str| {
            !["base_url", "api_key_env", "poll_interval_ms", "timeout_ms", "price"]
                .iter()
                .any(|key| line.starts_with(key))
        };
        let documented = self.documented();
        let block: Vec<&str> = documented.lines().filter(kept).collect();
        let simulated = block.join("\n").replace("kind = \"http-job\"", &format!(
            "kind = \"sim\"\napi = \"{}\"\nlatency_ms = {latency_ms}\npoll_interval_ms = 200\ntimeout_ms = 10000\n{extra}",
            self.api()
        ));
        let renamed = simulated
            .replace(&format!("providers.{}", self.name()), &format!("providers.{name}"))
            .replace(&format!("default_provider = \"{}\"", self.name()), &format!("default_provider = \"{name}\""));
        onejob::config::Settings::parse(&renamed).expect("the simulated configuration parses")
    }

    /// The simulator's jobs of provider `name` (its log: one entry a submit).
    async fn jobs(app: &TestApp, name: &str) -> Vec<Value> {
        app.simulator_log().await.into_values().filter(|r| r["provider"] == name).collect()
    }

    /// The first image of a job's result: the kept file.
    fn image(self, result: &Value) -> &Value {
        match self {
            Surface::Fal => &result["images"][0]["url"],
            Surface::Runpod => &result["images"][0],
        }
    }
}

/// A live app with `settings`' providers and tasks added.
async fn app_with(backend: Backend, settings: Vec<onejob::config::Settings>) -> TestApp {
    TestApp::spawn_live(backend, move |s| {
        for more in settings {
            s.providers.extend(more.providers);
            s.tasks.extend(more.tasks);
        }
    })
    .await
}

/// The job once it succeeded, failed or was canceled.
async fn ended(app: &TestApp, id: &str) -> Value {
    app.wait_for(id, "the job ended", |j| ["succeeded", "failed", "canceled"].contains(&j["state"].as_str().unwrap()))
        .await
}

async fn post_picture(app: &TestApp, key: &str, prompt: &str) -> String {
    let body = json!({"task": "picture", "input": {"prompt": prompt}});
    ok_json(app.post_job(key, &body).await).await["id"].as_str().unwrap().to_owned()
}

async fn with_every_submit_answer_lost_each_attempt_is_one_job_settled_by_its_callback(backend: Backend) {
    for surface in Surface::BOTH {
        let settings = surface.simulated("lossy", 300, "fault = \"reset_after_request\"");
        let app = app_with(backend, vec![settings]).await;
        let mut ids = Vec::new();
        for n in 0..4 {
            ids.push(post_picture(&app, &format!("lost-{n}"), &format!("picture {n}")).await);
        }
        let mut seen = std::collections::BTreeSet::new();
        for id in &ids {
            let job = ended(&app, id).await;
            assert_eq!(job["state"], "succeeded", "{surface:?}: settled by the callback: {job:#}");
            assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job:#}");
            let made = job["attempts"][0]["provider_request_id"].as_str().expect("the callback brought its id");
            seen.insert(made.to_owned());
            let file = surface.image(&job["result"]);
            let served = app.get(&app.alice, file["url"].as_str().expect("a kept file")).await;
            assert!(served.bytes().await.unwrap().starts_with(b"\x89PNG\r\n\x1a\n"), "its PNG kept");
        }
        let made = Surface::jobs(&app, "lossy").await;
        assert_eq!(made.len(), ids.len(), "{surface:?}: one job per attempt, none sent again: {made:#?}");
        assert!(made.iter().all(|p| seen.contains(p["id"].as_str().unwrap())), "each settled its own attempt");
    }
}

async fn a_job_whose_callback_never_comes_is_settled_by_the_status_call(backend: Backend) {
    for surface in Surface::BOTH {
        let settings = surface.simulated(
            "silent",
            300,
            "drop_webhooks = true\nprice = { per_second = \"0.001\", currency = \"USD\" }",
        );
        let app = app_with(backend, vec![settings]).await;
        let id = post_picture(&app, "polled", "no callback").await;
        let job = ended(&app, &id).await;
        assert_eq!(job["state"], "succeeded", "{surface:?}: {job:#}");
        let made = Surface::jobs(&app, "silent").await;
        assert_eq!(made.len(), 1, "{made:#?}");
        assert_eq!(job["attempts"][0]["provider_request_id"], made[0]["id"]);
        assert_eq!(surface.image(&job["result"])["content_type"], "image/png", "{job:#}");
        // The compute time the status reports, costed by the second.
        let predict_ms = job["attempts"][0]["usage"]["predict_ms"].as_i64().expect("its compute time");
        assert!((300..5_000).contains(&predict_ms), "{job:#}");
        assert_ne!(job["attempts"][0]["cost"]["amount"], "0", "{job:#}");
    }
}

async fn a_job_costs_its_images_at_the_price_per_output_and_the_report_counts_them(backend: Backend) {
    // As documented, fal's price is per image: its picture task keeps one.
    let settings = Surface::Fal.simulated("flux", 200, "price = { per_output = \"0.003\", currency = \"USD\" }");
    let app = app_with(backend, vec![settings]).await;
    let id = post_picture(&app, "billed", "billed per image").await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let attempt = &job["attempts"][0];
    assert_eq!(attempt["usage"]["outputs"], 1, "{attempt:#}");
    assert_eq!(attempt["cost"]["amount"], "0.003", "{attempt:#}");
    let report = ok_json(app.get(&app.alice, "/usage?group_by=provider").await).await;
    assert_eq!((report["total"]["outputs"].as_i64(), report["total"]["waste_outputs"].as_i64()), (Some(1), Some(0)));
    assert_eq!(report["total"]["cost"]["USD"], "0.003", "{report:#}");
}

async fn a_fal_callback_not_signed_by_its_published_keys_answers_401_and_changes_nothing(backend: Backend) {
    // The job takes a while and sends no callback of its own, so the
    // attempt runs while the test calls back.
    let settings = Surface::Fal.simulated("flux", 5000, "drop_webhooks = true");
    let app = app_with(backend, vec![settings]).await;
    let id = post_picture(&app, "forged", "forged").await;
    let job = app.wait_for(&id, "the job runs", |j| j["attempts"][0]["provider_request_id"].is_string()).await;
    let made = job["attempts"][0]["provider_request_id"].as_str().unwrap().to_owned();
    let url = app.url(&format!("/callbacks/{id}/1/{}", callback_token(&app, &id).await));
    let forged = json!({"request_id": made, "status": "ERROR", "error": "forged", "payload": null}).to_string();
    let send = |headers: Vec<(&'static str, String)>| {
        let mut post = app.client.post(&url).header("content-type", "application/json").body(forged.clone());
        for (name, value) in headers {
            post = post.header(name, value);
        }
        post.send()
    };
    let unsigned = send(vec![]).await.unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED, "{}", unsigned.text().await.unwrap());
    // Signed the way fal signs, by a key fal does not publish.
    let seed = [9u8; 32];
    let other = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let timestamp = chrono::Utc::now().timestamp().to_string();
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(forged.as_bytes()));
    let message = format!("{made}\nsim-user\n{timestamp}\n{digest}");
    let headers = vec![
        ("x-fal-webhook-request-id", made.clone()),
        ("x-fal-webhook-user-id", "sim-user".to_owned()),
        ("x-fal-webhook-timestamp", timestamp),
        ("x-fal-webhook-signature", hex::encode(other.sign(message.as_bytes()).as_ref())),
    ];
    let wrong_key = send(headers).await.unwrap();
    assert_eq!(wrong_key.status(), StatusCode::UNAUTHORIZED, "{}", wrong_key.text().await.unwrap());
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["attempts"][0]["state"], "running", "nothing changed: {job:#}");
}

/// The token of attempt 1's callback URL, made as the server makes it.
async fn callback_token(app: &TestApp, id: &str) -> String {
    use hmac::Mac as _;
    let secret: String = sqlx::query_scalar("select secret from server_secrets where name = 'callbacks'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{id}/1").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

async fn a_winning_fallback_has_the_running_job_canceled_at_its_provider(backend: Backend) {
    for surface in Surface::BOTH {
        let price = "price = { per_second = \"0.001\", currency = \"USD\" }";
        let mut slow = surface.simulated("slow", 20_000, price);
        slow.tasks.get_mut("picture").unwrap().failover = vec!["fast".into()];
        let mut fast = surface.simulated("fast", 200, price);
        fast.tasks.clear();
        let app = app_with(backend, vec![slow, fast]).await;
        let qualify = app.client.post(app.url("/providers/fast/qualifications")).bearer_auth(&app.operator);
        let report = ok_json(qualify.json(&json!({"task": "picture"})).send().await.unwrap()).await;
        assert_eq!(report["passed"], true, "{report:#}");
        let id = post_picture(&app, "race", "a race").await;
        app.wait_for(&id, "the slow job runs", |j| j["attempts"][0]["provider_request_id"].is_string()).await;
        let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "fast"})).await;
        assert!(fallback.status().is_success(), "{}", fallback.status());
        let job = app
            .wait_for(&id, "the loser is canceled", |j| {
                j["state"] == "succeeded" && j["attempts"][0]["state"] == "canceled"
            })
            .await;
        assert_eq!(job["winning_attempt"], 2, "{surface:?}: {job:#}");
        // Settled canceled by the worker's cancel call, or by the
        // provider's callback telling of it, whichever is recorded first.
        let loser = &job["attempts"][0];
        let slow = app.simulator_log().await.remove(loser["provider_request_id"].as_str().unwrap()).unwrap();
        assert!(slow["canceled_after_ms"].is_u64(), "{surface:?}: canceled at the simulator: {slow:#}");
        // RunPod's cancel answers the worker time the job was billed; fal's
        // says nothing of it.
        if let Surface::Runpod = surface {
            let charged = loser["usage"]["predict_ms"].as_i64().expect("the compute time its provider reports");
            assert!(charged > 0 && loser["cost"]["amount"] != "0", "{surface:?}: {loser:#}");
        }
    }
}

/// docs/providers.md's configurations, pointed at the simulator's copies
/// of the two APIs (fal's keys too), their keys from a variable every test
/// process has: each qualifies and makes a picture.
async fn the_documented_configurations_work_as_written_once_their_base_url_is_changed(backend: Backend) {
    let mut simulated = onejob::config::Settings::builtin();
    for surface in Surface::BOTH {
        let copy = surface.simulated("copy", 200, "");
        simulated.providers.insert(format!("{}-sim", surface.api()), copy.providers["copy"].clone());
    }
    let simulator = onejob::provider::sim::spawn(&simulated, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    for surface in Surface::BOTH {
        let block = surface.documented();
        let url = match surface {
            Surface::Fal => "https://queue.fal.run",
            Surface::Runpod => "https://api.runpod.ai/v2/ENDPOINT_ID",
        };
        let base = match surface {
            Surface::Fal => format!("{}/providers/fal-sim/fal", simulator.url()),
            Surface::Runpod => format!("{}/providers/runpod-sim/v2/ENDPOINT_ID", simulator.url()),
        };
        assert!(block.contains(&format!("base_url = \"{url}\"")), "{block}");
        let key = block.lines().find(|l| l.starts_with("api_key_env")).unwrap();
        let keys = format!("{}/providers/fal-sim/fal/.well-known/jwks.json", simulator.url());
        let block = block
            .replace(url, &base)
            .replace("https://rest.alpha.fal.ai/.well-known/jwks.json", &keys)
            .replace(key, "api_key_env = \"CARGO_PKG_NAME\"");
        let documented = onejob::config::Settings::parse(&block).expect("the documented TOML parses");
        documented.validate().expect("the documented configuration is valid");
        let app = app_with(backend, vec![documented]).await;
        let qualify = app.client.post(app.url(&format!("/providers/{}/qualifications", surface.name())));
        let report =
            ok_json(qualify.bearer_auth(&app.operator).json(&json!({"task": "picture"})).send().await.unwrap()).await;
        assert_eq!(report["passed"], true, "{surface:?}: the documented example qualifies: {report:#}");
        let id = post_picture(&app, "fox", "a red fox").await;
        let job = ended(&app, &id).await;
        assert_eq!(job["state"], "succeeded", "{surface:?}: {job:#}");
        assert_eq!(surface.image(&job["result"])["content_type"], "image/png", "{job:#}");
        assert_eq!(job["attempts"][0]["provider"], surface.name());
    }
}

/// The official `fal-client` (over TLS) and `runpod` Python packages
/// submit to, read, fetch the results of and cancel the simulator's jobs,
/// and fal's webhook verifies by the simulator's published key
/// (`tests/jobs/fal_check.py`, `tests/jobs/runpod_check.py`).
#[tokio::test]
#[ignore = "needs the fal-client and runpod Python packages: installed by .ci/run"]
async fn the_official_fal_and_runpod_sdks_use_the_simulators_jobs() {
    let mut settings = onejob::config::Settings::builtin();
    for surface in Surface::BOTH {
        for (name, latency) in [("sdk", 200), ("sdk-slow", 60_000)] {
            let copy = surface.simulated("copy", latency, "");
            settings.providers.insert(format!("{name}-{}", surface.api()), copy.providers["copy"].clone());
        }
    }
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    crate::common::sdk_check("jobs/fal_check.py", "fal-client", &simulator.url()).await;
    crate::common::sdk_check("jobs/runpod_check.py", "runpod", &simulator.url()).await;
    let log: Value = reqwest::get(format!("{}/v1/requests", simulator.url())).await.unwrap().json().await.unwrap();
    for surface in Surface::BOTH {
        let slow: Vec<&Value> = log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["provider"] == format!("sdk-slow-{}", surface.api()))
            .collect();
        assert_eq!(slow.len(), 1, "{surface:?}: {log:#}");
        assert!(slow[0]["canceled_after_ms"].is_u64(), "{surface:?}: canceled at the simulator: {:#}", slow[0]);
    }
}

on_both_backends!(
    with_every_submit_answer_lost_each_attempt_is_one_job_settled_by_its_callback,
    a_job_whose_callback_never_comes_is_settled_by_the_status_call,
    a_job_costs_its_images_at_the_price_per_output_and_the_report_counts_them,
    a_fal_callback_not_signed_by_its_published_keys_answers_401_and_changes_nothing,
    a_winning_fallback_has_the_running_job_canceled_at_its_provider,
    the_documented_configurations_work_as_written_once_their_base_url_is_changed,
);
