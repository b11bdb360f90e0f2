//! The Postgres tests on a Citus cluster: with `ONEJOB_TEST_CITUS=DIR`, a
//! cluster that `scripts/citus-cluster.sh start DIR` started, every test
//! database is made on the coordinator and on each worker at once, as a
//! copy of a distributed template: the coordinator's copy holds Citus's
//! metadata and each worker's copy the shards it names, so a copy is a
//! distributed database of its own, made in a fraction of a second.
//!
//! The template is migrated by the store's own `migrate`, which places the
//! tables on Citus, with 4 shards per distributed table (2 per worker).

use std::collections::BTreeMap;

use sqlx::{Connection, PgConnection};

/// The nodes of the cluster, as URL prefixes (append a database name).
pub struct Cluster {
    coordinator: String,
    workers: Vec<String>,
}

/// The shards of each distributed table in the tests' databases.
const SHARD_COUNT: u32 = 4;

impl Cluster {
    /// The cluster `ONEJOB_TEST_CITUS` names, if it is set.
    pub fn from_env() -> Option<Self> {
        let dir = std::env::var("ONEJOB_TEST_CITUS").ok().filter(|d| !d.is_empty())?;
        let path = std::path::Path::new(&dir).join("cluster.env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "ONEJOB_TEST_CITUS={dir}: cannot read {} ({e}); start it with scripts/citus-cluster.sh",
                path.display()
            )
        });
        let env: BTreeMap<&str, &str> = text.lines().filter_map(|line| line.split_once('=')).collect();
        let prefix = |url: &str| format!("{}/", url.rsplit_once('/').expect("a URL with a database").0);
        let coordinator = prefix(env.get("COORDINATOR_URL").expect("COORDINATOR_URL in cluster.env"));
        let workers: Vec<String> =
            (1..).map_while(|n| env.get(format!("WORKER{n}_URL").as_str()).map(|url| prefix(url))).collect();
        assert!(!workers.is_empty(), "{}: no worker", path.display());
        Some(Self { coordinator, workers })
    }

    /// The URL prefix of the coordinator, which the tests connect to.
    pub fn coordinator(&self) -> &str {
        &self.coordinator
    }

    fn nodes(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.coordinator).chain(&self.workers)
    }

    async fn on_each_node(&self, database: &str, statement: &str) {
        for node in self.nodes() {
            let mut connection = PgConnection::connect(&format!("{node}{database}"))
                .await
                .unwrap_or_else(|e| panic!("cannot connect to {node}{database}: {e}"));
            sqlx::raw_sql(statement)
                .execute(&mut connection)
                .await
                .unwrap_or_else(|e| panic!("{node}: {statement}: {e}"));
            connection.close().await.ok();
        }
    }

    /// The names of the databases on the coordinator that start with `prefix`.
    pub async fn databases(&self, prefix: &str) -> Vec<String> {
        let mut admin = PgConnection::connect(&format!("{}postgres", self.coordinator)).await.unwrap();
        let names = sqlx::query_scalar("select datname::text from pg_database where starts_with(datname, $1)")
            .bind(prefix)
            .fetch_all(&mut admin)
            .await
            .unwrap();
        admin.close().await.ok();
        names
    }

    /// Drops a database a test process left behind, the workers' copies
    /// first, then the coordinator's (where the names are listed). A node
    /// may refuse while its own sessions on the database end (Citus's
    /// maintenance daemon, a connection between nodes): the database is
    /// then left, listed, for a later test process to drop, as on a single
    /// Postgres.
    pub async fn drop_leftover(&self, name: &str) {
        for node in self.workers.iter().chain(std::iter::once(&self.coordinator)) {
            let Ok(mut connection) = PgConnection::connect(&format!("{node}postgres")).await else { return };
            let dropped = sqlx::raw_sql(&format!(r#"drop database if exists "{name}" with (force)"#))
                .execute(&mut connection)
                .await;
            connection.close().await.ok();
            if dropped.is_err() {
                return;
            }
        }
    }

    /// Drops a database on every node.
    pub async fn drop_database(&self, name: &str) {
        self.on_each_node("postgres", &format!(r#"drop database if exists "{name}" with (force)"#)).await;
    }

    /// Whether the template exists (on the coordinator, where it is made last).
    pub async fn has_template(&self, template: &str) -> bool {
        self.databases(template).await.iter().any(|name| name == template)
    }

    /// Builds the distributed template: a database on every node with the
    /// `citus` extension, the workers added, migrated and placed by the
    /// store, then closed to connections so that it can be copied (Citus
    /// keeps sessions open on a database it knows).
    pub async fn build_template(&self, template: &str) {
        let building = format!("{template}_building");
        self.drop_database(&building).await;
        self.on_each_node("postgres", &format!(r#"create database "{building}""#)).await;
        self.on_each_node(&building, "create extension citus").await;
        let coordinator_url = format!("{}{building}", self.coordinator);
        let mut admin = PgConnection::connect(&coordinator_url).await.unwrap();
        let node = |prefix: &str| {
            let address = prefix.split('@').nth(1).unwrap().trim_end_matches('/').to_owned();
            let (host, port) = address.rsplit_once(':').unwrap();
            (host.to_owned(), port.parse::<i32>().unwrap())
        };
        let (host, port) = node(&self.coordinator);
        sqlx::query("select citus_set_coordinator_host($1, $2)")
            .bind(&host)
            .bind(port)
            .execute(&mut admin)
            .await
            .unwrap();
        for worker in &self.workers {
            let (host, port) = node(worker);
            sqlx::query("select citus_add_node($1, $2)").bind(&host).bind(port).execute(&mut admin).await.unwrap();
        }
        sqlx::raw_sql(&format!(r#"alter database "{building}" set citus.shard_count = {SHARD_COUNT}"#))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.ok();
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&coordinator_url).await.unwrap();
        let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
        store.migrate().await.expect("the migrations apply and place the tables on Citus");
        // Statement statistics, for the tests that count round trips (on
        // the coordinator, which every statement reaches first).
        sqlx::query("create extension if not exists pg_stat_statements").execute(&pool).await.unwrap();
        pool.close().await;
        self.on_each_node(
            "postgres",
            &format!(
                r#"alter database "{building}" with allow_connections false is_template true;
                   select pg_terminate_backend(pid) from pg_stat_activity where datname = '{building}'"#
            ),
        )
        .await;
        // Published on the workers first, so that a template seen on the
        // coordinator is there everywhere.
        for node in self.workers.iter().chain(std::iter::once(&self.coordinator)) {
            let mut admin = PgConnection::connect(&format!("{node}postgres")).await.unwrap();
            sqlx::raw_sql(&format!(r#"alter database "{building}" rename to "{template}""#))
                .execute(&mut admin)
                .await
                .unwrap();
            admin.close().await.ok();
        }
    }

    /// Copies the template on every node; returns the copy's URL on the coordinator.
    pub async fn copy_template(&self, template: &str, name: &str) -> String {
        self.on_each_node("postgres", &format!(r#"create database "{name}" template "{template}""#)).await;
        format!("{}{name}", self.coordinator)
    }
}
