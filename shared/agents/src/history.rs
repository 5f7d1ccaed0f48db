//! # What an agent remembers: a context budget, and compaction
//!
//! A runtime is given the chat's conversation ([`crate::state::conversation`]), and models have
//! finite context windows. Each runtime has a **context budget** in tokens
//! ([`crate::runtime::Runtime::context_budget`], or the agent's own `context_tokens`). When the
//! history before the current turn and the turn itself would not fit, the oldest part is
//! summarised once into a `history_compacted` event ([`plan`] decides which part; the step
//! writes it), and from then on the agent sees the summary and everything after it. A person
//! may ask for it at any time with `/compact`. Nothing is deleted from the chat.
//!
//! Tokens are estimated, not counted (no tokenizer is bundled): a token is about four
//! characters of English text, and every message costs a few more for its framing. The budget
//! leaves room for the estimate's error and the answer.
//!
//! A runtime with a model ([`crate::runtime::Runtime::summarizes`]) writes the summary itself,
//! in pieces that fit its budget, each folding the summary so far into the next; the others
//! (the scripted runtime, CLIs, whose input file this keeps below a size) get Spool's own
//! summary ([`extract`]): each message's first line, oldest first.

use crate::{files::Inline, runtime::Message};

/// Characters per token, for estimates.
const CHARS_PER_TOKEN: u64 = 4;
/// Tokens each message costs beyond its text (role, framing).
const PER_MESSAGE: u64 = 4;
/// Tokens an image costs, about (providers charge by its size, bounded).
const IMAGE_TOKENS: u64 = 1_000;

/// The context windows of models Spool knows, by name prefix, in tokens (the providers'
/// published figures; the longest matching prefix wins).
const WINDOWS: [(&str, u64); 12] = [
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("llama", 8_192),
];
/// The window of a model Spool does not know (a local server's, often): small, so an
/// unknown model is never sent more than it may take; an agent's `context_tokens` says more.
const UNKNOWN_WINDOW: u64 = 32_768;

/// The budget for model `model`: three quarters of its window, leaving room for the answer
/// and the estimate's error.
pub fn model_budget(model: &str) -> u64 {
    let window = WINDOWS
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(UNKNOWN_WINDOW, |&(_, window)| window);
    window / 4 * 3
}

/// About how many tokens `text` holds.
pub fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(CHARS_PER_TOKEN)
}

/// About how many tokens a message costs.
pub fn message_tokens(message: &Message) -> u64 {
    PER_MESSAGE
        + match message {
            Message::User { text } | Message::System { text } => tokens(text),
            Message::Assistant { text, tool_calls } => {
                tokens(text)
                    + tool_calls
                        .iter()
                        .map(|c| tokens(&c.name) + tokens(&c.arguments.to_string()))
                        .sum::<u64>()
            }
            Message::Tool { name, content, .. } => tokens(name) + tokens(content),
            Message::File(attached) => {
                tokens(&attached.file.filename)
                    + match &attached.content {
                        Some(Inline::Text { text }) => tokens(text),
                        Some(Inline::Image { .. }) => IMAGE_TOKENS,
                        None => 0,
                    }
            }
        }
}

/// What to summarise: messages `..count` of the conversation, the events `from_seq..=through_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// How many of the oldest messages the summary replaces.
    pub count: usize,
    /// The first event it covers.
    pub from_seq: u64,
    /// The last.
    pub through_seq: u64,
    /// About how many tokens the covered messages hold.
    pub tokens: u64,
}

/// Which of the oldest messages to summarise so the rest fits in half of `budget` (leaving the
/// other half for the summary, the answer and what the turn adds), or `None` when everything
/// fits in `budget` or nothing can be summarised. `force` (`/compact`) summarises everything
/// before the turn.
///
/// `seqs[i]` is the seq of the event that added `messages[i]`; only messages before
/// `turn_start` (the current turn's first event) are summarised, and a cut is made only before
/// a person's message (or the turn), so a reply is never parted from its tools' results.
/// `fixed` is what the request costs beyond its messages (the instruction and tools);
/// `from_seq` is the first event the summary covers.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    messages: &[Message],
    seqs: &[u64],
    fixed: u64,
    budget: u64,
    turn_start: u64,
    from_seq: u64,
    force: bool,
) -> Option<Cut> {
    let sizes: Vec<u64> = messages.iter().map(message_tokens).collect();
    let total: u64 = fixed + sizes.iter().sum::<u64>();
    if !force && total <= budget {
        return None;
    }
    let before_turn = seqs.iter().position(|&s| s >= turn_start).unwrap_or(messages.len());
    let rest = |i: usize| fixed + sizes[i..].iter().sum::<u64>();
    let candidates = (1..before_turn)
        .filter(|&i| matches!(messages[i], Message::User { .. }))
        .chain(std::iter::once(before_turn));
    let count = if force {
        before_turn
    } else {
        let mut chosen = before_turn;
        for i in candidates {
            if rest(i) <= budget / 2 {
                chosen = i;
                break;
            }
        }
        chosen
    };
    if count == 0 || (count == 1 && is_summary(&messages[0])) {
        return None;
    }
    let through_seq = seqs
        .get(count)
        .map_or(turn_start, |&s| s.min(turn_start))
        .saturating_sub(1);
    (through_seq >= from_seq).then(|| Cut {
        count,
        from_seq,
        through_seq,
        tokens: sizes[..count].iter().sum(),
    })
}

/// Whether a message is a summary ([`crate::state::summary_text`]).
pub fn is_summary(message: &Message) -> bool {
    matches!(message, Message::System { text } if text.starts_with(crate::state::SUMMARY_OPEN))
}

/// The conversation as a transcript, for a model to summarise.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        let line = match message {
            Message::User { text } => format!("Person: {text}"),
            Message::Assistant { text, tool_calls } => {
                let calls: Vec<String> = tool_calls
                    .iter()
                    .map(|c| format!("{}({})", c.name, c.arguments))
                    .collect();
                if calls.is_empty() {
                    format!("Agent: {text}")
                } else {
                    format!("Agent: {text} [called {}]", calls.join(", "))
                }
            }
            Message::Tool { name, content, .. } => format!("Result of {name}: {content}"),
            Message::System { text } => format!("Note: {text}"),
            Message::File(attached) => format!("File: {}", attached.file.filename),
        };
        out.push_str(&line);
        out.push_str("\n\n");
    }
    out
}

/// The messages in pieces of at most `tokens` each (a message larger than that is a piece of
/// its own), for a model to summarise one at a time.
pub fn pieces(messages: &[Message], tokens: u64) -> Vec<&[Message]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, message) in messages.iter().enumerate() {
        let cost = message_tokens(message);
        if i > start && size + cost > tokens {
            out.push(&messages[start..i]);
            (start, size) = (i, 0);
        }
        size += cost;
    }
    if start < messages.len() {
        out.push(&messages[start..]);
    }
    out
}

/// What a model is told when it summarises.
pub const SUMMARIZE_INSTRUCTION: &str = "You summarise a conversation between people and an AI \
agent so the agent can carry on without the full text. Keep every fact, decision, name, number, \
file and open question that later messages may need, the people's requests in their own words \
where short, and what the agent did and found. Write plain prose or short bullet points, no \
preamble, at most about a quarter of the original's length.";

/// The request a model answers with a summary: the summary so far, if any, and the next piece.
pub fn summarize_message(so_far: Option<&str>, piece: &[Message]) -> Message {
    let mut text = String::new();
    if let Some(so_far) = so_far {
        text.push_str("The summary of the conversation so far:\n\n");
        text.push_str(so_far);
        text.push_str("\n\nIts next part:\n\n");
    } else {
        text.push_str("The conversation:\n\n");
    }
    text.push_str(&transcript(piece));
    text.push_str("Write the summary of all of it.");
    Message::User { text }
}

/// Spool's own summary, for runtimes without a model to ask: each message's first line (an
/// earlier summary whole), oldest first, shortened to about `tokens` by leaving out the middle.
pub fn extract(messages: &[Message], tokens: u64) -> String {
    let first_line = |text: &str, max: usize| {
        let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        let short: String = line.chars().take(max).collect();
        if short.chars().count() < line.chars().count() || text.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
            format!("{short}…")
        } else {
            short
        }
    };
    let lines: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            Message::System { text } if is_summary(m) => {
                Some(text.split_once('\n').map_or(text.as_str(), |(_, rest)| rest).to_owned())
            }
            Message::User { text } => Some(format!("- Person: {}", first_line(text, 200))),
            Message::Assistant { text, tool_calls } if !text.trim().is_empty() || !tool_calls.is_empty() => {
                let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                let called = if names.is_empty() {
                    String::new()
                } else {
                    format!(" (called {})", names.join(", "))
                };
                Some(format!("- Agent: {}{called}", first_line(text, 160)))
            }
            _ => None,
        })
        .collect();
    let limit = usize::try_from(tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX);
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    if total <= limit {
        return lines.join("\n");
    }
    // Keep the beginning and the end; say how much of the middle is left out.
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let (mut i, mut j, mut used) = (0, lines.len(), 0);
    while i < j {
        let next = if head.len() <= tail.len() {
            &lines[i]
        } else {
            &lines[j - 1]
        };
        if used + next.len() + 1 > limit {
            break;
        }
        used += next.len() + 1;
        if head.len() <= tail.len() {
            head.push(lines[i].clone());
            i += 1;
        } else {
            tail.push(lines[j - 1].clone());
            j -= 1;
        }
    }
    tail.reverse();
    let left_out = j - i;
    head.push(format!("- … {left_out} more messages, left out of this summary …"));
    head.extend(tail);
    head.join("\n")
}

#[cfg(test)]
mod tests;
