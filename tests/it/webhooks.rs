//! Webhooks, received by a receiver no one here wrote: a Python server
//! verifying every delivery with the `standardwebhooks` package (Standard
//! Webhooks' reference library). A receiver that fails three times gets the
//! event four times under one `webhook-id`, every signature verifying; a
//! server killed between the commit and the send delivers after its
//! restart; a settlement rolled back delivers nothing; an endpoint must be
//! `https://` on a public address; endpoints are their owner's alone.
//!
//! They need the `standardwebhooks` package in `target/schemathesis-venv`
//! (`.ci/run` installs it), so they are ignored unless asked for, and fail
//! without it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::processes::{database, eventually, set, simulator_and_config_with};
use crate::common::{Backend, TestApp, expect_problem};
use onejob::domain::{KeyRole, OwnerId};

/// The receiver: a Python process, its port, and each request it got.
struct Receiver {
    _child: tokio::process::Child,
    port: u16,
    stdin: tokio::process::ChildStdin,
    requests: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Receiver {
    /// Starts it; it answers 500 to the first `fail_first` requests.
    /// A receiver answering 500 to its first `fail_first` requests, then 204.
    async fn start(fail_first: u32) -> Self {
        Self::start_answering(fail_first, 204).await
    }

    /// A receiver answering 500 to its first `fail_first` requests, then `then`.
    async fn start_answering(fail_first: u32, then: u16) -> Self {
        let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/schemathesis-venv/bin/python");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks/receiver.py");
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .arg(fail_first.to_string())
            .arg(then.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "{} cannot run ({error}): .ci/run installs it, or python3 -m venv target/schemathesis-venv && \
                     target/schemathesis-venv/bin/pip install standardwebhooks",
                    python.display()
                )
            });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first =
            tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.expect("the receiver starts");
        let first = first.unwrap().expect("the receiver printed its port (is standardwebhooks installed?)");
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"].as_u64().unwrap() as u16;
        let (sender, requests) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = sender.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        let stdin = child.stdin.take().unwrap();
        Self { _child: child, port, stdin, requests }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    async fn verify_with(&mut self, secret: &str) {
        self.stdin.write_all(format!("{secret}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Whether it got a request not taken by [`Self::next`] yet.
    fn has_more(&mut self) -> bool {
        !self.requests.is_empty()
    }

    /// The next request it got, within 30 s.
    async fn next(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(30), self.requests.recv())
            .await
            .expect("a delivery within 30 s")
            .unwrap()
    }
}

/// An admin key of alice: webhooks are registered with admin keys, and hear
/// of their owner's jobs.
async fn alices_admin(database_url: &str) -> String {
    let store = crate::common::open_store(database_url);
    onejob::keys::create_key_with_role(&store, &OwnerId::parse("alice").unwrap(), KeyRole::Admin).await.unwrap().1
}

async fn register(
    client: &reqwest::Client,
    address: &str,
    admin: &str,
    url: &str,
    events: &[&str],
) -> reqwest::Response {
    client
        .post(format!("http://{address}/webhooks"))
        .bearer_auth(admin)
        .json(&json!({"url": url, "events": events, "description": "the tests' receiver"}))
        .send()
        .await
        .unwrap()
}

async fn create(client: &reqwest::Client, address: &str, token: &str, key: &str) -> String {
    let response = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .json(&json!({"task": "summarize", "input": {"text": "hooked on webhooks"}, "provider": "sim-fast"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

fn loopback_allowed(settings: &mut onejob::config::Settings) {
    settings.webhooks.allow_hosts = vec!["127.0.0.1".into()];
}

async fn a_receiver_failing_three_times_gets_the_event_four_times_under_one_id_each_signature_verifying(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, loopback_allowed).await;
    let admin = alices_admin(&app.database_url).await;
    let mut receiver = Receiver::start(3).await;
    let address = app.addr.to_string();
    let registered = register(&app.client, &address, &admin, &receiver.url(), &["job.succeeded"]).await;
    assert_eq!(registered.status(), StatusCode::CREATED);
    let endpoint: Value = registered.json().await.unwrap();
    let secret = endpoint["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    receiver.verify_with(secret).await;

    let id = create(&app.client, &address, &app.alice, "hooked").await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(receiver.next().await);
    }
    let statuses: Vec<u64> = seen.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [500, 500, 500, 204]);
    for request in &seen {
        assert_eq!(request["verified"], true, "the signature verifies: {request}");
        assert_eq!(request["id"], seen[0]["id"], "one webhook-id for every try");
    }
    let body: Value = serde_json::from_str(seen[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["type"], "job.succeeded");
    assert_eq!(body["data"]["job_id"], id.as_str());
    assert_eq!(body["data"]["result"], json!({"summary": "hooked on webhooks", "word_count": 3}));

    // Bob's job is not alice's endpoint's business.
    let bobs = create(&app.client, &address, &app.bob, "not-hooked").await;
    // A delivery is written with the settlement it tells of: once bob's job
    // has succeeded, one routed to alice's endpoint would be listed.
    eventually("bob's job succeeded", Duration::from_secs(10), || async {
        app.get(&app.bob, &format!("/jobs/{bobs}")).await.json::<Value>().await.unwrap()["state"] == "succeeded"
    })
    .await;
    let path = format!("/webhooks/{}/deliveries", endpoint["id"].as_str().unwrap());
    // The receiver prints a request before it answers: the last try is
    // recorded once its answer is back.
    let listing = || async { app.get(&admin, &path).await.json::<Value>().await.unwrap() };
    eventually("the fourth try recorded", Duration::from_secs(10), || async {
        listing().await["deliveries"][0]["tries"].as_array().is_some_and(|tries| tries.len() == 4)
    })
    .await;
    let listed = listing().await;
    let deliveries = listed["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{listed:#}");
    assert_ne!(deliveries[0]["job_id"], bobs.as_str());
    assert_eq!(deliveries[0]["id"], seen[0]["id"]);
    assert_eq!(deliveries[0]["state"], "delivered");
    let tried: Vec<Value> = deliveries[0]["tries"].as_array().unwrap().iter().map(|t| t["status"].clone()).collect();
    assert_eq!(tried, [json!(500), json!(500), json!(500), json!(204)]);
}

async fn a_receiver_answering_410_gone_disables_its_endpoint_after_one_try(backend: Backend) {
    let app = TestApp::spawn_live(backend, loopback_allowed).await;
    let admin = alices_admin(&app.database_url).await;
    let mut receiver = Receiver::start_answering(0, 410).await;
    let address = app.addr.to_string();
    let registered = register(&app.client, &address, &admin, &receiver.url(), &["job.succeeded"]).await;
    let endpoint: Value = registered.json().await.unwrap();
    receiver.verify_with(endpoint["secret"].as_str().unwrap()).await;
    create(&app.client, &address, &app.alice, "gone").await;
    assert_eq!(receiver.next().await["status"], 410);
    let listing = || async { app.get(&admin, "/webhooks").await.json::<Value>().await.unwrap() };
    eventually("the endpoint disabled", Duration::from_secs(10), || async {
        !listing().await["webhooks"][0]["disabled_at"].is_null()
    })
    .await;
    let listed = listing().await;
    assert_eq!(listed["webhooks"][0]["disabled_reason"], "the receiver answered 410 Gone", "{listed:#}");
    let path = format!("/webhooks/{}/deliveries", endpoint["id"].as_str().unwrap());
    let deliveries = app.get(&admin, &path).await.json::<Value>().await.unwrap();
    assert_eq!(deliveries["deliveries"][0]["state"], "failed", "{deliveries:#}");
    assert_eq!(deliveries["deliveries"][0]["tries"].as_array().map(Vec::len), Some(1), "{deliveries:#}");
}

async fn an_endpoint_must_be_https_on_a_public_address_and_is_its_owners_alone(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let admin = alices_admin(&app.database_url).await;
    let address = app.addr.to_string();
    for (url, why) in [
        ("http://hooks.example.com/in", "https"),
        ("https://127.0.0.1/in", "private"),
        ("https://10.1.2.3/in", "private"),
        ("https://[::1]/in", "private"),
        ("https://169.254.169.254/latest", "private"),
        ("https://localhost/in", "does not resolve to a public address"),
        ("https://no-such-host.invalid/in", "does not resolve to a public address"),
        ("https://user:secret@hooks.example.com/in", "password"),
    ] {
        let refused = register(&app.client, &address, &admin, url, &["job.succeeded"]).await;
        let problem = expect_problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
        assert!(problem.to_string().contains(why), "{url}: {problem}");
        assert!(!problem.to_string().contains("secret@"), "the URL's password is not echoed: {problem}");
        // What a name resolves to, or the resolver's own words, are not told.
        let told = problem.to_string();
        assert!(url.contains("127.0.0.1") || !told.contains("127.0.0.1"), "{url}: {told}");
        assert!(!told.contains("failed to lookup") && !told.contains("Name or service"), "{url}: {told}");
    }
    let unknown = register(&app.client, &address, &admin, "https://8.8.8.8/in", &["job.done"]).await;
    expect_problem(unknown, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let client_key = register(&app.client, &address, &app.alice, "https://8.8.8.8/in", &["job.succeeded"]).await;
    expect_problem(client_key, StatusCode::FORBIDDEN, "forbidden").await;

    // A public address is taken (nothing is sent until an event comes).
    let taken = register(&app.client, &address, &admin, "https://8.8.8.8/in", &["job.failed", "job.failed"]).await;
    assert_eq!(taken.status(), StatusCode::CREATED);
    let endpoint: Value = taken.json().await.unwrap();
    assert_eq!(endpoint["events"], json!(["job.failed"]));
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let listed: Value = app.get(&admin, "/webhooks").await.json().await.unwrap();
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains("whsec_"), "secrets are never listed: {listed}");

    // Another owner's admin sees none of it.
    let others = app.operator.clone();
    let theirs: Value = app.get(&others, "/webhooks").await.json().await.unwrap();
    assert_eq!(theirs["webhooks"], json!([]));
    let rotate = |token: String| {
        let url = app.url(&format!("/webhooks/{id}/rotate-secret"));
        let client = app.client.clone();
        async move { client.post(url).bearer_auth(token).send().await.unwrap() }
    };
    expect_problem(rotate(others.clone()).await, StatusCode::NOT_FOUND, "not-found").await;
    expect_problem(app.get(&others, &format!("/webhooks/{id}/deliveries")).await, StatusCode::NOT_FOUND, "not-found")
        .await;

    // Rotating answers a new secret; the old one still signs for a day.
    let rotated = rotate(admin.clone()).await;
    assert_eq!(rotated.status(), StatusCode::OK);
    let rotated: Value = rotated.json().await.unwrap();
    assert!(rotated["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_ne!(rotated["secret"], endpoint["secret"]);
    assert!(rotated["previous_secret_until"].is_string(), "{rotated}");

    let delete = |token: String| {
        let url = app.url(&format!("/webhooks/{id}"));
        let client = app.client.clone();
        async move { client.delete(url).bearer_auth(token).send().await.unwrap() }
    };
    expect_problem(delete(others).await, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(delete(admin.clone()).await.status(), StatusCode::NO_CONTENT);
    expect_problem(delete(admin).await, StatusCode::NOT_FOUND, "not-found").await;
}

/// A receiver that answers every request with `answer` (raw HTTP/1.1), and
/// says how many connections it took.
async fn raw_receiver(answer: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = vec![0; 64 * 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut head).await;
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, connections)
}

/// The first try of the first delivery the deliveries at `url` (read with
/// `admin`) list, once there is one.
async fn first_try(client: &reqwest::Client, url: &str, admin: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let deliveries = crate::common::ok_json(client.get(url).bearer_auth(admin).send().await.unwrap()).await;
        let tried = deliveries["deliveries"][0]["tries"][0].clone();
        if !tried.is_null() {
            return tried;
        }
        assert!(tokio::time::Instant::now() < deadline, "no try within 20 s: {deliveries:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_delivery_error_says_its_class_and_never_the_receivers_words(backend: Backend) {
    let app = TestApp::spawn_live(backend, loopback_allowed).await;
    let admin = alices_admin(&app.database_url).await;
    let address = app.addr.to_string();
    let page = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/html\r\ncontent-length: 35\r\n\r\n<h1>the receiver's own page</h1>\n";
    let (answering, _) = raw_receiver(page).await;
    // A port nothing listens on: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ids = Vec::new();
    for port in [answering, closed] {
        let url = format!("http://127.0.0.1:{port}/hooks");
        let registered = register(&app.client, &address, &admin, &url, &["job.succeeded"]).await;
        assert_eq!(registered.status(), StatusCode::CREATED);
        ids.push(registered.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned());
    }
    create(&app.client, &address, &app.alice, "classes").await;
    let deliveries = |id: &str| app.url(&format!("/webhooks/{id}/deliveries"));
    let answered = first_try(&app.client, &deliveries(&ids[0]), &admin).await;
    assert_eq!((&answered["status"], &answered["error"]), (&json!(500), &json!("answered 500")), "{answered:#}");
    let refused = first_try(&app.client, &deliveries(&ids[1]), &admin).await;
    assert_eq!(refused["error"], "connection refused", "not the operating system's words: {refused:#}");
}

async fn an_owner_registers_at_most_max_endpoints_per_owner_endpoints(backend: Backend) {
    let app = TestApp::spawn_live(backend, |settings| settings.webhooks.max_endpoints_per_owner = 2).await;
    let admin = alices_admin(&app.database_url).await;
    let address = app.addr.to_string();
    let mut ids = Vec::new();
    for n in 1..=2 {
        let registered =
            register(&app.client, &address, &admin, &format!("https://8.8.8.{n}/in"), &["job.failed"]).await;
        assert_eq!(registered.status(), StatusCode::CREATED);
        ids.push(registered.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned());
    }
    let third = register(&app.client, &address, &admin, "https://8.8.8.3/in", &["job.failed"]).await;
    let problem = expect_problem(third, StatusCode::CONFLICT, "too-many-endpoints").await;
    assert!(problem.to_string().contains("delete one"), "{problem}");
    // Another owner's limit is its own.
    let others = register(&app.client, &address, &app.operator, "https://8.8.8.3/in", &["job.failed"]).await;
    assert_eq!(others.status(), StatusCode::CREATED);
    let deleted =
        app.client.delete(app.url(&format!("/webhooks/{}", ids[0]))).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let again = register(&app.client, &address, &admin, "https://8.8.8.3/in", &["job.failed"]).await;
    assert_eq!(again.status(), StatusCode::CREATED, "a place freed by a deletion is taken");
}

/// A receiver that holds every request until its gate opens, then answers
/// 204 and closes the connection (said in the answer, so that the sender
/// does not reuse it): how many requests it holds now, the most it held at
/// once, and how many it took in all.
struct HoldingReceiver {
    port: u16,
    holding: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    taken: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    gate: tokio::sync::watch::Sender<bool>,
}

async fn holding_receiver() -> HoldingReceiver {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = HoldingReceiver {
        port: listener.local_addr().unwrap().port(),
        holding: Default::default(),
        most: Default::default(),
        taken: Default::default(),
        gate: tokio::sync::watch::channel(false).0,
    };
    let (holding, most, taken) = (receiver.holding.clone(), receiver.most.clone(), receiver.taken.clone());
    let gate = receiver.gate.subscribe();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (holding, most, taken, mut gate) = (holding.clone(), most.clone(), taken.clone(), gate.clone());
            tokio::spawn(async move {
                let mut head = vec![0; 64 * 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut head).await;
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                taken.fetch_add(1, Ordering::SeqCst);
                let _ = gate.wait_for(|open| *open).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                let _ = stream
                    .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
                    .await;
                let _ = stream.shutdown().await;
            });
        }
    });
    receiver
}

/// An owner whose receiver holds its deliveries has at most
/// `max_in_flight_per_owner` of them sent at once, while another owner's
/// are sent; the ones claimed past the limit are given back untried, so
/// that each delivery's first recorded try is its try number 1.
async fn an_owner_has_at_most_max_in_flight_per_owner_deliveries_sent_at_once(backend: Backend) {
    use std::sync::atomic::Ordering;
    let app = TestApp::spawn_live(backend, |settings| {
        loopback_allowed(settings);
        settings.webhooks.max_in_flight_per_owner = 2;
    })
    .await;
    let admin = alices_admin(&app.database_url).await;
    let address = app.addr.to_string();
    let alices = holding_receiver().await;
    let url = format!("http://127.0.0.1:{}/alice", alices.port);
    let registered = register(&app.client, &address, &admin, &url, &["job.succeeded"]).await;
    assert_eq!(registered.status(), StatusCode::CREATED);
    let endpoint = registered.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    for n in 0..5 {
        create(&app.client, &address, &app.alice, &format!("held-{n}")).await;
    }
    eventually("alice's receiver holds two deliveries", Duration::from_secs(20), || async {
        alices.holding.load(Ordering::SeqCst) >= 2
    })
    .await;

    // Another owner's delivery is sent meanwhile.
    let (others, connections) =
        raw_receiver("HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").await;
    let url = format!("http://127.0.0.1:{others}/operator");
    let registered = register(&app.client, &address, &app.operator, &url, &["job.succeeded"]).await;
    assert_eq!(registered.status(), StatusCode::CREATED);
    create(&app.client, &address, &app.operator, "not-held").await;
    eventually("the other owner's delivery arrives", Duration::from_secs(20), || async {
        connections.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(alices.most.load(Ordering::SeqCst), 2, "at most two of alice's deliveries at once");

    alices.gate.send_replace(true);
    let deliveries = app.url(&format!("/webhooks/{endpoint}/deliveries"));
    eventually("alice's five deliveries are delivered", Duration::from_secs(30), || async {
        let listed: Value = app.client.get(&deliveries).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
        let list = listed["deliveries"].as_array().unwrap().clone();
        list.len() == 5 && list.iter().all(|d| d["state"] == "delivered")
    })
    .await;
    assert_eq!(alices.most.load(Ordering::SeqCst), 2, "at most two of alice's deliveries at once");
    assert_eq!(alices.taken.load(Ordering::SeqCst), 5, "each delivery was sent once");
    let listed: Value = app.client.get(&deliveries).bearer_auth(&admin).send().await.unwrap().json().await.unwrap();
    for delivery in listed["deliveries"].as_array().unwrap() {
        let numbers: Vec<&Value> = delivery["tries"].as_array().unwrap().iter().map(|t| &t["number"]).collect();
        assert_eq!(numbers, [&json!(1)], "a delivery given back was not counted as tried: {delivery:#}");
    }
}

/// A server whose environment names a proxy still checks the receiver's
/// address itself: an endpoint whose name has come to resolve to loopback
/// (here: its URL changed in the database, as a name's DNS may change) is
/// refused by the sending client's resolver, and the proxy hears nothing.
async fn a_proxy_in_the_environment_does_not_bypass_the_address_check(backend: Backend) {
    use std::sync::atomic::Ordering;
    let (proxy_port, proxied) = raw_receiver("HTTP/1.1 200 Connection established\r\n\r\n").await;
    let (receiver, _) = raw_receiver("HTTP/1.1 204 No Content\r\n\r\n").await;
    let (_simulator, config) = process_config().await;
    let (database_url, pool, token) = database(backend).await;
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    // For https:// URLs only: the providers (the simulator, on http://)
    // are reached directly.
    let env = [("HTTPS_PROXY", proxy.as_str())];
    let (_server, address, _log) = crate::common::spawn_server_logged(&database_url, Some(&config), &[], &env).await;
    let client = reqwest::Client::new();
    let admin = alices_admin(&database_url).await;
    let url = format!("http://127.0.0.1:{receiver}/hooks");
    let registered = register(&client, &address, &admin, &url, &["job.succeeded"]).await;
    assert_eq!(registered.status(), StatusCode::CREATED);
    let id = registered.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let renamed = format!("update webhook_endpoints set url = 'https://localhost:{receiver}/hooks'");
    sqlx::query(&renamed).execute(&pool).await.unwrap();
    create(&client, &address, &token, "proxied").await;
    let tried = first_try(&client, &format!("http://{address}/webhooks/{id}/deliveries"), &admin).await;
    assert_eq!(tried["error"], "the host resolves to no public address", "{tried:#}");
    assert_eq!(proxied.load(Ordering::SeqCst), 0, "the proxy was never asked");
}

/// A configuration whose webhooks may reach loopback, tried again quickly,
/// with a short timeout (so a claim's lease is a second).
async fn process_config() -> (onejob::provider::sim::RunningSimulator, PathBuf) {
    simulator_and_config_with(200, |t| {
        set(t, &["webhooks", "allow_hosts"], toml::Value::Array(vec!["127.0.0.1".into()]));
        set(t, &["webhooks", "poll_interval_ms"], 50.into());
        set(t, &["webhooks", "retry_base_ms"], 100.into());
        set(t, &["webhooks", "timeout_ms"], 500.into());
    })
    .await
}

async fn count(pool: &sqlx::AnyPool, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await.unwrap()
}

async fn a_delivery_committed_before_a_crash_is_sent_after_the_restart(backend: Backend) {
    let (_simulator, config) = process_config().await;
    let (database_url, pool, token) = database(backend).await;
    let admin = alices_admin(&database_url).await;
    let client = reqwest::Client::new();
    let mut receiver = Receiver::start(0).await;
    // The deliverer parks right after its claim, before the send.
    let parked = [("FAILPOINTS", "webhook-before-send=return(600000)")];
    let (mut first, address, _log) =
        crate::common::spawn_server_logged(&database_url, Some(&config), &[], &parked).await;
    let endpoint: Value =
        register(&client, &address, &admin, &receiver.url(), &["job.succeeded"]).await.json().await.unwrap();
    receiver.verify_with(endpoint["secret"].as_str().unwrap()).await;
    let id = create(&client, &address, &token, "crash").await;
    eventually("the delivery claimed by the parked deliverer", Duration::from_secs(20), || async {
        count(&pool, "select count(*) from webhook_deliveries where tries = 1").await == 1
    })
    .await;
    first.kill().await.unwrap();
    first.wait().await.unwrap();

    let (_second, _, _) = crate::common::spawn_server_logged(&database_url, Some(&config), &[], &[]).await;
    let request = receiver.next().await;
    assert_eq!(request["verified"], true, "{request}");
    let body: Value = serde_json::from_str(request["body"].as_str().unwrap()).unwrap();
    assert_eq!((body["type"].as_str(), body["data"]["job_id"].as_str()), (Some("job.succeeded"), Some(id.as_str())));
    eventually("the delivery recorded as delivered", Duration::from_secs(10), || async {
        count(&pool, "select count(*) from webhook_deliveries where state = 'delivered' and tries = 2").await == 1
    })
    .await;
}

async fn a_settlement_rolled_back_delivers_nothing(backend: Backend) {
    let (_simulator, config) = process_config().await;
    let (database_url, pool, token) = database(backend).await;
    let admin = alices_admin(&database_url).await;
    let client = reqwest::Client::new();
    let mut receiver = Receiver::start(0).await;
    // The first settlement fails just before its commit; the worker records
    // the outcome again, and that one commits.
    let failing = [("FAILPOINTS", "settle-before-commit=1*return")];
    let (_server, address, mut log) =
        crate::common::spawn_server_logged(&database_url, Some(&config), &[], &failing).await;
    let endpoint: Value =
        register(&client, &address, &admin, &receiver.url(), &["job.succeeded"]).await.json().await.unwrap();
    receiver.verify_with(endpoint["secret"].as_str().unwrap()).await;
    let id = create(&client, &address, &token, "rolled-back").await;
    let request = receiver.next().await;
    assert_eq!(request["verified"], true, "{request}");
    // The failpoint did fire: the first settlement was rolled back.
    let rolled_back = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = log.recv().await {
            if line.contains("failpoint settle-before-commit") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(rolled_back, Ok(true), "the first settlement failed before its commit");
    // The win is committed with its one delivery: the rolled-back one left none.
    let deliveries = count(&pool, "select count(*) from webhook_deliveries").await;
    assert_eq!(deliveries, 1, "one delivery for job {id}");
    // The request the receiver got is that committed delivery, tried once,
    // and the only one: a send before the commit would have come first,
    // under an id no row has.
    let path = format!("http://{address}/webhooks/{}/deliveries", endpoint["id"].as_str().unwrap());
    let listing =
        || async { client.get(&path).bearer_auth(&admin).send().await.unwrap().json::<Value>().await.unwrap() };
    eventually("the try recorded", Duration::from_secs(10), || async {
        listing().await["deliveries"][0]["state"] == "delivered"
    })
    .await;
    let listed = listing().await;
    assert_eq!(listed["deliveries"][0]["id"], request["id"], "{listed:#}");
    assert_eq!(listed["deliveries"][0]["tries"].as_array().map(Vec::len), Some(1), "{listed:#}");
    assert!(!receiver.has_more(), "the receiver got one request");
}

/// The tests above on both databases: those with a receiver ignored unless
/// asked for.
macro_rules! on_both_backends_with_a_receiver {
    (receiver: [$($receiving:ident),+ $(,)?], plain: [$($plain:ident),+ $(,)?] $(,)?) => {
        on_both_backends_with_a_receiver!(@backend postgres, Postgres, [$($receiving),+], [$($plain),+]);
        on_both_backends_with_a_receiver!(@backend sqlite, Sqlite, [$($receiving),+], [$($plain),+]);
    };
    (@backend $module:ident, $variant:ident, [$($receiving:ident),+], [$($plain:ident),+]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs the standardwebhooks Python package: installed by .ci/run"]
                async fn $receiving() {
                    super::$receiving(crate::common::Backend::$variant).await;
                }
            )+
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $plain() {
                    super::$plain(crate::common::Backend::$variant).await;
                }
            )+
        }
    };
}

on_both_backends_with_a_receiver!(
    receiver: [
        a_receiver_failing_three_times_gets_the_event_four_times_under_one_id_each_signature_verifying,
        a_delivery_committed_before_a_crash_is_sent_after_the_restart,
        a_settlement_rolled_back_delivers_nothing,
        a_receiver_answering_410_gone_disables_its_endpoint_after_one_try,
    ],
    plain: [
        an_endpoint_must_be_https_on_a_public_address_and_is_its_owners_alone,
        a_delivery_error_says_its_class_and_never_the_receivers_words,
        an_owner_registers_at_most_max_endpoints_per_owner_endpoints,
        a_proxy_in_the_environment_does_not_bypass_the_address_check,
        an_owner_has_at_most_max_in_flight_per_owner_deliveries_sent_at_once,
    ],
);
