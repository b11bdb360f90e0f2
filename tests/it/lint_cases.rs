//! The shapes the tests' lint (`lint.rs`) refuses, and some it lets be:
//! each a source text and what the lint says of it first (`None`: nothing).
//! This file is not linted itself: its examples are what the lint refuses.

/// (source, the start of its first problem after its line number).
pub(super) const CASES: &[(&str, Option<&str>)] = &[
    // Postgres outside a postgres module: directly, through the file, or
    // through a public function of another file (`helpers::pg_url` reaches
    // Postgres, `ELSEWHERE` below).
    (
        "#[tokio::test]\nasync fn a() { let url = common::postgres::fresh_database().await; }",
        Some("test a reaches Postgres"),
    ),
    (
        "async fn open() -> String { postgres::fresh_database().await }\n#[tokio::test]\nasync fn a() { open().await; }",
        Some("test a reaches Postgres"),
    ),
    ("mod postgres_only {\n#[tokio::test]\nasync fn a() { postgres::fresh_database().await; }\n}", None),
    (
        "#[tokio::test]\nasync fn a() { let url = helpers::pg_url().await; assert!(!url.is_empty()); }",
        Some("test a reaches Postgres"),
    ),
    (
        "use crate::helpers::{pg_url, other};\n#[tokio::test]\nasync fn a() { let url = pg_url().await; assert!(!url.is_empty()); }",
        Some("test a reaches Postgres"),
    ),
    ("#[tokio::test]\nasync fn a() { let url = pg_url().await; assert!(!url.is_empty()); }", None),
    // Every assertion inside an `if`: a trivially true one outside does not
    // count, a call of a function or closure of the file that asserts does.
    (
        "#[test]\nfn a() { let n = count(); if n > 3 { assert_eq!(n, 4); } }",
        Some("every assertion of test a is inside an if"),
    ),
    (
        "#[test]\nfn a() { assert!(true); if n == 3 { assert_eq!(n, 4); } }",
        Some("every assertion of test a is inside an if"),
    ),
    (
        "fn check(n: u32) { assert_eq!(n, 4); }\n#[test]\nfn a() { if n == 3 { check(n); } }",
        Some("every assertion of test a is inside an if"),
    ),
    ("#[test]\nfn a() { if backend == Backend::Sqlite { assert!(x); } assert!(y); }", None),
    // An `if` that asks whether something was seen and only checks.
    (
        "#[test]\nfn a() { assert!(x); if spans.len() > 0 { assert_eq!(spans[0], 1); } }",
        Some("an if asks whether something was seen"),
    ),
    (
        "#[test]\nfn a() { let check = |n: &str| { assert!(n.is_empty()); }; assert!(x);\n\
         for name in names { if count(name) > 0 { check(name); } } }",
        Some("an if asks whether something was seen"),
    ),
    ("#[test]\nfn a() { assert!(x); if n != 0 { assert_eq!(n, 4); } }", Some("an if asks whether something was seen")),
    (
        "#[test]\nfn a() { assert!(x); if first.is_some() { assert_eq!(first, Some(4)); } }",
        Some("an if asks whether something was seen"),
    ),
    (
        "#[test]\nfn a() { assert!(x); if v.iter().any(|n| *n > 2) { assert!(v.len() > 3); } }",
        Some("an if asks whether something was seen"),
    ),
    // JSON returned without a look at the status.
    (
        "async fn usage(app: &App) -> Value { app.get(\"/usage\").await.json().await.unwrap() }",
        Some("usage returns JSON"),
    ),
    ("async fn usage(app: &App) -> Value { ok_json(app.get(\"/usage\").await).await }", None),
    // Early returns, `#[ignore]`d tests' too.
    (
        "#[tokio::test]\nasync fn a() { if std::env::var(\"X\").is_err() { return; } assert!(b()); }",
        Some("test a returns early"),
    ),
    (
        "#[tokio::test]\n#[ignore = \"needs x\"]\nasync fn a() { if which(\"x\").is_err() { return; } assert!(b()); }",
        Some("test a returns early"),
    ),
    ("#[tokio::test]\nasync fn a() { if !in_a_process_of_its_own(\"a\").await { return; } assert!(b()); }", None),
    (
        "async fn a(backend: Backend) { if x { return; } assert!(b()); }\non_both_backends!(a);",
        Some("test a returns early"),
    ),
    ("#[tokio::test]\nasync fn a() { let f = async { if x { return 1; } 2 }; assert_eq!(f.await, 2); }", None),
    ("#[test]\nfn a() { let s = \"{ fn b() { return; } \"; let c = '{'; assert!(s.len() > 0 && c == '{'); }", None),
];

/// Another file, `helpers`: `pg_url` reaches Postgres (what `CASES` call
/// through it); `url_of` is given its backend, so its callers say which.
pub(super) const HELPERS: &str = "pub async fn pg_url() -> String { let pool: PgPool = pool().await; url(&pool) }\n\
     pub async fn url_of(backend: Backend) -> String { match backend { Backend::Postgres => a(), _ => b() } }";
