//! The last hour of this node's runs, minute by minute, for the dashboard's charts: runs
//! started and ended by outcome, and start lateness (p50, p99).
//!
//! Fed from the node's own events (as the metrics are), so it counts the runs this node
//! started; minutes are those of the events' own instants, so nothing here reads a clock.
//! Lateness quantiles come from power-of-two buckets from 0.1 ms: each is the upper bound
//! of the bucket it falls in, at most twice the true value.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Minutes kept.
pub const MINUTES: usize = 60;

/// Lateness buckets: bucket `i` holds lateness below `0.1 ms × 2^i` (the last, anything
/// beyond).
const BUCKETS: usize = 28;
const FIRST_BUCKET_US: u64 = 100;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Succeeded.
    Succeeded,
    /// Failed.
    Failed,
    /// Canceled.
    Canceled,
    /// Lost with its node.
    Lost,
}

#[derive(Debug, Clone)]
struct Minute {
    /// Minutes since the Unix epoch.
    index: i64,
    started: u64,
    ended: [u64; 4],
    lateness: [u64; BUCKETS],
}

impl Minute {
    fn new(index: i64) -> Self {
        Self { index, started: 0, ended: [0; 4], lateness: [0; BUCKETS] }
    }

    /// The lateness below which `q` of this minute's starts were, in milliseconds.
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.started == 0 {
            return None;
        }
        let rank = ((self.started as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.lateness.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some((FIRST_BUCKET_US << i) as f64 / 1000.0);
            }
        }
        None
    }
}

/// One minute as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinuteView {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Runs started.
    pub started: u64,
    /// Runs that succeeded.
    pub succeeded: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Runs canceled.
    pub canceled: u64,
    /// Runs lost.
    pub lost: u64,
    /// Median start lateness, ms (a bucket's upper bound); none without starts.
    pub lateness_p50_ms: Option<f64>,
    /// 99th percentile start lateness, ms (a bucket's upper bound).
    pub lateness_p99_ms: Option<f64>,
}

/// The last [`MINUTES`] minutes with runs, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    minutes: VecDeque<Minute>,
}

fn minute_of(at: DateTime<Utc>) -> i64 {
    at.timestamp().div_euclid(60)
}

fn bucket(lateness: Duration) -> usize {
    let us = u64::try_from(lateness.as_micros()).unwrap_or(u64::MAX);
    let mut i = 0;
    while i + 1 < BUCKETS && us >= FIRST_BUCKET_US << i {
        i += 1;
    }
    i
}

impl Timeline {
    /// The minute holding `at`, made if needed; `None` when it is older than those kept.
    fn minute(&mut self, at: DateTime<Utc>) -> Option<&mut Minute> {
        let index = minute_of(at);
        let newest = self.minutes.back().map_or(i64::MIN, |m| m.index);
        if index > newest {
            self.minutes.push_back(Minute::new(index));
            while self.minutes.front().is_some_and(|m| m.index <= index - MINUTES as i64) {
                self.minutes.pop_front();
            }
            return self.minutes.back_mut();
        }
        if index <= newest - MINUTES as i64 {
            return None;
        }
        // Events come nearly in order: look from the newest.
        let position = self.minutes.iter().rposition(|m| m.index <= index);
        match position {
            Some(p) if self.minutes[p].index == index => self.minutes.get_mut(p),
            Some(p) => {
                self.minutes.insert(p + 1, Minute::new(index));
                self.minutes.get_mut(p + 1)
            }
            None => {
                self.minutes.push_front(Minute::new(index));
                self.minutes.front_mut()
            }
        }
    }

    /// A run started at `at`, `lateness` after its scheduled time.
    pub fn started(&mut self, at: DateTime<Utc>, lateness: Duration) {
        if let Some(minute) = self.minute(at) {
            minute.started += 1;
            minute.lateness[bucket(lateness)] += 1;
        }
    }

    /// A run ended at `at`.
    pub fn ended(&mut self, at: DateTime<Utc>, how: Ended) {
        if let Some(minute) = self.minute(at) {
            minute.ended[how as usize] += 1;
        }
    }

    /// The minutes kept, oldest first (minutes without runs left out).
    pub fn view(&self) -> Vec<MinuteView> {
        self.minutes
            .iter()
            .map(|m| MinuteView {
                minute: DateTime::from_timestamp(m.index * 60, 0).unwrap_or_default(),
                started: m.started,
                succeeded: m.ended[Ended::Succeeded as usize],
                failed: m.ended[Ended::Failed as usize],
                canceled: m.ended[Ended::Canceled as usize],
                lost: m.ended[Ended::Lost as usize],
                lateness_p50_ms: m.quantile_ms(0.5),
                lateness_p99_ms: m.quantile_ms(0.99),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn runs_are_counted_in_the_minute_of_their_instant() {
        let mut timeline = Timeline::default();
        timeline.started(at(0), Duration::from_micros(50));
        timeline.started(at(30), Duration::from_millis(3));
        timeline.ended(at(31), Ended::Succeeded);
        timeline.ended(at(75), Ended::Failed);
        // Late news of the first minute goes to it.
        timeline.ended(at(5), Ended::Lost);
        let view = timeline.view();
        assert_eq!(view.len(), 2);
        assert_eq!(view[0].minute, DateTime::from_timestamp((1_800_000_000 / 60) * 60, 0).unwrap());
        assert_eq!((view[0].started, view[0].succeeded, view[0].lost, view[0].failed), (2, 1, 1, 0));
        assert_eq!((view[1].started, view[1].failed), (0, 1));
        assert_eq!(view[1].lateness_p50_ms, None);
    }

    #[test]
    fn lateness_quantiles_are_bucket_bounds() {
        let mut timeline = Timeline::default();
        for _ in 0..98 {
            timeline.started(at(0), Duration::from_micros(700));
        }
        timeline.started(at(0), Duration::from_millis(40));
        timeline.started(at(0), Duration::from_secs(3));
        let minute = &timeline.view()[0];
        // 700 µs is in [400, 800) µs; 40 ms in [25.6, 51.2) ms.
        assert_eq!(minute.lateness_p50_ms, Some(0.8));
        assert_eq!(minute.lateness_p99_ms, Some(51.2));
        assert_eq!(bucket(Duration::ZERO), 0);
        assert_eq!(bucket(Duration::from_secs(1_000_000)), BUCKETS - 1);
    }

    #[test]
    fn an_hour_is_kept_and_older_news_dropped() {
        let mut timeline = Timeline::default();
        for minute in 0..90 {
            timeline.started(at(minute * 60), Duration::ZERO);
        }
        let view = timeline.view();
        assert_eq!(view.len(), MINUTES);
        assert_eq!(view[0].minute, DateTime::from_timestamp(minute_of(at(30 * 60)) * 60, 0).unwrap());
        timeline.ended(at(0), Ended::Failed);
        assert_eq!(timeline.view().iter().map(|m| m.failed).sum::<u64>(), 0, "older than an hour: dropped");
        // A minute missing in the middle is made in its place.
        let mut gaps = Timeline::default();
        gaps.started(at(0), Duration::ZERO);
        gaps.started(at(180), Duration::ZERO);
        gaps.started(at(60), Duration::ZERO);
        let minutes: Vec<i64> = gaps.view().iter().map(|m| m.minute.timestamp() / 60 - minute_of(at(0))).collect();
        assert_eq!(minutes, [0, 1, 3]);
    }
}
