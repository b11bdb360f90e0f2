//! What a task's output is, the one notion every layer shares: the task's
//! contract checks it, the providers ask for it and read it, the simulator
//! answers it, and the output stream shows it.

use serde::Serialize;
use serde_json::Value;

/// What a task answers, as its output schema says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    /// A JSON value (an object, as the providers' structured outputs give
    /// one), asked for with the schema where the provider takes it and
    /// parsed from the provider's answer.
    #[default]
    Json,
    /// Prose: the provider's text as it is, the result being that text as
    /// a JSON string. The task's output schema is a string schema
    /// (`{"type": "string", …}`), whose `minLength`, `maxLength` and
    /// `pattern` check it.
    Text,
}

impl OutputKind {
    /// The kind an output schema describes: text for a schema whose `type`
    /// is `"string"`, JSON otherwise.
    pub fn of_schema(schema: &Value) -> Self {
        if schema.get("type").and_then(Value::as_str) == Some("string") { Self::Text } else { Self::Json }
    }

    /// Its name, as configuration, the API and the simulator say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Text => "text",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_string_schema_is_text_and_every_other_schema_json() {
        assert_eq!(OutputKind::of_schema(&json!({"type": "string", "maxLength": 10})), OutputKind::Text);
        for schema in [json!({"type": "object"}), json!({"type": "array"}), json!({}), json!({"type": ["string"]})] {
            assert_eq!(OutputKind::of_schema(&schema), OutputKind::Json, "{schema}");
        }
    }
}
