//! `sundial-sim`: runs deterministic cluster simulations and checks their invariants.
//!
//! ```text
//! sundial-sim --seed <u64> [--nodes <n>] [--duration <6h>] [--faults none|all|<list>] [--seeds <a>..<b>]
//!             [--jobs <n> | --jobs-file <jobs.toml> | --cron-mix <15m=100,1h=500,1d=400>] [--retention <30m>]
//!             [--broken-store [<bug>]] [--trace] [--threads <n>] [--memory-floor <2G|5%|off>]
//! ```
//!
//! For each seed it prints the seed and every derived option, then a summary, then each
//! violation, and as its last line one JSON object. With `--seeds`, a final JSON line
//! summarises all seeds. Exit status 1 when any invariant was violated, 2 when the run could
//! not be made (a bad flag or jobs file, or the machine running out of memory: see
//! `sundial_simulations::memory`). Seeds of `--seeds` run in parallel (`--threads`, one per
//! core by default); each seed's report is printed whole, in seed order.

use std::process::ExitCode;

// As the `sundial` binary: the emulated store's small allocations are most of its work.
#[global_allocator]
static ALLOCATOR: sundial_actors::allocator::Allocator = sundial_actors::allocator::Allocator {};

use clap::Parser;
use sundial_simulations::memory::{self, MemoryFloor};
use sundial_simulations::options::{parse_duration, parse_safety_duration, parse_seed_range, BrokenStore};
use sundial_simulations::world::JobTally;
use sundial_simulations::{cron_mix, faults, json_line, simulate, workload, Faults, GivenJobs, Overrides, SimOptions};

/// Deterministic cluster simulation of sundial.
#[derive(Debug, Parser)]
#[command(name = "sundial-sim", version)]
struct Args {
    /// The seed (everything not given below derives from it).
    #[arg(long, required_unless_present = "seeds", conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run every seed of a range `a..b` (b exclusive).
    #[arg(long, value_parser = parse_seed_range)]
    seeds: Option<std::ops::Range<u64>>,
    /// Number of nodes.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    nodes: Option<u16>,
    /// Length of the safety phase (`90s`, `30m`, `6h`, `2d`; at most `30d`).
    #[arg(long, value_parser = parse_safety_duration)]
    duration: Option<std::time::Duration>,
    /// Number of jobs in the workload.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: Option<u32>,
    /// Simulate these jobs instead of generated ones: a TOML or JSON file as `sundial jobs
    /// apply -f` reads (a node config too: its `[[jobs]]` and `[calendars.<name>]`). Their
    /// triggers, policies and flags run as written; each run's duration and outcome come
    /// from the seed. The report adds a line per job.
    #[arg(long, value_name = "FILE", conflicts_with = "jobs")]
    jobs_file: Option<std::path::PathBuf>,
    /// Simulate many cron jobs at everyday cadences instead of generated ones, as the
    /// example `jobs_mix` writes them to a jobs file (the same jobs for the same
    /// description, whatever the seed): `cadence=count` pairs, cadences `1m`, `5m`, `15m`,
    /// `1h`, `1d`, e.g. `15m=100,1h=500,1d=400` (1,000 triggers). The report gives the
    /// latest start of all of them instead of a line per job.
    #[arg(long, value_name = "MIX", conflicts_with_all = ["jobs", "jobs_file"])]
    cron_mix: Option<String>,
    /// Faults: `none`, `all`, or a comma list of kinds, each optionally `kind=rate`.
    #[arg(long, value_parser = Faults::parse)]
    faults: Option<Faults>,
    /// Run with a deliberately broken store, to see the checkers catch it:
    /// `conflict-check` (the default: acquisition without its conflict check, so fires can
    /// run twice), `early-misfire` (fires skipped as misfires a tenth of the threshold
    /// late), `early-retention` (history deleted at half its retention), and the others the
    /// README lists (`reschedule-stalls`, `interval-twice`, `local-refused`, `unblock-lost`,
    /// `skip-counted`, `retry-unindexed`, `repeat-short`, `codes-dropped`).
    #[arg(long, num_args = 0..=1, default_missing_value = "conflict-check", value_parser = parse_broken)]
    broken_store: Option<BrokenStore>,
    /// How long the nodes keep finished runs (`90s`, `30m`, `6h`, `7d`); the default is
    /// drawn from the seed (10 to 60 minutes for two seeds in three, else 7 days).
    #[arg(long, value_parser = parse_duration)]
    retention: Option<std::time::Duration>,
    /// Print the full event trace.
    #[arg(long)]
    trace: bool,
    /// How many seeds of `--seeds` run at once, each on its own thread (default: one per
    /// core). Reports are printed in seed order; trace hashes do not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Stop, saying why, when the machine's available memory falls below this: a size
    /// (`512M`, `2G`), a share of its memory (`5%`), or `off`. The checkers keep every
    /// run's history, so a long or busy simulation can outgrow the machine. Default: 2 %
    /// of its memory, at least 256 MiB (Linux only; elsewhere there is no guard).
    #[arg(long, value_name = "SIZE", value_parser = MemoryFloor::parse)]
    memory_floor: Option<MemoryFloor>,
}

fn main() -> ExitCode {
    // Set up as the binary's: a simulation frees and reallocates the same memory all the
    // time, and returning it to the system between uses costs page faults (about 5 %).
    sundial_actors::allocator::configure();
    let args = Args::parse();
    // Simulated jobs panic on purpose; the run records it. Keep other panics loud.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let simulated = info.payload().downcast_ref::<String>().is_some_and(|m| m.starts_with("simulated panic"));
        if !simulated {
            default_hook(info);
        }
    }));
    let given = match (args.jobs_file.as_deref(), args.cron_mix.as_deref()) {
        (Some(file), _) => read_jobs(file).map(Some),
        (None, Some(mix)) => mix_jobs(mix).map(Some),
        (None, None) => Ok(None),
    };
    let given = match given {
        Ok(given) => given,
        Err(message) => {
            eprintln!("sundial-sim: {message}");
            return ExitCode::from(2);
        }
    };
    let overrides = Overrides {
        nodes: args.nodes.map(usize::from),
        duration: args.duration,
        jobs: args.jobs.map(|j| j as usize),
        faults: args.faults.clone(),
        broken_store: args.broken_store,
        history_retention: args.retention,
        given,
    };
    // The seeds `first..first + count`, walked without a list: a range may be far longer
    // than anyone waits for (`--seeds 0..18446744073709551615` runs until stopped).
    let (first, count) = match (&args.seeds, args.seed) {
        (Some(range), _) => (range.start, range.end - range.start),
        (None, Some(seed)) => (seed, 1),
        (None, None) => unreachable!("clap requires one of --seed and --seeds"),
    };
    let threads =
        args.threads.map_or_else(default_threads, usize::from).min(usize::try_from(count).unwrap_or(usize::MAX)).max(1);
    if let Err(message) = guard_memory(args.memory_floor.unwrap_or_default()) {
        eprintln!("sundial-sim: {message}");
        return ExitCode::from(2);
    }
    let mut failed = Vec::new();
    let mut violations = 0usize;
    let mut tally = |seed: u64, report: &Report| {
        if report.violations > 0 {
            failed.push(seed);
            violations += report.violations;
        }
    };
    if threads == 1 {
        // One at a time: each seed's options are printed before it runs, so a long
        // simulation shows what it is doing from the start.
        for seed in (0..count).map(|index| first + index) {
            let report = run_seed(seed, &overrides, &args, |header| emit(&header));
            emit(&report.text);
            tally(seed, &report);
        }
    } else {
        // Each seed is its own world on its own runtime: seeds run on `threads` threads
        // at once, and their reports are printed whole and in seed order.
        let next = std::sync::atomic::AtomicU64::new(0);
        let (sender, receiver) = std::sync::mpsc::channel::<(u64, Report)>();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                let (next, sender, overrides, args) = (&next, sender.clone(), &overrides, &args);
                scope.spawn(move || loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if index >= count {
                        break;
                    }
                    let seed = first + index;
                    let mut header = String::new();
                    let mut report = run_seed(seed, overrides, args, |h| header = h);
                    report.text.insert_str(0, &header);
                    if sender.send((index, report)).is_err() {
                        break;
                    }
                });
            }
            drop(sender);
            let mut done = std::collections::BTreeMap::new();
            let mut printed = 0u64;
            for (index, report) in receiver {
                done.insert(index, report);
                while let Some(report) = done.remove(&printed) {
                    emit(&report.text);
                    tally(first + printed, &report);
                    printed += 1;
                }
            }
        });
    }
    if args.seeds.is_some() {
        let summary = serde_json::json!({ "seeds": count, "failed_seeds": failed, "violations": violations });
        emit(&format!("{summary}\n"));
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Writes `text` to stdout at once. When the reader has gone (`sundial-sim … | head`) the
/// run ends quietly; any other failure to write ends it with status 1.
fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("sundial-sim: cannot write the report: {error}");
            std::process::exit(1);
        }
    }
}

/// One seed's printed report and its number of violations.
struct Report {
    text: String,
    violations: usize,
}

/// Runs `seed`: `header` gets its options before the simulation starts; the report is
/// the rest (summary, violations, the JSON line). A simulation that panics (a bug in the
/// simulator or a node) is reported as a violation, so the seed fails and the other seeds
/// still run.
fn run_seed(seed: u64, overrides: &Overrides, args: &Args, header: impl FnOnce(String)) -> Report {
    // Nothing a panic interrupts is looked at again: the report says it panicked.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut options = SimOptions::derive(seed, overrides);
        options.keep_trace = args.trace;
        header(describe_options(&options, args.cron_mix.as_deref()));
        report(&options, args.trace, args.cron_mix.is_none())
    }))
    .unwrap_or_else(|panic| panicked(seed, panic.as_ref()))
}

/// Simulates `options` and writes what happened: given jobs with a line each when
/// `job_lines`, else in one line.
fn report(options: &SimOptions, trace: bool, job_lines: bool) -> Report {
    use std::fmt::Write as _;
    let mut text = String::new();
    let started = wall_now();
    let outcome = simulate(options);
    let wall_ms = started.elapsed().as_millis();
    // Writing to a String cannot fail.
    let mut line = |l: std::fmt::Arguments<'_>| {
        let _ = writeln!(text, "{l}");
    };
    if trace {
        for t in &outcome.trace {
            line(format_args!("trace {t}"));
        }
    }
    let speed = outcome.simulated.as_secs_f64() * 1000.0 / wall_ms.max(1) as f64;
    line(format_args!(
        "summary: {} fires, {} runs, {} events; {:.0}x real time ({wall_ms} ms wall)",
        outcome.fires, outcome.runs, outcome.events, speed
    ));
    if !outcome.liveness_lengthened.is_zero() {
        line(format_args!(
            "  liveness phase lengthened by {} s: a clock had jumped that far ahead when the faults healed",
            outcome.liveness_lengthened.as_secs()
        ));
    }
    for (what, count) in &outcome.counts {
        line(format_args!("  {what}: {count}"));
    }
    let busiest = &outcome.busiest_poller;
    if let Some(until) = busiest.until {
        line(format_args!(
            "  busiest poller: {} acquisitions in {} s ({}, until {until})",
            busiest.acquisitions,
            sundial_simulations::world::SAMPLE_EVERY.as_secs(),
            busiest.node
        ));
    }
    for (what, count) in &outcome.checked.checked {
        line(format_args!("  checked {what}: {count}"));
    }
    if let Some(late) = outcome.checked.liveness_worst {
        // Below zero when every clock was ahead: fires started early in true time.
        let ms = late.num_milliseconds();
        let when = if ms < 0 { format!("{} ms before", -ms) } else { format!("{ms} ms after") };
        line(format_args!(
            "  liveness: the latest judged fire started {when} its time (in true time, less the most any clock was behind)"
        ));
    }
    match &options.given {
        Some(given) if job_lines => {
            line(format_args!("jobs (runs by cause; by end state; the latest a fire started after its time):"));
            for def in &given.jobs {
                let name = def.name.as_str();
                line(format_args!("  {name}: {}", job_line(outcome.jobs.get(name).cloned().unwrap_or_default())));
            }
        }
        Some(given) => {
            let latest = outcome.jobs.iter().filter_map(|(name, t)| Some((t.latest_start_us?, name.as_str()))).max();
            let latest =
                latest.map_or("no fire".to_owned(), |(us, job)| format!("{:+} ms ({job})", us.div_euclid(1000)));
            line(format_args!(
                "jobs: {} of the cron mix; the latest a fire started after its time: {latest}",
                given.jobs.len()
            ));
        }
        None => {}
    }
    line(format_args!(
        "lost-node overlaps (a job ignoring cancellation on a node declared lost, beside a run another node started after the declaration): {}",
        outcome.checked.lost_node_overlaps.len()
    ));
    for l in &outcome.checked.lost_node_overlaps {
        line(format_args!("  {l}"));
    }
    line(format_args!("violations: {}", outcome.checked.violations.len()));
    for l in &outcome.checked.violations {
        line(format_args!("  VIOLATION {l}"));
    }
    line(format_args!("{}", json_line(&outcome, wall_ms)));
    Report { text, violations: outcome.checked.violations.len() }
}

/// One job's line of the report: `fires 60, by hand 1, retries 3, recoveries 0; succeeded
/// 58, failed 5, lost 1; +12 ms`.
fn job_line(tally: JobTally) -> String {
    let states: Vec<String> =
        tally.states.iter().map(|(state, count)| format!("{} {count}", format!("{state:?}").to_lowercase())).collect();
    let latest = tally.latest_start_us.map_or("no fire".to_owned(), |us| format!("{:+} ms", us.div_euclid(1000)));
    format!(
        "fires {}, by hand {}, retries {}, recoveries {}; {}; {latest}",
        tally.fires,
        tally.manual,
        tally.retries,
        tally.recoveries,
        if states.is_empty() { "no runs".to_owned() } else { states.join(", ") }
    )
}

/// The report of a seed whose simulation panicked.
fn panicked(seed: u64, panic: &(dyn std::any::Any + Send)) -> Report {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    Report {
        text: format!("violations: 1\n  VIOLATION the simulation of seed {seed} panicked: {message}\n"),
        violations: 1,
    }
}

/// How often the memory guard looks: the history grows by tens of MB a second at most, so
/// the floor's hundreds of MB leave room between looks.
const MEMORY_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Starts the memory guard (see [`memory`]): refuses to start when the machine is already
/// below `floor`, and otherwise watches from a thread of its own, which ends the process
/// with status 2 and the reason when it falls below. No guard where `/proc/meminfo`
/// cannot be read (not Linux) or when `floor` is off.
fn guard_memory(floor: MemoryFloor) -> Result<(), String> {
    let read = || std::fs::read_to_string("/proc/meminfo").ok().as_deref().and_then(memory::parse_meminfo);
    let shortage = move || {
        let info = read()?;
        let below = memory::below_floor(info, floor)?;
        let resident = std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(memory::parse_resident);
        Some(memory::shortage_message(info, below, resident))
    };
    if floor == MemoryFloor::Off || read().is_none() {
        return Ok(());
    }
    if let Some(message) = shortage() {
        return Err(message);
    }
    std::thread::spawn(move || loop {
        std::thread::sleep(MEMORY_CHECK_EVERY);
        if let Some(message) = shortage() {
            // Holding stdout's lock, a report being printed is printed whole first, and no
            // other starts: the output is whole reports, then the reason.
            let _whole = std::io::stdout().lock();
            eprintln!("sundial-sim: {message}");
            std::process::exit(2);
        }
    });
    Ok(())
}

/// Seeds run at once by default: one per core (each simulation is single-threaded).
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

fn describe_options(options: &SimOptions, cron_mix: Option<&str>) -> String {
    let workload = workload::generate(options);
    let plan = faults::plan(options);
    let broken = options
        .broken_store
        .and_then(|bug| BROKEN_STORES.iter().find(|(_, known)| *known == bug))
        .map_or_else(String::new, |(name, _)| format!(" broken-store={name}"));
    format!(
        "seed {}\noptions: nodes={} duration={}s liveness={}s jobs={} retention={}s faults={}{broken}\n\
         workload: {} code jobs, {} runtime jobs{}, {} operations; fault plan: {} timed faults, skew {:?} ms\n",
        options.seed,
        options.nodes,
        options.duration.as_secs(),
        options.liveness.as_secs(),
        options.jobs,
        options.history_retention.as_secs(),
        options.faults,
        workload.code_jobs.len(),
        workload.runtime_jobs.len(),
        match (&options.given, cron_mix) {
            (Some(_), Some(mix)) => format!(" (the cron mix {mix})"),
            (Some(_), None) => " (the jobs file's)".to_owned(),
            (None, _) => String::new(),
        },
        workload.ops.len(),
        plan.timed.len(),
        plan.skew.iter().map(|s| s.num_milliseconds()).collect::<Vec<_>>()
    )
}

/// The jobs and calendars of a `--jobs-file`, checked as `sundial jobs apply -f` checks
/// them and by [`workload::check_given`].
fn read_jobs(file: &std::path::Path) -> Result<std::sync::Arc<GivenJobs>, String> {
    let read = sundial_actors::spec::read_file(file)?;
    let given = GivenJobs { jobs: read.definitions, calendars: read.calendars };
    workload::check_given(&given).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(std::sync::Arc::new(given))
}

/// The jobs of a `--cron-mix` description (see `sundial_simulations::cron_mix`).
fn mix_jobs(description: &str) -> Result<std::sync::Arc<GivenJobs>, String> {
    let jobs = cron_mix::cron_mix(description).map_err(|e| format!("--cron-mix: {e}"))?;
    let given = GivenJobs { jobs: cron_mix::definitions(&jobs)?, calendars: std::collections::BTreeMap::new() };
    workload::check_given(&given)?;
    Ok(std::sync::Arc::new(given))
}

/// Wall time, for the speed report only: it never reaches the simulation or its trace.
#[allow(clippy::disallowed_methods)]
fn wall_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// The store bugs `--broken-store` names (none without the feature `broken-stores`).
#[cfg(feature = "broken-stores")]
const BROKEN_STORES: &[(&str, BrokenStore)] = &[
    ("conflict-check", BrokenStore::AcquireWithoutConflictCheck),
    ("early-misfire", BrokenStore::EarlyMisfire),
    ("early-retention", BrokenStore::EarlyRetention),
    ("reschedule-stalls", BrokenStore::RescheduleStalls),
    ("interval-twice", BrokenStore::IntervalTwice),
    ("local-refused", BrokenStore::LocalRunsRefused),
    ("unblock-lost", BrokenStore::UnblockLost),
    ("skip-counted", BrokenStore::SkipCounted),
    ("retry-unindexed", BrokenStore::RetryUnindexed),
    ("repeat-short", BrokenStore::RepeatShort),
    ("codes-dropped", BrokenStore::CodesDropped),
];
#[cfg(not(feature = "broken-stores"))]
const BROKEN_STORES: &[(&str, BrokenStore)] = &[];

fn parse_broken(text: &str) -> Result<BrokenStore, String> {
    if BROKEN_STORES.is_empty() {
        return Err("this sundial-sim has no broken stores: build it with `--features broken-stores`".into());
    }
    match BROKEN_STORES.iter().find(|(name, _)| *name == text) {
        Some((_, bug)) => Ok(*bug),
        None => {
            let names: Vec<&str> = BROKEN_STORES.iter().map(|(name, _)| *name).collect();
            Err(format!("'{text}' is not a store bug here ({})", names.join(", ")))
        }
    }
}
