//! The database out of space, on a small tmpfs mounted by the test (it
//! runs as root, as CI does; a run that is not root skips, saying so), clients
//! creating jobs until it fills. Every create is answered 201 or 503
//! `storage-full` with `Retry-After`, never 500; `/readyz` and `/metrics`
//! say so; every acknowledged job is stored; once the filesystem is grown,
//! creates succeed again within 5 s, with no restart. SQLite: its file on
//! the tmpfs, which stays intact. Postgres: a private cluster whose
//! database (a tablespace of its own: tables, indexes, temporary files) is
//! on the tmpfs, its write-ahead log on the ordinary disk (a full WAL is a
//! PANIC and a server down until space returns, not a refused write).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onejob::app::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json};

/// Why a test that mounts a filesystem cannot run here, if it cannot.
fn cannot_mount() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    (uid != 0).then(|| format!("mounting a tmpfs needs root (CI runs as root); this run is uid {uid}"))
}

/// A tmpfs of its own, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// A tmpfs of `megabytes`, or why none can be mounted (not root).
    fn mount(megabytes: u32) -> Result<Self, String> {
        if let Some(reason) = cannot_mount() {
            return Err(reason);
        }
        let dir = std::env::temp_dir().join(format!("onejob-small-disk-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let disk = SmallDisk(dir);
        disk.mount_with(&format!("size={megabytes}m"));
        Ok(disk)
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
        // Lazily: the application's tasks may still hold a file open (its
        // pool outlives the test's handle on it), and a busy tmpfs stays mounted.
        let _ = std::process::Command::new("umount").arg("--lazy").arg(&self.0).status();
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
    match SmallDisk::mount(8) {
        Ok(disk) => a_full_sqlite_disk(disk).await,
        Err(reason) => eprintln!("skipped: {reason}"),
    }
}

async fn a_full_sqlite_disk(disk: SmallDisk) {
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

/// About `bytes` of hex no compression shrinks (Postgres compresses a long
/// value before it stores it), different for every `seed`.
fn noise(seed: &str, bytes: usize) -> String {
    use sha2::{Digest, Sha256};
    let mut text = String::with_capacity(bytes + 64);
    let mut block = Sha256::digest(seed.as_bytes());
    while text.len() < bytes {
        text.push_str(&hex::encode(block));
        block = Sha256::digest(block);
    }
    text
}

/// What one client filling the disk saw.
#[derive(Default)]
struct Filled {
    /// Keys answered 201, with the job id each named.
    acknowledged: Vec<(String, String)>,
    /// Keys answered 503 `storage-full`.
    refused: Vec<String>,
}

/// Creates jobs with new keys, about 36 KB of input each, until ten in a
/// row are refused. Anything but 201, or 503 `storage-full` with
/// `Retry-After`, fails the test.
async fn fill(app: Arc<TestApp>, client: usize) -> Filled {
    let mut seen = Filled::default();
    let mut refused_in_a_row = 0;
    for n in 0..1_500 {
        let key = format!("fill-{client}-{n}");
        let (status, body, retry_after) = create(&app, &key, &noise(&key, 36_000)).await;
        match status {
            StatusCode::CREATED => {
                seen.acknowledged.push((key, body["id"].as_str().unwrap().to_owned()));
                refused_in_a_row = 0;
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(body["type"], "storage-full", "{body:#}");
                assert_eq!(retry_after.as_deref(), Some("5"), "{body:#}");
                seen.refused.push(key);
                refused_in_a_row += 1;
                if refused_in_a_row == 10 {
                    break;
                }
            }
            other => panic!("create {key} on a filling disk answered {other}: {body:#}"),
        }
    }
    assert_eq!(refused_in_a_row, 10, "client {client}: the disk never filled");
    seen
}

/// Postgres on a full disk: see the module's documentation.
async fn a_full_postgres_disk_is_answered_503_storage_full_and_creates_succeed_again_once_space_returns() {
    match SmallDisk::mount(24) {
        Ok(disk) => a_full_postgres_disk(disk).await,
        Err(reason) => eprintln!("skipped: {reason}"),
    }
}

async fn a_full_postgres_disk(disk: SmallDisk) {
    let cluster = crate::common::postgres::PrivateCluster::start().await;
    let url = cluster.create_database_in("onejob", &disk.0).await;
    let app =
        Arc::new(TestApp::spawn_on(Backend::Postgres, &url, Role::All, |s| s.server.rate_limit_per_second = 0).await);
    // Four clients at once: creates share a statement (a group commit).
    let clients: Vec<_> = (0..4).map(|client| tokio::spawn(fill(app.clone(), client))).collect();
    let mut seen = Filled::default();
    for client in clients {
        let filled = client.await.unwrap_or_else(|panic| panic!("{panic}\nPostgres logged:\n{}", cluster.log()));
        seen.acknowledged.extend(filled.acknowledged);
        seen.refused.extend(filled.refused);
    }
    assert!(seen.acknowledged.len() > 10, "{} jobs before the disk filled", seen.acknowledged.len());
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.json::<Value>().await.unwrap()["type"], "storage-full");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counted = metrics.lines().find(|l| l.starts_with("onejob_storage_full_total")).expect("the counter");
    // Errors are counted, not refusals: one statement writes a group of creates.
    let counted: f64 = counted.split_whitespace().last().unwrap().parse().unwrap();
    assert!(counted >= 1.0, "{counted} counted, {} refused", seen.refused.len());

    // Space returns: creates succeed again within 5 s, with no restart.
    disk.mount_with("remount,size=256m");
    let grown = Instant::now();
    let mut again = 0;
    let back = loop {
        let key = format!("after-{again}");
        let (status, body, _) = create(&app, &key, &noise(&key, 36_000)).await;
        if status == StatusCode::CREATED {
            break grown.elapsed();
        }
        assert_eq!((status, &body["type"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("storage-full")), "{body:#}");
        assert!(grown.elapsed() < Duration::from_secs(5), "still refused {:?} after space returned", grown.elapsed());
        again += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // A refused create wrote nothing: its key makes a new job now.
    for key in &seen.refused {
        let (status, body, _) = create(&app, key, &noise(key, 36_000)).await;
        assert_eq!(status, StatusCode::CREATED, "refused key {key} answered {status}: {body:#}");
    }
    // Nothing acknowledged was lost.
    for (key, id) in &seen.acknowledged {
        let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
        assert_eq!(job["id"], json!(id), "acknowledged key {key}");
    }
    eprintln!(
        "{} jobs acknowledged, {} creates refused before space returned ({counted} counted), back {back:?} after",
        seen.acknowledged.len(),
        seen.refused.len(),
    );
}

on_postgres!(
    direct: a_full_postgres_disk_is_answered_503_storage_full_and_creates_succeed_again_once_space_returns
);
