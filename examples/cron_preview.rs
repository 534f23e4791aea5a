//! Prints the next fire times of a schedule: `cargo run --example cron_preview --
//! "0 0 9 * * MON-FRI" "China Standard Time" 5`. The second argument is an IANA or
//! Windows zone (default UTC), the third how many fires to print (default 5). A full
//! schedule text works too: `cargo run --example cron_preview -- "every 00:10:00 x3"`.

use std::process::ExitCode;

use sundial::schedule::{format_instant, JobSchedule, PreviousFire};
use sundial::time::{Clock, SystemClock};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(text) = args.first() else {
        eprintln!("usage: cron_preview <cron expression | schedule text> [time zone] [count]");
        return ExitCode::from(2);
    };
    let zone = args.get(1).map(String::as_str);
    let count: u32 = match args.get(2).map(|n| n.parse()) {
        None => 5,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("count must be a whole number");
            return ExitCode::from(2);
        }
    };
    let schedule = match text.parse::<JobSchedule>().or_else(|_| JobSchedule::cron(text, zone)) {
        Ok(schedule) => schedule,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    println!("schedule: {schedule}");
    // The production clock: the one place this process reads the OS time.
    let now = SystemClock::new().now();
    let mut next = schedule.first_fire(now, None);
    for fire_count in 1..=count {
        let Some(at) = next else {
            println!("(no further fires)");
            break;
        };
        println!("{}", format_instant(at));
        // Preview runs as if each took no time.
        next = schedule.next_fire(&PreviousFire { scheduled_at: at, completed_at: at, fire_count }, None);
    }
    ExitCode::SUCCESS
}
