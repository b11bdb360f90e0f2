//! Which tests of the tests' lint (`lint.rs`) reach Postgres: what
//! marks Postgres in a function, through the functions of its file, and
//! through the public functions of other files under `tests/`.

use super::{Function, Source, closing, functions, is_ident, lex, words};

/// The names of the modules (`mod NAME { … }`) around `offset`.
pub(super) fn modules_around(bare: &str, offset: usize) -> Vec<String> {
    words(bare, "mod")
        .filter_map(|at| {
            let rest = bare[at + 3..].trim_start();
            let name: String = rest.bytes().take_while(|&b| is_ident(b)).map(char::from).collect();
            let open = at + 3 + (bare[at + 3..].len() - rest.len()) + name.len();
            let open = open + bare[open..].find(|c: char| !c.is_whitespace())?;
            (bare.as_bytes()[open] == b'{' && open < offset && offset < closing(bare, open)).then_some(name)
        })
        .collect()
}

/// Names that `on_both_backends!` or `on_postgres!` turn into tests.
pub(super) fn listed_tests(bare: &str) -> Vec<String> {
    let mut names = Vec::new();
    for macro_name in ["on_both_backends!", "on_both_backends_with_a_receiver!", "on_postgres!"] {
        for (at, _) in bare.match_indices(macro_name) {
            let open = at + bare[at..].find('(').unwrap();
            let close = open + bare[open..].find(");").unwrap();
            let list = &bare[open + 1..close];
            let list = list.rsplit(';').next().unwrap();
            for name in list.split([',', '[', ']', ':']) {
                let name = name.trim();
                if !name.is_empty()
                    && name.bytes().all(is_ident)
                    && !matches!(name, "direct" | "cluster" | "receiver" | "plain")
                {
                    names.push(name.to_owned());
                }
            }
        }
    }
    names
}

/// What says that code reaches Postgres.
pub(super) fn postgres_marks(source: &Source) -> Vec<String> {
    let mut marks: Vec<String> = [
        "Backend::Postgres",
        "postgres::fresh_database",
        "postgres::empty_database",
        "postgres_store(",
        "PrivateCluster",
        "Bouncer",
        "PgPool",
        "PgConnection",
        "\"postgres://",
    ]
    .map(str::to_owned)
    .to_vec();
    // Names imported from the Postgres helpers (`use crate::common::postgres::{fresh_database, …}`).
    for (at, _) in source.bare.match_indices("common::postgres::") {
        let rest = &source.bare[at + "common::postgres::".len()..];
        let list = match rest.strip_prefix('{') {
            Some(group) => &group[..group.find('}').unwrap()],
            None => &rest[..rest.find(';').unwrap_or(0)],
        };
        for name in list.split(',').map(str::trim) {
            if !name.is_empty() && name != "self" && name.bytes().all(is_ident) {
                marks.push(format!("{name}("));
            }
        }
    }
    marks
}

/// Which of `functions` reach Postgres: by a mark, by a call of one of
/// `elsewhere`, or (`through_the_file`) by a call of another of the
/// file's that does.
pub(super) fn reaching_postgres(
    source: &Source,
    functions: &[Function],
    elsewhere: &[(String, String)],
    through_the_file: bool,
) -> Vec<bool> {
    let bare = &source.bare;
    let mut marks = postgres_marks(source);
    marks.extend(called_from_elsewhere(bare, elsewhere));
    let mut reaching: Vec<bool> = functions
        .iter()
        .map(|f| marks.iter().any(|mark| source.code[f.open..f.close].contains(mark.as_str())))
        .collect();
    let mut more = through_the_file;
    while more {
        more = false;
        for (i, function) in functions.iter().enumerate() {
            let body = &bare[function.open..function.close];
            let calls =
                |callee: &Function| words(body, &callee.name).any(|at| body[at + callee.name.len()..].starts_with('('));
            if !reaching[i] && functions.iter().zip(&reaching).any(|(callee, &r)| r && calls(callee)) {
                reaching[i] = true;
                more = true;
            }
        }
    }
    reaching
}

/// How a file calls the functions of other files' modules (`module`,
/// `name`): `module::name(`, or `name(` when a `use` of the module names it.
pub(super) fn called_from_elsewhere(bare: &str, elsewhere: &[(String, String)]) -> Vec<String> {
    let uses: Vec<&str> = words(bare, "use").map(|at| &bare[at..at + bare[at..].find(';').unwrap_or(0)]).collect();
    let mut marks = Vec::new();
    for (module, name) in elsewhere {
        marks.push(format!("{module}::{name}("));
        let path = format!("{module}::");
        if uses.iter().any(|u| u.contains(&path) && words(&u[u.find(&path).unwrap()..], name).next().is_some()) {
            marks.push(format!("{name}("));
        }
    }
    marks
}

/// The public functions (tests aside) of the files `texts` (by module
/// name) that reach Postgres by their own body, through each other across
/// the files too; not one given the backend or database to use (a
/// `Backend`, a URL, `self`): its caller's argument says which.
pub(super) fn public_functions_reaching_postgres(texts: &[(String, &String)]) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    loop {
        let before = found.len();
        for (module, text) in texts {
            let source = lex(text);
            let functions = functions(&source);
            for (function, reaches) in functions.iter().zip(reaching_postgres(&source, &functions, &found, false)) {
                let named = (module.clone(), function.name.clone());
                let signature = &source.bare[function.at..function.open];
                let parameters = &signature[signature.find('(').unwrap_or(0)..signature.rfind(')').unwrap_or(0)];
                let given = ["Backend", "url", "self"].iter().any(|p| parameters.contains(p));
                if reaches && function.public && !given && !function.is_test() && !found.contains(&named) {
                    found.push(named);
                }
            }
        }
        if found.len() == before {
            return found;
        }
    }
}
