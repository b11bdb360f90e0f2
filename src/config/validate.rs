//! The checks of the settings that serde cannot make: ranges, and
//! references between tables. The first that fails is the one reported.

use std::time::Duration;

use super::{ConfigError, Settings};

impl Settings {
    /// Checks what serde cannot: references between tables, and ranges.
    /// Schemas and templates are compiled, and so checked, once, by
    /// `Catalog::new`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_requests()?;
        self.check_retention()?;
        self.check_webhooks()?;
        self.check_server_limits()?;
        self.check_database_and_worker()?;
        self.check_tasks()?;
        for (name, provider) in &self.providers {
            provider.check(name).map_err(ConfigError::Invalid)?;
        }
        self.check_one_currency()
    }

    /// Checks that a request may have a body and be served.
    fn check_requests(&self) -> Result<(), ConfigError> {
        if self.server.max_body_bytes == 0 {
            return invalid("server.max_body_bytes must be at least 1".into());
        }
        if self.server.max_concurrent_requests == 0 {
            return invalid("server.max_concurrent_requests must be at least 1".into());
        }
        Ok(())
    }

    /// Checks that finished jobs, and so their keys, are kept at least a
    /// day (unless short spans are allowed), and that the purger can work.
    fn check_retention(&self) -> Result<(), ConfigError> {
        let retention = &self.retention;
        let day = Duration::from_secs(24 * 3600);
        let short: Vec<String> = std::iter::once(("retention.finished_jobs".to_owned(), retention.finished_jobs))
            .chain(
                self.tasks
                    .iter()
                    .filter_map(|(name, t)| Some((format!("tasks.{name}.retain_finished"), t.retain_finished?))),
            )
            .filter(|(_, span)| span.0 < day && !retention.allow_short)
            .map(|(name, span)| format!("{name} = \"{span}\""))
            .collect();
        if !short.is_empty() {
            return invalid(format!(
                "{} is under 24 h: a job's idempotency key is held as long as the job, at least a day (retention.allow_short = true allows it, for tests)",
                short.join(", ")
            ));
        }
        if retention.batch_size == 0 || retention.purge_interval.0.is_zero() {
            return invalid("retention.batch_size and retention.purge_interval must be at least 1".into());
        }
        Ok(())
    }

    /// Checks the webhook deliverer's timings and sizes.
    fn check_webhooks(&self) -> Result<(), ConfigError> {
        let hooks = &self.webhooks;
        if hooks.timeout.is_zero()
            || hooks.retry_base.is_zero()
            || hooks.poll_interval.is_zero()
            || hooks.batch_size == 0
            || hooks.concurrency == 0
        {
            return invalid(
                "webhooks.timeout_ms, retry_base_ms, poll_interval_ms, batch_size and concurrency must be at least 1"
                    .into(),
            );
        }
        if hooks.retry_max < hooks.retry_base {
            return invalid("webhooks.retry_max_ms must be at least webhooks.retry_base_ms".into());
        }
        Ok(())
    }

    /// Checks the server's event streams, replay cache, long-polls and
    /// rate limit.
    fn check_server_limits(&self) -> Result<(), ConfigError> {
        if self.server.event_stream_interval.is_zero() {
            return invalid("server.event_stream_interval_ms must be at least 1".into());
        }
        if let Some(s3) = &self.files.s3 {
            s3.check().map_err(ConfigError::Invalid)?;
        }
        if let Some(url) = &self.server.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return invalid(format!("server.public_url must be an http:// or https:// URL, not '{url}'"));
        }
        if self.server.replay_cache_keys < 2 {
            return invalid("server.replay_cache_keys must be at least 2".into());
        }
        if self.server.max_long_polls_per_owner == 0 {
            return invalid("server.max_long_polls_per_owner must be at least 1".into());
        }
        if self.server.rate_limit_per_second > 0 && self.server.rate_limit_burst == 0 {
            return invalid("server.rate_limit_burst must be at least 1".into());
        }
        Ok(())
    }

    /// Checks that the database pool and the worker can hold something.
    fn check_database_and_worker(&self) -> Result<(), ConfigError> {
        if self.database.max_connections == 0 {
            return invalid("database.max_connections must be at least 1".into());
        }
        // It also bounds onejob's wait for an answer (`store::postgres::bounded`).
        if self.database.statement_timeout.is_zero() {
            return invalid("database.statement_timeout_ms must be at least 1".into());
        }
        if self.worker.concurrency == 0 || self.worker.batch_size == 0 {
            return invalid("worker.concurrency and worker.batch_size must be at least 1".into());
        }
        Ok(())
    }

    /// Checks each task: the providers it names are configured, and its
    /// budget, attempts and hedge make sense.
    fn check_tasks(&self) -> Result<(), ConfigError> {
        for (name, task) in &self.tasks {
            let hedges = task.hedge.as_ref().map(|hedge| hedge.providers_of(task)).unwrap_or_default();
            for provider in std::iter::once(&task.default_provider).chain(&task.failover).chain(hedges) {
                if !self.providers.contains_key(provider) {
                    return invalid(format!("tasks.{name} names provider '{provider}', which is not configured"));
                }
            }
            if task.max_cost.is_some_and(|m| m < crate::domain::Money::ZERO) {
                return invalid(format!("tasks.{name}.max_cost must be at least 0"));
            }
            if task.max_attempts == 0 || task.max_in_flight == 0 {
                return invalid(format!("tasks.{name}: max_attempts and max_in_flight must be at least 1"));
            }
            if let Some(hedge) = &task.hedge {
                hedge.check(name, task).map_err(ConfigError::Invalid)?;
            }
            if let Some(files) = &task.files {
                files.check(name).map_err(ConfigError::Invalid)?;
            }
        }
        Ok(())
    }

    /// Checks that every price is in one currency.
    fn check_one_currency(&self) -> Result<(), ConfigError> {
        let mut currencies = self.providers.iter().filter_map(|(name, p)| Some((name, &p.price.as_ref()?.currency)));
        if let Some((first_name, first)) = currencies.next()
            && let Some((name, other)) = currencies.find(|(_, currency)| currency != &first)
        {
            return invalid(format!(
                "providers.{name}.price is in {other} but providers.{first_name}.price in {first}: \
                 every price must be in one currency, so that costs and budgets add up"
            ));
        }
        Ok(())
    }
}

/// The settings contradict each other, as `message` says.
fn invalid(message: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid(message))
}
