//! Files kept in an S3-compatible bucket (`[files.s3]`), against a real
//! S3-compatible server (moto's, in server mode): the result's URL serves
//! the bytes the provider made (the same sha256), a range of them, and
//! only to their owner; nothing is left in the local directory; erasure
//! and purge take the job's objects with it. On both backends.

use reqwest::StatusCode;
use serde_json::json;
use sha2::Digest as _;

use crate::common::s3::S3Server;
use crate::common::{Backend, TestApp, ok_json};

async fn ended(app: &TestApp, id: &str) -> serde_json::Value {
    app.wait_for(id, "the job ended", |j| ["succeeded", "failed", "canceled"].contains(&j["state"].as_str().unwrap()))
        .await
}

async fn a_file_kept_in_a_bucket_is_served_ranged_to_its_owner_and_goes_with_its_erased_job(backend: Backend) {
    let s3 = S3Server::start().await;
    let bucket = s3.settings("kept/");
    let app = TestApp::spawn_live(backend, |s| s.files.s3 = Some(bucket)).await;
    let body = json!({"task": "image", "input": {"prompt": "kept in a bucket"}});
    let id = ok_json(app.post_job("bucket", &body).await).await["id"].as_str().unwrap().to_owned();
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let file = &job["result"];
    assert_eq!(s3.keys(&format!("kept/{id}/")).await, [format!("kept/{id}/1-0.png")], "uploaded under the prefix");
    assert!(!app.files_dir.join(&id).join("1-0.png").exists(), "not left in the local directory");
    let url = file["url"].as_str().unwrap();
    let served = app.get(&app.alice, url).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()["content-type"], "image/png");
    let bytes = served.bytes().await.unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "the simulator's PNG");
    assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), file["sha256"].as_str().unwrap(), "the provider's bytes");
    let ranged = app.client.get(app.url(url)).bearer_auth(&app.alice).header("range", "bytes=1-3").send().await;
    let ranged = ranged.unwrap();
    assert_eq!(ranged.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.headers()["content-range"], format!("bytes 1-3/{}", bytes.len()));
    assert_eq!(ranged.bytes().await.unwrap(), bytes[1..4]);
    assert_eq!(app.get(&app.bob, url).await.status(), StatusCode::NOT_FOUND, "another owner's file");
    let erased = app.client.delete(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(erased.status(), StatusCode::NO_CONTENT);
    assert!(s3.keys(&format!("kept/{id}/")).await.is_empty(), "the job's objects went with it");
    assert_eq!(app.get(&app.alice, url).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(s3.keys("kept/.database").await.len(), 1, "the bucket is marked as this database's");
}

async fn a_purged_job_takes_its_objects_with_it(backend: Backend) {
    let s3 = S3Server::start().await;
    let bucket = s3.settings("");
    let app = TestApp::spawn_live(backend, |s| {
        s.files.s3 = Some(bucket);
        s.retention.allow_short = true;
        s.retention.finished_jobs = "1s".parse().unwrap();
        s.retention.purge_interval = "100ms".parse().unwrap();
    })
    .await;
    let body = json!({"task": "image", "input": {"prompt": "gone soon"}});
    let id = ok_json(app.post_job("purged", &body).await).await["id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let mut seen = false;
    loop {
        let keys = s3.keys(&format!("{id}/")).await;
        seen |= !keys.is_empty();
        if seen && keys.is_empty() {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "kept: {seen}, then purged: {keys:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(app.get(&app.alice, &format!("/jobs/{id}")).await.status(), StatusCode::NOT_FOUND, "purged");
}

on_both_backends!(
    a_file_kept_in_a_bucket_is_served_ranged_to_its_owner_and_goes_with_its_erased_job,
    a_purged_job_takes_its_objects_with_it,
);
