//! How long finished jobs are kept: spans written as people write them
//! (`"30d"`, `"24h"`, `"90m"`, `"2s"`), and which jobs a retention can
//! purge. A job is purged only when it is finished (`succeeded`, `failed`
//! or `canceled`) and none of its attempts is open (`pending`, `running`
//! or `unknown`); its key lives exactly as long as it does.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};

use super::{AttemptState, Job, JobState};

/// A span of time in the configuration's form: a whole number and a unit,
/// `ms`, `s`, `m`, `h` or `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

/// A span that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' is not a span such as \"30d\", \"24h\", \"90m\", \"2s\" or \"500ms\"")]
pub struct BadSpan(pub String);

impl FromStr for Span {
    type Err = BadSpan;

    fn from_str(text: &str) -> Result<Self, BadSpan> {
        let bad = || BadSpan(text.to_owned());
        let trimmed = text.trim();
        let split = trimmed.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (number, unit) = trimmed.split_at(split);
        let number: u64 = number.parse().map_err(|_| bad())?;
        let millis = match unit.trim() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        number.checked_mul(millis).map(|ms| Span(Duration::from_millis(ms))).ok_or_else(bad)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
            if ms > 0 && ms.is_multiple_of(size) {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Span {
    /// As a `chrono` duration (saturating at about 292,000 years).
    pub fn as_chrono(self) -> chrono::Duration {
        chrono::Duration::from_std(self.0).unwrap_or(chrono::Duration::MAX)
    }
}

/// The job states a purge may take: the job can no longer change by itself.
pub const FINISHED: [JobState; 3] = [JobState::Succeeded, JobState::Failed, JobState::Canceled];

/// The attempt states that keep a job, whatever its age.
pub const OPEN: [AttemptState; 3] = [AttemptState::Pending, AttemptState::Running, AttemptState::Unknown];

/// When the job's last change was: its own, or its latest attempt's.
pub fn last_change(job: &Job) -> DateTime<Utc> {
    job.attempts.iter().filter_map(|a| a.finished_at).fold(job.updated_at, DateTime::max)
}

/// When a job kept for `retention` after its last change will be purged
/// (and its key freed); `None` while it is not finished or has an open
/// attempt, since such a job is never purged.
pub fn expires_at(job: &Job, retention: Span) -> Option<DateTime<Utc>> {
    if !FINISHED.contains(&job.state) || job.attempts.iter().any(|a| OPEN.contains(&a.state)) {
        return None;
    }
    last_change(job).checked_add_signed(retention.as_chrono())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_written_and_print_back() {
        for (text, ms, shown) in [
            ("30d", 2_592_000_000u64, "30d"),
            ("24h", 86_400_000, "1d"),
            ("90m", 5_400_000, "90m"),
            ("2s", 2_000, "2s"),
            ("500ms", 500, "500ms"),
            ("120s", 120_000, "2m"),
        ] {
            let span: Span = text.parse().unwrap();
            assert_eq!(span.0, Duration::from_millis(ms), "{text}");
            assert_eq!(span.to_string(), shown);
        }
        for bad in ["", "30", "d", "3 weeks", "-1d", "1.5h", "99999999999999999999d"] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_zero_span_prints_in_milliseconds_and_reads_back() {
        let zero = Span(Duration::ZERO);
        assert_eq!(zero.to_string(), "0ms");
        assert_eq!("0ms".parse::<Span>().unwrap(), zero);
    }

    #[test]
    fn a_span_is_the_same_chrono_duration_or_the_longest_one() {
        assert_eq!("30d".parse::<Span>().unwrap().as_chrono(), chrono::Duration::days(30));
        assert_eq!("500ms".parse::<Span>().unwrap().as_chrono(), chrono::Duration::milliseconds(500));
        assert_eq!(Span(Duration::MAX).as_chrono(), chrono::Duration::MAX);
    }

    fn job(state: JobState, attempts: &[AttemptState], updated_at: DateTime<Utc>) -> Job {
        Job { created_at: updated_at, updated_at, ..crate::job::tests::job_in(state, attempts) }
    }

    #[test]
    fn only_a_finished_job_with_no_open_attempt_expires_a_retention_after_its_last_change() {
        use AttemptState as A;
        let changed = Utc::now();
        let day: Span = "1d".parse().unwrap();
        let mut succeeded = job(JobState::Succeeded, &[A::Failed, A::Succeeded], changed);
        succeeded.attempts[1].finished_at = Some(changed + chrono::Duration::hours(1));
        assert_eq!(expires_at(&succeeded, day), Some(changed + chrono::Duration::hours(25)));
        for (state, attempts, expires) in [
            (JobState::Failed, &[A::Failed][..], true),
            (JobState::Canceled, &[A::Canceled], true),
            (JobState::Canceled, &[A::Running], false),
            (JobState::Succeeded, &[A::Succeeded, A::Running], false),
            (JobState::Queued, &[A::Failed, A::Pending], false),
            (JobState::Running, &[A::Running], false),
            (JobState::Unknown, &[A::Unknown], false),
        ] {
            let expected = expires.then(|| changed + chrono::Duration::days(1));
            assert_eq!(expires_at(&job(state, attempts, changed), day), expected, "{state} {attempts:?}");
        }
    }
}
