//! The `onejob` binary as an operator runs it: `migrate`, `keys create`,
//! `serve`, then the core behaviours over real HTTP against that process;
//! the first run's operator key, printed once on standard error, and made at
//! most once by replicas starting together on an empty database.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::processes::{eventually, set};
use crate::common::{BIN, Backend};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Command;

async fn onejob(database_url: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).env("DATABASE_URL", database_url).output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_keys_own_max_in_flight_is_set_at_creation_listed_changed_and_cleared() {
    let database_url = crate::common::sqlite::fresh_database();
    assert!(onejob(&database_url, &["migrate"]).await.0);
    let (ok, stdout, stderr) =
        onejob(&database_url, &["keys", "create", "--owner", "carol", "--max-in-flight", "3"]).await;
    assert!(ok, "{stderr}");
    let id = stdout.split_whitespace().nth(4).unwrap().to_owned();
    let listed = |text: &str| text.lines().find(|line| line.starts_with(&id)).unwrap().to_owned();
    assert!(
        listed(&onejob(&database_url, &["keys", "list"]).await.1).ends_with(" max_in_flight 3"),
        "shown by keys list"
    );
    assert!(onejob(&database_url, &["keys", "set-max-in-flight", &id, "7"]).await.0);
    assert!(listed(&onejob(&database_url, &["keys", "list"]).await.1).ends_with(" max_in_flight 7"));
    assert!(onejob(&database_url, &["keys", "set-max-in-flight", &id, "none"]).await.0);
    assert!(!listed(&onejob(&database_url, &["keys", "list"]).await.1).contains("max_in_flight"));
    let (ok, _, stderr) = onejob(&database_url, &["keys", "set-max-in-flight", &id, "0"]).await;
    assert!(!ok && stderr.contains("at least 1"), "{stderr}");
    let (ok, _, _) = onejob(&database_url, &["keys", "create", "--owner", "carol", "--max-in-flight", "0"]).await;
    assert!(!ok, "a limit of 0 is refused at creation too");
    let (ok, _, stderr) =
        onejob(&database_url, &["keys", "set-max-in-flight", &uuid::Uuid::now_v7().to_string(), "2"]).await;
    assert!(!ok && stderr.contains("no live API key"), "{stderr}");
}

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
        polled = client
            .get(url(&format!("/jobs/{id}?wait=5")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
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
    // Every section is shown, with its defaults, and the header says where
    // the environment variables are listed.
    let table: toml::Table = text.parse().unwrap();
    for section in ["server", "database", "worker", "simulator", "tasks", "providers", "webhooks", "retention"] {
        assert!(table.contains_key(section), "the printed default has no [{section}]");
    }
    let (webhooks, retention) =
        (onejob::config::WebhookSettings::default(), onejob::config::RetentionSettings::default());
    assert_eq!(format!("{:?}", settings.webhooks), format!("{webhooks:?}"), "the printed [webhooks] is the default");
    assert_eq!(format!("{:?}", settings.retention), format!("{retention:?}"), "the printed [retention] is the default");
    assert!(text.lines().take(5).any(|line| line.contains("docs/configuration.md")), "{text}");
    assert!(settings.tasks.contains_key("summarize") && settings.tasks["chat"].stream);
    assert!(settings.tasks["image"].files.is_some());
    assert_eq!(settings.providers.len(), 8);
}

/// Which stream of a process a line came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

/// What a `serve` that made no first-run key logs.
const NO_FIRST_RUN_KEY: &str = "no first-run key";

/// A `onejob` process whose standard output and error are kept, line by line.
struct Served {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<(Stream, String)>>>,
}

impl Served {
    fn start(mut command: Command) -> Self {
        let mut child =
            command.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn().expect("onejob starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        keep_lines(child.stdout.take().unwrap(), Stream::Out, &lines);
        keep_lines(child.stderr.take().unwrap(), Stream::Err, &lines);
        Self { child, lines }
    }

    fn lines(&self) -> Vec<(Stream, String)> {
        self.lines.lock().unwrap().clone()
    }

    /// The address it said it listens on.
    fn address(&self) -> Option<String> {
        let lines = self.lines();
        let found = lines.iter().find_map(|(_, line)| line.split("listening on http://").nth(1).map(str::to_owned));
        found.map(|rest| rest.split_whitespace().next().unwrap().to_owned())
    }

    /// The lines of `stream` that are an API token alone.
    fn tokens(&self, stream: Stream) -> Vec<String> {
        let lines = self.lines().into_iter().filter(|(s, _)| *s == stream);
        lines.map(|(_, line)| line.trim().to_owned()).filter(|line| onejob::keys::looks_like_token(line)).collect()
    }

    /// Whether it has said whether it made the first-run key: it printed a
    /// token, or logged that it made none.
    fn decided(&self) -> bool {
        !self.tokens(Stream::Err).is_empty()
            || !self.tokens(Stream::Out).is_empty()
            || self.lines().iter().any(|(_, line)| line.contains(NO_FIRST_RUN_KEY))
    }

    /// Waits until `check` holds of it; fails after 60 s, showing its output.
    async fn wait_until(&self, what: &str, check: impl Fn(&Served) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !check(self) {
            assert!(std::time::Instant::now() < deadline, "serve never got to {what}; it wrote {:#?}", self.lines());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn keep_lines(
    reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    stream: Stream,
    lines: &Arc<Mutex<Vec<(Stream, String)>>>,
) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let lines = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(reader).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().unwrap().push((stream, line));
        }
    });
}

#[tokio::test]
async fn a_first_run_with_nothing_configured_serves_on_sqlite_and_prints_a_key_once() {
    let dir = std::env::temp_dir().join(format!("onejob-first-run-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let start = || {
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(&dir)
            .env_remove("DATABASE_URL")
            .env_remove("ONEJOB_CONFIG");
        Served::start(command)
    };

    let mut first = start();
    first
        .wait_until("printing the first-run key", |s| s.address().is_some() && !s.tokens(Stream::Err).is_empty())
        .await;
    let address = first.address().unwrap();
    let token = first.tokens(Stream::Err).remove(0);
    let printed: Vec<String> = first.lines().into_iter().filter(|(s, _)| *s == Stream::Err).map(|(_, l)| l).collect();
    let printed = printed.join("\n");
    assert!(printed.contains("owner \"demo\"") && printed.contains("shown once"), "{printed}");
    assert!(
        first.lines().iter().all(|(s, line)| *s == Stream::Err || !line.contains(&token)),
        "the key is on standard error only"
    );
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
        job = client
            .get(format!("http://{address}/jobs/{id}?wait=5"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["state"] == "succeeded" {
            break;
        }
    }
    assert_eq!(job["result"], json!({"summary": "one job per intent", "word_count": 4}));
    first.child.kill().await.unwrap();

    // The second run finds a key and prints none; the job is still there.
    let mut second = start();
    second.wait_until("its first-run decision", |s| s.address().is_some() && s.decided()).await;
    assert!(second.tokens(Stream::Err).is_empty() && second.tokens(Stream::Out).is_empty(), "no second key");
    let address = second.address().unwrap();
    let again: Value = client
        .get(format!("http://{address}/jobs/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["state"], "succeeded");
    second.child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

on_both_backends!(replicas_starting_together_on_an_empty_database_make_and_print_one_first_run_key);

/// A lock that every replica's first-run check must wait for, held by the
/// test until all of them are at it: the replicas then go on together, as
/// when they start at the same moment, without hoping for the timing.
enum FirstRunGate {
    /// Postgres: `api_keys` locked, so that reading it waits.
    Postgres(sqlx::PgConnection),
    /// SQLite: the write lock taken (in WAL mode reads go on, writes wait).
    Sqlite(sqlx::SqliteConnection),
}

impl FirstRunGate {
    async fn close(backend: Backend, database_url: &str) -> Self {
        use sqlx::Connection;
        match backend {
            Backend::Postgres => {
                let mut connection = sqlx::PgConnection::connect(database_url).await.unwrap();
                sqlx::query("begin").execute(&mut connection).await.unwrap();
                sqlx::query("lock table api_keys in access exclusive mode").execute(&mut connection).await.unwrap();
                FirstRunGate::Postgres(connection)
            }
            Backend::Sqlite => {
                let mut connection = sqlx::SqliteConnection::connect(database_url).await.unwrap();
                sqlx::query("begin immediate").execute(&mut connection).await.unwrap();
                FirstRunGate::Sqlite(connection)
            }
        }
    }

    /// Waits until every one of `replicas` is held at the gate.
    async fn wait_for(&self, replicas: &[Served], db: &sqlx::AnyPool) {
        match self {
            FirstRunGate::Postgres(_) => {
                let waiting = "select count(*) from pg_stat_activity
                               where datname = current_database() and application_name = 'onejob' and wait_event_type = 'Lock'";
                eventually("every replica waiting at its first-run check", Duration::from_secs(60), || async {
                    let count: i64 = sqlx::query_scalar(waiting).fetch_one(db).await.unwrap();
                    count >= i64::try_from(replicas.len()).unwrap()
                })
                .await;
            }
            // Its check follows at once: a read, which goes on, then the
            // write, which waits.
            FirstRunGate::Sqlite(_) => {
                for replica in replicas {
                    replica.wait_until("listening", |s| s.address().is_some()).await;
                }
            }
        }
    }

    async fn open(self) {
        match self {
            FirstRunGate::Postgres(mut connection) => {
                sqlx::query("rollback").execute(&mut connection).await.map(drop).unwrap()
            }
            FirstRunGate::Sqlite(mut connection) => {
                sqlx::query("rollback").execute(&mut connection).await.map(drop).unwrap()
            }
        }
    }
}

async fn replicas_starting_together_on_an_empty_database_make_and_print_one_first_run_key(backend: Backend) {
    let database_url = backend.fresh_database().await;
    let store = crate::common::open_store(&database_url);
    store.migrate().await.unwrap();
    let db = crate::common::any_pool(&database_url).await;
    // Writers and statements may wait at the gate for as long as the test holds it.
    let mut table: toml::Table = onejob::config::DEFAULT_CONFIG.parse().unwrap();
    set(&mut table, &["database", "sqlite_busy_timeout_ms"], 60_000.into());
    set(&mut table, &["database", "statement_timeout_ms"], 60_000.into());
    let config = std::env::temp_dir().join(format!("onejob-first-run-race-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();

    let gate = FirstRunGate::close(backend, &database_url).await;
    let replicas: Vec<Served> = (0..4)
        .map(|_| {
            let mut command = Command::new(BIN);
            command.args(["serve", "--listen", "127.0.0.1:0", "--no-migrate", "--no-worker", "--config"]).arg(&config);
            command.env("DATABASE_URL", &database_url).env("RUST_LOG", "info");
            Served::start(command)
        })
        .collect();
    gate.wait_for(&replicas, &db).await;
    gate.open().await;
    for replica in &replicas {
        replica.wait_until("its first-run decision", Served::decided).await;
    }

    let admins: i64 = sqlx::query_scalar("select count(*) from api_keys").fetch_one(&db).await.unwrap();
    assert_eq!(admins, 1, "one first-run key in the database, whatever the replicas printed");
    assert!(replicas.iter().all(|r| r.tokens(Stream::Out).is_empty()), "no key on standard output");
    let printed: Vec<String> = replicas.iter().flat_map(|r| r.tokens(Stream::Err)).collect();
    assert_eq!(printed.len(), 1, "exactly one replica printed a key: {printed:?}");
    let key = store
        .find_api_key(&onejob::keys::hash_token(&printed[0]))
        .await
        .unwrap()
        .expect("the printed key is the stored one");
    assert_eq!((key.owner.as_str(), key.role), ("demo", onejob::domain::KeyRole::Operator), "an operator");
    let _ = std::fs::remove_file(config);
}

#[tokio::test]
async fn serve_refuses_a_non_loopback_address_without_an_explicit_flag() {
    let out = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env("DATABASE_URL", crate::common::sqlite::fresh_database())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allow-remote"), "{stderr}");
}

#[tokio::test]
async fn onejob_without_a_command_takes_the_flags_of_serve() {
    let database_url = crate::common::sqlite::fresh_database();
    let mut command = Command::new(BIN);
    command.args(["--listen", "127.0.0.1:0", "--no-worker"]).env("DATABASE_URL", &database_url);
    let served = Served::start(command);
    served.wait_until("listening", |s| s.address().is_some()).await;
    let address = served.address().unwrap();
    assert!(!address.ends_with(":8080"), "it listens where --listen says: {address}");
    let ready = reqwest::get(format!("http://{address}/readyz")).await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    let out = Command::new(BIN)
        .args(["--listen", "0.0.0.0:0"])
        .env("DATABASE_URL", crate::common::sqlite::fresh_database())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--allow-remote"), "serve's checks hold too: {stderr}");

    // Serve's flags are not taken silently before another command.
    let out = Command::new(BIN).args(["--listen", "127.0.0.1:0", "keys", "list"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("serve's flags"), "{stderr}");
}

/// A command that uses the database, run where no server ever ran: it says
/// what to do, once, and leaves no empty database behind.
async fn keys_create_on_a_database_never_migrated_says_to_migrate_once_and_makes_no_file() {
    let dir = std::env::temp_dir().join(format!("onejob-no-db-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(BIN)
        .args(["keys", "create", "--owner", "alice"])
        .current_dir(&dir)
        .env_remove("DATABASE_URL")
        .env_remove("ONEJOB_CONFIG")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.matches("onejob migrate").count(), 1, "said once: {stderr}");
    assert!(stderr.contains("no database at"), "{stderr}");
    assert!(!dir.join("onejob.db").exists(), "no empty database file is made");

    // A database that exists but was never migrated, on either backend.
    let sqlite = crate::common::sqlite::fresh_database();
    std::fs::File::create(sqlite.trim_start_matches("sqlite://")).unwrap();
    for database_url in [sqlite, crate::common::postgres::empty_database().await] {
        let (ok, _, stderr) = onejob(&database_url, &["keys", "create", "--owner", "alice"]).await;
        assert!(!ok);
        assert_eq!(stderr.matches("onejob migrate").count(), 1, "said once: {stderr}");
        assert!(stderr.contains("none of onejob's tables") && !stderr.contains("no such table"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A server waits at start only for a database that may come: one that
/// does not exist (Postgres) or a file that cannot be opened (SQLite) stops
/// it at once, saying why.
async fn serve_exits_at_start_on_a_database_that_can_never_be_used() {
    let url = crate::common::postgres::fresh_database_direct().await;
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let missing = format!("{}/no_such_database?{query}", base.rsplit_once('/').unwrap().0);
    for (database_url, says) in [(missing, "does not exist"), ("sqlite:///no/such/directory/onejob.db".to_owned(), "")]
    {
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(BIN)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .env("DATABASE_URL", &database_url)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("serve exits instead of waiting")
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{database_url}: {stderr}");
        assert!(!stderr.contains("waiting for it"), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}

on_postgres!(
    direct: serve_exits_at_start_on_a_database_that_can_never_be_used
);

on_postgres!(
    the_binary_serves_the_core_contract_after_migrate_and_keys_create,
    keys_create_on_a_database_never_migrated_says_to_migrate_once_and_makes_no_file
);

/// `migrate` and `providers list` say which configuration they read, and
/// `providers list` warns when the database has qualifications of
/// providers or tasks that configuration lacks (most likely, it is not the
/// server's).
#[tokio::test]
async fn providers_list_says_which_configuration_it_reads_and_warns_of_names_it_lacks() {
    let database_url = crate::common::sqlite::fresh_database();
    let (ok, _, stderr) = onejob(&database_url, &["migrate"]).await;
    assert!(ok && stderr.contains("onejob: reading the built-in configuration"), "migrate says it too: {stderr}");
    let store = crate::common::open_store(&database_url);
    let report = json!({"summary": "recorded by the test"});
    store.insert_qualification("sim-fast", "summarize", &[0; 32], true, &report).await.unwrap();
    let (ok, stdout, stderr) = onejob(&database_url, &["providers", "list"]).await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("reading the built-in configuration") && !stderr.contains("warning"), "{stderr}");
    assert_eq!(stdout.lines().count(), 8 * 3, "each of the built-in providers for each task: {stdout}");

    store.insert_qualification("gpt", "translate", &[0; 32], true, &report).await.unwrap();
    let (ok, _, stderr) = onejob(&database_url, &["providers", "list"]).await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("warning: the database knows providers (gpt) and tasks (translate)"), "{stderr}");

    let config = std::env::temp_dir().join(format!("onejob-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&config, onejob::config::DEFAULT_CONFIG).unwrap();
    let (ok, _, stderr) = onejob(&database_url, &["providers", "list", "--config", config.to_str().unwrap()]).await;
    let _ = std::fs::remove_file(&config);
    assert!(ok && stderr.contains(&format!("reading the configuration in {}", config.display())), "{stderr}");
}
