//! Citus-ready by construction, checked on a real Postgres with the
//! migrated schema: the sharding plan (`deploy/citus/distribute.sql`) names
//! every table; every key of a table distributed by `owner_id` leads with
//! it; and every statement the Postgres store sends (its catalogue,
//! `store::postgres::statements`) either is routed to one owner by
//! `owner_id = $n` on every distributed table it touches, or is one of the
//! cross-owner statements listed with why (`store::postgres::CROSS_OWNER`).
//! Routing is read from Postgres's own generic plan of each statement, not
//! from its text: the planner's equality classes carry `owner_id = $1`
//! across joins on `owner_id`, so a scan that is not pinned to the owner is
//! a scan that a sharded database would send to every shard.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sqlx::{Connection, PgConnection};

use crate::common::postgres::fresh_database;

const PLAN: &str = include_str!("../../deploy/citus/distribute.sql");

/// The tables the plan distributes by owner, and its reference tables.
fn planned() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut distributed = BTreeSet::new();
    let mut reference = BTreeSet::new();
    for line in PLAN.lines() {
        let named = |call: &str| line.strip_prefix(call).and_then(|rest| rest.split('\'').next()).map(str::to_owned);
        if let Some(table) = named("select create_distributed_table('") {
            assert!(line.contains(&format!("('{table}', 'owner_id'")), "{table} is distributed by owner_id: {line}");
            assert!(distributed.insert(table.clone()), "{table} is planned once");
        } else if let Some(table) = named("select create_reference_table('") {
            assert!(reference.insert(table.clone()), "{table} is planned once");
        }
    }
    assert!(distributed.is_disjoint(&reference), "no table is both distributed and a reference table");
    (distributed, reference)
}

async fn connect() -> PgConnection {
    PgConnection::connect(&fresh_database().await).await.expect("connect to the test database")
}

async fn schema_tables(db: &mut PgConnection) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>(
        "select tablename::text from pg_tables where schemaname = 'public' and tablename <> '_sqlx_migrations'",
    )
    .fetch_all(db)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

async fn every_table_is_planned_as_distributed_by_owner_or_as_a_reference_table() {
    let mut db = connect().await;
    let (distributed, reference) = planned();
    let planned: BTreeSet<String> = distributed.union(&reference).cloned().collect();
    assert_eq!(schema_tables(&mut db).await, planned, "the plan names exactly the schema's tables");
    // Colocation needs the same distribution column type everywhere.
    let types: Vec<(String, String, bool)> = sqlx::query_as(
        "select c.table_name::text, c.data_type::text, c.is_nullable = 'NO' from information_schema.columns c
         where c.table_schema = 'public' and c.column_name = 'owner_id'",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    for table in &distributed {
        let column = types.iter().find(|(t, _, _)| t == table);
        assert_eq!(
            column.map(|(_, ty, not_null)| (ty.as_str(), *not_null)),
            Some(("text", true)),
            "{table} has owner_id text not null"
        );
    }
}

async fn every_key_of_an_owners_table_holds_owner_id_and_every_identity_is_bigint() {
    let mut db = connect().await;
    let (distributed, reference) = planned();
    // Primary keys, unique constraints and unique indexes (partial ones
    // too), with their first column and whether owner_id is one of them.
    let unique: Vec<(String, String, String, bool, bool)> = sqlx::query_as(
        "select t.relname::text, i.relname::text, a.attname::text, x.indisprimary,
                exists (select from pg_attribute o
                        where o.attrelid = t.oid and o.attname = 'owner_id' and o.attnum = any(x.indkey))
         from pg_index x
         join pg_class t on t.oid = x.indrelid
         join pg_class i on i.oid = x.indexrelid
         join pg_namespace n on n.oid = t.relnamespace
         join pg_attribute a on a.attrelid = t.oid and a.attnum = x.indkey[0]
         where n.nspname = 'public' and x.indisunique",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut keyed = BTreeSet::new();
    for (table, index, first, primary, holds_owner) in &unique {
        if distributed.contains(table) {
            // Citus's condition: every unique key holds the distribution
            // column. A primary key leads with it, so that an owner's rows
            // are found by their key; a unique key that only guards
            // uniqueness (`attempts_id_owner`) may lead with the id.
            assert!(holds_owner, "{index}, a unique key of {table}, holds owner_id");
            if *primary {
                assert_eq!(first, "owner_id", "{index}, the primary key of {table}, leads with owner_id");
            }
            keyed.insert(table.clone());
        }
    }
    for table in &distributed {
        assert!(keyed.contains(table), "{table} is distributed and has no unique key: {unique:?}");
    }
    // Foreign keys: between distributed tables through owner_id first; none
    // from a reference table to a distributed one (Citus refuses those).
    let foreign: Vec<(String, String, String, String)> = sqlx::query_as(
        "select c.conname::text, t.relname::text, r.relname::text, a.attname::text
         from pg_constraint c
         join pg_class t on t.oid = c.conrelid
         join pg_class r on r.oid = c.confrelid
         join pg_attribute a on a.attrelid = t.oid and a.attnum = c.conkey[1]
         where c.contype = 'f' and t.relnamespace = 'public'::regnamespace",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    assert!(!foreign.is_empty());
    for (name, table, referenced, first) in &foreign {
        if distributed.contains(table) && distributed.contains(referenced) {
            assert_eq!(first, "owner_id", "{name}: {table} → {referenced} leads with owner_id");
        }
        assert!(
            !(reference.contains(table) && distributed.contains(referenced)),
            "{name}: a reference table ({table}) may not refer to a distributed one ({referenced})"
        );
    }
    // Citus generates identity and sequence values on every node only for bigint.
    let generated: Vec<(String, String, String)> = sqlx::query_as(
        "select table_name::text, column_name::text, data_type::text from information_schema.columns
         where table_schema = 'public' and (is_identity = 'YES' or column_default like 'nextval(%')",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    for (table, column, ty) in &generated {
        assert_eq!(ty, "bigint", "{table}.{column} is generated and so must be bigint");
    }
}

/// How a statement's generic plan touches the distributed tables.
#[derive(Debug, Default)]
struct Routing {
    /// The owner parameter of each pinned scan or insert (`$n` → n).
    owners: BTreeSet<u32>,
    /// Scans or inserts of a distributed table not pinned to one owner.
    unpinned: Vec<String>,
    /// Whether it touches a distributed table at all.
    touches: bool,
}

impl Routing {
    fn routed(&self) -> bool {
        self.touches && self.unpinned.is_empty() && self.owners.len() == 1
    }
}

/// `$n` from a parameter as a plan prints it: `$1`, `($1)::text`.
fn parameter(expression: &str) -> Option<u32> {
    let bare = expression.trim().trim_start_matches('(').replace(")::text", "").replace("::text", "");
    bare.trim_end_matches(')').strip_prefix('$')?.parse().ok()
}

/// The top-level conjuncts of a plan's condition, `((a = 1) AND (b = 2))`.
fn conjuncts(condition: &str) -> Vec<String> {
    fn unwrap(text: &str) -> &str {
        let text = text.trim();
        if text.starts_with('(') && text.ends_with(')') {
            let mut depth = 0;
            for (i, c) in text.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 && i < text.len() - 1 {
                    return text;
                }
            }
            return unwrap(&text[1..text.len() - 1]);
        }
        text
    }
    let text = unwrap(condition);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b' ' if depth == 0 && text[i..].starts_with(" AND ") => {
                parts.push(unwrap(&text[start..i]).to_owned());
                start = i + 5;
                i += 4;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(unwrap(&text[start..]).to_owned());
    parts
}

/// The owner parameter a scan's conditions pin it to, if any.
fn pinned_owner(node: &Value) -> Option<u32> {
    let mut conditions: Vec<&str> =
        ["Index Cond", "Filter", "Recheck Cond", "TID Cond"].iter().filter_map(|key| node[*key].as_str()).collect();
    for child in node["Plans"].as_array().into_iter().flatten() {
        if child["Node Type"].as_str().is_some_and(|t| t.starts_with("Bitmap")) {
            conditions.extend(child["Index Cond"].as_str());
        }
    }
    conditions.iter().flat_map(|c| conjuncts(c)).find_map(|conjunct| {
        let (column, value) = conjunct.split_once(" = ")?;
        let plain = column.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        (plain && column.rsplit('.').next() == Some("owner_id")).then(|| parameter(value)).flatten()
    })
}

fn walk(node: &Value, distributed: &BTreeSet<String>, columns: &BTreeMap<String, Vec<String>>, routing: &mut Routing) {
    let relation = node["Relation Name"].as_str().filter(|r| distributed.contains(*r));
    let kind = node["Node Type"].as_str().unwrap_or_default();
    if let Some(table) = relation {
        routing.touches = true;
        if kind == "ModifyTable" && node["Operation"] == "Insert" {
            // The inserted rows' owner: the subplan's output in column order.
            let position = columns[table].iter().position(|c| c == "owner_id").expect("owner_id column");
            let output = node["Plans"][0]["Output"].as_array().and_then(|o| o.get(position)).and_then(Value::as_str);
            match output.and_then(parameter) {
                Some(owner) => {
                    routing.owners.insert(owner);
                }
                None => routing.unpinned.push(format!("insert into {table} with owner {output:?}")),
            }
        } else if kind != "ModifyTable" {
            match pinned_owner(node) {
                Some(owner) => {
                    routing.owners.insert(owner);
                }
                None => routing.unpinned.push(format!("{kind} on {table}")),
            }
        }
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        walk(child, distributed, columns, routing);
    }
}

/// Postgres's generic plan of `sql` (parameters unbound).
async fn generic_plan(db: &mut PgConnection, sql: &str) -> Value {
    let parameters = (1..=32).rev().find(|n| sql.contains(&format!("${n}"))).unwrap_or(0);
    sqlx::raw_sql(&format!("prepare routed as {sql}")).execute(&mut *db).await.unwrap_or_else(|e| panic!("{e}: {sql}"));
    let nulls = vec!["null"; parameters].join(", ");
    let arguments = if parameters == 0 { String::new() } else { format!("({nulls})") };
    let explain = format!("explain (verbose, format json) execute routed{arguments}");
    let plan: Value = sqlx::query_scalar(&explain).fetch_one(&mut *db).await.unwrap_or_else(|e| panic!("{e}: {sql}"));
    sqlx::raw_sql("deallocate routed").execute(&mut *db).await.unwrap();
    plan[0]["Plan"].clone()
}

async fn routing_of_every_statement() -> BTreeMap<&'static str, Routing> {
    let mut db = connect().await;
    let (distributed, _) = planned();
    sqlx::raw_sql("set plan_cache_mode = force_generic_plan").execute(&mut db).await.unwrap();
    let mut columns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for table in &distributed {
        let names: Vec<String> = sqlx::query_scalar(
            "select attname::text from pg_attribute where attrelid = $1::regclass and attnum > 0 and not attisdropped
             order by attnum",
        )
        .bind(table)
        .fetch_all(&mut db)
        .await
        .unwrap();
        columns.insert(table.clone(), names);
    }
    let mut routes = BTreeMap::new();
    for (name, sql) in onejob::store::postgres::statements() {
        let mut routing = Routing::default();
        if sql.trim_start().starts_with("set ") {
            // Session settings plan nothing and touch no table.
            assert!(!distributed.iter().any(|t| sql.contains(t.as_str())), "{name}");
        } else {
            walk(&generic_plan(&mut db, sql).await, &distributed, &columns, &mut routing);
        }
        assert!(routes.insert(name, routing).is_none(), "{name} is in the catalogue once");
    }
    routes
}

async fn every_statement_on_an_owners_tables_is_routed_by_its_owner_id_unless_listed_as_cross_owner() {
    let routes = routing_of_every_statement().await;
    let listed: BTreeMap<&str, &str> = onejob::store::postgres::CROSS_OWNER.iter().copied().collect();
    for name in listed.keys() {
        assert!(routes.contains_key(name), "the cross-owner list names a statement of the catalogue: {name}");
    }
    let mut routed = 0;
    let mut wrong = Vec::new();
    for (name, routing) in &routes {
        if listed.contains_key(name) {
            if !routing.touches || routing.routed() {
                wrong.push(format!(
                    "{name} is listed as cross-owner but is routed to one owner or touches no owner's table"
                ));
            }
        } else if routing.touches {
            if !routing.routed() {
                wrong.push(format!("{name} must filter every distributed table by one owner_id = $n: {routing:?}"));
            }
            routed += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The hot path among them, by name.
    let hot = [
        "CREATE_JOBS",
        "GET_JOB",
        "FIND_JOB_BY_KEY",
        "SETTLE_WITH_OUTPUT",
        "LOCK_JOB",
        "RECORD_USAGE",
        "INSERT_ATTEMPT",
    ];
    for name in hot.map(|name| format!("sql::{name}")) {
        assert!(routes[name.as_str()].routed(), "{name} is routed by its owner");
    }
    assert!(routed >= 30, "most statements are per owner ({routed})");
}

/// The store's SQL is in named constants only, so the catalogue can list it all.
#[test]
fn every_statement_of_the_postgres_store_is_in_its_catalogue() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let names: BTreeSet<String> = onejob::store::postgres::statements()
        .into_iter()
        .map(|(name, _)| name.rsplit("::").next().unwrap().to_owned())
        .collect();
    let not_statements = ["KEY_CHANNEL", "KEY_ACK_CHANNEL", "ATTEMPT_COLUMNS"];
    let mut files: Vec<_> = std::fs::read_dir(root.join("postgres")).unwrap().map(|e| e.unwrap().path()).collect();
    files.push(root.join("shared.rs"));
    // rows.rs builds the reads both databases share; its constants are
    // fragments and state names, not statements.
    files.push(root.join("rows.rs"));
    for file in files {
        let declares_statements = !file.ends_with("rows.rs");
        let source = std::fs::read_to_string(&file).unwrap();
        let source = source.split("#[cfg(test)]").next().unwrap();
        // What each `sqlx::query…(` is given, across lines: a name, never
        // a literal or a string built in place.
        for (at, _) in source.match_indices("sqlx::query") {
            let call = &source[at..];
            let argument = call[call.find('(').unwrap() + 1..].trim_start();
            assert!(
                !(argument.starts_with("r#\"") || argument.starts_with('"') || argument.starts_with("&format!")),
                "{}: SQL written inline, not as a named constant of the catalogue: {:.80}",
                file.display(),
                call
            );
        }
        for line in source.lines() {
            let code = line.trim_start();
            for declared in ["const ", "static "].into_iter().filter(|_| declares_statements) {
                let Some(rest) = code
                    .strip_prefix("pub(super) ")
                    .or(code.strip_prefix("pub(crate) "))
                    .or(code.strip_prefix("pub "))
                    .unwrap_or(code)
                    .strip_prefix(declared)
                else {
                    continue;
                };
                let Some((name, ty)) = rest.split_once(':') else { continue };
                let is_sql_type =
                    ty.trim_start().starts_with("&str") || ty.trim_start().starts_with("LazyLock<String>");
                if is_sql_type
                    && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    && !not_statements.contains(&name)
                {
                    assert!(
                        names.contains(name),
                        "{}: {name} is missing from store::postgres::statements()",
                        file.display()
                    );
                }
            }
        }
    }
}

#[test]
fn the_condition_reader_splits_conjuncts_and_reads_parameters() {
    assert_eq!(conjuncts("((a.owner_id = $1) AND (a.id = $2))"), vec!["a.owner_id = $1", "a.id = $2"]);
    assert_eq!(conjuncts("(($1 IS NULL) OR (owner_id = $1))"), vec!["($1 IS NULL) OR (owner_id = $1)"]);
    assert_eq!(parameter("($1)::text"), Some(1));
    assert_eq!(parameter("$12"), Some(12));
    assert_eq!(parameter("new_job.owner_id"), None);
    let either = serde_json::json!({"Filter": "((($1 IS NULL) OR (jobs.owner_id = $1)) AND (jobs.id = $2))"});
    assert_eq!(pinned_owner(&either), None, "a disjunction pins nothing");
    let pinned = serde_json::json!({"Index Cond": "((jobs.owner_id = $1) AND (jobs.id = $2))"});
    assert_eq!(pinned_owner(&pinned), Some(1));
}

on_postgres!(
    every_table_is_planned_as_distributed_by_owner_or_as_a_reference_table,
    every_key_of_an_owners_table_holds_owner_id_and_every_identity_is_bigint,
    every_statement_on_an_owners_tables_is_routed_by_its_owner_id_unless_listed_as_cross_owner
);
