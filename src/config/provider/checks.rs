//! The checks of a provider's settings that serde cannot make: ranges,
//! and what each kind and API takes.

use super::{ProviderApi, ProviderKind, ProviderSettings, SimOutput};

impl ProviderSettings {
    /// Why these settings of provider `name` cannot be used, if they cannot.
    pub fn check(&self, name: &str) -> Result<(), String> {
        if let Some(breaker) = &self.breaker {
            breaker.check(name)?;
        }
        self.check_ranges(name)?;
        self.check_proxy(name)?;
        self.check_kind(name)?;
        self.check_messages_api(name)?;
        self.check_openai_calls(name)
    }

    /// Checks that a proxy is an `http://` or `https://` URL with a host.
    fn check_proxy(&self, name: &str) -> Result<(), String> {
        let Some(proxy) = &self.proxy else { return Ok(()) };
        match reqwest::Url::parse(proxy) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => Ok(()),
            _ => Err(format!("providers.{name}.proxy must be an http:// or https:// URL with a host")),
        }
    }

    /// Checks the shares, token counts, limits and intervals.
    fn check_ranges(&self, name: &str) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.tail_rate) {
            return Err(format!("providers.{name}.tail_rate must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err(format!("providers.{name}.error_rate must be between 0 and 1"));
        }
        if self.max_output_tokens == 0 || self.context_tokens <= self.max_output_tokens {
            return Err(format!("providers.{name}: context_tokens must exceed max_output_tokens (at least 1)"));
        }
        if [self.max_concurrent, self.requests_per_minute, self.tokens_per_minute].contains(&Some(0)) {
            return Err(format!(
                "providers.{name}: max_concurrent, requests_per_minute and tokens_per_minute must be at least 1"
            ));
        }
        if self.timeout.is_zero() || self.poll_interval.is_zero() {
            return Err(format!("providers.{name}: timeout_ms and poll_interval_ms must be at least 1"));
        }
        Ok(())
    }

    /// Checks that the kind and the API agree: `api` only for a simulated
    /// provider, a real one's endpoint and key, the Responses API's calls.
    fn check_kind(&self, name: &str) -> Result<(), String> {
        if self.api.is_some() && self.is_real() {
            return Err(format!(
                "providers.{name}.api is for sim providers; the kind says which API a real one speaks"
            ));
        }
        if self.api == Some(ProviderApi::HttpJob) {
            return Err(format!(
                "providers.{name}.api: http-job is a kind of real provider; the simulator's job APIs are fal and runpod"
            ));
        }
        if self.kind == ProviderKind::Cog {
            return self.check_cog(name);
        }
        if self.kind == ProviderKind::Replicate {
            return self.check_replicate(name);
        }
        if self.speaks_jobs() || self.job.is_some() {
            return self.check_job(name);
        }
        if self.is_real() && (self.base_url.is_none() || self.api_key_env.is_none()) {
            return Err(format!("providers.{name}: an {} provider needs base_url and api_key_env", self.kind.as_str()));
        }
        if self.kind == ProviderKind::OpenaiResponses && (self.status_url.is_some() || self.cancel_url.is_some()) {
            return Err(format!(
                "providers.{name}: the Responses API's status lookup and cancel call follow from base_url; \
                 status_url and cancel_url are for openai providers"
            ));
        }
        Ok(())
    }

    /// Checks a Cog server's settings: its address, and none of what a
    /// chat model takes.
    fn check_cog(&self, name: &str) -> Result<(), String> {
        if self.base_url.is_none() {
            return Err(format!("providers.{name}: a cog provider needs base_url (the Cog server's address)"));
        }
        if self.status_lookup == Some(true) || self.status_url.is_some() || self.cancel_url.is_some() {
            return Err(format!(
                "providers.{name}: a Cog server has no status lookup (its outcome comes by callback), and its \
                 cancel call follows from base_url"
            ));
        }
        if self.response_format || self.count_tokens || self.prompt_cache {
            return Err(format!(
                "providers.{name}: response_format, count_tokens and prompt_cache are for chat models"
            ));
        }
        Ok(())
    }

    /// Checks Replicate's settings: its address, its token, a model it
    /// can create predictions of, and none of what a chat model takes.
    fn check_replicate(&self, name: &str) -> Result<(), String> {
        if self.base_url.is_none() || self.api_key_env.is_none() {
            return Err(format!(
                "providers.{name}: a replicate provider needs base_url (https://api.replicate.com/v1) and \
                 api_key_env (the variable holding its API token)"
            ));
        }
        if super::ReplicateModel::of(&self.model).is_none() {
            return Err(format!(
                "providers.{name}.model: give Replicate's model as owner/name, a version as owner/name:version, \
                 or a deployment as deployments/owner/name"
            ));
        }
        if self.status_lookup == Some(false) || self.status_url.is_some() || self.cancel_url.is_some() {
            return Err(format!(
                "providers.{name}: Replicate's status lookup and cancel call follow from base_url, by the \
                 prediction's id"
            ));
        }
        if self.response_format || self.count_tokens || self.prompt_cache {
            return Err(format!(
                "providers.{name}: response_format, count_tokens and prompt_cache are for chat models"
            ));
        }
        Ok(())
    }

    /// Checks a job API's settings: its `job` table, its address and key,
    /// and none of what a chat model takes.
    fn check_job(&self, name: &str) -> Result<(), String> {
        let Some(job) = self.job.as_ref().filter(|_| self.speaks_jobs()) else {
            return Err(format!(
                "providers.{name}.job is how an http-job provider (or a simulated fal or runpod one) speaks its \
                 API: give it for those, and only for those"
            ));
        };
        job.check(name)?;
        if self.is_real() && (self.base_url.is_none() || self.api_key_env.is_none()) {
            return Err(format!(
                "providers.{name}: an http-job provider needs base_url and api_key_env (the variable holding its key)"
            ));
        }
        let lookup_set = self.status_lookup.is_some() || self.cancel_call.is_some();
        if lookup_set || self.status_url.is_some() || self.cancel_url.is_some() {
            return Err(format!(
                "providers.{name}: a job API's status and cancel calls are in its job table \
                 (job.status, job.cancel)"
            ));
        }
        if self.response_format || self.count_tokens || self.prompt_cache {
            return Err(format!(
                "providers.{name}: response_format, count_tokens and prompt_cache are for chat models"
            ));
        }
        Ok(())
    }

    /// Checks what only the Messages API takes, and what it does not.
    fn check_messages_api(&self, name: &str) -> Result<(), String> {
        if self.api() == ProviderApi::Messages
            && (self.status_url.is_some()
                || self.cancel_url.is_some()
                || self.status_lookup == Some(true)
                || self.cancel_call == Some(true))
        {
            return Err(format!("providers.{name}: Anthropic's Messages API has no status lookup and no cancel call"));
        }
        let messages = self.api() == ProviderApi::Messages;
        if messages && !(0.0..=1.0).contains(&self.temperature.max(self.qualification_temperature)) {
            return Err(format!(
                "providers.{name}: the Messages API takes a temperature between 0 and 1 \
                 (temperature and qualification_temperature)"
            ));
        }
        if self.kind == ProviderKind::Anthropic
            && self.base_url.as_deref().is_some_and(|url| url.trim_end_matches('/').ends_with("/v1"))
        {
            return Err(format!(
                "providers.{name}.base_url: give it as the SDK takes it (https://api.anthropic.com); \
                 onejob adds /v1/messages"
            ));
        }
        if messages && self.response_format {
            return Err(format!(
                "providers.{name}.response_format is for OpenAI's APIs; the Messages API always gets the \
                 output schema as a forced tool"
            ));
        }
        if (self.count_tokens || self.prompt_cache) && !messages {
            return Err(format!(
                "providers.{name}: count_tokens and prompt_cache are for the Messages API (kind = \"anthropic\")"
            ));
        }
        let messages_only = matches!(self.output, SimOutput::PauseTurn | SimOutput::ContextWindowExceeded);
        if (messages_only || self.cache_write_tokens > 0) && !messages {
            return Err(format!(
                "providers.{name}: output = \"pause_turn\" or \"context_window_exceeded\" and \
                 cache_write_tokens are for simulated Messages API providers (api = \"messages\")"
            ));
        }
        Ok(())
    }

    /// Checks that an openai provider's status lookup and cancel call have
    /// their URLs.
    fn check_openai_calls(&self, name: &str) -> Result<(), String> {
        if self.kind == ProviderKind::Openai && self.status_lookup == Some(true) && self.status_url.is_none() {
            return Err(format!("providers.{name}: status_lookup needs a status_url"));
        }
        if self.kind == ProviderKind::Openai && self.cancel_call == Some(true) && self.cancel_url.is_none() {
            return Err(format!("providers.{name}: cancel_call needs a cancel_url"));
        }
        Ok(())
    }
}
