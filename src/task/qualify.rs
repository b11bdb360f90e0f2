//! Qualification: proving a provider against a task's contract before any
//! attempt of another provider's job may go to it (I5). Each example is
//! rendered, counted against the provider's context, sent through the
//! normal provider path at the qualification temperature, parsed, checked
//! against the output schema and the example's expected members. The report
//! is stored with the contract hash it proves.
//!
//! A process knows which of its own qualifications are running
//! ([`crate::task::catalog::Running`]): a failover to a provider whose qualification has not
//! finished yet waits for its verdict, for a bounded time, instead of
//! skipping a provider that passes seconds later.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use crate::provider::{Provider, ProviderError, Providers};
use crate::store::{self, QualificationRecord, QualificationState, Store};
use crate::task::catalog::Catalog;

/// One example's result.
#[derive(Clone, Debug, Serialize)]
pub struct ExampleResult {
    /// The example's input.
    pub input: Value,
    /// Whether the output met the contract and the expectations.
    pub passed: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long the call took.
    pub latency_ms: u64,
    /// The rendered prompt's tokens, by the provider's tokenizer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    /// What the provider answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// What the provider says the call used (tokens, or a GPU provider's
    /// compute time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::domain::Usage>,
    /// What that cost at the provider's price: each example is a paid call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::domain::Cost>,
}

/// Why a qualification could not run.
#[derive(Debug, thiserror::Error)]
pub enum QualifyError {
    /// No such provider.
    #[error("no provider named '{0}' is configured")]
    UnknownProvider(String),
    /// No such task.
    #[error("no task named '{0}' is configured")]
    UnknownTask(String),
    /// The report could not be stored.
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Runs every example of `task` against `provider` (all at once) and says
/// whether all passed.
pub async fn run(
    provider: Arc<dyn Provider>,
    catalog: Arc<Catalog>,
    task: &str,
) -> Result<(bool, Value), QualifyError> {
    let examples =
        catalog.task(task).ok_or_else(|| QualifyError::UnknownTask(task.to_owned()))?.contract.examples.clone();
    let mut runs = tokio::task::JoinSet::new();
    for (index, example) in examples.into_iter().enumerate() {
        let (provider, catalog, task) = (provider.clone(), catalog.clone(), task.to_owned());
        runs.spawn(async move { (index, run_example(provider.as_ref(), &catalog, &task, index, example.input).await) });
    }
    let mut results: Vec<(usize, ExampleResult)> = runs.join_all().await;
    results.sort_by_key(|(index, _)| *index);
    let results: Vec<ExampleResult> = results.into_iter().map(|(_, result)| result).collect();
    let passing = results.iter().filter(|r| r.passed).count();
    let passed = !results.is_empty() && passing == results.len();
    let mut summary = format!("{passing}/{} examples passed", results.len());
    if results.is_empty() {
        summary = "the task has no examples, so nothing proves the contract".to_owned();
    }
    if let Some((index, failure)) = results.iter().enumerate().find(|(_, r)| !r.passed) {
        summary.push_str(&format!("; example {}: {}", index + 1, failure.reason.as_deref().unwrap_or("failed")));
    }
    // What the examples cost, where the provider is priced.
    let cost = provider.settings().price.as_ref().map(|price| {
        let amount = results.iter().filter_map(|r| r.cost.as_ref()).map(|c| c.amount).sum::<crate::domain::Money>();
        json!({"amount": amount, "currency": price.currency})
    });
    let report = json!({
        "summary": summary,
        "temperature": provider.settings().qualification_temperature,
        "model": provider.settings().model,
        "cost": cost,
        "examples": results,
    });
    Ok((passed, report))
}

async fn run_example(
    provider: &dyn Provider,
    catalog: &Catalog,
    task: &str,
    index: usize,
    input: Value,
) -> ExampleResult {
    let started = Instant::now();
    let settings = provider.settings();
    let contract = &catalog.task(task).expect("the task exists").contract;
    let id = format!("qualification-{}", uuid::Uuid::now_v7());
    let outcome: Result<(usize, crate::provider::Completion), (Option<usize>, ProviderError)> = async {
        let mut prepared =
            contract.prepare(task, settings, id, &input, settings.qualification_temperature).map_err(|e| (None, e))?;
        if settings.count_tokens {
            prepared.prompt_tokens = super::contract::counted(provider, &prepared).await.map_err(|e| (None, e))?;
        }
        let tokens = prepared.prompt_tokens;
        let calling = crate::provider::call(provider, &prepared.request, async |_: &str| {}, std::future::pending());
        let completion = match tokio::time::timeout(settings.timeout, calling).await {
            Ok(result) => result.map_err(|e| (Some(tokens), e))?,
            Err(_) => return Err((Some(tokens), ProviderError::deadline(settings.timeout, settings.timeout))),
        };
        Ok((tokens, completion))
    }
    .await;
    let priced = |usage: Option<crate::domain::Usage>| {
        let cost = settings.price.as_ref().zip(usage.as_ref()).map(|(price, usage)| price.cost(usage));
        (usage, cost)
    };
    let latency_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Err((prompt_tokens, error)) => {
            let (usage, cost) = priced(error.facts.usage);
            ExampleResult {
                input,
                passed: false,
                reason: Some(format!("{}: {}", error.kind, error.message)),
                latency_ms,
                prompt_tokens,
                output: None,
                usage,
                cost,
            }
        }
        Ok((tokens, completion)) => {
            let problems = contract.check_example(index, &completion.output);
            let (usage, cost) = priced(completion.usage);
            ExampleResult {
                input,
                passed: problems.is_empty(),
                reason: (!problems.is_empty()).then(|| problems.join("; ")),
                latency_ms,
                prompt_tokens: Some(tokens),
                output: Some(completion.output),
                usage,
                cost,
            }
        }
    }
}

/// Qualifies `provider` for `task` now and stores the report.
pub async fn qualify(
    store: &Store,
    providers: &Providers,
    catalog: &Arc<Catalog>,
    provider: &str,
    task: &str,
) -> Result<QualificationRecord, QualifyError> {
    let chosen = providers.get(provider).ok_or_else(|| QualifyError::UnknownProvider(provider.to_owned()))?;
    let hash = catalog.contract_hash(task, provider).ok_or_else(|| QualifyError::UnknownTask(task.to_owned()))?;
    let _running = catalog.qualifications().start(provider, task);
    let (passed, report) = run(chosen.clone(), catalog.clone(), task).await?;
    let record = store.insert_qualification(provider, task, &hash, passed, &report).await?;
    crate::process::metrics::qualification(provider, task, passed);
    tracing::info!(provider, task, passed, summary = %report["summary"], "qualification stored");
    Ok(record)
}

/// Qualifications as the API and the dashboard read and run them.
pub struct Qualifications {
    store: Store,
    providers: Arc<Providers>,
    catalog: Arc<Catalog>,
}

impl Qualifications {
    /// Qualifications of `providers` for `catalog`'s tasks, kept in `store`.
    pub fn new(store: Store, providers: Arc<Providers>, catalog: Arc<Catalog>) -> Self {
        Self { store, providers, catalog }
    }

    /// An operator opens (until closed by hand) or closes `provider`'s
    /// breaker (see `super::breakers`).
    pub async fn set_breaker(&self, provider: &str, open: bool, reason: &str) -> store::Result<()> {
        super::breakers::set_by_operator(&self.store, self.catalog.breakers(), provider, open, reason).await.map(drop)
    }

    /// Where `provider` stands for the contract of `task` whose hash is `hash`.
    pub async fn state(&self, provider: &str, task: &str, hash: &[u8; 32]) -> store::Result<QualificationState> {
        self.store.qualification_state(provider, task, hash).await
    }

    /// The latest qualification run of `provider` for `task`, of any contract.
    pub async fn latest(&self, provider: &str, task: &str) -> store::Result<Option<QualificationRecord>> {
        self.store.latest_qualification(provider, task).await
    }

    /// Qualifies `provider` for `task` now and stores the report.
    pub async fn run(&self, provider: &str, task: &str) -> Result<QualificationRecord, QualifyError> {
        qualify(&self.store, &self.providers, &self.catalog, provider, task).await
    }
}

/// Qualifies every provider marked `qualify_on_start` for every task,
/// unless it already passed a qualification of the current contract. Each
/// pair counts as running from this call on, before the returned future
/// first runs, so that no failover decided in between misses it.
pub fn qualify_on_start(
    store: Store,
    providers: Arc<Providers>,
    catalog: Arc<Catalog>,
) -> impl Future<Output = ()> + Send {
    let mut pending = Vec::new();
    for (name, _) in providers.iter().filter(|(_, p)| p.settings().qualify_on_start) {
        for task in catalog.tasks() {
            if let Some(hash) = catalog.contract_hash(&task.name, name) {
                let guard = catalog.qualifications().start(name, &task.name);
                pending.push((name.clone(), task.name.clone(), hash, guard));
            }
        }
    }
    async move {
        let mut runs = tokio::task::JoinSet::new();
        for (name, task, hash, guard) in pending {
            match store.qualification_state(&name, &task, &hash).await {
                Ok(state) if state.passed() => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(provider = %name, %task, %error, "cannot read qualifications; qualifying anyway");
                }
            }
            let (store, providers, catalog) = (store.clone(), providers.clone(), catalog.clone());
            runs.spawn(async move {
                if let Err(error) = qualify(&store, &providers, &catalog, &name, &task).await {
                    tracing::warn!(provider = %name, %task, %error, "qualification at start failed to run");
                }
                drop(guard);
            });
        }
        runs.join_all().await;
    }
}
