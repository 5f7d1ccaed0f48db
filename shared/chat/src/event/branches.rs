//! A chat's branches: new versions of a person's message (an edit, a regenerate), and going
//! back to an earlier one. The chat keeps every event; each of these events says which earlier
//! events its chat's *active branch* leaves out from then on ([`crate::branch`] reads them).

use serde::{Deserialize, Serialize};

/// How a message's new version came to be.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevisionKind {
    /// The person changed the text (`POST …/messages/{seq}/edit`).
    Edit,
    /// The same text, answered again (`POST …/regenerate`).
    Regenerate,
}

/// What makes a person's message a new version of an earlier one: the active branch leaves out
/// `hidden`, and every event from `from_seq` up to this message.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// The `seq` of the message this is a new version of.
    pub of: u64,
    /// An edit or a regenerate.
    pub kind: RevisionKind,
    /// Where the branch it replaces begins: `of`, or the slash command's event just before it.
    pub from_seq: u64,
    /// The ranges (`[from, through]` seqs) the active branch left out already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Vec<u64>>))]
    pub hidden: Vec<[u64; 2]>,
}

/// `branch_selected`: an earlier version of a message is on the active branch again, with what
/// followed it; the active branch leaves out `hidden`, and every event from `from_seq` up to
/// this one (what was appended since that version was left).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchSelected {
    /// The `seq` of the message version now on the active branch.
    pub seq: u64,
    /// Who chose it (the token's subject).
    pub author: String,
    /// The first event it leaves out, up to itself.
    pub from_seq: u64,
    /// The ranges (`[from, through]` seqs) it leaves out besides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Vec<u64>>))]
    pub hidden: Vec<[u64; 2]>,
}
