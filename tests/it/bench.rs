//! A seconds-long smoke of every `onejob bench` scenario against the
//! running application: each completes, without errors, and the storm makes
//! one job. The figures themselves are measured by hand (see the README's
//! Performance section), not asserted here.

use std::time::Duration;

use crate::common::{Backend, TestApp};
use clap::ValueEnum;
use onejob::bench::{Options, Scenario, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_bench_scenario_runs_cleanly() {
    let app = TestApp::spawn_live(Backend::Sqlite, |s| s.server.rate_limit_per_second = 0).await;
    for &scenario in Scenario::value_variants() {
        let options = Options {
            url: format!("http://{}", app.addr),
            token: app.alice.clone(),
            scenario,
            connections: 4,
            duration: Duration::from_millis(500),
            jobs: 20,
            provider: "sim-fast".into(),
            server_pid: None,
        };
        let report = run(options).await.unwrap();
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
