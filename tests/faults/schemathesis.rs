//! Schemathesis against the served `/openapi.json`: generated requests,
//! valid and not, to every route, authenticated with a real key. No answer
//! may be a 5xx, and every answer must match the specification (status,
//! content type, headers, body schema). It needs schemathesis (`st`), so it
//! is ignored unless asked for (`.ci/run` installs it and runs `cargo test --
//! --include-ignored`); run without `st`, it fails and says how to install it.
//!
//! The `positive_data_acceptance` check is left out: what the API accepts
//! depends on its configuration and state (task and provider names, the
//! task's input schema, cursors from earlier pages), which a static
//! specification cannot enumerate, so schema-valid requests are refused
//! with 422 by design.

use std::path::PathBuf;
use std::process::Command;

use crate::common::{Backend, TestApp};

/// Examples generated per route in each phase.
const MAX_EXAMPLES: &str = "20";

fn find_st() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ONEJOB_SCHEMATHESIS") {
        return Some(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/schemathesis-venv/bin/st");
    if venv.exists() {
        return Some(venv);
    }
    let on_path = Command::new("st").arg("--version").output().is_ok_and(|out| out.status.success());
    on_path.then(|| PathBuf::from("st"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs schemathesis (st): installed by .ci/run"]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_specification() {
    let st = find_st().unwrap_or_else(|| {
        panic!(
            "schemathesis (st) is not installed: .ci/run installs it, or \
             python3 -m venv target/schemathesis-venv && target/schemathesis-venv/bin/pip install schemathesis \
             (or set ONEJOB_SCHEMATHESIS to an st binary)"
        )
    });
    let app = TestApp::spawn(Backend::Sqlite).await;
    // Its own working directory, so that its caches stay out of the tree.
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/schemathesis-work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = tokio::process::Command::new(&st);
    // One worker: with two, schemathesis parses Python source from two
    // threads, and the machine's CPython 3.11 can then fail inside
    // `ast.parse` ("AST constructor recursion depth mismatch"), an error
    // of the tool's that says nothing of the server.
    command
        .current_dir(&work)
        .args(["run", &app.url("/openapi.json"), "--max-examples", MAX_EXAMPLES, "--workers", "1", "--no-color"])
        .args(["--checks", "all", "--exclude-checks", "positive_data_acceptance"])
        .arg("--header")
        .arg(format!("Authorization: Bearer {}", app.alice))
        .kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(300), command.output())
        .await
        .expect("schemathesis finishes within 5 minutes")
        .expect("schemathesis runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("No issues found") || report.contains("passed"), "{report}");
}
