//! Settling a worker's outputs in batches (`Store::finish_attempts`): one
//! transaction and one commit for many attempts, each still settled by its
//! own compare-and-swap with the same outcomes, events and fences as alone;
//! and a batch never waits for a job another transaction holds locked.
//! Against the store, on both backends (the commit count and the lock case
//! on Postgres, which counts statements and locks rows). On Postgres, new
//! jobs and reads of jobs by id are grouped too.

use std::time::Duration;

use onejob::domain::{AttemptState, Cost, JobState, Usage};
use onejob::store::output::{Appended, OutputPiece};
use onejob::store::{AttemptUsage, CreateJob, Finish, Transition};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

use crate::common::new_job;
use crate::store::{
    Shared, at, attempt_states, conformance_store, create, event_kinds, job_state, job_with_running, owner,
};

const WORKER: &str = "test-worker";

/// Two outputs for one job in one batch: the first to arrive wins, the
/// other's compare-and-swap touches nothing and it is superseded, logged
/// as a lost race; another job's output wins its own job, with its usage
/// and cost recorded exactly; an output of a worker that does not hold its
/// attempt is fenced and changes nothing.
pub async fn a_batch_settles_each_output_by_its_own_compare_and_swap(store: Shared) {
    let s = &store;
    let (alone, raced, fenced) = (
        job_with_running(s, "alone", 1).await,
        job_with_running(s, "raced", 2).await,
        job_with_running(s, "fenced", 1).await,
    );
    let (a1, r2, r1, f1) = (at(alone, 1), at(raced, 2), at(raced, 1), at(fenced, 1));
    let outputs = [json!({"by": "a1"}), json!({"by": "r2"}), json!({"by": "r1"}), json!({"by": "f1"})];
    let used = AttemptUsage {
        usage: Usage { prompt_tokens: 40, completion_tokens: 7, cache_read_tokens: 3, ..Usage::default() },
        cost: Some(Cost {
            amount: "0.000123456789012345".parse().unwrap(),
            currency: "USD".into(),
            price_version: "sha256:0123456789abcdef".into(),
        }),
    };
    let finishes = [
        Finish { attempt: &a1, output: &outputs[0], holder: Some(WORKER), usage: Some(&used) },
        Finish { attempt: &r2, output: &outputs[1], holder: Some(WORKER), usage: None },
        Finish { attempt: &r1, output: &outputs[2], holder: Some(WORKER), usage: None },
        Finish { attempt: &f1, output: &outputs[3], holder: Some("another-worker"), usage: None },
    ];
    let answers: Vec<Transition> = s.finish_attempts(&finishes).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        answers,
        vec![
            Transition::Won { canceled: vec![] },
            Transition::Won { canceled: vec![] },
            Transition::Lost { winner: Some(2) },
            Transition::Fenced(AttemptState::Running),
        ]
    );
    let raced_job = s.get_job(&owner("alice"), raced).await.unwrap().unwrap();
    assert_eq!(
        (raced_job.state, raced_job.winning_attempt, raced_job.result),
        (JobState::Succeeded, Some(2), Some(outputs[1].clone()))
    );
    assert_eq!(attempt_states(s, raced).await, vec![AttemptState::Superseded, AttemptState::Succeeded]);
    assert!(event_kinds(s, raced).await.contains(&"race-lost".to_owned()), "{:?}", event_kinds(s, raced).await);
    assert_eq!(job_state(s, alone).await, JobState::Succeeded);
    let alone_job = s.get_job(&owner("alice"), alone).await.unwrap().unwrap();
    assert_eq!((alone_job.attempts[0].usage, alone_job.attempts[0].cost.clone()), (Some(used.usage), used.cost));
    assert_eq!(
        (job_state(s, fenced).await, attempt_states(s, fenced).await),
        (JobState::Running, vec![AttemptState::Running])
    );
}

/// Pieces of several streams in one batch: each job's output is decided by
/// its own compare-and-swap. Two running attempts of one job in one batch:
/// the first to arrive takes the output and the other is refused; another
/// job's piece is shown; a job's pieces are numbered in order; nothing is
/// written to a job that succeeded.
pub async fn a_batch_of_output_pieces_decides_each_jobs_output_by_itself(store: Shared) {
    let s = &store;
    let (alone, raced) = (job_with_running(s, "alone", 1).await, job_with_running(s, "raced", 2).await);
    let (a1, r2, r1) = (at(alone, 1), at(raced, 2), at(raced, 1));
    let appended = |batch: Vec<Result<Appended, _>>| batch.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    let shown = |seq| Appended::Shown { seq, restarted: false };
    let first = appended(s.append_outputs(&[(&a1, "a"), (&r2, "second"), (&r1, "first")]).await);
    assert_eq!(first, [shown(1), shown(1), Appended::Refused]);
    let then = appended(s.append_outputs(&[(&r2, " more"), (&a1, "b"), (&r1, "again")]).await);
    assert_eq!(then, [shown(2), shown(2), Appended::Refused]);
    let texts = |pieces: Vec<OutputPiece>| {
        pieces.into_iter().map(|p| (p.seq, p.attempt_number, p.text)).collect::<Vec<(i64, i32, String)>>()
    };
    let raced_output = texts(s.list_output(&owner("alice"), raced, 0).await.unwrap());
    assert_eq!(raced_output, [(1, 2, "second".to_owned()), (2, 2, " more".to_owned())]);
    let alone_output = texts(s.list_output(&owner("alice"), alone, 0).await.unwrap());
    assert_eq!(alone_output, [(1, 1, "a".to_owned()), (2, 1, "b".to_owned())]);

    // The holder's piece once its job succeeded is refused, and not written.
    let output = json!({"summary": "a b"});
    let finish = Finish { attempt: &a1, output: &output, holder: Some(WORKER), usage: None };
    assert_eq!(s.finish_attempts(&[finish]).await.pop().unwrap().unwrap(), Transition::Won { canceled: vec![] });
    assert_eq!(appended(s.append_outputs(&[(&a1, "late"), (&r2, " last")]).await), [Appended::Refused, shown(3)]);
    assert_eq!(texts(s.list_output(&owner("alice"), alone, 0).await.unwrap()).len(), 2);
}

on_both_backends!(
    setup = conformance_store;
    a_batch_settles_each_output_by_its_own_compare_and_swap,
    a_batch_of_output_pieces_decides_each_jobs_output_by_itself
);

/// Postgres: four outputs of four jobs settled in one batch are one
/// transaction, one `COMMIT` as the database counts them
/// (pg_stat_statements, this test's database only); their jobs are locked
/// by one statement, and their outputs settled by one.
async fn a_batch_of_outputs_is_one_commit() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let mut jobs = Vec::new();
    for key in ["a", "b", "c", "d"] {
        jobs.push(job_with_running(&store, key, 1).await);
    }
    let attempts: Vec<_> = jobs.iter().map(|&job| at(job, 1)).collect();
    let output = json!({"ok": true});
    let finishes: Vec<Finish> =
        attempts.iter().map(|attempt| Finish { attempt, output: &output, holder: Some(WORKER), usage: None }).collect();

    crate::common::postgres::reset_statement_counts(&pool).await;
    let answers: Vec<Transition> = store.finish_attempts(&finishes).await.into_iter().map(Result::unwrap).collect();
    let counts = crate::common::postgres::statement_counts(&pool).await;

    assert_eq!(answers, vec![Transition::Won { canceled: vec![] }; 4]);
    let commits: i64 = counts.iter().filter(|(query, _)| query.eq_ignore_ascii_case("commit")).map(|(_, n)| n).sum();
    assert_eq!(commits, 1, "one commit for the batch: {counts:#?}");
    let locks: i64 = counts.iter().filter(|(query, _)| query.contains("for no key update")).map(|(_, n)| n).sum();
    assert_eq!(locks, 1, "one statement locks the batch's jobs: {counts:#?}");
    let settlements: i64 = counts.iter().filter(|(query, _)| query.contains("won as")).map(|(_, n)| n).sum();
    assert_eq!(settlements, 1, "one statement settles the batch's outputs: {counts:#?}");
    for job in jobs {
        assert_eq!(job_state(&store, job).await, JobState::Succeeded);
    }
}

/// Postgres: a job locked by another transaction does not hold up the
/// batch: the other outputs are committed (and seen) while it is locked,
/// and it is settled alone once the lock goes.
async fn a_batch_commits_its_other_outputs_while_one_job_is_locked_elsewhere_then_settles_that_one() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let (locked, free) = (job_with_running(&store, "locked", 1).await, job_with_running(&store, "free", 1).await);
    let mut holder = pool.begin().await.unwrap();
    let lock = "select 1 from jobs where owner_id = 'alice' and id = $1 for update";
    sqlx::query(lock).bind(locked.0).execute(&mut *holder).await.unwrap();

    let batch = tokio::spawn({
        let store = store.clone();
        async move {
            let (l1, f1, output) = (at(locked, 1), at(free, 1), json!({"ok": true}));
            let finishes = [
                Finish { attempt: &l1, output: &output, holder: Some(WORKER), usage: None },
                Finish { attempt: &f1, output: &output, holder: Some(WORKER), usage: None },
            ];
            store.finish_attempts(&finishes).await.into_iter().map(Result::unwrap).collect::<Vec<_>>()
        }
    });
    crate::common::processes::eventually(
        "the free job's output committed while the other job is locked",
        Duration::from_secs(10),
        || async { job_state(&store, free).await == JobState::Succeeded },
    )
    .await;
    assert_eq!(job_state(&store, locked).await, JobState::Running, "the locked job waits for its lock");
    holder.commit().await.unwrap();
    let answers = batch.await.unwrap();
    assert_eq!(answers, vec![Transition::Won { canceled: vec![] }, Transition::Won { canceled: vec![] }]);
    assert_eq!(job_state(&store, locked).await, JobState::Succeeded);
}

/// Postgres: new jobs that arrive while a group of creations is being
/// written are written together by the next group, one statement (and so
/// one commit) for twenty-one; a taken key among them inserts nothing and
/// answers the job that holds it, and the others are created.
async fn creations_that_queue_behind_a_group_are_written_by_one_statement() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let taken = create(&store, "taken").await;
    crate::common::postgres::reset_statement_counts(&pool).await;

    // Inserts into jobs wait while this transaction holds the table.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("lock table jobs in share mode").execute(&mut *holder).await.unwrap();
    let first = tokio::spawn({
        let store = store.clone();
        async move { store.create_job(&new_job("alice", "first", json!({"text": "first"}))).await.unwrap() }
    });
    crate::common::processes::eventually("the first group waits for the table", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like '%with input as%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
            == 1
    })
    .await;
    let mut news: Vec<_> = (0..20).map(|n| new_job("alice", &format!("queued-{n}"), json!({"text": n}))).collect();
    news.push(new_job("alice", "taken", json!({"text": "taken"})));
    let mut queued = Box::pin(futures_util::future::join_all(news.iter().map(|new| store.create_job(new))));
    // Polled once, each creation is queued behind the group that waits.
    std::future::poll_fn(|cx| {
        assert!(queued.as_mut().poll(cx).is_pending(), "the queued creations wait for the group ahead");
        std::task::Poll::Ready(())
    })
    .await;
    holder.commit().await.unwrap();
    let answers: Vec<CreateJob> = queued.await.into_iter().map(Result::unwrap).collect();

    assert!(matches!(first.await.unwrap(), CreateJob::Created(_)));
    for (answer, new) in answers.iter().zip(&news).take(20) {
        assert!(matches!(answer, CreateJob::Created(job) if job.id == new.id), "{answer:?}");
    }
    assert!(matches!(&answers[20], CreateJob::Existing(job) if job.id == taken), "{:?}", answers[20]);
    let counts = crate::common::postgres::statement_counts(&pool).await;
    let inserts: i64 = counts.iter().filter(|(query, _)| query.contains("with input as")).map(|(_, n)| n).sum();
    assert_eq!(inserts, 2, "the first group, then the twenty-one queued behind it: {counts:#?}");
}

/// Postgres: reads of jobs by id that arrive while one is being made (a
/// table lock holds it) are made together by the next group, one
/// statement for each owner's: each answers its own job, with its
/// attempts; an id that is no job, or another owner's, answers none.
async fn reads_that_queue_behind_one_are_made_by_one_statement_an_owner() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let mut jobs = Vec::new();
    for n in 0..22 {
        jobs.push(create(&store, &format!("read-{n}")).await);
    }
    let bobs = match store.create_job(&new_job("bob", "bobs", json!({"text": "bob"}))).await.unwrap() {
        CreateJob::Created(job) => job.id,
        CreateJob::Existing(_) => panic!("bob's key was new"),
    };
    crate::common::postgres::reset_statement_counts(&pool).await;

    // Reads of jobs wait while this transaction holds the table.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("lock table jobs in access exclusive mode").execute(&mut *holder).await.unwrap();
    let alone = tokio::spawn({
        let (store, id) = (store.clone(), jobs[0]);
        async move { store.get_job(&owner("alice"), id).await.unwrap() }
    });
    crate::common::processes::eventually("the first read waits for the table", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like 'select j.owner_id, j.id,%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
            == 1
    })
    .await;
    let missing = onejob::domain::JobId::new();
    let mut wanted: Vec<_> = jobs[1..].iter().map(|&id| ("alice", id)).collect();
    // A job read twice in one group (two pollers of one job) is answered to each.
    wanted.extend([("alice", missing), ("alice", bobs), ("bob", bobs), ("bob", jobs[1]), ("alice", jobs[2])]);
    let reads = wanted.iter().map(|(reader, id)| {
        let store = store.clone();
        async move { store.get_job(&owner(reader), *id).await.unwrap() }
    });
    let mut queued = Box::pin(futures_util::future::join_all(reads));
    // Polled once, each read is queued behind the one that waits.
    std::future::poll_fn(|cx| {
        assert!(queued.as_mut().poll(cx).is_pending(), "the queued reads wait for the read ahead");
        std::task::Poll::Ready(())
    })
    .await;
    holder.commit().await.unwrap();
    let answers = queued.await;

    assert_eq!(alone.await.unwrap().map(|job| job.id), Some(jobs[0]));
    for (answer, (reader, id)) in answers.iter().zip(&wanted) {
        let expected = (*id != missing && (*reader == "bob") == (*id == bobs)).then_some((*id, *reader, 1));
        let found = answer.as_ref().map(|job| (job.id, job.owner.as_str(), job.attempts.len()));
        assert_eq!(found, expected, "{reader} reading {id}");
    }
    let counts = crate::common::postgres::statement_counts(&pool).await;
    let calls = |text: &str| counts.iter().filter(|(query, _)| query.contains(text)).map(|(_, n)| n).sum::<i64>();
    assert_eq!(calls("j.id = $2"), 1, "the read alone: {counts:#?}");
    assert_eq!(calls("$2::uuid[]"), 2, "the twenty-six queued behind it, by owner: {counts:#?}");
}

/// Postgres: the pieces of four streams in one batch are one commit; once
/// each attempt holds its job's output, a batch of their next pieces is
/// one statement.
async fn a_batch_of_output_pieces_is_one_commit() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(8).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let mut attempts = Vec::new();
    for key in ["a", "b", "c", "d"] {
        attempts.push(at(job_with_running(&store, key, 1).await, 1));
    }
    let pieces: Vec<(&onejob::store::AttemptRef, &str)> = attempts.iter().map(|attempt| (attempt, "piece")).collect();
    crate::common::postgres::reset_statement_counts(&pool).await;
    let answers: Vec<Appended> = store.append_outputs(&pieces).await.into_iter().map(Result::unwrap).collect();
    let counts = crate::common::postgres::statement_counts(&pool).await;
    assert_eq!(answers, vec![Appended::Shown { seq: 1, restarted: false }; 4]);
    let commits: i64 = counts.iter().filter(|(query, _)| query.eq_ignore_ascii_case("commit")).map(|(_, n)| n).sum();
    assert_eq!(commits, 1, "one commit for the batch: {counts:#?}");

    crate::common::postgres::reset_statement_counts(&pool).await;
    let answers: Vec<Appended> = store.append_outputs(&pieces).await.into_iter().map(Result::unwrap).collect();
    let counts = crate::common::postgres::statement_counts(&pool).await;
    assert_eq!(answers, vec![Appended::Shown { seq: 2, restarted: false }; 4]);
    let statements: i64 = counts.iter().map(|(_, n)| n).sum();
    assert_eq!(statements, 1, "one statement for the next batch: {counts:#?}");
    let seqs: Vec<i64> =
        sqlx::query_scalar("select seq from job_output order by job_id, seq").fetch_all(&pool).await.unwrap();
    assert_eq!(seqs, [1, 2].repeat(4), "each job's two pieces, numbered from 1");
}

on_postgres!(
    a_batch_of_output_pieces_is_one_commit,
    a_batch_of_outputs_is_one_commit,
    a_batch_commits_its_other_outputs_while_one_job_is_locked_elsewhere_then_settles_that_one,
    creations_that_queue_behind_a_group_are_written_by_one_statement,
    reads_that_queue_behind_one_are_made_by_one_statement_an_owner
);
