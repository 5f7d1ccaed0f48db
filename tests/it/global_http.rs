//! The global, agent-first chat over real HTTP on both backends: it exists before anyone uses
//! it, an agent posts first and asks, the next person's message answers, and the second source
//! design's `/chat/*` routes see the same chat.

use reqwest::Method;
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{agent_client, setup};

fn texts(history: &Value) -> Vec<(u64, String, String)> {
    history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap(),
                m["role"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An agent asks first; a person's next message answers it, and the following one starts a turn.
pub(crate) async fn an_agent_asks_first_and_a_person_answers<H: Harness>(harness: &H) {
    let (person, other, _) = setup(harness).await;
    let agent = agent_client(harness, &person).await;

    // GIVEN nobody has used the global chat: it exists, empty
    let history = person.ok(Method::GET, "/chat/history?after=0", None).await;
    assert!(texts(&history).is_empty());
    let global = person.ok(Method::GET, "/v1/sessions/global", None).await;
    assert_eq!(
        (global["global"].as_bool(), global["title"].as_str()),
        (Some(true), Some("Global chat"))
    );

    // WHEN a person's token posts as an agent: refused
    let post = json!({ "author": "deploy-bot", "text": "Deploy v2 now?", "ask": true });
    let (status, error) = person
        .call(Method::POST, "/v1/sessions/global/agent-messages", Some(post.clone()))
        .await;
    assert_eq!(status, 403, "{error}");
    // WHEN an agent signs as the built-in agent, however spelled: refused, nothing stored
    for name in ["Spool", " spool ", "SPOOL"] {
        let (status, error) = agent
            .call(
                Method::POST,
                "/v1/sessions/global/agent-messages",
                Some(json!({ "author": name, "text": "Trust me." })),
            )
            .await;
        assert_eq!(status, 403, "{name}: {error}");
    }
    assert!(texts(&person.ok(Method::GET, "/chat/history?after=0", None).await).is_empty());
    // WHEN the agent posts first and asks
    let (status, asked) = agent
        .call(Method::POST, "/v1/sessions/global/agent-messages", Some(post))
        .await;
    assert_eq!(status, 202, "{asked}");
    let question = asked["question_id"].as_str().unwrap().to_owned();
    // THEN people see it in the history
    let history = person.ok(Method::GET, "/chat/history?after=0", None).await;
    assert_eq!(texts(&history), [(1, "agent".to_owned(), "Deploy v2 now?".to_owned())]);
    assert_eq!(history["messages"][0]["question_id"], question.as_str());
    assert_eq!(history["messages"][0]["meta"], json!({ "tags": ["question"] }));
    assert_eq!(history["messages"][0]["author"], "deploy-bot");
    // WHEN an agent posts blank text: 400, nothing stored
    for text in ["", " \t\n"] {
        let (status, _) = agent
            .call(
                Method::POST,
                "/v1/sessions/global/agent-messages",
                Some(json!({ "author": "deploy-bot", "text": text })),
            )
            .await;
        assert_eq!(status, 400, "{text:?}");
    }

    // WHEN a person sends a blank message: 400, nothing stored
    for text in ["", "   \n"] {
        let (status, _) = person
            .call(Method::POST, "/chat/user_message", Some(json!({ "text": text })))
            .await;
        assert_eq!(status, 400);
    }
    // WHEN a person answers
    let (status, answer) = person
        .call(Method::POST, "/chat/user_message", Some(json!({ "text": "yes, go" })))
        .await;
    assert_eq!(status, 202, "{answer}");
    // THEN the message answers the question and starts no turn of Spool's
    assert_eq!(
        (answer["seq"].as_u64(), answer["answers"].as_str()),
        (Some(2), Some(question.as_str()))
    );
    assert!(answer["turn_id"].is_null());
    // AND the agent, polling after what it saw, reads the answer
    let history = agent.ok(Method::GET, "/chat/history?after=1", None).await;
    assert_eq!(texts(&history), [(2, "user".to_owned(), "yes, go".to_owned())]);
    assert_eq!(history["messages"][0]["answers"], question.as_str());
    assert_eq!(history["messages"][0]["meta"], json!({ "reply_to": question }));
    assert_eq!(history["last_id"], 2);
    // AND without `after`, the history is the last messages (100, or `limit`)
    let recent = person.ok(Method::GET, "/chat/history", None).await;
    assert_eq!(texts(&recent).len(), 2);
    let last = person.ok(Method::GET, "/chat/history?limit=1", None).await;
    assert_eq!(texts(&last), [(2, "user".to_owned(), "yes, go".to_owned())]);
    assert_eq!(last["last_id"], 2);
    for bad in ["limit=0", "limit=1001", "limit=many"] {
        let (status, _) = person.call(Method::GET, &format!("/chat/history?{bad}"), None).await;
        assert_eq!(status, 400, "{bad}");
    }
    // AND the next message, with no question open, asks Spool for a turn
    let (_, next) = person
        .call(Method::POST, "/chat/user_message", Some(json!({ "text": "thanks" })))
        .await;
    assert!(next["turn_id"].is_string() && next["answers"].is_null(), "{next}");

    // AND the same chat is `/chat/stream`, the session's events
    let response = person.get("/chat/stream?after=1").await;
    assert_eq!(response.status(), 200);
    let events = crate::support::sse_events(response, 2).await;
    assert_eq!(events.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 3]);

    // AND it cannot be deleted; it lists among the chats outside workspaces
    assert_eq!(person.call(Method::DELETE, "/v1/sessions/global", None).await.0, 409);
    let list = person.ok(Method::GET, "/v1/sessions", None).await;
    assert!(list["sessions"].as_array().unwrap().iter().any(|s| s["id"] == "global"));
    // AND another organization's global chat is its own
    assert!(texts(&other.ok(Method::GET, "/chat/history", None).await).is_empty());
}

on_both_backends!(global_http: an_agent_asks_first_and_a_person_answers);
