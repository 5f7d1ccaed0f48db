//! # Model names
//!
//! One rule for a model's name, wherever one comes from: an agent's, a chat's `/model`, a
//! command's `model` front matter.

use spool_log::error::Error;

/// The longest model name.
pub const MAX_MODEL_CHARS: usize = 200;

/// A model name, wherever one comes from (an agent's, a chat's `/model`, a command's `model`):
/// 1 to [`MAX_MODEL_CHARS`] ASCII letters, digits and `. _ - : / @ +`, starting with a letter or
/// a digit (`claude-sonnet-4-5`, `gemini-2.5-pro`, `anthropic/claude-sonnet-4-5`,
/// `llama3:8b`). So a name is always one argument of a CLI's command line, never a flag of its
/// own.
pub fn check_model(name: &str) -> Result<(), Error> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@' | '+');
    if name.is_empty()
        || name.len() > MAX_MODEL_CHARS
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.chars().all(allowed)
    {
        return Err(Error::invalid(
            "model",
            format!(
                "a model name is 1 to {MAX_MODEL_CHARS} letters, digits and `. _ - : / @ +`, starting with a letter or digit, as in `claude-sonnet-4-5` or `anthropic/claude-sonnet-4-5`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_name_is_one_argument_never_a_flag() {
        for good in [
            "claude-sonnet-4-5",
            "sonnet",
            "gemini-2.5-pro",
            "gpt-5-codex",
            "anthropic/claude-sonnet-4-5",
            "llama3:8b",
            "claude-3@20240620",
            "us.anthropic.claude-3-5-sonnet-20241022-v2:0",
        ] {
            assert!(check_model(good).is_ok(), "{good}");
        }
        let long = "m".repeat(MAX_MODEL_CHARS + 1);
        for bad in [
            "",
            "-m",
            "--dangerously-skip-permissions",
            "+x",
            "a b",
            "a\nb",
            "a;rm",
            "a=b",
            "$(id)",
            "modèle",
            long.as_str(),
        ] {
            assert!(
                matches!(check_model(bad), Err(Error::Invalid { what: "model", .. })),
                "{bad:?}"
            );
        }
    }
}
