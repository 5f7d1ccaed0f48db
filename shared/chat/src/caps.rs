//! # Caps: how much one workspace, chat or organization may hold
//!
//! Every kind of record a client can make without bound is capped, because somewhere it is
//! read whole: a list answered in one response, a registry parsed for a menu, a context built
//! for every turn. Each cap below says what it protects. A create that would pass a cap is
//! refused with [`Error::CapReached`] (`409 limit_reached` at the edge) and changes nothing.
//!
//! The caps are enforced by the metadata store, inside the operation that writes the record,
//! so they hold under any concurrency (40 creates at once never leave more than the cap): the
//! embedded store counts and inserts in one write transaction; the AWS store keeps a counter
//! item per capped scope and changes it in the same transaction as the record, on the
//! condition that it is under the cap (see `docs/ARCHITECTURE.md`, "The metadata store"). A
//! store is given its [`Caps`] when it is made; deployments use [`Caps::default`], tests
//! smaller ones.

use spool_log::error::{Cap, Error};

/// Webhook endpoints of one workspace: every feed event the workspace has is offered to each
/// of them, and each delivery is a job with its retries, so the fan-out stays small.
pub const MAX_HOOKS_PER_WORKSPACE: u64 = 20;
/// MCP servers of one workspace: every turn of its agents connects to each enabled one and lists
/// its tools, and the list is answered whole.
pub const MAX_MCP_SERVERS_PER_WORKSPACE: u64 = 20;
/// Agents of one workspace (its built-in agent included): every step of every turn puts each
/// of them in the agents' context, and the list is answered whole.
pub const MAX_AGENTS_PER_WORKSPACE: u64 = 100;
/// Tasks of one workspace: the task list is answered whole, without pages.
pub const MAX_TASKS_PER_WORKSPACE: u64 = 10_000;
/// Files of one chat (uploads not yet completed included): the list is answered whole, and a
/// CLI's turn copies the chat's current files into its folder.
pub const MAX_ATTACHMENTS_PER_CHAT: u64 = 1_000;
/// Slash commands stored in one scope (the organization's global ones, or one workspace's):
/// a chat's menu and `/help` read and parse every one of them.
pub const MAX_COMMANDS_PER_SCOPE: u64 = 200;
/// The bytes of a scope's stored commands (their markdown files): what a menu reads at once.
pub const MAX_COMMAND_BYTES_PER_SCOPE: u64 = 2 * 1024 * 1024;
/// Slash commands stored in one organization, in all its scopes: what workspaces without
/// number could otherwise store.
pub const MAX_COMMANDS_PER_ORG: u64 = 2_000;
/// The bytes of an organization's stored commands, in all its scopes.
pub const MAX_COMMAND_BYTES_PER_ORG: u64 = 20 * 1024 * 1024;
/// Durable Streams subscriptions of one organization: every append to one of its streams is
/// matched against all of them (a list each process keeps and reads again every second).
pub const MAX_SUBSCRIPTIONS_PER_ORG: u64 = 1_000;

/// What one store holds at most; [`Caps::default`] is the constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// [`MAX_HOOKS_PER_WORKSPACE`].
    pub hooks_per_workspace: u64,
    /// [`MAX_MCP_SERVERS_PER_WORKSPACE`].
    pub mcp_servers_per_workspace: u64,
    /// [`MAX_AGENTS_PER_WORKSPACE`].
    pub agents_per_workspace: u64,
    /// [`MAX_TASKS_PER_WORKSPACE`].
    pub tasks_per_workspace: u64,
    /// [`MAX_ATTACHMENTS_PER_CHAT`].
    pub attachments_per_chat: u64,
    /// [`MAX_COMMANDS_PER_SCOPE`].
    pub commands_per_scope: u64,
    /// [`MAX_COMMAND_BYTES_PER_SCOPE`].
    pub command_bytes_per_scope: u64,
    /// [`MAX_COMMANDS_PER_ORG`].
    pub commands_per_org: u64,
    /// [`MAX_COMMAND_BYTES_PER_ORG`].
    pub command_bytes_per_org: u64,
    /// [`MAX_SUBSCRIPTIONS_PER_ORG`].
    pub subscriptions_per_org: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            hooks_per_workspace: MAX_HOOKS_PER_WORKSPACE,
            mcp_servers_per_workspace: MAX_MCP_SERVERS_PER_WORKSPACE,
            agents_per_workspace: MAX_AGENTS_PER_WORKSPACE,
            tasks_per_workspace: MAX_TASKS_PER_WORKSPACE,
            attachments_per_chat: MAX_ATTACHMENTS_PER_CHAT,
            commands_per_scope: MAX_COMMANDS_PER_SCOPE,
            command_bytes_per_scope: MAX_COMMAND_BYTES_PER_SCOPE,
            commands_per_org: MAX_COMMANDS_PER_ORG,
            command_bytes_per_org: MAX_COMMAND_BYTES_PER_ORG,
            subscriptions_per_org: MAX_SUBSCRIPTIONS_PER_ORG,
        }
    }
}

/// Which cap a create reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    /// A workspace's webhook endpoints.
    Hooks,
    /// A workspace's MCP servers.
    McpServers,
    /// A workspace's agents.
    Agents,
    /// A workspace's tasks.
    Tasks,
    /// A chat's files.
    Attachments,
    /// The commands of one scope.
    Commands,
    /// The bytes of one scope's commands.
    CommandBytes,
    /// The commands of an organization.
    OrgCommands,
    /// The bytes of an organization's commands.
    OrgCommandBytes,
    /// An organization's subscriptions.
    Subscriptions,
}

impl Capped {
    /// Every cap.
    pub const ALL: [Capped; 10] = [
        Self::Hooks,
        Self::McpServers,
        Self::Agents,
        Self::Tasks,
        Self::Attachments,
        Self::Commands,
        Self::CommandBytes,
        Self::OrgCommands,
        Self::OrgCommandBytes,
        Self::Subscriptions,
    ];

    /// [`Error::CapReached`] for this cap at `max`.
    pub fn error(self, max: u64) -> Error {
        Error::CapReached {
            capped: self.cap(),
            max,
        }
    }

    /// The cap as the log's error carries it: what the person is told, the cap, and what to do.
    pub fn cap(self) -> Cap {
        Cap::new(match self {
            Self::Hooks => "a workspace has at most {max} webhooks; delete one first",
            Self::McpServers => "a workspace has at most {max} MCP servers; delete one first",
            Self::Agents => "a workspace has at most {max} agents; delete one first",
            Self::Tasks => "a workspace has at most {max} tasks; delete some first",
            Self::Attachments => "a chat has at most {max} files; start another chat for more",
            Self::Commands => {
                "at most {max} slash commands are stored here (the organization's global ones, or one \
                 workspace's); delete one first"
            }
            Self::CommandBytes => {
                "the slash commands stored here (the organization's global ones, or one workspace's) may \
                 take at most {max} bytes in all; delete or shorten some first"
            }
            Self::OrgCommands => "an organization stores at most {max} slash commands in all; delete some first",
            Self::OrgCommandBytes => {
                "an organization's stored slash commands may take at most {max} bytes in all; delete or \
                 shorten some first"
            }
            Self::Subscriptions => "an organization has at most {max} subscriptions; delete one first",
        })
    }

    /// Which cap `error` reached, if it is one of these.
    pub fn reached(error: &Error) -> Option<Self> {
        match error {
            Error::CapReached { capped, .. } => Self::ALL.into_iter().find(|c| c.cap() == *capped),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reached_cap_says_how_many_and_what_to_do() {
        // GIVEN each cap reached
        for capped in Capped::ALL {
            // WHEN it is told
            let told = capped.error(7).to_string();
            // THEN it names the number and a way out, and is the caller's doing
            assert!(
                told.contains('7') && (told.contains("first") || told.contains("another")),
                "{told}"
            );
            assert!(capped.error(7).is_client_error());
            // AND it is read back from the error
            assert_eq!(Capped::reached(&capped.error(7)), Some(capped));
        }
    }

    #[test]
    fn a_reached_cap_is_told_word_for_word() {
        // GIVEN caps told from a template, WHEN one is reached, THEN the number is in its place
        assert_eq!(
            Capped::Hooks.error(20).to_string(),
            "a workspace has at most 20 webhooks; delete one first"
        );
        assert_eq!(
            Capped::Commands.error(200).to_string(),
            "at most 200 slash commands are stored here (the organization's global ones, or one workspace's); \
             delete one first"
        );
        assert_eq!(Capped::reached(&Error::EmptyAppend), None);
    }
}
