//! The poller's decisions, as plain functions of what it knows: how long a node sleeps
//! after a cycle, and the intervals that pace its reads of other nodes' shards. The
//! poller actor (`sundial-actors`) gathers the inputs and acts on the answers.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::store::DueOutlook;
use crate::time::add_duration;

/// How late a fire in another node's shard must be before this node takes it.
pub const STEAL_GRACE: Duration = Duration::from_secs(2);

/// How often at most a node reads the other nodes' shards for late fires to steal. The
/// nodes take turns half as long (see [`crate::store::steal_read_due`]): a dead node's
/// fires wait `STEAL_GRACE` plus up to this until taken elsewhere, and the cluster reads
/// twice per `STEAL_CHECK` however many nodes it has.
pub const STEAL_CHECK: Duration = Duration::from_secs(5);

/// The shortest sleep after a cycle that left a due fire untaken, so a node never spins.
pub const MIN_RETRY_WAIT: Duration = Duration::from_millis(10);

/// Whether a cycle writes the heartbeat, given how long ago the last one committed
/// (`None`: none did): when it is half a poll interval old. The cycles a node runs between
/// its regular ones (woken for a due fire, a local change, a freed slot) skip it, so a busy
/// node writes one or two a poll interval, not one per wake-up; cancel requests, read with
/// it, wait at most a poll interval, as SPEC §10 has them. (A poller that wrote none yet
/// writes one at its first cycle whatever this says.)
pub fn heartbeat_due(age: Option<Duration>, poll_interval: Duration) -> bool {
    age.is_none_or(|age| age >= poll_interval / 2)
}

/// How long until the last committed heartbeat, `age` ago, is a poll interval old
/// (`None` once it is, or when none committed: a failed heartbeat is retried at the next
/// regular cycle). A cycle comes by then, so heartbeats keep their cadence whatever wakes
/// the node in between.
pub fn until_heartbeat(age: Option<Duration>, poll_interval: Duration) -> Option<Duration> {
    poll_interval.checked_sub(age?).filter(|left| !left.is_zero())
}

/// Whether a node takes the fires of scheduled triggers (SPEC §10, "How cluster-unique
/// jobs run once"): on a store the cluster shares, every node does, the store giving each
/// fire to one of them; on a store of its own (not shared, so no acquisition between
/// nodes), only while it holds the leader lease. One-shot fires (enqueued, retries)
/// ignore leadership.
pub fn takes_scheduled_fires(shared_store: bool, leads: bool) -> bool {
    shared_store || leads
}

/// How a cycle's acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// It took a full batch: more may be due now, so the next cycle comes at once.
    Full,
    /// It took what was due; what is due next, as its transaction saw it (`None`: not read).
    Done(Option<DueOutlook>),
    /// It failed; the next cycle adopts the runs it may have committed.
    Failed,
    /// It did not run: no run slot is free, or this cycle's heartbeat failed.
    NoSlots,
}

impl Taken {
    /// Whether an acquisition at `now` that ended so left nothing due in this node's home
    /// shards: it ran (a free slot, a recent heartbeat), did not fill its batch, and the
    /// outlook after it has no fire due by `now`. A node that says so in its heartbeat is
    /// trusted by the others not to need its shards read for late fires while that
    /// heartbeat is recent; fires it leaves waiting for jobs busy on it would never be
    /// taken then, so the caller also requires that none is.
    pub fn caught_up(&self, now: DateTime<Utc>) -> bool {
        match self {
            Taken::Done(Some(outlook)) => outlook.first.is_none_or(|first| first > now),
            Taken::Done(None) | Taken::Full | Taken::Failed | Taken::NoSlots => false,
        }
    }
}

/// What a cycle learned of the fires due next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextDue {
    /// Its read failed: not known.
    Unknown,
    /// The earliest fire due in this node's home shards, and in the other nodes' shards.
    Known {
        /// In this node's home shards.
        home: Option<DateTime<Utc>>,
        /// In the other nodes' shards.
        elsewhere: Option<DateTime<Utc>>,
    },
}

/// What a cycle's wait depends on.
#[derive(Debug, Clone, Copy)]
pub struct CycleEnd {
    /// Now, after the cycle.
    pub now: DateTime<Utc>,
    /// When the cycle began.
    pub ran_at: DateTime<Utc>,
    /// The longest a node sleeps.
    pub poll_interval: Duration,
    /// This node's next local fire or retry.
    pub local_due: Option<DateTime<Utc>>,
    /// Whether the cycle started the local fires that were due (it did not without a
    /// recent heartbeat, or with runs to adopt first).
    pub local_polled: bool,
    /// What is due next; `None` when no run slot was free (nothing can be taken until a
    /// run ends, which wakes the poller, so it was not asked).
    pub next_due: Option<NextDue>,
    /// How far ahead the next acquisition reaches.
    pub lookahead: Duration,
    /// The fires the cycle's acquisition reached (`None`: it did not complete).
    pub acquired_until: Option<DateTime<Utc>>,
}

/// How long a node sleeps after a cycle (whose acquisition did not fill its batch): until
/// its next fire enters the lookahead, its next local fire, or a late fire elsewhere
/// becomes stealable, and at most one poll interval.
pub fn wait_after_cycle(end: &CycleEnd) -> Duration {
    let now = end.now;
    let local_wait = end.local_due.map(|due| {
        let wait = (due - now).to_std().unwrap_or(Duration::ZERO);
        // A local fire still due after this cycle started the due ones is the next of a
        // trigger catching up (each cycle moved every due trigger on): at once. Due while
        // this cycle started none: not at once, never spin on it.
        if due <= end.ran_at && !end.local_polled {
            wait.max(MIN_RETRY_WAIT)
        } else {
            wait
        }
    });
    let Some(next_due) = end.next_due else {
        return local_wait.map_or(end.poll_interval, |local| local.min(end.poll_interval));
    };
    let horizon = add_duration(now, end.lookahead);
    let until_stealable = |due| {
        let stealable = add_duration(due, STEAL_GRACE);
        (stealable - now).to_std().unwrap_or(Duration::ZERO).max(MIN_RETRY_WAIT)
    };
    let wait = match next_due {
        NextDue::Known { home, elsewhere } => {
            let home = match home {
                Some(due) if due > horizon => (due - horizon).to_std().unwrap_or(Duration::ZERO),
                // Fires this cycle's acquisition did not reach (the lead grew, or time
                // passed while it ran): acquire them now.
                Some(due) if end.acquired_until.is_some_and(|reached| due > reached) => Duration::ZERO,
                // Ours and due, yet not taken (written since, or hidden behind many fires
                // this node leaves waiting, which the outlook skips): wake when any node
                // may take it rather than spin on it.
                Some(due) => until_stealable(due),
                None => end.poll_interval,
            };
            // Other nodes' fires only once they are late enough to take, and checked at
            // most every STEAL_CHECK: a node is not woken by every fire of the cluster.
            let elsewhere = elsewhere.map_or(end.poll_interval, |due| until_stealable(due).max(STEAL_CHECK));
            home.min(elsewhere)
        }
        NextDue::Unknown => end.poll_interval,
    };
    local_wait.map_or(wait, |local| local.min(wait)).min(end.poll_interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_store_of_its_own_only_the_leader_takes_scheduled_fires() {
        assert!(takes_scheduled_fires(true, false));
        assert!(takes_scheduled_fires(true, true));
        assert!(takes_scheduled_fires(false, true));
        assert!(!takes_scheduled_fires(false, false));
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A cycle that began at 0 and ended at 10 ms, acquired up to 110 ms, knowing `next`.
    fn end(next: Option<NextDue>) -> CycleEnd {
        CycleEnd {
            now: at(10),
            ran_at: at(0),
            poll_interval: Duration::from_secs(1),
            local_due: None,
            local_polled: true,
            next_due: next,
            lookahead: ms(100),
            acquired_until: Some(at(100)),
        }
    }

    fn home(due: i64) -> Option<NextDue> {
        Some(NextDue::Known { home: Some(at(due)), elsewhere: None })
    }

    #[test]
    fn a_heartbeat_is_written_every_half_poll_interval_and_a_cycle_comes_by_the_full_one() {
        let poll = Duration::from_secs(1);
        assert!(heartbeat_due(None, poll), "none committed yet");
        assert!(!heartbeat_due(Some(ms(499)), poll), "a cycle woken early skips it");
        assert!(heartbeat_due(Some(ms(500)), poll));
        assert_eq!(until_heartbeat(Some(ms(300)), poll), Some(ms(700)));
        assert_eq!(until_heartbeat(Some(ms(1_000)), poll), None, "overdue: the next regular cycle");
        assert_eq!(until_heartbeat(None, poll), None);
    }

    #[test]
    fn a_node_is_caught_up_only_after_an_acquisition_that_left_nothing_due() {
        let outlook = |first: Option<i64>| DueOutlook { first: first.map(at), count: 0, first_elsewhere: None };
        assert!(Taken::Done(Some(outlook(None))).caught_up(at(0)));
        assert!(Taken::Done(Some(outlook(Some(5)))).caught_up(at(0)), "the next fire is later");
        assert!(!Taken::Done(Some(outlook(Some(0)))).caught_up(at(0)), "one is due now");
        for taken in [Taken::Done(None), Taken::Full, Taken::Failed, Taken::NoSlots] {
            assert!(!taken.caught_up(at(0)), "{taken:?}");
        }
    }

    #[test]
    fn a_node_wakes_when_its_next_fire_enters_the_lookahead_and_sleeps_a_poll_interval_at_most() {
        // Due at 500 ms, the lookahead 100 ms: wake at 400 ms, 390 ms from now.
        assert_eq!(wait_after_cycle(&end(home(500))), ms(390));
        assert_eq!(wait_after_cycle(&end(home(60_000))), Duration::from_secs(1));
        assert_eq!(wait_after_cycle(&end(Some(NextDue::Known { home: None, elsewhere: None }))), ms(1_000));
        assert_eq!(wait_after_cycle(&end(Some(NextDue::Unknown))), ms(1_000), "a failed read: poll");
    }

    #[test]
    fn a_due_fire_is_acquired_at_once_if_the_acquisition_did_not_reach_it_and_else_when_stealable() {
        // Within the lookahead (≤ 110 ms) but past what the acquisition reached (100 ms).
        assert_eq!(wait_after_cycle(&end(home(105))), Duration::ZERO);
        // Reached and still there: taken by nobody yet; wake when any node may take it
        // (due 50 ms + 2 s grace), never sooner than the retry floor.
        assert_eq!(wait_after_cycle(&CycleEnd { poll_interval: ms(5_000), ..end(home(50)) }), ms(2_040));
        assert_eq!(wait_after_cycle(&end(home(-5_000))), MIN_RETRY_WAIT);
    }

    #[test]
    fn other_nodes_fires_wake_a_node_once_stealable_and_at_most_every_steal_check() {
        let late = Some(NextDue::Known { home: None, elsewhere: Some(at(-10_000)) });
        let long_poll = |next| CycleEnd { poll_interval: Duration::from_secs(60), ..end(next) };
        assert_eq!(wait_after_cycle(&long_poll(late)), STEAL_CHECK);
        let soon = Some(NextDue::Known { home: None, elsewhere: Some(at(8_000)) });
        assert_eq!(wait_after_cycle(&long_poll(soon)), ms(9_990), "8 s + the 2 s grace, from 10 ms");
    }

    #[test]
    fn local_fires_wake_the_node_but_one_it_could_not_start_does_not_make_it_spin() {
        let local = |due, polled| CycleEnd { local_due: Some(at(due)), local_polled: polled, ..end(home(60_000)) };
        assert_eq!(wait_after_cycle(&local(300, true)), ms(290));
        // Due before the cycle began and started by it: the next of a trigger catching up.
        assert_eq!(wait_after_cycle(&local(-50, true)), Duration::ZERO);
        // Due before the cycle began, and the cycle started no local fire.
        assert_eq!(wait_after_cycle(&local(-50, false)), MIN_RETRY_WAIT);
        // No free slot: only the local fire (or the poll interval) wakes it.
        let full = CycleEnd { next_due: None, ..local(300, true) };
        assert_eq!(wait_after_cycle(&full), ms(290));
        assert_eq!(wait_after_cycle(&CycleEnd { local_due: None, ..full }), ms(1_000));
    }
}
