//! # Streams: names, positions and the shapes of requests and answers
//!
//! Types here parse and validate on construction, so a value that exists is valid: a
//! [`StreamPath`] is a usable path, an [`Offset`] is one this log could have issued.

use std::{fmt, str::FromStr};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A stream's address, e.g. `sessions/01J…` or `chat/demo`.
///
/// 1 to 1024 bytes of `/`-separated segments; no empty, `.` or `..` segment and no control
/// character, so a path is safe to use in a storage key or a file name as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StreamPath(String);

impl StreamPath {
    /// The longest path accepted, in bytes.
    pub const MAX_LEN: usize = 1024;

    /// Validates a stream path.
    pub fn parse(path: impl Into<String>) -> Result<Self, Error> {
        let path = path.into();
        let bad = |reason: &str| Err(Error::invalid("stream path", format!("`{path}`: {reason}")));
        if path.is_empty() {
            return bad("it is empty");
        }
        if path.len() > Self::MAX_LEN {
            return bad("it is longer than 1024 bytes");
        }
        if path.chars().any(char::is_control) {
            return bad("it contains a control character");
        }
        if path.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return bad("it has an empty, `.` or `..` segment");
        }
        Ok(Self(path))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stream `rel` names in organization `org`'s namespace: `o/{org}/{rel}`, where every
    /// stream a client names lives (so one organization cannot name another's).
    pub fn in_org(org: &str, rel: &str) -> Result<Self, Error> {
        Self::parse(format!("o/{org}/{rel}"))
    }

    /// The organization and the organization's own path, for a path in an organization's
    /// namespace ([`Self::in_org`]).
    pub fn org_and_rel(&self) -> Option<(&str, &str)> {
        self.0.strip_prefix("o/")?.split_once('/')
    }
}

impl fmt::Display for StreamPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for StreamPath {
    type Error = Error;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<StreamPath> for String {
    fn from(value: StreamPath) -> Self {
        value.0
    }
}

/// A stream's MIME content type, kept as given and compared by its essence (type/subtype,
/// lower-cased, parameters dropped), so `application/json; charset=utf-8` matches
/// `application/json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContentType(String);

impl ContentType {
    /// The content type of a stream created without one.
    pub const OCTET_STREAM: &'static str = "application/octet-stream";

    /// Validates a content type: `type/subtype[; params]`, printable ASCII, at most 256 bytes.
    pub fn parse(value: impl Into<String>) -> Result<Self, Error> {
        let value = value.into().trim().to_owned();
        let essence = value.split(';').next().unwrap_or_default().trim();
        let valid_token = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        let ok = value.len() <= 256
            && value.bytes().all(|b| (0x20..0x7f).contains(&b))
            && matches!(essence.split_once('/'), Some((t, s)) if valid_token(t) && valid_token(s));
        if !ok {
            return Err(Error::invalid("content type", format!("`{value}` is not a MIME type")));
        }
        Ok(Self(value))
    }

    /// `application/octet-stream`.
    pub fn octet_stream() -> Self {
        Self(Self::OCTET_STREAM.to_owned())
    }

    /// The content type as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lower-cased `type/subtype`, without parameters.
    pub fn essence(&self) -> String {
        self.0.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
    }

    /// True for `application/json`, whose streams keep message boundaries.
    pub fn is_json(&self) -> bool {
        self.essence() == "application/json"
    }

    /// True for `text/*` and `application/json`, whose bytes SSE carries as text.
    pub fn is_text(&self) -> bool {
        let essence = self.essence();
        essence.starts_with("text/") || essence == "application/json"
    }
}

impl PartialEq for ContentType {
    fn eq(&self, other: &Self) -> bool {
        self.essence() == other.essence()
    }
}

impl Eq for ContentType {}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ContentType {
    type Error = Error;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<ContentType> for String {
    fn from(value: ContentType) -> Self {
        value.0
    }
}

/// A position in a stream: the number of messages before it, which is also the sequence number
/// of the last message before it (messages are numbered 1, 2, 3, … with no gap).
///
/// On the wire an offset reads `EEEEEEEEEEEEEEEE_SSSSSSSSSSSSSSSS`: a storage epoch (reserved
/// for retention and compaction, always zero today) and the sequence number, each as 16
/// zero-padded decimal digits. Clients must treat it as opaque; it sorts lexicographically in
/// stream order, and the start of a stream, `0000000000000000_0000000000000000`, is also what
/// the protocol's `-1` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(u64);

impl Offset {
    /// The start of every stream.
    pub const START: Offset = Offset(0);
    /// The largest sequence number an offset can carry (16 decimal digits).
    pub const MAX_SEQ: u64 = 9_999_999_999_999_999;

    /// The position right after message `seq`.
    pub fn after(seq: u64) -> Self {
        Self(seq)
    }

    /// The sequence number of the last message before this position (0 at the start).
    pub fn seq(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016}_{:016}", 0, self.0)
    }
}

impl FromStr for Offset {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| Error::InvalidOffset {
            value: value.chars().take(64).collect(),
            reason,
        };
        if value == "-1" {
            return Ok(Self::START);
        }
        let (epoch, seq) = value
            .split_once('_')
            .ok_or_else(|| invalid("expected EPOCH_SEQUENCE"))?;
        let digits = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(epoch) || !digits(seq) {
            return Err(invalid("expected two 16-digit fields"));
        }
        if epoch.bytes().any(|b| b != b'0') {
            return Err(invalid("unknown storage epoch"));
        }
        seq.parse().map(Self).map_err(|_| invalid("sequence out of range"))
    }
}

/// Where a read starts: a known offset, or the tail at the time of the request (`now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Right after this offset's message.
    At(Offset),
    /// The current tail: nothing that exists now, only what comes after.
    Now,
}

impl Position {
    /// The start of the stream (`-1`).
    pub const START: Position = Position::At(Offset::START);
}

impl FromStr for Position {
    type Err = Error;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value == "now" {
            Ok(Self::Now)
        } else {
            value.parse().map(Self::At)
        }
    }
}

/// When a stream stops existing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expiry {
    /// Never.
    #[default]
    Never,
    /// After this many seconds without a read or write (a sliding window).
    Ttl {
        /// The window, in seconds.
        seconds: u64,
    },
    /// At this instant.
    At {
        /// Milliseconds since the Unix epoch.
        unix_ms: i64,
    },
}

impl Expiry {
    /// The longest TTL accepted: 100 years, far beyond any use and far from overflow.
    pub const MAX_TTL_SECONDS: u64 = 100 * 365 * 24 * 3600;

    /// Builds an expiry from the protocol's two optional headers; giving both is an error.
    pub fn from_headers(ttl_seconds: Option<u64>, expires_at_ms: Option<i64>) -> Result<Self, Error> {
        match (ttl_seconds, expires_at_ms) {
            (Some(_), Some(_)) => Err(Error::invalid(
                "expiry",
                "give either Stream-TTL or Stream-Expires-At, not both",
            )),
            (Some(seconds), None) if seconds > Self::MAX_TTL_SECONDS => Err(Error::invalid(
                "expiry",
                format!("a TTL of {seconds} s is over 100 years"),
            )),
            (Some(seconds), None) => Ok(Self::Ttl { seconds }),
            (None, Some(unix_ms)) => Ok(Self::At { unix_ms }),
            (None, None) => Ok(Self::Never),
        }
    }

    /// When a stream last touched at `touched_ms` expires, if ever.
    pub fn deadline_ms(self, touched_ms: i64) -> Option<i64> {
        match self {
            Self::Never => None,
            Self::Ttl { seconds } => Some(touched_ms.saturating_add((seconds as i64).saturating_mul(1000))),
            Self::At { unix_ms } => Some(unix_ms),
        }
    }
}

/// A message's sequence numbers `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeqRange {
    /// The first message's sequence number.
    pub first: u64,
    /// The last message's sequence number.
    pub last: u64,
}

impl SeqRange {
    /// Number of messages in the range.
    pub fn len(self) -> u64 {
        self.last + 1 - self.first
    }

    /// Always false: a range holds at least one message.
    pub fn is_empty(self) -> bool {
        false
    }

    /// True when `seq` falls in the range.
    pub fn contains(self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq)
    }
}

/// An idempotent producer's claim on an append: `Producer-Id`, `-Epoch` and `-Seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerClaim {
    /// The producer's stable id (non-empty).
    pub id: String,
    /// The producer's epoch; a restarted producer bumps it.
    pub epoch: u64,
    /// The batch's sequence number within the epoch, from 0.
    pub seq: u64,
}

/// What a stream answers an idempotent producer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerAck {
    /// The producer's epoch.
    pub epoch: u64,
    /// The highest sequence number accepted for this producer and epoch.
    pub seq: u64,
    /// The sequence number of the last message of the producer's last accepted batch: for a
    /// retry, where the first attempt's messages end (the stream may have moved on since).
    pub last_seq: u64,
}

/// A request to create a stream.
#[derive(Debug, Clone)]
pub struct CreateStream {
    /// The stream's content type.
    pub content_type: ContentType,
    /// When the stream stops existing.
    pub expiry: Expiry,
    /// Create it already closed: `initial` is its whole content.
    pub closed: bool,
    /// Messages the stream starts with (after any inherited ones, for a fork).
    pub initial: Vec<Bytes>,
    /// Create a fork of another stream instead of an empty one.
    pub fork: Option<ForkRequest>,
}

/// A request to fork a stream: the new stream starts with the source's messages up to a point,
/// then goes its own way. Nothing is copied: the fork reads the inherited messages from the
/// source's storage, which is kept while any fork needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRequest {
    /// The stream to fork.
    pub source: StreamPath,
    /// Where the fork diverges (the source's tail when `None`).
    pub offset: Option<Offset>,
    /// How far past `offset` the fork inherits: messages of a JSON stream, bytes of the next
    /// message of any other stream (which the fork then holds as its own first message).
    pub sub_offset: u64,
    /// The fork's content type; the source's when `None` (a different one is a conflict).
    pub content_type: Option<ContentType>,
    /// The fork's expiry; the source's rule when `None`.
    pub expiry: Option<Expiry>,
}

impl CreateStream {
    /// An open, empty stream of this content type that never expires.
    pub fn new(content_type: ContentType) -> Self {
        Self {
            content_type,
            expiry: Expiry::Never,
            closed: false,
            initial: Vec::new(),
            fork: None,
        }
    }
}

/// The result of a create: a new stream, or an existing one with the same configuration.
#[derive(Debug, Clone)]
pub enum Created {
    /// The stream was created.
    New(StreamMeta),
    /// A stream with exactly this configuration already existed; nothing changed.
    Existing(StreamMeta),
}

impl Created {
    /// The stream's metadata either way.
    pub fn meta(&self) -> &StreamMeta {
        match self {
            Self::New(meta) | Self::Existing(meta) => meta,
        }
    }
}

/// A request to append to a stream, close it, or both at once.
#[derive(Debug, Clone, Default)]
pub struct Append {
    /// The messages, in order (a batch); empty only for a close.
    pub messages: Vec<Bytes>,
    /// The content type the writer believes the stream has; checked when given.
    pub content_type: Option<ContentType>,
    /// A writer sequence (`Stream-Seq`) that must be greater than the last one accepted.
    pub stream_seq: Option<String>,
    /// An idempotent producer's claim.
    pub producer: Option<ProducerClaim>,
    /// Close the stream after these messages, atomically.
    pub close: bool,
    /// Append only if the stream's tail is this sequence number ([`Error::TailMismatch`]
    /// otherwise), so a writer that numbers its messages itself (the chat events' `seq`) knows
    /// the numbers it wrote are the ones they got. Checked after an idempotent producer's retry
    /// is recognised.
    pub expected_tail: Option<u64>,
}

impl Append {
    /// Appends these messages.
    pub fn messages(messages: impl IntoIterator<Item = Bytes>) -> Self {
        Self {
            messages: messages.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Appends one message.
    pub fn one(message: impl Into<Bytes>) -> Self {
        Self::messages([message.into()])
    }

    /// Closes the stream without appending.
    pub fn close_only() -> Self {
        Self {
            close: true,
            ..Self::default()
        }
    }

    /// Total size of the messages in bytes.
    pub fn size(&self) -> usize {
        self.messages.iter().map(Bytes::len).sum()
    }
}

/// The answer to an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendAck {
    /// The stream's tail after the append.
    pub next_offset: Offset,
    /// The messages this append was given, if it appended any.
    pub appended: Option<SeqRange>,
    /// The stream is closed (by this request or before it).
    pub closed: bool,
    /// An idempotent producer's retry: acknowledged without appending anything again.
    pub duplicate: bool,
    /// Producer state to echo to an idempotent producer.
    pub producer: Option<ProducerAck>,
}

/// A stream's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMeta {
    /// The stream's path.
    pub path: StreamPath,
    /// Its content type.
    pub content_type: ContentType,
    /// The offset after its last message.
    pub tail: Offset,
    /// Whether it is closed.
    pub closed: bool,
    /// Its expiry rule.
    pub expiry: Expiry,
    /// When it expires, if it does (for a TTL, as of the last read or write).
    pub expires_at_ms: Option<i64>,
    /// When it was created.
    pub created_ms: i64,
    /// Messages up to this offset are sealed into immutable pages.
    pub sealed: Offset,
}

/// A run of messages read from a stream.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The storage id of this incarnation of the stream: differs between a stream and one
    /// created again at the same path (it goes into ETags).
    pub stream_id: String,
    /// The stream's content type.
    pub content_type: ContentType,
    /// Where the read started (the tail, for a read from `now`).
    pub start: Offset,
    /// The messages after `start`, in order.
    pub messages: Vec<Bytes>,
    /// Where the next read should start.
    pub next_offset: Offset,
    /// The read reached the tail as it was when the read ran.
    pub up_to_date: bool,
    /// The stream is closed and the read reached its final offset: end of stream.
    pub closed: bool,
    /// Every message came from a sealed page: the same request always gets the same answer.
    pub immutable: bool,
}

/// How much of a stream's hot tail sealing turns into pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealMode {
    /// Only full pages: what the background sealer does while a stream is written.
    Full,
    /// Everything, the last page short if need be: when the stream has closed.
    Final,
    /// `Final` if the stream's tail is still `tail` (nothing came since a chat went quiet, so
    /// it is idle: [`crate::port::StreamSealer::seal_when_idle`]), else `Full`.
    Idle {
        /// The tail the stream had when it went quiet.
        tail: Offset,
        /// The token of the chain of idle checks this one belongs to, on a backend whose
        /// checks arm one another (AWS): a check whose chain the stream no longer names was
        /// superseded by a newer one and arms no next check.
        chain: Option<u64>,
    },
}

/// What a sealing pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Pages this pass wrote.
    pub written: Vec<SeqRange>,
    /// Pages an interrupted earlier pass had written, which this pass recorded.
    pub adopted: Vec<SeqRange>,
    /// Messages up to here are sealed.
    pub sealed_through: Offset,
    /// The stream's tail when the pass looked.
    pub tail: Offset,
    /// Whether the stream was closed then.
    pub closed: bool,
}

#[cfg(test)]
mod tests;
