//! The README's references cannot drift from the code: the configuration
//! table against the settings types, `config/default.toml` and the
//! environment variables the code reads; the metric names against
//! `onejob::metrics::ALL`; the container commands against the Dockerfile.

use onejob::config::{DEFAULT_CONFIG, Settings};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(heading).unwrap_or_else(|| panic!("the README has a section {heading}"));
    let rest = &text[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
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
    let readme = readme();
    let reference = section(&readme, "## Configuration");

    // Every setting of every settings type is documented.
    let tables = [
        ("[server]\nUNKNOWN", "server."),
        ("[database]\nUNKNOWN", "database."),
        ("[worker]\nUNKNOWN", "worker."),
        ("[simulator]\nUNKNOWN", "simulator."),
        ("[tasks.t]\nUNKNOWN", "tasks.NAME."),
        ("[tasks.t.prompt]\nUNKNOWN", "tasks.NAME.prompt."),
        ("[providers.q]\nkind = \"sim\"\nUNKNOWN", "providers.NAME."),
    ];
    for (text, documented) in tables {
        let fields = fields_of(text);
        assert!(!fields.is_empty(), "{text}: {fields:?}");
        for field in fields {
            let full = format!("`{documented}{field}`");
            let short = format!("`{field}`");
            assert!(reference.contains(&full) || reference.contains(&short), "the README does not document {documented}{field}");
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
            assert!(reference.contains(&row), "the README should have the row starting {row}");
        }
    }
    Settings::builtin();

    // Every environment variable the code reads is documented.
    for file in ["src/config.rs", "src/main.rs"] {
        let code = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        for name in code.split('"').filter(|s| s.starts_with("ONEJOB_") || *s == "DATABASE_URL" || *s == "RUST_LOG") {
            assert!(reference.contains(&format!("`{name}`")), "the README does not document {name}");
        }
    }
}

#[test]
fn every_metric_is_in_the_operations_section() {
    let readme = readme();
    let operations = section(&readme, "## Operations");
    for name in onejob::metrics::ALL {
        assert!(operations.contains(name), "the README's operations section does not name {name}");
    }
}

#[test]
fn the_container_commands_are_the_ones_the_readme_documents() {
    let readme = readme();
    let operations = section(&readme, "## Operations");
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile")).unwrap();
    let compose = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docker-compose.yml")).unwrap();
    let instruction = |name: &str| -> Vec<String> {
        let line = dockerfile.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("the Dockerfile has {name}"));
        serde_json::from_str(line[name.len()..].trim()).unwrap_or_else(|e| panic!("{name} is a JSON array: {e}"))
    };
    // What `docker run` runs is what the README says it runs.
    let mut run = instruction("ENTRYPOINT");
    run.extend(instruction("CMD"));
    assert!(operations.contains(&format!("`{}`", run.join(" "))), "the README documents `{}`", run.join(" "));
    // The build command names the image the compose file uses.
    assert!(operations.contains("docker build -t onejob ."));
    assert!(dockerfile.contains("docker build -t onejob ."), "the Dockerfile says how to build it");
    assert!(compose.contains("image: onejob:latest"));
    assert!(operations.contains("docker compose up -d --build"));
    // The image runs as a user of its own, and checks its health the documented way.
    assert!(dockerfile.contains("USER onejob"));
    assert!(dockerfile.contains(r#""onejob", "probe""#) && compose.contains(r#""onejob", "probe""#));
}
