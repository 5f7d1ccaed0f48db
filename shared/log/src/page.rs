//! # The byte format of sealed pages and message frames
//!
//! A run of messages is stored as *frames*: each message as a 4-byte little-endian length and
//! its bytes. A sealed *page* is a header, the frames of its messages and a CRC-32 trailer:
//!
//! ```text
//! "SPOOLPG1"  first: u64 LE  count: u32 LE  frames…  crc32(everything before): u32 LE
//! ```
//!
//! The encoding is a pure function of the messages, so sealing the same messages twice yields
//! byte-identical pages: a re-run after a crash writes exactly what the interrupted run wrote,
//! and a create-only write of it either succeeds or finds its twin.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::{error::Error, stream::SeqRange};

const MAGIC: &[u8; 8] = b"SPOOLPG1";
const HEADER: usize = 8 + 8 + 4;

/// Bytes the frames of these messages take.
pub fn frames_len(messages: &[Bytes]) -> usize {
    messages.iter().map(|m| 4 + m.len()).sum()
}

/// Appends the frames of `messages` to `out`.
pub fn put_frames(out: &mut BytesMut, messages: &[Bytes]) {
    out.reserve(frames_len(messages));
    for message in messages {
        let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
        out.put_u32_le(len);
        out.put_slice(message);
    }
}

/// The frames of `messages`.
pub fn encode_frames(messages: &[Bytes]) -> Bytes {
    let mut out = BytesMut::new();
    put_frames(&mut out, messages);
    out.freeze()
}

/// Splits frames back into messages, sharing `data`'s buffer.
pub fn decode_frames(mut data: Bytes) -> Result<Vec<Bytes>, Error> {
    let mut messages = Vec::new();
    while data.has_remaining() {
        if data.remaining() < 4 {
            return Err(corrupt("a frame's length is cut short"));
        }
        let len = data.get_u32_le() as usize;
        if data.remaining() < len {
            return Err(corrupt("a frame is cut short"));
        }
        messages.push(data.split_to(len));
    }
    Ok(messages)
}

/// Encodes the page holding `messages`, the first of which is message `first`.
pub fn encode_page(first: u64, messages: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + frames_len(messages) + 4);
    out.put_slice(MAGIC);
    out.put_u64_le(first);
    out.put_u32_le(u32::try_from(messages.len()).unwrap_or(u32::MAX));
    put_frames(&mut out, messages);
    let crc = crc32fast::hash(&out);
    out.put_u32_le(crc);
    out.freeze()
}

/// A decoded page.
#[derive(Debug, Clone)]
pub struct Page {
    /// The sequence numbers the page holds.
    pub range: SeqRange,
    /// Its messages, in order.
    pub messages: Vec<Bytes>,
}

impl Page {
    /// The messages after sequence number `after` (all of them if `after` precedes the page).
    pub fn messages_after(&self, after: u64) -> &[Bytes] {
        let skip = after.saturating_sub(self.range.first - 1) as usize;
        &self.messages[skip.min(self.messages.len())..]
    }
}

/// The first of `messages` up to about `max_bytes` in all: at least one (if any), and none
/// that would take the total past `max_bytes` after the first.
pub fn take_up_to(messages: &[Bytes], max_bytes: usize) -> Vec<Bytes> {
    let mut total = 0;
    let mut out = Vec::new();
    for message in messages {
        if !out.is_empty() && total + message.len() > max_bytes {
            break;
        }
        total += message.len();
        out.push(message.clone());
    }
    out
}

/// Decodes and verifies a page (magic, checksum, count, and the range its name promises).
pub fn decode_page(data: Bytes, expected: SeqRange) -> Result<Page, Error> {
    if data.len() < HEADER + 4 || &data[..8] != MAGIC {
        return Err(corrupt("not a Spool page"));
    }
    let body_len = data.len() - 4;
    let crc = u32::from_le_bytes(data[body_len..].try_into().unwrap_or_default());
    if crc32fast::hash(&data[..body_len]) != crc {
        return Err(corrupt("page checksum mismatch"));
    }
    let mut header = &data[8..HEADER];
    let first = header.get_u64_le();
    let count = header.get_u32_le() as u64;
    let messages = decode_frames(data.slice(HEADER..body_len))?;
    if messages.len() as u64 != count || count == 0 {
        return Err(corrupt("page message count mismatch"));
    }
    let range = SeqRange {
        first,
        last: first + count - 1,
    };
    if range != expected {
        return Err(corrupt(&format!(
            "page holds {}..={}, its name says {}..={}",
            range.first, range.last, expected.first, expected.last
        )));
    }
    Ok(Page { range, messages })
}

/// The name of the page holding `range`: `{first:020}-{last:020}`, which sorts in stream order.
pub fn page_name(range: SeqRange) -> String {
    format!("{:020}-{:020}", range.first, range.last)
}

/// Parses a page name back into its range; `None` for anything else.
pub fn parse_page_name(name: &str) -> Option<SeqRange> {
    let (first, last) = name.split_once('-')?;
    if first.len() != 20 || last.len() != 20 {
        return None;
    }
    let range = SeqRange {
        first: first.parse().ok()?,
        last: last.parse().ok()?,
    };
    (range.first >= 1 && range.first <= range.last).then_some(range)
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt { what: what.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages() -> Vec<Bytes> {
        vec![Bytes::from("a"), Bytes::new(), Bytes::from(vec![7u8; 300])]
    }

    #[test]
    fn pages_round_trip_and_are_deterministic() {
        let page = encode_page(5, &messages());
        assert_eq!(page, encode_page(5, &messages()));
        let decoded = decode_page(page, SeqRange { first: 5, last: 7 }).unwrap();
        assert_eq!(decoded.messages, messages());
        assert_eq!(decoded.messages_after(5).len(), 2);
        assert_eq!(decoded.messages_after(0).len(), 3);
        assert_eq!(decoded.messages_after(7).len(), 0);
    }

    #[test]
    fn a_flipped_bit_or_a_wrong_name_is_detected() {
        let page = encode_page(1, &messages());
        let mut bad = page.to_vec();
        bad[HEADER + 2] ^= 1;
        assert!(matches!(
            decode_page(Bytes::from(bad), SeqRange { first: 1, last: 3 }),
            Err(Error::Corrupt { .. })
        ));
        assert!(decode_page(page, SeqRange { first: 2, last: 4 }).is_err());
    }

    #[test]
    fn frames_round_trip() {
        assert_eq!(decode_frames(encode_frames(&messages())).unwrap(), messages());
        assert!(decode_frames(Bytes::from_static(&[9, 0, 0, 0, 1])).is_err());
    }

    #[test]
    fn page_names_sort_in_stream_order() {
        let a = page_name(SeqRange { first: 1, last: 9 });
        let b = page_name(SeqRange { first: 10, last: 200 });
        assert!(a < b);
        assert_eq!(parse_page_name(&b), Some(SeqRange { first: 10, last: 200 }));
        assert_eq!(parse_page_name("x"), None);
    }
}
