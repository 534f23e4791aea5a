//! A user's kind of workload, generated: many cron jobs at everyday cadences, each with
//! one trigger at a pseudo-random second, minute and hour in one of five time zones. The
//! same description always gives the same jobs (whatever the seed), simulated with
//! `sundial-sim --cron-mix` or written as a jobs file by `examples/jobs_mix.rs` (the two
//! give the same jobs, so the same trace). It is how the README's speed figures for 1,000
//! triggers are made.
//!
//! A description lists `cadence=count` pairs, e.g. `15m=100,1h=500,1d=400`; the cadences
//! are `1m`, `5m`, `15m`, `1h` and `1d`.

use std::fmt::Write as _;

use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTriggerDefinition, JobTypeKey};
use sundial::name::{JobName, TriggerName};

/// The time zones the jobs are spread over.
const ZONES: [&str; 5] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "Asia/Kolkata"];

/// The cadences a description may name.
pub const CADENCES: [&str; 5] = ["1m", "5m", "15m", "1h", "1d"];

/// The most jobs one description may ask for.
pub const MIX_JOBS_MAX: usize = 100_000;

/// One job of a mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixJob {
    /// `job-00000`, `job-00001`, … in the order described.
    pub name: String,
    /// Its cadence, also its trigger's name.
    pub cadence: String,
    /// Its trigger's schedule, e.g. `cron 17 3/5 * * * * tz=Asia/Kolkata`.
    pub schedule: String,
}

/// The jobs `description` asks for.
///
/// # Errors
/// A message naming the part that is not `cadence=count`, the unknown cadence, or a
/// count of no jobs or over [`MIX_JOBS_MAX`] in all.
pub fn cron_mix(description: &str) -> Result<Vec<MixJob>, String> {
    let mut entropy = Entropy::from_seed(7);
    let mut jobs = Vec::new();
    for part in description.split(',') {
        let parsed = part.split_once('=').and_then(|(cadence, count)| Some((cadence, count.parse::<usize>().ok()?)));
        let Some((cadence, count)) = parsed else {
            return Err(format!("'{part}' is not cadence=count (e.g. 15m=100,1h=500,1d=400)"));
        };
        if !CADENCES.contains(&cadence) {
            return Err(format!("unknown cadence '{cadence}' (1m, 5m, 15m, 1h, 1d)"));
        }
        if count > MIX_JOBS_MAX - jobs.len() {
            return Err(format!("'{description}' asks for more than {MIX_JOBS_MAX} jobs"));
        }
        for _ in 0..count {
            let expression = cron(cadence, &mut entropy);
            let zone = ZONES[entropy.below(ZONES.len() as u64) as usize];
            let zone = if zone == "UTC" { String::new() } else { format!(" tz={zone}") };
            let name = format!("job-{:05}", jobs.len());
            jobs.push(MixJob { name, cadence: cadence.to_owned(), schedule: format!("cron {expression}{zone}") });
        }
    }
    if jobs.is_empty() {
        return Err(format!("'{description}' asks for no jobs"));
    }
    Ok(jobs)
}

/// The cron expression (6 fields, seconds first) of one job at `cadence` (one of
/// [`CADENCES`]), its offsets drawn.
fn cron(cadence: &str, entropy: &mut Entropy) -> String {
    let (second, minute, hour) = (entropy.below(60), entropy.below(60), entropy.below(24));
    match cadence {
        "1m" => format!("{second} * * * * *"),
        "5m" => format!("{second} {}/5 * * * *", minute % 5),
        "15m" => format!("{second} {}/15 * * * *", minute % 15),
        "1h" => format!("{second} {minute} * * * *"),
        _ => format!("{second} {minute} {hour} * * *"),
    }
}

/// `jobs` as a jobs file (TOML, as `sundial jobs apply -f` and `sundial-sim --jobs-file`
/// read it), each of type `shell`.
pub fn to_toml(jobs: &[MixJob]) -> String {
    let mut file = String::new();
    for job in jobs {
        // Writing to a String cannot fail.
        let _ = write!(
            file,
            "[[jobs]]\nname = \"{}\"\ntype = \"shell\"\n[[jobs.triggers]]\nname = \"{}\"\nschedule = \"{}\"\n\n",
            job.name, job.cadence, job.schedule
        );
    }
    file
}

/// `jobs` as definitions, as the jobs file [`to_toml`] writes reads back.
///
/// # Errors
/// A schedule or name that does not parse (none does: the generator writes valid ones).
pub fn definitions(jobs: &[MixJob]) -> Result<Vec<JobDefinition>, String> {
    let job_type = JobTypeKey::new("shell").map_err(|e| e.to_string())?;
    jobs.iter()
        .map(|job| {
            let name = JobName::new(job.name.as_str()).map_err(|e| e.to_string())?;
            let trigger = TriggerName::new(job.cadence.as_str()).map_err(|e| e.to_string())?;
            let schedule = job.schedule.parse().map_err(|e| format!("{}: {e}", job.name))?;
            Ok(JobDefinition::new(name, job_type.clone()).with_trigger(JobTriggerDefinition::new(trigger, schedule)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_gives_its_counts_of_each_cadence_the_same_every_time() {
        let jobs = cron_mix("15m=3,1h=2,1d=1").unwrap();
        let cadences: Vec<&str> = jobs.iter().map(|j| j.cadence.as_str()).collect();
        assert_eq!(cadences, ["15m", "15m", "15m", "1h", "1h", "1d"]);
        assert_eq!(jobs[0].name, "job-00000");
        assert_eq!(jobs[5].name, "job-00005");
        assert_eq!(jobs, cron_mix("15m=3,1h=2,1d=1").unwrap());
        assert!(jobs.iter().all(|j| j.schedule.starts_with("cron ")), "{jobs:?}");
        assert_eq!(definitions(&jobs).unwrap().len(), 6);
    }

    #[test]
    fn bad_descriptions_say_what_is_wrong() {
        assert_eq!(cron_mix("15m").unwrap_err(), "'15m' is not cadence=count (e.g. 15m=100,1h=500,1d=400)");
        assert_eq!(cron_mix("2h=5").unwrap_err(), "unknown cadence '2h' (1m, 5m, 15m, 1h, 1d)");
        assert_eq!(cron_mix("1h=-1").unwrap_err(), "'1h=-1' is not cadence=count (e.g. 15m=100,1h=500,1d=400)");
        assert_eq!(cron_mix("1h=99999,1d=2").unwrap_err(), "'1h=99999,1d=2' asks for more than 100000 jobs");
        assert_eq!(cron_mix("").unwrap_err(), "'' is not cadence=count (e.g. 15m=100,1h=500,1d=400)");
        assert_eq!(cron_mix("1m=0,1h=0").unwrap_err(), "'1m=0,1h=0' asks for no jobs");
    }
}
