//! A highly available Postgres on loopback, as operators run one: etcd, two
//! Postgres nodes under Patroni, HAProxy routing to the leader by Patroni's
//! `/primary` check. `scripts/ha-cluster.sh` does the work; this drives it.
//!
//! One cluster at a time on the machine (its ports are fixed): a test holds
//! a lock file for as long as its cluster lives, so that the cluster tests
//! run one after the other whether the test runner puts them in threads of
//! one process or in processes of their own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The cluster's script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha-cluster.sh");

/// A running cluster, stopped when dropped.
pub struct HaCluster {
    dir: PathBuf,
    env: HashMap<String, String>,
    _lock: std::fs::File,
}

impl HaCluster {
    /// Starts a cluster in synchronous mode (commits wait for the standby),
    /// or asynchronous with `asynchronous`, and waits until the standby
    /// streams and the database `onejob` answers through HAProxy.
    pub async fn start(asynchronous: bool) -> Self {
        let lock = tokio::task::spawn_blocking(|| {
            let file = std::fs::File::create(std::env::temp_dir().join("onejob-ha-cluster.lock")).unwrap();
            file.lock().unwrap();
            file
        })
        .await
        .unwrap();
        let dir = std::env::temp_dir().join(format!("onejob-ha-{}", uuid::Uuid::now_v7().simple()));
        let mut args = vec!["start".to_owned(), dir.display().to_string()];
        if asynchronous {
            args.push("--async".to_owned());
        }
        let started = Instant::now();
        run(&args).await;
        eprintln!("the HA cluster started in {:.1} s", started.elapsed().as_secs_f64());
        let printed = run(&["env".to_owned(), dir.display().to_string()]).await;
        let env = printed
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.trim_matches(['\'', '"']).to_owned()))
            .collect();
        Self { dir, env, _lock: lock }
    }

    fn var(&self, name: &str) -> String {
        self.env.get(name).unwrap_or_else(|| panic!("ha-cluster.sh env printed no {name}: {:?}", self.env)).clone()
    }

    /// The database through HAProxy: always the leader.
    pub fn proxied_url(&self) -> String {
        self.var("HA_URL")
    }

    /// The database on node `name` (`node1`, `node2`) directly.
    pub fn node_url(&self, name: &str) -> String {
        self.var(&format!("{}_URL", name.to_uppercase()))
    }

    /// Both nodes in one URL, `target_session_attrs=read-write`, no proxy.
    pub fn several_hosts_url(&self) -> String {
        self.var("MULTI_URL")
    }

    /// The leader's node name, as Patroni says.
    pub async fn leader(&self) -> String {
        run(&["leader".to_owned(), self.dir.display().to_string()]).await.trim().to_owned()
    }

    /// Kills the leader's Patroni and Postgres with SIGKILL; its name.
    pub async fn kill_leader(&self) -> String {
        run(&["kill-leader".to_owned(), self.dir.display().to_string()]).await.trim().to_owned()
    }

    /// Starts node `name`'s Patroni again: it rejoins as a standby.
    pub async fn restart_node(&self, name: &str) {
        run(&["restart-node".to_owned(), self.dir.display().to_string(), name.to_owned()]).await;
    }

    /// A planned switchover to `candidate`.
    pub async fn switchover(&self, candidate: &str) {
        run(&["switchover".to_owned(), self.dir.display().to_string(), candidate.to_owned()]).await;
    }

    /// Waits until Patroni names a leader other than `old` and the proxy
    /// reaches it: a session through HAProxy lands on that node's Postgres,
    /// which is not in recovery and takes a write. The moment it did.
    pub async fn wait_for_new_leader(&self, old: &str, limit: Duration) -> Instant {
        let started = Instant::now();
        loop {
            let leader = run_quietly(&["leader".to_owned(), self.dir.display().to_string()]).await;
            let leader = leader.as_deref().map(str::trim).filter(|leader| !leader.is_empty() && *leader != old);
            if let Some(leader) = leader
                && self.proxy_reaches(leader).await
            {
                return Instant::now();
            }
            assert!(started.elapsed() < limit, "no new leader reached through the proxy within {limit:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether a session through HAProxy reaches node `leader`'s Postgres
    /// (its port), out of recovery, and a write there succeeds (a temporary
    /// table: refused on a standby or a read-only server, gone with the
    /// session). Each try within 2 s.
    pub async fn proxy_reaches(&self, leader: &str) -> bool {
        use sqlx::Connection as _;
        let port: i32 = self.var(&format!("{}_PORT", leader.to_uppercase())).parse().unwrap();
        let url = self.proxied_url();
        let reached = tokio::time::timeout(Duration::from_secs(2), async move {
            let mut session = sqlx::PgConnection::connect(&url).await?;
            let (recovering, reached): (bool, i32) =
                sqlx::query_as("select pg_is_in_recovery(), inet_server_port()").fetch_one(&mut session).await?;
            sqlx::query("create temporary table proxy_probe (at timestamptz)").execute(&mut session).await?;
            sqlx::query("insert into proxy_probe values (now())").execute(&mut session).await?;
            let _ = session.close().await;
            Ok::<_, sqlx::Error>(!recovering && reached == port)
        })
        .await;
        matches!(reached, Ok(Ok(true)))
    }

    /// Waits until node `name` is a streaming standby.
    pub async fn wait_for_standby(&self, name: &str, limit: Duration) {
        let url = self.node_url(name);
        super::processes::eventually(&format!("{name} streams as a standby"), limit, || async {
            let Ok(pool) = sqlx::PgPool::connect(&url).await else { return false };
            let standby: Result<bool, _> = sqlx::query_scalar("select pg_is_in_recovery()").fetch_one(&pool).await;
            pool.close().await;
            matches!(standby, Ok(true))
        })
        .await;
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let stopped = std::process::Command::new("bash").arg(SCRIPT).arg("stop").arg(&self.dir).status();
        if matches!(stopped, Ok(status) if status.success()) && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs the script with `args`; its standard output. Fails the test, with
/// what the script said, when it fails.
async fn run(args: &[String]) -> String {
    let out = tokio::process::Command::new("bash").arg(SCRIPT).args(args).output().await.unwrap();
    assert!(
        out.status.success(),
        "ha-cluster.sh {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// [`run`], `None` when the script fails.
async fn run_quietly(args: &[String]) -> Option<String> {
    let out = tokio::process::Command::new("bash").arg(SCRIPT).args(args).output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
