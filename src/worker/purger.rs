//! The purger: every `retention.purge_interval`, finished jobs past their
//! retention are purged in batches of `retention.batch_size`, one
//! transaction each, with `retention.batch_pause` between two, so that a
//! large purge never holds what the jobs' own work needs for long. One
//! process purges at a time (the store's purge lock): the others find it
//! busy and wait for their next turn. Jobs `unknown` past their retention
//! are never purged; how many there are is a gauge and a log line.

use std::sync::Arc;

use chrono::Utc;
use tokio::sync::watch;

use super::Worker;
use crate::config::RetentionSettings;
use crate::store::retention::{PurgeBatch, PurgeRule};
use crate::store::{Store, StoreError};
use crate::task::catalog::Catalog;

/// How often the folders of files whose job is gone are swept, and how old
/// a folder must be to be looked at (a job's first file is written before
/// its result names it).
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
const SWEEP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

pub(super) async fn run(worker: Arc<Worker>, mut shutdown: watch::Receiver<bool>) {
    let settings = worker.retention.clone();
    let mut swept: Option<std::time::Instant> = None;
    while !*shutdown.borrow() {
        if swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
            sweep_orphan_files(&worker).await;
            swept = Some(std::time::Instant::now());
        }
        let (by_rule, ending) =
            purge_due(&worker.store, &worker.catalog, &settings, &worker.files, Pace::Background, || {
                *shutdown.borrow()
            })
            .await;
        match ending {
            Ending::Busy => tracing::debug!("another process is purging; this one waits for its next turn"),
            Ending::Failed(error) => {
                tracing::warn!(%error, "purging finished jobs failed; trying again at the next turn")
            }
            Ending::Done | Ending::Stopped => {}
        }
        let purged: u64 = by_rule.iter().map(|(_, jobs)| jobs).sum();
        if purged > 0 {
            tracing::info!(purged, "purged finished jobs past their retention");
        }
        // After a large purge, the freed space goes back to the disk.
        if purged >= u64::from(settings.batch_size)
            && let Err(error) = worker.store.reclaim_space().await
        {
            tracing::warn!(%error, "giving the purged space back failed");
        }
        report_old_unknowns(&worker, &settings).await;
        tokio::select! {
            _ = tokio::time::sleep(settings.purge_interval.0) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Removes the folders of files whose job is gone (a crash between a
/// job's removal and its files'), looking only at folders an hour old, and
/// only in a blob store that this database's files alone are kept in.
async fn sweep_orphan_files(worker: &Worker) {
    let identity = match worker.callbacks.database_identity().await {
        Ok(identity) => identity,
        Err(error) => return tracing::warn!(%error, "sweeping the files of removed jobs waits for the database"),
    };
    if !worker.files.is_of(&identity).await {
        return tracing::warn!(
            "files.dir holds the files of another database too: its folders are not swept; give each database a \
             files.dir of its own"
        );
    }
    let mut orphans = Vec::new();
    for job in worker.files.folders_older_than(SWEEP_AGE).await {
        match worker.store.find_job_owner(job).await {
            Ok(None) => orphans.push(job),
            Ok(Some(_)) => {}
            Err(error) => {
                tracing::warn!(%error, "sweeping the files of removed jobs failed; trying again at the next sweep");
                return;
            }
        }
    }
    if !orphans.is_empty() {
        tracing::info!(folders = orphans.len(), "removed the files of jobs that are gone");
        worker.files.remove(&orphans).await;
    }
}

/// The purge rules in force now: one per task with its own retention, and
/// one for every other task.
pub fn rules(catalog: &Catalog, settings: &RetentionSettings) -> Vec<PurgeRule> {
    let now = Utc::now();
    let own: Vec<(String, crate::config::Span)> =
        catalog.tasks().filter_map(|task| Some((task.name.clone(), task.settings.retain_finished?))).collect();
    let others: Vec<String> = own.iter().map(|(name, _)| name.clone()).collect();
    let mut rules: Vec<PurgeRule> = own
        .into_iter()
        .map(|(task, span)| PurgeRule { task: Some(task), others: Vec::new(), before: now - span.as_chrono() })
        .collect();
    rules.push(PurgeRule { task: None, others, before: now - settings.finished_jobs.as_chrono() });
    rules
}

/// How a purge ended.
#[derive(Debug)]
pub enum Ending {
    /// Nothing due is left.
    Done,
    /// Another process is purging.
    Busy,
    /// Told to stop.
    Stopped,
    /// A batch failed; the jobs purged before it are gone.
    Failed(StoreError),
}

/// How a purge goes through the batches of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// The worker's: a pause between two batches, and the rule is done at
    /// the first batch under the batch size (what is left waits for the
    /// next turn).
    Background,
    /// `onejob purge`'s: batch after batch until one purges nothing.
    UntilEmpty,
}

/// Purges what is due under each of [`rules`], batch by batch at `pace`,
/// until none is left, another process purges, `stop` says so, or a batch
/// fails: how many jobs went under each rule reached, and why it ended.
/// The files of the jobs purged go from `files` after each batch. The
/// worker's purger and `onejob purge` both run it.
pub async fn purge_due(
    store: &Store,
    catalog: &Catalog,
    settings: &RetentionSettings,
    files: &crate::files::Files,
    pace: Pace,
    stop: impl Fn() -> bool,
) -> (Vec<(PurgeRule, u64)>, Ending) {
    let mut by_rule = Vec::new();
    for rule in rules(catalog, settings) {
        let mut purged = 0;
        let ending = loop {
            if stop() {
                break Some(Ending::Stopped);
            }
            let started = std::time::Instant::now();
            match store.purge_batch(&rule, settings.batch_size).await {
                Ok(PurgeBatch::Busy) => break Some(Ending::Busy),
                Ok(PurgeBatch::Purged(ids)) if ids.is_empty() => break None,
                Ok(PurgeBatch::Purged(ids)) => {
                    files.remove(&ids).await;
                    let jobs = ids.len() as u64;
                    purged += jobs;
                    crate::process::metrics::purged(jobs);
                    tracing::debug!(
                        jobs,
                        took_ms = started.elapsed().as_millis() as u64,
                        task = rule.task.as_deref().unwrap_or("*"),
                        "purged a batch of finished jobs"
                    );
                    if pace == Pace::Background {
                        if jobs < u64::from(settings.batch_size) {
                            break None;
                        }
                        tokio::time::sleep(settings.batch_pause.0).await;
                    }
                }
                Err(error) => break Some(Ending::Failed(error)),
            }
        };
        // A rule that another process or an error stopped before it
        // purged anything is not reported as done.
        if ending.is_none() || purged > 0 {
            by_rule.push((rule, purged));
        }
        if let Some(ending) = ending {
            return (by_rule, ending);
        }
    }
    (by_rule, Ending::Done)
}

/// Counts the jobs `unknown` for longer than the shortest retention: they
/// are kept, and someone should look at them.
async fn report_old_unknowns(worker: &Worker, settings: &RetentionSettings) {
    let shortest = worker
        .catalog
        .tasks()
        .filter_map(|task| task.settings.retain_finished)
        .fold(settings.finished_jobs, std::cmp::min);
    let before = Utc::now() - shortest.as_chrono();
    match worker.store.count_unknown_since(before).await {
        Ok(count) => {
            crate::process::metrics::unknown_past_retention(count);
            if count > 0 {
                tracing::warn!(count, retention = %shortest, "jobs unknown for longer than their retention: kept until settled");
            }
        }
        Err(error) => tracing::warn!(%error, "counting jobs unknown past their retention failed"),
    }
}
