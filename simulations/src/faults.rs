//! The fault plan of a seed: timed fault events during the safety phase, plus the
//! background rates (conflicts, ambiguous commits, hung jobs) and per-node clock skew.

use std::time::Duration;

use chrono::TimeDelta;
use sundial::entropy::Entropy;

use crate::options::{FaultKind, SimOptions};

/// A timed fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Node slot `slot` dies abruptly; it comes back after `down`, with a new node id when
    /// `new_id`.
    Crash {
        /// The node slot.
        slot: usize,
        /// How long it stays down.
        down: Duration,
        /// Restart under a new node id.
        new_id: bool,
    },
    /// Node slot `slot` drains and stops gracefully, and restarts after `down`.
    Drain {
        /// The node slot.
        slot: usize,
        /// How long it stays down.
        down: Duration,
    },
    /// Every transaction waits up to `max` for `length`.
    Latency {
        /// How long the window lasts.
        length: Duration,
        /// The most each operation waits.
        max: Duration,
    },
    /// The store refuses everyone for `length`.
    Unavailable {
        /// How long the window lasts.
        length: Duration,
    },
    /// Node slot `slot` cannot reach the store for `length`.
    Partition {
        /// The node slot.
        slot: usize,
        /// How long it lasts.
        length: Duration,
    },
    /// Node slot `slot`'s wall clock jumps forward by `by`.
    ClockJump {
        /// The node slot.
        slot: usize,
        /// How far.
        by: Duration,
    },
}

/// The whole plan.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// Timed faults at offsets from the start, in order.
    pub timed: Vec<(Duration, Fault)>,
    /// Initial wall-clock offset of each node slot.
    pub skew: Vec<TimeDelta>,
    /// Chance of a spurious conflict per commit.
    pub conflicts: f64,
    /// Chance of a 1021 per commit (half applied, half not).
    pub unknown_result: f64,
    /// Chance a run hangs.
    pub hung: f64,
}

/// The plan of `options.seed`.
pub fn plan(options: &SimOptions) -> FaultPlan {
    let mut entropy = Entropy::from_seed(options.seed ^ 0x6661_756c_7473_0000);
    let faults = &options.faults;
    let span = options.duration.as_secs();
    let hours = options.duration.as_secs_f64() / 3600.0;
    let mut timed = Vec::new();
    for kind in [
        FaultKind::Crash,
        FaultKind::Drain,
        FaultKind::Latency,
        FaultKind::Unavailable,
        FaultKind::Partition,
        FaultKind::ClockJump,
    ] {
        let Some(rate) = faults.rate(kind) else { continue };
        // The expected count, rounded by a coin weighted with the fraction.
        let expected = rate * hours;
        let mut count = expected.floor() as u64;
        if (entropy.below(1_000_000) as f64) < expected.fract() * 1_000_000.0 {
            count += 1;
        }
        for _ in 0..count {
            if span < 180 {
                break;
            }
            let at = Duration::from_secs(60 + entropy.below(span - 120));
            let slot = entropy.below(options.nodes as u64) as usize;
            let fault = match kind {
                FaultKind::Crash => Fault::Crash {
                    slot,
                    down: Duration::from_secs(5 + entropy.below(300)),
                    new_id: entropy.below(2) == 0,
                },
                FaultKind::Drain => Fault::Drain { slot, down: Duration::from_secs(5 + entropy.below(300)) },
                FaultKind::Latency => Fault::Latency {
                    length: Duration::from_secs(10 + entropy.below(300)),
                    max: Duration::from_millis(1 + entropy.below(500)),
                },
                FaultKind::Unavailable => Fault::Unavailable { length: Duration::from_secs(1 + entropy.below(120)) },
                FaultKind::Partition => Fault::Partition { slot, length: Duration::from_secs(1 + entropy.below(180)) },
                _ => Fault::ClockJump { slot, by: Duration::from_secs(1 + entropy.below(120)) },
            };
            timed.push((at, fault));
        }
    }
    timed.sort_by_key(|(at, _)| *at);
    let skew = (0..options.nodes)
        .map(|_| match faults.rate(FaultKind::Skew) {
            Some(max) if max > 0.0 => {
                let max_ms = (max * 1000.0) as u64;
                TimeDelta::milliseconds(entropy.below(2 * max_ms + 1) as i64 - max_ms as i64)
            }
            _ => TimeDelta::zero(),
        })
        .collect();
    FaultPlan {
        timed,
        skew,
        conflicts: faults.rate(FaultKind::Conflicts).unwrap_or(0.0),
        unknown_result: faults.rate(FaultKind::UnknownResult).unwrap_or(0.0),
        hung: faults.rate(FaultKind::Hung).unwrap_or(0.0),
    }
}
