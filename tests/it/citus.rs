//! Citus-ready by construction, checked on the migrated schema: the
//! sharding plan (`store::postgres::SHARDING`) names every table; every key
//! of a table distributed by `owner_id` leads with it; and every statement
//! the Postgres store sends (its catalogue, `store::postgres::statements`)
//! either is routed to one owner by `owner_id = $n` on every distributed
//! table it touches, or is one of the cross-owner statements listed with
//! why (`store::postgres::CROSS_OWNER`).
//!
//! On a plain Postgres, routing is read from Postgres's own generic plan of
//! each statement, not from its text: the planner's equality classes carry
//! `owner_id = $1` across joins on `owner_id`, so a scan that is not pinned
//! to the owner is a scan that a sharded database would send to every
//! shard. On a Citus cluster (`ONEJOB_TEST_CITUS`), Citus's own plan of
//! each statement says it: one task, on one shard.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sqlx::{Connection, PgConnection};

use onejob::store::postgres::Placement;

use crate::common::postgres::fresh_database;

/// The tables the store distributes by owner on Citus, and its reference tables.
fn planned() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut distributed, mut reference) = (BTreeSet::new(), BTreeSet::new());
    for (table, placement) in onejob::store::postgres::SHARDING {
        let set = match placement {
            Placement::ByOwner => &mut distributed,
            Placement::Reference => &mut reference,
        };
        assert!(set.insert(table.to_string()), "{table} is placed once");
    }
    assert!(distributed.is_disjoint(&reference), "no table is both distributed and a reference table");
    let first = onejob::store::postgres::SHARDING.iter().find(|(_, placement)| *placement == Placement::ByOwner);
    assert_eq!(
        first.map(|(table, _)| *table),
        Some("jobs"),
        "jobs, which the others are co-located with, is placed first"
    );
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
            // A parameter, or the owner column of a scan in the insert's own
            // source that is pinned to one owner (`insert … select s.owner_id
            // from … s where s.owner_id = $1`), which that scan's own routing
            // counts.
            let from_pinned_scan = output
                .and_then(|o| o.strip_suffix(".owner_id"))
                .is_some_and(|alias| pinned_aliases(&node["Plans"][0], distributed).contains(alias));
            match output.and_then(parameter) {
                Some(owner) => {
                    routing.owners.insert(owner);
                }
                None if from_pinned_scan => {}
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

/// The aliases of the scans of distributed tables under `node` that are
/// pinned to one owner.
fn pinned_aliases(node: &Value, distributed: &BTreeSet<String>) -> BTreeSet<String> {
    let mut aliases = BTreeSet::new();
    let table = node["Relation Name"].as_str().filter(|r| distributed.contains(*r));
    if table.is_some() && node["Node Type"] != "ModifyTable" && pinned_owner(node).is_some() {
        aliases.extend(node["Alias"].as_str().map(str::to_owned));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        aliases.extend(pinned_aliases(child, distributed));
    }
    aliases
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
        } else if onejob::store::postgres::PLACEMENT_STATEMENTS.contains(&name) {
            // Citus's own functions, on its catalogue, when `migrate` places the tables.
            assert!(sql.contains("pg_dist_") || sql.contains("citus") || sql.contains("_table("), "{name}");
        } else {
            walk(&generic_plan(&mut db, sql).await, &distributed, &columns, &mut routing);
        }
        assert!(routes.insert(name, routing).is_none(), "{name} is in the catalogue once");
    }
    routes
}

async fn every_statement_on_an_owners_tables_is_routed_by_its_owner_id_unless_listed_as_cross_owner() {
    let mut db = connect().await;
    let on_citus: bool = sqlx::query_scalar("select exists (select 1 from pg_extension where extname = 'citus')")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let routed = if on_citus { routed_by_citus(&mut db).await } else { routed_by_generic_plans().await };
    assert!(routed >= 30, "most statements are per owner ({routed})");
}

/// On a plain Postgres: each statement's generic plan, read for its owner
/// filters. Returns how many statements are routed to one owner.
async fn routed_by_generic_plans() -> usize {
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
    routed
}

/// A value of a parameter's type, for a plan with values: every text is
/// the owner `alice`, so whichever parameter is the owner, it is one owner.
fn sample(ty: &str) -> String {
    let (element, array) = match ty.strip_suffix("[]") {
        Some(element) => (element, true),
        None => (ty, false),
    };
    let value = match element {
        "text" | "character varying" | "unknown" => "'alice'",
        "uuid" => "'00000000-0000-0000-0000-000000000001'",
        "smallint" | "integer" | "bigint" | "double precision" | "real" | "numeric" => "1",
        "boolean" => "true",
        "jsonb" | "json" => "'{}'",
        "bytea" => "'\\x00'",
        "timestamp with time zone" => "'2026-01-01T00:00:00Z'",
        "interval" => "'1 s'",
        other => panic!("no sample value for a parameter of type {other}"),
    };
    if array { format!("array[{value}::{element}]") } else { format!("{value}::{element}") }
}

/// Citus's plan of `sql` with a value for every parameter: the distributed
/// scans it makes, each as (tasks, subplans it runs first), or the error
/// of a statement Citus cannot plan.
async fn citus_plan(db: &mut PgConnection, sql: &str) -> Result<Vec<(u64, usize)>, String> {
    sqlx::raw_sql(&format!("prepare routed as {sql}")).execute(&mut *db).await.map_err(|e| e.to_string())?;
    let types: Vec<String> =
        sqlx::query_scalar("select unnest(parameter_types)::text from pg_prepared_statements where name = 'routed'")
            .fetch_all(&mut *db)
            .await
            .unwrap();
    let values: Vec<String> = types.iter().map(|ty| sample(ty)).collect();
    let arguments = if values.is_empty() { String::new() } else { format!("({})", values.join(", ")) };
    let plan: Result<Value, _> =
        sqlx::query_scalar(&format!("explain (format json) execute routed{arguments}")).fetch_one(&mut *db).await;
    sqlx::raw_sql("deallocate routed").execute(&mut *db).await.unwrap();
    let plan = plan.map_err(|e| e.to_string())?;
    // Every distributed scan, at any depth: the statement's own and those
    // of the subplans Citus runs first (a CTE it cannot send along).
    fn scans(value: &Value, found: &mut Vec<(u64, usize)>) {
        if value["Custom Plan Provider"] == "Citus Adaptive" {
            let query = &value["Distributed Query"];
            let subplans = query["Subplans"].as_array().map_or(0, Vec::len);
            found.push((query["Job"]["Task Count"].as_u64().unwrap_or(0), subplans));
        }
        match value {
            Value::Object(map) => map.values().for_each(|v| scans(v, found)),
            Value::Array(items) => items.iter().for_each(|v| scans(v, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    scans(&plan, &mut found);
    Ok(found)
}

/// The statements of one owner that Citus sends to the owner's shard in
/// several steps rather than one.
const IN_STEPS_ON_CITUS: &[&str] = &[
    "sql::CREATE_JOBS",
    "sql::SETTLE_WITH_OUTPUT",
    "sql::SETTLE_OUTPUTS",
    "claims::START_ATTEMPTS",
    "pieces::APPEND_TO_HELD_OUTPUTS",
];

/// On Citus: every statement of the catalogue is planned by Citus (but
/// those the store sends only on plain Postgres, which Citus refuses), and
/// each that is not cross-owner and touches an owner's table is sent to
/// one shard: every distributed scan of its plan, as Citus's `EXPLAIN`
/// shows it, is one task. Returns how many statements are routed to one
/// owner.
async fn routed_by_citus(db: &mut PgConnection) -> usize {
    let (distributed, _) = planned();
    let listed: BTreeSet<&str> = onejob::store::postgres::CROSS_OWNER.iter().map(|(name, _)| *name).collect();
    let replaced: BTreeSet<&str> = onejob::store::postgres::REPLACED_ON_CITUS.iter().map(|(name, _)| *name).collect();
    sqlx::raw_sql("set plan_cache_mode = force_custom_plan").execute(&mut *db).await.unwrap();
    let words = |sql: &str| -> BTreeSet<String> {
        sql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(str::to_owned).collect()
    };
    let (mut wrong, mut routed, mut steps) = (Vec::new(), 0, BTreeMap::new());
    for (name, sql) in onejob::store::postgres::statements() {
        if sql.trim_start().starts_with("set ") || onejob::store::postgres::PLACEMENT_STATEMENTS.contains(&name) {
            continue;
        }
        let plan = citus_plan(db, sql).await;
        if replaced.contains(name) {
            if plan.is_ok() {
                wrong.push(format!("{name} is sent only off Citus, yet Citus plans it"));
            }
            continue;
        }
        let scans = match plan {
            Ok(scans) => scans,
            Err(error) => {
                wrong.push(format!("Citus cannot plan {name}: {error}"));
                continue;
            }
        };
        let touches = !words(sql).is_disjoint(&distributed);
        if touches && !listed.contains(name) {
            if scans.is_empty() || scans.iter().any(|(tasks, _)| *tasks != 1) {
                wrong.push(format!("{name} is not sent to one shard on Citus: (tasks, subplans) {scans:?}"));
            } else if scans.iter().any(|(_, subplans)| *subplans > 0) {
                steps.insert(name, 1 + scans.iter().map(|(_, subplans)| subplans).sum::<usize>());
            }
            routed += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // One shard, but in several steps: Citus runs a part it cannot send
    // along (an insert from an array, a CTE it cannot push down) as a
    // subplan first, each its own round trip to the owner's worker
    // (docs/scaling.md lists them).
    let in_steps: BTreeSet<&str> = steps.keys().copied().collect();
    assert_eq!(in_steps, IN_STEPS_ON_CITUS.iter().copied().collect(), "the statements in steps: {steps:?}");
    routed
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
