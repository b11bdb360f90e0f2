//! Operating onejob: metrics (the counters whose labels the configuration
//! names exported at zero from start), readiness with the database stopped
//! and what it says of the database's replication, the per-owner rate
//! limit, and logs that never carry a secret.

mod alerts;

use std::time::Duration;

use crate::common::processes::in_a_process_of_its_own;
use crate::common::{Backend, TestApp, expect_problem};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

async fn create(app: &TestApp, key: &str, body: &Value) -> String {
    let response = app.post_job(key, body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn metrics_text(app: &TestApp) -> String {
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    response.text().await.unwrap()
}

async fn metrics_cover_every_documented_series(backend: Backend) {
    // The recorder is the process's: the counts must be this test's alone.
    if !in_a_process_of_its_own(&backend.test_name("ops", "metrics_cover_every_documented_series")).await {
        return;
    }
    // sim-slow has a breaker, so that its state is on the page.
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.get_mut("sim-slow").unwrap().breaker = Some(onejob::config::BreakerSettings {
            failure_rate: 1.0,
            min_calls: 1_000,
            window: Duration::from_millis(10_000),
            cool_down: Duration::from_millis(1_000),
        });
    })
    .await;
    // A success, a replay, a conflict.
    let body = json!({"task": "summarize", "input": {"text": "count me"}});
    let id = create(&app, "k1", &body).await;
    app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(app.post_job("k1", &body).await.status(), StatusCode::OK);
    assert_eq!(
        app.post_job("k1", &json!({"task": "summarize", "input": {"text": "other"}})).await.status(),
        StatusCode::CONFLICT
    );
    // A race: the slow primary loses to the fallback, and its call is aborted.
    let race =
        create(&app, "k2", &json!({"task": "summarize", "input": {"text": "race"}, "provider": "sim-slow"})).await;
    app.wait_for(&race, "running", |j| j["state"] == "running").await;
    assert_eq!(
        app.post_attempt(&app.alice, &race, "fb", &json!({"provider": "sim-fast"})).await.status(),
        StatusCode::CREATED
    );
    app.wait_for(&race, "the loser recorded", |j| j["attempts"][0]["state"] == "canceled").await;
    // An unknown outcome, reconciled.
    let late =
        create(&app, "k3", &json!({"task": "summarize", "input": {"text": "late"}, "provider": "sim-late"})).await;
    app.wait_for(&late, "reconciled", |j| j["state"] == "succeeded").await;
    // A backlog: dave may run one attempt at once, so his second job waits
    // pending behind his first, slow one, and the gauges see him.
    let dave = onejob::domain::OwnerId::parse("dave").unwrap();
    let (dave_key, dave_token) = onejob::keys::create_key(app.store(), &dave).await.unwrap();
    app.store().set_key_max_in_flight(dave_key, Some(1)).await.unwrap();
    for key in ["d1", "d2"] {
        let body = json!({"task": "summarize", "input": {"text": key}, "provider": "sim-slow"});
        let response = app.post_job_raw(&dave_token, key, body.to_string()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    crate::common::processes::eventually(
        "the gauges see dave's backlog",
        std::time::Duration::from_secs(10),
        || async {
            let text = metrics_text(&app).await;
            let dave = format!(
                r#"onejob_pending_attempts_by_owner{{owner="{}"}} 1"#,
                onejob::process::metrics::owner_label("dave")
            );
            assert!(!text.contains("\"dave\""), "the page names no owner");
            text.contains(&dave)
        },
    )
    .await;

    let text = metrics_text(&app).await;
    for name in onejob::process::metrics::ALL {
        assert!(text.contains(name), "{name} is missing from /metrics:\n{text}");
    }
    // Each thing done above, counted once: the process has no other server.
    use crate::common::prometheus::{parse, value};
    let samples = parse(&text);
    let count = |name: &str, labels: &[(&str, &str)]| value(&samples, name, labels).unwrap_or(-1.0);
    let summarize = [("task", "summarize")];
    assert_eq!(count("onejob_jobs_created_total", &summarize), 5.0, "k1, k2, k3, d1, d2: {text}");
    assert_eq!(count("onejob_jobs_replayed_total", &summarize), 1.0, "{text}");
    assert_eq!(count("onejob_jobs_conflicted_total", &summarize), 1.0, "{text}");
    let posts = [("route", "/jobs"), ("method", "POST"), ("status", "201")];
    assert_eq!(count("onejob_http_requests_total", &posts), 5.0, "{text}");
    let aborted = [("provider", "sim-slow"), ("outcome", "canceled")];
    assert_eq!(count("onejob_attempts_total", &aborted), 1.0, "the race's loser: {text}");
    let unknown = [("provider", "sim-late"), ("outcome", "unknown")];
    assert_eq!(count("onejob_attempts_total", &unknown), 1.0, "the late attempt: {text}");
    assert!(text.contains("onejob_http_request_duration_seconds_bucket"), "latency is a histogram");
}

async fn the_rate_limit_is_per_owner_and_a_replay_costs_as_much_as_a_create(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.rate_limit_per_second = 1;
        s.server.rate_limit_burst = 3;
    })
    .await;
    let body = json!({"task": "summarize", "input": {"text": "x"}});
    assert_eq!(app.post_job("same", &body).await.status(), StatusCode::CREATED);
    assert_eq!(app.post_job("same", &body).await.status(), StatusCode::OK);
    assert_eq!(app.post_job("same", &body).await.status(), StatusCode::OK);
    let limited = app.post_job("same", &body).await;
    assert!(limited.headers()["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    expect_problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate-limited").await;
    // Another owner has a bucket of its own.
    assert_eq!(app.get(&app.bob, "/jobs").await.status(), StatusCode::OK);
    // Probes are not limited.
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), StatusCode::OK);
}

/// The SQL statements this process runs, as sqlx reports them (its
/// `sqlx::query` events): each one's first words, then its text; and each
/// time the SQLite store takes its writer (sqlx does not report a BEGIN).
#[derive(Clone, Default)]
struct Statements(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Sql(String);
        impl tracing::field::Visit for Sql {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if ["summary", "db.statement", "message"].contains(&field.name()) {
                    self.0.push_str(value);
                    self.0.push(' ');
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.record_str(field, &format!("{value:?}"));
            }
        }
        if ["sqlx::query", "onejob::sqlite::writer"].contains(&event.metadata().target()) {
            let mut sql = Sql(String::new());
            event.record(&mut sql);
            self.0.lock().unwrap().push(sql.0.trim().to_lowercase());
        }
    }
}

/// A server with no traffic writes nothing: its worker's claims, its
/// webhook deliverer, its reconciler and its purger (here every 50 to 100
/// ms, as often as 10 to 600 times their defaults) each look with a read
/// and find nothing to do, so that none takes a lock, SQLite's one writer
/// included.
async fn a_server_with_no_traffic_runs_no_write_statement(backend: Backend) {
    use tracing_subscriber::layer::SubscriberExt as _;
    // This process's statements, not those of the tests beside it.
    if !in_a_process_of_its_own(&backend.test_name("ops", "a_server_with_no_traffic_runs_no_write_statement")).await {
        return;
    }
    let statements = Statements::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(statements.clone()))
        .expect("this test process has no other subscriber");
    let app = TestApp::spawn_live(backend, |settings| {
        for provider in settings.providers.values_mut() {
            provider.qualify_on_start = false;
        }
        settings.retention.purge_interval = "100ms".parse().unwrap();
    })
    .await;
    // Jobs that ran before, and a webhook endpoint: the idle server has
    // something it could look at.
    let admin = app.admin_of("alice").await;
    let hook = json!({"url": "https://8.8.8.8/hooks", "events": ["job.canceled"]});
    let registered = app.client.post(app.url("/webhooks")).bearer_auth(&admin).json(&hook).send().await.unwrap();
    assert_eq!(registered.status(), StatusCode::CREATED);
    let done = create(&app, "done-before", &json!({"task": "summarize", "input": {"text": "one two"}})).await;
    crate::common::processes::eventually("the job succeeded", Duration::from_secs(10), || async {
        let job = app.get(&app.alice, &format!("/jobs/{done}?wait=1")).await.json::<Value>().await.unwrap();
        job["state"] == "succeeded"
    })
    .await;

    let before = statements.0.lock().unwrap().len();
    // The observed minute, in fast time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen: Vec<String> = statements.0.lock().unwrap()[before..].to_vec();
    let writes: Vec<&String> = seen
        .iter()
        .filter(|sql| {
            ["insert", "update", "delete", "begin"].iter().any(|verb| sql.starts_with(verb))
                || (sql.starts_with("with") && [" update ", " insert ", " delete "].iter().any(|w| sql.contains(w)))
        })
        .collect();
    assert!(writes.is_empty(), "{} write statements while idle, the first: {:?}", writes.len(), writes.first());
    assert!(seen.iter().filter(|sql| sql.starts_with("select")).count() > 20, "the loops read: {seen:?}");
}

/// `/readyz` and the gauge say whether commits wait for a standby: a
/// plain Postgres has none (0; the cluster tests see 1), SQLite has no
/// replication at all (no field, no gauge). A server in a process of its
/// own, so that no other test's database sets the gauge.
async fn readiness_says_whether_commits_wait_for_a_standby(backend: Backend) {
    let (url, _pool, _token) = crate::common::processes::database(backend).await;
    let (_server, address) = crate::common::spawn_server(&url, None).await;
    let http = reqwest::Client::new();
    let readiness = || async {
        let response = http.get(format!("http://{address}/readyz")).send().await.unwrap();
        crate::common::ok_json(response).await
    };
    let metrics =
        || async { http.get(format!("http://{address}/metrics")).send().await.unwrap().text().await.unwrap() };
    // Read at start, by a task of its own: the first answer may come before.
    crate::common::processes::eventually("the replication settings are read", Duration::from_secs(10), || async {
        backend == Backend::Sqlite || readiness().await.get("database").is_some()
    })
    .await;
    let ready = readiness().await;
    assert_eq!(ready["status"], "ready");
    let text = metrics().await;
    if backend == Backend::Postgres {
        let database = &ready["database"];
        assert_eq!(database["commit_waits_for_standby"], false, "{ready}");
        assert_eq!(database["synchronous_standby_names"], "", "{ready}");
        assert_eq!(database["standbys"], 0, "{ready}");
        assert!(text.contains("\nonejob_database_commit_waits_for_standby 0\n"), "{text}");
    } else {
        assert!(ready.get("database").is_none(), "{ready}");
        assert!(!text.contains("onejob_database_commit_waits_for_standby"), "absent on SQLite");
    }
}

on_both_backends!(
    readiness_says_whether_commits_wait_for_a_standby,
    a_server_with_no_traffic_runs_no_write_statement,
    metrics_cover_every_documented_series,
    the_rate_limit_is_per_owner_and_a_replay_costs_as_much_as_a_create
);

/// The outcomes an attempt is counted under by the worker, as its usage is.
const SETTLED: [&str; 5] = ["succeeded", "superseded", "failed", "unknown", "canceled"];
/// What a status lookup of an unknown attempt can find.
const LOOKUPS: [&str; 5] = ["succeeded", "failed", "running", "not_found", "error"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counter_whose_labels_the_configuration_names_is_exported_at_zero_from_start() {
    use crate::common::processes::{set, simulator_and_config_with};
    use crate::common::prometheus::{label_sets, scrape, value};
    // The default configuration, nothing qualified at start (so that nothing
    // happens before the scrape), plus a provider without a price or a
    // status lookup and a second task on it.
    let (_simulator, config) = simulator_and_config_with(1_000, |table| {
        let configured: Vec<String> = table["providers"].as_table().unwrap().keys().cloned().collect();
        for provider in &configured {
            set(table, &["providers", provider, "qualify_on_start"], false.into());
        }
        set(table, &["providers", "gpt", "kind"], "openai".into());
        set(table, &["providers", "gpt", "base_url"], "http://127.0.0.1:9/v1".into());
        set(table, &["providers", "gpt", "api_key_env"], "ONEJOB_TEST_GPT_KEY".into());
        set(table, &["tasks", "echo", "default_provider"], "gpt".into());
    })
    .await;
    let settings = onejob::config::Settings::parse(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let url = Backend::Sqlite.fresh_database().await;
    crate::common::processes::alice_key(&url).await;
    let (_server, address) = crate::common::spawn_server(&url, Some(&config)).await;
    let samples = scrape(&reqwest::Client::new(), &address).await;
    let _ = std::fs::remove_file(&config);

    let zero = |name: &str, labels: &[(&str, &str)]| {
        assert_eq!(value(&samples, name, labels), Some(0.0), "{name} {labels:?} is exported at zero from start");
    };
    let tasks: Vec<&str> = settings.tasks.keys().map(String::as_str).collect();
    assert_eq!(tasks, ["chat", "echo", "image", "summarize"]);
    for task in &tasks {
        for name in ["onejob_jobs_created_total", "onejob_jobs_replayed_total", "onejob_jobs_conflicted_total"] {
            zero(name, &[("task", task)]);
        }
    }
    assert_eq!(settings.providers.len(), 9);
    for (provider, provider_settings) in &settings.providers {
        zero("onejob_races_lost_total", &[("provider", provider)]);
        for outcome in SETTLED {
            zero("onejob_attempts_total", &[("provider", provider), ("outcome", outcome)]);
            for kind in ["prompt", "completion"] {
                zero("onejob_tokens_total", &[("provider", provider), ("outcome", outcome), ("kind", kind)]);
            }
            if let Some(price) = &provider_settings.price {
                zero(
                    "onejob_cost_nanos_total",
                    &[("provider", provider), ("outcome", outcome), ("currency", &price.currency)],
                );
            }
        }
        if provider_settings.has_status_lookup() {
            for result in LOOKUPS {
                zero("onejob_reconciliations_total", &[("provider", provider), ("result", result)]);
            }
        }
        for task in &tasks {
            for result in ["passed", "failed"] {
                zero("onejob_qualifications_total", &[("provider", provider), ("task", task), ("result", result)]);
            }
        }
    }
    // The attempts counted without their provider: canceled ones, and those
    // whose lease expired.
    zero("onejob_attempts_total", &[("provider", ""), ("outcome", "canceled")]);
    zero("onejob_attempts_total", &[("provider", ""), ("outcome", "unknown")]);
    zero("onejob_rate_limited_total", &[]);
    zero("onejob_long_polls_refused_total", &[]);
    zero("onejob_long_polls_open", &[]);
    // Exactly the label sets the code counts under: none for a lookup or a
    // cost the provider cannot have.
    assert_eq!(label_sets(&samples, "onejob_attempts_total").len(), settings.providers.len() * SETTLED.len() + 2);
    let gpt = |name: &str| label_sets(&samples, name).iter().any(|labels| labels["provider"] == "gpt");
    assert!(!gpt("onejob_reconciliations_total"), "gpt has no status lookup");
    assert!(!gpt("onejob_cost_nanos_total"), "gpt has no price");
}

/// A TCP door to the test Postgres server's socket that the test can close:
/// the database "stops" for the application behind it.
struct Door {
    addr: std::net::SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

/// Where a [`Door`] leads: the throwaway cluster's Unix socket, or the TCP
/// address of the server `TEST_DATABASE_URL` names.
#[derive(Clone)]
enum Behind {
    Socket(std::path::PathBuf),
    Tcp(String),
}

impl Door {
    async fn open(behind: Behind) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let opened = connections.clone();
        let accept = tokio::spawn(async move {
            loop {
                let (mut inbound, _) = listener.accept().await.unwrap();
                let behind = behind.clone();
                let connection = tokio::spawn(async move {
                    match behind {
                        Behind::Socket(path) => {
                            if let Ok(mut outbound) = tokio::net::UnixStream::connect(&path).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        }
                        Behind::Tcp(address) => {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&address).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        }
                    }
                });
                opened.lock().unwrap().push(connection);
            }
        });
        Self { addr, accept, connections }
    }

    /// Closes the listener and every connection through it, and returns
    /// once they are closed: an abort only asks, and a request sent before
    /// the aborted tasks are dropped would still get through.
    async fn close(&mut self) {
        self.accept.abort();
        let _ = (&mut self.accept).await;
        let connections = std::mem::take(&mut *self.connections.lock().unwrap());
        for connection in connections {
            connection.abort();
            let _ = connection.await;
        }
    }
}

async fn readiness_and_requests_answer_503_while_the_database_is_stopped() {
    // Postgres only: an embedded SQLite file cannot be stopped apart from
    // the process that opens it.
    let url = crate::common::postgres::fresh_database().await;
    let parsed = reqwest::Url::parse(&url).unwrap();
    let query =
        |wanted: &str| parsed.query_pairs().find(|(name, _)| name == wanted).map(|(_, value)| value.into_owned());
    let behind = match query("host") {
        Some(dir) => {
            let port = query("port").unwrap_or_else(|| "5432".to_owned());
            Behind::Socket(std::path::Path::new(&dir).join(format!(".s.PGSQL.{port}")))
        }
        None => Behind::Tcp(format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap_or(5432))),
    };
    let mut door = Door::open(behind).await;
    let mut through_door = parsed.clone();
    through_door.set_query(None);
    through_door.set_host(Some("127.0.0.1")).unwrap();
    through_door.set_port(Some(door.addr.port())).unwrap();
    let through_door = through_door.to_string();
    let app = TestApp::spawn_on(Backend::Postgres, &url, onejob::app::Role::All, |s| {
        s.database.url = Some(through_door.clone());
        // Long enough for a loaded database to open a connection before
        // the close, short against the 10 s the answers must come within.
        s.database.acquire_timeout = Duration::from_secs(1);
    })
    .await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK, "ready before the door closes: {:?}", ready.text().await);

    door.close().await;
    let started = std::time::Instant::now();
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    expect_problem(ready, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    let create = app.post_job("k", &json!({"task": "summarize", "input": {"text": "x"}})).await;
    assert_eq!(create.headers()["retry-after"], "1");
    expect_problem(create, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert!(started.elapsed() < Duration::from_secs(10), "answered promptly, not after a hang");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_logs_no_secret() {
    // A provider with a key, reached over the OpenAI protocol (the
    // simulator speaks it), debug logs as JSON, and a client token.
    const PROVIDER_KEY: &str = "sk-live-do-not-log-8f1c2d";
    let settings = onejob::config::Settings::builtin();
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let mut table: toml::Table = onejob::config::DEFAULT_CONFIG.parse().unwrap();
    let mut gpt = toml::Table::new();
    gpt.insert("kind".into(), "openai".into());
    gpt.insert("base_url".into(), format!("{}/providers/sim-fast/v1", simulator.url()).into());
    gpt.insert("api_key_env".into(), "ONEJOB_TEST_PROVIDER_KEY".into());
    table["providers"].as_table_mut().unwrap().insert("gpt".into(), gpt.into());
    table.insert(
        "simulator".into(),
        toml::Value::Table([("url".to_owned(), simulator.url().into())].into_iter().collect()),
    );
    let config = std::env::temp_dir().join(format!("onejob-secrets-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();

    let url = Backend::Sqlite.fresh_database().await;
    let store = crate::common::open_store(&url);
    store.migrate().await.unwrap();
    let token = onejob::keys::create_key(&store, &onejob::domain::OwnerId::parse("alice").unwrap()).await.unwrap().1;

    let mut child = tokio::process::Command::new(crate::common::BIN)
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("DATABASE_URL", &url)
        .env("RUST_LOG", "debug")
        .env("ONEJOB_TEST_PROVIDER_KEY", PROVIDER_KEY)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let address = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().expect("serve starts");
        let found =
            line.split("listening on http://").nth(1).map(|rest| rest.split(['"', ' ']).next().unwrap().to_owned());
        log.push(line);
        if let Some(address) = found {
            break address;
        }
    };
    let client = reqwest::Client::new();
    let created = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "secret-run")
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .json(&json!({"task": "summarize", "input": {"text": "keep it secret"}, "provider": "gpt"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let mut state = Value::Null;
    for _ in 0..10 {
        let job: Value = client
            .get(format!("http://{address}/jobs/{id}?wait=5"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state = job["state"].clone();
        if state == "succeeded" {
            break;
        }
    }
    assert_eq!(state, "succeeded", "the job ran through the keyed provider");
    let wrong = client
        .get(format!("http://{address}/jobs"))
        .bearer_auth(format!("oj_{}", "1".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    child.kill().await.unwrap();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        log.push(line);
    }

    assert!(log.len() > 10, "debug logging produced lines");
    for line in &log {
        let parsed: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(parsed.get("level").is_some(), "{line}");
    }
    // The caller's trace id is on every line of its request and of its attempt.
    let parsed: Vec<Value> = log.iter().map(|line| serde_json::from_str(line).unwrap()).collect();
    let traced = |name: &str| {
        let of_job = |l: &&Value| {
            let span = &l["span"];
            span["name"] == name
                && if name == "request" {
                    span["method"] == "POST" && span["path"] == "/jobs"
                } else {
                    span["job.id"] == id.as_str()
                }
        };
        let lines: Vec<&Value> = parsed.iter().filter(of_job).collect();
        assert!(!lines.is_empty(), "no line in a {name} span");
        for line in lines {
            assert_eq!(line["span"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736", "{line}");
        }
    };
    for name in ["attempt", "settle", "provider call"] {
        traced(name);
    }
    traced("request");
    let all = log.join("\n");
    assert!(all.contains(&id), "the run is in the log");
    for secret in [token.as_str(), PROVIDER_KEY, &"1".repeat(64)] {
        assert!(!all.contains(secret), "a secret reached the logs");
    }
    assert!(!all.to_lowercase().contains("bearer "), "an Authorization header reached the logs");
    let _ = std::fs::remove_file(config);
}

on_postgres!(readiness_and_requests_answer_503_while_the_database_is_stopped);
