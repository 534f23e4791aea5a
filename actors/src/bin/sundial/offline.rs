//! Offline helpers: the next fires of a cron expression or a schedule text, one RFC 3339
//! UTC instant per line.

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Subcommand;
use sundial::schedule::{JobSchedule, PreviousFire, ScheduleKind};
use sundial::time::{Clock, SystemClock};

use crate::exit;

#[derive(Debug, Subcommand)]
pub(crate) enum CronAction {
    /// The next fires of a cron expression (5, 6 or 7 fields; seconds first when 6+).
    Next {
        /// The expression, e.g. "0 0 9 * * MON-FRI".
        expression: String,
        /// IANA or Windows time zone (default UTC).
        #[arg(long)]
        tz: Option<String>,
        #[command(flatten)]
        window: Window,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleAction {
    /// The next fires of a schedule text, e.g. "every 00:10:00 x5" or
    /// "cron 0 0 9 * * * tz=Asia/Shanghai start=2027-01-01T00:00:00Z".
    Next {
        /// The schedule text (SPEC §3).
        text: String,
        #[command(flatten)]
        window: Window,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct Window {
    /// Fires after this instant (RFC 3339; default now).
    #[arg(long)]
    after: Option<String>,
    /// How many fires (1-10000).
    #[arg(short = 'n', long = "count", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    count: u32,
}

pub(crate) fn cron(action: CronAction) -> u8 {
    let CronAction::Next { expression, tz, window } = action;
    match JobSchedule::cron(&expression, tz.as_deref()) {
        Ok(schedule) => print_fires(&schedule, &window),
        Err(error) => {
            eprintln!("sundial: {error}");
            exit::USAGE
        }
    }
}

pub(crate) fn schedule(action: ScheduleAction) -> u8 {
    let ScheduleAction::Next { text, window } = action;
    match text.parse::<JobSchedule>() {
        Ok(schedule) => print_fires(&schedule, &window),
        Err(error) => {
            eprintln!("sundial: {error}");
            exit::USAGE
        }
    }
}

fn print_fires(schedule: &JobSchedule, window: &Window) -> u8 {
    let after = match &window.after {
        None => SystemClock::new().now(),
        Some(text) => match DateTime::parse_from_rfc3339(text) {
            Ok(at) => at.with_timezone(&Utc),
            Err(error) => {
                eprintln!("sundial: --after '{text}' is not an RFC 3339 instant: {error}");
                return exit::USAGE;
            }
        },
    };
    let fires = fires(schedule, after, window.count);
    if fires.is_empty() {
        // Nothing on stdout, as asked; why on stderr, so an empty answer is not a puzzle.
        let after = after.to_rfc3339_opts(SecondsFormat::AutoSi, true);
        if schedule.kind == ScheduleKind::Manual {
            eprintln!("sundial: a manual schedule never fires by itself (`jobs trigger` or `jobs enqueue` runs it)");
        } else {
            eprintln!("sundial: no fires after {after}: the schedule ends before then");
        }
    }
    for at in fires {
        outln!("{}", at.to_rfc3339_opts(SecondsFormat::AutoSi, true));
    }
    0
}

/// Up to `count` fires after `after`, each run taking no time.
fn fires(schedule: &JobSchedule, after: DateTime<Utc>, count: u32) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut next = schedule.first_fire(after, None);
    for fire_count in 1..=count {
        let Some(at) = next else { break };
        out.push(at);
        next = schedule.next_fire(&PreviousFire { scheduled_at: at, completed_at: at, fire_count }, None);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_follow_the_schedule() {
        let after = DateTime::parse_from_rfc3339("2026-03-08T06:00:00Z").unwrap().with_timezone(&Utc);
        let schedule = JobSchedule::cron("0 30 2 * * *", Some("America/New_York")).unwrap();
        let got: Vec<String> =
            fires(&schedule, after, 2).iter().map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true)).collect();
        // 02:30 does not exist on the DST day in New York: the next is the 9th's.
        assert_eq!(got, ["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]);
        let limited: JobSchedule = "every 00:10:00 x2".parse().unwrap();
        assert_eq!(fires(&limited, after, 5).len(), 2);
    }
}
