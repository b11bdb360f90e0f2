//! The OpenAPI description is complete: every route the router serves is in
//! it (and nothing else), with the headers and problem types of the API.
//! The description does not depend on the store, so this runs on SQLite.

use std::collections::BTreeSet;

use crate::common::{Backend, TestApp};
use onejob::http::openapi::{PROBLEM_TYPES, ROUTES};
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
    let routes: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(listed, routes, "the specification and the route list agree");

    // And the router serves each of them: none falls through to "no such
    // route" or "method not allowed".
    for (method, path) in ROUTES {
        let concrete = path.replace("{id}", "01a22851-a552-7344-9378-329a303dcaea").replace("{number}", "1").replace("{name}", "sim-fast");
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
    for kind in PROBLEM_TYPES {
        assert!(text.contains(kind), "the specification names the problem type {kind}");
    }
    // Every problem type the code can answer with is in the list.
    let sources = rust_files(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(sources.iter().any(|f| f.ends_with("src/http/jobs.rs")), "{sources:?}");
    for file in sources {
        let code = std::fs::read_to_string(&file).unwrap();
        for found in code.split("Problem::new(").skip(1) {
            let kind = found.split('"').nth(1).unwrap();
            let file = file.display();
            assert!(PROBLEM_TYPES.contains(&kind), "{file} answers with {kind}, which the specification does not list");
        }
    }
    for refusal in onejob::domain::AdmissionRefusal::ALL {
        assert!(PROBLEM_TYPES.contains(&refusal.problem_type()), "{refusal:?}");
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
