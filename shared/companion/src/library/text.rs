//! What the index reads in a note's text (its title, whether it is open, its unchecked items),
//! and what a query searches and may show of it.

use super::MAX_QUERY_WORDS;

/// The first `# ` heading, else the file's name without its extension.
pub(super) fn title_of(text: &str, rel: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map_or_else(
            || {
                let name = rel.rsplit('/').next().unwrap_or(rel);
                name.rsplit_once('.').map_or(name, |(stem, _)| stem).to_owned()
            },
            |t| bounded(t, 120),
        )
}

/// Whether the note's front matter says `status: open`.
pub(super) fn front_matter_open(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("---\n") else {
        return false;
    };
    let Some((front, _)) = rest.split_once("\n---") else {
        return false;
    };
    front
        .lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(k, v)| k.trim() == "status" && v.trim().trim_matches('"').eq_ignore_ascii_case("open"))
}

/// The text of each unchecked task item (`- [ ] …`, `* [ ] …`).
pub(super) fn unchecked_items(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("- [ ] ").or_else(|| l.strip_prefix("* [ ] "))
        })
        .map(|t| bounded(t.trim(), 200))
        .filter(|t| !t.is_empty())
        .collect()
}

/// Words too common to say what a question is about.
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "could", "did", "do", "does", "for", "from",
    "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "not", "of", "on", "or",
    "our", "should", "so", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "was", "we",
    "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
];

/// The words of a query that are searched: letters and digits, lower case, at least two
/// characters, not [`STOP_WORDS`], at most [`MAX_QUERY_WORDS`].
pub(super) fn query_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
    {
        if !words.contains(&word) {
            words.push(word);
        }
        if words.len() == MAX_QUERY_WORDS {
            break;
        }
    }
    words
}

/// A passage that is never the whole note: a snippet that covers most of a short note is cut
/// to half of it.
pub(super) fn partial(snippet: &str, body: &str) -> String {
    let snippet = snippet.trim();
    let whole = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = snippet
        .trim_matches('…')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if shown.chars().count() * 10 >= whole.chars().count() * 8 {
        let half = whole.chars().count() / 2;
        let cut: String = whole.chars().take(half).collect();
        format!("{}…", cut.trim_end())
    } else {
        snippet.to_owned()
    }
}

/// `text` cut to at most `max` characters, with `…` when cut.
pub(super) fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}
