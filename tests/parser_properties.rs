//! Goal: no text parser panics on any input, and the schedule text form round-trips.
//!
//! Method: proptest feeds arbitrary strings, and strings built from the parsers' own
//! vocabulary (so they get past the first token), to every parser; separately it builds
//! arbitrary valid schedules and checks `parse(format(s)) == s`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use sundial::cron::CronExpression;
use sundial::name::{CalendarName, JobName};
use sundial::schedule::{parse_instant, parse_interval, JobSchedule, ScheduleKind};
use sundial::timezone::parse_time_zone;
use sundial::SchedulerOptions;

/// Tokens from the cron and schedule grammars, glued together at random.
fn vocabulary() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("*".to_owned()),
        Just("?".to_owned()),
        Just("L".to_owned()),
        Just("W".to_owned()),
        Just("#".to_owned()),
        Just("-".to_owned()),
        Just("/".to_owned()),
        Just(",".to_owned()),
        Just(" ".to_owned()),
        Just("LW".to_owned()),
        Just("L-".to_owned()),
        Just("MON".to_owned()),
        Just("fri".to_owned()),
        Just("JAN".to_owned()),
        Just("cron ".to_owned()),
        Just("every ".to_owned()),
        Just("once ".to_owned()),
        Just("manual".to_owned()),
        Just(" tz=".to_owned()),
        Just(" start=".to_owned()),
        Just(" end=".to_owned()),
        Just(" calendar=".to_owned()),
        Just("x".to_owned()),
        Just(":".to_owned()),
        Just(".".to_owned()),
        Just("T".to_owned()),
        Just("Z".to_owned()),
        Just("+00:00".to_owned()),
        Just("2026-11-01".to_owned()),
        Just("Asia/Shanghai".to_owned()),
        Just("China Standard Time".to_owned()),
        (0u32..100_000).prop_map(|n| n.to_string()),
        "[\\PC]{0,3}",
    ];
    prop::collection::vec(token, 0..16).prop_map(|tokens| tokens.concat())
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), vocabulary()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn cron_parse_never_panics(text in any_text()) {
        if let Ok(expr) = CronExpression::parse(&text) {
            // Anything accepted prints to text that parses back to the same expression,
            // and can be searched without panicking.
            let again = CronExpression::parse(&expr.to_string()).unwrap();
            prop_assert_eq!(&again, &expr);
            let _ = expr.next_after(DateTime::<Utc>::UNIX_EPOCH, &chrono_tz::Tz::Europe__Berlin);
        }
    }

    #[test]
    fn schedule_parse_never_panics(text in any_text()) {
        if let Ok(schedule) = text.parse::<JobSchedule>() {
            let again: JobSchedule = schedule.to_string().parse().unwrap();
            prop_assert_eq!(again, schedule);
        }
    }

    #[test]
    fn other_parsers_never_panic(text in any_text()) {
        let _ = parse_interval(&text);
        let _ = parse_instant(&text);
        let _ = parse_time_zone(&text);
        let _ = JobName::new(text.clone());
        let _ = SchedulerOptions::from_toml_str(&text);
        let _ = SchedulerOptions::default().apply_env([("SUNDIAL_POLL_INTERVAL_SECONDS", text.as_str())]);
    }
}

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    // Years 1–9999, any nanosecond.
    (-62_135_596_800i64..253_402_300_799i64, 0u32..1_000_000_000)
        .prop_map(|(secs, nanos)| DateTime::from_timestamp(secs, nanos).unwrap())
}

fn cron_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("* * * * *"),
        Just("0 0 9 * * MON-FRI"),
        Just("*/5 1-10/3 0,12 L-2 JAN-JUN ?"),
        Just("0 15 10 ? * 6#3 2030-2040/2"),
        Just("0 0 0 LW * *"),
        Just("30 0 12 15W * FRIL"),
    ]
    .prop_map(str::to_owned)
}

fn kind() -> impl Strategy<Value = ScheduleKind> {
    let zones = prop::sample::select(vec![
        chrono_tz::Tz::UTC,
        chrono_tz::Tz::Asia__Shanghai,
        chrono_tz::Tz::America__New_York,
        chrono_tz::Tz::Australia__Lord_Howe,
        chrono_tz::Tz::Etc__GMTPlus12,
    ]);
    prop_oneof![
        Just(ScheduleKind::Manual),
        (1u64..36_500 * 86_400, 0u32..1_000_000_000, prop::option::of(1u32..u32::MAX)).prop_map(
            |(secs, nanos, repeat_count)| ScheduleKind::Every { interval: Duration::new(secs, nanos), repeat_count }
        ),
        (cron_text(), zones).prop_map(|(text, time_zone)| ScheduleKind::Cron {
            expression: CronExpression::parse(&text).unwrap(),
            time_zone,
        }),
        instant().prop_map(|at| ScheduleKind::Once { at }),
    ]
}

fn schedule() -> impl Strategy<Value = JobSchedule> {
    (kind(), prop::option::of(instant()), prop::option::of(instant()), prop::option::of("[a-z0-9][a-z0-9._-]{0,20}"))
        .prop_map(|(kind, a, b, calendar)| {
            // Keep the window ordered so the schedule is valid.
            let (start_at, end_at) = match (a, b) {
                (Some(a), Some(b)) if b < a => (Some(b), Some(a)),
                other => other,
            };
            JobSchedule { kind, start_at, end_at, calendar: calendar.map(|c| CalendarName::new(c).unwrap()) }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn schedule_text_round_trips(schedule in schedule()) {
        let text = schedule.to_string();
        let parsed: JobSchedule = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(parsed, schedule);
    }

    #[test]
    fn cron_next_is_strictly_later_and_matches(after in -1_000_000_000i64..4_000_000_000i64, text in cron_text()) {
        let expr = CronExpression::parse(&text).unwrap();
        let tz = chrono_tz::Tz::America__New_York;
        let after = DateTime::from_timestamp(after, 0).unwrap();
        if let Some(next) = expr.next_after(after, &tz) {
            prop_assert!(next > after);
            prop_assert!(expr.matches(next, &tz), "{} does not match {}", next, text);
            // Monotone: the fire after `next` is later still.
            if let Some(later) = expr.next_after(next, &tz) {
                prop_assert!(later > next);
            }
        }
    }
}
