//! Claiming: which pending attempts a worker takes, written once for both
//! databases over the statements of [`super::driver`].
//!
//! A claim is one transaction:
//!
//! 1. **Owners with pending work**, read without locks, one index probe per
//!    owner: up to one batch's worth of owners, starting after the owner
//!    where the previous claim of this worker stopped, wrapping around. No
//!    owner is left out for long however many there are.
//! 2. **Locks, only where a limit is counted**: each limited owner's claim
//!    lock (an owner's `max_in_flight`), each limited provider's row of
//!    `provider_state` (its `max_concurrent` and `requests_per_minute`), in
//!    name order. Two claimers counting the same limit take turns, so a
//!    limit holds across replicas; claims of unlimited owners and
//!    providers never wait for each other.
//! 3. **What the limits leave**: running attempts per limited owner and
//!    provider, counted after the locks (a new statement sees every claim
//!    committed before it), pauses and request buckets.
//! 4. **Candidates, owner by owner**: each owner's oldest due attempts on
//!    open providers, up to its share, locked and skipping rows another
//!    claimer holds. Each statement is routed by its owner.
//! 5. **The pick, round robin**: the first candidate of every owner, then
//!    the second of every owner, and so on, while the providers' limits
//!    allow, up to the batch ([`pick`]). Within an owner, oldest first.
//! 6. **Start**: the picked attempts become `running` under their leases,
//!    their jobs `running`, each with its event; request buckets are
//!    debited. Candidates not picked are let go at commit, still pending.
//!
//! An attempt over a limit is not refused: it stays `pending` and is
//! claimed when the limit allows. (The reconciler's claim of unknown
//! attempts, [`UnknownAttempt`], is one statement of each backend.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::driver::{Candidate, PendingOwner, ProviderGate, Running, Tx};
use super::{AttemptRef, ClaimedAttempt, Result, Store, Transition, UnknownAttempt, WaitingFacts, transitions};
use crate::domain::Waiting;
pub use crate::domain::limits::{Deferral, ProviderLimits};
use crate::domain::{JobId, OwnerId};

/// The providers a worker can call, and how long its claim on an attempt
/// of each holds (the provider's deadline plus a margin). Only attempts on
/// these providers are claimed.
#[derive(Clone, Debug)]
pub struct Leases {
    /// The lease of a provider missing from `by_provider` (none is claimed).
    pub default: Duration,
    /// Per provider name.
    pub by_provider: Vec<(String, Duration)>,
    /// The owners' and providers' limits the claims enforce.
    pub limits: ClaimLimits,
    /// Where this worker's claims are in their round of owners.
    pub rotation: Rotation,
}

impl Leases {
    /// Leases without limits, in a round of owners of their own.
    pub fn new(default: Duration, by_provider: Vec<(String, Duration)>) -> Self {
        Self { default, by_provider, limits: ClaimLimits::default(), rotation: Rotation::default() }
    }

    /// The lease of an attempt on `provider`.
    pub fn of(&self, provider: &str) -> Duration {
        self.by_provider.iter().find(|(name, _)| name == provider).map_or(self.default, |(_, lease)| *lease)
    }
}

/// The limits a claim enforces, the same on every replica.
#[derive(Clone, Debug, Default)]
pub struct ClaimLimits {
    /// Attempts of one owner running at once across the cluster, unless
    /// one of its keys sets its own (`None`: no limit).
    pub max_in_flight_per_owner: Option<u32>,
    /// Per provider name.
    pub providers: BTreeMap<String, ProviderLimits>,
}

impl ClaimLimits {
    /// The limits of `[worker] max_in_flight_per_owner` (0: none) and of
    /// each provider, by name.
    pub fn new(max_in_flight_per_owner: u32, providers: impl IntoIterator<Item = (String, ProviderLimits)>) -> Self {
        Self {
            max_in_flight_per_owner: Some(max_in_flight_per_owner).filter(|&n| n > 0),
            providers: providers.into_iter().collect(),
        }
    }
}

/// Where the claims of one worker are in their round of owners: the next
/// claim starts after this owner.
#[derive(Clone, Debug, Default)]
pub struct Rotation(Arc<Mutex<String>>);

impl Rotation {
    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, owner: &str) {
        owner.clone_into(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

impl WaitingFacts {
    /// The reason, under `limits`.
    pub fn reason(&self, limits: &ClaimLimits) -> Waiting {
        let ms = |seconds: f64| Some((seconds * 1000.0).ceil() as u64);
        let owner_limit = self.owner_limit.and_then(|n| u32::try_from(n).ok()).or(limits.max_in_flight_per_owner);
        let provider_limit = limits.providers.get(&self.provider).and_then(|l| l.max_concurrent);
        let (reason, limit, for_ms) = if self.due_in > 0.0 {
            ("retry-backoff", None, ms(self.due_in))
        } else if self.paused_for > 0.0 {
            (Deferral::ProviderPaused.as_str(), None, ms(self.paused_for))
        } else if let Some(limit) = owner_limit.filter(|&limit| self.owner_running >= i64::from(limit)) {
            (Deferral::OwnerMaxInFlight.as_str(), Some(limit), None)
        } else if let Some(limit) = provider_limit.filter(|&limit| self.provider_running >= i64::from(limit)) {
            (Deferral::ProviderMaxConcurrent.as_str(), Some(limit), None)
        } else if let Some(per_minute) = limits.providers.get(&self.provider).and_then(|l| l.requests_per_minute)
            && let level = refilled(self.requests, self.requests_idle, per_minute)
            && level < 1.0
        {
            (
                Deferral::ProviderRequestsPerMinute.as_str(),
                Some(per_minute),
                Some(refill_wait(level, 1.0, per_minute).as_millis() as u64),
            )
        } else {
            ("worker", None, None)
        };
        Waiting { reason: reason.to_owned(), limit, for_ms }
    }
}

/// A token bucket of `per_minute` refilled evenly over a minute: its level
/// now, from the level last written (`None`: full) and the seconds since.
pub fn refilled(level: Option<f64>, idle_seconds: f64, per_minute: u32) -> f64 {
    let size = f64::from(per_minute);
    level.map_or(size, |level| (level + idle_seconds.max(0.0) * size / 60.0).min(size))
}

/// How long until a bucket of `per_minute` at `level` holds `needed`
/// (at most a full bucket's worth).
pub fn refill_wait(level: f64, needed: f64, per_minute: u32) -> Duration {
    let size = f64::from(per_minute);
    let short = needed.min(size) - level;
    if short <= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(short * 60.0 / size) }
}

/// What a claim took, and how many attempts it left pending for a limit,
/// by limit (for the caller to count).
#[derive(Debug, Default)]
pub struct Claimed {
    /// The attempts now `running` under this worker's claim.
    pub attempts: Vec<ClaimedAttempt>,
    /// Attempts left pending, by the limit that held them.
    pub deferred: HashMap<Deferral, u64>,
}

/// Claims up to `want` due pending attempts for `worker`: see the module's
/// documentation for how.
async fn claim(store: &Store, worker: &str, want: u32, leases: &Leases) -> Result<Claimed> {
    let mut claimed = Claimed::default();
    if want == 0 {
        return Ok(claimed);
    }
    // A window of owners may hold nothing claimable (owners at their limit,
    // on paused providers or on providers this worker does not call): the
    // next window is tried at once, up to a bound, rather than after a poll.
    for _ in 0..WINDOWS_PER_CLAIM {
        let full = claim_window(store, worker, want, leases, &mut claimed).await?;
        if !claimed.attempts.is_empty() || !full {
            break;
        }
    }
    Ok(claimed)
}

/// How many windows of owners one claim looks through at most.
const WINDOWS_PER_CLAIM: usize = 8;

/// One claim over one window of owners, adding to `claimed`: whether the
/// window was full (more owners may follow it).
async fn claim_window(store: &Store, worker: &str, want: u32, leases: &Leases, claimed: &mut Claimed) -> Result<bool> {
    let limits = &leases.limits;
    // Which owners have pending work is read before any transaction: an
    // idle claim is that one read, and takes no lock (SQLite's writer
    // included). What it read is a hint the locked statements check again.
    let after = leases.rotation.get();
    let mut owners = store.driver().select_pending_owners(&after, want).await?;
    if owners.len() < want as usize && !after.is_empty() {
        let left = want - u32::try_from(owners.len()).unwrap_or(want);
        let from_start = store.driver().select_pending_owners("", left).await?;
        owners.extend(from_start.into_iter().filter(|owner| owner.owner_id <= after));
    }
    let full = owners.len() == want as usize;
    let Some(first) = owners.first() else { return Ok(false) };
    let mut tx = store.begin().await?;
    // A full window (wrapped around or not) continues after its last owner;
    // a window that held every owner starts one owner later next time, so
    // that the first pick of a round goes to each owner in turn. (One owner
    // alone needs no turns: its claims read from the start.)
    let next = match owners.len() {
        _ if full => owners[owners.len() - 1].owner_id.as_str(),
        1 => "",
        _ => first.owner_id.as_str(),
    };
    leases.rotation.set(next);

    let owner_limit = |owner: &PendingOwner| {
        owner.max_in_flight.and_then(|n| u32::try_from(n).ok()).or(limits.max_in_flight_per_owner)
    };
    let mut limited_owners: Vec<String> =
        owners.iter().filter(|owner| owner_limit(owner).is_some()).map(|owner| owner.owner_id.clone()).collect();
    limited_owners.sort();
    let providers: Vec<String> = leases.by_provider.iter().map(|(name, _)| name.clone()).collect();
    let counted: Vec<String> = providers
        .iter()
        .filter(|name| limits.providers.get(*name).is_some_and(ProviderLimits::counted))
        .cloned()
        .collect();
    let running = if limited_owners.is_empty() && counted.is_empty() {
        Running::default()
    } else {
        tx.lock_claims(&limited_owners, &counted).await?;
        tx.running_counts(&limited_owners, &counted).await?
    };
    let gates: HashMap<String, ProviderGate> =
        tx.provider_gates(&providers).await?.into_iter().map(|gate| (gate.provider.clone(), gate)).collect();

    let deferred = &mut claimed.deferred;
    // What each provider still allows in this claim (absent: no limit),
    // and which of its limits that is.
    let mut room: HashMap<&str, u32> = HashMap::new();
    let mut binding: HashMap<&str, Deferral> = HashMap::new();
    // Its request bucket's level now, for the providers that have one.
    let mut levels: HashMap<&str, f64> = HashMap::new();
    let mut open = Vec::new();
    for name in &providers {
        let gate = gates.get(name);
        if gate.is_some_and(|gate| gate.paused_for > 0.0) {
            *deferred.entry(Deferral::ProviderPaused).or_default() += 1;
            continue;
        }
        let own = limits.providers.get(name).copied().unwrap_or_default();
        let mut allows = None::<(u32, Deferral)>;
        if let Some(max) = own.max_concurrent {
            let busy = running.by_provider.get(name).copied().unwrap_or(0);
            allows = Some((u32::try_from(i64::from(max) - busy).unwrap_or(0), Deferral::ProviderMaxConcurrent));
        }
        if let Some(per_minute) = own.requests_per_minute {
            let level = refilled(gate.and_then(|g| g.requests), gate.map_or(0.0, |g| g.requests_idle), per_minute);
            levels.insert(name.as_str(), level);
            let whole = level.max(0.0).floor() as u32;
            if allows.is_none_or(|(n, _)| whole < n) {
                allows = Some((whole, Deferral::ProviderRequestsPerMinute));
            }
        }
        match allows {
            Some((0, why)) => *deferred.entry(why).or_default() += 1,
            Some((n, why)) => {
                room.insert(name.as_str(), n);
                binding.insert(name.as_str(), why);
                open.push(name.clone());
            }
            None => open.push(name.clone()),
        }
    }

    let mut caps = Vec::with_capacity(owners.len());
    for owner in &owners {
        let cap = match owner_limit(owner) {
            Some(limit) => {
                let busy = running.by_owner.get(&owner.owner_id).copied().unwrap_or(0);
                u32::try_from(i64::from(limit) - busy).unwrap_or(0)
            }
            None => want,
        };
        if cap == 0 {
            *deferred.entry(Deferral::OwnerMaxInFlight).or_default() += 1;
        } else {
            caps.push((owner.owner_id.as_str(), cap));
        }
    }
    let mut started = Vec::new();
    if !open.is_empty() && !caps.is_empty() {
        let mut candidates = Vec::with_capacity(caps.len());
        for (owner, quota) in fetch_sizes(&caps, want) {
            candidates.push(tx.claim_candidates(owner, &open, quota).await?);
        }
        let (picked, short) = pick(candidates, want, &mut room);
        for name in short {
            *deferred.entry(binding[name.as_str()]).or_default() += 1;
        }
        started = start(&mut tx, worker, picked, leases).await?;
        for (name, level) in levels {
            let used = started.iter().filter(|c| c.provider == name).count();
            tx.put_requests(name, level - used as f64).await?;
        }
    }
    tx.commit().await?;
    claimed.attempts.extend(started);
    Ok(full)
}

/// Starts the picked attempts, owner by owner.
async fn start(tx: &mut Tx, worker: &str, picked: Vec<Candidate>, leases: &Leases) -> Result<Vec<ClaimedAttempt>> {
    let mut by_owner: Vec<Vec<Candidate>> = Vec::new();
    for candidate in picked {
        match by_owner.iter_mut().find(|group| group[0].attempt.owner == candidate.attempt.owner) {
            Some(group) => group.push(candidate),
            None => by_owner.push(vec![candidate]),
        }
    }
    let mut claimed = Vec::new();
    for group in by_owner {
        let lease_of: Vec<Duration> = group.iter().map(|c| leases.of(&c.provider)).collect();
        let until = tx.start_attempts(worker, &group, &lease_of).await?;
        for (candidate, lease_until) in group.into_iter().zip(until) {
            claimed.push(ClaimedAttempt {
                attempt: candidate.attempt,
                id: candidate.id,
                provider: candidate.provider,
                origin: candidate.origin,
                task: candidate.task,
                input: candidate.input,
                lease_until,
                waited: Duration::from_secs_f64(candidate.waited.max(0.0)),
                trace: candidate.trace,
            });
        }
    }
    Ok(claimed)
}

/// How many candidates to fetch of each owner, in order: its cap, at most
/// twice an even share of the batch (so that owners with less pending
/// than their share leave room the others can fill), at least one.
fn fetch_sizes<'a>(caps: &[(&'a str, u32)], want: u32) -> Vec<(&'a str, u32)> {
    let owners = u32::try_from(caps.len()).unwrap_or(u32::MAX).max(1);
    let share = (2 * want).div_ceil(owners).max(1);
    caps.iter().map(|&(owner, cap)| (owner, cap.min(share).min(want))).collect()
}

/// Round robin over the owners' candidates (each owner's oldest first):
/// up to `want`, within what each provider has `room` for. Returns the
/// picks, and the providers whose room ran out while candidates of theirs
/// were left.
fn pick(candidates: Vec<Vec<Candidate>>, want: u32, room: &mut HashMap<&str, u32>) -> (Vec<Candidate>, Vec<String>) {
    let mut queues: Vec<std::collections::VecDeque<Candidate>> = candidates.into_iter().map(Into::into).collect();
    let mut picked = Vec::new();
    let mut short: Vec<String> = Vec::new();
    while picked.len() < want as usize && queues.iter().any(|queue| !queue.is_empty()) {
        for queue in &mut queues {
            if picked.len() == want as usize {
                break;
            }
            // This owner's oldest candidate a provider has room for.
            while let Some(candidate) = queue.pop_front() {
                match room.get_mut(candidate.provider.as_str()) {
                    Some(0) => {
                        if !short.contains(&candidate.provider) {
                            short.push(candidate.provider.clone());
                        }
                    }
                    Some(left) => {
                        *left -= 1;
                        picked.push(candidate);
                        break;
                    }
                    None => {
                        picked.push(candidate);
                        break;
                    }
                }
            }
        }
    }
    (picked, short)
}

impl Store {
    /// Claims up to `max` due pending attempts for `worker`, fairly across
    /// owners (each owner's oldest first) and within the owners' and
    /// providers' limits, each under its provider's lease; they become
    /// `running` (see [`claims`]).
    #[tracing::instrument(level = "debug", skip(self, leases))]
    pub async fn claim_attempts(&self, worker: &str, max: u32, leases: &Leases) -> Result<Claimed> {
        claim(self, worker, max, leases).await
    }

    /// Puts a running attempt its provider refused before any work back to
    /// `pending` for `delay`, the same attempt, and pauses `pause` as long;
    /// fenced by `worker`, at most `max` times (see [`transitions::requeue`]).
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %attempt.job_id, attempt.number = attempt.number))]
    pub async fn requeue_attempt(
        &self,
        attempt: &AttemptRef,
        worker: &str,
        (delay, max): (Duration, Option<u32>),
        pause: Option<&str>,
        detail: Value,
    ) -> Result<Transition> {
        transitions::requeue(self, attempt, worker, (delay, max), pause, detail).await
    }

    /// Pauses claims of `provider`'s attempts for `pause`, for every worker.
    pub async fn pause_provider(&self, provider: &str, pause: Duration) -> Result<()> {
        let mut tx = self.begin().await?;
        tx.update_provider_pause(provider, pause).await?;
        tx.commit().await
    }

    /// Takes `tokens` from `provider`'s shared bucket of `per_minute`: `None`
    /// when taken, else how long until it holds them (or is full, for more).
    pub async fn reserve_tokens(&self, provider: &str, tokens: u64, per_minute: u32) -> Result<Option<Duration>> {
        self.driver().take_tokens(provider, tokens, per_minute).await
    }

    /// What a queued job of the owner waits for, or `None` without a pending attempt.
    pub async fn waiting_facts(&self, owner: &OwnerId, job_id: JobId) -> Result<Option<WaitingFacts>> {
        self.driver().select_waiting_facts(owner, job_id).await
    }

    /// Turns running attempts whose lease has expired (their worker died or
    /// stalled) into `unknown` (I4): never `pending`, never `failed`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn expire_leases(&self, max: u32) -> Result<Vec<AttemptRef>> {
        transitions::expire_leases(self, max).await
    }

    /// The jobs that finished (won, or were canceled) while attempts of
    /// theirs run under `worker`'s leases: the calls its sweep aborts.
    pub async fn finished_jobs_running_on(&self, worker: &str) -> Result<Vec<JobId>> {
        self.driver().select_finished_with_calls(worker).await
    }

    /// Claims up to `max` unknown attempts of `providers` that are due for a
    /// status lookup, and holds them for `hold` before they are due again.
    pub async fn claim_reconciliations(
        &self,
        providers: &[String],
        max: u32,
        hold: Duration,
    ) -> Result<Vec<UnknownAttempt>> {
        // A read first: with nothing due, a reconciler writes nothing.
        if !self.driver().select_any_due_unknown(providers).await? {
            return Ok(Vec::new());
        }
        self.driver().claim_due_unknown(providers, max, hold).await
    }

    /// Puts off the next status lookup of an unknown attempt.
    pub async fn postpone_reconciliation(&self, attempt: &AttemptRef, delay: Duration) -> Result<()> {
        self.driver().update_reconcile_after(attempt, delay).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AttemptId;

    fn candidate(owner: &str, n: i32, provider: &str) -> Candidate {
        Candidate {
            attempt: AttemptRef {
                owner: OwnerId::parse(owner).unwrap(),
                job_id: JobId(uuid::Uuid::now_v7()),
                number: n,
            },
            id: AttemptId(uuid::Uuid::now_v7()),
            provider: provider.to_owned(),
            origin: crate::domain::AttemptOrigin::Client,
            task: "t".into(),
            input: Value::Null,
            trace: None,
            waited: 0.0,
        }
    }

    fn names(picked: &[Candidate]) -> Vec<String> {
        picked.iter().map(|c| format!("{}{}", c.attempt.owner, c.attempt.number)).collect()
    }

    #[test]
    fn the_pick_takes_every_owners_oldest_first_then_their_second_and_fills_the_batch() {
        let a: Vec<_> = (1..=10).map(|n| candidate("a", n, "p")).collect();
        let b: Vec<_> = (1..=2).map(|n| candidate("b", n, "p")).collect();
        let (picked, short) = pick(vec![a, b], 6, &mut HashMap::new());
        assert_eq!(names(&picked), ["a1", "b1", "a2", "b2", "a3", "a4"]);
        assert!(short.is_empty());
    }

    #[test]
    fn the_pick_stays_within_a_providers_room_and_says_which_ran_out() {
        let a = vec![candidate("a", 1, "slow"), candidate("a", 2, "slow"), candidate("a", 3, "fast")];
        let b = vec![candidate("b", 1, "slow")];
        let mut room = HashMap::from([("slow", 2)]);
        let (picked, short) = pick(vec![a, b], 10, &mut room);
        assert_eq!(names(&picked), ["a1", "b1", "a3"]);
        assert_eq!(short, ["slow"]);
        assert_eq!(room["slow"], 0);
    }

    #[test]
    fn each_owner_fetches_at_most_twice_its_share_and_never_more_than_its_cap() {
        assert_eq!(fetch_sizes(&[("a", 32), ("b", 32)], 32), [("a", 32), ("b", 32)]);
        assert_eq!(
            fetch_sizes(&[("a", 32), ("b", 3), ("c", 32), ("d", 32)], 32),
            [("a", 16), ("b", 3), ("c", 16), ("d", 16)]
        );
        assert_eq!(fetch_sizes(&[("a", 5); 100], 32).iter().map(|(_, n)| *n).max(), Some(1));
    }

    #[test]
    fn a_bucket_refills_evenly_over_a_minute_up_to_its_size() {
        assert_eq!(refilled(None, 0.0, 60), 60.0);
        assert_eq!(refilled(Some(0.0), 30.0, 60), 30.0);
        assert_eq!(refilled(Some(-10.0), 10.0, 60), 0.0);
        assert_eq!(refilled(Some(50.0), 600.0, 60), 60.0);
        assert_eq!(refill_wait(0.0, 30.0, 60), Duration::from_secs(30));
        assert_eq!(refill_wait(10.0, 5.0, 60), Duration::ZERO);
        assert_eq!(
            refill_wait(0.0, 1_000.0, 60),
            Duration::from_secs(60),
            "a need over the bucket's size waits for a full bucket"
        );
    }
}
