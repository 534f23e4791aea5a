//! The cron dialect of SPEC §4: 5, 6 or 7 fields, precise to the second, matched against
//! wall-clock time in a time zone.
//!
//! An expression is parsed once into bitsets (one per field, plus the day-of-month and
//! day-of-week extras) so that [`CronExpression::next_after`] jumps field by field to the
//! next matching value instead of scanning seconds. The search runs on wall-clock time
//! and maps each candidate to UTC; DST is handled there:
//!
//! - a wall time skipped by a DST jump does not fire;
//! - a wall time that occurs twice fires only at its first occurrence, so a search that
//!   starts inside the second occurrence does not fire the repeated times again.
//!
//! The same compiled form also answers [`CronExpression::matches`], which the cron
//! exclusion calendar uses.

mod parse;
mod search;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// The first year a 7-field expression may name.
pub const YEAR_MIN: i32 = 1970;
/// The last year a 7-field expression may name.
pub const YEAR_MAX: i32 = 2099;
/// How far [`CronExpression::next_after`] looks ahead, in years.
pub const SEARCH_YEARS_MAX: i32 = 5;

/// A parsed, compiled cron expression.
///
/// Two expressions are equal when their normalized text is equal (fields upper-cased and
/// separated by single spaces); [`Display`](fmt::Display) prints that text and
/// [`CronExpression::parse`] reads it back to an equal value.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CronExpression {
    text: String,
    compiled: Compiled,
}

/// Which field of an expression an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Seconds, 0–59 (absent in 5-field expressions).
    Second,
    /// Minutes, 0–59.
    Minute,
    /// Hours, 0–23.
    Hour,
    /// Day of month, 1–31, with `L`, `L-n`, `nW`, `LW` and `?`.
    DayOfMonth,
    /// Month, 1–12 or `JAN`–`DEC`.
    Month,
    /// Day of week, 0–7 (0 and 7 are Sunday) or `SUN`–`SAT`, with `nL`, `n#k` and `?`.
    DayOfWeek,
    /// Year, 1970–2099 (7-field expressions only).
    Year,
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day-of-month",
            Self::Month => "month",
            Self::DayOfWeek => "day-of-week",
            Self::Year => "year",
        })
    }
}

/// Why a cron expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// The expression does not have 5, 6 or 7 whitespace-separated fields.
    #[error("cron expression must have 5, 6 or 7 fields separated by spaces, found {found}")]
    FieldCount {
        /// How many fields were found.
        found: usize,
    },
    /// One field is malformed or out of range.
    #[error("cron {field} field '{text}': {problem}")]
    Field {
        /// The field at fault.
        field: CronField,
        /// The field's text as written.
        text: String,
        /// What is wrong, in words.
        problem: String,
    },
}

impl CronError {
    /// The field at fault, when the problem is inside one field.
    pub fn field(&self) -> Option<CronField> {
        match self {
            Self::FieldCount { .. } => None,
            Self::Field { field, .. } => Some(*field),
        }
    }
}

/// See [`CronExpression::whole_unit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WholeUnit {
    Second,
    Minute,
    Hour,
    Day,
}

/// The compiled form: one bitset per field plus the day extras.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Compiled {
    /// Bit n set = second n matches.
    seconds: u64,
    /// Bit n set = minute n matches.
    minutes: u64,
    /// Bit n set = hour n matches.
    hours: u32,
    /// Bit n set = month n (1–12) matches.
    months: u16,
    /// `None` = every year; otherwise bit (year − 1970) of 130 bits.
    years: Option<[u64; 3]>,
    day_of_month: DayOfMonth,
    day_of_week: DayOfWeek,
}

/// Day-of-month matching rules. `restricted` is false for `*` and `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct DayOfMonth {
    restricted: bool,
    /// Bit n set = day n (1–31) matches.
    days: u32,
    /// Bit n set = `L-n` (n days before the last day; `L` is n = 0).
    before_last: u32,
    /// Bit n set = `nW`, the weekday nearest day n.
    nearest_weekday: u32,
    /// `LW`, the last weekday of the month.
    last_weekday: bool,
}

/// Day-of-week matching rules. Weekday 0 is Sunday. `restricted` is false for `*` and `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct DayOfWeek {
    restricted: bool,
    /// Bit d set = every weekday d matches.
    days: u8,
    /// Bit d set = `dL`, the last weekday d of the month.
    last: u8,
    /// `nth[k-1]` bit d set = `d#k`, the k-th weekday d of the month.
    nth: [u8; 5],
}

impl CronExpression {
    /// Parses an expression of 5 (`min hour dom month dow`), 6 (`sec …`) or 7 (`… year`)
    /// fields.
    ///
    /// # Errors
    /// [`CronError::FieldCount`] for a wrong number of fields; [`CronError::Field`] naming
    /// the field for anything malformed or out of range, including a bare `L` in the
    /// day-of-week field, reversed ranges (`FRI-MON`, `22-2`) and a step of 0.
    pub fn parse(text: &str) -> Result<CronExpression, CronError> {
        parse::parse(text)
    }

    /// The first fire strictly after `after`, matching wall-clock time in `tz`, or `None`
    /// when nothing matches within [`SEARCH_YEARS_MAX`] years (or before the year field's
    /// last year).
    ///
    /// Fires are whole seconds. A wall time skipped by a DST jump does not fire; a wall
    /// time that occurs twice fires only at its first occurrence.
    pub fn next_after(&self, after: DateTime<Utc>, tz: &Tz) -> Option<DateTime<Utc>> {
        search::next_after(&self.compiled, after, tz)
    }

    /// Whether the wall-clock time of `at` in `tz` (truncated to the second) matches every
    /// field. Both occurrences of a repeated wall time match.
    pub fn matches(&self, at: DateTime<Utc>, tz: &Tz) -> bool {
        search::matches(&self.compiled, at, tz)
    }

    /// The largest wall-clock unit a match always covers whole: `Minute` when every
    /// second matches, `Hour` when also every minute, `Day` when also every hour. Lets
    /// a cron calendar skip an excluded span a unit at a time instead of a second.
    pub(crate) fn whole_unit(&self) -> WholeUnit {
        let c = &self.compiled;
        if c.seconds != search::ALL_SECONDS {
            WholeUnit::Second
        } else if c.minutes != search::ALL_MINUTES {
            WholeUnit::Minute
        } else if c.hours != search::ALL_HOURS {
            WholeUnit::Hour
        } else {
            WholeUnit::Day
        }
    }

    /// The normalized text: upper-case fields separated by single spaces.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for CronExpression {
    type Err = CronError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for CronExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CronExpression({:?})", self.text)
    }
}

impl serde::Serialize for CronExpression {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for CronExpression {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}
