//! # The usage ledger: what the models' tokens add up to
//!
//! Every model step appends a `usage` event ([`crate::event::Usage`]: input tokens, the cached
//! ones among them, output tokens, the model); the engine then records it in the ledger as a
//! [`UsageEntry`], keyed by its chat and the event's seq, so a redelivered step that records the
//! same event again counts it once. The event is the source of truth: a ledger write that fails
//! is logged and does not fail the turn. The ledger answers totals per chat (by agent and
//! model) and per workspace over a range of days (by chat, agent and model) without reading its
//! entries one by one; [`report`] adds them up with estimated costs from the checked-in price
//! table ([`prices`]), and [`crate::service::UsageService`] holds a workspace to its monthly
//! token budget.
//!
//! [`UsageLedger`] is a port of [`crate::metadata::Metadata`]: `spool_embedded` keeps entries
//! in a SQLite table, `spool_aws` in the metadata table with running totals.

pub mod prices;
pub mod report;

use std::fmt;

use async_trait::async_trait;
use spool_log::error::Error;
use time::{Date, Month as CivilMonth, OffsetDateTime};

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Tokens read, the cached ones included.
    pub input: u64,
    /// Tokens read from the provider's cache.
    pub cached_input: u64,
    /// Tokens written.
    pub output: u64,
}

impl Tokens {
    /// Input and output: what a budget counts.
    pub fn billed(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

impl std::ops::AddAssign for Tokens {
    fn add_assign(&mut self, other: Self) {
        self.input = self.input.saturating_add(other.input);
        self.cached_input = self.cached_input.saturating_add(other.cached_input);
        self.output = self.output.saturating_add(other.output);
    }
}

impl From<&crate::event::Usage> for Tokens {
    fn from(u: &crate::event::Usage) -> Self {
        Self {
            input: u.input_tokens,
            cached_input: u.cached_input_tokens.min(u.input_tokens),
            output: u.output_tokens,
        }
    }
}

/// A UTC day, `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(Date);

impl Day {
    /// The day of `ms` (since the Unix epoch), in UTC.
    pub fn of_ms(ms: i64) -> Self {
        let at =
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        Self(at.date())
    }

    /// `YYYY-MM-DD`, or why not.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a date: use YYYY-MM-DD");
        let parts: Vec<&str> = text.split('-').collect();
        let [y, m, d] = parts.as_slice() else {
            return Err(bad());
        };
        let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
        if !(digits(y, 4) && digits(m, 2) && digits(d, 2)) {
            return Err(bad());
        }
        let (y, m, d): (i32, u8, u8) = (
            y.parse().map_err(|_| bad())?,
            m.parse().map_err(|_| bad())?,
            d.parse().map_err(|_| bad())?,
        );
        let month = CivilMonth::try_from(m).map_err(|_| bad())?;
        Date::from_calendar_date(y, month, d).map(Self).map_err(|_| bad())
    }

    /// The day after.
    pub fn next(self) -> Self {
        Self(self.0.next_day().unwrap_or(self.0))
    }

    /// Days from `self` to `later` (negative if it is earlier).
    pub fn days_until(self, later: Self) -> i64 {
        (later.0 - self.0).whole_days()
    }

    /// Its month.
    pub fn month(self) -> Month {
        Month {
            year: self.0.year(),
            month: self.0.month(),
        }
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.0.year(),
            u8::from(self.0.month()),
            self.0.day()
        )
    }
}

/// A UTC calendar month, `YYYY-MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    month: CivilMonth,
}

impl Month {
    /// Its first day.
    pub fn first_day(self) -> Day {
        Day(Date::from_calendar_date(self.year, self.month, 1).unwrap_or(Date::MIN))
    }

    /// The first day of the month after.
    pub fn end(self) -> Day {
        let year = if self.month == CivilMonth::December {
            self.year + 1
        } else {
            self.year
        };
        Day(Date::from_calendar_date(year, self.month.next(), 1).unwrap_or(Date::MAX))
    }

    /// Its days, `[first, end)`.
    pub fn days(self) -> DayRange {
        DayRange {
            from: self.first_day(),
            to: self.end(),
        }
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, u8::from(self.month))
    }
}

/// The longest range of days one query covers.
pub const MAX_RANGE_DAYS: i64 = 366;

/// Days `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayRange {
    /// The first day.
    pub from: Day,
    /// The day after the last.
    pub to: Day,
}

impl DayRange {
    /// `[from, to)`, checked: `from` not after `to`, at most [`MAX_RANGE_DAYS`] days.
    pub fn new(from: Day, to: Day) -> Result<Self, Error> {
        if from > to {
            return Err(Error::invalid(
                "usage range",
                format!("`from` ({from}) is after `to` ({to})"),
            ));
        }
        if from.days_until(to) > MAX_RANGE_DAYS {
            return Err(Error::invalid(
                "usage range",
                format!("a range covers at most {MAX_RANGE_DAYS} days; {from} to {to} is longer"),
            ));
        }
        Ok(Self { from, to })
    }

    /// Whether `day` is in it.
    pub fn contains(&self, day: Day) -> bool {
        self.from <= day && day < self.to
    }
}

/// One model step's tokens, as the ledger records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageEntry {
    /// The chat's workspace (none for a chat outside workspaces).
    pub workspace_id: Option<String>,
    /// The chat.
    pub chat_id: String,
    /// The seq of its `usage` event: with the chat, the entry's key.
    pub seq: u64,
    /// The agent that answered (none: Spool's own, in a chat without an agent).
    pub agent_id: Option<String>,
    /// Its name then.
    pub agent_name: String,
    /// The model asked.
    pub model: Option<String>,
    /// The UTC day it counts on.
    pub day: Day,
    /// Its tokens.
    pub tokens: Tokens,
    /// When it was recorded (ms since the Unix epoch).
    pub ts_ms: i64,
}

/// Tokens of one chat, agent and model, added up: what the ledger's queries answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The chat.
    pub chat_id: String,
    /// The agent.
    pub agent_id: Option<String>,
    /// Its name, as last recorded.
    pub agent_name: String,
    /// The model.
    pub model: Option<String>,
    /// The tokens.
    pub tokens: Tokens,
}

/// Where model steps' tokens are recorded and added up, per organization.
#[async_trait]
pub trait UsageLedger: Send + Sync {
    /// Records `entry` unless its chat's entry at its seq is recorded already: true if this
    /// call recorded it (a redelivered step's second record counts nothing).
    async fn record_usage(&self, org: &str, entry: &UsageEntry) -> Result<bool, Error>;

    /// A chat's tokens, one row per agent and model.
    async fn chat_usage(&self, org: &str, chat_id: &str) -> Result<Vec<UsageRow>, Error>;

    /// A workspace's tokens on the days of `range`, one row per chat, agent and model.
    async fn workspace_usage(&self, org: &str, workspace_id: &str, range: DayRange) -> Result<Vec<UsageRow>, Error>;

    /// A workspace's tokens in `month`, all together (what its budget counts).
    async fn workspace_month(&self, org: &str, workspace_id: &str, month: Month) -> Result<Tokens, Error>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_parse_strictly_and_months_end_where_the_next_begins() {
        let day = Day::parse("2026-12-07").unwrap();
        assert_eq!(day.to_string(), "2026-12-07");
        assert_eq!(day.month().to_string(), "2026-12");
        assert_eq!(day.month().first_day().to_string(), "2026-12-01");
        assert_eq!(day.month().end().to_string(), "2027-01-01");
        assert_eq!(Day::parse("2024-02-28").unwrap().next().to_string(), "2024-02-29");
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "2026-1-01",
            "26-01-01",
            "2026-01-01T00",
            "",
            "today",
        ] {
            assert!(Day::parse(bad).is_err(), "{bad} was taken");
        }
        assert_eq!(Day::of_ms(0).to_string(), "1970-01-01");
        assert_eq!(Day::of_ms(1_796_601_600_000).to_string(), "2026-12-07");
    }

    #[test]
    fn ranges_are_ordered_and_bounded() {
        let d = |s| Day::parse(s).unwrap();
        assert!(DayRange::new(d("2026-12-02"), d("2026-12-01")).is_err());
        assert!(DayRange::new(d("2025-01-01"), d("2026-01-03")).is_err());
        let year = DayRange::new(d("2024-01-01"), d("2025-01-01")).unwrap();
        assert!(year.contains(d("2024-12-31")) && !year.contains(d("2025-01-01")));
    }
}
