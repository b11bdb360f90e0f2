//! The embedded store out of space: onejob on SQLite, its file on an 8 MB
//! tmpfs mounted by the test (it runs as root, as CI does), clients creating
//! jobs until it fills. Every create is answered 201 or 503 `storage-full`
//! with `Retry-After`, never 500; `/readyz` and `/metrics` say so; every
//! acknowledged job is stored and the file is intact; once the filesystem
//! is grown, creates succeed again within 5 s, with no restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use onejob::app::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json};

/// A tmpfs of its own, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(megabytes: u32) -> Self {
        let dir = std::env::temp_dir().join(format!("onejob-small-disk-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let disk = SmallDisk(dir);
        disk.mount_with(&format!("size={megabytes}m"));
        disk
    }

    fn mount_with(&self, options: &str) {
        let remount = if options.starts_with("remount") { vec![] } else { vec!["-t", "tmpfs", "tmpfs"] };
        let status = std::process::Command::new("mount")
            .args(remount)
            .args(["-o", options])
            .arg(&self.0)
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs needs root (CI runs as root): mount -o {options} failed");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

async fn create(app: &TestApp, key: &str, text: &str) -> (StatusCode, Value, Option<String>) {
    let response = app.post_job(key, &json!({"task": "summarize", "input": {"text": text}})).await;
    let status = response.status();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, response.json().await.unwrap_or(Value::Null), retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_is_answered_503_storage_full_and_creates_succeed_again_once_space_returns() {
    let disk = SmallDisk::mount(8);
    let url = format!("sqlite://{}", disk.0.join("onejob.db").display());
    let app = TestApp::spawn_on(Backend::Sqlite, &url, Role::All, |_| {}).await;
    // About 36 KB of input a job: 8 MB fill within a few hundred.
    let text = "lorem ipsum ".repeat(3_000);
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for n in 0..2_000 {
        let (status, body, retry_after) = create(&app, &format!("fill-{n}"), &text).await;
        match status {
            StatusCode::CREATED => acknowledged.push(body["id"].as_str().unwrap().to_owned()),
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(body["type"], "storage-full", "{body:#}");
                assert_eq!(retry_after.as_deref(), Some("5"), "{body:#}");
                refused = Some(n);
                break;
            }
            other => panic!("a create on a filling disk answered {other}: {body:#}"),
        }
    }
    let refused = refused.expect("the disk filled");
    assert!(acknowledged.len() > 10, "{} jobs before the disk filled", acknowledged.len());
    // Full: every create is refused the same way, never 500.
    for n in 0..20 {
        let (status, body, _) = create(&app, &format!("full-{n}"), &text).await;
        assert_eq!((status, &body["type"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("storage-full")), "{body:#}");
    }
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json::<Value>().await.unwrap()["type"], "storage-full");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counted = metrics.lines().find(|l| l.starts_with("onejob_storage_full_total")).expect("the counter");
    assert!(counted.split_whitespace().last().unwrap().parse::<f64>().unwrap() >= 21.0, "{counted}");

    // Space returns: creates succeed again within 5 s, with no restart.
    disk.mount_with("remount,size=64m");
    let grown = Instant::now();
    let mut again = 0;
    loop {
        let (status, body, _) = create(&app, &format!("after-{again}"), &text).await;
        if status == StatusCode::CREATED {
            break;
        }
        assert_eq!((status, &body["type"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("storage-full")), "{body:#}");
        assert!(grown.elapsed() < Duration::from_secs(5), "still refused {:?} after space returned", grown.elapsed());
        again += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The refused key itself is accepted now.
    let (status, _, _) = create(&app, &format!("fill-{refused}"), &text).await;
    assert_eq!(status, StatusCode::CREATED);

    // Nothing acknowledged was lost, and the file is intact.
    for id in &acknowledged {
        ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    }
    let mut file = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url).await.unwrap();
    let check: (String,) = sqlx::query_as("pragma integrity_check").fetch_one(&mut file).await.unwrap();
    assert_eq!(check.0, "ok");
}
