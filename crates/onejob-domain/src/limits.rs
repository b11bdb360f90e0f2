//! The limits that keep attempts pending across the cluster: a provider's
//! (in flight, per minute), and why a claim left an attempt waiting.

/// A provider's own limits (`[providers.NAME]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Requests in flight at once across the cluster.
    pub max_concurrent: Option<u32>,
    /// Requests per minute (a token bucket of that size, refilled evenly).
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute: each request's counted prompt plus its
    /// `max_output_tokens`, reserved by the worker right before the call.
    pub tokens_per_minute: Option<u32>,
}

impl ProviderLimits {
    /// Whether a claim counts this provider under its lock.
    pub fn counted(&self) -> bool {
        self.max_concurrent.is_some() || self.requests_per_minute.is_some()
    }
}

/// Why attempts were left pending by a claim: the `limit` label of the
/// metric `onejob_claims_deferred_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deferral {
    /// The owner had as many attempts running as it may.
    OwnerMaxInFlight,
    /// The provider had as many requests in flight as it allows.
    ProviderMaxConcurrent,
    /// The provider's requests per minute were spent.
    ProviderRequestsPerMinute,
    /// The provider's tokens per minute were spent (counted by the worker).
    ProviderTokensPerMinute,
    /// The provider asked for a pause (a 429 with `Retry-After`).
    ProviderPaused,
}

impl Deferral {
    /// Every one, in declaration order.
    pub const ALL: &'static [Deferral] = &[
        Deferral::OwnerMaxInFlight,
        Deferral::ProviderMaxConcurrent,
        Deferral::ProviderRequestsPerMinute,
        Deferral::ProviderTokensPerMinute,
        Deferral::ProviderPaused,
    ];

    /// Its label value, also the `reason` a waiting job shows.
    pub const fn as_str(self) -> &'static str {
        match self {
            Deferral::OwnerMaxInFlight => "owner-max-in-flight",
            Deferral::ProviderMaxConcurrent => "provider-max-concurrent",
            Deferral::ProviderRequestsPerMinute => "provider-requests-per-minute",
            Deferral::ProviderTokensPerMinute => "provider-tokens-per-minute",
            Deferral::ProviderPaused => "provider-paused",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_counts_a_provider_with_a_concurrency_or_request_rate_limit_only() {
        let limits = |max_concurrent, requests_per_minute, tokens_per_minute| ProviderLimits {
            max_concurrent,
            requests_per_minute,
            tokens_per_minute,
        };
        for (limits, counted) in [
            (limits(None, None, None), false),
            (limits(Some(4), None, None), true),
            (limits(None, Some(60), None), true),
            (limits(Some(4), Some(60), None), true),
            // Tokens are counted by the worker, not under the claim's lock.
            (limits(None, None, Some(10_000)), false),
        ] {
            assert_eq!(limits.counted(), counted, "{limits:?}");
        }
    }

    #[test]
    fn deferrals_are_labelled_with_the_documented_reasons() {
        let names: Vec<&str> = Deferral::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(
            names,
            [
                "owner-max-in-flight",
                "provider-max-concurrent",
                "provider-requests-per-minute",
                "provider-tokens-per-minute",
                "provider-paused",
            ]
        );
    }
}
