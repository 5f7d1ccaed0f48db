//! The demo agent (the scripted runtime's built-in script, which needs no key) as a newcomer
//! meets it, end to end through the engine on both backends: a rename is a rename and takes
//! the title asked for, a task's title is a summary of the request, and a team's report names
//! only the agents that were added.

use reqwest::Method;
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, all_events, one, send, stack, until};

/// A workspace and a chat with its built-in agent, which answers with the demo script.
async fn demo_chat(api: &Api) -> (String, String) {
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "title": "Launch" })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let chat = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (ws, chat)
}

/// The text of the turn's last message.
fn last_said(events: &[Value], turn: &str) -> String {
    events
        .iter()
        .rfind(|e| e["turn_id"] == turn && e["type"] == "message_end")
        .and_then(|e| e["payload"]["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A declined team agent is never reported as added: the last message names the added agents
/// as added and the declined one as declined, and the workspace has only the added ones.
pub(crate) async fn the_demo_team_report_names_only_the_agents_added<H: Harness>(harness: &H) {
    // GIVEN the demo agent proposing a team of three
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = demo_chat(api).await;
    let turn = send(api, &chat, "Could you set up a team of agents?").await;
    let events = until(api, &chat, &turn, "ask_question").await;
    let question = one(&events, &turn, "ask_question")["payload"]["question_id"].clone();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{chat}/question"),
        Some(json!({ "question_id": question, "answer": "a product launch" })),
    )
    .await;
    // WHEN the person approves the first and the third, and declines the second
    for (nth, decision) in [(1, "approve"), (2, "decline"), (3, "approve")] {
        let call = spool_tests::eventually("the next approval request", || async {
            let events = all_events(api, &chat).await;
            let asked: Vec<&Value> = events
                .iter()
                .filter(|e| e["type"] == "tool_approval_required")
                .collect();
            (asked.len() == nth).then(|| asked[nth - 1]["payload"]["tool_call_id"].clone())
        })
        .await;
        api.ok(
            Method::POST,
            &format!("/v1/sessions/{chat}/approval"),
            Some(json!({ "tool_call_id": call, "decision": decision })),
        )
        .await;
    }
    // THEN the workspace has the two approved agents
    let events = until(api, &chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let agents = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Spool", "Planner", "Reviewer"]);
    // AND the last message says so: the added ones as added, the declined one as declined
    let said = last_said(&events, &turn);
    let (added, rest) = said.split_once('.').unwrap_or((&said, ""));
    assert!(added.starts_with("Added"), "{said}");
    assert!(
        added.contains("**Planner**") && added.contains("**Reviewer**"),
        "{said}"
    );
    assert!(!added.contains("Writer"), "a declined agent reported as added: {said}");
    assert!(rest.contains("You declined **Writer**"), "{said}");
    assert!(!said.contains("Your team is ready"), "{said}");
}

/// A polite rename request is a rename (not a plan, though it says "planning"), and the chat
/// takes the title asked for; a task's title is the request's gist, not the request.
pub(crate) async fn the_demo_renames_to_the_title_asked_and_titles_tasks_briefly<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let api = &stack.api;
    let (ws, chat) = demo_chat(api).await;
    // WHEN the person asks for a rename, politely
    let turn = send(api, &chat, "Please rename this chat to Launch planning").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN it was a rename to that title, and no plan was proposed
    let types: Vec<&str> = events
        .iter()
        .filter(|e| e["turn_id"] == turn)
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert!(!types.contains(&"plan_approval_required"), "{types:?}");
    let session = api.ok(Method::GET, &format!("/v1/sessions/{chat}"), None).await;
    assert_eq!(session["title"], "Launch planning");
    assert_eq!(last_said(&events, &turn), "This chat is now called *Launch planning*.");
    // WHEN the person asks for a task
    let turn = send(api, &chat, "Can you create a task to water the ferns before Friday?").await;
    let events = until(api, &chat, &turn, "agent_end").await;
    // THEN the task's title is the gist, and the agent names it as made
    let tasks = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/tasks"), None).await;
    let titles: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Water the ferns before Friday"]);
    let said = last_said(&events, &turn);
    assert!(said.contains("*Water the ferns before Friday*"), "{said}");
    assert!(!said.contains('{'), "raw JSON in the answer: {said}");
}

on_both_backends!(
    demo_agent_http: the_demo_team_report_names_only_the_agents_added,
    the_demo_renames_to_the_title_asked_and_titles_tasks_briefly,
);
