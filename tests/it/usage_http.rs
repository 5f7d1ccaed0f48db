//! The usage ledger end to end, on both backends: fake OpenAI-compatible and Anthropic
//! providers (real HTTP and SSE, their wire formats) report known `usage`; the chats' and the
//! workspace's totals add up exactly, with estimated costs from the price table; a redelivered
//! step's record counts once; a workspace's monthly token budget refuses the next turn
//! (`429 budget_exceeded`, nothing appended) and ends a turn queued before it was crossed
//! before it starts; bad ranges are `400`, another organization's ids `404`.

use std::{sync::Arc, time::Duration};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use spool_agents::{Runtimes, anthropic::Anthropic, openai::OpenAi};
use spool_chat::usage::{Day, DayRange, Tokens, UsageEntry, UsageLedger};
use spool_tests::{Harness, unique_id};

use crate::{
    llm_http::{Answer, Fake, fake},
    support::{Api, all_events, one, send, stack_with, until},
};

const GPT: &str = "gpt-4o-mini";
const CLAUDE: &str = "claude-sonnet-4-20250514";

/// An OpenAI-compatible streamed answer whose last chunk reports `usage`.
fn openai(text: &str, input: u64, cached: u64, output: u64, gap: Duration) -> Answer {
    Answer::Stream {
        events: vec![
            (
                None,
                json!({ "choices": [{ "index": 0, "delta": { "content": text } }] }),
            ),
            (
                None,
                json!({ "choices": [], "usage": {
                "prompt_tokens": input, "completion_tokens": output,
                "prompt_tokens_details": { "cached_tokens": cached },
            } }),
            ),
        ],
        gap,
        end: Some((None, "[DONE]".to_owned())),
    }
}

/// An Anthropic streamed answer: uncached input, cache reads and writes in `message_start`,
/// output in `message_delta`.
fn anthropic(text: &str, fresh: u64, read: u64, written: u64, output: u64) -> Answer {
    Answer::Stream {
        events: vec![
            (
                Some("message_start"),
                json!({ "type": "message_start", "message": { "usage": {
                "input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": written,
                "output_tokens": 1,
            } } }),
            ),
            (
                Some("content_block_start"),
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ),
            (
                Some("content_block_delta"),
                json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } }),
            ),
            (
                Some("message_delta"),
                json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": output } }),
            ),
        ],
        gap: Duration::from_millis(2),
        end: Some((Some("message_stop"), json!({ "type": "message_stop" }).to_string())),
    }
}

struct Setup {
    stack: crate::support::Stack,
    fake: Arc<Fake>,
    ws: String,
    gpt: String,
    claude: String,
}

async fn setup<H: Harness>(harness: &H) -> Setup {
    let state = Arc::new(Fake::default());
    let base = fake(state.clone()).await;
    let runtimes = Runtimes::scripted_only()
        .with_openai(Arc::new(OpenAi::new(&format!("{base}/v1"), None, "default-gpt")))
        .with_anthropic(Arc::new(Anthropic::new(&base, None, "default-claude")));
    let stack = stack_with(harness, runtimes).await;
    let api = &stack.api;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "Ledger" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let mut agents = Vec::new();
    for (name, runtime, model) in [("Gee", "openai", GPT), ("Cee", "anthropic", CLAUDE)] {
        let agent = api
            .ok(
                Method::POST,
                &format!("/v1/workspaces/{ws}/agents"),
                Some(json!({ "name": name, "runtime": runtime, "model": model })),
            )
            .await;
        agents.push(agent["id"].as_str().unwrap().to_owned());
    }
    let [gpt, claude] = <[String; 2]>::try_from(agents).unwrap();
    Setup {
        stack,
        fake: state,
        ws,
        gpt,
        claude,
    }
}

async fn chat(api: &Api, agent: &str) -> String {
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "agent_id": agent })))
        .await;
    chat["id"].as_str().unwrap().to_owned()
}

/// Sends `text` and waits for its turn to end; the turn's events.
async fn turn(api: &Api, chat: &str, text: &str) -> (String, Vec<Value>) {
    let turn = send(api, chat, text).await;
    let events = until(api, chat, &turn, "agent_end").await;
    assert_eq!(
        one(&events, &turn, "agent_end")["payload"]["reason"],
        "complete",
        "{events:?}"
    );
    (turn, events)
}

fn counts(v: &Value) -> (u64, u64, u64) {
    (
        v["input_tokens"].as_u64().unwrap(),
        v["cached_input_tokens"].as_u64().unwrap(),
        v["output_tokens"].as_u64().unwrap(),
    )
}

fn cost(v: &Value) -> f64 {
    v["estimated_cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cost in {v}"))
}

/// Several turns in two chats of one workspace, one on each provider: every total adds up.
pub(crate) async fn tokens_add_up_per_chat_and_workspace<H: Harness>(harness: &H) {
    let s = setup(harness).await;
    let api = &s.stack.api;
    let (g, c) = (chat(api, &s.gpt).await, chat(api, &s.claude).await);
    // GIVEN two OpenAI turns (1000 in of which 400 cached, 50 out; 2000 in, 0 cached, 70 out)
    // and two Anthropic turns (100 + 800 read + 100 written in, 30 out; 300 in, 20 out)
    s.fake.answers.lock().unwrap().extend([
        openai("one", 1000, 400, 50, Duration::from_millis(2)),
        openai("two", 2000, 0, 70, Duration::from_millis(2)),
        anthropic("three", 100, 800, 100, 30),
        anthropic("four", 300, 0, 0, 20),
    ]);
    let (first, events) = turn(api, &g, "first").await;
    turn(api, &g, "second").await;
    let (third, claude_events) = turn(api, &c, "third").await;
    turn(api, &c, "fourth").await;

    // THEN the usage events hold what the providers reported, with the model asked
    assert_eq!(
        one(&events, &first, "usage")["payload"],
        json!({ "input_tokens": 1000, "cached_input_tokens": 400, "output_tokens": 50, "model": GPT })
    );
    assert_eq!(
        one(&claude_events, &third, "usage")["payload"],
        json!({ "input_tokens": 1000, "cached_input_tokens": 800, "output_tokens": 30, "model": CLAUDE })
    );
    // AND each chat's totals add them up, by agent and model, with their estimated cost
    let gpt_usage = api.ok(Method::GET, &format!("/v1/sessions/{g}/usage"), None).await;
    assert_eq!(counts(&gpt_usage), (3000, 400, 120), "{gpt_usage}");
    // gpt-4o-mini: 2600 fresh at 0.15, 400 cached at 0.075, 120 out at 0.6 per million.
    // 390 + 30 + 72 millionths of a dollar.
    let gpt_cost = 492e-6;
    assert!((cost(&gpt_usage) - gpt_cost).abs() < 1e-6, "{gpt_usage}");
    assert_eq!(gpt_usage["by_agent"].as_array().unwrap().len(), 1);
    assert_eq!(gpt_usage["by_agent"][0]["agent_id"], s.gpt.as_str());
    assert_eq!(gpt_usage["by_agent"][0]["agent_name"], "Gee");
    assert_eq!(gpt_usage["by_model"][0]["model"], GPT);
    assert_eq!(gpt_usage["unpriced_models"], json!([]));
    let claude_usage = api.ok(Method::GET, &format!("/v1/sessions/{c}/usage"), None).await;
    assert_eq!(counts(&claude_usage), (1300, 800, 50), "{claude_usage}");
    // claude-sonnet-4: 500 fresh at 3, 800 read at 0.3, 50 out at 15: 1500 + 240 + 750.
    let claude_cost = 2490e-6;
    assert!((cost(&claude_usage) - claude_cost).abs() < 1e-6, "{claude_usage}");

    // AND the workspace's month is their sum, by chat, agent and model
    let month = api
        .ok(Method::GET, &format!("/v1/workspaces/{}/usage", s.ws), None)
        .await;
    assert_eq!(counts(&month), (4300, 1200, 170), "{month}");
    assert!((cost(&month) - gpt_cost - claude_cost).abs() < 1e-6, "{month}");
    assert_eq!(month["month_tokens"], 4470);
    assert_eq!(month["monthly_token_budget"], Value::Null);
    let by_chat: Vec<(String, (u64, u64, u64))> = month["by_chat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["chat_id"].as_str().unwrap().to_owned(), counts(r)))
        .collect();
    assert_eq!(
        by_chat,
        vec![(g.clone(), (3000, 400, 120)), (c.clone(), (1300, 800, 50))]
    );
    let models: Vec<&str> = month["by_model"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, vec![GPT, CLAUDE]);
    assert_eq!(month["by_agent"].as_array().unwrap().len(), 2);
    // AND a range without today holds nothing
    let today = Day::of_ms(spool_log::clock::Clock::now_ms(&spool_log::clock::SystemClock));
    let before = format!(
        "/v1/workspaces/{}/usage?from={}&to={today}",
        s.ws,
        today.month().first_day()
    );
    let before = api.ok(Method::GET, &before, None).await;
    assert_eq!(counts(&before), (0, 0, 0), "{before}");
    assert_eq!(before["estimated_cost_usd"], Value::Null);

    // AND bad ranges are refused, and another organization sees nothing of either
    for query in [
        "from=2026-13-01",
        "from=yesterday",
        "from=2026-03-02&to=2026-03-01",
        "from=2024-01-01&to=2025-01-03",
    ] {
        let (status, body) = api
            .call(Method::GET, &format!("/v1/workspaces/{}/usage?{query}", s.ws), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    for path in [
        format!("/v1/sessions/{g}/usage"),
        format!("/v1/workspaces/{}/usage", s.ws),
    ] {
        let (status, body) = s.stack.other.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
}

/// A workspace's monthly budget: the next message is refused with nothing appended, and a turn
/// queued before the budget was crossed ends before it starts, saying why.
pub(crate) async fn a_budget_stops_the_next_turn<H: Harness>(harness: &H) {
    let s = setup(harness).await;
    let api = &s.stack.api;
    let g = chat(api, &s.gpt).await;
    // GIVEN a budget of 1,000 tokens, and a slow first turn that uses 1,100
    let (status, body) = api
        .call(
            Method::PATCH,
            &format!("/v1/workspaces/{}", s.ws),
            Some(json!({ "monthly_token_budget": 0 })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let ws = api
        .ok(
            Method::PATCH,
            &format!("/v1/workspaces/{}", s.ws),
            Some(json!({ "monthly_token_budget": 1000 })),
        )
        .await;
    assert_eq!(ws["monthly_token_budget"], 1000);
    s.fake.answers.lock().unwrap().extend([
        openai("slow", 1000, 0, 100, Duration::from_millis(400)),
        openai("never", 1, 0, 1, Duration::from_millis(2)),
    ]);
    let sent = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{g}/messages"),
            Some(json!({ "content": "first", "client_message_id": "first-1" })),
        )
        .await;
    let first = sent["turn_id"].as_str().unwrap().to_owned();
    // WHEN a second message is queued behind it, before the budget is reached
    let queued = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{g}/messages"),
            Some(json!({ "content": "second", "on_busy": "enqueue" })),
        )
        .await;
    let second = queued["turn_id"].as_str().unwrap().to_owned();
    until(api, &g, &first, "agent_end").await;
    let events = until(api, &g, &second, "agent_end").await;
    // THEN the queued turn ended before it started, with a system message naming the budget
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| e["turn_id"] == second.as_str())
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"agent_start"), "{kinds:?}");
    let note = one(&events, &second, "system");
    let message = note["payload"]["message"].as_str().unwrap();
    assert!(
        message.contains("1000") && message.contains("monthly_token_budget"),
        "{message}"
    );
    assert_eq!(one(&events, &second, "agent_end")["payload"]["reason"], "error");
    assert_eq!(s.fake.requests.lock().unwrap().len(), 1, "the model was asked again");

    // AND the next message is refused with 429 budget_exceeded, nothing appended
    let before = all_events(api, &g).await.len();
    let (status, body) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{g}/messages"),
            Some(json!({ "content": "third" })),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("1100") && message.contains("1000"), "{message}");
    assert_eq!(all_events(api, &g).await.len(), before);
    // (A retry of the message accepted before the budget was reached answers as it did.)
    let retried = api
        .ok(
            Method::POST,
            &format!("/v1/sessions/{g}/messages"),
            Some(json!({ "content": "first", "client_message_id": "first-1" })),
        )
        .await;
    assert_eq!(
        (&retried["seq"], retried["duplicate"].as_bool()),
        (&sent["seq"], Some(true))
    );
    assert_eq!(all_events(api, &g).await.len(), before);

    // AND raising the budget lets turns run again
    api.ok(
        Method::PATCH,
        &format!("/v1/workspaces/{}", s.ws),
        Some(json!({ "monthly_token_budget": null })),
    )
    .await;
    turn(api, &g, "fourth").await;
}

/// Recording the same usage event twice (a redelivered step) counts it once, in every total.
pub(crate) async fn a_redelivered_step_counts_once<H: Harness>(harness: &H) {
    let ledger = harness.metadata().await;
    let org = unique_id("org");
    let today = Day::parse("2026-12-07").unwrap();
    let entry = |seq: u64, chat: &str, input: u64| UsageEntry {
        workspace_id: Some("ws_1".to_owned()),
        chat_id: chat.to_owned(),
        seq,
        agent_id: Some("ag_1".to_owned()),
        agent_name: "Gee".to_owned(),
        model: Some(GPT.to_owned()),
        day: today,
        tokens: Tokens {
            input,
            cached_input: 10,
            output: 5,
        },
        ts_ms: 1,
    };
    // GIVEN two steps of one chat and one of another, the first recorded twice
    assert!(ledger.record_usage(&org, &entry(7, "ses_a", 100)).await.unwrap());
    assert!(!ledger.record_usage(&org, &entry(7, "ses_a", 100)).await.unwrap());
    assert!(ledger.record_usage(&org, &entry(9, "ses_a", 200)).await.unwrap());
    assert!(ledger.record_usage(&org, &entry(7, "ses_b", 1)).await.unwrap());
    // THEN every total counts it once
    let chat = ledger.chat_usage(&org, "ses_a").await.unwrap();
    assert_eq!(chat.len(), 1);
    assert_eq!(
        chat[0].tokens,
        Tokens {
            input: 300,
            cached_input: 20,
            output: 10
        }
    );
    let month = ledger.workspace_month(&org, "ws_1", today.month()).await.unwrap();
    assert_eq!((month.input, month.output), (301, 15));
    let days = DayRange::new(today, today.next()).unwrap();
    let mut rows = ledger.workspace_usage(&org, "ws_1", days).await.unwrap();
    rows.sort_by(|a, b| a.chat_id.cmp(&b.chat_id));
    let inputs: Vec<(&str, u64)> = rows.iter().map(|r| (r.chat_id.as_str(), r.tokens.input)).collect();
    assert_eq!(inputs, vec![("ses_a", 300), ("ses_b", 1)]);
    // AND nothing lies outside the day, or in another organization
    let after = DayRange::new(today.next(), today.next().next()).unwrap();
    assert!(ledger.workspace_usage(&org, "ws_1", after).await.unwrap().is_empty());
    assert!(ledger.chat_usage("another", "ses_a").await.unwrap().is_empty());
}

/// An agent cannot change its workspace's budget, even with a person's approval of the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_cannot_change_the_budget() {
    let harness = spool_tests::EmbeddedHarness::new();
    let stack = crate::support::stack(&harness).await;
    let api = &stack.api;
    let script = json!({ "word_delay_ms": 0, "rules": [{ "match": ["budget"], "rounds": [
        { "say": "Raising it.", "tools": [{ "name": "update_workspace", "arguments": { "monthly_token_budget": 99_999_999 } }] },
        { "say": "Done." }] }], "default": [{ "say": "Hello." }] });
    let (ws, chat) = crate::support::chat_with(api, script).await;
    let path = format!("/v1/workspaces/{ws}");
    api.ok(Method::PATCH, &path, Some(json!({ "monthly_token_budget": 5000 })))
        .await;
    let turn = send(api, &chat, "raise the budget").await;
    let asked = until(api, &chat, &turn, "tool_approval_required").await;
    let call = one(&asked, &turn, "tool_approval_required")["payload"]["tool_call_id"].clone();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/approval"),
        Some(json!({ "tool_call_id": call, "decision": "approve" })),
    )
    .await;
    let events = until(api, &chat, &turn, "agent_end").await;
    let error = one(&events, &turn, "tool_end")["payload"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("a person's to set"), "{error}");
    assert_eq!(api.ok(Method::GET, &path, None).await["monthly_token_budget"], 5000);
}

on_both_backends!(
    usage_http: tokens_add_up_per_chat_and_workspace,
    a_budget_stops_the_next_turn,
    a_redelivered_step_counts_once,
);
