//! `[providers.NAME.job]`: how an `http-job` provider's API is spoken. Any
//! asynchronous job API of the submit / status / cancel shape (fal's
//! queue, RunPod serverless) is described here rather than in code: a
//! method and a path per call, the submit's body as a template, and where
//! the answers keep the job's id, state, output and error.

use serde::Deserialize;

/// `[providers.NAME.job]`
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobApi {
    /// The call that submits a job: its path under `base_url`.
    pub submit: JobCall,
    /// The submit's body: a template of the job's `input`, the attempt's
    /// `attempt_id` and its `callback_url` (absent when the call has none,
    /// as a qualification's), which renders to JSON.
    #[serde(default = "default_body")]
    pub body: String,
    /// The query parameter the callback URL is sent in (fal's
    /// `fal_webhook`), when it is not in the body.
    #[serde(default)]
    pub callback_query: Option<String>,
    /// Where the submit's answer holds the provider's id of the job (a
    /// JSON pointer).
    pub id: String,
    /// The call that asks for a job's status; `{id}` in its path is the
    /// provider's id of the job.
    pub status: JobCall,
    /// The call that fetches a finished job's output, when the status does
    /// not hold it (fal's response URL).
    #[serde(default)]
    pub result: Option<JobCall>,
    /// The call that cancels a job.
    #[serde(default)]
    pub cancel: Option<JobCall>,
    /// The header that carries the API key (from `api_key_env`).
    #[serde(default = "default_key_header")]
    pub key_header: String,
    /// What comes before the key in that header.
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
    /// How a status answer is read.
    pub read: JobReading,
    /// How a callback's body is read; by default as a status answer.
    #[serde(default)]
    pub read_callback: Option<JobReading>,
    /// How callbacks are signed, when the provider signs them; otherwise
    /// the callback URL's own token is the proof.
    #[serde(default)]
    pub signature: Option<JobSignature>,
}

/// One call of a job API.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobCall {
    /// `GET`, `POST`, `PUT` or `DELETE`.
    pub method: JobMethod,
    /// Its path under `base_url`, `{id}` standing for the job's id.
    pub path: String,
}

/// The HTTP methods a job API's calls use.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobMethod {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
}

/// Where an answer (a status, or a callback's body) holds what onejob
/// reads, as JSON pointers, and what each of the provider's states means.
/// A state none of the lists names is taken as still running.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobReading {
    /// The provider's id of the job (a callback names its job by it).
    #[serde(default)]
    pub id: Option<String>,
    /// The job's state.
    pub state: String,
    /// The states of a job still queued or running.
    #[serde(default)]
    pub running: Vec<String>,
    /// The states of a job done with an output.
    pub succeeded: Vec<String>,
    /// The states of a job that failed.
    #[serde(default)]
    pub failed: Vec<String>,
    /// The states of a canceled job.
    #[serde(default)]
    pub canceled: Vec<String>,
    /// The output (the whole answer by default; of the result call's
    /// answer where there is one).
    #[serde(default)]
    pub output: String,
    /// The error of a failed job; a job in a succeeded state with an error
    /// failed.
    #[serde(default)]
    pub error: Option<String>,
    /// The compute time it was billed, in milliseconds.
    #[serde(default)]
    pub compute_ms: Option<String>,
    /// The compute time it was billed, in seconds.
    #[serde(default)]
    pub compute_seconds: Option<String>,
}

/// How a provider signs its callbacks.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobSignature {
    /// `fal`: ED25519 over the request id, the user id, the timestamp and
    /// the body's SHA-256 (the `X-Fal-Webhook-*` headers), by a key of a
    /// JSON Web Key Set.
    pub scheme: SignatureScheme,
    /// Where the keys are published.
    pub jwks_url: String,
}

/// The callback signatures onejob checks.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// fal's webhook signature.
    Fal,
}

/// What a state means, by a reading's lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Queued, or running.
    Running,
    /// Done, with an output.
    Succeeded,
    /// Done without one.
    Failed,
    /// Stopped by a cancel.
    Canceled,
}

impl JobReading {
    /// What `state` means.
    pub fn meaning(&self, state: &str) -> JobState {
        let has = |list: &[String]| list.iter().any(|s| s == state);
        if has(&self.succeeded) {
            JobState::Succeeded
        } else if has(&self.failed) {
            JobState::Failed
        } else if has(&self.canceled) {
            JobState::Canceled
        } else {
            JobState::Running
        }
    }

    fn check(&self, name: &str, table: &str) -> Result<(), String> {
        let pointers = [Some(&self.state), Some(&self.output), self.id.as_ref(), self.error.as_ref()];
        let more = [self.compute_ms.as_ref(), self.compute_seconds.as_ref()];
        for pointer in pointers.into_iter().chain(more).flatten() {
            check_pointer(name, table, pointer)?;
        }
        if self.succeeded.is_empty() {
            return Err(format!("providers.{name}.job.{table}.succeeded: name the states of a job done"));
        }
        let mut all: Vec<&String> =
            [&self.running, &self.succeeded, &self.failed, &self.canceled].into_iter().flatten().collect();
        all.sort_unstable();
        if let Some(pair) = all.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(format!("providers.{name}.job.{table}: state '{}' has two meanings", pair[0]));
        }
        Ok(())
    }
}

impl JobApi {
    /// Why these settings of provider `name` cannot be used, if they cannot.
    pub fn check(&self, name: &str) -> Result<(), String> {
        check_pointer(name, "id", &self.id)?;
        self.read.check(name, "read")?;
        if let Some(reading) = &self.read_callback {
            reading.check(name, "read_callback")?;
        }
        let calls = [Some(("submit", &self.submit)), Some(("status", &self.status))];
        let more = [self.result.as_ref().map(|c| ("result", c)), self.cancel.as_ref().map(|c| ("cancel", c))];
        for (which, call) in calls.into_iter().chain(more).flatten() {
            if !call.path.starts_with('/') || call.path.contains("..") || call.path.contains(['?', '#']) {
                return Err(format!(
                    "providers.{name}.job.{which}.path: a path under base_url, starting with '/' (no '..', query or fragment)"
                ));
            }
            if which != "submit" && !call.path.contains("{id}") {
                return Err(format!("providers.{name}.job.{which}.path: put the job's id in it as {{id}}"));
            }
        }
        let header_ok = reqwest::header::HeaderName::from_bytes(self.key_header.as_bytes()).is_ok();
        if !header_ok {
            return Err(format!("providers.{name}.job.key_header: '{}' is not a header name", self.key_header));
        }
        if let Some(signature) = &self.signature
            && !signature.jwks_url.starts_with("https://")
            && !signature.jwks_url.starts_with("http://")
        {
            return Err(format!("providers.{name}.job.signature.jwks_url: an http(s) URL"));
        }
        let calling_back = self.read_callback.as_ref().unwrap_or(&self.read);
        if calling_back.id.is_none() {
            return Err(format!(
                "providers.{name}.job: a callback names its job by its id: give read_callback.id (or read.id, \
                 where callbacks are read as status answers)"
            ));
        }
        // Its syntax; what it makes of an input is known when it is sent.
        let environment = minijinja::Environment::new();
        environment.template_from_str(&self.body).map(|_| ()).map_err(|e| format!("providers.{name}.job.body: {e}"))
    }

    /// The submit's body for `input`: the template rendered, as JSON.
    pub fn render_body(
        &self,
        input: &serde_json::Value,
        attempt_id: &str,
        callback_url: Option<&str>,
    ) -> Result<serde_json::Value, String> {
        let mut environment = minijinja::Environment::new();
        environment.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        let input = minijinja::Value::from(minijinja::value::Serde(input));
        let context = minijinja::context! { input, attempt_id, callback_url };
        let text = environment.render_str(&self.body, context).map_err(|e| format!("the template fails: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("the template does not render to JSON: {e}"))
    }
}

fn check_pointer(name: &str, field: &str, pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        return Ok(());
    }
    Err(format!("providers.{name}.job.{field}: '{pointer}' is not a JSON pointer (empty, or starting with '/')"))
}

fn default_body() -> String {
    "{{ input | tojson }}".to_owned()
}

fn default_key_header() -> String {
    "authorization".to_owned()
}

fn default_key_prefix() -> String {
    "Bearer ".to_owned()
}

impl JobMethod {
    /// The method as reqwest takes it.
    pub fn as_http(self) -> reqwest::Method {
        match self {
            JobMethod::Get => reqwest::Method::GET,
            JobMethod::Post => reqwest::Method::POST,
            JobMethod::Put => reqwest::Method::PUT,
            JobMethod::Delete => reqwest::Method::DELETE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(read: &str, more: &str) -> JobApi {
        toml::from_str(&format!(
            "submit = {{ method = \"POST\", path = \"/run\" }}\nid = \"/id\"\n\
             status = {{ method = \"GET\", path = \"/status/{{id}}\" }}\n{more}\n[read]\n{read}"
        ))
        .unwrap()
    }

    #[test]
    fn a_job_table_is_checked_for_what_its_calls_and_callbacks_need() {
        let read = "id = \"/id\"\nstate = \"/status\"\nsucceeded = [\"COMPLETED\"]";
        assert_eq!(job(read, "body = '{\"prompt\": {{ input.prompt | tojson }}}'").check("p"), Ok(()));
        let no_id = "state = \"/status\"\nsucceeded = [\"COMPLETED\"]";
        assert!(job(no_id, "").check("p").unwrap_err().contains("read_callback.id"), "a callback could not be placed");
        let refused = [
            (read, "body = '{{ input'"),
            (read, "cancel = { method = \"POST\", path = \"/cancel\" }"),
            (read, "result = { method = \"GET\", path = \"../{id}\" }"),
            (read, "key_header = \"not a header\""),
            ("id = \"/id\"\nstate = \"status\"\nsucceeded = [\"OK\"]", ""),
            ("id = \"/id\"\nstate = \"/s\"\nsucceeded = [\"OK\"]\nfailed = [\"OK\"]", ""),
        ];
        for (read, more) in refused {
            assert!(job(read, more).check("p").is_err(), "{read} {more}");
        }
    }
}
