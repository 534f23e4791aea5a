//! Schedules (SPEC §3): when a trigger fires.
//!
//! A [`JobSchedule`] is a [`ScheduleKind`] plus an optional window (`start_at`, `end_at`)
//! and an optional exclusion calendar name. It has a text form, round-tripped by
//! [`Display`](fmt::Display) and [`FromStr`], which is how schedules are stored and how
//! admin UIs accept them:
//!
//! ```text
//! manual
//! every 00:10:00 x5
//! cron 0 0 9 * * MON-FRI tz=Asia/Shanghai
//! once 2026-11-01T00:00:00.0000000+00:00 start=… end=… calendar=holidays
//! ```
//!
//! Next-fire computation is pure: [`JobSchedule::first_fire`] for a new trigger,
//! [`JobSchedule::next_fire`] after a fire. Cron cadence is computed from the *scheduled*
//! time, so it never drifts; `Every` is a fixed delay from the previous run's completion.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc};
use chrono_tz::Tz;

use crate::calendar::{first_included, JobCalendar, EXCLUDED_SPANS_MAX};
use crate::cron::{CronError, CronExpression};
use crate::name::{CalendarName, NameError};
use crate::time::add_duration;
use crate::timezone::{parse_time_zone, UnknownTimeZone};

/// The longest `Every` interval: 100 years, far beyond any real use, so arithmetic on
/// it never overflows.
pub const INTERVAL_MAX: Duration = Duration::from_secs(36_500 * 86_400);

/// The shortest `Every` interval: a millisecond. Due times are stored to the microsecond
/// (a sub-microsecond delay could not even be kept), and a run's start and end each take
/// a store transaction of about that long: a shorter delay would only make the runs
/// follow one another back to back.
pub const INTERVAL_MIN: Duration = Duration::from_millis(1);

/// What kind of schedule, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleKind {
    /// Never fires on its own; runs only when triggered by hand.
    Manual,
    /// Fixed delay: each fire is `interval` after the previous run *completed*;
    /// `repeat_count` is the total number of fires, `None` = unlimited.
    Every {
        /// The delay, from [`INTERVAL_MIN`] to [`INTERVAL_MAX`].
        interval: Duration,
        /// Total fires, ≥ 1, or unlimited.
        repeat_count: Option<u32>,
    },
    /// Cron (SPEC §4), matched on wall-clock time in `time_zone`.
    Cron {
        /// The expression.
        expression: CronExpression,
        /// The zone the expression's wall-clock fields are read in.
        time_zone: Tz,
    },
    /// One fire at `at`.
    Once {
        /// The fire time.
        at: DateTime<Utc>,
    },
}

/// A schedule: a kind plus its window and calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSchedule {
    /// What kind of schedule.
    pub kind: ScheduleKind,
    /// No fires before this instant.
    pub start_at: Option<DateTime<Utc>>,
    /// No fires after this instant; past it the trigger is `Complete`.
    pub end_at: Option<DateTime<Utc>>,
    /// The name of an exclusion calendar whose excluded instants are skipped.
    pub calendar: Option<CalendarName>,
}

/// Why a schedule or its text is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error(transparent)]
    Cron(#[from] CronError),
    /// The time zone id is unknown.
    #[error(transparent)]
    TimeZone(#[from] UnknownTimeZone),
    /// The calendar name breaks the name grammar.
    #[error(transparent)]
    CalendarName(#[from] NameError),
    /// Anything else, in words.
    #[error("{0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> ScheduleError {
    ScheduleError::Invalid(message.into())
}

/// What the engine knows about the fire just done, for [`JobSchedule::next_fire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousFire {
    /// The time the fire was scheduled for (cron cadence continues from here).
    pub scheduled_at: DateTime<Utc>,
    /// When its run completed (an `Every` schedule's next fire is one interval later).
    pub completed_at: DateTime<Utc>,
    /// How many times the trigger has fired, this fire included.
    pub fire_count: u32,
}

impl JobSchedule {
    /// A schedule that only runs by hand.
    pub fn manual() -> Self {
        Self::from_kind(ScheduleKind::Manual)
    }

    /// Every `interval`, without limit.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] unless [`INTERVAL_MIN`] ≤ `interval` ≤ [`INTERVAL_MAX`].
    pub fn every(interval: Duration) -> Result<Self, ScheduleError> {
        Self::every_times(interval, None)
    }

    /// Every `interval`, `repeat_count` times in total (`None` = unlimited).
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] for an interval out of range or a count of 0.
    pub fn every_times(interval: Duration, repeat_count: Option<u32>) -> Result<Self, ScheduleError> {
        let schedule = Self::from_kind(ScheduleKind::Every { interval, repeat_count });
        schedule.validate()?;
        Ok(schedule)
    }

    /// A cron schedule. `time_zone` is an IANA or Windows id; `None` or empty is UTC.
    ///
    /// # Errors
    /// [`ScheduleError::Cron`] for a bad expression, [`ScheduleError::TimeZone`] for an
    /// unknown zone.
    pub fn cron(expression: &str, time_zone: Option<&str>) -> Result<Self, ScheduleError> {
        let expression = CronExpression::parse(expression)?;
        let time_zone = match time_zone.map(str::trim) {
            None | Some("") => Tz::UTC,
            Some(id) => parse_time_zone(id)?,
        };
        Ok(Self::from_kind(ScheduleKind::Cron { expression, time_zone }))
    }

    /// One fire at `at`.
    pub fn once(at: DateTime<Utc>) -> Self {
        Self::from_kind(ScheduleKind::Once { at })
    }

    /// A schedule of `kind` with no window and no calendar.
    pub fn from_kind(kind: ScheduleKind) -> Self {
        Self { kind, start_at: None, end_at: None, calendar: None }
    }

    /// This schedule with no fires before `start_at`.
    pub fn starting_at(mut self, start_at: DateTime<Utc>) -> Self {
        self.start_at = Some(start_at);
        self
    }

    /// This schedule with no fires after `end_at`.
    pub fn ending_at(mut self, end_at: DateTime<Utc>) -> Self {
        self.end_at = Some(end_at);
        self
    }

    /// This schedule skipping what the calendar named `calendar` excludes.
    pub fn with_calendar(mut self, calendar: CalendarName) -> Self {
        self.calendar = Some(calendar);
        self
    }

    /// Whether this is [`ScheduleKind::Manual`].
    pub fn is_manual(&self) -> bool {
        matches!(self.kind, ScheduleKind::Manual)
    }

    /// Checks the parameters and window.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] for an interval out of range, a repeat count of 0,
    /// `end_at` before `start_at`, or an instant outside years 1–9999 (which the text
    /// form cannot carry).
    pub fn validate(&self) -> Result<(), ScheduleError> {
        match &self.kind {
            ScheduleKind::Every { interval, repeat_count } => {
                if interval.is_zero() {
                    return Err(invalid("interval must be greater than zero"));
                }
                if *interval < INTERVAL_MIN {
                    return Err(invalid(format!(
                        "interval {} is shorter than a millisecond (runs would follow one another back to back)",
                        format_interval(*interval)
                    )));
                }
                if *interval > INTERVAL_MAX {
                    return Err(invalid(format!("interval {} is longer than 36500 days", format_interval(*interval))));
                }
                if *repeat_count == Some(0) {
                    return Err(invalid("repeat count must be at least 1"));
                }
            }
            ScheduleKind::Once { at } => check_instant("once", *at)?,
            ScheduleKind::Manual | ScheduleKind::Cron { .. } => {}
        }
        if let Some(start) = self.start_at {
            check_instant("start", start)?;
        }
        if let Some(end) = self.end_at {
            check_instant("end", end)?;
        }
        if let (Some(start), Some(end)) = (self.start_at, self.end_at) {
            if end < start {
                return Err(invalid(format!("end {} is before start {}", format_instant(end), format_instant(start))));
            }
        }
        Ok(())
    }

    /// The first fire of a trigger created at `now`, or `None` when it will never fire
    /// (the trigger is `Complete` at once).
    ///
    /// - `Every`: `start_at + interval`, or `now + interval` without `start_at`.
    /// - `Cron`: the first match strictly after `now` and at or after `start_at`.
    /// - `Once`: `at`, unless it is before `start_at`, after `end_at` or excluded.
    /// - `Manual`: never.
    ///
    /// Calendar-excluded candidates are skipped (see [`JobSchedule::next_fire`]).
    pub fn first_fire(&self, now: DateTime<Utc>, calendar: Option<&dyn JobCalendar>) -> Option<DateTime<Utc>> {
        match &self.kind {
            ScheduleKind::Manual => None,
            ScheduleKind::Every { interval, .. } => {
                self.finish_interval(add_duration(self.start_at.unwrap_or(now), *interval), calendar)
            }
            ScheduleKind::Cron { expression, time_zone } => {
                let after = match self.start_at {
                    // `start_at` itself may fire: search from just before it.
                    Some(start) if start > now => start - TimeDelta::nanoseconds(1),
                    _ => now,
                };
                self.next_cron(expression, time_zone, after, calendar)
            }
            ScheduleKind::Once { at } => {
                let at = *at;
                let before_start = self.start_at.is_some_and(|start| at < start);
                let excluded = calendar.is_some_and(|c| c.is_excluded(at));
                (!before_start && !excluded && self.within_end(at)).then_some(at)
            }
        }
    }

    /// The fire after `previous`, or `None` when there is none (the trigger becomes
    /// `Complete`).
    ///
    /// - `Cron`: the first match strictly after the previous *scheduled* time.
    /// - `Every`: one interval after the previous run completed, unless `repeat_count`
    ///   fires are done. A completion stamped before the fire's scheduled time (clocks of
    ///   two nodes apart: the run was taken on one, declared lost on another) counts as at
    ///   the scheduled time, so each fire of a trigger is due strictly after the last.
    /// - `Once`, `Manual`: none.
    ///
    /// A candidate the calendar excludes is skipped: cron moves to its next match, an
    /// interval moves to the first instant the calendar does not exclude. After
    /// [`crate::calendar::EXCLUDED_SPANS_MAX`] consecutive excluded candidates there is
    /// no next fire. A candidate after `end_at` or after year 9999 means no next fire.
    pub fn next_fire(&self, previous: &PreviousFire, calendar: Option<&dyn JobCalendar>) -> Option<DateTime<Utc>> {
        match &self.kind {
            ScheduleKind::Manual | ScheduleKind::Once { .. } => None,
            ScheduleKind::Every { interval, repeat_count } => {
                if repeat_count.is_some_and(|count| previous.fire_count >= count) {
                    return None;
                }
                let completed = previous.completed_at.max(previous.scheduled_at);
                self.finish_interval(add_duration(completed, *interval), calendar)
            }
            ScheduleKind::Cron { expression, time_zone } => {
                let after = match self.start_at {
                    Some(start) if start > previous.scheduled_at => start - TimeDelta::nanoseconds(1),
                    _ => previous.scheduled_at,
                };
                self.next_cron(expression, time_zone, after, calendar)
            }
        }
    }

    /// Whether `at` may fire: not after `end_at`, nor after year 9999, the last instant
    /// the text form (RFC 3339) can carry, so every due time a user sees parses back.
    fn within_end(&self, at: DateTime<Utc>) -> bool {
        at.year() <= 9999 && self.end_at.is_none_or(|end| at <= end)
    }

    fn finish_interval(&self, candidate: DateTime<Utc>, calendar: Option<&dyn JobCalendar>) -> Option<DateTime<Utc>> {
        let at = match calendar {
            None => candidate,
            Some(calendar) => first_included(calendar, candidate)?,
        };
        self.within_end(at).then_some(at)
    }

    fn next_cron(
        &self,
        expression: &CronExpression,
        tz: &Tz,
        mut after: DateTime<Utc>,
        calendar: Option<&dyn JobCalendar>,
    ) -> Option<DateTime<Utc>> {
        for _ in 0..EXCLUDED_SPANS_MAX {
            let candidate = expression.next_after(after, tz)?;
            if !self.within_end(candidate) {
                return None;
            }
            match calendar {
                Some(calendar) if calendar.is_excluded(candidate) => {
                    // Resume from the end of the excluded span rather than candidate by
                    // candidate: every instant before it is excluded anyway.
                    let until = calendar.excluded_until(candidate);
                    after = if until > candidate { until - TimeDelta::nanoseconds(1) } else { candidate };
                }
                _ => return Some(candidate),
            }
        }
        None
    }
}

fn check_instant(what: &str, at: DateTime<Utc>) -> Result<(), ScheduleError> {
    if (1..=9999).contains(&at.year()) {
        Ok(())
    } else {
        Err(invalid(format!("{what} instant is outside years 1–9999")))
    }
}

/// RFC 3339 in UTC with 7 fraction digits (9 when the instant has sub-100 ns precision),
/// e.g. `2026-11-01T00:00:00.0000000+00:00`.
pub fn format_instant(at: DateTime<Utc>) -> String {
    let nanos = at.nanosecond() % 1_000_000_000;
    let fraction = if nanos.is_multiple_of(100) { format!("{:07}", nanos / 100) } else { format!("{nanos:09}") };
    format!("{}.{fraction}+00:00", at.format("%Y-%m-%dT%H:%M:%S"))
}

/// Reads an RFC 3339 instant with any offset and fraction length.
///
/// # Errors
/// [`ScheduleError::Invalid`] naming the text.
pub fn parse_instant(text: &str) -> Result<DateTime<Utc>, ScheduleError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| invalid(format!("'{text}' is not an RFC 3339 instant ({e})")))
}

/// `[d.]hh:mm:ss[.fraction]`, with 7 fraction digits (9 when needed), omitted when zero.
pub fn format_interval(interval: Duration) -> String {
    let total = interval.as_secs();
    let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let mut text = String::new();
    if days > 0 {
        text.push_str(&format!("{days}."));
    }
    text.push_str(&format!("{hours:02}:{minutes:02}:{seconds:02}"));
    let nanos = interval.subsec_nanos();
    if nanos != 0 {
        if nanos.is_multiple_of(100) {
            text.push_str(&format!(".{:07}", nanos / 100));
        } else {
            text.push_str(&format!(".{nanos:09}"));
        }
    }
    text
}

/// Reads `[d.]hh:mm:ss[.fraction]` (hours 0–23, minutes and seconds 0–59, up to 9
/// fraction digits).
///
/// # Errors
/// [`ScheduleError::Invalid`] naming the text and what is wrong.
pub fn parse_interval(text: &str) -> Result<Duration, ScheduleError> {
    let bad = |why: &str| invalid(format!("interval '{text}' {why}; expected [d.]hh:mm:ss[.fraction], e.g. 00:10:00"));
    let digits = |s: &str, max_len: usize| -> Option<u64> {
        (!s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let mut parts = text.splitn(3, ':');
    let (Some(head), Some(minutes), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("is malformed"));
    };
    let (days, hours) = match head.split_once('.') {
        Some((days, hours)) => (digits(days, 5).ok_or_else(|| bad("has a bad day count"))?, hours),
        None => (0, head),
    };
    let hours = digits(hours, 2).filter(|h| *h < 24).ok_or_else(|| bad("has bad hours"))?;
    let minutes = digits(minutes, 2).filter(|m| *m < 60).ok_or_else(|| bad("has bad minutes"))?;
    let (seconds, fraction) = match rest.split_once('.') {
        Some((seconds, fraction)) => (seconds, Some(fraction)),
        None => (rest, None),
    };
    let seconds = digits(seconds, 2).filter(|s| *s < 60).ok_or_else(|| bad("has bad seconds"))?;
    let nanos = match fraction {
        None => 0,
        Some(fraction) => {
            let value = digits(fraction, 9).ok_or_else(|| bad("has a bad fraction"))?;
            value * 10u64.pow(9 - fraction.len() as u32)
        }
    };
    let interval = Duration::new(days * 86_400 + hours * 3600 + minutes * 60 + seconds, nanos as u32);
    Ok(interval)
}

impl fmt::Display for JobSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ScheduleKind::Manual => f.write_str("manual")?,
            ScheduleKind::Every { interval, repeat_count } => {
                write!(f, "every {}", format_interval(*interval))?;
                if let Some(count) = repeat_count {
                    write!(f, " x{count}")?;
                }
            }
            ScheduleKind::Cron { expression, time_zone } => {
                write!(f, "cron {expression}")?;
                if *time_zone != Tz::UTC {
                    write!(f, " tz={}", time_zone.name())?;
                }
            }
            ScheduleKind::Once { at } => write!(f, "once {}", format_instant(*at))?,
        }
        if let Some(start) = self.start_at {
            write!(f, " start={}", format_instant(start))?;
        }
        if let Some(end) = self.end_at {
            write!(f, " end={}", format_instant(end))?;
        }
        if let Some(calendar) = &self.calendar {
            write!(f, " calendar={calendar}")?;
        }
        Ok(())
    }
}

impl FromStr for JobSchedule {
    type Err = ScheduleError;

    /// Reads the text form. Keywords are case-insensitive; a Windows time zone id may
    /// contain spaces (`tz=China Standard Time`) and is stored as its IANA id.
    fn from_str(text: &str) -> Result<Self, ScheduleError> {
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let Some(keyword) = tokens.first() else {
            return Err(invalid("schedule text is empty; expected manual, every …, cron … or once …"));
        };
        let is_option = |token: &str| token.contains('=');
        let mut rest = &tokens[1..];
        let kind = match keyword.to_ascii_lowercase().as_str() {
            "manual" => ScheduleKind::Manual,
            "every" => {
                let (interval, tail) =
                    rest.split_first().ok_or_else(|| invalid("'every' needs an interval, e.g. every 00:10:00"))?;
                let interval = parse_interval(interval)?;
                rest = tail;
                let repeat_count = match rest.first() {
                    Some(token) if token.starts_with(['x', 'X']) && !is_option(token) => {
                        rest = &rest[1..];
                        let count = &token[1..];
                        Some(
                            count
                                .parse::<u32>()
                                .ok()
                                .filter(|_| count.bytes().all(|b| b.is_ascii_digit()))
                                .ok_or_else(|| {
                                    invalid(format!("repeat count '{token}' is not x followed by a number"))
                                })?,
                        )
                    }
                    _ => None,
                };
                ScheduleKind::Every { interval, repeat_count }
            }
            "cron" => {
                let fields = rest.iter().take_while(|t| !is_option(t)).count();
                if fields == 0 {
                    return Err(invalid("'cron' needs an expression, e.g. cron 0 0 9 * * MON-FRI"));
                }
                let expression = CronExpression::parse(&rest[..fields].join(" "))?;
                rest = &rest[fields..];
                let mut time_zone = Tz::UTC;
                if let Some(first) = rest.first() {
                    if let Some(zone) = first.strip_prefix("tz=") {
                        // A Windows id runs on until the next option.
                        let words = 1 + rest[1..].iter().take_while(|t| !is_option(t)).count();
                        let id =
                            std::iter::once(zone).chain(rest[1..words].iter().copied()).collect::<Vec<_>>().join(" ");
                        time_zone = parse_time_zone(&id)?;
                        rest = &rest[words..];
                    }
                }
                ScheduleKind::Cron { expression, time_zone }
            }
            "once" => {
                let (at, tail) = rest
                    .split_first()
                    .ok_or_else(|| invalid("'once' needs an instant, e.g. once 2026-11-01T00:00:00Z"))?;
                rest = tail;
                ScheduleKind::Once { at: parse_instant(at)? }
            }
            other => {
                return Err(invalid(format!("unknown schedule kind '{other}'; expected manual, every, cron or once")))
            }
        };
        let mut schedule = JobSchedule::from_kind(kind);
        for token in rest {
            let Some((key, value)) = token.split_once('=') else {
                return Err(invalid(format!("unexpected '{token}'; expected start=, end= or calendar=")));
            };
            let duplicate = || invalid(format!("'{key}=' is given twice"));
            match key {
                "start" if schedule.start_at.is_none() => schedule.start_at = Some(parse_instant(value)?),
                "end" if schedule.end_at.is_none() => schedule.end_at = Some(parse_instant(value)?),
                "calendar" if schedule.calendar.is_none() => schedule.calendar = Some(CalendarName::new(value)?),
                "start" | "end" | "calendar" => return Err(duplicate()),
                "tz" => return Err(invalid("'tz=' only follows a cron expression")),
                _ => return Err(invalid(format!("unknown option '{key}='; expected start=, end= or calendar="))),
            }
        }
        schedule.validate()?;
        Ok(schedule)
    }
}

impl serde::Serialize for JobSchedule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for JobSchedule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::{DailyCalendar, HolidayCalendar, WeeklyCalendar};
    use chrono::{NaiveDate, NaiveTime};

    fn utc(text: &str) -> DateTime<Utc> {
        parse_instant(text).unwrap()
    }

    fn round_trip(text: &str) -> String {
        let schedule: JobSchedule = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        let shown = schedule.to_string();
        assert_eq!(shown.parse::<JobSchedule>().unwrap(), schedule, "{shown}");
        shown
    }

    #[test]
    fn text_forms_of_the_spec() {
        assert_eq!(round_trip("manual"), "manual");
        assert_eq!(round_trip("every 00:10:00 x5"), "every 00:10:00 x5");
        assert_eq!(round_trip("cron 0 0 9 * * MON-FRI tz=Asia/Shanghai"), "cron 0 0 9 * * MON-FRI tz=Asia/Shanghai");
        assert_eq!(round_trip("once 2026-11-01T00:00:00.0000000+00:00"), "once 2026-11-01T00:00:00.0000000+00:00");
        assert_eq!(
            round_trip("every 1.02:03:04.5 start=2026-01-01T08:00:00+08:00 end=2027-01-01T00:00:00Z calendar=holidays"),
            "every 1.02:03:04.5000000 start=2026-01-01T00:00:00.0000000+00:00 end=2027-01-01T00:00:00.0000000+00:00 calendar=holidays"
        );
        assert_eq!(
            round_trip("cron 0 3 * * * tz=China Standard Time calendar=h"),
            "cron 0 3 * * * tz=Asia/Shanghai calendar=h"
        );
        assert_eq!(round_trip("CRON 0 3 * * *"), "cron 0 3 * * *");
        assert_eq!(round_trip("once 2026-11-01T00:00:00.123456789Z"), "once 2026-11-01T00:00:00.123456789+00:00");
    }

    #[test]
    fn bad_text_is_a_clear_error() {
        let cases = [
            ("", "empty"),
            ("sometimes", "unknown schedule kind"),
            ("every", "needs an interval"),
            ("every 10m", "interval '10m'"),
            ("every 00:00:00", "greater than zero"),
            ("every 00:00:00.0009999", "shorter than a millisecond"),
            ("every 00:61:00", "bad minutes"),
            ("every 00:10:00 x0", "at least 1"),
            ("every 00:10:00 xx", "repeat count"),
            ("cron", "needs an expression"),
            ("cron 0 0 * * * tz=Mars/Base", "unknown time zone"),
            ("cron 0 0 * * L", "day-of-week"),
            ("once yesterday", "RFC 3339"),
            ("manual start=2026-01-01T00:00:00Z start=2026-01-02T00:00:00Z", "twice"),
            ("manual color=red", "unknown option"),
            ("manual extra", "unexpected 'extra'"),
            ("manual tz=UTC", "only follows a cron"),
            ("manual calendar=Bad", "calendar name"),
            ("manual start=2026-02-01T00:00:00Z end=2026-01-01T00:00:00Z", "before start"),
        ];
        for (text, needle) in cases {
            let err = text.parse::<JobSchedule>().unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle:?}");
        }
    }

    #[test]
    fn every_first_fire_and_fixed_delay() {
        let s = JobSchedule::every_times(Duration::from_secs(600), Some(2)).unwrap();
        let now = utc("2026-01-01T00:00:00Z");
        assert_eq!(s.first_fire(now, None), Some(utc("2026-01-01T00:10:00Z")));
        let with_start = s.clone().starting_at(utc("2026-02-01T00:00:00Z"));
        assert_eq!(with_start.first_fire(now, None), Some(utc("2026-02-01T00:10:00Z")));
        // Fixed delay: from completion, not from the scheduled time.
        let prev = PreviousFire {
            scheduled_at: utc("2026-01-01T00:10:00Z"),
            completed_at: utc("2026-01-01T00:13:00Z"),
            fire_count: 1,
        };
        assert_eq!(s.next_fire(&prev, None), Some(utc("2026-01-01T00:23:00Z")));
        assert_eq!(s.next_fire(&PreviousFire { fire_count: 2, ..prev }, None), None);
        // A completion stamped before the scheduled time (another node's clock) counts as
        // at it: fires of one trigger never repeat a due time (a calendar would round the
        // early candidate up to the same instant).
        let early = PreviousFire { completed_at: utc("2026-01-01T00:06:00Z"), ..prev };
        assert_eq!(s.next_fire(&early, None), Some(utc("2026-01-01T00:20:00Z")));
        let ending = s.ending_at(utc("2026-01-01T00:20:00Z"));
        assert_eq!(ending.next_fire(&prev, None), None);
    }

    #[test]
    fn cron_cadence_follows_the_scheduled_time() {
        let s = JobSchedule::cron("0 */15 * * * *", None).unwrap();
        let prev = PreviousFire {
            scheduled_at: utc("2026-01-01T00:15:00Z"),
            completed_at: utc("2026-01-01T00:29:59Z"),
            fire_count: 1,
        };
        assert_eq!(s.next_fire(&prev, None), Some(utc("2026-01-01T00:30:00Z")));
        let windowed = s.starting_at(utc("2026-01-01T01:00:00Z")).ending_at(utc("2026-01-01T01:30:00Z"));
        assert_eq!(windowed.first_fire(utc("2026-01-01T00:00:00Z"), None), Some(utc("2026-01-01T01:00:00Z")));
        let late = PreviousFire { scheduled_at: utc("2026-01-01T01:30:00Z"), ..prev };
        assert_eq!(windowed.next_fire(&late, None), None);
    }

    #[test]
    fn nothing_fires_after_year_9999() {
        // The text form carries years 1–9999 only: a later due time could not be shown
        // as RFC 3339, so the trigger completes instead.
        let every = JobSchedule::every(Duration::from_secs(36_500 * 86_400)).unwrap();
        let late = every.clone().starting_at(utc("9999-12-30T00:00:00Z"));
        assert_eq!(late.first_fire(utc("2026-01-01T00:00:00Z"), None), None);
        let prev = PreviousFire {
            scheduled_at: utc("9990-01-01T00:00:00Z"),
            completed_at: utc("9990-01-01T00:00:00Z"),
            fire_count: 1,
        };
        assert_eq!(every.next_fire(&prev, None), None);
        let leap = JobSchedule::cron("0 0 0 29 2 *", None).unwrap().starting_at(utc("9999-01-01T00:00:00Z"));
        assert_eq!(leap.first_fire(utc("2026-01-01T00:00:00Z"), None), None);
        let last = JobSchedule::cron("59 59 23 31 12 *", None).unwrap();
        assert_eq!(last.first_fire(utc("9999-12-31T00:00:00Z"), None), Some(utc("9999-12-31T23:59:59Z")));
        let prev = PreviousFire { scheduled_at: utc("9999-12-31T23:59:59Z"), ..prev };
        assert_eq!(last.next_fire(&prev, None), None);
    }

    #[test]
    fn once_respects_window_and_calendar() {
        let at = utc("2026-10-01T09:00:00Z");
        let now = utc("2026-09-01T00:00:00Z");
        assert_eq!(JobSchedule::once(at).first_fire(now, None), Some(at));
        assert_eq!(JobSchedule::once(at).starting_at(utc("2026-10-02T00:00:00Z")).first_fire(now, None), None);
        assert_eq!(JobSchedule::once(at).ending_at(utc("2026-09-30T00:00:00Z")).first_fire(now, None), None);
        let holiday = HolidayCalendar::new([NaiveDate::from_ymd_opt(2026, 10, 1).unwrap()], Tz::UTC);
        assert_eq!(JobSchedule::once(at).first_fire(now, Some(&holiday)), None);
        assert_eq!(JobSchedule::manual().first_fire(now, None), None);
    }

    #[test]
    fn calendars_move_fires() {
        let weekend = WeeklyCalendar::new(&[], Tz::UTC);
        let daily = JobSchedule::cron("0 0 9 * * *", None).unwrap();
        // Friday 2026-02-06 09:00, then Monday (Saturday and Sunday excluded).
        let prev = PreviousFire {
            scheduled_at: utc("2026-02-06T09:00:00Z"),
            completed_at: utc("2026-02-06T09:00:01Z"),
            fire_count: 1,
        };
        assert_eq!(daily.next_fire(&prev, Some(&weekend)), Some(utc("2026-02-09T09:00:00Z")));
        // An interval landing in the night moves to the end of the night.
        let t = |h| NaiveTime::from_hms_opt(h, 0, 0).unwrap();
        let night = DailyCalendar::new(t(22), t(6), Tz::UTC).unwrap();
        let hourly = JobSchedule::every(Duration::from_secs(3600)).unwrap();
        let prev = PreviousFire {
            scheduled_at: utc("2026-02-06T21:00:00Z"),
            completed_at: utc("2026-02-06T21:30:00Z"),
            fire_count: 1,
        };
        assert_eq!(hourly.next_fire(&prev, Some(&night)), Some(utc("2026-02-07T06:00:00Z")));
        // Everything excluded: no next fire.
        let always = crate::calendar::CronCalendar::new(CronExpression::parse("* * * * * *").unwrap(), Tz::UTC);
        assert_eq!(daily.next_fire(&prev, Some(&always)), None);
        assert_eq!(hourly.next_fire(&prev, Some(&always)), None);
    }

    #[test]
    fn intervals_format_and_parse() {
        for (text, secs, nanos) in [
            ("00:10:00", 600, 0),
            ("1.00:00:00", 86_400, 0),
            ("23:59:59.9999999", 86_399, 999_999_900),
            ("00:00:00.000000001", 0, 1),
        ] {
            let d = parse_interval(text).unwrap();
            assert_eq!(d, Duration::new(secs, nanos));
            assert_eq!(format_interval(d), text);
        }
        assert_eq!(parse_interval("0:5:0").unwrap(), Duration::from_secs(300));
        for bad in
            ["", "10", "00:10", "24:00:00", "-1:00:00", "00:00:60", "00:00:00.", "00:00:00.1234567890", "a.00:00:00"]
        {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
