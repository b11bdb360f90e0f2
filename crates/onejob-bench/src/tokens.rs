//! The `tokens` scenario: streamed answers, through onejob and straight
//! from the simulator, in one run. `--connections` callers each loop for
//! half of `--duration` on the simulator's streamed chat completions
//! (`--sim-url`, provider `--provider`: the reference), then for the other
//! half through onejob: `POST /jobs` on that provider (a task that
//! streams), then `GET /jobs/{id}/output` read to its end.
//!
//! Timed (each caller's first request of each half aside: it opens its
//! connections, and the simulator's tokenizer loads on its first use): the
//! time to first token, from sending the request (`POST /jobs`,
//! or the simulator's `POST …/chat/completions`) to the first piece of
//! text at the caller; and, through onejob, each `delta` event's delay
//! from the moment the simulator sent the first piece of text it carries
//! (its schedule, from the simulator's request log: a piece is four
//! characters, sent at `stream_first_piece_at` plus its place times
//! `stream_piece_interval_us`, on loopback) to its arrival at the caller.
//! The provider is a simulated chat completions one (the simulator logs
//! that schedule for those).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::streams::{EventLines, StreamEvent};
use super::{Options, Sample, percentile};

/// Characters of text the simulator sends a piece.
const PIECE_CHARS: usize = 4;

/// One streamed answer read through onejob.
struct Streamed {
    job: String,
    first_token_micros: u64,
    /// Each `delta` event: the characters before it, and when it arrived.
    deltas: Vec<(usize, DateTime<Utc>)>,
}

/// Runs the reference half, then onejob's; the first-token times through
/// onejob, and the run's facts.
pub(super) async fn tokens(options: &Arc<Options>, run: &str) -> Result<(Vec<Sample>, Value), String> {
    let sim = options.sim_url.clone().ok_or("the tokens scenario needs --sim-url, the simulator's address")?;
    let sim = sim.trim_end_matches('/').to_owned();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.connections)
        .build()
        .map_err(|e| format!("the HTTP client: {e}"))?;
    let half = options.duration / 2;

    let until = Instant::now() + half;
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..options.connections.max(1) {
        let (client, sim, options, run) = (client.clone(), sim.clone(), options.clone(), run.to_owned());
        callers.spawn(async move {
            let mut sample = Sample { micros: Vec::new(), errors: 0 };
            let mut i = 0;
            while Instant::now() < until {
                match direct(&client, &sim, &options.provider, &format!("tokens-{run}-direct-{caller}-{i}")).await {
                    // Each caller's first is not timed: it opens the connection.
                    Ok(_) if i == 0 => {}
                    Ok(micros) => sample.micros.push(micros),
                    Err(_) => sample.errors += 1,
                }
                i += 1;
            }
            sample
        });
    }
    let direct_samples = callers.join_all().await;

    let until = Instant::now() + half;
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..options.connections.max(1) {
        let (client, options, run) = (client.clone(), options.clone(), run.to_owned());
        callers.spawn(async move {
            let (mut streamed, mut errors, mut first_error) = (Vec::new(), 0u64, None);
            let mut i = 0;
            while Instant::now() < until {
                match through_onejob(&client, &options, &format!("bench-{run}-tokens-{caller}-{i}")).await {
                    Ok(_) if i == 0 => {}
                    Ok(one) => streamed.push(one),
                    Err(error) => {
                        errors += 1;
                        first_error.get_or_insert(error);
                    }
                }
                i += 1;
            }
            (streamed, errors, first_error)
        });
    }
    let mut streamed = Vec::new();
    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    let mut first_error = None;
    for (one, errors, error) in callers.join_all().await {
        sample.errors += errors;
        first_error = first_error.or(error);
        sample.micros.extend(one.iter().map(|s| s.first_token_micros));
        streamed.extend(one);
    }

    let delays = piece_delays(&client, options, &sim, &streamed).await?;
    let mut direct: Vec<u64> = direct_samples.iter().flat_map(|s| s.micros.iter().copied()).collect();
    direct.sort_unstable();
    let mut through: Vec<u64> = sample.micros.clone();
    through.sort_unstable();
    let extra = json!({
        "provider": options.provider,
        "direct_first_token": figures(&direct),
        "direct_errors": direct_samples.iter().map(|s| s.errors).sum::<u64>(),
        "added_p50_ms": percentile(&through, 0.50) - percentile(&direct, 0.50),
        "added_p99_ms": percentile(&through, 0.99) - percentile(&direct, 0.99),
        "streams": streamed.len(),
        "piece_to_caller": figures(&delays),
        "first_error": first_error,
        "peak_rss_mib": options.server_pid.and_then(super::peak_rss_mib),
    });
    Ok((vec![sample], extra))
}

/// How many were timed, and their p50, p99 and max.
fn figures(sorted: &[u64]) -> Value {
    json!({
        "count": sorted.len(),
        "p50_ms": percentile(sorted, 0.50),
        "p99_ms": percentile(sorted, 0.99),
        "max_ms": percentile(sorted, 1.0),
    })
}

/// A streamed chat completion straight from the simulator: the time to its
/// first piece of text, microseconds; read to its end.
async fn direct(client: &reqwest::Client, sim: &str, provider: &str, id: &str) -> Result<u64, String> {
    let body = json!({
        "model": "sim-1",
        "messages": [{"role": "user", "content": format!("Summarize: {id}")}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "onejob_input": {"task": "summarize", "input": {"text": format!("tokens {id}")}},
    });
    let began = Instant::now();
    let mut response = client
        .post(format!("{sim}/providers/{provider}/v1/chat/completions"))
        .header("x-client-request-id", id)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the simulator answered {}", response.status()));
    }
    let mut first = None;
    let mut lines = EventLines::default();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        for StreamEvent { data, .. } in lines.feed(&chunk) {
            if first.is_none() && data.contains("\"content\":\"") && !data.contains("\"content\":\"\"") {
                first = Some(began.elapsed().as_micros() as u64);
            }
        }
    }
    first.ok_or_else(|| "the stream brought no text".to_owned())
}

/// One job through onejob, its output read to its end.
async fn through_onejob(client: &reqwest::Client, options: &Options, key: &str) -> Result<Streamed, String> {
    let authorization = format!("Bearer {}", options.token.split(',').next().unwrap_or_default().trim());
    let body = json!({"task": "summarize", "input": {"text": format!("tokens {key}")}, "provider": options.provider});
    let began = Instant::now();
    let created = client
        .post(format!("{}/jobs", options.url))
        .header("authorization", &authorization)
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !created.status().is_success() {
        return Err(format!("POST /jobs answered {}", created.status()));
    }
    let job: Value = created.json().await.map_err(|e| e.to_string())?;
    let id = job["id"].as_str().ok_or("no job id")?.to_owned();
    let mut response = client
        .get(format!("{}/jobs/{id}/output", options.url))
        .header("authorization", &authorization)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("GET /jobs/{id}/output answered {}", response.status()));
    }
    let mut one = Streamed { job: id, first_token_micros: 0, deltas: Vec::new() };
    let (mut characters, mut ended) = (0usize, false);
    let mut lines = EventLines::default();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        let arrived = Utc::now();
        for StreamEvent { data, .. } in lines.feed(&chunk) {
            let event: Value = serde_json::from_str(&data).map_err(|e| format!("an event is not JSON: {e}"))?;
            if let Some(text) = event["text"].as_str() {
                if one.deltas.is_empty() {
                    one.first_token_micros = began.elapsed().as_micros() as u64;
                }
                one.deltas.push((characters, arrived));
                characters += text.chars().count();
            } else if event.get("result").is_some() {
                ended = true;
            } else if event.get("error").is_some() {
                return Err(format!("job {}: its output ended with an error", one.job));
            }
        }
    }
    if one.deltas.is_empty() || !ended {
        return Err(format!("job {}: no piece, or no result", one.job));
    }
    Ok(one)
}

/// Each delta event's delay from the simulator's sending of its first
/// piece to its arrival, microseconds, sorted.
async fn piece_delays(
    client: &reqwest::Client,
    options: &Options,
    sim: &str,
    streamed: &[Streamed],
) -> Result<Vec<u64>, String> {
    let log = json_of(client.get(format!("{sim}/v1/requests"))).await?;
    let paced: std::collections::HashMap<&str, (DateTime<Utc>, i64)> = log["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let first = r["stream_first_piece_at"].as_str()?.parse().ok()?;
            Some((r["id"].as_str()?, (first, r["stream_piece_interval_us"].as_i64()?)))
        })
        .collect();
    let authorization = format!("Bearer {}", options.token.split(',').next().unwrap_or_default().trim());
    let mut delays = Vec::new();
    for one in streamed {
        let job =
            json_of(client.get(format!("{}/jobs/{}", options.url, one.job)).header("authorization", &authorization))
                .await?;
        let attempt = job["attempts"][0]["id"].as_str().unwrap_or_default();
        let Some((first, every)) = paced.get(attempt) else { continue };
        for (before, arrived) in &one.deltas {
            let piece = i64::try_from(before / PIECE_CHARS).unwrap_or(i64::MAX);
            let sent = *first + chrono::Duration::microseconds(every.saturating_mul(piece));
            let delay = (*arrived - sent).num_microseconds().unwrap_or(0);
            delays.push(u64::try_from(delay).unwrap_or(0));
        }
    }
    delays.sort_unstable();
    Ok(delays)
}

/// The JSON answer to `request`.
async fn json_of(request: reqwest::RequestBuilder) -> Result<Value, String> {
    request.send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())
}
