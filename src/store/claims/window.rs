//! One claim: which pending attempts a worker takes, in one transaction:
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

use std::collections::HashMap;
use std::time::Duration;

use super::{ClaimRules, Claimed, refilled};
use crate::domain::limits::{Deferral, ProviderLimits};
use crate::store::driver::{Candidate, PendingOwner, ProviderGate, RunningCounts, Tx};
use crate::store::{ClaimedAttempt, Result, Store};

/// Claims up to `want` due pending attempts for `worker`: see the module's
/// documentation for how.
pub(super) async fn claim(store: &Store, worker: &str, want: u32, rules: &ClaimRules) -> Result<Claimed> {
    let mut claimed = Claimed::default();
    if want == 0 {
        return Ok(claimed);
    }
    // A window of owners may hold nothing claimable (owners at their limit,
    // on paused providers or on providers this worker does not call): the
    // next window is tried at once, up to a bound, rather than after a poll.
    for _ in 0..WINDOWS_PER_CLAIM {
        let full = claim_window(store, worker, want, rules, &mut claimed).await?;
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
async fn claim_window(
    store: &Store,
    worker: &str,
    want: u32,
    rules: &ClaimRules,
    claimed: &mut Claimed,
) -> Result<bool> {
    let (owners, full) = window_of_owners(store, want, rules).await?;
    if owners.is_empty() {
        return Ok(false);
    }
    let mut tx = store.begin().await?;
    advance_rotation(rules, &owners, full);
    let owner_limit = |owner: &PendingOwner| {
        owner.max_in_flight.and_then(|n| u32::try_from(n).ok()).or(rules.limits.max_in_flight_per_owner)
    };
    let providers: Vec<String> = rules.by_provider.iter().map(|(name, _)| name.clone()).collect();
    let running = count_running(&mut tx, &owners, &owner_limit, &providers, rules).await?;
    let gates: HashMap<String, ProviderGate> =
        tx.provider_gates(&providers).await?.into_iter().map(|gate| (gate.provider.clone(), gate)).collect();
    let room = ProviderRoom::of(&providers, &gates, &running, rules, &mut claimed.deferred);
    let caps = owner_caps(&owners, &owner_limit, &running, want, &mut claimed.deferred);
    let mut started = Vec::new();
    if !room.open.is_empty() && !caps.is_empty() {
        started = start_candidates(&mut tx, worker, want, rules, &caps, room, &mut claimed.deferred).await?;
    }
    tx.commit().await?;
    claimed.attempts.extend(started);
    Ok(full)
}

/// Up to `want` owners with pending work, after the last window's place
/// (wrapping around to the start), and whether the window is full.
async fn window_of_owners(store: &Store, want: u32, rules: &ClaimRules) -> Result<(Vec<PendingOwner>, bool)> {
    // Which owners have pending work is read before any transaction: an
    // idle claim is that one read, and takes no lock (SQLite's writer
    // included). What it read is a hint the locked statements check again.
    let after = rules.rotation.get();
    let mut owners = store.driver().pending_owners(&after, want).await?;
    if owners.len() < want as usize && !after.is_empty() {
        let left = want - u32::try_from(owners.len()).unwrap_or(want);
        let from_start = store.driver().pending_owners("", left).await?;
        owners.extend(from_start.into_iter().filter(|owner| owner.owner_id <= after));
    }
    let full = owners.len() == want as usize;
    Ok((owners, full))
}

/// Where the next window starts.
fn advance_rotation(rules: &ClaimRules, owners: &[PendingOwner], full: bool) {
    // A full window (wrapped around or not) continues after its last owner;
    // a window that held every owner starts one owner later next time, so
    // that the first pick of a round goes to each owner in turn. (One owner
    // alone needs no turns: its claims read from the start.)
    let next = match owners.len() {
        _ if full => owners[owners.len() - 1].owner_id.as_str(),
        1 => "",
        _ => owners[0].owner_id.as_str(),
    };
    rules.rotation.set(next);
}

/// The running attempts of the window's limited owners and of the counted
/// providers, their claim locks taken first (none taken when nothing is
/// limited).
async fn count_running(
    tx: &mut Tx,
    owners: &[PendingOwner],
    owner_limit: &impl Fn(&PendingOwner) -> Option<u32>,
    providers: &[String],
    rules: &ClaimRules,
) -> Result<RunningCounts> {
    let mut limited_owners: Vec<String> =
        owners.iter().filter(|owner| owner_limit(owner).is_some()).map(|owner| owner.owner_id.clone()).collect();
    limited_owners.sort();
    let counted: Vec<String> = providers
        .iter()
        .filter(|name| rules.limits.providers.get(*name).is_some_and(ProviderLimits::counted))
        .cloned()
        .collect();
    if limited_owners.is_empty() && counted.is_empty() {
        return Ok(RunningCounts::default());
    }
    tx.lock_claims(&limited_owners, &counted).await?;
    tx.running_counts(&limited_owners, &counted).await
}

/// What the providers allow in one claim.
struct ProviderRoom<'a> {
    /// What each provider still allows (absent: no limit).
    room: HashMap<&'a str, u32>,
    /// Which of its limits that is.
    binding: HashMap<&'a str, Deferral>,
    /// Its request bucket's level now, for the providers that have one.
    levels: HashMap<&'a str, f64>,
    /// The providers that allow any.
    open: Vec<String>,
}

impl<'a> ProviderRoom<'a> {
    /// The room of each of `providers`, counting in `deferred` those that
    /// allow none (paused, or at a limit).
    fn of(
        providers: &'a [String],
        gates: &HashMap<String, ProviderGate>,
        running: &RunningCounts,
        rules: &ClaimRules,
        deferred: &mut HashMap<Deferral, u64>,
    ) -> Self {
        let mut room =
            ProviderRoom { room: HashMap::new(), binding: HashMap::new(), levels: HashMap::new(), open: Vec::new() };
        for name in providers {
            let gate = gates.get(name);
            if gate.is_some_and(|gate| gate.paused_for > 0.0) {
                *deferred.entry(Deferral::ProviderPaused).or_default() += 1;
                continue;
            }
            let own = rules.limits.providers.get(name).copied().unwrap_or_default();
            let mut allows = None::<(u32, Deferral)>;
            if let Some(max) = own.max_concurrent {
                let busy = running.by_provider.get(name).copied().unwrap_or(0);
                allows = Some((u32::try_from(i64::from(max) - busy).unwrap_or(0), Deferral::ProviderMaxConcurrent));
            }
            if let Some(per_minute) = own.requests_per_minute {
                let level = refilled(gate.and_then(|g| g.requests), gate.map_or(0.0, |g| g.requests_idle), per_minute);
                room.levels.insert(name.as_str(), level);
                let whole = level.max(0.0).floor() as u32;
                if allows.is_none_or(|(n, _)| whole < n) {
                    allows = Some((whole, Deferral::ProviderRequestsPerMinute));
                }
            }
            match allows {
                Some((0, why)) => *deferred.entry(why).or_default() += 1,
                Some((n, why)) => {
                    room.room.insert(name.as_str(), n);
                    room.binding.insert(name.as_str(), why);
                    room.open.push(name.clone());
                }
                None => room.open.push(name.clone()),
            }
        }
        room
    }
}

/// How many more attempts each owner of the window may start, counting in
/// `deferred` those at their limit.
fn owner_caps<'a>(
    owners: &'a [PendingOwner],
    owner_limit: &impl Fn(&PendingOwner) -> Option<u32>,
    running: &RunningCounts,
    want: u32,
    deferred: &mut HashMap<Deferral, u64>,
) -> Vec<(&'a str, u32)> {
    let mut caps = Vec::with_capacity(owners.len());
    for owner in owners {
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
    caps
}

/// Locks each owner's candidates on the open providers, picks up to `want`
/// within the providers' room, starts them, and writes back the request
/// buckets they drew from.
async fn start_candidates(
    tx: &mut Tx,
    worker: &str,
    want: u32,
    rules: &ClaimRules,
    caps: &[(&str, u32)],
    mut room: ProviderRoom<'_>,
    deferred: &mut HashMap<Deferral, u64>,
) -> Result<Vec<ClaimedAttempt>> {
    let mut candidates = Vec::with_capacity(caps.len());
    for (owner, quota) in fetch_sizes(caps, want) {
        candidates.push(tx.claim_candidates(owner, &room.open, quota).await?);
    }
    let (picked, short) = pick(candidates, want, &mut room.room);
    for name in short {
        *deferred.entry(room.binding[name.as_str()]).or_default() += 1;
    }
    let started = start(tx, worker, picked, rules).await?;
    for (name, level) in room.levels {
        let used = started.iter().filter(|c| c.provider == name).count();
        tx.put_requests(name, level - used as f64).await?;
    }
    Ok(started)
}

/// Starts the picked attempts, owner by owner.
async fn start(tx: &mut Tx, worker: &str, picked: Vec<Candidate>, rules: &ClaimRules) -> Result<Vec<ClaimedAttempt>> {
    let mut by_owner: Vec<Vec<Candidate>> = Vec::new();
    for candidate in picked {
        match by_owner.iter_mut().find(|group| group[0].attempt.owner == candidate.attempt.owner) {
            Some(group) => group.push(candidate),
            None => by_owner.push(vec![candidate]),
        }
    }
    let mut claimed = Vec::new();
    for group in by_owner {
        let lease_of: Vec<Duration> = group.iter().map(|c| rules.lease_of(&c.provider)).collect();
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::domain::{AttemptId, JobId, OwnerId};
    use crate::store::AttemptRef;

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
}
