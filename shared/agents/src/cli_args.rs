//! # A CLI's command line
//!
//! How each CLI is run for one reply ([`arguments`]): the same shape for every turn, checked
//! against the real CLIs by `make cli-check`, and a model passed in each CLI's own flag.

use spool_chat::workspace::CliType;

/// The CLI's program name.
pub fn program(cli: CliType) -> &'static str {
    match cli {
        CliType::Claude => "claude",
        CliType::Gemini => "gemini",
        CliType::Codex => "codex",
        CliType::Opencode => "opencode",
    }
}

/// The arguments that run `cli` once, non-interactively, on `prompt`, allowed to edit files in
/// the folder it runs in (which Spool confines) without asking, with `model` when the chat, its
/// command or its agent names one. `make cli-check` runs exactly these against the real CLIs
/// from npm: each must be accepted (failing, there, only for want of credentials), so a CLI
/// release that renames a flag is caught before a turn meets it.
///
/// - claude: print mode, edits accepted;
/// - gemini: headless, every tool accepted, and the folder trusted for this run (an untrusted
///   folder turns `--yolo` back into asking, which headless means refusing);
/// - codex: `exec` with the workspace-write sandbox (its `--full-auto` is gone since 0.1xx),
///   outside a git repository when the folder is a chat's own;
/// - opencode: `run` (not `--auto`, which would also grant what it asks about folders outside
///   the one it runs in).
///
/// The model goes in each CLI's own flag, the same `--model <name>` in all four (checked
/// against claude 2.1.197 `--model`, gemini 0.61.0 `-m, --model`, codex 0.169.0 `exec -m,
/// --model`, opencode 1.18.33 `run -m, --model provider/model`, the versions `tests/clis`
/// pins). A name that is not a model name ([`spool_commands::model::check_model`]: one that
/// could read as a flag, say) is refused here, whatever let it through, and opencode's must
/// name its provider.
pub fn arguments(cli: CliType, prompt: &str, model: Option<&str>) -> Result<Vec<String>, String> {
    let args: &[&str] = match cli {
        CliType::Claude => &["-p", "{prompt}", "--permission-mode", "acceptEdits", "{model}"],
        // `-p` takes the prompt as its value: nothing may come between them.
        CliType::Gemini => &["-p", "{prompt}", "--yolo", "--skip-trust", "{model}"],
        CliType::Codex => &[
            "exec",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "{model}",
            "{prompt}",
        ],
        CliType::Opencode => &["run", "{model}", "{prompt}"],
    };
    if let Some(model) = model {
        spool_commands::model::check_model(model).map_err(|e| {
            format!(
                "the model `{model}` cannot be given to `{}`: {e}; set another with /model",
                program(cli)
            )
        })?;
        if cli == CliType::Opencode && !model.contains('/') {
            return Err(format!(
                "opencode names a model with its provider, as in `anthropic/claude-sonnet-4-5`, not `{model}`; set one with /model"
            ));
        }
    }
    let mut argv: Vec<String> = Vec::with_capacity(args.len() + 1);
    for a in args {
        match *a {
            "{prompt}" => argv.push(prompt.to_owned()),
            "{model}" => {
                if let Some(model) = model {
                    argv.extend(["--model".to_owned(), model.to_owned()]);
                }
            }
            other => argv.push(other.to_owned()),
        }
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value after `--model`, if the command line has one.
    fn model_of(argv: &[String]) -> Option<&str> {
        argv.iter()
            .position(|a| a == "--model")
            .and_then(|i| argv.get(i + 1))
            .map(String::as_str)
    }

    #[test]
    fn each_cli_gets_the_model_in_its_own_flag() {
        for (cli, model) in [
            (CliType::Claude, "claude-sonnet-4-5"),
            (CliType::Gemini, "gemini-2.5-pro"),
            (CliType::Codex, "gpt-5-codex"),
            (CliType::Opencode, "anthropic/claude-sonnet-4-5"),
        ] {
            let argv = arguments(cli, "Do it.", Some(model)).unwrap();
            assert_eq!(model_of(&argv), Some(model), "{cli:?}: {argv:?}");
            assert_eq!(argv.iter().filter(|a| *a == "--model").count(), 1, "{argv:?}");
            // The prompt is still one argument, in its place.
            assert_eq!(argv.iter().filter(|a| *a == "Do it.").count(), 1, "{argv:?}");
            let without = arguments(cli, "Do it.", None).unwrap();
            assert_eq!(model_of(&without), None, "{without:?}");
            assert_eq!(argv.len(), without.len() + 2);
        }
        // Where each CLI reads it: claude and gemini anywhere (gemini's `-p` keeps its prompt
        // right after it), codex and opencode after their subcommand, before the prompt.
        let gemini = arguments(CliType::Gemini, "Do it.", Some("gemini-2.5-pro")).unwrap();
        assert_eq!(&gemini[..2], ["-p", "Do it."]);
        let codex = arguments(CliType::Codex, "Do it.", Some("gpt-5")).unwrap();
        assert_eq!(codex.first().map(String::as_str), Some("exec"));
        assert_eq!(codex.last().map(String::as_str), Some("Do it."));
        let opencode = arguments(CliType::Opencode, "Do it.", Some("openai/gpt-5")).unwrap();
        assert_eq!(opencode, ["run", "--model", "openai/gpt-5", "Do it."]);
    }

    #[test]
    fn a_name_that_could_be_a_flag_never_reaches_a_cli() {
        for cli in CliType::ALL {
            for bad in ["--dangerously-skip-permissions", "-m", "a b", "x;y", ""] {
                let refused = arguments(cli, "Do it.", Some(bad));
                assert!(refused.is_err(), "{cli:?} {bad:?}: {refused:?}");
            }
        }
        let opencode = arguments(CliType::Opencode, "Do it.", Some("gpt-5")).unwrap_err();
        assert!(opencode.contains("provider"), "{opencode}");
    }
}
