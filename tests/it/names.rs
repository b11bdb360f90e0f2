//! One name per operation through the store's layers, checked on the text
//! of `src/store`:
//!
//! - a `Store` method that hands its work to one driver method (and begins
//!   no transaction) has that method's name;
//! - a driver method (`Driver`, `DriverTx`) of either backend that runs one
//!   statement of its own is named after that statement's constant, and one
//!   that hands its work to one function of a backend module calls a
//!   function of its own name; a method that runs several statements, or
//!   calls other driver methods, is named for what it does;
//! - the two backends' `sql.rs` declare the same statements under the same
//!   names, but for the forms only one database has, listed here with why.
//!
//! The files are read as text by the tests' lexer (`lint.rs`): comments
//! and the contents of literals blanked, a function's body found by
//! matching braces.

use std::collections::BTreeSet;
use std::path::Path;

use super::lint::{closing, functions, lex};

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The code of a text, comments and literal contents blanked.
fn bare(text: &str) -> String {
    lex(text).bare
}

/// The functions with a body in `code` (already lexed): name and body.
fn bodies(code: &str) -> Vec<(String, &str)> {
    functions(&lex(code)).into_iter().map(|function| (function.name, &code[function.open..=function.close])).collect()
}

/// The names after each occurrence of `prefix` (`self.driver().`) that are
/// called.
fn called_after(body: &str, prefix: &str) -> Vec<String> {
    body.match_indices(prefix)
        .filter(|(at, _)| !body[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .filter_map(|(at, _)| {
            let rest = &body[at + prefix.len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            rest[name.len()..].starts_with('(').then_some(name)
        })
        .collect()
}

/// The methods the `Driver` trait (`src/store/driver.rs`) declares.
fn driver_methods() -> BTreeSet<String> {
    let code = bare(&read("src/store/driver.rs"));
    let at = code.find("pub trait Driver:").expect("the Driver trait");
    let open = at + code[at..].find('{').unwrap();
    let block = &code[open..=closing(&code, open)];
    block
        .match_indices("fn ")
        .map(|(at, _)| block[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

/// The methods of `impl Store` blocks in `text` that hand their work to one
/// method of `driver_methods` of another name: (method, driver method).
fn store_names_that_differ(text: &str, driver_methods: &BTreeSet<String>) -> Vec<(String, String)> {
    let code = bare(text);
    let mut differ = Vec::new();
    for (at, _) in code.match_indices("impl Store {") {
        let open = at + "impl Store ".len();
        let block = &code[open..=closing(&code, open)];
        for (name, body) in bodies(block) {
            let mut calls = called_after(body, "self.driver().");
            calls.extend(called_after(body, "self.driver."));
            calls.retain(|called| driver_methods.contains(called));
            if calls.len() == 1 && !body.contains("begin()") && calls[0] != name {
                differ.push((name, calls.remove(0)));
            }
        }
    }
    differ
}

/// The upper-case names (statement constants) a body names.
fn constants(body: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut word = String::new();
    for c in body.chars().chain([' ']) {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        let upper = word.len() > 3 && word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if upper && word != "MIGRATOR" && !word.starts_with(|c: char| c.is_ascii_digit()) {
            found.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    found
}

/// The backend modules a driver method may hand its work to.
const MODULES: [&str; 9] =
    ["shared", "claims", "sessions", "breakers", "keys", "webhooks", "retention", "connect", "pooling"];

/// The driver methods of `text` (a backend's `impl Driver` or
/// `impl DriverTx` block) not named after their one statement or the one function they
/// hand to: (method, what it runs).
fn driver_names_that_differ(text: &str) -> Vec<(String, String)> {
    let code = bare(text);
    let mut differ = Vec::new();
    for (name, body) in bodies(&code) {
        // A method that calls other methods of its own (but for SQLite's
        // `write`, its turn to write) is named for what it does.
        if called_after(body, "self.").iter().any(|called| called != "write") {
            continue;
        }
        let statements = constants(body);
        let handed: Vec<String> = MODULES.iter().flat_map(|m| called_after(body, &format!("{m}::"))).collect();
        match (statements.len(), handed.as_slice()) {
            (1, _) => {
                let statement = statements.into_iter().next().unwrap();
                if statement.to_lowercase() != name {
                    differ.push((name, statement));
                }
            }
            (0, [function]) if *function != name => differ.push((name, format!("a function {function}"))),
            _ => {}
        }
    }
    differ
}

/// The texts of `text`'s `impl Driver for …` and `impl DriverTx for …`
/// blocks.
fn driver_impls(text: &str) -> Vec<String> {
    let code = bare(text);
    let mut blocks = Vec::new();
    for start in ["impl Driver for ", "impl DriverTx for "] {
        for (at, _) in code.match_indices(start) {
            let open = at + code[at..].find('{').unwrap();
            blocks.push(text[open..=closing(&code, open)].to_owned());
        }
    }
    blocks
}

/// The names of the statements a `sql.rs` declares.
fn statement_names(text: &str) -> BTreeSet<String> {
    let code = bare(text);
    code.split(['\n', ';'])
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("pub(super) ")?;
            let rest = rest.strip_prefix("static ").or_else(|| rest.strip_prefix("const "))?;
            Some(rest.split(':').next()?.trim().to_owned())
        })
        .collect()
}

/// Statements only one backend has: (name, why).
const ONE_BACKEND_ONLY: [(&str, &str); 13] = [
    ("CREATE_JOBS", "Postgres writes a group of new jobs in one statement; SQLite in one transaction (creates.rs)"),
    ("LIST_JOBS", "SQLite lists an owner's jobs with BROWSE_JOBS"),
    ("GET_JOBS", "Postgres reads a group of queued reads in one statement (reads.rs); SQLite reads each in-process"),
    ("LOCK_ATTEMPT_JOBS", "Postgres locks a batch in one statement; SQLite runs LOCK_ATTEMPT_JOB for each"),
    ("LOCK_ATTEMPT_JOB_SKIP_LOCKED", "SQLite has no row locks to skip"),
    ("SETTLE_OUTPUTS", "Postgres settles a batch in one statement; SQLite settles each"),
    ("SETTLE_WITH_OUTPUT", "one statement on Postgres; SQLite's two are SETTLE_JOB and SETTLE_ATTEMPT"),
    ("SETTLE_JOB", "the job's half of SETTLE_WITH_OUTPUT"),
    ("SETTLE_ATTEMPT", "the attempt's half of SETTLE_WITH_OUTPUT"),
    ("HOLD_RECONCILIATION", "the second half of CLAIM_RECONCILIATIONS, one statement on Postgres"),
    ("READ_ATTEMPT", "INSERT_ATTEMPT's row read back: SQLite's `returning` cannot name columns through an alias"),
    ("ROLLUP_ROW", "the row ADD_TO_ROLLUP adds to, read first: Postgres adds in the upsert"),
    ("START_ATTEMPT", "one candidate at a time; Postgres's START_ATTEMPTS (claims.rs) starts them all at once"),
];

#[test]
fn a_store_method_that_hands_its_work_to_one_driver_method_has_its_name() {
    let driver_methods = driver_methods();
    assert!(driver_methods.contains("get_job") && driver_methods.len() > 50, "{driver_methods:?}");
    let mut differ = Vec::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let found = store_names_that_differ(&text, &driver_methods);
            differ.extend(found.into_iter().map(|d| (path.display().to_string(), d)));
        }
    }
    assert!(differ.is_empty(), "Store methods named otherwise than the driver method they run: {differ:#?}");
}

#[test]
fn a_driver_method_is_named_after_its_statement() {
    let mut differ = Vec::new();
    let mut methods = 0;
    for backend in ["src/store/postgres", "src/store/sqlite"] {
        for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(backend)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for block in driver_impls(&text) {
                methods += bodies(&block).len();
                differ.extend(driver_names_that_differ(&block).into_iter().map(|d| (path.display().to_string(), d)));
            }
        }
    }
    assert!(methods > 100, "only {methods} driver methods found in the backends' impls");
    assert!(differ.is_empty(), "driver methods named otherwise than the statement they run: {differ:#?}");
}

#[test]
fn both_backends_name_their_statements_alike() {
    let postgres = statement_names(&read("src/store/postgres/sql.rs"));
    let sqlite = statement_names(&read("src/store/sqlite/sql.rs"));
    assert!(postgres.contains("GET_JOB") && sqlite.contains("GET_JOB"), "{postgres:?} {sqlite:?}");
    let only: BTreeSet<&String> = postgres.symmetric_difference(&sqlite).collect();
    let unexplained: Vec<_> =
        only.iter().filter(|name| !ONE_BACKEND_ONLY.iter().any(|(n, _)| *n == name.as_str())).collect();
    assert!(unexplained.is_empty(), "statements of one backend's sql.rs only: {unexplained:?}");
    let stale: Vec<_> = ONE_BACKEND_ONLY.iter().filter(|(n, _)| !only.iter().any(|o| o == n)).collect();
    assert!(stale.is_empty(), "listed as one backend's only, but both or neither have it: {stale:?}");
}

#[test]
fn a_name_that_differs_between_the_layers_is_found() {
    let store = "impl Store {\n pub async fn record_provider_request(&self, a: &A) -> Result<bool> {\n \
                 self.driver().update_provider_request(a).await\n }\n \
                 pub async fn create_job(&self) { let tx = self.begin().await; self.driver().insert_job(); }\n}";
    let methods = BTreeSet::from(["update_provider_request".to_owned(), "insert_job".to_owned()]);
    assert_eq!(
        store_names_that_differ(store, &methods),
        [("record_provider_request".to_owned(), "update_provider_request".to_owned())]
    );
    let driver = "async fn update_reconcile_after(&self, a: &A) -> Result<()> {\n \
                  sqlx::query(sql::POSTPONE_RECONCILIATION).bind_attempt(a).execute(&self.pool).await?; Ok(())\n}\n\
                  async fn select_breakers(&self) -> Result<Vec<B>> { breakers::read(&self.pool).await }\n\
                  async fn get_job(&self, o: &O) -> Result<J> { sqlx::query(GET_JOB.as_str()).fetch_all(&self.pool) }";
    assert_eq!(
        driver_names_that_differ(driver),
        [
            ("update_reconcile_after".to_owned(), "POSTPONE_RECONCILIATION".to_owned()),
            ("select_breakers".to_owned(), "a function read".to_owned())
        ]
    );
    let sql = "pub(super) static GET_JOB: LazyLock<String> = x;\npub(super) const CANCEL_PENDING: &str = \"\";";
    assert_eq!(statement_names(sql), BTreeSet::from(["GET_JOB".to_owned(), "CANCEL_PENDING".to_owned()]));
}
