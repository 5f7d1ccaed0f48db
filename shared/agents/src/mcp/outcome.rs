//! A tool call's result as Spool keeps it: the `tool_end` event's `result` (which the model
//! reads back as JSON text in its next request, as it reads every tool result).
//!
//! - **Text** blocks are joined, and cut at [`MAX_TEXT_BYTES`] with the cut said in `cut`.
//! - **Structured content** is kept as it came (`structured_content`) up to the same size;
//!   past it, it is left out and `cut` says so (servers repeat it as text, which is kept).
//! - **Images and audio are described, not passed**: a tool result reaches both providers as
//!   the text of a tool message (OpenAI's `tool` role takes text only), and an image's bytes
//!   would bloat every event and request after it. The model reads a line naming the media
//!   type and size; `images` lists them for the timeline.
//! - **Embedded resources**: their text is kept (with their URI), a blob is described; a
//!   resource link is named.
//! - A result the server marks `isError` is the call's error (the model reads it as one).
//!
//! Every secret of the server (a header's or an env variable's value) is replaced before
//! anything is kept: a server may echo its environment (`get-env`).

use serde_json::{Map, Value, json};

use super::scrub;

/// The most text of one result kept, in bytes.
pub const MAX_TEXT_BYTES: usize = 32 * 1024;

/// A call's result, as the events keep it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The `tool_end` result.
    pub result: Value,
    /// The tool's own error, when the server marked the result as one.
    pub error: Option<String>,
}

impl Outcome {
    /// The outcome of a `CallToolResult` (as JSON), without any of `secrets`.
    pub fn of(result: &Value, secrets: &[String]) -> Self {
        let mut lines: Vec<String> = Vec::new();
        let mut images = Vec::new();
        for block in result["content"].as_array().into_iter().flatten() {
            match block["type"].as_str().unwrap_or_default() {
                "text" => lines.push(block["text"].as_str().unwrap_or_default().to_owned()),
                kind @ ("image" | "audio") => {
                    let mime = block["mimeType"].as_str().unwrap_or("unknown").to_owned();
                    let bytes = block["data"].as_str().map_or(0, |d| d.len() / 4 * 3);
                    lines.push(format!(
                        "[{kind} ({mime}, about {bytes} bytes): not shown to the model]"
                    ));
                    images.push(json!({ "type": kind, "mime_type": mime, "bytes": bytes }));
                }
                "resource" => {
                    let resource = &block["resource"];
                    let uri = resource["uri"].as_str().unwrap_or_default();
                    match resource["text"].as_str() {
                        Some(text) => lines.push(format!("[resource {uri}]\n{text}")),
                        None => lines.push(format!("[resource {uri}: binary, not shown to the model]")),
                    }
                }
                "resource_link" => {
                    let uri = block["uri"].as_str().unwrap_or_default();
                    let name = block["name"].as_str().unwrap_or_default();
                    lines.push(format!("[resource link {uri} ({name})]"));
                }
                other => lines.push(format!("[content of type `{other}`: not shown to the model]")),
            }
        }
        let (text, text_cut) = cap(&scrub(&lines.join("\n"), secrets));
        let mut out = Map::new();
        out.insert("text".to_owned(), Value::String(text.clone()));
        let mut cuts = Vec::new();
        if let Some(total) = text_cut {
            cuts.push(format!(
                "the text was {total} bytes; only its first {MAX_TEXT_BYTES} are kept"
            ));
        }
        if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
            let raw = scrub(&structured.to_string(), secrets);
            if raw.len() > MAX_TEXT_BYTES {
                cuts.push(format!(
                    "the structured content was {} bytes (over {MAX_TEXT_BYTES}) and was left out",
                    raw.len()
                ));
            } else {
                let kept = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
                out.insert("structured_content".to_owned(), kept);
            }
        }
        if !images.is_empty() {
            out.insert("images".to_owned(), Value::Array(images));
        }
        if !cuts.is_empty() {
            out.insert("cut".to_owned(), Value::String(cuts.join("; ")));
        }
        let error = (result["isError"] == Value::Bool(true)).then(|| {
            if text.trim().is_empty() {
                "the tool reported an error".to_owned()
            } else {
                text
            }
        });
        Self {
            result: Value::Object(out),
            error,
        }
    }
}

/// `text` cut to [`MAX_TEXT_BYTES`] on a character's boundary, and its length if it was cut.
fn cap(text: &str) -> (String, Option<usize>) {
    if text.len() <= MAX_TEXT_BYTES {
        return (text.to_owned(), None);
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), Some(text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_capped_and_the_cap_is_said() {
        // GIVEN a result of 40 KiB of text (multi-byte characters at the cut)
        let long = "é".repeat(20 * 1024);
        let result = json!({ "content": [{ "type": "text", "text": long }] });
        // WHEN it is kept
        let outcome = Outcome::of(&result, &[]);
        // THEN at most 32 KiB of it, with the cut said
        let text = outcome.result["text"].as_str().unwrap();
        assert!(text.len() <= MAX_TEXT_BYTES && text.len() > MAX_TEXT_BYTES - 4);
        assert!(outcome.result["cut"].as_str().unwrap().contains("40960 bytes"));
        assert_eq!(outcome.error, None);
    }

    #[test]
    fn images_are_described_structured_content_kept_and_secrets_replaced() {
        let result = json!({
            "content": [
                { "type": "text", "text": "token=s3cr3t-value" },
                { "type": "image", "mimeType": "image/png", "data": "aGVsbG8h" },
            ],
            "structuredContent": { "echo": "s3cr3t-value", "n": 3 },
        });
        let outcome = Outcome::of(&result, &["s3cr3t-value".to_owned()]);
        assert!(!outcome.result.to_string().contains("s3cr3t"));
        assert_eq!(outcome.result["structured_content"]["n"], 3);
        assert_eq!(outcome.result["images"][0]["mime_type"], "image/png");
        assert!(
            outcome.result["text"]
                .as_str()
                .unwrap()
                .contains("[image (image/png, about 6 bytes): not shown to the model]")
        );
        assert!(!outcome.result.to_string().contains("aGVsbG8h"));
    }

    #[test]
    fn an_error_result_is_the_calls_error() {
        let result = json!({ "content": [{ "type": "text", "text": "no such file" }], "isError": true });
        assert_eq!(Outcome::of(&result, &[]).error.as_deref(), Some("no such file"));
    }
}
