//! Making replays and same-key storms cheap without letting this process
//! decide anything the database decides (I1).
//!
//! Two facts about an idempotency key never change once a job holds it: which
//! job holds it, and that job's fingerprint (with its provider). This process remembers them for
//! keys it has seen taken ([`TakenKeys`]), so a replay costs one read of the
//! job by its primary key instead of a refused insert and a read by key.
//!
//! Requests with the same key that arrive while one of them is at the
//! database wait for that one ([`SharedCreates`]): a storm of a thousand identical
//! requests is one statement. A waiter answers from the job the first one
//! created or found; its request overlapped that one, so the job as it was at
//! that moment is a correct answer to it. If the first one fails, the next
//! waiter goes to the database itself.
//!
//! Requests that read the same job at once share reads ([`SharedReads`]):
//! a request is answered by a read that began after it arrived (so it never
//! sees the job as it was before the request was made), but one read serves
//! every request that arrived before it began.
//!
//! None of these is a check in code standing in for the unique constraint: a key
//! this process has not seen taken always goes to the database, which is the
//! only place where a key is ever granted.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::domain::{Fingerprint, IdempotencyKey, Job, JobId, OwnerId};
use crate::sync::LockAnyway;

type Key = (OwnerId, IdempotencyKey);

/// Who holds a key that is taken.
#[derive(Clone, Debug)]
pub(crate) struct Holder {
    /// The job that holds it.
    pub job_id: JobId,
    /// That job's fingerprint.
    pub fingerprint: Fingerprint,
    /// That job's task (for metrics of a conflict).
    pub task: Arc<str>,
    /// That job's provider (a request naming it may replay a job made
    /// without naming one).
    pub provider: Arc<str>,
}

/// Keys known to be taken, bounded: two generations of at most half the
/// capacity each; when the young one is full it becomes the old one and the
/// old one is dropped, so recently used keys stay.
pub(crate) struct TakenKeys {
    capacity: usize,
    generations: Mutex<(HashMap<Key, Holder>, HashMap<Key, Holder>)>,
}

impl TakenKeys {
    /// A cache of at most `capacity` keys.
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity: (capacity / 2).max(1), generations: Mutex::new((HashMap::new(), HashMap::new())) }
    }

    /// Who holds `key`, if this process has seen it taken.
    pub(crate) fn get(&self, owner: &OwnerId, key: &IdempotencyKey) -> Option<Holder> {
        let mut generations = self.generations.lock_anyway();
        // A borrowed lookup needs the tuple itself; the clone is two short strings.
        let wanted = (owner.clone(), key.clone());
        if let Some(holder) = generations.0.get(&wanted) {
            return Some(holder.clone());
        }
        let holder = generations.1.remove(&wanted)?;
        Self::insert_young(&mut generations, self.capacity, wanted, holder.clone());
        Some(holder)
    }

    /// Remembers that `job` holds `key`.
    pub(crate) fn remember(&self, key: &IdempotencyKey, job: &Job) {
        let key = (job.owner.clone(), key.clone());
        let holder = Holder {
            job_id: job.id,
            fingerprint: job.fingerprint,
            task: Arc::from(job.task.as_str()),
            provider: Arc::from(job.provider.as_str()),
        };
        let mut generations = self.generations.lock_anyway();
        Self::insert_young(&mut generations, self.capacity, key, holder);
    }

    /// Forgets `key` (its job could not be read back).
    pub(crate) fn forget(&self, owner: &OwnerId, key: &IdempotencyKey) {
        let wanted = (owner.clone(), key.clone());
        let mut generations = self.generations.lock_anyway();
        generations.0.remove(&wanted);
        generations.1.remove(&wanted);
    }

    /// Keys remembered now, in both generations.
    pub(crate) fn len(&self) -> usize {
        let generations = self.generations.lock_anyway();
        generations.0.len() + generations.1.len()
    }

    fn insert_young(
        generations: &mut (HashMap<Key, Holder>, HashMap<Key, Holder>),
        capacity: usize,
        key: Key,
        holder: Holder,
    ) {
        if generations.0.len() >= capacity && !generations.0.contains_key(&key) {
            generations.1 = std::mem::take(&mut generations.0);
        }
        generations.0.insert(key, holder);
    }
}

/// Requests with the same key at the database at once: the first goes, the
/// others wait for its job.
#[derive(Default)]
pub(crate) struct SharedCreates {
    flying: Mutex<HashMap<Key, Arc<OnceCell<Arc<Job>>>>>,
}

/// How a request's part in a shared create went.
pub(crate) enum SharedCreate<E> {
    /// This request went to the database and created the job.
    Created(Arc<Job>),
    /// The job came from the database (this request found the key taken) or
    /// from the request that went for this one.
    Taken(Arc<Job>),
    /// This request went to the database and failed.
    Failed(E),
}

/// What the one insert of a shared create gave.
pub(crate) enum InsertOutcome<E> {
    /// A new job.
    Created(Job),
    /// The job that already held the key.
    Existing(Job),
    /// An error.
    Failed(E),
}

impl SharedCreates {
    /// Runs `insert` unless a request with the same key is already at the
    /// database, in which case its job is the answer. A failed insert lets
    /// the next waiter make its own.
    pub(crate) async fn create_once<E, F, Fut>(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
        insert: F,
    ) -> SharedCreate<E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = InsertOutcome<E>>,
    {
        let wanted = (owner.clone(), key.clone());
        let cell = {
            let mut flying = self.flying.lock_anyway();
            flying.entry(wanted.clone()).or_default().clone()
        };
        // Done, failed or given up (its request dropped), this create is
        // over for newcomers: they insert on their own (or find the key in
        // `TakenKeys`).
        let _guard = SharedCreateGuard { flying: &self.flying, wanted, cell: cell.clone() };
        let mut outcome: Option<SharedCreate<E>> = None;
        let result = cell
            .get_or_try_init(|| async {
                match insert().await {
                    InsertOutcome::Created(job) => {
                        let job = Arc::new(job);
                        outcome = Some(SharedCreate::Created(job.clone()));
                        Ok(job)
                    }
                    InsertOutcome::Existing(job) => Ok(Arc::new(job)),
                    InsertOutcome::Failed(error) => {
                        outcome = Some(SharedCreate::Failed(error));
                        Err(())
                    }
                }
            })
            .await
            .cloned();
        match (outcome, result) {
            (Some(outcome), _) => outcome,
            (None, Ok(job)) => SharedCreate::Taken(job),
            (None, Err(())) => unreachable!("an insert that failed left its error"),
        }
    }

    /// Keys at the database now (for tests and gauges).
    pub(crate) fn len(&self) -> usize {
        self.flying.lock_anyway().len()
    }

    #[cfg(test)]
    /// Whether no key is at the database now.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request's part in a shared create: when the create is done, failed or
/// dropped, it leaves the map (unless a newer one has taken its key).
struct SharedCreateGuard<'a> {
    flying: &'a Mutex<HashMap<Key, Arc<OnceCell<Arc<Job>>>>>,
    wanted: Key,
    cell: Arc<OnceCell<Arc<Job>>>,
}

impl Drop for SharedCreateGuard<'_> {
    fn drop(&mut self) {
        let mut flying = self.flying.lock_anyway();
        if flying.get(&self.wanted).is_some_and(|current| Arc::ptr_eq(current, &self.cell)) {
            flying.remove(&self.wanted);
        }
    }
}

/// The reads of one job: how many began, and what the last one found.
#[derive(Default)]
struct JobReads {
    began: u64,
    last: Option<Option<Arc<Job>>>,
}

/// The reads of one job, shared by the requests that read it at once.
type ReadsOfJob = Arc<tokio::sync::Mutex<JobReads>>;

/// A request's place in a job's line of shared reads: when it leaves (its read
/// done, or its request dropped) and nobody else is in the line, the line
/// is forgotten.
struct SharedReadGuard<'a> {
    jobs: &'a Mutex<HashMap<(OwnerId, JobId), ReadsOfJob>>,
    wanted: (OwnerId, JobId),
    reads: ReadsOfJob,
}

impl Drop for SharedReadGuard<'_> {
    fn drop(&mut self) {
        let mut jobs = self.jobs.lock_anyway();
        // The map's and this one: nobody else holds this job's line.
        if Arc::strong_count(&self.reads) == 2 {
            jobs.remove(&self.wanted);
        }
    }
}

/// Reads of one job by many requests at once, shared.
#[derive(Default)]
pub(crate) struct SharedReads {
    jobs: Mutex<HashMap<(OwnerId, JobId), ReadsOfJob>>,
    began: std::sync::atomic::AtomicU64,
}

impl SharedReads {
    /// The job as a read that began after this call found it: the read of
    /// the request ahead in line if it began after this one arrived, or a
    /// read of this request's own (`read`).
    pub(crate) async fn read<E, F, Fut>(&self, owner: &OwnerId, id: JobId, read: F) -> Result<Option<Arc<Job>>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<Job>, E>>,
    {
        let wanted = (owner.clone(), id);
        let reads = {
            let mut jobs = self.jobs.lock_anyway();
            jobs.entry(wanted.clone()).or_default().clone()
        };
        let guard = SharedReadGuard { jobs: &self.jobs, wanted, reads };
        let reads = &guard.reads;
        // Reads are numbered in one sequence for all jobs, so a number taken
        // now is below that of any read that begins later.
        let arrived = self.began.load(std::sync::atomic::Ordering::SeqCst);
        let answer = {
            let mut line = reads.lock().await;
            match &line.last {
                // A read that began after we arrived has ended (we hold the line).
                Some(found) if line.began > arrived => Ok(found.clone()),
                _ => {
                    line.began = self.began.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    line.last = None;
                    let found = read().await.map(|job| job.map(Arc::new));
                    if let Ok(found) = &found {
                        line.last = Some(found.clone());
                    }
                    found
                }
            }
        };
        drop(guard);
        answer
    }

    /// Jobs being read now (for tests).
    pub(crate) fn len(&self) -> usize {
        self.jobs.lock_anyway().len()
    }

    #[cfg(test)]
    /// Whether no job is being read now.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn key(raw: &str) -> IdempotencyKey {
        IdempotencyKey::parse(raw.as_bytes()).unwrap()
    }

    fn job(owner: &str, key: &str) -> Job {
        let fingerprint = Fingerprint::of_job("summarize", &serde_json::json!({"text": key}), "sim-fast");
        let new = crate::store::NewJob {
            owner: OwnerId::parse(owner).unwrap(),
            id: JobId::new(),
            idempotency_key: self::key(key),
            fingerprint,
            task: "summarize".into(),
            input: serde_json::json!({"text": key}),
            provider: "sim-fast".into(),
            first_attempt_id: crate::domain::AttemptId::new(),
            first_provider: None,
            max_cost: None,
            trace: None,
        };
        new.created(chrono::Utc::now())
    }

    #[test]
    fn taken_keys_keep_the_recent_generation_and_drop_the_oldest() {
        // Two generations of two keys.
        let taken = TakenKeys::new(4);
        let owner = OwnerId::parse("o").unwrap();
        let jobs: Vec<Job> = (0..5).map(|i| job("o", &format!("k{i}"))).collect();
        for (i, job) in jobs[..3].iter().enumerate() {
            taken.remember(&key(&format!("k{i}")), job);
        }
        // k0 and k1 were moved to the old generation when k2 arrived.
        assert_eq!(taken.get(&owner, &key("k0")).map(|h| h.job_id), Some(jobs[0].id));
        taken.remember(&key("k3"), &jobs[3]);
        taken.remember(&key("k4"), &jobs[4]);
        assert!(taken.get(&owner, &key("k1")).is_none(), "k1 was never used again: dropped");
        assert_eq!(taken.len(), 4, "k2 and k0 old, k3 and k4 young");
        assert_eq!(taken.get(&owner, &key("k4")).map(|h| h.fingerprint), Some(jobs[4].fingerprint));
        let other = OwnerId::parse("p").unwrap();
        assert!(taken.get(&other, &key("k4")).is_none(), "keys are per owner");
        taken.forget(&owner, &key("k4"));
        assert!(taken.get(&owner, &key("k4")).is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_storm_of_one_key_shares_its_trips() {
        let flights = Arc::new(SharedCreates::default());
        let trips = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Barrier::new(100));
        let owner = OwnerId::parse("o").unwrap();
        let key = self::key("k");
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (flights, trips, gate, owner, key) =
                    (flights.clone(), trips.clone(), gate.clone(), owner.clone(), key.clone());
                tokio::spawn(async move {
                    gate.wait().await;
                    let outcome = flights
                        .create_once(&owner, &key, || async {
                            trips.fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            InsertOutcome::<()>::Created(job("o", "k"))
                        })
                        .await;
                    match outcome {
                        SharedCreate::Created(job) => (true, job.id),
                        SharedCreate::Taken(job) => (false, job.id),
                        SharedCreate::Failed(()) => panic!("no trip fails here"),
                    }
                })
            })
            .collect();
        let mut created = 0;
        let mut ids = std::collections::HashSet::new();
        for task in tasks {
            let (was_created, id) = task.await.unwrap();
            created += usize::from(was_created);
            ids.insert(id);
        }
        // Requests that came after the create was done make their own insert (in
        // the service, they find the key in `TakenKeys` first); each trip here
        // "creates", so count trips against creations.
        assert_eq!(created, trips.load(Ordering::SeqCst));
        assert_eq!(ids.len(), trips.load(Ordering::SeqCst));
        assert!(trips.load(Ordering::SeqCst) < 100, "waiters shared a trip");
        assert!(flights.is_empty(), "landed flights are removed");
    }

    #[tokio::test]
    async fn a_failed_trip_lets_the_next_waiter_go_itself() {
        let flights = Arc::new(SharedCreates::default());
        let owner = OwnerId::parse("o").unwrap();
        let key = self::key("k");
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (flights, owner, key) = (flights.clone(), owner.clone(), key.clone());
            tokio::spawn(async move {
                flights
                    .create_once(&owner, &key, || async move {
                        wait.await.ok();
                        InsertOutcome::<&str>::Failed("database down")
                    })
                    .await
            })
        };
        while flights.is_empty() {
            tokio::task::yield_now().await;
        }
        let second = {
            let (flights, owner, key) = (flights.clone(), owner.clone(), key.clone());
            tokio::spawn(async move {
                flights.create_once(&owner, &key, || async { InsertOutcome::<&str>::Created(job("o", "k")) }).await
            })
        };
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        assert!(matches!(first.await.unwrap(), SharedCreate::Failed("database down")));
        assert!(matches!(second.await.unwrap(), SharedCreate::Created(_)), "the waiter went to the database itself");
        assert!(flights.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_of_one_job_share_reads_that_began_after_they_arrived() {
        let reads = Arc::new(SharedReads::default());
        let begun = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let gate = Arc::new(tokio::sync::Barrier::new(100));
        let owner = OwnerId::parse("o").unwrap();
        let id = job("o", "k").id;
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (reads, begun, gate, owner) = (reads.clone(), begun.clone(), gate.clone(), owner.clone());
                tokio::spawn(async move {
                    gate.wait().await;
                    let arrived = begun.load(Ordering::SeqCst);
                    let found = reads
                        .read(&owner, id, || async {
                            // The read's number travels in the job it finds.
                            let number = begun.fetch_add(1, Ordering::SeqCst) + 1;
                            tokio::task::yield_now().await;
                            let mut found = job("o", "k");
                            found.winning_attempt = Some(number);
                            Ok::<_, ()>(Some(found))
                        })
                        .await
                        .unwrap()
                        .unwrap();
                    (arrived, found.winning_attempt.unwrap())
                })
            })
            .collect();
        for task in tasks {
            let (arrived, read) = task.await.unwrap();
            assert!(
                read > arrived,
                "answered by read {read}, which began before the request arrived (after read {arrived})"
            );
        }
        let total = begun.load(Ordering::SeqCst);
        assert!(total < 100, "{total} reads for 100 readers: none shared");
        assert!(reads.is_empty(), "a job nobody reads is forgotten");
    }

    /// A request dropped while at the database (its client gone, or its
    /// deadline passed) leaves neither its flight nor its line of reads
    /// behind.
    #[tokio::test]
    async fn a_request_dropped_midway_leaves_no_flight_and_no_line_of_reads() {
        let (flights, reads) = (SharedCreates::default(), SharedReads::default());
        let owner = OwnerId::parse("o").unwrap();
        let k = key("k");
        let stuck = flights.create_once(&owner, &k, std::future::pending::<InsertOutcome<()>>);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), stuck).await.is_err());
        assert!(flights.is_empty(), "the dropped flight is gone");
        let id = job("o", "k").id;
        let stuck = reads.read(&owner, id, std::future::pending::<Result<Option<Job>, ()>>);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), stuck).await.is_err());
        assert!(reads.is_empty(), "the dropped read's line is gone");
    }
}
