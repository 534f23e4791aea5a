//! The sustained run (`-- --sustained`, and the end of a full run): one high load for
//! 20 s on each sundial configuration and on the peer, what the store did meanwhile, and
//! the same run on mimalloc in a child process against the system allocator.

use std::time::Duration;

use super::{
    allocator, apalis_cron, cpu_text, engines, sundial_cron, sustained_load, where_the_time_goes, Config, Events, Plan,
    Shape, Store, Summary, Tuning,
};

/// The sustained run: the load for 20 s on one node of each configuration, the peer at
/// the same load, the durable store; then the same on mimalloc in a child process.
pub(crate) fn sustained(runtime: &tokio::runtime::Runtime, plan: &Plan) {
    let (load, seconds) = (sustained_load(plan), 20);
    let ours: Vec<(String, Summary)> = plan
        .configs
        .iter()
        .enumerate()
        .map(|(c, config)| {
            let node = format!("bench-sustained-{c}");
            (config.label(), runtime.block_on(sundial_cron(load, seconds, &node, Store::Memory, *config)))
        })
        .collect();
    if plan.sundial_only {
        // For the parent's allocator comparison: one line per configuration.
        for (label, s) in &ours {
            println!("sustained-result\t{label}\t{:.0}\t{:.1}\t{}", s.ran_per_second, s.pct(0.99), s.missed);
        }
        // What a build's fire costs, to compare builds and allocators run in turns.
        for (label, s) in &ours {
            println!("{label}: {}", where_the_time_goes(s.cpu_per_fire_us, s.engine_per_fire_us));
            store_lock(s);
        }
        return;
    }
    let peer = runtime.block_on(apalis_cron(load, seconds));
    let main_config =
        *plan.configs.last().unwrap_or(&Config { shape: Shape::USER, tuning: Tuning::Tuned, events: Events::Off });
    let durable: Vec<(String, Summary)> = engines()
        .into_iter()
        .map(|e| {
            let summary =
                runtime.block_on(sundial_cron(load, seconds, "durable-sustained", Store::Durable(e), main_config));
            (format!("{e:?}"), summary)
        })
        .collect();
    println!("\nsustained {load} fires/s for {seconds} s on {}", allocator::name());
    let named = ours
        .iter()
        .map(|(n, s)| (n.as_str(), s))
        .chain([("apalis", &peer)])
        .chain(durable.iter().map(|(n, s)| (n.as_str(), s)));
    for (name, s) in named {
        println!(
            "{name:>24}: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} missed, {} duplicated; ran {:.0} fires/s",
            s.pct(0.5),
            s.pct(0.9),
            s.pct(0.99),
            s.pct(1.0),
            s.missed,
            s.duplicated,
            s.ran_per_second
        );
    }
    for (label, s) in &ours {
        println!("{label}: {}", where_the_time_goes(s.cpu_per_fire_us, s.engine_per_fire_us));
    }
    println!("apalis: {}", cpu_text(peer.cpu_per_fire_us));
    for (name, s) in &durable {
        // Process CPU: the durable store's writer and folder threads are in "the rest".
        println!("{name}: {}", where_the_time_goes(s.cpu_per_fire_us, s.engine_per_fire_us));
        if let Some((stats, fires)) = &s.store {
            let fires = (*fires).max(1) as f64;
            println!(
                "{name} store: {} commits, {} conflicts ({:.3} and {:.4} per fire that ran)",
                stats.commits,
                stats.conflicts,
                stats.commits as f64 / fires,
                stats.conflicts as f64 / fires
            );
        }
    }
    if let Some((_, main)) = ours.last() {
        store_report(main, runtime.metrics().num_workers(), load);
    }
    if !allocator::is_mimalloc() {
        allocator_peer(&ours);
    }
}

/// What the store did during a sustained run, and the ceiling its CPU per fire allows.
fn store_report(ours: &Summary, workers: usize, load: usize) {
    if let Some((stats, fires)) = ours.store {
        let fires = fires.max(1) as f64;
        println!(
            "store: {} commits, {} conflicts ({:.3} and {:.4} per fire that ran), {} read-only commits",
            stats.commits,
            stats.conflicts,
            stats.commits as f64 / fires,
            stats.conflicts as f64 / fires,
            stats.read_only_commits
        );
    }
    store_lock(ours);
    if ours.cpu_per_fire_us.is_finite() {
        // The most the workers could run at this cost, all of them busy all the time: what
        // the work per fire allows, apart from how it is spread over the cores.
        let ceiling = workers as f64 * 1e6 / ours.cpu_per_fire_us;
        println!(
            "ceiling: {workers} workers at {:.1} µs per fire run at most {ceiling:.0} fires/s; {load} fires/s \
             needs at most {:.1} µs per fire",
            ours.cpu_per_fire_us,
            workers as f64 * 1e6 / load as f64
        );
    }
}

/// How long the store's lock was held and waited for, a fire. Held exclusively (commits,
/// each transaction's first read), it is held by one client at a time: that hold per fire
/// bounds the fires per second whatever the cores. Reads after a transaction's first hold
/// it shared, beside one another. The waits are threads blocked behind it.
fn store_lock(ours: &Summary) {
    if let Some((stats, fires)) = ours.store {
        let fires = fires.max(1) as f64;
        let per_fire = |time: Duration| time.as_secs_f64() * 1e6 / fires;
        let (held, shared, waited) =
            (per_fire(stats.lock_held), per_fire(stats.lock_shared), per_fire(stats.lock_waited));
        let running = fires / ours.ran_per_second;
        println!(
            "store lock: held {held:.1} µs a fire ({:.0} % of the time the node ran; the lock alone allows at \
             most {:.0} fires/s), shared by reads {shared:.1} µs a fire, waited for {waited:.1} µs a fire",
            stats.lock_held.as_secs_f64() / running * 100.0,
            1e6 / held
        );
    }
}

/// Runs the sustained measurement again in a child process on mimalloc and prints the
/// system allocator's throughput against it, configuration by configuration.
fn allocator_peer(ours: &[(String, Summary)]) {
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    args.push("--sundial-only".into());
    let output = std::process::Command::new(exe).args(&args).env(allocator::VARIABLE, "mimalloc").output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            eprintln!("the mimalloc run failed: {}", String::from_utf8_lossy(&output.stderr));
            return;
        }
        Err(error) => {
            eprintln!("the mimalloc run did not start: {error}");
            return;
        }
    };
    println!("\nthe same sustained run on mimalloc (a child process of this bench), against the system allocator's");
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let ["sustained-result", label, ran, p99, missed] = fields[..] else { continue };
        let Some((_, system)) = ours.iter().find(|(l, _)| l == label) else { continue };
        let ran: f64 = ran.parse().unwrap_or(f64::NAN);
        println!(
            "{label:>24}: mimalloc ran {ran:.0} fires/s (p99 {p99} ms, {missed} missed), the system allocator \
             {:.0} fires/s (p99 {:.1} ms): {:.0} % of mimalloc's",
            system.ran_per_second,
            system.pct(0.99),
            system.ran_per_second / ran * 100.0
        );
    }
}
