//! The floors under sundial's figures: what a bare ractor actor's whole life costs beside
//! a bare tokio task's, and how fast bare tasks and actors waiting on one gate start when
//! it opens (`-- --floor`, `-- --start-floor`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sundial_actors::gate::Gate;

use super::{cpu_per_fire, cpu_text, percentile, process_cpu, records_for, Records};

/// Prints what an actor per run costs at least, whatever the run does (the part of "the
/// rest" no change inside sundial removes), and beside it what a bare task per run would.
pub(crate) fn floors(runtime: &tokio::runtime::Runtime) {
    let floor = runtime.block_on(actor_floor(200_000));
    let task = runtime.block_on(task_floor(2_000_000));
    println!(
        "floor: a bare ractor actor's whole life on this runtime (spawned linked, {SPAWN_ROUND} a round, \
         one message, stopped, its supervisor told): {}; a bare tokio task's (spawned, one message, ended, \
         its spawner told): {}",
        cpu_text(floor),
        cpu_text(task)
    );
}

/// A child actor that stops at its first message, which it sends itself once started.
struct Bare;

impl ractor::Actor for Bare {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ractor::ActorRef<()>, (): ()) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }

    async fn post_start(&self, myself: ractor::ActorRef<()>, (): &mut ()) -> Result<(), ractor::ActorProcessingErr> {
        Ok(myself.send_message(())?)
    }

    async fn handle(
        &self,
        myself: ractor::ActorRef<()>,
        (): (),
        (): &mut (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        myself.stop(None);
        Ok(())
    }
}

/// How many children [`Spawner`] spawns per message: the sustained run's acquisition batch.
const SPAWN_ROUND: usize = 2_000;

/// Spawns `count` [`Bare`] children linked to it, one after another, and counts their
/// terminations (as the poller does its run actors').
struct Spawner(tokio::sync::mpsc::UnboundedSender<()>);

impl ractor::Actor for Spawner {
    type Msg = usize;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ractor::ActorRef<usize>, (): ()) -> Result<(), ractor::ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        myself: ractor::ActorRef<usize>,
        count: usize,
        (): &mut (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        // A round at a time, then the rest in a message of its own: the supervision events
        // of the round's ended children are handled in between, as the poller handles its
        // run actors' between acquisitions. (All in one handler, every ended child's cell
        // would wait in the mailbox until the last was spawned.)
        let round = count.min(SPAWN_ROUND);
        for _ in 0..round {
            ractor::Actor::spawn_linked(None, Bare, (), myself.get_cell()).await?;
        }
        if count > round {
            myself.send_message(count - round)?;
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ractor::ActorRef<usize>,
        event: ractor::SupervisionEvent,
        (): &mut (),
    ) -> Result<(), ractor::ActorProcessingErr> {
        if let ractor::SupervisionEvent::ActorTerminated(..) = event {
            let _ = self.0.send(());
        }
        Ok(())
    }
}

/// Process CPU µs per [`Bare`] actor's whole life, over `count` of them.
async fn actor_floor(count: usize) -> f64 {
    let (ended, mut endings) = tokio::sync::mpsc::unbounded_channel();
    let Ok((spawner, handle)) = ractor::Actor::spawn(None, Spawner(ended), ()).await else { return f64::NAN };
    let before = process_cpu();
    if spawner.send_message(count).is_err() {
        return f64::NAN;
    }
    for _ in 0..count {
        if endings.recv().await.is_none() {
            return f64::NAN;
        }
    }
    let floor = cpu_per_fire(before, process_cpu(), count);
    spawner.stop(None);
    let _ = handle.await;
    floor
}

/// Process CPU µs per bare task's whole life, over `count` of them (a whole number of
/// rounds of 10,000): spawned from a task, given one message, ended, its spawner told
/// (what [`actor_floor`] measures, without an actor).
async fn task_floor(count: usize) -> f64 {
    const ROUND: usize = 10_000;
    let before = process_cpu();
    let spawner = tokio::spawn(async move {
        let (ended, mut endings) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..count / ROUND {
            for _ in 0..ROUND {
                let (message, inbox) = tokio::sync::oneshot::channel::<()>();
                let ended = ended.clone();
                tokio::spawn(async move {
                    if inbox.await.is_ok() {
                        let _ = ended.send(());
                    }
                });
                let _ = message.send(());
            }
            for _ in 0..ROUND {
                endings.recv().await?;
            }
        }
        Some(())
    });
    match spawner.await {
        Ok(Some(())) => cpu_per_fire(before, process_cpu(), count / ROUND * ROUND),
        _ => f64::NAN,
    }
}

/// The gates of a start floor: what its waiters wait on and record against.
#[derive(Default)]
struct FloorGates {
    /// The start instant's gate (the node's own kind of gate).
    start: Arc<Gate>,
    /// What a waiter waits on after its start, as a run waits before reporting its end.
    end: Arc<Gate>,
    /// When `start` opened.
    opened: std::sync::OnceLock<Instant>,
    /// Waiters polled once, so parked on `start`.
    parked: std::sync::atomic::AtomicUsize,
}

/// A bare actor that waits for a gate in `post_start`, records its start, waits for a
/// second gate, and stops: a run actor with nothing of sundial's in it (a run's end waits
/// too, for the other starts of its instant, so that no start waits behind another run's
/// end).
struct GateWaiter;

impl ractor::Actor for GateWaiter {
    type Msg = ();
    type State = FloorWaiter;
    type Arguments = FloorWaiter;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<()>,
        args: Self::Arguments,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(args)
    }

    async fn post_start(
        &self,
        myself: ractor::ActorRef<()>,
        waiter: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        waiter.run().await;
        myself.stop(None);
        Ok(())
    }
}

/// One waiter of a start floor: its gates, where it records, its number.
#[derive(Clone)]
struct FloorWaiter {
    gates: Arc<FloorGates>,
    records: Records,
    number: u32,
}

impl FloorWaiter {
    /// Waits for the start, records how long after the opening it started, waits for the
    /// end.
    async fn run(&self) {
        let gates = &self.gates;
        gates.parked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        gates.start.clone().wait().await;
        let after = gates.opened.get().map_or(0, |opened| opened.elapsed().as_micros() as i64);
        self.records.lock().unwrap().push((self.number, 0, after));
        gates.end.clone().wait().await;
    }
}

/// `count` waiters on one gate (bare tokio tasks, or bare ractor actors), all waiting,
/// then the gate opened from a worker: the lateness of each start after the opening, µs,
/// ascending. What starting a run at its instant costs at least, with a task or an actor
/// per run, whatever the scheduler does around it.
async fn start_floor(count: usize, actors: bool) -> Vec<i64> {
    let gates = Arc::new(FloorGates::default());
    let records = records_for(count);
    // Spawned from a worker, as the poller spawns its run actors.
    let spawner = {
        let waiter = FloorWaiter { gates: gates.clone(), records: records.clone(), number: 0 };
        tokio::spawn(async move {
            let (mut actors_spawned, mut waiting) = (Vec::new(), 0);
            for number in 0..count as u32 {
                let waiter = FloorWaiter { number, ..waiter.clone() };
                if actors {
                    match ractor::Actor::spawn(None, GateWaiter, waiter).await {
                        Ok(spawned) => actors_spawned.push(spawned),
                        Err(error) => {
                            eprintln!("start floor: actor {number} did not start: {error}");
                            break;
                        }
                    }
                } else {
                    tokio::spawn(async move { waiter.run().await });
                }
                waiting += 1;
            }
            (actors_spawned, waiting)
        })
    };
    let (actors_spawned, count) = spawner.await.unwrap_or_default();
    // Every waiter polled once and parked on the gate (a waiter not yet polled would be
    // counted as a slow start).
    while gates.parked.load(std::sync::atomic::Ordering::Relaxed) < count {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let opener = gates.clone();
    let _ = tokio::spawn(async move {
        let _ = opener.opened.set(Instant::now());
        opener.start.open();
    })
    .await;
    while records.lock().unwrap().len() < count {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gates.end.open();
    for (actor, handle) in actors_spawned {
        actor.stop(None);
        let _ = handle.await;
    }
    let mut lateness: Vec<i64> = records.lock().unwrap().iter().map(|(_, _, after)| *after).collect();
    lateness.sort_unstable();
    lateness
}

/// The start floors of `count` waiters, printed: bare tasks, then bare actors.
pub(crate) fn start_floors(runtime: &tokio::runtime::Runtime, count: usize) {
    for (what, actors) in [("bare tokio tasks", false), ("bare ractor actors", true)] {
        let lateness = runtime.block_on(start_floor(count, actors));
        let at = |p: f64| percentile(&lateness, p).unwrap_or(0);
        let (last, started) = (lateness.last().copied().unwrap_or(0), lateness.len());
        println!(
            "start floor: {started} {what} waiting on one gate started within {:.1} ms of its opening \
             (p50 {:.1} ms, p99 {:.1} ms; {:.2} µs of wall time a start)",
            last as f64 / 1e3,
            at(0.5) as f64 / 1e3,
            at(0.99) as f64 / 1e3,
            last as f64 / started.max(1) as f64
        );
    }
}
