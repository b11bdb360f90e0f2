//! In-process signals: "there is work" for the worker, "this job changed"
//! (or only "an attempt of it was claimed") for long-polls and event
//! streams, "this job's output grew" for its output's readers, and "this
//! job finished" for the provider calls of its attempts still in flight.
//! They only make things faster: every waiter also polls the database, so
//! changes made by other processes are seen too (the worker's sweep finds
//! finished jobs with calls in flight).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use tokio::sync::watch;

use crate::domain::{AttemptId, JobId};
use crate::store::output::OutputPiece;
use crate::sync::LockAnyway;

/// The signals one process shares between its API and its worker.
#[derive(Default)]
pub struct Signals {
    work: Notify,
    // The jobs someone waits on, each with its own notices: a change wakes
    // the waiters of that job only.
    jobs: Mutex<HashMap<JobId, Arc<JobNotices>>>,
    // The provider calls in flight that a job's end aborts, by job.
    calls: Mutex<HashMap<JobId, Vec<CallAbort>>>,
}

/// A call in flight, by its attempt, and the sender that aborts it.
type CallAbort = (AttemptId, watch::Sender<bool>);

/// A provider call in flight that the end of its job aborts; dropped, it
/// is forgotten.
pub struct CallWatch<'a> {
    signals: &'a Signals,
    job: JobId,
    attempt: AttemptId,
    aborted: watch::Receiver<bool>,
}

impl CallWatch<'_> {
    /// Resolves once the call's job has finished (at once if it had by the
    /// time the watch began listening).
    pub async fn job_finished(&mut self) {
        // The sender lives as long as the watch: waiting never errs.
        let _ = self.aborted.wait_for(|aborted| *aborted).await;
    }
}

impl Drop for CallWatch<'_> {
    fn drop(&mut self) {
        let mut calls = self.signals.calls.lock_anyway();
        if let Some(list) = calls.get_mut(&self.job) {
            list.retain(|(attempt, _)| *attempt != self.attempt);
            if list.is_empty() {
                calls.remove(&self.job);
            }
        }
    }
}

/// One job's notices: `any` for every change, `settling` for every change
/// but a claim (an attempt starting); `changes` counts them all. `output`
/// for a piece of its output written, which changes nothing of the job,
/// and `written`, the last pieces written in this process, in order.
#[derive(Default)]
struct JobNotices {
    any: Notify,
    settling: Notify,
    changes: AtomicU64,
    output: Notify,
    written: Mutex<Vec<OutputPiece>>,
}

/// The most bytes, and pieces, of a job's last pieces kept for its readers
/// (one behind them reads the pieces): a reader takes what came since it
/// last woke, a piece or two, and a watched job that no reader follows
/// (a long-poll's) holds no more than this.
const WRITTEN_BYTES: usize = 16 * 1024;
const WRITTEN_PIECES: usize = 64;

impl JobNotices {
    /// Counts a change, then wakes those listening for it: a listener that
    /// took its notice and then found the count unchanged is woken.
    fn changed(&self, claim: bool) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if !claim {
            self.settling.notify_waiters();
        }
        self.any.notify_waiters();
    }
}

/// A registration for the changes of one job; dropped, it is forgotten.
pub struct JobWatch<'a> {
    signals: &'a Signals,
    id: JobId,
    notices: Arc<JobNotices>,
    // How many changes the job had when the watch was taken.
    since: u64,
}

/// A notice of a job's next change, listening from when it was taken.
pub(crate) type Change<'a> = std::pin::Pin<Box<Notified<'a>>>;

fn listening(notify: &Notify) -> Change<'_> {
    let mut notified = Box::pin(notify.notified());
    notified.as_mut().enable();
    notified
}

impl JobWatch<'_> {
    /// A notice of the job's next change, listening from now on: take it
    /// before reading the job, await it after, and a change in between is
    /// not missed.
    pub fn next_change(&self) -> Change<'_> {
        listening(&self.notices.any)
    }

    /// A notice of the job's next change other than a claim
    /// ([`Signals::job_claimed`]), listening from now on.
    pub fn next_change_but_a_claim(&self) -> Change<'_> {
        listening(&self.notices.settling)
    }

    /// A notice of the next piece written to the job's output in this
    /// process, listening from now on.
    pub fn next_output(&self) -> Change<'_> {
        listening(&self.notices.output)
    }

    /// The pieces after `cursor` written in this process since the watch's
    /// first one, if they follow `cursor` with none missing (the first is
    /// `cursor + 1`, each the next): what a reader woken by
    /// [`JobWatch::next_output`] is shown without reading them. `None`
    /// when they do not (written before, or by another process, or no
    /// longer kept): the reader reads them.
    pub fn output_after(&self, cursor: i64) -> Option<Vec<OutputPiece>> {
        let written = self.notices.written.lock_anyway();
        let after: Vec<OutputPiece> = written.iter().filter(|piece| piece.seq > cursor).cloned().collect();
        let follows = after.iter().zip(cursor + 1..).all(|(piece, seq)| piece.seq == seq);
        (follows && !after.is_empty()).then_some(after)
    }

    /// How many changes the job has had in this process: taken after the
    /// notice of the next change, a count that moves is heard by it.
    pub fn changes(&self) -> u64 {
        self.notices.changes.load(Ordering::SeqCst)
    }

    /// Whether the job changed in this process since the watch was taken.
    /// Asked after taking a notice, a `false` means that the notice hears
    /// every change from the watch's taking on.
    pub fn changed_since_taken(&self) -> bool {
        self.notices.changes.load(Ordering::SeqCst) != self.since
    }
}

impl Drop for JobWatch<'_> {
    fn drop(&mut self) {
        let mut jobs = self.signals.jobs.lock_anyway();
        // The map's reference and ours: nobody else watches this job.
        if Arc::strong_count(&self.notices) == 2 {
            jobs.remove(&self.id);
        }
    }
}

impl Signals {
    /// A pending attempt was added: wake the worker now rather than at its
    /// next poll. A wake with no worker waiting is kept for the next wait.
    pub fn work_available(&self) {
        self.work.notify_one();
    }

    /// Wakes the worker once `delay` has passed (a retry's backoff).
    pub fn work_available_after(self: &std::sync::Arc<Self>, delay: std::time::Duration) {
        if delay.is_zero() {
            return self.work_available();
        }
        let signals = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            signals.work_available();
        });
    }

    /// Waits for [`Self::work_available`].
    pub async fn work(&self) {
        self.work.notified().await;
    }

    /// A job's stored state or attempts changed: wake its waiters, if any.
    pub fn job_changed(&self, id: JobId) {
        // Under the lock, without a clone: a watch being dropped meanwhile
        // still sees that nobody else holds the job's notice, and forgets it.
        if let Some(notices) = self.jobs.lock_anyway().get(&id) {
            notices.changed(false);
        }
    }

    /// `pieces` of the job's output were written (and committed): kept for
    /// its output's readers, who are woken. Not a change of the job: its
    /// waiters are not woken.
    pub fn output_grew(&self, id: JobId, pieces: &[OutputPiece]) {
        if let Some(notices) = self.jobs.lock_anyway().get(&id) {
            let mut written = notices.written.lock_anyway();
            for piece in pieces {
                let at = written.partition_point(|kept| kept.seq < piece.seq);
                if written.get(at).is_none_or(|kept| kept.seq != piece.seq) {
                    written.insert(at, piece.clone());
                }
            }
            let mut bytes: usize = written.iter().map(|piece| piece.text.len()).sum();
            while (bytes > WRITTEN_BYTES || written.len() > WRITTEN_PIECES) && written.len() > 1 {
                bytes -= written.remove(0).text.len();
            }
            drop(written);
            notices.output.notify_waiters();
        }
    }

    /// An attempt of the job was claimed (it is `running`): a change, which
    /// [`JobWatch::next_change_but_a_claim`] does not hear.
    pub fn job_claimed(&self, id: JobId) {
        if let Some(notices) = self.jobs.lock_anyway().get(&id) {
            notices.changed(true);
        }
    }

    /// The job finished (it won, or was canceled): its calls in flight in
    /// this process are aborted.
    pub fn job_finished(&self, id: JobId) {
        if let Some(list) = self.calls.lock_anyway().get(&id) {
            for (_, abort) in list {
                abort.send_replace(true);
            }
        }
    }

    /// Attempt `attempt`'s call in flight in this process is aborted (its
    /// streamed answer lost the job's output to another attempt's).
    pub fn abort_call(&self, job: JobId, attempt: AttemptId) {
        if let Some(list) = self.calls.lock_anyway().get(&job) {
            for (_, abort) in list.iter().filter(|(id, _)| *id == attempt) {
                abort.send_replace(true);
            }
        }
    }

    /// Watches the provider call of attempt `attempt` of job `job` for its
    /// job's end.
    pub fn watch_call(&self, job: JobId, attempt: AttemptId) -> CallWatch<'_> {
        let (abort, aborted) = watch::channel(false);
        self.calls.lock_anyway().entry(job).or_default().push((attempt, abort));
        CallWatch { signals: self, job, attempt, aborted }
    }

    /// How many jobs have provider calls in flight in this process.
    pub fn jobs_with_calls(&self) -> usize {
        self.calls.lock_anyway().len()
    }

    /// How many jobs someone waits on in this process.
    pub fn jobs_watched(&self) -> usize {
        self.jobs.lock_anyway().len()
    }

    /// Watches one job's changes.
    pub fn watch_job(&self, id: JobId) -> JobWatch<'_> {
        let mut jobs = self.jobs.lock_anyway();
        let notices = jobs.entry(id).or_default().clone();
        // Read under the lock, which every change is counted under.
        let since = notices.changes.load(Ordering::SeqCst);
        drop(jobs);
        JobWatch { signals: self, id, notices, since }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_the_waiters_of_that_job_only() {
        let signals = Signals::default();
        let (one, other) = (JobId::new(), JobId::new());
        let watching_one = signals.watch_job(one);
        let watching_other = signals.watch_job(other);
        let one_changed = watching_one.next_change();
        let other_changed = watching_other.next_change();
        // A change between taking the notice and awaiting it is not missed.
        signals.job_changed(one);
        tokio::time::timeout(std::time::Duration::from_secs(5), one_changed)
            .await
            .expect("the waiter of the changed job woke");
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), other_changed).await;
        assert!(woke.is_err(), "the waiter of another job slept on");
        drop((watching_one, watching_other));
        assert!(signals.jobs.lock().unwrap().is_empty(), "unwatched jobs are forgotten");
    }

    #[tokio::test]
    async fn a_claim_wakes_every_waiter_of_the_job_but_those_waiting_for_more_than_a_claim() {
        let signals = Signals::default();
        let job = JobId::new();
        let watching = signals.watch_job(job);
        let (any, settling) = (watching.next_change(), watching.next_change_but_a_claim());
        signals.job_claimed(job);
        tokio::time::timeout(std::time::Duration::from_secs(5), any).await.expect("a claim is a change");
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), settling).await;
        assert!(woke.is_err(), "a claim alone does not wake a wait for more than a claim");
        let (any, settling) = (watching.next_change(), watching.next_change_but_a_claim());
        signals.job_changed(job);
        let both = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            any.await;
            settling.await
        });
        both.await.expect("any other change wakes both");
    }

    #[tokio::test]
    async fn a_write_of_output_wakes_its_readers_and_is_no_change_of_the_job() {
        use futures_util::FutureExt;
        let signals = Signals::default();
        let job = JobId::new();
        let watching = signals.watch_job(job);
        let (any, output) = (watching.next_change(), watching.next_output());
        let before = watching.changes();
        signals.output_grew(job, &[]);
        assert!(output.now_or_never().is_some(), "a write of output wakes its readers");
        assert!(any.now_or_never().is_none(), "the job's waiters sleep on");
        assert_eq!(watching.changes(), before, "no change is counted");
        let output = watching.next_output();
        signals.job_changed(job);
        assert!(output.now_or_never().is_none(), "a change of the job is no write of output");
        assert_eq!(watching.changes(), before + 1);
    }

    fn piece(seq: i64) -> OutputPiece {
        OutputPiece { seq, attempt_number: 1, kind: "delta".into(), text: format!("piece {seq}") }
    }

    #[test]
    fn a_reader_is_shown_the_pieces_written_here_only_when_they_follow_its_cursor() {
        let signals = Signals::default();
        let job = JobId::new();
        signals.output_grew(job, &[piece(1)]);
        let watching = signals.watch_job(job);
        assert_eq!(watching.output_after(0), None, "written before the watch: not kept");
        signals.output_grew(job, &[piece(3)]);
        signals.output_grew(job, &[piece(2)]);
        assert_eq!(watching.output_after(1), Some(vec![piece(2), piece(3)]), "kept in order");
        assert_eq!(watching.output_after(2), Some(vec![piece(3)]));
        assert_eq!(watching.output_after(0), None, "piece 1 is missing: the reader reads them");
        assert_eq!(watching.output_after(3), None, "nothing after the cursor");
        signals.output_grew(job, &[piece(5)]);
        assert_eq!(watching.output_after(3), None, "piece 4 is missing");
        let big = OutputPiece { text: "x".repeat(WRITTEN_BYTES), ..piece(6) };
        signals.output_grew(job, std::slice::from_ref(&big));
        assert_eq!(watching.output_after(5), Some(vec![big]), "the last pieces are kept, the first let go");
        assert_eq!(watching.output_after(1), None);
    }

    #[tokio::test]
    async fn a_watch_knows_whether_its_job_changed_since_it_was_taken() {
        let signals = Signals::default();
        let job = JobId::new();
        let watching = signals.watch_job(job);
        assert!(!watching.changed_since_taken());
        signals.job_claimed(job);
        assert!(watching.changed_since_taken(), "a claim is a change");
        let later = signals.watch_job(job);
        assert!(!later.changed_since_taken(), "a watch counts from its own taking");
        signals.job_changed(job);
        assert!(later.changed_since_taken() && watching.changed_since_taken());
    }

    #[tokio::test]
    async fn a_finished_job_aborts_the_calls_in_flight_of_that_job_only() {
        let signals = Signals::default();
        let (one, other) = (JobId::new(), JobId::new());
        let mut first = signals.watch_call(one, AttemptId::new());
        let mut elsewhere = signals.watch_call(other, AttemptId::new());
        assert_eq!(signals.jobs_with_calls(), 2);
        signals.job_finished(one);
        tokio::time::timeout(std::time::Duration::from_secs(5), first.job_finished())
            .await
            .expect("the call of the finished job is aborted");
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), elsewhere.job_finished()).await;
        assert!(woke.is_err(), "the call of another job goes on");
        drop((first, elsewhere));
        assert_eq!(signals.jobs_with_calls(), 0, "calls that ended are forgotten");
    }
}
