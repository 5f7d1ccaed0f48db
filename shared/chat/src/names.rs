//! # Names people choose
//!
//! A name (a file's, a chat's title, an agent's, a workspace's, a task's) is shown to people and
//! read by agents. Unicode's format characters (general category `Cf`) are invisible, yet they
//! change what is shown or read: a right-to-left override makes `\u{202e}txt.exe` look like
//! `exe.txt`, zero-width characters make two names that look the same differ, and tag characters
//! (`U+E0000`–`U+E007F`) carry text that an agent reads and a person never sees. So every name
//! is stored without them: [`clean`] takes them out where a name comes in, and the checks of
//! names ([`crate::workspace::check_name`], [`crate::attachment::safe_filename`]) never let one
//! through. Stripping rather than refusing keeps a pasted name working; the cost is that
//! emoji joined by a zero-width joiner are stored as their parts, and a Persian name loses its
//! zero-width non-joiners (the letters are the same, their shapes join).
//!
//! The table is `Cf` as Unicode 17.0 has it (170 code points); the category
//! grows rarely and slowly, so a small exact table beats a Unicode crate.

/// Unicode 17.0's format characters (`Cf`), as inclusive ranges in code point order.
const FORMAT: [(u32, u32); 21] = [
    (0x00AD, 0x00AD),   // soft hyphen
    (0x0600, 0x0605),   // Arabic number signs
    (0x061C, 0x061C),   // Arabic letter mark
    (0x06DD, 0x06DD),   // Arabic end of ayah
    (0x070F, 0x070F),   // Syriac abbreviation mark
    (0x0890, 0x0891),   // Arabic pound and piastre marks above
    (0x08E2, 0x08E2),   // Arabic disputed end of ayah
    (0x180E, 0x180E),   // Mongolian vowel separator
    (0x200B, 0x200F),   // zero-width space, non-joiner, joiner; left-to-right and right-to-left marks
    (0x202A, 0x202E),   // bidirectional embeddings and overrides
    (0x2060, 0x2064),   // word joiner, invisible operators
    (0x2066, 0x206F),   // bidirectional isolates, deprecated format characters
    (0xFEFF, 0xFEFF),   // zero-width no-break space (byte order mark)
    (0xFFF9, 0xFFFB),   // interlinear annotation
    (0x110BD, 0x110BD), // Kaithi number sign
    (0x110CD, 0x110CD), // Kaithi number sign above
    (0x13430, 0x1343F), // Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3), // shorthand format controls
    (0x1D173, 0x1D17A), // musical symbol formatting
    (0xE0001, 0xE0001), // language tag
    (0xE0020, 0xE007F), // tag characters
];

/// Whether `c` is a format character (`Cf`).
pub fn is_format(c: char) -> bool {
    let c = u32::from(c);
    FORMAT
        .binary_search_by(|&(first, last)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// A name as a person gave it, without format characters and surrounding whitespace.
pub fn clean(raw: &str) -> String {
    let kept: String = raw.chars().filter(|c| !is_format(*c)).collect();
    kept.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_characters_are_taken_out_of_names() {
        // GIVEN names with invisible characters that change what is shown or read
        for (raw, kept) in [
            ("\u{202e}txt.exe", "txt.exe"),
            ("Q3\u{200b} plan", "Q3 plan"),
            ("\u{feff}Docs", "Docs"),
            ("a\u{2066}b\u{2069}c", "abc"),
            ("in\u{ad}visible", "invisible"),
            ("tag\u{e0001}\u{e0041}\u{e007f}", "tag"),
            ("  \u{200e} padded \u{200f} ", "padded"),
            ("naïve — 日本語 🦀", "naïve — 日本語 🦀"),
            ("\u{202e}", ""),
        ] {
            // WHEN one is cleaned
            // THEN only the format characters and the surrounding whitespace go
            assert_eq!(clean(raw), kept, "{raw:?}");
        }
    }

    #[test]
    fn the_table_is_sorted_and_exact_at_its_edges() {
        assert!(FORMAT.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(FORMAT.iter().all(|(first, last)| first <= last));
        let count: u32 = FORMAT.iter().map(|(first, last)| last - first + 1).sum();
        assert_eq!(count, 170);
        for c in [
            '\u{ad}', '\u{600}', '\u{605}', '\u{200b}', '\u{202e}', '\u{2069}', '\u{206f}', '\u{feff}',
        ] {
            assert!(is_format(c), "{c:?}");
        }
        for c in [
            'a', ' ', '\u{ac}', '\u{ae}', '\u{606}', '\u{200a}', '\u{2010}', '\u{2065}', '\u{fffc}', '\n',
        ] {
            assert!(!is_format(c), "{c:?}");
        }
    }
}
