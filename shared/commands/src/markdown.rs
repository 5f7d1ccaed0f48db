//! A command's markdown file: optional front matter between `---` lines, then the prompt
//! template. The front matter is flat `key: value` lines (values may be quoted); the keys
//! Spool reads are `description`, `argument-hint`, `model`, `action` and `pass-arguments`.
//! Other keys (Claude Code's `allowed-tools`, say, with its list items) are kept out of the
//! way, so one file serves both; a line that is neither is an error that names it.

use serde::Serialize;

use super::{CommandAction, CommandKind};
use spool_log::error::Error;

/// The largest command file Spool takes.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// A parsed command.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlashCommand {
    /// Its name (`review`, `git:commit`).
    pub name: String,
    /// What it does, for the menu.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What its arguments are, for the menu (`[FILE]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// The model its turn should use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The action it runs, if it is not a prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<CommandAction>,
    /// Whether the raw arguments go to the action.
    pub pass_arguments: bool,
    /// The prompt template.
    pub body: String,
}

impl SlashCommand {
    /// Parses the markdown file of the command `name`.
    pub fn parse(name: &str, markdown: &str) -> Result<Self, Error> {
        super::check_name(name)?;
        if markdown.len() > MAX_COMMAND_BYTES {
            return Err(Error::invalid(
                "command",
                format!(
                    "the file is {} bytes; a command may have at most {MAX_COMMAND_BYTES}",
                    markdown.len()
                ),
            ));
        }
        let text = markdown
            .strip_prefix('\u{feff}')
            .unwrap_or(markdown)
            .replace("\r\n", "\n");
        let (front, body) = split_front_matter(&text)?;
        let mut command = Self {
            name: name.to_owned(),
            description: None,
            argument_hint: None,
            model: None,
            action: None,
            pass_arguments: false,
            body: body.trim().to_owned(),
        };
        let mut current: Option<&str> = None;
        for (index, line) in front.lines().enumerate() {
            let number = index + 2;
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            if line.starts_with([' ', '\t']) || trimmed.starts_with("- ") || trimmed == "-" {
                // A list item or a continuation of the key before: only other tools' keys
                // have those.
                match current {
                    Some(key) if !is_spools(key) => continue,
                    Some(key) => {
                        return Err(Error::invalid(
                            "command",
                            format!("front matter line {number}: `{key}` takes one value on its own line"),
                        ));
                    }
                    None => {
                        return Err(Error::invalid(
                            "command",
                            format!("front matter line {number} is indented but follows no key"),
                        ));
                    }
                }
            }
            let Some((key, value)) = trimmed.split_once(':') else {
                return Err(Error::invalid(
                    "command",
                    format!("front matter line {number} is not `key: value`: `{trimmed}`"),
                ));
            };
            let key = key.trim();
            let value = unquote(value.trim());
            current = Some(key);
            let text = || (!value.is_empty()).then(|| value.to_owned());
            match key {
                "description" => command.description = text(),
                "argument-hint" => command.argument_hint = text(),
                "model" => {
                    command.model = text();
                    if let Some(model) = &command.model {
                        crate::model::check_model(model)?;
                    }
                }
                "action" => {
                    command.action = if value.is_empty() {
                        None
                    } else {
                        Some(CommandAction::parse(value)?)
                    }
                }
                "pass-arguments" => {
                    command.pass_arguments = match value {
                        "true" | "yes" => true,
                        "false" | "no" | "" => false,
                        other => {
                            return Err(Error::invalid(
                                "command",
                                format!("front matter line {number}: `pass-arguments` is true or false, not `{other}`"),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        if command.action.is_none() && command.body.is_empty() {
            return Err(Error::invalid(
                "command",
                "a command needs a prompt (the text after the front matter) or an `action`",
            ));
        }
        Ok(command)
    }

    /// Whether it runs an action or prompts the agent.
    pub fn kind(&self) -> CommandKind {
        if self.action.is_some() {
            CommandKind::Action
        } else {
            CommandKind::Prompt
        }
    }
}

fn is_spools(key: &str) -> bool {
    matches!(
        key,
        "description" | "argument-hint" | "model" | "action" | "pass-arguments"
    )
}

/// The front matter (without its `---` lines) and the body.
fn split_front_matter(text: &str) -> Result<(&str, &str), Error> {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| (text == "---").then_some("")) else {
        return Ok(("", text));
    };
    if let Some(body) = rest.strip_prefix("---\n").or_else(|| (rest == "---").then_some("")) {
        return Ok(("", body));
    }
    match rest.find("\n---\n") {
        Some(end) => Ok((&rest[..end], &rest[end + 5..])),
        None => match rest.strip_suffix("\n---") {
            Some(front) => Ok((front, "")),
            None => Err(Error::invalid(
                "command",
                "the front matter opened by `---` on the first line is never closed by a `---` line",
            )),
        },
    }
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return &value[1..value.len() - 1];
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_describes_and_the_body_is_the_template() {
        let c = SlashCommand::parse(
            "git:commit",
            "---\ndescription: Commit the staged changes\nargument-hint: \"[MESSAGE]\"\nallowed-tools:\n  - Bash(git add:*)\n  - Bash(git commit:*)\nmodel: 'small'\n---\nCommit with message $1.\n",
        )
        .unwrap();
        assert_eq!(c.description.as_deref(), Some("Commit the staged changes"));
        assert_eq!(c.argument_hint.as_deref(), Some("[MESSAGE]"));
        assert_eq!(c.model.as_deref(), Some("small"));
        let flag = SlashCommand::parse("m", "---\nmodel: --yolo\n---\nHi.\n");
        assert!(matches!(flag, Err(Error::Invalid { what: "model", .. })), "{flag:?}");
        assert_eq!(c.body, "Commit with message $1.");
        assert_eq!(c.kind(), CommandKind::Prompt);
        let plain = SlashCommand::parse("review", "Review $ARGUMENTS").unwrap();
        assert_eq!(plain.body, "Review $ARGUMENTS");
        assert_eq!(plain.description, None);
        let action = SlashCommand::parse("m", "---\naction: set_model\npass-arguments: true\n---\n").unwrap();
        assert_eq!(action.action, Some(CommandAction::SetModel));
        assert!(action.pass_arguments);
        assert_eq!(action.kind(), CommandKind::Action);
    }

    #[test]
    fn bad_files_and_names_are_refused_with_the_reason() {
        let reason = |name: &str, md: &str| SlashCommand::parse(name, md).unwrap_err().to_string();
        assert!(reason("x", "---\ndescription: a\n").contains("never closed"));
        assert!(reason("x", "---\nthis is not a pair\n---\nbody").contains("line 2"));
        assert!(reason("x", "---\naction: launch_rockets\n---\n").contains("new_session"));
        assert!(reason("x", "---\npass-arguments: maybe\n---\nbody").contains("true or false"));
        assert!(reason("x", "---\ndescription: only\n---\n").contains("needs a prompt"));
        assert!(reason("x", "---\ndescription:\n  - a list\n---\nbody").contains("own line"));
        for bad in ["", "-x", "a b", "a/b", "a:b:c:d", "é", ":x", "x:"] {
            assert!(reason(bad, "body").contains("not a command name"), "{bad}");
        }
        assert!(SlashCommand::parse("a:b-c:d_1", "body").is_ok());
    }
}
