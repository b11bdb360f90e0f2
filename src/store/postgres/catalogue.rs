//! Every statement the Postgres store sends, by name, and the ones that
//! are cross-owner by design: what the routing test (`tests/it/citus.rs`)
//! checks against a sharding by owner (docs/scaling.md).

use super::{breakers, citus, claims, connect, keys, pieces, retention, sessions, sql, webhooks};
use crate::store::shared;

/// Names each statement of the list with its path and gives its text.
macro_rules! catalogue {
    ($($statement:path),* $(,)?) => {
        vec![$({
            let sql: &'static str = &$statement;
            (stringify!($statement), sql)
        }),*]
    };
}

/// A hot-path request whose statement `bench/ceiling.sh` runs under pgbench
/// (`onejob bench-sql`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotStatement {
    /// `POST /jobs` with a new key (a group of one). Binds: owner, then one
    /// array each: job ids, keys, fingerprints, tasks, inputs, providers,
    /// first attempt ids, budgets, traceparents, tracestates, first
    /// attempts' providers.
    Create,
    /// `GET /jobs/{id}`. Binds: owner, job id.
    Poll,
}

impl HotStatement {
    /// The statement, exactly as the Postgres store sends it.
    pub fn sql(self) -> &'static str {
        match self {
            Self::Create => sql::CREATE_JOBS.as_str(),
            Self::Poll => sql::GET_JOB.as_str(),
        }
    }
}

/// Every statement the Postgres store sends, by name. The routing test
/// (`tests/it/citus.rs`) plans each on a real Postgres, and fails for a
/// statement written anywhere but a named constant of the store.
pub fn statements() -> Vec<(&'static str, &'static str)> {
    [jobs_and_attempts(), claims_and_breakers(), webhooks_sessions_and_keys(), purge_and_upkeep()].concat()
}

/// The jobs' and attempts' statements (`sql`).
fn jobs_and_attempts() -> Vec<(&'static str, &'static str)> {
    catalogue![
        sql::CREATE_JOBS,
        sql::GET_JOB,
        sql::GET_JOBS,
        sql::LOCK_OUTPUT,
        sql::SET_OUTPUT_ATTEMPT,
        sql::INSERT_OUTPUT,
        pieces::APPEND_TO_HELD_OUTPUTS,
        sql::LIST_OUTPUT,
        sql::FIND_JOB_BY_KEY,
        sql::SETTLE_WITH_OUTPUT,
        sql::SETTLE_OUTPUTS,
        sql::FINISHED_JOBS_RUNNING_ON,
        sql::EXPIRED_LEASES,
        sql::ANY_DUE_UNKNOWN,
        sql::CLAIM_RECONCILIATIONS,
        sql::SAMPLE_GAUGES,
        sql::FIND_UNKNOWN_ATTEMPT_OWNER,
        sql::LIST_UNKNOWN_ATTEMPTS,
        sql::QUALIFICATION_STATE,
        sql::FIND_API_KEY,
        sql::INSERT_API_KEY,
        sql::LIST_API_KEYS,
        sql::SET_KEY_MAX_IN_FLIGHT,
        sql::LIST_EVENTS,
        sql::LATEST_QUALIFICATION,
        sql::LIST_QUALIFIED_PAIRS,
        sql::LIST_USAGE,
        sql::BROWSE_JOBS,
        sql::FIND_JOB_OWNER,
        sql::SET_JOB_STATE,
        sql::INSERT_ATTEMPT,
        sql::APPEND_EVENT,
        sql::ENQUEUE_WEBHOOK,
        sql::LOCK_ATTEMPT_JOB,
        sql::LOCK_ATTEMPT_JOB_SKIP_LOCKED,
        sql::LOCK_ATTEMPT_JOBS,
        sql::SET_ATTEMPT_OUTCOME,
        sql::CANCEL_PENDING_ATTEMPTS,
        sql::LIST_JOBS,
        sql::POSTPONE_RECONCILIATION,
        sql::INSERT_QUALIFICATION,
        sql::RECORD_USAGE,
        sql::LOCK_JOB,
        sql::JOB_BUDGET,
        sql::FORGET_USAGE,
        sql::RECORD_UNAPPLIED_OUTPUT,
        sql::RECORD_PROVIDER_REQUEST,
        sql::ATTEMPT_STATE,
        sql::ATTEMPT_STATES,
        sql::READ_ATTEMPTS,
        sql::COUNT_UNKNOWN_SINCE,
        sql::ADD_TO_ROLLUP,
    ]
}

/// The claim's and the providers' shared state (`claims`, `breakers`).
fn claims_and_breakers() -> Vec<(&'static str, &'static str)> {
    catalogue![
        claims::PENDING_OWNERS,
        claims::LOCK_OWNERS,
        claims::LOCK_PROVIDERS,
        claims::RUNNING_COUNTS,
        claims::PROVIDER_GATES,
        claims::CLAIM_CANDIDATES,
        claims::START_ATTEMPTS,
        claims::PUT_REQUESTS,
        claims::PAUSE_PROVIDER,
        claims::REQUEUE_ATTEMPT,
        claims::RESERVE_TOKENS,
        claims::TOKENS_LEFT,
        claims::WAITING_FACTS,
        breakers::READ_BREAKERS,
        breakers::TRIP_BREAKER,
        breakers::REOPEN_BREAKER,
        breakers::PROBE_BREAKER,
        breakers::CLOSE_BREAKER,
        breakers::SET_BREAKER,
    ]
}

/// Webhooks, dashboard sessions and API keys.
fn webhooks_sessions_and_keys() -> Vec<(&'static str, &'static str)> {
    catalogue![
        webhooks::LIST_ENDPOINTS,
        webhooks::CLAIM_DELIVERIES,
        webhooks::ANY_DUE_DELIVERY,
        webhooks::RELEASE_DELIVERIES,
        webhooks::DELETE_WEBHOOK_ENDPOINT,
        webhooks::ENDPOINT_EXISTS,
        webhooks::LIST_DELIVERIES,
        webhooks::LIST_TRIES,
        webhooks::INSERT_ENDPOINT,
        webhooks::LOCK_OWNER_ENDPOINTS,
        webhooks::COUNT_ENDPOINTS,
        webhooks::INSERT_SUBSCRIPTION,
        webhooks::ROTATE_SECRET,
        webhooks::INSERT_TRIES,
        webhooks::SETTLE_DELIVERIES,
        webhooks::DISABLE_ENDPOINT,
        sessions::INSERT_SESSION,
        sessions::FIND_SESSION,
        sessions::TOUCH_SESSION,
        sessions::DELETE_SESSION,
        sessions::DELETE_EXPIRED_SESSIONS,
        sessions::CLAIM_FIRST_RUN,
        keys::COUNT_LISTENERS,
        keys::REVOKE_API_KEY,
        keys::NOTIFY,
    ]
}

/// The purge, the checks every database shares, connecting, and Citus.
fn purge_and_upkeep() -> Vec<(&'static str, &'static str)> {
    catalogue![
        retention::TAKE_PURGE_LOCK,
        retention::PURGEABLE_JOBS,
        retention::PURGEABLE_CANDIDATES,
        retention::LOCK_OWNER_PURGEABLE,
        retention::COUNT_PURGEABLE,
        retention::ANY_PURGEABLE,
        retention::USAGE_OF_JOBS,
        retention::PASS_ON_SETTINGS,
        retention::PURGING_ON,
        retention::PURGING_OFF,
        retention::DELETE_DELIVERIES_OF_JOBS,
        retention::DELETE_EVENTS_OF_JOBS,
        retention::DELETE_OUTPUT_OF_JOBS,
        retention::DELETE_ATTEMPTS_OF_JOBS,
        retention::DELETE_JOBS,
        shared::MIGRATED_VERSION,
        shared::HAS_API_KEYS,
        shared::CALLBACK_SECRET,
        shared::PENDING_BY,
        citus::IS_CITUS,
        citus::PENDING_OWNERS,
        citus::DUE_UNKNOWN_OWNERS,
        citus::CLAIM_OWNER_RECONCILIATIONS,
        citus::DUE_DELIVERY_OWNERS,
        citus::CLAIM_OWNER_DELIVERIES,
        citus::PLACED_TABLES,
        citus::LOCK_PLACEMENT,
        citus::ALLOW_TRIGGERS,
        citus::CREATE_REFERENCE_TABLE,
        citus::DISTRIBUTE_BY_OWNER,
        citus::TRUNCATE_LOCAL_ROWS,
        connect::READ_ONLY,
        connect::REPLICATION,
    ]
}

/// The statements that read or write many owners' rows by design, with why
/// each may be a multi-shard query once the tables are sharded by owner
/// (docs/scaling.md). Every other statement on an owner's tables is routed
/// to one owner by `owner_id = $n`, which the routing test checks.
pub const CROSS_OWNER: &[(&str, &str)] = &[
    (
        "claims::PENDING_OWNERS",
        "the claim's lock-free read of which owners have pending work (then claimed owner by owner)",
    ),
    ("citus::PENDING_OWNERS", "on Citus, the claim's read of which owners have pending work"),
    ("citus::DUE_UNKNOWN_OWNERS", "on Citus, the reconciler's read of which owners have due unknown attempts"),
    ("citus::DUE_DELIVERY_OWNERS", "on Citus, the webhook sender's read of which owners have due deliveries"),
    ("shared::PENDING_BY", "the metrics' pending attempts per owner and per provider, every few seconds"),
    ("claims::WAITING_FACTS", "a queued job's wait counts its provider's running attempts, of every owner"),
    (
        "claims::RUNNING_COUNTS",
        "the claim counts the running attempts of the owners and providers whose limits it enforces",
    ),
    ("sql::ANY_DUE_UNKNOWN", "an idle reconciler looks whether any owner's unknown attempt is due before it claims"),
    (
        "sql::CLAIM_RECONCILIATIONS",
        "the reconciler's claim takes due unknown attempts of every owner (per owner, like the claim)",
    ),
    ("sql::EXPIRED_LEASES", "the reaper's scan of every owner's running attempts past their lease"),
    ("sql::FINISHED_JOBS_RUNNING_ON", "a worker's scan of the attempts it holds, whoever owns them"),
    ("sql::SAMPLE_GAUGES", "the metrics' counts over every owner, every few seconds"),
    ("sql::COUNT_UNKNOWN_SINCE", "the readiness check's count over every owner"),
    ("sql::FIND_UNKNOWN_ATTEMPT_OWNER", "an operator resolves an attempt by job id, not knowing its owner"),
    ("sql::LIST_UNKNOWN_ATTEMPTS", "the admin list of unknown attempts, of one owner or all"),
    ("sql::BROWSE_JOBS", "the admin browse, of one owner or all"),
    ("sql::FIND_JOB_OWNER", "an admin reads a job by id, not knowing its owner"),
    ("webhooks::CLAIM_DELIVERIES", "the webhook sender's claim takes due deliveries of every owner"),
    ("webhooks::ANY_DUE_DELIVERY", "an idle webhook sender looks whether any owner's delivery is due before it claims"),
    ("webhooks::INSERT_TRIES", "one statement records a batch of tries of many owners' deliveries"),
    ("webhooks::SETTLE_DELIVERIES", "one statement settles a batch of many owners' deliveries"),
    ("retention::PURGEABLE_JOBS", "the purge's scan of every owner's finished jobs"),
    ("retention::PURGEABLE_CANDIDATES", "on Citus, the purge's scan of every owner's finished jobs, unlocked"),
    ("retention::COUNT_PURGEABLE", "the purge's dry run counts every owner's finished jobs"),
    ("retention::ANY_PURGEABLE", "the purger looks whether any owner's finished job is due before it locks"),
    ("retention::USAGE_OF_JOBS", "the purge reads a batch of many owners' jobs"),
    ("retention::DELETE_DELIVERIES_OF_JOBS", "the purge deletes a batch of many owners' jobs"),
    ("retention::DELETE_EVENTS_OF_JOBS", "the purge deletes a batch of many owners' jobs"),
    ("retention::DELETE_OUTPUT_OF_JOBS", "the purge deletes a batch of many owners' jobs"),
    ("retention::DELETE_ATTEMPTS_OF_JOBS", "the purge deletes a batch of many owners' jobs"),
    ("retention::DELETE_JOBS", "the purge deletes a batch of many owners' jobs"),
];
