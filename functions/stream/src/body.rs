//! # Message bodies: JSON mode's batches, read bodies and SSE events
//!
//! A JSON stream keeps message boundaries: a POSTed array is flattened one level into messages
//! (kept byte for byte as sent), and a read answers with one JSON array. Any other stream stores
//! each POST body as one message and reads back the bytes concatenated.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::value::RawValue;
use spool_log::stream::ContentType;

use spool_edge::ApiError;

/// Whether a body is being appended (an empty JSON array is an error) or is a stream's initial
/// content (an empty JSON array means no message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// A POST.
    Append,
    /// A PUT.
    Create,
}

/// Splits a request body into the messages it stores.
pub(crate) fn messages(content_type: &ContentType, body: Bytes, usage: Use) -> Result<Vec<Bytes>, ApiError> {
    if !content_type.is_json() {
        return Ok(if body.is_empty() { Vec::new() } else { vec![body] });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return match usage {
            Use::Create => Ok(Vec::new()),
            Use::Append => Err(ApiError::bad_request("the body is empty; send a JSON value")),
        };
    }
    let raw: &RawValue =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    if !raw.get().starts_with('[') {
        return Ok(vec![Bytes::copy_from_slice(raw.get().as_bytes())]);
    }
    let items: Vec<&RawValue> = serde_json::from_str(raw.get())
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    if items.is_empty() && usage == Use::Append {
        return Err(ApiError::bad_request(
            "an empty JSON array appends nothing; send at least one value",
        ));
    }
    Ok(items
        .into_iter()
        .map(|item| Bytes::copy_from_slice(item.get().as_bytes()))
        .collect())
}

/// The body of a read: a JSON array for a JSON stream, the bytes concatenated otherwise.
pub(crate) fn read_body(content_type: &ContentType, messages: &[Bytes]) -> Bytes {
    if content_type.is_json() {
        let len = messages.iter().map(|m| m.len() + 1).sum::<usize>() + 2;
        let mut out = BytesMut::with_capacity(len);
        out.put_u8(b'[');
        for (i, m) in messages.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_slice(m);
        }
        out.put_u8(b']');
        out.freeze()
    } else if messages.len() == 1 {
        messages[0].clone()
    } else {
        messages.concat().into()
    }
}

/// How an SSE response carries a stream's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SseData {
    /// As UTF-8 text (`text/*` and `application/json`).
    Text,
    /// Base64 (every other type), announced by `Stream-SSE-Data-Encoding: base64`.
    Base64,
}

impl SseData {
    /// The encoding for a stream of this content type.
    pub(crate) fn for_type(content_type: &ContentType) -> Self {
        if content_type.is_text() {
            Self::Text
        } else {
            Self::Base64
        }
    }
}

/// Appends one SSE event to `out`: `event: {name}` and one `data:` line per line of `data`.
pub(crate) fn sse_event(out: &mut BytesMut, name: &str, data: &str) {
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_u8(b'\n');
    sse_data_lines(out, data);
}

/// The `data:` lines of an event, and the blank line that ends it.
pub(crate) fn sse_data_lines(out: &mut BytesMut, data: &str) {
    // SSE has no escape: any of CR, LF or CRLF ends a line, so each line of the payload
    // becomes its own `data:` line and the client joins them with LF.
    let mut rest = data;
    loop {
        let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
        // A reader drops one space after the colon, so only a line that starts with a space
        // needs one added.
        out.put_slice(if rest.starts_with(' ') { b"data: " } else { b"data:" });
        out.put_slice(&rest.as_bytes()[..end]);
        out.put_u8(b'\n');
        if end == rest.len() {
            break;
        }
        let skip = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[end + skip..];
    }
    out.put_u8(b'\n');
}

/// The `data` event for a run of messages.
pub(crate) fn sse_data_event(out: &mut BytesMut, content_type: &ContentType, encoding: SseData, messages: &[Bytes]) {
    let body = read_body(content_type, messages);
    match encoding {
        SseData::Base64 => sse_event(out, "data", &base64::engine::general_purpose::STANDARD.encode(&body)),
        SseData::Text => sse_event(out, "data", &String::from_utf8_lossy(&body)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> ContentType {
        ContentType::parse("application/json").unwrap()
    }

    fn strings(messages: Vec<Bytes>) -> Vec<String> {
        messages
            .into_iter()
            .map(|m| String::from_utf8(m.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn json_arrays_flatten_one_level() {
        let cases: [(&str, &[&str]); 4] = [
            (r#"{"event": "created"}"#, &[r#"{"event": "created"}"#]),
            (r#"[{"a":1}, {"b":2}]"#, &[r#"{"a":1}"#, r#"{"b":2}"#]),
            ("[[1,2], [3,4]]", &["[1,2]", "[3,4]"]),
            ("[[[1,2,3]]]", &["[[1,2,3]]"]),
        ];
        for (body, expected) in cases {
            let got = strings(messages(&json(), Bytes::from(body), Use::Append).unwrap());
            assert_eq!(got, expected, "{body}");
        }
    }

    #[test]
    fn empty_and_invalid_json_appends_are_refused() {
        for body in ["[]", " [ ] ", "", "{", "[1,]", "\u{fffd}"] {
            assert!(messages(&json(), Bytes::from(body), Use::Append).is_err(), "{body:?}");
        }
        assert!(messages(&json(), Bytes::from("[]"), Use::Create).unwrap().is_empty());
        assert!(messages(&json(), Bytes::from_static(&[0xff, 0xfe]), Use::Create).is_err());
    }

    #[test]
    fn reads_render_a_json_array_or_the_bytes() {
        let m = [Bytes::from("1"), Bytes::from("{\"a\":2}")];
        assert_eq!(read_body(&json(), &m), Bytes::from("[1,{\"a\":2}]"));
        assert_eq!(read_body(&json(), &[]), Bytes::from("[]"));
        assert_eq!(read_body(&ContentType::octet_stream(), &m), Bytes::from("1{\"a\":2}"));
    }

    #[test]
    fn sse_events_put_every_line_on_its_own_data_line() {
        let mut out = BytesMut::new();
        sse_event(&mut out, "data", "a\r\nb\rc\n d");
        assert_eq!(&out[..], b"event: data\ndata:a\ndata:b\ndata:c\ndata:  d\n\n");
        let mut out = BytesMut::new();
        sse_data_event(
            &mut out,
            &ContentType::octet_stream(),
            SseData::Base64,
            &[Bytes::from_static(&[1, 2, 3])],
        );
        assert_eq!(&out[..], b"event: data\ndata:AQID\n\n");
    }
}
