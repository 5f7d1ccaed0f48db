//! # The demo agent: the built-in script of an agent with no script of its own
//!
//! It answers a person with no API key, and shows what Spool does: streaming, questions,
//! plans, tasks, renames, and changes of the workspace that wait for approval. It reads what
//! it is asked for as an [`Intent`] and answers in rounds, as a script does (round *k* is its
//! *k*-th reply since the person's message); a round after tool calls reports how each call
//! ended, so an agent the person declined, or an action that failed, is never said to be done.

use serde_json::{Value, json};

use super::{
    Round, ScriptedCall,
    intent::Intent,
    titles::{self, task_titles, title_asked},
};
use crate::{
    runtime::{Message, Request, ToolCall},
    state::as_written,
    tools::{ASK_USER, DECLINED, PROPOSE_PLAN},
};

/// The pause between the demo's streamed words.
pub const WORD_DELAY_MS: u64 = 35;
/// Said first when files were uploaded since the demo last answered.
pub const FILES: &str = "I see you shared {files}. In a real agent I could read it now: a model gets images and text inline, and a CLI agent finds every file in its chat folder under `attachments/`.\n\n";
/// Said first when the message carried what the person's notes say.
pub const NOTES: &str = "From your notes ({ids}): *{summary}*\n\n";

/// The agents a team is made of: name and instruction (`{purpose}`: what the team works on).
const TEAM: [(&str, &str); 3] = [
    (
        "Planner",
        "## Role\nYou turn requests about {purpose} into a short plan: the goal, the steps, and who does each.\n\n## What you read\nThe person's request and the chat so far. Read the workspace context file only when you need to know the other agents.\n\n## What you produce\nA numbered plan of at most seven steps, each with its owner (Writer or Reviewer) and what done looks like.\n\n## Boundaries\nYou plan; you do not write the deliverable. When the request is unclear, ask one question instead of guessing.",
    ),
    (
        "Writer",
        "## Role\nYou write the drafts for {purpose}, following the Planner's plan.\n\n## What you read\nThe plan, the person's notes and any attached files.\n\n## What you produce\nA complete draft in markdown, with a one-line summary of what changed since the last draft.\n\n## Boundaries\nKeep to the plan's scope. Say which facts you could not check instead of inventing them.",
    ),
    (
        "Reviewer",
        "## Role\nYou review drafts for {purpose} before they go out.\n\n## What you read\nThe latest draft and the plan it follows.\n\n## What you produce\nA verdict (ready, or needs changes) and at most five concrete changes, most important first.\n\n## Boundaries\nYou do not rewrite the draft yourself. Approve only what you would sign.",
    ),
];

/// Said where the demo may not add agents (the global chat, an agent other than Spool).
const NO_AGENTS_HERE: &str = "I can add agents only as a workspace's Spool agent, in one of its chats: there I propose each agent and you approve it. Here I cannot add any, so I have not.";

/// The demo's round `round` of its answer to `input`; `since` is the conversation after
/// `input` (its replies so far and their calls' results). `None` when it has said all.
pub fn round(request: &Request, input: &str, since: &[Message], round: usize) -> Option<Round> {
    let ended = ended(since);
    Some(match (Intent::of(input), round) {
        (Intent::Summarize, 0) => say("**Summary so far** (this answers the `/summarize` command: Spool rendered its template and sent it to me as this turn's input). In a real agent, this is where the chat's decisions, open questions and next steps would be."),
        (Intent::Question, 0) => say("Happy to. I will ask you something and wait for your answer, even across restarts.")
            .calling(ASK_USER, json!({ "question": "What should I call you?" })),
        (Intent::Question, 1) => say(&format!(
            "Nice to meet you, **{}**. Your answer is an event in this chat's stream, like everything else.",
            last_result(since)
        )),
        (Intent::Plan, 0) => say("Here is a plan. Approve it, or reject it with feedback.").calling(
            PROPOSE_PLAN,
            json!({ "plan": format!("1. Read the request: {input}\n2. Draft an answer\n3. Ask you to review it") }),
        ),
        (Intent::Plan, 1) => say(&match last_result(since) {
            "approved" => "The plan was approved. In a real agent, this is where the work would start.".to_owned(),
            verdict => format!("The plan was {verdict}. In a real agent, I would revise it and propose it again."),
        }),
        (Intent::Task, 0) => tasks(request, input),
        (Intent::Task, 1) => say(&report(&ended, "this workspace's task list", |c| arg(c, "summary"))),
        (Intent::Rename, 0) => rename(request, input),
        (Intent::Rename, 1) => say(&match ended.first().map(|e| &e.outcome) {
            Some(Outcome::Done(result)) => format!(
                "This chat is now called *{}*.",
                result["title"].as_str().unwrap_or_default()
            ),
            Some(Outcome::Declined) => "You declined, so this chat keeps its title.".to_owned(),
            Some(Outcome::Failed(error)) => format!("I could not rename this chat: {error}."),
            None => return None,
        }),
        (Intent::Team | Intent::Helper, 0) if !offers(request, "create_agent") => say(NO_AGENTS_HERE),
        (Intent::Team, 0) => say("Let's define a team of agents together: the way I would with a model behind me, only scripted. First, one question.")
            .calling(ASK_USER, json!({ "question": "What will this team work on? For example: a weekly newsletter." })),
        (Intent::Team, 1) => team(last_result(since)),
        (Intent::Team, 2) => {
            let added = ended.iter().any(|e| matches!(e.outcome, Outcome::Done(_)));
            let mut said = report(&ended, "the Agents tab, after me", |c| arg(c, "name"));
            if added {
                said.push_str(" Start a chat with any of them from *New chat*; with a model key configured they answer with it, and you can edit their instructions any time.");
            }
            say(&said)
        }
        (Intent::Helper, 0) => say("I can add a helper agent to this workspace. Changing the workspace needs your approval.")
            .calling("create_agent", json!({ "name": "Helper", "instruction": "Answer briefly.", "runtime": "scripted" })),
        (Intent::Helper, 1) => say(&report(&ended, "this workspace's agents", |c| arg(c, "name"))),
        (Intent::Fail, 0) => Round {
            fail: Some("the scripted runtime was asked to fail".to_owned()),
            ..Round::default()
        },
        (Intent::Chat, 0) => say(&greeting(request, input)),
        _ => return None,
    })
}

/// The greeting, offering what the demo can do in this chat.
fn greeting(request: &Request, input: &str) -> String {
    let mut can = vec!["a **question**", "for a **plan**"];
    if request.context.workspace_id.is_some() {
        can.push("to make a **task**");
    }
    can.push("to **rename** this chat");
    if offers(request, "create_agent") {
        can.extend(["to add a **helper** agent", "to set up a **team** of agents"]);
    }
    let last = can.pop().unwrap_or_default();
    format!(
        "Hello! I am Spool's demo agent, and I answer from a script, so I need no API key.\n\nYou wrote: *{input}*\n\nEvery word you see arrived as an event in this chat's durable stream. Reload the page while I am typing and the answer carries on from where it was. Try asking me {}, or {last}.",
        can.join(", ")
    )
}

fn say(text: &str) -> Round {
    Round {
        say: text.to_owned(),
        ..Round::default()
    }
}

impl Round {
    /// The round, calling `name` too.
    fn calling(mut self, name: &str, arguments: Value) -> Self {
        self.tools.push(ScriptedCall {
            name: name.to_owned(),
            arguments,
        });
        self
    }
}

/// Whether the demo may call the tool `name` in this chat.
fn offers(request: &Request, name: &str) -> bool {
    request.tools.iter().any(|t| t.name == name)
}

/// A call's string argument `key`.
fn arg(call: &ToolCall, key: &str) -> String {
    call.arguments[key].as_str().unwrap_or_default().to_owned()
}

/// The last result the demo was given (an answer, a plan's verdict), as text.
fn last_result(since: &[Message]) -> &str {
    since
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_default()
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// It ran; its result.
    Done(Value),
    /// The person declined it; it never ran.
    Declined,
    /// It failed, or never ran; why.
    Failed(String),
}

/// A call of the demo's latest reply, and how it ended.
struct Ended<'a> {
    call: &'a ToolCall,
    outcome: Outcome,
}

/// The calls of the demo's latest reply in `since`, each with how it ended.
fn ended(since: &[Message]) -> Vec<Ended<'_>> {
    let Some(at) = since.iter().rposition(|m| matches!(m, Message::Assistant { .. })) else {
        return Vec::new();
    };
    let Message::Assistant { tool_calls, .. } = &since[at] else {
        return Vec::new();
    };
    let result = |id: &str| {
        since[at + 1..].iter().find_map(|m| match m {
            Message::Tool { call_id, content, .. } if call_id == id => Some(content.as_str()),
            _ => None,
        })
    };
    tool_calls
        .iter()
        .map(|call| Ended {
            call,
            outcome: match result(&call.id) {
                None => Outcome::Failed("it did not run".to_owned()),
                Some(content) => outcome(content),
            },
        })
        .collect()
}

/// How a call ended, from its result as the conversation gives it.
fn outcome(content: &str) -> Outcome {
    match content.strip_prefix("error: ") {
        Some(DECLINED) => Outcome::Declined,
        Some(error) => Outcome::Failed(error.to_owned()),
        None if content.starts_with("(not run") => Outcome::Failed(content.trim_matches(['(', ')']).to_owned()),
        None => Outcome::Done(serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.to_owned()))),
    }
}

/// `names` in bold, joined as prose ("**A**, **B** and **C**").
fn listed(names: &[String]) -> String {
    let bold: Vec<String> = names.iter().map(|n| format!("**{n}**")).collect();
    match bold.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What became of calls that add things to `place`, each named by `name`: which were added,
/// which the person declined, which failed and why.
fn report(ended: &[Ended<'_>], place: &str, name: impl Fn(&ToolCall) -> String) -> String {
    let named = |wanted: fn(&Outcome) -> bool| -> Vec<String> {
        ended
            .iter()
            .filter(|e| wanted(&e.outcome))
            .map(|e| name(e.call))
            .collect()
    };
    let added = named(|o| matches!(o, Outcome::Done(_)));
    let declined = named(|o| matches!(o, Outcome::Declined));
    let mut said = Vec::new();
    if added.is_empty() {
        said.push("Nothing was added.".to_owned());
    } else {
        said.push(format!("Added {} to {place}.", listed(&added)));
    }
    if !declined.is_empty() {
        let not = if declined.len() == 1 { "it was" } else { "they were" };
        said.push(format!("You declined {}, so {not} not added.", listed(&declined)));
    }
    for e in ended {
        if let Outcome::Failed(error) = &e.outcome {
            said.push(format!("I could not add **{}**: {error}.", name(e.call)));
        }
    }
    said.join(" ")
}

/// A task request's round: one task per item it lists, titled by its gist.
fn tasks(request: &Request, input: &str) -> Round {
    if request.context.workspace_id.is_none() {
        return say("Tasks belong to a workspace: ask me in one of its chats and I will add it to its task list.");
    }
    let titles = task_titles(input);
    let said = match titles.len() {
        0 => return say("What should the task say? For example: *add a task to water the ferns*."),
        1 => "I'll note that as a task.".to_owned(),
        n => format!("I'll note those as {n} tasks."),
    };
    titles.into_iter().fold(say(&said), |round, title| {
        // A title cut short keeps the whole request in the task's description.
        let arguments = if title.ends_with('…') {
            json!({ "summary": title, "description": input.trim() })
        } else {
            json!({ "summary": title })
        };
        round.calling("create_task", arguments)
    })
}

/// A rename's round: the title asked for, else a summary of the chat's first message.
fn rename(request: &Request, input: &str) -> Round {
    let summary = || {
        request.messages.iter().find_map(|m| match m {
            Message::User { text } => {
                let text = as_written(text);
                let own = !text.starts_with('<') && !text.starts_with('[') && Intent::of(text) != Intent::Rename;
                own.then(|| titles::summary(text)).flatten()
            }
            _ => None,
        })
    };
    match title_asked(input).or_else(summary) {
        Some(title) => {
            say(&format!("I'll call this chat *{title}*.")).calling("rename_chat", json!({ "title": title }))
        }
        None => say(
            "What should this chat be called? Tell me, for example: *rename this chat to Launch planning*. There is nothing in it yet I could name it after.",
        ),
    }
}

/// The team's proposal: three agents for `purpose`, each waiting for the person's approval.
fn team(purpose: &str) -> Round {
    let said = format!(
        "For **{purpose}** I suggest three agents, each with a role, what it reads, what it produces and where it stops (see the knowledge base's *Writing agent instructions*). Adding agents changes the workspace, so approve each one."
    );
    TEAM.iter()
        .zip(1..)
        .fold(say(&said), |round, ((name, instruction), order)| {
            let instruction = instruction.replace("{purpose}", purpose);
            round.calling(
                "create_agent",
                json!({ "name": name, "order": order, "instruction": instruction }),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{runtime::TurnContext, tools::specs};

    /// A request in a workspace's chat with its built-in agent, or in the global chat.
    fn request(in_workspace: bool, messages: &[&str]) -> Request {
        Request {
            instruction: String::new(),
            agent_instruction: String::new(),
            messages: messages
                .iter()
                .map(|text| Message::User {
                    text: (*text).to_owned(),
                })
                .collect(),
            tools: specs(in_workspace),
            model: None,
            context: TurnContext {
                workspace_id: in_workspace.then(|| "ws_1".to_owned()),
                ..TurnContext::default()
            },
            workspace_context: None,
            stamps: Vec::new(),
            files: Vec::new(),
            file_access: None,
            mcp_servers: Vec::new(),
            mcp_listed: std::collections::BTreeMap::new(),
        }
    }

    fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments,
        }
    }

    fn result(id: &str, content: &str) -> Message {
        Message::Tool {
            call_id: id.to_owned(),
            name: "create_agent".to_owned(),
            content: content.to_owned(),
        }
    }

    /// The conversation after a reply that proposed `names` as agents, with their results.
    fn proposed(names: &[&str], results: &[&str]) -> Vec<Message> {
        let calls = names
            .iter()
            .enumerate()
            .map(|(i, name)| call(&format!("c{i}"), "create_agent", json!({ "name": name })))
            .collect();
        let mut since = vec![Message::Assistant {
            text: String::new(),
            tool_calls: calls,
        }];
        since.extend(results.iter().enumerate().map(|(i, r)| result(&format!("c{i}"), r)));
        since
    }

    #[test]
    fn a_declined_or_failed_call_is_never_reported_as_added() {
        let declined = format!("error: {DECLINED}");
        for (results, expected) in [
            (
                vec![
                    r#"{"agent_id":"a1","name":"Planner"}"#,
                    declined.as_str(),
                    "error: at most 2 agents",
                ],
                "Added **Planner** to the Agents tab. You declined **Writer**, so it was not added. I could not add **Reviewer**: at most 2 agents.",
            ),
            (
                vec![
                    r#"{"name":"Planner"}"#,
                    r#"{"name":"Writer"}"#,
                    r#"{"name":"Reviewer"}"#,
                ],
                "Added **Planner**, **Writer** and **Reviewer** to the Agents tab.",
            ),
            (
                vec![declined.as_str(), declined.as_str()],
                "Nothing was added. You declined **Planner** and **Writer**, so they were not added. I could not add **Reviewer**: it did not run.",
            ),
        ] {
            let since = proposed(&["Planner", "Writer", "Reviewer"], &results);
            let said = report(&ended(&since), "the Agents tab", |c| arg(c, "name"));
            assert_eq!(said, expected, "{results:?}");
        }
    }

    #[test]
    fn the_team_report_names_the_added_and_the_declined() {
        let input = "please set up a team for me";
        let mut since = vec![
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("q", ASK_USER, json!({}))],
            },
            result("q", "a newsletter"),
        ];
        let proposal = round(&request(true, &[input]), input, &since, 1).unwrap();
        let names: Vec<&str> = proposal
            .tools
            .iter()
            .map(|c| c.arguments["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Planner", "Writer", "Reviewer"]);
        assert!(
            proposal.tools[0].arguments["instruction"]
                .as_str()
                .unwrap()
                .contains("a newsletter")
        );
        since.extend(proposed(
            &names,
            &[
                r#"{"name":"Planner"}"#,
                &format!("error: {DECLINED}"),
                r#"{"name":"Reviewer"}"#,
            ],
        ));
        let said = round(&request(true, &[input]), input, &since, 2).unwrap().say;
        assert!(
            said.starts_with("Added **Planner** and **Reviewer** to the Agents tab, after me. You declined **Writer**, so it was not added. Start a chat"),
            "{said}"
        );
    }

    #[test]
    fn a_rename_takes_the_title_asked_or_the_chats_gist() {
        let ask = |messages: &[&str]| {
            let input = messages.last().unwrap();
            round(&request(true, messages), input, &[], 0).unwrap()
        };
        let asked = ask(&["Please rename this chat to Launch planning"]);
        assert_eq!(asked.tools[0].name, "rename_chat");
        assert_eq!(asked.tools[0].arguments["title"], "Launch planning");
        let gist = ask(&["Could you draft the Q3 launch email for me?", "rename this chat"]);
        assert_eq!(gist.tools[0].arguments["title"], "Draft the Q3 launch email for me");
        let nothing = ask(&["rename this chat"]);
        assert!(nothing.tools.is_empty(), "{nothing:?}");
        let since = vec![
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("r", "rename_chat", json!({ "title": "X" }))],
            },
            result("r", "error: the chat no longer exists"),
        ];
        let failed = round(
            &request(true, &["rename this chat to X"]),
            "rename this chat to X",
            &since,
            1,
        )
        .unwrap();
        assert_eq!(failed.say, "I could not rename this chat: the chat no longer exists.");
    }

    #[test]
    fn where_agents_cannot_be_added_the_demo_says_so_and_offers_none() {
        for input in ["set up a team", "add a helper agent"] {
            let answer = round(&request(false, &[input]), input, &[], 0).unwrap();
            assert!(answer.tools.is_empty(), "{input}: {answer:?}");
            assert_eq!(answer.say, NO_AGENTS_HERE);
        }
        let hello = round(&request(false, &["hello"]), "hello", &[], 0).unwrap().say;
        assert!(
            hello.ends_with("Try asking me a **question**, for a **plan**, or to **rename** this chat."),
            "{hello}"
        );
        let hello = round(&request(true, &["hello"]), "hello", &[], 0).unwrap().say;
        assert!(
            hello.ends_with("to add a **helper** agent, or to set up a **team** of agents."),
            "{hello}"
        );
    }

    #[test]
    fn listed_tasks_are_one_call_each() {
        let input = "add tasks: buy milk, call Kim";
        let answer = round(&request(true, &[input]), input, &[], 0).unwrap();
        let titles: Vec<&Value> = answer.tools.iter().map(|c| &c.arguments["summary"]).collect();
        assert_eq!(titles, [&json!("Buy milk"), &json!("Call Kim")]);
        assert_eq!(answer.say, "I'll note those as 2 tasks.");
    }
}
