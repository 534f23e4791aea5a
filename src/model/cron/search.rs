//! The search: jump field by field through wall-clock time, then map the wall time to
//! UTC, skipping wall times that do not exist (DST gap) and second occurrences of wall
//! times that exist twice (DST fold).

use chrono::{DateTime, LocalResult, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use super::{Compiled, DayOfMonth, DayOfWeek, SEARCH_YEARS_MAX, YEAR_MIN};
use crate::timezone::ZoneTable;

pub(super) const ALL_SECONDS: u64 = (1 << 60) - 1;
pub(super) const ALL_MINUTES: u64 = (1 << 60) - 1;
pub(super) const ALL_HOURS: u32 = (1 << 24) - 1;

/// Bits 0, 7, 14, 21 and 28: every seventh day from the first.
const EVERY_SEVENTH_DAY: u32 = 0x1020_4081;

/// How far ahead, in seconds, the DST skip probes for the end of a gap or fold. Real
/// transitions are at most a day long (Samoa skipped 2011-12-30 whole).
const TRANSITION_PROBE_SECONDS_MAX: i64 = 3 * 86_400;

const SECONDS_PER_DAY: i64 = 86_400;

/// A wall-clock time broken into fields, for the field-by-field search. Ordering is
/// chronological (fields compared most significant first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Wall {
    year: i32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Wall {
    /// The wall time `seconds` after 1970-01-01T00:00:00 on the same (zone-less) clock.
    fn from_seconds(seconds: i64) -> Wall {
        let days = seconds.div_euclid(SECONDS_PER_DAY);
        let of_day = seconds.rem_euclid(SECONDS_PER_DAY) as u32;
        let (year, month, day) = civil_from_days(days);
        Wall { year, month, day, hour: of_day / 3600, minute: of_day / 60 % 60, second: of_day % 60 }
    }

    /// Inverse of [`Wall::from_seconds`].
    fn to_seconds(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * SECONDS_PER_DAY
            + i64::from(self.hour * 3600 + self.minute * 60 + self.second)
    }

    /// The same wall time `years` later (Feb 29 becomes Feb 28 in a common year).
    fn years_later(self, years: i32) -> Wall {
        let year = self.year.saturating_add(years);
        Wall { year, day: self.day.min(days_in_month(year, self.month)), ..self }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm; after
/// the 400-year era split every quantity is small and non-negative, so the divisions by
/// constants compile to unsigned multiply-shifts).
fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let year_of_era = (y - era * 400) as u32;
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + i64::from(day_of_era) - 719_468
}

/// Inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = (z - era * 146_097) as u32;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = i64::from(year_of_era) + era * 400 + i64::from(month <= 2);
    (year as i32, month, day)
}

/// Offset of `tz` from UTC at the UTC instant `seconds`, in seconds.
fn utc_offset(tz: &Tz, seconds: i64) -> Option<i64> {
    if let Some(offset) = ZoneTable::of(tz).and_then(|table| table.offset_at(seconds)) {
        return Some(offset);
    }
    let naive = DateTime::from_timestamp(seconds, 0)?.naive_utc();
    Some(i64::from(tz.offset_from_utc_datetime(&naive).fix().local_minus_utc()))
}

/// The UTC instants at which the wall time `wall_seconds` occurs in `tz`: none (DST
/// gap), one, or two (DST fold; earlier first).
fn wall_to_utc(tz: &Tz, wall_seconds: i64) -> LocalResult<i64> {
    if let Some(result) = ZoneTable::of(tz).and_then(|table| table.wall_to_utc(wall_seconds)) {
        return result;
    }
    let Some(naive) = DateTime::from_timestamp(wall_seconds, 0).map(|t| t.naive_utc()) else {
        return LocalResult::None;
    };
    let instant = |offset: &<Tz as TimeZone>::Offset| wall_seconds - i64::from(offset.fix().local_minus_utc());
    match tz.offset_from_local_datetime(&naive) {
        LocalResult::None => LocalResult::None,
        LocalResult::Single(offset) => LocalResult::Single(instant(&offset)),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (instant(&a), instant(&b));
            LocalResult::Ambiguous(a.min(b), a.max(b))
        }
    }
}

pub(super) fn next_after(c: &Compiled, after: DateTime<Utc>, tz: &Tz) -> Option<DateTime<Utc>> {
    // The first whole second strictly after `after`.
    let after_seconds = after.timestamp();
    let start = after_seconds.checked_add(1)?;
    // The search window: less than SEARCH_YEARS_MAX years after the first candidate.
    if is_utc(tz) {
        let from = Wall::from_seconds(start);
        let wall = next_wall(c, from, from.years_later(SEARCH_YEARS_MAX))?;
        return DateTime::from_timestamp(wall.to_seconds(), 0);
    }
    let offset = utc_offset(tz, start)?;
    let mut from = Wall::from_seconds(start + offset);
    let end = from.years_later(SEARCH_YEARS_MAX);
    loop {
        let wall = next_wall(c, from, end)?.to_seconds();
        let resolved = match wall_to_utc(tz, wall) {
            LocalResult::Single(t) if t > after_seconds => return DateTime::from_timestamp(t, 0),
            // Unreachable for real zones (a later wall outside a fold is a later instant);
            // step on rather than return a time that is not strictly after.
            LocalResult::Single(_) => wall + 1,
            LocalResult::Ambiguous(first, _) if first > after_seconds => return DateTime::from_timestamp(first, 0),
            // The first occurrence is already past, so we are inside the second one: no
            // repeated wall time fires again. Skip to the end of the fold.
            LocalResult::Ambiguous(..) => first_unambiguous_wall(tz, wall),
            // Skipped by a DST jump: does not fire. Skip to the end of the gap.
            LocalResult::None => first_unambiguous_wall(tz, wall),
        };
        from = Wall::from_seconds(resolved);
    }
}

pub(super) fn matches(c: &Compiled, at: DateTime<Utc>, tz: &Tz) -> bool {
    let seconds = at.timestamp();
    let offset = if is_utc(tz) { 0 } else { utc_offset(tz, seconds).unwrap_or(0) };
    let wall = Wall::from_seconds(seconds + offset);
    year_matches(c, wall.year)
        && bit64(u64::from(c.months), wall.month)
        && bit64(u64::from(day_mask(c, wall.year, wall.month)), wall.day)
        && bit64(u64::from(c.hours), wall.hour)
        && bit64(c.minutes, wall.minute)
        && bit64(c.seconds, wall.second)
}

/// Zones whose offset is always zero, so wall time is UTC and no mapping is needed.
fn is_utc(tz: &Tz) -> bool {
    matches!(tz, Tz::UTC | Tz::Etc__UTC | Tz::Etc__UCT | Tz::Etc__Universal | Tz::Etc__Zulu | Tz::Etc__GMT | Tz::GMT)
}

/// The first wall time (as seconds) at or after `wall` that maps to exactly one instant.
/// Gaps and folds are contiguous, so probe forward in doubling steps until a single
/// mapping is found, then bisect between the last probe that was not single and that one.
fn first_unambiguous_wall(tz: &Tz, wall: i64) -> i64 {
    let single = |seconds: i64| matches!(wall_to_utc(tz, wall + seconds), LocalResult::Single(_));
    let mut bad = 0i64;
    let mut step = 1i64;
    let good = loop {
        if step > TRANSITION_PROBE_SECONDS_MAX {
            return wall + TRANSITION_PROBE_SECONDS_MAX;
        }
        if single(step) {
            break step;
        }
        bad = step;
        step *= 2;
    };
    let (mut bad, mut good) = (bad, good);
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if single(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    wall + good
}

/// The smallest wall time ≥ `from` and < `end` matching every field, or `None`.
fn next_wall(c: &Compiled, from: Wall, end: Wall) -> Option<Wall> {
    let mut w = from;
    loop {
        if w.year > end.year {
            return None;
        }
        if !year_matches(c, w.year) {
            w = Wall { year: next_year(c, w.year + 1)?, month: 1, day: 1, hour: 0, minute: 0, second: 0 };
            continue;
        }
        match next_bit(u64::from(c.months), w.month) {
            None => {
                w = Wall { year: w.year + 1, month: 1, day: 1, hour: 0, minute: 0, second: 0 };
                continue;
            }
            Some(month) if month != w.month => w = Wall { month, day: 1, hour: 0, minute: 0, second: 0, ..w },
            Some(_) => {}
        }
        match next_bit(u64::from(day_mask(c, w.year, w.month)), w.day) {
            None => {
                w = next_month(w);
                continue;
            }
            Some(day) if day != w.day => w = Wall { day, hour: 0, minute: 0, second: 0, ..w },
            Some(_) => {}
        }
        match next_bit(u64::from(c.hours), w.hour) {
            None => {
                // Past the month's last day the day mask has no bit, so the next pass
                // moves on to the next month.
                w = Wall { day: w.day + 1, hour: 0, minute: 0, second: 0, ..w };
                continue;
            }
            Some(hour) if hour != w.hour => w = Wall { hour, minute: 0, second: 0, ..w },
            Some(_) => {}
        }
        match next_bit(c.minutes, w.minute) {
            None => {
                w = Wall { hour: w.hour + 1, minute: 0, second: 0, ..w };
                continue;
            }
            Some(minute) if minute != w.minute => w = Wall { minute, second: 0, ..w },
            Some(_) => {}
        }
        match next_bit(c.seconds, w.second) {
            None => {
                w = Wall { minute: w.minute + 1, second: 0, ..w };
                continue;
            }
            Some(second) => w.second = second,
        }
        return (w < end).then_some(w);
    }
}

fn next_month(w: Wall) -> Wall {
    if w.month == 12 {
        Wall { year: w.year + 1, month: 1, day: 1, hour: 0, minute: 0, second: 0 }
    } else {
        Wall { month: w.month + 1, day: 1, hour: 0, minute: 0, second: 0, ..w }
    }
}

/// The lowest set bit at position ≥ `from`.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let rest = bits >> from;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

fn bit64(bits: u64, n: u32) -> bool {
    n < 64 && bits & (1 << n) != 0
}

fn year_matches(c: &Compiled, year: i32) -> bool {
    match &c.years {
        None => true,
        Some(bits) => {
            let offset = year - YEAR_MIN;
            (0..192).contains(&offset) && bits[offset as usize / 64] & (1 << (offset % 64)) != 0
        }
    }
}

/// The first year ≥ `from` the year field allows.
fn next_year(c: &Compiled, from: i32) -> Option<i32> {
    let Some(bits) = &c.years else { return Some(from) };
    let mut offset = (from - YEAR_MIN).max(0);
    while offset < 192 {
        let word = bits[offset as usize / 64] >> (offset % 64);
        if word != 0 {
            return Some(YEAR_MIN + offset + word.trailing_zeros() as i32);
        }
        offset = (offset / 64 + 1) * 64;
    }
    None
}

pub(super) fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Weekday of the first day of the month, 0 = Sunday (1970-01-01 was a Thursday).
fn first_weekday(year: i32, month: u32) -> u32 {
    (days_from_civil(year, month, 1) + 4).rem_euclid(7) as u32
}

/// Bit d set (1-based) = day d of this month matches the day-of-month and day-of-week
/// fields: their union when both are restricted, otherwise the restricted one.
fn day_mask(c: &Compiled, year: i32, month: u32) -> u32 {
    let last = days_in_month(year, month);
    let valid = ((1u64 << (last + 1)) - 2) as u32;
    let dom = &c.day_of_month;
    let dow = &c.day_of_week;
    if !dom.restricted && !dow.restricted {
        return valid;
    }
    let first = first_weekday(year, month);
    let dom_days = if dom.restricted { day_of_month_mask(dom, year, month, last, first) & valid } else { 0 };
    let dow_days = if dow.restricted { day_of_week_mask(dow, last, first) & valid } else { 0 };
    dom_days | dow_days
}

fn weekday_of(day: u32, first: u32) -> u32 {
    (first + day - 1) % 7
}

fn day_of_month_mask(dom: &DayOfMonth, year: i32, month: u32, last: u32, first: u32) -> u32 {
    let _ = (year, month);
    let mut mask = dom.days;
    let mut before_last = dom.before_last;
    while before_last != 0 {
        let n = before_last.trailing_zeros();
        before_last &= before_last - 1;
        if n < last {
            mask |= 1 << (last - n);
        }
    }
    let mut nearest = dom.nearest_weekday;
    while nearest != 0 {
        let n = nearest.trailing_zeros();
        nearest &= nearest - 1;
        if n <= last {
            mask |= 1 << nearest_weekday(n, last, first);
        }
    }
    if dom.last_weekday {
        let day = match weekday_of(last, first) {
            0 => last - 2,
            6 => last - 1,
            _ => last,
        };
        mask |= 1 << day;
    }
    mask
}

/// The weekday (Mon–Fri) nearest day `n`, never leaving the month.
fn nearest_weekday(n: u32, last: u32, first: u32) -> u32 {
    match weekday_of(n, first) {
        // Saturday: Friday before, unless that is in the previous month.
        6 if n == 1 => 3,
        6 => n - 1,
        // Sunday: Monday after, unless that is in the next month.
        0 if n == last => n - 2,
        0 => n + 1,
        _ => n,
    }
}

fn day_of_week_mask(dow: &DayOfWeek, last: u32, first: u32) -> u32 {
    let mut mask = 0u32;
    for weekday in 0..7u32 {
        let bit = 1u8 << weekday;
        let first_day = 1 + (weekday + 7 - first) % 7;
        if dow.days & bit != 0 {
            mask |= EVERY_SEVENTH_DAY << first_day;
        }
        if dow.last & bit != 0 {
            mask |= 1 << (last - (weekday_of(last, first) + 7 - weekday) % 7);
        }
        for (k, weekdays) in dow.nth.iter().enumerate() {
            let day = first_day + 7 * k as u32;
            if weekdays & bit != 0 && day <= last {
                mask |= 1 << day;
            }
        }
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::super::CronExpression;
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn next(expr: &str, after: &str, tz: Tz) -> Option<String> {
        CronExpression::parse(expr).unwrap().next_after(utc(after), &tz).map(|t| t.to_rfc3339())
    }

    #[test]
    fn civil_arithmetic_matches_chrono() {
        use chrono::{Datelike, NaiveDate};
        for days in (-1_000_000i64..1_000_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            let date = NaiveDate::from_num_days_from_ce_opt(days as i32 + 719_163).unwrap();
            assert_eq!((y, m, d), (date.year(), date.month(), date.day()), "day {days}");
            assert_eq!(days_from_civil(y, m, d), days);
            assert_eq!(first_weekday(y, m), date.with_day(1).unwrap().weekday().num_days_from_sunday());
        }
        let wall = Wall::from_seconds(-1);
        assert_eq!((wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second), (1969, 12, 31, 23, 59, 59));
        assert_eq!(wall.to_seconds(), -1);
        let leap = Wall { year: 2028, month: 2, day: 29, hour: 0, minute: 0, second: 0 };
        assert_eq!(leap.years_later(5).day, 28);
    }

    #[test]
    fn strictly_after_and_sub_second_inputs() {
        assert_eq!(next("* * * * * *", "2026-01-01T00:00:00Z", Tz::UTC).unwrap(), "2026-01-01T00:00:01+00:00");
        assert_eq!(next("* * * * * *", "2026-01-01T00:00:00.5Z", Tz::UTC).unwrap(), "2026-01-01T00:00:01+00:00");
        assert_eq!(next("0 0 * * *", "2026-12-31T23:59:59Z", Tz::UTC).unwrap(), "2027-01-01T00:00:00+00:00");
    }

    #[test]
    fn day_extras_pick_the_right_days() {
        let tz = Tz::UTC;
        // 2026-02: Feb 1 is a Sunday, 28 days.
        assert_eq!(next("0 0 0 L * ?", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-02-28T00:00:00+00:00");
        assert_eq!(next("0 0 0 L-2 * ?", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-02-26T00:00:00+00:00");
        assert_eq!(next("0 0 0 LW * ?", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-02-27T00:00:00+00:00");
        // 2026-02-01 is a Sunday: 1W is Monday the 2nd.
        assert_eq!(next("0 0 0 1W * ?", "2026-01-31T00:00:00Z", tz).unwrap(), "2026-02-02T00:00:00+00:00");
        // 2026-08-01 is a Saturday: 1W is Monday the 3rd, not Friday in July.
        assert_eq!(next("0 0 0 1W * ?", "2026-07-31T00:00:00Z", tz).unwrap(), "2026-08-03T00:00:00+00:00");
        // 2026-05-31 is a Sunday: 31W is Friday the 29th.
        assert_eq!(next("0 0 0 31W * ?", "2026-05-01T00:00:00Z", tz).unwrap(), "2026-05-29T00:00:00+00:00");
        // Last Friday of February 2026 is the 27th; second Tuesday is the 10th.
        assert_eq!(next("0 0 0 ? * FRIL", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-02-27T00:00:00+00:00");
        assert_eq!(next("0 0 0 ? * 2#2", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-02-10T00:00:00+00:00");
        // Fifth Monday: February 2026 has none, March has the 30th.
        assert_eq!(next("0 0 0 ? * MON#5", "2026-02-01T00:00:00Z", tz).unwrap(), "2026-03-30T00:00:00+00:00");
    }

    #[test]
    fn dom_and_dow_union_when_both_restricted() {
        // The 13th, or any Friday: 2026-02-06 is the first Friday after Feb 1.
        assert_eq!(next("0 0 0 13 * FRI", "2026-02-01T00:00:00Z", Tz::UTC).unwrap(), "2026-02-06T00:00:00+00:00");
        assert_eq!(next("0 0 0 13 * FRI", "2026-02-10T00:00:00Z", Tz::UTC).unwrap(), "2026-02-13T00:00:00+00:00");
        // With * in one field, the other alone decides.
        assert_eq!(next("0 0 0 * * FRI", "2026-02-01T00:00:00Z", Tz::UTC).unwrap(), "2026-02-06T00:00:00+00:00");
    }

    #[test]
    fn impossible_dates_have_no_next_and_leap_days_are_found() {
        // 30 FEB is refused when parsed; 29 FEB only in years without one never comes.
        assert!(CronExpression::parse("0 0 0 30 2 ?").is_err());
        assert_eq!(next("0 0 0 29 2 ? 2026-2027", "2026-01-01T00:00:00Z", Tz::UTC), None);
        assert_eq!(next("0 0 0 29 2 ?", "2026-01-01T00:00:00Z", Tz::UTC).unwrap(), "2028-02-29T00:00:00+00:00");
        assert_eq!(next("0 0 0 1 1 ? 2030", "2026-01-01T00:00:00Z", Tz::UTC).unwrap(), "2030-01-01T00:00:00+00:00");
        // More than five years ahead: none.
        assert_eq!(next("0 0 0 1 1 ? 2032", "2026-01-01T00:00:00Z", Tz::UTC), None);
        assert_eq!(next("0 0 0 1 1 ? 2020", "2026-01-01T00:00:00Z", Tz::UTC), None);
        assert_eq!(next("0 0 0 29 2 ? 2097-2099", "2096-03-01T00:00:00Z", Tz::UTC), None);
    }

    #[test]
    fn dst_gap_does_not_fire() {
        // New York 2026-03-08: 02:00–02:59 does not exist.
        let ny = Tz::America__New_York;
        assert_eq!(next("0 30 2 * * *", "2026-03-07T12:00:00Z", ny).unwrap(), "2026-03-09T06:30:00+00:00");
        // Every minute across the gap: 01:59 EST then 03:00 EDT.
        assert_eq!(next("0 * * * * *", "2026-03-08T06:59:00Z", ny).unwrap(), "2026-03-08T07:00:00+00:00");
    }

    #[test]
    fn dst_fold_fires_once_at_the_first_occurrence() {
        // New York 2026-11-01: 01:00–01:59 occurs twice (EDT 05:xx UTC, then EST 06:xx UTC).
        let ny = Tz::America__New_York;
        assert_eq!(next("0 30 1 * * *", "2026-11-01T04:00:00Z", ny).unwrap(), "2026-11-01T05:30:00+00:00");
        assert_eq!(next("0 30 1 * * *", "2026-11-01T05:30:00Z", ny).unwrap(), "2026-11-02T06:30:00+00:00");
        // Starting inside the second occurrence: the repeated minutes do not fire again.
        assert_eq!(next("0 * * * * *", "2026-11-01T06:10:00Z", ny).unwrap(), "2026-11-01T07:00:00+00:00");
        // Last minute of the first occurrence, then straight to 02:00 EST.
        assert_eq!(next("0 * * * * *", "2026-11-01T05:59:00Z", ny).unwrap(), "2026-11-01T07:00:00+00:00");
    }

    #[test]
    fn half_hour_dst_and_southern_hemisphere() {
        // Lord Howe 2026-04-05: 02:00 (+11) falls back 30 minutes to 01:30 (+10:30).
        let lh = Tz::Australia__Lord_Howe;
        assert_eq!(next("0 45 1 * * *", "2026-04-04T14:00:00Z", lh).unwrap(), "2026-04-04T14:45:00+00:00");
        assert_eq!(next("0 45 1 * * *", "2026-04-04T14:45:00Z", lh).unwrap(), "2026-04-05T15:15:00+00:00");
        // Sydney 2026-10-04: 02:00 jumps to 03:00.
        let sy = Tz::Australia__Sydney;
        assert_eq!(next("0 30 2 * * *", "2026-10-03T00:00:00Z", sy).unwrap(), "2026-10-04T15:30:00+00:00");
    }

    #[test]
    fn matches_uses_wall_time() {
        let expr = CronExpression::parse("* * 0-7 * * *").unwrap();
        let sh = Tz::Asia__Shanghai;
        assert!(expr.matches(utc("2026-05-01T23:30:00Z"), &sh)); // 07:30 local
        assert!(!expr.matches(utc("2026-05-02T00:00:00Z"), &sh)); // 08:00 local
    }
}
