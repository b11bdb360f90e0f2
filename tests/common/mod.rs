//! What the integration tests share: a real Postgres (see `postgres.rs`) and
//! the real application on a real socket.

#![allow(dead_code)]

pub mod postgres;

use std::net::SocketAddr;
use std::sync::Arc;

use onejob::app::{Application, Role};
use onejob::config::Settings;
use onejob::domain::OwnerId;
use onejob::store::{PostgresStore, Store};
use reqwest::{Client, RequestBuilder, Response, StatusCode};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;

/// A Postgres store on a fresh database, and its pool for direct looks.
pub async fn postgres_store() -> Arc<PostgresStore> {
    let url = postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(30).connect(&url).await.expect("connect to the test database");
    Arc::new(PostgresStore::from_pool(pool))
}

/// The application running on 127.0.0.1:0 against a fresh database, with an
/// API key for owner `alice` and one for owner `bob`. `spawn` runs the API
/// alone (tests move attempts through their states by hand); `spawn_live`
/// runs the worker and the in-process simulator too.
pub struct TestApp {
    pub addr: SocketAddr,
    pub client: Client,
    pub store: Arc<PostgresStore>,
    pub database_url: String,
    pub alice: String,
    pub bob: String,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::spawn_as(Role::Api, adjust).await
    }

    pub async fn spawn_live(adjust: impl FnOnce(&mut Settings)) -> Self {
        Self::spawn_as(Role::All, adjust).await
    }

    pub async fn spawn_as(role: Role, adjust: impl FnOnce(&mut Settings)) -> Self {
        let database_url = postgres::fresh_database().await;
        let mut settings = Settings::builtin();
        settings.server.listen = "127.0.0.1:0".parse().unwrap();
        settings.database.url = Some(database_url.clone());
        settings.database.max_connections = 20;
        adjust(&mut settings);
        let application = Application::build_as(settings, role).await.expect("the application builds");
        let addr = application.local_addr().expect("the API listens");
        let pool = PgPoolOptions::new().max_connections(5).connect(&database_url).await.unwrap();
        let store = Arc::new(PostgresStore::from_pool(pool));
        tokio::spawn(application.run_until(std::future::pending()));
        let alice = onejob::keys::create_key(store.as_ref(), &OwnerId::parse("alice").unwrap()).await.unwrap().1;
        let bob = onejob::keys::create_key(store.as_ref(), &OwnerId::parse("bob").unwrap()).await.unwrap().1;
        Self { addr, client: Client::new(), store, database_url, alice, bob }
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

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }
}

/// Reads a problem answer and checks its status, content type and type.
pub async fn expect_problem(response: Response, status: StatusCode, kind: &str) -> Value {
    assert_eq!(response.status(), status, "expected {status} {kind}");
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], kind, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    body
}
