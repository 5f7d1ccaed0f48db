//! # `spool chat`: a terminal client
//!
//! Signs in (an API key: `--api-key`, `SPOOL_API_KEY`, or the local key `spool serve` keeps in
//! its data directory), picks or makes a workspace and a chat, and then: a line is a message,
//! `/name args` a slash command (`/` lists them), answers stream as they arrive, and what an
//! agent asks (a question, an approval, a plan) is answered at the prompt. Ctrl-C aborts the
//! running turn, not the program (with no turn running, it quits, as `/quit` and end of input
//! do). The chat's events are followed over SSE and the follower resumes from the last seq
//! when the connection drops, so nothing is lost or shown twice. `--json` prints the events
//! as JSON lines for scripts; `--message` sends one message and exits when its turn is done.
//! It works against a local `spool serve` and a deployed URL alike: only the public API.

mod client;
mod render;

use std::{io::Write, path::PathBuf};

use anyhow::Context;
use reqwest::Method;
use serde_json::{Value, json};
use spool_chat::{
    event::{ChatEvent, EndReason},
    session::Event,
    workspace::new_id,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines, Stdin},
    sync::mpsc,
};

use self::{
    client::{Client, Followed},
    render::Request,
};

/// `spool chat`'s options.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// Spool's URL.
    #[arg(long, env = "SPOOL_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// An API key (`spool_…`) [default: the local key in --data-dir, which `spool serve` writes].
    #[arg(long, env = "SPOOL_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The data directory of the local `spool serve` whose key to use.
    #[arg(long, env = "SPOOL_DATA_DIR", default_value = ".spool")]
    data_dir: PathBuf,
    /// The workspace, by id or title [default: the only one, or pick; a new "Terminal" when
    /// there is none].
    #[arg(long)]
    workspace: Option<String>,
    /// The chat's id [default: pick one, or start a new one].
    #[arg(long)]
    chat: Option<String>,
    /// Start a new chat.
    #[arg(long, conflicts_with = "chat")]
    new: bool,
    /// Print the chat's events as JSON lines, one per event, and no prompts (for scripts).
    #[arg(long)]
    json: bool,
    /// Send this message, show its answer, and exit when its turn ends or waits on you.
    #[arg(long, short)]
    message: Option<String>,
}

/// Where the conversation is.
#[derive(Default)]
struct State {
    /// The turn running (from its message's acceptance to its `agent_end`).
    running: Option<String>,
    /// What the person is asked.
    asked: Option<Request>,
    /// Input ended: quit once no turn runs.
    closing: bool,
    /// The ids of the messages typed here (the terminal shows them already).
    sent: std::collections::HashSet<String>,
}

/// Runs `spool chat`.
pub async fn run(args: ChatArgs) -> anyhow::Result<()> {
    let key = match &args.api_key {
        Some(key) => key.clone(),
        None => {
            let file = args.data_dir.join("local-api-key");
            std::fs::read_to_string(&file)
                .with_context(|| {
                    format!(
                        "no API key: pass --api-key (or set SPOOL_API_KEY), or run where `spool serve` keeps {}",
                        file.display()
                    )
                })?
                .trim()
                .to_owned()
        }
    };
    let client = Client::sign_in(&args.url, &key).await?;
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let interactive = !args.json && args.message.is_none();
    let ws = workspace(&client, args.workspace.as_deref(), &mut input, interactive).await?;
    let (session, pending) = chat(&client, &ws, &args, &mut input, interactive).await?;
    // Follow from the running turn's message (so its answer shows whole), else from the end.
    let recent = client
        .call(Method::GET, &format!("/v1/sessions/{session}/events"), None)
        .await?;
    let recent: Vec<Event> = serde_json::from_value(recent["events"].clone()).unwrap_or_default();
    let after = match &pending {
        Some(turn) => match recent.iter().find(|e| e.turn_id.as_ref() == Some(turn)) {
            Some(first) => first.seq.saturating_sub(1),
            None => {
                eprintln!("(a turn is running; what it said before now is in the chat's history)");
                recent.last().map_or(0, |e| e.seq)
            }
        },
        None => recent.last().map_or(0, |e| e.seq),
    };
    let (events, mut followed) = mpsc::channel(256);
    client.follow(session.clone(), after, events);
    let mut state = State {
        running: pending,
        ..State::default()
    };
    if !args.json {
        eprintln!(
            "Chat {session} in workspace {ws}. Type a message, `/` for commands; Ctrl-C stops a turn, /quit quits."
        );
    }
    if let Some(text) = &args.message {
        state.running = post(&client, &session, text, &mut state.sent).await?;
        if state.running.is_none() {
            // It answered an agent's question: no turn of Spool's follows.
            return Ok(());
        }
        state.closing = true;
    } else if interactive && state.running.is_none() {
        prompt(&state);
    }
    let mut input_open = true;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                if state.running.is_none() {
                    eprintln!();
                    return Ok(());
                }
                let abort = json!({ "action": "abort" });
                match client.call(Method::POST, &format!("/v1/sessions/{session}/control"), Some(abort)).await {
                    Ok(_) => eprintln!("\n(stopping the turn…)"),
                    Err(e) => eprintln!("\n! the turn could not be stopped: {e:#}; press Ctrl-C again to retry"),
                }
            }
            Some(followed) = followed.recv() => match followed {
                Followed::Reconnecting(why) => eprintln!("(connection lost: {why}; reconnecting…)"),
                Followed::Gone(why) => anyhow::bail!("{why}"),
                Followed::Unknown => {}
                Followed::Event(event) => {
                    let echo = event.client_message_id.as_ref().is_some_and(|id| state.sent.contains(id));
                    if args.json || !echo {
                        show(&event, args.json);
                    }
                    if matches!(event.event, ChatEvent::AgentStart(_)) {
                        state.running = event.turn_id.clone();
                    }
                    if state.asked.as_ref().is_some_and(|asked| render::answers(&event, asked)) {
                        state.asked = None;
                    }
                    if let Some(asked) = render::request(&event) {
                        if args.message.is_some() || !input_open {
                            // Nobody is there to answer: that is the end of the script.
                            anyhow::bail!("the agent asks for an answer; answer it in `spool chat --chat {session}`");
                        }
                        state.asked = Some(asked);
                        if interactive {
                            prompt(&state);
                        }
                    }
                    if let ChatEvent::AgentEnd(end) = &event.event
                        && event.turn_id.is_some()
                        && event.turn_id == state.running
                    {
                        state.running = None;
                        state.asked = None;
                        if state.closing {
                            return match end.reason {
                                EndReason::Complete => Ok(()),
                                EndReason::Aborted => anyhow::bail!("the turn was aborted"),
                                EndReason::Error => anyhow::bail!(
                                    "the turn failed: {}",
                                    end.error.as_deref().unwrap_or("see the chat")
                                ),
                            };
                        }
                        if interactive {
                            prompt(&state);
                        }
                    }
                }
            },
            line = input.next_line(), if input_open => match line? {
                None => {
                    input_open = false;
                    if state.running.is_none() {
                        return Ok(());
                    }
                    if state.asked.is_some() {
                        anyhow::bail!("input ended while the agent asks for an answer; answer it in `spool chat --chat {session}`");
                    }
                    state.closing = true;
                }
                Some(line) => {
                    let line = line.trim().to_owned();
                    match act(&client, &ws, &session, &mut state, &line).await {
                        Ok(true) => return Ok(()),
                        Ok(false) => {}
                        Err(e) => eprintln!("! {e:#}"),
                    }
                    if interactive && state.running.is_none() {
                        prompt(&state);
                    }
                }
            },
        }
    }
}

/// Does what a typed line asks; `true` to quit.
async fn act(client: &Client, ws: &str, session: &str, state: &mut State, line: &str) -> anyhow::Result<bool> {
    if let Some(asked) = state.asked.take() {
        let answered = answer(client, session, &asked, line).await;
        if answered.is_err() {
            state.asked = Some(asked);
        }
        return answered.map(|()| false);
    }
    match line {
        "" => {}
        "/quit" | "/exit" => return Ok(true),
        "/" => {
            let listed = client
                .call(Method::GET, &format!("/v1/workspaces/{ws}/slash-commands"), None)
                .await?;
            list_commands(&listed);
        }
        command if command.starts_with('/') => {
            let id = new_id("chat");
            let body = json!({ "input": command, "client_message_id": id });
            state.sent.insert(id);
            let invoked = client
                .call(
                    Method::POST,
                    &format!("/v1/sessions/{session}/slash-commands/invoke"),
                    Some(body),
                )
                .await?;
            // A prompt command starts a turn; an action (/rename, /help, …) starts none.
            if let Some(turn) = invoked["turn_id"].as_str() {
                state.running = Some(turn.to_owned());
            }
            if let Some(new) = invoked["new_session"]["id"].as_str() {
                println!("(a new chat: {new}; open it with `spool chat --chat {new}`)");
            }
            list_commands(&invoked);
        }
        text => state.running = post(client, session, text, &mut state.sent).await?,
    }
    Ok(false)
}

/// Posts a person's message; the turn it started.
async fn post(
    client: &Client,
    session: &str,
    text: &str,
    sent: &mut std::collections::HashSet<String>,
) -> anyhow::Result<Option<String>> {
    let id = new_id("chat");
    sent.insert(id.clone());
    let body = json!({ "content": text, "client_message_id": id });
    let posted = client
        .call(Method::POST, &format!("/v1/sessions/{session}/messages"), Some(body))
        .await?;
    Ok(posted["turn_id"].as_str().map(str::to_owned))
}

/// Answers what the agent asked with the typed `line`.
async fn answer(client: &Client, session: &str, asked: &Request, line: &str) -> anyhow::Result<()> {
    let yes = matches!(line.to_ascii_lowercase().as_str(), "y" | "yes");
    let (route, body) = match asked {
        Request::Question { id } => ("question", json!({ "question_id": id, "answer": line })),
        Request::Approval { call_id } => {
            let decision = if yes { "approve" } else { "decline" };
            ("approval", json!({ "tool_call_id": call_id, "decision": decision }))
        }
        Request::Plan { id } if yes => ("plan", json!({ "plan_id": id, "action": "approve" })),
        Request::Plan { id } => ("plan", json!({ "plan_id": id, "action": "reject", "feedback": line })),
    };
    client
        .call(Method::POST, &format!("/v1/sessions/{session}/{route}"), Some(body))
        .await?;
    Ok(())
}

/// The commands a listing (or `/help`'s answer) holds, one line each.
fn list_commands(listed: &Value) {
    for command in listed["commands"].as_array().into_iter().flatten() {
        let hint = command["argument_hint"].as_str().unwrap_or_default();
        let what = command["description"].as_str().unwrap_or_default();
        println!("  /{} {hint}  {what}", command["name"].as_str().unwrap_or_default());
    }
}

fn show(event: &Event, json: bool) {
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", serde_json::to_string(event).unwrap_or_default());
    } else {
        let _ = write!(out, "{}", render::text(event));
    }
    let _ = out.flush();
}

fn prompt(state: &State) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", state.asked.as_ref().map_or("> ", Request::prompt));
    let _ = out.flush();
}

/// The workspace `wanted` names (id or title), or the only one, or the one picked; a new
/// "Terminal" workspace when there is none.
async fn workspace(
    client: &Client,
    wanted: Option<&str>,
    input: &mut Lines<BufReader<Stdin>>,
    interactive: bool,
) -> anyhow::Result<String> {
    let listed = client.call(Method::GET, "/v1/workspaces", None).await?;
    let all: Vec<(String, String)> = listed["workspaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (id_of(w), w["title"].as_str().unwrap_or_default().to_owned()))
        .collect();
    if let Some(wanted) = wanted {
        return all
            .iter()
            .find(|(id, title)| id == wanted || title == wanted)
            .map(|(id, _)| id.clone())
            .with_context(|| format!("no workspace `{wanted}`; `spool chat` without --workspace lists them"));
    }
    match all.as_slice() {
        [] => Ok(id_of(
            &client
                .call(Method::POST, "/v1/workspaces", Some(json!({ "title": "Terminal" })))
                .await?,
        )),
        [(id, _)] => Ok(id.clone()),
        many if !interactive => Ok(many[0].0.clone()),
        many => {
            let titles: Vec<String> = many.iter().map(|(_, t)| t.clone()).collect();
            let picked = pick("Workspaces:", &titles, None, input).await?;
            Ok(many[picked.unwrap_or(0)].0.clone())
        }
    }
}

/// The chat to talk in, and its running turn, if any.
async fn chat(
    client: &Client,
    ws: &str,
    args: &ChatArgs,
    input: &mut Lines<BufReader<Stdin>>,
    interactive: bool,
) -> anyhow::Result<(String, Option<String>)> {
    let running = |s: &Value| s["pending_turn_id"].as_str().map(str::to_owned);
    if let Some(id) = &args.chat {
        let session = client.call(Method::GET, &format!("/v1/sessions/{id}"), None).await?;
        return Ok((id_of(&session), running(&session)));
    }
    let listed = client
        .call(Method::GET, &format!("/v1/sessions?workspace_id={ws}"), None)
        .await?;
    let chats: Vec<Value> = listed["sessions"].as_array().cloned().unwrap_or_default();
    let new = || async {
        let made = client
            .call(Method::POST, "/v1/sessions", Some(json!({ "workspace_id": ws })))
            .await?;
        anyhow::Ok((id_of(&made), None))
    };
    if args.new || !interactive || chats.is_empty() {
        return new().await;
    }
    let titles: Vec<String> = chats
        .iter()
        .take(9)
        .map(|c| {
            let title = c["title"].as_str().filter(|t| !t.is_empty()).unwrap_or("(untitled)");
            format!("{title}  {}", c["preview"].as_str().unwrap_or_default())
        })
        .collect();
    match pick("Chats:", &titles, Some("a new chat"), input).await? {
        Some(i) => Ok((id_of(&chats[i]), running(&chats[i]))),
        None => new().await,
    }
}

/// Asks the person to pick one of `items` by number (or `other`, with `n`); `None` for other.
async fn pick(
    heading: &str,
    items: &[String],
    other: Option<&str>,
    input: &mut Lines<BufReader<Stdin>>,
) -> anyhow::Result<Option<usize>> {
    println!("{heading}");
    for (i, item) in items.iter().enumerate() {
        println!("  {}) {item}", i + 1);
    }
    if let Some(other) = other {
        println!("  n) {other}");
    }
    loop {
        print!("pick> ");
        std::io::stdout().flush()?;
        let Some(line) = input.next_line().await? else {
            anyhow::bail!("input ended before a choice was made");
        };
        let line = line.trim();
        if other.is_some() && (line == "n" || line.is_empty()) {
            return Ok(None);
        }
        match line.parse::<usize>() {
            Ok(n) if (1..=items.len()).contains(&n) => return Ok(Some(n - 1)),
            _ => println!("type a number from 1 to {}", items.len()),
        }
    }
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().unwrap_or_default().to_owned()
}
