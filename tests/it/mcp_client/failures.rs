//! A server that hangs or dies ends the call, not the turn; a stdio server is never started
//! where programs may not be.

use super::*;

/// A call the server never answers ends, after the call timeout, with an error the model reads
/// and a system message; the turn goes on and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hanging_server_ends_the_call_not_the_turn() {
    let provider = Provider::OpenAi;
    let pid = tempfile::NamedTempFile::new().unwrap();
    let answers = vec![
        provider.stream(
            &[],
            &[(
                "everything__trigger-long-running-operation",
                r#"{"duration":30,"steps":1}"#,
            )],
            QUICK,
            true,
        ),
        provider.stream(&["It hung."], &[], QUICK, true),
    ];
    let server = stdio_server(pid.path(), &[]);
    let s = setup(
        provider,
        answers,
        vec![server],
        mcp_settings(Duration::from_millis(1500)),
    )
    .await;
    let api = &s.stack.api;
    let started = Instant::now();
    let turn = send(api, &s.chat, "Run long").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call was not cut at its timeout"
    );
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let ends = calls_ran_once(&events, &turn, 1);
    let error = ends[0]["payload"]["error"].as_str().unwrap();
    assert!(error.contains("within 2 s") || error.contains("within 1 s"), "{error}");
    let system = one(&events, &turn, "system")["payload"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("everything__trigger-long-running-operation"),
        "{system}"
    );
    assert!(
        requests(&s.fake)[1]["messages"]
            .to_string()
            .contains("error: the MCP server")
    );
}

/// A server that dies during a call ends the call at once with an error; the turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dying_server_ends_the_call_not_the_turn() {
    let provider = Provider::Anthropic;
    let pid = tempfile::NamedTempFile::new().unwrap();
    let answers = vec![
        provider.stream(
            &[],
            &[(
                "everything__trigger-long-running-operation",
                r#"{"duration":25,"steps":1}"#,
            )],
            QUICK,
            true,
        ),
        provider.stream(&["It died."], &[], QUICK, true),
    ];
    let server = stdio_server(pid.path(), &[]);
    let s = setup(provider, answers, vec![server], mcp_settings(Duration::from_secs(60))).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Run long").await;
    until(api, &s.chat, &turn, "tool_start").await;
    // WHEN the server is killed mid-call
    let server_pid = std::fs::read_to_string(pid.path()).unwrap().trim().to_owned();
    let killed = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-9", &server_pid])
        .status()
        .unwrap();
    assert!(status.success());
    let events = until(api, &s.chat, &turn, "agent_end").await;
    // THEN the call ends with an error long before its timeout, and the turn completes
    assert!(killed.elapsed() < Duration::from_secs(15), "{:?}", killed.elapsed());
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let ends = calls_ran_once(&events, &turn, 1);
    assert!(
        ends[0]["payload"]["error"]
            .as_str()
            .unwrap()
            .contains("the MCP server `everything` failed")
    );
    one(&events, &turn, "system");
}

/// Where programs may not be started (Lambda), a stdio server is not: the turn says so once
/// and the model answers without its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stdio_server_is_never_started_where_programs_may_not_be() {
    let provider = Provider::OpenAi;
    let pid = tempfile::NamedTempFile::new().unwrap();
    let answers = vec![
        provider.stream(&["Trying."], &[("everything__echo", r#"{"message":"x"}"#)], QUICK, true),
        provider.stream(&["No tools."], &[], QUICK, true),
    ];
    let mcp = McpSettings {
        spawn_stdio: false,
        ..mcp_settings(Duration::from_secs(5))
    };
    let s = setup(provider, answers, vec![stdio_server(pid.path(), &[])], mcp).await;
    let api = &s.stack.api;
    let turn = send(api, &s.chat, "Echo").await;
    let events = until(api, &s.chat, &turn, "agent_end").await;
    assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
    let notes: Vec<String> = events
        .iter()
        .filter(|e| e["turn_id"] == turn && e["type"] == "system")
        .map(|e| e["payload"]["message"].as_str().unwrap().to_owned())
        .filter(|m| m.contains("stdio MCP servers"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("`everything`") && notes[0].contains("runners"),
        "{notes:?}"
    );
    assert!(
        !offered(provider, &requests(&s.fake)[0])
            .iter()
            .any(|n| n.starts_with("everything__"))
    );
    assert_eq!(
        std::fs::read_to_string(pid.path()).unwrap(),
        "",
        "the program never started"
    );
}
