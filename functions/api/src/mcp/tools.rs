//! # The tools of Spool's MCP server
//!
//! Each tool is a route's handler or the service behind it, called as the request's caller:
//! `list_chats` is `GET /v1/sessions`, `post_message` and `post_agent` are
//! `POST /v1/sessions/{id}/agent-messages`, `create_task` is `POST /v1/workspaces/{id}/tasks`,
//! `read_chat` reads a chat's events as `GET /v1/sessions/{id}/events` does, and `ask_user` and
//! `wait_user` post a question as an agent and wait for the person's answer ([`super::wait`]).
//! Arguments are checked against strict schemas (no unknown fields): malformed ones are the
//! protocol's invalid-params error; what the route refuses is a tool error with its message.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData, RoleServer,
    model::{CallToolResult, ContentBlock, JsonObject, Tool},
    schemars::JsonSchema,
    service::RequestContext,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use spool_chat::{global::Message, service::GLOBAL_SESSION};
use spool_edge::ApiError;

use crate::{
    ChatApi,
    extract::{BodyBytes, Caller, Id, JsonBody, PathOf, QueryOf},
};

/// The most chats one `list_chats` answers.
const MAX_CHATS: usize = 100;
/// The most events or messages one `read_chat` answers.
const MAX_READ: usize = 200;
/// What `read_chat` answers unless `limit` says otherwise.
const DEFAULT_READ: usize = 50;

/// `list_chats`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct ListChats {
    /// The workspace whose chats to list; without it, the chats outside workspaces.
    #[serde(default)]
    workspace_id: Option<String>,
    /// At most this many (1 to 100, default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    limit: Option<usize>,
    /// The `next_cursor` of the previous page, with the same `workspace_id`.
    #[serde(default)]
    cursor: Option<String>,
}

/// What `read_chat` answers.
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "rmcp::schemars")]
pub(super) enum View {
    /// Messages only (people's, agents', Spool's replies and notices), as `{id, ts, role, author, text, meta}`.
    #[default]
    Messages,
    /// Every event, as the chat's stream holds it.
    Events,
}

/// `read_chat`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct ReadChat {
    /// The chat (`global` for the organization's global chat).
    chat_id: String,
    /// Only what comes after this seq (a message's `id`, or `last_seq` of the previous read);
    /// without it, the chat's last events.
    #[serde(default)]
    after: Option<u64>,
    /// How many events to read at most (1 to 200, default 50); `messages` answers the messages among them.
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    limit: Option<usize>,
    /// `messages` (the default) or `events`.
    #[serde(default)]
    view: View,
}

/// `post_message`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct PostMessage {
    /// The chat (`global` for the organization's global chat).
    chat_id: String,
    /// Who writes: the agent's name (1 to 100 characters).
    author: String,
    /// The text.
    text: String,
    /// The message or question it replies to.
    #[serde(default)]
    reply_to: Option<String>,
    /// Its tags (up to 10).
    #[serde(default)]
    tags: Vec<String>,
}

/// `post_agent`'s arguments: a message in the global chat.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct PostAgent {
    /// Who writes: the agent's name (1 to 100 characters).
    author: String,
    /// The text.
    text: String,
    /// The message or question it replies to.
    #[serde(default)]
    reply_to: Option<String>,
    /// Its tags (up to 10).
    #[serde(default)]
    tags: Vec<String>,
}

/// `ask_user`'s arguments: a new question (`author`, `question`), or one to keep waiting on
/// (`question_id`, with the `chat_id` and `after` of the `waiting` answer).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct AskUser {
    /// The chat (default `global`, the organization's global chat).
    #[serde(default)]
    chat_id: Option<String>,
    /// Who asks: the agent's name (1 to 100 characters). For a new question.
    #[serde(default)]
    author: Option<String>,
    /// The question. For a new question.
    #[serde(default)]
    question: Option<String>,
    /// A question asked before, whose answer to keep waiting for.
    #[serde(default)]
    question_id: Option<String>,
    /// With `question_id`: the `after` of the `waiting` answer.
    #[serde(default)]
    after: Option<u64>,
}

/// `wait_user`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct WaitUser {
    /// The chat (default `global`).
    #[serde(default)]
    chat_id: Option<String>,
    /// Wait for the answer to this question; without it, for the next person's message.
    #[serde(default)]
    question_id: Option<String>,
    /// Only what comes after this seq (a message's `id`, or the `after` of a `waiting` answer);
    /// without it, from now on.
    #[serde(default)]
    after: Option<u64>,
}

/// `create_task`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub(super) struct CreateTask {
    /// The workspace.
    workspace_id: String,
    /// What it is.
    title: String,
    /// What to do.
    #[serde(default)]
    description: Option<String>,
    /// The workspace's chat it belongs to.
    #[serde(default)]
    chat_id: Option<String>,
}

/// Every tool, with its schema.
pub(super) fn all() -> Vec<Tool> {
    vec![
        tool::<ListChats>(
            "list_chats",
            "Lists the organization's chats, most recently active first (a workspace's with workspace_id), with a cursor for the next page.",
        ),
        tool::<ReadChat>(
            "read_chat",
            "Reads a chat's messages (or events) after a seq, oldest first; `last_seq` is the next read's `after`.",
        ),
        tool::<PostMessage>(
            "post_message",
            "Posts a message in a chat as an agent (`author`); Spool's own agent does not answer it.",
        ),
        tool::<AskUser>(
            "ask_user",
            "Asks a person a question in a chat (the global chat by default) and waits for their answer, \
             reporting progress. If no answer comes in time it answers `{status: \"waiting\", question_id, chat_id, after}`: \
             call ask_user again with those to keep waiting.",
        ),
        tool::<WaitUser>(
            "wait_user",
            "Waits for a person's next message in a chat (the global chat by default), or for the answer to `question_id`; \
             answers `waiting` (resumable with its `after`) if none comes in time.",
        ),
        tool::<PostAgent>(
            "post_agent",
            "Posts a message in the organization's global chat as an agent (`author`).",
        ),
        tool::<CreateTask>(
            "create_task",
            "Creates a task in a workspace (optionally tied to one of its chats).",
        ),
    ]
}

fn tool<T: JsonSchema + 'static>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, rmcp::handler::server::common::schema_for_type::<T>())
}

/// One tool call, as the request's caller.
pub(super) struct Call<'a> {
    pub(super) api: Arc<ChatApi>,
    pub(super) caller: Caller,
    pub(super) context: &'a RequestContext<RoleServer>,
}

impl Call<'_> {
    /// Runs tool `name` with `arguments`: its result, a tool error for what Spool refuses, or
    /// the protocol's invalid params for arguments its schema does not take.
    pub(super) async fn run(&self, name: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, ErrorData> {
        let args = Value::Object(arguments.unwrap_or_default());
        let answer = match name {
            "list_chats" => self.list_chats(parse(name, args)?).await,
            "read_chat" => self.read_chat(parse(name, args)?).await,
            "post_message" => {
                let a: PostMessage = parse(name, args)?;
                self.post(&a.chat_id, &a.author, &a.text, false, a.reply_to, a.tags)
                    .await
            }
            "post_agent" => {
                let a: PostAgent = parse(name, args)?;
                self.post(GLOBAL_SESSION, &a.author, &a.text, false, a.reply_to, a.tags)
                    .await
            }
            "ask_user" => self.ask_user(parse(name, args)?).await,
            "wait_user" => {
                let a: WaitUser = parse(name, args)?;
                let chat = a.chat_id.as_deref().unwrap_or(GLOBAL_SESSION);
                self.wait(chat, a.question_id.as_deref(), a.after).await
            }
            "create_task" => self.create_task(parse(name, args)?).await,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("there is no tool `{name}`; tools/list names them"),
                    None,
                ));
            }
        };
        Ok(match answer {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(refusal(e).await)]),
        })
    }

    async fn list_chats(&self, a: ListChats) -> Result<Value, ApiError> {
        let limit = a.limit.unwrap_or(20);
        if !(1..=MAX_CHATS).contains(&limit) {
            return Err(ApiError::BadRequest(format!("`limit` is 1 to {MAX_CHATS}")));
        }
        let query = json!({"workspace_id": a.workspace_id, "limit": limit, "cursor": a.cursor});
        let query = serde_json::from_value(query).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let answer = crate::sessions::list_sessions(State(self.api.clone()), self.caller.clone(), QueryOf(query)).await;
        body_of(answer).await
    }

    async fn read_chat(&self, a: ReadChat) -> Result<Value, ApiError> {
        let limit = a.limit.unwrap_or(DEFAULT_READ);
        if !(1..=MAX_READ).contains(&limit) {
            return Err(ApiError::BadRequest(format!("`limit` is 1 to {MAX_READ}")));
        }
        let session = self.api.session_of(&self.caller, &id(&a.chat_id)?).await?;
        let org = self.caller.org();
        let after = match a.after {
            Some(after) => after,
            None => self
                .api
                .chats
                .last_seq(org, &session)
                .await?
                .saturating_sub(limit as u64),
        };
        let page = self.api.chats.events(org, &session, after, limit).await?;
        let items = match a.view {
            View::Events => serde_json::to_value(&page.events),
            View::Messages => serde_json::to_value(page.events.iter().filter_map(Message::of).collect::<Vec<_>>()),
        }
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let key = match a.view {
            View::Events => "events",
            View::Messages => "messages",
        };
        Ok(json!({"chat_id": session.id, key: items, "last_seq": page.next, "up_to_date": page.next >= page.tail}))
    }

    /// An agent's message (`ask`: a question) through `POST /v1/sessions/{id}/agent-messages`.
    pub(super) async fn post(
        &self,
        chat: &str,
        author: &str,
        text: &str,
        ask: bool,
        reply_to: Option<String>,
        tags: Vec<String>,
    ) -> Result<Value, ApiError> {
        let meta = (reply_to.is_some() || !tags.is_empty()).then(|| json!({"reply_to": reply_to, "tags": tags}));
        let body = json!({"author": author, "text": text, "ask": ask, "meta": meta});
        let answer = crate::global::agent_message(
            State(self.api.clone()),
            self.caller.clone(),
            PathOf(id(chat)?),
            BodyBytes(Bytes::from(body.to_string())),
        )
        .await;
        let mut posted = body_of(answer).await?;
        posted["chat_id"] = json!(chat);
        Ok(posted)
    }

    async fn ask_user(&self, a: AskUser) -> Result<Value, ApiError> {
        let chat = a.chat_id.as_deref().unwrap_or(GLOBAL_SESSION);
        if let Some(question) = a.question_id.as_deref() {
            if a.question.is_some() || a.author.is_some() {
                return Err(ApiError::BadRequest(
                    "send either `author` and `question` (a new question) or `question_id` (one to keep waiting on)"
                        .to_owned(),
                ));
            }
            return self.wait(chat, Some(question), Some(a.after.unwrap_or(0))).await;
        }
        let (Some(author), Some(question)) = (a.author, a.question) else {
            return Err(ApiError::BadRequest(
                "send `author` and `question` to ask, or `question_id` to keep waiting on an earlier question"
                    .to_owned(),
            ));
        };
        let posted = self.post(chat, &author, &question, true, None, Vec::new()).await?;
        let (Some(seq), Some(question_id)) = (posted["seq"].as_u64(), posted["question_id"].as_str()) else {
            return Err(ApiError::BadRequest(
                "the question was posted without its id".to_owned(),
            ));
        };
        self.wait(chat, Some(question_id), Some(seq)).await
    }

    async fn create_task(&self, a: CreateTask) -> Result<Value, ApiError> {
        let new = json!({"title": a.title, "description": a.description.unwrap_or_default(), "session_id": a.chat_id});
        let new = serde_json::from_value(new).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let answer = crate::tasks::create_task(
            State(self.api.clone()),
            self.caller.clone(),
            PathOf(id(&a.workspace_id)?),
            JsonBody(new),
        )
        .await;
        body_of(answer).await
    }
}

/// The arguments of tool `name`, or the protocol's invalid params saying what is wrong.
fn parse<T: DeserializeOwned>(name: &str, args: Value) -> Result<T, ErrorData> {
    serde_json::from_value(args).map_err(|e| ErrorData::invalid_params(format!("{name}: {e}"), None))
}

/// An id as the routes take it.
pub(super) fn id(raw: &str) -> Result<Id, ApiError> {
    Id::try_from(raw.to_owned()).map_err(ApiError::BadRequest)
}

/// A route's answer as JSON; its refusal as the error.
async fn body_of(answer: impl IntoResponse) -> Result<Value, ApiError> {
    let response = answer.into_response();
    let status = response.status();
    let text = json_of(response).await;
    if status.is_success() {
        Ok(text)
    } else {
        let message = text["error"]["message"].as_str().unwrap_or("refused").to_owned();
        Err(ApiError::BadRequest(format!("{message} ({status})")))
    }
}

async fn json_of(response: Response) -> Value {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// What a tool error says: the refusal's message as the HTTP route would say it (an internal
/// failure says only that it failed, as the route's answer does).
async fn refusal(e: ApiError) -> String {
    let body = json_of(e.into_response()).await;
    body["error"]["message"]
        .as_str()
        .unwrap_or("Spool could not do this")
        .to_owned()
}
