//! The simulator's plans: what a request is charged, and its tail.

use super::*;

#[test]
fn exactly_one_request_in_twenty_takes_the_tail_at_a_tail_rate_of_five_percent() {
    let provider: ProviderSettings =
        toml::from_str("kind = \"sim\"\nmodel = \"sim-1\"\nlatency_ms = 5\ntail_rate = 0.05\ntail_latency_ms = 4000")
            .unwrap();
    let mut sim = SimState::new(HashMap::from([("sim-tail".to_owned(), provider.clone())]));
    sim.random = Mutex::new(1);
    let job = json!({"task": "summarize", "input": {"text": "a b"}});
    let messages = [json!({"role": "user", "content": "a b"})];
    let mut tails = Vec::new();
    for n in 0..100 {
        let id = if n == 50 { "qualification-1".to_owned() } else { format!("attempt-{n}") };
        let arrival = Arrival {
            name: "sim-tail",
            provider: &provider,
            id: &id,
            job: &job,
            messages: &messages,
            strict: false,
            asked_json: true,
            response_id: None,
            traceparent: None,
        };
        let before = Instant::now();
        let (Plan::Answer { at, .. }, _) = admit(&sim, arrival) else { panic!("an answer is planned") };
        if at >= before + Duration::from_millis(4000) {
            tails.push(n);
        }
    }
    // The 20th, 40th, … of the requests that are not qualification calls.
    assert_eq!(tails, [19, 39, 60, 80], "{tails:?}");
    let entry_of = |id: &str| sim.log.lock().unwrap().get(id).map(|entry| entry.first_token_after);
    assert_eq!(entry_of("attempt-19"), Some(Duration::from_millis(4000)), "a streamed answer's first token too");
    assert_eq!(entry_of("attempt-18"), Some(Duration::from_millis(5)));
}

#[test]
fn a_canceled_request_is_charged_its_prompt_and_the_share_of_its_answer_due_by_then() {
    let arrived = Instant::now();
    let plan = Plan::Answer {
        at: arrived + Duration::from_secs(4),
        content: "{}".into(),
        usage: (40, 100),
        ending: Ending::Complete,
    };
    let mut entry = Entry {
        provider: "sim-slow".into(),
        received_at: chrono::Utc::now(),
        arrived,
        times: 1,
        plan,
        closed_after: None,
        canceled_after: None,
        strict_schema: false,
        response_id: None,
        traceparent: None,
        resumed: 0,
        paced: None,
        first_token_after: Duration::ZERO,
    };
    assert!(entry.working_at(arrived + Duration::from_secs(1)) && !entry.working_at(arrived + Duration::from_secs(4)));
    assert_eq!(entry.usage_by(arrived + Duration::from_secs(1)), Some((40, 25)));
    assert_eq!(entry.usage_by(arrived + Duration::from_secs(9)), Some((40, 100)), "never more than the answer");
    entry.canceled_after = Some(Duration::from_secs(1));
    let shown = report("r", &entry);
    assert_eq!((&shown["status"], &shown["usage"]["completion_tokens"]), (&json!("canceled"), &json!(25)), "{shown}");
    assert_eq!(shown["canceled_after_ms"], 1_000);
    assert!(!entry.working_at(arrived + Duration::from_secs(2)), "a canceled request is not worked on");
}
