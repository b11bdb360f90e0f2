//! Reading a `/metrics` page: the Prometheus text format, parsed into its
//! series, so that tests assert values of named series rather than search
//! the text.

use std::collections::BTreeMap;

/// One sample of the page: a metric name, its labels and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of a page in the Prometheus text format (comments skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("not a Prometheus sample line: {line}")))
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
        None => (series, BTreeMap::new()),
    };
    Some(Sample { name: name.to_owned(), labels, value })
}

/// `a="x",b="y \"quoted\""` as a map; values unescaped.
fn parse_labels(mut text: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    while !text.is_empty() {
        let (name, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (at, '"') => break at,
                (_, other) => value.push(other),
            }
        };
        labels.insert(name.trim_start_matches(',').to_owned(), value);
        text = rest[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// The value of the series `name` with exactly these labels, if the page has it.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    samples.iter().find(|s| s.name == name && s.labels == wanted).map(|s| s.value)
}

/// Every label set the page has for `name`.
pub fn label_sets(samples: &[Sample], name: &str) -> Vec<BTreeMap<String, String>> {
    samples.iter().filter(|s| s.name == name).map(|s| s.labels.clone()).collect()
}

/// Fetches `http://{address}/metrics` and parses it.
pub async fn scrape(client: &reqwest::Client, address: &str) -> Vec<Sample> {
    let response = client.get(format!("http://{address}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    parse(&response.text().await.unwrap())
}
