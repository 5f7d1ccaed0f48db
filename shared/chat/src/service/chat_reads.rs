//! # What a chat holds, read: its turns and its files
//!
//! The lists a chat's routes show beside its events, read through the chat service so that a
//! handler finds the chat, asks here, and shapes the answer.

use super::ChatService;
use crate::{
    attachment::Attachment,
    listing::{Page, TurnQuery},
    session::TurnRecord,
};
use spool_log::error::Error;

impl ChatService {
    /// A page of the turns `query` selects, newest first (finished ones until they expire).
    pub async fn turns(&self, org: &str, query: &TurnQuery) -> Result<Page<TurnRecord>, Error> {
        self.metadata.turns(org, query).await
    }

    /// The chat `session_id`'s live turn `turn_id` ([`Error::Missing`] if it has none, or it
    /// expired).
    pub async fn turn(&self, org: &str, session_id: &str, turn_id: &str) -> Result<TurnRecord, Error> {
        let turns = self
            .metadata
            .turns(org, &TurnQuery::all(session_id, self.clock.now_ms()))
            .await?;
        turns
            .items
            .into_iter()
            .find(|t| t.turn_id == turn_id)
            .ok_or_else(|| Error::Missing {
                what: format!("turn `{turn_id}`"),
            })
    }

    /// The chat `session_id`'s files, oldest first.
    pub async fn attachments(&self, org: &str, session_id: &str) -> Result<Vec<Attachment>, Error> {
        self.metadata.attachments(org, session_id).await
    }
}
