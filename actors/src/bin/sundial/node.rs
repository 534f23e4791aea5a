//! `sundial node`: one node from a config file (or defaults), the built-in job kinds, the
//! admin API, and the stop sequence on SIGINT/SIGTERM.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use sundial::entropy::Entropy;
use sundial::job::{JobDefinition, JobTypeKey, RetryPolicy};
use sundial::kv::embedded::{EmbeddedKv, EmbeddedOptions};
use sundial::kv::memory::{MemoryKv, MemoryKvOptions};
use sundial::kv::postgres::{PgKv, PgOpenError};
use sundial::kv::Kv;
use sundial::name::JobName;
use sundial::store::{KvJobStore, StoreOptions};
use sundial::time::{Clock, SystemClock};
use sundial_actors::admin::metrics::{Metrics, MetricsPublisher, StoreProbe};
use sundial_actors::admin::tls::{self, CurrentCertificate, TlsFiles, TlsListener};
use sundial_actors::admin::{self, AdminState};
use sundial_actors::clock::TokioSleeper;
use sundial_actors::config::{
    EventsConfig, LeaderConfig, LogFormat, NodeFileConfig, PostgresStore, StoreConfig, STORE_PASSWORD_ENV,
};
use sundial_actors::events::{CloudEvent, EventPublisher, FanOut, PublishError, Topic};
use sundial_actors::job::{Job, JobFailure, JobResult, RunContext};
use sundial_actors::kinds;
use sundial_actors::kubernetes::{KubernetesApi, KubernetesLeaderElection};
use sundial_actors::lease::DynLeaderElection;
use sundial_actors::node::{Node, NodeConfig};
use sundial_actors::registry::JobRegistry;
use sundial_actors::sinks::http::HttpSink;
use sundial_actors::sinks::nats::NatsSink;
use sundial_actors::sinks::{self as sink, SinkPublisher};
use sundial_actors::stats::RetryCountingKv;

use crate::{exit, RunNode};

/// How long running runs get to finish when the node is stopped.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// Runs the node until a signal; the process's exit code.
pub(crate) fn run(args: RunNode) -> u8 {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let loaded = match &args.config {
        Some(path) => NodeFileConfig::load(path, &env),
        None => NodeFileConfig::defaults(&env),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(error) => {
            eprintln!("sundial: {error}");
            return exit::USAGE;
        }
    };
    let format = match args.log_format.as_deref() {
        Some("json") => LogFormat::Json,
        Some(_) => LogFormat::Text,
        None => config.log,
    };
    init_logs(format);
    for (name, like) in sundial_actors::config::near_misses(&env) {
        tracing::warn!("{name} is not a setting sundial reads (did you mean {like}?); it is ignored");
    }
    if args.demo {
        for def in demo_jobs() {
            if config.jobs.iter().any(|j| j.name == def.name) {
                eprintln!("sundial: the config already has a job named '{}', which --demo adds", def.name);
                return exit::USAGE;
            }
            config.jobs.push(def);
        }
    }
    let runtime = match sundial_actors::runtime::multi_thread(config.pin_workers) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sundial: cannot start the async runtime: {error}");
            return exit::FAILED;
        }
    };
    let origin = args.config.as_ref().map_or_else(String::new, |p| format!("{}: ", p.display()));
    // The certificate is read before anything starts: a bad file stops the node at once.
    let tls = match config.admin.tls.as_ref().filter(|_| config.admin.enabled).map(TlsFiles::load).transpose() {
        Ok(tls) => tls,
        Err(error) => {
            eprintln!("sundial: {origin}{error}");
            return exit::USAGE;
        }
    };
    runtime.block_on(start(config, tls, args.demo, origin))
}

fn init_logs(format: LogFormat) {
    // ractor wraps every actor's work in an info span naming its id and name; the run's
    // own span says which run, so by default it only adds width (RUST_LOG brings it back).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,ractor=warn".into());
    // Colours only for a person at a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The demo: a cron job every 5 s, an interval job, a job that fails twice then succeeds.
fn demo_jobs() -> Vec<JobDefinition> {
    let job = |name: &str, kind: &str| {
        JobDefinition::new(
            JobName::new(name).unwrap_or_else(|_| unreachable!("valid literal")),
            JobTypeKey::new(kind).unwrap_or_else(|_| unreachable!("valid literal")),
        )
    };
    let trigger = |name: &str, schedule: &str| {
        sundial::job::JobTriggerDefinition::new(
            sundial::name::TriggerName::new(name).unwrap_or_else(|_| unreachable!("valid literal")),
            schedule.parse().unwrap_or_else(|_| unreachable!("valid literal")),
        )
    };
    let data = |value: serde_json::Value| match value {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("object literal"),
    };
    let mut flaky = job("demo-flaky", DEMO_FLAKY)
        .with_trigger(trigger("every-20s", "cron */20 * * * * *"))
        .with_retry(RetryPolicy::fixed(3, Duration::from_secs(2)).unwrap_or_else(|_| unreachable!("valid policy")));
    flaky.description = Some("fails on attempts 1 and 2, succeeds on 3: watch the retries".into());
    vec![
        job("demo-tick", kinds::log::KIND)
            .with_data(data(serde_json::json!({ "message": "demo job ran" })))
            .with_trigger(trigger("every-5s", "cron */5 * * * * *")),
        job("demo-interval", kinds::log::KIND)
            .with_data(data(serde_json::json!({ "message": "interval job ran (7 s after the last one ended)" })))
            .with_trigger(trigger("every-7s", "every 00:00:07")),
        flaky,
    ]
}

const DEMO_FLAKY: &str = "demo.flaky";

/// Fails its first two attempts.
struct DemoFlaky;

impl Job for DemoFlaky {
    async fn run(&mut self, ctx: &RunContext) -> JobResult {
        if ctx.run.attempt < 3 {
            return Err(JobFailure::with_code("DEMO", format!("attempt {} fails on purpose", ctx.run.attempt)));
        }
        tracing::info!(
            job = ctx.run.job.as_str(),
            attempt = ctx.run.attempt,
            "demo-flaky succeeded on its third attempt"
        );
        Ok(())
    }
}

/// Logs each run's end in a line for people.
struct RunLog;

impl EventPublisher for RunLog {
    fn publish<'a>(&'a self, event: &'a CloudEvent) -> futures_util::future::BoxFuture<'a, Result<(), PublishError>> {
        let d = &event.data;
        let run = event.subject.as_str();
        let took = match (d.started_at, d.finished_at) {
            (Some(start), Some(end)) => format!("{} ms", (end - start).num_milliseconds()),
            _ => String::new(),
        };
        let attempt = d.attempt.unwrap_or(1);
        let error = d.error_message.as_deref().unwrap_or("");
        let code = d.error_code.as_deref().unwrap_or("");
        match event.event_type {
            t if t == Topic::RunSucceeded.as_str() => tracing::info!(job = %d.job, run, attempt, took, "run succeeded"),
            t if t == Topic::RunFailed.as_str() => {
                tracing::warn!(job = %d.job, run, attempt, code, error, "run failed")
            }
            t if t == Topic::RunCanceled.as_str() => tracing::warn!(job = %d.job, run, error, "run canceled"),
            t if t == Topic::RunLost.as_str() => tracing::warn!(job = %d.job, run, "run lost with its node"),
            _ => tracing::debug!(topic = event.event_type, subject = run, "event"),
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

/// `origin` prefixes registration errors (`"path: "`, or empty without a config file).
async fn start(config: NodeFileConfig, tls: Option<Arc<ServerConfig>>, demo: bool, origin: String) -> u8 {
    // The production clock and OS-seeded entropy: the one place a node reads them.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let mut entropy = Entropy::from_os();
    let mut registry = kinds::register(JobRegistry::builder());
    if demo {
        registry = registry.add_job_type_as(DEMO_FLAKY, || DemoFlaky);
    }
    for (name, calendar) in &config.calendars {
        registry = registry.add_calendar(name.as_str(), calendar.clone());
    }
    for def in &config.jobs {
        registry = registry.add_job_definition(def.clone());
    }
    let registry = match registry.build() {
        Ok(registry) => registry,
        Err(error) => {
            eprintln!("sundial: {origin}{error}");
            return exit::USAGE;
        }
    };
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let node_id = config.options.node_id_or_default(&host, std::process::id(), &mut entropy);
    let store = config.store.clone();
    let parts = NodeParts { config, tls, registry, node_id, clock: clock.clone(), entropy };
    match store {
        StoreConfig::Memory { max_runs } => {
            tracing::info!(
                "in-memory store: jobs added at run time and all history are forgotten when this node stops"
            );
            let kv = MemoryKv::with_options(clock.clone(), Arc::new(TokioSleeper), MemoryKvOptions::default());
            let store_options = StoreOptions { max_runs: Some(max_runs), ..StoreOptions::default() };
            serve(Setup { parts, kv, store_options, shared: false, store_kind: "memory", store_probe: None }).await
        }
        StoreConfig::Embedded { path, max_runs, fold_kib } => {
            let mut options = EmbeddedOptions::default();
            if let Some(kib) = fold_kib.and_then(|kib| usize::try_from(kib).ok()) {
                options.fold_bytes = kib.saturating_mul(1024);
            }
            let opened = EmbeddedKv::open_with_options(&path, clock.clone(), Arc::new(TokioSleeper), options);
            let store = match opened {
                Ok(store) => store,
                Err(error) => {
                    eprintln!("sundial: store.path: {error}");
                    return exit::UNAVAILABLE;
                }
            };
            let shown = std::fs::canonicalize(&path).unwrap_or(path);
            tracing::info!(path = %shown.display(), "embedded store open: data kept across restarts");
            let setup = Setup {
                parts,
                kv: store.kv().clone(),
                store_options: StoreOptions { max_runs, ..StoreOptions::default() },
                shared: false,
                store_kind: "embedded",
                store_probe: None,
            };
            let code = serve(setup).await;
            // Every commit made is written before the directory is let go.
            store.close();
            code
        }
        StoreConfig::Postgres(postgres) => start_postgres(parts, postgres).await,
        StoreConfig::Fdb { cluster_file, transaction_timeout } => {
            #[cfg(feature = "fdb")]
            return start_fdb(parts, cluster_file, transaction_timeout).await;
            #[cfg(not(feature = "fdb"))]
            {
                // Config loading refuses `fdb` in such a build; this is the backstop.
                let _ = (cluster_file, transaction_timeout);
                eprintln!("sundial: this build has no FoundationDB support (rebuild with --features fdb)");
                exit::USAGE
            }
        }
    }
}

#[cfg(feature = "fdb")]
async fn start_fdb(
    parts: NodeParts,
    cluster_file: Option<std::path::PathBuf>,
    transaction_timeout: Option<std::time::Duration>,
) -> u8 {
    // SAFETY: `boot` must run once per process, before any other FDB call, and its guard
    // must outlive every use of the database: this is the only call, and the guard lives
    // until this function returns, after the node stopped.
    #[allow(unsafe_code)]
    let _network = unsafe { sundial_actors::fdb::foundationdb::boot() };
    let path = cluster_file.as_ref().map(|p| p.to_string_lossy().into_owned());
    let timeout = transaction_timeout.unwrap_or(sundial_actors::fdb::TRANSACTION_TIMEOUT);
    let kv = match sundial_actors::fdb::FdbKv::open_with_timeout(path.as_deref(), timeout, parts.clock.clone()) {
        Ok(kv) => kv,
        Err(error) => {
            eprintln!("sundial: cannot open the FoundationDB cluster: {error}");
            return exit::UNAVAILABLE;
        }
    };
    let setup =
        Setup { parts, kv, store_options: StoreOptions::default(), shared: true, store_kind: "fdb", store_probe: None };
    serve(setup).await
}

/// Opens the PostgreSQL store (creating or checking its schema) and serves on it; a store
/// that cannot be opened is one line naming the setting to fix, before anything starts.
async fn start_postgres(parts: NodeParts, postgres: PostgresStore) -> u8 {
    let opened = match postgres.options() {
        Ok(options) => PgKv::open(options, parts.clock.clone()).await,
        Err(error) => Err(error),
    };
    let kv = match opened {
        Ok(kv) => kv,
        Err(error) => {
            eprintln!("sundial: {}", open_error_message(&error));
            return exit::UNAVAILABLE;
        }
    };
    tracing::info!(schema = kv.schema(), pool = postgres.pool_size, "PostgreSQL store open");
    let setup = Setup {
        parts,
        kv: kv.clone(),
        store_options: StoreOptions::default(),
        shared: true,
        store_kind: "postgres",
        store_probe: Some(Arc::new(kv)),
    };
    serve(setup).await
}

/// `error` as one line that starts with the setting to look at.
fn open_error_message(error: &PgOpenError) -> String {
    match error {
        PgOpenError::Url(_) | PgOpenError::ServerTooOld(_) => format!("store.url: {error}"),
        PgOpenError::Connect(message) if message.contains("password") => format!(
            "store.url: {error} (the password comes from store.password_file, else {STORE_PASSWORD_ENV}, else the URL)"
        ),
        PgOpenError::Connect(_) => format!("store.url: {error}"),
        PgOpenError::Schema(_) | PgOpenError::SchemaTooNew { .. } | PgOpenError::Setup { .. } => {
            format!("store.schema: {error}")
        }
        PgOpenError::Option(_) => format!("store: {error}"),
    }
}

/// What a node is made of, whatever its store.
struct NodeParts {
    config: NodeFileConfig,
    /// The admin API's certificate, for HTTPS.
    tls: Option<Arc<ServerConfig>>,
    registry: JobRegistry,
    node_id: String,
    clock: Arc<dyn Clock>,
    entropy: Entropy,
}

/// A node on its opened store.
struct Setup<K: Kv> {
    parts: NodeParts,
    kv: K,
    store_options: StoreOptions,
    shared: bool,
    store_kind: &'static str,
    /// Checks the store's server for `/health` and `/metrics`.
    store_probe: Option<Arc<dyn StoreProbe>>,
}

async fn serve<K: Kv>(setup: Setup<K>) -> u8 {
    let Setup { parts, kv, store_options, shared, store_kind, store_probe } = setup;
    let NodeParts { config, tls, registry, node_id, clock, mut entropy } = parts;
    let kv = RetryCountingKv::new(kv);
    let metrics = Arc::new(Metrics::new(Some(kv.retry_counter())));
    let store = KvJobStore::new(kv.clone(), registry.calendars().clone(), entropy.fork(), store_options);
    // On `SystemClock`, the config's start timer is the precise one.
    let mut node =
        NodeConfig::new(store, registry, config.options.clone(), node_id.clone(), clock.clone(), entropy.fork());
    let sinks = match start_sinks(&config.events, &node_id).await {
        Ok(sinks) => sinks,
        Err(error) => {
            eprintln!("sundial: {error}");
            return exit::USAGE;
        }
    };
    let mut publishers: Vec<Arc<dyn EventPublisher>> = vec![Arc::new(RunLog)];
    for sink in &sinks {
        metrics.add_sink(sink.name(), sink.stats());
        publishers.push(Arc::new(sink.clone()));
    }
    node.publisher = Arc::new(MetricsPublisher::new(metrics.clone(), Arc::new(FanOut::new(publishers))));
    node.shared_store = shared;
    if shared && config.leader == LeaderConfig::Store {
        let election = sundial::leader::KvLeaderElection::new(
            kv,
            sundial::store::keys::Keyspace::default_root(),
            clock.clone(),
            &node_id,
            entropy.fork(),
        );
        node.election = Some(Arc::new(election) as Arc<dyn DynLeaderElection>);
    }
    if let LeaderConfig::Kubernetes { lease_name, api, identity } = &config.leader {
        let api = match api {
            Some((url, namespace)) => {
                KubernetesApi::new(url, namespace, std::env::var(sundial_actors::config::KUBERNETES_TOKEN_ENV).ok())
            }
            None => KubernetesApi::in_cluster(),
        };
        let api = match api {
            Ok(api) => api,
            Err(error) => {
                eprintln!("sundial: leader election on Kubernetes: {error}");
                return exit::USAGE;
            }
        };
        // The pod name is the holder, as Kubernetes' own controllers do.
        let identity = identity.clone().or_else(|| std::env::var("HOSTNAME").ok()).unwrap_or_else(|| node_id.clone());
        let election = KubernetesLeaderElection::new(api, clock.clone(), identity)
            .with_lease_name(&config.options.lease_resource, lease_name.clone());
        node.election = Some(Arc::new(election) as Arc<dyn DynLeaderElection>);
    }
    // Bind before starting, so a taken port fails fast with nothing started.
    let listener = if config.admin.enabled {
        match tokio::net::TcpListener::bind(config.admin.listen).await {
            Ok(listener) => Some(listener),
            Err(error) => {
                let hint = if error.kind() == std::io::ErrorKind::AddrInUse {
                    " (another node? `admin.listen` in the config or SUNDIAL_ADMIN_LISTEN picks another address)"
                } else {
                    ""
                };
                eprintln!("sundial: cannot listen on {} for the admin API: {error}{hint}", config.admin.listen);
                return exit::UNAVAILABLE;
            }
        }
    } else {
        None
    };
    let scheduler = match Node::start(node, None).await {
        Ok(scheduler) => scheduler,
        Err(error) => {
            eprintln!("sundial: could not start the node: {error}");
            return exit::FAILED;
        }
    };
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let api = listener.map(|listener| {
        let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut state = AdminState::new(scheduler.clone(), config.admin.access.clone(), metrics, store_kind);
        if let Some(probe) = store_probe {
            state = state.with_store_probe(probe);
        }
        let router = admin::router(state);
        let stopped = async {
            let _ = api_stopped.await;
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(
            address = %format!("{scheme}://{address}"),
            tokens = config.admin.access.is_guarded(),
            "admin API listening"
        );
        match (tls, &config.admin.tls) {
            (Some(tls), Some(files)) => {
                let current = CurrentCertificate::new(tls);
                tokio::spawn(tls::watch(files.clone(), current.clone(), reload_requests()));
                match TlsListener::new(listener, current) {
                    Ok(listener) => tokio::spawn(admin::serve(listener, router, stopped)),
                    Err(error) => tokio::spawn(async move { Err(error) }),
                }
            }
            _ => tokio::spawn(admin::serve(listener, router, stopped)),
        }
    });
    scheduler.serve();
    tracing::info!(
        node = %node_id,
        store = store_kind,
        jobs = config.jobs.len(),
        "sundial node serving; Ctrl-C or SIGTERM stops it"
    );
    shutdown_signal().await;
    tracing::info!("stopping: no new runs; running ones get {STOP_DEADLINE:?}");
    let report = scheduler.stop(STOP_DEADLINE).await;
    // The last events (runs canceled by the stop) get a moment to reach the sinks.
    for sink in &sinks {
        if !sink.flush(SINK_FLUSH).await {
            tracing::warn!(sink = sink.name(), "event sink still had events to deliver at exit; they are lost");
        }
    }
    let _ = stop_api.send(());
    if let Some(api) = api {
        match tokio::time::timeout(Duration::from_secs(5), api).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "the admin API ended with an error"),
            _ => tracing::warn!("the admin API did not stop in time"),
        }
    }
    tracing::info!(canceled = report.canceled, abandoned = report.abandoned, "stopped");
    0
}

/// Waits for Ctrl-C, or SIGTERM (what service managers send) on Unix.
/// How long a stopping node waits for each event sink to deliver what it queued.
const SINK_FLUSH: Duration = Duration::from_secs(5);

/// Starts the configured event sinks.
async fn start_sinks(events: &EventsConfig, node_id: &str) -> Result<Vec<SinkPublisher>, String> {
    let mut sinks = Vec::new();
    for http in &events.http {
        let client = kinds::http::client_builder()
            .build()
            .map_err(|e| format!("events.http ({}): cannot build the HTTP client: {e}", http.name))?;
        let delivery =
            HttpSink::new(client, http.url.clone(), http.mode, http.headers.clone(), http.batch_size, http.timeout);
        sinks.push(sink::spawn(&http.name, delivery, http.options.clone()));
        tracing::info!(sink = %http.name, url = %http.url.as_str(), mode = ?http.mode, "event sink: HTTP");
    }
    for nats in &events.nats {
        let delivery = NatsSink::connect(&nats.url, &nats.prefix, node_id)
            .await
            .map_err(|e| format!("events.nats ({}).url: {e}", nats.name))?;
        sinks.push(sink::spawn(&nats.name, delivery, nats.options.clone()));
        tracing::info!(sink = %nats.name, url = %nats.url, prefix = %nats.prefix, "event sink: NATS");
    }
    Ok(sinks)
}

/// A message per SIGHUP: the admin API's certificate is read again.
fn reload_requests() -> tokio::sync::mpsc::Receiver<()> {
    let (ask, asked) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hangups) => {
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    // One pending request is enough: it reads the files as they are then.
                    let _ = ask.try_send(());
                }
            });
        }
        Err(error) => tracing::warn!(%error, "cannot wait for SIGHUP; the certificate reloads when its files change"),
    }
    #[cfg(not(unix))]
    drop(ask);
    asked
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(error) => {
                tracing::error!(%error, "cannot wait for SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
