//! A command's input and its prompt: `/name arguments` split into the name and the
//! arguments, the arguments split like a shell's (quoted ones stay whole), the template
//! rendered (`$ARGUMENTS`, `$1`, `$2`, …; a missing one is empty), and the prompt wrapped so
//! the agent knows which command it came from.

use spool_log::error::Error;

/// The longest prompt a command may render to (a message's own limit), so a template full of
/// `$1`s cannot make a huge one.
pub const MAX_PROMPT_CHARS: usize = 100_000;

/// `/name arguments` parsed: the name and the raw arguments (trimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The command's name, without the `/`.
    pub name: String,
    /// Everything after the name.
    pub arguments: String,
}

impl Invocation {
    /// Parses what a person typed: `/` first, then the name, then the arguments.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let input = input.trim();
        let Some(rest) = input.strip_prefix('/') else {
            return Err(Error::invalid("input", "a command starts with `/`, as in `/help`"));
        };
        let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if name.is_empty() {
            return Err(Error::invalid("input", "name a command after the `/`, as in `/help`"));
        }
        Ok(Self {
            name: name.to_owned(),
            arguments: arguments.trim().to_owned(),
        })
    }

    /// What the person typed, normalized: `/name arguments`.
    pub fn invoked_as(&self) -> String {
        if self.arguments.is_empty() {
            format!("/{}", self.name)
        } else {
            format!("/{} {}", self.name, self.arguments)
        }
    }
}

/// The arguments as words: split at whitespace, except inside `"…"` or `'…'`, whose quotes
/// are dropped (an unclosed quote runs to the end).
pub fn split(arguments: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in arguments.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The template with `$ARGUMENTS` (the whole argument string) and `$1`, `$2`, … (the words)
/// filled in. A template that uses neither gets the arguments appended, as `ARGUMENTS: …`, so
/// they are never lost. A prompt over [`MAX_PROMPT_CHARS`] is refused as it grows.
pub fn render(template: &str, arguments: &str) -> Result<String, Error> {
    let words = split(arguments);
    let mut out = String::with_capacity(template.len() + arguments.len());
    let mut used = false;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        // Bytes bound characters (at most four bytes each): cheap to check as it grows.
        if out.len() > MAX_PROMPT_CHARS * 4 {
            return Err(too_long());
        }
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(arguments);
            used = true;
            rest = tail;
            continue;
        }
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        match after[..digits].parse::<usize>() {
            Ok(n) if n > 0 => {
                out.push_str(words.get(n - 1).map_or("", String::as_str));
                used = true;
                rest = &after[digits..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    if !used && !arguments.is_empty() {
        out = format!("{}\n\nARGUMENTS: {arguments}", out.trim_end());
    }
    let out = out.trim().to_owned();
    if out.chars().count() > MAX_PROMPT_CHARS {
        return Err(too_long());
    }
    Ok(out)
}

fn too_long() -> Error {
    Error::invalid(
        "command",
        format!("its prompt would be over {MAX_PROMPT_CHARS} characters; shorten the arguments or the template"),
    )
}

/// The prompt as the agent gets it: inside `<slash-command name="…" invokedAs="…">`.
pub fn wrap(name: &str, invoked_as: &str, prompt: &str) -> String {
    format!(
        "<slash-command name=\"{}\" invokedAs=\"{}\">\n{prompt}\n</slash-command>",
        escape(name),
        escape(invoked_as)
    )
}

fn escape(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_a_name_and_arguments() {
        let i = Invocation::parse("  /review   src/lib.rs  --fast ").unwrap();
        assert_eq!(i.name, "review");
        assert_eq!(i.arguments, "src/lib.rs  --fast");
        assert_eq!(i.invoked_as(), "/review src/lib.rs  --fast");
        assert_eq!(Invocation::parse("/git:commit").unwrap().invoked_as(), "/git:commit");
        assert!(Invocation::parse("review").is_err());
        assert!(Invocation::parse("/ x").is_err());
    }

    #[test]
    fn quoted_arguments_stay_whole() {
        assert_eq!(split(r#"a "b c" 'd "e"' f"#), ["a", "b c", "d \"e\"", "f"]);
        assert_eq!(split(r#""""#), [""]);
        assert_eq!(split("  "), Vec::<String>::new());
        assert_eq!(split(r#"x "unclosed y"#), ["x", "unclosed y"]);
    }

    #[test]
    fn templates_take_whole_and_positional_arguments() {
        assert_eq!(
            render("Fix $1 in $2.", r#"bug "src/a b.rs""#).unwrap(),
            "Fix bug in src/a b.rs."
        );
        assert_eq!(render("All: $ARGUMENTS!", "x  y").unwrap(), "All: x  y!");
        assert_eq!(render("Missing: [$3] [$ARGUMENTS]", "").unwrap(), "Missing: [] []");
        assert_eq!(render("Cost $5.00 $0 $", "a b c d e").unwrap(), "Cost e.00 $0 $");
        assert_eq!(render("$1$2$10", "a b c d e f g h i j").unwrap(), "abj");
        assert_eq!(
            render("No placeholders.", "extra words").unwrap(),
            "No placeholders.\n\nARGUMENTS: extra words"
        );
        assert_eq!(render("No placeholders.", "").unwrap(), "No placeholders.");
    }

    #[test]
    fn a_prompt_cannot_grow_past_the_limit() {
        let template = "$1".repeat(30_000);
        let err = render(&template, &"x".repeat(20_000)).unwrap_err();
        assert!(err.to_string().contains("over 100000 characters"), "{err}");
        assert!(render("$1", &"x".repeat(MAX_PROMPT_CHARS + 1)).is_err());
        assert!(render("$1", &"x".repeat(MAX_PROMPT_CHARS)).is_ok());
    }

    #[test]
    fn the_wrapper_escapes_its_attributes() {
        assert_eq!(
            wrap("r", "/r \"<x>\" & y", "p"),
            "<slash-command name=\"r\" invokedAs=\"/r &quot;&lt;x&gt;&quot; &amp; y\">\np\n</slash-command>"
        );
    }
}
