//! # The titles the demo agent gives: a chat's and a task's
//!
//! A rename takes the title asked for (quoted, after `title:`, after "rename … to", or after
//! "call this chat"), else a summary of the chat: its first message's leading words. A task's
//! title is the request's gist: without the politeness and the verb phrase that ask for it
//! ("create a task to", "add a task:", "remind me to") or trailing punctuation, capitalized, and
//! cut at a word boundary. A request that lists tasks (bullets, or items after "tasks:") makes
//! one task per item.

use super::intent::{Word, phrase_at, politeness, words};

/// The longest title the demo gives a chat or a task, in characters, its ellipsis included.
pub const TITLE_MAX: usize = 60;
/// The longest summary of a chat given as its title.
pub const SUMMARY_MAX: usize = 40;
/// The most tasks one request makes.
pub const TASKS_MAX: usize = 10;

/// `text` cut to at most `max` characters at a word boundary, with an ellipsis when cut.
pub fn cap(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    // Room for the ellipsis; the cut is at a boundary when the next character is a space.
    let head: String = text.chars().take(max - 1).collect();
    let at_boundary = text.chars().nth(max - 1).is_some_and(char::is_whitespace);
    let kept = match head.rsplit_once(char::is_whitespace) {
        Some((kept, _)) if !at_boundary => kept,
        _ => head.as_str(),
    };
    let kept = kept.trim_end_matches(|c: char| c.is_whitespace() || ",;:-–".contains(c));
    format!("{kept}…")
}

/// `text` as a title: trimmed of spaces, surrounding quotes, leading colons or dashes, a
/// trailing "please" and trailing punctuation; its first letter capitalized.
pub fn tidy(text: &str) -> String {
    let mut text = text
        .trim_start_matches(|c: char| c.is_whitespace() || ":-–—".contains(c))
        .trim_end();
    loop {
        let before = text;
        text = text.trim_end_matches(|c: char| c.is_whitespace() || ".!?,;:".contains(c));
        let lower = text.to_ascii_lowercase();
        if lower.ends_with(" please") || lower == "please" {
            text = &text[..text.len() - "please".len()];
        }
        if text == before {
            break;
        }
    }
    let text = text.trim_matches(|c: char| "\"'“”‘’«»`".contains(c)).trim();
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The first quoted part of `text` (in "…", “…”, ‘…’, «…», or '…' that is not an apostrophe).
pub fn quoted(text: &str) -> Option<&str> {
    let pairs = [('"', '"'), ('“', '”'), ('«', '»'), ('‘', '’'), ('\'', '\'')];
    pairs.into_iter().find_map(|(open, close)| {
        let (at, _) = text.char_indices().find(|&(i, c)| {
            c == open && (open != '\'' || text[..i].chars().next_back().is_none_or(char::is_whitespace))
        })?;
        let rest = &text[at + open.len_utf8()..];
        let (end, _) = rest.char_indices().find(|&(i, c)| {
            // A closing apostrophe inside a word ("Kim’s") is not the quote's end.
            c == close
                && (!matches!(close, '\'' | '’')
                    || rest[i + c.len_utf8()..]
                        .chars()
                        .next()
                        .is_none_or(|n| !n.is_alphanumeric()))
        })?;
        Some(rest[..end].trim()).filter(|inner| !inner.is_empty())
    })
}

/// What may stand between "call"/"name"/"title" and the title: the chat.
const CHAT_WORDS: &[&str] = &[
    "this",
    "the",
    "our",
    "my",
    "chat",
    "chat's",
    "conversation",
    "thread",
    "it",
];

/// The title a rename request asks for, if it names one.
pub fn title_asked(request: &str) -> Option<String> {
    let request = request.trim();
    let title = |text: &str| Some(cap(&tidy(text), TITLE_MAX)).filter(|t| !t.is_empty());
    if let Some(inner) = quoted(request) {
        return title(inner);
    }
    if let Some(at) = request.to_ascii_lowercase().find("title:") {
        return title(&request[at + "title:".len()..]);
    }
    let said = words(request);
    let from = politeness(&said);
    let verb = (from..said.len())
        .find(|&i| matches!(said[i].text.as_str(), "rename" | "retitle" | "title" | "call" | "name"))?;
    let after = |w: &Word| &request[w.end..];
    // "rename this chat to X", "change the title to X", "rename it as X".
    if let Some(to) = said[verb + 1..].iter().find(|w| w.text == "to" || w.text == "as") {
        return title(after(to));
    }
    // "call this chat X", "name it X", "title it X".
    let object = said[verb + 1..]
        .iter()
        .take_while(|w| CHAT_WORDS.contains(&w.text.as_str()))
        .last()?;
    title(after(object))
}

/// A chat's summary, as its title: the leading words of its first message, politeness aside.
pub fn summary(first_message: &str) -> Option<String> {
    let said = words(first_message);
    let from = said.get(politeness(&said))?;
    let first_line = first_message[from.start..].lines().next().unwrap_or_default();
    Some(cap(&tidy(first_line), SUMMARY_MAX)).filter(|t| !t.is_empty())
}

/// The verbs that ask for a task.
const TASK_VERBS: &[&str] = &[
    "create", "add", "make", "note", "put", "write", "open", "file", "log", "jot", "record", "set", "start", "remind",
];
/// What stands between such a verb and the task's noun.
const ARTICLES: &[&str] = &["a", "an", "the", "new", "one", "another", "quick", "me", "down", "up"];
/// A task's name, one of them.
const TASK_NOUN: &[&str] = &["task", "todo", "reminder", "to do"];
/// A task's name, several of them.
const TASKS_NOUN: &[&str] = &["tasks", "todos", "reminders", "to dos"];
/// What joins the request for a task to what it is about.
const CONNECTORS: &[&str] = &["to", "that", "about", "saying", "called", "named", "titled", "for"];

/// What a task request is about (after "create a task to", "remind me to", …), and whether it
/// asked for several ("add tasks: …").
fn task_body(request: &str) -> (&str, bool) {
    let said = words(request);
    let is = |at: usize, list: &[&str]| list.iter().find_map(|p| phrase_at(&said, at, p));
    let start = politeness(&said);
    let mut at = start;
    let verb = said
        .get(at)
        .map(|w| w.text.clone())
        .filter(|v| TASK_VERBS.contains(&v.as_str()));
    if verb.is_some() {
        at += 1;
    }
    while is(at, ARTICLES).is_some() {
        at += 1;
    }
    let mut several = false;
    if let Some(len) = is(at, TASK_NOUN) {
        at += len;
    } else if let Some(len) = is(at, TASKS_NOUN) {
        at += len;
        several = true;
    } else if verb.as_deref() != Some("remind") {
        at = start;
    }
    if at > start && is(at, CONNECTORS).is_some() {
        at += 1;
    }
    let body = said.get(at).map_or("", |w| &request[w.start..]);
    (body, several)
}

/// A list item's text, when `line` is one (`- `, `* `, `• `, `1. `, `1) `).
fn bullet(line: &str) -> Option<&str> {
    let line = line.trim_start();
    for mark in ["- ", "* ", "• ", "– "] {
        if let Some(rest) = line.strip_prefix(mark) {
            return Some(rest);
        }
    }
    let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let rest = &line[digits..];
    (digits > 0)
        .then(|| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")))
        .flatten()
}

/// The titles of the tasks a request asks for: one per listed item, or one for the request.
pub fn task_titles(request: &str) -> Vec<String> {
    let title = |text: &str| cap(&tidy(text), TITLE_MAX);
    let listed: Vec<&str> = request.lines().filter_map(bullet).collect();
    let items: Vec<String> = if listed.is_empty() {
        let (body, several) = task_body(request);
        let body = body.lines().next().unwrap_or_default();
        if several {
            body.split([',', ';'])
                .flat_map(|part| part.split(" and "))
                .map(|item| item.trim().strip_prefix("and ").unwrap_or(item.trim()))
                .map(title)
                .collect()
        } else {
            vec![title(body)]
        }
    } else {
        listed.into_iter().map(title).collect()
    };
    items.into_iter().filter(|t| !t.is_empty()).take(TASKS_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_takes_the_title_asked_for() {
        for (request, expected) in [
            ("Please rename this chat to Launch planning", Some("Launch planning")),
            ("rename this chat to launch planning.", Some("Launch planning")),
            ("Could you call this chat Budget 2027?", Some("Budget 2027")),
            ("name it Q3 review, please", Some("Q3 review")),
            ("title: Hiring plan", Some("Hiring plan")),
            ("change the title to Roadmap", Some("Roadmap")),
            ("rename it as \"Ops: on-call\"", Some("Ops: on-call")),
            ("rename this chat ‘Kim’s notes’", Some("Kim’s notes")),
            ("rename this chat 'Garden'", Some("Garden")),
            ("rename this chat", None),
            ("rename this chat, please", None),
            ("this chat needs a better title", None),
        ] {
            assert_eq!(title_asked(request).as_deref(), expected, "{request:?}");
        }
        let long = format!("rename this chat to {}", "very ".repeat(20));
        let title = title_asked(&long).unwrap();
        assert!(title.chars().count() <= TITLE_MAX && title.ends_with('…'), "{title}");
    }

    #[test]
    fn a_chat_is_summarized_by_its_first_messages_leading_words() {
        assert_eq!(
            summary("Please help me draft the launch email for our new product line").as_deref(),
            Some("Help me draft the launch email for our…")
        );
        assert_eq!(
            summary("Budget questions?\nMore here").as_deref(),
            Some("Budget questions")
        );
        assert_eq!(summary("please").as_deref(), None);
        assert_eq!(summary("").as_deref(), None);
    }

    #[test]
    fn a_task_title_is_the_requests_gist() {
        for (request, expected) in [
            ("make a task to water the ferns", vec!["Water the ferns"]),
            (
                "Can you create a task to water the ferns before Friday?",
                vec!["Water the ferns before Friday"],
            ),
            ("add a task: buy milk.", vec!["Buy milk"]),
            ("Please remind me to call Kim!", vec!["Call Kim"]),
            ("todo: book the venue", vec!["Book the venue"]),
            ("Could you add a task to plan the launch?", vec!["Plan the launch"]),
            ("water the plants, it's a task", vec!["Water the plants, it's a task"]),
            (
                "create a task to water the ferns and feed the cat",
                vec!["Water the ferns and feed the cat"],
            ),
            (
                "add tasks: buy milk, call Kim and book the venue",
                vec!["Buy milk", "Call Kim", "Book the venue"],
            ),
            (
                "Add these tasks:\n- buy milk\n- call Kim.\n1. book the venue",
                vec!["Buy milk", "Call Kim", "Book the venue"],
            ),
            ("make a task", vec![]),
        ] {
            assert_eq!(task_titles(request), expected, "{request:?}");
        }
        let long =
            "create a task to review every chapter of the handbook and send the notes to the whole editorial team";
        let titles = task_titles(long);
        assert_eq!(titles, ["Review every chapter of the handbook and send the notes to…"]);
        assert!(titles[0].chars().count() <= TITLE_MAX);
    }

    #[test]
    fn a_cut_is_at_a_word_boundary_with_an_ellipsis() {
        assert_eq!(cap("short", 10), "short");
        assert_eq!(cap("one two three", 8), "one two…");
        assert_eq!(cap("one two, three", 9), "one two…");
        assert_eq!(cap("unbreakable", 5), "unbr…");
    }
}
