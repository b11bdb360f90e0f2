//! A real Cog model server (the `cog` and `coglet` packages, in the
//! environment `.ci/run` makes at `target/cog-venv`) running the small CPU
//! predictor of `tests/cog/predict.py`, which logs every run it makes.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// A Cog server on loopback, stopped when dropped.
pub struct CogServer {
    pub url: String,
    runs: PathBuf,
    _process: tokio::process::Child,
}

impl CogServer {
    /// Starts a server and waits until its `/health-check` says `READY`.
    pub async fn start() -> Self {
        Self::start_scaled(1.0).await
    }

    /// A server whose predictor sleeps `scale` times the seconds it is
    /// asked to (a faster server for the same input).
    pub async fn start_scaled(scale: f64) -> Self {
        Self::start_with(scale, None).await
    }

    /// [`CogServer::start_scaled`], storing its output files at
    /// `upload_url` (`--upload-url`: each file PUT there, and the output
    /// its URL) when given.
    pub async fn start_with(scale: f64, upload_url: Option<&str>) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let venv = root.join("target/cog-venv");
        let python = venv.join("bin/python");
        assert!(
            python.exists(),
            "{} is missing: .ci/run makes it, or python3 -m venv target/cog-venv && \
             target/cog-venv/bin/pip install cog==0.23.1 coglet==0.23.1",
            python.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let runs = std::env::temp_dir().join(format!("onejob-cog-runs-{}", uuid::Uuid::now_v7()));
        std::fs::write(&runs, "").unwrap();
        // The server's worker process imports coglet from the environment's
        // own bin directory, so it comes first on PATH.
        let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let mut args = vec!["-m", "cog.server.http", "--host", "127.0.0.1"];
        if let Some(upload_url) = upload_url {
            args.extend(["--upload-url", upload_url]);
        }
        let process = tokio::process::Command::new(&python)
            .args(args)
            .current_dir(root.join("tests/cog"))
            .env("PATH", path)
            .env("PORT", port.to_string())
            .env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor")
            .env("ONEJOB_COG_RUNS", &runs)
            .env("ONEJOB_COG_TIME_SCALE", scale.to_string())
            .env("PYTHONWARNINGS", "ignore")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the Cog server starts");
        let server = Self { url: format!("http://127.0.0.1:{port}"), runs, _process: process };
        let client = reqwest::Client::new();
        let started = std::time::Instant::now();
        loop {
            let health = client.get(format!("{}/health-check", server.url)).send().await;
            if let Ok(answer) = health
                && let Ok(body) = answer.json::<Value>().await
                && body["status"] == "READY"
            {
                return server;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the Cog server was not ready within a minute");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the predictor logged, in order: (event, tag), the events
    /// `started`, `finished`, `failed` and `canceled`.
    pub fn runs(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(&self.runs).unwrap();
        text.lines()
            .map(|line| {
                let run: Value = serde_json::from_str(line).unwrap();
                (run["event"].as_str().unwrap().to_owned(), run["tag"].as_str().unwrap().to_owned())
            })
            .collect()
    }

    /// How many runs started with `tag`.
    pub fn started(&self, tag: &str) -> usize {
        self.runs().iter().filter(|(event, t)| event == "started" && t == tag).count()
    }

    /// The provider's settings for this server: `extra` settings, and a
    /// timeout of 10 s unless they give one.
    pub fn provider(&self, extra: &str) -> onejob::config::ProviderSettings {
        let timeout = if extra.contains("timeout_ms") { "" } else { "timeout_ms = 10000" };
        super::provider(&format!("kind = \"cog\"\nbase_url = \"{}\"\n{timeout}\n{extra}", self.url))
    }
}

impl Drop for CogServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.runs);
    }
}
