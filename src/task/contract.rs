//! A task's contract with its providers: how the input becomes chat
//! messages (minijinja templates), what every output must look like (JSON
//! Schema), the examples that prove a provider meets it, and the contract
//! hash that ties a qualification to exactly this contract (I5).

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::{ExampleSettings, ProviderSettings, TaskSettings};
use crate::domain::OutputKind;
use crate::provider::{FailureClass, FailureFacts, FailureKind, ProviderError, ProviderRequest, tokens};

/// A request ready to send, with its prompt's size.
pub struct Prepared {
    /// The request.
    pub request: ProviderRequest,
    /// The rendered prompt's tokens, by the provider's tokenizer.
    pub prompt_tokens: usize,
}

/// Whether a prompt of `prompt_tokens` fits `provider`'s context with its
/// `max_output_tokens`: otherwise a definitive `prompt-too-long`, before
/// any call and any cost.
pub fn fits(provider: &ProviderSettings, prompt_tokens: usize) -> Result<(), ProviderError> {
    let needed = prompt_tokens + provider.max_output_tokens as usize;
    if needed <= provider.context_tokens as usize {
        return Ok(());
    }
    let message = format!(
        "the prompt is {prompt_tokens} tokens; with {} for the answer it exceeds the provider's context of {}",
        provider.max_output_tokens, provider.context_tokens
    );
    let error =
        ProviderError::new(FailureClass::Definitive { retryable: false }, FailureKind::PromptTooLong, None, message);
    Err(error.with_facts(FailureFacts {
        prompt_tokens: Some(prompt_tokens),
        max_output_tokens: Some(provider.max_output_tokens),
        context_tokens: Some(provider.context_tokens),
        ..FailureFacts::default()
    }))
}

/// The longest wait for a provider's count of a prompt's tokens: a tenth
/// of its timeout, at most 5 s (the call keeps the rest).
const MOST_COUNTING: std::time::Duration = std::time::Duration::from_secs(5);

/// `prepared`'s prompt tokens as `provider` counts them (its token-counting
/// endpoint), checked against its context: what a provider with
/// `count_tokens` is sent only after. Should the count fail or take too
/// long, the estimate decides, and the log says so.
pub async fn counted(provider: &dyn crate::provider::Provider, prepared: &Prepared) -> Result<usize, ProviderError> {
    let settings = provider.settings();
    let most = (settings.timeout / 10).min(MOST_COUNTING);
    let estimate = prepared.prompt_tokens;
    let tokens = match tokio::time::timeout(most, provider.count_tokens(&prepared.request)).await {
        Ok(Some(Ok(tokens))) => tokens,
        Ok(None) => estimate,
        Ok(Some(Err(error))) => {
            tracing::warn!(%error, estimate, "counting the prompt's tokens failed: estimated");
            estimate
        }
        Err(_) => {
            tracing::warn!(
                estimate,
                waited_ms = most.as_millis() as u64,
                "counting the prompt's tokens took too long: estimated"
            );
            estimate
        }
    };
    fits(settings, tokens)?;
    Ok(tokens)
}

/// A compiled contract.
pub struct Contract {
    templates: Environment<'static>,
    has_system: bool,
    output_validator: jsonschema::Validator,
    /// The qualification examples.
    pub examples: Vec<ExampleSettings>,
    /// What each example expects of its output, in their order.
    expectations: Vec<Expected>,
    /// The output schema, for `response_format`.
    pub output_schema: Value,
    /// What the task answers, as its output schema says.
    pub output: OutputKind,
    /// A files task's rules for its files.
    files: Option<crate::config::FileRules>,
    /// What the hash covers, in canonical form.
    canonical: Value,
}

impl Contract {
    /// Compiles a task's contract; an error names what is wrong.
    pub fn new(settings: &TaskSettings) -> Result<Self, String> {
        let mut templates = Environment::new();
        templates.set_undefined_behavior(UndefinedBehavior::Strict);
        if let Some(system) = &settings.prompt.system {
            templates.add_template_owned("system", system.clone()).map_err(|e| format!("prompt.system: {e}"))?;
        }
        templates.add_template_owned("user", settings.prompt.user.clone()).map_err(|e| format!("prompt.user: {e}"))?;
        let output_validator =
            jsonschema::draft202012::new(&settings.output_schema).map_err(|e| format!("output_schema: {e}"))?;
        let output = OutputKind::of_schema(&settings.output_schema);
        let expectations = settings
            .examples
            .iter()
            .enumerate()
            .map(|(index, example)| {
                Expected::new(output, &example.expect).map_err(|e| format!("examples[{index}].expect: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let mut canonical = json!({
            "prompt": settings.prompt,
            "input_schema": settings.input_schema,
            "output_schema": settings.output_schema,
            "examples": settings.examples,
        });
        // Only a files task's hash covers its rules: other hashes stay.
        if let Some(files) = &settings.files {
            canonical["files"] = json!(files);
        }
        Ok(Self {
            templates,
            has_system: settings.prompt.system.is_some(),
            output_validator,
            examples: settings.examples.clone(),
            expectations,
            output_schema: settings.output_schema.clone(),
            output,
            files: settings.files.clone(),
            canonical,
        })
    }

    /// The chat messages for an input: the system message (if any) and the
    /// user message. The input's members are variables, and so is `input`.
    /// The tokens of the prompt rendered from `input`, as `provider` counts
    /// them; `None` when it cannot be rendered.
    pub fn prompt_tokens(&self, provider: &ProviderSettings, input: &Value) -> Option<usize> {
        Some(tokens::count_prompt(provider, &self.render(input).ok()?, &self.output_schema))
    }

    /// Renders the chat messages from `input`.
    pub fn render(&self, input: &Value) -> Result<Vec<Value>, String> {
        let mut context = match input {
            Value::Object(members) => members.clone(),
            _ => serde_json::Map::new(),
        };
        context.insert("input".into(), input.clone());
        let context = minijinja::Value::from(minijinja::value::Serde(&context));
        let render = |name: &str| -> Result<String, String> {
            let template = self.templates.get_template(name).map_err(|e| e.to_string())?;
            template.render(&context).map_err(|e| format!("the prompt cannot be rendered: {e}"))
        };
        let mut messages = Vec::with_capacity(2);
        if self.has_system {
            messages.push(json!({"role": "system", "content": render("system")?}));
        }
        messages.push(json!({"role": "user", "content": render("user")?}));
        Ok(messages)
    }

    /// Renders the request for `input` to `provider` and checks that it fits
    /// the provider's context: otherwise it fails here, before any call
    /// (`prompt-too-long`, no cost).
    pub fn prepare(
        &self,
        task: &str,
        provider: &ProviderSettings,
        request_id: String,
        input: &Value,
        temperature: f64,
    ) -> Result<Prepared, ProviderError> {
        let definitive = |kind, message: String| {
            ProviderError::new(FailureClass::Definitive { retryable: false }, kind, None, message)
        };
        let messages = self.render(input).map_err(|message| definitive(FailureKind::PromptRenderFailed, message))?;
        let prompt_tokens = tokens::count_prompt(provider, &messages, &self.output_schema);
        // Counted by the provider instead, before the call (see `fits`).
        if !provider.count_tokens {
            fits(provider, prompt_tokens)?;
        }
        let request = ProviderRequest {
            request_id,
            task: task.to_owned(),
            input: input.clone(),
            messages,
            temperature,
            output_schema: Some(self.output_schema.clone()),
            trace: None,
            deltas: None,
            callback_url: None,
        };
        Ok(Prepared { request, prompt_tokens })
    }

    /// Checks an output before it may win: a violation is a definitive
    /// `contract-violation` naming the validator's paths.
    pub fn accept(&self, output: &Value) -> Result<(), ProviderError> {
        let violations = self.check_output(output);
        if violations.is_empty() {
            return Ok(());
        }
        let error =
            ProviderError::contract_violation(format!("the output breaks the contract: {}", violations.join("; ")));
        Err(error.with_facts(FailureFacts { violations, ..FailureFacts::default() }))
    }

    /// Every way `output` breaks the output schema, as `pointer: message`
    /// (an unexpected member is named by its own pointer).
    pub fn check_output(&self, output: &Value) -> Vec<String> {
        let mut violations = Vec::new();
        for error in self.output_validator.iter_errors(output) {
            match error.kind() {
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                    for name in unexpected {
                        let pointer =
                            format!("{}/{}", error.instance_path(), name.replace('~', "~0").replace('/', "~1"));
                        violations.push(format!("{pointer}: additional property not allowed"));
                    }
                }
                _ => {
                    let path = error.instance_path().to_string();
                    let path = if path.is_empty() { "/".to_owned() } else { path };
                    violations.push(format!("{path}: {error}"));
                }
            }
        }
        violations
    }

    /// Every way the output of qualification example `index` falls short:
    /// the output schema's violations, a files task's files against its
    /// rules, then its expectations'.
    pub fn check_example(&self, index: usize, output: &Value) -> Vec<String> {
        let mut problems = self.check_output(output);
        if let Some(rules) = &self.files
            && let Err(why) = crate::files::check(output, rules)
        {
            problems.push(why);
        }
        if let Some(expected) = self.expectations.get(index) {
            expected.check(output, &mut problems);
        }
        problems
    }

    /// The contract hash for a provider: SHA-256 over the canonical JSON
    /// (RFC 8785) of the prompt templates, both schemas, the examples, and
    /// the provider's model and qualification temperature.
    pub fn hash_for(&self, provider: &ProviderSettings) -> [u8; 32] {
        let whole = json!({
            "contract": self.canonical,
            "model": provider.model,
            "qualification_temperature": provider.qualification_temperature,
        });
        let bytes = serde_json_canonicalizer::to_vec(&whole).expect("canonical JSON of a JSON value");
        Sha256::digest(&bytes).into()
    }
}

/// What a qualification example expects of its output, beyond the schema.
enum Expected {
    /// A JSON task's: these members, with these values.
    Members(serde_json::Map<String, Value>),
    /// A text task's: what can be checked of prose, never its exact text.
    Text(TextExpected),
}

/// A text task's example's `expect`: the answer is never empty, and it
/// keeps to these bounds and holds (or lacks) these strings.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TextExpected {
    min_chars: Option<usize>,
    max_chars: Option<usize>,
    #[serde(default)]
    contains: Vec<String>,
    #[serde(default)]
    excludes: Vec<String>,
}

impl Expected {
    fn new(output: OutputKind, expect: &serde_json::Map<String, Value>) -> Result<Self, String> {
        match output {
            OutputKind::Json => Ok(Self::Members(expect.clone())),
            OutputKind::Text => serde_json::from_value(Value::Object(expect.clone()))
                .map(Self::Text)
                .map_err(|e| format!("{e} (a text task's expect takes min_chars, max_chars, contains and excludes)")),
        }
    }

    fn check(&self, output: &Value, problems: &mut Vec<String>) {
        match self {
            Self::Members(members) => {
                for (name, wanted) in members {
                    let got = output.get(name).unwrap_or(&Value::Null);
                    if got != wanted {
                        problems.push(format!("/{name}: expected {wanted}, got {got}"));
                    }
                }
            }
            Self::Text(expected) => {
                let Some(text) = output.as_str() else { return };
                let chars = text.chars().count();
                if text.trim().is_empty() {
                    problems.push("the answer is empty".to_owned());
                }
                if let Some(least) = expected.min_chars.filter(|least| chars < *least) {
                    problems.push(format!("the answer has {chars} characters, fewer than {least}"));
                }
                if let Some(most) = expected.max_chars.filter(|most| chars > *most) {
                    problems.push(format!("the answer has {chars} characters, more than {most}"));
                }
                for wanted in expected.contains.iter().filter(|wanted| !text.contains(wanted.as_str())) {
                    problems.push(format!("the answer does not contain {wanted:?}"));
                }
                for unwanted in expected.excludes.iter().filter(|unwanted| text.contains(unwanted.as_str())) {
                    problems.push(format!("the answer contains {unwanted:?}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn summarize() -> (Settings, Contract) {
        let settings = Settings::builtin();
        let contract = Contract::new(&settings.tasks["summarize"]).unwrap();
        (settings, contract)
    }

    #[test]
    fn the_prompt_renders_from_the_input_and_undefined_variables_are_errors() {
        let (_, contract) = summarize();
        let messages = contract.render(&json!({"text": "a b c", "max_words": 2})).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["role"], "system");
        assert!(messages[1]["content"].as_str().unwrap().contains("at most 2 words"));
        assert!(messages[1]["content"].as_str().unwrap().ends_with("a b c"));
        assert!(contract.render(&json!({"max_words": 2})).unwrap_err().contains("cannot be rendered"));
    }

    #[test]
    fn output_violations_name_their_paths() {
        let (_, contract) = summarize();
        assert!(contract.check_output(&json!({"summary": "a", "word_count": 1})).is_empty());
        assert_eq!(
            contract.check_output(&json!({"summary": "a", "word_count": 1, "note": "hi"})),
            ["/note: additional property not allowed"]
        );
        let violations = contract.check_output(&json!({"summary": 3, "word_count": 1}));
        assert!(violations[0].starts_with("/summary: "), "{violations:?}");
    }

    #[test]
    fn the_contract_hash_changes_with_the_contract_and_the_providers_model() {
        let (settings, contract) = summarize();
        let fast = &settings.providers["sim-fast"];
        let same = Contract::new(&settings.tasks["summarize"]).unwrap();
        assert_eq!(contract.hash_for(fast), same.hash_for(fast));
        let mut changed = settings.tasks["summarize"].clone();
        changed.output_schema["properties"]["extra"] = json!({"type": "string"});
        assert_ne!(contract.hash_for(fast), Contract::new(&changed).unwrap().hash_for(fast));
        let mut other_model = fast.clone();
        other_model.model = "sim-2".into();
        assert_ne!(contract.hash_for(fast), contract.hash_for(&other_model));
    }
}
