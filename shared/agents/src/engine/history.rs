//! A step's history: read from the chat's message index ([`spool_chat::history`]) back to the
//! latest summary, and compacted when it outgrows the agent's context budget
//! ([`crate::history`]).

use spool_chat::{
    branch::Branch,
    event::{CompactReason, HistoryCompacted},
    history as index,
};
use spool_commands::CommandAction;

use super::*;
use crate::{history as budget, runtime::Message, state::conversation_traced};

/// A sink that keeps nothing: a summary's text comes back whole in the reply.
struct Discard;

#[async_trait::async_trait]
impl Sink for Discard {
    async fn text(&mut self, _: &str) -> Result<(), runtime::Error> {
        Ok(())
    }
}

impl Engine {
    /// The chat's events a step needs: what its message index holds after the latest summary
    /// (no deltas), then every event from the step's trigger on. A step of a chat of 100,000
    /// events reads about as much as one of a new chat. An index that cannot be read costs
    /// time, not history: the chat is read whole.
    pub(super) async fn recent_events(&self, path: &StreamPath, job: &TurnJob) -> Result<Vec<Event>, Error> {
        let log = self.log.as_ref();
        let (org, id) = (job.org.as_str(), job.session_id.as_str());
        let indexed = match index::catch_up(log, org, id).await {
            Ok(through) => {
                let raw_from = through.min(job.trigger_seq.saturating_sub(1));
                let raw = read_events(log, path, raw_from, usize::MAX).await?.events;
                // The branch the trigger (an edit, a regenerate) or a later event set, if any,
                // decides which summary and which indexed events are on the active branch.
                index::since_summary(log, org, id, raw_from, Branch::latest(&raw))
                    .await
                    .map(|events| (raw_from, events, raw))
            }
            Err(e) => Err(e),
        };
        let (raw_from, mut events, raw) = match indexed {
            Ok(found) => found,
            Err(e @ (Error::NotFound { .. } | Error::Gone { .. })) => return Err(e),
            Err(e) => {
                tracing::warn!(org, chat = id, error = %e, "the chat's message index could not be read; reading the chat whole");
                let mut events = read_events(log, path, 0, usize::MAX).await?.events;
                Branch::keep_active(&mut events);
                return Ok(events);
            }
        };
        // A new version's turn tells the chat's record of its branch, in case the request that
        // appended it died before it could (the record only ever moves forward).
        if let Some(trigger) = raw.iter().find(|e| e.seq == job.trigger_seq)
            && Branch::set_by(trigger).is_some()
        {
            self.metadata.note_branch(org, id, trigger.seq).await?;
        }
        events.extend(raw);
        Branch::keep_active(&mut events);
        // A message a dead worker left open before the trigger needs its deltas (never seen
        // in practice: an open message is the trigger's own step's).
        let state = TurnState::replay(&events, &job.turn_id);
        let open_start = state.open_message.and_then(|open| {
            events.iter().find_map(|e| match &e.event {
                ChatEvent::MessageStart(start) if start.message_id == open.id => Some(e.seq),
                _ => None,
            })
        });
        if let Some(start) = open_start.filter(|&s| s <= raw_from) {
            events.retain(|e| e.seq < start);
            events.extend(read_events(log, path, start - 1, usize::MAX).await?.events);
        }
        Ok(events)
    }
}

impl Step<'_> {
    /// Whether this turn is `/compact`'s.
    pub(super) fn compact_command(&self) -> Option<String> {
        self.events.iter().find_map(|e| match &e.event {
            ChatEvent::SlashCommandInvoked(c)
                if e.turn_id.as_deref() == Some(&self.job.turn_id)
                    && c.action == Some(CommandAction::CompactHistory) =>
            {
                Some(c.arguments.clone())
            }
            _ => None,
        })
    }

    /// The agent's context budget: its own, else its runtime's.
    fn budget(&self, runtime: &dyn Runtime, request: &Request) -> u64 {
        self.agent
            .as_ref()
            .and_then(|a| a.context_tokens)
            .unwrap_or_else(|| runtime.context_budget(request))
    }

    /// Summarises the oldest part of the history when the history and the turn would not fit
    /// the agent's budget (`force`: everything before the turn, as `/compact` asks; `focus`:
    /// what the person asked the summary to keep). Appends `history_compacted` (and the
    /// summary's `usage`); answers whether it did.
    pub(super) async fn compact(&mut self, runtime: &dyn Runtime, force: bool, focus: &str) -> Result<bool, Error> {
        let own = |e: &Event| e.turn_id.as_deref() == Some(self.job.turn_id.as_str());
        if self
            .events
            .iter()
            .any(|e| own(e) && matches!(e.event, ChatEvent::HistoryCompacted(_)))
        {
            // An earlier delivery of this step did it.
            return Ok(true);
        }
        let start = self.state().start_seq.unwrap_or(0);
        let seen = self.seen();
        let (messages, _, seqs) = conversation_traced(&seen, self.with_context());
        let request = self.runtime_request(Vec::new());
        let fixed = budget::tokens(&request.instruction)
            + request
                .tools
                .iter()
                .map(|t| budget::tokens(&t.description) + budget::tokens(&t.parameters.to_string()))
                .sum::<u64>();
        let limit = self.budget(runtime, &request);
        let earlier = seen.iter().rev().find_map(|e| match &e.event {
            ChatEvent::HistoryCompacted(c) if e.seq < start => Some(c.from_seq),
            _ => None,
        });
        let from_seq = earlier.or_else(|| seqs.first().copied()).unwrap_or(1);
        // The turn begins at its first event (a command's comes before its prompt).
        let turn_start = self.events.iter().find(|e| own(e)).map_or(start, |e| e.seq.min(start));
        let Some(cut) = budget::plan(&messages, &seqs, fixed, limit, turn_start, from_seq, force) else {
            if !force && fixed + messages.iter().map(budget::message_tokens).sum::<u64>() > limit {
                tracing::warn!(turn = %self.job.turn_id, limit, "the turn alone outgrows the agent's context budget; nothing before it to summarise");
            }
            return Ok(false);
        };
        let covered = &messages[..cut.count];
        let (summary, by, usage) = self.summary(runtime, &request, covered, limit, focus).await;
        let compacted = HistoryCompacted {
            from_seq: cut.from_seq,
            through_seq: cut.through_seq,
            tokens_after: budget::tokens(&summary),
            summary,
            by,
            tokens_before: cut.tokens,
            reason: if force {
                CompactReason::Command
            } else {
                CompactReason::Budget
            },
        };
        tracing::info!(
            turn = %self.job.turn_id,
            from = compacted.from_seq,
            through = compacted.through_seq,
            before = compacted.tokens_before,
            after = compacted.tokens_after,
            by = %compacted.by,
            "history compacted"
        );
        let mut drafts = vec![self.draft(ChatEvent::HistoryCompacted(compacted))];
        if let Some(usage) = usage {
            drafts.push(self.draft(ChatEvent::Usage(usage)));
        }
        self.append(drafts).await?;
        // The summary's tokens are the workspace's too.
        self.record_usage().await;
        Ok(true)
    }

    /// The summary of `covered`: the model's, asked piece by piece, when the runtime has one
    /// (Spool's own if it fails, said in `by`); Spool's own otherwise.
    async fn summary(
        &self,
        runtime: &dyn Runtime,
        request: &Request,
        covered: &[Message],
        limit: u64,
        focus: &str,
    ) -> (String, String, Option<runtime::Usage>) {
        let own = || budget::extract(covered, (limit / 8).max(64));
        if !runtime.summarizes() {
            return (own(), EXTRACT.to_owned(), None);
        }
        let mut instruction = budget::SUMMARIZE_INSTRUCTION.to_owned();
        if !focus.trim().is_empty() {
            instruction.push_str(&format!(
                "\n\nThe person asks the summary to keep in particular: {}",
                focus.trim()
            ));
        }
        let mut so_far: Option<String> = None;
        let mut usage: Option<runtime::Usage> = None;
        for piece in budget::pieces(covered, (limit / 2).max(64)) {
            let ask = Request {
                instruction: instruction.clone(),
                messages: vec![budget::summarize_message(so_far.as_deref(), piece)],
                tools: Vec::new(),
                ..request.clone()
            };
            let answer = tokio::time::timeout_at(self.deadline, runtime.respond(&ask, &mut Discard)).await;
            match answer {
                Ok(Ok(reply)) if !reply.text.trim().is_empty() => {
                    so_far = Some(reply.text.trim().to_owned());
                    if let Some(u) = reply.usage {
                        let total = usage.get_or_insert_with(runtime::Usage::default);
                        total.input_tokens += u.input_tokens;
                        total.cached_input_tokens += u.cached_input_tokens;
                        total.output_tokens += u.output_tokens;
                        total.model = u.model.or_else(|| total.model.take());
                    }
                }
                failed => {
                    let why = match failed {
                        Ok(Ok(_)) => "an empty answer".to_owned(),
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => "the turn's time ran out".to_owned(),
                    };
                    tracing::warn!(turn = %self.job.turn_id, error = %why, "the model could not summarise the history; Spool's own summary stands in");
                    return (own(), EXTRACT.to_owned(), usage);
                }
            }
        }
        let by = runtime.describe(request);
        (so_far.unwrap_or_else(own), by, usage)
    }
}

/// `by` of Spool's own summary.
const EXTRACT: &str = "extract";
