//! A seconds-long smoke of every `onejob bench` scenario against the
//! running application: each completes, without errors, and the storm makes
//! one job; the streams scenario follows every job's stream to its end. The
//! figures themselves are measured by hand (see the README's Performance
//! section), not asserted here.

use std::time::Duration;

use crate::common::{Backend, TestApp};
use clap::ValueEnum;
use onejob_bench::{Options, Scenario, run};

/// How long the streams scenario may wait for its streams to end.
const STREAMS_TIMEOUT: Duration = Duration::from_secs(20);

/// `scenario` against `app` as owner alice: 4 connections, 500 ms timed,
/// 20 jobs on `provider`.
fn options(app: &TestApp, scenario: Scenario, provider: &str) -> Options {
    Options {
        url: format!("http://{}", app.addr),
        token: app.alice.clone(),
        scenario,
        connections: 4,
        duration: Duration::from_millis(500),
        jobs: 20,
        provider: provider.into(),
        timeout: STREAMS_TIMEOUT,
        server_pid: None,
        sim_url: app.simulator.as_ref().map(|sim| sim.url()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_bench_scenario_runs_cleanly() {
    let app = TestApp::spawn_live(Backend::Sqlite, |s| s.server.rate_limit_per_second = 0).await;
    // `streams` and `tokens` have their own tests below.
    for &scenario in Scenario::value_variants().iter().filter(|&&s| s != Scenario::Streams && s != Scenario::Tokens) {
        let report = run(options(&app, scenario, "sim-fast")).await.unwrap();
        assert_eq!(report.errors, 0, "{scenario:?}: {report:?}");
        assert!(report.ok > 0 && report.throughput > 0.0, "{scenario:?}: {report:?}");
        assert!(report.p50_ms <= report.p99_ms && report.p99_ms <= report.max_ms, "{report:?}");
        if scenario == Scenario::Storm {
            assert_eq!(report.ok, 1000);
            assert_eq!(report.extra["distinct_job_ids"], 1, "a storm of one key makes one job");
        }
        if scenario == Scenario::Inflight {
            assert_eq!(report.ok, 20, "every job finished");
        }
    }
}

/// 20 jobs on sim-slow (1.5 s here), one stream each: every stream ends by
/// itself after its job's win, every event of the log arrives on its job's
/// stream, and each win, committed while its stream was open, is timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_stream_receives_its_jobs_events_to_the_terminal_one() {
    let app = TestApp::spawn_live(Backend::Sqlite, |s| s.server.rate_limit_per_second = 0).await;
    let report = run(options(&app, Scenario::Streams, "sim-slow")).await.unwrap();
    let extra = &report.extra;
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(extra["streams_ended"], 20, "{report:?}");
    let at_once = extra["streams_open_at_once"].as_u64().unwrap();
    assert_eq!(at_once, 20, "every stream open while the provider's 1.5 s last: {report:?}");

    let logged: i64 = sqlx::query_scalar("select count(*) from job_events").fetch_one(&app.db).await.unwrap();
    let wins: i64 = sqlx::query_scalar("select count(*) from job_events where kind = 'attempt-succeeded'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(wins, 20, "every job succeeded");
    assert_eq!(extra["events"], logged, "every logged event came on its stream: {report:?}");
    assert_eq!(report.ok + extra["events_from_the_log"].as_u64().unwrap(), logged as u64, "{report:?}");
    assert!(report.ok >= 20, "at least every win is timed: {report:?}");

    assert!(report.p50_ms > 0.0, "{report:?}");
    assert!(
        report.p50_ms <= report.p90_ms && report.p90_ms <= report.p99_ms && report.p99_ms <= report.max_ms,
        "{report:?}"
    );
    assert!(report.max_ms < STREAMS_TIMEOUT.as_millis() as f64, "{report:?}");
}

/// The tokens scenario on a streaming task: first tokens timed straight
/// from the simulator and through onejob, and every delta event's delay
/// from the simulator's sending of its first piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tokens_scenario_times_first_tokens_both_ways_and_every_piece() {
    let app = TestApp::spawn_live(Backend::Sqlite, |s| {
        s.server.rate_limit_per_second = 0;
        s.tasks.get_mut("summarize").unwrap().stream = true;
        s.providers.get_mut("sim-fast").unwrap().tokens_per_second = 200;
    })
    .await;
    let mut options = options(&app, Scenario::Tokens, "sim-fast");
    options.duration = Duration::from_secs(2);
    let report = run(options).await.unwrap();
    let extra = &report.extra;
    assert_eq!((report.errors, &extra["direct_errors"]), (0, &serde_json::json!(0)), "{report:?}");
    assert!(report.ok > 0 && extra["direct_first_token"]["count"].as_u64() > Some(0), "{report:?}");
    assert_eq!(extra["streams"], report.ok, "{report:?}");
    let pieces = extra["piece_to_caller"]["count"].as_u64().unwrap();
    assert!(pieces >= 2 * report.ok, "every stream's pieces came in several events, each timed: {report:?}");
    let direct_p50 = extra["direct_first_token"]["p50_ms"].as_f64().unwrap();
    assert!(direct_p50 >= 5.0, "the simulator's first token comes after its latency: {report:?}");
    assert!(report.p50_ms > direct_p50, "through onejob is the longer way: {report:?}");
}
