//! A JSON answer read while it is still being written: the text so far
//! parsed as the value it has become, with what is open closed. A string
//! cut short shows what it has; a key without its value, and a number or
//! a literal (`true`, `false`, `null`) not yet ended, are left out until
//! they are whole, so that a reader never sees a value that later changes
//! into another (`1` into `12`, `t` into `true`). Whole text parses as
//! `serde_json` parses it.

use serde_json::{Map, Value};

/// The value that `text`, the beginning of a JSON document, has become;
/// `None` while nothing of it can be shown yet.
pub(crate) fn parse_partial(text: &str) -> Option<Value> {
    if let Ok(whole) = serde_json::from_str(text) {
        return Some(whole);
    }
    let mut reader = Reader { text, at: 0 };
    reader.value()
}

/// A reader of a JSON text that may end anywhere: each step answers what
/// it read, and stops the whole read at the text's end.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl Reader<'_> {
    fn next(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.next().is_some_and(|byte| byte.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// The next value, as far as the text goes; `None` when none can be
    /// shown (the text ends before it, or within a number or a literal)
    /// or the text is not JSON there.
    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        match self.next()? {
            b'{' => Some(self.object()),
            b'[' => Some(self.array()),
            b'"' => self.string().map(|(text, _)| Value::String(text)),
            _ => self.scalar(),
        }
    }

    /// An object: its whole members, and the last one as far as it goes.
    fn object(&mut self) -> Value {
        self.at += 1;
        let mut members = Map::new();
        loop {
            self.skip_space();
            match self.next() {
                Some(b'}') => {
                    self.at += 1;
                    break;
                }
                Some(b',') if !members.is_empty() => self.at += 1,
                Some(b'"') if members.is_empty() => {}
                _ => break,
            }
            self.skip_space();
            if self.next() != Some(b'"') {
                break;
            }
            // A key cut short, or without its value yet, is not shown.
            let Some((key, true)) = self.string() else { break };
            self.skip_space();
            if self.next() != Some(b':') {
                break;
            }
            self.at += 1;
            let Some(value) = self.value() else { break };
            members.insert(key, value);
        }
        Value::Object(members)
    }

    /// An array: its whole items, and the last one as far as it goes.
    fn array(&mut self) -> Value {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.next() {
                Some(b']') => {
                    self.at += 1;
                    break;
                }
                Some(b',') if !items.is_empty() => self.at += 1,
                Some(_) if items.is_empty() => {}
                _ => break,
            }
            let Some(item) = self.value() else { break };
            items.push(item);
        }
        Value::Array(items)
    }

    /// A string from its opening quote: what it says so far, and whether
    /// it is closed.
    fn string(&mut self) -> Option<(String, bool)> {
        let open = self.at;
        self.at += 1;
        let mut escaped = false;
        while let Some(byte) = self.next() {
            self.at += 1;
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => return serde_json::from_str(&self.text[open..self.at]).ok().map(|text| (text, true)),
                _ => {}
            }
        }
        Some((cut_string(&self.text[open + 1..]), false))
    }

    /// A number or a literal, only once something after it shows it ended.
    fn scalar(&mut self) -> Option<Value> {
        let start = self.at;
        while self.next().is_some_and(|byte| byte.is_ascii_alphanumeric() || b"+-.".contains(&byte)) {
            self.at += 1;
        }
        // Not ended while nothing follows it.
        self.next()?;
        serde_json::from_str(&self.text[start..self.at]).ok()
    }
}

/// What the body of a string cut short says so far: an escape cut short
/// (`\`, `\u00`, half of a surrogate pair) is left out.
fn cut_string(mut body: &str) -> String {
    loop {
        if let Ok(text) = serde_json::from_str(&format!("\"{body}\"")) {
            return text;
        }
        match body.rfind('\\') {
            Some(slash) => body = &body[..slash],
            None => return String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::parse_partial;

    #[test]
    fn every_prefix_of_an_answer_shows_what_it_has_and_never_takes_it_back() {
        let whole = r#"{"summary": "Caf\u00e9 \"one\" \\ two", "word_count": 42, "tags": ["a", "bé"], "done": true, "n": null}"#;
        let result: serde_json::Value = serde_json::from_str(whole).unwrap();
        let mut last = json!(null);
        for end in (0..=whole.len()).filter(|end| whole.is_char_boundary(*end)) {
            let Some(shown) = parse_partial(&whole[..end]) else {
                assert!(last.is_null(), "nothing shown after {last} at {end}");
                continue;
            };
            assert!(grows(&last, &shown), "{last} then {shown} at {end}");
            last = shown;
        }
        assert_eq!(last, result);
    }

    /// Whether `after` holds everything `before` held, each string at least
    /// as long and beginning the same.
    fn grows(before: &serde_json::Value, after: &serde_json::Value) -> bool {
        use serde_json::Value::*;
        match (before, after) {
            (Null, _) => true,
            (String(a), String(b)) => b.starts_with(a.as_str()),
            (Object(a), Object(b)) => a.iter().all(|(key, value)| b.get(key).is_some_and(|now| grows(value, now))),
            (Array(a), Array(b)) => a.len() <= b.len() && a.iter().zip(b).all(|(x, y)| grows(x, y)),
            (a, b) => a == b,
        }
    }

    #[test]
    fn what_is_cut_short_is_shown_as_far_as_it_is_sure() {
        assert_eq!(parse_partial(""), None);
        assert_eq!(parse_partial("  "), None);
        assert_eq!(parse_partial("{"), Some(json!({})));
        assert_eq!(parse_partial(r#"{"sum"#), Some(json!({})));
        assert_eq!(parse_partial(r#"{"summary""#), Some(json!({})));
        assert_eq!(parse_partial(r#"{"summary": "#), Some(json!({})));
        assert_eq!(parse_partial(r#"{"summary": "Hel"#), Some(json!({"summary": "Hel"})));
        assert_eq!(parse_partial(r#"{"s": "a\"#), Some(json!({"s": "a"})));
        assert_eq!(parse_partial(r#"{"s": "a\u00"#), Some(json!({"s": "a"})));
        assert_eq!(parse_partial(r#"{"s": "a", "n": 12"#), Some(json!({"s": "a"})));
        assert_eq!(parse_partial(r#"{"s": "a", "n": 12,"#), Some(json!({"s": "a", "n": 12})));
        assert_eq!(parse_partial(r#"{"ok": tru"#), Some(json!({})));
        assert_eq!(parse_partial(r#"{"list": [1, 2"#), Some(json!({"list": [1]})));
        assert_eq!(parse_partial(r#"{"list": ["x", "y"#), Some(json!({"list": ["x", "y"]})));
        assert_eq!(parse_partial(r#"{"a": {"b": "c"#), Some(json!({"a": {"b": "c"}})));
        assert_eq!(parse_partial(r#""prose so f"#), Some(json!("prose so f")));
        assert_eq!(parse_partial("42"), Some(json!(42)));
        assert_eq!(parse_partial(r#"{"s": "x\ud83d"#), Some(json!({"s": "x"})));
        assert_eq!(parse_partial(r#"{"s": "x\ud83d\ude00"#), Some(json!({"s": "x😀"})));
    }
}
