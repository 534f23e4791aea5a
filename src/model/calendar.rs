//! Exclusion calendars (SPEC §5): spans of time in which a trigger does not fire.
//!
//! Every calendar answers [`JobCalendar::is_excluded`] and, for an excluded instant, how
//! far the excluded span surely reaches ([`JobCalendar::excluded_until`]), so next-fire
//! computation jumps over a holiday or a night in a few steps instead of probing every
//! candidate in it. Calendars read wall-clock time in their own time zone (UTC unless
//! given).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use chrono::{
    DateTime, Datelike, Duration as TimeDelta, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike, Utc,
    Weekday,
};
use chrono_tz::Tz;

use crate::cron::{CronExpression, WholeUnit};
use crate::name::CalendarName;
use crate::timezone::ZoneTable;

/// How many excluded spans [`first_included`] jumps over before giving up.
pub const EXCLUDED_SPANS_MAX: usize = 10_000;

/// A calendar of excluded instants.
pub trait JobCalendar: Send + Sync + fmt::Debug {
    /// Whether no trigger using this calendar may fire at `at`.
    fn is_excluded(&self, at: DateTime<Utc>) -> bool;

    /// For an excluded `at`: an instant after `at` such that every instant from `at` up
    /// to (not including) it is excluded. Next-fire computation resumes there. The
    /// default is one microsecond later, always correct and slow; implementations return
    /// the end of the span when they know it.
    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        at + TimeDelta::microseconds(1)
    }
}

/// The first instant at or after `at` that `calendar` does not exclude, or `None` when
/// [`EXCLUDED_SPANS_MAX`] consecutive spans are excluded.
pub fn first_included(calendar: &dyn JobCalendar, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut t = at;
    for _ in 0..EXCLUDED_SPANS_MAX {
        if !calendar.is_excluded(t) {
            return Some(t);
        }
        let until = calendar.excluded_until(t);
        t = if until > t { until } else { t + TimeDelta::microseconds(1) };
    }
    None
}

/// How far apart [`offset_change`] probes a zone's offset where its [`ZoneTable`] does not
/// reach: no zone changes it twice within an hour.
const OFFSET_PROBE: TimeDelta = TimeDelta::hours(1);

/// The first instant after `at` and before `before` at which `tz`'s offset from UTC is no
/// longer the one at `at`, if there is one.
fn offset_change(tz: &Tz, at: DateTime<Utc>, before: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if let Some(change) = ZoneTable::of(tz).and_then(|table| table.change_after(at.timestamp())) {
        return change.and_then(|s| DateTime::from_timestamp(s, 0)).filter(|t| *t < before);
    }
    // Beyond the table (or a zone without one): probe, then narrow the change down to
    // the whole microsecond.
    let offset = |t: DateTime<Utc>| tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    let start = offset(at);
    let mut same = at;
    while same < before {
        let probe = same.checked_add_signed(OFFSET_PROBE).unwrap_or(before).min(before);
        if offset(probe) == start {
            same = probe;
            continue;
        }
        let (mut same, mut changed) = (same.timestamp_micros(), probe.timestamp_micros());
        while changed - same > 1 {
            let mid = same + (changed - same) / 2;
            match DateTime::from_timestamp_micros(mid) {
                Some(t) if offset(t) == start => same = mid,
                _ => changed = mid,
            }
        }
        return DateTime::from_timestamp_micros(changed).filter(|t| *t < before);
    }
    None
}

/// When wall-clock time in `tz`, running on from `at`, reaches `wall` (ahead of `at`'s own
/// wall time), or, sooner, when `tz`'s offset changes (the wall time then jumps, forward
/// or back, and must be read afresh). Up to the instant returned the wall time runs evenly
/// from `at`'s, below `wall`: a span read on the wall clock surely lasts that long.
fn wall_reached(tz: &Tz, at: DateTime<Utc>, wall: NaiveDateTime) -> DateTime<Utc> {
    let offset = TimeDelta::seconds(i64::from(tz.offset_from_utc_datetime(&at.naive_utc()).fix().local_minus_utc()));
    let reached = wall.checked_sub_signed(offset).map_or(DateTime::<Utc>::MAX_UTC, |utc| utc.and_utc());
    let reached = reached.max(at.checked_add_signed(TimeDelta::microseconds(1)).unwrap_or(at));
    offset_change(tz, at, reached).unwrap_or(reached)
}

/// When the local day `at` falls on ends (or the zone's offset changes first).
fn end_of_day(tz: &Tz, at: DateTime<Utc>) -> DateTime<Utc> {
    let date = at.with_timezone(tz).date_naive();
    match date.succ_opt() {
        Some(next) => wall_reached(tz, at, next.and_time(NaiveTime::MIN)),
        None => DateTime::<Utc>::MAX_UTC,
    }
}

/// Whole days, given as dates, in a time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolidayCalendar {
    dates: BTreeSet<NaiveDate>,
    tz: Tz,
}

impl HolidayCalendar {
    /// Excludes each of `dates` (whole local days in `tz`).
    pub fn new(dates: impl IntoIterator<Item = NaiveDate>, tz: Tz) -> Self {
        Self { dates: dates.into_iter().collect(), tz }
    }

    /// The excluded dates, ascending.
    pub fn dates(&self) -> impl Iterator<Item = NaiveDate> + '_ {
        self.dates.iter().copied()
    }
}

impl JobCalendar for HolidayCalendar {
    fn is_excluded(&self, at: DateTime<Utc>) -> bool {
        self.dates.contains(&at.with_timezone(&self.tz).date_naive())
    }

    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        end_of_day(&self.tz, at)
    }
}

/// Whole weekdays, every week, in a time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeeklyCalendar {
    /// Bit d set = weekday d excluded, 0 = Sunday.
    days: u8,
    tz: Tz,
}

impl WeeklyCalendar {
    /// Excludes `days`; with no days given, Saturday and Sunday.
    pub fn new(days: &[Weekday], tz: Tz) -> Self {
        let mut mask = days.iter().fold(0u8, |mask, day| mask | 1 << day.num_days_from_sunday());
        if mask == 0 {
            mask = 1 << Weekday::Sat.num_days_from_sunday() | 1 << Weekday::Sun.num_days_from_sunday();
        }
        Self { days: mask, tz }
    }

    /// Whether `day` is excluded.
    pub fn excludes_day(&self, day: Weekday) -> bool {
        self.days & (1 << day.num_days_from_sunday()) != 0
    }
}

impl JobCalendar for WeeklyCalendar {
    fn is_excluded(&self, at: DateTime<Utc>) -> bool {
        self.excludes_day(at.with_timezone(&self.tz).weekday())
    }

    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        end_of_day(&self.tz, at)
    }
}

/// A daily span of wall-clock time, `from` inclusive, `to` exclusive; `from > to` spans
/// midnight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyCalendar {
    from: NaiveTime,
    to: NaiveTime,
    tz: Tz,
}

/// A calendar that cannot be built as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid calendar: {0}")]
pub struct CalendarError(String);

impl DailyCalendar {
    /// Excludes `from..to` every day in `tz`.
    ///
    /// # Errors
    /// [`CalendarError`] when `from == to` (an empty span is surely a mistake).
    pub fn new(from: NaiveTime, to: NaiveTime, tz: Tz) -> Result<Self, CalendarError> {
        if from == to {
            return Err(CalendarError(format!("daily span from {from} to {to} is empty")));
        }
        Ok(Self { from, to, tz })
    }

    fn excludes_time(&self, t: NaiveTime) -> bool {
        if self.from < self.to {
            self.from <= t && t < self.to
        } else {
            t >= self.from || t < self.to
        }
    }
}

impl JobCalendar for DailyCalendar {
    fn is_excluded(&self, at: DateTime<Utc>) -> bool {
        self.excludes_time(at.with_timezone(&self.tz).time())
    }

    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        let local = at.with_timezone(&self.tz).naive_local();
        // The span ends at `to` today if that is still ahead, else at `to` tomorrow.
        let end = if local.time() < self.to {
            local.date().and_time(self.to)
        } else {
            match local.date().succ_opt() {
                Some(next) => next.and_time(self.to),
                None => return DateTime::<Utc>::MAX_UTC,
            }
        };
        wall_reached(&self.tz, at, end)
    }
}

/// Every second whose wall-clock time in a time zone matches a cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronCalendar {
    expression: CronExpression,
    tz: Tz,
}

impl CronCalendar {
    /// Excludes the seconds `expression` matches, read in `tz`.
    pub fn new(expression: CronExpression, tz: Tz) -> Self {
        Self { expression, tz }
    }
}

impl JobCalendar for CronCalendar {
    fn is_excluded(&self, at: DateTime<Utc>) -> bool {
        self.expression.matches(at, &self.tz)
    }

    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        let wall = at.with_timezone(&self.tz).naive_local();
        let second = wall.with_nanosecond(0).unwrap_or(wall);
        // A match covers the whole unit, so its end is surely excluded up to there.
        let end = match self.expression.whole_unit() {
            WholeUnit::Second => second + TimeDelta::seconds(1),
            WholeUnit::Minute => second.with_second(0).unwrap_or(second) + TimeDelta::minutes(1),
            WholeUnit::Hour => second.date().and_hms_opt(second.hour(), 0, 0).unwrap_or(second) + TimeDelta::hours(1),
            WholeUnit::Day => second.date().and_time(NaiveTime::MIN) + TimeDelta::days(1),
        };
        wall_reached(&self.tz, at, end)
    }
}

/// Excludes what any member excludes.
#[derive(Debug, Clone, Default)]
pub struct CompositeCalendar {
    members: Vec<Arc<dyn JobCalendar>>,
}

impl CompositeCalendar {
    /// A calendar excluding the union of `members`.
    pub fn new(members: impl IntoIterator<Item = Arc<dyn JobCalendar>>) -> Self {
        Self { members: members.into_iter().collect() }
    }
}

impl JobCalendar for CompositeCalendar {
    fn is_excluded(&self, at: DateTime<Utc>) -> bool {
        self.members.iter().any(|m| m.is_excluded(at))
    }

    fn excluded_until(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        // Each excluding member covers [at, its end), so the union covers up to the
        // furthest of those ends.
        self.members
            .iter()
            .filter(|m| m.is_excluded(at))
            .map(|m| m.excluded_until(at))
            .max()
            .unwrap_or(at + TimeDelta::microseconds(1))
    }
}

/// The named calendars of a scheduler, which triggers refer to by name.
#[derive(Debug, Clone, Default)]
pub struct Calendars {
    by_name: BTreeMap<CalendarName, Arc<dyn JobCalendar>>,
}

impl Calendars {
    /// No calendars.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `calendar` under `name`, replacing any calendar of that name.
    pub fn insert(&mut self, name: CalendarName, calendar: Arc<dyn JobCalendar>) {
        self.by_name.insert(name, calendar);
    }

    /// The calendar registered under `name`.
    pub fn get(&self, name: &CalendarName) -> Option<&dyn JobCalendar> {
        self.by_name.get(name).map(|c| c.as_ref())
    }

    /// Whether a calendar is registered under `name`.
    pub fn contains(&self, name: &CalendarName) -> bool {
        self.by_name.contains_key(name)
    }

    /// The registered names, ascending.
    pub fn names(&self) -> impl Iterator<Item = &CalendarName> {
        self.by_name.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn holiday_excludes_whole_local_days() {
        let cal = HolidayCalendar::new([NaiveDate::from_ymd_opt(2026, 10, 1).unwrap()], Tz::Asia__Shanghai);
        assert!(cal.is_excluded(utc("2026-09-30T16:00:00Z"))); // 00:00 Oct 1 Shanghai
        assert!(!cal.is_excluded(utc("2026-09-30T15:59:59Z")));
        assert_eq!(cal.excluded_until(utc("2026-09-30T20:00:00Z")), utc("2026-10-01T16:00:00Z"));
        assert_eq!(first_included(&cal, utc("2026-09-30T16:00:00Z")), Some(utc("2026-10-01T16:00:00Z")));
    }

    #[test]
    fn weekly_defaults_to_weekends() {
        let cal = WeeklyCalendar::new(&[], Tz::UTC);
        assert!(cal.is_excluded(utc("2026-02-07T10:00:00Z"))); // Saturday
        assert!(cal.is_excluded(utc("2026-02-08T10:00:00Z"))); // Sunday
        assert!(!cal.is_excluded(utc("2026-02-09T10:00:00Z")));
        assert_eq!(first_included(&cal, utc("2026-02-07T10:00:00Z")), Some(utc("2026-02-09T00:00:00Z")));
        let only_monday = WeeklyCalendar::new(&[Weekday::Mon], Tz::UTC);
        assert!(only_monday.is_excluded(utc("2026-02-09T10:00:00Z")));
        assert!(!only_monday.is_excluded(utc("2026-02-07T10:00:00Z")));
    }

    #[test]
    fn daily_spans_midnight_when_from_is_after_to() {
        let t = |h, m| NaiveTime::from_hms_opt(h, m, 0).unwrap();
        let night = DailyCalendar::new(t(22, 0), t(6, 0), Tz::UTC).unwrap();
        assert!(night.is_excluded(utc("2026-02-07T22:00:00Z")));
        assert!(night.is_excluded(utc("2026-02-08T05:59:59Z")));
        assert!(!night.is_excluded(utc("2026-02-08T06:00:00Z")));
        assert!(!night.is_excluded(utc("2026-02-07T21:59:59Z")));
        assert_eq!(first_included(&night, utc("2026-02-07T23:00:00Z")), Some(utc("2026-02-08T06:00:00Z")));
        assert_eq!(first_included(&night, utc("2026-02-08T01:00:00Z")), Some(utc("2026-02-08T06:00:00Z")));
        let lunch = DailyCalendar::new(t(12, 0), t(13, 0), Tz::UTC).unwrap();
        assert!(lunch.is_excluded(utc("2026-02-07T12:30:00Z")));
        assert!(!lunch.is_excluded(utc("2026-02-07T13:00:00Z")));
        assert!(DailyCalendar::new(t(1, 0), t(1, 0), Tz::UTC).is_err());
    }

    #[test]
    fn daily_spans_stop_where_a_dst_fold_turns_the_clock_back() {
        // Berlin, 2026-10-25: 03:00 CEST (01:00Z) becomes 02:00 CET, so 02:00-02:59 runs twice.
        let t = |h, m| NaiveTime::from_hms_opt(h, m, 0).unwrap();
        let early = DailyCalendar::new(t(2, 0), t(2, 30), Tz::Europe__Berlin).unwrap();
        // In the second 02:10 (CET) the span ends at the second 02:30, not the first one
        // (behind it): before, the search crept on by a microsecond and gave up (no next fire).
        assert_eq!(early.excluded_until(utc("2026-10-25T01:10:00Z")), utc("2026-10-25T01:30:00Z"));
        assert_eq!(first_included(&early, utc("2026-10-25T01:10:00Z")), Some(utc("2026-10-25T01:30:00Z")));
        // A span across 03:00 is left when the clock turns back to 02:00 CET, not at 03:10 CET
        // (before, 02:00-02:49 CET were skipped as if excluded).
        let across = DailyCalendar::new(t(2, 50), t(3, 10), Tz::Europe__Berlin).unwrap();
        assert_eq!(across.excluded_until(utc("2026-10-25T00:55:00Z")), utc("2026-10-25T01:00:00Z"));
        assert_eq!(first_included(&across, utc("2026-10-25T00:55:00Z")), Some(utc("2026-10-25T01:00:00Z")));
        // A span whose end a DST gap skips ends where the gap does (03:00 CEST, 01:00Z).
        let gap = DailyCalendar::new(t(1, 0), t(2, 30), Tz::Europe__Berlin).unwrap();
        assert_eq!(first_included(&gap, utc("2026-03-29T00:30:00Z")), Some(utc("2026-03-29T01:00:00Z")));
    }

    #[test]
    fn cron_calendar_skips_by_whole_units() {
        let cal = CronCalendar::new(CronExpression::parse("* * 0-7 * * *").unwrap(), Tz::UTC);
        assert!(cal.is_excluded(utc("2026-02-07T07:59:59Z")));
        assert!(!cal.is_excluded(utc("2026-02-07T08:00:00Z")));
        assert_eq!(cal.excluded_until(utc("2026-02-07T03:20:00Z")), utc("2026-02-07T04:00:00Z"));
        assert_eq!(first_included(&cal, utc("2026-02-07T00:00:00Z")), Some(utc("2026-02-07T08:00:00Z")));
    }

    #[test]
    fn composite_is_the_union() {
        let t = |h| NaiveTime::from_hms_opt(h, 0, 0).unwrap();
        let cal = CompositeCalendar::new([
            Arc::new(DailyCalendar::new(t(0), t(8), Tz::UTC).unwrap()) as Arc<dyn JobCalendar>,
            Arc::new(DailyCalendar::new(t(6), t(10), Tz::UTC).unwrap()),
            Arc::new(WeeklyCalendar::new(&[], Tz::UTC)),
        ]);
        assert!(cal.is_excluded(utc("2026-02-09T09:00:00Z")));
        assert!(!cal.is_excluded(utc("2026-02-09T10:00:00Z")));
        assert_eq!(first_included(&cal, utc("2026-02-09T01:00:00Z")), Some(utc("2026-02-09T10:00:00Z")));
        assert_eq!(first_included(&cal, utc("2026-02-07T12:00:00Z")), Some(utc("2026-02-09T10:00:00Z")));
    }

    #[test]
    fn a_calendar_excluding_everything_has_no_included_instant() {
        let all = CronCalendar::new(CronExpression::parse("* * * * * *").unwrap(), Tz::UTC);
        assert_eq!(first_included(&all, utc("2026-02-07T00:00:00Z")), None);
    }
}
