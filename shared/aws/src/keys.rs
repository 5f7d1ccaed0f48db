//! # How the metadata table's items are keyed
//!
//! Every partition key of the metadata table, and the keys of its indexes, in one place: the
//! modules that store the items ([`crate::directory`], [`crate::workspaces`],
//! [`crate::commands`], [`crate::sessions`], [`crate::attachments`], [`crate::subscriptions`],
//! [`crate::webhooks`], [`crate::runners`], [`crate::usage`]) and the counters that hold the caps ([`crate::caps`]) build their keys
//! here, and their tables say what each item holds under which `sk`. Every key of an
//! organization's records starts with `o#{org}`, so a request can only ever address its own
//! organization's records. (The streams table's keys are in [`crate::items`].)

use spool_commands::CommandScope;

/// An organization's partition: the organization, its workspaces, its counters of every
/// command and of its subscriptions.
pub(crate) fn org_pk(org: &str) -> String {
    format!("o#{org}")
}

/// An API key's own partition, found by the id the key carries.
pub(crate) fn key_pk(key_id: &str) -> String {
    format!("key#{key_id}")
}

/// An organization's keys in the `by_owner` index (`gsi2pk`).
pub(crate) fn owner_keys_pk(org: &str) -> String {
    format!("o#{org}#keys")
}

/// A shared workspace root's claim, keyed by a hash of its path: a path may be longer than a
/// key may be.
pub(crate) fn root_pk(root: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(root.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("root#{hex}")
}

/// A workspace's partition: its agents, tasks, commands and counters.
pub(crate) fn ws_pk(org: &str, ws: &str) -> String {
    format!("o#{org}#ws#{ws}")
}

/// An agent's pointer to its workspace, so an agent is found by its id alone.
pub(crate) fn agent_pointer_pk(org: &str, id: &str) -> String {
    format!("o#{org}#agent#{id}")
}

/// An MCP server's pointer to its workspace, so a server is found by its id alone.
pub(crate) fn mcp_pointer_pk(org: &str, id: &str) -> String {
    format!("o#{org}#mcp#{id}")
}

/// A task's pointer to its workspace.
pub(crate) fn task_pointer_pk(org: &str, id: &str) -> String {
    format!("o#{org}#task#{id}")
}

/// The partition of a scope's slash commands: the organization's global commands', or the
/// workspace's own.
pub(crate) fn commands_pk(org: &str, scope: &CommandScope) -> String {
    match scope {
        CommandScope::Global => format!("o#{org}#cmds"),
        CommandScope::Workspace(ws) => ws_pk(org, ws),
    }
}

/// A session's partition: the session, its open requests, its files and their counter.
pub(crate) fn session_pk(org: &str, id: &str) -> String {
    format!("o#{org}#ses#{id}")
}

/// A workspace's chats (none: the chats in no workspace) in the `by_activity` index
/// (`gsi1pk`).
pub(crate) fn chats_key(org: &str, workspace_id: Option<&str>) -> String {
    format!("o#{org}#chats#{}", workspace_id.unwrap_or("-"))
}

/// A chat's place in the `by_activity` index (`gsi1sk`): by its last activity, then its id.
pub(crate) fn activity_key(at_ms: i64, id: &str) -> String {
    format!("{at_ms:015}#{id}")
}

/// An organization's subscriptions.
pub(crate) fn subscriptions_pk(org: &str) -> String {
    format!("o#{org}#subs")
}

/// An organization's webhook endpoints.
pub(crate) fn hooks_pk(org: &str) -> String {
    format!("o#{org}#hooks")
}

/// An organization's runner jobs, one per turn (`sk`: the turn id).
pub(crate) fn runner_jobs_pk(org: &str) -> String {
    format!("o#{org}#rjobs")
}

/// An organization's runners, one per name (`sk`: the runner's name).
pub(crate) fn runners_pk(org: &str) -> String {
    format!("o#{org}#runners")
}

/// One webhook endpoint's deliveries.
pub(crate) fn deliveries_pk(org: &str, hook_id: &str) -> String {
    format!("o#{org}#hook#{hook_id}")
}

/// A chat's usage: its ledger entries and totals ([`crate::usage`]), apart from the chat's
/// own partition so they outlive it.
pub(crate) fn usage_chat_pk(org: &str, chat_id: &str) -> String {
    format!("o#{org}#usage#ses#{chat_id}")
}

/// A workspace's usage totals by day and month ([`crate::usage`]).
pub(crate) fn usage_ws_pk(org: &str, ws: &str) -> String {
    format!("o#{org}#usage#ws#{ws}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys are stored data: a change here orphans every item written before it.
    #[test]
    fn keys_keep_their_shapes() {
        assert_eq!(org_pk("o1"), "o#o1");
        assert_eq!(key_pk("k1"), "key#k1");
        assert_eq!(owner_keys_pk("o1"), "o#o1#keys");
        assert_eq!(
            root_pk("/srv"),
            "root#a3d9ac4fdee9c2424e2fe95742f45f7d5134426aee734e778201f5db161741cc"
        );
        assert_eq!(ws_pk("o1", "w1"), "o#o1#ws#w1");
        assert_eq!(agent_pointer_pk("o1", "ag_1"), "o#o1#agent#ag_1");
        assert_eq!(task_pointer_pk("o1", "t1"), "o#o1#task#t1");
        assert_eq!(commands_pk("o1", &CommandScope::Global), "o#o1#cmds");
        assert_eq!(
            commands_pk("o1", &CommandScope::Workspace("w1".to_owned())),
            ws_pk("o1", "w1")
        );
        assert_eq!(session_pk("o1", "s1"), "o#o1#ses#s1");
        assert_eq!(chats_key("o1", Some("w1")), "o#o1#chats#w1");
        assert_eq!(chats_key("o1", None), "o#o1#chats#-");
        assert_eq!(activity_key(42, "s1"), "000000000000042#s1");
        assert_eq!(subscriptions_pk("o1"), "o#o1#subs");
        assert_eq!(hooks_pk("o1"), "o#o1#hooks");
        assert_eq!(deliveries_pk("o1", "h1"), "o#o1#hook#h1");
        assert_eq!(runner_jobs_pk("o1"), "o#o1#rjobs");
        assert_eq!(runners_pk("o1"), "o#o1#runners");
        assert_eq!(usage_chat_pk("o1", "s1"), "o#o1#usage#ses#s1");
        assert_eq!(usage_ws_pk("o1", "w1"), "o#o1#usage#ws#w1");
    }
}
