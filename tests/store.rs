//! The store conformance suite, run against each backend.

mod common;
#[path = "store/suite.rs"]
mod suite;

/// Runs every named case of the suite once per backend, as
/// `BACKEND::CASE`, each on a fresh store with the suite's qualifications.
macro_rules! conformance {
    ($($backend:ident => $make:path),+ ; $cases:tt) => {
        $( conformance!(@one $backend, $make, $cases); )+
    };
    (@one $backend:ident, $make:path, [$($case:ident),+ $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let store: super::suite::Shared = $make().await;
                    super::suite::prepare(store.as_ref()).await;
                    super::suite::$case(store).await;
                }
            )+
        }
    };
}

conformance!(postgres => crate::common::postgres_store, sqlite => crate::common::sqlite_store; [
    create_job_inserts_the_job_with_one_pending_attempt,
    second_create_with_the_same_key_finds_the_existing_job,
    fifty_concurrent_creates_with_one_key_make_one_job,
    concurrent_creations_of_many_keys_make_one_job_per_key,
    a_creation_that_fails_does_not_fail_the_others,
    the_same_key_under_two_owners_makes_two_jobs,
    another_owner_can_neither_see_nor_touch_a_job,
    admission_refuses_while_an_attempt_is_pending,
    admission_refuses_while_an_attempt_is_unknown_and_admits_once_it_is_resolved,
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
]);
