//! The shape of the source tree, checked: no module of `src/` imports
//! another that imports it back (directly or through others), no file or
//! function grows past what a reader can hold, and only the use cases, the
//! worker and the wiring that builds them reach the store.
//!
//! A module's imports are read from its text: every `crate::…` and
//! `super::…` path outside comments and unit tests, `use` groups included,
//! resolved to the longest module it names. A parent and its own children
//! may name each other (a parent declares them); every other pair of
//! modules is compared at the level where their paths part: the top-level
//! modules of the crate with each other, and the children of one parent
//! with each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::lint::{functions, lex};

const LONGEST_FILE: usize = 600;

/// The most lines a function may take, from the line of its `fn` to the
/// line of its closing brace.
const LONGEST_FUNCTION: usize = 80;

/// The functions allowed to be longer, by path: data tables, not logic.
const LONG_BY_NATURE: [&str; 1] = ["store::postgres::catalogue::statements"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The library's modules by path (`http::jobs`), with their text; the
/// binary (`bin/`) is another crate.
fn modules() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src()).unwrap().with_extension("");
        let mut segments: Vec<String> = relative.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if segments[0] == "bin" {
            continue;
        }
        if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
            segments.pop();
        }
        modules.insert(segments.join("::"), std::fs::read_to_string(&file).unwrap());
    }
    modules
}

/// The code of a module without its comments and unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path `crate::a::b…` or `super::…` in `code`, as the segments
/// after `crate`, resolved from module `at`; `use x::{a, b::c}` gives one
/// path per member.
fn paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (start, _) in code.match_indices("::") {
        // The first segment of a path: the word before the first `::`.
        let before = &code[..start];
        let word_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |i| i + 1);
        let first = &before[word_start..];
        if before[..word_start].ends_with("::") || !(first == "crate" || first == "super") {
            continue;
        }
        let mut base: Vec<String> =
            if first == "crate" { Vec::new() } else { at[..at.len().saturating_sub(1)].to_vec() };
        let mut rest = &code[start + 2..];
        let mut segments = Vec::new();
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for member in inner.split(',') {
                    let head: String = member.trim().chars().take_while(|&c| is_ident(c)).collect();
                    if !head.is_empty() {
                        found.push([base.clone(), segments.clone(), vec![head]].concat());
                    }
                }
                break;
            }
            let segment: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if segment.is_empty() {
                break;
            }
            rest = &rest[segment.len()..];
            if segment == "super" && segments.is_empty() {
                base.pop();
            } else {
                segments.push(segment);
            }
            match rest.strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        found.push([base, segments].concat());
    }
    found
}

/// Which module of `modules` a path names: its longest prefix that is one.
fn module_of(path: &[String], modules: &BTreeMap<String, String>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|candidate| modules.contains_key(candidate))
}

fn is_within(inner: &str, outer: &str) -> bool {
    outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
}

/// The import edges between modules that are neither the other's ancestor,
/// at the level where their paths part: (parent, from, to).
fn edges() -> BTreeSet<(String, String, String)> {
    let modules = modules();
    let mut edges = BTreeSet::new();
    for (name, text) in &modules {
        let at: Vec<String> = if name.is_empty() { Vec::new() } else { name.split("::").map(str::to_owned).collect() };
        for path in paths(&code(text), &at) {
            let Some(target) = module_of(&path, &modules) else { continue };
            if is_within(&target, name) || is_within(name, &target) {
                continue;
            }
            let (from, to): (Vec<&str>, Vec<&str>) = (name.split("::").collect(), target.split("::").collect());
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            edges.insert((from[..common].join("::"), from[common].to_owned(), to[common].to_owned()));
        }
    }
    edges
}

/// A circle among the children of one parent, if any.
fn circle(edges: &BTreeSet<(String, String, String)>) -> Option<Vec<String>> {
    let mut graph: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (parent, from, to) in edges {
        graph.entry((parent, from)).or_default().push(to);
    }
    fn visit<'a>(
        graph: &BTreeMap<(&'a str, &'a str), Vec<&'a str>>,
        parent: &'a str,
        node: &'a str,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<(&'a str, &'a str)>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|&n| n == node) {
            let mut found: Vec<String> = path[start..].iter().map(|n| format!("{parent}::{n}")).collect();
            found.push(format!("{parent}::{node}"));
            return Some(found);
        }
        if !done.insert((parent, node)) {
            return None;
        }
        path.push(node);
        for next in graph.get(&(parent, node)).into_iter().flatten() {
            if let Some(found) = visit(graph, parent, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|&(parent, node)| visit(&graph, parent, node, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_of_src_import_each_other_without_a_circle() {
    let edges = edges();
    // The reader sees real imports: the API's handlers use the use cases,
    // the dashboard uses the API's extractors, the worker uses the store.
    for (parent, from, to) in
        [("", "http", "jobs"), ("", "ui", "http"), ("", "worker", "store"), ("http", "jobs", "error")]
    {
        assert!(edges.contains(&(parent.to_owned(), from.to_owned(), to.to_owned())), "{from} uses {to}: {edges:?}");
    }
    assert_eq!(circle(&edges), None, "modules that import each other");
}

#[test]
fn a_circle_between_modules_is_found() {
    let edges: BTreeSet<(String, String, String)> =
        [("http", "a", "b"), ("http", "b", "c"), ("http", "c", "a"), ("", "x", "y")]
            .iter()
            .map(|(p, a, b)| (p.to_string(), a.to_string(), b.to_string()))
            .collect();
    assert_eq!(circle(&edges), Some(vec!["http::a".into(), "http::b".into(), "http::c".into(), "http::a".into()]));
    let at = ["http".to_owned(), "jobs".to_owned()];
    let found = paths("use super::{error::Problem, extract};\nlet x = crate::store::Store::get;", &at);
    assert!(found.contains(&vec!["http".into(), "error".into()]), "{found:?}");
    assert!(found.contains(&vec!["http".into(), "extract".into()]), "{found:?}");
    assert!(found.contains(&vec!["store".into(), "Store".into(), "get".into()]), "{found:?}");
}

/// The modules that may hold the store: the store itself, the use cases in
/// front of it (jobs, keys and sessions, webhooks, qualifications), the
/// worker, and the wiring that builds them. Handlers and pages reach data
/// only through these.
const REACH_THE_STORE: [&str; 9] =
    ["store", "jobs", "keys", "webhooks", "callbacks", "task::qualify", "task::breakers", "worker", "app"];

/// Where a module names the `Store` type or reads a `store` field, if it does.
fn reaches_the_store(name: &str, text: &str) -> Option<String> {
    let at: Vec<String> = name.split("::").map(str::to_owned).collect();
    let code = code(text);
    if let Some(path) = paths(&code, &at).into_iter().find(|path| path.starts_with(&["store".into(), "Store".into()])) {
        return Some(path.join("::"));
    }
    let named = code.match_indices("Store").find(|(at, _)| {
        let before = code[..*at].chars().next_back();
        let after = code[at + "Store".len()..].chars().next();
        // Not an enum's variant of that name (`ApiError::Store(…)`).
        let variant = code[..*at].ends_with("::") || after == Some('(');
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident) && !variant
    });
    if named.is_some() {
        return Some("the type Store".into());
    }
    // A `store` field read (`app.store…`), not an atomic's `.store(…)`.
    let field = code.match_indices(".store").find(|(at, _)| {
        let after = code[at + ".store".len()..].chars().next();
        !after.is_some_and(|c| c == '(' || is_ident(c))
    });
    field.map(|(at, _)| code[at.saturating_sub(30)..at + 6].to_owned())
}

#[test]
fn only_the_use_cases_the_worker_and_the_wiring_reach_the_store() {
    let modules = modules();
    assert!(modules.contains_key("ui::pages") && modules.contains_key("http::jobs"), "{:?}", modules.keys());
    for (name, text) in &modules {
        if REACH_THE_STORE.iter().any(|allowed| is_within(name, allowed)) {
            continue;
        }
        if let Some(found) = reaches_the_store(name, text) {
            panic!("{name} reaches the store ({found}); go through a use case");
        }
    }
}

/// What a handler or a page may name of the store: its error, which the
/// use cases pass through. Every other type they take or answer comes from
/// the use cases or the domain.
const STORE_NAMES_HANDLERS_MAY_USE: [&str; 1] = ["StoreError"];

/// The paths into `store` that module `name` names, but for those above.
fn store_names(name: &str, text: &str) -> Vec<String> {
    let at: Vec<String> = name.split("::").map(str::to_owned).collect();
    paths(&code(text), &at)
        .into_iter()
        // A group's prefix (`store` of `store::{A, B}`) comes with its members.
        .filter(|path| path.len() > 1 && path[0] == "store")
        .filter(|path| !(path.len() == 2 && STORE_NAMES_HANDLERS_MAY_USE.contains(&path[1].as_str())))
        .map(|path| path.join("::"))
        .collect()
}

#[test]
fn handlers_and_pages_name_nothing_of_the_store_but_its_error() {
    let modules = modules();
    let mut named = Vec::new();
    for (name, text) in &modules {
        if is_within(name, "http") || is_within(name, "ui") {
            named.extend(store_names(name, text).into_iter().map(|path| format!("{name}: {path}")));
        }
    }
    assert!(named.is_empty(), "handlers and pages naming the store's types: {named:?}");
    let page = "use crate::store::{JobFilter, StoreError};\nfn f(e: crate::store::StoreError) {}";
    assert_eq!(store_names("ui::pages", page), ["store::JobFilter"]);
}

#[test]
fn a_page_that_reads_the_store_is_found() {
    let page = "async fn show(app: &AppState) { let job = app.store.get_job(&owner, id).await; }";
    assert!(reaches_the_store("ui::pages", page).is_some());
    assert!(reaches_the_store("ui::pages", "fn f(s: &Store) {}").is_some());
    assert!(reaches_the_store("ui::pages", "fn f(e: StoreError, s: &PostgresStore) { ApiError::Store(e) }").is_none());
    assert!(reaches_the_store("http::jobs", "use crate::store::{JobFilter, Store};").is_some());
    assert!(reaches_the_store("http::mod", "self.waiting.store(true, Ordering::Relaxed);").is_none());
    assert!(reaches_the_store("http::error", "use crate::store::StoreError;").is_none());
}

/// The paths into `process` that module `name` names.
fn process_names(name: &str, text: &str) -> Vec<String> {
    let at: Vec<String> = name.split("::").map(str::to_owned).collect();
    paths(&code(text), &at).into_iter().filter(|path| path[0] == "process").map(|path| path.join("::")).collect()
}

#[test]
fn the_store_reports_what_happened_and_the_process_counts_it() {
    let modules = modules();
    let named: Vec<String> = modules
        .iter()
        .filter(|(name, _)| is_within(name, "store"))
        .flat_map(|(name, text)| process_names(name, text).into_iter().map(move |path| format!("{name}: {path}")))
        .collect();
    assert!(named.is_empty(), "the store naming the process: {named:?}");
    assert_eq!(
        process_names("store::error", "crate::process::metrics::storage_full();"),
        ["process::metrics::storage_full"]
    );
    // Failpoints have one seam, `failpoints.rs`; only `main` sets them up.
    let direct: Vec<&String> = modules
        .iter()
        .filter(|(name, text)| {
            !matches!(name.as_str(), "failpoints" | "bin::onejob::main") && code(text).contains("fail::")
        })
        .map(|(name, _)| name)
        .collect();
    assert!(direct.is_empty(), "modules reaching `fail` past `failpoints`: {direct:?}");
}

#[test]
fn no_source_file_is_longer_than_a_reader_can_hold() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crates"), &mut files);
    for file in files {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        assert!(lines <= LONGEST_FILE, "{} has {lines} lines, over {LONGEST_FILE}", file.display());
    }
}

/// The functions of a file's text longer than `most` lines, each as
/// (name, line of its `fn`, lines). The text is read by the tests' lint
/// (`lint::lex`): comments and literals do not count as code, nested
/// functions are measured on their own (and inside the one around them),
/// and functions written inside `macro_rules!` bodies are not measured.
fn long_functions(text: &str, most: usize) -> Vec<(String, usize, usize)> {
    let source = lex(text);
    let line = |offset: usize| source.bare[..offset].matches('\n').count() + 1;
    functions(&source)
        .into_iter()
        .map(|f| {
            let (first, last) = (line(f.at), line(f.close));
            (f.name, first, last - first + 1)
        })
        .filter(|&(_, _, lines)| lines > most)
        .collect()
}

/// A function's path: its file's module path (`store::postgres::catalogue`,
/// `bin::onejob::main`) and its name.
fn function_path(file: &Path, name: &str) -> String {
    let relative = file.strip_prefix(src()).unwrap().with_extension("");
    let mut segments: Vec<String> = relative.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
        segments.pop();
    }
    segments.push(name.to_owned());
    segments.join("::")
}

/// Every function with a body in every file of `src/` (the binary and the
/// unit tests included) is at most `LONGEST_FUNCTION` lines, `LONG_BY_NATURE`
/// aside.
#[test]
fn no_function_in_src_is_longer_than_80_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("bin/onejob/main.rs")), "the binary is read: {files:?}");
    let mut offenders = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (name, line, lines) in long_functions(&text, LONGEST_FUNCTION) {
            if !LONG_BY_NATURE.contains(&function_path(&file, &name).as_str()) {
                let shown = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().display();
                offenders.push(format!("{shown}:{line} {name}: {lines} lines"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "{} functions are longer than {LONGEST_FUNCTION} lines; split them:\n{}",
        offenders.len(),
        offenders.join("\n")
    );
}

#[test]
fn a_function_longer_than_80_lines_is_found() {
    let body = |lines: usize| "    step();\n".repeat(lines);
    // 80 lines and 81, a signature with a `;` in it, and neither comments
    // nor strings taken for code.
    let text = format!(
        "// fn commented() {{\nfn fits() {{\n{}}}\n\nfn hashed(hash: &[u8; 32]) -> [u8; 2] {{\n{}    let s = \"}}\";\n}}\n",
        body(78),
        body(78)
    );
    assert_eq!(long_functions(&text, 80), vec![("hashed".to_owned(), 83, 81)]);
    assert_eq!(long_functions(&text, 79).len(), 2);
    let nested = format!("impl A {{\n    fn outer() {{\n        fn inner() {{\n{}        }}\n    }}\n}}\n", body(80));
    let found: Vec<(String, usize)> = long_functions(&nested, 80).into_iter().map(|(n, _, l)| (n, l)).collect();
    assert_eq!(found, vec![("outer".to_owned(), 84), ("inner".to_owned(), 82)]);
    let catalogue = src().join("store/postgres/catalogue.rs");
    assert_eq!(function_path(&catalogue, "statements"), LONG_BY_NATURE[0]);
}
