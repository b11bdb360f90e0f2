//! Long-polls held open, and the requests in flight: each owner may hold
//! `server.max_long_polls_per_owner` long-polls at once on a server; a
//! waiting one takes no slot of `server.max_concurrent_requests`, so one
//! owner's crowd of long-polls never makes another owner's requests, or the
//! probes, be refused. One past the cap is 429 `too-many-long-polls` with
//! `Retry-After`; a read that does not wait is never refused by it; a
//! long-poll's place is given back however it ends. The slots of requests
//! in flight are one budget for every route. Each test runs
//! `onejob serve --no-worker` as a process of its own (its jobs stay
//! queued, so nothing answers a long-poll early) and reads what the server
//! holds from its own `/metrics`.

use std::time::{Duration, Instant};

use onejob::domain::OwnerId;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::common::processes::{alice_key, eventually, set, simulator_and_config_with};
use crate::common::{Backend, expect_problem, prometheus, spawn_server_with};

/// A `serve --no-worker` process on a fresh database of `backend`, with
/// keys for alice and bob.
struct Server {
    address: String,
    alice: String,
    bob: String,
    client: Client,
    _child: tokio::process::Child,
    _simulator: onejob::provider::sim::RunningSimulator,
    config: std::path::PathBuf,
}

impl Server {
    /// Starts one whose settings `adjust` changes.
    async fn start(backend: Backend, adjust: impl FnOnce(&mut toml::Table)) -> Self {
        let (simulator, config) = simulator_and_config_with(1_000, adjust).await;
        let url = backend.fresh_database().await;
        let alice = alice_key(&url).await;
        let store = crate::common::open_store(&url);
        let bob = onejob::keys::create_key(&store, &OwnerId::parse("bob").unwrap()).await.unwrap().1;
        let (child, address) = spawn_server_with(&url, Some(&config), &["--no-worker"]).await;
        Self { address, alice, bob, client: Client::new(), _child: child, _simulator: simulator, config }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// `GET path` as `token`.
    async fn get(&self, token: &str, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).bearer_auth(token).send().await.unwrap()
    }

    /// Creates a job as `token`; it stays queued (no worker runs).
    async fn create(&self, token: &str, key: &str) -> String {
        let response = self
            .client
            .post(self.url("/jobs"))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(&json!({"task": "summarize", "input": {"text": format!("job {key}")}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "{key}");
        response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
    }

    /// Starts a long-poll of `wait` seconds on job `id` as `token`; it
    /// answers with its status.
    fn long_poll(&self, token: &str, id: &str, wait: u64) -> JoinHandle<StatusCode> {
        let request = self.client.get(self.url(&format!("/jobs/{id}?wait={wait}"))).bearer_auth(token);
        tokio::spawn(async move { request.send().await.unwrap().status() })
    }

    /// The value of a series without labels on the server's `/metrics`.
    async fn metric(&self, name: &str) -> f64 {
        let samples = prometheus::scrape(&self.client, &self.address).await;
        prometheus::value(&samples, name, &[]).unwrap_or_else(|| panic!("/metrics has no series {name}"))
    }

    /// Waits until the server holds `count` long-polls open (a gauge not
    /// set yet is 0).
    async fn until_open(&self, what: &str, count: usize, limit: Duration) {
        eventually(what, limit, || async {
            let samples = prometheus::scrape(&self.client, &self.address).await;
            prometheus::value(&samples, "onejob_long_polls_open", &[]).unwrap_or(0.0) == count as f64
        })
        .await;
    }

    /// One long-poll past the owner's cap: 429 `too-many-long-polls`, with
    /// `Retry-After`, answered at once.
    async fn expect_refused(&self, token: &str, id: &str) {
        let started = Instant::now();
        let refused = self.get(token, &format!("/jobs/{id}?wait=30")).await;
        let retry_after = refused.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
        assert!(
            retry_after.is_some_and(|seconds| seconds >= 1),
            "a refused long-poll says when to retry: {retry_after:?}"
        );
        let body = expect_problem(refused, StatusCode::TOO_MANY_REQUESTS, "too-many-long-polls").await;
        assert!(started.elapsed() < Duration::from_secs(5), "refused at once, not after waiting: {body}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Raises this process's soft limit of open files (its children inherit
/// it) to at least `wanted`, as far as the hard limit allows; fails when
/// that is not enough.
fn raise_open_files(wanted: libc::rlim_t) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0, "getrlimit(RLIMIT_NOFILE)");
        if limit.rlim_cur < wanted {
            limit.rlim_cur = limit.rlim_max.min(wanted);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0, "setrlimit(RLIMIT_NOFILE)");
        }
    }
    assert!(limit.rlim_cur >= wanted, "{wanted} open files are needed; the hard limit is {}", limit.rlim_max);
}

async fn one_owner_holding_1500_long_polls_leaves_another_owner_creating_and_the_server_ready() {
    const HELD: usize = 1_500;
    // One socket a long-poll in this process, one in the server (which
    // inherits the limit), and room for the tests running beside this one.
    raise_open_files(2 * HELD as libc::rlim_t + 1_000);
    let server = Server::start(Backend::Postgres, |table| {
        set(table, &["server", "max_long_polls_per_owner"], (HELD as i64).into());
        // More long-polls than requests may be served at once.
        set(table, &["server", "max_concurrent_requests"], 1_024.into());
        // 1,500 requests at once are over the default burst: this test is
        // about what they hold once open, not how fast they may come.
        set(table, &["server", "rate_limit_per_second"], 0.into());
    })
    .await;
    let id = server.create(&server.alice, "watched").await;

    let held: Vec<_> = (0..HELD).map(|_| server.long_poll(&server.alice, &id, 30)).collect();
    let opened = Instant::now();
    server.until_open("alice holding 1,500 long-polls", HELD, Duration::from_secs(20)).await;

    // One more is past alice's cap; her reads that do not wait are not.
    server.expect_refused(&server.alice, &id).await;
    assert_eq!(server.get(&server.alice, &format!("/jobs/{id}")).await.status(), StatusCode::OK);
    assert_eq!(server.get(&server.alice, &format!("/jobs/{id}?wait=0")).await.status(), StatusCode::OK);
    // Another owner creates jobs, reads them, and the server is ready.
    for i in 0..20 {
        let made = server.create(&server.bob, &format!("bob-{i}")).await;
        assert_eq!(server.get(&server.bob, &format!("/jobs/{made}")).await.status(), StatusCode::OK);
    }
    assert_eq!(server.client.get(server.url("/readyz")).send().await.unwrap().status(), StatusCode::OK);

    // The held ones are still open: none answered, none refused.
    let answered: Vec<_> = held.iter().filter(|poll| poll.is_finished()).collect();
    assert!(opened.elapsed() < Duration::from_secs(29), "the checks ran while the long-polls waited");
    assert!(answered.is_empty(), "{} of the held long-polls answered early", answered.len());
    assert_eq!(server.metric("onejob_long_polls_open").await, HELD as f64);
    assert_eq!(server.metric("onejob_long_polls_refused_total").await, 1.0);

    // Their client goes away: every place is given back, and alice may
    // long-poll again.
    for poll in &held {
        poll.abort();
    }
    server.until_open("every place given back", 0, Duration::from_secs(20)).await;
    let again = server.long_poll(&server.alice, &id, 1);
    assert_eq!(again.await.unwrap(), StatusCode::OK, "a long-poll that waited its second out answers the job");
}

/// Each way a long-poll ends gives its place back: its client going away,
/// its wait running out, its job changing.
async fn a_long_poll_gives_its_place_back_however_it_ends(backend: Backend) {
    let server = Server::start(backend, |table| set(table, &["server", "max_long_polls_per_owner"], 2.into())).await;
    let id = server.create(&server.alice, "watched").await;
    let gone = server.long_poll(&server.alice, &id, 30);
    let changed = server.long_poll(&server.alice, &id, 30);
    server.until_open("alice at her cap", 2, Duration::from_secs(10)).await;

    // At the cap: a third is refused; reads that do not wait are not, nor
    // is another owner's long-poll.
    server.expect_refused(&server.alice, &id).await;
    assert_eq!(server.get(&server.alice, &format!("/jobs/{id}")).await.status(), StatusCode::OK);
    assert_eq!(server.get(&server.alice, &format!("/jobs/{id}?wait=0")).await.status(), StatusCode::OK);
    let bobs = server.create(&server.bob, "bobs").await;
    assert_eq!(server.long_poll(&server.bob, &bobs, 1).await.unwrap(), StatusCode::OK, "bob has places of his own");

    // The client goes away.
    gone.abort();
    server.until_open("the place of a long-poll whose client went away given back", 1, Duration::from_secs(10)).await;
    // The wait runs out.
    let started = Instant::now();
    assert_eq!(server.long_poll(&server.alice, &id, 1).await.unwrap(), StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited its second");
    server.until_open("the place of a long-poll that timed out given back", 1, Duration::from_secs(10)).await;
    // The job changes: the waiting one answers.
    let canceled =
        server.client.post(server.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&server.alice).send().await.unwrap();
    assert_eq!(canceled.status(), StatusCode::OK);
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), changed).await.unwrap().unwrap(), StatusCode::OK);
    server.until_open("the place of an answered long-poll given back", 0, Duration::from_secs(10)).await;
    assert_eq!(server.metric("onejob_long_polls_refused_total").await, 1.0);
}

on_both_backends!(a_long_poll_gives_its_place_back_however_it_ends);

/// Starts `POST /jobs` as `token` on a connection of its own and sends only
/// part of its body, so that the request is served, waiting for the rest,
/// until the connection is dropped.
async fn post_half_a_body(address: &str, token: &str, key: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let body = json!({"task": "summarize", "input": {"text": "never finished"}}).to_string();
    let head = format!(
        "POST /jobs HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {token}\r\nidempotency-key: {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..body.len() / 2]).await.unwrap();
    stream
}

/// Whether the server has answered on `stream` (or closed it).
fn answered(stream: &tokio::net::TcpStream) -> bool {
    stream.try_read(&mut [0u8; 1]).is_ok()
}

/// Takes all `count` slots of the server with `POST /jobs` requests that
/// wait for their bodies. A probe of `/readyz` takes a slot too, and may
/// take it before one of them: that one is refused at once, and sent again,
/// until a probe finds no slot free.
async fn hold_every_slot(server: &Server, count: usize) -> Vec<tokio::net::TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut held = Vec::new();
    for i in 0..count {
        held.push(post_half_a_body(&server.address, &server.alice, &format!("held-{i}")).await);
    }
    for retry in 0.. {
        for stream in held.iter_mut().filter(|stream| answered(stream)) {
            *stream = post_half_a_body(&server.address, &server.alice, &format!("again-{retry}")).await;
        }
        if server.client.get(server.url("/readyz")).send().await.unwrap().status() == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(Instant::now() < deadline, "{count} requests waiting for their bodies never took every slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_requests_in_flight_share_one_budget_over_every_route() {
    let server =
        Server::start(Backend::Sqlite, |table| set(table, &["server", "max_concurrent_requests"], 2.into())).await;
    // Two requests of one route, served while they wait for their bodies,
    // take both slots: every other route is refused at once.
    let held = hold_every_slot(&server, 2).await;
    let refused = server.get(&server.bob, "/jobs").await;
    assert_eq!(refused.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()).as_deref(), Some("1"));
    let body = expect_problem(refused, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert!(body["detail"].as_str().unwrap().contains("requests in flight"), "{body}");
    // Their clients go away: the slots come back.
    drop(held);
    eventually("the slots given back", Duration::from_secs(10), || async {
        server.client.get(server.url("/readyz")).send().await.unwrap().status() == StatusCode::OK
    })
    .await;
    assert_eq!(server.get(&server.bob, "/jobs").await.status(), StatusCode::OK);
}

on_postgres!(one_owner_holding_1500_long_polls_leaves_another_owner_creating_and_the_server_ready);
