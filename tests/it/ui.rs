//! The dashboard's promises over HTTP, without a browser: every page and
//! script route needs a live session; a client's session reaches only its
//! owner's jobs (another owner's job page is a 404, as in the API), an
//! operator's reaches every owner's; every change needs the session's CSRF
//! token and the same origin; the cookie is `HttpOnly`, `SameSite=Strict`
//! and holds no token; revoking the key ends its sessions. Sessions live in
//! the database: a session made on one server works on another sharing the
//! database and after a restart, signing out anywhere ends it everywhere,
//! and one past its idle time or lifetime is refused and deleted. A
//! session follows its owner's job on the dashboard's event stream, the
//! API's stream under the session's owner.

use std::time::Duration;

use crate::common::processes::database;
use crate::common::{Backend, TestApp, claim_all, expect_problem, spawn_server};
use crate::events::{events, kinds, read_to_end};
use futures_util::StreamExt;
use onejob::domain::{AttemptError, JobId, OwnerId};
use onejob::store::{AttemptRef, Transition};
use onejob::ui::ROUTES;
use onejob::ui::session::{IDLE, LIFETIME};
use reqwest::{Client, StatusCode, header};
use serde_json::{Value, json};

on_both_backends!(
    sign_ins_with_unknown_keys_count_as_the_apis_do_and_are_refused_past_the_limit,
    every_dashboard_route_needs_a_live_session,
    a_client_session_sees_only_its_owners_jobs_and_an_operator_session_sees_every_owners,
    every_change_needs_the_sessions_csrf_token_and_the_same_origin,
    the_session_cookie_holds_no_token_and_ends_on_sign_out_or_revocation,
    a_session_made_on_one_server_works_on_another_sharing_the_database,
    a_session_outlives_a_restart_of_its_server,
    signing_out_on_one_server_ends_the_session_on_every_server,
    a_session_past_its_lifetime_or_idle_time_is_refused_and_deleted,
    a_session_is_marked_used_at_most_once_a_minute,
    a_session_follows_its_owners_job_on_the_dashboards_event_stream,
    the_unknown_page_marks_an_attempt_unknown_for_longer_than_its_retention,
    the_demo_says_how_the_slow_attempt_ends_as_its_task_is_configured,
    a_page_read_as_its_job_ends_shows_the_event_the_job_ended_with,
);

/// A job page read while the job's last change commits shows that change's
/// event: the page stops following a job none of whose attempts can change
/// any more, so its log is read again after the job. A failpoint holds the
/// read between the log and the job while the job is canceled.
async fn a_page_read_as_its_job_ends_shows_the_event_the_job_ended_with(backend: Backend) {
    // A failpoint is the process's: one backend's run at a time when the
    // tests share a process (`cargo test`).
    static FAILPOINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _failpoint = FAILPOINT.lock().await;
    // No worker: the job stays queued until it is canceled.
    let app = TestApp::spawn(backend).await;
    let job = app.create_job("read-as-it-ends", None).await["id"].as_str().unwrap().to_owned();
    let alice = sign_in(&app, &app.alice).await;
    let (reached, mut held) = tokio::sync::mpsc::unbounded_channel();
    let (release, go) = std::sync::mpsc::channel::<()>();
    let go = std::sync::Mutex::new(Some(go));
    // The first read to get there waits for the cancel; any other goes on.
    fail::cfg_callback("job-with-events-between-reads", move || {
        if let Some(go) = go.lock().unwrap().take() {
            let _ = reached.send(());
            let _ = go.recv_timeout(Duration::from_secs(30));
        }
    })
    .unwrap();
    let fragment = tokio::spawn({
        let (client, url, cookie) =
            (alice.client.clone(), alice.url(&format!("/ui/jobs/{job}/timeline")), alice.cookie.clone());
        async move { client.get(url).header(header::COOKIE, cookie).send().await.unwrap().text().await.unwrap() }
    });
    held.recv().await.expect("the page's read reaches the failpoint");
    let canceled =
        app.client.post(app.url(&format!("/jobs/{job}/cancel"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(canceled.status(), StatusCode::OK);
    release.send(()).unwrap();
    let fragment = fragment.await.unwrap();
    fail::remove("job-with-events-between-reads");
    assert!(fragment.contains(r#"data-open="false""#), "the job read is the canceled one: {fragment}");
    assert!(fragment.contains(r#"data-kind="job-canceled""#), "with the event it ended with: {fragment}");
}

/// The demo's story says what happens to the losing attempt: canceled by
/// default, superseded with `cancel_losers` off.
async fn the_demo_says_how_the_slow_attempt_ends_as_its_task_is_configured(backend: Backend) {
    for cancel_losers in [true, false] {
        let app = TestApp::spawn_with(backend, |settings| {
            settings.tasks.get_mut("chat").unwrap().cancel_losers = cancel_losers;
        })
        .await;
        let (status, page) = sign_in(&app, &app.alice).await.page("/demo").await;
        assert_eq!(status, StatusCode::OK);
        let (said, not_said) = if cancel_losers { ("canceled", "superseded") } else { ("superseded", "canceled") };
        assert!(
            page.contains(&format!("<em>{said}</em>")) && !page.contains(&format!("<em>{not_said}</em>")),
            "{page}"
        );
    }
}

/// An unknown job is kept past its retention, and the unknown page says so.
async fn the_unknown_page_marks_an_attempt_unknown_for_longer_than_its_retention(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.retention.allow_short = true;
        s.retention.finished_jobs = "1s".parse().unwrap();
    })
    .await;
    let job = alices_unknown_job(&app, "kept-unknown").await;
    let alice = sign_in(&app, &app.alice).await;
    let (_, fresh) = alice.page("/ui/unknown").await;
    assert!(fresh.contains(&job) && !fresh.contains("past retention"), "not yet past its retention");
    crate::common::processes::eventually("the mark past the retention", Duration::from_secs(10), || async {
        alice.page("/ui/unknown").await.1.contains("past retention 1s")
    })
    .await;
    assert_eq!(attempt_state(&app, &job).await, "unknown", "kept, not purged");
}

/// A browser's view of the dashboard: its session cookie and CSRF token.
pub(crate) struct Browser {
    client: Client,
    base: String,
    cookie: String,
    csrf: String,
}

fn no_redirects() -> Client {
    Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

pub(crate) async fn sign_in(app: &TestApp, token: &str) -> Browser {
    sign_in_at(&app.url(""), token).await
}

/// Signs in on the server at `base` (`http://host:port`).
async fn sign_in_at(base: &str, token: &str) -> Browser {
    let client = no_redirects();
    let response = client
        .post(format!("{base}/ui/signin"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2Fui"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let set_cookie = response.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let mut browser = Browser { client, base: base.to_owned(), cookie, csrf: String::new() };
    let page = browser.get("/ui").await.text().await.unwrap();
    browser.csrf = csrf_of(&page).to_owned();
    browser
}

/// The CSRF token a page was rendered with.
fn csrf_of(page: &str) -> &str {
    page.split(r#"name="csrf-token" content=""#).nth(1).expect("a signed-in page").split('"').next().unwrap()
}

impl Browser {
    /// The same browser (its cookie, its CSRF token) talking to the server at `base`.
    fn at(&self, base: &str) -> Browser {
        Browser {
            client: self.client.clone(),
            base: base.to_owned(),
            cookie: self.cookie.clone(),
            csrf: self.csrf.clone(),
        }
    }

    /// The session token the cookie carries.
    fn session_token(&self) -> &str {
        self.cookie.split_once('=').unwrap().1
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).header(header::COOKIE, &self.cookie).send().await.unwrap()
    }

    pub(crate) async fn page(&self, path: &str) -> (StatusCode, String) {
        let response = self.get(path).await;
        (response.status(), response.text().await.unwrap())
    }

    /// A script's POST: JSON, with the CSRF header unless told otherwise.
    fn script_post(&self, path: &str, key: &str, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .header(header::COOKIE, &self.cookie)
            .header("idempotency-key", key)
            .json(body)
    }

    /// A form's POST.
    async fn form(&self, path: &str, fields: &[(&str, &str)]) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .header(header::COOKIE, &self.cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(fields).unwrap())
            .send()
            .await
            .unwrap()
    }
}

/// Alice's job whose attempt 1 is unknown.
async fn alices_unknown_job(app: &TestApp, key: &str) -> String {
    let job = app.create_job(key, None).await["id"].as_str().unwrap().to_owned();
    claim_all(app).await;
    let attempt =
        AttemptRef { owner: OwnerId::parse("alice").unwrap(), job_id: JobId::parse(&job).unwrap(), number: 1 };
    let timeout = AttemptError::new("timeout", "deadline passed");
    assert_eq!(app.store().mark_unknown(&attempt, &timeout, None, None).await.unwrap(), Transition::Applied);
    job
}

async fn attempt_state(app: &TestApp, job: &str) -> String {
    let seen: Value = app.get(&app.alice, &format!("/jobs/{job}")).await.json().await.unwrap();
    seen["attempts"][0]["state"].as_str().unwrap().to_owned()
}

async fn every_dashboard_route_needs_a_live_session(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let job = app.create_job("walk", None).await["id"].as_str().unwrap().to_owned();
    let client = no_redirects();
    let forged = format!("onejob_session={}", "ab".repeat(32));
    for (method, path) in ROUTES {
        let concrete = path.replace("{id}", &job).replace("{file}", "ui.js");
        for cookie in [None, Some(forged.as_str())] {
            let mut request = client.request(method.to_uppercase().parse().unwrap(), app.url(&concrete));
            if let Some(cookie) = cookie {
                request = request.header(header::COOKIE, cookie);
            }
            let response = request.header("idempotency-key", "walk").json(&json!({})).send().await.unwrap();
            let status = response.status();
            let location = response.headers().get(header::LOCATION).map(|v| v.to_str().unwrap().to_owned());
            let body = response.text().await.unwrap();
            match (*method, *path) {
                // Signing in, and the script and style files, need no session.
                ("get", "/ui/signin") | ("get", "/ui/static/{file}") => {
                    assert_eq!(status, StatusCode::OK, "{method} {path}")
                }
                ("post", "/ui/signin") => {
                    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{method} {path}: no token in the form")
                }
                (_, p) if p.starts_with("/ui/api/") => {
                    assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
                    assert!(body.contains("\"unauthorized\""), "{body}");
                }
                _ => {
                    assert_eq!(status, StatusCode::SEE_OTHER, "{method} {path} with {cookie:?}");
                    assert!(location.as_deref().unwrap().starts_with("/ui/signin?next="), "{location:?}");
                }
            }
            assert!(!body.contains(&job) || path.ends_with("{file}"), "{method} {path} shows nothing of the job");
        }
    }
    let jobs: Value = app.get(&app.alice, "/jobs").await.json().await.unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "no route made a job without a session");
}

async fn a_client_session_sees_only_its_owners_jobs_and_an_operator_session_sees_every_owners(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let job = alices_unknown_job(&app, "alice-secret-key").await;
    let alice = sign_in(&app, &app.alice).await;
    let bobs_admin_key = app.admin_of("bob").await;
    let bob = sign_in(&app, &app.bob).await;
    // An owner's admin is bob for alice's jobs: the walk below runs for both.
    let bobs_admin = sign_in(&app, &bobs_admin_key).await;
    let admin = sign_in(&app, &app.operator).await;

    // Alice sees her job everywhere.
    let (status, page) = alice.page(&format!("/ui/jobs/{job}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("alice-secret-key") && page.contains("<svg class=\"timeline\""));
    assert!(alice.page("/ui").await.1.contains(&job));
    assert!(alice.page("/ui/unknown").await.1.contains(&job));
    assert_eq!(alice.page("/ui/providers").await.0, StatusCode::FORBIDDEN, "providers are an operator's");
    assert_eq!(bobs_admin.page("/ui/providers").await.0, StatusCode::FORBIDDEN, "an owner's admin is no operator");

    // Bob, and bob's admin, see none of it: another owner's job is as
    // absent as no job.
    for session in [&bob, &bobs_admin] {
        for path in
            [format!("/ui/jobs/{job}"), format!("/ui/jobs/{job}/timeline"), format!("/ui/jobs/{}", JobId::new())]
        {
            let (status, page) = session.page(&path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
            assert!(!page.contains("alice-secret-key"), "{path}");
        }
        for path in
            ["/ui".to_owned(), format!("/ui?q={job}"), "/ui?q=alice-secret-key".to_owned(), "/ui/unknown".to_owned()]
        {
            let (status, page) = session.page(&path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            // Bob has no job: no row at all (the search box shows what he typed).
            assert!(
                !page.contains("data-job=") && !page.contains(&format!("/ui/jobs/{job}")),
                "{path} shows nothing of alice's"
            );
        }
    }
    let fallback =
        bob.script_post(&format!("/ui/api/jobs/{job}/attempts"), "bob-1", &json!({})).header("x-csrf-token", &bob.csrf);
    assert_eq!(fallback.send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let fields =
        [("csrf", bob.csrf.as_str()), ("job", &job), ("number", "1"), ("outcome", "failed"), ("reason", "bob tries")];
    assert_eq!(bob.form("/ui/unknown/resolve", &fields).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(attempt_state(&app, &job).await, "unknown", "bob changed nothing");

    // The operator sees every owner's, and says whose.
    let (status, page) = admin.page(&format!("/ui/jobs/{job}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("alice-secret-key"));
    let list = admin.page("/ui").await.1;
    assert!(list.contains(&job) && list.contains("<td>alice</td>"));
    assert!(admin.page("/ui?q=alice-secret-key").await.1.contains(&job), "found by another owner's key");
    assert!(admin.page("/ui/unknown").await.1.contains(&job));
    assert_eq!(admin.page("/ui/providers").await.0, StatusCode::OK);
    let fields =
        [("csrf", admin.csrf.as_str()), ("job", &job), ("number", "1"), ("outcome", "failed"), ("reason", "checked")];
    let resolved = admin.form("/ui/unknown/resolve", &fields).await;
    assert_eq!(resolved.status(), StatusCode::SEE_OTHER);
    assert_eq!(attempt_state(&app, &job).await, "failed");
}

async fn every_change_needs_the_sessions_csrf_token_and_the_same_origin(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let alice = sign_in(&app, &app.alice).await;
    let body = json!({"task": "summarize", "input": {"text": "csrf"}});
    let refused = [
        alice.script_post("/ui/api/jobs", "c1", &body),
        alice.script_post("/ui/api/jobs", "c1", &body).header("x-csrf-token", "0".repeat(64)),
        alice
            .script_post("/ui/api/jobs", "c1", &body)
            .header("x-csrf-token", &alice.csrf)
            .header(header::ORIGIN, "http://evil.example"),
        alice
            .script_post("/ui/api/jobs", "c1", &body)
            .header("x-csrf-token", &alice.csrf)
            .header("sec-fetch-site", "cross-site"),
    ];
    for request in refused {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
    let jobs: Value = app.get(&app.alice, "/jobs").await.json().await.unwrap();
    assert!(jobs["jobs"].as_array().unwrap().is_empty(), "nothing was made");
    let origin = app.url("");
    let made = alice
        .script_post("/ui/api/jobs", "c1", &body)
        .header("x-csrf-token", &alice.csrf)
        .header(header::ORIGIN, origin.trim_end_matches('/'))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let replay =
        alice.script_post("/ui/api/jobs", "c1", &body).header("x-csrf-token", &alice.csrf).send().await.unwrap();
    assert_eq!((replay.status(), replay.headers()["idempotent-replayed"].to_str().unwrap()), (StatusCode::OK, "true"));

    // Forms: the resolve form and sign-out need the token too.
    let job = alices_unknown_job(&app, "csrf-unknown").await;
    for csrf in ["", "wrong"] {
        let fields =
            [("csrf", csrf), ("job", job.as_str()), ("number", "1"), ("outcome", "failed"), ("reason", "forged")];
        assert_eq!(alice.form("/ui/unknown/resolve", &fields).await.status(), StatusCode::FORBIDDEN);
    }
    assert_eq!(attempt_state(&app, &job).await, "unknown");
    assert_eq!(alice.form("/ui/signout", &[("csrf", "wrong")]).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(alice.page("/ui").await.0, StatusCode::OK, "still signed in");
    // A sign-in posted from another site is refused (login CSRF).
    let cross = no_redirects()
        .post(app.url("/ui/signin"))
        .header(header::ORIGIN, "http://evil.example")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", app.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert!(cross.headers().get(header::SET_COOKIE).is_none());
}

/// A sign-in with an unknown key counts against its address as an API
/// request with one does: past `auth_failures_per_minute`, both answer 429.
async fn sign_ins_with_unknown_keys_count_as_the_apis_do_and_are_refused_past_the_limit(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.auth_failures_per_minute = 3).await;
    let fake = format!("oj_{}", "0".repeat(64));
    let sign_in = || {
        no_redirects()
            .post(app.url("/ui/signin"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("token={fake}"))
            .send()
    };
    for _ in 0..3 {
        assert_eq!(sign_in().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    let refused = sign_in().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().get(header::SET_COOKIE).is_none());
    assert_eq!(app.get(&fake, "/jobs").await.status(), StatusCode::TOO_MANY_REQUESTS, "one count for both");
}

async fn the_session_cookie_holds_no_token_and_ends_on_sign_out_or_revocation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let refused = no_redirects()
        .post(app.url("/ui/signin"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token=oj_{}", "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().get(header::SET_COOKIE).is_none());

    let response = no_redirects()
        .post(app.url("/ui/signin"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}&next=https%3A%2F%2Fevil.example%2F", app.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[header::LOCATION], "/ui", "never redirected off the server");
    let set_cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict") && set_cookie.contains("Path=/"),
        "{set_cookie}"
    );
    assert!(!set_cookie.contains(&app.alice) && !set_cookie.contains(&app.alice[3..]), "the cookie holds no token");

    // Signing out ends the session on the server, not only in the browser.
    let alice = sign_in(&app, &app.alice).await;
    let out = alice.form("/ui/signout", &[("csrf", alice.csrf.as_str())]).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(out.headers()[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(alice.get("/ui").await.status(), StatusCode::SEE_OTHER, "the old cookie is dead");

    // Revoking the key ends every session it made, at once.
    let alice = sign_in(&app, &app.alice).await;
    assert_eq!(alice.page("/ui").await.0, StatusCode::OK);
    let keys = app.store().list_api_keys(Some(&OwnerId::parse("alice").unwrap())).await.unwrap();
    let revoked = app
        .client
        .post(app.url(&format!("/keys/{}/revoke", keys[0].id)))
        .bearer_auth(&app.operator)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    assert_eq!(alice.get("/ui").await.status(), StatusCode::SEE_OTHER, "a revoked key's session is over");
    let script =
        alice.script_post("/ui/api/jobs", "after-revoke", &json!({"task": "summarize", "input": {"text": "x"}}));
    assert_eq!(script.header("x-csrf-token", &alice.csrf).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
}

/// A job made through the demo's script route with the session's CSRF
/// token: a change, as the dashboard makes them. Its id.
async fn script_job(browser: &Browser, key: &str) -> String {
    let body = json!({"task": "summarize", "input": {"text": "made from the dashboard"}});
    let forged =
        browser.script_post("/ui/api/jobs", key, &body).header("x-csrf-token", "0".repeat(64)).send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN, "the server checks the CSRF token");
    let made =
        browser.script_post("/ui/api/jobs", key, &body).header("x-csrf-token", &browser.csrf).send().await.unwrap();
    assert_eq!(made.status(), StatusCode::CREATED, "the session's CSRF token is good on {}", browser.base);
    made.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn session_rows(db: &sqlx::AnyPool) -> i64 {
    sqlx::query_scalar("select count(*) from dashboard_sessions").fetch_one(db).await.unwrap()
}

/// Two `onejob serve` processes on one fresh database, and alice signed in
/// on the first.
struct TwoServers {
    _processes: [tokio::process::Child; 2],
    db: sqlx::AnyPool,
    /// The browser talking to the server it signed in on.
    on_one: Browser,
    /// The same browser talking to the other server.
    on_two: Browser,
}

async fn signed_in_on_one_of_two_servers(backend: Backend) -> TwoServers {
    let (database_url, db, token) = database(backend).await;
    let (first, one) = spawn_server(&database_url, None).await;
    let (second, two) = spawn_server(&database_url, None).await;
    let on_one = sign_in_at(&format!("http://{one}"), &token).await;
    let on_two = on_one.at(&format!("http://{two}"));
    TwoServers { _processes: [first, second], db, on_one, on_two }
}

async fn a_session_made_on_one_server_works_on_another_sharing_the_database(backend: Backend) {
    // Bound by name, so that the processes live until the end.
    let TwoServers { _processes, on_one, on_two, .. } = signed_in_on_one_of_two_servers(backend).await;

    let (status, page) = on_two.page("/ui").await;
    assert_eq!(status, StatusCode::OK, "the other server knows the session");
    assert!(page.contains("alice"), "as alice");
    assert_eq!(csrf_of(&page), on_one.csrf, "both servers give the session one CSRF token");
    let job = script_job(&on_two, "across-servers").await;
    assert!(on_one.page("/ui").await.1.contains(&job), "the first server lists the job made on the second");
    assert_eq!(on_two.page(&format!("/ui/jobs/{job}")).await.0, StatusCode::OK);
}

async fn a_session_outlives_a_restart_of_its_server(backend: Backend) {
    let (database_url, _db, token) = database(backend).await;
    let (mut server, address) = spawn_server(&database_url, None).await;
    let before = sign_in_at(&format!("http://{address}"), &token).await;
    server.kill().await.unwrap();
    server.wait().await.unwrap();

    let (_server, address) = spawn_server(&database_url, None).await;
    let after = before.at(&format!("http://{address}"));
    let (status, page) = after.page("/ui").await;
    assert_eq!(status, StatusCode::OK, "still signed in after the restart");
    assert_eq!(csrf_of(&page), before.csrf);
    script_job(&after, "after-restart").await;
}

async fn signing_out_on_one_server_ends_the_session_on_every_server(backend: Backend) {
    let TwoServers { _processes, db, on_one, on_two } = signed_in_on_one_of_two_servers(backend).await;
    assert_eq!(on_two.page("/ui").await.0, StatusCode::OK, "signed in on both servers");

    let out = on_two.form("/ui/signout", &[("csrf", on_two.csrf.as_str())]).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(on_one.get("/ui").await.status(), StatusCode::SEE_OTHER, "signed out on the first server too");
    let script =
        on_one.script_post("/ui/api/jobs", "after-sign-out", &json!({"task": "summarize", "input": {"text": "x"}}));
    assert_eq!(script.header("x-csrf-token", &on_one.csrf).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(session_rows(&db).await, 0, "signing out deleted the session's row");
}

/// Moves the session rows back in time: signed in `signed_in` ago (so
/// their lifetime ends `LIFETIME` after that), last used `seen` ago.
async fn age_sessions(app: &TestApp, signed_in: Duration, seen: Duration) {
    match app.backend {
        Backend::Postgres => {
            sqlx::query(
                "update dashboard_sessions set created_at = now() - make_interval(secs => $1),
                     last_seen_at = now() - make_interval(secs => $2),
                     expires_at = now() - make_interval(secs => $1) + make_interval(secs => $3)",
            )
            .bind(signed_in.as_secs_f64())
            .bind(seen.as_secs_f64())
            .bind(LIFETIME.as_secs_f64())
            .execute(&app.db)
            .await
            .unwrap();
        }
        Backend::Sqlite => {
            let now = chrono::Utc::now().timestamp_micros();
            let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
            sqlx::query("update dashboard_sessions set created_at = ?, last_seen_at = ?, expires_at = ?")
                .bind(now - micros(signed_in))
                .bind(now - micros(seen))
                .bind(now - micros(signed_in) + micros(LIFETIME))
                .execute(&app.db)
                .await
                .unwrap();
        }
    }
}

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

async fn a_session_past_its_lifetime_or_idle_time_is_refused_and_deleted(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let alice = sign_in(&app, &app.alice).await;
    let hex_hash = match backend {
        Backend::Postgres => "select encode(token_hash, 'hex') from dashboard_sessions",
        Backend::Sqlite => "select lower(hex(token_hash)) from dashboard_sessions",
    };
    let stored: Vec<String> = sqlx::query_scalar(hex_hash).fetch_all(&app.db).await.unwrap();
    let expected = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(alice.session_token().as_bytes()));
    assert_eq!(stored, [expected], "the database holds the SHA-256 of the session's token, not the token");

    // Used a minute ago, but signed in longer ago than a session lives.
    age_sessions(&app, LIFETIME + HOUR, MINUTE).await;
    assert_eq!(alice.get("/ui").await.status(), StatusCode::SEE_OTHER, "past its lifetime");
    assert_eq!(session_rows(&app.db).await, 0, "the expired row was deleted");

    // Unused for longer than a session may idle.
    let alice = sign_in(&app, &app.alice).await;
    age_sessions(&app, IDLE + HOUR, IDLE + MINUTE).await;
    assert_eq!(alice.get("/ui").await.status(), StatusCode::SEE_OTHER, "past its idle time");
    assert_eq!(session_rows(&app.db).await, 0, "the idle row was deleted");

    // Just inside both: still live.
    let alice = sign_in(&app, &app.alice).await;
    age_sessions(&app, LIFETIME - MINUTE, IDLE - MINUTE).await;
    assert_eq!(alice.page("/ui").await.0, StatusCode::OK, "inside its lifetime and idle time");
    script_job(&alice, "late-but-live").await;
}

async fn a_session_is_marked_used_at_most_once_a_minute(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let alice = sign_in(&app, &app.alice).await;
    let unmarked = "select count(*) from dashboard_sessions where last_seen_at = created_at";
    let marked = "select count(*) from dashboard_sessions where last_seen_at > created_at";
    for _ in 0..3 {
        assert_eq!(alice.get("/ui").await.status(), StatusCode::OK);
    }
    let rows: i64 = sqlx::query_scalar(unmarked).fetch_one(&app.db).await.unwrap();
    assert_eq!(rows, 1, "requests within a minute of the last mark write nothing");

    age_sessions(&app, 2 * MINUTE, 2 * MINUTE).await;
    assert_eq!(alice.get("/ui").await.status(), StatusCode::OK);
    let rows: i64 = sqlx::query_scalar(marked).fetch_one(&app.db).await.unwrap();
    assert_eq!(rows, 1, "a request two minutes after the last mark marks the session used");
}

async fn a_session_follows_its_owners_job_on_the_dashboards_event_stream(backend: Backend) {
    // No worker: the job stays queued, and its streams open, until it is
    // canceled. Alice may hold two streams or long-polls at once.
    let app = TestApp::spawn_with(backend, |s| s.server.max_long_polls_per_owner = 2).await;
    let job = app.create_job("streamed", None).await["id"].as_str().unwrap().to_owned();
    let alice = sign_in(&app, &app.alice).await;
    let bob = sign_in(&app, &app.bob).await;
    let admin = sign_in(&app, &app.operator).await;
    let path = format!("/ui/api/jobs/{job}/events");

    // The job page tells its script where the stream starts: after the
    // last event the page shows, with the kinds to listen for; an admin's
    // page of another owner's job has no stream (it is the owner's alone).
    let page = alice.page(&format!("/ui/jobs/{job}")).await.1;
    assert!(page.contains(r#"data-event-kinds="job-created "#), "the owner's job page follows the stream");
    let fragment = alice.page(&format!("/ui/jobs/{job}/timeline")).await.1;
    let last_event = fragment.split(r#"data-last-event=""#).nth(1).unwrap().split('"').next().unwrap().to_owned();
    let (status, page) = admin.page(&format!("/ui/jobs/{job}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("data-event-kinds"), "an admin's page of alice's job polls");

    // Refused: without a session as every script route, another owner's
    // job (for an admin's session as for an admin key) and no job as 404.
    let anonymous = no_redirects().get(app.url(&path)).send().await.unwrap();
    expect_problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let forged =
        no_redirects().get(app.url(&path)).header(header::COOKIE, format!("onejob_session={}", "ab".repeat(32)));
    expect_problem(forged.send().await.unwrap(), StatusCode::UNAUTHORIZED, "unauthorized").await;
    for other in [&bob, &admin] {
        expect_problem(other.get(&path).await, StatusCode::NOT_FOUND, "not-found").await;
    }
    expect_problem(
        alice.get(&format!("/ui/api/jobs/{}/events", JobId::new())).await,
        StatusCode::NOT_FOUND,
        "not-found",
    )
    .await;

    // Alice's session gets the job's events as a stream, and it stays open.
    let mut dashboard = events(alice.get(&path).await);
    let created = dashboard.next().await.unwrap();
    assert_eq!((created.kind.as_str(), created.id.as_str()), ("job-created", last_event.as_str()));
    assert_eq!(
        (created.data["job_id"].as_str(), created.data["job_state"].as_str()),
        (Some(job.as_str()), Some("queued"))
    );
    // Each stream holds one of alice's places, the dashboard's as the API's.
    let api = app.client.get(app.url(&format!("/jobs/{job}/events"))).bearer_auth(&app.alice).send().await.unwrap();
    let api = events(api);
    expect_problem(alice.get(&path).await, StatusCode::TOO_MANY_REQUESTS, "too-many-long-polls").await;

    // Canceled, the job's last event reaches the stream, which ends: the
    // same events as the API's stream.
    let canceled =
        app.client.post(app.url(&format!("/jobs/{job}/cancel"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(canceled.status(), StatusCode::OK);
    let rest = tokio::time::timeout(Duration::from_secs(30), dashboard.collect::<Vec<_>>())
        .await
        .expect("the stream ends by itself");
    assert_eq!(kinds(&rest), ["job-canceled"]);
    assert_eq!(rest[0].data["job_state"], "canceled");
    let from_api = tokio::time::timeout(Duration::from_secs(30), api.collect::<Vec<_>>())
        .await
        .expect("the stream ends by itself");
    let seen =
        |events: &[crate::events::Received]| events.iter().map(|e| (e.id.clone(), e.data.clone())).collect::<Vec<_>>();
    let mut dashboards = vec![created];
    dashboards.extend(rest);
    assert_eq!(seen(&dashboards), seen(&from_api));

    // Resumed after the page's last event, or a reconnect's Last-Event-ID.
    let after = read_to_end(alice.get(&format!("{path}?after={last_event}")).await).await;
    assert_eq!(kinds(&after), ["job-canceled"]);
    let resumed =
        alice.client.get(alice.url(&path)).header(header::COOKIE, &alice.cookie).header("last-event-id", &last_event);
    assert_eq!(kinds(&read_to_end(resumed.send().await.unwrap()).await), ["job-canceled"]);
}

/// The sign-in page shows what each role reaches, as `KeyRole::reaches`
/// (the roles table of docs/api.md) says it.
#[tokio::test]
async fn the_sign_in_page_shows_what_each_role_reaches() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let page = app.client.get(app.url("/ui/signin")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    // As the templates escape text for HTML.
    let escaped =
        |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('/', "&#x2f;");
    for role in onejob::domain::KeyRole::ALL {
        assert!(page.contains(&format!("<td>{}</td><td>{}</td>", role.as_str(), escaped(role.reaches()))), "{page}");
    }
}
