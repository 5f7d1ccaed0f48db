//! A CLI agent is given the workspace's servers, not their tools.

use super::*;

/// A CLI that records what it was asked and answers at once.
#[derive(Default)]
struct RecordingCli(std::sync::Mutex<Vec<spool_agents::runtime::Request>>);

#[async_trait::async_trait]
impl spool_agents::runtime::Runtime for RecordingCli {
    fn describe(&self, _: &spool_agents::runtime::Request) -> String {
        "cli:claude".into()
    }

    fn works_on_disk(&self) -> bool {
        true
    }

    async fn respond(
        &self,
        request: &spool_agents::runtime::Request,
        _: &mut dyn spool_agents::runtime::Sink,
    ) -> Result<spool_agents::runtime::Reply, spool_agents::runtime::Error> {
        self.0.lock().unwrap().push(request.clone());
        Ok(spool_agents::runtime::Reply {
            text: "Done on disk.".into(),
            one_shot: true,
            ..Default::default()
        })
    }
}

struct RecordingClis(Arc<RecordingCli>);

#[async_trait::async_trait]
impl spool_chat::clis::CliProbe for RecordingClis {
    async fn clis(&self) -> Vec<spool_chat::clis::CliStatus> {
        Vec::new()
    }
}

impl spool_agents::runtimes::CliRuntimes for RecordingClis {
    fn known_clis(&self) -> Vec<spool_chat::clis::CliStatus> {
        Vec::new()
    }

    fn runtime(&self, _: spool_chat::workspace::CliType) -> Result<Arc<dyn spool_agents::runtime::Runtime>, String> {
        Ok(self.0.clone())
    }

    fn first_installed(&self) -> Option<spool_chat::workspace::CliType> {
        Some(spool_chat::workspace::CliType::Claude)
    }
}

/// A CLI agent is given the workspace's servers (with their secrets, for its own MCP
/// configuration) instead of their tools; the engine lists each server's tools once for it,
/// with the read-only hints its allowlist needs, and stops the server. Where programs may not
/// be started, a stdio server is not listed (the CLI then gets only its `allow` tools).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cli_agent_gets_the_servers_and_their_read_only_tools_not_their_tools() {
    for spawn_stdio in [true, false] {
        let harness = EmbeddedHarness::new();
        let cli = Arc::new(RecordingCli::default());
        let runtimes = spool_agents::Runtimes::scripted_only().with_cli(Arc::new(RecordingClis(cli.clone())));
        let pid = tempfile::NamedTempFile::new().unwrap();
        let server = stdio_server(pid.path(), &[]);
        let settings = Settings {
            mcp: McpSettings {
                spawn_stdio,
                ..mcp_settings(Duration::from_secs(5))
            },
            ..test_settings()
        };
        let stack = stack_with_mcp(&harness, runtimes, settings, Arc::new(Catalog(vec![server.clone()]))).await;
        let api = &stack.api;
        let ws = api
            .ok(Method::POST, "/v1/workspaces", Some(json!({ "name": "CLI" })))
            .await;
        let ws = ws["id"].as_str().unwrap().to_owned();
        let agent = api
            .ok(
                Method::POST,
                &format!("/v1/workspaces/{ws}/agents"),
                Some(json!({ "name": "Coder", "instruction": "Code.", "runtime": "cli", "cli_type": "claude" })),
            )
            .await;
        let chat = api
            .ok(
                Method::POST,
                "/v1/sessions",
                Some(json!({ "agent_id": agent["id"], "workspace_id": ws })),
            )
            .await;
        let chat = chat["id"].as_str().unwrap().to_owned();
        let turn = send(api, &chat, "Code something").await;
        let events = until(api, &chat, &turn, "agent_end").await;
        assert_eq!(one(&events, &turn, "agent_end")["payload"]["reason"], "complete");
        let asked = cli.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].mcp_servers, vec![server]);
        assert!(!asked[0].tools.iter().any(|t| t.name.starts_with("everything__")));
        let started = std::fs::read_to_string(pid.path()).unwrap();
        if spawn_stdio {
            let listed = &asked[0].mcp_listed["mcp_stdio"];
            // The reference server's hints: `echo` reads, `toggle-simulated-logging` does not.
            assert_eq!(listed.get("echo"), Some(&true), "{listed:?}");
            assert_eq!(listed.get("toggle-simulated-logging"), Some(&false), "{listed:?}");
            let pid: u32 = started.trim().parse().expect("the listing started the server");
            spool_tests::eventually("the listed server is stopped", || async { (!alive(pid)).then_some(()) }).await;
        } else {
            assert!(asked[0].mcp_listed.is_empty(), "{:?}", asked[0].mcp_listed);
            assert_eq!(started, "", "the engine started no server");
        }
        no_secret_in(api, &chat).await;
    }
}
