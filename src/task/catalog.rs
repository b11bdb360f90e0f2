//! The tasks and providers of the configuration, compiled for use: input
//! schemas turned into validators once, limits and failover lists at hand,
//! and the qualifications running in this process ([`Running`]).
//! It answers the questions admission and the retry policy ask
//! ([`TaskRules`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::config::{ConfigError, ProviderSettings, Settings, TaskSettings};
use crate::domain::policy::{NextAttempt, PastAttempt, RetryPolicy};
use crate::domain::{AttemptLimits, Money, Usage};
use crate::store::TaskRules;
use crate::task::contract::Contract;

/// One task, ready to validate input and to render and check its contract.
pub struct Task {
    /// The task's name.
    pub name: String,
    /// Its settings.
    pub settings: TaskSettings,
    /// Its contract with providers.
    pub contract: Contract,
    input_validator: jsonschema::Validator,
}

/// One way a value breaks a schema.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// JSON Pointer to the offending value, from the request body's root.
    pub pointer: String,
    /// What is wrong with it.
    pub detail: String,
}

impl Task {
    /// The task's attempt limits.
    pub fn limits(&self) -> AttemptLimits {
        AttemptLimits { max_attempts: self.settings.max_attempts, max_in_flight: self.settings.max_in_flight }
    }

    /// Every way `input` breaks the input schema, pointers prefixed with
    /// `/input` (the field of the request body that holds it).
    pub fn check_input(&self, input: &Value) -> Vec<Violation> {
        self.input_validator
            .iter_errors(input)
            .map(|error| Violation { pointer: format!("/input{}", error.instance_path()), detail: error.to_string() })
            .collect()
    }
}

/// Every task and provider.
pub struct Catalog {
    tasks: HashMap<String, Task>,
    providers: HashMap<String, ProviderSettings>,
    qualifications: Arc<Running>,
    breakers: Arc<super::breakers::Breakers>,
    retention: crate::config::Span,
}

impl Catalog {
    /// Compiles validated settings: the one place where each task's input
    /// schema, output schema and prompt template are compiled, and so where
    /// a broken one is reported.
    pub fn new(settings: &Settings) -> Result<Self, ConfigError> {
        let mut tasks = HashMap::new();
        for (name, task) in &settings.tasks {
            let input_validator = jsonschema::draft202012::new(&task.input_schema).map_err(|error| {
                ConfigError::Invalid(format!("tasks.{name}.input_schema is not a valid JSON Schema: {error}"))
            })?;
            let contract =
                Contract::new(task).map_err(|error| ConfigError::Invalid(format!("tasks.{name}.{error}")))?;
            tasks.insert(name.clone(), Task { name: name.clone(), settings: task.clone(), contract, input_validator });
        }
        let providers = settings.providers.clone().into_iter().collect();
        let breakers = Arc::new(super::breakers::Breakers::new(&settings.providers));
        Ok(Self {
            tasks,
            providers,
            qualifications: Arc::default(),
            breakers,
            retention: settings.retention.finished_jobs,
        })
    }

    /// The qualifications running in this process.
    pub fn qualifications(&self) -> &Arc<Running> {
        &self.qualifications
    }

    /// The providers' breakers, as this process sees them.
    pub fn breakers(&self) -> &Arc<super::breakers::Breakers> {
        &self.breakers
    }

    /// The contract hash of `task` for `provider`, if both exist.
    pub fn contract_hash(&self, task: &str, provider: &str) -> Option<[u8; 32]> {
        Some(self.task(task)?.contract.hash_for(self.provider(provider)?))
    }

    /// Every task.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// How long a finished job of `task` is kept: its task's
    /// `retain_finished`, else `retention.finished_jobs` (also for a task
    /// no longer configured).
    pub fn retention_of(&self, task: &str) -> crate::config::Span {
        self.tasks.get(task).and_then(|t| t.settings.retain_finished).unwrap_or(self.retention)
    }

    /// A task by name.
    pub fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.get(name)
    }

    /// What task `name` answers (JSON for a task no longer configured).
    pub fn output_of(&self, name: &str) -> crate::domain::OutputKind {
        self.task(name).map_or(crate::domain::OutputKind::Json, |task| task.contract.output)
    }

    /// A provider by name.
    pub fn provider(&self, name: &str) -> Option<&ProviderSettings> {
        self.providers.get(name)
    }
}

impl TaskRules for Catalog {
    fn limits(&self, task: &str) -> AttemptLimits {
        self.task(task).map(Task::limits).unwrap_or_default()
    }

    fn contract_hash(&self, task: &str, provider: &str) -> Option<[u8; 32]> {
        Catalog::contract_hash(self, task, provider)
    }

    fn cancels_losers(&self, task: &str) -> bool {
        self.task(task).is_some_and(|task| task.settings.cancel_losers)
    }

    fn max_cost(&self, task: &str) -> Option<Money> {
        self.task(task)?.settings.max_cost
    }

    fn being_qualified(&self, task: &str, provider: &str) -> bool {
        self.qualifications.is_running(provider, task)
    }

    fn worst_case_cost(&self, task: &str, provider: &str, input: &Value) -> Option<Money> {
        let settings = self.provider(provider)?;
        let price = settings.price.as_ref()?;
        let prompt_tokens = self.task(task)?.contract.prompt_tokens(settings, input)?;
        // At most its whole deadline of compute time, for a provider that
        // bills by it, and the most files the task takes.
        let files = self.task(task)?.settings.files.as_ref();
        let usage = Usage {
            prompt_tokens: i64::try_from(prompt_tokens).ok()?,
            completion_tokens: i64::from(settings.max_output_tokens),
            predict_ms: i64::try_from(settings.timeout.as_millis()).unwrap_or(i64::MAX),
            outputs: files.map_or(0, |rules| i64::from(rules.max_files.unwrap_or(rules.min_files))),
            estimated: true,
            ..Usage::default()
        };
        Some(price.cost(&usage).amount)
    }

    fn retry_candidates(&self, task: &str, primary: &str, attempts: &[PastAttempt<'_>]) -> Vec<NextAttempt> {
        let Some(task) = self.task(task) else { return vec![] };
        let settings = &task.settings;
        RetryPolicy {
            primary,
            failover: &settings.failover,
            retries_per_provider: settings.retries_per_provider,
            max_attempts: settings.max_attempts,
            backoff: settings.retry_backoff,
        }
        .candidates(attempts)
        .into_iter()
        // A provider whose breaker is open is passed over: an attempt
        // there would only fail fast.
        .filter(|next| self.breakers.routable(&next.provider))
        .collect()
    }
}

/// The qualifications running in this process, by provider and task.
/// Each run holds a [`RunningGuard`]; waiters are woken when one ends.
#[derive(Default)]
pub struct Running {
    runs: Mutex<HashMap<(String, String), usize>>,
    ended: tokio::sync::Notify,
}

/// One running qualification, counted in [`Running`] until dropped.
pub struct RunningGuard {
    running: Arc<Running>,
    pair: (String, String),
}

impl Running {
    /// Counts a qualification of `provider` for `task` as running.
    pub fn start(self: &Arc<Self>, provider: &str, task: &str) -> RunningGuard {
        let pair = (provider.to_owned(), task.to_owned());
        *self.runs.lock().expect("not poisoned").entry(pair.clone()).or_default() += 1;
        RunningGuard { running: self.clone(), pair }
    }

    /// Whether a qualification of `provider` for `task` is running here.
    pub fn is_running(&self, provider: &str, task: &str) -> bool {
        // Looked through without allocating a key: the map holds only the
        // runs of this moment, usually none.
        self.runs.lock().expect("not poisoned").keys().any(|(p, t)| p == provider && t == task)
    }

    /// Waits until no qualification for `task` of any of `providers` runs
    /// here, or until `until`; says whether none is left running.
    pub async fn wait(&self, task: &str, providers: &[String], until: tokio::time::Instant) -> bool {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so that an end between the look
            // and the wait still wakes it.
            ended.as_mut().enable();
            if !providers.iter().any(|provider| self.is_running(provider, task)) {
                return true;
            }
            tokio::select! {
                _ = &mut ended => {}
                _ = tokio::time::sleep_until(until) => return false,
            }
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut runs = self.running.runs.lock().expect("not poisoned");
        if let Some(count) = runs.get_mut(&self.pair) {
            *count -= 1;
            if *count == 0 {
                runs.remove(&self.pair);
            }
        }
        drop(runs);
        self.running.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn input_violations_point_into_the_request_body() {
        let catalog = Catalog::new(&Settings::builtin()).unwrap();
        let summarize = catalog.task("summarize").unwrap();
        assert!(summarize.check_input(&json!({"text": "hello", "max_words": 3})).is_empty());
        let violations = summarize.check_input(&json!({"text": "hello", "max_words": "three"}));
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].pointer, "/input/max_words");
        let violations = summarize.check_input(&json!({"max_words": 3}));
        assert_eq!(violations[0].pointer, "/input");
        assert!(violations[0].detail.contains("text"), "{:?}", violations);
    }

    #[test]
    fn contract_hashes_exist_for_configured_pairs_only() {
        let catalog = Catalog::new(&Settings::builtin()).unwrap();
        assert!(catalog.contract_hash("summarize", "sim-fast").is_some());
        assert_ne!(catalog.contract_hash("summarize", "sim-fast"), None);
        assert_eq!(catalog.contract_hash("summarize", "nowhere"), None);
        assert_eq!(catalog.contract_hash("translate", "sim-fast"), None);
    }

    #[test]
    fn a_broken_schema_or_template_is_reported_by_the_catalog_naming_its_task() {
        let with = |task: &str| {
            let text = format!("[providers.p]\nkind = \"sim\"\n[tasks.t]\ndefault_provider = \"p\"\n{task}");
            let settings = Settings::parse(&text).unwrap();
            // The settings' own checks pass: compiling is the catalog's.
            settings.validate().unwrap();
            Catalog::new(&settings).err().map(|error| error.to_string())
        };
        assert_eq!(with(""), None);
        let schema = with("input_schema = { type = \"nonsense\" }").expect("a broken input schema is refused");
        assert!(schema.contains("tasks.t.input_schema"), "{schema}");
        let output = with("output_schema = { type = 3 }").expect("a broken output schema is refused");
        assert!(output.contains("tasks.t.output_schema"), "{output}");
        let template = with("[tasks.t.prompt]\nuser = \"{{ unclosed\"").expect("a broken template is refused");
        assert!(template.contains("tasks.t.prompt.user"), "{template}");
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[tokio::test]
    async fn a_wait_ends_when_the_last_run_of_a_pair_ends_and_not_before() {
        let running = Arc::new(Running::default());
        let (first, second) = (running.start("slow", "summarize"), running.start("slow", "summarize"));
        let other = running.start("slow", "translate");
        assert!(running.is_running("slow", "summarize"));
        drop(first);
        // One of two runs ended: still running, so a short wait times out.
        assert!(running.is_running("slow", "summarize"));
        assert!(
            !running.wait("summarize", &names(&["fast", "slow"]), Instant::now() + Duration::from_millis(20)).await
        );
        let waiter = {
            let running = running.clone();
            tokio::spawn(async move {
                running.wait("summarize", &names(&["slow"]), Instant::now() + Duration::from_secs(60)).await
            })
        };
        tokio::task::yield_now().await;
        drop(second);
        let ended = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken by the end").unwrap();
        assert!(ended);
        assert!(!running.is_running("slow", "summarize"));
        // Another task's run is its own.
        assert!(running.is_running("slow", "translate"));
        drop(other);
        assert!(running.wait("translate", &names(&["slow"]), Instant::now()).await);
    }
}
