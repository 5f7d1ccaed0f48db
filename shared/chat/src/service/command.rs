//! # Slash commands in a chat
//!
//! A person's `/name arguments` is resolved against the chat's commands ([`Registry`]),
//! previewed, or invoked. Invoking appends `slash_command_invoked` before anything acts; a
//! prompt command then becomes the turn's input (its rendered template, wrapped in
//! `<slash-command>`), appended in the same write and under the same one-pending-turn rule as
//! a message; an action runs. A command that cannot run appends `slash_command_failed` with
//! the reason. With a `client_message_id` a retry appends nothing and answers as the first
//! attempt did (`/new` names its chat in the invoked event, so a retry makes no second one).

use super::{
    ChatService, Message, NewChat, Posted,
    command_checks::{Failure, check_action, effect, reason_of, unknown_reason},
};
use crate::{
    event::{ChatEvent, ControlAction, SlashCommandFailed, SlashCommandInvoked},
    session::{EventDraft, PendingTurn, Session},
    workspace::new_id,
};
use spool_commands::{
    CommandAction, CommandScope, CommandSource,
    args::{Invocation, render, wrap},
    lookup,
    markdown::SlashCommand,
    registry::{Entry, Registry, closest, read_files},
};
use spool_log::error::Error;

/// A command invocation, checked by the caller (its length, its `client_message_id`'s form).
#[derive(Debug, Clone, Default)]
pub struct CommandRequest {
    /// What the person typed: `/name arguments`.
    pub input: String,
    /// Who invokes it (the token's subject).
    pub author: String,
    /// The client's id for it: a retry with the same id answers the first result.
    pub client_message_id: Option<String>,
    /// Queue a prompt behind a pending turn instead of refusing it.
    pub queue_if_busy: bool,
}

/// A command found for an input.
#[derive(Debug, Clone)]
pub struct Found {
    /// The command.
    pub command: SlashCommand,
    /// Where it comes from.
    pub source: CommandSource,
    /// The input, parsed.
    pub invocation: Invocation,
}

/// What an input names.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// A command that can run.
    Found(Found),
    /// No command of that name: the closest names.
    Unknown {
        /// The input, parsed.
        invocation: Invocation,
        /// What the person probably meant.
        closest: Vec<String>,
    },
    /// A command file that does not parse.
    Broken {
        /// The input, parsed.
        invocation: Invocation,
        /// Why.
        error: String,
    },
}

/// An input that cannot run, and why.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The input, parsed.
    pub invocation: Invocation,
    /// Which kind of failure.
    pub failure: Failure,
    /// Why, for the person.
    pub reason: String,
}

impl Resolution {
    /// The command found, or why the input cannot run.
    pub fn into_found(self) -> Result<Found, Refused> {
        match self {
            Self::Found(found) => Ok(found),
            Self::Unknown { invocation, closest } => Err(Refused {
                reason: unknown_reason(&invocation.name, &closest),
                invocation,
                failure: Failure::Unknown,
            }),
            Self::Broken { invocation, error } => Err(Refused {
                reason: format!("`/{}` cannot run: {error}; fix its file", invocation.name),
                invocation,
                failure: Failure::Invalid,
            }),
        }
    }
}

/// What invoking a command would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preview {
    /// The turn's input, exactly as the agent gets it.
    Prompt {
        /// The wrapped prompt.
        prompt: String,
        /// The model the turn uses, if the command names one.
        model: Option<String>,
    },
    /// An action, and what it would do.
    Action {
        /// The action.
        action: CommandAction,
        /// What it would do, for the person.
        effect: String,
    },
}

/// What an action did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionDone {
    /// `/new`: the chat made.
    NewSession(Box<Session>),
    /// `/stop`: the turn aborted.
    Stopped {
        /// The aborted turn.
        turn_id: Option<String>,
    },
    /// `/model`: the chat's model now (none: the agent's).
    Model(Option<String>),
    /// `/mode`: the chat's mode now.
    Mode(Option<String>),
    /// `/rename`: the chat's title now.
    Renamed(String),
    /// `/clear`: the agent starts afresh from here.
    Cleared,
    /// `/help`: the chat's commands.
    Help(Vec<Entry>),
}

/// What became of an invocation.
#[derive(Debug, Clone)]
pub enum Invoked {
    /// A prompt command: its turn is queued.
    Prompt {
        /// The `slash_command_invoked` event's seq (the prompt is the next event).
        seq: u64,
        /// The turn it starts.
        turn_id: Option<String>,
        /// Whether it was a retry.
        duplicate: bool,
    },
    /// An action ran.
    Action {
        /// The `slash_command_invoked` event's seq.
        seq: u64,
        /// What it did.
        done: ActionDone,
        /// Whether it was a retry.
        duplicate: bool,
    },
    /// Another turn is pending (nothing was appended).
    Busy(PendingTurn),
    /// It could not run; `slash_command_failed` says why.
    Failed {
        /// The failure event's seq.
        seq: u64,
        /// Which kind of failure.
        failure: Failure,
        /// Why, for the person.
        reason: String,
    },
}

/// A command resolved and ready to run.
#[derive(Debug, Clone)]
pub struct Planned {
    found: Found,
    request: CommandRequest,
}

impl Planned {
    /// The action it runs, if it is not a prompt.
    pub fn action(&self) -> Option<CommandAction> {
        self.found.command.action
    }
}

impl ChatService {
    /// The commands of chats in `workspace_id` (or outside workspaces): built-in, global, the
    /// workspace's stored ones and its working directory's files, when it has one under the
    /// allowed roots.
    pub async fn commands(&self, org: &str, workspace_id: Option<&str>) -> Result<Registry, Error> {
        let global = self.metadata.commands(org, &CommandScope::Global).await?;
        let (stored, files) = match workspace_id {
            Some(ws) => {
                let stored = self
                    .metadata
                    .commands(org, &CommandScope::Workspace(ws.to_owned()))
                    .await?;
                let files = match self.command_dir(org, ws).await? {
                    Some(dir) => tokio::task::spawn_blocking(move || read_files(&dir))
                        .await
                        .map_err(|e| Error::unavailable("read the workspace's command files", e))?,
                    None => Vec::new(),
                };
                (stored, files)
            }
            None => (Vec::new(), Vec::new()),
        };
        Ok(Registry::build(&global, &stored, files))
    }

    /// The working directory whose command files the workspace's chats see, if it has one
    /// under the allowed roots.
    async fn command_dir(&self, org: &str, workspace_id: &str) -> Result<Option<std::path::PathBuf>, Error> {
        Ok(
            match self
                .metadata
                .workspace(org, workspace_id)
                .await?
                .and_then(|w| w.working_dir)
            {
                Some(dir) => self.roots.confine(org, &dir).await.ok(),
                None => None,
            },
        )
    }

    /// What `input` names in `session`. Only the command of that name is read and parsed
    /// ([`lookup::resolve`]), so resolving costs the same however many commands are stored.
    pub async fn resolve(&self, org: &str, session: &Session, input: &str) -> Result<Resolution, Error> {
        let invocation = Invocation::parse(input)?;
        let workspace = session.workspace_id.as_deref();
        let dir = match workspace {
            Some(ws) => self.command_dir(org, ws).await?,
            None => None,
        };
        let store: &dyn spool_commands::Commands = self.metadata.as_ref();
        Ok(
            match lookup::resolve(store, org, workspace, dir, &invocation.name).await? {
                Ok(Entry {
                    command: Some(command),
                    source,
                    ..
                }) => Resolution::Found(Found {
                    command,
                    source,
                    invocation,
                }),
                Ok(entry) => Resolution::Broken {
                    error: entry.error.unwrap_or_default(),
                    invocation,
                },
                Err(names) => Resolution::Unknown {
                    closest: closest(names.iter().map(String::as_str), &invocation.name),
                    invocation,
                },
            },
        )
    }

    /// Runs `request` in `session`: [`Self::plan`], then [`Self::run`].
    pub async fn invoke(&self, org: &str, session: &Session, request: CommandRequest) -> Result<Invoked, Error> {
        match self.plan(org, session, request).await? {
            Ok(planned) => self.run(org, session, planned).await,
            Err(failed) => Ok(failed),
        }
    }

    /// Resolves `request` to the command it runs; a command that does not exist (or whose file
    /// does not parse) is recorded as failed and answered as such. The caller may look at
    /// [`Planned::action`] (to limit chat creation, say) before it [`Self::run`]s it.
    pub async fn plan(
        &self,
        org: &str,
        session: &Session,
        request: CommandRequest,
    ) -> Result<Result<Planned, Invoked>, Error> {
        match self.resolve(org, session, &request.input).await?.into_found() {
            Ok(found) => Ok(Ok(Planned { found, request })),
            Err(refused) => Ok(Err(self
                .failed(org, session, &refused.invocation, refused.failure, refused.reason)
                .await?)),
        }
    }

    /// Runs a planned command.
    pub async fn run(&self, org: &str, session: &Session, planned: Planned) -> Result<Invoked, Error> {
        let Planned { found, request } = planned;
        let invoked = SlashCommandInvoked {
            name: found.command.name.clone(),
            invoked_as: found.invocation.invoked_as(),
            arguments: found.invocation.arguments.clone(),
            source: found.source,
            kind: found.command.kind(),
            action: found.command.action,
            model: found.command.model.clone(),
            new_session_id: (found.command.action == Some(CommandAction::NewSession)).then(|| new_id("ses")),
            author: request.author.clone(),
        };
        // `/compact` runs in the worker, as a turn of its own: it goes as a prompt does (its
        // claim, its queue, its retries), and the worker summarises instead of answering.
        let Some(action) = found.command.action.filter(|a| *a != CommandAction::CompactHistory) else {
            let body = match found.command.body.as_str() {
                "" => "Compact this chat's history.",
                body => body,
            };
            let prompt = match render(body, &found.invocation.arguments) {
                Ok(prompt) => prompt,
                Err(e) => {
                    return self
                        .failed(org, session, &found.invocation, Failure::Invalid, reason_of(e))
                        .await;
                }
            };
            let message = Message {
                content: wrap(&invoked.name, &invoked.invoked_as, &prompt),
                author: request.author,
                client_message_id: request.client_message_id,
                queue_if_busy: request.queue_if_busy,
                command: Some(invoked),
                ..Message::default()
            };
            return Ok(match self.post_message(org, session, message).await? {
                // The prompt is the second event of its write: its command's is the one before.
                Posted::Accepted(accepted) => Invoked::Prompt {
                    seq: accepted.seq.saturating_sub(1),
                    turn_id: accepted.turn_id,
                    duplicate: accepted.duplicate,
                },
                Posted::Busy(holder) => Invoked::Busy(holder),
            });
        };
        let pass = found.command.pass_arguments;
        let arguments_of = |invoked: &SlashCommandInvoked| {
            if pass { invoked.arguments.clone() } else { String::new() }
        };
        // A retry answers as its first attempt did (with its arguments), whatever the chat's
        // state is now.
        if let Some(cmid) = request.client_message_id.as_deref()
            && let Some(first) = self.invoked_before(org, session, cmid).await?
        {
            let done = self
                .act(
                    org,
                    session,
                    action,
                    &arguments_of(&first.invoked),
                    &first.invoked,
                    Some(first.written_ms),
                )
                .await?;
            return Ok(Invoked::Action {
                seq: first.seq,
                done,
                duplicate: true,
            });
        }
        let arguments = arguments_of(&invoked);
        // Checked before the invoked event, so a refused action leaves only its failure.
        if let Err((failure, reason)) = check_action(action, session, &arguments) {
            return self.failed(org, session, &found.invocation, failure, reason).await;
        }
        let draft = EventDraft {
            event: ChatEvent::SlashCommandInvoked(invoked.clone()),
            client_message_id: request.client_message_id.clone(),
            turn_id: None,
        };
        let (seq, duplicate) = self
            .append_once(org, session, draft, request.client_message_id.as_deref())
            .await?;
        if !duplicate {
            self.fail.check(spool_log::failpoint::COMMAND_INVOKED)?;
            let done = self.act(org, session, action, &arguments, &invoked, None).await?;
            return Ok(Invoked::Action { seq, done, duplicate });
        }
        // Another request with this id wrote it first (two at once): this one answers as that
        // one does.
        let (first, written_ms) = match self.event_at(&Session::stream(org, &session.id)?, seq).await? {
            Some(crate::session::Event {
                event: ChatEvent::SlashCommandInvoked(first),
                ts,
                ..
            }) => (first, spool_log::clock::parse_rfc3339_ms(&ts).unwrap_or(0)),
            _ => (invoked, 0),
        };
        let done = self
            .act(org, session, action, &arguments_of(&first), &first, Some(written_ms))
            .await?;
        Ok(Invoked::Action { seq, done, duplicate })
    }

    /// What invoking `found` would do; [`Error::Invalid`] when its prompt would be too long.
    pub fn preview(&self, session: &Session, found: &Found) -> Result<Preview, Error> {
        Ok(match found.command.action {
            None => Preview::Prompt {
                prompt: wrap(
                    &found.command.name,
                    &found.invocation.invoked_as(),
                    &render(&found.command.body, &found.invocation.arguments)?,
                ),
                model: found.command.model.clone(),
            },
            Some(action) => {
                let arguments = if found.command.pass_arguments {
                    found.invocation.arguments.as_str()
                } else {
                    ""
                };
                let effect = match check_action(action, session, arguments) {
                    Err((_, reason)) => format!("It would fail: {reason}"),
                    Ok(()) => effect(action, arguments),
                };
                Preview::Action { action, effect }
            }
        })
    }

    /// Runs an action whose invoked event is appended; `retry`: when that event was written,
    /// if this is a retry of it. A retry of a setting (`/model`, `/mode`, `/rename`) answers
    /// the setting it asked for and changes the chat only if its first attempt did not
    /// ([`Self::unsettled`]).
    async fn act(
        &self,
        org: &str,
        session: &Session,
        action: CommandAction,
        arguments: &str,
        invoked: &SlashCommandInvoked,
        retry: Option<i64>,
    ) -> Result<ActionDone, Error> {
        let duplicate = retry.is_some();
        let model = (!arguments.is_empty()).then(|| arguments.to_owned());
        let mode = Some(arguments.to_owned());
        let title = crate::names::clean(arguments);
        let settled = |s: &Session| match action {
            CommandAction::SetModel => s.model == model,
            CommandAction::SwitchMode => s.mode == mode,
            CommandAction::Rename => s.title == title,
            _ => false,
        };
        let mut changed = match retry {
            Some(written_ms)
                if matches!(
                    action,
                    CommandAction::SetModel | CommandAction::SwitchMode | CommandAction::Rename
                ) =>
            {
                match self.unsettled(org, &session.id, written_ms, settled).await? {
                    Some(current) => current,
                    None => {
                        return Ok(match action {
                            CommandAction::SetModel => ActionDone::Model(model),
                            CommandAction::SwitchMode => ActionDone::Mode(mode),
                            _ => ActionDone::Renamed(title),
                        });
                    }
                }
            }
            _ => session.clone(),
        };
        changed.updated_ms = self.clock.now_ms();
        Ok(match action {
            CommandAction::NewSession => {
                let agent = match &session.agent_id {
                    Some(id) => self.metadata.agent(org, id).await?,
                    None => None,
                };
                let new = NewChat {
                    workspace_id: session.workspace_id.clone(),
                    agent,
                    title: None,
                    id: invoked.new_session_id.clone(),
                    created_by: invoked.author.clone(),
                };
                ActionDone::NewSession(Box::new(self.create(org, new).await?))
            }
            // A retry aborts again only if the turn still runs (its first attempt may have died
            // before the abort); an abort twice is harmless.
            CommandAction::StopStream if duplicate && session.pending_turn.is_none() => {
                ActionDone::Stopped { turn_id: None }
            }
            CommandAction::StopStream => {
                let submitted = self.control(org, session, ControlAction::Abort).await?;
                ActionDone::Stopped {
                    turn_id: submitted.turn_id,
                }
            }
            CommandAction::SetModel => {
                changed.model = model;
                self.metadata.update_session(org, &changed).await?;
                ActionDone::Model(changed.model)
            }
            CommandAction::SwitchMode => {
                changed.mode = mode;
                self.metadata.update_session(org, &changed).await?;
                ActionDone::Mode(changed.mode)
            }
            CommandAction::Rename => {
                changed.title = title;
                self.metadata.update_session(org, &changed).await?;
                if let Some(ws) = &changed.workspace_id {
                    let event = crate::event::FeedEvent::ChatRenamed {
                        chat_id: changed.id.clone(),
                        chat_title: changed.title.clone(),
                        workspace_id: ws.clone(),
                    };
                    self.feed(org, ws, &event).await?;
                }
                ActionDone::Renamed(changed.title)
            }
            CommandAction::ClearContext => ActionDone::Cleared,
            // It runs as a turn ([`Self::run`] sends it as a prompt); never here.
            CommandAction::CompactHistory => {
                return Err(Error::invalid("command", "/compact runs as a turn of its own"));
            }
            CommandAction::Help => {
                let registry = self.commands(org, session.workspace_id.as_deref()).await?;
                ActionDone::Help(registry.entries().cloned().collect())
            }
        })
    }

    /// Appends `slash_command_failed` and answers the failure.
    async fn failed(
        &self,
        org: &str,
        session: &Session,
        invocation: &Invocation,
        failure: Failure,
        reason: String,
    ) -> Result<Invoked, Error> {
        let event = ChatEvent::SlashCommandFailed(SlashCommandFailed {
            name: invocation.name.clone(),
            invoked_as: invocation.invoked_as(),
            reason: reason.clone(),
        });
        let seq = self.append(org, session, EventDraft::new(event, None)).await?;
        self.seal_when_idle(org, session, seq).await;
        Ok(Invoked::Failed { seq, failure, reason })
    }
}
