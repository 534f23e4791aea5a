//! What the dashboard's first page and its nodes page show: `GET /api/overview` (jobs by
//! state, runs of the last hour by outcome, recent failures, late triggers, the cluster,
//! the store, this node's last hour minute by minute) and `GET /api/cluster`.
//!
//! The views are built by plain functions from what the store and the node report, so
//! they are tested without a node.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use sundial::job::TriggerState;
use sundial::store::{ClusterState, JobStatus};

use super::timeline::MinuteView;
use super::views::{JobState, RunView};
use super::NodeInfo;

/// A fire due this long ago and not taken yet is late.
pub const LATE_AFTER: TimeDelta = TimeDelta::seconds(2);
/// Late triggers listed (the oldest first); the count covers them all.
pub const LATE_LISTED: usize = 10;
/// Runs of the last hour the overview counts at most, the newest first: a refresh reads
/// the history index, and a million runs take a quarter of a second to count.
pub const RUNS_COUNTED: u64 = 100_000;

/// A node as the cluster page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// Its id.
    pub node: String,
    /// `alive`, `draining` (stopping: finishing its runs, taking no new work), `stopped`
    /// (stopped gracefully) or `lost` (declared lost by the leader).
    pub state: String,
    /// Its last heartbeat, on its own clock.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Milliseconds since then, on this node's clock.
    pub heartbeat_age_ms: Option<i64>,
    /// Runs running on it now.
    pub running: usize,
    /// It holds the leader lease.
    pub leader: bool,
    /// It is the node answering.
    pub this_node: bool,
}

/// The cluster: who leads, and every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterView {
    /// The leader's node id, when known: the holder of the store-kept lease, or this node
    /// when it leads through another election (a Kubernetes Lease).
    pub leader: Option<String>,
    /// Its term, for a store-kept lease.
    pub leader_term: Option<u64>,
    /// Every node with a record in the store, alive first, then by id.
    pub nodes: Vec<NodeView>,
}

/// The answering node, as it knows itself.
#[derive(Debug, Clone, Copy)]
pub struct ThisNode<'a> {
    /// Its id.
    pub id: &'a str,
    /// It holds the leader lease.
    pub leads: bool,
    /// Its lifecycle (`starting`, `serving`, `draining`, `stopped`).
    pub lifecycle: &'a str,
    /// Runs running on it.
    pub running: usize,
}

/// The cluster as `state` records it, seen from `this` node at `now`. A node alone on its
/// store (memory or embedded) keeps no record there: it is shown from what it knows.
pub fn cluster_view(state: ClusterState, now: DateTime<Utc>, this: ThisNode<'_>) -> ClusterView {
    let (this_node, this_node_leads) = (this.id, this.leads);
    let (leader, leader_term) = match &state.leader {
        Some(held) => (Some(held.node.clone()), Some(held.term)),
        None => (this_node_leads.then(|| this_node.to_owned()), None),
    };
    let mut nodes: Vec<NodeView> = state
        .nodes
        .into_iter()
        .map(|record| {
            let heartbeat_at = DateTime::from_timestamp_micros(record.heartbeat_us);
            let lifecycle = match (record.alive, record.draining) {
                (true, false) => "alive",
                (true, true) => "draining",
                (false, _) if record.times_declared_lost > 0 => "lost",
                (false, _) => "stopped",
            };
            NodeView {
                running: state.running.get(&record.node).copied().unwrap_or(0),
                heartbeat_age_ms: heartbeat_at.map(|at| (now - at).num_milliseconds().max(0)),
                heartbeat_at,
                state: lifecycle.to_owned(),
                leader: leader.as_deref() == Some(record.node.as_str()),
                this_node: record.node == this_node,
                node: record.node,
            }
        })
        .collect();
    if !nodes.iter().any(|n| n.this_node) {
        nodes.push(NodeView {
            node: this.id.to_owned(),
            state: if this.lifecycle == "serving" { "alive" } else { this.lifecycle }.to_owned(),
            heartbeat_at: None,
            heartbeat_age_ms: None,
            running: this.running,
            leader: leader.as_deref() == Some(this.id),
            this_node: true,
        });
    }
    nodes.sort_by(|a, b| (a.state != "alive", &a.node).cmp(&(b.state != "alive", &b.node)));
    ClusterView { leader, leader_term, nodes }
}

/// A trigger whose fire is late.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateTrigger {
    /// The job.
    pub job: String,
    /// The trigger.
    pub trigger: String,
    /// When it was due.
    pub due: DateTime<Utc>,
}

/// The jobs at a glance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobsAtAGlance {
    /// Jobs in each state (every state named, zero included).
    pub by_state: BTreeMap<String, usize>,
    /// All jobs.
    pub total: usize,
    /// Triggers due more than [`LATE_AFTER`] ago, not taken yet (of jobs and triggers not
    /// paused).
    pub late_count: usize,
    /// The [`LATE_LISTED`] latest of them, the oldest due first.
    pub late: Vec<LateTrigger>,
}

/// `statuses` at a glance, at `now`.
pub fn jobs_at_a_glance(statuses: &[JobStatus], now: DateTime<Utc>) -> JobsAtAGlance {
    let mut glance = JobsAtAGlance {
        by_state: JobState::ALL.iter().map(|s| (s.as_str().to_owned(), 0)).collect(),
        total: statuses.len(),
        ..JobsAtAGlance::default()
    };
    let mut late = Vec::new();
    for status in statuses {
        *glance.by_state.entry(JobState::of(status).as_str().to_owned()).or_insert(0) += 1;
        if status.paused {
            continue;
        }
        for trigger in &status.triggers {
            let Some(due) = trigger.next_fire else { continue };
            if trigger.state == TriggerState::Waiting && !trigger.paused && due < now - LATE_AFTER {
                late.push(LateTrigger { job: status.definition.name.to_string(), trigger: trigger.name.clone(), due });
            }
        }
    }
    glance.late_count = late.len();
    late.sort_by(|a, b| (a.due, &a.job, &a.trigger).cmp(&(b.due, &b.job, &b.trigger)));
    late.truncate(LATE_LISTED);
    glance.late = late;
    glance
}

/// The store, as `/health` judges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreView {
    /// `memory`, `embedded`, `postgres` or `fdb`.
    pub kind: String,
    /// Whether its server answered (none for a store in the process).
    pub reachable: Option<bool>,
    /// Why it did not.
    pub error: Option<String>,
}

/// `GET /api/overview`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overview {
    /// Now, on the answering node's clock.
    pub now: DateTime<Utc>,
    /// The answering node.
    pub node: NodeInfo,
    /// The jobs at a glance.
    pub jobs: JobsAtAGlance,
    /// Runs scheduled in the last hour, anywhere, by state (`running`, `succeeded`,
    /// `failed`, `canceled`, `lost`).
    pub runs_last_hour: BTreeMap<String, u64>,
    /// Whether `runs_last_hour` counts every run of the last hour; false when more than
    /// [`RUNS_COUNTED`] ended, and it counts the newest of them (running runs are
    /// always counted whole).
    pub runs_last_hour_complete: bool,
    /// The latest failed or lost runs.
    pub recent_failures: Vec<RunView>,
    /// The cluster.
    pub cluster: ClusterView,
    /// The store.
    pub store: StoreView,
    /// This node's last hour, minute by minute: runs started and ended, lateness.
    pub timeline: Vec<MinuteView>,
}

#[cfg(test)]
mod tests {
    use sundial::job::{JobDefinition, JobOrigin, JobTypeKey};
    use sundial::name::JobName;
    use sundial::store::records::NodeRecord;
    use sundial::store::{LeaderState, TriggerStatus};

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn node(id: &str, alive: bool, draining: bool, lost: u64, heartbeat: i64) -> NodeRecord {
        NodeRecord {
            node: id.to_owned(),
            heartbeat_seq: 1,
            heartbeat_us: at(heartbeat).timestamp_micros(),
            alive,
            times_declared_lost: lost,
            draining,
            caught_up: true,
        }
    }

    #[test]
    fn the_cluster_view_names_the_leader_and_each_nodes_state() {
        let state = ClusterState {
            nodes: vec![
                node("c", false, false, 1, -100),
                node("b", true, true, 0, -2),
                node("a", true, false, 0, -1),
                node("d", false, false, 0, -50),
            ],
            running: BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 1)]),
            leader: Some(LeaderState { node: "a".into(), term: 7 }),
        };
        let b = ThisNode { id: "b", leads: false, lifecycle: "draining", running: 1 };
        let view = cluster_view(state.clone(), at(0), b);
        assert_eq!((view.leader.as_deref(), view.leader_term), (Some("a"), Some(7)));
        let rows: Vec<String> = view
            .nodes
            .iter()
            .map(|n| {
                format!("{} {} {} {} {} {:?}", n.node, n.state, n.running, n.leader, n.this_node, n.heartbeat_age_ms)
            })
            .collect();
        assert_eq!(
            rows,
            [
                "a alive 3 true false Some(1000)",
                "b draining 1 false true Some(2000)",
                "c lost 0 false false Some(100000)",
                "d stopped 0 false false Some(50000)",
            ]
        );
        // A lease outside the store: this node knows only whether it leads.
        let elsewhere = ClusterState { leader: None, ..state };
        let leading = ThisNode { leads: true, ..b };
        assert_eq!(cluster_view(elsewhere.clone(), at(0), leading).leader.as_deref(), Some("b"));
        assert_eq!(cluster_view(elsewhere, at(0), b).leader, None);
        // Alone on its store, a node keeps no record there: it shows itself.
        let alone = ClusterState { nodes: vec![], running: BTreeMap::new(), leader: None };
        let view = cluster_view(alone, at(0), ThisNode { id: "solo", leads: true, lifecycle: "serving", running: 2 });
        let solo = &view.nodes[0];
        assert_eq!(
            (view.leader.as_deref(), solo.state.as_str(), solo.running, solo.leader),
            (Some("solo"), "alive", 2, true)
        );
    }

    fn status(name: &str, paused: bool, running: usize, triggers: Vec<TriggerStatus>) -> JobStatus {
        JobStatus {
            definition: JobDefinition::new(JobName::new(name).unwrap(), JobTypeKey::new("log").unwrap()),
            origin: JobOrigin::Runtime,
            paused,
            triggers,
            running,
            last_finished: None,
        }
    }

    fn trigger(name: &str, state: TriggerState, next: Option<DateTime<Utc>>) -> TriggerStatus {
        TriggerStatus {
            name: name.into(),
            state,
            paused: false,
            previous_fire: None,
            next_fire: next,
            fire_count: 0,
            error: None,
        }
    }

    #[test]
    fn jobs_are_counted_by_state_and_late_fires_listed_oldest_first() {
        let statuses = vec![
            status("late", false, 0, vec![trigger("t1", TriggerState::Waiting, Some(at(-10)))]),
            status("later", false, 0, vec![trigger("t", TriggerState::Waiting, Some(at(-60)))]),
            status("on-time", false, 0, vec![trigger("t", TriggerState::Waiting, Some(at(-1)))]),
            status("paused", true, 0, vec![trigger("t", TriggerState::Waiting, Some(at(-100)))]),
            status("busy", false, 2, vec![trigger("t", TriggerState::Acquired, Some(at(-100)))]),
            status("broken", false, 0, vec![trigger("t", TriggerState::Error, None)]),
            status("manual", false, 0, vec![]),
        ];
        let glance = jobs_at_a_glance(&statuses, at(0));
        assert_eq!(glance.total, 7);
        let counts: Vec<(&str, usize)> = glance.by_state.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(counts, [("error", 1), ("idle", 1), ("paused", 1), ("running", 1), ("scheduled", 3)]);
        assert_eq!(glance.late_count, 2);
        let late: Vec<&str> = glance.late.iter().map(|l| l.job.as_str()).collect();
        assert_eq!(late, ["later", "late"]);
    }
}
