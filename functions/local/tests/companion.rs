//! `spool companion` as a person runs it: a real process over a folder of fixture notes, beside
//! a real `spool serve`, over real HTTP on loopback.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spool serve` on a free port: its URL and the local API key.
fn serve(data: &Path) -> (Running, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()])
        .env_remove("SPOOL_ADDR")
        .env_remove("SPOOL_WEB_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn spool serve");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        lines.push(line);
    }
    let word = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.split_whitespace().find(|w| w.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no {prefix} in {lines:?}"))
            .to_owned()
    };
    (Running(child), word("http://"), word("spool_"))
}

/// `spool companion` with `args`; its URL once it listens, and what it printed before.
fn companion(args: &[&str], key: &str) -> (Running, String, Vec<String>) {
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_spool"))
            .arg("companion")
            .args(args)
            .env("SPOOL_API_KEY", key)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spool companion"),
    );
    let mut err = BufReader::new(child.0.stderr.take().unwrap());
    let mut printed = Vec::new();
    for _ in 0..50 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .filter(|_| line.starts_with("Companion listening"))
        {
            let url = url.to_owned();
            // Keep reading its log so it never blocks on a full pipe.
            std::thread::spawn(move || for _ in err.lines() {});
            return (child, url, printed);
        }
        printed.push(line);
    }
    panic!("the companion did not start: {printed:?}");
}

/// Sends a request and reads its JSON answer.
trait IntoJson {
    async fn into_json(self) -> Value;
}

impl IntoJson for reqwest::RequestBuilder {
    async fn into_json(self) -> Value {
        self.send().await.expect("send").json().await.expect("a JSON answer")
    }
}

fn notes(dir: &Path) {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "garden.md",
        &format!(
            "# Garden\n\n{}The tomatoes need water every morning in July.{}",
            "Compost and soil. ".repeat(40),
            " Mulch the beds.".repeat(40)
        ),
    );
    write(
        "week.md",
        "# Week\n- [ ] Call the plumber about the tomatoes\n- [x] Pay rent\n",
    );
    write("receipts/seeds.txt", "Tomato seeds, a watering can.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_companion_serves_context_from_the_notes_to_loopback_pages_only() {
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("notes");
    notes(&library);
    let (_spool, spool_url, key) = serve(&dir.path().join("data"));
    let salt = dir.path().join("salt");
    let (_companion, url, printed) = companion(
        &[
            "--library",
            library.to_str().unwrap(),
            "--spool-url",
            &spool_url,
            "--addr",
            "127.0.0.1:0",
            "--salt-file",
            salt.to_str().unwrap(),
            "--rescan-ms",
            "200",
        ],
        &key,
    );
    assert!(printed.iter().any(|l| l.starts_with("Indexed 3 notes")), "{printed:?}");
    // It says at start what its key carries; the local key carries what the UI uses: no warning.
    assert!(
        printed
            .iter()
            .any(|l| l.trim() == "The API key carries these capabilities: capture_ingest, context_for_query, mcp_tools"),
        "{printed:?}"
    );
    assert!(!printed.iter().any(|l| l.starts_with("Warning")), "{printed:?}");
    let http = reqwest::Client::new();

    // The handshake: Spool's token for the library, which Spool accepts for a chat.
    let shake: Value = http
        .post(format!("{url}/handshake"))
        .json(&json!({ "version": "1", "user_agent": "test" }))
        .into_json()
        .await;
    let library_id = shake["library_id"].as_str().unwrap();
    assert!(library_id.starts_with("lib_"), "{shake}");
    assert!(shake["timestamp"].is_string() && shake["version"] == "1");
    assert_eq!(
        shake["capabilities"],
        json!(["capture_ingest", "context_for_query", "mcp_tools"])
    );
    let person: Value = http
        .post(format!("{spool_url}/v1/handshake"))
        .json(&json!({ "api_key": key }))
        .into_json()
        .await;
    let bearer = format!("Bearer {}", person["jwt"].as_str().unwrap());
    let chat: Value = http
        .post(format!("{spool_url}/v1/sessions"))
        .header("authorization", &bearer)
        .json(&json!({}))
        .into_json()
        .await;
    let enabled: Value = http
        .put(format!(
            "{spool_url}/v1/sessions/{}/capabilities",
            chat["id"].as_str().unwrap()
        ))
        .header("authorization", &bearer)
        .json(&json!({ "library_id": library_id, "jwt": shake["jwt"], "capabilities": shake["capabilities"] }))
        .into_json()
        .await;
    assert_eq!(enabled["status"], "authenticated", "{enabled}");
    assert_eq!(enabled["library_id"], library_id, "{enabled}");
    assert_eq!(
        enabled["capabilities_enabled"],
        json!(["capture_ingest", "context_for_query", "mcp_tools"]),
        "{enabled}"
    );

    // Context: the notes that match, passages of them, never a whole note.
    let context: Value = http
        .get(format!(
            "{url}/context-for-query?q=When%20do%20the%20tomatoes%20need%20water%3F"
        ))
        .into_json()
        .await;
    assert_eq!(context["relevant_k_ids"].as_array().unwrap().len(), 2, "{context}");
    assert_eq!(context["relevant_d_ids"].as_array().unwrap().len(), 1, "{context}");
    let summary = context["summary"].as_str().unwrap();
    assert!(summary.contains("tomatoes need water"), "{summary}");
    assert!(summary.chars().count() <= 600);
    for file in ["garden.md", "week.md", "receipts/seeds.txt"] {
        let whole = std::fs::read_to_string(library.join(file)).unwrap();
        assert!(!summary.contains(whole.trim()), "{file} leaked whole: {summary}");
    }
    assert!(context["confidence"].as_f64().unwrap() > 0.5);
    assert_eq!(
        http.get(format!("{url}/context-for-query"))
            .send()
            .await
            .unwrap()
            .status(),
        400,
        "a question is needed"
    );

    // Open loops and suggestions.
    let loops: Value = http.get(format!("{url}/open-loops")).into_json().await;
    let titles: Vec<&str> = loops["open_loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Call the plumber about the tomatoes"]);
    assert!(loops["open_loops"][0]["last_mentioned"].is_string());
    let suggestions: Value = http.get(format!("{url}/proactive-suggestions")).into_json().await;
    assert!(
        suggestions["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["title"] == "Close the loop: Call the plumber about the tomatoes"),
        "{suggestions}"
    );

    // A note written now is found within a few rescans.
    std::fs::write(library.join("fruit.md"), "Kiwi season starts in May.").unwrap();
    let mut found = false;
    for _ in 0..50 {
        let context: Value = http.get(format!("{url}/context-for-query?q=kiwi")).into_json().await;
        if context["relevant_k_ids"].as_array().unwrap().len() == 1 {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "the new note was indexed");

    // `capture_ingest`: a loopback page saves a note; the next question finds it at once; a
    // page elsewhere cannot write one.
    let capture = |origin: &str| {
        http.post(format!("{url}/capture"))
            .header("origin", origin)
            .json(&json!({ "title": "Quince jam", "text": "Quince jam needs lemon.", "source": "a chat" }))
            .send()
    };
    let saved = capture("http://localhost:8080").await.unwrap();
    assert_eq!(saved.status(), 201);
    let saved: Value = saved.json().await.unwrap();
    assert_eq!(saved["path"], "quince-jam.md", "{saved}");
    let context: Value = http.get(format!("{url}/context-for-query?q=quince")).into_json().await;
    assert_eq!(context["relevant_k_ids"], json!([saved["id"]]), "{context}");
    assert_eq!(capture("https://evil.example").await.unwrap().status(), 403);
    assert!(!library.join("quince-jam-2.md").exists());

    // Pages on loopback may call it; a page elsewhere may not.
    let from = |origin: &str| http.get(format!("{url}/open-loops")).header("origin", origin).send();
    let ok = from("http://localhost:8080").await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["access-control-allow-origin"], "http://localhost:8080");
    let refused = from("https://evil.example").await.unwrap();
    assert_eq!(refused.status(), 403);
    // A page that re-points its own name at loopback (DNS rebinding) reads without an Origin.
    let rebound = http
        .get(format!("{url}/context-for-query?q=tomatoes"))
        .header("host", "evil.example:8826")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403);
    assert!(refused.headers().get("access-control-allow-origin").is_none());
    let preflight = http
        .request(reqwest::Method::OPTIONS, format!("{url}/handshake"))
        .header("origin", "http://127.0.0.1:8080")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
}

#[test]
fn the_companion_listens_on_loopback_only_and_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
        command
            .arg("companion")
            .args([
                "--library",
                dir.path().to_str().unwrap(),
                "--spool-url",
                "http://127.0.0.1:9",
            ])
            .args(args)
            .env_remove("SPOOL_API_KEY");
        if let Some(key) = key {
            command.env("SPOOL_API_KEY", key);
        }
        let out = command.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, said) = run(&["--addr", "0.0.0.0:0"], Some("spool_k_s"));
    assert!(!ok && said.contains("loopback only"), "{said}");
    let (ok, said) = run(&["--addr", "127.0.0.1:0"], None);
    assert!(!ok && said.contains("SPOOL_API_KEY"), "{said}");
}

/// Runs `spool admin …` on `data` and reads its JSON answer.
fn admin(args: &[&str], data: &Path) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_companion_says_what_its_key_carries_and_warns_when_the_ui_can_use_none() {
    // GIVEN a Spool whose organization `acme` has a key that carries only `agent`
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    admin(&["create-org", "Acme", "--id", "acme"], &data);
    let key = admin(&["create-api-key", "acme", "--capability", "agent"], &data)["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_spool, spool_url, _) = serve(&data);
    let library = dir.path().join("notes");
    notes(&library);
    let salt = dir.path().join("salt");
    // WHEN `spool companion` starts with that key
    let (_companion, _, printed) = companion(
        &[
            "--library",
            library.to_str().unwrap(),
            "--spool-url",
            &spool_url,
            "--addr",
            "127.0.0.1:0",
            "--salt-file",
            salt.to_str().unwrap(),
        ],
        &key,
    );
    // THEN it names what the key carries, and warns with the command that makes a usable key
    assert!(
        printed
            .iter()
            .any(|l| l.trim() == "The API key carries these capabilities: agent"),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l.starts_with("Warning")
            && l.contains(
                "`spool admin create-api-key acme --capability context_for_query --capability capture_ingest --capability mcp_tools`"
            )),
        "{printed:?}"
    );
}
