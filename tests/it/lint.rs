//! The tests' own lint: the shapes that let a test pass without checking
//! what its name says, refused in every `.rs` file under `tests/`.
//!
//! - A test that reaches Postgres (directly, or through functions of its
//!   file or public ones of other files under `tests/`) sits in a module
//!   named `postgres` (made
//!   by `on_both_backends!`), `postgres_only`, `postgres_direct` or
//!   `postgres_cluster` (made by `on_postgres!`): the PgBouncer pass of
//!   `.ci/run` selects the first two by name, so a Postgres test elsewhere
//!   would silently skip it.
//! - No test guards every one of its assertions (calls of the file's
//!   functions and closures that assert count as assertions; an
//!   `assert!(true)` does not) with an `if`, and no `if` that asks whether
//!   something was seen (`> 0`, `>= 1`, `!= 0`, `!x.is_empty()`,
//!   `.is_some()`, `.any(…)`) holds nothing but assertions:
//!   when nothing was seen, nothing is checked.
//! - No helper returns JSON read from an HTTP answer without looking at the
//!   status: an error's body indexed by a missing field is a `null` that
//!   compares equal to another `null`.
//! - No test returns early, unless it is running itself in a process of its
//!   own (`in_a_process_of_its_own`, `in_a_child…`); an `#[ignore]`d one
//!   neither, since `--include-ignored` runs it and counts it passed.
//!
//! The files (this one aside: its examples are what it refuses) are read
//! as text, with comments and the contents of string and
//! character literals blanked out (same offsets), and `macro_rules!` bodies
//! skipped; a function's body is found by matching braces. The same reading
//! measures the functions of `src/` (`structure.rs`).

use std::path::{Path, PathBuf};

#[path = "lint_cases.rs"]
mod cases;
#[path = "lint_postgres.rs"]
mod reach;

use reach::{listed_tests, modules_around, public_functions_reaching_postgres, reaching_postgres};

/// Offsets of a source text that are code: `code` has comments blanked,
/// `bare` has comments and literal contents blanked, both as long as the text.
pub(super) struct Source {
    code: String,
    pub(super) bare: String,
}

pub(super) fn lex(text: &str) -> Source {
    let bytes = text.as_bytes();
    let mut code = bytes.to_vec();
    let mut bare = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let at_word_start = |i: usize| i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(bytes.len(), |n| i + n);
            blank(&mut code, i, end);
            blank(&mut bare, i, end);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(bytes.len(), |n| i + n + 2);
            blank(&mut code, i, end);
            blank(&mut bare, i, end);
            i = end;
        } else if let Some((open, hashes)) = raw_string_start(rest).filter(|_| at_word_start(i)) {
            let close = format!("\"{}", "#".repeat(hashes));
            let end = i + open + 1 + rest[open + 1..].find(&close).expect("a closed raw string");
            blank(&mut bare, i + open + 1, end);
            i = end + close.len();
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut bare, i + 1, j);
            i = j + 1;
        } else if bytes[i] == b'\'' {
            // A character literal ('x', '\n', '\u{7f}'), not a lifetime.
            let len = if rest[1..].starts_with('\\') {
                rest[2..].find('\'').map(|n| n + 3)
            } else {
                rest[1..]
                    .chars()
                    .next()
                    .filter(|c| rest[1 + c.len_utf8()..].starts_with('\''))
                    .map(|c| c.len_utf8() + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut bare, i + 1, i + len - 1);
                    i += len;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    let mut source = Source { code: String::from_utf8(code).unwrap(), bare: String::from_utf8(bare).unwrap() };
    // The bodies of `macro_rules!` are patterns, not code.
    while let Some(at) = source.bare.find("macro_rules!") {
        let end = closing(&source.bare, source.bare[at..].find('{').unwrap() + at);
        for text in [&mut source.code, &mut source.bare] {
            let blanked: String = text[at..=end].chars().map(|c| if c == '\n' { c } else { ' ' }).collect();
            text.replace_range(at..=end, &blanked);
        }
    }
    source
}

/// Where the quote of a raw string (`r"`, `r#"`, `br"`) at the start of
/// `rest` is, and how many `#` it has.
fn raw_string_start(rest: &str) -> Option<(usize, usize)> {
    let after_b = rest.strip_prefix('b').unwrap_or(rest);
    let hashes = after_b.strip_prefix('r')?.bytes().take_while(|&b| b == b'#').count();
    let open = rest.len() - after_b.len() + 1 + hashes;
    (rest.as_bytes().get(open) == Some(&b'"')).then_some((open, hashes))
}

/// The offset of the brace that closes the one at `open`.
pub(super) fn closing(bare: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, byte) in bare.bytes().enumerate().skip(open) {
        match byte {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces after offset {open}")
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Offsets where `word` occurs as a whole word in `text`.
fn words<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(word).map(|(at, _)| at).filter(move |&at| {
        let bytes = text.as_bytes();
        (at == 0 || !is_ident(bytes[at - 1])) && bytes.get(at + word.len()).is_none_or(|&b| !is_ident(b))
    })
}

/// A function with a body: its name, where `fn` is, and its braces.
pub(super) struct Function {
    pub(super) name: String,
    pub(super) at: usize,
    pub(super) open: usize,
    pub(super) close: usize,
    attributes: Vec<String>,
    public: bool,
}

impl Function {
    fn is_test(&self) -> bool {
        self.attributes.iter().any(|a| a.starts_with("#[test]") || a.starts_with("#[tokio::test"))
    }
}

/// Every function with a body, nested ones too (`fn NAME`; not `fn(…)` types).
pub(super) fn functions(source: &Source) -> Vec<Function> {
    let bare = &source.bare;
    let mut found = Vec::new();
    for at in words(bare, "fn") {
        let name: String = bare[at + 2..].trim_start().bytes().take_while(|&b| is_ident(b)).map(char::from).collect();
        let Some(open) = signature_end(&bare[at..]).map(|n| n + at) else { continue };
        if name.is_empty() || bare.as_bytes()[open] == b';' {
            continue;
        }
        let mut before = bare[..at].trim_end();
        let mut public = false;
        for word in ["async", "pub(crate)", "pub"] {
            let stripped = before.strip_suffix(word);
            public |= stripped.is_some() && word != "async";
            before = stripped.unwrap_or(before).trim_end();
        }
        let mut attributes = Vec::new();
        while before.ends_with(']') {
            let Some(start) = before.rfind("#[") else { break };
            attributes.push(before[start..].to_owned());
            before = before[..start].trim_end();
        }
        found.push(Function { name, at, open, close: closing(bare, open), attributes, public });
    }
    found
}

/// Where a signature ends: its body's `{`, or the `;` of a function without
/// one; a `;` inside parentheses or brackets (`&[u8; 32]`) is not its end.
fn signature_end(signature: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, byte) in signature.bytes().enumerate() {
        match byte {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'{' | b';' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// Problems of one file's text, each as `LINE: what`; `elsewhere` names
/// the public functions of other files that reach Postgres, by module.
fn lint(text: &str, elsewhere: &[(String, String)]) -> Vec<String> {
    let source = lex(text);
    let bare = &source.bare;
    let functions = functions(&source);
    let listed = listed_tests(bare);
    let line = |offset: usize| bare[..offset].matches('\n').count() + 1;
    let mut problems = Vec::new();

    let reaching = reaching_postgres(&source, &functions, elsewhere, true);
    let checkers = checkers(bare, &functions);

    for (function, &reaches) in functions.iter().zip(&reaching) {
        let body = &bare[function.open..=function.close];
        let is_test = function.is_test() || listed.contains(&function.name);
        if function.is_test() && reaches {
            let modules = modules_around(bare, function.at);
            if !modules
                .iter()
                .any(|m| matches!(m.as_str(), "postgres" | "postgres_only" | "postgres_direct" | "postgres_cluster"))
            {
                problems.push(format!(
                    "{}: test {} reaches Postgres outside a postgres module (use on_postgres!)",
                    line(function.at),
                    function.name
                ));
            }
        }
        if is_test {
            let assertions = checks(body, &checkers);
            if !assertions.is_empty() && assertions.iter().all(|&at| inside_an_if(body, at)) {
                problems.push(format!(
                    "{}: every assertion of test {} is inside an if",
                    line(function.at),
                    function.name
                ));
            }
            for at in words(body, "return") {
                if !returns_from_a_closure(body, at) && !runs_elsewhere(body, at) {
                    problems.push(format!("{}: test {} returns early", line(function.open + at), function.name));
                }
            }
        } else if reads_json_unchecked(&source.code[function.at..function.open], body) {
            problems.push(format!(
                "{}: {} returns JSON from an HTTP answer without looking at its status",
                line(function.at),
                function.name
            ));
        }
    }

    // `if` blocks that only check, asked whether something was seen.
    for at in words(bare, "if") {
        let Some(open) = block_after(bare, at) else { continue };
        let condition = &bare[at + 2..open];
        let close = closing(bare, open);
        let asks = ["> 0", ">= 1", "!= 0", ".is_empty()", ".is_some()", ".any("];
        let seen = asks.iter().any(|asked| condition.contains(asked));
        if seen && only_checks(&bare[open + 1..close], &checkers) {
            problems.push(format!("{}: an if asks whether something was seen and only checks", line(at)));
        }
    }
    problems
}

fn is_assertion(statement: &str) -> bool {
    ["assert!", "assert_eq!", "assert_ne!", "panic!", "expect_problem("].iter().any(|a| statement.starts_with(a))
}

/// The functions and closures (`let NAME = |…| …;`) of a file that assert.
fn checkers(bare: &str, functions: &[Function]) -> Vec<String> {
    let mut names: Vec<String> =
        functions.iter().filter(|f| !assertions(&bare[f.open..=f.close]).is_empty()).map(|f| f.name.clone()).collect();
    for at in words(bare, "let") {
        let rest = bare[at + 3..].trim_start();
        let name: String = rest.bytes().take_while(|&b| is_ident(b)).map(char::from).collect();
        let after = rest[name.len()..].trim_start();
        let Some(value) = after.strip_prefix('=').map(str::trim_start) else { continue };
        if !(value.starts_with('|') || value.starts_with("move |")) {
            continue;
        }
        let start = bare.len() - value.len();
        let end = statements(&bare[start..]).first().map_or(bare.len(), |s| start + s.len());
        if !assertions(&bare[start..end]).is_empty() {
            names.push(name);
        }
    }
    names
}

/// The top-level statements of a block's inside: ended by `;`, or by the
/// closing brace of a block statement (`for … { … }`).
fn statements(inside: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, byte) in inside.bytes().enumerate() {
        match byte {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth -= 1,
            b'}' => {
                depth -= 1;
                let statement = inside[start..=i].trim_start();
                let block = ["for ", "if ", "while ", "loop"].iter().any(|w| statement.starts_with(w));
                if depth == 0 && block && !inside[i + 1..].trim_start().starts_with("else") {
                    found.push(&inside[start..=i]);
                    start = i + 1;
                }
            }
            b';' if depth == 0 => {
                found.push(&inside[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    found.push(&inside[start..]);
    found.into_iter().map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// Whether every statement of a block's inside is a check: an assertion, a
/// call of a function or closure that asserts, or a loop or `if` of checks.
fn only_checks(inside: &str, checkers: &[String]) -> bool {
    let all = statements(inside);
    !all.is_empty()
        && all.iter().all(|statement| {
            if is_assertion(statement) {
                return true;
            }
            let called: String = statement.bytes().take_while(|&b| is_ident(b)).map(char::from).collect();
            if checkers.contains(&called) && statement[called.len()..].starts_with('(') {
                return true;
            }
            let block = ["for ", "if ", "while ", "loop"].iter().any(|w| statement.starts_with(w));
            match (block, statement.find('{')) {
                (true, Some(open)) => only_checks(&statement[open + 1..closing(statement, open)], checkers),
                _ => false,
            }
        })
}

/// Where `body` checks something: its assertions but those that hold
/// whatever happened (`assert!(true)`), and its calls of `checkers`.
fn checks(body: &str, checkers: &[String]) -> Vec<usize> {
    let trivial = |at: usize| body[at..].starts_with("assert!(true)");
    let calls = checkers.iter().flat_map(|name| {
        words(body, name).filter(move |&at| body[at + name.len()..].starts_with('(') && !body[..at].ends_with("fn "))
    });
    assertions(body).into_iter().filter(|&at| !trivial(at)).chain(calls).collect()
}

fn assertions(body: &str) -> Vec<usize> {
    ["assert", "assert_eq", "assert_ne", "panic"]
        .iter()
        .flat_map(|name| words(body, name).filter(|&at| body[at + name.len()..].starts_with('!')))
        .chain(words(body, "expect_problem"))
        .collect()
}

/// Where the block of the `if` at `at` opens (`if cond {`), if it is one.
fn block_after(bare: &str, at: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, byte) in bare.bytes().enumerate().skip(at + 2) {
        match byte {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'{' if depth == 0 => return Some(i),
            b';' | b'}' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The start of the statement that opens the block around `at`.
fn enclosing_openers(body: &str, at: usize) -> Vec<&str> {
    let bytes = body.as_bytes();
    let mut openers = Vec::new();
    let mut depth = 0;
    for i in (0..at).rev() {
        match bytes[i] {
            b'}' => depth += 1,
            b'{' if depth > 0 => depth -= 1,
            b'{' => {
                let start = body[..i].rfind([';', '{', '}']).map_or(0, |n| n + 1);
                openers.push(body[start..i].trim());
            }
            _ => {}
        }
    }
    openers
}

fn inside_an_if(body: &str, at: usize) -> bool {
    enclosing_openers(body, at).iter().any(|opener| {
        opener.starts_with("if ") || opener.starts_with("else") || opener.ends_with("else") || opener.contains(" if ")
    })
}

fn returns_from_a_closure(body: &str, at: usize) -> bool {
    enclosing_openers(body, at).iter().any(|opener| opener.contains("async") || opener.contains('|'))
}

/// Whether the early return at `at` hands the test to a process of its own.
fn runs_elsewhere(body: &str, at: usize) -> bool {
    let statement_end = body[at..].find(';').map_or(body.len(), |n| at + n);
    let around = &body[body[..at].rfind(';').unwrap_or(0)..statement_end];
    around.contains("in_a_process_of_its_own") || around.contains("in_a_child")
}

/// A helper returning a `Value` read by `.json()` with no status in sight.
fn reads_json_unchecked(signature: &str, body: &str) -> bool {
    let returns_json = signature.split("->").nth(1).is_some_and(|out| words(out, "Value").next().is_some());
    let reads_json = body.contains(".json()") || body.contains(".json::<");
    let checks = ["status(", "error_for_status", "ok_json(", "StatusCode", "expect_problem("];
    returns_json && reads_json && !checks.iter().any(|c| body.contains(c))
}

fn test_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "node_modules") {
                    walk(&path, found);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"), &mut found);
    assert!(found.len() > 40, "the tests are found: {found:?}");
    found
}

#[test]
fn every_test_file_passes_the_tests_lint() {
    let mut problems = Vec::new();
    // This file's examples (and its parts', `lint_*.rs`) are the shapes it refuses.
    let files: Vec<PathBuf> = test_files().into_iter().filter(|f| !f.to_string_lossy().contains("/it/lint")).collect();
    let texts: Vec<String> = files.iter().map(|file| std::fs::read_to_string(file).unwrap()).collect();
    // A file's module is named after it (a `mod.rs`, after its folder).
    let module = |file: &PathBuf| {
        let named =
            if file.ends_with("mod.rs") { file.parent().unwrap().to_path_buf() } else { file.with_extension("") };
        named.file_name().unwrap().to_string_lossy().into_owned()
    };
    for (n, file) in files.iter().enumerate() {
        let others: Vec<(String, &String)> =
            files.iter().zip(&texts).enumerate().filter(|(m, _)| *m != n).map(|(_, (f, t))| (module(f), t)).collect();
        let elsewhere = public_functions_reaching_postgres(&others);
        problems.extend(lint(&texts[n], &elsewhere).into_iter().map(|p| format!("{}:{p}", file.display())));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_tests_lint_finds_each_shape_it_refuses() {
    let helpers = [("helpers".to_owned(), &cases::HELPERS.to_owned())];
    let elsewhere = public_functions_reaching_postgres(&helpers);
    assert_eq!(elsewhere, [("helpers".to_owned(), "pg_url".to_owned())], "given its backend, url_of is not");
    for (source, expected) in cases::CASES {
        let found = lint(source, &elsewhere);
        match expected {
            Some(problem) => {
                assert!(found.first().is_some_and(|p| p.contains(problem)), "{problem}: {found:?} in {source}")
            }
            None => assert_eq!(found, Vec::<String>::new(), "{source}"),
        }
    }
}
