//! The values some metrics' labels take: how an attempt settled, what a
//! status lookup found.

/// What became of an attempt its worker (or the reconciler) settled: the
/// `outcome` of [`super::metrics::ATTEMPTS`], [`super::metrics::TOKENS`] and [`super::metrics::COST`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettledAs {
    /// Its output won the job.
    Succeeded,
    /// Its output came after another attempt had won.
    Superseded,
    /// It failed definitively.
    Failed,
    /// Its outcome cannot be known yet.
    Unknown,
    /// Its call was aborted because its job had finished.
    Canceled,
}

impl SettledAs {
    /// Every outcome.
    pub const ALL: [SettledAs; 5] =
        [SettledAs::Succeeded, SettledAs::Superseded, SettledAs::Failed, SettledAs::Unknown, SettledAs::Canceled];

    /// As the label shows it.
    pub const fn as_str(self) -> &'static str {
        match self {
            SettledAs::Succeeded => "succeeded",
            SettledAs::Superseded => "superseded",
            SettledAs::Failed => "failed",
            SettledAs::Unknown => "unknown",
            SettledAs::Canceled => "canceled",
        }
    }
}

/// What a status lookup of an unknown attempt found: the `result` of
/// [`super::metrics::RECONCILIATIONS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The provider finished it with an output.
    Succeeded,
    /// The provider says it failed.
    Failed,
    /// The provider says it was canceled.
    Canceled,
    /// The provider is still at it.
    Running,
    /// The provider has no record of it.
    NotFound,
    /// The lookup itself failed.
    Error,
}

impl Lookup {
    /// Every result.
    pub const ALL: [Lookup; 6] =
        [Lookup::Succeeded, Lookup::Failed, Lookup::Canceled, Lookup::Running, Lookup::NotFound, Lookup::Error];

    /// As the label shows it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Lookup::Succeeded => "succeeded",
            Lookup::Failed => "failed",
            Lookup::Canceled => "canceled",
            Lookup::Running => "running",
            Lookup::NotFound => "not_found",
            Lookup::Error => "error",
        }
    }
}
