//! Writes a jobs file for `sundial-sim --jobs-file`: many cron jobs at everyday cadences,
//! each with one trigger at a pseudo-random second, minute and hour in one of five time
//! zones, the same for the same arguments. It is how the README's speed figures for a
//! user's workload are made:
//!
//! ```sh
//! cargo run --release -p sundial-simulations --example jobs_mix -- 15m=100,1h=500,1d=400 > jobs.toml
//! cargo run --release -p sundial-simulations --bin sundial-sim -- --seed 1 --nodes 5 --duration 24h --faults none --jobs-file jobs.toml
//! ```
//!
//! The argument lists `cadence=count` pairs; cadences are `1m`, `5m`, `15m`, `1h`, `1d`.

use std::fmt::Write as _;
use std::process::ExitCode;

use sundial::entropy::Entropy;

const ZONES: [&str; 5] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "Asia/Kolkata"];

/// The cron expression (6 fields, seconds first) of one job at `cadence`, its offsets drawn.
fn cron(cadence: &str, entropy: &mut Entropy) -> Option<String> {
    let (second, minute, hour) = (entropy.below(60), entropy.below(60), entropy.below(24));
    Some(match cadence {
        "1m" => format!("{second} * * * * *"),
        "5m" => format!("{second} {}/5 * * * *", minute % 5),
        "15m" => format!("{second} {}/15 * * * *", minute % 15),
        "1h" => format!("{second} {minute} * * * *"),
        "1d" => format!("{second} {minute} {hour} * * *"),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let Some(mix) = std::env::args().nth(1) else {
        eprintln!("usage: jobs_mix <cadence=count>,... (cadences: 1m, 5m, 15m, 1h, 1d), e.g. 15m=100,1h=500,1d=400");
        return ExitCode::from(2);
    };
    let mut entropy = Entropy::from_seed(7);
    let mut file = String::new();
    let mut index = 0;
    for part in mix.split(',') {
        let parsed = part.split_once('=').and_then(|(cadence, count)| Some((cadence, count.parse::<usize>().ok()?)));
        let Some((cadence, count)) = parsed else {
            eprintln!("jobs_mix: '{part}' is not cadence=count");
            return ExitCode::from(2);
        };
        for _ in 0..count {
            let Some(expression) = cron(cadence, &mut entropy) else {
                eprintln!("jobs_mix: unknown cadence '{cadence}' (1m, 5m, 15m, 1h, 1d)");
                return ExitCode::from(2);
            };
            let zone = ZONES[entropy.below(ZONES.len() as u64) as usize];
            let zone = if zone == "UTC" { String::new() } else { format!(" tz={zone}") };
            let _ = write!(
                file,
                "[[jobs]]\nname = \"job-{index:05}\"\ntype = \"shell\"\n[[jobs.triggers]]\nname = \"{cadence}\"\n\
                 schedule = \"cron {expression}{zone}\"\n\n"
            );
            index += 1;
        }
    }
    print!("{file}");
    ExitCode::SUCCESS
}
