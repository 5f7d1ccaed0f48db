//! Resolving one command by its name, reading only what decides it.
//!
//! A chat's [`super::registry::Registry`] reads and parses every command it has, which a menu
//! needs; resolving what a person typed needs one. [`find`] looks the name up where commands
//! come from, highest precedence first (the working directory's file, the workspace's stored
//! command, the organization's global one, the built-in one) and parses only the first it
//! finds, so what it costs does not grow with the number of commands stored. Only a name that
//! is nowhere reads the other names ([`names`]), to say what the person probably meant.

use std::path::PathBuf;

use super::{
    CommandScope, CommandSource, Commands,
    markdown::SlashCommand,
    registry::{Entry, FileCommand, NamedFile, read_file_named},
};
use spool_log::error::Error;

/// The command `name` of a chat in `workspace` whose commands' working directory is `dir`:
/// its entry ([`find`]), or, when it is nowhere, every name there is ([`names`]).
pub async fn resolve(
    store: &dyn Commands,
    org: &str,
    workspace: Option<&str>,
    dir: Option<PathBuf>,
    name: &str,
) -> Result<Result<Entry, Vec<String>>, Error> {
    let named = match dir {
        Some(dir) => {
            let name = name.to_owned();
            tokio::task::spawn_blocking(move || read_file_named(&dir, &name))
                .await
                .map_err(|e| Error::unavailable("read the workspace's command files", e))?
        }
        None => NamedFile::default(),
    };
    match find(store, org, workspace, named.command, name).await? {
        Some(entry) => Ok(Ok(entry)),
        None => Ok(Err(names(store, org, workspace, named.names).await?)),
    }
}

/// The command `name` of a chat in `workspace` (or in none), with `file` the working
/// directory's file of that name if there is one ([`super::registry::read_file_named`]):
/// its entry as [`super::registry::Registry::get`] would answer it, but without `overrides`.
pub async fn find(
    store: &dyn Commands,
    org: &str,
    workspace: Option<&str>,
    file: Option<FileCommand>,
    name: &str,
) -> Result<Option<Entry>, Error> {
    let entry = |source, file, parsed: Result<SlashCommand, String>| {
        let (command, error) = match parsed {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        Entry {
            name: name.to_owned(),
            source,
            file,
            command,
            error,
            overrides: None,
        }
    };
    if let Some(f) = file {
        return Ok(Some(entry(CommandSource::Workspace, Some(f.file), f.command)));
    }
    let scopes = workspace
        .map(|ws| (CommandScope::Workspace(ws.to_owned()), CommandSource::Workspace))
        .into_iter()
        .chain([(CommandScope::Global, CommandSource::Global)]);
    for (scope, source) in scopes {
        if let Some(stored) = store.command(org, &scope, name).await? {
            let parsed = SlashCommand::parse(&stored.name, &stored.markdown).map_err(|e| e.to_string());
            return Ok(Some(entry(source, None, parsed)));
        }
    }
    Ok(super::registry::builtin()
        .iter()
        .find(|c| c.name == name)
        .map(|c| entry(CommandSource::Builtin, None, Ok(c.clone()))))
}

/// Every command name a chat in `workspace` has: the built-in ones, the organization's and the
/// workspace's stored ones, and `files` (the working directory's).
pub async fn names(
    store: &dyn Commands,
    org: &str,
    workspace: Option<&str>,
    files: Vec<String>,
) -> Result<Vec<String>, Error> {
    let mut all: Vec<String> = super::registry::builtin().iter().map(|c| c.name.clone()).collect();
    all.extend(store.command_names(org, &CommandScope::Global).await?);
    if let Some(ws) = workspace {
        all.extend(
            store
                .command_names(org, &CommandScope::Workspace(ws.to_owned()))
                .await?,
        );
    }
    all.extend(files);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    };

    use async_trait::async_trait;

    use super::*;
    use crate::{StoredCommand, registry::closest};

    /// A store of commands that counts what is read from it.
    #[derive(Default)]
    struct Counting {
        stored: Mutex<Vec<(String, StoredCommand)>>,
        /// Commands read with their files (one by one, or whole scopes).
        files_read: AtomicUsize,
        /// Whole scopes listed.
        listings: AtomicUsize,
    }

    impl Counting {
        fn in_scope(&self, scope: &CommandScope) -> Vec<StoredCommand> {
            let stored = self.stored.lock().unwrap();
            stored
                .iter()
                .filter(|(key, _)| *key == scope.key())
                .map(|(_, c)| c.clone())
                .collect()
        }
    }

    #[async_trait]
    impl Commands for Counting {
        async fn put_command(&self, _: &str, scope: &CommandScope, command: &StoredCommand) -> Result<(), Error> {
            self.stored.lock().unwrap().push((scope.key(), command.clone()));
            Ok(())
        }

        async fn command(&self, _: &str, scope: &CommandScope, name: &str) -> Result<Option<StoredCommand>, Error> {
            let found = self.in_scope(scope).into_iter().find(|c| c.name == name);
            self.files_read
                .fetch_add(usize::from(found.is_some()), Ordering::SeqCst);
            Ok(found)
        }

        async fn command_names(&self, _: &str, scope: &CommandScope) -> Result<Vec<String>, Error> {
            self.listings.fetch_add(1, Ordering::SeqCst);
            Ok(self.in_scope(scope).into_iter().map(|c| c.name).collect())
        }

        async fn commands(&self, _: &str, scope: &CommandScope) -> Result<Vec<StoredCommand>, Error> {
            let all = self.in_scope(scope);
            self.listings.fetch_add(1, Ordering::SeqCst);
            self.files_read.fetch_add(all.len(), Ordering::SeqCst);
            Ok(all)
        }

        async fn delete_command(&self, _: &str, _: &CommandScope, _: &str) -> Result<bool, Error> {
            Ok(false)
        }
    }

    fn command(name: &str, body: &str) -> StoredCommand {
        StoredCommand {
            name: name.to_owned(),
            markdown: format!("---\ndescription: {name}\n---\n{body}"),
            updated_ms: 0,
        }
    }

    #[tokio::test]
    async fn resolving_a_name_reads_only_the_command_that_decides_it() {
        // GIVEN 250 large commands in a workspace and 250 in the organization
        let store = Counting::default();
        let ws = CommandScope::Workspace("ws".to_owned());
        let big = "x".repeat(60_000);
        for i in 0..250 {
            store
                .put_command("o", &ws, &command(&format!("ws-{i}"), &big))
                .await
                .unwrap();
            store
                .put_command("o", &CommandScope::Global, &command(&format!("org-{i}"), &big))
                .await
                .unwrap();
        }
        store
            .put_command("o", &CommandScope::Global, &command("help", "Global help"))
            .await
            .unwrap();

        // WHEN a workspace command, a global one, one that hides a built-in and a built-in are
        // resolved
        let found = find(&store, "o", Some("ws"), None, "ws-7").await.unwrap().unwrap();
        let global = find(&store, "o", Some("ws"), None, "org-9").await.unwrap().unwrap();
        let help = find(&store, "o", Some("ws"), None, "help").await.unwrap().unwrap();
        let new = find(&store, "o", Some("ws"), None, "new").await.unwrap().unwrap();

        // THEN each is the right one, from the right place
        assert_eq!(
            (found.source, found.command.unwrap().description.as_deref()),
            (CommandSource::Workspace, Some("ws-7"))
        );
        assert_eq!(global.source, CommandSource::Global);
        assert_eq!(help.command.unwrap().body, "Global help");
        assert_eq!(new.source, CommandSource::Builtin);
        // AND each read at most one command's file, and nothing listed a scope
        assert_eq!(store.files_read.load(Ordering::SeqCst), 3);
        assert_eq!(store.listings.load(Ordering::SeqCst), 0);

        // WHEN a name that is nowhere is resolved
        let missing = find(&store, "o", Some("ws"), None, "ws-7x").await.unwrap();
        let all = names(&store, "o", Some("ws"), Vec::new()).await.unwrap();
        // THEN it is not found, and what was meant comes from names alone, no file read
        assert!(missing.is_none());
        assert_eq!(closest(all.iter().map(String::as_str), "ws-7x")[0], "ws-7");
        assert_eq!(store.files_read.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_working_directory_file_decides_before_the_store_is_read() {
        // GIVEN a stored command and a file of the same name
        let store = Counting::default();
        store
            .put_command("o", &CommandScope::Global, &command("review", "Stored"))
            .await
            .unwrap();
        let file = FileCommand {
            name: "review".to_owned(),
            file: ".claude/commands/review.md".to_owned(),
            command: Err("broken".to_owned()),
        };
        // WHEN it is resolved
        let entry = find(&store, "o", Some("ws"), Some(file), "review")
            .await
            .unwrap()
            .unwrap();
        // THEN the file decides (broken, as it is), and the store is not read
        assert_eq!(entry.error.as_deref(), Some("broken"));
        assert_eq!(entry.file.as_deref(), Some(".claude/commands/review.md"));
        assert_eq!(store.files_read.load(Ordering::SeqCst), 0);
    }
}
