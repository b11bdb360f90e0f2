//! Security: key roles and owner isolation over every route of the
//! specification, tokens stored only as hashes, revocation that takes effect
//! at once (on every server sharing the database), and provider addresses
//! that come from configuration only.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Backend, TestApp, claim_all, expect_problem};
use onejob::app::Role;
use onejob::domain::{AttemptError, JobId, KeyRole, OwnerId};
use onejob::http::openapi::routes;
use onejob::store::{AttemptRef, Transition};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn owner(name: &str) -> OwnerId {
    OwnerId::parse(name).unwrap()
}

/// Makes attempt `number` of alice's job `job` unknown, as a worker's
/// deadline would.
async fn make_unknown(app: &TestApp, job: &str, number: i32) {
    claim_all(app).await;
    let attempt = AttemptRef { owner: owner("alice"), job_id: JobId::parse(job).unwrap(), number };
    let timeout = AttemptError::new("timeout", "deadline passed");
    assert_eq!(app.store().mark_unknown(&attempt, &timeout, None, None).await.unwrap(), Transition::Applied);
}

/// Owner A's (alice's) data, so that every path parameter of the walk names
/// something that exists.
struct Seeded {
    /// A job whose attempt 1 is unknown.
    job: String,
    /// A spare key of alice's.
    key: String,
    /// An admin key of alice's, and its webhook endpoint.
    admin: String,
    endpoint: String,
    /// Every identifier of alice's data, none of which owner B may see.
    markers: Vec<String>,
}

async fn seed_alice(app: &TestApp) -> Seeded {
    let create = |key: &'static str| async move {
        let body = json!({"task": "summarize", "input": {"text": "the private words of alice"}});
        let made = app.post_job(key, &body).await;
        assert_eq!(made.status(), StatusCode::CREATED);
        made.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
    };
    let job = create("walk-unknown-key").await;
    make_unknown(app, &job, 1).await;
    // A file kept for it, as a files task's output would have.
    std::fs::create_dir_all(app.files_dir.join(&job)).unwrap();
    std::fs::write(app.files_dir.join(&job).join("1-0.png"), b"alice's image").unwrap();
    let other = create("walk-pending-key").await;
    let (key, _) = onejob::keys::create_key(app.store(), &owner("alice")).await.unwrap();
    let admin = app.admin_of("alice").await;
    let registered =
        app.client.post(app.url("/webhooks")).bearer_auth(&admin).json(&webhook_body()).send().await.unwrap();
    assert_eq!(registered.status(), StatusCode::CREATED);
    let endpoint = registered.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let mut markers = vec![job.clone(), other.clone(), key.to_string(), "alice".to_owned(), endpoint.clone()];
    markers.extend(["walk-unknown-key", "walk-pending-key", "private words"].map(String::from));
    for id in [&job, &other] {
        let seen: Value = app.get(&app.alice, &format!("/jobs/{id}")).await.json().await.unwrap();
        for attempt in seen["attempts"].as_array().unwrap() {
            markers.push(attempt["id"].as_str().unwrap().to_owned());
        }
    }
    Seeded { job, key: key.to_string(), admin, endpoint, markers }
}

/// A webhook endpoint's registration (a public address; an API-only
/// server sends nothing to it).
fn webhook_body() -> Value {
    json!({"url": "https://8.8.8.8/hooks", "events": ["job.succeeded"]})
}

/// Whether a route is about an owner's webhook endpoints: admin routes
/// that keep owners apart too.
fn is_webhooks(path: &str) -> bool {
    path.starts_with("/webhooks")
}

/// The route with its parameters naming alice's data.
fn concrete(path: &str, seeded: &Seeded) -> String {
    let id = if path.starts_with("/keys/") {
        &seeded.key
    } else if is_webhooks(path) {
        &seeded.endpoint
    } else {
        &seeded.job
    };
    // A callback's token is one nobody was given.
    let name = if path.contains("/files/") { "1-0.png" } else { "sim-fast" };
    path.replace("{id}", id)
        .replace("{job}", &seeded.job)
        .replace("{number}", "1")
        .replace("{name}", name)
        .replace("{token}", &"0".repeat(64))
}

/// A body the route would accept from its rightful caller, so that an
/// answer other than success comes from who asked, not from what was sent.
/// A new route with a body needs its entry here.
fn valid_body(method: &str, path: &str) -> Option<Value> {
    match (method, path) {
        ("post", "/jobs") => Some(json!({"task": "summarize", "input": {"text": "bob's own job"}})),
        ("post", "/jobs/{id}/attempts") => Some(json!({"provider": "sim-fast"})),
        ("post", "/jobs/{id}/attempts/{number}/resolve") => Some(json!({"outcome": "failed", "reason": "the walk"})),
        ("post", "/providers/{name}/qualifications") => Some(json!({"task": "summarize"})),
        ("post", "/providers/{name}/breaker") => Some(json!({"state": "closed", "reason": "the walk"})),
        ("post", "/webhooks") => Some(webhook_body()),
        ("post", "/callbacks/{job}/{number}/{token}") => Some(json!({"status": "failed", "error": "the walk"})),
        _ => None,
    }
}

async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: Option<&str>,
    seeded: &Seeded,
    key: &str,
) -> reqwest::Response {
    let mut request = app
        .client
        .request(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(), app.url(&concrete(path, seeded)))
        .header("idempotency-key", key);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = valid_body(method, path) {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// The body of an answer, checked to show none of alice's data.
async fn shows_nothing_of_alice(response: reqwest::Response, seeded: &Seeded, what: &str) -> StatusCode {
    shows_none_of(response, &seeded.markers, what).await
}

/// The body of an answer, checked to show none of `markers`.
async fn shows_none_of(response: reqwest::Response, markers: &[String], what: &str) -> StatusCode {
    let status = response.status();
    let body = response.text().await.unwrap();
    for marker in markers {
        assert!(!body.contains(marker.as_str()), "{what} answered {status} showing alice's {marker}: {body}");
    }
    status
}

/// Walks every operation of `/openapi.json`: with path parameters naming
/// owner A's job, attempt or key, owner B's client key gets 404 on client
/// routes and 403 on admin routes, never any of A's data, and changes
/// nothing; A's own key (or an admin's, on admin routes) then shows the
/// resources were real.
async fn every_route_of_the_specification_keeps_owners_apart_and_admin_routes_from_client_keys(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let seeded = seed_alice(&app).await;
    let before: Value = app.get(&app.alice, &format!("/jobs/{}", seeded.job)).await.json().await.unwrap();
    let spec: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();

    let mut operations = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let role =
                operation["x-onejob-role"].as_str().unwrap_or_else(|| panic!("{method} {path} has no x-onejob-role"));
            operations.push((method.clone(), path.clone(), role.to_owned(), operation["security"].clone()));
        }
    }
    // The roles are the documented ones, not whatever the list says.
    let with_role = |wanted: &str| -> BTreeSet<(String, String)> {
        operations.iter().filter(|(_, _, role, _)| role == wanted).map(|(m, p, _, _)| (m.clone(), p.clone())).collect()
    };
    let pairs = |list: &[(&str, &str)]| -> BTreeSet<(String, String)> {
        list.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect()
    };
    assert_eq!(
        with_role("operator"),
        pairs(&[
            ("get", "/providers"),
            ("post", "/providers/{name}/qualifications"),
            ("post", "/providers/{name}/breaker"),
        ])
    );
    assert_eq!(
        with_role("admin"),
        pairs(&[
            ("post", "/keys/{id}/revoke"),
            ("post", "/webhooks"),
            ("get", "/webhooks"),
            ("delete", "/webhooks/{id}"),
            ("post", "/webhooks/{id}/rotate-secret"),
            ("get", "/webhooks/{id}/deliveries"),
        ])
    );
    assert_eq!(
        with_role("public"),
        pairs(&[
            ("get", "/healthz"),
            ("get", "/readyz"),
            ("get", "/metrics"),
            ("get", "/openapi.json"),
            ("get", "/docs"),
            ("post", "/callbacks/{job}/{number}/{token}"),
        ])
    );

    // Bob's admin: an owner's administrator, who reaches nothing of alice's.
    let bobs_admin = app.admin_of("bob").await;
    let mut walked = 0;
    for (n, (method, path, role, security)) in operations.iter().enumerate() {
        let what = format!("{method} {path} as bob");
        let key = format!("walk-{n}");
        let anonymous = call(&app, method, path, None, &seeded, &key).await;
        match role.as_str() {
            "public" if path.starts_with("/callbacks/") => {
                // No key, but the attempt's own token: a made-up one is
                // refused, with or without a key, and changes nothing.
                assert_eq!(security, &json!([{}]), "{method} {path} is public in its security too");
                let bob = call(&app, method, path, Some(&app.bob), &seeded, &key).await;
                for (answer, who) in [(bob, "bob"), (anonymous, "nobody")] {
                    let body = expect_problem(answer, StatusCode::UNAUTHORIZED, "unauthorized").await;
                    assert!(!seeded.markers.iter().any(|m| body.to_string().contains(m.as_str())), "{who}: {body}");
                }
            }
            "public" => {
                assert_eq!(security, &json!([{}]), "{method} {path} is public in its security too");
                let bob = call(&app, method, path, Some(&app.bob), &seeded, &key).await;
                assert!(shows_nothing_of_alice(bob, &seeded, &what).await.is_success(), "{what}");
                assert!(
                    shows_nothing_of_alice(anonymous, &seeded, &what).await.is_success(),
                    "{method} {path} without a key"
                );
            }
            "operator" => {
                expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
                for (token, who) in [(&app.bob, "bob"), (&bobs_admin, "bob's admin"), (&seeded.admin, "alice's admin")]
                {
                    let refused = call(&app, method, path, Some(token), &seeded, &key).await;
                    let body = expect_problem(refused, StatusCode::FORBIDDEN, "forbidden").await;
                    assert!(!seeded.markers.iter().any(|m| body.to_string().contains(m.as_str())), "{who}: {body}");
                }
            }
            "admin" => {
                expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
                let bob = call(&app, method, path, Some(&app.bob), &seeded, &key).await;
                assert_eq!(bob.status(), StatusCode::FORBIDDEN, "{what}");
                let body = expect_problem(bob, StatusCode::FORBIDDEN, "forbidden").await;
                assert!(!seeded.markers.iter().any(|m| body.to_string().contains(m.as_str())), "{what}: {body}");
                // A's own client key is refused the same way.
                let alice = call(&app, method, path, Some(&app.alice), &seeded, &key).await;
                expect_problem(alice, StatusCode::FORBIDDEN, "forbidden").await;
                // Another owner's admin, and an operator on an owner's own
                // routes (webhooks), reach nothing of alice's: a 404 for her
                // ids, as if they did not exist.
                let others = [(&bobs_admin, "bob's admin"), (&app.operator, "an operator")];
                for (token, who) in others.into_iter().filter(|(_, who)| is_webhooks(path) || *who == "bob's admin") {
                    let other = call(&app, method, path, Some(token), &seeded, &key).await;
                    let what = format!("{method} {path} as {who}");
                    let status = shows_nothing_of_alice(other, &seeded, &what).await;
                    if path.contains('{') {
                        assert_eq!(status, StatusCode::NOT_FOUND, "{what}");
                    }
                }
            }
            "client" => {
                expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
                let bob = call(&app, method, path, Some(&app.bob), &seeded, &key).await;
                if path.contains('{') {
                    let status = bob.status();
                    assert_eq!(status, StatusCode::NOT_FOUND, "{what} names alice's data: 404, as if it did not exist");
                    shows_nothing_of_alice(bob, &seeded, &what).await;
                } else {
                    assert!(shows_nothing_of_alice(bob, &seeded, &what).await.is_success(), "{what}: bob's own");
                }
            }
            other => panic!("{method} {path} has the unknown role {other}"),
        }
        walked += 1;
    }
    assert_eq!(walked, operations.len());
    assert_eq!(walked, routes().len(), "the walk covered every route the router serves");

    // Bob's walk changed nothing of alice's.
    let after: Value = app.get(&app.alice, &format!("/jobs/{}", seeded.job)).await.json().await.unwrap();
    assert_eq!(before, after, "bob's requests changed alice's job");
    assert_eq!(app.get(&app.alice, "/jobs").await.status(), StatusCode::OK, "alice's key survived the walk");

    // The 404s were real: the rightful callers reach the same resources.
    // Another owner's admin is a client like bob on client routes; so is an
    // operator, except that it may resolve any owner's unknown attempt.
    for (n, (method, path, role, _)) in operations.iter().enumerate() {
        let key = format!("control-{n}");
        if role != "client" || !path.contains('{') {
            continue;
        }
        let by_admin = call(&app, method, path, Some(&bobs_admin), &seeded, &key).await;
        let what = format!("{method} {path} as bob's admin");
        assert_eq!(shows_nothing_of_alice(by_admin, &seeded, &what).await, StatusCode::NOT_FOUND, "{what}");
        let by_operator = call(&app, method, path, Some(&app.operator), &seeded, &key).await;
        let what = format!("{method} {path} as an operator");
        if path.ends_with("/resolve") {
            // It resolves alice's unknown attempt, and learns nothing of her
            // job but the id it named.
            let markers: Vec<String> = seeded.markers.iter().filter(|m| **m != seeded.job).cloned().collect();
            assert_eq!(shows_none_of(by_operator, &markers, &what).await, StatusCode::OK, "{what}");
        } else {
            assert_eq!(shows_nothing_of_alice(by_operator, &seeded, &what).await, StatusCode::NOT_FOUND, "{what}");
        }
    }
    // Deleting comes last, so that the other routes find what it deletes.
    let mut controls: Vec<_> = operations.iter().enumerate().collect();
    controls.sort_by_key(|(_, (method, ..))| method == "delete");
    for (n, (method, path, role, _)) in controls {
        let key = format!("control-{n}");
        let token = match role.as_str() {
            "client" if path.contains('{') => &app.alice,
            "admin" => &seeded.admin,
            "operator" => &app.operator,
            _ => continue,
        };
        let status = call(&app, method, path, Some(token), &seeded, &key).await.status();
        assert!(
            ![StatusCode::NOT_FOUND, StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
            "{method} {path} as its rightful caller answered {status}"
        );
    }
}

/// An operator key resolves another owner's unknown attempt (and only that
/// of theirs) and is answered with where the job stands, not with the job;
/// a client or an admin key of another owner gets 404, whatever the output
/// (no check runs before the owner's), and the owner's log names the
/// operator by its role, not its key.
async fn an_operator_key_resolves_another_owners_unknown_attempt_and_an_owners_admin_cannot(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = app.create_job("to-resolve", None).await["id"].as_str().unwrap().to_owned();
    make_unknown(&app, &id, 1).await;
    let resolve = |token: &str, body: Value| {
        app.client.post(app.url(&format!("/jobs/{id}/attempts/1/resolve"))).bearer_auth(token).json(&body).send()
    };
    let failed = json!({"outcome": "failed", "reason": "the provider confirmed it never ran"});
    expect_problem(resolve(&app.bob, failed.clone()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    let bobs_admin = app.admin_of("bob").await;
    let made_up = json!({"outcome": "succeeded", "output": {"summary": "bob's", "word_count": 1}, "reason": "mine"});
    let breaking = json!({"outcome": "succeeded", "output": {"summary": 3}, "reason": "checked"});
    for body in [failed.clone(), made_up, breaking] {
        let refused = resolve(&bobs_admin, body.clone()).await.unwrap();
        expect_problem(refused, StatusCode::NOT_FOUND, "not-found").await;
    }
    expect_problem(app.get(&app.operator, &format!("/jobs/{id}")).await, StatusCode::NOT_FOUND, "not-found").await;
    // The contract holds for an admin too.
    let bad = json!({"outcome": "succeeded", "output": {"summary": 3}, "reason": "checked"});
    expect_problem(resolve(&app.operator, bad).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "contract-violation")
        .await;

    // The answer says where alice's job stands, and nothing of what she sent.
    let resolved = resolve(&app.operator, failed.clone()).await.unwrap();
    assert_eq!(resolved.status(), StatusCode::OK);
    let answer: Value = resolved.json().await.unwrap();
    let fields: Vec<&str> = answer.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(fields, ["attempt", "attempt_state", "job_id", "state", "winning_attempt"], "{answer}");
    assert_eq!(answer["job_id"].as_str(), Some(id.as_str()));
    assert_eq!((answer["attempt"].as_i64(), answer["attempt_state"].as_str()), (Some(1), Some("failed")), "{answer}");
    // Settled, it is alice's business again: the operator finds it no more.
    expect_problem(resolve(&app.operator, failed.clone()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    expect_problem(resolve(&app.alice, failed).await.unwrap(), StatusCode::CONFLICT, "attempt-not-unknown").await;
    let events = app.store().list_events(&owner("alice"), JobId::parse(&id).unwrap()).await.unwrap();
    assert!(format!("{events:?}").contains("never ran"), "the resolution is in alice's job's events: {events:?}");
    let resolution = events.iter().find(|event| event.kind.as_str() == "attempt-resolved").unwrap();
    assert_eq!(resolution.detail["resolved_by"], json!({"role": "operator"}), "{:?}", resolution.detail);
}

/// Nothing in the database is a token: keys made by `onejob keys create` and
/// used are stored as SHA-256 only.
async fn the_database_holds_token_hashes_and_never_a_token(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let out = tokio::process::Command::new(crate::common::BIN)
        .args(["keys", "create", "--owner", "carol", "--role", "operator"])
        .env("DATABASE_URL", &app.database_url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("created operator API key"), "{stdout}");
    let token = stdout.lines().last().unwrap().trim().to_owned();
    assert_eq!(app.get(&token, "/providers").await.status(), StatusCode::OK, "an operator key from the command line");
    app.create_job("with-alice", None).await;

    let mut tokens = vec![token.clone(), app.alice.clone(), app.bob.clone(), app.operator.clone()];
    tokens.retain(|t| t.starts_with("oj_"));
    assert_eq!(tokens.len(), 4);
    let hash = hex::encode(onejob::keys::hash_token(&token));
    match backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&app.database_url).await.unwrap();
            let tables: Vec<String> = sqlx::query_scalar(
                "select table_name::text from information_schema.tables where table_schema = 'public'",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            assert!(tables.contains(&"api_keys".to_owned()));
            let mut everything = String::new();
            for table in tables {
                let rows: Vec<String> =
                    sqlx::query_scalar(&format!("select t::text from \"{table}\" t")).fetch_all(&pool).await.unwrap();
                everything.extend(rows.into_iter().map(|row| row + "\n"));
            }
            assert!(everything.contains(&hash), "the hash is stored (bytea shows as hex)");
            for token in &tokens {
                let secret = token.trim_start_matches("oj_");
                assert!(!everything.contains(secret), "a token's secret is in the database");
                assert!(!everything.contains(&hex::encode(token.as_bytes())), "a token's bytes are in the database");
            }
        }
        Backend::Sqlite => {
            let path = app.database_url.trim_start_matches("sqlite://").split('?').next().unwrap().to_owned();
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.extend(std::fs::read(format!("{path}-wal")).unwrap_or_default());
            let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
            assert!(contains(&onejob::keys::hash_token(&token)), "the hash is stored");
            for token in &tokens {
                assert!(
                    !contains(token.trim_start_matches("oj_").as_bytes()),
                    "a token's secret is in the database file"
                );
            }
        }
    }
}

/// `onejob keys revoke` is another process: a running `onejob serve` that
/// has the key cached refuses it on the very next request.
async fn a_key_revoked_with_the_cli_is_refused_by_a_running_server_on_the_next_request(backend: Backend) {
    let database_url = backend.fresh_database().await;
    let store = crate::common::open_store(&database_url);
    store.migrate().await.unwrap();
    let (id, token) = onejob::keys::create_key(&store, &owner("carol")).await.unwrap();
    let (_server, address) = crate::common::spawn_server(&database_url, None).await;
    let client = reqwest::Client::new();
    let get = || client.get(format!("http://{address}/jobs")).bearer_auth(&token).send();
    for _ in 0..3 {
        assert_eq!(get().await.unwrap().status(), StatusCode::OK, "the key works (and is cached where keys are)");
    }
    let out = tokio::process::Command::new(crate::common::BIN)
        .args(["keys", "revoke", &id.to_string()])
        .env("DATABASE_URL", &database_url)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    expect_problem(get().await.unwrap(), StatusCode::UNAUTHORIZED, "unauthorized").await;
    let listed = tokio::process::Command::new(crate::common::BIN)
        .args(["keys", "list", "--owner", "carol"])
        .env("DATABASE_URL", &database_url)
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains(&format!("{id} carol client created")) && listed.contains("revoked"), "{listed}");
}

/// `POST /keys/{id}/revoke`: admin keys only; the revoked key is refused on
/// the very next request.
async fn a_key_revoked_through_the_api_is_refused_at_once_and_only_its_owners_admin_or_an_operator_may_revoke(
    backend: Backend,
) {
    let app = TestApp::spawn(backend).await;
    let (id, token) = onejob::keys::create_key(app.store(), &owner("carol")).await.unwrap();
    for _ in 0..3 {
        assert_eq!(app.get(&token, "/jobs").await.status(), StatusCode::OK);
    }
    let revoke = |by: &str, id: String| app.client.post(app.url(&format!("/keys/{id}/revoke"))).bearer_auth(by).send();
    expect_problem(revoke(&app.alice, id.to_string()).await.unwrap(), StatusCode::FORBIDDEN, "forbidden").await;
    expect_problem(revoke(&token, id.to_string()).await.unwrap(), StatusCode::FORBIDDEN, "forbidden").await;
    // Another owner's admin: carol's key is as missing as an unknown one.
    let bobs_admin = app.admin_of("bob").await;
    expect_problem(revoke(&bobs_admin, id.to_string()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(app.get(&token, "/jobs").await.status(), StatusCode::OK, "a refused revocation revokes nothing");
    // Carol's own admin may.
    let (second, carols) = onejob::keys::create_key(app.store(), &owner("carol")).await.unwrap();
    let carols_admin = app.admin_of("carol").await;
    assert_eq!(revoke(&carols_admin, second.to_string()).await.unwrap().status(), StatusCode::NO_CONTENT);
    expect_problem(app.get(&carols, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    // A key revokes keys of its own role or below: not its owner's operator key.
    let (staff, staffs) =
        onejob::keys::create_key_with_role(app.store(), &owner("carol"), onejob::domain::KeyRole::Operator)
            .await
            .unwrap();
    expect_problem(revoke(&carols_admin, staff.to_string()).await.unwrap(), StatusCode::FORBIDDEN, "forbidden").await;
    assert_eq!(app.get(&staffs, "/jobs").await.status(), StatusCode::OK, "the operator key still works");
    assert_eq!(revoke(&app.operator, staff.to_string()).await.unwrap().status(), StatusCode::NO_CONTENT);

    assert_eq!(revoke(&app.operator, id.to_string()).await.unwrap().status(), StatusCode::NO_CONTENT);
    expect_problem(app.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    expect_problem(revoke(&app.operator, id.to_string()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    expect_problem(
        revoke(&app.operator, uuid::Uuid::now_v7().to_string()).await.unwrap(),
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;
    expect_problem(revoke(&app.operator, "not-a-key".into()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(app.get(&app.alice, "/jobs").await.status(), StatusCode::OK, "other keys are untouched");
}

/// Nothing a client sends (a provider named by URL, address fields in the
/// body or the input) makes onejob call an address other than the
/// configured providers': a listener at that address is never called, and
/// the simulator sees exactly the one accepted job's attempt.
async fn nothing_a_client_sends_makes_onejob_call_an_unconfigured_address(backend: Backend) {
    let canary = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere = format!("http://{}/v1", canary.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    tokio::spawn(async move {
        while canary.accept().await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let post = |key: &str, body: Value| app.post_job_raw(&app.alice, key, body.to_string()).send();
    let input = json!({"text": "one two three"});

    let named = json!({"task": "summarize", "input": input, "provider": elsewhere});
    expect_problem(post("by-url", named).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "provider-unknown").await;
    let as_object =
        json!({"task": "summarize", "input": input, "provider": {"name": "sim-fast", "base_url": elsewhere}});
    expect_problem(post("as-object", as_object).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY, "validation-failed")
        .await;
    for field in ["base_url", "url", "endpoint", "api_base", "provider_url"] {
        let body = json!({"task": "summarize", "input": input, field: elsewhere});
        let problem = expect_problem(
            post(&format!("top-{field}"), body).await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
        )
        .await;
        assert_eq!(problem["errors"][0]["pointer"], format!("/{field}"), "{problem}");
        let body = json!({"task": "summarize", "input": {"text": "one", field: elsewhere}});
        expect_problem(
            post(&format!("input-{field}"), body).await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
        )
        .await;
    }
    // Accepted: the address is only text to summarize.
    let body = json!({"task": "summarize", "input": {"text": format!("call {elsewhere} now")}});
    let job: Value = post("plain-text", body).await.unwrap().json().await.unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    let attempt = app.post_attempt(&app.alice, &id, "fallback-url", &json!({"provider": elsewhere})).await;
    expect_problem(attempt, StatusCode::UNPROCESSABLE_ENTITY, "provider-unknown").await;
    let attempt = app
        .post_attempt(&app.alice, &id, "fallback-field", &json!({"provider": "sim-fast", "base_url": elsewhere}))
        .await;
    expect_problem(attempt, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let qualify = |name: String, body: Value| {
        app.client
            .post(app.url(&format!("/providers/{name}/qualifications")))
            .bearer_auth(&app.operator)
            .json(&body)
            .send()
    };
    let encoded = elsewhere.replace(':', "%3A").replace('/', "%2F");
    expect_problem(qualify(encoded, json!({"task": "summarize"})).await.unwrap(), StatusCode::NOT_FOUND, "not-found")
        .await;
    let with_address = json!({"task": "summarize", "base_url": elsewhere});
    expect_problem(
        qualify("sim-fast".into(), with_address).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation-failed",
    )
    .await;

    let done = app.wait_for(&id, "succeeded", |job| job["state"] == "succeeded").await;
    let log = app.simulator_log().await;
    let attempt_id = done["attempts"][0]["id"].as_str().unwrap();
    assert_eq!(log.keys().collect::<Vec<_>>(), vec![attempt_id], "the simulator saw the accepted attempt alone");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "something called the address a client sent");
}

on_both_backends!(
    every_route_of_the_specification_keeps_owners_apart_and_admin_routes_from_client_keys,
    an_operator_key_resolves_another_owners_unknown_attempt_and_an_owners_admin_cannot,
    the_database_holds_token_hashes_and_never_a_token,
    a_key_revoked_with_the_cli_is_refused_by_a_running_server_on_the_next_request,
    a_key_revoked_through_the_api_is_refused_at_once_and_only_its_owners_admin_or_an_operator_may_revoke,
    nothing_a_client_sends_makes_onejob_call_an_unconfigured_address,
);

/// Two servers on one Postgres: once a revocation through one returns, the
/// other refuses the key too (it confirmed it forgot it), well inside the
/// cache's time to live.
async fn a_revocation_reaches_every_server_sharing_the_database() {
    let one =
        TestApp::spawn_with(Backend::Postgres, |s| s.server.auth_cache_ttl = Duration::from_millis(600_000)).await;
    let two = TestApp::spawn_on(Backend::Postgres, &one.database_url, Role::Api, |s| {
        s.server.auth_cache_ttl = Duration::from_millis(600_000)
    })
    .await;
    let (id, token) = onejob::keys::create_key(one.store(), &owner("carol")).await.unwrap();
    for _ in 0..3 {
        assert_eq!(one.get(&token, "/jobs").await.status(), StatusCode::OK);
        assert_eq!(two.get(&token, "/jobs").await.status(), StatusCode::OK);
    }
    let revoked =
        one.client.post(one.url(&format!("/keys/{id}/revoke"))).bearer_auth(&one.operator).send().await.unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    expect_problem(one.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    expect_problem(two.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(two.get(&two.alice, "/jobs").await.status(), StatusCode::OK);
}

/// The listener that hears revocations is killed and a key revoked while
/// nobody listens: the server trusts no cached key until it listens again,
/// and then forgets everything it had cached.
async fn a_server_that_lost_its_listen_connection_trusts_no_cached_key() {
    let app =
        TestApp::spawn_with(Backend::Postgres, |s| s.server.auth_cache_ttl = Duration::from_millis(600_000)).await;
    let (id, token) = onejob::keys::create_key(app.store(), &owner("carol")).await.unwrap();
    for _ in 0..3 {
        assert_eq!(app.get(&token, "/jobs").await.status(), StatusCode::OK);
    }
    let pool = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    let listeners = || {
        sqlx::query_scalar::<_, i32>(
            "select pid from pg_stat_activity where datname = current_database() and query like 'LISTEN%' and pid <> pg_backend_pid()",
        )
        .fetch_all(&pool)
    };
    let old = listeners().await.unwrap();
    assert_eq!(old.len(), 1, "the server listens for key changes on one connection");
    sqlx::query("select pg_terminate_backend($1)").bind(old[0]).execute(&pool).await.unwrap();
    let started = Instant::now();
    while listeners().await.unwrap().contains(&old[0]) {
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Revoked by hand while nobody listens: the notification reaches no one.
    sqlx::query("update api_keys set revoked_at = now() where id = $1").bind(id).execute(&pool).await.unwrap();
    let started = Instant::now();
    loop {
        let now = listeners().await.unwrap();
        if !now.is_empty() && !now.contains(&old[0]) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the server listens again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    expect_problem(app.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(app.get(&app.alice, "/jobs").await.status(), StatusCode::OK, "live keys keep working");
}

#[test]
fn every_route_the_router_serves_declares_exactly_one_role() {
    let spec = serde_json::to_value(onejob::http::openapi::spec()).unwrap();
    for (method, path) in routes() {
        let role = spec["paths"][&path][&method]["x-onejob-role"].as_str();
        assert!(matches!(role, Some("public" | "client" | "admin" | "operator")), "{method} {path} declares {role:?}");
    }
    assert_eq!((KeyRole::Admin.as_str(), KeyRole::Operator.as_str()), ("admin", "operator"));
}

/// A listener that never confirms (a server cut off without a reset): the
/// revocation still happens and returns, after its bounded wait.
async fn a_revocation_waits_for_a_silent_listener_two_seconds_at_most() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let pool = sqlx::PgPool::connect(&app.database_url).await.unwrap();
    let mut silent = sqlx::postgres::PgListener::connect_with(&pool).await.unwrap();
    silent.listen("onejob_api_keys").await.unwrap();
    let (id, token) = onejob::keys::create_key(app.store(), &owner("carol")).await.unwrap();
    let started = Instant::now();
    assert!(app.store().revoke_api_key(id, None).await.unwrap());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1900) && waited < Duration::from_secs(5), "waited {waited:?}");
    let heard = tokio::time::timeout(Duration::from_secs(5), silent.recv()).await.unwrap().unwrap();
    assert_eq!(heard.payload(), id.to_string());
    expect_problem(app.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

/// `/metrics` needs no key, so it names owners by a keyed hash: the
/// configured key's (`server.metrics_owner_key_env`), which the documented
/// recipe computes with `openssl`; never the plain SHA-256 of the id, which
/// anyone could compute for a guessed owner.
async fn metrics_name_owners_by_a_hash_under_the_configured_key() {
    let (_simulator, config) = crate::common::processes::simulator_and_config_with(200, |t| {
        crate::common::processes::set(t, &["server", "metrics_owner_key_env"], "ONEJOB_TEST_METRICS_KEY".into());
    })
    .await;
    let url = crate::common::postgres::fresh_database().await;
    let key = [("ONEJOB_TEST_METRICS_KEY", "a shared secret")];
    let (_server, address, _log) = crate::common::spawn_server_logged(&url, Some(&config), &[], &key).await;
    let store = crate::common::open_store(&url);
    // One attempt at once, on a provider that never answers: the next three wait.
    let (id, token) = onejob::keys::create_key(&store, &owner("acme-corp")).await.unwrap();
    store.set_key_max_in_flight(id, Some(1)).await.unwrap();
    let http = reqwest::Client::new();
    for i in 0..4 {
        let created = http
            .post(format!("http://{address}/jobs"))
            .bearer_auth(&token)
            .header("idempotency-key", format!("backlog-{i}"))
            .json(&json!({"task": "summarize", "input": {"text": "pending"}, "provider": "sim-hang"}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    // The recipe of docs/operations.md.
    let recipe = "printf %s acme-corp | openssl dgst -sha256 -hmac \"$ONEJOB_TEST_METRICS_KEY\" | awk '{print substr($NF, 1, 12)}'";
    let out = std::process::Command::new("sh").args(["-c", recipe]).envs(key).output().unwrap();
    let label = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(label.len(), 12, "the recipe prints a label: {out:?}");
    let series = format!(r#"onejob_pending_attempts_by_owner{{owner="{label}"}} 3"#);
    let page = || async { http.get(format!("http://{address}/metrics")).send().await.unwrap().text().await.unwrap() };
    crate::common::processes::eventually("the backlog under the keyed label", Duration::from_secs(20), || async {
        page().await.contains(&series)
    })
    .await;
    let text = page().await;
    use sha2::Digest;
    let unkeyed = hex::encode(&sha2::Sha256::digest(b"acme-corp")[..6]);
    assert!(!text.contains(&unkeyed) && !text.contains("acme-corp"), "a guessed owner is not confirmed:\n{text}");
}

on_postgres!(
    a_revocation_reaches_every_server_sharing_the_database,
    a_server_that_lost_its_listen_connection_trusts_no_cached_key,
    a_revocation_waits_for_a_silent_listener_two_seconds_at_most,
    metrics_name_owners_by_a_hash_under_the_configured_key
);
