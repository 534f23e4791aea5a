//! Benchmark: `next_after` on representative expression classes, for sundial and, in the
//! same run, the `croner` and `cron` crates. Prints ns per call for each and the ratio of
//! the fastest peer to sundial (target ≥ 2×). Each call starts from a different instant,
//! spread over two years, so no implementation benefits from a warm cache of one answer.
//! Results are also compared call by call; disagreements are counted and printed, not
//! hidden (the peers differ from our dialect on DST repeats and some extras).
//!
//! Run: `cargo bench --bench cron_next` (add `-- --quick` for a short run).

#![allow(clippy::disallowed_methods)] // A benchmark measures wall time by definition.

use std::hint::black_box;
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use sundial::CronExpression;

struct Class {
    name: &'static str,
    /// The expression in sundial's (and croner's) dialect; 6 fields.
    expression: &'static str,
    /// The same schedule for the `cron` crate (Quartz-style weekday numbers, so names are
    /// used), or `None` when it cannot express it.
    cron_crate: Option<&'static str>,
    tz: Tz,
}

const CLASSES: &[Class] = &[
    Class { name: "every second", expression: "* * * * * *", cron_crate: Some("* * * * * *"), tz: Tz::UTC },
    Class { name: "every minute", expression: "0 * * * * *", cron_crate: Some("0 * * * * *"), tz: Tz::UTC },
    Class { name: "daily 09:30", expression: "0 30 9 * * *", cron_crate: Some("0 30 9 * * *"), tz: Tz::UTC },
    Class {
        name: "weekday business 15 min",
        expression: "0 */15 9-17 * * MON-FRI",
        cron_crate: Some("0 */15 9-17 * * Mon-Fri"),
        tz: Tz::UTC,
    },
    Class { name: "monthly 1st", expression: "0 0 0 1 * *", cron_crate: Some("0 0 0 1 * *"), tz: Tz::UTC },
    Class { name: "leap day (sparse)", expression: "0 0 0 29 2 *", cron_crate: Some("0 0 0 29 Feb *"), tz: Tz::UTC },
    Class {
        name: "lists and steps",
        expression: "5,10,15 */7 1-5 * * *",
        cron_crate: Some("5,10,15 */7 1-5 * * *"),
        tz: Tz::UTC,
    },
    Class { name: "last day of month", expression: "0 0 12 L * *", cron_crate: None, tz: Tz::UTC },
    Class {
        name: "daily, New York (DST)",
        expression: "0 30 2 * * *",
        cron_crate: Some("0 30 2 * * *"),
        tz: Tz::America__New_York,
    },
    Class {
        name: "hourly, Lord Howe (30 min DST)",
        expression: "0 0 * * * *",
        cron_crate: Some("0 0 * * * *"),
        tz: Tz::Australia__Lord_Howe,
    },
    Class {
        name: "every 10 s, Shanghai",
        expression: "*/10 * * * * *",
        cron_crate: Some("*/10 * * * * *"),
        tz: Tz::Asia__Shanghai,
    },
];

/// Start instants: `count` points spread over two years from 2026, at odd seconds.
fn starts(count: usize) -> Vec<DateTime<Utc>> {
    let origin = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
    let span = 2 * 365 * 86_400i64;
    (0..count as i64).map(|i| origin + TimeDelta::seconds(i * span / count as i64 + 7 * i % 3600)).collect()
}

/// The best of `rounds` timings of `f` over all starts, in ns per call.
fn time_per_call(rounds: usize, starts: &[DateTime<Utc>], mut f: impl FnMut(DateTime<Utc>) -> Option<i64>) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let begin = Instant::now();
        for &start in starts {
            black_box(f(black_box(start)));
        }
        best = best.min(begin.elapsed());
    }
    best.as_nanos() as f64 / starts.len() as f64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (count, rounds) = if quick { (200, 3) } else { (2000, 7) };
    let starts = starts(count);
    let croner_parser = croner::parser::CronParser::builder().seconds(croner::parser::Seconds::Optional).build();

    println!("cron next_after: {count} start instants per class, best of {rounds} rounds");
    println!(
        "{:<32} {:>12} {:>12} {:>12} {:>9}  disagreements (croner, cron)",
        "class", "sundial ns", "croner ns", "cron ns", "speedup"
    );
    let mut worst_ratio = f64::INFINITY;
    for class in CLASSES {
        let tz = class.tz;
        let ours = CronExpression::parse(class.expression).expect("sundial parses every class");
        let croner = croner_parser.parse(class.expression).expect("croner parses every class");
        let cron_crate = class.cron_crate.map(|text| cron::Schedule::from_str(text).expect("cron crate parses"));

        let sundial_ns = time_per_call(rounds, &starts, |t| ours.next_after(t, &tz).map(|t| t.timestamp()));
        let croner_next =
            |t: DateTime<Utc>| croner.find_next_occurrence(&t.with_timezone(&tz), false).ok().map(|t| t.timestamp());
        let croner_ns = time_per_call(rounds, &starts, croner_next);
        let cron_next = |t: DateTime<Utc>| {
            cron_crate.as_ref().and_then(|s| s.after(&t.with_timezone(&tz)).next()).map(|t| t.timestamp())
        };
        let cron_ns = cron_crate.as_ref().map(|_| time_per_call(rounds, &starts, cron_next));

        let mut disagree_croner = 0;
        let mut disagree_cron = 0;
        for &t in &starts {
            let expected = ours.next_after(t, &tz).map(|t| t.timestamp());
            disagree_croner += usize::from(croner_next(t) != expected);
            if cron_crate.is_some() {
                disagree_cron += usize::from(cron_next(t) != expected);
            }
        }
        let fastest_peer = cron_ns.map_or(croner_ns, |c| c.min(croner_ns));
        let ratio = fastest_peer / sundial_ns;
        worst_ratio = worst_ratio.min(ratio);
        println!(
            "{:<32} {:>12.0} {:>12.0} {:>12} {:>8.1}x  {}, {}",
            class.name,
            sundial_ns,
            croner_ns,
            cron_ns.map_or("n/a".to_owned(), |c| format!("{c:.0}")),
            ratio,
            disagree_croner,
            if cron_crate.is_some() { disagree_cron.to_string() } else { "n/a".to_owned() },
        );
    }
    println!("worst speedup over the fastest peer: {worst_ratio:.1}x (target >= 2.0x)");
}
