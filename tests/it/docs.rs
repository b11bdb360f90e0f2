//! The documentation cannot drift from the code: the configuration
//! reference (`docs/configuration.md`) against the settings types,
//! `config/default.toml` and the environment variables the code reads; the
//! metric names and the container commands (`docs/operations.md`) against
//! `onejob::process::metrics::ALL` and the Dockerfile; the tests the invariant table
//! (`docs/design.md`) and the other "proven by" tables name against the
//! test functions that exist; the README's size; and every relative link of
//! the README and of `docs/` against the files and headings it points at.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use onejob::config::{DEFAULT_CONFIG, Settings};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README may be at most this long: it says what onejob is and how to
/// start, and links to `docs/` for everything else.
fn read(relative: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The text of a section: from its heading line to the next heading of the
/// same or a higher level.
fn section<'a>(text: &'a str, file: &str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let start = text
        .lines()
        .scan(0, |offset, line| {
            let here = *offset;
            *offset += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| line.trim_end() == heading)
        .map(|(offset, _)| offset)
        .unwrap_or_else(|| panic!("{file} has a section {heading}"));
    let rest = &text[start + heading.len()..];
    let mut offset = 0;
    let mut fenced = false;
    for line in rest.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !fenced && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            return &rest[..offset];
        }
        offset += line.len();
    }
    rest
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The cells of a table row, `\|` kept inside its cell.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.replace("\\|", "\u{0}").split('|').map(|cell| cell.replace('\u{0}', "|").trim().to_owned()).collect()
}

/// The text of every code span (`like this`) of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The fields a settings table accepts, read from the type itself: serde
/// lists them when it meets an unknown one (`UNKNOWN` marks where).
fn fields_of(toml_text: &str) -> Vec<String> {
    let text = toml_text.replace("UNKNOWN", "no_such_setting_here = 1");
    let error = Settings::parse(&text).unwrap_err().to_string();
    let expected = error.split("expected").nth(1).unwrap_or_else(|| panic!("serde names the fields: {error}"));
    expected.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

#[test]
fn the_configuration_reference_matches_the_settings() {
    let doc = read("docs/configuration.md");
    let reference = section(&doc, "docs/configuration.md", "## Settings");

    // Every setting of every settings type is documented.
    let tables = [
        ("[server]\nUNKNOWN", "server."),
        ("[database]\nUNKNOWN", "database."),
        ("[worker]\nUNKNOWN", "worker."),
        ("[simulator]\nUNKNOWN", "simulator."),
        ("[tasks.t]\nUNKNOWN", "tasks.NAME."),
        ("[tasks.t.prompt]\nUNKNOWN", "tasks.NAME.prompt."),
        ("[providers.q]\nkind = \"sim\"\nUNKNOWN", "providers.NAME."),
        ("[webhooks]\nUNKNOWN", "webhooks."),
        ("[retention]\nUNKNOWN", "retention."),
        ("[files]\nUNKNOWN", "files."),
        ("[tasks.t.files]\nUNKNOWN", "tasks.NAME.files."),
    ];
    for (text, documented) in tables {
        let fields = fields_of(text);
        assert!(!fields.is_empty(), "{text}: {fields:?}");
        for field in fields {
            let full = format!("`{documented}{field}`");
            let short = format!("`{field}`");
            assert!(
                reference.contains(&full) || reference.contains(&short),
                "docs/configuration.md does not document {documented}{field}"
            );
        }
    }

    // Every default of the built-in configuration is the one documented.
    let defaults: toml::Table = DEFAULT_CONFIG.parse().unwrap();
    for table in ["server", "database", "worker"] {
        for (key, value) in defaults[table].as_table().unwrap() {
            let shown = match value {
                toml::Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let row = format!("| `{table}.{key}` | `{shown}` |");
            assert!(reference.contains(&row), "docs/configuration.md should have the row starting {row}");
        }
    }
    Settings::builtin();

    // Every environment variable the code reads is documented.
    for file in ["src/config.rs", "src/bin/onejob/args.rs"] {
        let code = read(file);
        for name in code.split('"').filter(|s| s.starts_with("ONEJOB_") || *s == "DATABASE_URL" || *s == "RUST_LOG") {
            assert!(reference.contains(&format!("`{name}`")), "docs/configuration.md does not document {name}");
        }
    }
}

#[test]
fn every_metric_is_in_the_operations_guide() {
    let operations = read("docs/operations.md");
    let metrics = section(&operations, "docs/operations.md", "## Metrics");
    for name in onejob::process::metrics::ALL {
        assert!(metrics.contains(&format!("`{name}")), "the metrics table of docs/operations.md does not name {name}");
    }
}

#[test]
fn the_container_commands_are_the_ones_the_operations_guide_documents() {
    let operations = read("docs/operations.md");
    let dockerfile = read("Dockerfile");
    let compose = read("docker-compose.yml");
    let instruction = |name: &str| -> Vec<String> {
        let line =
            dockerfile.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("the Dockerfile has {name}"));
        serde_json::from_str(line[name.len()..].trim()).unwrap_or_else(|e| panic!("{name} is a JSON array: {e}"))
    };
    // What `docker run` runs is what the operations guide says it runs.
    let mut run = instruction("ENTRYPOINT");
    run.extend(instruction("CMD"));
    assert!(operations.contains(&format!("`{}`", run.join(" "))), "docs/operations.md documents `{}`", run.join(" "));
    // The build command names the image the compose file uses.
    assert!(operations.contains("docker build -t onejob ."), "docs/operations.md says how to build the image");
    assert!(dockerfile.contains("docker build -t onejob ."), "the Dockerfile says how to build it");
    assert!(compose.contains("image: onejob:latest"), "the compose file runs the image the build makes");
    assert!(
        operations.contains("docker compose up -d --build"),
        "docs/operations.md says how to start the compose file"
    );
    // The image runs as a user of its own, and checks its health the documented way.
    assert!(dockerfile.contains("USER onejob"), "the image runs as a user of its own");
    assert!(dockerfile.contains(r#""onejob", "probe""#) && compose.contains(r#""onejob", "probe""#));
}

/// Every `.rs` file under `src/`, `crates/` and `tests/`, read once.
fn rust_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, found: &mut Vec<(PathBuf, String)>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "node_modules") {
                    walk(&path, found);
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                found.push((path, text));
            }
        }
    }
    let mut found = Vec::new();
    for dir in ["src", "crates", "tests"] {
        walk(&Path::new(ROOT).join(dir), &mut found);
    }
    assert!(!found.is_empty());
    found
}

/// Whether `fn NAME` is defined in one of the sources.
fn defines_fn(sources: &[(PathBuf, String)], name: &str) -> bool {
    let needle = format!("fn {name}");
    sources.iter().any(|(_, text)| {
        text.match_indices(&needle).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + needle.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && matches!(after, Some('(' | '<' | ' '))
        })
    })
}

/// Whether a module of that name exists: `NAME.rs` or a directory `NAME`.
fn module_exists(sources: &[(PathBuf, String)], name: &str) -> bool {
    sources.iter().any(|(path, _)| {
        path.file_stem().is_some_and(|stem| stem == name)
            || path.parent().and_then(Path::file_name).is_some_and(|dir| dir == name)
    })
}

/// Checks a test named as a path (`api::postgres::NAME`, or a bare `NAME`)
/// by its function name alone: module paths may change, function names do
/// not. A glob (`domain::money::tests::*`) needs its module to exist.
fn check_test_name(sources: &[(PathBuf, String)], written: &str) -> Result<(), String> {
    let segments: Vec<&str> = written.split("::").collect();
    let last = *segments.last().unwrap();
    if last == "*" {
        let module = segments.iter().rev().skip(1).find(|&&s| s != "tests" && s != "*");
        match module {
            Some(module) if module_exists(sources, module) => Ok(()),
            _ => Err(format!("`{written}`: no module of that name under src/, crates/ or tests/")),
        }
    } else if defines_fn(sources, last) {
        Ok(())
    } else {
        Err(format!("`{written}`: no `fn {last}` under src/, crates/ or tests/"))
    }
}

fn is_test_path(span: &str) -> bool {
    !span.is_empty()
        && span.split("::").all(|s| {
            s == "*" || (!s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        })
}

#[test]
fn every_test_the_invariant_table_names_exists() {
    let doc = read("docs/design.md");
    let table = section(&doc, "docs/design.md", "### Invariants and the tests that prove them");
    let rows: Vec<&str> = prose_lines(table).filter(|l| l.starts_with('|')).skip(2).collect();
    for n in 1..=8 {
        assert!(
            rows.iter().any(|row| row.starts_with(&format!("| I{n} "))),
            "the invariant table of docs/design.md has a row for I{n}"
        );
    }
    let sources = rust_sources();
    let mut names = 0;
    let mut missing = Vec::new();
    for row in &rows {
        for span in code_spans(row) {
            assert!(is_test_path(span), "the invariant table names only tests, not `{span}` ({row})");
            names += 1;
            if let Err(why) = check_test_name(&sources, span) {
                missing.push(why);
            }
        }
    }
    assert!(names >= 40, "the invariant table names its tests ({names} found)");
    assert!(
        missing.is_empty(),
        "the invariant table of docs/design.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_test_a_proven_by_column_names_exists() {
    let sources = rust_sources();
    let mut checked = 0;
    let mut missing = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(ROOT).unwrap().display().to_string();
        let mut column = None;
        let mut previous_was_row = false;
        for line in prose_lines(&text) {
            if !line.starts_with('|') {
                (column, previous_was_row) = (None, false);
                continue;
            }
            let row = cells(line);
            if !previous_was_row {
                // A table's header: is one of its columns the tests?
                column = row.iter().position(|h| h.starts_with("proven by") || h.starts_with("test"));
            } else if let Some(column) = column
                && let Some(cell) = row.get(column)
                && !cell.starts_with("---")
            {
                for span in code_spans(cell).into_iter().filter(|s| is_test_path(s)) {
                    checked += 1;
                    if let Err(why) = check_test_name(&sources, span) {
                        missing.push(format!("{name}: {why}"));
                    }
                }
            }
            previous_was_row = true;
        }
    }
    assert!(checked >= 80, "the proven-by columns name their tests ({checked} found)");
    assert!(missing.is_empty(), "the documentation names tests that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn the_readme_and_the_reference_docs_are_short() {
    for (file, most) in [("README.md", 15_000), ("docs/design.md", 32 * 1024), ("docs/performance.md", 16 * 1024)] {
        let size = read(file).len();
        assert!(size <= most, "{file} is {size} bytes, more than {most}: say less, or move the detail elsewhere");
    }
}

/// README.md and every Markdown file of `docs/`.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    let docs = std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap();
    files.extend(docs.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|ext| ext == "md")));
    files.sort();
    assert!(files.len() > 1, "docs/ holds the documentation");
    files
}

/// The anchors of a Markdown file's headings, as GitHub makes them.
fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .filter(|line| line.starts_with('#'))
        .map(|line| {
            line.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|&c| c.is_alphanumeric() || c == ' ' || c == '-' || c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// The targets of the inline links and images (`[text](target)`) of a
/// Markdown text, outside code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_owned());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn every_relative_link_points_at_a_file_that_exists() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(ROOT).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                broken.push(format!("{name}: ({target}): no such file"));
                continue;
            }
            if !anchor.is_empty() {
                let is_markdown = resolved.extension().is_some_and(|ext| ext == "md");
                let target_text = if is_markdown { std::fs::read_to_string(&resolved).unwrap() } else { String::new() };
                if !is_markdown || !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{name}: ({target}): no heading #{anchor} there"));
                }
            }
        }
    }
    assert!(checked >= 50, "the documentation links its parts ({checked} relative links found)");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The folder a Markdown link points at, from `docs/` (`[`src/store/`](../src/store)`
/// gives `src/store`), if the text starting at `link` is a link to one: its
/// target leaves `docs/` and its last segment has no extension.
fn linked_folder(link: &str) -> Option<String> {
    let target = &link[link.find("](")? + 2..];
    let target = target[..target.find(')')?].trim_end_matches('/');
    let folder = target.strip_prefix("../")?;
    (!folder.rsplit('/').next()?.contains('.')).then(|| folder.to_owned())
}

/// What the code map names in each folder's part: folder → code spans.
/// A line starting with a link to a folder starts that folder's part, up to
/// the next such line, tables aside; a table whose header links folders
/// names, for each of them, the code spans of the first cell of every row
/// whose cell under that folder is filled.
fn code_map_parts(map: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut parts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut part: Option<String> = None;
    let mut columns: Vec<Option<String>> = Vec::new();
    let mut previous_was_row = false;
    for line in prose_lines(map) {
        if line.starts_with('|') {
            let row = cells(line);
            if !previous_was_row {
                columns = row.iter().map(|header| linked_folder(header)).collect();
            } else if !row.iter().all(|cell| cell.starts_with("---")) {
                for (column, folder) in columns.iter().enumerate() {
                    if let Some(folder) = folder
                        && row.get(column).is_some_and(|cell| !cell.is_empty())
                    {
                        let names = code_spans(&row[0]).into_iter().map(str::to_owned);
                        parts.entry(folder.clone()).or_default().extend(names);
                    }
                }
            }
            previous_was_row = true;
            continue;
        }
        previous_was_row = false;
        if line.starts_with('[')
            && let Some(folder) = linked_folder(line)
        {
            part = Some(folder);
        }
        if let Some(folder) = &part {
            parts.entry(folder.clone()).or_default().extend(code_spans(line).into_iter().map(str::to_owned));
        }
    }
    parts
}

/// The files (paths from the root, `src/store/claims.rs`) that the code map
/// does not name, each with why.
fn missing_from_code_map(map: &str, files: &[String]) -> Vec<String> {
    let parts = code_map_parts(map);
    let mut missing = Vec::new();
    for file in files {
        let mut folder = Path::new(file).parent();
        let owner = loop {
            match folder {
                Some(dir) if parts.contains_key(dir.to_str().unwrap()) => break Some(dir),
                Some(dir) => folder = dir.parent(),
                None => break None,
            }
        };
        match owner {
            None => missing.push(format!("{file}: no part of the map is about its folder or one above it")),
            Some(dir) => {
                let name = Path::new(file).strip_prefix(dir).unwrap().to_str().unwrap();
                if !parts[dir.to_str().unwrap()].contains(name) {
                    missing.push(format!("{file}: `{name}` is not named in the part about {}/", dir.display()));
                }
            }
        }
    }
    missing
}

/// Every `.rs` file under `src/` and `crates/*/src/`, from the root.
fn code_map_files() -> Vec<String> {
    let mut dirs = vec![Path::new(ROOT).join("src")];
    for entry in std::fs::read_dir(Path::new(ROOT).join("crates")).unwrap() {
        dirs.push(entry.unwrap().path().join("src"));
    }
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.into_iter().filter(|dir| dir.is_dir()).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                found.push(path.strip_prefix(ROOT).unwrap().to_str().unwrap().to_owned());
            }
        }
    }
    found.sort();
    found
}

/// The rule of `docs/code-map.md`: every `.rs` file under `src/` and
/// `crates/*/src/` is named as a code span of its path from its folder's
/// part (`claims.rs`, `app/database.rs`), in the part about its own folder
/// or, when that has none, about the nearest folder above it that has one.
/// A folder's part runs from a line starting with a link to the folder
/// (`[`src/store/`](../src/store)`) to the next such line, tables aside; a
/// table whose header links a folder names that folder's files in the first
/// cell of each row whose cell under that folder is filled.
#[test]
fn every_source_file_is_in_the_code_map() {
    let files = code_map_files();
    assert!(files.iter().any(|f| f == "src/lib.rs") && files.iter().any(|f| f.starts_with("crates/")), "{files:?}");
    let missing = missing_from_code_map(&read("docs/code-map.md"), &files);
    assert!(
        missing.is_empty(),
        "docs/code-map.md does not name {} source files (see its first paragraph for where each goes):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn the_code_map_rule_finds_a_missing_file() {
    let map = "# Code map\n\n[`src/`](../src):\n\n- `lib.rs` the modules, `app/database.rs` the database\n\n\
               [`src/store/`](../src/store) ([design](design.md)): `claims.rs`, `driver/claiming.rs`.\n\
               Also `jobs`, as a word.\n\n\
               | backend file | [`postgres/`](../src/store/postgres) | [`sqlite/`](../src/store/sqlite) |\n\
               |---|---|---|\n\
               | `claims.rs` | claims | the same |\n\
               | `tx.rs` | | the write transaction |\n\n\
               [`src/jobs/`](../src/jobs): `mod.rs`.\n\nOutside `src/`: [`bench/`](../bench), `tx.rs`.\n";
    let files: Vec<String> = [
        "src/lib.rs",
        "src/app/database.rs",
        "src/app/other.rs",
        "src/store/claims.rs",
        "src/store/driver/claiming.rs",
        "src/store/jobs.rs",
        "src/store/postgres/claims.rs",
        "src/store/postgres/tx.rs",
        "src/store/sqlite/tx.rs",
        "src/store/sqlite/keys.rs",
        "src/jobs/mod.rs",
        "src/jobs/claims.rs",
        "crates/onejob-domain/src/lib.rs",
    ]
    .map(str::to_owned)
    .to_vec();
    let why = missing_from_code_map(map, &files);
    let missing: Vec<&str> = why.iter().map(|why| why.split(':').next().unwrap()).collect();
    let expected = [
        "src/app/other.rs",
        "src/store/jobs.rs",
        "src/store/postgres/tx.rs",
        "src/store/sqlite/keys.rs",
        "src/jobs/claims.rs",
        "crates/onejob-domain/src/lib.rs",
    ];
    assert_eq!(missing, expected, "{why:#?}");
}

/// One account of the roles: `KeyRole::reaches`, which the sign-in page
/// renders, is the roles table of docs/api.md row by row, and the
/// configuration and dashboard docs point at that table.
#[test]
fn the_roles_table_is_the_one_the_sign_in_page_shows_and_the_docs_point_at() {
    let api = read("docs/api.md");
    for role in onejob::domain::KeyRole::ALL {
        let row = format!("| {} | {} |", role.as_str(), role.reaches());
        assert!(api.lines().any(|line| line == row), "docs/api.md lacks the row {row}");
    }
    for file in ["docs/configuration.md", "docs/dashboard.md"] {
        assert!(read(file).contains("(api.md#keys-roles-and-revocation)"), "{file} does not point at the roles table");
    }
}
