//! How a server is reached: the probe over both transports, and the deployment's address
//! policy at connect time.

use super::*;

/// The probe (a workspace's "test the connection") lists a server's tools, read-only ones
/// marked, over both transports; an unreachable server is a reason, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_probe_lists_a_servers_tools_over_both_transports() {
    let probe = Probe::new(mcp_settings(Duration::from_secs(10)));
    let pid = tempfile::NamedTempFile::new().unwrap();
    let http = HttpServer::start().await;
    for endpoint in [stdio_server(pid.path(), &[]), http.endpoint(&[])] {
        let tools = probe.probe(&endpoint).await.unwrap();
        let echo = tools.iter().find(|t| t.name == "echo").unwrap();
        assert!(echo.read_only);
        assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
        let logging = tools.iter().find(|t| t.name == "toggle-simulated-logging").unwrap();
        assert!(!logging.read_only);
    }
    let gone = McpEndpoint {
        launch: McpLaunch::Http {
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::from([("Authorization".to_owned(), McpSecret::new(HEADER_SECRET))]),
        },
        ..http.endpoint(&[])
    };
    let reason = probe.probe(&gone).await.unwrap_err();
    assert!(!reason.contains("hdr-s3cr3t"), "{reason}");
    let lambda = Probe::new(McpSettings::default());
    let reason = lambda.probe(&stdio_server(pid.path(), &[])).await.unwrap_err();
    assert!(reason.contains("not started here"), "{reason}");
}

/// An http server on a loopback or private address is not reached where the deployment's
/// policy is public addresses only (a Lambda, `spool serve` on a public address), by its
/// address or by a name resolving to it; it is where loopback is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_on_the_deployments_own_network_is_not_reached_under_the_public_policy() {
    let http = HttpServer::start().await;
    let public_only = McpSettings {
        urls: UrlPolicy { loopback_http: false },
        ..mcp_settings(Duration::from_secs(10))
    };
    let by_name = |url: &str| McpEndpoint {
        launch: McpLaunch::Http {
            url: url.to_owned(),
            headers: BTreeMap::new(),
        },
        ..http.endpoint(&[])
    };
    let port = http.url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let named = by_name(&format!("http://localhost:{port}/mcp"));
    for endpoint in [http.endpoint(&[]), named.clone()] {
        let reason = Probe::new(public_only.clone()).probe(&endpoint).await.unwrap_err();
        assert!(reason.contains("http is only for localhost"), "{reason}");
    }
    // An https URL naming a private literal is refused as written.
    let private = by_name(&format!("https://10.0.0.1:{port}/mcp"));
    let reason = Probe::new(public_only).probe(&private).await.unwrap_err();
    assert!(reason.contains("public"), "{reason}");
    let loopback = Probe::new(mcp_settings(Duration::from_secs(10)));
    for endpoint in [http.endpoint(&[]), named] {
        let tools = loopback.probe(&endpoint).await.unwrap();
        assert!(tools.iter().any(|t| t.name == "echo"));
    }
}
