//! Goal: calendars skip exactly what they exclude, across daylight-saving changes
//! (SPEC §5). `excluded_until` may only claim instants the calendar excludes, and
//! `first_included` finds the first instant it does not exclude, whenever there is one; a
//! cron schedule with a calendar fires at its first match the calendar does not exclude,
//! an interval at the first instant it does not exclude once the delay is over.
//!
//! Method: proptest over every kind of calendar (and composites of them) in zones with
//! DST changes of an hour and of half an hour, at midnight and at night, or none, at
//! instants near those changes, anywhere in 2018–2027, and before 1969 and after 2110.
//! What a calendar claims is checked against `is_excluded` minute by minute and at random
//! instants in between.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Utc, Weekday};
use chrono_tz::Tz;
use proptest::prelude::*;
use sundial::calendar::{
    first_included, CompositeCalendar, CronCalendar, DailyCalendar, HolidayCalendar, JobCalendar, WeeklyCalendar,
    EXCLUDED_SPANS_MAX,
};
use sundial::cron::CronExpression;
use sundial::schedule::{JobSchedule, PreviousFire};

/// Zones with DST at 02:00/03:00 (Berlin, New York), by half an hour (Lord Howe), at
/// midnight (Beirut, Santiago; São Paulo until 2019), and none (Shanghai, UTC), each with
/// instants (UTC) of its changes or, for those without, of another zone's.
const ZONES: &[(Tz, [&str; 2])] = &[
    (chrono_tz::Europe::Berlin, ["2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"]),
    (chrono_tz::America::New_York, ["2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"]),
    (chrono_tz::Australia::Lord_Howe, ["2026-04-04T15:00:00Z", "2026-10-03T15:30:00Z"]),
    (chrono_tz::Asia::Beirut, ["2026-03-28T22:00:00Z", "2026-10-24T21:00:00Z"]),
    (chrono_tz::America::Santiago, ["2026-04-05T03:00:00Z", "2026-09-06T04:00:00Z"]),
    (chrono_tz::America::Sao_Paulo, ["2018-11-04T03:00:00Z", "2018-02-18T02:00:00Z"]),
    (chrono_tz::Asia::Shanghai, ["2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"]),
    (chrono_tz::UTC, ["2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"]),
];

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// An instant within hours (mostly) or two days of one of `changes`, anywhere in
/// 2018–2027, or before 1969 or after 2110 (beyond the zone tables, where offsets are
/// probed; the 1940s had double summer time).
fn instant(changes: [&'static str; 2]) -> impl Strategy<Value = DateTime<Utc>> {
    let near = (
        prop::sample::select(changes.to_vec()),
        prop_oneof![3 => -10_800i64..10_800, 1 => -172_800i64..172_800],
        0i64..1_000_000,
    )
        .prop_map(|(change, s, us)| utc(change) + TimeDelta::seconds(s) + TimeDelta::microseconds(us));
    let anywhere = (1_514_764_800i64..1_830_297_600).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap());
    let beyond = prop_oneof![-2_208_988_800i64..-31_536_000, 4_417_977_600i64..7_258_118_400]
        .prop_map(|s| DateTime::from_timestamp(s, 0).unwrap());
    prop_oneof![8 => near, 2 => anywhere, 1 => beyond]
}

/// A wall-clock time on a quarter hour, mostly in the hours DST changes happen, or any
/// second.
fn wall_time() -> impl Strategy<Value = NaiveTime> {
    let hour = prop_oneof![prop::sample::select(&[23u32, 0, 1, 2, 3][..]), 0u32..24];
    prop_oneof![
        (hour, prop::sample::select(&[0u32, 15, 30, 45, 59][..]))
            .prop_map(|(h, m)| NaiveTime::from_hms_opt(h, m, 0).unwrap()),
        (0u32..86_400).prop_map(|s| NaiveTime::from_num_seconds_from_midnight_opt(s, 0).unwrap()),
    ]
}

fn cron_calendar_expression() -> impl Strategy<Value = CronExpression> {
    prop::sample::select(
        &[
            "* * 0-7 * * *",
            "* 59 * * * *",
            "* 0-30 2 * * *",
            "* * 2 * * *",
            "* * 23 * * *",
            "* * 0 * * *",
            "0-29 * * * * *",
            "* * * * * SUN",
            "* * * 25 * *",
            "* * 1-3 * * *",
        ][..],
    )
    .prop_map(|text| CronExpression::parse(text).unwrap())
}

/// One calendar of any kind but composite, in `tz`; holidays fall around `changes`.
fn simple_calendar(tz: Tz, changes: [&'static str; 2]) -> impl Strategy<Value = Arc<dyn JobCalendar>> {
    let holiday = (prop::collection::vec(prop::sample::select(changes.to_vec()), 0..3), -1i64..=1).prop_map(
        move |(changes, shift)| {
            let dates: Vec<NaiveDate> =
                changes.iter().map(|c| (utc(c).with_timezone(&tz) + TimeDelta::days(shift)).date_naive()).collect();
            Arc::new(HolidayCalendar::new(dates, tz)) as Arc<dyn JobCalendar>
        },
    );
    let weekly = prop::collection::vec(0u8..7, 0..4).prop_map(move |days| {
        let days: Vec<Weekday> = days.into_iter().map(|d| Weekday::try_from(d).unwrap()).collect();
        Arc::new(WeeklyCalendar::new(&days, tz)) as Arc<dyn JobCalendar>
    });
    let daily = (wall_time(), wall_time()).prop_filter_map("an empty span", move |(from, to)| {
        DailyCalendar::new(from, to, tz).ok().map(|c| Arc::new(c) as Arc<dyn JobCalendar>)
    });
    let cron = cron_calendar_expression()
        .prop_map(move |expression| Arc::new(CronCalendar::new(expression, tz)) as Arc<dyn JobCalendar>);
    prop_oneof![1 => holiday, 1 => weekly, 2 => daily, 2 => cron]
}

/// A zone, a calendar in it (or a composite of calendars in it and in other zones), and
/// an instant, mostly near one of the zone's DST changes.
fn calendar_and_instant() -> impl Strategy<Value = (Arc<dyn JobCalendar>, DateTime<Utc>)> {
    prop::sample::select(ZONES).prop_flat_map(|(tz, changes)| {
        let other = prop::sample::select(ZONES).prop_flat_map(|(tz, changes)| simple_calendar(tz, changes));
        let composite = (prop::collection::vec(simple_calendar(tz, changes), 1..3), prop::collection::vec(other, 0..2))
            .prop_map(|(mut members, others)| {
                members.extend(others);
                Arc::new(CompositeCalendar::new(members)) as Arc<dyn JobCalendar>
            });
        (prop_oneof![3 => simple_calendar(tz, changes), 1 => composite], instant(changes))
    })
}

/// The first instant at or after `at`, minute by minute for two days, that `calendar`
/// excludes.
fn first_excluded(calendar: &dyn JobCalendar, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (0..2 * 1440).map(|m| at + TimeDelta::minutes(m)).find(|t| calendar.is_excluded(*t))
}

/// The first instant of `[from, to)` that `calendar` does not exclude, looked for minute
/// by minute from `from` (whole minutes after it) and at `extra` instants within.
fn included_between(
    calendar: &dyn JobCalendar,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    extra: &[f64],
) -> Option<DateTime<Utc>> {
    let span = (to - from).num_microseconds().unwrap_or(i64::MAX);
    let mut probes: Vec<DateTime<Utc>> =
        extra.iter().map(|f| from + TimeDelta::microseconds((span as f64 * f) as i64)).collect();
    let mut t = from;
    while t < to {
        probes.push(t);
        t += TimeDelta::minutes(1);
    }
    probes.push(to - TimeDelta::microseconds(1));
    probes.into_iter().filter(|p| *p >= from && *p < to && !calendar.is_excluded(*p)).min()
}

/// Cron schedules in some zone, firing every minute to every hour.
fn cron_schedule() -> impl Strategy<Value = JobSchedule> {
    let text =
        prop::sample::select(&["0 * * * * *", "*/15 * * * * *", "0 30 2 * * *", "0 0 * * * *", "0 */20 * * * *"][..]);
    (text, prop::sample::select(ZONES)).prop_map(|(text, (tz, _))| JobSchedule::cron(text, Some(tz.name())).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_cron_schedule_fires_at_its_first_match_the_calendar_leaves(
        (calendar, after) in calendar_and_instant(),
        schedule in cron_schedule(),
    ) {
        let previous = |at| PreviousFire { scheduled_at: at, completed_at: at, fire_count: 1 };
        let fire = schedule.next_fire(&previous(after), Some(calendar.as_ref()));
        // Match by match, without the calendar, up to the fire. After EXCLUDED_SPANS_MAX
        // excluded matches in a row there may be no fire (SPEC §5).
        let mut at = after;
        for _ in 0..EXCLUDED_SPANS_MAX {
            let Some(next) = schedule.next_fire(&previous(at), None) else { break };
            if fire.is_some_and(|fire| next > fire) {
                break;
            }
            if !calendar.is_excluded(next) {
                prop_assert_eq!(fire, Some(next), "{:?} after {}", calendar, after);
                return Ok(());
            }
            at = next;
        }
        prop_assert!(fire.is_none_or(|fire| !calendar.is_excluded(fire)), "{calendar:?} after {after}: {fire:?}");
    }

    #[test]
    fn an_interval_fires_at_the_first_instant_the_calendar_leaves_after_its_delay(
        (calendar, completed) in calendar_and_instant(),
        minutes in prop::sample::select(&[1i64, 10, 90, 1440][..]),
        extra in prop::collection::vec(0.0f64..1.0, 32),
    ) {
        let interval = TimeDelta::minutes(minutes);
        let schedule = JobSchedule::every(interval.to_std().unwrap()).unwrap();
        let previous = PreviousFire { scheduled_at: completed, completed_at: completed, fire_count: 1 };
        let due = completed + interval;
        match schedule.next_fire(&previous, Some(calendar.as_ref())) {
            Some(fire) => {
                prop_assert!(fire >= due && !calendar.is_excluded(fire), "{calendar:?}: due {due}, fires {fire}");
                let earlier = included_between(calendar.as_ref(), due, fire, &extra);
                prop_assert!(earlier.is_none(), "{calendar:?}: due {due}, fires {fire}, but {earlier:?} is included");
            }
            None => {
                let week = included_between(calendar.as_ref(), due, due + TimeDelta::weeks(1), &extra);
                prop_assert!(week.is_none(), "{calendar:?}: due {due}, no fire, but {week:?} is included");
            }
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn an_excluded_span_ends_no_later_than_the_exclusion(
        (calendar, from) in calendar_and_instant(),
        extra in prop::collection::vec(0.0f64..1.0, 32),
    ) {
        let Some(at) = first_excluded(calendar.as_ref(), from) else { return Ok(()) };
        let until = calendar.excluded_until(at);
        prop_assert!(until > at, "{calendar:?}: excluded_until({at}) = {until}");
        let included = included_between(calendar.as_ref(), at, until, &extra);
        prop_assert!(
            included.is_none(),
            "{calendar:?}: excluded_until({at}) = {until}, but {} is included",
            included.unwrap()
        );
    }

    #[test]
    fn the_first_included_instant_is_found(
        (calendar, at) in calendar_and_instant(),
        extra in prop::collection::vec(0.0f64..1.0, 32),
    ) {
        match first_included(calendar.as_ref(), at) {
            Some(first) => {
                prop_assert!(first >= at && !calendar.is_excluded(first), "{calendar:?}: from {at}: {first}");
                let earlier = included_between(calendar.as_ref(), at, first, &extra);
                prop_assert!(
                    earlier.is_none(),
                    "{calendar:?}: from {at}: {first}, but {} is included",
                    earlier.unwrap()
                );
            }
            None => {
                // Only a calendar that excludes a whole week from here has none.
                let week = included_between(calendar.as_ref(), at, at + TimeDelta::weeks(1), &extra);
                prop_assert!(week.is_none(), "{calendar:?}: from {at}: none, but {} is included", week.unwrap());
            }
        }
    }
}
