//! The OpenAPI description is complete: every route the router serves is in
//! it (and nothing else), with the headers and problem types of the API.
//! The description does not depend on the store, so this runs on SQLite.

use std::collections::BTreeSet;

use crate::common::{Backend, TestApp};
use onejob::http::error::ProblemType;
use onejob::http::openapi::routes;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_specification_lists_every_route_the_router_serves() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let spec: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1"), "OpenAPI 3.1");

    let listed: BTreeSet<(String, String)> = spec["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, operations)| operations.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
        .collect();
    // The API's routes, as its users know them.
    let expected: BTreeSet<(String, String)> = [
        ("post", "/jobs"),
        ("get", "/jobs"),
        ("get", "/jobs/{id}"),
        ("delete", "/jobs/{id}"),
        ("get", "/jobs/{id}/events"),
        ("get", "/jobs/{id}/output"),
        ("get", "/jobs/{id}/files/{name}"),
        ("post", "/jobs/{id}/cancel"),
        ("post", "/jobs/{id}/attempts"),
        ("post", "/jobs/{id}/attempts/{number}/resolve"),
        ("get", "/providers"),
        ("post", "/providers/{name}/qualifications"),
        ("post", "/providers/{name}/breaker"),
        ("post", "/keys/{id}/revoke"),
        ("post", "/webhooks"),
        ("get", "/webhooks"),
        ("delete", "/webhooks/{id}"),
        ("post", "/webhooks/{id}/rotate-secret"),
        ("get", "/webhooks/{id}/deliveries"),
        ("get", "/usage"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
        ("get", "/docs"),
        ("post", "/callbacks/{job}/{number}/{token}"),
    ]
    .iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(listed, expected, "the specification describes exactly the API's routes");
    let served: BTreeSet<(String, String)> = routes().into_iter().collect();
    assert_eq!(served, expected, "the router's list is the specification's");
    let stream = &spec["paths"]["/jobs/{id}/events"]["get"]["responses"]["200"]["content"];
    assert!(stream.get("text/event-stream").is_some(), "the event stream's content type is described: {stream}");

    // And the router serves each of them: none falls through to "no such
    // route" or "method not allowed".
    for (method, path) in routes() {
        let concrete = path
            .replace("{id}", "01a22851-a552-7344-9378-329a303dcaea")
            .replace("{number}", "1")
            .replace("{name}", "sim-fast");
        let response = app
            .client
            .request(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(), app.url(&concrete))
            .bearer_auth(&app.alice)
            .header("idempotency-key", "probe")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(!body.contains("no such route"), "{method} {path} is not served: {body}");
    }
    // A route that does not exist is told apart by the check above.
    let missing = app.client.get(app.url("/nowhere")).send().await.unwrap().text().await.unwrap();
    assert!(missing.contains("no such route"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_specification_names_the_headers_and_every_problem_type() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let text = app.client.get(app.url("/openapi.json")).send().await.unwrap().text().await.unwrap();
    for header in ["Idempotency-Key", "Idempotent-Replayed", "Retry-After", "ETag", "If-None-Match", "Location"] {
        assert!(text.contains(header), "the specification names {header}");
    }
    for kind in ProblemType::ALL {
        assert!(text.contains(kind.as_str()), "the specification names the problem type {}", kind.as_str());
    }
    // Every problem the code answers with is built from the enum: no type
    // is typed as a string anywhere else.
    let sources = rust_files(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(sources.iter().any(|f| f.ends_with("src/http/jobs.rs")), "{sources:?}");
    for file in sources {
        let code = std::fs::read_to_string(&file).unwrap();
        for found in code.split("Problem::new(").skip(1) {
            let file = file.display();
            assert!(
                found.starts_with("ProblemType::") || found.starts_with("kind"),
                "{file} builds a problem from {found:.40}"
            );
        }
    }
    // A refusal's problem type is the one the store records in its events.
    for refusal in onejob::domain::AdmissionRefusal::ALL {
        assert_eq!(ProblemType::from(*refusal).as_str(), refusal.problem_type(), "{refusal:?}");
    }
    let docs = app.client.get(app.url("/docs")).send().await.unwrap();
    assert_eq!(docs.status(), StatusCode::OK);
    let page = docs.text().await.unwrap();
    assert!(page.contains("/jobs/{id}/attempts") && page.contains("attempt-outcome-unknown"));
}

/// Every `.rs` file under `dir`, however deep.
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
