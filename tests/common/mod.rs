//! What the integration tests share: a real Postgres (see `postgres.rs`) and
//! the real application on a real socket.

// Each test binary uses part of it.
#![allow(dead_code)]

pub mod blackhole;
pub mod citus;
pub mod cog;
pub mod ha;
pub mod postgres;
pub mod processes;
pub mod prometheus;
pub mod s3;
pub mod sqlite;

/// Which database a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A real Postgres server (see `postgres.rs`).
    Postgres,
    /// A real SQLite file (see `sqlite.rs`).
    Sqlite,
}

impl Backend {
    /// A fresh database of this kind; a Postgres one is already migrated.
    pub async fn fresh_database(self) -> String {
        match self {
            Backend::Postgres => postgres::fresh_database().await,
            Backend::Sqlite => sqlite::fresh_database(),
        }
    }

    /// The full name of test `name` of `module` made by
    /// [`on_both_backends!`] for this backend.
    pub fn test_name(self, module: &str, name: &str) -> String {
        let backend = match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        };
        format!("{module}::{backend}::{name}")
    }
}

/// Runs each named `async fn NAME()` of the calling module, a test only
/// Postgres can run, as `postgres_only::NAME`; after `direct:`, a test that
/// builds a database topology of its own (a cluster, a PgBouncer) or checks
/// one plain Postgres's own behaviour (its planner, its lock waits), as
/// `postgres_direct::NAME`, which the PgBouncer and Citus passes leave out; after `cluster:`, a test on the HA cluster of
/// `ha.rs`, ignored unless asked for (it needs Patroni, etcd and HAProxy),
/// as `postgres_cluster::NAME`. The PgBouncer pass of `.ci/run` runs every
/// test under `postgres` (made by [`on_both_backends!`]) and
/// `postgres_only`; `lint::every_test_file_passes_the_tests_lint` refuses
/// one outside the four.
#[macro_export]
macro_rules! on_postgres {
    (@module $module:ident, $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name().await;
                }
            )+
        }
    };
    (direct: $($name:ident),+ $(,)?) => {
        $crate::on_postgres!(@module postgres_direct, $($name),+);
    };
    (cluster: $($name:ident),+ $(,)?) => {
        mod postgres_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs patroni, etcd and haproxy (Debian's packages; bash .ci/run installs them)"]
                async fn $name() {
                    super::$name().await;
                }
            )+
        }
    };
    ($($name:ident),+ $(,)?) => {
        $crate::on_postgres!(@module postgres_only, $($name),+);
    };
}

/// Runs each named `async fn NAME(backend: Backend)` of the calling module as
/// two tests, `postgres::NAME` and `sqlite::NAME`. With `setup = SETUP;`
/// first, each is an `async fn NAME(given: T)` instead, called with what the
/// calling module's `async fn SETUP(backend: Backend) -> T` made for it.
#[macro_export]
macro_rules! on_both_backends {
    (@backend $module:ident, $variant:ident, $setup:tt, $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::on_both_backends!(@given $variant, $setup)).await;
                }
            )+
        }
    };
    (@given $variant:ident, []) => {
        $crate::common::Backend::$variant
    };
    (@given $variant:ident, [$setup:ident]) => {
        super::$setup($crate::common::Backend::$variant).await
    };
    (setup = $setup:ident; $($name:ident),+ $(,)?) => {
        $crate::on_both_backends!(@backend postgres, Postgres, [$setup], $($name),+);
        $crate::on_both_backends!(@backend sqlite, Sqlite, [$setup], $($name),+);
    };
    ($($name:ident),+ $(,)?) => {
        $crate::on_both_backends!(@backend postgres, Postgres, [], $($name),+);
        $crate::on_both_backends!(@backend sqlite, Sqlite, [], $($name),+);
    };
}

use std::net::SocketAddr;
use std::time::Duration;

use onejob::app::{Application, Role};
use onejob::config::Settings;
use onejob::domain::OwnerId;
use onejob::store::{PostgresStore, SqliteStore, Store};
use reqwest::{Client, RequestBuilder, Response, StatusCode};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;

/// A Postgres store on a fresh database.
pub async fn postgres_store() -> Store {
    let url = postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(30).connect(&url).await.expect("connect to the test database");
    Store::new(PostgresStore::from_pool(pool))
}

/// A SQLite store on a fresh, migrated file.
pub async fn sqlite_store() -> Store {
    let options = onejob::store::sqlite::SqliteOptions {
        max_connections: 30,
        busy_timeout: std::time::Duration::from_secs(10),
        acquire_timeout: std::time::Duration::from_secs(10),
    };
    let store = Store::new(SqliteStore::connect_lazy(&sqlite::fresh_database(), &options).unwrap());
    store.migrate().await.expect("migrations apply to an empty SQLite file");
    store
}

/// The store a URL names, as the application opens it.
pub fn open_store(url: &str) -> Store {
    let mut settings = Settings::builtin();
    settings.database.url = Some(url.to_owned());
    onejob::app::open_store(&settings).expect("a store")
}

/// A `summarize` job of `owner` on sim-fast under `key`, for the store.
pub fn new_job(owner: &str, key: &str, input: Value) -> onejob::store::NewJob {
    use onejob::domain::{AttemptId, Fingerprint, IdempotencyKey, JobId};
    onejob::store::NewJob {
        owner: OwnerId::parse(owner).unwrap(),
        id: JobId::new(),
        idempotency_key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
        fingerprint: Fingerprint::of_job("summarize", &input, "sim-fast"),
        task: "summarize".into(),
        input,
        provider: "sim-fast".into(),
        first_attempt_id: AttemptId::new(),
        first_provider: None,
        max_cost: None,
        trace: None,
    }
}

/// A pool of either kind for tests that count rows with plain SQL.
pub async fn any_pool(url: &str) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new().max_connections(4).connect(url).await.expect("connect for direct looks")
}

/// The application running on 127.0.0.1:0 against a fresh database, with an
/// API key for owner `alice` and one for owner `bob`. `spawn` runs the API
/// alone (tests move attempts through their states by hand); `spawn_live`
/// runs the worker and the in-process simulator too.
pub struct TestApp {
    pub addr: SocketAddr,
    pub backend: Backend,
    /// Plain SQL on the test's database.
    pub db: sqlx::AnyPool,
    /// The simulator serving the `sim` providers (live apps only).
    pub simulator: Option<onejob::provider::sim::RunningSimulator>,
    pub client: Client,
    pub store: Store,
    pub database_url: String,
    pub alice: String,
    pub bob: String,
    /// An operator key (the installation's staff, reaching every owner), of
    /// owner `ops`.
    pub operator: String,
    /// The application's tasks and providers, for contract hashes.
    pub catalog: onejob::task::catalog::Catalog,
    /// Where the application keeps the files of outputs.
    pub files_dir: std::path::PathBuf,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, |_| {}).await
    }

    pub async fn spawn_with(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::spawn_as(backend, Role::Api, adjust).await
    }

    pub async fn spawn_live(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::spawn_as(backend, Role::All, adjust).await
    }

    pub async fn spawn_as(backend: Backend, role: Role, adjust: impl FnOnce(&mut Settings)) -> Self {
        let database_url = backend.fresh_database().await;
        Self::spawn_on(backend, &database_url, role, adjust).await
    }

    /// An application on an existing database (two applications can share one).
    pub async fn spawn_on(
        backend: Backend,
        database_url: &str,
        role: Role,
        adjust: impl FnOnce(&mut Settings),
    ) -> Self {
        Self::start(backend, database_url, role, adjust, true).await
    }

    /// A live application used at once, while the qualifications it runs
    /// at start (`qualify_on_start`) may still be running.
    pub async fn spawn_live_qualifying(backend: Backend, adjust: impl FnOnce(&mut Settings)) -> Self {
        let database_url = backend.fresh_database().await;
        Self::start(backend, &database_url, Role::All, adjust, false).await
    }

    async fn start(
        backend: Backend,
        database_url: &str,
        role: Role,
        adjust: impl FnOnce(&mut Settings),
        qualified: bool,
    ) -> Self {
        let database_url = database_url.to_owned();
        // RUST_LOG=onejob=debug shows the application's logs with a test's output.
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let mut settings = Settings::builtin();
        settings.server.listen = "127.0.0.1:0".parse().unwrap();
        settings.database.url = Some(database_url.clone());
        settings.database.max_connections = 20;
        settings.files.dir = Some(std::env::temp_dir().join(format!("onejob-test-files-{}", uuid::Uuid::now_v7())));
        fast_timings(&mut settings);
        adjust(&mut settings);
        let files_dir = settings.files.dir.clone().expect("set above");
        settings.validate().expect("the test's settings are valid");
        // The simulator runs in the test, so that tests can read its log.
        let simulator = if role == Role::Api {
            None
        } else {
            let running = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
            settings.simulator.url = Some(running.url());
            Some(running)
        };
        let catalog = onejob::task::catalog::Catalog::new(&settings).expect("the test's tasks compile");
        let mut application = Application::build_as(settings, role).await.expect("the application builds");
        // Live apps are used once the providers marked qualify_on_start are
        // qualified, unless the test wants them still qualifying.
        if let Some(qualifying) = application.take_startup_qualifications()
            && qualified
        {
            qualifying.await.unwrap();
        }
        let addr = application.local_addr().expect("the API listens");
        let store = open_store(&database_url);
        store.migrate().await.expect("the test database is migrated");
        let db = any_pool(&database_url).await;
        tokio::spawn(application.run_until(std::future::pending()));
        let alice = onejob::keys::create_key(&store, &OwnerId::parse("alice").unwrap()).await.unwrap().1;
        let bob = onejob::keys::create_key(&store, &OwnerId::parse("bob").unwrap()).await.unwrap().1;
        let ops = OwnerId::parse("ops").unwrap();
        let operator =
            onejob::keys::create_key_with_role(&store, &ops, onejob::domain::KeyRole::Operator).await.unwrap().1;
        Self {
            addr,
            backend,
            db,
            simulator,
            client: Client::new(),
            store,
            database_url,
            alice,
            bob,
            operator,
            catalog,
            files_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `POST /jobs` as `token` with `key`, sending `body` as it is.
    pub fn post_job_raw(&self, token: &str, key: &str, body: String) -> RequestBuilder {
        self.client
            .post(self.url("/jobs"))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
    }

    /// `POST /jobs` as alice.
    pub async fn post_job(&self, key: &str, body: &Value) -> Response {
        self.post_job_raw(&self.alice, key, body.to_string()).send().await.unwrap()
    }

    /// `POST /jobs/{id}/attempts` as `token`.
    pub async fn post_attempt(&self, token: &str, job_id: &str, key: &str, body: &Value) -> Response {
        self.client
            .post(self.url(&format!("/jobs/{job_id}/attempts")))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path` as `token`.
    pub async fn get(&self, token: &str, path: &str) -> Response {
        self.client.get(self.url(path)).bearer_auth(token).send().await.unwrap()
    }

    /// Creates a `summarize` job as alice and returns its body.
    pub async fn create_job(&self, key: &str, provider: Option<&str>) -> Value {
        let mut body = serde_json::json!({"task": "summarize", "input": {"text": "one two three"}});
        if let Some(provider) = provider {
            body["provider"] = provider.into();
        }
        let response = self.post_job(key, &body).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A new admin key of `owner`: its token.
    pub async fn admin_of(&self, owner: &str) -> String {
        let owner = onejob::domain::OwnerId::parse(owner).unwrap();
        onejob::keys::create_key_with_role(&self.store, &owner, onejob::domain::KeyRole::Admin).await.unwrap().1
    }

    /// The simulator's request log of attempts (qualification calls left
    /// out), by attempt id: how often each arrived.
    pub async fn simulator_log(&self) -> std::collections::HashMap<String, Value> {
        let url = format!("{}/v1/requests", self.simulator.as_ref().expect("a live app").url());
        let log = ok_json(self.client.get(url).send().await.unwrap()).await;
        log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| !r["id"].as_str().unwrap().starts_with("qualification-"))
            .map(|r| (r["id"].as_str().unwrap().to_owned(), r.clone()))
            .collect()
    }

    /// Records a passing qualification of `provider` for `summarize`'s
    /// current contract, as if one had run.
    pub async fn qualify(&self, provider: &str) {
        let hash = self.catalog.contract_hash("summarize", provider).expect("a configured provider");
        let report = serde_json::json!({"summary": "recorded by the test"});
        self.store().insert_qualification(provider, "summarize", &hash, true, &report).await.unwrap();
    }

    /// Reads job `id` as alice, then long-polls it (with its ETag) until
    /// `done` holds of it; fails after 30 s.
    pub async fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut path = format!("/jobs/{id}");
        let mut etag: Option<String> = None;
        loop {
            let mut request = self.client.get(self.url(&path)).bearer_auth(&self.alice);
            if let Some(tag) = &etag {
                request = request.header("if-none-match", tag);
            }
            let response = request.send().await.unwrap();
            if response.status() == StatusCode::OK {
                etag = response.headers().get("etag").map(|v| v.to_str().unwrap().to_owned());
                let job: Value = response.json().await.unwrap();
                if done(&job) {
                    return job;
                }
                assert!(std::time::Instant::now() < deadline, "job never reached: {what}; last seen {job:#}");
            } else {
                assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
                assert!(std::time::Instant::now() < deadline, "job never reached: {what}");
                // A finished job is answered at once, changed or not: pace
                // the polls for the attempts that may still finish under it.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            path = format!("/jobs/{id}?wait=2");
        }
    }
}

/// Short timings for tests: simulated latencies and deadlines in hundreds of
/// milliseconds, a worker and reconciler that look often.
pub fn fast_timings(settings: &mut Settings) {
    let w = &mut settings.worker;
    w.poll_interval = Duration::from_millis(50);
    w.lease_margin = Duration::from_millis(500);
    w.reaper_interval = Duration::from_millis(100);
    w.reconcile_interval = Duration::from_millis(50);
    w.reconcile_backoff = Duration::from_millis(100);
    w.reconcile_backoff_max = Duration::from_millis(400);
    w.shutdown_grace = Duration::from_millis(5_000);
    w.long_poll_interval = Duration::from_millis(200);
    let p = &mut settings.providers;
    for provider in p.values_mut() {
        provider.absence_grace = Duration::from_millis(200);
    }
    p.get_mut("sim-slow").unwrap().latency = Duration::from_millis(1_500);
    p.get_mut("sim-slow").unwrap().timeout = Duration::from_millis(5_000);
    // Qualifying sim-slow would hold every live test for its latency; a test
    // that falls over to it qualifies it with `TestApp::qualify`.
    p.get_mut("sim-slow").unwrap().qualify_on_start = false;
    p.get_mut("sim-hang").unwrap().timeout = Duration::from_millis(300);
    p.get_mut("sim-hang").unwrap().hang = Some(Duration::from_millis(1_200));
    p.get_mut("sim-late").unwrap().timeout = Duration::from_millis(300);
    p.get_mut("sim-late").unwrap().late = Some(Duration::from_millis(900));
    p.get_mut("sim-image").unwrap().latency = Duration::from_millis(200);
    settings.tasks.get_mut("summarize").unwrap().retry_backoff = Duration::from_millis(50);
    let hooks = &mut settings.webhooks;
    hooks.poll_interval = Duration::from_millis(50);
    hooks.retry_base = Duration::from_millis(100);
    hooks.retry_max = Duration::from_millis(400);
}

/// A provider from TOML, for tests that add their own.
pub fn provider(toml_text: &str) -> onejob::config::ProviderSettings {
    toml::from_str(toml_text).expect("a provider's settings")
}

/// Reads the JSON of an answer that must have succeeded (2xx): an error's
/// body read as data would give `null`s that compare equal to other `null`s.
pub async fn ok_json(response: Response) -> Value {
    let status = response.status();
    let body = response.text().await.unwrap();
    assert!(status.is_success(), "expected a success, got {status}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Reads a problem answer and checks its status, content type and type.
pub async fn expect_problem(response: Response, status: StatusCode, kind: &str) -> Value {
    let answered = response.status();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    assert_eq!(answered, status, "expected {status} {kind}: {text}");
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(body["type"], kind, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    body
}

/// The `onejob` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_onejob");

/// Starts `onejob serve` as a child process on a free port, with `config`
/// if given; returns the child (killed when dropped) and its address.
pub async fn spawn_server(database_url: &str, config: Option<&std::path::Path>) -> (tokio::process::Child, String) {
    spawn_server_with(database_url, config, &[]).await
}

/// [`spawn_server`] with extra arguments for `serve`.
pub async fn spawn_server_with(
    database_url: &str,
    config: Option<&std::path::Path>,
    extra: &[&str],
) -> (tokio::process::Child, String) {
    let (child, address, _log) = spawn_server_logged(database_url, config, extra, &[]).await;
    (child, address)
}

/// [`spawn_server_with`] with environment variables `env` set, and the
/// lines of its log after it started listening.
pub async fn spawn_server_logged(
    database_url: &str,
    config: Option<&std::path::Path>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut command = tokio::process::Command::new(BIN);
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    // `--migrate` here means the server's own default: it migrates at start.
    if !extra.contains(&"--migrate") {
        command.arg("--no-migrate");
    }
    command.args(extra.iter().filter(|arg| **arg != "--migrate"));
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    command.envs(env.iter().copied());
    let mut child = command
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("serve exited before listening");
    })
    .await
    .expect("serve starts listening within 30 s");
    // Keep draining its log so that it never blocks on a full pipe.
    let (sender, log) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = sender.send(line);
        }
    });
    (child, address, log)
}

/// Claims every pending attempt of the test's database by hand (for
/// API-only apps, which run no worker), so that they run.
pub async fn claim_all(app: &TestApp) {
    let lease = std::time::Duration::from_secs(60);
    let by_provider =
        ["sim-fast", "sim-slow", "sim-hang", "sim-late", "sim-flaky", "sim-bad-json"].map(|p| (p.to_owned(), lease));
    let leases = onejob::store::ClaimRules::new(lease, by_provider.to_vec());
    app.store().claim_attempts("test-worker", 100, &leases).await.unwrap();
}

/// Runs the SDK check `script` (under `tests/`) in the Python environment
/// `.ci/run` sets up, with `package` installed, against the simulator at
/// `url`: it must print "ok".
pub async fn sdk_check(script: &str, package: &str, url: &str) {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/schemathesis-venv/bin/python");
    let output = tokio::process::Command::new(&python)
        .arg(root.join("tests").join(script))
        .arg(url)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|error| {
            panic!(
                "{} cannot run ({error}): .ci/run installs it, or python3 -m venv target/schemathesis-venv && \
                 target/schemathesis-venv/bin/pip install {package}",
                python.display()
            )
        });
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && stdout.trim() == "ok", "the SDK's checks failed:\n{stdout}\n{stderr}");
}
