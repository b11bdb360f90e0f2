//! The request bodies of the JSON API, each declared once: a serde type
//! that also derives its schema, read by [`super::extract::StrictJson`]
//! (which checks the
//! schema and names every violation), then turned into the use case's
//! input, checking what a schema cannot say (zero-to-production's "parse,
//! don't validate").

use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::error::Problem;
use super::extract::{JsonBody, compiled, parse_body};
use crate::domain::Money;
use crate::domain::Resolution;
use crate::jobs::JobRequest;
use crate::task::catalog::Violation;

/// `POST /jobs` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJobBody {
    /// A configured task.
    pub task: String,
    /// The task's input: any JSON value, which the task's input schema
    /// then checks.
    #[schema(value_type = Value)]
    pub input: Value,
    /// A configured provider; the task's default when left out.
    pub provider: Option<String>,
    /// The most the job's attempts may cost together, a decimal string in
    /// the providers' currency (at most 18 decimals). Part of the intent:
    /// the same key with another `max_cost` is a conflict.
    #[schema(pattern = r"^[0-9]{1,20}(\.[0-9]{1,18})?$", example = "0.05")]
    pub max_cost: Option<String>,
}

/// `POST /jobs/{id}/attempts` body (or no body at all).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateAttemptBody {
    /// A configured provider; the job's own when left out.
    pub provider: Option<String>,
}

/// `POST /webhooks` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateWebhookBody {
    /// Where deliveries are posted: `https://` on a public address (hosts
    /// in `webhooks.allow_hosts` excepted).
    #[schema(min_length = 1, max_length = 2000)]
    pub url: String,
    /// What it hears of: `job.succeeded`, `job.failed`, `job.unknown`,
    /// `job.canceled`, `attempt.unknown`, `attempt.superseded`.
    #[schema(min_items = 1)]
    pub events: Vec<String>,
    /// For people (at most 500 characters).
    #[schema(max_length = 500)]
    pub description: Option<String>,
}

/// How an operator settles an unknown attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Outcome {
    /// The provider did the work.
    Succeeded,
    /// It did not.
    Failed,
}

/// `POST /jobs/{id}/attempts/{number}/resolve` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// What became of the attempt.
    pub outcome: Outcome,
    /// The output, for `succeeded`: any JSON value but `null` (an object
    /// for a JSON task, a string for a text task), which must meet the
    /// task's output schema. `null` is refused for either outcome, unlike
    /// leaving it out.
    #[schema(value_type = Option<Value>)]
    #[serde(default, deserialize_with = "present")]
    pub output: Option<Value>,
    /// Why (1 to 1000 characters); kept in the job's events.
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

/// `POST /providers/{name}/qualifications` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QualifyBody {
    /// The task whose contract the provider must meet.
    pub task: String,
}

/// `POST /providers/{name}/breaker` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BreakerBody {
    /// `open` (until closed by hand) or `closed`.
    pub state: BreakerBodyState,
    /// Why, for the providers' listing and the log.
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// The states an operator may set a breaker to.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BreakerBodyState {
    /// Taken out of service until closed by hand.
    Open,
    /// In service.
    Closed,
}

/// A member that is present, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(value: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(value).map(Some)
}

impl JsonBody for CreateJobBody {
    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }

    fn explain(pointer: &str) -> Option<&'static str> {
        (pointer == "/max_cost").then_some(MAX_COST_WORDS)
    }
}

/// What a budget must be.
const MAX_COST_WORDS: &str = "must be a decimal string of at least 0 with at most 18 decimals, such as \"0.05\" (a JSON number could not hold it exactly)";

impl JsonBody for CreateAttemptBody {
    const EMPTY_IS_OBJECT: bool = true;

    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }
}

impl JsonBody for CreateWebhookBody {
    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }
}

impl JsonBody for ResolveBody {
    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }
}

impl JsonBody for BreakerBody {
    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }
}

impl JsonBody for QualifyBody {
    fn validator() -> &'static jsonschema::Validator {
        static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
        compiled::<Self>(&SCHEMA)
    }
}

impl TryFrom<CreateJobBody> for JobRequest {
    type Error = Problem;

    fn try_from(body: CreateJobBody) -> Result<Self, Problem> {
        let max_cost = body.max_cost.map(|text| parse_max_cost(&text)).transpose()?;
        Ok(JobRequest { task: body.task, input: body.input, provider: body.provider, max_cost, trace: None })
    }
}

/// A budget: a decimal string, at least zero, at most 18 decimals (never a
/// JSON number: a float cannot hold money; the schema refuses one).
fn parse_max_cost(text: &str) -> Result<Money, Problem> {
    match text.parse::<Money>() {
        Ok(amount) if amount >= Money::ZERO => Ok(amount),
        _ => Err(Problem::invalid_field("/max_cost", MAX_COST_WORDS)),
    }
}

impl ResolveBody {
    /// The resolution and its reason: a failed outcome has no output, a
    /// succeeded one needs one (an object), and a reason is not blank.
    pub(crate) fn into_resolution(self) -> Result<(Resolution, String), Problem> {
        let mut violations = Vec::new();
        if self.reason.trim().is_empty() {
            violations.push(Violation {
                pointer: "/reason".into(),
                detail: "a string of 1 to 1000 characters is required".into(),
            });
        }
        let resolution = match (self.outcome, self.output) {
            (Outcome::Failed, None) => Some(Resolution::Failed),
            (Outcome::Failed, Some(_)) => {
                violations
                    .push(Violation { pointer: "/output".into(), detail: "a failed outcome has no output".into() });
                None
            }
            // Any JSON value (an object for a JSON task, a string for a text
            // task): the task's output schema judges it.
            (Outcome::Succeeded, Some(output)) if !output.is_null() => Some(Resolution::Succeeded(output)),
            (Outcome::Succeeded, _) => {
                violations.push(Violation {
                    pointer: "/output".into(),
                    detail: "a succeeded outcome needs the output, as the task's output schema says".into(),
                });
                None
            }
        };
        match resolution {
            Some(resolution) if violations.is_empty() => Ok((resolution, self.reason)),
            _ => Err(Problem::invalid(violations)),
        }
    }
}

/// Reads a resolve body: the resolution and its reason.
pub(crate) fn parse_resolution(body: Value) -> Result<(Resolution, String), Problem> {
    parse_body::<ResolveBody>(body)?.into_resolution()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use serde_json::json;

    /// Reads a `POST /jobs` body.
    fn parse_create_request(body: Value) -> Result<JobRequest, Problem> {
        parse_body::<CreateJobBody>(body)?.try_into()
    }

    /// Reads a `POST /jobs/{id}/attempts` body: the provider, if it names one.
    fn parse_provider(body: Value) -> Result<Option<String>, Problem> {
        Ok(parse_body::<CreateAttemptBody>(body)?.provider)
    }

    #[test]
    fn create_requests_name_every_offending_field() {
        let problem = parse_create_request(json!({"task": 1, "extra/field": true})).unwrap_err();
        let response = problem.into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let problem = parse_create_request(json!(["not", "an", "object"])).unwrap_err();
        assert_eq!(problem.kind(), "validation-failed");
        assert!(parse_create_request(json!({"task": "t", "input": {}})).is_ok());
        assert!(parse_create_request(json!({"task": "t", "input": {}, "provider": null})).is_ok());
    }

    #[test]
    fn attempt_bodies_hold_at_most_a_provider() {
        assert_eq!(parse_provider(json!({})).unwrap(), None);
        assert_eq!(parse_provider(json!({"provider": "p"})).unwrap().as_deref(), Some("p"));
        assert_eq!(parse_provider(json!({"provider": 3})).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_provider(json!({"model": "x"})).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_provider(json!("p")).unwrap_err().kind(), "validation-failed");
    }

    #[test]
    fn resolutions_need_an_outcome_a_reason_and_for_success_an_output() {
        assert!(parse_resolution(json!({"outcome": "failed", "reason": "provider says no"})).is_ok());
        assert!(parse_resolution(json!({"outcome": "succeeded", "output": {"a": 1}, "reason": "checked"})).is_ok());
        // A text task's output is a string.
        assert!(parse_resolution(json!({"outcome": "succeeded", "output": "the text", "reason": "checked"})).is_ok());
        for bad in [
            json!({"outcome": "failed"}),
            json!({"outcome": "succeeded", "reason": "r"}),
            json!({"outcome": "succeeded", "output": null, "reason": "r"}),
            json!({"outcome": "failed", "output": {}, "reason": "r"}),
            json!({"outcome": "maybe", "reason": "r"}),
            json!({"outcome": "failed", "reason": "r", "extra": 1}),
        ] {
            assert_eq!(parse_resolution(bad.clone()).unwrap_err().kind(), "validation-failed", "{bad}");
        }
    }

    #[test]
    fn a_reason_is_counted_in_characters_not_bytes() {
        let resolve = |reason: String| parse_resolution(json!({"outcome": "failed", "reason": reason}));
        // 1000 characters of three bytes each: within the limit.
        assert!(resolve("é".repeat(1000)).is_ok());
        assert!(resolve("€".repeat(1000)).is_ok());
        assert_eq!(resolve("€".repeat(1001)).unwrap_err().kind(), "validation-failed");
        assert_eq!(resolve("   ".into()).unwrap_err().kind(), "validation-failed");
    }

    #[test]
    fn a_body_reports_every_violation_with_its_pointer() {
        let problem =
            parse_create_request(json!({"task": 1, "input": {}, "max_cost": 3, "a/b": true, "c": null})).unwrap_err();
        let body = problem.into_response();
        assert_eq!(body.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let problem = parse_create_request(json!({"task": 1, "max_cost": 3, "a/b": true, "c": null})).unwrap_err();
        let errors = format!("{problem:?}");
        for pointer in ["/task", "/input", "/max_cost", "/a~1b", "/c"] {
            assert!(errors.contains(&format!("\"{pointer}\"")), "{pointer} is named: {errors}");
        }
        assert_eq!(
            parse_create_request(json!({"task": "t", "input": {}, "max_cost": "-1"})).unwrap_err().kind(),
            "validation-failed"
        );
        let request = parse_create_request(json!({"task": "t", "input": {}, "max_cost": "0.05"})).unwrap();
        assert_eq!(request.max_cost, Some("0.05".parse().unwrap()));
    }

    #[test]
    fn a_null_output_is_an_output_and_refused_for_a_failed_outcome() {
        let problem = parse_resolution(json!({"outcome": "failed", "output": null, "reason": "r"})).unwrap_err();
        assert!(format!("{problem:?}").contains("a failed outcome has no output"), "{problem:?}");
        assert!(parse_resolution(json!({"outcome": "succeeded", "output": null, "reason": "r"})).is_err());
        assert!(parse_resolution(json!({"outcome": "failed", "reason": "r"})).is_ok());
    }

    #[test]
    fn any_json_value_is_an_input_for_the_tasks_schema_to_judge() {
        for input in [json!("text"), json!([1, 2]), json!(null), json!(3)] {
            assert_eq!(parse_create_request(json!({"task": "t", "input": input.clone()})).unwrap().input, input);
        }
        // One violation per member, even where the schema breaks twice.
        let problem = parse_resolution(json!({"outcome": null, "reason": "r"})).unwrap_err();
        assert_eq!(format!("{problem:?}").matches("\"/outcome\"").count(), 1, "{problem:?}");
    }
}
