//! Deterministic cluster simulation of sundial.
//!
//! A simulation runs N real sundial nodes — the actors of `sundial-actors`, unchanged — on
//! one `current_thread` tokio runtime with paused time and a seeded scheduler RNG, sharing
//! one `MemoryKv`. Each node has its own clock (true time plus skew and jumps) and its own
//! seeded entropy; nothing reads the host's clock or randomness. From one seed come the
//! options ([`options`]), the workload ([`workload`]), the simulated jobs' behaviour
//! ([`sim_job`]) and the fault plan ([`faults`]). The world ([`world`]) runs a safety phase
//! (faults on) and a liveness phase (faults healed); the checkers ([`check`]) read the
//! event log the jobs wrote ([`trace`]) and the store's history. The same seed gives the
//! same trace hash, in any process.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod check;
pub mod clock;
pub mod cron_mix;
pub mod faults;
pub mod memory;
pub mod options;
pub mod sim_job;
pub mod trace;
pub mod workload;
pub mod world;

pub use options::{Faults, GivenJobs, Overrides, SimOptions};
pub use world::{simulate, Outcome};

/// The calendars every simulated node registers, by name: the simulation's `quiet` and
/// those of a user's jobs file, `given` (which win over `quiet` on its name).
pub fn world_calendars(
    given: Option<&GivenJobs>,
) -> std::collections::BTreeMap<sundial::name::CalendarName, std::sync::Arc<dyn sundial::calendar::JobCalendar>> {
    let mut calendars = std::collections::BTreeMap::new();
    if let Ok(name) = sundial::name::CalendarName::new(workload::QUIET_CALENDAR) {
        calendars.insert(name, workload::quiet_calendar());
    }
    if let Some(given) = given {
        calendars.extend(given.calendars.iter().map(|(name, calendar)| (name.clone(), calendar.clone())));
    }
    calendars
}

/// [`world_calendars`] as a store or a checker takes them.
pub fn world_calendar_set(given: Option<&GivenJobs>) -> sundial::calendar::Calendars {
    let mut set = sundial::calendar::Calendars::new();
    for (name, calendar) in world_calendars(given) {
        set.insert(name, calendar);
    }
    set
}

/// One JSON line describing a simulation (the last line the binary prints for it).
pub fn json_line(outcome: &Outcome, wall_ms: u128) -> String {
    serde_json::json!({
        "seed": outcome.options.seed,
        "nodes": outcome.options.nodes,
        "simulated_seconds": outcome.simulated.as_secs(),
        "fires": outcome.fires,
        "runs": outcome.runs,
        "violations": outcome.checked.violations.len(),
        "lost_node_overlaps": outcome.checked.lost_node_overlaps.len(),
        "busiest_poller": outcome.busiest_poller.acquisitions,
        "liveness_worst_ms": outcome.checked.liveness_worst.map(|late| late.num_milliseconds()),
        "trace_hash": outcome.trace_hash,
        "wall_ms": wall_ms,
    })
    .to_string()
}
