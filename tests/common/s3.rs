//! A real S3-compatible server: moto's, in server mode (the `moto[server]`
//! package, in the environment `.ci/run` makes at
//! `target/schemathesis-venv`), on loopback, with one bucket. It takes any
//! access key.

use std::path::PathBuf;
use std::time::Duration;

/// An S3-compatible server with a bucket, stopped when dropped.
pub struct S3Server {
    pub url: String,
    pub bucket: String,
    _process: tokio::process::Child,
}

impl S3Server {
    /// Starts a server and makes its bucket.
    pub async fn start() -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = root.join("target/schemathesis-venv/bin/python");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let process = tokio::process::Command::new(&python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "{} cannot run moto ({error}): .ci/run installs it, or \
                     target/schemathesis-venv/bin/pip install 'moto[server]'",
                    python.display()
                )
            });
        let server = Self { url: format!("http://127.0.0.1:{port}"), bucket: "onejob-files".into(), _process: process };
        let client = reqwest::Client::new();
        let started = std::time::Instant::now();
        loop {
            if let Ok(made) = client.put(format!("{}/{}", server.url, server.bucket)).send().await {
                assert!(made.status().is_success(), "the bucket is made: {}", made.status());
                return server;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the S3 server did not answer within a minute");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The bucket's settings, its keys from variables every test process has.
    pub fn settings(&self, prefix: &str) -> onejob::config::S3Settings {
        onejob::config::S3Settings {
            bucket: self.bucket.clone(),
            endpoint: Some(self.url.clone()),
            region: "us-east-1".into(),
            prefix: prefix.into(),
            allow_http: true,
            access_key_env: "CARGO_PKG_NAME".into(),
            secret_key_env: "CARGO_PKG_VERSION".into(),
        }
    }

    /// The keys of the bucket's objects under `prefix`.
    pub async fn keys(&self, prefix: &str) -> Vec<String> {
        let url = format!("{}/{}?list-type=2&prefix={prefix}", self.url, self.bucket);
        let listing = reqwest::get(url).await.unwrap().text().await.unwrap();
        listing
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>"))
            .map(|(key, _)| key.to_owned())
            .collect()
    }
}
