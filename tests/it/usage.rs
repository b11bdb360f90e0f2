//! Counting the money: usage and cost per attempt as the provider reports
//! it (the simulator counts with the provider's tokenizer), estimates for
//! attempts whose usage never came, a job's cost as winner plus waste, and
//! the owner's usage report, over HTTP against the running application,
//! the worker and the simulator, on both backends.

use std::collections::BTreeMap;

use crate::common::{Backend, TestApp};
use onejob::config::{Settings, Tokenizer};
use onejob::domain::{JobId, Money, OwnerId, Price, Usage};
use onejob::provider::tokens;
use onejob::store::TaskRules;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn attempts(job: &Value) -> &Vec<Value> {
    job["attempts"].as_array().unwrap()
}

async fn create(app: &TestApp, key: &str, body: &Value) -> String {
    let response = app.post_job(key, body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

fn price_of(provider: &str) -> Price {
    Settings::builtin().providers[provider].price.clone().expect("the default simulated providers are priced")
}

fn money(value: &Value) -> Money {
    value.as_str().unwrap_or_else(|| panic!("an amount is a decimal string: {value}")).parse().unwrap()
}

/// An amount of a by-currency map: a currency with nothing spent is absent.
fn in_usd(amounts: &Value) -> Money {
    assert!(amounts.is_object(), "{amounts}");
    if amounts["USD"].is_null() { Money::ZERO } else { money(&amounts["USD"]) }
}

fn usage_of(attempt: &Value) -> Usage {
    serde_json::from_value(attempt["usage"].clone()).unwrap_or_else(|e| panic!("usage of {attempt}: {e}"))
}

/// Checks an attempt's cost against its usage and its provider's price, and returns it.
fn checked_cost(attempt: &Value) -> Money {
    let price = price_of(attempt["provider"].as_str().unwrap());
    let expected = price.cost(&usage_of(attempt));
    assert_eq!(money(&attempt["cost"]["amount"]), expected.amount, "{attempt}");
    assert_eq!(attempt["cost"]["currency"], "USD");
    assert_eq!(attempt["cost"]["price_version"], expected.price_version);
    expected.amount
}

async fn a_race_where_the_loser_finishes_wastes_the_losers_cost_and_the_job_costs_winner_plus_waste(backend: Backend) {
    // The loser runs to its answer (`cancel_losers` off).
    let app = TestApp::spawn_live(backend, |s| s.tasks.get_mut("summarize").unwrap().cancel_losers = false).await;
    let text = "the slow primary loses the race but is charged all the same";
    let id = create(&app, "race", &json!({"task": "summarize", "input": {"text": text}, "provider": "sim-slow"})).await;
    app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let job = app
        .wait_for(&id, "the loser finished", |j| {
            j["attempts"][0]["state"] == "superseded" && !j["attempts"][0]["cost"].is_null()
        })
        .await;
    let (loser, winner) = (&attempts(&job)[0], &attempts(&job)[1]);
    assert_eq!((loser["state"].as_str(), winner["state"].as_str()), (Some("superseded"), Some("succeeded")));

    // The simulator reports what the provider's tokenizer counts.
    for attempt in [loser, winner] {
        let usage = usage_of(attempt);
        assert!(!usage.estimated, "the provider reported it: {attempt}");
        let output = attempt["output"].to_string();
        assert_eq!(usage.completion_tokens as usize, tokens::count(Tokenizer::O200kBase, &output), "{attempt}");
        assert!(
            usage.prompt_tokens as usize > tokens::count(Tokenizer::O200kBase, text),
            "the prompt holds the text and its framing"
        );
    }
    let (loser_cost, winner_cost) = (checked_cost(loser), checked_cost(winner));
    assert!(loser_cost.is_positive() && winner_cost.is_positive());
    assert_ne!(loser_cost, winner_cost, "two prices: the slow provider costs more");

    let cost = &job["cost"];
    assert_eq!(money(&cost["waste"]), loser_cost, "the waste is the loser's cost");
    assert_eq!(money(&cost["winner"]), winner_cost);
    assert_eq!(money(&cost["total"]), winner_cost + loser_cost, "the job's cost is winner plus waste");
    assert_eq!(cost["currency"], "USD");
    assert_eq!(cost["estimated"], false);
}

async fn a_timed_out_attempt_is_charged_an_estimate_of_its_prompt_and_max_output_tokens(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(
        &app,
        "hang",
        &json!({"task": "summarize", "input": {"text": "never answered"}, "provider": "sim-hang"}),
    )
    .await;
    let job = app.wait_for(&id, "unknown", |j| j["attempts"][0]["state"] == "unknown").await;
    let attempt = &attempts(&job)[0];
    let usage = usage_of(attempt);
    assert!(usage.estimated, "the provider never said: {attempt}");
    assert_eq!(usage.completion_tokens, 512, "the provider's max_output_tokens: the most it could have charged");
    assert!(usage.prompt_tokens > 0);
    let cost = checked_cost(attempt);
    assert_eq!(money(&job["cost"]["waste"]), cost, "an unknown attempt is waste until it wins");
    assert_eq!(money(&job["cost"]["winner"]), Money::ZERO);
    assert_eq!(job["cost"]["estimated"], true);
}

/// The sums of `/usage` recomputed from the attempts themselves.
#[derive(Debug, Default, PartialEq)]
struct Sums {
    attempts: u64,
    prompt: i64,
    completion: i64,
    cost: Money,
    waste: Money,
}

async fn the_usage_report_groups_and_totals_match_the_attempts_table(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let mut ids = Vec::new();
    for (key, provider) in [("a", "sim-fast"), ("b", "sim-fast"), ("c", "sim-slow")] {
        let body =
            json!({"task": "summarize", "input": {"text": format!("job {key} for the report")}, "provider": provider});
        ids.push(create(&app, key, &body).await);
    }
    // A race, so that the report has waste in it.
    app.wait_for(&ids[2], "running", |j| j["state"] == "running").await;
    assert_eq!(
        app.post_attempt(&app.alice, &ids[2], "fb", &json!({"provider": "sim-fast"})).await.status(),
        StatusCode::CREATED
    );
    let mut jobs = Vec::new();
    for id in &ids {
        let all_costed = |j: &Value| j["state"] == "succeeded" && attempts(j).iter().all(|a| !a["cost"].is_null());
        jobs.push(app.wait_for(id, "every attempt costed", all_costed).await);
    }

    let mut by_provider: BTreeMap<String, Sums> = BTreeMap::new();
    let mut total = Sums::default();
    for attempt in jobs.iter().flat_map(attempts) {
        let usage = usage_of(attempt);
        let cost = checked_cost(attempt);
        for sums in [by_provider.entry(attempt["provider"].as_str().unwrap().to_owned()).or_default(), &mut total] {
            sums.attempts += 1;
            sums.prompt += usage.prompt_tokens;
            sums.completion += usage.completion_tokens;
            sums.cost += cost;
            if attempt["state"] != "succeeded" {
                sums.waste += cost;
            }
        }
    }
    assert!(total.waste.is_positive(), "the race's loser is waste");
    let sums_of = |totals: &Value| Sums {
        attempts: totals["attempts"].as_u64().unwrap(),
        prompt: totals["prompt_tokens"].as_i64().unwrap(),
        completion: totals["completion_tokens"].as_i64().unwrap(),
        cost: in_usd(&totals["cost"]),
        waste: in_usd(&totals["waste_cost"]),
    };

    let report: Value = app.get(&app.alice, "/usage?group_by=provider").await.json().await.unwrap();
    assert_eq!(sums_of(&report["total"]), total, "{report}");
    let groups: BTreeMap<String, Sums> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].as_str().unwrap().to_owned(), sums_of(g)))
        .collect();
    assert_eq!(groups, by_provider, "{report}");
    assert_eq!(in_usd(&report["total"]["winner_cost"]) + total.waste, total.cost);

    for group_by in ["task", "day"] {
        let report: Value = app.get(&app.alice, &format!("/usage?group_by={group_by}")).await.json().await.unwrap();
        assert_eq!(sums_of(&report["total"]), total, "{report}");
        let groups = report["groups"].as_array().unwrap();
        let summed: Money = groups.iter().map(|g| in_usd(&g["cost"])).sum();
        assert_eq!(summed, total.cost, "the groups add up to the total: {report}");
        if group_by == "task" {
            assert_eq!(groups.len(), 1);
            assert_eq!(groups[0]["key"], "summarize");
        }
    }

    // A range that ends before the jobs began holds none of them.
    let before: Value = app.get(&app.alice, "/usage?from=2020-01-01&to=2020-01-02").await.json().await.unwrap();
    assert_eq!(before["total"]["attempts"], 0, "{before}");
    // Another owner sees nothing of alice's.
    let bobs: Value = app.get(&app.bob, "/usage").await.json().await.unwrap();
    assert_eq!(bobs["total"]["attempts"], 0, "{bobs}");
    assert_eq!(bobs["groups"], json!([]));
    let bad = app.get(&app.alice, "/usage?group_by=owner").await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// The most one attempt of a `summarize` job with `input` may cost on `provider`.
fn worst_case(app: &TestApp, provider: &str, input: &Value) -> Money {
    app.catalog.worst_case_cost("summarize", provider, input).expect("a priced provider")
}

/// The smallest amount there is: 10⁻¹⁸.
const TICK: Money = Money::from_units(1);

async fn a_job_with_max_cost_just_below_a_second_attempts_worst_case_refuses_that_attempt_with_409_budget_exceeded(
    backend: Backend,
) {
    let app = TestApp::spawn(backend).await;
    app.qualify("sim-slow").await;
    let input = json!({"text": "a budget for two attempts, almost"});
    // The first attempt runs (claimed by hand, no usage yet): it counts at
    // its worst case until the provider says what it used.
    let two = worst_case(&app, "sim-fast", &input) + worst_case(&app, "sim-slow", &input);
    let below = Money::from_units(two.units() - TICK.units());
    let mut ids = Vec::new();
    for (key, budget) in [("below", below), ("exact", two)] {
        let body = json!({"task": "summarize", "input": input, "provider": "sim-fast", "max_cost": budget.to_string()});
        let response = app.post_job(key, &body).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let job: Value = response.json().await.unwrap();
        assert_eq!(money(&job["max_cost"]), budget);
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    crate::common::claim_all(&app).await;

    let refused = app.post_attempt(&app.alice, &ids[0], "fallback", &json!({"provider": "sim-slow"})).await;
    let problem = crate::common::expect_problem(refused, StatusCode::CONFLICT, "budget-exceeded").await;
    assert!(
        problem["detail"].as_str().unwrap().contains(&worst_case(&app, "sim-slow", &input).to_string()),
        "{problem}"
    );
    let job: Value = app.get(&app.alice, &format!("/jobs/{}", ids[0])).await.json().await.unwrap();
    assert_eq!(attempts(&job).len(), 1, "nothing was added: {job}");
    let events =
        app.store().list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(&ids[0]).unwrap()).await.unwrap();
    assert!(
        events.iter().any(|e| e.kind == "admission-refused" && e.detail["problem"] == "budget-exceeded"),
        "{events:?}"
    );

    // A budget of exactly both worst cases admits the second attempt.
    let admitted = app.post_attempt(&app.alice, &ids[1], "fallback", &json!({"provider": "sim-slow"})).await;
    assert_eq!(admitted.status(), StatusCode::CREATED);
}

async fn max_cost_is_part_of_the_intent_and_a_first_attempt_over_it_makes_no_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = json!({"text": "budgets are intents"});
    let first = worst_case(&app, "sim-fast", &input);
    let with = |budget: Value| json!({"task": "summarize", "input": input, "max_cost": budget});
    let too_small = Money::from_units(first.units() - TICK.units()).to_string();
    let response = app.post_job("tiny", &with(json!(too_small))).await;
    crate::common::expect_problem(response, StatusCode::CONFLICT, "budget-exceeded").await;
    let listed: Value = app.get(&app.alice, "/jobs").await.json().await.unwrap();
    assert_eq!(listed["jobs"], json!([]), "no job was made");

    assert_eq!(app.post_job("b", &with(json!("0.05"))).await.status(), StatusCode::CREATED);
    assert_eq!(
        app.post_job("b", &with(json!("0.050"))).await.status(),
        StatusCode::OK,
        "the same budget, written otherwise"
    );
    crate::common::expect_problem(
        app.post_job("b", &with(json!("0.06"))).await,
        StatusCode::CONFLICT,
        "idempotency-key-reused",
    )
    .await;
    let without = json!({"task": "summarize", "input": input});
    crate::common::expect_problem(app.post_job("b", &without).await, StatusCode::CONFLICT, "idempotency-key-reused")
        .await;
    for bad in [json!(0.05), json!("-1"), json!("1e-3"), json!("0.0000000000000000001")] {
        let problem = crate::common::expect_problem(
            app.post_job("bad", &with(bad.clone())).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation-failed",
        )
        .await;
        assert_eq!(problem["errors"][0]["pointer"], "/max_cost", "{bad}: {problem}");
    }
}

async fn the_failover_policy_skips_a_provider_over_the_budget_with_an_event(backend: Backend) {
    // A provider whose answers break the contract: failed, but charged. Its
    // completion tokens are free, so its cost is exactly its worst case.
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert(
            "sim-prose".into(),
            crate::common::provider(
                "kind = \"sim\"\ntokenizer = \"o200k_base\"\noutput = \"not_json\"\n\
                 price = { input_per_million = \"1.000000000001\", output_per_million = \"0\", currency = \"USD\" }",
            ),
        );
        s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-fast".into()];
    })
    .await;
    app.qualify("sim-fast").await;
    let input = json!({"text": "prose instead of JSON"});
    let budget = worst_case(&app, "sim-prose", &input);
    let body = json!({"task": "summarize", "input": input, "provider": "sim-prose", "max_cost": budget.to_string()});
    let id = create(&app, "prose", &body).await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    assert_eq!(attempts(&job).len(), 1, "the failover to sim-fast did not fit what was left: {job}");
    assert_eq!(money(&job["cost"]["total"]), budget, "the failed attempt was charged its prompt");
    let events = app.store().list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(&id).unwrap()).await.unwrap();
    let skipped = events.iter().find(|e| e.kind == "failover-skipped").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(skipped.detail["provider"], "sim-fast");
    assert!(skipped.detail["reason"].as_str().unwrap().contains("budget"), "{skipped:?}");
}

on_both_backends!(
    a_job_with_max_cost_just_below_a_second_attempts_worst_case_refuses_that_attempt_with_409_budget_exceeded,
    max_cost_is_part_of_the_intent_and_a_first_attempt_over_it_makes_no_job,
    the_failover_policy_skips_a_provider_over_the_budget_with_an_event,
    a_race_where_the_loser_finishes_wastes_the_losers_cost_and_the_job_costs_winner_plus_waste,
    a_timed_out_attempt_is_charged_an_estimate_of_its_prompt_and_max_output_tokens,
    the_usage_report_groups_and_totals_match_the_attempts_table,
);
