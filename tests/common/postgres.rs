//! A real Postgres for the tests. `TEST_DATABASE_URL` names a server to use;
//! without it, a throwaway cluster is made from the local PostgreSQL binaries
//! (run as the `postgres` user when the tests run as root), listening only on
//! a Unix socket, and shared by every test process through a file lock.
//! Each test gets a database of its own, copied from a migrated template.
//! When no Postgres can be had, the tests fail with a message saying why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

const CLUSTER_DIR: &str = "onejob-test-postgres";
const TEST_DB_PREFIX: &str = "onejob_t_";

/// Where the test server is and which template to copy.
struct Server {
    /// A URL without a database name at the end: append one.
    url_prefix: String,
    /// Query string to append after the database name (socket location).
    url_suffix: String,
    template: String,
    throwaway: bool,
    /// A Citus cluster (`ONEJOB_TEST_CITUS`): databases are made on every node.
    citus: Option<super::citus::Cluster>,
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

impl Server {
    fn url(&self, database: &str) -> String {
        format!("{}{}{}", self.url_prefix, database, self.url_suffix)
    }
}

fn fail(message: impl std::fmt::Display) -> ! {
    panic!(
        "no Postgres for the tests: {message}\n\
         Set TEST_DATABASE_URL=postgres://user:password@host/postgres to use a server you run, \
         or install the PostgreSQL server binaries (initdb, pg_ctl) so that the tests start their own."
    )
}

fn bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BINDIR") {
        return PathBuf::from(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| fail("initdb was not found (tried PG_BINDIR, pg_config, /usr/lib/postgresql/*/bin)"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { geteuid() == 0 }
}

unsafe extern "C" {
    fn geteuid() -> u32;
}

/// Runs a PostgreSQL binary, as `postgres` when we are root (initdb refuses root).
fn run_pg(bin: &Path, args: &[&str]) -> std::process::Output {
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    command.args(args);
    command.output().unwrap_or_else(|e| fail(format!("cannot run {}: {e}", bin.display())))
}

fn chown_to_postgres(path: &Path) {
    if is_root() {
        let status = Command::new("chown").arg("postgres:postgres").arg(path).status();
        if !status.is_ok_and(|s| s.success()) {
            fail(format!("cannot chown {} to postgres (is there a postgres user?)", path.display()));
        }
    }
}

/// Makes and starts the throwaway cluster if it is not running yet. Called
/// with the cross-process lock held.
fn ensure_cluster(base: &Path) {
    let bin = bindir();
    let data = base.join("data");
    if !data.join("PG_VERSION").exists() {
        std::fs::create_dir_all(&data).unwrap_or_else(|e| fail(format!("cannot create {}: {e}", data.display())));
        chown_to_postgres(base);
        chown_to_postgres(&data);
        let out = run_pg(
            &bin.join("initdb"),
            &["-D", data.to_str().unwrap(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
        );
        if !out.status.success() {
            fail(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    let status = run_pg(&bin.join("pg_ctl"), &["-D", data.to_str().unwrap(), "status"]);
    if status.status.success() {
        return;
    }
    // pg_stat_statements keeps 50,000 statements rather than 5,000: a full run's
    // hundreds of databases fill 5,000, and the least used entries, a
    // statement-count test's among them, would be dropped before it reads them.
    let options = format!(
        "-c listen_addresses='' -c unix_socket_directories='{}' -c max_connections=400 -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=128MB \
         -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.max=50000",
        base.display()
    );
    let log = base.join("server.log");
    let out = run_pg(
        &bin.join("pg_ctl"),
        &["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-w", "-t", "60", "-o", &options, "start"],
    );
    if !out.status.success() {
        let log_text = std::fs::read_to_string(&log).unwrap_or_default();
        fail(format!("pg_ctl start failed: {}\n{log_text}", String::from_utf8_lossy(&out.stderr)));
    }
}

fn migrations_hash() -> String {
    let mut hasher = Sha256::new();
    for migration in onejob::store::postgres::MIGRATOR.iter() {
        hasher.update(migration.version.to_le_bytes());
        hasher.update(&*migration.checksum);
    }
    hex::encode(&hasher.finalize()[..6])
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

async fn admin(server: &Server) -> PgConnection {
    let url = server.url("postgres");
    PgConnection::connect(&url).await.unwrap_or_else(|e| fail(format!("cannot connect to {url}: {e}")))
}

async fn prepare_template(server: &Server) {
    if let Some(cluster) = &server.citus {
        // Databases of test processes that are gone, on every node.
        for name in cluster.databases(TEST_DB_PREFIX).await {
            let pid = name.trim_start_matches(TEST_DB_PREFIX).split('_').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|pid| !process_alive(pid)) {
                cluster.drop_leftover(&name).await;
            }
        }
        if !cluster.has_template(&server.template).await {
            cluster.build_template(&server.template).await;
        }
        return;
    }
    let mut admin = admin(server).await;
    if server.throwaway {
        // Databases of test processes that are gone: nobody will use them again.
        let names: Vec<String> =
            sqlx::query_scalar("select datname from pg_database where datname like 'onejob\\_t\\_%'")
                .fetch_all(&mut admin)
                .await
                .unwrap();
        for name in names {
            let pid = name.trim_start_matches(TEST_DB_PREFIX).split('_').next().and_then(|p| p.parse().ok());
            if pid.is_some_and(|pid| !process_alive(pid)) {
                let _ =
                    sqlx::query(&format!(r#"drop database if exists "{name}" with (force)"#)).execute(&mut admin).await;
            }
        }
    }
    let exists: bool = sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
        .bind(&server.template)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    if exists {
        return;
    }
    let building = format!("{}_building_{}", server.template, std::process::id());
    sqlx::query(&format!(r#"drop database if exists "{building}""#)).execute(&mut admin).await.unwrap();
    sqlx::query(&format!(r#"create database "{building}""#)).execute(&mut admin).await.unwrap();
    {
        let mut conn = PgConnection::connect(&server.url(&building)).await.unwrap();
        onejob::store::postgres::MIGRATOR.run(&mut conn).await.expect("migrations apply to an empty database");
        // Statement statistics, for the tests that count round trips.
        let _ = sqlx::query("create extension if not exists pg_stat_statements").execute(&mut conn).await;
        conn.close().await.unwrap();
    }
    // Renaming publishes the finished template in one step.
    sqlx::query(&format!(r#"alter database "{building}" rename to "{}""#, server.template))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
}

async fn server() -> &'static Server {
    SERVER
        .get_or_init(|| async {
            let template = format!("onejob_tpl_{}", migrations_hash());
            let citus = super::citus::Cluster::from_env();
            let (server, lock_path) = match std::env::var("TEST_DATABASE_URL") {
                _ if let Some(cluster) = citus => {
                    let lock = std::env::temp_dir().join("onejob-test-citus.lock");
                    let url_prefix = cluster.coordinator().to_owned();
                    let server = Server {
                        url_prefix,
                        url_suffix: String::new(),
                        template,
                        throwaway: false,
                        citus: Some(cluster),
                    };
                    (server, lock)
                }
                Ok(url) if !url.is_empty() => {
                    let (prefix, suffix) = split_database(&url);
                    let lock = std::env::temp_dir().join("onejob-test-external.lock");
                    (Server { url_prefix: prefix, url_suffix: suffix, template, throwaway: false, citus: None }, lock)
                }
                _ => {
                    let base = std::env::temp_dir().join(CLUSTER_DIR);
                    let server = Server {
                        url_prefix: "postgres://postgres@localhost/".into(),
                        url_suffix: format!("?host={}", base.display()),
                        template,
                        throwaway: true,
                        citus: None,
                    };
                    (server, std::env::temp_dir().join(format!("{CLUSTER_DIR}.lock")))
                }
            };
            let lock = cross_process_lock(&lock_path);
            if server.throwaway {
                let base = std::env::temp_dir().join(CLUSTER_DIR);
                ensure_cluster(&base);
            }
            prepare_template(&server).await;
            lock.unlock().ok();
            server
        })
        .await
}

/// Takes the file lock the test processes share `path` by.
fn cross_process_lock(path: &Path) -> std::fs::File {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| fail(format!("cannot open {}: {e}", path.display())));
    lock.lock().unwrap_or_else(|e| fail(format!("cannot lock {}: {e}", path.display())));
    lock
}

/// Splits `postgres://u@h/db?x=y` into `postgres://u@h/` and `?x=y`.
fn split_database(url: &str) -> (String, String) {
    let (before_query, query) = match url.find('?') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let scheme_end = before_query.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = before_query[scheme_end..].find('/').map(|i| i + scheme_end);
    let prefix = match path_start {
        Some(i) => &before_query[..=i],
        None => return (format!("{before_query}/"), query.to_owned()),
    };
    (prefix.to_owned(), query.to_owned())
}

/// Forgets the statement counts (pg_stat_statements) of the database `pool`
/// is on, and of no other: tests in other databases keep counting.
pub async fn reset_statement_counts(pool: &sqlx::PgPool) {
    let available: bool = sqlx::query_scalar(
        "select exists (select 1 from pg_extension where extname = 'pg_stat_statements') \
         and current_setting('shared_preload_libraries') like '%pg_stat_statements%'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(available, "counting statements needs pg_stat_statements preloaded on the test server");
    sqlx::query(
        "select pg_stat_statements_reset(0, (select oid from pg_database where datname = current_database()), 0)",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Each statement run in the database `pool` is on since the last reset,
/// with how often (the counting itself left out).
pub async fn statement_counts(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "select query, calls from pg_stat_statements s join pg_database d on d.oid = s.dbid \
         where d.datname = current_database() and query not ilike '%pg_stat_statements%' order by calls desc",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A fresh, migrated database of its own; returns its URL. With
/// `ONEJOB_TEST_PGBOUNCER=session`, the URL reaches it through a shared
/// PgBouncer in session mode (see [`Bouncer`]), so that any suite can be
/// run that way.
pub async fn fresh_database() -> String {
    let direct = fresh_database_direct().await;
    match std::env::var("ONEJOB_TEST_PGBOUNCER").as_deref() {
        Ok("session") => shared_bouncer().await.url(&direct),
        Ok(other) if !other.is_empty() => fail(format!("ONEJOB_TEST_PGBOUNCER={other}: only `session` is supported")),
        _ => direct,
    }
}

/// A fresh, migrated database reached directly.
pub async fn fresh_database_direct() -> String {
    let server = server().await;
    let name = format!(
        "{TEST_DB_PREFIX}{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::now_v7().simple().to_string()[24..]
    );
    if let Some(cluster) = &server.citus {
        return cluster.copy_template(&server.template, &name).await;
    }
    let mut admin = admin(server).await;
    sqlx::query(&format!(r#"create database "{name}" template "{}""#, server.template))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| fail(format!("cannot create a test database: {e}")));
    admin.close().await.ok();
    server.url(&name)
}

/// An empty database (no migrations), for testing `onejob migrate`.
pub async fn empty_database() -> String {
    let server = server().await;
    let name = format!("{TEST_DB_PREFIX}{}_{}_empty", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut admin = admin(server).await;
    sqlx::query(&format!(r#"create database "{name}""#)).execute(&mut admin).await.unwrap();
    admin.close().await.ok();
    server.url(&name)
}

/// A Postgres cluster of one test's own, for tests that stop and start the
/// database (the shared cluster must never be stopped: other test processes
/// use it). It listens only on a Unix socket in its own directory, and is
/// stopped and removed when dropped.
pub struct PrivateCluster {
    base: PathBuf,
    bin: PathBuf,
}

impl PrivateCluster {
    /// Makes a cluster in a new temporary directory and starts it.
    pub async fn start() -> Self {
        let base =
            std::env::temp_dir().join(format!("onejob-private-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]));
        let data = base.join("data");
        std::fs::create_dir_all(&data).unwrap_or_else(|e| fail(format!("cannot create {}: {e}", data.display())));
        chown_to_postgres(&base);
        chown_to_postgres(&data);
        let cluster = Self { base, bin: bindir() };
        let data = cluster.data();
        let out = cluster
            .run(&["initdb", "-D", &data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .await;
        if !out.status.success() {
            fail(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        cluster.start_again().await;
        cluster
    }

    fn data(&self) -> String {
        self.base.join("data").display().to_string()
    }

    /// Runs a PostgreSQL binary off the async runtime's threads.
    async fn run(&self, args: &[&str]) -> std::process::Output {
        let bin = self.bin.join(args[0]);
        let args: Vec<String> = args[1..].iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || run_pg(&bin, &args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap()
    }

    /// Starts the stopped cluster and waits until it accepts connections.
    pub async fn start_again(&self) {
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c max_connections=100 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            self.base.display()
        );
        let log = self.base.join("server.log").display().to_string();
        let out =
            self.run(&["pg_ctl", "-D", &self.data(), "-l", &log, "-w", "-t", "60", "-o", &options, "start"]).await;
        if !out.status.success() {
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            fail(format!("pg_ctl start failed: {}\n{log_text}", String::from_utf8_lossy(&out.stderr)));
        }
    }

    /// Stops the cluster as an operator would (`pg_ctl stop -m fast`: open
    /// sessions are terminated, then the server shuts down).
    pub async fn stop(&self) {
        let out = self.run(&["pg_ctl", "-D", &self.data(), "-m", "fast", "-w", "stop"]).await;
        assert!(out.status.success(), "pg_ctl stop failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@localhost/{database}?host={}", self.base.display())
    }

    /// Creates an empty database; returns its URL.
    pub async fn create_database(&self, name: &str) -> String {
        let mut admin = PgConnection::connect(&self.url("postgres")).await.expect("connect to the private cluster");
        sqlx::query(&format!(r#"create database "{name}""#)).execute(&mut admin).await.unwrap();
        admin.close().await.ok();
        self.url(name)
    }

    /// Creates an empty database whose files are all in `dir` (an empty
    /// directory, given to the `postgres` user), a tablespace of its own:
    /// its tables, indexes and temporary files live there, while the
    /// write-ahead log and the cluster's shared files stay in the data
    /// directory. Returns its URL.
    pub async fn create_database_in(&self, name: &str, dir: &Path) -> String {
        chown_to_postgres(dir);
        let mut admin = PgConnection::connect(&self.url("postgres")).await.expect("connect to the private cluster");
        let space = format!("{name}_space");
        let location = dir.display().to_string().replace('\'', "''");
        sqlx::query(&format!(r#"create tablespace "{space}" location '{location}'"#))
            .execute(&mut admin)
            .await
            .unwrap();
        sqlx::query(&format!(r#"create database "{name}" tablespace "{space}""#)).execute(&mut admin).await.unwrap();
        admin.close().await.ok();
        self.url(name)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = run_pg(&self.bin.join("pg_ctl"), &["-D", &data, "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A PgBouncer (Debian's `pgbouncer`) in front of the throwaway cluster,
/// listening on a Unix socket in a directory of its own, configured as a
/// new operator would: stock settings but for the pool mode. A private one
/// has no `ignore_startup_parameters` (it refuses any startup parameter it
/// does not know); the shared one the suites run through ignores
/// `extra_float_digits`, for the tests' own sqlx connections. Run as
/// `postgres` when the tests run as root (it refuses root).
pub struct Bouncer {
    base: PathBuf,
    owned: bool,
}

const BOUNCER_PORT: u16 = 6432;
static SHARED_BOUNCER: OnceCell<Bouncer> = OnceCell::const_new();

async fn shared_bouncer() -> &'static Bouncer {
    SHARED_BOUNCER
        .get_or_init(|| async {
            let base = std::env::temp_dir().join("onejob-test-pgbouncer");
            let lock_path = std::env::temp_dir().join("onejob-test-pgbouncer.lock");
            let lock = cross_process_lock(&lock_path);
            let bouncer = Bouncer { base, owned: false };
            if !bouncer.running() {
                // The tests' own helpers are sqlx clients with its defaults,
                // which send extra_float_digits (onejob does not).
                bouncer.start("session", "ignore_startup_parameters = extra_float_digits\n").await;
            }
            lock.unlock().ok();
            bouncer
        })
        .await
}

impl Bouncer {
    /// A PgBouncer of this test's own in `pool_mode`, stopped when dropped.
    pub async fn start_private(pool_mode: &str) -> Self {
        let base =
            std::env::temp_dir().join(format!("onejob-bouncer-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]));
        let bouncer = Self { base, owned: true };
        bouncer.start(pool_mode, "").await;
        bouncer
    }

    fn running(&self) -> bool {
        let pid =
            std::fs::read_to_string(self.base.join("pgbouncer.pid")).ok().and_then(|p| p.trim().parse::<u32>().ok());
        pid.is_some_and(process_alive) && self.base.join(format!(".s.PGSQL.{BOUNCER_PORT}")).exists()
    }

    async fn start(&self, pool_mode: &str, extra: &str) {
        // The cluster the databases are on must be running first.
        let cluster = server().await;
        assert!(cluster.throwaway, "the PgBouncer tests need the throwaway cluster (TEST_DATABASE_URL unset)");
        let cluster_dir = std::env::temp_dir().join(CLUSTER_DIR);
        std::fs::create_dir_all(&self.base)
            .unwrap_or_else(|e| fail(format!("cannot create {}: {e}", self.base.display())));
        let config = format!(
            "[databases]\n\
             * = host={cluster}\n\
             [pgbouncer]\n\
             listen_addr =\n\
             listen_port = {BOUNCER_PORT}\n\
             unix_socket_dir = {base}\n\
             auth_type = trust\n\
             auth_file = {base}/users.txt\n\
             pool_mode = {pool_mode}\n\
             max_client_conn = 2000\n\
             default_pool_size = 100\n\
             server_idle_timeout = 5\n\
             logfile = {base}/pgbouncer.log\n\
             pidfile = {base}/pgbouncer.pid\n\
             {extra}",
            cluster = cluster_dir.display(),
            base = self.base.display(),
        );
        std::fs::write(self.base.join("pgbouncer.ini"), config).unwrap();
        std::fs::write(self.base.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        for path in ["", "pgbouncer.ini", "users.txt"] {
            chown_to_postgres(&self.base.join(path));
        }
        let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .unwrap_or_else(|| fail("pgbouncer was not found (Debian's pgbouncer package; .ci/run installs it)"));
        let ini = self.base.join("pgbouncer.ini");
        let out = run_pg(&binary, &["-d", ini.to_str().unwrap()]);
        if !out.status.success() {
            fail(format!("pgbouncer did not start: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !self.running() {
            if std::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(self.base.join("pgbouncer.log")).unwrap_or_default();
                fail(format!("pgbouncer did not open its socket in {}:\n{log}", self.base.display()));
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The URL of the database a direct `url` names, through this PgBouncer.
    pub fn url(&self, direct: &str) -> String {
        let database = direct.split('?').next().unwrap().rsplit('/').next().unwrap();
        format!("postgres://postgres@localhost/{database}?host={}&port={BOUNCER_PORT}", self.base.display())
    }

    /// What PgBouncer logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Some(pid) =
            std::fs::read_to_string(self.base.join("pgbouncer.pid")).ok().and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
