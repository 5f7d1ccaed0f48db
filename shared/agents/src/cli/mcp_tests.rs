use std::{collections::BTreeMap, os::unix::fs::PermissionsExt, path::PathBuf};

use spool_chat::mcp::McpSecret;

use super::*;

const ENV_SECRET: &str = "env-s3cr3t-value";
const HEADER_SECRET: &str = "Bearer header-s3cr3t";

fn servers() -> Vec<McpEndpoint> {
    vec![
        McpEndpoint {
            id: "mcp_1".into(),
            name: "everything".into(),
            launch: McpLaunch::Stdio {
                command: "node".into(),
                args: vec!["server.js".into(), "stdio".into()],
                env: BTreeMap::from([("API_TOKEN".to_owned(), McpSecret::new(ENV_SECRET))]),
            },
            tools: BTreeMap::from([
                ("echo".to_owned(), ToolPolicy::Allow),
                ("get-env".to_owned(), ToolPolicy::Deny),
                ("trigger-long-running-operation".to_owned(), ToolPolicy::Ask),
            ]),
        },
        McpEndpoint {
            id: "mcp_2".into(),
            name: "remote".into(),
            launch: McpLaunch::Http {
                url: "https://mcp.example.com/mcp".into(),
                headers: BTreeMap::from([("Authorization".to_owned(), McpSecret::new(HEADER_SECRET))]),
            },
            tools: BTreeMap::new(),
        },
        McpEndpoint {
            id: "mcp_3".into(),
            name: "bad name\"]".into(),
            launch: McpLaunch::Http {
                url: "https://x.example.com/mcp".into(),
                headers: BTreeMap::new(),
            },
            tools: BTreeMap::new(),
        },
    ]
}

/// What the engine found on the servers it could list: `remote`'s tools (`everything` is a
/// stdio server it could not start).
fn listed() -> Listed {
    BTreeMap::from([(
        "mcp_2".to_owned(),
        BTreeMap::from([
            ("search".to_owned(), true),
            ("delete_all".to_owned(), false),
            ("read_secret".to_owned(), true),
        ]),
    )])
}

/// `remote` with `read_secret` (read-only) asked for, `delete_all` (not read-only) allowed.
fn with_policies() -> Vec<McpEndpoint> {
    let mut servers = servers();
    servers[1].tools = BTreeMap::from([
        ("read_secret".to_owned(), ToolPolicy::Ask),
        ("delete_all".to_owned(), ToolPolicy::Allow),
    ]);
    servers
}

#[test]
fn a_cli_is_offered_allowed_tools_and_read_only_ones_without_a_policy_only() {
    let servers = servers();
    let listed = listed();
    let given = offers(&servers, &listed);
    let names: Vec<(&str, &[&str], &[&str])> = given
        .iter()
        .map(|o| (o.server.name.as_str(), &o.allowed[..], &o.withheld[..]))
        .collect();
    assert_eq!(
        names,
        [
            // Not listed: only its `allow` tool.
            (
                "everything",
                &["echo"][..],
                &["get-env", "trigger-long-running-operation"][..]
            ),
            // Listed, no policy: its read-only tools; the other (default `ask`) withheld.
            ("remote", &["read_secret", "search"][..], &["delete_all"][..]),
        ]
    );
    // A policy set wins over the hint both ways.
    let servers = with_policies();
    let given = offers(&servers, &listed);
    assert_eq!(given[1].allowed, ["delete_all", "search"]);
    assert_eq!(given[1].withheld, ["read_secret"]);
    // A server nothing of which may run unattended is not given: `remote` unlisted (a stdio
    // server where the engine cannot start it), or listed with no read-only tool.
    let servers = self::servers();
    assert_eq!(offers(&servers, &Listed::new()).len(), 1);
    let writes = BTreeMap::from([("mcp_2".to_owned(), BTreeMap::from([("delete_all".to_owned(), false)]))]);
    let given = offers(&servers, &writes);
    assert_eq!(given.len(), 1);
    assert_eq!(given[0].server.name, "everything");
    // With no server left, the CLI gets nothing.
    let root = tempfile::tempdir().unwrap();
    let none = setup(CliType::Claude, &servers[1..2], &writes, root.path()).unwrap();
    assert!(none.args.is_empty() && none._dir.is_none());
}

#[test]
fn claude_gets_a_strict_config_with_only_the_tools_it_may_run() {
    let servers = servers();
    let listed = listed();
    let config = claude_config(&offers(&servers, &listed));
    let everything = &config["mcpServers"]["everything"];
    assert_eq!(everything["type"], "stdio");
    assert_eq!(everything["command"], "node");
    assert_eq!(everything["args"], json!(["server.js", "stdio"]));
    assert_eq!(everything["env"]["API_TOKEN"], ENV_SECRET);
    let remote = &config["mcpServers"]["remote"];
    assert_eq!(remote["type"], "http");
    assert_eq!(remote["headers"]["Authorization"], HEADER_SECRET);
    // A name no CLI could take is left out.
    assert_eq!(config["mcpServers"].as_object().unwrap().len(), 2, "{config}");
    let (allowed, denied) = claude_tools(&offers(&servers, &listed));
    // Tool by tool, never a whole server.
    assert_eq!(
        allowed,
        [
            "mcp__everything__echo",
            "mcp__remote__read_secret",
            "mcp__remote__search"
        ]
    );
    assert_eq!(
        denied,
        [
            "mcp__everything__get-env",
            "mcp__everything__trigger-long-running-operation",
            "mcp__remote__delete_all"
        ]
    );
}

#[test]
fn gemini_gets_streamable_http_and_included_tools() {
    let servers = servers();
    let listed = listed();
    let settings = gemini_settings(&offers(&servers, &listed));
    let remote = &settings["mcpServers"]["remote"];
    assert_eq!(remote["httpUrl"], "https://mcp.example.com/mcp");
    assert!(remote.get("url").is_none(), "{remote}");
    assert!(remote.get("type").is_none(), "{remote}");
    assert_eq!(settings["mcpServers"]["everything"]["includeTools"], json!(["echo"]));
    assert_eq!(remote["includeTools"], json!(["read_secret", "search"]));
    assert!(remote.get("excludeTools").is_none(), "{remote}");
}

#[test]
fn opencode_gets_local_and_remote_servers_with_only_allowed_tools_on() {
    let servers = servers();
    let listed = listed();
    let config = opencode_config(&offers(&servers, &listed));
    let local = &config["mcp"]["everything"];
    assert_eq!(local["type"], "local");
    assert_eq!(local["command"], json!(["node", "server.js", "stdio"]));
    assert_eq!(local["environment"]["API_TOKEN"], ENV_SECRET);
    assert_eq!(config["mcp"]["remote"]["type"], "remote");
    assert_eq!(config["mcp"]["remote"]["headers"]["Authorization"], HEADER_SECRET);
    assert_eq!(
        config["tools"],
        json!({
            "everything_*": false,
            "everything_echo": true,
            "remote_*": false,
            "remote_read_secret": true,
            "remote_search": true,
        })
    );
}

#[test]
fn codex_gets_its_toml_with_quoted_keys_and_escaped_values() {
    let mut odd = servers();
    if let McpLaunch::Stdio { args, .. } = &mut odd[0].launch {
        args.push("a \"quoted\" \\ arg\n".into());
    }
    let listed = listed();
    let text = codex_config(&offers(&odd, &listed));
    assert!(
        text.contains("[mcp_servers.\"everything\"]\nstartup_timeout_sec = 30\ncommand = \"node\"\n"),
        "{text}"
    );
    assert!(
        text.contains(r#"args = ["server.js", "stdio", "a \"quoted\" \\ arg\n"]"#),
        "{text}"
    );
    assert!(
        text.contains(&format!("env = {{ \"API_TOKEN\" = \"{ENV_SECRET}\" }}")),
        "{text}"
    );
    assert!(text.contains("\nurl = \"https://mcp.example.com/mcp\"\n"), "{text}");
    assert!(
        text.contains(&format!("http_headers = {{ \"Authorization\" = \"{HEADER_SECRET}\" }}")),
        "{text}"
    );
    assert!(text.contains("enabled_tools = [\"echo\"]\n"), "{text}");
    assert!(
        text.contains("enabled_tools = [\"read_secret\", \"search\"]\n"),
        "{text}"
    );
    assert!(
        !text.contains("disabled_tools") && !text.contains("delete_all"),
        "{text}"
    );
    assert!(!text.contains("bad name"), "{text}");
}

#[test]
fn secrets_go_only_into_a_private_file_that_is_removed_after_the_run() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().join(".mcp");
    for cli in CliType::ALL {
        let setup = setup(cli, &servers(), &listed(), &root).unwrap();
        // Never on the command line, never in the environment.
        let said = format!("{:?} {:?}", setup.args, setup.env);
        assert!(
            !said.contains(ENV_SECRET) && !said.contains("s3cr3t"),
            "{cli:?}: {said}"
        );
        let dir = setup._dir.as_ref().unwrap().path().to_path_buf();
        assert_eq!(dir.parent(), Some(root.as_path()));
        assert_eq!(std::fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700,
            "{cli:?}"
        );
        let files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{cli:?}: {files:?}");
        assert_eq!(
            std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert!(
            text.contains(ENV_SECRET) && text.contains(HEADER_SECRET),
            "{cli:?}: {text}"
        );
        // The CLI is pointed at it: by a path on its command line or in a variable.
        let path = files[0].display().to_string();
        let pointed = setup.args.contains(&path)
            || setup
                .env
                .iter()
                .any(|(_, v)| v.to_string_lossy() == path || v.to_string_lossy() == dir.display().to_string());
        assert!(pointed, "{cli:?}: {:?} {:?}", setup.args, setup.env);
        drop(setup);
        assert!(!dir.exists(), "{cli:?}: {} is left behind", dir.display());
    }
}

#[test]
fn no_servers_change_nothing() {
    let root = tempfile::tempdir().unwrap();
    for cli in CliType::ALL {
        let none = setup(cli, &[], &listed(), root.path()).unwrap();
        assert!(none.args.is_empty() && none.env.is_empty() && none._dir.is_none());
        // Only servers no CLI could name: nothing either.
        let bad = setup(cli, &servers()[2..], &listed(), root.path()).unwrap();
        assert!(bad.args.is_empty() && bad.env.is_empty() && bad._dir.is_none());
    }
}

#[test]
fn a_dead_runs_configuration_is_swept_and_a_live_ones_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let live = setup(CliType::Claude, &servers(), &listed(), root.path()).unwrap();
    let dead = setup(CliType::Codex, &servers(), &listed(), root.path()).unwrap();
    let dead_dir = dead._dir.unwrap().keep();
    // Only what is older than the age goes.
    assert_eq!(sweep(root.path(), std::time::Duration::from_secs(3600)), 0);
    assert!(dead_dir.exists());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let live_dir = live._dir.as_ref().unwrap().path().to_path_buf();
    std::fs::write(live_dir.join("touch"), "").unwrap();
    assert_eq!(sweep(root.path(), std::time::Duration::from_millis(10)), 1);
    assert!(!dead_dir.exists() && live_dir.exists());
}
