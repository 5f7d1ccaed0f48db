//! # The hot tail in memory
//!
//! The messages this process appended lately, per stream incarnation, so that reads of a hot
//! tail (catch-ups, live readers a little behind, resumes) take them from memory instead of
//! SQLite's rows. A message at a sequence number of a storage id never changes, so what is kept
//! here is right whoever reads it, whatever other processes on the same data directory do: a
//! read still takes the stream's state from its SQLite snapshot, and only the messages that
//! state asks for, if every one is here, come from memory. Other processes' appends are not
//! here; the first of this process's appends after them starts its run again.
//!
//! Only committed appends are kept (the writer adds them after the commit). Each run keeps its
//! newest [`MAX_RUN_BYTES`], and all runs together at most [`MAX_BYTES`].

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use bytes::Bytes;

/// The most of one stream's newest messages kept.
const MAX_RUN_BYTES: usize = 4 * 1024 * 1024;

/// The most kept in all.
const MAX_BYTES: usize = 64 * 1024 * 1024;

/// Runs of consecutive messages by storage id.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    inner: Mutex<Runs>,
}

#[derive(Debug, Default)]
struct Runs {
    by_sid: HashMap<String, Run>,
    bytes: usize,
}

/// Consecutive messages from `first`.
#[derive(Debug)]
struct Run {
    first: u64,
    messages: VecDeque<Bytes>,
    bytes: usize,
}

impl Recent {
    /// Keeps `messages`, committed to `sid` from sequence number `first`.
    pub(crate) fn add(&self, sid: &str, first: u64, messages: &[Bytes]) {
        let added: usize = messages.iter().map(Bytes::len).sum();
        if messages.is_empty() {
            return;
        }
        if added > MAX_RUN_BYTES {
            self.remove(sid);
            return;
        }
        let mut runs = self.lock();
        let Runs { by_sid, bytes } = &mut *runs;
        let run = by_sid.entry(sid.to_owned()).or_insert_with(|| Run {
            first,
            messages: VecDeque::new(),
            bytes: 0,
        });
        if run.first + run.messages.len() as u64 != first {
            // Not right after what is kept (another process appended between): start again.
            *bytes -= run.bytes;
            *run = Run {
                first,
                messages: VecDeque::new(),
                bytes: 0,
            };
        }
        run.messages.extend(messages.iter().cloned());
        run.bytes += added;
        *bytes += added;
        while run.bytes > MAX_RUN_BYTES {
            let Some(oldest) = run.messages.pop_front() else { break };
            run.first += 1;
            run.bytes -= oldest.len();
            *bytes -= oldest.len();
        }
        if *bytes > MAX_BYTES {
            // Over the budget: the other streams' runs go (their reads use SQLite again).
            let kept = by_sid.remove(sid);
            by_sid.clear();
            *bytes = kept.as_ref().map_or(0, |run| run.bytes);
            if let Some(run) = kept {
                by_sid.insert(sid.to_owned(), run);
            }
        }
    }

    /// Forgets `sid` (its stream was removed).
    pub(crate) fn remove(&self, sid: &str) {
        let mut runs = self.lock();
        if let Some(run) = runs.by_sid.remove(sid) {
            runs.bytes -= run.bytes;
        }
    }

    /// The messages of `sid` after `after` and up to `through`, stopping once `max_bytes` are
    /// reached (as a read of SQLite's rows does), if every one of them is kept.
    pub(crate) fn get(&self, sid: &str, after: u64, through: u64, max_bytes: usize) -> Option<Vec<Bytes>> {
        let runs = self.lock();
        let run = runs.by_sid.get(sid)?;
        let last = run.first + run.messages.len() as u64 - 1;
        if after + 1 < run.first || after >= last.min(through) {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        for message in run.messages.iter().skip((after + 1 - run.first) as usize) {
            if after + out.len() as u64 >= through {
                break;
            }
            bytes += message.len();
            out.push(message.clone());
            if bytes >= max_bytes {
                return Some(out);
            }
        }
        // The run must reach `through`, or the read would end early.
        (after + out.len() as u64 == through).then_some(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(range: std::ops::RangeInclusive<u64>) -> Vec<Bytes> {
        range.map(|i| Bytes::from(format!("m{i}"))).collect()
    }

    #[test]
    fn a_read_is_served_only_when_every_message_it_asks_for_is_kept() {
        let recent = Recent::default();
        recent.add("s", 1, &messages(1..=3));
        recent.add("s", 4, &messages(4..=5));
        assert_eq!(recent.get("s", 0, 5, usize::MAX), Some(messages(1..=5)));
        assert_eq!(recent.get("s", 2, 4, usize::MAX), Some(messages(3..=4)));
        // As SQLite's rows are read: up to the message that reaches the byte limit.
        assert_eq!(recent.get("s", 0, 5, 3), Some(messages(1..=2)));
        // Beyond what is kept (another process appended 6), or nothing asked: SQLite.
        assert_eq!(recent.get("s", 3, 6, usize::MAX), None);
        assert_eq!(recent.get("s", 5, 5, usize::MAX), None);
        assert_eq!(recent.get("other", 0, 5, usize::MAX), None);
        // Another process's append between: the run starts again from this one's.
        recent.add("s", 8, &messages(8..=9));
        assert_eq!(recent.get("s", 4, 9, usize::MAX), None);
        assert_eq!(recent.get("s", 7, 9, usize::MAX), Some(messages(8..=9)));
        recent.remove("s");
        assert_eq!(recent.get("s", 7, 9, usize::MAX), None);
    }

    #[test]
    fn runs_keep_their_newest_messages_within_bounds() {
        let recent = Recent::default();
        let big = vec![Bytes::from(vec![b'x'; 1024 * 1024])];
        for i in 1..=6u64 {
            recent.add("s", i, &big);
        }
        // 4 MiB kept: messages 3 to 6
        assert!(recent.get("s", 1, 6, usize::MAX).is_none());
        assert_eq!(recent.get("s", 2, 6, usize::MAX).map(|m| m.len()), Some(4));
        assert_eq!(recent.lock().bytes, 4 * 1024 * 1024);
        // Over the whole budget, other runs go
        for sid in 0..20 {
            recent.add(&sid.to_string(), 1, &big);
        }
        assert!(recent.lock().bytes <= MAX_BYTES);
    }
}
