//! The global, agent-first chat over real HTTP on both backends: it exists before anyone uses
//! it, an agent posts first and asks, the next person's message answers, and the second source
//! design's `/chat/*` routes see the same chat.

use std::{sync::Arc, time::Duration};

use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{service::GLOBAL_SESSION, session::Session};
use spool_log::{limits::LiveSettings, port::StreamLog, stream::Append};
use spool_tests::Harness;

use crate::support::{Api, agent_client, all_events, setup, sse_events, stack, until};

fn texts(history: &Value) -> Vec<(u64, String, String)> {
    history
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
    assert_eq!(
        history[0]["meta"],
        json!({ "tags": ["question"], "question_id": question })
    );
    assert_eq!(history[0]["author"], "deploy-bot");
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
    assert_eq!(history[0]["meta"], json!({ "reply_to": question }));
    // AND without `after`, the history is the last messages (100, or `limit`)
    let recent = person.ok(Method::GET, "/chat/history", None).await;
    assert_eq!(texts(&recent).len(), 2);
    let last = person.ok(Method::GET, "/chat/history?limit=1", None).await;
    assert_eq!(texts(&last), [(2, "user".to_owned(), "yes, go".to_owned())]);
    for bad in ["limit=0", "limit=1001", "limit=many"] {
        let (status, _) = person.call(Method::GET, &format!("/chat/history?{bad}"), None).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(person.get(&format!("/chat/stream?{bad}")).await.status(), 400, "{bad}");
    }
    for bad in ["after=3", "after=-1", "limit=1&limit=2"] {
        assert_eq!(person.get(&format!("/chat/stream?{bad}")).await.status(), 400, "{bad}");
    }
    // AND the next message, with no question open, asks Spool for a turn
    let (_, next) = person
        .call(Method::POST, "/chat/user_message", Some(json!({ "text": "thanks" })))
        .await;
    assert!(next["turn_id"].is_string() && next["answers"].is_null(), "{next}");

    // AND the same chat is `/chat/stream`, its messages as the history has them
    let response = person.get("/chat/stream?after=1").await;
    assert_eq!(response.status(), 200);
    let events = crate::support::sse_events(response, 2).await;
    assert_eq!(events.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 3]);
    let history = person.ok(Method::GET, "/chat/history?after=1", None).await;
    assert_eq!(Value::Array(events.into_iter().map(|(_, m)| m).collect()), history);

    // AND it cannot be deleted; it lists among the chats outside workspaces
    assert_eq!(person.call(Method::DELETE, "/v1/sessions/global", None).await.0, 409);
    let list = person.ok(Method::GET, "/v1/sessions", None).await;
    assert!(list["sessions"].as_array().unwrap().iter().any(|s| s["id"] == "global"));
    // AND another organization's global chat is its own
    assert!(texts(&other.ok(Method::GET, "/chat/history", None).await).is_empty());
}

/// Every message of the global chat, as `GET /chat/history?after=0` answers them.
async fn everything(api: &Api) -> Vec<Value> {
    let history = api.ok(Method::GET, "/chat/history?after=0&limit=1000", None).await;
    history.as_array().unwrap().clone()
}

/// An agent's post to the global chat; its answer.
async fn post(agent: &Api, body: Value) -> Value {
    agent
        .ok(Method::POST, "/v1/sessions/global/agent-messages", Some(body))
        .await
}

/// `/chat/stream` with `last_event_id`: its first `count` messages.
async fn stream(api: &Api, query: &str, last_event_id: Option<u64>, count: usize) -> Vec<(u64, Value)> {
    let mut request = api
        .http
        .get(format!("{}/chat/stream{query}", api.base))
        .bearer_auth(api.token.as_deref().unwrap());
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    sse_events(response, count).await
}

/// The turns (`agent_start` events) the global chat has run, by the seq that started each.
async fn turn_triggers(api: &Api) -> Vec<u64> {
    let events = all_events(api, "global").await;
    events
        .iter()
        .filter(|e| e["type"] == "agent_start")
        .map(|e| e["payload"]["trigger_seq"].as_u64().unwrap())
        .collect()
}

/// The second source design's seven checks (its section 7), one each, with a worker running
/// Spool's turns.
pub(crate) async fn the_designs_seven_checks<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let person = &stack.api;
    let agent = agent_client(harness, person).await;

    // (1) The global chat exists from start-up: a new organization's history is `[]` without a
    // call to make it, and its live stream starts.
    assert!(stream(person, "", None, 0).await.is_empty());
    assert_eq!(person.ok(Method::GET, "/chat/history", None).await, json!([]));
    assert_eq!(person.ok(Method::GET, "/chat/history?after=0", None).await, json!([]));

    // (2) An agent may write first: its message is in the history, role `agent`, its author.
    let first = post(&agent, json!({ "author": "deploy-bot", "text": "Build 41 is green." })).await;
    let first_id = first["seq"].as_u64().unwrap();
    let history = everything(person).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert!(
        history[0]["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')),
        "{history:?}"
    );
    assert_eq!(
        history[0],
        json!({ "id": first_id, "ts": history[0]["ts"], "role": "agent", "author": "deploy-bot",
            "text": "Build 41 is green.", "meta": {} })
    );

    // (3) ask_user, then wait_user: the agent asks, and polling after its question sees
    // nothing until a person answers; the answer replies to the question.
    let asked = post(
        &agent,
        json!({ "author": "deploy-bot", "text": "Deploy build 41?", "ask": true }),
    )
    .await;
    let (question_id, question) = (asked["seq"].as_u64().unwrap(), asked["question_id"].clone());
    let after_question = format!("/chat/history?after={question_id}");
    for _ in 0..3 {
        assert_eq!(agent.ok(Method::GET, &after_question, None).await, json!([]));
    }
    let answered = person
        .ok(
            Method::POST,
            "/chat/user_message",
            Some(json!({ "text": "yes, deploy" })),
        )
        .await;
    assert!(answered["turn_id"].is_null(), "an answer runs no turn: {answered}");
    let polled = agent.ok(Method::GET, &after_question, None).await;
    assert_eq!(
        texts(&polled),
        [(
            answered["seq"].as_u64().unwrap(),
            "user".to_owned(),
            "yes, deploy".to_owned()
        )]
    );
    assert_eq!(polled[0]["meta"], json!({ "reply_to": question }));

    // (5) A blank message is `400` and stores nothing.
    let before = everything(person).await;
    for text in ["", "  \n\t"] {
        let (status, error) = person
            .call(Method::POST, "/chat/user_message", Some(json!({ "text": text })))
            .await;
        assert_eq!(status, 400, "{text:?}: {error}");
    }
    assert_eq!(everything(person).await, before);

    // (7) An agent never runs on empty input: no turn is pending after the blank posts, and
    // when the next message's turn has run (turns of a chat run in order, so one the blanks
    // queued would have run first), that message started the only turn there is.
    let global = person.ok(Method::GET, "/v1/sessions/global", None).await;
    assert!(global["pending_turn_id"].is_null(), "{global}");
    let thanks = person
        .ok(Method::POST, "/chat/user_message", Some(json!({ "text": "thanks" })))
        .await;
    until(person, "global", thanks["turn_id"].as_str().unwrap(), "agent_end").await;
    let thanks_id = thanks["seq"].as_u64().unwrap();
    assert_eq!(turn_triggers(person).await, [thanks_id]);
    let history = everything(person).await;
    let reply = history.last().unwrap();
    assert_eq!(
        (&reply["role"], &reply["author"]),
        (&json!("agent"), &json!("Spool")),
        "{history:?}"
    );
    // Spool's turn wrote events that are no message between the two.
    assert!(reply["id"].as_u64().unwrap() > thanks_id + 1, "{history:?}");

    // (4) `after=<id>` answers strictly later messages, oldest first; a poller passing the last
    // id it saw reads every message exactly once, whatever events lie between them.
    let done = post(&agent, json!({ "author": "deploy-bot", "text": "Deployed." })).await;
    let all = everything(person).await;
    assert_eq!(all.last().unwrap()["id"], done["seq"]);
    let mut polled = Vec::new();
    let mut after = 0;
    loop {
        let page = agent
            .ok(Method::GET, &format!("/chat/history?after={after}&limit=2"), None)
            .await;
        let page = page.as_array().unwrap().clone();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = last["id"].as_u64().unwrap();
        polled.extend(page);
    }
    assert_eq!(polled, all);
    let ids: Vec<u64> = all.iter().map(|m| m["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for (i, id) in ids.iter().enumerate() {
        let later = agent.ok(Method::GET, &format!("/chat/history?after={id}"), None).await;
        assert_eq!(later.as_array().unwrap(), &all[i + 1..], "after {id}");
    }

    // (6) `/chat/stream` starts with the last messages (`Message`s, the SSE `id:` each one's
    // id), then sends each new one live; reconnecting with `Last-Event-ID` resumes after it.
    let connected = stream(person, "", None, all.len()).await;
    assert_eq!(connected.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids);
    assert_eq!(connected.into_iter().map(|(_, m)| m).collect::<Vec<_>>(), all);
    let response = person.get("/chat/stream?limit=2").await;
    let listener = tokio::spawn(sse_events(response, 3));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let live = post(&agent, json!({ "author": "deploy-bot", "text": "Rolled out to 100%." })).await;
    let got = listener.await.unwrap();
    let live_id = live["seq"].as_u64().unwrap();
    assert_eq!(
        got.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [ids[ids.len() - 2], ids[ids.len() - 1], live_id]
    );
    assert_eq!(got[2].1["text"], "Rolled out to 100%.");
    assert_eq!(got[2].1, everything(person).await.last().unwrap().clone());
    let later: Vec<u64> = everything(person)
        .await
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .filter(|id| *id > thanks_id)
        .collect();
    assert_eq!(later.last(), Some(&live_id));
    let resumed = stream(person, "?after=1", Some(thanks_id), later.len()).await;
    assert_eq!(
        resumed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        later,
        "Last-Event-ID resumes after it (and wins over `after`)"
    );
}

/// An agent's `meta` (`reply_to`, `tags`) is checked (`400`, nothing stored) and comes back in
/// the message's `meta`, merged with what `ask` adds.
pub(crate) async fn an_agents_meta_is_checked_and_kept<H: Harness>(harness: &H) {
    let (person, _, _) = setup(harness).await;
    let agent = agent_client(harness, &person).await;
    let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();

    // WHEN an agent sends a meta that breaks a rule: 400, nothing stored
    for meta in [
        json!({ "reply_to": "x".repeat(201) }),
        json!({ "reply_to": "" }),
        json!({ "reply_to": "a\u{0}b" }),
        json!({ "tags": tags(11) }),
        json!({ "tags": ["x".repeat(51)] }),
        json!({ "tags": ["line\nbreak"] }),
        json!({ "tags": [""] }),
        json!({ "tags": ["question"] }),
        json!({ "tags": "deploy" }),
        json!({ "tags": [1] }),
        json!({ "mood": "happy" }),
        json!("deploy"),
    ] {
        let body = json!({ "author": "bot", "text": "hi", "meta": meta });
        let (status, error) = agent
            .call(Method::POST, "/v1/sessions/global/agent-messages", Some(body))
            .await;
        assert_eq!(status, 400, "{meta}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    assert_eq!(person.ok(Method::GET, "/chat/history", None).await, json!([]));

    // WHEN it sends good ones: the messages' `meta` carries them
    let plain = post(&agent, json!({ "author": "bot", "text": "Starting." })).await;
    let meta = json!({ "reply_to": plain["seq"].to_string(), "tags": tags(10) });
    post(&agent, json!({ "author": "bot", "text": "Step 1 done.", "meta": meta })).await;
    let asked = post(
        &agent,
        json!({ "author": "bot", "text": "Go on?", "ask": true,
            "meta": { "reply_to": "1", "tags": ["deploy", "deploy"] } }),
    )
    .await;
    let history = person.ok(Method::GET, "/chat/history", None).await;
    let metas: Vec<&Value> = history.as_array().unwrap().iter().map(|m| &m["meta"]).collect();
    assert_eq!(
        metas,
        [
            &json!({}),
            &meta,
            &json!({ "reply_to": "1", "tags": ["deploy", "question"], "question_id": asked["question_id"] })
        ]
    );
    // AND the live stream says the same
    let streamed = stream(&person, "", None, 3).await;
    assert_eq!(Value::Array(streamed.into_iter().map(|(_, m)| m).collect()), history);
}

/// `/chat/stream` skips the events that are no message, and while only such events come (a long
/// answer's deltas, faster than the keep-alive period) it still sends a keep-alive every period,
/// so no proxy on the way drops it as idle.
pub(crate) async fn the_chat_stream_skips_other_events_and_keeps_alive<H: Harness>(harness: &H) {
    let log: Arc<dyn StreamLog> = Arc::new(harness.instance().await);
    let org = format!("g{}", uuid::Uuid::new_v4().simple());
    let live = LiveSettings {
        long_poll: Duration::from_millis(300),
        sse_max: Duration::from_secs(10),
        sse_keepalive: Duration::from_millis(100),
    };
    let access = spool_stream::Access::Open { org: org.clone() };
    let app = spool_stream::router(spool_stream::StreamApi::new(log.clone(), access, live), 1 << 20);
    let base = spool_tests::serve_on_loopback(app).await;
    // A chat nobody wrote in: the stream starts up to date.
    let mut response = reqwest::get(format!("{base}/chat/stream")).await.unwrap();
    assert_eq!(response.status(), 200);

    // WHEN 40 deltas come 20 ms apart (800 ms, no keep-alive period without one), then a message
    let path = Session::stream(&org, GLOBAL_SESSION).unwrap();
    let writer = tokio::spawn(async move {
        let envelope = |seq: u64, kind: &str, event: Value| {
            let mut e =
                json!({ "v": 1, "seq": seq, "ts": "2026-01-01T00:00:00Z", "session_id": "global", "kind": kind });
            e.as_object_mut().unwrap().extend(event.as_object().unwrap().clone());
            Append::one(e.to_string())
        };
        for seq in 1..=40 {
            let delta = json!({ "type": "message_update", "payload": { "message_id": "m1", "delta": "x" } });
            log.append(&path, envelope(seq, "harness", delta)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let message = json!({ "type": "agent_message",
            "payload": { "author": "bot", "text": "done", "ask": false, "posted_by": "key:k" } });
        log.append(&path, envelope(41, "submit", message)).await.unwrap();
    });
    let mut text = String::new();
    while !text.contains("\n\n") || !text.contains("id: 41") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the message in time")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    writer.await.unwrap();
    // THEN it sends keep-alives meanwhile, and the message alone, as a message
    let keepalives = text.matches(": keep-alive").count();
    assert!(keepalives >= 3, "800 ms of deltas get 100 ms keep-alives: {text}");
    assert_eq!(text.matches("id: ").count(), 1, "{text}");
    assert!(
        text.contains(r#""role":"agent","author":"bot","text":"done""#),
        "{text}"
    );
}

/// The global chat belongs to no workspace: its agent offers nothing that needs one, and asked to
/// add a helper it says where that can be done, with no approval asked and nothing failing.
pub(crate) async fn the_global_chat_offers_only_what_it_can_do<H: Harness>(harness: &H) {
    let stack = stack(harness).await;
    let person = &stack.api;
    // WHEN the person greets the global chat's agent
    let hello = person
        .ok(
            Method::POST,
            "/v1/sessions/global/messages",
            Some(json!({ "content": "hello" })),
        )
        .await;
    let events = until(person, "global", hello["turn_id"].as_str().unwrap(), "agent_end").await;
    // THEN it offers no helper, team or task
    let said = |events: &[Value]| -> String {
        events
            .iter()
            .filter(|e| e["type"] == "message_end")
            .map(|e| e["payload"]["text"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let greeting = said(&events);
    assert!(greeting.contains("demo agent"), "{greeting}");
    assert!(
        !greeting.contains("**helper**") && !greeting.contains("**task**"),
        "{greeting}"
    );
    // WHEN it is asked to add a helper
    let asked = person
        .ok(
            Method::POST,
            "/v1/sessions/global/messages",
            Some(json!({ "content": "please add a helper agent" })),
        )
        .await;
    let turn = asked["turn_id"].as_str().unwrap();
    let events = until(person, "global", turn, "agent_end").await;
    let of_turn: Vec<Value> = events.into_iter().filter(|e| e["turn_id"] == turn).collect();
    // THEN nothing is asked, run or failed, and the answer says where agents are added
    for e in &of_turn {
        let kind = e["type"].as_str().unwrap();
        assert!(
            !["tool_approval_required", "tool_start", "tool_end", "system"].contains(&kind),
            "{e}"
        );
    }
    let answer = said(&of_turn);
    assert!(
        answer.contains("a workspace's Spool agent") && answer.contains("cannot add"),
        "{answer}"
    );
}

on_both_backends!(global_http:
    an_agent_asks_first_and_a_person_answers,
    the_designs_seven_checks,
    an_agents_meta_is_checked_and_kept,
    the_chat_stream_skips_other_events_and_keeps_alive,
    the_global_chat_offers_only_what_it_can_do,
);
