//! # What a client asks for: a subscription's configuration
//!
//! The body of `PUT {stream-url}/__ds/subscriptions/{id}`, validated into a [`Spec`]: who is
//! woken ([`Delivery`]), which streams ([`Spec::pattern`], [`Spec::streams`]) and how long a
//! wake's lease lasts. Its [`Spec::hash`] decides whether a second `PUT` re-confirms (`200`) or
//! conflicts (`409`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{address::is_public, refusal::Refusal};

/// The shortest and longest lease a subscription may ask for, and the default.
pub const MIN_LEASE_MS: u64 = 1_000;
/// The longest lease.
pub const MAX_LEASE_MS: u64 = 600_000;
/// The lease when none is asked for.
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// The most streams one request may name, and the most a subscription links (so its record,
/// with a snapshot of its pending streams, stays far inside a DynamoDB item's 400 KB).
pub const MAX_STREAMS: usize = 100;
/// The most wildcards (`*`, `**`) a pattern may hold.
pub const MAX_WILDCARDS: usize = 8;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1_024;
/// The longest subscription id.
pub const MAX_ID_CHARS: usize = 128;
/// The longest webhook URL.
pub const MAX_URL_BYTES: usize = 2048;
/// The first segment of the paths the protocol keeps for itself.
pub const RESERVED: &str = "__ds";

/// Who a wake goes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Delivery {
    /// A signed `POST` to `url`.
    Webhook {
        /// Where.
        url: String,
    },
    /// A wake event appended to `wake_stream`, for workers that claim.
    PullWake {
        /// The stream (stream-root-relative), which the application creates.
        wake_stream: String,
    },
}

/// A validated subscription configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Who is woken.
    pub delivery: Delivery,
    /// A glob over stream paths: `*` is one segment, `**` any number.
    pub pattern: Option<String>,
    /// Streams named explicitly, sorted, each once.
    pub streams: Vec<String>,
    /// How long a wake's lease lasts.
    pub lease_ttl_ms: u64,
    /// For people.
    pub description: Option<String>,
}

/// The request body as sent.
#[derive(Deserialize)]
struct Body {
    #[serde(rename = "type")]
    kind: Option<String>,
    pattern: Option<String>,
    #[serde(default)]
    streams: Vec<String>,
    webhook: Option<WebhookBody>,
    wake_stream: Option<String>,
    lease_ttl_ms: Option<u64>,
    description: Option<String>,
}

#[derive(Deserialize)]
struct WebhookBody {
    url: String,
}

/// Which webhook URLs a deployment may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlPolicy {
    /// `http://localhost` and `http://127.0.0.x` are allowed: a developer's own machine. Never
    /// on Lambda, whose loopback is its runtime API.
    pub loopback_http: bool,
}

impl Spec {
    /// Parses and validates a `PUT` body.
    pub fn parse(body: &[u8], urls: UrlPolicy) -> Result<Self, Refusal> {
        let body: Body = serde_json::from_slice(body)
            .map_err(|e| Refusal::invalid(format!("the body is not a subscription: {e}")))?;
        let delivery = match body.kind.as_deref() {
            Some("webhook") => {
                let url = body
                    .webhook
                    .ok_or_else(|| Refusal::invalid("a webhook subscription needs webhook.url"))?
                    .url;
                check_webhook_url(&url, urls)?;
                Delivery::Webhook { url }
            }
            Some("pull-wake") => {
                let wake_stream = body
                    .wake_stream
                    .ok_or_else(|| Refusal::invalid("a pull-wake subscription needs wake_stream"))?;
                Delivery::PullWake {
                    wake_stream: check_path(&wake_stream)?,
                }
            }
            Some(other) => {
                return Err(Refusal::invalid(format!(
                    "type `{other}` is not a subscription type; use webhook or pull-wake"
                )));
            }
            None => return Err(Refusal::invalid("a subscription needs a type: webhook or pull-wake")),
        };
        let pattern = body.pattern.map(|p| check_pattern(&p)).transpose()?;
        let streams = check_paths(&body.streams)?;
        if pattern.is_none() && streams.is_empty() {
            return Err(Refusal::invalid("a subscription needs a pattern, streams, or both"));
        }
        let lease_ttl_ms = body.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_MS);
        if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ttl_ms) {
            return Err(Refusal::invalid(format!(
                "lease_ttl_ms must be from {MIN_LEASE_MS} to {MAX_LEASE_MS}"
            )));
        }
        if let Some(d) = &body.description
            && d.chars().count() > MAX_DESCRIPTION_CHARS
        {
            return Err(Refusal::invalid(format!(
                "the description is longer than {MAX_DESCRIPTION_CHARS} characters"
            )));
        }
        Ok(Self {
            delivery,
            pattern,
            streams,
            lease_ttl_ms,
            description: body.description,
        })
    }

    /// The hash a re-confirming `PUT` must match: of the whole normalized configuration.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&canonical);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the pattern matches `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.pattern.as_deref().is_some_and(|p| glob_match(p, path))
    }
}

/// A subscription id: 1 to 128 characters of `A-Z a-z 0-9 . _ -`.
pub fn check_id(id: &str) -> Result<(), Refusal> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Refusal::invalid(format!(
            "a subscription id is 1 to {MAX_ID_CHARS} characters of letters, digits, `.`, `_` and `-`"
        )))
    }
}

/// The first segments of the streams Spool itself writes (chats, workspaces' feeds, the audit
/// stream): their appends do not go through the protocol's routes, so no subscription would
/// ever wake for them. Chats push through chat webhooks instead.
const SPOOLS_OWN: [&str; 3] = ["sessions", "workspaces", "audit"];

/// A stream-root-relative path: leading and trailing `/` dropped, a valid stream path, not in
/// the reserved `__ds` section nor among the streams Spool writes itself.
pub fn check_path(path: &str) -> Result<String, Refusal> {
    let path = path.trim_matches('/');
    crate::stream::StreamPath::parse(path).map_err(|e| Refusal::invalid(format!("stream `{path}`: {e}")))?;
    check_first_segment(path)?;
    Ok(path.to_owned())
}

fn check_first_segment(path: &str) -> Result<(), Refusal> {
    let first = path.split('/').next().unwrap_or_default();
    if first == RESERVED {
        return Err(Refusal::invalid(format!(
            "`{path}` is in the protocol's reserved __ds section, not a stream"
        )));
    }
    if SPOOLS_OWN.contains(&first) {
        return Err(Refusal::invalid(format!(
            "`{path}`: Spool writes its {first} streams itself, not through these routes, so no subscription wakes for them; register a chat webhook (POST /v1/workspaces/{{id}}/webhooks) to hear of chats"
        )));
    }
    Ok(())
}

/// Paths, normalized, sorted and each once; at most [`MAX_STREAMS`].
pub fn check_paths(paths: &[String]) -> Result<Vec<String>, Refusal> {
    if paths.len() > MAX_STREAMS {
        return Err(Refusal::invalid(format!("at most {MAX_STREAMS} streams at once")));
    }
    let mut out = paths.iter().map(|p| check_path(p)).collect::<Result<Vec<_>, _>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

fn check_pattern(pattern: &str) -> Result<String, Refusal> {
    let pattern = pattern.trim_matches('/');
    if pattern.is_empty() || pattern.len() > crate::stream::StreamPath::MAX_LEN {
        return Err(Refusal::invalid("a pattern is 1 to 1024 characters"));
    }
    if pattern.split('/').any(str::is_empty) {
        return Err(Refusal::invalid(format!("pattern `{pattern}` has an empty segment")));
    }
    let wildcards: usize = pattern
        .split('/')
        .map(|segment| {
            if segment == "**" {
                1
            } else {
                segment.matches('*').count()
            }
        })
        .sum();
    if wildcards > MAX_WILDCARDS {
        return Err(Refusal::invalid(format!(
            "pattern `{pattern}` has more than {MAX_WILDCARDS} wildcards"
        )));
    }
    check_first_segment(pattern)?;
    Ok(pattern.to_owned())
}

/// Whether `path` matches `pattern`, segment by segment: `*` matches one segment (and within a
/// segment, any run of characters), `**` any number of segments. Linear in the product of the
/// two lengths (no backtracking), since it runs on every append.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    // matched[j]: pattern[..i] matches path[..j], row by row over i.
    let mut matched = vec![false; path.len() + 1];
    matched[0] = true;
    for token in &pattern {
        let mut next = vec![false; path.len() + 1];
        if *token == "**" {
            let mut any = false;
            for j in 0..=path.len() {
                any |= matched[j];
                next[j] = any;
            }
        } else {
            for j in 1..=path.len() {
                next[j] = matched[j - 1] && segment_match(token, path[j - 1]);
            }
        }
        matched = next;
    }
    matched[path.len()]
}

/// `*` within a segment matches any run of characters (the same table, over characters).
fn segment_match(pattern: &str, segment: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == segment;
    }
    let text: Vec<char> = segment.chars().collect();
    let mut matched = vec![false; text.len() + 1];
    matched[0] = true;
    for c in pattern.chars() {
        let mut next = vec![false; text.len() + 1];
        if c == '*' {
            let mut any = false;
            for j in 0..=text.len() {
                any |= matched[j];
                next[j] = any;
            }
        } else {
            for j in 1..=text.len() {
                next[j] = matched[j - 1] && text[j - 1] == c;
            }
        }
        matched = next;
    }
    matched[text.len()]
}

/// Why an IP literal is refused.
const NOT_PUBLIC: &str = "must not target an address off the public internet (private, loopback, link-local, \
     reserved, or an IPv6 form of one)";

/// Refuses webhook URLs that could reach the deployment's own network (SSRF): only `https`,
/// to a name or a public address ([`is_public`], which also judges every address a name
/// resolves to when it is called); `http` only to the developer's loopback when `urls` allows.
/// It runs when a webhook is made and again before each request, so a literal is judged at
/// delivery by the rule of the day, not the one it was stored under.
pub fn check_webhook_url(raw: &str, urls: UrlPolicy) -> Result<(), Refusal> {
    let rejected = |why: &str| Refusal::new(400, "WEBHOOK_URL_REJECTED", format!("webhook.url {why}"));
    if raw.len() > MAX_URL_BYTES {
        return Err(rejected("is longer than 2048 bytes"));
    }
    let url = url::Url::parse(raw).map_err(|_| rejected("is not a valid URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(rejected("must not carry credentials"));
    }
    let host = url.host().ok_or_else(|| rejected("has no host"))?;
    let loopback = match &host {
        url::Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.octets()[..3] == [127, 0, 0],
        url::Host::Ipv6(_) => false,
    };
    match url.scheme() {
        "http" if loopback && urls.loopback_http => Ok(()),
        "http" => Err(rejected(
            "must use https (http is only for localhost or 127.0.0.x on a developer's machine)",
        )),
        "https" if loopback => Err(rejected("must not target this machine")),
        "https" => match host {
            url::Host::Ipv4(ip) if !is_public(std::net::IpAddr::V4(ip)) => Err(rejected(NOT_PUBLIC)),
            url::Host::Ipv6(ip) if !is_public(std::net::IpAddr::V6(ip)) => Err(rejected(NOT_PUBLIC)),
            url::Host::Domain(name) if name.ends_with(".localhost") || name.ends_with(".internal") => {
                Err(rejected("must not target a local name"))
            }
            _ => Ok(()),
        },
        _ => Err(rejected("must use https")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: UrlPolicy = UrlPolicy { loopback_http: true };
    const PROD: UrlPolicy = UrlPolicy { loopback_http: false };

    #[test]
    fn globs_match_segments() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(!glob_match("events/*", "events"));
        assert!(glob_match("events/**", "events"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("**/x", "a/b/x"));
        assert!(glob_match("e*s/a*", "events/abc"));
        assert!(!glob_match("e*s/a*", "event/abc"));
        assert!(glob_match("a", "a"));
        assert!(!glob_match("a", "b"));
        assert!(glob_match("**", "a/b"));
        assert!(glob_match("a/**/b/**", "a/x/y/b"));
        assert!(!glob_match("a/**/b", "a/x/y"));
        assert!(glob_match("*x*", "axb"));
        // What a backtracking matcher takes exponential time over is answered at once.
        let long = "a".repeat(500);
        assert!(!glob_match("x/*a*a*a*a*a*a*a*a*b", &format!("x/{long}")));
        let deep = vec!["a"; 500].join("/");
        assert!(!glob_match("**/**/**/**/**/**/**/**/z", &deep));
    }

    #[test]
    fn webhook_urls_keep_to_the_public_internet() {
        assert!(check_webhook_url(&format!("https://a.example/{}", "x".repeat(2100)), PROD).is_err());
        for ok in [
            "https://hooks.example.com/x",
            "https://8.8.8.8/hook",
            "https://[2606:4700::1]/",
        ] {
            assert!(check_webhook_url(ok, PROD).is_ok(), "{ok}");
        }
        for ok in ["http://localhost:3000/hook", "http://127.0.0.1:9/hook"] {
            assert!(check_webhook_url(ok, DEV).is_ok(), "{ok}");
            assert!(check_webhook_url(ok, PROD).is_err(), "{ok} on AWS");
        }
        for bad in [
            "http://10.0.0.1/hook",
            "https://10.0.0.1/hook",
            "https://192.168.1.1/",
            "https://172.16.0.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://[::ffff:10.0.0.1]/",
            "https://[::7f00:1]/",
            "https://[2002:c0a8:101::1]/",
            "https://[64:ff9b:1::a00:1]/",
            "https://[fec0::1]/",
            "https://[::ffff:0:127.0.0.1]/",
            "https://[::ffff:0:a9fe:a9fe]/",
            "https://[2001::8000:ffff:80ff:fffe]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://0x7f.1/",
            "https://2852039166/",
            "https://198.18.0.1/",
            "https://100.64.0.1/",
            "https://localhost/",
            "https://a.localhost/",
            "http://example.com/",
            "ftp://example.com/",
            "https://user:pw@example.com/",
            "not a url",
        ] {
            let refused = check_webhook_url(bad, DEV).unwrap_err();
            assert_eq!(refused.code, "WEBHOOK_URL_REJECTED", "{bad}");
        }
    }

    #[test]
    fn specs_are_validated_and_hash_their_whole_configuration() {
        let spec = |body: &str| Spec::parse(body.as_bytes(), DEV);
        let a = spec(r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://127.0.0.1:1/h"}}"#).unwrap();
        assert_eq!(a.lease_ttl_ms, DEFAULT_LEASE_MS);
        let b = spec(
            r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://127.0.0.1:1/h"},"lease_ttl_ms":30000}"#,
        )
        .unwrap();
        assert_eq!(a.hash(), b.hash());
        let c = spec(
            r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://127.0.0.1:1/h"},"description":"x"}"#,
        )
        .unwrap();
        assert_ne!(a.hash(), c.hash());
        let d = spec(r#"{"type":"pull-wake","streams":["/b/","a","b"],"wake_stream":"w"}"#).unwrap();
        assert_eq!(d.streams, ["a", "b"]);
        for bad in [
            r#"{"type":"webhook","pattern":"e/*"}"#,
            r#"{"type":"pull-wake","pattern":"e/*"}"#,
            r#"{"type":"webhook","webhook":{"url":"http://127.0.0.1/h"}}"#,
            r#"{"type":"pull","pattern":"e/*","wake_stream":"w"}"#,
            r#"{"type":"pull-wake","pattern":"e/*","wake_stream":"w","lease_ttl_ms":10}"#,
            r#"{"type":"pull-wake","pattern":"e//x","wake_stream":"w"}"#,
            r#"{"type":"pull-wake","streams":["__ds/x"],"wake_stream":"w"}"#,
            r#"{"type":"pull-wake","pattern":"e/*","wake_stream":"__ds"}"#,
            r#"{"type":"pull-wake","pattern":"sessions/*","wake_stream":"w"}"#,
            r#"{"type":"pull-wake","pattern":"e/*","wake_stream":"audit"}"#,
            r#"{"type":"pull-wake","pattern":"*a*a*a*a*a*a*a*a*a*","wake_stream":"w"}"#,
            r#"{"type":"pull-wake","streams":["workspaces/ws_1/feed"],"wake_stream":"w"}"#,
            "[]",
        ] {
            assert_eq!(spec(bad).unwrap_err().status, 400, "{bad}");
        }
        assert!(check_id("sub-1.a_b").is_ok());
        assert!(check_id("").is_err());
        assert!(check_id("a/b").is_err());
    }
}
