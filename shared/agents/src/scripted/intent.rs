//! # What a person asks the demo agent for
//!
//! A request is read as words (letters and digits; case, punctuation and spacing aside), so
//! "planet" or "explanation" never asks for a plan. Politeness that leads it ("please", "can
//! you", "could you", …) is set aside, and the verb that then leads it decides first: "Please
//! rename this chat to Launch planning" is a rename. A request whose leading verb says nothing
//! ("make a plan", "add a helper agent") is what its earliest keyword says.

/// One word of a request: its lowercase text and where it is in the request (bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word, lowercase.
    pub text: String,
    /// Where it starts in the request.
    pub start: usize,
    /// Where it ends in the request.
    pub end: usize,
}

/// The words of `text`, in order: runs of letters and digits, an apostrophe inside a word kept
/// ("let's").
pub fn words(text: &str) -> Vec<Word> {
    let mut found = Vec::new();
    let mut start = None;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let next_is_letter = chars.peek().is_some_and(|(_, n)| n.is_alphanumeric());
        let inside = c.is_alphanumeric() || (matches!(c, '\'' | '’') && start.is_some() && next_is_letter);
        match (inside, start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                found.push(word(text, from, at));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(from) = start {
        found.push(word(text, from, text.len()));
    }
    found
}

fn word(text: &str, start: usize, end: usize) -> Word {
    Word {
        text: text[start..end].to_lowercase().replace('’', "'"),
        start,
        end,
    }
}

/// What leads a request without saying what it asks for, each a phrase of words.
const POLITENESS: &[&str] = &[
    "please",
    "pls",
    "kindly",
    "can you",
    "could you",
    "would you mind",
    "would you",
    "will you",
    "i'd like you to",
    "i would like you to",
    "i want you to",
    "i need you to",
    "go ahead and",
    "let's",
    "let us",
    "hey",
    "hi",
    "ok",
    "okay",
    "spool",
    "now",
    "also",
    "then",
];

/// How many of `words` lead the request politely (see [`POLITENESS`]), repeated ("hi spool,
/// could you please …").
pub fn politeness(words: &[Word]) -> usize {
    let mut at = 0;
    while let Some(len) = POLITENESS.iter().find_map(|p| phrase_at(words, at, p)) {
        at += len;
    }
    at
}

/// The number of words of `phrase` when `words` has it at `at`.
pub fn phrase_at(words: &[Word], at: usize, phrase: &str) -> Option<usize> {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    let here = words.get(at..at + wanted.len())?;
    here.iter()
        .zip(&wanted)
        .all(|(w, p)| w.text == *p)
        .then_some(wanted.len())
}

/// What the demo agent is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// The `/summarize` command's rendered template.
    Summarize,
    /// Ask the person a question.
    Question,
    /// Propose a plan.
    Plan,
    /// Note one or more tasks.
    Task,
    /// Rename the chat.
    Rename,
    /// Define a team of agents.
    Team,
    /// Add a helper agent.
    Helper,
    /// Fail, to show how a failing agent looks.
    Fail,
    /// Anything else: the greeting.
    Chat,
}

/// The words that say what a request is: as its leading verb, or anywhere.
struct Vocabulary {
    /// Phrases that, leading the request (after politeness), decide it.
    leading: &'static [&'static str],
    /// Phrases that, anywhere in the request as whole words, say it (the earliest wins).
    anywhere: &'static [&'static str],
}

impl Intent {
    /// The intents with words, in the order a tie between them is decided.
    const WORDED: [Self; 7] = [
        Self::Rename,
        Self::Question,
        Self::Plan,
        Self::Task,
        Self::Team,
        Self::Helper,
        Self::Fail,
    ];

    /// How each intent is said.
    const fn vocabulary(self) -> Vocabulary {
        let (leading, anywhere): (&[&str], &[&str]) = match self {
            Self::Rename => (
                &[
                    "rename",
                    "retitle",
                    "title",
                    "call this chat",
                    "call the chat",
                    "call this conversation",
                    "call it",
                    "name this chat",
                    "name the chat",
                    "name it",
                ],
                &["rename", "retitle", "title"],
            ),
            Self::Question => (&["ask me"], &["question", "questions", "ask me"]),
            Self::Plan => (&["plan"], &["plan", "plans"]),
            Self::Task => (
                &["remind", "todo", "task"],
                &["task", "tasks", "todo", "todos", "to do list", "reminder", "remind me"],
            ),
            Self::Team => (&[], &["team", "set up agents"]),
            Self::Helper => (&[], &["helper", "new agent"]),
            // Only as the request's verb: "why did my build fail?" is a question, not a test.
            Self::Fail => (&["fail"], &[]),
            Self::Summarize | Self::Chat => (&[], &[]),
        };
        Vocabulary { leading, anywhere }
    }

    /// What `request` asks for.
    pub fn of(request: &str) -> Self {
        if request.contains("<slash-command name=\"summarize\"") {
            return Self::Summarize;
        }
        let words = words(request);
        let lead = politeness(&words);
        let leading = Self::WORDED.into_iter().find(|intent| {
            intent
                .vocabulary()
                .leading
                .iter()
                .any(|p| phrase_at(&words, lead, p).is_some())
        });
        if let Some(intent) = leading {
            return intent;
        }
        let earliest = |intent: Self| {
            (lead..words.len()).find(|&at| {
                intent
                    .vocabulary()
                    .anywhere
                    .iter()
                    .any(|p| phrase_at(&words, at, p).is_some())
            })
        };
        Self::WORDED
            .into_iter()
            .filter_map(|intent| earliest(intent).map(|at| (at, intent)))
            .min_by_key(|(at, _)| *at)
            .map_or(Self::Chat, |(_, intent)| intent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_by_their_leading_verb_then_their_whole_words() {
        for (request, expected) in [
            // A rename is a rename, whatever its title says.
            ("Please rename this chat to Launch planning", Intent::Rename),
            ("rename this chat", Intent::Rename),
            ("Could you call this chat Launch?", Intent::Rename),
            ("title: Budget review", Intent::Rename),
            ("this chat needs a better title", Intent::Rename),
            ("Can you retitle it to Q3 plan", Intent::Rename),
            // Plans, on whole words only.
            ("make a plan", Intent::Plan),
            ("Plan my week, please", Intent::Plan),
            ("what is the biggest planet?", Intent::Chat),
            ("give me an explanation", Intent::Chat),
            ("let's talk about planning", Intent::Chat),
            // Tasks: the first keyword decides when the verb does not.
            ("make a task to water the ferns", Intent::Task),
            ("Could you add a task to plan the launch?", Intent::Task),
            ("remind me to call Kim", Intent::Task),
            ("add tasks: buy milk, call Kim", Intent::Task),
            ("todo: book the venue", Intent::Task),
            ("multitasking is hard", Intent::Chat),
            // Questions, teams, helpers, failures.
            ("ask me a question", Intent::Question),
            ("I have a question", Intent::Question),
            ("please set up a team for me", Intent::Team),
            ("Could you set up agents for a newsletter?", Intent::Team),
            ("steam engines", Intent::Chat),
            ("add a helper agent", Intent::Helper),
            ("I'd like a new agent", Intent::Helper),
            ("please fail", Intent::Fail),
            ("why did my build fail?", Intent::Chat),
            ("hello there", Intent::Chat),
            ("", Intent::Chat),
            (
                "<slash-command name=\"summarize\">Summarize the chat</slash-command>",
                Intent::Summarize,
            ),
        ] {
            assert_eq!(Intent::of(request), expected, "{request:?}");
        }
    }

    #[test]
    fn politeness_is_set_aside_however_much_of_it_leads() {
        let said = words("Hi Spool, could you please rename it");
        assert_eq!(said[politeness(&said)].text, "rename");
        let said = words("rename it");
        assert_eq!(politeness(&said), 0);
    }

    #[test]
    fn words_keep_their_place_and_inner_apostrophes() {
        let text = "Let’s go: 'plan' it!";
        let said: Vec<(String, &str)> = words(text)
            .into_iter()
            .map(|w| (w.text, &text[w.start..w.end]))
            .collect();
        assert_eq!(
            said,
            [
                ("let's".to_owned(), "Let’s"),
                ("go".to_owned(), "go"),
                ("plan".to_owned(), "plan"),
                ("it".to_owned(), "it"),
            ]
        );
    }
}
