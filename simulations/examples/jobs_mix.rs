//! Writes a jobs file for `sundial-sim --jobs-file`: many cron jobs at everyday cadences,
//! each with one trigger at a pseudo-random second, minute and hour in one of five time
//! zones, the same for the same arguments (see `sundial_simulations::cron_mix`; the
//! simulator's `--cron-mix` simulates the same jobs without a file):
//!
//! ```sh
//! cargo run --release -p sundial-simulations --example jobs_mix -- 15m=100,1h=500,1d=400 > jobs.toml
//! cargo run --release -p sundial-simulations --bin sundial-sim -- --seed 1 --nodes 5 --duration 24h --faults none --jobs-file jobs.toml
//! ```
//!
//! The argument lists `cadence=count` pairs; cadences are `1m`, `5m`, `15m`, `1h`, `1d`.

use std::process::ExitCode;

use sundial_simulations::cron_mix::{cron_mix, to_toml};

fn main() -> ExitCode {
    let Some(description) = std::env::args().nth(1) else {
        eprintln!("usage: jobs_mix <cadence=count>,... (cadences: 1m, 5m, 15m, 1h, 1d), e.g. 15m=100,1h=500,1d=400");
        return ExitCode::from(2);
    };
    match cron_mix(&description) {
        Ok(jobs) => {
            print!("{}", to_toml(&jobs));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("jobs_mix: {message}");
            ExitCode::from(2)
        }
    }
}
