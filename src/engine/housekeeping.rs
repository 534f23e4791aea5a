//! The leader's housekeeping (SPEC §10 step 5) as a state machine: which nodes to reap,
//! and when to trim history. The housekeeper actor (`sundial-actors`) ticks it, reads the
//! node list, makes the reaps and the retention it asks for, and reports back.
//!
//! While this node leads, it watches every other node's heartbeat sequence on its own
//! monotonic clock (DESIGN.md decision 3): a node whose sequence stayed unchanged for
//! `node_timeout` is lost and reaped. A node no longer alive (declared lost, or stopped)
//! may still have runs `Running` (its reaping failed half-way, or it stopped with runs
//! that ignored their cancellation), so each term sweeps every such node once. A new term
//! starts its observations afresh: a new leader watches for a whole `node_timeout` before
//! it reaps anything, and sweeps again what an earlier leader may have left half-done.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::lapse::LapseWatch;
use crate::options::SchedulerOptions;
use crate::store::records::NodeRecord;
use crate::time::MonotonicInstant;

/// How often the housekeeper ticks: often enough to notice a lost node within about a
/// third of `node_timeout`, at most every `housekeeping_interval`, at least every 100 ms.
pub fn tick_period(options: &SchedulerOptions) -> Duration {
    options.housekeeping_interval.min(options.node_timeout / 3).max(Duration::from_millis(100))
}

/// A node to reap, in the order [`Housekeeper::plan_reaps`] gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reap {
    /// The node.
    pub node: String,
    /// Its heartbeat sequence as read: the reap declares it lost only if it is unchanged.
    pub seq: u64,
    /// It was alive, and its heartbeat lapsed on this leader's clock (`false`: it was no
    /// longer alive, and is swept for runs left `Running`).
    pub lapsed: bool,
}

/// What the leader's housekeeping remembers between ticks.
#[derive(Debug, Default)]
pub struct Housekeeper {
    /// Other nodes' heartbeat sequences, timed while unchanged.
    observations: LapseWatch<String, u64>,
    /// When history retention last ran, this term.
    last_retention: Option<MonotonicInstant>,
    /// The term these observations belong to.
    leading_term: Option<u64>,
    /// Nodes no longer alive whose runs this term has finished reaping.
    swept: BTreeSet<String>,
}

impl Housekeeper {
    /// A housekeeper that has observed nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// This node does not lead: everything observed is forgotten.
    pub fn not_leading(&mut self) {
        self.observations.clear();
        self.leading_term = None;
        self.last_retention = None;
        self.swept.clear();
    }

    /// This node leads in `term`. A new term forgets the observations from before (they
    /// do not count) and sweeps the nodes no longer alive again.
    pub fn leading(&mut self, term: u64) {
        if self.leading_term != Some(term) {
            self.observations.clear();
            self.swept.clear();
            self.leading_term = Some(term);
        }
    }

    /// The nodes to reap, given the node list `nodes` read by this node (`own`), whose
    /// read returned at `seen`, judged at `now` (taken before the read: a heartbeat
    /// written while the read was on its way is timed from `seen`, never earlier). First
    /// the nodes no longer alive not yet swept this term, then the live ones whose
    /// heartbeat lapsed. A lapsed node's observation ends with the plan; report each
    /// reap's outcome with [`Housekeeper::reaped`].
    pub fn plan_reaps(
        &mut self,
        own: &str,
        nodes: &[NodeRecord],
        node_timeout: Duration,
        seen: MonotonicInstant,
        now: MonotonicInstant,
    ) -> Vec<Reap> {
        // Records of nodes fully reaped are deleted: forget them.
        self.swept.retain(|name| nodes.iter().any(|n| &n.node == name));
        self.observations.retain(|name| nodes.iter().any(|n| &n.node == name));
        let mut reaps: Vec<Reap> = nodes
            .iter()
            .filter(|n| !n.alive && n.node != own && !self.swept.contains(&n.node))
            .map(|n| Reap { node: n.node.clone(), seq: n.heartbeat_seq, lapsed: false })
            .collect();
        for node in nodes.iter().filter(|n| n.alive && n.node != own) {
            self.swept.remove(&node.node);
            self.observations.observe(node.node.clone(), node.heartbeat_seq, node_timeout, seen);
            if self.observations.lapsed(&node.node, &node.heartbeat_seq, node_timeout, now) {
                self.observations.forget(&node.node);
                reaps.push(Reap { node: node.node.clone(), seq: node.heartbeat_seq, lapsed: true });
            }
        }
        reaps
    }

    /// `reap` finished (`done`): the node is swept for this term. A reap that failed is
    /// planned again at the next tick (a lapsed node once its heartbeat lapses again on
    /// this leader's clock, or as a node no longer alive).
    pub fn reaped(&mut self, reap: &Reap, done: bool) {
        if done {
            self.swept.insert(reap.node.clone());
        }
    }

    /// Whether history retention is due at `now`: once a term at once, then every
    /// `interval`.
    pub fn retention_due(&self, now: MonotonicInstant, interval: Duration) -> bool {
        self.last_retention.is_none_or(|last| now.saturating_duration_since(last) >= interval)
    }

    /// History retention ran (or failed, and waits a whole interval) at `now`.
    pub fn retention_ran(&mut self, now: MonotonicInstant) {
        self.last_retention = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(90);

    fn at(secs: u64) -> MonotonicInstant {
        MonotonicInstant::from_origin(Duration::from_secs(secs))
    }

    fn node(name: &str, seq: u64, alive: bool) -> NodeRecord {
        NodeRecord {
            node: name.into(),
            heartbeat_seq: seq,
            heartbeat_us: 0,
            alive,
            times_declared_lost: 0,
            draining: false,
            caught_up: false,
        }
    }

    fn plan(keeper: &mut Housekeeper, nodes: &[NodeRecord], secs: u64) -> Vec<Reap> {
        keeper.plan_reaps("me", nodes, TIMEOUT, at(secs), at(secs))
    }

    #[test]
    fn a_node_is_reaped_once_its_heartbeat_stayed_unchanged_for_the_timeout() {
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        let nodes = [node("me", 1, true), node("a", 5, true)];
        assert!(plan(&mut keeper, &nodes, 0).is_empty(), "first seen now");
        assert!(plan(&mut keeper, &nodes, 89).is_empty());
        let reaps = plan(&mut keeper, &nodes, 90);
        assert_eq!(reaps, [Reap { node: "a".into(), seq: 5, lapsed: true }]);
        // A heartbeat starts the timing again.
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        plan(&mut keeper, &nodes, 0);
        assert!(plan(&mut keeper, &[node("a", 6, true)], 80).is_empty());
        assert!(plan(&mut keeper, &[node("a", 6, true)], 169).is_empty());
        assert_eq!(plan(&mut keeper, &[node("a", 6, true)], 170).len(), 1);
    }

    #[test]
    fn a_heartbeat_seen_late_is_timed_from_when_the_read_returned() {
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        // Judged at 0, the read returned at 30: the sequence's timing starts at 30.
        keeper.plan_reaps("me", &[node("a", 5, true)], TIMEOUT, at(30), at(0));
        assert!(keeper.plan_reaps("me", &[node("a", 5, true)], TIMEOUT, at(110), at(110)).is_empty());
        assert_eq!(keeper.plan_reaps("me", &[node("a", 5, true)], TIMEOUT, at(120), at(120)).len(), 1);
    }

    #[test]
    fn a_new_term_observes_afresh_and_sweeps_dead_nodes_again() {
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        let nodes = [node("a", 5, true), node("dead", 2, false)];
        let reaps = plan(&mut keeper, &nodes, 0);
        assert_eq!(reaps, [Reap { node: "dead".into(), seq: 2, lapsed: false }], "swept once a term");
        keeper.reaped(&reaps[0], true);
        assert!(plan(&mut keeper, &nodes, 60).is_empty());
        keeper.leading(2);
        assert_eq!(plan(&mut keeper, &nodes, 100).len(), 1, "the new term sweeps it again");
        assert!(plan(&mut keeper, &nodes, 150).iter().all(|r| r.node == "dead"), "a's timing began at 100");
    }

    #[test]
    fn a_failed_sweep_is_tried_again_and_deleted_nodes_are_forgotten() {
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        let dead = [node("dead", 2, false)];
        let reaps = plan(&mut keeper, &dead, 0);
        keeper.reaped(&reaps[0], false);
        assert_eq!(plan(&mut keeper, &dead, 1).len(), 1);
        keeper.reaped(&Reap { node: "dead".into(), seq: 2, lapsed: false }, true);
        assert!(plan(&mut keeper, &[], 2).is_empty());
        assert_eq!(plan(&mut keeper, &dead, 3).len(), 1, "its record came back: swept again");
    }

    #[test]
    fn not_leading_forgets_everything_and_retention_runs_each_interval() {
        let hour = Duration::from_secs(3600);
        let mut keeper = Housekeeper::new();
        keeper.leading(1);
        assert!(keeper.retention_due(at(0), hour));
        keeper.retention_ran(at(0));
        assert!(!keeper.retention_due(at(3599), hour));
        assert!(keeper.retention_due(at(3600), hour));
        plan(&mut keeper, &[node("a", 5, true)], 0);
        keeper.not_leading();
        assert!(keeper.retention_due(at(1), hour), "a new leadership trims at once");
        keeper.leading(1);
        assert!(plan(&mut keeper, &[node("a", 5, true)], 90).is_empty(), "observations forgotten");
    }

    #[test]
    fn the_tick_comes_within_a_third_of_the_node_timeout() {
        let options = SchedulerOptions::default();
        assert_eq!(tick_period(&options), Duration::from_secs(30));
        let fast = SchedulerOptions { node_timeout: Duration::from_millis(150), ..SchedulerOptions::default() };
        assert_eq!(tick_period(&fast), Duration::from_millis(100));
    }
}
