//! Chats through the chat API over real HTTP on loopback, on both backends: sessions, messages
//! as numbered events, history, the Durable Streams view of the same events, and the errors and
//! tenant isolation of every session route.

use reqwest::Method;
use serde_json::{Value, json};
use spool_tests::Harness;

use crate::support::{Api, setup, sse_events};

async fn events(api: &Api, id: &str, query: &str) -> Value {
    api.ok(Method::GET, &format!("/v1/sessions/{id}/events{query}"), None)
        .await
}

fn seqs(events: &Value) -> Vec<u64> {
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

/// A chat is made in a workspace, takes messages as numbered events exactly once, lists by
/// activity, changes agent and CLI, and is deleted with its stream.
pub(crate) async fn chats_take_messages_as_numbered_events<H: Harness>(harness: &H) {
    let (api, _, _) = setup(harness).await;
    let ws = api
        .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "W" })))
        .await;
    let ws = ws["id"].as_str().unwrap().to_owned();
    let helper = api
        .ok(
            Method::POST,
            &format!("/v1/workspaces/{ws}/agents"),
            Some(json!({ "name": "Helper" })),
        )
        .await;
    let helper = helper["id"].as_str().unwrap().to_owned();

    // WHEN two chats are made: one with the default agent, one with Helper
    let first = api
        .ok(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
        .await;
    assert_eq!(
        (first["title"].as_str(), first["agent_name"].as_str()),
        (Some("Untitled chat"), Some("Spool"))
    );
    let first = first["id"].as_str().unwrap().to_owned();
    assert!(first.starts_with("ses_"));
    let second = api
        .ok(
            Method::POST,
            "/v1/sessions",
            Some(json!({ "agent_id": helper, "title": "Second" })),
        )
        .await;
    assert_eq!(second["workspace_id"], ws.as_str(), "the agent's workspace");
    let second = second["id"].as_str().unwrap().to_owned();

    // WHEN a message is sent, and sent again with the same client_message_id
    let body = json!({ "content": "hello", "client_message_id": "c-1", "metadata": { "lang": "en" } });
    let (status, sent) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{first}/messages"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    assert_eq!(
        (sent["seq"].as_u64(), sent["duplicate"].as_bool()),
        (Some(1), Some(false))
    );
    let (status, again) = api
        .call(Method::POST, &format!("/v1/sessions/{first}/messages"), Some(body))
        .await;
    // THEN the retry answers the first result and appends nothing
    assert_eq!(status, 202);
    assert_eq!(
        (again["seq"].as_u64(), again["duplicate"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(again["turn_id"], sent["turn_id"]);

    // WHEN another message comes while that turn is pending, it is refused, naming the turn
    let (status, busy) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{first}/messages"),
            Some(json!({ "content": "and?" })),
        )
        .await;
    assert_eq!(status, 409, "{busy}");
    assert_eq!(busy["error"]["code"], "turn_pending");
    assert_eq!(busy["error"]["pending_turn_id"], sent["turn_id"]);
    let got = api.ok(Method::GET, &format!("/v1/sessions/{first}"), None).await;
    assert_eq!(got["pending_turn_id"], sent["turn_id"]);

    // WHEN ten messages arrive at once, asking to queue behind the pending turn
    let messages_path = format!("/v1/sessions/{first}/messages");
    let posts = (0..10).map(|i| {
        api.call(
            Method::POST,
            &messages_path,
            Some(json!({ "content": format!("message {i}"), "on_busy": "enqueue" })),
        )
    });
    let results = futures_util::future::join_all(posts).await;
    // THEN each gets its own seq, and every event holds the seq of its place in the stream
    let mut got: Vec<u64> = results.iter().map(|(_, v)| v["seq"].as_u64().unwrap()).collect();
    got.sort_unstable();
    assert_eq!(got, (2..=11).collect::<Vec<_>>());
    let all = events(&api, &first, "?after=0").await;
    assert_eq!(seqs(&all), (1..=11).collect::<Vec<_>>());
    assert_eq!(all["up_to_date"], true);
    let hello = &all["events"][0];
    assert_eq!(hello["type"], "user_message_submitted");
    assert_eq!(hello["kind"], "submit");
    assert_eq!(hello["session_id"], first.as_str());
    assert_eq!(hello["client_message_id"], "c-1");
    assert_eq!(hello["payload"]["content"], "hello");
    assert_eq!(hello["payload"]["metadata"]["lang"], "en");
    assert_eq!(hello["turn_id"], sent["turn_id"]);
    assert_eq!(hello["v"], 1);
    // AND each message asked for one turn, the retried one too, in the session's queue: the
    // first from its seq; each queued behind it without a client id before it was appended
    // (from the tail before it), to wait for it
    let queue = harness.turns().await;
    let mut queued = Vec::new();
    for _ in 0..20 {
        let got = queue
            .receive(&spool_chat::turns::Receive::new(
                10,
                spool_chat::turns::Lease::new(std::time::Duration::from_secs(60), "test"),
                std::time::Duration::from_millis(500),
            ))
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        for delivery in got {
            assert_eq!(
                (delivery.job.session_id.as_str(), delivery.attempts),
                (first.as_str(), 1)
            );
            queued.push((
                delivery.job.turn_id.clone(),
                delivery.job.trigger_seq,
                delivery.job.before_message_ms,
            ));
            queue.ack(&delivery.receipt).await.unwrap();
        }
    }
    queued.sort();
    let turns: Vec<(String, u64)> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["turn_id"].as_str().unwrap().to_owned(), e["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(queued.len(), turns.len(), "{queued:?}");
    for ((turn, trigger, first), (own, seq)) in queued
        .iter()
        .zip(turns.iter().collect::<std::collections::BTreeSet<_>>())
    {
        assert_eq!(turn, own);
        match first {
            None => assert_eq!(trigger, seq, "{turn}"),
            Some(_) => assert!(trigger < seq, "{turn}: {trigger} {seq}"),
        }
    }

    // AND history pages by seq
    assert_eq!(seqs(&events(&api, &first, "?after=9").await), [10, 11]);
    let page = events(&api, &first, "?after=0&limit=3").await;
    assert_eq!(
        (seqs(&page), page["up_to_date"].as_bool(), page["last_seq"].as_u64()),
        (vec![1, 2, 3], Some(false), Some(3))
    );
    assert_eq!(
        seqs(&events(&api, &first, "?limit=2").await),
        [10, 11],
        "the last events by default"
    );

    // AND the same events are the session's Durable Stream
    let stream: Value = api
        .get(&format!("/v1/stream/sessions/{first}?offset=-1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(stream, all["events"]);

    // AND the chat with the latest message lists first, with its preview
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{second}/messages"),
        Some(json!({ "content": "second\nchat" })),
    )
    .await;
    let list = api
        .ok(Method::GET, &format!("/v1/sessions?workspace_id={ws}"), None)
        .await;
    let listed: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [second.as_str(), first.as_str()]);
    assert_eq!(list["sessions"][0]["last_message_preview"], "second chat");
    assert_eq!(list["sessions"][0]["agent_name"], "Helper");

    // AND the workspace's feed announced each message once, and clients cannot write it
    let feed_url = format!("{}/v1/stream/workspaces/{ws}/feed", api.base);
    let feed: Value = api
        .http
        .get(format!("{feed_url}?offset=-1"))
        .bearer_auth(api.token.as_deref().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let added: Vec<(&str, &str)> = feed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "chat.message_added")
        .map(|e| (e["chat_id"].as_str().unwrap(), e["author_type"].as_str().unwrap()))
        .collect();
    assert_eq!(added.iter().filter(|(s, _)| *s == first).count(), 11, "{added:?}");
    assert_eq!(added.last(), Some(&(second.as_str(), "user")));
    let write = api
        .http
        .post(&feed_url)
        .bearer_auth(api.token.as_deref().unwrap())
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 403);

    // WHEN blank, missing or malformed messages are sent, they are refused and nothing is stored
    for bad in [
        json!({ "content": "  \n\t " }),
        json!({ "content": "" }),
        json!({}),
        json!({ "content": 5 }),
        json!({ "content": "hi", "client_message_id": "has space" }),
        json!({ "content": "hi", "on_busy": "sometimes" }),
        json!({ "content": "hi", "extra": true }),
    ] {
        let (status, error) = api
            .call(
                Method::POST,
                &format!("/v1/sessions/{first}/messages"),
                Some(bad.clone()),
            )
            .await;
        assert_eq!(status, 400, "{bad}: {error}");
    }
    let (status, _) = api
        .call(Method::GET, &format!("/v1/sessions/{first}/events?after=abc"), None)
        .await;
    assert_eq!(status, 400);
    assert_eq!(seqs(&events(&api, &first, "?after=0").await).len(), 11);

    // WHEN the second chat's CLI is overridden and then its agent changed
    let changed = api
        .ok(
            Method::PATCH,
            &format!("/v1/sessions/{second}"),
            Some(json!({ "cli_type": "claude", "title": "Renamed" })),
        )
        .await;
    assert_eq!(
        (changed["cli_type"].as_str(), changed["title"].as_str()),
        (Some("claude"), Some("Renamed"))
    );
    let builtin = api.ok(Method::GET, &format!("/v1/workspaces/{ws}/agents"), None).await["agents"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let changed = api
        .ok(
            Method::PATCH,
            &format!("/v1/sessions/{second}"),
            Some(json!({ "agent_id": builtin })),
        )
        .await;
    // THEN the override is reset to the new agent's
    assert!(changed["cli_type"].is_null());
    assert_eq!(changed["agent_name"], "Spool");
    api.ok(
        Method::PATCH,
        &format!("/v1/sessions/{second}"),
        Some(json!({ "agent_id": helper })),
    )
    .await;

    // WHEN Helper is deleted, its chat moves to the built-in agent
    assert_eq!(
        api.call(Method::DELETE, &format!("/v1/agents/{helper}"), None).await.0,
        204
    );
    assert_eq!(
        api.ok(Method::GET, &format!("/v1/sessions/{second}"), None).await["agent_id"],
        builtin.as_str()
    );

    // WHEN the worker finishes the pending turn, the next message starts a new one
    let org = crate::support::org_of(&api);
    {
        use spool_chat::metadata::Sessions;
        let metadata = harness.metadata().await;
        let pending = sent["turn_id"].as_str().unwrap();
        assert!(metadata.release_turn(&org, &first, pending).await.unwrap());
        assert!(
            !metadata.release_turn(&org, &first, pending).await.unwrap(),
            "released once"
        );
    }
    let (status, next) = api
        .call(
            Method::POST,
            &format!("/v1/sessions/{first}/messages"),
            Some(json!({ "content": "next" })),
        )
        .await;
    assert_eq!(status, 202, "{next}");
    let got = api.ok(Method::GET, &format!("/v1/sessions/{first}"), None).await;
    assert_eq!(got["pending_turn_id"], next["turn_id"]);

    // WHEN a chat is deleted, its record and stream are gone
    assert_eq!(
        api.call(Method::DELETE, &format!("/v1/sessions/{first}"), None).await.0,
        204
    );
    assert_eq!(
        api.call(Method::GET, &format!("/v1/sessions/{first}"), None).await.0,
        404
    );
    let gone = api.get(&format!("/v1/stream/sessions/{first}?offset=-1")).await;
    assert_eq!(gone.status(), 404);

    // WHEN the workspace is deleted, its remaining chat goes with it
    assert_eq!(
        api.call(Method::DELETE, &format!("/v1/workspaces/{ws}"), None).await.0,
        204
    );
    assert_eq!(
        api.call(Method::GET, &format!("/v1/sessions/{second}"), None).await.0,
        404
    );
}

/// Every session route: another organization gets 404, no token 401, and nothing changes.
pub(crate) async fn session_routes_are_isolated<H: Harness>(harness: &H) {
    let (a, b, anonymous) = setup(harness).await;
    let session = a
        .ok(Method::POST, "/v1/sessions", Some(json!({ "title": "A's" })))
        .await;
    let id = session["id"].as_str().unwrap().to_owned();
    a.ok(
        Method::POST,
        &format!("/v1/sessions/{id}/messages"),
        Some(json!({ "content": "secret" })),
    )
    .await;
    let before = (
        a.ok(Method::GET, &format!("/v1/sessions/{id}"), None).await,
        events(&a, &id, "?after=0").await,
    );

    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/sessions/{id}"), None),
        (
            Method::PATCH,
            format!("/v1/sessions/{id}"),
            Some(json!({ "title": "stolen" })),
        ),
        (Method::DELETE, format!("/v1/sessions/{id}"), None),
        (
            Method::POST,
            format!("/v1/sessions/{id}/messages"),
            Some(json!({ "content": "intruder" })),
        ),
        (Method::GET, format!("/v1/sessions/{id}/events?after=0"), None),
    ];
    for (method, path, body) in &routes {
        let (status, error) = b.call(method.clone(), path, body.clone()).await;
        assert_eq!(status, 404, "org B: {method} {path}: {error}");
        assert_eq!(
            anonymous.call(method.clone(), path, body.clone()).await.0,
            401,
            "{method} {path}"
        );
    }
    let foreign_stream = b.get(&format!("/v1/stream/sessions/{id}?offset=-1")).await;
    assert_eq!(foreign_stream.status(), 404);
    assert!(
        b.ok(Method::GET, "/v1/sessions", None).await["sessions"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Org B cannot attach its chat to A's workspace or agent either.
    let ws = a.ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "A" }))).await;
    let (status, _) = b
        .call(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws["id"] })))
        .await;
    assert_eq!(status, 404);

    let after = (
        a.ok(Method::GET, &format!("/v1/sessions/{id}"), None).await,
        events(&a, &id, "?after=0").await,
    );
    assert_eq!(after, before);
}

/// A chat's events as server-sent events: `id: <seq>`, live, resumable with Last-Event-ID.
pub(crate) async fn chat_events_stream_live_and_resume<H: Harness>(harness: &H) {
    let (api, b, anonymous) = setup(harness).await;
    let session = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = session["id"].as_str().unwrap().to_owned();
    assert_eq!(session["events_url"], format!("/v1/sessions/{id}/stream"));
    for i in 1..=3 {
        api.ok(
            Method::POST,
            &format!("/v1/sessions/{id}/messages"),
            Some(json!({ "content": format!("m{i}"), "on_busy": "enqueue" })),
        )
        .await;
    }
    let url = format!("{}/v1/sessions/{id}/stream", api.base);
    let token = api.token.clone().unwrap();

    // WHEN a client subscribes from the start
    let response = api.http.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // AND a message arrives while it listens
    let listener = tokio::spawn(sse_events(response, 4));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{id}/messages"),
        Some(json!({ "content": "live", "on_busy": "enqueue" })),
    )
    .await;
    // THEN it gets the history and the new event, each with its seq as the id
    let got = listener.await.unwrap();
    assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(got.iter().all(|(id, event)| event["seq"] == *id));
    assert_eq!(got[3].1["payload"]["content"], "live");

    // WHEN it reconnects with Last-Event-ID (as EventSource does), with the token in the query
    let resumed = api
        .http
        .get(format!("{url}?token={token}"))
        .header("last-event-id", "2")
        .send()
        .await
        .unwrap();
    // THEN it gets exactly what came after
    let got = sse_events(resumed, 2).await;
    assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [3, 4]);
    // AND ?after= works the same
    let after = api
        .http
        .get(format!("{url}?after=3"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(sse_events(after, 1).await[0].0, 4);

    // Bad resumes are 400; another organization 404; no token 401.
    for (header, query) in [(Some("abc"), ""), (None, "?after=x"), (None, "?after=99")] {
        let mut request = api.http.get(format!("{url}{query}")).bearer_auth(&token);
        if let Some(h) = header {
            request = request.header("last-event-id", h);
        }
        assert_eq!(request.send().await.unwrap().status(), 400, "{header:?} {query}");
    }
    let foreign = b
        .http
        .get(&url)
        .bearer_auth(b.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 404);
    assert_eq!(anonymous.http.get(&url).send().await.unwrap().status(), 401);
}

/// A chat says who made it and when it last changed, and the list filters by its maker.
pub(crate) async fn chats_carry_their_maker_and_last_change<H: Harness>(harness: &H) {
    let (person, _, _) = setup(harness).await;
    let agent = crate::support::agent_client(harness, &person).await;
    let mine = person.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let theirs = agent.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let me = mine["created_by"].as_str().unwrap().to_owned();
    assert!(me.starts_with("key:"), "{mine}");
    assert_ne!(theirs["created_by"], mine["created_by"]);
    assert_eq!(mine["updated_at"], mine["created_at"]);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let id = mine["id"].as_str().unwrap();
    let renamed = person
        .ok(
            Method::PATCH,
            &format!("/v1/sessions/{id}"),
            Some(json!({ "title": "Renamed" })),
        )
        .await;
    // (As times: a time on a whole second is written without a fraction.)
    let at = |v: &Value| {
        time::OffsetDateTime::parse(
            v["updated_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert!(at(&renamed) > at(&mine), "{renamed}");
    assert_eq!(renamed["created_by"], me.as_str());
    let listed = person
        .ok(Method::GET, &format!("/v1/sessions?created_by={me}"), None)
        .await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id]);
    let all = person.ok(Method::GET, "/v1/sessions", None).await;
    assert!(all["sessions"].as_array().unwrap().len() >= 2);
}

/// A chat whose last event came from no turn (here an abort of an idle chat) still has its last
/// page sealed once it is idle: the chat service asks, as a turn's end does.
pub(crate) async fn a_chat_ending_without_a_turn_is_sealed_once_idle<H: Harness>(harness: &H) {
    use spool_log::port::StreamReader;
    let (api, _, _) = setup(harness).await;
    let chat = api.ok(Method::POST, "/v1/sessions", Some(json!({}))).await;
    let id = chat["id"].as_str().unwrap();
    api.ok(
        Method::POST,
        &format!("/v1/sessions/{id}/control"),
        Some(json!({ "action": "abort" })),
    )
    .await;
    let org = crate::support::org_of(&api);
    let path = spool_chat::session::Session::stream(&org, id).unwrap();
    let log = harness.instance().await;
    spool_tests::eventually("the chat sealed to its end", || async {
        let meta = log.metadata(&path).await.unwrap();
        (meta.tail.seq() > 0 && meta.sealed == meta.tail).then_some(())
    })
    .await;
}

on_both_backends!(sessions_http:
    a_chat_ending_without_a_turn_is_sealed_once_idle,
    chats_carry_their_maker_and_last_change,
    chats_take_messages_as_numbered_events,
    session_routes_are_isolated,
    chat_events_stream_live_and_resume,
);
