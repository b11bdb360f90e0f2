//! The settings' durations: a `Duration` in Rust, a whole number of
//! milliseconds or seconds in TOML under the setting's own name, unit
//! included (`timeout_ms = 5000`). Every duration field is read by one of
//! these modules:
//! `#[serde(rename = "timeout_ms", with = "duration::millis")]`.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The whole milliseconds of `duration`, at most `u64::MAX`: what a `_ms`
/// setting holds.
pub(crate) fn saturating_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A `Duration` written as whole milliseconds (`u64`): the `_ms` settings.
pub(crate) mod millis {
    use super::*;

    /// Reads whole milliseconds.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// An optional `Duration` written as whole milliseconds: the `_ms`
/// settings that may be absent (with `#[serde(default)]`).
pub(crate) mod option_millis {
    use super::*;

    /// Reads whole milliseconds, if given.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

/// A `Duration` written as whole seconds (`u64`): the `_secs` settings.
pub(crate) mod secs {
    use super::*;

    /// Reads whole seconds.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

/// An optional `Duration` written as whole seconds: the `_secs` settings
/// that may be absent (with `#[serde(default)]`).
pub(crate) mod option_secs {
    use super::*;

    /// Reads whole seconds, if given.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_secs))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::Deserialize;

    /// One field of each kind, under its TOML name.
    #[derive(Debug, PartialEq, Deserialize)]
    struct Timings {
        #[serde(rename = "wait_ms", with = "super::millis")]
        wait: Duration,
        #[serde(rename = "grace_secs", with = "super::secs")]
        grace: Duration,
        #[serde(rename = "late_ms", with = "super::option_millis", default)]
        late: Option<Duration>,
        #[serde(rename = "retry_after_secs", with = "super::option_secs", default)]
        retry_after: Option<Duration>,
    }

    #[test]
    fn durations_read_the_integers_of_their_toml_names() {
        let text = "wait_ms = 1500\ngrace_secs = 7\nlate_ms = 0\nretry_after_secs = 3\n";
        let read: Timings = toml::from_str(text).unwrap();
        let expected = Timings {
            wait: Duration::from_millis(1_500),
            grace: Duration::from_secs(7),
            late: Some(Duration::ZERO),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(read, expected);
        let absent: Timings = toml::from_str("wait_ms = 9223372036854775807\ngrace_secs = 0\n").unwrap();
        assert_eq!(
            (absent.wait, absent.late, absent.retry_after),
            (Duration::from_millis(i64::MAX as u64), None, None)
        );
        assert_eq!(super::saturating_millis(absent.wait), i64::MAX as u64);
        assert_eq!(super::saturating_millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_negative_or_fractional_duration_is_refused() {
        for text in ["wait_ms = -1\ngrace_secs = 1", "wait_ms = 1.5\ngrace_secs = 1", "wait_ms = 1\ngrace_secs = \"1\""]
        {
            assert!(toml::from_str::<Timings>(text).is_err(), "{text}");
        }
    }
}
