//! The store conformance suite: every behaviour the rest of onejob relies on,
//! written once against `dyn Store` and run for each backend, as
//! `BACKEND::CASE`, each on a fresh store with the suite's qualifications
//! (see [`conformance_store`]). Races are run as races: tasks released
//! together by a barrier.

use std::sync::Arc;
use std::time::Duration;

use onejob::domain::policy::{NextAttempt, PastAttempt};
use onejob::domain::{
    AdmissionRefusal, AttemptError, AttemptId, AttemptLimits, AttemptOrigin, AttemptState, Fingerprint, IdempotencyKey,
    JobId, JobState, OwnerId,
};
use onejob::store::{
    Admission, AttemptRef, Cancel, ClaimRules, CreateJob, JobFilter, NewAttempt, NewJob, Resolution, Resolved, Store,
    TaskRules, Transition,
};
use serde_json::json;
use tokio::sync::Barrier;

use crate::common::{Backend, new_job, postgres_store, sqlite_store};

pub type Shared = Store;

const LEASE: Duration = Duration::from_secs(60);

fn leases() -> ClaimRules {
    let by_provider = vec![("sim-fast".into(), LEASE), ("sim-slow".into(), LEASE), ("sim-hang".into(), Duration::ZERO)];
    ClaimRules::new(LEASE, by_provider)
}

pub struct Rules {
    pub limits: AttemptLimits,
    pub qualified: bool,
    pub retry: bool,
}

impl TaskRules for Rules {
    fn limits(&self, _task: &str) -> AttemptLimits {
        self.limits
    }
    fn contract_hash(&self, _task: &str, _provider: &str) -> Option<[u8; 32]> {
        Some(if self.qualified { CONTRACT } else { OTHER_CONTRACT })
    }
    fn retry_candidates(&self, _task: &str, _primary: &str, attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
        // When asked to: after a retryable failure, sim-bad-json (never
        // qualified, so skipped) and then sim-slow.
        let retry = self.retry
            && attempts.len() < self.limits.max_attempts as usize
            && attempts.last().is_some_and(|a| a.retryable);
        if !retry {
            return vec![];
        }
        ["sim-bad-json", "sim-slow"].map(|p| NextAttempt { provider: p.into(), delay: Duration::ZERO }).to_vec()
    }
}

/// The contract hash these tests qualify providers for.
const CONTRACT: [u8; 32] = [7; 32];
const OTHER_CONTRACT: [u8; 32] = [8; 32];

/// Every test starts with sim-fast and sim-slow qualified for `summarize`;
/// sim-bad-json never is.
pub async fn prepare(store: &Store) {
    for provider in ["sim-fast", "sim-slow"] {
        store.insert_qualification(provider, "summarize", &CONTRACT, true, &json!({"summary": "3/3"})).await.unwrap();
    }
}

/// What each case runs on: a fresh store of `backend`, prepared.
pub(crate) async fn conformance_store(backend: Backend) -> Shared {
    let store: Shared = match backend {
        Backend::Postgres => postgres_store().await,
        Backend::Sqlite => sqlite_store().await,
    };
    prepare(&store).await;
    store
}

pub(crate) fn rules(max_attempts: u32, max_in_flight: u32) -> Rules {
    Rules { limits: AttemptLimits { max_attempts, max_in_flight }, qualified: true, retry: false }
}

pub(crate) fn owner(name: &str) -> OwnerId {
    OwnerId::parse(name).unwrap()
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(text.as_bytes()).unwrap()
}

fn attempt_on(provider: &str, key_text: &str) -> NewAttempt {
    NewAttempt {
        id: AttemptId::new(),
        provider: Some(provider.into()),
        idempotency_key: Some(key(key_text)),
        origin: AttemptOrigin::Client,
        delay: Duration::ZERO,
        trace: None,
    }
}

pub(crate) fn at(job: JobId, number: i32) -> AttemptRef {
    AttemptRef { owner: owner("alice"), job_id: job, number }
}

pub(crate) async fn create(store: &Store, key_text: &str) -> JobId {
    match store.create_job(&new_job("alice", key_text, json!({"text": key_text}))).await.unwrap() {
        CreateJob::Created(job) => job.id,
        CreateJob::Existing(_) => panic!("key {key_text} was new"),
    }
}

async fn claim_one(store: &Store) -> AttemptRef {
    let claimed = store.claim_attempts("test-worker", 1, &leases()).await.unwrap().attempts;
    assert_eq!(claimed.len(), 1, "one pending attempt to claim");
    claimed[0].attempt.clone()
}

/// A job of alice's with `running` attempts all running (1, 2, …).
pub(crate) async fn job_with_running(store: &Store, key_text: &str, running: i32) -> JobId {
    let job = create(store, key_text).await;
    claim_one(store).await;
    for n in 2..=running {
        let admitted = store
            .admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", &format!("{key_text}-{n}")), &rules(100, 100))
            .await
            .unwrap();
        assert!(matches!(admitted, Admission::Admitted(_)), "{admitted:?}");
        claim_one(store).await;
    }
    job
}

pub(crate) async fn job_state(store: &Store, job: JobId) -> JobState {
    store.get_job(&owner("alice"), job).await.unwrap().unwrap().state
}

pub(crate) async fn attempt_states(store: &Store, job: JobId) -> Vec<AttemptState> {
    store.get_job(&owner("alice"), job).await.unwrap().unwrap().attempts.iter().map(|a| a.state).collect()
}

pub(crate) async fn event_kinds(store: &Store, job: JobId) -> Vec<String> {
    store.list_events(&owner("alice"), job).await.unwrap().into_iter().map(|e| e.kind.to_string()).collect()
}

pub async fn create_job_inserts_the_job_with_one_pending_attempt(store: Shared) {
    let new = new_job("alice", "k1", json!({"text": "hello"}));
    let CreateJob::Created(job) = store.create_job(&new).await.unwrap() else { panic!("a new key creates") };
    assert_eq!((job.id, job.state), (new.id, JobState::Queued));
    let stored = store.get_job(&owner("alice"), job.id).await.unwrap().expect("the job is stored");
    assert_eq!(stored.fingerprint, new.fingerprint);
    assert_eq!(stored.input, json!({"text": "hello"}));
    assert_eq!(stored.attempts.len(), 1);
    let first = &stored.attempts[0];
    assert_eq!((first.number, first.id, first.state), (1, new.first_attempt_id, AttemptState::Pending));
    assert_eq!(first.provider, "sim-fast");
    assert_eq!(event_kinds(&store, job.id).await, ["job-created"]);
}

pub async fn second_create_with_the_same_key_finds_the_existing_job(store: Shared) {
    let first = new_job("alice", "k1", json!({"text": "hello"}));
    store.create_job(&first).await.unwrap();
    let again = new_job("alice", "k1", json!({"text": "other"}));
    let CreateJob::Existing(job) = store.create_job(&again).await.unwrap() else { panic!("the key is taken") };
    assert_eq!(job.id, first.id);
    assert_eq!(job.fingerprint, first.fingerprint);
    assert_ne!(job.fingerprint, again.fingerprint);
    assert_eq!(job.attempts.len(), 1, "no second first attempt");
    let found = store.find_job_by_key(&owner("alice"), &key("k1")).await.unwrap().unwrap();
    assert_eq!(found.id, first.id);
}

pub async fn fifty_concurrent_creates_with_one_key_make_one_job(store: Shared) {
    let barrier = Arc::new(Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                let new = new_job("alice", "storm", json!({"text": "same"}));
                barrier.wait().await;
                store.create_job(&new).await.unwrap()
            })
        })
        .collect();
    let mut created = 0;
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            CreateJob::Created(job) => {
                created += 1;
                ids.insert(job.id);
            }
            CreateJob::Existing(job) => {
                ids.insert(job.id);
            }
        }
    }
    assert_eq!(created, 1, "exactly one creator");
    assert_eq!(ids.len(), 1, "every caller got the same job");
    let listed = store.list_jobs(&owner("alice"), &JobFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(attempt_states(&store, listed[0].id).await, [AttemptState::Pending]);
}

/// 200 creations released together over 50 keys (four each): one job per
/// key, every caller answered with its key's job, every job with its
/// attempt and event (on SQLite these are committed in groups).
pub async fn concurrent_creations_of_many_keys_make_one_job_per_key(store: Shared) {
    let barrier = Arc::new(Barrier::new(200));
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                let key = format!("many-{}", i % 50);
                let new = new_job("alice", &key, json!({"text": key}));
                barrier.wait().await;
                (key, store.create_job(&new).await.unwrap())
            })
        })
        .collect();
    let mut by_key: std::collections::HashMap<String, std::collections::HashSet<JobId>> = Default::default();
    let mut created = 0;
    for task in tasks {
        let (key, outcome) = task.await.unwrap();
        let job = match outcome {
            CreateJob::Created(job) => {
                created += 1;
                job
            }
            CreateJob::Existing(job) => job,
        };
        assert_eq!(job.idempotency_key, key);
        by_key.entry(key).or_default().insert(job.id);
    }
    assert_eq!(created, 50, "one creator per key");
    assert!(by_key.values().all(|ids| ids.len() == 1), "every caller of a key got the same job");
    let listed = store.list_jobs(&owner("alice"), &JobFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 50);
    for job in listed {
        assert_eq!(attempt_states(&store, job.id).await, [AttemptState::Pending]);
        assert_eq!(event_kinds(&store, job.id).await, ["job-created"]);
    }
}

/// Creations that fail (here: a job id already used) fail alone: the
/// creations written beside them are created and answered.
pub async fn a_creation_that_fails_does_not_fail_the_others(store: Shared) {
    let taken = create(&store, "first").await;
    let barrier = Arc::new(Barrier::new(40));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut new = new_job("alice", &format!("mixed-{i}"), json!({"text": i}));
                if i % 10 == 0 {
                    new.id = taken;
                }
                barrier.wait().await;
                (i, store.create_job(&new).await)
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if i % 10 == 0 {
            assert!(outcome.is_err(), "creation {i} reused a job id: {outcome:?}");
        } else {
            assert!(matches!(outcome, Ok(CreateJob::Created(_))), "creation {i}: {outcome:?}");
        }
    }
    let listed = store.list_jobs(&owner("alice"), &JobFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 1 + 36);
}

pub async fn the_same_key_under_two_owners_makes_two_jobs(store: Shared) {
    let a = store.create_job(&new_job("alice", "shared", json!({"text": "x"}))).await.unwrap();
    let b = store.create_job(&new_job("bob", "shared", json!({"text": "x"}))).await.unwrap();
    let (CreateJob::Created(a), CreateJob::Created(b)) = (a, b) else { panic!("both keys are new to their owner") };
    assert_ne!(a.id, b.id);
}

pub async fn another_owner_can_neither_see_nor_touch_a_job(store: Shared) {
    let job = job_with_running(&store, "mine", 1).await;
    let bob = owner("bob");
    assert!(store.get_job(&bob, job).await.unwrap().is_none());
    assert!(store.list_jobs(&bob, &JobFilter { limit: 10, ..Default::default() }).await.unwrap().is_empty());
    assert!(store.list_events(&bob, job).await.unwrap().is_empty());
    let admitted = store.admit_attempt(&bob, job, &attempt_on("sim-fast", "b1"), &rules(5, 2)).await.unwrap();
    assert!(matches!(admitted, Admission::JobNotFound), "{admitted:?}");
    let bobs = AttemptRef { owner: bob, job_id: job, number: 1 };
    assert_eq!(store.finish_attempt(&bobs, &json!({"x": 1}), None, None).await.unwrap(), Transition::NotFound);
    assert_eq!(
        store.fail_attempt(&bobs, &AttemptError::new("x", "y"), &rules(5, 2), None, None).await.unwrap(),
        Transition::NotFound
    );
    assert_eq!(job_state(&store, job).await, JobState::Running);
}

async fn refusal(store: &Store, job: JobId, key_text: &str, rules: &Rules) -> AdmissionRefusal {
    match store.admit_attempt(&owner("alice"), job, &attempt_on("sim-fast", key_text), rules).await.unwrap() {
        Admission::Refused { refusal, .. } => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub async fn admission_refuses_while_an_attempt_is_pending(store: Shared) {
    let job = create(&store, "k").await;
    assert_eq!(refusal(&store, job, "a2", &rules(5, 2)).await, AdmissionRefusal::AttemptPending);
    assert!(event_kinds(&store, job).await.contains(&"admission-refused".to_owned()));
}

pub async fn admission_refuses_while_an_attempt_is_unknown_and_admits_once_it_is_resolved(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let timeout = AttemptError::new("timeout", "deadline passed");
    assert_eq!(store.mark_unknown(&at(job, 1), &timeout, None, None).await.unwrap(), Transition::Applied);
    assert_eq!(job_state(&store, job).await, JobState::Unknown);
    assert_eq!(refusal(&store, job, "a2", &rules(5, 2)).await, AdmissionRefusal::AttemptOutcomeUnknown);
    let resolved = store
        .resolve_unknown(
            &at(job, 1),
            &Resolution::Failed,
            &Resolved::because("provider says it never ran"),
            &rules(5, 2),
        )
        .await;
    assert_eq!(resolved.unwrap(), Transition::Failed { next: None });
    assert_eq!(job_state(&store, job).await, JobState::Failed);
    let admitted =
        store.admit_attempt(&owner("alice"), job, &attempt_on("sim-fast", "a3"), &rules(5, 2)).await.unwrap();
    assert!(matches!(admitted, Admission::Admitted(ref a) if a.number == 2), "{admitted:?}");
    assert_eq!(job_state(&store, job).await, JobState::Queued);
}

pub async fn admission_refuses_beyond_max_in_flight(store: Shared) {
    let job = job_with_running(&store, "k", 2).await;
    assert_eq!(refusal(&store, job, "a3", &rules(5, 2)).await, AdmissionRefusal::TooManyAttemptsInFlight);
}

pub async fn admission_refuses_beyond_max_attempts(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store
        .fail_attempt(&at(job, 1), &AttemptError::new("provider-error", "503"), &rules(5, 2), None, None)
        .await
        .unwrap();
    assert_eq!(refusal(&store, job, "a2", &rules(1, 2)).await, AdmissionRefusal::AttemptLimitReached);
}

pub async fn admission_refuses_a_finished_job(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    assert!(matches!(
        store.finish_attempt(&at(job, 1), &json!({"ok": true}), None, None).await.unwrap(),
        Transition::Won { .. }
    ));
    assert_eq!(refusal(&store, job, "a2", &rules(5, 2)).await, AdmissionRefusal::JobFinished);
}

pub async fn admission_refuses_an_unqualified_provider_and_says_why(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let refused = |provider: &'static str, key_text: &'static str, rules: Rules| {
        let store = store.clone();
        async move {
            match store.admit_attempt(&owner("alice"), job, &attempt_on(provider, key_text), &rules).await.unwrap() {
                Admission::Refused { refusal: AdmissionRefusal::ProviderNotQualified, reason } => reason.unwrap(),
                other => panic!("expected provider-not-qualified, got {other:?}"),
            }
        }
    };
    assert!(refused("sim-bad-json", "a", rules(5, 2)).await.contains("never qualified"));
    // The contract changed since sim-slow passed.
    let changed = Rules { qualified: false, ..rules(5, 2) };
    assert!(refused("sim-slow", "b", changed).await.contains("changed since"));
    store
        .insert_qualification("sim-bad-json", "summarize", &CONTRACT, false, &json!({"summary": "0/3 examples passed"}))
        .await
        .unwrap();
    let failed = refused("sim-bad-json", "c", rules(5, 2)).await;
    assert!(failed.contains("failed qualification") && failed.contains("0/3"), "{failed}");
    // The job's own provider needs no qualification.
    let own = store
        .admit_attempt(&owner("alice"), job, &attempt_on("sim-fast", "d"), &Rules { qualified: false, ..rules(5, 2) })
        .await;
    assert!(matches!(own.unwrap(), Admission::Admitted(_)));
}

pub async fn admission_replays_a_key_and_refuses_it_for_another_provider(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let first = store.admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", "fb"), &rules(5, 2)).await.unwrap();
    let Admission::Admitted(first) = first else { panic!("admitted") };
    // The same key again answers with the same attempt, even though a
    // pending attempt would now refuse a new one.
    let again = store.admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", "fb"), &rules(5, 2)).await.unwrap();
    assert!(matches!(again, Admission::Replayed(ref a) if a.id == first.id), "{again:?}");
    let other = store.admit_attempt(&owner("alice"), job, &attempt_on("sim-fast", "fb"), &rules(5, 2)).await.unwrap();
    assert!(matches!(other, Admission::KeyReused(ref a) if a.number == first.number), "{other:?}");
    assert_eq!(attempt_states(&store, job).await.len(), 2);
}

pub async fn an_attempt_without_a_provider_goes_to_the_jobs_primary(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let new = NewAttempt { provider: None, ..attempt_on("ignored", "retry") };
    let Admission::Admitted(attempt) = store.admit_attempt(&owner("alice"), job, &new, &rules(5, 2)).await.unwrap()
    else {
        panic!("admitted")
    };
    assert_eq!(attempt.provider, "sim-fast");
}

pub async fn twenty_concurrent_admissions_never_leave_two_pending(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", &format!("c{i}")), &rules(50, 50))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Admission::Admitted(_) => admitted += 1,
            Admission::Refused { refusal: AdmissionRefusal::AttemptPending, .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(admitted, 1);
    let pending = attempt_states(&store, job).await.iter().filter(|s| **s == AttemptState::Pending).count();
    assert_eq!(pending, 1);
}

pub async fn reverse_order_finish_makes_the_second_to_finish_lose(store: Shared) {
    // Attempt 1 left first, attempt 2 second; 2 returns first and wins.
    let job = job_with_running(&store, "k", 2).await;
    let fast = json!({"summary": "from the fallback"});
    let slow = json!({"summary": "from the primary"});
    assert_eq!(
        store.finish_attempt(&at(job, 2), &fast, None, None).await.unwrap(),
        Transition::Won { canceled: vec![] }
    );
    assert_eq!(
        store.finish_attempt(&at(job, 1), &slow, None, None).await.unwrap(),
        Transition::Lost { winner: Some(2) }
    );
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.state, JobState::Succeeded);
    assert_eq!(stored.winning_attempt, Some(2));
    assert_eq!(stored.result, Some(fast));
    assert_eq!(stored.attempts[0].state, AttemptState::Superseded);
    assert_eq!(stored.attempts[0].output, Some(slow), "the loser's output is kept for audit");
    let events = store.list_events(&owner("alice"), job).await.unwrap();
    let lost = events.iter().find(|e| e.kind == "race-lost").expect("the lost race is recorded");
    assert_eq!(lost.attempt_number, Some(1));
    assert_eq!((lost.detail["loser"].clone(), lost.detail["winner"].clone()), (json!(1), json!(2)));
}

pub async fn concurrent_finishes_have_exactly_one_winner(store: Shared) {
    let job = job_with_running(&store, "k", 8).await;
    let barrier = Arc::new(Barrier::new(8));
    let tasks: Vec<_> = (1..=8)
        .map(|n| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                (n, store.finish_attempt(&at(job, n), &json!({"by": n}), None, None).await.unwrap())
            })
        })
        .collect();
    let mut winners = vec![];
    for task in tasks {
        let (n, outcome) = task.await.unwrap();
        match outcome {
            Transition::Won { .. } => winners.push(n),
            Transition::Lost { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "one winner, got {winners:?}");
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.winning_attempt, Some(winners[0]));
    assert_eq!(stored.result, Some(json!({"by": winners[0]})));
    let superseded = stored.attempts.iter().filter(|a| a.state == AttemptState::Superseded).count();
    assert_eq!(superseded, 7);
    let lost = event_kinds(&store, job).await.iter().filter(|k| *k == "race-lost").count();
    assert_eq!(lost, 7);
}

pub async fn winning_cancels_pending_siblings(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store.admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", "a2"), &rules(5, 2)).await.unwrap();
    let outcome = store.finish_attempt(&at(job, 1), &json!({"ok": 1}), None, None).await.unwrap();
    assert_eq!(outcome, Transition::Won { canceled: vec![2] });
    assert_eq!(attempt_states(&store, job).await, [AttemptState::Succeeded, AttemptState::Canceled]);
    assert!(
        store.claim_attempts("w", 10, &leases()).await.unwrap().attempts.is_empty(),
        "a canceled attempt is never claimed"
    );
}

pub async fn concurrent_claimers_take_each_pending_attempt_once(store: Shared) {
    for i in 0..30 {
        create(&store, &format!("job-{i}")).await;
    }
    let barrier = Arc::new(Barrier::new(6));
    let tasks: Vec<_> = (0..6)
        .map(|w| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut mine = vec![];
                loop {
                    let batch = store.claim_attempts(&format!("w{w}"), 4, &leases()).await.unwrap().attempts;
                    if batch.is_empty() {
                        break mine;
                    }
                    mine.extend(batch.into_iter().map(|c| c.id));
                }
            })
        })
        .collect();
    let mut all = vec![];
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 30, "every attempt claimed");
    assert_eq!(distinct.len(), 30, "none claimed twice");
}

pub async fn a_claim_runs_the_attempt_under_a_lease_and_the_job_runs(store: Shared) {
    let job = create(&store, "k").await;
    let claimed = store.claim_attempts("w1", 10, &leases()).await.unwrap().attempts;
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].task.as_str(), claimed[0].input.clone()), ("summarize", json!({"text": "k"})));
    assert!(claimed[0].lease_until > chrono::Utc::now());
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.state, JobState::Running);
    assert_eq!(stored.attempts[0].state, AttemptState::Running);
    assert_eq!(stored.attempts[0].worker.as_deref(), Some("w1"));
    assert!(store.claim_attempts("w2", 10, &leases()).await.unwrap().attempts.is_empty());
}

pub async fn a_worker_settles_only_an_attempt_it_still_holds(store: Shared) {
    let s = &store;
    let output = json!({"summary": "x", "word_count": 1});
    let error = AttemptError::new("provider-error", "503 from provider");
    let job = create(s, "held").await;
    assert_eq!(s.claim_attempts("w1", 10, &leases()).await.unwrap().attempts.len(), 1);
    // Another worker's settlements change nothing.
    let fenced = Transition::Fenced(AttemptState::Running);
    assert_eq!(s.finish_attempt(&at(job, 1), &output, Some("w2"), None).await.unwrap(), fenced);
    assert_eq!(s.mark_unknown(&at(job, 1), &error, Some("w2"), None).await.unwrap(), fenced);
    assert_eq!(s.fail_attempt(&at(job, 1), &error, &rules(5, 2), Some("w2"), None).await.unwrap(), fenced);
    assert_eq!(attempt_states(s, job).await, vec![AttemptState::Running]);
    // Its holder's applies.
    assert!(matches!(s.finish_attempt(&at(job, 1), &output, Some("w1"), None).await.unwrap(), Transition::Won { .. }));

    // A lease that has run out (sim-hang's is zero here): not even its holder may settle.
    let expired = create_on(s, "expired", "sim-hang").await;
    assert_eq!(s.claim_attempts("w1", 10, &leases()).await.unwrap().attempts.len(), 1);
    assert_eq!(s.finish_attempt(&at(expired, 1), &output, Some("w1"), None).await.unwrap(), fenced);
    assert_eq!(s.mark_unknown(&at(expired, 1), &error, Some("w1"), None).await.unwrap(), fenced);
    // Reaped, it is the reconciler's, which settles by the state alone.
    assert_eq!(s.expire_leases(10).await.unwrap().len(), 1);
    let unknown = Transition::Fenced(AttemptState::Unknown);
    assert_eq!(s.finish_attempt(&at(expired, 1), &output, Some("w1"), None).await.unwrap(), unknown);
    assert!(matches!(s.finish_attempt(&at(expired, 1), &output, None, None).await.unwrap(), Transition::Won { .. }));
}

pub async fn failures_and_unknowns_set_the_job_state_from_its_attempts(store: Shared) {
    let job = job_with_running(&store, "k", 2).await;
    let error = AttemptError::new("provider-error", "503 from provider");
    assert_eq!(
        store.fail_attempt(&at(job, 1), &error, &rules(5, 2), None, None).await.unwrap(),
        Transition::Failed { next: None }
    );
    assert_eq!(job_state(&store, job).await, JobState::Running, "attempt 2 still runs");
    let timeout = AttemptError::new("timeout", "deadline passed");
    assert_eq!(store.mark_unknown(&at(job, 2), &timeout, None, None).await.unwrap(), Transition::Applied);
    assert_eq!(job_state(&store, job).await, JobState::Unknown);
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.attempts[0].error.as_ref().unwrap()["type"], "provider-error");
    assert_eq!(stored.attempts[1].state, AttemptState::Unknown);
    assert_eq!(
        store
            .resolve_unknown(&at(job, 2), &Resolution::Failed, &Resolved::because("never ran"), &rules(5, 2))
            .await
            .unwrap(),
        Transition::Failed { next: None }
    );
    assert_eq!(job_state(&store, job).await, JobState::Failed);
}

pub async fn stale_transitions_change_nothing(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store
        .fail_attempt(&at(job, 1), &AttemptError::new("provider-error", "400"), &rules(5, 2), None, None)
        .await
        .unwrap();
    assert_eq!(
        store.finish_attempt(&at(job, 1), &json!({}), None, None).await.unwrap(),
        Transition::Stale(AttemptState::Failed)
    );
    assert_eq!(
        store.mark_unknown(&at(job, 1), &AttemptError::new("timeout", "late"), None, None).await.unwrap(),
        Transition::Stale(AttemptState::Failed)
    );
    assert_eq!(
        store
            .resolve_unknown(&at(job, 1), &Resolution::Succeeded(json!({})), &Resolved::because("no"), &rules(5, 2))
            .await
            .unwrap(),
        Transition::Stale(AttemptState::Failed)
    );
    assert_eq!(store.finish_attempt(&at(job, 9), &json!({}), None, None).await.unwrap(), Transition::NotFound);
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.result), (JobState::Failed, None));
}

pub async fn resolving_an_unknown_attempt_with_output_goes_through_the_same_cas(store: Shared) {
    let job = job_with_running(&store, "k", 2).await;
    store.mark_unknown(&at(job, 1), &AttemptError::new("timeout", "deadline passed"), None, None).await.unwrap();
    assert!(matches!(
        store.finish_attempt(&at(job, 2), &json!({"by": 2}), None, None).await.unwrap(),
        Transition::Won { .. }
    ));
    let late = store
        .resolve_unknown(
            &at(job, 1),
            &Resolution::Succeeded(json!({"by": 1})),
            &Resolved::because("provider finished late"),
            &rules(5, 2),
        )
        .await;
    assert_eq!(late.unwrap(), Transition::Lost { winner: Some(2) });
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.result, Some(json!({"by": 2})));
    assert_eq!(stored.attempts[0].state, AttemptState::Superseded);
}

pub async fn a_late_output_of_an_unknown_attempt_wins_when_nothing_else_has(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store.mark_unknown(&at(job, 1), &AttemptError::new("timeout", "deadline passed"), None, None).await.unwrap();
    assert!(matches!(
        store.finish_attempt(&at(job, 1), &json!({"late": true}), None, None).await.unwrap(),
        Transition::Won { .. }
    ));
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.result), (JobState::Succeeded, Some(json!({"late": true}))));
}

pub async fn list_jobs_pages_newest_first_with_filters(store: Shared) {
    let mut ids = vec![];
    for i in 0..5 {
        ids.push(create(&store, &format!("k{i}")).await);
    }
    claim_one(&store).await; // the oldest job runs
    let alice = owner("alice");
    let page = store.list_jobs(&alice, &JobFilter { limit: 2, ..Default::default() }).await.unwrap();
    assert_eq!(page.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[4], ids[3]]);
    let next =
        store.list_jobs(&alice, &JobFilter { limit: 2, before: Some(ids[3]), ..Default::default() }).await.unwrap();
    assert_eq!(next.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[2], ids[1]]);
    let running = JobFilter { limit: 10, state: Some(JobState::Running), ..Default::default() };
    assert_eq!(store.list_jobs(&alice, &running).await.unwrap().iter().map(|j| j.id).collect::<Vec<_>>(), [ids[0]]);
    let other_task = JobFilter { limit: 10, task: Some("translate".into()), ..Default::default() };
    assert!(store.list_jobs(&alice, &other_task).await.unwrap().is_empty());
}

pub async fn api_keys_are_found_by_hash_until_revoked(store: Shared) {
    let (id, token) = onejob::keys::create_key(&store, &owner("alice")).await.unwrap();
    let hash = onejob::keys::hash_token(&token);
    assert!(store.has_api_keys().await.unwrap());
    assert_eq!(store.find_api_key_owner(&hash).await.unwrap(), Some(owner("alice")));
    assert!(store.revoke_api_key(id, None).await.unwrap());
    assert!(!store.revoke_api_key(id, None).await.unwrap(), "revoking twice finds nothing live");
    assert_eq!(store.find_api_key_owner(&hash).await.unwrap(), None);
    let keys = store.list_api_keys(Some(&owner("alice"))).await.unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].revoked_at.is_some());
}

pub async fn every_transition_appends_an_event(store: Shared) {
    let job = job_with_running(&store, "k", 2).await;
    store.finish_attempt(&at(job, 2), &json!({"a": 1}), None, None).await.unwrap();
    store.finish_attempt(&at(job, 1), &json!({"a": 2}), None, None).await.unwrap();
    assert_eq!(
        event_kinds(&store, job).await,
        ["job-created", "attempt-claimed", "attempt-admitted", "attempt-claimed", "attempt-succeeded", "race-lost"]
    );
}

async fn create_on(store: &Store, key_text: &str, provider: &str) -> JobId {
    let input = json!({"text": key_text});
    let new = NewJob {
        fingerprint: Fingerprint::of_job("summarize", &input, provider),
        provider: provider.into(),
        ..new_job("alice", key_text, input)
    };
    match store.create_job(&new).await.unwrap() {
        CreateJob::Created(job) => job.id,
        CreateJob::Existing(_) => panic!("key {key_text} was new"),
    }
}

pub async fn an_expired_lease_makes_the_attempt_unknown_never_pending_or_failed(store: Shared) {
    // sim-hang's lease in these tests is zero: it has expired by the next statement.
    let job = create_on(&store, "k", "sim-hang").await;
    let kept = create_on(&store, "k2", "sim-fast").await;
    assert_eq!(store.claim_attempts("w", 10, &leases()).await.unwrap().attempts.len(), 2);
    let expired = store.expire_leases(10).await.unwrap();
    assert_eq!(expired, [at(job, 1)]);
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.attempts[0].state), (JobState::Unknown, AttemptState::Unknown));
    assert_eq!(stored.attempts[0].error.as_ref().unwrap()["type"], "lease-expired");
    assert_eq!(job_state(&store, kept).await, JobState::Running, "a live lease is left alone");
    assert!(store.expire_leases(10).await.unwrap().is_empty(), "reaped once");
}

pub async fn reconciliation_claims_each_due_unknown_attempt_once_until_postponed(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store.mark_unknown(&at(job, 1), &AttemptError::new("timeout", "deadline passed"), None, None).await.unwrap();
    let providers = ["sim-fast".to_owned()];
    assert!(store.claim_reconciliations(&["sim-slow".to_owned()], 10, LEASE).await.unwrap().is_empty());
    let due = store.claim_reconciliations(&providers, 10, LEASE).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].attempt.clone(), due[0].reconcile_count, due[0].task.as_str()), (at(job, 1), 1, "summarize"));
    assert!(
        store.claim_reconciliations(&providers, 10, LEASE).await.unwrap().is_empty(),
        "held while it is asked about"
    );
    store.postpone_reconciliation(&at(job, 1), Duration::ZERO).await.unwrap();
    let again = store.claim_reconciliations(&providers, 10, LEASE).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].reconcile_count, 2);
}

pub async fn a_delayed_attempt_is_not_claimed_before_its_time(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store
        .fail_attempt(&at(job, 1), &AttemptError::new("provider-error", "503"), &rules(5, 2), None, None)
        .await
        .unwrap();
    let later = NewAttempt { delay: Duration::from_secs(3600), ..attempt_on("sim-fast", "retry") };
    assert!(matches!(
        store.admit_attempt(&owner("alice"), job, &later, &rules(5, 2)).await.unwrap(),
        Admission::Admitted(_)
    ));
    assert!(store.claim_attempts("w", 10, &leases()).await.unwrap().attempts.is_empty());
    assert_eq!(job_state(&store, job).await, JobState::Queued);
}

pub async fn cancel_stops_pending_attempts_and_a_late_output_never_applies(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    store.admit_attempt(&owner("alice"), job, &attempt_on("sim-slow", "a2"), &rules(5, 2)).await.unwrap();
    let Cancel::Canceled(canceled) = store.cancel_job(&owner("alice"), job, &rules(5, 2)).await.unwrap() else {
        panic!("canceled")
    };
    assert_eq!(canceled.state, JobState::Canceled);
    assert_eq!(attempt_states(&store, job).await, [AttemptState::Running, AttemptState::Canceled]);
    // The event says which attempt was canceled and which is being canceled.
    let events = store.list_events(&owner("alice"), job).await.unwrap();
    let cancel =
        events.iter().find(|e| e.kind == onejob::domain::EventKind::JobCanceled).expect("a job-canceled event");
    assert_eq!((&cancel.detail["canceled"], &cancel.detail["canceling"]), (&json!([2]), &json!([1])));
    let late = store.finish_attempt(&at(job, 1), &json!({"late": true}), None, None).await.unwrap();
    assert_eq!(late, Transition::Lost { winner: None });
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!((stored.state, stored.result), (JobState::Canceled, None));
    assert_eq!(stored.attempts[0].state, AttemptState::Superseded);
    assert!(matches!(store.cancel_job(&owner("alice"), job, &rules(5, 2)).await.unwrap(), Cancel::AlreadyCanceled(_)));
    assert!(matches!(store.cancel_job(&owner("bob"), job, &rules(5, 2)).await.unwrap(), Cancel::NotFound));

    let done = job_with_running(&store, "k2", 1).await;
    store.finish_attempt(&at(done, 1), &json!({"ok": 1}), None, None).await.unwrap();
    assert!(matches!(store.cancel_job(&owner("alice"), done, &rules(5, 2)).await.unwrap(), Cancel::Succeeded(_)));
    assert_eq!(job_state(&store, done).await, JobState::Succeeded);
}

pub async fn a_failure_and_the_policys_next_attempt_commit_together(store: Shared) {
    let job = job_with_running(&store, "k", 1).await;
    let retrying = Rules { retry: true, ..rules(5, 2) };
    let mut error = AttemptError::new("provider-error", "503");
    error.detail = json!({"status": 503, "retryable": true});
    // Failed between the failure's record and the next attempt's insert
    // (a failpoint aimed at this job; one test at a time sets it), the
    // transaction keeps neither: the attempt is still running, and alone.
    static FAILPOINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let broken = {
        let _alone = FAILPOINT.lock().await;
        fail::cfg("policy-before-next-attempt", &format!("return({job})")).unwrap();
        let broken = store.fail_attempt(&at(job, 1), &error, &retrying, None, None).await;
        fail::remove("policy-before-next-attempt");
        broken
    };
    assert!(broken.is_err(), "the failpoint failed the transaction: {broken:?}");
    assert_eq!(attempt_states(&store, job).await, vec![AttemptState::Running], "neither write kept");
    assert_eq!(job_state(&store, job).await, JobState::Running);
    assert!(
        !event_kinds(&store, job).await.contains(&"attempt-failed".to_owned()),
        "{:?}",
        event_kinds(&store, job).await
    );
    // Without it, both commit.
    let outcome = store.fail_attempt(&at(job, 1), &error, &retrying, None, None).await.unwrap();
    let Transition::Failed { next: Some(next) } = outcome else {
        panic!("the policy scheduled an attempt: {outcome:?}")
    };
    assert_eq!((next.number, next.provider.as_str()), (2, "sim-slow"), "the unqualified candidate was skipped");
    let skipped =
        store.list_events(&owner("alice"), job).await.unwrap().into_iter().find(|e| e.kind == "failover-skipped");
    let skipped = skipped.expect("the skip is recorded");
    assert_eq!(skipped.detail["provider"], "sim-bad-json");
    assert!(skipped.detail["reason"].as_str().unwrap().contains("never qualified"));
    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!(stored.state, JobState::Queued);
    assert_eq!((stored.attempts[1].state, stored.attempts[1].origin), (AttemptState::Pending, AttemptOrigin::Policy));
    // A definitive, non-retryable failure schedules nothing.
    claim_one(&store).await;
    let outcome = store
        .fail_attempt(&at(job, 2), &AttemptError::new("provider-error", "400"), &retrying, None, None)
        .await
        .unwrap();
    assert_eq!(outcome, Transition::Failed { next: None });
    assert_eq!(job_state(&store, job).await, JobState::Failed);
}

pub async fn browsing_jobs_spans_owners_only_when_asked_and_finds_a_key(store: Shared) {
    let mine = create(&store, "browse-a").await;
    let CreateJob::Created(bobs) = store.create_job(&new_job("bob", "browse-b", json!({"text": "b"}))).await.unwrap()
    else {
        panic!("bob's key was new")
    };
    let page = JobFilter { limit: 10, ..Default::default() };
    let everyone = store.browse_jobs(None, None, &page).await.unwrap();
    let seen: Vec<(String, JobId)> = everyone.iter().map(|j| (j.owner.as_str().to_owned(), j.job.id)).collect();
    assert_eq!(seen, [("bob".to_owned(), bobs.id), ("alice".to_owned(), mine)], "every owner's, newest first");
    let alices = store.browse_jobs(Some(&owner("alice")), None, &page).await.unwrap();
    assert_eq!(alices.iter().map(|j| j.job.id).collect::<Vec<_>>(), [mine], "one owner's only");
    let by_key = store.browse_jobs(None, Some("browse-b"), &page).await.unwrap();
    assert_eq!(by_key.iter().map(|j| j.job.id).collect::<Vec<_>>(), [bobs.id]);
    assert!(
        store.browse_jobs(Some(&owner("alice")), Some("browse-b"), &page).await.unwrap().is_empty(),
        "a key of another owner"
    );
    let running = JobFilter { limit: 10, state: Some(JobState::Running), ..Default::default() };
    assert!(store.browse_jobs(None, None, &running).await.unwrap().is_empty());
    let one = JobFilter { limit: 1, ..Default::default() };
    assert_eq!(store.browse_jobs(None, None, &one).await.unwrap().len(), 1);
    let older = JobFilter { limit: 10, before: Some(bobs.id), ..Default::default() };
    assert_eq!(
        store.browse_jobs(None, None, &older).await.unwrap().iter().map(|j| j.job.id).collect::<Vec<_>>(),
        [mine]
    );
    assert_eq!(store.find_job_owner(bobs.id).await.unwrap(), Some(owner("bob")));
    assert_eq!(store.find_job_owner(JobId::new()).await.unwrap(), None);
}

pub async fn open_unknown_attempts_are_listed_until_they_are_settled(store: Shared) {
    let job = job_with_running(&store, "unknown-list", 2).await;
    assert!(store.list_unknown_attempts(None, 10).await.unwrap().is_empty());
    let timeout = AttemptError::new("timeout", "deadline passed");
    store.mark_unknown(&at(job, 2), &timeout, None, None).await.unwrap();
    store.mark_unknown(&at(job, 1), &timeout, None, None).await.unwrap();
    let open = store.list_unknown_attempts(None, 10).await.unwrap();
    assert_eq!(
        open.iter().map(|u| u.attempt.clone()).collect::<Vec<_>>(),
        [at(job, 2), at(job, 1)],
        "longest unknown first"
    );
    assert_eq!((open[0].provider.as_str(), open[0].task.as_str()), ("sim-slow", "summarize"));
    assert_eq!(open[0].error.as_ref().unwrap()["type"], "timeout");
    assert!(open[0].unknown_since.is_some());
    assert_eq!(store.list_unknown_attempts(Some(&owner("alice")), 1).await.unwrap().len(), 1);
    assert!(store.list_unknown_attempts(Some(&owner("bob")), 10).await.unwrap().is_empty(), "another owner's");
    store
        .resolve_unknown(&at(job, 2), &Resolution::Failed, &Resolved::because("checked by hand"), &rules(5, 2))
        .await
        .unwrap();
    let left = store.list_unknown_attempts(None, 10).await.unwrap();
    assert_eq!(left.iter().map(|u| u.attempt.clone()).collect::<Vec<_>>(), [at(job, 1)]);
}

pub async fn jobs_unknown_since_a_time_are_counted_until_settled(store: Shared) {
    let timeout = AttemptError::new("timeout", "deadline passed");
    let unknown = job_with_running(&store, "unknown-count", 1).await;
    let running = job_with_running(&store, "still-running", 1).await;
    store.mark_unknown(&at(unknown, 1), &timeout, None, None).await.unwrap();
    let later = chrono::Utc::now() + chrono::Duration::seconds(60);
    let earlier = chrono::Utc::now() - chrono::Duration::seconds(60);
    assert_eq!(store.count_unknown_since(later).await.unwrap(), 1, "the unknown job, not the running one");
    assert_eq!(store.count_unknown_since(earlier).await.unwrap(), 0, "unknown since after that time");
    assert_eq!(job_state(&store, running).await, JobState::Running);
    store
        .resolve_unknown(&at(unknown, 1), &Resolution::Failed, &Resolved::because("checked by hand"), &rules(5, 2))
        .await
        .unwrap();
    assert_eq!(store.count_unknown_since(later).await.unwrap(), 0, "settled");
}

pub async fn usage_and_cost_are_stored_exactly_and_summed_as_winner_plus_waste(store: Shared) {
    use onejob::domain::{Cost, Money, Usage};
    use onejob::store::{AttemptUsage, UsageFilter};
    let job = job_with_running(&store, "k", 2).await;
    let priced = |prompt: i64, completion: i64, estimated: bool, amount: &str| AttemptUsage {
        usage: Usage { prompt_tokens: prompt, completion_tokens: completion, estimated, ..Usage::default() },
        cost: Some(Cost {
            amount: amount.parse().unwrap(),
            currency: "USD".into(),
            price_version: "sha256:0123456789abcdef".into(),
        }),
    };
    // An estimate first, then the provider's own count replaces it.
    assert!(store.record_usage(&at(job, 1), &priced(40, 512, true, "0.5")).await.unwrap());
    let loser = priced(40, 11, false, "123456789.123456789012345678");
    assert!(store.record_usage(&at(job, 1), &loser).await.unwrap());
    let winner = priced(40, 9, false, "0.000000000000000001");
    assert!(store.record_usage(&at(job, 2), &winner).await.unwrap());
    assert_eq!(
        store.finish_attempt(&at(job, 2), &json!({"n": 2}), None, None).await.unwrap(),
        Transition::Won { canceled: vec![] }
    );
    assert_eq!(
        store.finish_attempt(&at(job, 1), &json!({"n": 1}), None, None).await.unwrap(),
        Transition::Lost { winner: Some(2) }
    );

    let stored = store.get_job(&owner("alice"), job).await.unwrap().unwrap();
    assert_eq!((stored.attempts[0].usage, stored.attempts[0].cost.clone()), (Some(loser.usage), loser.cost.clone()));
    assert_eq!((stored.attempts[1].usage, stored.attempts[1].cost.clone()), (Some(winner.usage), winner.cost.clone()));
    let cost = stored.cost.expect("a job with costed attempts has a cost");
    assert_eq!(cost.total.to_string(), "123456789.123456789012345679", "every digit kept and summed");
    assert_eq!(
        (cost.winner.to_string(), cost.waste.to_string()),
        ("0.000000000000000001".into(), "123456789.123456789012345678".into())
    );
    assert_eq!(cost.total, cost.winner + cost.waste);

    let now = chrono::Utc::now();
    let all = UsageFilter { from: now - chrono::Duration::days(1), to: now + chrono::Duration::days(1) };
    let rows = store.list_usage(&owner("alice"), &all).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows.iter().map(|r| r.cost.as_ref().unwrap().amount).sum::<Money>(), cost.total);
    assert_eq!(rows.iter().map(|r| r.state).collect::<Vec<_>>(), [AttemptState::Superseded, AttemptState::Succeeded]);
    let before = UsageFilter { from: now - chrono::Duration::days(2), to: now - chrono::Duration::days(1) };
    assert!(store.list_usage(&owner("alice"), &before).await.unwrap().is_empty());
    // Another owner neither sees nor records anything of alice's.
    assert!(store.list_usage(&owner("bob"), &all).await.unwrap().is_empty());
    let bobs = AttemptRef { owner: owner("bob"), job_id: job, number: 1 };
    assert!(!store.record_usage(&bobs, &winner).await.unwrap());
}

pub async fn a_settlement_records_the_attempts_usage_with_it_and_a_refused_one_records_none(store: Shared) {
    use onejob::domain::{Cost, Usage};
    use onejob::store::AttemptUsage;
    let s = &store;
    let used = |completion: i64| AttemptUsage {
        usage: Usage { prompt_tokens: 40, completion_tokens: completion, ..Usage::default() },
        cost: Some(Cost {
            amount: "0.25".parse().unwrap(),
            currency: "USD".into(),
            price_version: "sha256:0123456789abcdef".into(),
        }),
    };
    let usage_of = async |job: JobId, number: usize| {
        let stored = s.get_job(&owner("alice"), job).await.unwrap().unwrap();
        (stored.attempts[number - 1].usage, stored.attempts[number - 1].cost.clone())
    };
    let output = json!({"summary": "x", "word_count": 1});
    // Two racing attempts: the winner's and the loser's usage each come with their settlement.
    let job = job_with_running(s, "raced", 2).await;
    let (winner, loser) = (used(9), used(11));
    assert_eq!(
        s.finish_attempt(&at(job, 2), &output, None, Some(&winner)).await.unwrap(),
        Transition::Won { canceled: vec![] }
    );
    assert_eq!(
        s.finish_attempt(&at(job, 1), &output, None, Some(&loser)).await.unwrap(),
        Transition::Lost { winner: Some(2) }
    );
    assert_eq!(usage_of(job, 2).await, (Some(winner.usage), winner.cost.clone()));
    assert_eq!(usage_of(job, 1).await, (Some(loser.usage), loser.cost.clone()));
    // A settlement refused (another worker's lease) records nothing, usage included.
    let held = create(s, "held").await;
    assert_eq!(s.claim_attempts("w1", 10, &leases()).await.unwrap().attempts.len(), 1);
    let fenced = Transition::Fenced(AttemptState::Running);
    assert_eq!(s.finish_attempt(&at(held, 1), &output, Some("w2"), Some(&winner)).await.unwrap(), fenced);
    assert_eq!(
        s.mark_unknown(&at(held, 1), &AttemptError::new("timeout", "late"), Some("w2"), Some(&winner)).await.unwrap(),
        fenced
    );
    assert_eq!(usage_of(held, 1).await, (None, None));
    // A failure and an unknown outcome record theirs with them.
    let error = AttemptError::new("provider-error", "503 from provider");
    assert_eq!(
        s.fail_attempt(&at(held, 1), &error, &rules(5, 2), Some("w1"), Some(&used(0))).await.unwrap(),
        Transition::Failed { next: None }
    );
    assert_eq!(usage_of(held, 1).await, (Some(used(0).usage), used(0).cost));
    let unknown = job_with_running(s, "unknown", 1).await;
    let estimate = AttemptUsage {
        usage: Usage { prompt_tokens: 40, completion_tokens: 512, estimated: true, ..Usage::default() },
        cost: None,
    };
    assert_eq!(
        s.mark_unknown(&at(unknown, 1), &AttemptError::new("timeout", "late"), None, Some(&estimate)).await.unwrap(),
        Transition::Applied
    );
    assert_eq!(usage_of(unknown, 1).await, (Some(estimate.usage), None));
}

on_both_backends!(
    setup = conformance_store;
    a_worker_settles_only_an_attempt_it_still_holds,
    a_settlement_records_the_attempts_usage_with_it_and_a_refused_one_records_none,
    create_job_inserts_the_job_with_one_pending_attempt,
    second_create_with_the_same_key_finds_the_existing_job,
    fifty_concurrent_creates_with_one_key_make_one_job,
    concurrent_creations_of_many_keys_make_one_job_per_key,
    a_creation_that_fails_does_not_fail_the_others,
    the_same_key_under_two_owners_makes_two_jobs,
    another_owner_can_neither_see_nor_touch_a_job,
    admission_refuses_while_an_attempt_is_pending,
    admission_refuses_while_an_attempt_is_unknown_and_admits_once_it_is_resolved,
    jobs_unknown_since_a_time_are_counted_until_settled,
    admission_refuses_beyond_max_in_flight,
    admission_refuses_beyond_max_attempts,
    admission_refuses_a_finished_job,
    admission_refuses_an_unqualified_provider_and_says_why,
    admission_replays_a_key_and_refuses_it_for_another_provider,
    an_attempt_without_a_provider_goes_to_the_jobs_primary,
    twenty_concurrent_admissions_never_leave_two_pending,
    reverse_order_finish_makes_the_second_to_finish_lose,
    concurrent_finishes_have_exactly_one_winner,
    winning_cancels_pending_siblings,
    concurrent_claimers_take_each_pending_attempt_once,
    a_claim_runs_the_attempt_under_a_lease_and_the_job_runs,
    failures_and_unknowns_set_the_job_state_from_its_attempts,
    stale_transitions_change_nothing,
    resolving_an_unknown_attempt_with_output_goes_through_the_same_cas,
    a_late_output_of_an_unknown_attempt_wins_when_nothing_else_has,
    list_jobs_pages_newest_first_with_filters,
    api_keys_are_found_by_hash_until_revoked,
    every_transition_appends_an_event,
    an_expired_lease_makes_the_attempt_unknown_never_pending_or_failed,
    reconciliation_claims_each_due_unknown_attempt_once_until_postponed,
    a_delayed_attempt_is_not_claimed_before_its_time,
    cancel_stops_pending_attempts_and_a_late_output_never_applies,
    a_failure_and_the_policys_next_attempt_commit_together,
    browsing_jobs_spans_owners_only_when_asked_and_finds_a_key,
    open_unknown_attempts_are_listed_until_they_are_settled,
    usage_and_cost_are_stored_exactly_and_summed_as_winner_plus_waste,
);
