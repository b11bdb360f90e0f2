//! Strict JSON: the one parser of untrusted request bodies. On top of
//! serde_json's own limits (nesting 128 deep, numbers within a double), it
//! refuses what would make a request ambiguous or unstorable, naming where:
//! a member name given twice in one object (serde_json would silently keep
//! the last, so two readers of the same bytes could see two intents, and the
//! fingerprint would hide it), and U+0000 in any string or member name
//! (Postgres cannot store it in `jsonb` or `text`; SQLite would keep it, so
//! the backends would disagree), and integers a double cannot hold exactly
//! (the fingerprint could not tell them apart). Self-contained (serde and serde_json only),
//! so the fuzzer builds it alone.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The largest integer a double holds exactly, 2^53 − 1 (RFC 7493, I-JSON).
/// The fingerprint's canonical JSON (RFC 8785) writes numbers as doubles, so
/// 9007199254740993 and 9007199254740992 would get the same fingerprint while
/// being stored as different inputs: a different intent answered as a replay.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

const INEXACT: &str = "integers must lie within ±(2^53 − 1), where a double holds them exactly (RFC 7493)";

/// Why a body is not acceptable JSON, and where (a JSON Pointer, RFC 6901;
/// empty for the whole body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// Where the problem is.
    pub pointer: String,
    /// What it is.
    pub detail: String,
}

/// Parses `bytes` as one JSON value, strictly (see the module's note).
pub fn parse(bytes: &[u8]) -> Result<Value, JsonError> {
    let found = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = StrictSeed { at: &Location::Root, found: &found }
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    parsed.map_err(|error| {
        found.into_inner().unwrap_or_else(|| JsonError {
            pointer: String::new(),
            detail: format!("the body is not valid JSON: {error}"),
        })
    })
}

/// Where a value sits, built without allocating until a pointer is needed.
enum Location<'a> {
    Root,
    Member(&'a Location<'a>, &'a str),
    Item(&'a Location<'a>, usize),
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Root => Ok(()),
            Location::Member(parent, name) => write!(f, "{parent}/{}", name.replace('~', "~0").replace('/', "~1")),
            Location::Item(parent, index) => write!(f, "{parent}/{index}"),
        }
    }
}

struct StrictSeed<'a> {
    at: &'a Location<'a>,
    found: &'a RefCell<Option<JsonError>>,
}

impl StrictSeed<'_> {
    fn refuse<E: de::Error>(&self, at: &Location<'_>, detail: &str) -> E {
        *self.found.borrow_mut() = Some(JsonError { pointer: at.to_string(), detail: detail.to_owned() });
        E::custom(detail)
    }

    fn checked<E: de::Error>(&self, at: &Location<'_>, text: &str) -> Result<(), E> {
        if text.contains('\0') { Err(self.refuse(at, "U+0000 (NUL) is not allowed in strings")) } else { Ok(()) }
    }
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        if v.unsigned_abs() > MAX_EXACT_INTEGER { Err(self.refuse(self.at, INEXACT)) } else { Ok(v.into()) }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        if v > MAX_EXACT_INTEGER { Err(self.refuse(self.at, INEXACT)) } else { Ok(v.into()) }
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json never hands over a NaN or an infinity.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.checked(self.at, v)?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.checked(self.at, &v)?;
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) =
            seq.next_element_seed(StrictSeed { at: &Location::Item(self.at, items.len()), found: self.found })?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let at = Location::Member(self.at, &name);
            self.checked(&at, &name)?;
            if members.contains_key(&name) {
                return Err(self.refuse(&at, "duplicate member name: a member may appear once in an object"));
            }
            let value = map.next_value_seed(StrictSeed { at: &at, found: self.found })?;
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(text: &str) -> JsonError {
        parse(text.as_bytes()).unwrap_err()
    }

    #[test]
    fn well_formed_json_parses_as_serde_json_would() {
        let text = r#"{"a": [1, -2, 3.5, true, null, "x"], "b": {"c": "ü"}}"#;
        assert_eq!(parse(text.as_bytes()).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(parse(b" 7 ").unwrap(), json!(7));
    }

    #[test]
    fn a_duplicate_member_is_refused_where_it_is() {
        assert_eq!(refused(r#"{"a": 1, "a": 1}"#).pointer, "/a");
        let deep = refused(r#"{"a": [{"x/y~": 1, "x/y~": 2}]}"#);
        assert_eq!(deep.pointer, "/a/0/x~1y~0");
        assert!(deep.detail.contains("duplicate"));
        // The same name in two objects is fine.
        assert!(parse(br#"[{"a": 1}, {"a": 2}]"#).is_ok());
    }

    #[test]
    fn nul_is_refused_in_strings_and_member_names() {
        assert_eq!(refused(r#"{"a": ["ok", "x\u0000"]}"#).pointer, "/a/1");
        assert_eq!(refused(r#"{"\u0000": 1}"#).pointer, "/\u{0}");
        assert_eq!(refused(r#""\u0000""#).pointer, "");
    }

    #[test]
    fn integers_a_double_cannot_hold_exactly_are_refused() {
        assert_eq!(
            parse(b"[9007199254740991, -9007199254740991]").unwrap(),
            json!([9007199254740991_i64, -9007199254740991_i64])
        );
        assert_eq!(refused(r#"{"n": 9007199254740992}"#).pointer, "/n");
        assert_eq!(refused("[-9007199254740993]").pointer, "/0");
        // A literal beyond u64 is read as a double by serde_json: no exactness was promised.
        assert!(parse(b"1e20").is_ok());
    }

    #[test]
    fn malformed_deep_and_out_of_range_input_is_refused_for_the_whole_body() {
        for text in ["{", "[1,]", "1e400", "[] []", &"[".repeat(100_000)] {
            let error = refused(text);
            assert_eq!(error.pointer, "", "{text:.20}");
            assert!(error.detail.starts_with("the body is not valid JSON"), "{error:?}");
        }
    }
}
