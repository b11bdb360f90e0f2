//! The dashboard and the demo in a real browser: headless Chromium (Debian's
//! `chromium`) driven by `playwright-core` (tests/browser/, installed with
//! `npm ci`), against the real application with its worker and the
//! simulator. The script (tests/browser/dashboard.mjs) saves screenshots to
//! `target/browser-screenshots/`.
//!
//! It needs node, Chromium and playwright-core, so it is ignored unless asked
//! for (`.ci/run` installs them and runs `cargo test -- --include-ignored`);
//! run without any of them, it fails and says what is missing.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Backend, TestApp};

/// What the browser test needs, or why it cannot run.
fn browser_tools() -> Result<(PathBuf, PathBuf), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    if !chromium.exists() {
        return Err(format!("no Chromium at {} (apt-get install chromium, or set CHROMIUM)", chromium.display()));
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        return Err("no node on PATH (apt-get install nodejs npm)".into());
    }
    let browser_dir = root.join("tests/browser");
    if !browser_dir.join("node_modules/playwright-core/package.json").exists() {
        return Err("playwright-core is not installed (cd tests/browser && npm ci)".into());
    }
    Ok((chromium, browser_dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs node, Chromium and playwright-core: installed by .ci/run"]
async fn the_dashboard_and_the_demo_work_in_a_real_browser() {
    let (chromium, browser_dir) =
        browser_tools().unwrap_or_else(|missing| panic!("the browser test cannot run: {missing}"));
    let app = TestApp::spawn_live(Backend::Sqlite, |settings| {
        // A stall long enough to see and to press the fallback during.
        let slow = settings.providers.get_mut("sim-slow").unwrap();
        slow.latency = Duration::from_millis(4_000);
        slow.timeout = Duration::from_millis(10_000);
        // The demo's prose streams for about three seconds after the stall:
        // long enough to reload the demo mid-answer.
        slow.tokens_per_second = 24;
        // sim-hang's status lookup says "running" for this long: the
        // attempt stays unknown until the page resolves it.
        settings.providers.get_mut("sim-hang").unwrap().hang = Some(Duration::from_millis(600_000));
    })
    .await;
    let vite_chat = ViteChat::preview(&app.url("")).await;
    let screenshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-screenshots");
    // The screenshots checked below are this run's: an earlier run's are gone.
    let _ = std::fs::remove_dir_all(&screenshots);
    let run = tokio::process::Command::new("node")
        .arg(browser_dir.join("dashboard.mjs"))
        .current_dir(&browser_dir)
        .env("ONEJOB_URL", app.url(""))
        .env("ONEJOB_CLIENT_KEY", &app.alice)
        .env("ONEJOB_ADMIN_KEY", &app.operator)
        .env("ONEJOB_SCREENSHOTS", &screenshots)
        .env("VITE_CHAT_URL", &vite_chat.url)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the browser test finishes within 180 s")
        .expect("node starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the browser test failed (screenshots in {}):\n{stdout}\n{stderr}",
        screenshots.display()
    );
    assert!(stdout.contains("browser: all passed"), "{stdout}");
    for shot in [
        "vite-chat.png",
        "demo.png",
        "demo-stream.png",
        "timeline.png",
        "job.png",
        "jobs.png",
        "unknown.png",
        "providers.png",
    ] {
        assert!(screenshots.join(shot).exists(), "screenshot {shot}");
    }
}

/// The Vite example (`clients/typescript/examples/vite-chat`), built, served
/// by `vite preview` on a free loopback port in front of onejob at `onejob`;
/// stopped when dropped.
struct ViteChat {
    url: String,
    _preview: tokio::process::Child,
}

impl ViteChat {
    async fn preview(onejob: &str) -> Self {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript/examples/vite-chat");
        let vite = example.join("node_modules/vite/bin/vite.js");
        assert!(
            vite.exists() && example.join("dist/index.html").exists(),
            "the Vite example is not built (cd {} && npm ci && npm run build)",
            example.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let preview = tokio::process::Command::new("node")
            .arg(&vite)
            .args(["preview", "--host", "127.0.0.1", "--strictPort", "--port", &port.to_string()])
            .current_dir(&example)
            .env("ONEJOB_URL", onejob.trim_end_matches('/'))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("vite preview starts");
        let url = format!("http://127.0.0.1:{port}/");
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // Ready once it serves the app and passes /api on to onejob.
        while !client.get(format!("{url}api/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(tokio::time::Instant::now() < deadline, "vite preview did not serve {url} within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { url, _preview: preview }
    }
}
