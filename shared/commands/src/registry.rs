//! The commands a chat sees: built-in, then the organization's global ones, then the
//! workspace's stored ones, then the files in its working directory, each winning over the
//! ones before it on a name. A file that does not parse is listed with its error (and cannot
//! be run), never dropped silently.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::{
    CommandKind, CommandSource, StoredCommand,
    markdown::{MAX_COMMAND_BYTES, SlashCommand},
};

/// The built-in commands' files, by name.
const BUILTIN: [(&str, &str); 9] = [
    ("new", include_str!("builtin/new.md")),
    ("stop", include_str!("builtin/stop.md")),
    ("model", include_str!("builtin/model.md")),
    ("mode", include_str!("builtin/mode.md")),
    ("rename", include_str!("builtin/rename.md")),
    ("clear", include_str!("builtin/clear.md")),
    ("compact", include_str!("builtin/compact.md")),
    ("help", include_str!("builtin/help.md")),
    ("summarize", include_str!("builtin/summarize.md")),
];

/// The folders of a working directory whose markdown files are commands.
pub const COMMAND_FOLDERS: [&str; 2] = [".claude/commands", ".agents/commands"];

/// At most this many command files are read from a working directory.
const MAX_FILES: usize = 500;

/// One command of a chat, as the menu lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Where it comes from.
    pub source: CommandSource,
    /// The file it was read from, relative to the working directory (files only).
    pub file: Option<String>,
    /// The command; `None` when its file does not parse.
    pub command: Option<SlashCommand>,
    /// Why its file does not parse.
    pub error: Option<String>,
    /// The source of the command of the same name it hides, if any.
    pub overrides: Option<CommandSource>,
}

impl Entry {
    /// Whether it runs an action or prompts; `None` when it does not parse.
    pub fn kind(&self) -> Option<CommandKind> {
        self.command.as_ref().map(SlashCommand::kind)
    }
}

/// A chat's commands by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

/// The built-in commands, parsed once per process.
pub fn builtin() -> &'static [SlashCommand] {
    static PARSED: std::sync::LazyLock<Vec<SlashCommand>> = std::sync::LazyLock::new(|| {
        BUILTIN
            .iter()
            .map(|(name, md)| SlashCommand::parse(name, md).expect("the built-in commands parse (a unit test checks)"))
            .collect()
    });
    &PARSED
}

impl Registry {
    /// The registry of the built-in commands, `global` and `workspace` (stored) and `files`
    /// (read from the working directory), later ones winning.
    pub fn build(global: &[StoredCommand], workspace: &[StoredCommand], files: Vec<FileCommand>) -> Self {
        let mut registry = Self::default();
        for command in builtin() {
            registry.add(command.name.clone(), CommandSource::Builtin, None, Ok(command.clone()));
        }
        for (source, stored) in [(CommandSource::Global, global), (CommandSource::Workspace, workspace)] {
            for s in stored {
                let parsed = SlashCommand::parse(&s.name, &s.markdown).map_err(|e| e.to_string());
                registry.add(s.name.clone(), source, None, parsed);
            }
        }
        for f in files {
            registry.add(f.name, CommandSource::Workspace, Some(f.file), f.command);
        }
        registry
    }

    fn add(&mut self, name: String, source: CommandSource, file: Option<String>, parsed: Result<SlashCommand, String>) {
        let overrides = self.entries.get(&name).map(|e| e.source);
        let (command, error) = match parsed {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        let entry = Entry {
            name: name.clone(),
            source,
            file,
            command,
            error,
            overrides,
        };
        self.entries.insert(name, entry);
    }

    /// Every command, by name.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// The command `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Up to three names close to `name` (sharing its start, or a few edits away), closest
    /// first: what a person probably meant.
    pub fn closest(&self, name: &str) -> Vec<String> {
        closest(self.entries.keys().map(String::as_str), name)
    }
}

/// Up to three of `names` close to `name` (sharing its start, or a few edits away), closest
/// first.
pub fn closest<'a>(names: impl IntoIterator<Item = &'a str>, name: &str) -> Vec<String> {
    // No command's name is longer; a long one is close to nothing (and costly to compare).
    if name.len() > 64 {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &str)> = names
        .into_iter()
        .map(|candidate| {
            let distance = if candidate.starts_with(name) || name.starts_with(candidate) {
                0
            } else {
                edit_distance(name, candidate)
            };
            (distance, candidate)
        })
        .filter(|(d, _)| *d <= 2.max(name.len() / 3))
        .collect();
    scored.sort_unstable();
    scored.dedup();
    scored.into_iter().take(3).map(|(_, n)| n.to_owned()).collect()
}

/// A command read from a file of a working directory.
#[derive(Debug, Clone)]
pub struct FileCommand {
    /// Its name, from its path (`git/commit.md` is `git:commit`).
    pub name: String,
    /// Its path relative to the working directory.
    pub file: String,
    /// The command, or why it does not parse.
    pub command: Result<SlashCommand, String>,
}

/// A command file found in a working directory, not read yet.
struct Listed {
    name: String,
    file: String,
    real: PathBuf,
}

impl Listed {
    fn read(self) -> FileCommand {
        let command = match std::fs::metadata(&self.real) {
            Ok(m) if m.len() > MAX_COMMAND_BYTES as u64 => Err(format!(
                "the file is {} bytes; a command may have at most {MAX_COMMAND_BYTES}",
                m.len()
            )),
            _ => std::fs::read_to_string(&self.real)
                .map_err(|e| format!("cannot read it: {e}"))
                .and_then(|md| SlashCommand::parse(&self.name, &md).map_err(|e| e.to_string())),
        };
        FileCommand {
            name: self.name,
            file: self.file,
            command,
        }
    }
}

/// The command files of the working directory `dir` (which must exist): the markdown files
/// under its [`COMMAND_FOLDERS`], at most two folders deep, never through a link that leads
/// out of `dir`.
pub fn read_files(dir: &Path) -> Vec<FileCommand> {
    list_files(dir).into_iter().map(Listed::read).collect()
}

/// The command files of `dir` that [`read_files`] would read, but only the one that decides
/// `name` is read and parsed (the last of that name, as later ones win).
#[derive(Debug, Clone, Default)]
pub struct NamedFile {
    /// The file that decides the name, read.
    pub command: Option<FileCommand>,
    /// The names of every command file (for what a person probably meant).
    pub names: Vec<String>,
}

/// [`NamedFile`] of `name` in the working directory `dir`.
pub fn read_file_named(dir: &Path, name: &str) -> NamedFile {
    let mut listed = list_files(dir);
    let names = listed.iter().map(|l| l.name.clone()).collect();
    let command = listed
        .iter()
        .rposition(|l| l.name == name)
        .map(|i| listed.swap_remove(i).read());
    NamedFile { command, names }
}

fn list_files(dir: &Path) -> Vec<Listed> {
    let Ok(root) = dir.canonicalize() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for folder in COMMAND_FOLDERS {
        // The folder as it really is (it may be a link within the directory), so the files
        // found under it are named relative to it.
        let Ok(base) = root.join(folder).canonicalize() else {
            continue;
        };
        if base.starts_with(&root) {
            walk(&root, &base, &base, 0, &mut found);
        }
    }
    found
}

fn walk(root: &Path, base: &Path, dir: &Path, depth: usize, found: &mut Vec<Listed>) {
    let Ok(canonical) = dir.canonicalize() else {
        return;
    };
    if !canonical.starts_with(root) {
        return;
    }
    let Ok(read) = std::fs::read_dir(&canonical) else {
        return;
    };
    let mut paths: Vec<PathBuf> = read.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if found.len() >= MAX_FILES {
            return;
        }
        let Ok(real) = path.canonicalize() else { continue };
        if !real.starts_with(root) {
            continue;
        }
        if real.is_dir() {
            if depth < 2 {
                walk(root, base, &path, depth + 1, found);
            }
            continue;
        }
        // Regular files only: a FIFO or a device would block the read.
        if path.extension().and_then(|e| e.to_str()) != Some("md") || !real.is_file() {
            continue;
        }
        let Ok(relative) = path.strip_prefix(base) else {
            continue;
        };
        let name = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(":");
        let file = path
            .strip_prefix(root)
            .unwrap_or(relative)
            .to_string_lossy()
            .into_owned();
        found.push(Listed { name, file, real });
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb)).min(row[j] + 1).min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CommandAction;

    fn stored(name: &str, md: &str) -> StoredCommand {
        StoredCommand {
            name: name.to_owned(),
            markdown: md.to_owned(),
            updated_ms: 0,
        }
    }

    #[test]
    fn the_built_in_commands_parse() {
        let names: Vec<&str> = builtin().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "new",
                "stop",
                "model",
                "mode",
                "rename",
                "clear",
                "compact",
                "help",
                "summarize"
            ]
        );
        let actions: Vec<_> = builtin().iter().filter_map(|c| c.action).collect();
        assert_eq!(actions.len(), CommandAction::ALL.len(), "every action has a command");
    }

    #[test]
    fn workspace_files_win_over_stored_over_global_over_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(".claude/commands/git");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("commit.md"), "Commit $1").unwrap();
        std::fs::write(dir.path().join(".claude/commands/review.md"), "From the file").unwrap();
        std::fs::write(dir.path().join(".claude/commands/broken.md"), "---\nno end").unwrap();
        std::fs::write(dir.path().join(".claude/commands/notes.txt"), "not a command").unwrap();
        // A FIFO never blocks the listing.
        let fifo = dir.path().join(".claude/commands/fifo.md");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        // A folder that is a link within the directory is read through it.
        std::fs::create_dir_all(dir.path().join("shared-commands")).unwrap();
        std::fs::write(dir.path().join("shared-commands/linked.md"), "Linked").unwrap();
        std::fs::create_dir_all(dir.path().join(".agents")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("shared-commands"), dir.path().join(".agents/commands")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("leak.md"), "secret").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("leak.md"),
            dir.path().join(".claude/commands/leak.md"),
        )
        .unwrap();
        let files = read_files(dir.path());
        let registry = Registry::build(
            &[stored("help", "Global help"), stored("review", "Global review")],
            &[
                stored("review", "Workspace review"),
                stored("deploy", "Deploy $ARGUMENTS"),
            ],
            files,
        );
        let help = registry.get("help").unwrap();
        assert_eq!(
            (help.source, help.overrides),
            (CommandSource::Global, Some(CommandSource::Builtin))
        );
        let review = registry.get("review").unwrap();
        assert_eq!(review.source, CommandSource::Workspace);
        assert_eq!(review.file.as_deref(), Some(".claude/commands/review.md"));
        assert_eq!(review.command.as_ref().unwrap().body, "From the file");
        assert_eq!(review.overrides, Some(CommandSource::Workspace));
        assert_eq!(
            registry.get("git:commit").unwrap().command.as_ref().unwrap().body,
            "Commit $1"
        );
        let broken = registry.get("broken").unwrap();
        assert!(broken.command.is_none() && broken.error.as_ref().unwrap().contains("never closed"));
        assert!(
            registry.get("leak").is_none(),
            "a link out of the directory is not followed"
        );
        assert!(registry.get("notes").is_none());
        assert!(registry.get("fifo").is_none(), "not a regular file");
        assert_eq!(registry.get("linked").unwrap().command.as_ref().unwrap().body, "Linked");
        assert!(registry.closest(&"x".repeat(20_000)).is_empty());
        assert_eq!(registry.get("new").unwrap().source, CommandSource::Builtin);
        assert_eq!(registry.closest("reveiw"), ["review"]);
        assert_eq!(registry.closest("sum")[0], "summarize");
        assert!(registry.closest("zzzzzzzz").is_empty());
    }
}
