//! `spool serve` as users run it: a real process, real HTTP on loopback.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

/// A running `spool serve`, stopped when dropped.
struct Server {
    child: Child,
    url: String,
    banner: String,
    /// The lines printed before the server was ready (the banner and the local API key).
    banner_lines: Vec<String>,
}

impl Server {
    /// The local organization's API key, as the banner prints it.
    fn api_key(&self) -> String {
        self.banner_lines[1]
            .split_whitespace()
            .find(|w| w.starts_with("spool_"))
            .expect("the banner's API key")
            .to_owned()
    }

    fn start(args: &[&str], cwd: &Path) -> Self {
        Self::start_with(args, cwd, &[])
    }

    fn start_with(args: &[&str], cwd: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
            .arg("serve")
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .current_dir(cwd)
            .env_remove("SPOOL_ADDR")
            .env_remove("SPOOL_WEB_DIR")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn spool");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner_lines = Vec::new();
        // The address, the key and (with authorization on) the web UI's sign-in link.
        let lines = if args.contains(&"--no-auth") { 2 } else { 3 };
        for _ in 0..lines {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("read the banner");
            banner_lines.push(line);
        }
        let banner = banner_lines[0].clone();
        let url = banner
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {banner:?}"))
            .to_owned();
        Self {
            child,
            url,
            banner,
            banner_lines,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn health(url: &str) -> serde_json::Value {
    let response = reqwest::get(format!("{url}/healthz")).await.expect("GET /healthz");
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON health")
}

#[tokio::test]
async fn serve_prints_its_url_and_answers_health_checks() {
    // GIVEN an empty data directory
    let dir = tempfile::tempdir().unwrap();
    // WHEN spool serve starts on a free port
    let server = Server::start(&["--data-dir", dir.path().join("data").to_str().unwrap()], dir.path());
    // THEN it prints where it listens and what it stores in, and answers there
    assert!(server.banner.contains("embedded store"), "{}", server.banner);
    assert_eq!(health(&server.url).await["status"], "ok");
    // AND its store exists on disk
    assert!(dir.path().join("data/spool.db").exists());
}

#[tokio::test]
async fn serve_refuses_a_taken_address_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--addr", &addr, "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pass --addr with a free port"), "{stderr}");
}

#[cfg(feature = "emulator")]
#[tokio::test]
async fn serve_runs_on_the_aws_backend_from_the_emulator_env_file() {
    let env_file = std::env::var_os("SPOOL_EMULATOR_ENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.env.emulator"));
    assert!(env_file.exists(), "start the emulator first: make emulator-up");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &["--backend", "aws", "--env-file", env_file.to_str().unwrap()],
        dir.path(),
    );
    assert!(
        server.banner.contains("AWS backend at http://127.0.0.1"),
        "{}",
        server.banner
    );
    assert_eq!(health(&server.url).await["status"], "ok");
}

#[tokio::test]
async fn no_auth_is_refused_off_loopback() {
    // GIVEN an address every interface can reach
    let dir = tempfile::tempdir().unwrap();
    // WHEN spool serve is asked to turn authorization off there
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--no-auth", "--addr", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    // THEN it refuses, says how to fix it, and has created nothing
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
    assert!(!dir.path().join("data").exists());
}

#[tokio::test]
async fn streams_need_a_token_signed_with_the_kept_secret_unless_no_auth() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let client = reqwest::Client::new();
    let create = |url: &str, token: Option<&str>| {
        let mut request = client
            .put(format!("{url}/v1/stream/cli-auth"))
            .header("content-type", "application/json");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };

    // GIVEN spool serve with authorization on
    let server = Server::start(&["--data-dir", data.to_str().unwrap()], dir.path());
    // WHEN a client creates a stream without a token
    let response = create(&server.url, None).await.unwrap();
    // THEN it gets 401
    assert_eq!(response.status(), 401);
    // AND the secret it signs with is kept in the data directory, readable by its owner only
    let secret = std::fs::read_to_string(data.join("jwt-secret")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("jwt-secret")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // WHEN it restarts and a client sends a token signed with that secret
    drop(server);
    let server = Server::start(&["--data-dir", data.to_str().unwrap()], dir.path());
    let keys = spool_auth::TokenKeys::new(secret.trim().as_bytes()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = keys.issue(&spool_auth::Claims::new("cli-test", "acme", now)).unwrap();
    // THEN the token still works: the stream is created
    assert_eq!(create(&server.url, Some(&token)).await.unwrap().status(), 201);
    // AND a token signed with another secret is refused
    let other = spool_auth::TokenKeys::new(&[7u8; 32]).unwrap();
    let forged = other.issue(&spool_auth::Claims::new("cli-test", "acme", now)).unwrap();
    assert_eq!(create(&server.url, Some(&forged)).await.unwrap().status(), 401);
    drop(server);

    // WHEN it runs with --no-auth on loopback
    let server = Server::start(&["--no-auth", "--data-dir", data.to_str().unwrap()], dir.path());
    // THEN the banner says so and a request without a token works
    assert!(server.banner.contains("no authorization"), "{}", server.banner);
    assert_eq!(create(&server.url, None).await.unwrap().status(), 201);
}

/// Runs `spool admin …` on `data`: (success, stdout, stderr).
fn admin(args: &[&str], data: &Path) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn handshake(url: &str, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/handshake"))
        .json(&serde_json::json!({ "api_key": key, "user_agent": "cli-test" }))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn admin_makes_organizations_and_keys_that_the_handshake_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // WHEN an operator makes an organization and a key for it
    let (ok, out, err) = admin(&["create-org", "Acme Inc", "--id", "acme"], &data);
    assert!(ok, "{err}");
    let org: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(org, serde_json::json!({ "org_id": "acme", "name": "Acme Inc" }));
    let (ok, out, err) = admin(&["create-api-key", "acme", "--capability", "agent"], &data);
    assert!(ok, "{err}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    let key = created["api_key"].as_str().unwrap().to_owned();
    assert_eq!(created["org_id"], "acme");
    assert_eq!(created["capabilities"], serde_json::json!(["agent"]));
    // THEN the store keeps only the key's hash, never its secret
    let secret = key.rsplit('_').next().unwrap();
    let stored = std::fs::read(data.join("metadata.db")).unwrap();
    assert!(!stored.windows(secret.len()).any(|w| w == secret.as_bytes()));
    // AND mistakes are refused with what to do next, changing nothing
    let (ok, _, err) = admin(&["create-org", "Again", "--id", "acme"], &data);
    assert!(!ok && err.contains("already exists"), "{err}");
    let (ok, _, err) = admin(&["create-api-key", "nobody"], &data);
    assert!(
        !ok && err.contains("does not exist") && err.contains("create-org"),
        "{err}"
    );
    let (ok, _, err) = admin(&["create-org", "Bad id", "--id", "a/b"], &data);
    assert!(!ok && err.contains("organization id"), "{err}");
    // A runner's key carries `runner` alone.
    let (ok, out, err) = admin(&["create-api-key", "acme", "--capability", "runner"], &data);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["capabilities"],
        serde_json::json!(["runner"])
    );
    let mixed = [
        "create-api-key",
        "acme",
        "--capability",
        "runner",
        "--capability",
        "agent",
    ];
    let (ok, _, err) = admin(&mixed, &data);
    assert!(!ok && err.contains("runner") && err.contains("alone"), "{err}");

    // WHEN spool serve runs on that data
    let server = Server::start(&["--data-dir", data.to_str().unwrap()], dir.path());
    // THEN the key's handshake gives a token for its organization and capabilities
    let response = handshake(&server.url, &key).await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["org_id"], "acme");
    assert_eq!(body["capabilities"], serde_json::json!(["agent"]));
}

#[tokio::test]
async fn serve_prints_the_local_organizations_key_on_every_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let key_in = |server: &Server| -> String {
        server
            .banner_lines
            .iter()
            .find_map(|line| line.split_whitespace().find(|w| w.starts_with("spool_")))
            .unwrap_or_else(|| panic!("no API key in {:?}", server.banner_lines))
            .to_owned()
    };
    // GIVEN a first start, which makes the local organization and its key
    let first = Server::start(&["--data-dir", data.to_str().unwrap()], dir.path());
    let key = key_in(&first);
    drop(first);
    // WHEN it starts again
    let server = Server::start(&["--data-dir", data.to_str().unwrap()], dir.path());
    // THEN it prints the same key, which the handshake accepts for the `local` organization
    assert_eq!(key_in(&server), key);
    // AND a link that opens the web UI signed in with it
    let link = format!("{}/#key={key}", server.url);
    assert!(server.banner_lines[2].contains(&link), "{:?}", server.banner_lines);
    let response = handshake(&server.url, &key).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<serde_json::Value>().await.unwrap()["org_id"], "local");
    // AND the kept key is readable by its owner only
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join("local-api-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn serve_serves_the_built_web_ui_at_the_root_and_says_how_to_build_it_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    // GIVEN a built UI: index.html and its assets
    let web = dir.path().join("dist");
    std::fs::create_dir_all(web.join("assets")).unwrap();
    std::fs::write(web.join("index.html"), "<!doctype html><title>Spool UI</title>").unwrap();
    std::fs::write(web.join("assets/app.js"), "console.log('spool')").unwrap();
    let server = Server::start_with(&["--data-dir", data], dir.path(), &[("SPOOL_WEB_DIR", web.as_os_str())]);
    let get = |path: &str| reqwest::get(format!("{}{path}", server.url));
    // WHEN a browser opens / and loads an asset
    let index = get("/").await.unwrap();
    // THEN it gets the page, never cached stale, with a content security policy
    assert_eq!(index.status(), 200);
    assert_eq!(index.headers()["content-type"], "text/html");
    assert_eq!(index.headers()["cache-control"], "no-cache");
    assert!(
        index.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'self'")
    );
    assert!(index.text().await.unwrap().contains("Spool UI"));
    let script = get("/assets/app.js").await.unwrap();
    assert_eq!(script.status(), 200);
    assert_eq!(script.headers()["content-type"], "text/javascript");
    // AND paths outside the UI keep the API's JSON errors, including ones that climb out of it
    for path in ["/assets/missing.js", "/assets/../index.html", "/nothing-here"] {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let unknown = get("/nothing-here").await.unwrap();
    assert_eq!(
        unknown.json::<serde_json::Value>().await.unwrap()["error"]["code"],
        "no_route"
    );
    drop(server);

    // GIVEN no built UI
    let missing = dir.path().join("not-built");
    let server = Server::start_with(
        &["--data-dir", data],
        dir.path(),
        &[("SPOOL_WEB_DIR", missing.as_os_str())],
    );
    // THEN / says how to build it, and the API still works
    let page = reqwest::get(format!("{}/", server.url)).await.unwrap();
    assert_eq!(page.status(), 404);
    assert!(page.text().await.unwrap().contains("make web"));
    assert_eq!(health(&server.url).await["status"], "ok");
}

/// A signed-in client of a running server.
async fn token(url: &str, key: &str) -> String {
    let response = handshake(url, key).await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    body["jwt"].as_str().unwrap().to_owned()
}

/// Waits (30 s at most) for `agent_end` of `turn` in a chat; its events then.
async fn until_ended(url: &str, token: &str, chat: &str, turn: &str) -> Vec<serde_json::Value> {
    let http = reqwest::Client::new();
    for _ in 0..300 {
        let page: serde_json::Value = http
            .get(format!("{url}/v1/sessions/{chat}/events?after=0&limit=1000"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let events = page["events"].as_array().unwrap().clone();
        if events.iter().any(|e| e["turn_id"] == turn && e["type"] == "agent_end") {
            return events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("turn {turn} did not end");
}

/// A CLI agent of `spool serve` never sees its signing secret or cloud credentials, and works
/// with a relative `--data-dir` (the flag, not only the variable, places its folders, and the
/// CLI is told absolute paths).
#[tokio::test]
async fn a_cli_agent_of_serve_sees_no_secret_and_works_with_a_relative_data_dir() {
    use std::os::unix::fs::PermissionsExt;
    // GIVEN a fake `claude` that records its environment and its files' paths
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        "#!/bin/sh\nenv > \"$(dirname \"$0\")/env-dump\"\n\
         printf '{\"message\": \"in %s\", \"actions\": []}' \"$(pwd)\" > \"$SPOOL_OUTPUT_FILE\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    // AND a server with secrets in its environment and a relative data directory
    let secret = "canary-signing-secret-0123456789abcdef";
    let server = Server::start_with(
        &["--data-dir", "data"],
        dir.path(),
        &[
            ("SPOOL_JWT_SECRET", secret.as_ref()),
            ("AWS_SECRET_ACCESS_KEY", "canary-aws-secret".as_ref()),
            ("SPOOL_CLI_PATH", bin.as_os_str()),
            ("SPOOL_DATA_DIR", "elsewhere".as_ref()),
        ],
    );
    let token = token(&server.url, &server.api_key()).await;
    // WHEN a person talks to the built-in agent, which takes the installed CLI
    let sent: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/sessions/global/messages", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "content": "hello" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let turn = sent["turn_id"].as_str().unwrap();
    let events = until_ended(&server.url, &token, "global", turn).await;
    // THEN the CLI answered from the chat's folder under the flag's data directory
    let folder = dir.path().canonicalize().unwrap().join("data/cli/local/global");
    let end = events.iter().find(|e| e["type"] == "message_end").expect("an answer");
    assert_eq!(end["payload"]["text"], format!("in {}", folder.display()), "{events:?}");
    assert!(!dir.path().join("elsewhere").exists());
    // AND it saw neither the signing secret nor the cloud credentials, nor their names
    let dump = std::fs::read_to_string(bin.join("env-dump")).unwrap();
    for needle in [secret, "canary-aws-secret", "SPOOL_JWT_SECRET", "AWS_SECRET_ACCESS_KEY"] {
        assert!(!dump.contains(needle), "the CLI saw {needle}:\n{dump}");
    }
    let input = dump.lines().find_map(|l| l.strip_prefix("SPOOL_INPUT_FILE=")).unwrap();
    assert!(input.starts_with(folder.to_str().unwrap()), "{input}");
}

/// Reads from `stream` until the server closes it or `within` passes; what was read, and
/// whether it closed.
fn read_until_closed(stream: &mut std::net::TcpStream, within: std::time::Duration) -> (String, bool) {
    use std::io::Read;
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    let mut buffer = [0u8; 4096];
    stream
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    while started.elapsed() < within {
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buffer[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), false)
}

fn connect(url: &str) -> std::net::TcpStream {
    std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap()
}

/// A client that sends its headers too slowly, sits idle on a kept-alive connection, or
/// trickles a body is cut off; nothing it does holds the server.
#[tokio::test]
async fn serve_cuts_off_slow_and_idle_clients() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &["--data-dir", "data"],
        dir.path(),
        &[
            ("SPOOL_HEADER_TIMEOUT_MS", "500".as_ref()),
            ("SPOOL_REQUEST_TIMEOUT_MS", "1000".as_ref()),
            ("SPOOL_LONG_POLL_MS", "100".as_ref()),
        ],
    );
    let long = std::time::Duration::from_secs(8);
    // Headers that never end
    let mut slow = connect(&server.url);
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: spool\r\n").unwrap();
    let (_, closed) = read_until_closed(&mut slow, long);
    assert!(closed, "a client that never finished its headers was kept");
    // A kept-alive connection left idle after its answer
    let mut idle = connect(&server.url);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: spool\r\n\r\n").unwrap();
    let (answer, closed) = read_until_closed(&mut idle, long);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed, "an idle kept-alive connection was kept");
    // A body that never arrives in full
    let mut trickle = connect(&server.url);
    trickle
        .write_all(b"POST /v1/handshake HTTP/1.1\r\nHost: spool\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"api_key\":")
        .unwrap();
    let (answer, _) = read_until_closed(&mut trickle, long);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    // AND the server still answers
    assert_eq!(health(&server.url).await["status"], "ok");
}

/// Past its connection limit the server stops accepting instead of running out of file
/// descriptors; a connection that closes makes room for the next.
#[tokio::test]
async fn serve_holds_at_most_its_connection_limit() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &["--data-dir", "data"],
        dir.path(),
        &[
            ("SPOOL_MAX_CONNECTIONS", "3".as_ref()),
            ("SPOOL_HEADER_TIMEOUT_MS", "30000".as_ref()),
        ],
    );
    // GIVEN three silent connections
    let silent: Vec<std::net::TcpStream> = (0..3).map(|_| connect(&server.url)).collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // WHEN a fourth client asks
    let mut fourth = connect(&server.url);
    fourth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: spool\r\nConnection: close\r\n\r\n")
        .unwrap();
    // THEN it waits
    let (answer, _) = read_until_closed(&mut fourth, std::time::Duration::from_secs(1));
    assert!(answer.is_empty(), "{answer}");
    // AND once a silent one goes, it is answered
    drop(silent);
    let (answer, _) = read_until_closed(&mut fourth, std::time::Duration::from_secs(8));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// SIGTERM stops the server at once, ending its SSE responses (the client resumes from its
/// last event) rather than waiting out their minute.
#[tokio::test]
async fn serve_stops_at_once_with_live_responses_open() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&["--data-dir", "data"], dir.path());
    let key = server.api_key();
    let token = token(&server.url, &key).await;
    // GIVEN a live SSE response
    let mut sse = connect(&server.url);
    write!(
        sse,
        "GET /v1/sessions/global/stream HTTP/1.1\r\nHost: spool\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let (head, closed) = read_until_closed(&mut sse, std::time::Duration::from_secs(1));
    assert!(head.starts_with("HTTP/1.1 200") && !closed, "{head}");
    // WHEN the server is told to stop
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // THEN the response ends and the process exits, well before the SSE lifetime (60 s)
    let (_, closed) = read_until_closed(&mut sse, std::time::Duration::from_secs(15));
    assert!(closed, "the SSE response outlived the shutdown");
    let mut exited = None;
    for _ in 0..150 {
        if let Some(status) = server.child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}");
}

/// Every public route is rate-limited: handshakes per address and per key, writes and
/// creations per organization. A refusal is `429` with `Retry-After` and changes nothing, and
/// refused handshakes reach the audit stream boundedly.
#[tokio::test]
async fn serve_rate_limits_handshakes_writes_and_creations() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &["--data-dir", "data"],
        dir.path(),
        &[
            ("SPOOL_RATE_HANDSHAKES_PER_MIN", "5".as_ref()),
            ("SPOOL_RATE_WRITES_PER_S", "1".as_ref()),
            ("SPOOL_RATE_CREATES_PER_MIN", "3".as_ref()),
        ],
    );
    let key = server.api_key();
    let http = reqwest::Client::new();
    let jwt = token(&server.url, &key).await;
    // Handshakes: a guesser of the key's secret is stopped after the burst
    let (id, _) = key.trim_start_matches("spool_").split_once('_').unwrap();
    let wrong = format!("spool_{id}_{}", "0".repeat(64));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(handshake(&server.url, &wrong).await);
    }
    let codes: Vec<u16> = statuses.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(&codes[..4], [401, 401, 401, 401], "{codes:?}");
    assert!(codes[4..].iter().all(|c| *c == 429), "{codes:?}");
    let retry: u64 = statuses[7].headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // AND the audit stream has one record of the four refusals (the first of the minute)
    let audit: serde_json::Value = http
        .get(format!("{}/v1/stream/audit?offset=-1", server.url))
        .bearer_auth(&jwt)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let refused = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "refused")
        .count();
    assert_eq!(refused, 1, "{audit}");

    // Creations: three a minute
    let mut created = Vec::new();
    for i in 0..4 {
        let response = http
            .put(format!("{}/v1/stream/s{i}", server.url))
            .bearer_auth(&jwt)
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        created.push(response.status().as_u16());
    }
    assert_eq!(created, [201, 201, 201, 429]);
    let missing = http
        .head(format!("{}/v1/stream/s3", server.url))
        .bearer_auth(&jwt)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // Writes: the burst (ten, four of them taken by the creations), then one a second;
    // refused ones append nothing
    let mut accepted = 0;
    let mut limited = 0;
    for _ in 0..15 {
        let response = http
            .post(format!("{}/v1/stream/s0", server.url))
            .bearer_auth(&jwt)
            .header("content-type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            204 => accepted += 1,
            429 => {
                limited += 1;
                let body: serde_json::Value = response.json().await.unwrap();
                assert_eq!(body["error"]["code"], "rate_limited");
            }
            other => panic!("{other}"),
        }
    }
    assert!(limited > 0 && accepted >= 5, "{accepted} accepted, {limited} limited");
    let text = http
        .get(format!("{}/v1/stream/s0?offset=-1", server.url))
        .bearer_auth(&jwt)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.len(), accepted, "{text}");
}

/// The data directory holds every organization's chats and the signing secret: its folders are
/// its owner's alone (0700) and so are its files (0600), after a chat has run and sealed pages.
#[tokio::test]
async fn the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A chat's last page is sealed once it is idle: at once here, so there are pages to check.
    let idle = std::ffi::OsString::from("1");
    let server = Server::start_with(&["--data-dir", "data"], dir.path(), &[("SPOOL_IDLE_SEAL_MS", &idle)]);
    let key = server.api_key();
    let token = token(&server.url, &key).await;
    let sent: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/sessions/global/messages", server.url))
        .bearer_auth(&token)
        .json(&serde_json::json!({ "content": "hello" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    until_ended(&server.url, &token, "global", sent["turn_id"].as_str().unwrap()).await;
    // The chat's page is sealed 1 ms after the turn; give the worker a moment to write it.
    let pages = dir.path().join("data/pages");
    for _ in 0..50 {
        if std::fs::read_dir(&pages).unwrap().next().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut seen = 0;
    let mut stack = vec![dir.path().join("data")];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
        seen += 1;
    }
    assert!(seen > 8, "{seen}");
    assert!(
        std::fs::read_dir(&pages).unwrap().next().is_some(),
        "no page was sealed"
    );
}

/// A revoked API key is refused at the handshake at once, and the tokens already issued for
/// it stop working within the revocation check (here 200 ms), on the API and the stream routes
/// alike; other keys are untouched.
#[tokio::test]
async fn a_revoked_keys_tokens_stop_working() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(
        &["--data-dir", data.to_str().unwrap()],
        dir.path(),
        &[("SPOOL_REVOCATION_CHECK_MS", "200".as_ref())],
    );
    let local_key = server.api_key();
    // GIVEN a second key of the local organization, and a token of each
    let (ok, out, err) = admin(&["create-api-key", "local"], &data);
    assert!(ok, "{err}");
    let created: serde_json::Value = serde_json::from_str(&out).unwrap();
    let key = created["api_key"].as_str().unwrap().to_owned();
    let doomed = token(&server.url, &key).await;
    let kept = token(&server.url, &local_key).await;
    let http = reqwest::Client::new();
    let status = |token: String, path: &'static str| {
        let (http, url) = (http.clone(), server.url.clone());
        async move {
            http.get(format!("{url}{path}"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(status(doomed.clone(), "/v1/sessions").await, 200);
    // WHEN an operator revokes it
    let (ok, out, err) = admin(&["revoke-api-key", &key], &data);
    assert!(ok, "{err}");
    assert!(out.contains("\"revoked\": true"), "{out}");
    // THEN its handshakes are refused at once
    assert_eq!(handshake(&server.url, &key).await.status(), 401);
    // AND its token stops working on both kinds of route within the bound
    let mut refused = false;
    for _ in 0..50 {
        if status(doomed.clone(), "/v1/sessions").await == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refused, "the revoked key's token still works");
    assert_eq!(
        status(doomed.clone(), "/v1/sessions/global/stream?after=999999").await,
        401
    );
    // AND the other key's token works as before
    assert_eq!(status(kept.clone(), "/v1/sessions").await, 200);
    // AND revoking an unknown key says so
    let (ok, _, err) = admin(&["revoke-api-key", "nokey"], &data);
    assert!(!ok && err.contains("no API key"), "{err}");
}
