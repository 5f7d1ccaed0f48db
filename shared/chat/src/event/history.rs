//! What an agent remembers of a long chat: a summary standing in for its older part.

use serde::{Deserialize, Serialize};

/// The oldest part of a chat's history, summarised once: from here on, what an agent sees is
/// this summary in place of the events `from_seq..=through_seq`, then everything after them.
/// Nothing is deleted: the events stay in the chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryCompacted {
    /// The first event the summary covers.
    pub from_seq: u64,
    /// The last event it covers.
    pub through_seq: u64,
    /// The summary (it includes what an earlier summary said).
    pub summary: String,
    /// Who wrote it: the model's runtime (`openai:gpt-4o-mini`), or `extract` for Spool's own
    /// summary of the messages' first lines (runtimes without a model to ask).
    pub by: String,
    /// About how many tokens the covered history held, and the summary holds.
    pub tokens_before: u64,
    /// About how many tokens the summary holds.
    pub tokens_after: u64,
    /// Why: `budget` (the history outgrew the agent's context budget) or `command` (`/compact`).
    pub reason: CompactReason,
}

/// Why a chat's history was compacted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactReason {
    /// The history outgrew the agent's context budget.
    Budget,
    /// A person asked (`/compact`).
    Command,
}
