//! The alert rules (deploy/prometheus/alerts.yml) against what onejob
//! exports: alerts_test.yml tests the rules on series it makes up, so a
//! metric or a label renamed in the product (or mistyped in a rule) would
//! leave an alert that can never fire. Here a real `onejob serve` runs a
//! job, and its `/metrics` must have every metric each rule reads, with
//! every label the rule matches, groups by or names in its annotations.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::prometheus::{Sample, scrape};

const RULES: &str = include_str!("../../../deploy/prometheus/alerts.yml");

/// Labels Prometheus adds at the scrape, not onejob.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Label values that only a request answered so makes appear (an HTTP
/// status): their label's name is checked, not the value.
const PER_REQUEST_VALUES: [(&str, &str); 1] = [("onejob_http_requests_total", "status")];

/// One alert rule: its name, its expression, and every line of it (for the
/// `$labels.…` of its annotations).
#[derive(Debug)]
struct Rule {
    name: String,
    expr: String,
    text: String,
}

/// The rules of alerts.yml: each `- alert:` item, its `expr` inline or a
/// block scalar (`|`, `>-`) of the lines indented under it.
fn rules(yaml: &str) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut block: Option<usize> = None;
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert:") {
            rules.push(Rule { name: name.trim().to_owned(), expr: String::new(), text: String::new() });
            block = None;
            continue;
        }
        let Some(rule) = rules.last_mut() else { continue };
        rule.text.push_str(line);
        rule.text.push('\n');
        match block {
            Some(key_indent) if trimmed.is_empty() || indent > key_indent => {
                rule.expr.push_str(trimmed);
                rule.expr.push(' ');
                continue;
            }
            _ => block = None,
        }
        if let Some(expr) = trimmed.strip_prefix("expr:") {
            match expr.trim() {
                "|" | "|-" | ">" | ">-" => block = Some(indent),
                inline => rule.expr = inline.to_owned(),
            }
        }
    }
    rules
}

/// A label matcher of a selector: label, operator, value.
type Matcher = (String, String, String);

/// What an expression reads: each `onejob_…` selector with its matchers,
/// and the labels of its `by`/`without` clauses.
#[derive(Debug, Default)]
struct Reads {
    selectors: Vec<(String, Vec<Matcher>)>,
    grouped_by: BTreeSet<String>,
}

fn reads(expr: &str) -> Reads {
    let mut reads = Reads::default();
    // A quantile of buckets needs their upper bounds.
    if expr.contains("histogram_quantile") {
        reads.grouped_by.insert("le".to_owned());
    }
    let chars: Vec<char> = expr.chars().collect();
    let word = |at: usize| {
        let end = (at..chars.len()).find(|&i| !(chars[i].is_alphanumeric() || chars[i] == '_')).unwrap_or(chars.len());
        (chars[at..end].iter().collect::<String>(), end)
    };
    let skip_spaces = |mut at: usize| {
        while at < chars.len() && chars[at] == ' ' {
            at += 1;
        }
        at
    };
    let mut at = 0;
    while at < chars.len() {
        if chars[at] == '"' {
            at =
                (at + 1..chars.len()).find(|&i| chars[i] == '"' && chars[i - 1] != '\\').map_or(chars.len(), |i| i + 1);
            continue;
        }
        if !(chars[at].is_alphabetic() || chars[at] == '_') || (at > 0 && chars[at - 1].is_alphanumeric()) {
            at += 1;
            continue;
        }
        let (name, end) = word(at);
        let next = skip_spaces(end);
        let closing = |open: char, close: char| {
            (next < chars.len() && chars[next] == open)
                .then(|| (next..chars.len()).find(|&i| chars[i] == close).expect("a closed bracket"))
        };
        if name.starts_with("onejob_") {
            let mut matchers = Vec::new();
            if let Some(close) = closing('{', '}') {
                let inside: String = chars[next + 1..close].iter().collect();
                for matcher in inside.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                    let op_at = matcher.find(['=', '!']).expect("a label matcher");
                    let op_end = op_at + matcher[op_at..].find('"').expect("a quoted value");
                    let value = matcher[op_end..].trim_matches('"');
                    matchers.push((
                        matcher[..op_at].trim().to_owned(),
                        matcher[op_at..op_end].to_owned(),
                        value.to_owned(),
                    ));
                }
                at = close + 1;
            } else {
                at = end;
            }
            reads.selectors.push((name, matchers));
        } else if name == "by" || name == "without" {
            let close = closing('(', ')').expect("a label list after by/without");
            let labels: String = chars[next + 1..close].iter().collect();
            reads.grouped_by.extend(labels.split(',').map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()));
            at = close + 1;
        } else {
            at = end;
        }
    }
    reads
}

/// What `rule` reads that `samples` do not have, one line each.
fn unexported(rule: &Rule, samples: &[Sample]) -> Vec<String> {
    let mut missing = Vec::new();
    let reads = reads(&rule.expr);
    if reads.selectors.is_empty() {
        missing.push(format!("{}: reads no onejob_ metric: {}", rule.name, rule.expr));
    }
    let label_values = |metric: &str| {
        let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for sample in samples.iter().filter(|s| s.name == metric) {
            for (label, value) in &sample.labels {
                labels.entry(label.clone()).or_default().insert(value.clone());
            }
        }
        labels
    };
    let mut every_label = BTreeSet::new();
    for (metric, matchers) in &reads.selectors {
        if !samples.iter().any(|s| &s.name == metric) {
            missing.push(format!("{}: {metric} is not exported", rule.name));
            continue;
        }
        let labels = label_values(metric);
        every_label.extend(labels.keys().cloned());
        for (label, op, value) in matchers {
            let exported = labels.get(label);
            let per_request = PER_REQUEST_VALUES.contains(&(metric.as_str(), label.as_str()));
            if exported.is_none() {
                missing.push(format!("{}: {metric} has no label {label} (it has {:?})", rule.name, labels.keys()));
            } else if op == "=" && !per_request && !exported.is_some_and(|values| values.contains(value)) {
                missing.push(format!("{}: {metric} has no {label}=\"{value}\" (it has {exported:?})", rule.name));
            }
        }
    }
    let annotated = rule
        .text
        .split("$labels.")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>());
    for label in reads.grouped_by.iter().cloned().chain(annotated) {
        if !TARGET_LABELS.contains(&label.as_str()) && !every_label.contains(&label) {
            missing.push(format!("{}: no metric it reads has the label {label}", rule.name));
        }
    }
    missing
}

/// Every metric and label of every alert rule is on a real server's page,
/// once it has run a job (the histograms appear with their first sample,
/// the commit gauge once the replication is read): polled until it is, or
/// 20 s.
async fn every_alert_rule_reads_metrics_and_labels_onejob_exports() {
    use crate::common::processes::{alice_key, set, simulator_and_config_with};
    let rules = rules(RULES);
    assert_eq!(rules.len(), RULES.matches("- alert:").count());
    assert!(rules.len() >= 10 && rules.iter().all(|r| !r.expr.is_empty()), "{rules:#?}");
    // A provider with a breaker, so that the breakers' gauge is exported.
    let (_simulator, config) = simulator_and_config_with(1_000, |table| {
        let breaker = "failure_rate = 0.5\nmin_calls = 100\nwindow_ms = 10000\ncool_down_ms = 5000";
        set(table, &["providers", "sim-fast", "breaker"], toml::Value::Table(breaker.parse().unwrap()));
    })
    .await;
    let url = crate::common::Backend::Postgres.fresh_database().await;
    let token = alice_key(&url).await;
    let (_server, address) = crate::common::spawn_server(&url, Some(&config)).await;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "alerts")
        .json(&json!({"task": "summarize", "input": {"text": "alert rules"}}))
        .send()
        .await
        .unwrap();
    let id = crate::common::ok_json(created).await["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    loop {
        let job: Value = crate::common::processes::job(&http, &address, &token, &format!("{id}?wait=2")).await;
        let samples = scrape(&http, &address).await;
        let missing: Vec<String> = rules.iter().flat_map(|rule| unexported(rule, &samples)).collect();
        if job["state"] == "succeeded" && missing.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "job {}; what the alert rules read and onejob does not export:\n{}",
            job["state"],
            missing.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_file(&config);
}

#[test]
fn a_renamed_metric_or_label_is_found_and_an_expression_is_read_whole() {
    let yaml = "  - alert: A\n    expr: |\n      sum without (instance, route) (rate(onejob_x_total{status=\"503\", \
                route!~\"/a|/b\"}[5m]))\n        > 0\n    annotations:\n      summary: on {{ $labels.route }}\n";
    let rules = rules(yaml);
    assert_eq!(rules.len(), 1);
    let reads = reads(&rules[0].expr);
    assert_eq!(reads.selectors[0].0, "onejob_x_total");
    assert_eq!(reads.selectors[0].1[1], ("route".to_owned(), "!~".to_owned(), "/a|/b".to_owned()));
    assert_eq!(reads.grouped_by, BTreeSet::from(["instance".to_owned(), "route".to_owned()]));
    let sample = |name: &str, labels: &[(&str, &str)]| Sample {
        name: name.to_owned(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        value: 0.0,
    };
    assert_eq!(unexported(&rules[0], &[sample("onejob_x_total", &[("route", "/"), ("status", "503")])]), [""; 0]);
    let renamed = unexported(&rules[0], &[sample("onejob_y_total", &[("route", "/"), ("status", "503")])]);
    assert!(renamed[0].contains("onejob_x_total is not exported"), "{renamed:?}");
    let relabelled = unexported(&rules[0], &[sample("onejob_x_total", &[("path", "/"), ("status", "503")])]);
    assert_eq!(relabelled.len(), 3, "the matcher, the grouping and the annotation: {relabelled:?}");
}

on_postgres!(every_alert_rule_reads_metrics_and_labels_onejob_exports);
