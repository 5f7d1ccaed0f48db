//! # The protocol's parsing of headers and query parameters
//!
//! Parsing is strict where the protocol is (`Stream-TTL` digits, producer integers up to
//! 2^53-1, one `offset`), and lenient where it asks to be (`Stream-Closed` is present only
//! when it says `true`).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};
use spool_log::stream::{ContentType, Expiry, Offset, Position, ProducerClaim};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

use spool_edge::{
    ApiError,
    headers::{
        PRODUCER_EPOCH, PRODUCER_ID, PRODUCER_SEQ, STREAM_CLOSED, STREAM_EXPIRES_AT, STREAM_FORK_OFFSET,
        STREAM_FORK_SUB_OFFSET, STREAM_FORKED_FROM, STREAM_SEQ, STREAM_TTL,
    },
};

/// The largest integer JavaScript represents exactly; the protocol's bound on producer numbers.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|v| Some(v.trim()))
            .map_err(|_| ApiError::bad_request(format!("header {name} is not visible ASCII"))),
    }
}

/// `Stream-Closed: true` (any case); any other value is as if the header were absent.
pub fn closed_flag(headers: &HeaderMap) -> bool {
    headers
        .get(STREAM_CLOSED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The request's `Content-Type`, if it has one.
pub fn content_type(headers: &HeaderMap) -> Result<Option<ContentType>, ApiError> {
    match text(headers, header::CONTENT_TYPE.as_str())? {
        None | Some("") => Ok(None),
        Some(value) => ContentType::parse(value).map(Some).map_err(ApiError::from),
    }
}

/// `Stream-TTL` and `Stream-Expires-At`, as an expiry rule.
pub fn expiry(headers: &HeaderMap) -> Result<Expiry, ApiError> {
    let ttl = match text(headers, STREAM_TTL)? {
        None => None,
        Some(v) => Some(canonical_integer(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Stream-TTL `{v}` must be a whole number of seconds, without sign or leading zeros"
            ))
        })?),
    };
    let expires_at = match text(headers, STREAM_EXPIRES_AT)? {
        None => None,
        Some(v) => {
            let at = OffsetDateTime::parse(v, &Rfc3339)
                .map_err(|_| ApiError::bad_request(format!("Stream-Expires-At `{v}` is not an RFC 3339 timestamp")))?;
            Some(i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX))
        }
    };
    Ok(Expiry::from_headers(ttl, expires_at)?)
}

/// An RFC 3339 timestamp (UTC, milliseconds) for `Stream-Expires-At`.
pub fn format_rfc3339(unix_ms: i64) -> Option<String> {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000).ok()?;
    at.format(&Rfc3339).ok()
}

/// A non-negative decimal integer with no sign, no leading zero and no fraction.
fn canonical_integer(value: &str) -> Option<u64> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    let canonical = value == "0" || !value.starts_with('0');
    if digits && canonical { value.parse().ok() } else { None }
}

/// The idempotent producer headers: all three or none.
pub fn producer(headers: &HeaderMap) -> Result<Option<ProducerClaim>, ApiError> {
    let id = text(headers, PRODUCER_ID)?;
    let epoch = text(headers, PRODUCER_EPOCH)?;
    let seq = text(headers, PRODUCER_SEQ)?;
    let number = |name: &str, value: &str| {
        value
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_SAFE_INTEGER && value.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| ApiError::bad_request(format!("{name} `{value}` must be an integer from 0 to 2^53-1")))
    };
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ApiError::bad_request("Producer-Id must not be empty"));
            }
            Ok(Some(ProducerClaim {
                id: id.to_owned(),
                epoch: number("Producer-Epoch", epoch)?,
                seq: number("Producer-Seq", seq)?,
            }))
        }
        _ => Err(ApiError::bad_request(
            "give Producer-Id, Producer-Epoch and Producer-Seq together, or none of them",
        )),
    }
}

/// The fork headers of a `PUT`, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkHeaders {
    /// `Stream-Forked-From`: the source's URL path.
    pub source: String,
    /// `Stream-Fork-Offset`.
    pub offset: Option<Offset>,
    /// `Stream-Fork-Sub-Offset` (0 when absent).
    pub sub_offset: u64,
}

/// The fork headers, checked: the offsets need `Stream-Forked-From`, and a non-zero
/// sub-offset needs `Stream-Fork-Offset`.
pub fn fork(headers: &HeaderMap) -> Result<Option<ForkHeaders>, ApiError> {
    let source = text(headers, STREAM_FORKED_FROM)?;
    let offset = text(headers, STREAM_FORK_OFFSET)?;
    let sub_offset = text(headers, STREAM_FORK_SUB_OFFSET)?;
    let Some(source) = source else {
        if offset.is_some() || sub_offset.is_some() {
            return Err(ApiError::bad_request(
                "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
            ));
        }
        return Ok(None);
    };
    let offset = offset.map(str::parse::<Offset>).transpose()?;
    let sub_offset = match sub_offset {
        None => 0,
        Some(v) => canonical_integer(v).ok_or_else(|| {
            ApiError::bad_request(format!("Stream-Fork-Sub-Offset `{v}` must be a non-negative integer"))
        })?,
    };
    if sub_offset > 0 && offset.is_none() {
        return Err(ApiError::bad_request(
            "a Stream-Fork-Sub-Offset needs a Stream-Fork-Offset",
        ));
    }
    Ok(Some(ForkHeaders {
        source: source.to_owned(),
        offset,
        sub_offset,
    }))
}

/// `Stream-Seq`, when given.
pub fn stream_seq(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    Ok(text(headers, STREAM_SEQ)?.map(str::to_owned))
}

/// How a GET reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// Catch-up: what exists now.
    No,
    /// Wait for data, then answer once.
    LongPoll,
    /// Server-sent events until the stream ends or the connection is recycled.
    Sse,
}

/// A GET's query: where to read from, how, and the client's cursor.
#[derive(Debug, Clone)]
pub struct ReadQuery {
    /// Where to start (the start of the stream when absent).
    pub offset: Option<Position>,
    /// The read mode.
    pub live: Live,
    /// The cursor the client echoed.
    pub cursor: Option<String>,
}

impl ReadQuery {
    /// Parses the query string: at most one non-empty `offset`, `live` of `long-poll` or
    /// `sse` (which need an offset), and `cursor`. Unknown parameters are ignored (they may be
    /// an extension's, or a cache-buster).
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let mut offset = None;
        let mut live = Live::No;
        let mut cursor = None;
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match key.as_ref() {
                "offset" => {
                    if offset.is_some() {
                        return Err(ApiError::bad_request("give one offset parameter, not several"));
                    }
                    if value.is_empty() {
                        return Err(ApiError::bad_request("the offset parameter is empty"));
                    }
                    offset = Some(value.parse::<Position>()?);
                }
                "live" => {
                    live = match value.as_ref() {
                        "long-poll" => Live::LongPoll,
                        "sse" => Live::Sse,
                        "" | "false" => Live::No,
                        other => {
                            return Err(ApiError::bad_request(format!(
                                "live=`{other}` is not a read mode; use long-poll or sse"
                            )));
                        }
                    }
                }
                "cursor" => cursor = Some(value.into_owned()),
                _ => {}
            }
        }
        if live != Live::No && offset.is_none() {
            return Err(ApiError::bad_request(
                "live reads need an offset parameter (-1 for the start)",
            ));
        }
        Ok(Self { offset, live, cursor })
    }
}

/// The `after` query parameter of a chat's event stream: a seq, at most once.
pub(crate) fn after_param(query: Option<&str>) -> Result<Option<u64>, ApiError> {
    let mut found = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if key == "after" {
            if found.is_some() {
                return Err(ApiError::bad_request("give `after` at most once"));
            }
            let seq = value
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("`after` must be a seq, not `{value}`")))?;
            found = Some(seq);
        }
    }
    Ok(found)
}

/// The wall clock, in milliseconds since the Unix epoch: the time a [`cursor`] counts from.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The collapsing cursor of a live answer whose next offset is `next` (a message count): the
/// number of 20-second intervals since 2024-10-09T00:00:00Z plus `next`, or, if the client's
/// cursor is not behind that, the client's plus one. A cursor only moves forward, so a CDN
/// never serves one cached answer to a reader forever; and it depends on the client's cursor
/// only when it must, so readers whose cursors differ (who joined at other times, or whose
/// requests reached the origin apart) are given the same cursor by the next answer with new
/// messages, ask for the same next key, and a CDN goes on collapsing them into one request.
/// (The reference server adds random jitter instead, which keeps such readers apart.)
pub fn cursor(client: Option<&str>, now_ms: i64, next: u64) -> String {
    const EPOCH_MS: i64 = 1_728_432_000_000;
    const INTERVAL_S: i64 = 20;
    let current = (now_ms - EPOCH_MS).div_euclid(INTERVAL_S * 1000);
    let candidate = current.saturating_add(i64::try_from(next).unwrap_or(i64::MAX));
    match client.and_then(|c| c.parse::<i64>().ok()) {
        Some(theirs) if theirs >= candidate => theirs.saturating_add(1).to_string(),
        _ => candidate.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn ttl_must_be_canonical_digits() {
        assert_eq!(
            expiry(&headers(&[(STREAM_TTL, "3600")])).unwrap(),
            Expiry::Ttl { seconds: 3600 }
        );
        for bad in ["+3600", "03600", "3600.0", "3.6e3", "-1", ""] {
            assert!(expiry(&headers(&[(STREAM_TTL, bad)])).is_err(), "{bad:?}");
        }
        assert!(
            expiry(&headers(&[
                (STREAM_TTL, "1"),
                (STREAM_EXPIRES_AT, "2030-01-01T00:00:00Z")
            ]))
            .is_err()
        );
    }

    #[test]
    fn expires_at_round_trips_through_rfc3339() {
        let e = expiry(&headers(&[(STREAM_EXPIRES_AT, "2030-01-01T00:00:00.250Z")])).unwrap();
        let Expiry::At { unix_ms } = e else { panic!("{e:?}") };
        assert_eq!(format_rfc3339(unix_ms).unwrap(), "2030-01-01T00:00:00.25Z");
        assert!(expiry(&headers(&[(STREAM_EXPIRES_AT, "tomorrow")])).is_err());
    }

    #[test]
    fn producer_headers_come_together_and_stay_in_range() {
        assert!(producer(&HeaderMap::new()).unwrap().is_none());
        let claim = producer(&headers(&[
            (PRODUCER_ID, "p"),
            (PRODUCER_EPOCH, "1"),
            (PRODUCER_SEQ, "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((claim.epoch, claim.seq), (1, 2));
        assert!(producer(&headers(&[(PRODUCER_ID, "p"), (PRODUCER_EPOCH, "1")])).is_err());
        assert!(
            producer(&headers(&[
                (PRODUCER_ID, ""),
                (PRODUCER_EPOCH, "1"),
                (PRODUCER_SEQ, "0")
            ]))
            .is_err()
        );
        let too_big = (MAX_SAFE_INTEGER + 1).to_string();
        assert!(
            producer(&headers(&[
                (PRODUCER_ID, "p"),
                (PRODUCER_EPOCH, &too_big),
                (PRODUCER_SEQ, "0")
            ]))
            .is_err()
        );
        assert!(
            producer(&headers(&[
                (PRODUCER_ID, "p"),
                (PRODUCER_EPOCH, "-1"),
                (PRODUCER_SEQ, "0")
            ]))
            .is_err()
        );
    }

    #[test]
    fn closed_flag_is_true_only_for_true() {
        assert!(closed_flag(&headers(&[(STREAM_CLOSED, "TRUE")])));
        for other in ["false", "yes", "1", ""] {
            assert!(!closed_flag(&headers(&[(STREAM_CLOSED, other)])), "{other:?}");
        }
    }

    #[test]
    fn queries_need_one_offset_for_live_modes() {
        let q = ReadQuery::parse(Some("offset=now&live=sse&cursor=7")).unwrap();
        assert_eq!(
            (q.offset, q.live, q.cursor.as_deref()),
            (Some(Position::Now), Live::Sse, Some("7"))
        );
        assert!(ReadQuery::parse(Some("live=long-poll")).is_err());
        assert!(ReadQuery::parse(Some("offset=-1&offset=-1")).is_err());
        assert!(ReadQuery::parse(Some("offset=")).is_err());
        assert!(ReadQuery::parse(Some("offset=../x")).is_err());
        assert!(ReadQuery::parse(None).unwrap().offset.is_none());
    }

    #[test]
    fn cursors_only_move_forward() {
        let now = 1_800_000_000_000;
        let current: i64 = cursor(None, now, 5).parse().unwrap();
        assert_eq!(cursor(Some("1"), now, 5), current.to_string());
        // A client at or past the candidate is moved strictly past itself, by one.
        let again: i64 = cursor(Some(&current.to_string()), now, 5).parse().unwrap();
        assert_eq!(again, current + 1);
        // Readers with different cursors are given one cursor by the next answer with news.
        let ahead = (current + 3).to_string();
        let behind = (current - 40).to_string();
        assert_eq!(cursor(Some(&ahead), now, 10), cursor(Some(&behind), now, 10));
        assert_eq!(cursor(Some(&ahead), now, 10), cursor(None, now, 10));
        assert!(cursor(Some(&ahead), now, 10).parse::<i64>().unwrap() > current + 3);
    }
}
