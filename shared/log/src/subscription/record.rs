//! # A subscription's stored record and its transitions
//!
//! Everything here is pure: the service reads the linked streams' tails, calls these, and
//! saves the record with compare-and-set, so two processes never both open or end a wake.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{refusal::Refusal, spec::Spec};
use crate::stream::Offset;

/// The linked streams' tails (message counts), by stream-root-relative path.
pub type Tails = BTreeMap<String, u64>;

/// A subscription as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The client's id for it.
    pub id: String,
    /// Its configuration.
    pub spec: Spec,
    /// [`Spec::hash`] when it was made.
    pub hash: String,
    /// The stream root's absolute URL, ending in `/` (callback and JWKS URLs are under it).
    pub root_url: String,
    /// When it was made (ms since the Unix epoch).
    pub created_ms: i64,
    /// The linked streams.
    pub links: BTreeMap<String, Link>,
    /// The last wake's generation (0: none yet).
    pub generation: u64,
    /// The open wake, if any.
    pub wake: Option<Wake>,
    /// Webhook deliveries of the open wake that failed in a row.
    #[serde(default)]
    pub failures: u32,
    /// When the next webhook attempt is due, after a failure.
    #[serde(default)]
    pub next_attempt_ms: Option<i64>,
}

/// A linked stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Named in `streams`.
    pub explicit: bool,
    /// Matched by the pattern.
    pub glob: bool,
    /// How many of its messages are processed (its acked offset).
    pub acked: u64,
}

/// An open wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    /// Unique per wake.
    pub id: String,
    /// The tails sent with it (a webhook's `done: true` acks these).
    #[serde(default)]
    pub snapshot: Tails,
    /// The pull-wake worker that claimed it.
    #[serde(default)]
    pub holder: Option<String>,
    /// Until when its lease holds (ms); none before a webhook is delivered or a worker claims.
    #[serde(default)]
    pub lease_until_ms: Option<i64>,
    /// Its webhook was delivered, or its wake event appended.
    #[serde(default)]
    pub delivered: bool,
    /// When it was opened (ms since the Unix epoch).
    #[serde(default)]
    pub opened_ms: i64,
}

/// One stream of a wake or a claim, as the protocol shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamInfo {
    /// The stream.
    pub path: String,
    /// `explicit` or `glob`.
    pub link_type: &'static str,
    /// Processed up to here.
    pub acked_offset: String,
    /// Its tail.
    pub tail_offset: String,
    /// `tail_offset` is past `acked_offset`.
    pub has_pending: bool,
}

/// An ack a worker sends: this stream is processed up to `offset`.
#[derive(Debug, Clone, Deserialize)]
pub struct Ack {
    /// The stream (the protocol's name).
    #[serde(default)]
    pub stream: Option<String>,
    /// The same, by its other name.
    #[serde(default)]
    pub path: Option<String>,
    /// The offset, inclusive.
    pub offset: String,
}

impl Link {
    fn kind(&self) -> &'static str {
        if self.explicit { "explicit" } else { "glob" }
    }
}

impl Subscription {
    /// A new subscription.
    pub fn new(id: String, spec: Spec, root_url: String, created_ms: i64) -> Self {
        Self {
            id,
            hash: spec.hash(),
            spec,
            root_url,
            created_ms,
            links: BTreeMap::new(),
            generation: 0,
            wake: None,
            failures: 0,
            next_attempt_ms: None,
        }
    }

    /// Whether an append to `path` concerns this subscription.
    pub fn watches(&self, path: &str) -> bool {
        self.spec.matches(path) || self.links.get(path).is_some_and(|l| l.explicit)
    }

    /// Links `path` (explicitly, or by the pattern) at `at` if it is not linked; `true` if the
    /// record changed. A subscription links [`super::spec::MAX_STREAMS`] streams at most.
    pub fn link(&mut self, path: &str, explicit: bool, at: u64) -> Result<bool, Refusal> {
        if let Some(link) = self.links.get_mut(path) {
            let before = *link;
            link.explicit |= explicit;
            link.glob |= !explicit;
            return Ok(*link != before);
        }
        if self.links.len() >= super::spec::MAX_STREAMS {
            return Err(Refusal::new(
                409,
                "TOO_MANY_STREAMS",
                format!(
                    "subscription `{}` links {} streams, the most it may; remove some first",
                    self.id,
                    super::spec::MAX_STREAMS
                ),
            ));
        }
        self.links.insert(
            path.to_owned(),
            Link {
                explicit,
                glob: !explicit,
                acked: at,
            },
        );
        Ok(true)
    }

    /// Streams that were deleted and made again start over: a link whose stream's tail is
    /// below its acked offset is acked at the start. `true` if one was.
    pub fn restart_recreated(&mut self, tails: &Tails) -> bool {
        let mut changed = false;
        for (path, link) in &mut self.links {
            if tails.get(path).is_some_and(|tail| *tail < link.acked) {
                link.acked = 0;
                changed = true;
            }
        }
        changed
    }

    /// The tails of the linked streams with pending messages (what a wake's snapshot keeps).
    pub fn pending_tails(&self, tails: &Tails) -> Tails {
        self.links
            .iter()
            .filter_map(|(path, link)| tails.get(path).filter(|t| **t > link.acked).map(|t| (path.clone(), *t)))
            .collect()
    }

    /// Removes `path`'s explicit link; a stream the pattern matches stays linked by it.
    pub fn unlink_explicit(&mut self, path: &str) {
        let matches = self.spec.matches(path);
        if let Some(link) = self.links.get_mut(path) {
            link.explicit = false;
            link.glob |= matches;
            if !link.glob {
                self.links.remove(path);
            }
        }
    }

    /// Whether a linked stream has messages past its acked offset.
    pub fn pending(&self, tails: &Tails) -> bool {
        self.links
            .iter()
            .any(|(path, link)| tails.get(path).is_some_and(|tail| *tail > link.acked))
    }

    /// The linked streams as the protocol shows them, with `tails`.
    pub fn infos(&self, tails: &Tails) -> Vec<StreamInfo> {
        self.links
            .iter()
            .map(|(path, link)| {
                let tail = tails.get(path).copied().unwrap_or(link.acked).max(link.acked);
                StreamInfo {
                    path: path.clone(),
                    link_type: link.kind(),
                    acked_offset: Offset::after(link.acked).to_string(),
                    tail_offset: Offset::after(tail).to_string(),
                    has_pending: tail > link.acked,
                }
            })
            .collect()
    }

    /// Opens a new wake (the next generation) at `now_ms`.
    pub fn open_wake(&mut self, now_ms: i64) -> u64 {
        self.generation += 1;
        self.wake = Some(Wake {
            id: format!("w_{}", uuid::Uuid::now_v7().simple()),
            snapshot: Tails::new(),
            holder: None,
            lease_until_ms: None,
            delivered: false,
            opened_ms: now_ms,
        });
        self.failures = 0;
        self.next_attempt_ms = None;
        self.generation
    }

    /// Ends the open wake; opens the next one if work is pending, and says whether it did.
    pub fn end_wake(&mut self, tails: &Tails, now_ms: i64) -> bool {
        self.wake = None;
        self.failures = 0;
        self.next_attempt_ms = None;
        if self.pending(tails) {
            self.open_wake(now_ms);
            true
        } else {
            false
        }
    }

    /// Checks that a request is for the open wake: `token_generation` (from its token),
    /// `generation` and `wake_id` (from its body) must all name it.
    pub fn fence(&self, token_generation: u64, generation: Option<u64>, wake_id: Option<&str>) -> Result<(), Refusal> {
        let open = self.wake.as_ref().is_some_and(|w| Some(w.id.as_str()) == wake_id);
        if open && token_generation == self.generation && generation == Some(self.generation) {
            Ok(())
        } else {
            Err(Refusal::fenced())
        }
    }

    /// Applies acks, all or none: each names a linked stream and an offset from its acked
    /// offset to its tail.
    pub fn apply_acks(&mut self, acks: &[Ack], tails: &Tails) -> Result<(), Refusal> {
        let bad = |message: String| Refusal::new(409, "INVALID_OFFSET", message);
        let mut moves = Vec::with_capacity(acks.len());
        for ack in acks {
            let path = ack
                .stream
                .as_deref()
                .or(ack.path.as_deref())
                .unwrap_or("")
                .trim_matches('/');
            let link = self
                .links
                .get(path)
                .ok_or_else(|| bad(format!("`{path}` is not a stream of this subscription")))?;
            let offset: Offset = ack
                .offset
                .parse()
                .map_err(|_| bad(format!("`{}` is not an offset this server gave", ack.offset)))?;
            if offset.seq() < link.acked {
                return Err(bad(format!("{} is before the acked offset of `{path}`", ack.offset)));
            }
            if offset.seq() > tails.get(path).copied().unwrap_or(link.acked) {
                return Err(bad(format!("{} is past the tail of `{path}`", ack.offset)));
            }
            moves.push((path.to_owned(), offset.seq()));
        }
        for (path, offset) in moves {
            if let Some(link) = self.links.get_mut(&path) {
                link.acked = offset;
            }
        }
        Ok(())
    }

    /// Acks what the open wake's snapshot holds (a webhook answered `done: true`).
    pub fn ack_snapshot(&mut self) {
        let Some(wake) = &self.wake else { return };
        for (path, tail) in &wake.snapshot {
            if let Some(link) = self.links.get_mut(path) {
                link.acked = link.acked.max(*tail);
            }
        }
    }

    /// `failed` while a webhook retry is scheduled, else `active`.
    pub fn status(&self) -> &'static str {
        if self.failures > 0 { "failed" } else { "active" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subscription::spec::{Spec, UrlPolicy};

    fn sub() -> Subscription {
        let spec = Spec::parse(
            br#"{"type":"pull-wake","pattern":"events/*","streams":["manual"],"wake_stream":"wake"}"#,
            UrlPolicy { loopback_http: true },
        )
        .unwrap();
        let mut sub = Subscription::new("s".into(), spec, "http://h/v1/stream/".into(), 0);
        sub.link("manual", true, 0).unwrap();
        sub
    }

    fn tails(pairs: &[(&str, u64)]) -> Tails {
        pairs.iter().map(|(p, t)| ((*p).to_owned(), *t)).collect()
    }

    #[test]
    fn a_wake_opens_on_pending_work_and_the_next_one_when_work_remains() {
        let mut s = sub();
        assert!(s.link("events/a", false, 3).unwrap());
        assert!(
            !s.link("events/a", false, 9).unwrap(),
            "already linked: its acked offset stays"
        );
        assert!(!s.pending(&tails(&[("events/a", 3)])));
        assert!(s.pending(&tails(&[("events/a", 4)])));
        assert_eq!(s.open_wake(0), 1);
        let wake = s.wake.clone().unwrap();
        assert!(s.fence(1, Some(1), Some(&wake.id)).is_ok());
        assert_eq!(s.fence(1, Some(0), Some(&wake.id)).unwrap_err().code, "FENCED");
        assert_eq!(s.fence(0, Some(1), Some(&wake.id)).unwrap_err().code, "FENCED");
        assert_eq!(s.fence(1, Some(1), Some("w_other")).unwrap_err().code, "FENCED");
        let ack = |offset: u64| Ack {
            stream: Some("events/a".into()),
            path: None,
            offset: Offset::after(offset).to_string(),
        };
        let t = tails(&[("events/a", 5)]);
        assert_eq!(s.apply_acks(&[ack(6)], &t).unwrap_err().code, "INVALID_OFFSET");
        assert_eq!(s.apply_acks(&[ack(2)], &t).unwrap_err().code, "INVALID_OFFSET");
        s.apply_acks(&[ack(4)], &t).unwrap();
        assert!(s.end_wake(&t, 0), "message 5 is still pending");
        assert_eq!(s.generation, 2);
        assert!(s.fence(1, Some(1), Some(&wake.id)).is_err(), "the old wake is fenced");
        s.apply_acks(&[ack(5)], &t).unwrap();
        assert!(!s.end_wake(&t, 0));
        // The stream was deleted and made again: it starts over.
        assert!(s.restart_recreated(&tails(&[("events/a", 2)])));
        assert_eq!(s.links["events/a"].acked, 0);
        assert_eq!(
            s.pending_tails(&tails(&[("events/a", 2), ("manual", 0)])),
            tails(&[("events/a", 2)])
        );
        assert!(s.wake.is_none());
    }

    #[test]
    fn removing_an_explicit_link_keeps_what_the_pattern_matches() {
        let mut s = sub();
        s.link("events/b", true, 0).unwrap();
        s.unlink_explicit("events/b");
        assert!(s.links["events/b"].glob);
        s.unlink_explicit("manual");
        assert!(!s.links.contains_key("manual"));
        s.unlink_explicit("absent");
    }
}

#[cfg(test)]
mod cap {
    use super::*;
    use crate::subscription::spec::{MAX_STREAMS, Spec, UrlPolicy};

    #[test]
    fn a_subscription_links_a_bounded_number_of_streams() {
        let spec = Spec::parse(
            br#"{"type":"pull-wake","pattern":"e/*","wake_stream":"w"}"#,
            UrlPolicy { loopback_http: true },
        )
        .unwrap();
        let mut sub = Subscription::new("s".into(), spec, "/".into(), 0);
        for i in 0..MAX_STREAMS {
            assert!(sub.link(&format!("e/{i}"), false, 0).unwrap());
        }
        assert_eq!(sub.link("e/more", false, 0).unwrap_err().code, "TOO_MANY_STREAMS");
        assert!(sub.link("e/0", true, 0).is_ok(), "a linked stream may be linked again");
    }
}
