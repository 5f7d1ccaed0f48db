//! # Retried commands
//!
//! A command invoked again with the same `client_message_id` runs once: its first
//! `slash_command_invoked` is found ([`ChatService::invoked_before`]), or the write of a
//! second one is recognised as a retry ([`ChatService::append_once`]), and a setting it made
//! is made again only if its first attempt did not get that far ([`ChatService::unsettled`]).

use super::ChatService;
use crate::{
    event::{ChatEvent, SlashCommandInvoked},
    session::{EventDraft, Session},
};
use spool_log::error::Error;

/// How many of a chat's last events a retried action is looked for in.
pub(super) const RETRY_WINDOW: u64 = 200;

/// How long after its invoked event a setting's first attempt is given to finish before a
/// retry changes the chat itself ([`ChatService::unsettled`]).
const RETRY_GRACE_MS: i64 = 2_000;

/// An invocation found by its `client_message_id`.
pub(super) struct Earlier {
    /// Its `slash_command_invoked` event's seq.
    pub(super) seq: u64,
    /// When that event was written (ms since the Unix epoch).
    pub(super) written_ms: i64,
    /// The event's payload.
    pub(super) invoked: SlashCommandInvoked,
}

impl ChatService {
    /// The `slash_command_invoked` of `client_message_id` among the chat's recent events, if
    /// any.
    pub(super) async fn invoked_before(
        &self,
        org: &str,
        session: &Session,
        client_message_id: &str,
    ) -> Result<Option<Earlier>, Error> {
        let path = Session::stream(org, &session.id)?;
        let tail = self.log.metadata(&path).await?.tail.seq();
        let page = crate::session::read_events(
            self.log.as_ref(),
            &path,
            tail.saturating_sub(RETRY_WINDOW),
            RETRY_WINDOW as usize,
        )
        .await?;
        Ok(page.events.into_iter().rev().find_map(|e| match e.event {
            ChatEvent::SlashCommandInvoked(invoked) if e.client_message_id.as_deref() == Some(client_message_id) => {
                Some(Earlier {
                    seq: e.seq,
                    written_ms: spool_log::clock::parse_rfc3339_ms(&e.ts).unwrap_or(0),
                    invoked,
                })
            }
            _ => None,
        }))
    }

    /// The chat a retry of a setting is to change, or `None` when there is nothing to do: the
    /// chat holds the setting already (`settled`), or changed after the invoked event was
    /// written (at `written_ms`: its first attempt did it, and maybe something since). Its
    /// first attempt may still be running (two requests at once): it gets until
    /// [`RETRY_GRACE_MS`] after the event was written to finish before the retry does its work,
    /// so a setting changes once, and still changes when the first attempt died part-way.
    pub(super) async fn unsettled(
        &self,
        org: &str,
        session_id: &str,
        written_ms: i64,
        settled: impl Fn(&Session) -> bool,
    ) -> Result<Option<Session>, Error> {
        let waited = (self.clock.now_ms() - written_ms).clamp(0, RETRY_GRACE_MS);
        let deadline = tokio::time::Instant::now()
            + std::time::Duration::from_millis(u64::try_from(RETRY_GRACE_MS - waited).unwrap_or(0));
        loop {
            let current = self
                .metadata
                .session(org, session_id)
                .await?
                .ok_or_else(|| Error::Missing {
                    what: format!("chat `{session_id}`"),
                })?;
            if settled(&current) || current.updated_ms >= written_ms {
                return Ok(None);
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::info!(session_id, "a retried setting finishes what its first attempt did not");
                return Ok(Some(current));
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Appends one event under the producer of `client_message_id`, if any: (its seq, whether
    /// it was a retry of an earlier write).
    pub(super) async fn append_once(
        &self,
        org: &str,
        session: &Session,
        draft: EventDraft,
        client_message_id: Option<&str>,
    ) -> Result<(u64, bool), Error> {
        let path = Session::stream(org, &session.id)?;
        let now = spool_log::clock::rfc3339_ms(self.clock.now_ms());
        let producer = client_message_id.map(|cmid| spool_log::stream::ProducerClaim {
            id: format!("msg:{cmid}"),
            epoch: 0,
            seq: 0,
        });
        let appended =
            crate::session::append_events(self.log.as_ref(), &path, &session.id, &[draft], producer, &now, None)
                .await?;
        if !appended.duplicate {
            self.seal_when_idle(org, session, appended.first).await;
        }
        Ok((appended.first, appended.duplicate))
    }
}
