//! The `onejob` binary as an operator runs it: `migrate`, `keys create`,
//! `serve`, then the core behaviours over real HTTP against that process.

use reqwest::StatusCode;
use serde_json::{Value, json};
use crate::common::BIN;
use tokio::process::Command;


async fn onejob(database_url: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).env("DATABASE_URL", database_url).output().await.unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn the_binary_serves_the_core_contract_after_migrate_and_keys_create() {
    let database_url = crate::common::postgres::empty_database().await;
    let (ok, _, stderr) = onejob(&database_url, &["migrate"]).await;
    assert!(ok, "migrate failed: {stderr}");
    let (ok, _, _) = onejob(&database_url, &["migrate"]).await;
    assert!(ok, "migrate is idempotent");

    let (ok, stdout, stderr) = onejob(&database_url, &["keys", "create", "--owner", "alice"]).await;
    assert!(ok, "keys create failed: {stderr}");
    let token = stdout.lines().last().unwrap().trim().to_owned();
    assert!(token.starts_with("oj_") && token.len() == 67, "the token alone on the last line: {stdout:?}");
    let (_, stdout, _) = onejob(&database_url, &["keys", "create", "--owner", "bob"]).await;
    let bob = stdout.lines().last().unwrap().trim().to_owned();
    assert!(!stderr.contains(&token), "the token is not logged");

    let (_child, address) = crate::common::spawn_server(&database_url, None).await;
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{address}{path}");
    let post = |key: &str, body: Value| {
        client.post(url("/jobs")).bearer_auth(&token).header("idempotency-key", key).json(&body).send()
    };
    let body = json!({"task": "summarize", "input": {"text": "the quick brown fox"}});

    let created = post("intent-1", body.clone()).await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();

    let replay = post("intent-1", body.clone()).await.unwrap();
    assert_eq!((replay.status(), replay.headers()["idempotent-replayed"].to_str().unwrap()), (StatusCode::OK, "true"));

    let conflict = post("intent-1", json!({"task": "summarize", "input": {"text": "another"}})).await.unwrap();
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let conflict: Value = conflict.json().await.unwrap();
    assert_eq!(conflict["type"], "idempotency-key-reused");

    // The worker in `serve` runs it on sim-fast; a long-poll waits for the end.
    let mut polled: Value = Value::Null;
    for _ in 0..10 {
        polled = client.get(url(&format!("/jobs/{id}?wait=5"))).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        if polled["state"] == "succeeded" {
            break;
        }
    }
    assert_eq!(polled["state"], "succeeded", "{polled}");
    assert_eq!(polled["result"], json!({"summary": "the quick brown fox", "word_count": 4}));
    assert_eq!(polled["winning_attempt"], 1);

    let attempt = client
        .post(url(&format!("/jobs/{id}/attempts")))
        .bearer_auth(&token)
        .header("idempotency-key", "fallback-1")
        .json(&json!({"provider": "sim-slow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(attempt.status(), StatusCode::CONFLICT, "the job has finished");
    let attempt: Value = attempt.json().await.unwrap();
    assert_eq!(attempt["type"], "job-finished");

    let bobs_look = client.get(url(&format!("/jobs/{id}"))).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(bobs_look.status(), StatusCode::NOT_FOUND);

    let ready = client.get(url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    // Keys are listed by id and revoked by id; revoking twice is an error.
    let (_, listed, _) = onejob(&database_url, &["keys", "list", "--owner", "bob"]).await;
    let bob_key_id = listed.split_whitespace().next().unwrap().to_owned();
    let (ok, stdout, _) = onejob(&database_url, &["keys", "revoke", &bob_key_id]).await;
    assert!(ok && stdout.contains("revoked"), "{stdout}");
    let (ok, _, stderr) = onejob(&database_url, &["keys", "revoke", &bob_key_id]).await;
    assert!(!ok && stderr.contains("no live API key"), "{stderr}");
}

#[tokio::test]
async fn the_printed_default_configuration_is_valid_and_complete() {
    let out = Command::new(BIN).args(["config", "print-default"]).output().await.unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let settings = onejob::config::Settings::parse(&text).unwrap();
    settings.validate().unwrap();
    assert!(settings.tasks.contains_key("summarize"));
    assert_eq!(settings.providers.len(), 6);
}

#[tokio::test]
async fn a_first_run_with_nothing_configured_serves_on_sqlite_and_prints_a_key_once() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = std::env::temp_dir().join(format!("onejob-first-run-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let start = || {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(&dir)
            .env_remove("DATABASE_URL")
            .env_remove("ONEJOB_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        (child, stdout, stderr)
    };
    let listening = |mut stderr: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>| async move {
        let address = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while let Some(line) = stderr.next_line().await.unwrap() {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    return rest.split_whitespace().next().unwrap().to_owned();
                }
            }
            panic!("serve exited before listening");
        })
        .await
        .expect("serve listens");
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        address
    };

    let (mut first, mut stdout, stderr) = start();
    let address = listening(stderr).await;
    let mut printed = String::new();
    let token = loop {
        let line = stdout.next_line().await.unwrap().expect("the key is printed");
        printed.push_str(&line);
        printed.push('\n');
        if line.starts_with("oj_") {
            break line;
        }
    };
    assert!(printed.contains("owner \"demo\""), "{printed}");
    assert!(dir.join("onejob.db").exists(), "the default database is a file in the working directory");

    let client = reqwest::Client::new();
    let created = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "first-job")
        .json(&json!({"task": "summarize", "input": {"text": "one job per intent"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let mut job = Value::Null;
    for _ in 0..10 {
        job = client.get(format!("http://{address}/jobs/{id}?wait=5")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
        if job["state"] == "succeeded" {
            break;
        }
    }
    assert_eq!(job["result"], json!({"summary": "one job per intent", "word_count": 4}));
    first.kill().await.unwrap();

    // The second run finds a key and prints none; the job is still there.
    let (mut second, mut stdout, stderr) = start();
    let address = listening(stderr).await;
    let again: Value = client.get(format!("http://{address}/jobs/{id}")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert_eq!(again["state"], "succeeded");
    second.kill().await.unwrap();
    assert_eq!(stdout.next_line().await.unwrap(), None, "no second key");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serve_refuses_a_non_loopback_address_without_an_explicit_flag() {
    let out = Command::new(BIN).args(["serve", "--listen", "0.0.0.0:0"]).env("DATABASE_URL", crate::common::sqlite::fresh_database()).output().await.unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
}
